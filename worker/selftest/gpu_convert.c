/* gpu_convert.c (selftest group "convert") — the glue kernels of kernels/cuda/convert_cuda against float64
 * references: casts to and from fp16/bf16 (error within half an ulp of the format), segment
 * copies with a cast and with accumulation, the sum and fused MSE reductions, and scaling; fp16
 * overflow to ±inf exactly, and the squared norm of it +inf (what the fp16 loss scaler reads);
 * the hash fill of the cuDNN timing trials.
 * Run by `lstmd selftest --gpu` (gpu_selftest.c) on device 0. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/convert_cuda.h"
#include "kernels/cuda/dense_cuda.h"
#include "worker/selftest/selftest.h"

static unsigned long long g_seed = 99;

static void *dev_copy(const void *h, size_t bytes) {
  void *d = NULL;
  cudaMalloc(&d, bytes);
  cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
  return d;
}

static void test_casts(void) {
  enum { N = 10007 };
  double *ref = malloc(sizeof(double) * N);
  float *x = selftest_rand_floats(&g_seed, N, 1000.0, ref), *back = malloc(sizeof(float) * N);
  float *dx = dev_copy(x, sizeof(float) * N), *dback;
  void *d16;
  cudaMalloc(&d16, 2 * N);
  cudaMalloc((void **)&dback, sizeof(float) * N);
  static const char *names[] = {"", "cast fp32 -> fp16 -> fp32", "cast fp32 -> bf16 -> fp32"};
  for (int t = LSTMD_DT_F16; t <= LSTMD_DT_BF16; t++) {
    lstmd_check_true("cast launch", lstmd_cuda_cast(N, dx, LSTMD_DT_F32, d16, t, NULL) == 0 &&
                                  lstmd_cuda_cast(N, d16, t, dback, LSTMD_DT_F32, NULL) == 0);
    cudaMemcpy(back, dback, sizeof(float) * N, cudaMemcpyDeviceToHost);
    /* round to nearest: relative error at most 2^-11 (fp16) / 2^-8 (bf16) */
    lstmd_check_close(names[t], back, ref, N, 0.0, t == LSTMD_DT_F16 ? 4.9e-4 : 3.91e-3);
  }
  /* fp16 overflow, exactly: ±1e6 and ±65520 (halfway between the largest finite fp16, 65504,
   * and 65536: round-to-nearest-even goes up, to inf) come back as ±inf, sign kept; 65504 and
   * 65519 come back as 65504. Then what loss scaling detects: the fp16 engine sees an overflow
   * as a non-finite squared gradient norm (lstmd_cuda_sumsq, gpu_engine.c), so the squared norm
   * of these values must be +inf — inf_ref, its float64 value — not NaN and not finite. */
  enum { K = 7 };
  float edge[K] = {1e6f, -1e6f, 65520.0f, -65520.0f, 65504.0f, 65519.0f, 1.0f}, edge_back[K];
  const double edge_ref[K] = {INFINITY, -INFINITY, INFINITY, -INFINITY, 65504.0, 65504.0, 1.0};
  float *dedge = dev_copy(edge, sizeof edge);
  lstmd_cuda_cast(K, dedge, LSTMD_DT_F32, d16, LSTMD_DT_F16, NULL);
  lstmd_cuda_cast(K, d16, LSTMD_DT_F16, dedge, LSTMD_DT_F32, NULL);
  cudaMemcpy(edge_back, dedge, sizeof edge_back, cudaMemcpyDeviceToHost);
  int exact = 1;
  for (int i = 0; i < K; i++)
    if ((double)edge_back[i] != edge_ref[i]) { /* == also holds for inf against inf of the same sign */
      fprintf(stderr, "  fp16 round trip of %.9g: got %.9g, want %.9g\n", edge[i], edge_back[i], edge_ref[i]);
      exact = 0;
    }
  lstmd_check_true("fp16 overflow gives ±inf, 65504 and 65519 stay 65504", exact);
  double inf_ref = 0.0, *dnorm, norm = 0.0;
  for (int i = 0; i < K; i++) inf_ref += (double)edge_back[i] * edge_back[i];
  cudaMalloc((void **)&dnorm, sizeof(double));
  cudaMemset(dnorm, 0, sizeof(double));
  lstmd_check_true("sumsq launch", lstmd_cuda_sumsq(K, dedge, dnorm, NULL) == 0);
  cudaMemcpy(&norm, dnorm, sizeof norm, cudaMemcpyDeviceToHost);
  char what[160];
  snprintf(what, sizeof what, "fp16 overflow: squared norm %g == %g (what loss scaling detects)",
           norm, inf_ref);
  lstmd_check_true(what, isinf(inf_ref) && inf_ref > 0 && norm == inf_ref);
  cudaFree(dx); cudaFree(d16); cudaFree(dback); cudaFree(dedge); cudaFree(dnorm);
  free(ref); free(x); free(back);
}

