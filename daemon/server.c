/* server.c — the control server's libuv loop: listeners, connections, requests (see server.h).
 * Here: binding the listeners and starting the loop thread, the events and the stop that come
 * from other threads, and the join; the connections (accepting, reading, requests, replies) are
 * in server_conn.c, the state both share in server_conn.h. */
#define _GNU_SOURCE
#include "server_conn.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/status.h"
#include "access.h"

struct event {
  struct event *next;
  uint64_t job_id;
  int final;
  uint8_t *frame;
  size_t len;
};

/* ---- events and stop, from other threads ---- */

/* uv_async_send cannot fail on Linux (libuv 1.44 always returns 0); if it ever did, the queue
 * would wait for the next wakeup, and a stop would not be seen: say so. */
static void wake(struct lstmd_server *s, const char *what) {
  int rc = uv_async_send(&s->wakeup);
  if (rc) fprintf(stderr, "lstmd: control server: uv_async_send (%s): %s\n", what, uv_strerror(rc));
}

static void post_event(void *ctx, uint64_t job_id, int final, uint8_t *frame, size_t len) {
  struct lstmd_server *s = ctx;
  struct event *e = malloc(sizeof *e);
  if (!e) {
    free(frame);
    return;
  }
  *e = (struct event){.job_id = job_id, .final = final, .frame = frame, .len = len};
  pthread_mutex_lock(&s->mu);
  *s->events_tail = e;
  s->events_tail = &e->next;
  pthread_mutex_unlock(&s->mu);
  wake(s, "an event for watchers");
}

static void close_everything(struct lstmd_server *s) {
  s->stopping = 1;
  if (s->have_unix) uv_close((uv_handle_t *)&s->unix_listener, NULL);
  if (s->have_tcp) uv_close((uv_handle_t *)&s->tcp_listener, NULL);
  for (int i = 0; i < s->n_signals; i++) uv_close((uv_handle_t *)&s->signals[i], NULL);
  while (s->conns) lstmd_conn_close(s->conns);
  if (s->have_wakeup) uv_close((uv_handle_t *)&s->wakeup, NULL);
}

static void on_wakeup(uv_async_t *a) {
  struct lstmd_server *s = a->data;
  pthread_mutex_lock(&s->mu);
  struct event *list = s->events;
  s->events = NULL;
  s->events_tail = &s->events;
  const int stop = s->stop_requested;
  pthread_mutex_unlock(&s->mu);
  while (list) {
    struct event *e = list;
    list = e->next;
    for (struct conn *c = s->conns, *next; c; c = next) {
      next = c->next; /* lstmd_conn_send may close c */
      if (c->watch_id != e->job_id) continue;
      uint8_t *copy = malloc(e->len);
      if (copy) memcpy(copy, e->frame, e->len);
      else lstmd_conn_close(c);
      lstmd_conn_send(c, copy, e->len);
      if (e->final && !c->closing) {
        c->watch_id = 0;
        (void)lstmd_conn_idle_restart(c); /* closes c on failure */
      }
    }
    free(e->frame);
    free(e);
  }
  if (stop && !s->stopping) close_everything(s);
}

static void on_signal(uv_signal_t *h, int signum) {
  lstmd_server_start_drain(h->data, strsignal(signum));
}

void lstmd_server_stop(struct lstmd_server *s) {
  pthread_mutex_lock(&s->mu);
  s->stop_requested = 1;
  pthread_mutex_unlock(&s->mu);
  wake(s, "stop");
}

static void *loop_main(void *arg) {
  struct lstmd_server *s = arg;
  /* See cfg.cpus (cli_serve.c: the CPUs of this job's ranks on this node). If the kernel
   * refuses them, the thread keeps rank 0's binding. */
  if (s->cfg.cpus) (void)pthread_setaffinity_np(pthread_self(), sizeof s->cpus, &s->cpus);
  uv_run(&s->loop, UV_RUN_DEFAULT);
  return NULL;
}

/* ---- start ---- */

