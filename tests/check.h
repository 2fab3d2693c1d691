/* check.h — tiny assertion helpers shared by the C unit tests: element-wise closeness against a
 * float64 reference, |x − ref| ≤ atol + rtol·|ref|, printing the first mismatches. */
#ifndef LSTMD_TEST_CHECK_H
#define LSTMD_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/isa.h"

static int g_failures;

static inline int check_close(const char *what, const float *got, const double *ref, size_t n,
                              double atol, double rtol) {
  size_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)got[i] - ref[i]), tol = atol + rtol * fabs(ref[i]);
    if (!(err <= tol)) {
      if (bad < 5) fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (err %.3g > tol %.3g)\n", what, i, got[i], ref[i], err, tol);
      bad++;
    }
    if (err > worst) worst = err;
  }
  printf("%-34s %s  (%zu values, max abs err %.3g)\n", what, bad ? "FAIL" : "ok", n, worst);
  if (bad) g_failures++;
  return bad == 0;
}

/* The same for two float arrays: got against ref, both computed in float32 (two paths of one
 * computation that may differ in rounding only). */
static inline int check_close_f(const char *what, const float *got, const float *ref, size_t n,
                                double atol, double rtol) {
  double *r = malloc(n * sizeof *r);
  for (size_t i = 0; i < n; i++) r[i] = ref[i];
  int ok = check_close(what, got, r, n, atol, rtol);
  free(r);
  return ok;
}

/* ‖a − b‖ / ‖b‖ over n floats (0 when both are 0). */
static inline double norm_rel(const float *a, const float *b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)a[i] - b[i];
    num += d * d;
    den += (double)b[i] * b[i];
  }
  return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static inline void check_true(const char *what, int ok) {
  printf("%-34s %s\n", what, ok ? "ok" : "FAIL");
  if (!ok) g_failures++;
}

/* Under LSTMD_CPU_ISA, that the kernels in use are the ISA asked for, so that the ctest runs
 * forcing avx2 and generic (tests/CMakeLists.txt) cannot silently test the default. Returns 77
 * (skipped) when the CPU lacks the ISA asked for, else 0. */
static inline int check_forced_isa(void) {
  const char *want = getenv("LSTMD_CPU_ISA");
  if (!want || !*want) return 0;
  for (int i = LSTMD_ISA_GENERIC; i <= LSTMD_ISA_AVX512; i++) {
    if (strcmp(want, lstmd_cpu_isa_name((enum lstmd_isa)i))) continue;
    if (i > (int)lstmd_cpu_isa_available()) return 77;
    check_true("kernels use LSTMD_CPU_ISA's ISA", lstmd_cpu_isa() == (enum lstmd_isa)i);
    return 0;
  }
  check_true("LSTMD_CPU_ISA is avx512, avx2 or generic", 0);
  return 0;
}

static inline int check_summary(const char *suite) {
  printf("%s: %s (%d failing checks)\n", suite, g_failures ? "FAILED" : "passed", g_failures);
  return g_failures ? 1 : 0;
}

/* Deterministic uniform values in [-scale, scale] (a small LCG: tests need no rng module). */
static inline double test_uniform(unsigned long long *state, double scale) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return ((double)(*state >> 11) / 9007199254740992.0 * 2.0 - 1.0) * scale;
}

/* n floats uniform in [-scale, scale] (malloc'd); copy (may be NULL) gets them as doubles. */
static inline float *test_rand_floats(unsigned long long *state, size_t n, double scale,
                                      double *copy) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) {
    x[i] = (float)test_uniform(state, scale);
    if (copy) copy[i] = x[i];
  }
  return x;
}

#endif
