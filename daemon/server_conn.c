/* server_conn.c — the control server's connections (see server.h): accepting them (with the
 * connection limit and the peer check), reading frames within the buffer budget, handling each
 * request against the job table, writing replies and events, and closing (see server_conn.h). */
#define _GNU_SOURCE
#include "server_conn.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "access.h"
#include "frame.h"
#include "serve_job.h"

struct write_req {
  uv_write_t req;
  struct conn *c;
  uint8_t *frame;
  size_t len;
};

static void conn_abort(struct conn *c);

/* ---- writing ---- */

static void on_written(uv_write_t *req, int status) {
  struct write_req *w = (struct write_req *)req;
  (void)status; /* a failed write shows up as a read error or EOF and closes the connection */
  w->c->queued -= w->len;
  w->c->srv->queued -= w->len;
  free(w->frame);
  free(w);
}

/* Sends a frame (taking ownership). With nothing queued before it, it is written at once
 * (uv_try_write: the usual reply needs no write request, callback or poll for writability);
 * what the socket does not take is queued. A client that lets too much pile up is dropped at
 * once: flushing what it does not read would only keep the memory longer. */
void lstmd_conn_send(struct conn *c, uint8_t *frame, size_t len) {
  if (!frame) return;
  if (c->closing || c->queued + len > kMaxQueuedPerConn || c->srv->queued + len > kQueuedBudget) {
    free(frame);
    if (!c->closing) conn_abort(c);
    return;
  }
  size_t done = 0;
  if (c->queued == 0) {
    uv_buf_t now = uv_buf_init((char *)frame, (unsigned)len);
    int wrote = uv_try_write(&c->h.stream, &now, 1);
    if (wrote < 0 && wrote != UV_EAGAIN) { /* the peer is gone */
      free(frame);
      conn_abort(c);
      return;
    }
    if (wrote > 0) done = (size_t)wrote;
    if (done == len) {
      free(frame);
      return;
    }
  }
  struct write_req *w = malloc(sizeof *w);
  if (!w) {
    free(frame);
    conn_abort(c);
    return;
  }
  len -= done;
  *w = (struct write_req){.c = c, .frame = frame, .len = len};
  uv_buf_t b = uv_buf_init((char *)frame + done, (unsigned)len);
  c->queued += len;
  c->srv->queued += len;
  if (c->queued + c->cap > c->peak) c->peak = c->queued + c->cap;
  if (uv_write(&w->req, &c->h.stream, &b, 1, on_written) != 0) {
    c->queued -= len;
    c->srv->queued -= len;
    free(frame);
    free(w);
    conn_abort(c);
  }
}

static void conn_send_error(struct conn *c, int code, const char *msg) {
  size_t len = 0;
  uint8_t *frame = lstmd_frame_pack_error(code, msg, &len);
  lstmd_conn_send(c, frame, len);
}

/* ---- connection life ---- */

static void on_handle_closed(uv_handle_t *h) {
  struct conn *c = h->data;
  if (--c->handles_open > 0) return;
  c->srv->buffered -= c->cap;
  const size_t peak = c->peak;
  free(c->buf);
  free(c);
#ifdef __GLIBC__
  /* glibc keeps freed chunks of its thread arena resident; after a client that held megabytes
   * (a hoarder, a big frame) give them back, or each storm raises the daemon's RSS for good. */
  if (peak >= (1u << 20)) malloc_trim(0);
#else
  (void)peak;
#endif
}

/* Closes both handles once; closing the stream cancels its pending writes and shutdown (their
 * callbacks run with UV_ECANCELED and free what they own). */
static void close_handles(struct conn *c) {
  if (!uv_is_closing((uv_handle_t *)&c->h.stream))
    uv_close((uv_handle_t *)&c->h.stream, on_handle_closed);
  if (!uv_is_closing((uv_handle_t *)&c->idle)) uv_close((uv_handle_t *)&c->idle, on_handle_closed);
}

static void on_shutdown_done(uv_shutdown_t *req, int status) {
  (void)status;
  struct conn *c = req->data;
  free(req);
  close_handles(c);
}

/* A peer that has not taken its last replies within the grace loses them. */
static void on_linger_timeout(uv_timer_t *t) { close_handles(t->data); }

static int conn_unlink(struct conn *c) {
  if (c->closing) return 0;
  c->closing = 1;
  struct lstmd_server *s = c->srv;
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  s->n_conns--;
  uv_read_stop(&c->h.stream);
  return 1;
}

/* Closes after the queued replies are written (uv_shutdown waits for pending writes), but only
 * waits the idle timeout for that: a peer that never reads would otherwise hold its connection
 * and every reply queued for it for as long as it likes, outside the connection limit. */
