/* dense_cuda.cu — CUDA kernels behind dense_cuda.h. One thread per element for the
 * element-wise updates (grid-stride loops), one block per row for the softmax. */
#include "dense_cuda.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>

#include "kernels/check.h"
#include "worker/model/rng.h"

/* After a kernel launch: LSTMD_OK, or LSTMD_ECUDA naming the kernel (check.h). */
#define check_launch(kernel) \
  (lstmd_cuda_failed_(cudaGetLastError(), "kernel " kernel, __FILE__, __LINE__) ? LSTMD_ECUDA : LSTMD_OK)

static unsigned blocks_for(size_t n, unsigned threads) {
  size_t b = (n + threads - 1) / threads;
  return (unsigned)(b > 65535 * 8 ? 65535 * 8 : (b ? b : 1));
}

extern "C" int lstmd_cuda_device_count(void) {
  int n = 0; /* left unwritten when there is no driver (PLATFORM.md) */
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  cudaGetLastError();
  return n;
}

__global__ void embedding_forward(int N, int E, const float *table, const int32_t *ids, float *out) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * E;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / E, e = i % E;
    out[i] = table[(size_t)ids[n] * E + e];
  }
}

__global__ void embedding_backward(int N, int E, const float *dout, const int32_t *ids, float *dtable) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * E;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / E, e = i % E;
    atomicAdd(&dtable[(size_t)ids[n] * E + e], dout[i]);
  }
}

extern "C" int lstmd_cuda_embedding_forward(int N, int E, const float *table, const int32_t *ids,
                                            float *out, void *stream) {
  embedding_forward<<<blocks_for((size_t)N * E, 256), 256, 0, (cudaStream_t)stream>>>(N, E, table, ids, out);
  return check_launch("embedding forward");
}

extern "C" int lstmd_cuda_embedding_backward(int N, int E, const float *dout, const int32_t *ids,
                                             float *dtable, void *stream) {
  embedding_backward<<<blocks_for((size_t)N * E, 256), 256, 0, (cudaStream_t)stream>>>(N, E, dout, ids, dtable);
  return check_launch("embedding backward");
}

/* Block-wide reduction of one value per thread (blockDim.x a multiple of 32, at most 1024). */
template <bool kMax>
__device__ float block_reduce(float v, float *shared) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_down_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? shared[threadIdx.x] : (kMax ? -INFINITY : 0.0f);
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) {
      float w = __shfl_down_sync(0xffffffffu, v, o);
      v = kMax ? fmaxf(v, w) : v + w;
    }
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

__global__ void softmax_xent(int V, float *logits, const int32_t *targets, float grad_scale,
                             const float *scale_by, float *row_loss) {
  __shared__ float shared[32];
  float *z = logits + (size_t)blockIdx.x * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
  mx = block_reduce<true>(mx, shared);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(z[v] - mx);
  sum = block_reduce<false>(sum, shared);
  const float logsum = logf(sum) + mx;
  const int t = targets[blockIdx.x];
  if (threadIdx.x == 0) row_loss[blockIdx.x] = logsum - z[t];
  __syncthreads();
  if (scale_by) grad_scale *= *scale_by;
  if (grad_scale != 0.0f)
    for (int v = threadIdx.x; v < V; v += blockDim.x)
      z[v] = grad_scale * (expf(z[v] - logsum) - (v == t ? 1.0f : 0.0f));
}

/* kd_cpu.h's lstmd_cpu_kd_softmax_xent, one block per row: the hard term as softmax_xent, the
 * soft term's log-sum-exps at temperature T max-shifted; every read of z is reduced before the
 * row is overwritten with its gradient. */
__global__ void kd_softmax_xent(int V, float *z_all, const float *zt_all, const int32_t *targets,
                                float temperature, float alpha, float grad_scale,
                                const float *scale_by, float *row_loss) {
  __shared__ float shared[32];
  float *z = z_all + (size_t)blockIdx.x * V;
  const float *zt = zt_all + (size_t)blockIdx.x * V;
  const float inv_t = 1.0f / temperature;
  float mx = -INFINITY, mxs = -INFINITY, mxt = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    mx = fmaxf(mx, z[v]);
    mxt = fmaxf(mxt, zt[v] * inv_t);
  }
  mx = block_reduce<true>(mx, shared);
  mxt = block_reduce<true>(mxt, shared);
  mxs = mx * inv_t; /* T > 0: the max of z/T is max(z)/T */
  float sum = 0.0f, sums = 0.0f, sumt = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    sum += expf(z[v] - mx);
    sums += expf(z[v] * inv_t - mxs);
    sumt += expf(zt[v] * inv_t - mxt);
  }
  sum = block_reduce<false>(sum, shared);
  sums = block_reduce<false>(sums, shared);
  sumt = block_reduce<false>(sumt, shared);
  const float logsum = logf(sum) + mx, ls_s = logf(sums) + mxs, ls_t = logf(sumt) + mxt;
  float kl = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float log_pt = zt[v] * inv_t - ls_t, log_ps = z[v] * inv_t - ls_s;
    kl += expf(log_pt) * (log_pt - log_ps);
  }
  kl = block_reduce<false>(kl, shared);
  const int t = targets[blockIdx.x];
  if (threadIdx.x == 0)
    row_loss[blockIdx.x] = (1.0f - alpha) * (logsum - z[t]) + alpha * temperature * temperature * kl;
  __syncthreads();
  if (scale_by) grad_scale *= *scale_by;
  if (grad_scale == 0.0f) return;
  const float hard = (1.0f - alpha) * grad_scale, soft = alpha * temperature * grad_scale;
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    z[v] = hard * (expf(z[v] - logsum) - (v == t ? 1.0f : 0.0f)) +
           soft * (expf(z[v] * inv_t - ls_s) - expf(zt[v] * inv_t - ls_t));
}

