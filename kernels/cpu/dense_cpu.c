/* dense_cpu.c — embedding, linear, losses, element-wise helpers and optimizer updates (CPU). */
#include "dense_cpu.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "fastmath.h"
#include "isa_variants.h"

void lstmd_cpu_embedding_forward(int N, int E, const float *table, const int32_t *ids,
                                 float *out) {
  for (int n = 0; n < N; n++)
    memcpy(out + (size_t)n * E, table + (size_t)ids[n] * E, (size_t)E * sizeof(float));
}

/* Compiled per ISA: the folded embedding (embed_fold_cpu.c) sums its [N, 4H] gate gradients
 * into vocabulary rows with it, 16 MiB a layer on the benchmark model. Element-wise adds: the
 * same bits at every vector width. */
BODY void embedding_backward_body(int N, int E, const float *dout, const int32_t *ids,
                                  float *dtable) {
  for (int n = 0; n < N; n++) {
    float *row = dtable + (size_t)ids[n] * E;
    const float *d = dout + (size_t)n * E;
#pragma omp simd
    for (int e = 0; e < E; e++) row[e] += d[e];
  }
}
ISA_VARIANTS(embedding_backward,
             (int N, int E, const float *dout, const int32_t *ids, float *dtable),
             (N, E, dout, ids, dtable))

void lstmd_cpu_embedding_backward(int N, int E, const float *dout, const int32_t *ids,
                                  float *dtable) {
  embedding_backward(N, E, dout, ids, dtable);
}

void lstmd_cpu_linear_forward(int N, int In, int O, const float *x, const float *w, const float *b,
                              float *y) {
  for (int n = 0; n < N; n++) memcpy(y + (size_t)n * O, b, (size_t)O * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, O, In, 1.0f, x, In, w, In, 1.0f, y, O);
}

void lstmd_cpu_linear_backward(int N, int In, int O, const float *x, const float *w,
                               const float *dy, float *dw, float *db, float *dx) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, In, N, 1.0f, dy, O, x, In, 1.0f, dw, In);
  for (int n = 0; n < N; n++) {
    const float *row = dy + (size_t)n * O;
    for (int o = 0; o < O; o++) db[o] += row[o];
  }
  if (dx) lstmd_cpu_linear_backward_input(N, In, O, w, dy, dx);
}

void lstmd_cpu_linear_backward_input(int N, int In, int O, const float *w, const float *dy,
                                     float *dx) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, In, O, 1.0f, dy, O, w, In, 0.0f, dx, In);
}

/* A row's log Σ_v exp(z[v]): the max in float, the shifted exponentials in float (fastmath.h, so
 * the loop vectorizes), their sum and its log in double. Compiled per ISA: the sum's order, and
 * so its last bits, follow the vector width. One glibc double exp per logit, twice per logit with
 * the gradient, had taken ~1.4 ms of each thread's step on the benchmark model (V = 109, 2,048
 * rows); this takes ~0.3 ms. */
BODY void logsumexp_body(int V, const float *z, double *out) {
  float mx = z[0];
#pragma omp simd reduction(max : mx)
  for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; v++) sum += (double)lstmd_expf(z[v] - mx);
  *out = log(sum) + mx;
}
ISA_VARIANTS(logsumexp, (int V, const float *z, double *out), (V, z, out))

/* z[v] = scale·softmax(z)[v] from the row's log-sum-exp; the exponent is rounded to float after
 * the subtraction in double, so a large logsum costs no precision. Below −87 lstmd_expf clamps
 * (exp(−87) = 1.6e-38): a class that far below gets 0, not a subnormal gradient for the head's
 * GEMMs (subnormal operands are slow on some x86 cores). NaN stays NaN. */
BODY void softmax_scaled_body(int V, float *z, double logsum, float scale) {
#pragma omp simd
  for (int v = 0; v < V; v++) {
    const float x = (float)((double)z[v] - logsum);
    z[v] = x < -87.0f ? 0.0f : scale * lstmd_expf(x);
  }
}
ISA_VARIANTS(softmax_scaled, (int V, float *z, double logsum, float scale), (V, z, logsum, scale))

double lstmd_cpu_logsumexp(int V, const float *z) {
  double out;
  logsumexp(V, z, &out);
  return out;
}

