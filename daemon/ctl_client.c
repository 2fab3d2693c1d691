/* ctl_client.c — blocking client I/O for the control protocol (see ctl_client.h). */
#define _GNU_SOURCE
#include "ctl_client.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "frame.h"

/* Responses are bounded too: a job list of thousands of jobs fits easily in 64 MiB. */
enum { kMaxResponse = 64 << 20 };

static int connect_unix(const char *path, char *err, size_t n) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof addr.sun_path) {
    snprintf(err, n, "socket path too long: %s", path);
    return -1;
  }
  strcpy(addr.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    const int e = errno;
    snprintf(err, n, "cannot connect to %s: %s%s", path, strerror(e),
             e == ENOENT || e == ECONNREFUSED ? " (is `lstmd serve` running?)"
             : e == EACCES ? " (the socket is its owner's, and its group's with `lstmd serve "
                             "--socket-group`: ask for that group)"
                           : "");
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

static int connect_tcp(const char *address, char *err, size_t n) {
  char host[256];
  const char *colon = strrchr(address, ':');
  if (!colon || colon == address || (size_t)(colon - address) >= sizeof host) {
    snprintf(err, n, "--tcp %s: expected HOST:PORT", address);
    return -1;
  }
  snprintf(host, sizeof host, "%.*s", (int)(colon - address), address);
  if (host[0] == '[') {
    memmove(host, host + 1, strlen(host));
    host[strcspn(host, "]")] = '\0';
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int g = getaddrinfo(host, colon + 1, &hints, &res);
  if (g != 0) {
    snprintf(err, n, "%s: %s", address, gai_strerror(g));
    return -1;
  }
  int fd = -1;
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) snprintf(err, n, "cannot connect to %s: %s", address, strerror(errno));
  freeaddrinfo(res);
  return fd;
}

int lstmd_ctl_connect(struct lstmd_ctl *c, const char *address, int tcp, char *err, size_t n) {
  memset(c, 0, sizeof *c);
  c->recv_timeout_ms = -1;
  lstmd_arena_init(&c->arena);
  snprintf(c->where, sizeof c->where, "%s", address);
  c->fd = tcp ? connect_tcp(address, err, n) : connect_unix(address, err, n);
  return c->fd < 0 ? -1 : 0;
}

void lstmd_ctl_close(struct lstmd_ctl *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  free(c->out);
  free(c->big);
  c->out = c->big = NULL;
  c->out_cap = c->big_cap = 0;
  lstmd_arena_free(&c->arena);
}

/* Grows *buf to at least need bytes (doubling). */
static int grow(uint8_t **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t want = *cap ? *cap : 4096;
  while (want < need) want *= 2;
  uint8_t *p = realloc(*buf, want);
  if (!p) return -1;
  *buf = p;
  *cap = want;
  return 0;
}

int lstmd_ctl_send(struct lstmd_ctl *c, Lstmd__Request *req, char *err, size_t n) {
  if (c->token) req->token = (char *)c->token;
  const size_t body = protobuf_c_message_get_packed_size(&req->base);
  const size_t len = LSTMD_FRAME_HEADER + body;
  if (body > UINT32_MAX || grow(&c->out, &c->out_cap, len)) {
    snprintf(err, n, "out of memory");
    return -1;
  }
  lstmd_frame_put_header(c->out, (uint32_t)body);
  protobuf_c_message_pack(&req->base, c->out + LSTMD_FRAME_HEADER);
  for (size_t off = 0; off < len;) {
    ssize_t w = send(c->fd, c->out + off, len - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      snprintf(err, n, "%s: sending failed: %s", c->where, strerror(errno));
      return -1;
    }
    off += (size_t)w;
  }
  return 0;
}

/* Refills c->in with one blocking recv. The wait is bounded by SO_RCVTIMEO, set only when the
 * caller's timeout changes, so the usual round trip costs no poll() and no extra system call. */
static int fill(struct lstmd_ctl *c, int timeout_ms, char *err, size_t n) {
  if (timeout_ms < 0) timeout_ms = -1;
  if (timeout_ms != c->recv_timeout_ms) {
    struct timeval tv = {0, 0}; /* zero: no limit */
    if (timeout_ms >= 0) {
      tv.tv_sec = timeout_ms / 1000;
      tv.tv_usec = (timeout_ms % 1000) * 1000 + (timeout_ms == 0); /* 0 ms still has to wait */
    }
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
      snprintf(err, n, "%s: setting the receive timeout: %s", c->where, strerror(errno));
      return -1;
    }
    c->recv_timeout_ms = timeout_ms;
  }
  for (;;) {
    ssize_t got = recv(c->fd, c->in, sizeof c->in, 0);
    if (got > 0) {
      c->in_pos = 0;
      c->in_len = (size_t)got;
      return 0;
    }
    if (got == 0) {
      snprintf(err, n, "%s: the daemon closed the connection", c->where);
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      snprintf(err, n, "%s: no answer within %d ms", c->where, timeout_ms);
    else
      snprintf(err, n, "%s: receiving failed: %s", c->where, strerror(errno));
    return -1;
  }
}

static int read_exact(struct lstmd_ctl *c, uint8_t *buf, size_t len, int timeout_ms, char *err,
                      size_t n) {
  for (size_t off = 0; off < len;) {
    if (c->in_pos == c->in_len && fill(c, timeout_ms, err, n)) return -1;
    size_t take = c->in_len - c->in_pos < len - off ? c->in_len - c->in_pos : len - off;
    memcpy(buf + off, c->in + c->in_pos, take);
    c->in_pos += take;
    off += take;
  }
  return 0;
}

Lstmd__Response *lstmd_ctl_recv(struct lstmd_ctl *c, int timeout_ms, char *err, size_t n) {
  uint8_t header[LSTMD_FRAME_HEADER];
  uint32_t len = 0;
  lstmd_arena_reset(&c->arena); /* the previous response goes */
  if (c->big_cap > (1u << 20)) { /* and a big reply's buffer with it */
    free(c->big);
    c->big = NULL;
    c->big_cap = 0;
  }
  if (read_exact(c, header, sizeof header, timeout_ms, err, n)) return NULL;
  if (lstmd_frame_peek(header, sizeof header, kMaxResponse, &len) == LSTMD_FRAME_TOO_LARGE) {
    snprintf(err, n, "%s: response of %u bytes is too large (not a lstmd daemon?)", c->where, len);
    return NULL;
  }
  const uint8_t *payload;
  if (c->in_len - c->in_pos >= len) { /* usually: the whole reply came in one recv */
    payload = c->in + c->in_pos;
    c->in_pos += len;
  } else {
    if (grow(&c->big, &c->big_cap, len)) {
      snprintf(err, n, "out of memory");
      return NULL;
    }
    if (read_exact(c, c->big, len, timeout_ms, err, n)) return NULL;
    payload = c->big;
  }
  Lstmd__Response *resp = lstmd__response__unpack(lstmd_arena_allocator(&c->arena), len, payload);
  if (!resp) snprintf(err, n, "%s: malformed response (not a lstmd daemon?)", c->where);
  return resp;
}