void lstmd_conn_close(struct conn *c) {
  if (!conn_unlink(c)) return;
  /* Without the linger timer nothing bounds the wait for the peer: close at once instead. */
  int rc = uv_timer_start(&c->idle, on_linger_timeout,
                          (uint64_t)(c->srv->cfg.idle_timeout_s * 1000.0), 0);
  uv_shutdown_t *req = rc ? NULL : malloc(sizeof *req);
  if (req) req->data = c;
  if (!req || uv_shutdown(req, &c->h.stream, on_shutdown_done) != 0) {
    free(req);
    close_handles(c);
  }
}

/* Closes at once, dropping whatever is still queued. */
static void conn_abort(struct conn *c) {
  if (conn_unlink(c)) close_handles(c);
}

static void on_idle_timeout(uv_timer_t *t) {
  struct conn *c = t->data;
  if (c->watch_id == 0) lstmd_conn_close(c);
}

/* (Re)arms the idle timeout. A connection whose timer cannot be started would have no bound
 * on how long it may sit idle: it is closed at once. Returns 0, or -1 when it was closed. */
int lstmd_conn_idle_restart(struct conn *c) {
  int rc = uv_timer_start(&c->idle, on_idle_timeout,
                          (uint64_t)(c->srv->cfg.idle_timeout_s * 1000.0), 0);
  if (rc == 0) return 0;
  fprintf(stderr, "lstmd: closing a connection: uv_timer_start: %s\n", uv_strerror(rc));
  conn_abort(c);
  return -1;
}

/* ---- requests ---- */

void lstmd_server_start_drain(struct lstmd_server *s, const char *why) {
  const size_t running = lstmd_jobs_drain(s->jobs, NULL);
  if (running)
    fprintf(stderr, "lstmd: %s: draining (checkpointing the %zu running job%s)\n", why, running,
            running == 1 ? "" : "s");
  else fprintf(stderr, "lstmd: %s: draining (no job running)\n", why);
}

static void handle_request(struct conn *c, const uint8_t *payload, size_t n) {
  struct lstmd_server *s = c->srv;
  char err[1600];
  int code;
  ProtobufCAllocator *arena = lstmd_arena_allocator(&s->arena);
  Lstmd__Request *r = lstmd_request_parse(payload, n, arena, &code, err, sizeof err);
  if (!r) {
    lstmd_arena_reset(&s->arena);
    conn_send_error(c, code, err);
    return;
  }
  if (c->is_tcp && !lstmd_token_equal(s->cfg.token, r->token)) {
    lstmd_request_free(r, arena);
    lstmd_arena_reset(&s->arena);
    conn_send_error(c, LSTMD__ERROR_CODE__UNAUTHENTICATED, "wrong or missing token");
    lstmd_conn_close(c);
    return;
  }
  uint8_t *reply = NULL;
  size_t len = 0;
  switch (r->kind_case) {
    case LSTMD__REQUEST__KIND_SUBMIT:
      reply = lstmd_serve_submit(s->jobs, r->submit->spec, s->cfg.data_root, s->cfg.world, &len);
      break;
    case LSTMD__REQUEST__KIND_GET: reply = lstmd_jobs_get(s->jobs, r->get->id, &len); break;
    case LSTMD__REQUEST__KIND_LIST: reply = lstmd_jobs_list(s->jobs, &len); break;
    case LSTMD__REQUEST__KIND_CANCEL: reply = lstmd_jobs_cancel(s->jobs, r->cancel->id, &len); break;
    case LSTMD__REQUEST__KIND_WATCH: {
      int final;
      reply = lstmd_jobs_watch(s->jobs, r->watch->id, &final, &len);
      /* Events posted before this snapshot are delivered after it; they are older, never lost. */
      if (final == 0 && reply) {
        c->watch_id = r->watch->id;
        uv_timer_stop(&c->idle);
      }
      break;
    }
    case LSTMD__REQUEST__KIND_SHUTDOWN: {
      Lstmd__ShutdownAck ack = LSTMD__SHUTDOWN_ACK__INIT;
      ack.n_running_jobs = lstmd_jobs_drain(s->jobs, &ack.running_jobs);
      if (!ack.running_jobs) ack.n_running_jobs = 0; /* out of memory: the count alone is lost */
      ack.running_job = ack.n_running_jobs ? ack.running_jobs[0] : 0;
      Lstmd__Response resp = LSTMD__RESPONSE__INIT;
      resp.kind_case = LSTMD__RESPONSE__KIND_SHUTDOWN;
      resp.shutdown = &ack;
      reply = lstmd_frame_pack(&resp.base, &len);
      free(ack.running_jobs);
      fprintf(stderr, "lstmd: shutdown requested by a client: draining\n");
      break;
    }
    default: break; /* rejected by lstmd_request_parse */
  }
  lstmd_request_free(r, arena);
  lstmd_arena_reset(&s->arena);
  if (!reply) conn_send_error(c, LSTMD__ERROR_CODE__INTERNAL, "out of memory");
  else lstmd_conn_send(c, reply, len);
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  (void)suggested;
  struct conn *c = h->data;
  *b = uv_buf_init(c->srv->scratch, sizeof c->srv->scratch);
}

