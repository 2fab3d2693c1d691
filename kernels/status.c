/* status.c — messages and names for the status list in status.h, and error printing. */
#include "status.h"

#include <stdarg.h>
#include <stdlib.h>

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

void lstmd_verrorf(const char *fmt, va_list ap) {
  fputs("lstmd: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
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
