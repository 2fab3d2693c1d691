/* gpu_kernels.c (selftest group "kernels") — every CUDA kernel of kernels/cuda against a float64 CPU reference.
 * The optimizers run from a decision made on the device (kernels/optim_rules.h), as the GPU
 * engine runs them. Run by `lstmd selftest --gpu` (gpu_selftest.c). */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/dense_cuda.h"
#include "worker/model/model.h"
#include "worker/selftest/selftest.h"

static unsigned long long g_seed = 4242;

static float *dev_copy(const float *h, size_t n) {
  float *d = NULL;
  cudaMalloc((void **)&d, n * sizeof(float));
  cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
  return d;
}
static void to_host(float *h, const float *d, size_t n) {
  cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
}
static float *rand_host(size_t n, double scale, double *copy) {
  return selftest_rand_floats(&g_seed, n, scale, copy);
}

static void test_embedding(void) {
  enum { N = 1000, E = 33, V = 17 };
  int32_t ids[N];
  for (int n = 0; n < N; n++) ids[n] = (n * 7) % V;
  double *rt = malloc(sizeof(double) * V * E), *ro = malloc(sizeof(double) * N * E);
  float *t = rand_host(V * E, 1.0, rt), *o = malloc(sizeof(float) * N * E);
  float *dt = dev_copy(t, V * E), *dout;
  int32_t *dids;
  cudaMalloc((void **)&dids, sizeof ids);
  cudaMemcpy(dids, ids, sizeof ids, cudaMemcpyHostToDevice);
  cudaMalloc((void **)&dout, sizeof(float) * N * E);
  lstmd_check_true("embedding forward launch", lstmd_cuda_embedding_forward(N, E, dt, dids, dout, NULL) == 0);
  to_host(o, dout, N * E);
  for (int n = 0; n < N; n++)
    for (int e = 0; e < E; e++) ro[n * E + e] = rt[ids[n] * E + e];
  lstmd_check_close("cuda embedding forward", o, ro, N * E, 0, 0);
  double *rg = calloc(V * E, sizeof(double)), *rdo = malloc(sizeof(double) * N * E);
  float *g = rand_host(N * E, 1.0, rdo), *dg, *gt = calloc(V * E, sizeof(float));
  float *dgrad = dev_copy(g, N * E);
  cudaMalloc((void **)&dg, sizeof(float) * V * E);
  cudaMemset(dg, 0, sizeof(float) * V * E);
  lstmd_check_true("embedding backward launch", lstmd_cuda_embedding_backward(N, E, dgrad, dids, dg, NULL) == 0);
  to_host(gt, dg, V * E);
  for (int n = 0; n < N; n++)
    for (int e = 0; e < E; e++) rg[ids[n] * E + e] += rdo[n * E + e];
  lstmd_check_close("cuda embedding backward", gt, rg, V * E, 1e-5, 1e-5);
  cudaFree(dt); cudaFree(dout); cudaFree(dids); cudaFree(dg); cudaFree(dgrad);
  free(rt); free(ro); free(t); free(o); free(rg); free(rdo); free(g); free(gt);
}

static void test_softmax(void) {
  enum { N = 37, V = 301 };
  double *rz = malloc(sizeof(double) * N * V), *rg = malloc(sizeof(double) * N * V), rl[N];
  float *z = rand_host(N * V, 20.0, rz), loss[N];
  int32_t tg[N];
  for (int n = 0; n < N; n++) tg[n] = (n * 13 + 5) % V;
  const double scale = 0.125;
  for (int n = 0; n < N; n++) {
    double mx = rz[n * V], s = 0;
    for (int v = 1; v < V; v++) mx = fmax(mx, rz[n * V + v]);
    for (int v = 0; v < V; v++) s += exp(rz[n * V + v] - mx);
    rl[n] = log(s) + mx - rz[n * V + tg[n]];
    for (int v = 0; v < V; v++) rg[n * V + v] = scale * (exp(rz[n * V + v] - mx) / s - (v == tg[n]));
  }
  float *dz = dev_copy(z, N * V), *dl;
  int32_t *dt;
  cudaMalloc((void **)&dl, sizeof loss);
  cudaMalloc((void **)&dt, sizeof tg);
  cudaMemcpy(dt, tg, sizeof tg, cudaMemcpyHostToDevice);
  const float half = 0.5f; /* a device multiplier, like the fp16 loss scale */
  float *dhalf = dev_copy(&half, 1);
  for (int i = 0; i < N * V; i++) rg[i] *= half;
  lstmd_check_true("softmax launch", lstmd_cuda_softmax_xent(N, V, dz, dt, (float)scale, dhalf, dl, NULL) == 0);
  to_host(z, dz, N * V);
  to_host(loss, dl, N);
  lstmd_check_close("cuda softmax xent loss per row", loss, rl, N, 1e-5, 1e-5);
  lstmd_check_close("cuda softmax xent grad (times the device multiplier)", z, rg, N * V, 1e-7, 1e-4);
  cudaFree(dz); cudaFree(dl); cudaFree(dt); cudaFree(dhalf);
  free(rz); free(rg); free(z);
}

