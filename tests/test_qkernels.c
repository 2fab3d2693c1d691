/* test_qkernels.c — the int8 inference kernels (kernels/cpu/qgemm.h) against float64 and exact
 * integer references: per-row weight quantisation, dynamic activation quantisation, and the
 * int32 sums and dequantised output of every int8 kernel this CPU can run under the ISA in use
 * (avx512-vnni, avx2, generic), each equal to the exact sums and so to each other; the extreme
 * values that would saturate vpmaddubsw with 8-bit activations; and the int8 GEMM against the
 * unquantised float64 product within the quantisation error bound. Run per ISA by ctest. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/qgemm.h"
#include "check.h"

static unsigned long long g_seed = 777;

/* Rows with different magnitudes (1e-3 .. 10), one all-zero row when N > 2. */
static float *rand_rows(int N, int K) {
  float *w = malloc((size_t)N * K * sizeof *w);
  for (int n = 0; n < N; n++) {
    const double mag = n == 1 && N > 2 ? 0.0 : pow(10.0, -3.0 + 4.0 * (n % 7) / 6.0);
    for (int k = 0; k < K; k++) w[(size_t)n * K + k] = (float)test_uniform(&g_seed, mag);
  }
  return w;
}

static void test_quantize_rows(int N, int K) {
  float *w = rand_rows(N, K), *scale = malloc(N * sizeof *scale);
  int8_t *q = malloc((size_t)N * K);
  lstmd_cpu_quantize_rows(N, K, w, q, scale);
  double *ref = malloc(N * sizeof *ref);
  size_t bad = 0;
  for (int n = 0; n < N; n++) {
    double amax = 0.0;
    for (int k = 0; k < K; k++) amax = fmax(amax, fabs(w[(size_t)n * K + k]));
    ref[n] = amax > 0.0 ? amax / 127.0 : 1.0;
    for (int k = 0; k < K; k++) { /* |w − s·q| ≤ s/2, q within ±127 */
      const double err = fabs(w[(size_t)n * K + k] - (double)scale[n] * q[(size_t)n * K + k]);
      if (err > 0.5 * scale[n] * (1.0 + 1e-5) || q[(size_t)n * K + k] < -127) {
        if (bad++ < 5)
          fprintf(stderr, "  w[%d,%d] = %.9g: q %d, scale %.9g, error %.3g\n", n, k,
                  w[(size_t)n * K + k], q[(size_t)n * K + k], scale[n], err);
      }
    }
  }
  char name[64];
  snprintf(name, sizeof name, "quantize_rows %dx%d scales", N, K);
  check_close(name, scale, ref, (size_t)N, 0.0, 1e-6);
  snprintf(name, sizeof name, "quantize_rows %dx%d |w - s.q| <= s/2", N, K);
  check_true(name, bad == 0);
  free(w), free(scale), free(q), free(ref);
}

/* x rows: mixed signs, all positive, all negative, all zero, one huge value. */
static float *rand_acts(int M, int K) {
  float *x = malloc((size_t)M * K * sizeof *x);
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++) {
      double v = test_uniform(&g_seed, 1.0 + m);
      if (m % 5 == 1) v = fabs(v) + 0.25;
      if (m % 5 == 2) v = -fabs(v) - 0.25;
      if (m % 5 == 3) v = 0.0;
      if (m % 5 == 4 && k == K / 2) v = 40.0;
      x[(size_t)m * K + k] = (float)v;
    }
  return x;
}

static void test_quantize_act(int M, int K) {
  const int Kp = lstmd_cpu_qpad(K);
  float *x = rand_acts(M, K), *scale = malloc(M * sizeof *scale);
  uint8_t *q = malloc((size_t)M * Kp);
  int32_t *zero = malloc(M * sizeof *zero);
  memset(q, 0xee, (size_t)M * Kp);
  lstmd_cpu_quantize_act(M, K, x, K, q, scale, zero);
  double *ref = malloc(M * sizeof *ref);
  size_t bad = 0;
  for (int m = 0; m < M; m++) {
    double lo = 0.0, hi = 0.0;
    for (int k = 0; k < K; k++) lo = fmin(lo, x[(size_t)m * K + k]), hi = fmax(hi, x[(size_t)m * K + k]);
    ref[m] = hi > lo ? (hi - lo) / 127.0 : 1.0;
    const double s = scale[m];
    bad += zero[m] < 0 || zero[m] > 127 || fabs(zero[m] - (-lo / s)) > 0.5 + 1e-4;
    for (int k = 0; k < Kp; k++) {
      const int qv = q[(size_t)m * Kp + k];
      if (k >= K) { /* padding */
        bad += qv != 0;
        continue;
      }
      /* s·(q − z) reconstructs x to s/2, or to s where rounding both z and x/s up hit 127 */
      const double err = fabs(x[(size_t)m * K + k] - s * (qv - zero[m]));
      const double tol = (qv == 127 || qv == 0 ? 1.0 : 0.5) * s * (1.0 + 1e-4);
      if (qv > 127 || err > tol) {
        if (bad < 5)
          fprintf(stderr, "  x[%d,%d] = %.9g: q %d z %d s %.9g, error %.3g\n", m, k,
                  x[(size_t)m * K + k], qv, zero[m], s, err);
        bad++;
      }
    }
  }
  char name[64];
  snprintf(name, sizeof name, "quantize_act %dx%d scales", M, K);
  check_close(name, scale, ref, (size_t)M, 0.0, 1e-6);
  snprintf(name, sizeof name, "quantize_act %dx%d q in [0,127]", M, K);
  check_true(name, bad == 0);
  free(x), free(scale), free(q), free(zero), free(ref);
}