/* Makes room for `more` bytes, growing by doubling up to the frame being received. */
static int reserve(struct conn *c, size_t more) {
  if (c->len + more <= c->cap) return 0;
  size_t want = c->cap ? c->cap : 256;
  while (want < c->len + more) want *= 2;
  size_t limit = LSTMD_FRAME_HEADER + (size_t)c->srv->cfg.max_frame;
  if (want > limit) want = limit;
  if (c->srv->buffered - c->cap + want > kBufferBudget) return -1;
  uint8_t *grown = realloc(c->buf, want);
  if (!grown) return -1;
  c->srv->buffered += want - c->cap;
  c->buf = grown;
  c->cap = want;
  if (c->queued + c->cap > c->peak) c->peak = c->queued + c->cap;
  return 0;
}

static void release_buffer(struct conn *c) {
  if (c->cap <= 4096) return;
  c->srv->buffered -= c->cap;
  free(c->buf);
  c->buf = NULL;
  c->cap = 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  struct conn *c = st->data;
  if (nread < 0) {
    lstmd_conn_close(c);
    return;
  }
  const uint8_t *p = (const uint8_t *)b->base;
  size_t left = (size_t)nread;
  while (left > 0 && !c->closing) {
    size_t want = c->len < LSTMD_FRAME_HEADER ? LSTMD_FRAME_HEADER - c->len
                                               : LSTMD_FRAME_HEADER + c->payload_len - c->len;
    size_t take = want < left ? want : left;
    if (reserve(c, take) != 0) {
      conn_send_error(c, LSTMD__ERROR_CODE__INTERNAL, "the daemon is short of buffer space; retry");
      lstmd_conn_close(c);
      return;
    }
    memcpy(c->buf + c->len, p, take);
    c->len += take;
    p += take;
    left -= take;
    int state = lstmd_frame_peek(c->buf, c->len, c->srv->cfg.max_frame, &c->payload_len);
    if (state == LSTMD_FRAME_TOO_LARGE) {
      char msg[128];
      snprintf(msg, sizeof msg, "frame of %u bytes is larger than the maximum of %u",
               c->payload_len, c->srv->cfg.max_frame);
      conn_send_error(c, LSTMD__ERROR_CODE__FRAME_TOO_LARGE, msg);
      lstmd_conn_close(c);
      return;
    }
    if (state == LSTMD_FRAME_READY) {
      handle_request(c, c->buf + LSTMD_FRAME_HEADER, c->payload_len);
      c->len = 0;
      c->payload_len = 0;
      release_buffer(c);
      if (!c->closing && c->watch_id == 0 && lstmd_conn_idle_restart(c) != 0) return;
    }
  }
}

/* ---- accepting ---- */

/* Once per second at most: a listener failing in a loop (say, out of file descriptors) must not
 * flood the log. */
static void accept_error(struct lstmd_server *s, const char *what, int rc) {
  const uint64_t now = uv_now(&s->loop);
  if (s->last_accept_error_ms && now - s->last_accept_error_ms < 1000) return;
  s->last_accept_error_ms = now ? now : 1;
  fprintf(stderr, "lstmd: dropping an incoming connection: %s: %s\n", what, uv_strerror(rc));
}


/* After a failed uv_accept libuv has closed the pending descriptor but stopped watching the
 * listener (it restarts only after a successful accept); uv_listen again re-arms it. */
static void rearm_listener(struct lstmd_server *s, uv_stream_t *listener, int is_tcp, int why) {
  accept_error(s, "uv_accept", why);
  int rc = uv_listen(listener, 512, lstmd_server_on_connection);
  if (rc)
    fprintf(stderr, "lstmd: the %s listener stopped (uv_listen after a failed accept: %s)\n",
            is_tcp ? "TCP" : "UNIX", uv_strerror(rc));
}

static void reject_pending(struct lstmd_server *s, int is_tcp);

