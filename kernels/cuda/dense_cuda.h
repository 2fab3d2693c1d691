/* dense_cuda.h — the non-recurrent pieces of the model on a CUDA device: embedding gather and its
 * scatter-add gradient, fused softmax cross-entropy (loss and gradient in one pass), AdamW and SGD
 * updates, and the squared norm for clipping. The same contracts as kernels/cpu/dense_cpu.h, on
 * device pointers, enqueued on `stream` (a cudaStream_t; NULL = the default stream). Every
 * function returns 0 or LSTMD_ECUDA after printing CUDA's error text.
 * Not yet verified on a GPU: tests/test_kernels_cuda.c checks them against float64 references
 * and is skipped (exit 77) where no device is present. */
#ifndef LSTMD_DENSE_CUDA_H
#define LSTMD_DENSE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no driver or device (never an error). */
int lstmd_cuda_device_count(void);

int lstmd_cuda_embedding_forward(int N, int E, const float *table, const int32_t *ids, float *out,
                                 void *stream);
/* dtable[ids[n],:] += dout[n,:]; uses atomics, so the summation order is not fixed. */
int lstmd_cuda_embedding_backward(int N, int E, const float *dout, const int32_t *ids,
                                  float *dtable, void *stream);
/* Per-row loss into row_loss [N] (nats); if grad_scale != 0 logits become
 * grad_scale·(softmax − onehot). */
int lstmd_cuda_softmax_xent(int N, int V, float *logits, const int32_t *targets, float grad_scale,
                            float *row_loss, void *stream);
int lstmd_cuda_adamw(size_t n, float *p, const float *g, float *m, float *v, float lr, float beta1,
                     float beta2, float eps, float weight_decay, long step, void *stream);
int lstmd_cuda_sgd(size_t n, float *p, const float *g, float *buf, float lr, float momentum,
                   float weight_decay, void *stream);
/* *sumsq (device double, zeroed by the caller) += Σ x². */
int lstmd_cuda_sumsq(size_t n, const float *x, double *sumsq, void *stream);

#ifdef __cplusplus
}
#endif

#endif
