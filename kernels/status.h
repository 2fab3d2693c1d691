/* status.h — the status codes every lstmd module returns, and the macros that pass them up.
 * 0 is success; failures are negative values from one X-macro list so that names and messages
 * cannot drift apart. This header is a leaf (libc only): kernels/, comm/, worker/ and daemon/
 * all include it. It and its two siblings, check.h (library call checks) and clock.h (the
 * monotonic clock), are the one exception to "kernels and comm never include each other". */
#ifndef LSTMD_STATUS_H
#define LSTMD_STATUS_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LSTMD_STATUS_LIST(X)                                              \
  X(OK, 0, "success")                                                     \
  X(EINVAL, -1, "invalid argument")                                       \
  X(ENOMEM, -2, "out of memory")                                          \
  X(EIO, -3, "input/output error")                                        \
  X(EFORMAT, -4, "malformed file")                                        \
  X(ECRC, -5, "checksum mismatch")                                        \
  X(ECONFIG, -6, "bad configuration")                                     \
  X(EUNSUPPORTED, -7, "not supported by this build or device")           \
  X(ECUDA, -8, "CUDA error")                                              \
  X(ECOMM, -9, "communication error")                                     \
  X(EINTERRUPTED, -10, "interrupted")                                     \
  X(ENONFINITE, -11, "non-finite values (loss, gradients or parameters)")   \
  X(EWRITE, -12, "cannot write output")

enum lstmd_status {
#define LSTMD_STATUS_ENUM(name, value, msg) LSTMD_##name = value,
  LSTMD_STATUS_LIST(LSTMD_STATUS_ENUM)
#undef LSTMD_STATUS_ENUM
};

/* Returns the message of a status ("unknown status" for values outside the list). Static. */
const char *lstmd_strerror(int status);
/* Returns the symbolic name, e.g. "LSTMD_EFORMAT". Static string. */
const char *lstmd_status_name(int status);

/* Prints "<program>: <message>" to stderr ("lstmd: ..." unless lstmd_set_program_name said
 * otherwise); use for user-facing errors. printf-style. */
void lstmd_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The prefix of lstmd_errorf's messages ("lstmd" unless set): lstmctl, which shares the config
 * reader, sets "lstmctl". Call once at start-up, before any thread; name must outlive them. */
void lstmd_set_program_name(const char *name);
#include <stdarg.h>
#include <stddef.h>
void lstmd_verrorf(const char *fmt, va_list ap);
/* The last message lstmd_errorf printed in this process, from any thread ("" after _clear), for
 * reports such as the reason a daemon job failed. */
void lstmd_last_error(char *buf, size_t n);
void lstmd_last_error_clear(void);
/* From now on lstmd_errorf, called on this thread, writes its lines ("lstmd: ...\n") into buf
 * (n bytes, kept NUL-terminated; a line that does not fit goes to stderr) instead of stderr,
 * until called again with n = 0 on this thread; other threads print as ever, and each thread's
 * capture is its own (one thread's begin or end leaves another's alone). For a launcher's ranks, which
 * print one copy of the errors they share (cli_train.c), and for a loader's message repeated
 * with a config key (train_checks.c). */
void lstmd_errors_capture(char *buf, size_t n);
/* A capture inside another (a loader's message reworded with its config key while the rank
 * holds all its set-up lines for lstmd_comm_messages_once): _begin sets the outer capture (or
 * none) aside in *outer and captures into buf as above; _end goes back to the outer one, with
 * the lines it held before. */
struct lstmd_errors_held {
  char *buf;
  size_t len, cap;
};
void lstmd_errors_capture_begin(char *buf, size_t n, struct lstmd_errors_held *outer);
void lstmd_errors_capture_end(const struct lstmd_errors_held *outer);
/* Whole lines as lstmd_errorf writes them ("lstmd: ...\n"), already formatted: into this
 * thread's capture when one is on (and they fit), else to stderr. */
void lstmd_errors_put(const char *lines);
/* This thread's held lines to stderr now, the capture going on empty: a rank about to end the
 * job (lstmd_comm_abort) says what it held. */
void lstmd_errors_flush_held(void);
/* While on, lstmd_errorf on this thread drops its lines: not printed, not captured, and not the
 * process's last error (lstmd_last_error), which a daemon's job on another thread reports as
 * its failure reason. For a probe that wants only a status (daemon/serve_job.c). */
void lstmd_errors_silence(int on);

/* Who this process is in messages about failed library calls (check.h): "rank R (host)". Set
 * once by the communicator at start-up; empty before. */
void lstmd_set_process_label(int rank, const char *host);
/* Prints "lstmd: rank R (host): LIB: CALL failed at FILE:LINE: WHY" (check.h's macros). */
void lstmd_call_failed(const char *lib, const char *call, const char *file, int line,
                       const char *why);

/* Pass a failure up, leaving a breadcrumb (file:line and the failing expression) on stderr
 * when LSTMD_TRACE is set in the environment. */
void lstmd_breadcrumb(const char *file, int line, const char *expr, int status);
#define LSTMD_TRY(expr)                                                   \
  do {                                                                    \
    int lstmd_try_rc_ = (expr);                                           \
    if (lstmd_try_rc_ < 0) {                                              \
      lstmd_breadcrumb(__FILE__, __LINE__, #expr, lstmd_try_rc_);         \
      return lstmd_try_rc_;                                               \
    }                                                                     \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif
