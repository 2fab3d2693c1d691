/* ctl_client.h — the client side of the control protocol, with blocking sockets (lstmctl and
 * the benchmark): connect over the UNIX socket or TCP, send a request, read responses.
 *
 * A round trip costs two system calls (send, then one blocking recv that usually holds the whole
 * reply) and no malloc in the steady state: the request is packed into a reused buffer and the
 * reply unpacked into the connection's arena (arena.h). */
#ifndef LSTMD_CTL_CLIENT_H
#define LSTMD_CTL_CLIENT_H

#include "arena.h"
#include "lstmd.pb-c.h"

#include <stddef.h>
#include <stdint.h>

struct lstmd_ctl {
  int fd;
  const char *token; /* sent with every request (TCP); NULL for the UNIX socket */
  char where[300];   /* for messages: the socket path or host:port */
  uint8_t in[65536]; /* received bytes not yet consumed: most replies take one recv */
  size_t in_pos, in_len;
  int recv_timeout_ms;  /* the socket's SO_RCVTIMEO now (-1: none) */
  uint8_t *out, *big;   /* the request frame being sent; a reply larger than in[] */
  size_t out_cap, big_cap;
  struct lstmd_arena arena; /* holds the last response */
};

/* Connects to a UNIX socket path, or to "host:port" when tcp is set. Returns 0, or -1 with the
 * reason in err. */
int lstmd_ctl_connect(struct lstmd_ctl *c, const char *address, int tcp, char *err, size_t n);
void lstmd_ctl_close(struct lstmd_ctl *c);
/* Sends one request (token filled in). Returns 0 or -1 with the reason in err. */
int lstmd_ctl_send(struct lstmd_ctl *c, Lstmd__Request *req, char *err, size_t n);
/* Reads one response; timeout_ms < 0 waits forever, otherwise at most timeout_ms for each
 * piece of it. Returns it, or NULL with the reason in err (timeout, closed, malformed). The
 * response belongs to c: do not free it; it is valid until the next recv or close. */
Lstmd__Response *lstmd_ctl_recv(struct lstmd_ctl *c, int timeout_ms, char *err, size_t n);

#endif