/* lstmd_cuda_fill_hash against the same formula in float64 on the host: fp32 exactly (2u − 1 is
 * exact, one rounding of the product), bf16 within half its ulp; values in [−scale, scale) and
 * not all alike (a fill of zeros or a constant would defeat its purpose). */
static void test_fill_hash(void) {
  enum { N = 100003 };
  const float scale = 0.03125f * 3.0f;
  const unsigned long long seed = 7;
  double *ref = malloc(sizeof(double) * N);
  for (size_t i = 0; i < N; i++) {
    unsigned long long z = seed * 0x9E3779B97F4A7C15ull + i;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    ref[i] = (double)(float)((double)scale * (2.0 * (double)(z >> 40) / 16777216.0 - 1.0));
  }
  float *out = malloc(sizeof(float) * N), *d32;
  void *d16;
  cudaMalloc((void **)&d32, sizeof(float) * N);
  cudaMalloc(&d16, 2 * N);
  lstmd_check_true("hash fill launch", lstmd_cuda_fill_hash(N, d32, LSTMD_DT_F32, scale, seed, NULL) == 0 &&
                                        lstmd_cuda_fill_hash(N, d16, LSTMD_DT_BF16, scale, seed, NULL) == 0);
  cudaMemcpy(out, d32, sizeof(float) * N, cudaMemcpyDeviceToHost);
  lstmd_check_close("hash fill fp32 (exact)", out, ref, N, 0.0, 0.0);
  double lo = 1e30, hi = -1e30;
  for (size_t i = 0; i < N; i++) {
    lo = fmin(lo, out[i]);
    hi = fmax(hi, out[i]);
  }
  char what[160];
  snprintf(what, sizeof what, "hash fill spans [%.4f, %.4f] within [-%.4f, %.4f)", lo, hi, scale, scale);
  lstmd_check_true(what, lo >= -scale && hi < scale && lo < -0.9 * scale && hi > 0.9 * scale);
  lstmd_cuda_cast(N, d16, LSTMD_DT_BF16, d32, LSTMD_DT_F32, NULL);
  cudaMemcpy(out, d32, sizeof(float) * N, cudaMemcpyDeviceToHost);
  lstmd_check_close("hash fill bf16", out, ref, N, 0.0, 3.91e-3);
  cudaFree(d32);
  cudaFree(d16);
  free(out);
  free(ref);
}