static int bind_unix(struct lstmd_server *s) {
  char err[300];
  if (lstmd_socket_make_way(s->cfg.socket_path, err, sizeof err)) {
    lstmd_errorf("--socket: %s", err);
    return LSTMD_EINVAL;
  }
  int rc = uv_pipe_init(&s->loop, &s->unix_listener, 0);
  if (rc) {
    lstmd_errorf("--socket %s: uv_pipe_init: %s", s->cfg.socket_path, uv_strerror(rc));
    return LSTMD_ENOMEM;
  }
  s->have_unix = 1;
  s->unix_listener.data = s;
  mode_t old = umask(0177); /* the socket is born 0600: no window where others may connect */
  rc = uv_pipe_bind(&s->unix_listener, s->cfg.socket_path);
  umask(old);
  if (!rc) s->socket_bound = 1; /* ours from here on: removed if the start fails */
  if (!rc && s->cfg.socket_group >= 0) {
    if (chown(s->cfg.socket_path, (uid_t)-1, (gid_t)s->cfg.socket_group) != 0 ||
        chmod(s->cfg.socket_path, 0660) != 0)
      rc = -errno; /* libuv's codes are negated errno values on Linux */
  }
  if (!rc) rc = uv_listen((uv_stream_t *)&s->unix_listener, 512, lstmd_server_on_connection);
  if (rc) {
    lstmd_errorf("--socket %s: %s", s->cfg.socket_path, uv_strerror(rc));
    return LSTMD_EINVAL;
  }
  return LSTMD_OK;
}

/* --listen's HOST and PORT as a socket address; LSTMD_EINVAL with the message if HOST is not
 * a numeric IPv4 or IPv6 address. */
static int listen_address(const char *host, int port, struct sockaddr_storage *addr) {
  memset(addr, 0, sizeof *addr);
  int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)addr);
  if (rc) rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)addr);
  if (rc) {
    lstmd_errorf("--listen: '%s' is not an IPv4 or IPv6 address", host);
    return LSTMD_EINVAL;
  }
  return LSTMD_OK;
}

int lstmd_server_probe_tcp(const char *host, int port) {
  struct sockaddr_storage addr;
  LSTMD_TRY(listen_address(host, port, &addr));
  const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  int e = fd < 0 ? errno : 0;
  if (!e && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0) e = errno;
  if (!e && bind(fd, (struct sockaddr *)&addr,
                 addr.ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                           : sizeof(struct sockaddr_in6)) != 0)
    e = errno;
  if (fd >= 0) close(fd);
  if (e) { /* the server's words: libuv's uv_strerror is strerror's text for these */
    lstmd_errorf("--listen %s:%d: %s", host, port, uv_strerror(-e));
    return LSTMD_EINVAL;
  }
  return LSTMD_OK;
}

static int bind_tcp(struct lstmd_server *s) {
  struct sockaddr_storage addr;
  LSTMD_TRY(listen_address(s->cfg.listen_host, s->cfg.listen_port, &addr));
  int rc = uv_tcp_init(&s->loop, &s->tcp_listener);
  if (rc) {
    lstmd_errorf("--listen: uv_tcp_init: %s", uv_strerror(rc));
    return LSTMD_ENOMEM;
  }
  s->tcp_listener.data = s;
  s->have_tcp = 1;
  rc = uv_tcp_bind(&s->tcp_listener, (struct sockaddr *)&addr, 0);
  if (!rc) rc = uv_listen((uv_stream_t *)&s->tcp_listener, 512, lstmd_server_on_connection);
  if (rc) {
    lstmd_errorf("--listen %s:%d: %s", s->cfg.listen_host, s->cfg.listen_port, uv_strerror(rc));
    return LSTMD_EINVAL;
  }
  return LSTMD_OK;
}

/* The wakeup and the signal handles. A failure here is the system's (descriptors, memory), not
 * the caller's: LSTMD_ENOMEM, with libuv's message. */