extern "C" int lstmd_cuda_kd_softmax_xent(int N, int V, float *logits, const float *teacher,
                                          const int32_t *targets, float temperature, float alpha,
                                          float grad_scale, const float *scale_by,
                                          float *row_loss, void *stream) {
  if (N > 0)
    kd_softmax_xent<<<N, 128, 0, (cudaStream_t)stream>>>(V, logits, teacher, targets, temperature,
                                                           alpha, grad_scale, scale_by, row_loss);
  return check_launch("distillation softmax cross-entropy");
}

extern "C" int lstmd_cuda_softmax_xent(int N, int V, float *logits, const int32_t *targets,
                                       float grad_scale, const float *scale_by, float *row_loss,
                                       void *stream) {
  if (N > 0)
    softmax_xent<<<N, 128, 0, (cudaStream_t)stream>>>(V, logits, targets, grad_scale, scale_by,
                                                        row_loss);
  return check_launch("softmax cross-entropy");
}

__global__ void adamw(size_t n, float *p, const float *g, float *m, float *v, float beta1,
                      float beta2, float eps, float weight_decay,
                      const struct lstmd_optim_state *d) {
  if (!d->apply) return;
  const float coef = d->coef, step_size = d->lr / d->bc1, bc2_sqrt = d->bc2_sqrt;
  const float decay = 1.0f - d->lr * weight_decay;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float gi = g[i] * coef;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

extern "C" int lstmd_cuda_adamw(size_t n, float *p, const float *g, float *m, float *v,
                                float beta1, float beta2, float eps, float weight_decay,
                                const struct lstmd_optim_state *decision, void *stream) {
  adamw<<<blocks_for(n, 256), 256, 0, (cudaStream_t)stream>>>(n, p, g, m, v, beta1, beta2, eps,
                                                               weight_decay, decision);
  return check_launch("AdamW");
}

__global__ void sgd(size_t n, float *p, const float *g, float *buf, float momentum,
                    float weight_decay, const struct lstmd_optim_state *d) {
  if (!d->apply) return;
  const float coef = d->coef, lr = d->lr;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float dg = g[i] * coef + weight_decay * p[i];
    float b = momentum * buf[i] + dg;
    buf[i] = b;
    p[i] -= lr * b;
  }
}

extern "C" int lstmd_cuda_sgd(size_t n, float *p, const float *g, float *buf, float momentum,
                              float weight_decay, const struct lstmd_optim_state *decision,
                              void *stream) {
  sgd<<<blocks_for(n, 256), 256, 0, (cudaStream_t)stream>>>(n, p, g, buf, momentum, weight_decay,
                                                             decision);
  return check_launch("SGD");
}

__global__ void optim_decide(struct lstmd_optim_state *s, struct lstmd_optim_rule r) {
  lstmd_optim_decide(s, &r);
}

extern "C" int lstmd_cuda_optim_decide(struct lstmd_optim_state *state,
                                       const struct lstmd_optim_rule *rule, void *stream) {
  optim_decide<<<1, 1, 0, (cudaStream_t)stream>>>(state, *rule);
  return check_launch("optimizer decision");
}

__global__ void sumsq(size_t n, const float *x, double *out) {
  __shared__ double partial[256];
  double s = 0.0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s += (double)x[i] * x[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) partial[threadIdx.x] += partial[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, partial[0]);
}

extern "C" int lstmd_cuda_sumsq(size_t n, const float *x, double *out, void *stream) {
  unsigned b = blocks_for(n, 256);
  sumsq<<<b > 1024 ? 1024 : b, 256, 0, (cudaStream_t)stream>>>(n, x, out);
  return check_launch("squared norm");
}

/* One thread per mask element; the row hash is recomputed per element (cheaper than a pass). */
__global__ void dropout_mask_rows(uint64_t base, uint32_t threshold, float keep, int t0, size_t n,
                                  int B, int col0, int H, float *mask) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t r = i / H;
    const int j = (int)(i % H), t = t0 + (int)(r / B), b = (int)(r % B);
    mask[i] = lstmd_dropout_dropped(lstmd_dropout_row(base, t, col0 + b), j, threshold) ? 0.0f : keep;
  }
}

extern "C" int lstmd_cuda_dropout_mask_rows(uint64_t seed, uint64_t step, int col0, float p,
                                            int layer, int t0, int t1, int B, int H, float *mask,
                                            void *stream) {
  if (t1 <= t0) return LSTMD_OK;
  const float keep = 1.0f / (1.0f - p); /* as the CPU computes it, in float */
  const uint32_t threshold = (uint32_t)(p * 16777216.0f);
  const size_t n = (size_t)(t1 - t0) * B * H;
  dropout_mask_rows<<<blocks_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
      lstmd_dropout_base(seed, step, layer), threshold, keep, t0, n, B, col0, H,
      mask + (size_t)t0 * B * H);
  return check_launch("dropout_mask_rows");
}
