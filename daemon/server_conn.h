/* server_conn.h — the control server's state (struct lstmd_server) and one client connection
 * (struct conn), shared by server.c (start, events from other threads, stop, join) and
 * server_conn.c (accepting, reading, requests, writing, closing). Private to the daemon. */
#ifndef LSTMD_SERVER_CONN_H
#define LSTMD_SERVER_CONN_H

#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "arena.h"
#include "server.h"

enum {
  kReadChunk = 64 << 10,
  kBufferBudget = 256 << 20,   /* request bytes buffered over all connections */
  kMaxQueuedPerConn = 16 << 20, /* replies + events not yet taken by a (slow) client */
  kQueuedBudget = 256 << 20      /* the same over all connections */
};

struct conn {
  union {
    uv_stream_t stream;
    uv_pipe_t pipe;
    uv_tcp_t tcp;
  } h;
  uv_timer_t idle;
  struct lstmd_server *srv;
  struct conn *prev, *next;
  int is_tcp, closing, handles_open;
  uint8_t *buf; /* the request being received */
  size_t len, cap;
  uint32_t payload_len;
  size_t queued; /* bytes handed to uv_write and not yet written */
  size_t peak;   /* most bytes buffered + queued at once */
  uint64_t watch_id; /* 0: not watching */
};

struct lstmd_server {
  struct lstmd_server_config cfg;
  struct lstmd_jobs *jobs;
  uv_loop_t loop;
  uv_pipe_t unix_listener;
  uv_tcp_t tcp_listener;
  int have_unix, have_tcp, stopping; /* listener handles initialised (to be closed) */
  int socket_bound;                  /* the socket file is this server's (removed at the end) */
  uv_async_t wakeup; /* events queued, or stop requested */
  int have_wakeup;
  uv_signal_t signals[3];
  int n_signals; /* signal handles initialised */
  /* A connection that cannot be set up is still accepted, into this handle, and closed: libuv
   * stops watching a listener until its pending connection is taken (see reject_pending). */
  union {
    uv_stream_t stream;
    uv_pipe_t pipe;
    uv_tcp_t tcp;
  } spare;
  int spare_busy, spare_waiting[2]; /* [0] the UNIX listener, [1] the TCP one */
  uint64_t last_accept_error_ms;
  pthread_t thread;
  pthread_mutex_t mu; /* guards events and stop_requested */
  struct event *events, **events_tail;
  int stop_requested;
  struct conn *conns;
  int n_conns;
  size_t buffered, queued;
  struct lstmd_arena arena; /* the request being handled, unpacked (loop thread only) */
  cpu_set_t cpus;           /* a copy of *cfg.cpus */
  char scratch[kReadChunk];
};

/* server_conn.c */
void lstmd_conn_send(struct conn *c, uint8_t *frame, size_t len);
void lstmd_conn_close(struct conn *c);
int lstmd_conn_idle_restart(struct conn *c);
void lstmd_server_start_drain(struct lstmd_server *s, const char *why);
void lstmd_server_on_connection(uv_stream_t *listener, int status); /* the listeners' callback */

#endif