static void on_spare_closed(uv_handle_t *h) {
  struct lstmd_server *s = h->data;
  s->spare_busy = 0;
  for (int k = 0; k < 2; k++)
    if (s->spare_waiting[k] && !s->stopping) {
      s->spare_waiting[k] = 0;
      reject_pending(s, k);
      return; /* the spare is busy again; the other listener waits for the next close */
    }
}

/* Takes a listener's pending connection and closes it, for a connection that cannot be set up.
 * libuv watches a listener again only once its pending connection has been accepted, so leaving
 * it there would stop the daemon from accepting anyone on that listener. */
static void reject_pending(struct lstmd_server *s, int is_tcp) {
  if (s->spare_busy) { /* one close at a time: taken when the spare's close completes */
    s->spare_waiting[is_tcp] = 1;
    return;
  }
  uv_stream_t *listener = is_tcp ? (uv_stream_t *)&s->tcp_listener : (uv_stream_t *)&s->unix_listener;
  int rc = is_tcp ? uv_tcp_init(&s->loop, &s->spare.tcp) : uv_pipe_init(&s->loop, &s->spare.pipe, 0);
  if (rc) { /* cannot happen on Linux (neither allocates); say so if it ever does */
    fprintf(stderr, "lstmd: cannot take a pending connection: %s; the %s listener is stalled\n",
            uv_strerror(rc), is_tcp ? "TCP" : "UNIX");
    return;
  }
  s->spare.stream.data = s;
  s->spare_busy = 1;
  rc = uv_accept(listener, &s->spare.stream);
  if (rc) rearm_listener(s, listener, is_tcp, rc);
  uv_close((uv_handle_t *)&s->spare.stream, on_spare_closed);
}

void lstmd_server_on_connection(uv_stream_t *listener, int status) {
  struct lstmd_server *s = listener->data;
  if (s->stopping) return;
  if (status < 0) { /* libuv could not accept (it keeps watching the listener) */
    accept_error(s, "accept", status);
    return;
  }
  const int is_tcp = listener == (uv_stream_t *)&s->tcp_listener;
  struct conn *c = calloc(1, sizeof *c);
  int rc = c ? 0 : UV_ENOMEM;
  if (!rc) rc = is_tcp ? uv_tcp_init(&s->loop, &c->h.tcp) : uv_pipe_init(&s->loop, &c->h.pipe, 0);
  if (rc) {
    free(c);
    accept_error(s, "a new connection", rc);
    reject_pending(s, is_tcp);
    return;
  }
  c->srv = s;
  c->is_tcp = is_tcp;
  c->h.stream.data = c;
  c->handles_open = 1;
  if ((rc = uv_accept(listener, &c->h.stream)) != 0) {
    uv_close((uv_handle_t *)&c->h.stream, on_handle_closed);
    rearm_listener(s, listener, is_tcp, rc);
    return;
  }
  uv_os_fd_t fd;
  char why[200];
  const int at_limit = s->n_conns >= s->cfg.max_connections;
  int refuse = at_limit;
  if (!refuse && !is_tcp) {
    if ((rc = uv_fileno((uv_handle_t *)&c->h.stream, &fd)) != 0) /* no fd: no peer check */
      snprintf(why, sizeof why, "uv_fileno: %s", uv_strerror(rc));
    if (rc || !lstmd_peer_allowed(fd, s->cfg.socket_group, why, sizeof why)) {
      fprintf(stderr, "lstmd: refused a connection: %s\n", why);
      refuse = 1;
    }
  }
  if (!refuse && (rc = uv_timer_init(&s->loop, &c->idle)) != 0) {
    accept_error(s, "uv_timer_init", rc);
    refuse = 1;
  }
  if (at_limit) { /* say why, if the socket takes it now */
    char msg[160];
    snprintf(msg, sizeof msg, "the daemon is at its limit of %d open connections (set by its "
             "open-file limit, ulimit -n); try again when others have closed",
             s->cfg.max_connections);
    size_t len = 0;
    uint8_t *frame = lstmd_frame_pack_error(LSTMD__ERROR_CODE__INTERNAL, msg, &len);
    uv_buf_t buf = uv_buf_init((char *)frame, (unsigned)len);
    if (frame) uv_try_write(&c->h.stream, &buf, 1);
    free(frame);
  }
  if (refuse) {
    uv_close((uv_handle_t *)&c->h.stream, on_handle_closed);
    return;
  }
  c->idle.data = c;
  c->handles_open = 2;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  s->n_conns++;
  if (lstmd_conn_idle_restart(c) != 0) return; /* closed */
  if ((rc = uv_read_start(&c->h.stream, on_alloc, on_read)) != 0) {
    fprintf(stderr, "lstmd: closing a new connection: uv_read_start: %s\n", uv_strerror(rc));
    conn_abort(c);
  }
}
