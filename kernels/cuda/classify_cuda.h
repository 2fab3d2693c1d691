/* classify_cuda.h — the non-recurrent pieces of the sequence classifier (worker/model/classify.h)
 * on a CUDA device: cuDNN's sequence lengths, pooling of the top layer's outputs over each
 * column's valid steps (last | mean | max) and its adjoint, the masked softmax cross-entropy over
 * the classes, and the embedding gradient of the valid steps only. The same contracts as
 * classify.c's static helpers, on device pointers, enqueued on `stream` (a cudaStream_t). Every
 * function returns 0 or LSTMD_ECUDA after printing CUDA's error text.
 * Checked against the CPU classifier (classify.c) by `lstmd selftest --gpu --only classify`
 * (worker/selftest/gpu_classify.c), which passed on an H200 (2026-11-27). */
#ifndef LSTMD_CLASSIFY_CUDA_H
#define LSTMD_CLASSIFY_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cudnn_len[b] = max(len[b], 1) for b < B: cuDNN is given at least one step per column (an empty
 * column runs one step on padding; pooling, loss and gradients ignore it, see model_cuda.c). */
int lstmd_cuda_clf_seq_lengths(int B, const int32_t *len, int32_t *cudnn_len, void *stream);

/* y [T,B,D·H] (sequence time; forward direction in the first H of each row, reverse in the
 * second when D = 2) → pooled [B,D·H] over steps t < len[b] (enum lstmd_pool_kind):
 *   last: the forward half at t = len−1, the reverse half at t = 0 (each direction's final state);
 *   mean: the average (summed in double);  max: the largest (the first on ties).
 * argmax [B,D·H] keeps the step each value came from (last, max). Empty columns pool to 0. */
int lstmd_cuda_clf_pool_forward(int T, int B, int H, int D, int pool, const float *y,
                                const int32_t *len, float *pooled, int32_t *argmax, void *stream);
/* dy [T,B,D·H] (every element written) = the pooling's adjoint applied to dpooled [B,D·H]:
 * mean spreads dpooled/len over the valid steps, last and max put it at argmax; 0 elsewhere. */
int lstmd_cuda_clf_pool_backward(int T, int B, int H, int D, int pool, const float *dpooled,
                                 const int32_t *len, const int32_t *argmax, float *dy,
                                 void *stream);
/* Per column b of logits [B,C]: row_loss[b] = −log softmax(z)[labels[b]] (computed in double),
 * or 0 for an empty column (len[b] == 0, whose logits row is zeroed), or NAN for a label
 * outside 0..C−1. If grad_scale != 0 the row becomes grad_scale·(*scale_by)·(softmax − onehot)
 * (scale_by: a device float, the fp16 loss scale; NULL: 1); empty columns' rows stay 0. */
int lstmd_cuda_clf_softmax_xent(int B, int C, float *logits, const int32_t *labels,
                                const int32_t *len, float grad_scale, const float *scale_by,
                                float *row_loss, void *stream);
/* dtable[ids[t,b],:] += dx[t,b,:] for the valid steps t < len[b] only (what cuDNN leaves in the
 * padding rows of dx is never read). Atomics: the summation order is not fixed. */
int lstmd_cuda_clf_embedding_backward(int T, int B, int E, const float *dx, const int32_t *ids,
                                      const int32_t *len, float *dtable, void *stream);

#ifdef __cplusplus
}
#endif

#endif