/* x [M,K] · W^T [N,K] in int8: every kernel's int32 sums == the exact int64 ones; the floats
 * (bias, accumulate) against float64 of the same integers; and against the float64 product of
 * the unquantised x and W within the bound of the two quantisation errors. */
static void test_gemm(int M, int N, int K) {
  const int Kp = lstmd_cpu_qpad(K);
  float *w = rand_rows(N, K), *x = rand_acts(M, K), *wscale = malloc(N * sizeof(float));
  int8_t *qw = malloc((size_t)N * K);
  lstmd_cpu_quantize_rows(N, K, w, qw, wscale);
  struct lstmd_qweight pw;
  if (lstmd_cpu_qweight_pack(N, K, qw, wscale, &pw) != 0) abort();
  uint8_t *qx = malloc((size_t)M * Kp);
  float *xscale = malloc(M * sizeof(float));
  int32_t *zero = malloc(M * sizeof(int32_t)), *acc = malloc((size_t)M * N * sizeof(int32_t));
  lstmd_cpu_quantize_act(M, K, x, K, qx, xscale, zero);
  int64_t *exact = malloc((size_t)M * N * sizeof *exact);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      int64_t s = 0;
      for (int k = 0; k < K; k++) s += (int64_t)qx[(size_t)m * Kp + k] * qw[(size_t)n * K + k];
      exact[(size_t)m * N + n] = s;
    }
  char name[96];
  for (int k = LSTMD_QKERNEL_GENERIC; k <= (int)lstmd_cpu_qkernel(); k++) {
    memset(acc, 0x55, (size_t)M * N * sizeof(int32_t));
    lstmd_cpu_qgemm_int32((enum lstmd_qkernel)k, M, qx, &pw, acc);
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)M * N; i++)
      if (acc[i] != exact[i] && bad++ < 5)
        fprintf(stderr, "  acc[%zu] = %d, exact %lld\n", i, acc[i], (long long)exact[i]);
    snprintf(name, sizeof name, "qgemm %s %dx%dx%d int32 exact", lstmd_cpu_qkernel_name(k), M, N, K);
    check_true(name, bad == 0);
  }
  float *bias = malloc(N * sizeof(float)), *y = malloc((size_t)M * N * sizeof(float));
  double *ref = malloc((size_t)M * N * sizeof *ref), *bound = malloc((size_t)M * N * sizeof *bound);
  double *full = malloc((size_t)M * N * sizeof *full);
  for (int n = 0; n < N; n++) bias[n] = (float)test_uniform(&g_seed, 1.0);
  for (size_t i = 0; i < (size_t)M * N; i++) y[i] = (float)test_uniform(&g_seed, 1.0);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      int64_t rowsum = 0;
      double f = 0.0, b = 0.0;
      for (int k = 0; k < K; k++) {
        const double xv = x[(size_t)m * K + k], wv = w[(size_t)n * K + k];
        rowsum += qw[(size_t)n * K + k];
        f += xv * wv;
        /* |Δ(x·w)| ≤ |x|·Δw + |w|·Δx + Δx·Δw, Δw = s_w/2, Δx ≤ s_x (see test_quantize_act) */
        b += fabs(xv) * wscale[n] * 0.5 + fabs(wv) * xscale[m] + xscale[m] * wscale[n] * 0.5;
      }
      const size_t i = (size_t)m * N + n;
      const double dot = (double)xscale[m] * wscale[n] * (double)(exact[i] - zero[m] * rowsum);
      ref[i] = y[i] + bias[n] + dot;
      full[i] = y[i] + bias[n] + f;
      bound[i] = b * (1.0 + 1e-3) + 1e-5 * (fabs(ref[i]) + 1.0);
    }
  /* The epilogue's float operations (qgemm.c), one element at a time: every kernel and every
   * vector width of the epilogue must give exactly these bits. volatile keeps the product from
   * being fused with the add. */
  float *bits = malloc((size_t)M * N * sizeof *bits);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      const size_t i = (size_t)m * N + n;
      volatile float v = (float)((int32_t)exact[i] - zero[m] * pw.rowsum[n]) * (xscale[m] * wscale[n]);
      bits[i] = (y[i] + bias[n]) + v;
    }
  lstmd_cpu_qgemm(M, qx, xscale, zero, &pw, bias, y, N, 1);
  snprintf(name, sizeof name, "qgemm %s %dx%dx%d epilogue bits", lstmd_cpu_qkernel_name(lstmd_cpu_qkernel()), M, N, K);
  check_true(name, memcmp(y, bits, (size_t)M * N * sizeof *y) == 0);
  /* The other sink: no bias, no accumulation, over the columns [N/3, N − N/5) only (a range that
   * starts and ends inside panels and vectors); the columns outside keep what they held. */
  const int c0 = N / 3, c1 = N - N / 5;
  for (size_t i = 0; i < (size_t)M * N; i++) bits[i] = 7.0f;
  lstmd_cpu_qgemm_cols(M, qx, xscale, zero, &pw, c0, c1, NULL, bits, N, 0);
  size_t wrong = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      const size_t i = (size_t)m * N + n;
      volatile float v = (float)((int32_t)exact[i] - zero[m] * pw.rowsum[n]) * (xscale[m] * wscale[n]);
      const float want = n < c0 || n >= c1 ? 7.0f : 0.0f + v;
      wrong += memcmp(&bits[i], &want, sizeof want) != 0;
    }
  snprintf(name, sizeof name, "qgemm %s %dx%dx%d columns [%d, %d), no bias, no accumulation, bits",
           lstmd_cpu_qkernel_name(lstmd_cpu_qkernel()), M, N, K, c0, c1);
  check_true(name, wrong == 0);
  free(bits);
  snprintf(name, sizeof name, "qgemm %s %dx%dx%d float64 of ints", lstmd_cpu_qkernel_name(lstmd_cpu_qkernel()), M, N, K);
  check_close(name, y, ref, (size_t)M * N, 1e-5, 1e-5);
  size_t bad = 0;
  for (size_t i = 0; i < (size_t)M * N; i++)
    if (!(fabs(y[i] - full[i]) <= bound[i]) && bad++ < 5)
      fprintf(stderr, "  y[%zu] = %.9g, unquantised %.9g, bound %.3g\n", i, y[i], full[i], bound[i]);
  snprintf(name, sizeof name, "qgemm %dx%dx%d vs unquantised float64", M, N, K);
  check_true(name, bad == 0);
  lstmd_cpu_qweight_free(&pw);
  free(w), free(x), free(wscale), free(qw), free(qx), free(xscale), free(zero), free(acc);
  free(exact), free(bias), free(y), free(ref), free(bound), free(full);
}