/* A device decision (kernels/optim_rules.h) from the squared norm summed on the device: here
 * the 3rd update (2 done), clipped (norm ≈ 316 > 1), cosine schedule after 1 warmup step. */
static struct lstmd_optim_state *decide_on_device(const float *dg, size_t n,
                                                  const struct lstmd_optim_rule *rule,
                                                  double sumsq_override,
                                                  struct lstmd_optim_state *host) {
  struct lstmd_optim_state st = {.applied = 2}, *ds = NULL;
  cudaMalloc((void **)&ds, sizeof st);
  cudaMemcpy(ds, &st, sizeof st, cudaMemcpyHostToDevice);
  if (sumsq_override == 0.0) lstmd_check_true("sumsq launch", lstmd_cuda_sumsq(n, dg, &ds->sumsq, NULL) == 0);
  else cudaMemcpy(&ds->sumsq, &sumsq_override, sizeof(double), cudaMemcpyHostToDevice);
  lstmd_check_true("decision launch", lstmd_cuda_optim_decide(ds, rule, NULL) == 0);
  cudaMemcpy(host, ds, sizeof *host, cudaMemcpyDeviceToHost);
  return ds;
}

static void test_optimizers(void) {
  enum { N = 100003 };
  double *rp = malloc(sizeof(double) * N), *rg = malloc(sizeof(double) * N);
  double *rm = malloc(sizeof(double) * N), *rv = malloc(sizeof(double) * N);
  float *p = rand_host(N, 1.0, rp), *g = rand_host(N, 1.0, rg), *m = rand_host(N, 0.1, rm);
  float *v = rand_host(N, 0.1, rv);
  for (int i = 0; i < N; i++) v[i] = (float)(rv[i] = fabs(rv[i]));
  float *dp = dev_copy(p, N), *dg = dev_copy(g, N), *dm = dev_copy(m, N), *dv = dev_copy(v, N);
  /* the float values the kernel is given, in double: (1 − 0.999f) is 1.3e-5 away from 1e-3
   * relatively, which alone is past exp_avg_sq's tolerance */
  const double lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f, clip = 1.0f;
  const struct lstmd_optim_rule rule = {.clip_norm = (float)clip, .lr = (float)lr, .warmup = 1,
                                        .total = 10, .cosine = 1, .beta1 = (float)b1,
                                        .beta2 = (float)b2};
  struct lstmd_optim_state st;
  struct lstmd_optim_state *ds = decide_on_device(dg, N, &rule, 0.0, &st);
  double sumsq = 0.0;
  for (int i = 0; i < N; i++) sumsq += rg[i] * rg[i];
  char what[200];
  snprintf(what, sizeof what, "device decision: norm %.9g vs %.9g, applied 3, apply 1",
           st.norm, sqrt(sumsq));
  lstmd_check_true(what, fabs(st.norm - sqrt(sumsq)) <= 1e-6 * sqrt(sumsq) && st.applied == 3 && st.apply);
  const double coef = clip / (sqrt(sumsq) + 1e-6);
  const double lr3 = lr * 0.5 * (1.0 + cos(M_PI * (2.0 - 1.0) / 9.0)); /* update 2 (0-based) */
  snprintf(what, sizeof what, "device decision: coef %.9g vs %.9g, lr %.9g vs %.9g", st.coef, coef,
           st.lr, lr3);
  lstmd_check_true(what, fabs(st.coef - coef) <= 1e-6 * coef && fabs(st.lr - lr3) <= 1e-6 * lr3);
  lstmd_check_true("adamw launch", lstmd_cuda_adamw(N, dp, dg, dm, dv, (float)b1, (float)b2, (float)eps,
                                               (float)wd, ds, NULL) == 0);
  for (int i = 0; i < N; i++) {
    const double gi = rg[i] * coef;
    rp[i] *= 1 - lr3 * wd;
    rm[i] = b1 * rm[i] + (1 - b1) * gi;
    rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
    rp[i] -= lr3 * (rm[i] / (1 - pow(b1, 3))) / (sqrt(rv[i] / (1 - pow(b2, 3))) + eps);
  }
  to_host(p, dp, N);
  to_host(m, dm, N);
  to_host(v, dv, N);
  lstmd_check_close("cuda adamw params (clipped, from the device decision)", p, rp, N, 1e-6, 1e-5);
  lstmd_check_close("cuda adamw exp_avg", m, rm, N, 1e-7, 1e-6);
  lstmd_check_close("cuda adamw exp_avg_sq", v, rv, N, 1e-8, 1e-6);
  cudaFree(ds);
  /* a non-finite norm (not fp16): no update at all */
  ds = decide_on_device(dg, N, &rule, NAN, &st);
  lstmd_check_true("device decision: NaN norm -> apply 0, first_bad 1", !st.apply && st.first_bad == 1);
  for (int i = 0; i < N; i++) rp[i] = p[i];
  lstmd_check_true("adamw launch", lstmd_cuda_adamw(N, dp, dg, dm, dv, (float)b1, (float)b2, (float)eps,
                                               (float)wd, ds, NULL) == 0);
  to_host(p, dp, N);
  lstmd_check_close("cuda adamw with apply 0 leaves the parameters", p, rp, N, 0, 0);
  cudaFree(ds);
  /* SGD, unclipped, constant lr 0.05 */
  const struct lstmd_optim_rule plain = {.lr = 0.05f, .total = 10};
  ds = decide_on_device(dg, N, &plain, 0.0, &st);
  for (int i = 0; i < N; i++) rm[i] = m[i] = 0.0f; /* momentum buffer from zero */
  float *db = dev_copy(m, N);
  for (int i = 0; i < N; i++) rp[i] = p[i];
  lstmd_check_true("sgd launch", lstmd_cuda_sgd(N, dp, dg, db, 0.9f, 0.01f, ds, NULL) == 0);
  for (int i = 0; i < N; i++) {
    rm[i] = 0.9 * rm[i] + rg[i] + 0.01 * rp[i];
    rp[i] -= 0.05 * rm[i];
  }
  to_host(p, dp, N);
  to_host(m, db, N);
  lstmd_check_close("cuda sgd params", p, rp, N, 1e-6, 1e-5);
  lstmd_check_close("cuda sgd momentum buffer", m, rm, N, 1e-6, 1e-5);
  cudaFree(dp); cudaFree(dg); cudaFree(dm); cudaFree(dv); cudaFree(ds); cudaFree(db);
  free(rp); free(rg); free(rm); free(rv); free(p); free(g); free(m); free(v);
}

