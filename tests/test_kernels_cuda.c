/* test_kernels_cuda.c — every CUDA kernel of kernels/cuda against a float64 CPU reference.
 * Exits 77 (ctest: skipped) where no CUDA device is usable. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/dense_cuda.h"
#include "check.h"

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
  return test_rand_floats(&g_seed, n, scale, copy);
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
  check_true("embedding forward launch", lstmd_cuda_embedding_forward(N, E, dt, dids, dout, NULL) == 0);
  to_host(o, dout, N * E);
  for (int n = 0; n < N; n++)
    for (int e = 0; e < E; e++) ro[n * E + e] = rt[ids[n] * E + e];
  check_close("cuda embedding forward", o, ro, N * E, 0, 0);
  double *rg = calloc(V * E, sizeof(double)), *rdo = malloc(sizeof(double) * N * E);
  float *g = rand_host(N * E, 1.0, rdo), *dg, *gt = calloc(V * E, sizeof(float));
  float *dgrad = dev_copy(g, N * E);
  cudaMalloc((void **)&dg, sizeof(float) * V * E);
  cudaMemset(dg, 0, sizeof(float) * V * E);
  check_true("embedding backward launch", lstmd_cuda_embedding_backward(N, E, dgrad, dids, dg, NULL) == 0);
  to_host(gt, dg, V * E);
  for (int n = 0; n < N; n++)
    for (int e = 0; e < E; e++) rg[ids[n] * E + e] += rdo[n * E + e];
  check_close("cuda embedding backward", gt, rg, V * E, 1e-5, 1e-5);
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
  check_true("softmax launch", lstmd_cuda_softmax_xent(N, V, dz, dt, (float)scale, dl, NULL) == 0);
  to_host(z, dz, N * V);
  to_host(loss, dl, N);
  check_close("cuda softmax xent loss per row", loss, rl, N, 1e-5, 1e-5);
  check_close("cuda softmax xent grad", z, rg, N * V, 1e-7, 1e-4);
  cudaFree(dz); cudaFree(dl); cudaFree(dt);
  free(rz); free(rg); free(z);
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
  const double lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  check_true("adamw launch", lstmd_cuda_adamw(N, dp, dg, dm, dv, (float)lr, (float)b1, (float)b2,
                                               (float)eps, (float)wd, 3, NULL) == 0);
  for (int i = 0; i < N; i++) {
    rp[i] *= 1 - lr * wd;
    rm[i] = b1 * rm[i] + (1 - b1) * rg[i];
    rv[i] = b2 * rv[i] + (1 - b2) * rg[i] * rg[i];
    rp[i] -= lr * (rm[i] / (1 - pow(b1, 3))) / (sqrt(rv[i] / (1 - pow(b2, 3))) + eps);
  }
  to_host(p, dp, N);
  to_host(m, dm, N);
  to_host(v, dv, N);
  check_close("cuda adamw params", p, rp, N, 1e-6, 1e-5);
  check_close("cuda adamw exp_avg", m, rm, N, 1e-7, 1e-6);
  check_close("cuda adamw exp_avg_sq", v, rv, N, 1e-8, 1e-6);
  double *dsum, sum = 0, ref = 0;
  cudaMalloc((void **)&dsum, sizeof(double));
  cudaMemset(dsum, 0, sizeof(double));
  check_true("sumsq launch", lstmd_cuda_sumsq(N, dg, dsum, NULL) == 0);
  cudaMemcpy(&sum, dsum, sizeof sum, cudaMemcpyDeviceToHost);
  for (int i = 0; i < N; i++) ref += rg[i] * rg[i];
  float sumf = (float)sum;
  check_close("cuda sumsq", &sumf, &ref, 1, 0, 1e-6);
  for (int i = 0; i < N; i++) rm[i] = m[i] = 0.0f; /* momentum buffer from zero */
  float *db = dev_copy(m, N);
  for (int i = 0; i < N; i++) rp[i] = p[i];
  check_true("sgd launch", lstmd_cuda_sgd(N, dp, dg, db, 0.05f, 0.9f, 0.01f, NULL) == 0);
  for (int i = 0; i < N; i++) {
    rm[i] = 0.9 * rm[i] + rg[i] + 0.01 * rp[i];
    rp[i] -= 0.05 * rm[i];
  }
  to_host(p, dp, N);
  to_host(m, db, N);
  check_close("cuda sgd params", p, rp, N, 1e-6, 1e-5);
  check_close("cuda sgd momentum buffer", m, rm, N, 1e-6, 1e-5);
  cudaFree(dp); cudaFree(dg); cudaFree(dm); cudaFree(dv); cudaFree(dsum); cudaFree(db);
  free(rp); free(rg); free(rm); free(rv); free(p); free(g); free(m); free(v);
}

int main(void) {
  if (lstmd_cuda_device_count() == 0) {
    printf("test_kernels_cuda: no CUDA device: skipped\n");
    return 77;
  }
  test_embedding();
  test_softmax();
  test_optimizers();
  cudaError_t e = cudaDeviceSynchronize();
  check_true("no CUDA error at the end", e == cudaSuccess);
  return check_summary("test_kernels_cuda");
}
