/* convert_cuda.cu — kernels behind convert_cuda.h: grid-stride loops, one value per thread;
 * reductions go through a block sum in double and one atomicAdd per block. */
#include "convert_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/check.h"

/* After a kernel launch: LSTMD_OK, or LSTMD_ECUDA naming the kernel (check.h). */
#define check_launch(kernel) \
  (lstmd_cuda_failed_(cudaGetLastError(), "kernel " kernel, __FILE__, __LINE__) ? LSTMD_ECUDA : LSTMD_OK)

static unsigned blocks_for(size_t n, unsigned threads, unsigned cap) {
  size_t b = (n + threads - 1) / threads;
  return (unsigned)(b > cap ? cap : (b ? b : 1));
}

__device__ __forceinline__ float load(const void *p, int type, size_t i) {
  if (type == LSTMD_DT_F16) return __half2float(((const __half *)p)[i]);
  if (type == LSTMD_DT_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
  return ((const float *)p)[i];
}

__device__ __forceinline__ void store(void *p, int type, size_t i, float v) {
  if (type == LSTMD_DT_F16) ((__half *)p)[i] = __float2half_rn(v);
  else if (type == LSTMD_DT_BF16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
  else ((float *)p)[i] = v;
}

__global__ void cast_kernel(size_t n, const void *src, int st, void *dst, int dt) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    store(dst, dt, i, load(src, st, i));
}

extern "C" int lstmd_cuda_cast(size_t n, const void *src, int src_type, void *dst, int dst_type,
                               void *stream) {
  if (n == 0) return LSTMD_OK;
  cast_kernel<<<blocks_for(n, 256, 65535u * 8), 256, 0, (cudaStream_t)stream>>>(n, src, src_type, dst, dst_type);
  return check_launch("cast");
}

__global__ void fill_hash_kernel(size_t n, void *dst, int dt, float scale, unsigned long long seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned long long z = seed * 0x9E3779B97F4A7C15ull + i;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = (float)(z >> 40) * (1.0f / 16777216.0f); /* 24 bits: exact */
    store(dst, dt, i, scale * (2.0f * u - 1.0f));
  }
}

extern "C" int lstmd_cuda_fill_hash(size_t n, void *dst, int dst_type, float scale,
                                    unsigned long long seed, void *stream) {
  if (n == 0) return LSTMD_OK;
  fill_hash_kernel<<<blocks_for(n, 256, 65535u * 8), 256, 0, (cudaStream_t)stream>>>(n, dst, dst_type, scale, seed);
  return check_launch("hash fill");
}

__global__ void mul_kernel(size_t n, void *x, int xt, const float *mask) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    store(x, xt, i, load(x, xt, i) * mask[i]);
}

extern "C" int lstmd_cuda_mul(size_t n, void *x, int x_type, const float *mask, void *stream) {
  if (n == 0) return LSTMD_OK;
  mul_kernel<<<blocks_for(n, 256, 65535u * 8), 256, 0, (cudaStream_t)stream>>>(n, x, x_type, mask);
  return check_launch("mask multiply");
}

/* blockIdx.y = segment; x blocks stride over the segment. */
__global__ void segments_kernel(const lstmd_cuda_segment *segs, const void *src, int st, void *dst,
                                int dt, int accumulate) {
  const lstmd_cuda_segment s = segs[blockIdx.y];
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < s.count; j += (size_t)gridDim.x * blockDim.x) {
    float v = load(src, st, s.src_offset + j);
    if (accumulate) ((float *)dst)[s.dst_offset + j] += v;
    else store(dst, dt, s.dst_offset + j, v);
  }
}

extern "C" int lstmd_cuda_copy_segments(int n_segs, const struct lstmd_cuda_segment *segs,
                                        size_t max_count, const void *src, int src_type,
                                        void *dst, int dst_type, int accumulate, void *stream) {
  if (n_segs <= 0) return LSTMD_OK;
  if (n_segs > 65535 || (accumulate && dst_type != LSTMD_DT_F32)) {
    lstmd_errorf("copy_segments: %d segments (max 65535), accumulate into type %d", n_segs, dst_type);
    return LSTMD_EINVAL;
  }
  dim3 grid(blocks_for(max_count, 256, 4096), (unsigned)n_segs);
  segments_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(segs, src, src_type, dst, dst_type, accumulate);
  return check_launch("segment copy");
}

/* Sum of one double per thread over the block (blockDim.x == 256). */
__device__ double block_sum(double v) {
  __shared__ double part[256];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  return part[0];
}

__global__ void sum_kernel(size_t n, const float *x, double *acc) {
  double s = 0.0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s += x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(acc, s);
}

extern "C" int lstmd_cuda_sum(size_t n, const float *x, double *acc, void *stream) {
  if (n == 0) return LSTMD_OK;
  sum_kernel<<<blocks_for(n, 256, 1024), 256, 0, (cudaStream_t)stream>>>(n, x, acc);
  return check_launch("sum");
}

__global__ void mse_kernel(size_t n, float *pred, const float *target, float grad_scale,
                           const float *scale_by, double *acc) {
  double s = 0.0;
  if (scale_by) grad_scale *= *scale_by;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float d = pred[i] - target[i];
    s += (double)d * d;
    if (grad_scale != 0.0f) pred[i] = grad_scale * 2.0f * d;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(acc, s);
}

__global__ void kd_mse_kernel(size_t n, float *pred, const float *teacher, const float *target,
                              float alpha, float grad_scale, const float *scale_by, double *acc) {
  double s = 0.0;
  if (scale_by) grad_scale *= *scale_by;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float dy = pred[i] - target[i], dt = pred[i] - teacher[i];
    s += (1.0 - alpha) * ((double)dy * dy) + (double)alpha * ((double)dt * dt);
    if (grad_scale != 0.0f) pred[i] = grad_scale * 2.0f * ((1.0f - alpha) * dy + alpha * dt);
  }
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(acc, s);
}

extern "C" int lstmd_cuda_kd_mse(size_t n, float *pred, const float *teacher, const float *target,
                                 float alpha, float grad_scale, const float *scale_by, double *acc,
                                 void *stream) {
  if (n == 0) return LSTMD_OK;
  kd_mse_kernel<<<blocks_for(n, 256, 1024), 256, 0, (cudaStream_t)stream>>>(n, pred, teacher, target,
                                                                           alpha, grad_scale,
                                                                           scale_by, acc);
  return check_launch("distillation mse");
}

extern "C" int lstmd_cuda_mse(size_t n, float *pred, const float *target, float grad_scale,
                              const float *scale_by, double *acc, void *stream) {
  if (n == 0) return LSTMD_OK;
  mse_kernel<<<blocks_for(n, 256, 1024), 256, 0, (cudaStream_t)stream>>>(n, pred, target, grad_scale,
                                                                        scale_by, acc);
  return check_launch("mse");
}
