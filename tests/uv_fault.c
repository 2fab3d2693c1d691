/* uv_fault.c — an LD_PRELOAD library that makes one libuv call (or the control server's thread
 * start) fail, to test lstmd serve's handling of failures that do not happen on a healthy
 * machine (tests/test_serve_faults.sh).
 *
 * LSTMD_FAULT=NAME[:N] in the environment makes the Nth call (default: the first) of NAME return
 * an error without calling the real function; every other call goes through. A test program can
 * change the fault between cases with uv_fault_set("NAME[:N]") (found with dlsym; "" for none),
 * which starts the count again. NAME is one of uv_read_start, uv_timer_start, uv_timer_init,
 * uv_pipe_init, uv_async_init, uv_signal_start, uv_listen, or pthread_create — counted only from
 * the first uv_listen on, so that the threads of Open MPI, OpenBLAS and others started before
 * the server binds do not count: pthread_create:1 is the control server's own thread. libuv's
 * calls to its own exported functions are interposed too (uv_loop_init calls uv_async_init
 * once), and count. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static atomic_int g_listened;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_spec[128];
static int g_spec_read, g_calls;

void uv_fault_set(const char *spec) {
  pthread_mutex_lock(&g_mu);
  snprintf(g_spec, sizeof g_spec, "%s", spec ? spec : "");
  g_spec_read = 1;
  g_calls = 0;
  pthread_mutex_unlock(&g_mu);
}

/* 1 when this call of `name` is the one to fail (counted per fault setting, any thread). */
static int should_fail(const char *name) {
  pthread_mutex_lock(&g_mu);
  if (!g_spec_read) {
    const char *env = getenv("LSTMD_FAULT");
    snprintf(g_spec, sizeof g_spec, "%s", env ? env : "");
    g_spec_read = 1;
  }
  const size_t n = strcspn(g_spec, ":");
  int k = 0, nth = 0;
  if (n > 0 && strlen(name) == n && strncmp(g_spec, name, n) == 0) {
    nth = g_spec[n] == ':' ? atoi(g_spec + n + 1) : 1;
    k = ++g_calls;
  }
  pthread_mutex_unlock(&g_mu);
  if (k == 0 || k != nth) return 0;
  fprintf(stderr, "uv_fault: failing call %d of %s\n", k, name);
  return 1;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

int uv_read_start(uv_stream_t *s, uv_alloc_cb a, uv_read_cb r) {
  return should_fail("uv_read_start") ? UV_ENOMEM : REAL(uv_read_start)(s, a, r);
}
int uv_timer_start(uv_timer_t *t, uv_timer_cb cb, uint64_t timeout, uint64_t repeat) {
  return should_fail("uv_timer_start") ? UV_EINVAL : REAL(uv_timer_start)(t, cb, timeout, repeat);
}
int uv_timer_init(uv_loop_t *l, uv_timer_t *t) {
  return should_fail("uv_timer_init") ? UV_ENOMEM : REAL(uv_timer_init)(l, t);
}
int uv_pipe_init(uv_loop_t *l, uv_pipe_t *p, int ipc) {
  return should_fail("uv_pipe_init") ? UV_ENOMEM : REAL(uv_pipe_init)(l, p, ipc);
}
int uv_async_init(uv_loop_t *l, uv_async_t *a, uv_async_cb cb) {
  return should_fail("uv_async_init") ? UV_EMFILE : REAL(uv_async_init)(l, a, cb);
}
int uv_signal_start(uv_signal_t *h, uv_signal_cb cb, int signum) {
  return should_fail("uv_signal_start") ? UV_EINVAL : REAL(uv_signal_start)(h, cb, signum);
}
int uv_listen(uv_stream_t *s, int backlog, uv_connection_cb cb) {
  atomic_store(&g_listened, 1);
  return should_fail("uv_listen") ? UV_EADDRINUSE : REAL(uv_listen)(s, backlog, cb);
}
int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  if (atomic_load(&g_listened) && should_fail("pthread_create")) return EAGAIN;
  return REAL(pthread_create)(t, attr, fn, arg);
}
