/* status.c — messages and names for the status list in status.h, and error printing. */
#include "status.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_last_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_last[1024];
static char g_label[128]; /* written once, before any thread that reads it starts */
static const char *g_program = "lstmd"; /* likewise: the prefix of every message */
/* lstmd_errors_capture's state is the calling thread's own (thread-local): one thread's capture
 * holds only its lines, and another thread's capture, begun or ended meanwhile, neither takes
 * them nor ends it (one shared capture with the owner's thread id did both: a second thread's
 * capture replaced the first, and its end ended the first; tests/test_errors_capture.c). */
static _Thread_local char *g_capture;     /* the lines held, or NULL */
static _Thread_local size_t g_capture_len, g_capture_cap;

const char *lstmd_strerror(int status) {
  switch (status) {
#define LSTMD_STATUS_MSG(name, value, msg) \
  case value:                              \
    return msg;
    LSTMD_STATUS_LIST(LSTMD_STATUS_MSG)
#undef LSTMD_STATUS_MSG
  }
  return "unknown status";
}

const char *lstmd_status_name(int status) {
  switch (status) {
#define LSTMD_STATUS_NAME(name, value, msg) \
  case value:                               \
    return "LSTMD_" #name;
    LSTMD_STATUS_LIST(LSTMD_STATUS_NAME)
#undef LSTMD_STATUS_NAME
  }
  return "LSTMD_UNKNOWN";
}

/* lstmd_errors_silence's: this thread's messages dropped (a probe that only wants a status). */
static _Thread_local int g_silenced;

void lstmd_errors_silence(int on) { g_silenced = on; }

void lstmd_verrorf(const char *fmt, va_list ap) {
  if (g_silenced) return;
  char msg[sizeof g_last];
  vsnprintf(msg, sizeof msg, fmt, ap);
  pthread_mutex_lock(&g_last_mu);
  /* Held whole lines only, and only the capturing thread's (a daemon's server and scheduler
   * threads print as ever); a line that does not fit goes to stderr at once. */
  int held = 0;
  if (g_capture) {
    const int n = snprintf(g_capture + g_capture_len, g_capture_cap - g_capture_len, "%s: %s\n",
                           g_program, msg);
    held = n >= 0 && (size_t)n < g_capture_cap - g_capture_len;
    if (held) g_capture_len += (size_t)n;
    else g_capture[g_capture_len] = '\0';
  }
  if (!held) fprintf(stderr, "%s: %s\n", g_program, msg);
  memcpy(g_last, msg, sizeof g_last);
  pthread_mutex_unlock(&g_last_mu);
}

void lstmd_last_error(char *buf, size_t n) {
  if (!n) return;
  pthread_mutex_lock(&g_last_mu);
  snprintf(buf, n, "%s", g_last);
  pthread_mutex_unlock(&g_last_mu);
}

void lstmd_last_error_clear(void) {
  pthread_mutex_lock(&g_last_mu);
  g_last[0] = '\0';
  pthread_mutex_unlock(&g_last_mu);
}

void lstmd_set_program_name(const char *name) { g_program = name; }

void lstmd_errors_capture(char *buf, size_t n) { /* this thread's state only: no lock */
  g_capture = n ? buf : NULL;
  g_capture_cap = n;
  g_capture_len = 0;
  if (g_capture) g_capture[0] = '\0';
}

void lstmd_errors_capture_begin(char *buf, size_t n, struct lstmd_errors_held *outer) {
  *outer = (struct lstmd_errors_held){g_capture, g_capture_len, g_capture_cap};
  lstmd_errors_capture(buf, n);
}

void lstmd_errors_capture_end(const struct lstmd_errors_held *outer) {
  g_capture = outer->buf;
  g_capture_len = outer->len;
  g_capture_cap = outer->cap;
}

void lstmd_errors_put(const char *lines) {
  const size_t n = strlen(lines);
  pthread_mutex_lock(&g_last_mu);
  if (g_capture && n < g_capture_cap - g_capture_len) {
    memcpy(g_capture + g_capture_len, lines, n + 1);
    g_capture_len += n;
  } else {
    fputs(lines, stderr);
  }
  pthread_mutex_unlock(&g_last_mu);
}

void lstmd_errors_flush_held(void) {
  if (!g_capture || !g_capture_len) return;
  pthread_mutex_lock(&g_last_mu);
  fputs(g_capture, stderr);
  fflush(stderr);
  g_capture_len = 0;
  g_capture[0] = '\0';
  pthread_mutex_unlock(&g_last_mu);
}

void lstmd_errorf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lstmd_verrorf(fmt, ap);
  va_end(ap);
}

void lstmd_breadcrumb(const char *file, int line, const char *expr, int status) {
  static int enabled = -1;
  if (enabled < 0) enabled = getenv("LSTMD_TRACE") != NULL;
  if (enabled) fprintf(stderr, "  at %s:%d: %s -> %s\n", file, line, expr, lstmd_status_name(status));
}

void lstmd_set_process_label(int rank, const char *host) {
  snprintf(g_label, sizeof g_label, "rank %d (%s): ", rank, host);
}

void lstmd_call_failed(const char *lib, const char *call, const char *file, int line,
                       const char *why) {
  lstmd_errorf("%s%s: %s failed at %s:%d: %s", g_label, lib, call, file, line, why);
}
