/* clock.h — the one clock lstmd measures with: CLOCK_MONOTONIC in seconds. Every timer (trace
 * events, step times, all-reduce waits, watchdogs, deadlines) reads it, so times taken on
 * different threads of a rank, and on different ranks of one host, are on one time line. A
 * leaf header (libc only), like status.h. */
#ifndef LSTMD_CLOCK_H
#define LSTMD_CLOCK_H

#include <time.h>

static inline double lstmd_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
