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

#include "kernels/optim_rules.h"

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
 * grad_scale·(*scale_by)·(softmax − onehot) (scale_by: a device float, e.g. the fp16 loss
 * scale; NULL: 1). */
int lstmd_cuda_softmax_xent(int N, int V, float *logits, const int32_t *targets, float grad_scale,
                            const float *scale_by, float *row_loss, void *stream);
/* Distillation (kd_cpu.h's lstmd_cpu_kd_softmax_xent on the device), per row against the
 * teacher's logits [N,V]: row_loss = (1−α)·CE + α·T²·KL(softmax(zt/T) ‖ softmax(z/T)); with
 * grad_scale·(*scale_by) != 0 the logits become that times (1−α)·(softmax(z) − onehot) +
 * α·T·(softmax(z/T) − softmax(zt/T)). In float, not kd_cpu.c's double sums. */
int lstmd_cuda_kd_softmax_xent(int N, int V, float *logits, const float *teacher,
                               const int32_t *targets, float temperature, float alpha,
                               float grad_scale, const float *scale_by, float *row_loss,
                               void *stream);
/* The updates read their coefficients from the step's decision on the device
 * (kernels/optim_rules.h: apply, coef = unscale × clip factor, lr, bias corrections), so the
 * host never waits for the gradient norm; with apply 0 they leave everything as it was. */
int lstmd_cuda_adamw(size_t n, float *p, const float *g, float *m, float *v, float beta1,
                     float beta2, float eps, float weight_decay,
                     const struct lstmd_optim_state *decision, void *stream);
int lstmd_cuda_sgd(size_t n, float *p, const float *g, float *buf, float momentum,
                   float weight_decay, const struct lstmd_optim_state *decision, void *stream);
/* One thread: lstmd_optim_decide(state, rule) on the device (state: device memory). */
int lstmd_cuda_optim_decide(struct lstmd_optim_state *state, const struct lstmd_optim_rule *rule,
                            void *stream);
/* Rows [t0, t1) of the dropout mask [T,B,H] of layer `layer`, written at mask + t0·B·H: bit for
 * bit what the CPU's lstmd_dropout_mask_rows makes for the key (seed, step, col0) (model.h). */
int lstmd_cuda_dropout_mask_rows(uint64_t seed, uint64_t step, int col0, float p, int layer,
                                 int t0, int t1, int B, int H, float *mask, void *stream);
/* *sumsq (device double, zeroed by the caller) += Σ x². */
int lstmd_cuda_sumsq(size_t n, const float *x, double *sumsq, void *stream);

#ifdef __cplusplus
}
#endif

#endif