static int init_loop_handles(struct lstmd_server *s) {
  int rc = uv_async_init(&s->loop, &s->wakeup, on_wakeup);
  if (rc) {
    lstmd_errorf("control server: uv_async_init: %s", uv_strerror(rc));
    return LSTMD_ENOMEM;
  }
  s->have_wakeup = 1;
  s->wakeup.data = s;
  const int sigs[3] = {SIGINT, SIGTERM, SIGUSR1};
  for (int i = 0; i < 3; i++) {
    if ((rc = uv_signal_init(&s->loop, &s->signals[i])) != 0) {
      lstmd_errorf("control server: uv_signal_init: %s", uv_strerror(rc));
      return LSTMD_ENOMEM;
    }
    s->n_signals = i + 1;
    s->signals[i].data = s;
    if ((rc = uv_signal_start(&s->signals[i], on_signal, sigs[i])) != 0) {
      lstmd_errorf("control server: uv_signal_start(%s): %s", strsignal(sigs[i]), uv_strerror(rc));
      return LSTMD_ENOMEM;
    }
  }
  return LSTMD_OK;
}

/* Undoes a start that failed part-way, on the calling thread (no loop thread runs yet): closes
 * the handles opened so far, runs the loop until their closes are done, closes the loop, and
 * removes the socket file only if this server created it (a refused start must leave another
 * daemon's socket, or a file that is not a socket, alone). */
static void start_undo(struct lstmd_server *s) {
  close_everything(s);
  uv_run(&s->loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&s->loop);
  if (rc) fprintf(stderr, "lstmd: control server: uv_loop_close: %s\n", uv_strerror(rc));
  if (s->socket_bound) unlink(s->cfg.socket_path);
  lstmd_arena_free(&s->arena);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

int lstmd_server_start(const struct lstmd_server_config *cfg, struct lstmd_jobs *jobs,
                       struct lstmd_server **out) {
  *out = NULL;
  struct lstmd_server *s = calloc(1, sizeof *s);
  if (!s) return LSTMD_ENOMEM;
  s->cfg = *cfg;
  if (cfg->cpus) s->cpus = *cfg->cpus;
  s->jobs = jobs;
  s->events_tail = &s->events;
  int rc = uv_loop_init(&s->loop);
  if (rc) {
    lstmd_errorf("control server: uv_loop_init: %s", uv_strerror(rc));
    free(s);
    return LSTMD_ENOMEM;
  }
  pthread_mutex_init(&s->mu, NULL);
  rc = bind_unix(s);
  if (!rc && cfg->listen_host) rc = bind_tcp(s);
  /* A reply written to a client that has gone raises SIGPIPE, whose default action ends the
   * whole rank (and so the MPI world); libuv leaves that to the application. Ignored, the write
   * fails with EPIPE and only that connection is closed. */
  if (!rc) signal(SIGPIPE, SIG_IGN);
  if (!rc) rc = init_loop_handles(s);
  if (!rc) {
    lstmd_jobs_set_post(jobs, post_event, s);
    int err = pthread_create(&s->thread, NULL, loop_main, s);
    if (err) {
      lstmd_jobs_set_post(jobs, NULL, NULL); /* nothing may post to a server that is gone */
      lstmd_errorf("cannot start the control server thread: %s", strerror(err));
      rc = LSTMD_ENOMEM;
    }
  }
  if (rc) {
    start_undo(s);
    return rc;
  }
  pthread_setname_np(s->thread, "lstmd-control"); /* as top -H and /proc show it */
  *out = s;
  return LSTMD_OK;
}

void lstmd_server_join(struct lstmd_server *s) {
  pthread_join(s->thread, NULL);
  lstmd_jobs_set_post(s->jobs, NULL, NULL);
  for (struct event *e = s->events, *next; e; e = next) {
    next = e->next;
    free(e->frame);
    free(e);
  }
  int rc = uv_loop_close(&s->loop); /* EBUSY would mean a handle was left open */
  if (rc) fprintf(stderr, "lstmd: control server: uv_loop_close: %s\n", uv_strerror(rc));
  unlink(s->cfg.socket_path);
  lstmd_arena_free(&s->arena);
  pthread_mutex_destroy(&s->mu);
  free(s);
}
