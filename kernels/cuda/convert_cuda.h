/* convert_cuda.h — the glue kernels of the GPU model: casts between fp32 and fp16/bf16,
 * segment copies between the flat fp32 parameter buffer and cuDNN's opaque weight space, loss
 * reductions (sum of per-row losses, fused MSE loss + gradient) and scaling. Device pointers,
 * enqueued on `stream` (a cudaStream_t; NULL = the default stream). Every function returns 0 or
 * LSTMD_ECUDA after printing CUDA's error text. Float64 references: tests/test_convert_cuda.c. */
#ifndef LSTMD_CONVERT_CUDA_H
#define LSTMD_CONVERT_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum lstmd_cuda_dtype { LSTMD_DT_F32 = 0, LSTMD_DT_F16 = 1, LSTMD_DT_BF16 = 2 };

/* Bytes of one element. */
static inline size_t lstmd_dtype_bytes(int dtype) { return dtype == LSTMD_DT_F32 ? 4 : 2; }

/* x[i] *= mask[i] for i < n, x of x_type, computed in fp32 and rounded once (the dropout of a
 * pipeline stage boundary: mask holds 0 or 1/(1−p)). */
int lstmd_cuda_mul(size_t n, void *x, int x_type, const float *mask, void *stream);
/* One contiguous piece: `count` elements from src[src_offset] to dst[dst_offset]. */
struct lstmd_cuda_segment {
  size_t src_offset, dst_offset, count;
};

/* dst[i] = (dst_type) (scale · (2u − 1)) for i < n, u = the top 24 bits of splitmix64(seed·φ + i)
 * over 2^24: a fixed pseudo-random fill in [−scale, scale) without a generator's state, for
 * timing trials on data that is not zero (a GPU runs zeros faster: lower power, higher clocks). */
int lstmd_cuda_fill_hash(size_t n, void *dst, int dst_type, float scale, unsigned long long seed,
                         void *stream);
/* dst[i] = (dst_type) src[i] for i < n (round to nearest even; fp16 overflow gives ±inf). */
int lstmd_cuda_cast(size_t n, const void *src, int src_type, void *dst, int dst_type,
                    void *stream);
/* For every segment s of segs[0..n_segs) (a DEVICE array): dst[s.dst_offset + j] =
 * (or += when accumulate; dst must then be fp32) src[s.src_offset + j], j < s.count, with a cast
 * between the types. max_count: the largest s.count (sizes the grid). */
int lstmd_cuda_copy_segments(int n_segs, const struct lstmd_cuda_segment *segs, size_t max_count,
                             const void *src, int src_type, void *dst, int dst_type,
                             int accumulate, void *stream);
/* *acc (device double) += Σ x[i]. */
int lstmd_cuda_sum(size_t n, const float *x, double *acc, void *stream);
/* *acc += Σ (pred − target)²; if grad_scale != 0, pred becomes
 * grad_scale·(*scale_by)·2·(pred − target) (scale_by: a device float; NULL: 1). */
int lstmd_cuda_mse(size_t n, float *pred, const float *target, float grad_scale,
                   const float *scale_by, double *acc, void *stream);

/* Distillation for series (kd_cpu.h's lstmd_cpu_kd_mse): *acc += Σ (1−α)(pred − target)² +
 * α(pred − teacher)²; if grad_scale·(*scale_by) != 0, pred becomes that times
 * 2·((1−α)(pred − target) + α(pred − teacher)). */
int lstmd_cuda_kd_mse(size_t n, float *pred, const float *teacher, const float *target,
                      float alpha, float grad_scale, const float *scale_by, double *acc,
                      void *stream);
#ifdef __cplusplus
}
#endif

#endif
