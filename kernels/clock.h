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

/* The CLOCK_MONOTONIC time `seconds` from now, for pthread_cond_timedwait on a condition
 * variable whose clock is CLOCK_MONOTONIC (pthread_condattr_setclock). */
static inline struct timespec lstmd_deadline_in(double seconds) {
  const double t = lstmd_now_s() + seconds;
  struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
  if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
  return ts;
}

/* Sleeps about `us` microseconds (polling loops and watchdogs). */
static inline void lstmd_sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

#endif