static void test_segments(void) {
  enum { SRC = 1000, DST = 1200 };
  struct lstmd_cuda_segment segs[3] = {{0, 500, 100}, {100, 0, 333}, {700, 900, 300}};
  double *rs = malloc(sizeof(double) * SRC), *rd = calloc(DST, sizeof(double));
  float *src = selftest_rand_floats(&g_seed, SRC, 1.0, rs), *out = malloc(sizeof(float) * DST);
  float *dsrc = dev_copy(src, sizeof(float) * SRC), *ddst;
  cudaMalloc((void **)&ddst, sizeof(float) * DST);
  cudaMemset(ddst, 0, sizeof(float) * DST);
  struct lstmd_cuda_segment *dsegs = dev_copy(segs, sizeof segs);
  lstmd_check_true("segments launch", lstmd_cuda_copy_segments(3, dsegs, 333, dsrc, LSTMD_DT_F32, ddst,
                                                         LSTMD_DT_F32, 0, NULL) == 0);
  for (int s = 0; s < 3; s++)
    for (size_t j = 0; j < segs[s].count; j++) rd[segs[s].dst_offset + j] = rs[segs[s].src_offset + j];
  cudaMemcpy(out, ddst, sizeof(float) * DST, cudaMemcpyDeviceToHost);
  lstmd_check_close("segment copy (set)", out, rd, DST, 0, 0);
  lstmd_check_true("accumulate launch", lstmd_cuda_copy_segments(3, dsegs, 333, dsrc, LSTMD_DT_F32, ddst,
                                                           LSTMD_DT_F32, 1, NULL) == 0);
  for (int s = 0; s < 3; s++)
    for (size_t j = 0; j < segs[s].count; j++) rd[segs[s].dst_offset + j] += rs[segs[s].src_offset + j];
  cudaMemcpy(out, ddst, sizeof(float) * DST, cudaMemcpyDeviceToHost);
  lstmd_check_close("segment copy (accumulate)", out, rd, DST, 1e-7, 1e-7);
  /* fp32 → bf16 segments, then bf16 → fp32 accumulate into zeros: the bf16 rounding of src */
  void *d16;
  cudaMalloc(&d16, 2 * DST);
  cudaMemset(ddst, 0, sizeof(float) * DST);
  lstmd_cuda_copy_segments(3, dsegs, 333, dsrc, LSTMD_DT_F32, d16, LSTMD_DT_BF16, 0, NULL);
  struct lstmd_cuda_segment back[3];
  for (int s = 0; s < 3; s++) back[s] = (struct lstmd_cuda_segment){segs[s].dst_offset, segs[s].src_offset, segs[s].count};
  struct lstmd_cuda_segment *dback = dev_copy(back, sizeof back);
  lstmd_cuda_copy_segments(3, dback, 333, d16, LSTMD_DT_BF16, ddst, LSTMD_DT_F32, 1, NULL);
  double *rb = calloc(DST, sizeof(double));
  for (int s = 0; s < 3; s++)
    for (size_t j = 0; j < segs[s].count; j++) rb[segs[s].src_offset + j] = rs[segs[s].src_offset + j];
  cudaMemcpy(out, ddst, sizeof(float) * DST, cudaMemcpyDeviceToHost);
  lstmd_check_close("segments through bf16 and back", out, rb, SRC, 0, 3.91e-3);
  lstmd_check_true("accumulate into a 16-bit type refused",
             lstmd_cuda_copy_segments(3, dsegs, 333, dsrc, LSTMD_DT_F32, d16, LSTMD_DT_BF16, 1, NULL) != 0);
  cudaFree(dsrc); cudaFree(ddst); cudaFree(dsegs); cudaFree(d16); cudaFree(dback);
  free(rs); free(rd); free(rb); free(src); free(out);
}

static void test_reductions(void) {
  enum { N = 100003 };
  double *rx = malloc(sizeof(double) * N), *ry = malloc(sizeof(double) * N);
  double *rg = malloc(sizeof(double) * N);
  float *x = selftest_rand_floats(&g_seed, N, 2.0, rx), *y = selftest_rand_floats(&g_seed, N, 2.0, ry);
  float *dx = dev_copy(x, sizeof(float) * N), *dy = dev_copy(y, sizeof(float) * N);
  double *acc, got, sum = 0.0, sq = 0.0;
  cudaMalloc((void **)&acc, sizeof(double));
  cudaMemset(acc, 0, sizeof(double));
  lstmd_check_true("sum launch", lstmd_cuda_sum(N, dx, acc, NULL) == 0);
  cudaMemcpy(&got, acc, sizeof got, cudaMemcpyDeviceToHost);
  for (int i = 0; i < N; i++) sum += rx[i];
  /* compared as a double: rounded to float first it would be ~3e-5 off for a sum of ~661 */
  char what[160];
  snprintf(what, sizeof what, "sum (double accumulation) %.12g vs %.12g", got, sum);
  lstmd_check_true(what, fabs(got - sum) <= 1e-9 + 1e-9 * fabs(sum));
  float gotf;
  cudaMemset(acc, 0, sizeof(double));
  const double scale = 0.001;
  const float loss_scale = 4.0f; /* on the device, like the fp16 engine's */
  float *dscale = dev_copy(&loss_scale, sizeof loss_scale);
  lstmd_check_true("mse launch", lstmd_cuda_mse(N, dx, dy, (float)scale, dscale, acc, NULL) == 0);
  cudaMemcpy(&got, acc, sizeof got, cudaMemcpyDeviceToHost);
  for (int i = 0; i < N; i++) {
    sq += (rx[i] - ry[i]) * (rx[i] - ry[i]);
    rg[i] = scale * loss_scale * 2.0 * (rx[i] - ry[i]);
  }
  gotf = (float)got;
  lstmd_check_close("mse loss", &gotf, &sq, 1, 1e-9, 1e-7);
  cudaMemcpy(x, dx, sizeof(float) * N, cudaMemcpyDeviceToHost);
  lstmd_check_close("mse gradient (times the device loss scale)", x, rg, N, 1e-9, 1e-6);
  cudaFree(dx); cudaFree(dy); cudaFree(acc); cudaFree(dscale);
  free(rx); free(ry); free(rg); free(x); free(y);
}

void lstmd_selftest_gpu_convert(void) {
  test_casts();
  test_fill_hash();
  test_segments();
  test_reductions();
}
