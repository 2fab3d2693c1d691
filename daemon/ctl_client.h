/* ctl_client.h — the client side of the control protocol, with blocking sockets (lstmctl and
 * the benchmark): connect over the UNIX socket or TCP, send a request, read responses. */
#ifndef LSTMD_CTL_CLIENT_H
#define LSTMD_CTL_CLIENT_H

#include "lstmd.pb-c.h"

#include <stddef.h>
#include <stdint.h>

struct lstmd_ctl {
  int fd;
  const char *token; /* sent with every request (TCP); NULL for the UNIX socket */
  char where[300];   /* for messages: the socket path or host:port */
  uint8_t in[65536]; /* received bytes not yet consumed: most replies take one recv */
  size_t in_pos, in_len;
};

/* Connects to a UNIX socket path, or to "host:port" when tcp is set. Returns 0, or -1 with the
 * reason in err. */
int lstmd_ctl_connect(struct lstmd_ctl *c, const char *address, int tcp, char *err, size_t n);
void lstmd_ctl_close(struct lstmd_ctl *c);
/* Sends one request (token filled in). Returns 0 or -1 with the reason in err. */
int lstmd_ctl_send(struct lstmd_ctl *c, Lstmd__Request *req, char *err, size_t n);
/* Reads one response; timeout_ms < 0 waits forever. Returns it (free with
 * lstmd__response__free_unpacked), or NULL with the reason in err (timeout, closed, malformed). */
Lstmd__Response *lstmd_ctl_recv(struct lstmd_ctl *c, int timeout_ms, char *err, size_t n);

#endif
