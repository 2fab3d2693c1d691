/* read_rate.c — how fast this host's threads can read a working set: T threads, each summing its
 * own share of BYTES again and again, the rate of the best repetition. Part of
 * bench/bench_infer.sh, which sizes BYTES as the int8 weights one sampled character reads (a
 * batch-1 step reads each weight byte once), so that the rate divided by those bytes is the
 * characters/s that no kernel can beat on this host at this hour: the ceiling lstmd's int8
 * sampling is reported against. Built by that script:
 *   cc -O3 -march=native -pthread bench/read_rate.c -o BUILD/read_rate
 *
 * usage: read_rate --bytes N [--threads T] [--reps R] [--seconds S]
 * Prints one line: read_rate threads T bytes N gbps G */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct job {
  uint64_t *data;
  size_t words;
  long passes;
  pthread_barrier_t *start;
  uint64_t sum; /* kept, so the reads are not optimised away */
};

/* Eight independent sums: the compiler turns them into full-width vector loads and adds. */
static void *reader(void *arg) {
  struct job *j = arg;
  pthread_barrier_wait(j->start);
  uint64_t s[8] = {0};
  for (long p = 0; p < j->passes; p++)
    for (size_t i = 0; i + 8 <= j->words; i += 8)
      for (int k = 0; k < 8; k++) s[k] += j->data[i + k];
  for (int k = 0; k < 8; k++) j->sum += s[k];
  pthread_barrier_wait(j->start);
  return NULL;
}

/* Seconds for `passes` passes of every thread over its share (threads started once per call). */
static double timed(struct job *jobs, int threads, long passes) {
  pthread_t tid[64];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
  for (int t = 0; t < threads; t++) {
    jobs[t].passes = passes, jobs[t].start = &start;
    if (pthread_create(&tid[t], NULL, reader, &jobs[t]) != 0) {
      fprintf(stderr, "read_rate: cannot start a thread\n");
      exit(1);
    }
  }
  pthread_barrier_wait(&start);
  const double t0 = now_s();
  pthread_barrier_wait(&start);
  const double dt = now_s() - t0;
  for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  pthread_barrier_destroy(&start);
  return dt;
}

int main(int argc, char **argv) {
  double bytes = 0.0, seconds = 0.3;
  int threads = 1, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--bytes")) bytes = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
    else break;
  }
  if (!(bytes >= 4096) || threads < 1 || threads > 64 || reps < 1 || !(seconds > 0)) {
    fprintf(stderr, "usage: read_rate --bytes N (>= 4096) [--threads T (1..64)] [--reps R] [--seconds S]\n");
    return 2;
  }
  struct job jobs[64];
  const size_t words = (size_t)(bytes / threads / 64) * 8; /* whole 64-byte lines a thread */
  for (int t = 0; t < threads; t++) {
    memset(&jobs[t], 0, sizeof jobs[t]);
    jobs[t].words = words;
    jobs[t].data = aligned_alloc(64, words * 8);
    if (!jobs[t].data) {
      fprintf(stderr, "read_rate: out of memory\n");
      return 1;
    }
    for (size_t i = 0; i < words; i++) jobs[t].data[i] = i * 2654435761u + (uint64_t)t;
  }
  /* passes per repetition: enough for `seconds`, from one timed warm-up pass */
  const double one = timed(jobs, threads, 1);
  const long passes = one > 0 ? (long)(seconds / one) + 1 : 1000;
  double best = 0.0;
  for (int r = 0; r < reps; r++) {
    const double dt = timed(jobs, threads, passes);
    const double gbps = (double)threads * (double)words * 8.0 * (double)passes / dt / 1e9;
    if (gbps > best) best = gbps;
  }
  uint64_t keep = 0;
  for (int t = 0; t < threads; t++) keep += jobs[t].sum, free(jobs[t].data);
  printf("read_rate threads %d bytes %.0f gbps %.1f%s\n", threads, (double)threads * (double)words * 8.0,
         best, keep == 1 ? " " : "");
  return 0;
}