/* The pipeline's boundary dropout masks are made on the GPU: bit for bit the CPU's, rows [t0, t1)
 * at their offsets, the rest untouched. */
static void test_dropout_mask(void) {
  enum { T = 7, B = 5, H = 67, t0 = 2, t1 = 6 };
  const struct lstmd_dropout_key key = {.seed = 99, .step = 12345, .col0 = 40};
  const float p = 0.3f;
  const size_t n = (size_t)T * B * H;
  float *cpu = malloc(n * sizeof(float)), *gpu = malloc(n * sizeof(float)), *d = NULL;
  for (size_t i = 0; i < n; i++) cpu[i] = -1.0f;
  lstmd_dropout_mask_rows(&key, p, 3, t0, t1, B, H, cpu);
  d = dev_copy(cpu, n);
  cudaMemset(d + (size_t)t0 * B * H, 0, (size_t)(t1 - t0) * B * H * sizeof(float));
  lstmd_check_true("dropout mask launch",
                   lstmd_cuda_dropout_mask_rows(key.seed, key.step, key.col0, p, 3, t0, t1, B, H, d,
                                                NULL) == 0);
  to_host(gpu, d, n);
  size_t dropped = 0;
  for (size_t i = 0; i < n; i++) dropped += cpu[i] == 0.0f;
  lstmd_check_true("cuda dropout mask == the CPU's, bit for bit", !memcmp(cpu, gpu, n * sizeof(float)) &&
                                                                      dropped > 0);
  cudaFree(d);
  free(cpu);
  free(gpu);
}

void lstmd_selftest_gpu_kernels(void) {
  test_dropout_mask();
  test_embedding();
  test_softmax();
  test_optimizers();
}
