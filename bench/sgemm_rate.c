/* sgemm_rate.c — OpenBLAS sgemm GFLOP/s at a large square shape and at the LSTM recurrence shapes
 * of the CPU benchmark model (H=512, B=32). Part of bench/bench_cpu.sh; built by that script:
 *   cc -O2 bench/sgemm_rate.c -o BUILD/sgemm_rate $(pkg-config --cflags --libs openblas)
 * OPENBLAS_CORETYPE must be set in the environment before this starts (see bench_cpu.sh).
 *
 * usage: sgemm_rate [--threads N] [--reps R] [--seconds S]
 * Per shape: one warm-up call, then R timed repetitions, each repeating the call until at least
 * S seconds have passed; reports the best repetition's rate. Output lines are stable for parsing:
 *   sgemm <label> M N K transA transB gflops */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *random_matrix(size_t n, unsigned *seed) {
  float *a = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (!a) {
    fprintf(stderr, "sgemm_rate: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    a[i] = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return a;
}

struct shape {
  const char *label;
  int M, N, K;
  enum CBLAS_TRANSPOSE ta, tb;
};

/* Row-major C[M,N] = op(A)·op(B) with op(A) [M,K], op(B) [K,N]. */
static double measure(const struct shape *s, int reps, double min_seconds) {
  unsigned seed = 12345;
  const int M = s->M, N = s->N, K = s->K;
  float *A = random_matrix((size_t)M * K, &seed), *B = random_matrix((size_t)K * N, &seed),
        *C = random_matrix((size_t)M * N, &seed);
  const int lda = s->ta == CblasNoTrans ? K : M, ldb = s->tb == CblasNoTrans ? N : K;
  const double flops = 2.0 * M * N * K;
  /* Warm-up: thread pool start, page faults, caches. */
  for (int i = 0; i < 3; i++)
    cblas_sgemm(CblasRowMajor, s->ta, s->tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
  double best = 0.0;
  for (int r = 0; r < reps; r++) {
    long calls = 0;
    double t0 = now_s(), t;
    do {
      cblas_sgemm(CblasRowMajor, s->ta, s->tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
      calls++;
      t = now_s();
    } while (t - t0 < min_seconds);
    double rate = calls * flops / (t - t0) / 1e9;
    if (rate > best) best = rate;
  }
  free(A);
  free(B);
  free(C);
  return best;
}

int main(int argc, char **argv) {
  int threads = 0, reps = 5;
  double seconds = 0.2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--threads N] [--reps R] [--seconds S]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (threads > 0) openblas_set_num_threads(threads);
  const char *env = getenv("OPENBLAS_CORETYPE");
  printf("openblas core: %s (OPENBLAS_CORETYPE=%s), threads: %d\n", openblas_get_corename(),
         env ? env : "unset", openblas_get_num_threads());
  printf("openblas config: %s\n", openblas_get_config());
  const struct shape shapes[] = {
      {"square_2048", 2048, 2048, 2048, CblasNoTrans, CblasNoTrans},
      /* forward recurrence: gates[B,4H] += h[B,H] · W_hh[4H,H]^T */
      {"lstm_fwd_rec", 32, 2048, 512, CblasNoTrans, CblasTrans},
      /* backward recurrence: dh[B,H] = da[B,4H] · W_hh[4H,H] */
      {"lstm_bwd_rec", 32, 512, 2048, CblasNoTrans, CblasNoTrans},
  };
  const int n = sizeof shapes / sizeof shapes[0];
  double rates[sizeof shapes / sizeof shapes[0]];
  printf("%-14s %5s %5s %5s %3s %3s %10s %9s\n", "shape", "M", "N", "K", "tA", "tB", "GFLOP/s",
         "of 2048^3");
  for (int i = 0; i < n; i++) {
    const struct shape *s = &shapes[i];
    rates[i] = measure(s, reps, seconds);
    printf("%-14s %5d %5d %5d %3s %3s %10.1f %9.2f\n", s->label, s->M, s->N, s->K,
           s->ta == CblasNoTrans ? "N" : "T", s->tb == CblasNoTrans ? "N" : "T", rates[i],
           rates[i] / rates[0]);
  }
  fflush(stdout);
  return 0;
}