/* The values that would saturate vpmaddubsw's int16 pair sums with 8-bit activations:
 * q_x = 127 everywhere against q_w = −128 and 127 (a pair sums to ∓32512, inside int16). */
static void test_extremes(void) {
  enum { M = 3, N = 32, K = 4100 };
  const int Kp = lstmd_cpu_qpad(K);
  int8_t *qw = malloc((size_t)N * K);
  float scale[N];
  for (int n = 0; n < N; n++) {
    scale[n] = 1.0f;
    for (int k = 0; k < K; k++) qw[(size_t)n * K + k] = (int8_t)(n % 2 ? 127 : -128);
  }
  struct lstmd_qweight pw;
  if (lstmd_cpu_qweight_pack(N, K, qw, scale, &pw) != 0) abort();
  uint8_t *qx = calloc((size_t)M * Kp, 1);
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++) qx[(size_t)m * Kp + k] = 127;
  int32_t acc[M * N];
  for (int k = LSTMD_QKERNEL_GENERIC; k <= (int)lstmd_cpu_qkernel(); k++) {
    lstmd_cpu_qgemm_int32((enum lstmd_qkernel)k, M, qx, &pw, acc);
    int bad = 0;
    for (int i = 0; i < M * N; i++) bad += acc[i] != (i % N % 2 ? 127 * 127 : -127 * 128) * K;
    char name[80];
    snprintf(name, sizeof name, "qgemm %s no saturation at extremes", lstmd_cpu_qkernel_name(k));
    check_true(name, bad == 0);
  }
  lstmd_cpu_qweight_free(&pw);
  free(qw), free(qx);
}

/* The kernels in use; under LSTMD_CPU_ISA, that they are the ISA asked for (77 when the CPU
 * lacks it). */
static int check_isa(void) {
  printf("kernels: %s, int8 kernel %s (this CPU: %s)\n", lstmd_cpu_isa_name(lstmd_cpu_isa()),
         lstmd_cpu_qkernel_name(lstmd_cpu_qkernel()), lstmd_cpu_isa_name(lstmd_cpu_isa_available()));
  return check_forced_isa();
}

int main(void) {
  if (check_isa() == 77) return 77;
  test_quantize_rows(9, 33);
  test_quantize_rows(64, 256);
  test_quantize_act(10, 1);
  test_quantize_act(10, 37);
  test_quantize_act(5, 1024);
  /* M 1..9: row tails of the 4-row (VNNI, generic) and 2-row (AVX2) blocks; N 16·P and others:
   * panel tails of 1..3 and a partial last panel; K not a multiple of 4. */
  const int shapes[][3] = {{1, 16, 4},   {1, 1024, 256}, {2, 40, 3},    {3, 100, 17},
                           {5, 64, 64},  {7, 48, 255},   {9, 130, 129}, {4, 1, 1},
                           {16, 272, 96}, {1, 65, 512}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    test_gemm(shapes[i][0], shapes[i][1], shapes[i][2]);
  test_extremes();
  return check_summary("test_qkernels");
}