void lstmd_cpu_softmax_scaled(int V, float *z, double logsum, float scale) {
  softmax_scaled(V, z, logsum, scale);
}

double lstmd_cpu_softmax_xent(int N, int V, float *logits, const int32_t *targets,
                              float grad_scale) {
  double total = 0.0;
  for (int n = 0; n < N; n++) {
    float *z = logits + (size_t)n * V;
    const double logsum = lstmd_cpu_logsumexp(V, z);
    total += logsum - z[targets[n]];
    if (grad_scale != 0.0f) {
      softmax_scaled(V, z, logsum, grad_scale);
      z[targets[n]] -= grad_scale;
    }
  }
  return total;
}

double lstmd_cpu_mse(size_t N, float *pred, const float *target, float grad_scale) {
  double total = 0.0;
  for (size_t i = 0; i < N; i++) {
    double diff = (double)pred[i] - target[i];
    total += diff * diff;
    if (grad_scale != 0.0f) pred[i] = grad_scale * 2.0f * (float)diff;
  }
  return total;
}

void lstmd_cpu_mul_inplace(size_t n, float *x, const float *m) {
  for (size_t i = 0; i < n; i++) x[i] *= m[i];
}

/* Eight running sums, element i into sum i % 8, added in order at the end: the same order on
 * every ISA (8 doubles are one zmm or two ymm), and no chain of dependent adds. A single running
 * sum waited out the add latency at every element: ~2 ms a step for the benchmark model's 3.3 M
 * gradients, on one thread while the rank's others idled (the norm is computed on one). */
BODY double sumsq_body(size_t n, const float *x) {
  double lane[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) lane[j] += (double)x[i + j] * x[i + j];
  double s = 0.0;
  for (int j = 0; j < 8; j++) s += lane[j];
  for (; i < n; i++) s += (double)x[i] * x[i];
  return s;
}
__attribute__((target("avx512f"))) static double sumsq_avx512(size_t n, const float *x) {
  return sumsq_body(n, x);
}
__attribute__((target("avx2,fma"))) static double sumsq_avx2(size_t n, const float *x) {
  return sumsq_body(n, x);
}

double lstmd_cpu_sumsq(size_t n, const float *x) {
  switch (lstmd_cpu_isa()) {
    case LSTMD_ISA_AVX512: return sumsq_avx512(n, x);
    case LSTMD_ISA_AVX2: return sumsq_avx2(n, x);
    default: return sumsq_body(n, x);
  }
}

void lstmd_cpu_scale(size_t n, float *x, float s) {
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* The AdamW element loop, compiled per ISA: at 3.3 M parameters (the CPU benchmark model) the
 * scalar loop (one sqrtss and two divss an element) took ~9.5 ms a step on one thread while the
 * pool's other thread waited; vectorized, ~3 ms (avx2 and avx512 alike). sqrtf vectorizes only
 * because lstmd_kernels builds with -fno-math-errno (CMakeLists.txt); v >= 0 sets no errno. */
BODY void adamw_body(size_t n, float *p, const float *g, float *m, float *v, float beta1,
                     float beta2, float eps, float bc2_sqrt, float step_size, float decay) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * m[i] / denom;
  }
}
ISA_VARIANTS(adamw,
             (size_t n, float *p, const float *g, float *m, float *v, float beta1, float beta2,
              float eps, float bc2_sqrt, float step_size, float decay),
             (n, p, g, m, v, beta1, beta2, eps, bc2_sqrt, step_size, decay))

void lstmd_cpu_adamw(size_t n, float *p, const float *g, float *m, float *v, float lr, float beta1,
                     float beta2, float eps, float weight_decay, long step) {
  const float bc1 = 1.0f - (float)pow(beta1, (double)step);
  const float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)step));
  const float step_size = lr / bc1, decay = 1.0f - lr * weight_decay;
  adamw(n, p, g, m, v, beta1, beta2, eps, bc2_sqrt, step_size, decay);
}

void lstmd_cpu_sgd(size_t n, float *p, const float *g, float *buf, float lr, float momentum,
                   float weight_decay) {
  for (size_t i = 0; i < n; i++) {
    float d = g[i] + weight_decay * p[i];
    buf[i] = momentum * buf[i] + d;
    p[i] -= lr * buf[i];
  }
}
