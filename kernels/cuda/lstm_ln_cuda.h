/* lstm_ln_cuda.h — the layer-normalised LSTM stack (model.layer_norm) on a CUDA device: cuDNN
 * has no such mode, so each layer is cuBLAS GEMMs (one for the inputs of all T steps, one per
 * step for the recurrence) and fused kernels for the normalisations and the gates, the GPU twin
 * of kernels/cpu/lstm_ln_cpu.h with the same semantics (TensorFlow Addons' LayerNormLSTMCell):
 *   z  = LN_ih(x·W_ihᵀ) + LN_hh(h_prev·W_hhᵀ) + b_ih + b_hh        (LN over the 4H of a row)
 *   c~ = f⊙c_prev + i⊙g;   c = LN_c(c~) (over H; carried);   h = o⊙tanh(c)
 * fp32 only (TF32 in the GEMMs when allowed), no dropout between layers (train_setup.c refuses
 * both for layer_norm on the GPU). The weights are read from, and their gradients ADDED to, the
 * flat fp32 buffers of worker/model/model.h: no separate weight space. Activations are
 * sequence-major [T,B,·]; states [L,B,H]. Everything is enqueued on the stream of `blas`. */
#ifndef LSTMD_LSTM_LN_CUDA_H
#define LSTMD_LSTM_LN_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LSTMD_CUDA_LN_EPS 1e-3f /* as kernels/cpu/lstm_ln_cpu.h */

/* Element offsets of one layer's tensors in the flat buffer. */
struct lstmd_cuda_ln_layer {
  size_t w_ih, w_hh, b_ih, b_hh;       /* [4H,in], [4H,H], [4H], [4H] */
  size_t g_ih, s_ih, g_hh, s_hh;       /* [4H] each: lstm.ln_{ih,hh}_{weight,bias}_l{k} */
  size_t g_c, s_c;                     /* [H] each: lstm.ln_c_{weight,bias}_l{k} */
};

struct lstmd_cuda_ln_config {
  int input, hidden, layers, steps, batch;
  const struct lstmd_cuda_ln_layer *layer; /* [layers] */
};

struct lstmd_cuda_ln_lstm;

/* blas: a cublasHandle_t whose stream and math mode the caller set. Allocates the activations of
 * every layer. Returns 0, LSTMD_EINVAL (bad shape) or LSTMD_ENOMEM, after printing why. */
int lstmd_cuda_ln_create(const struct lstmd_cuda_ln_config *cfg, void *blas,
                         struct lstmd_cuda_ln_lstm **out);
void lstmd_cuda_ln_destroy(struct lstmd_cuda_ln_lstm *l);
size_t lstmd_cuda_ln_device_bytes(const struct lstmd_cuda_ln_lstm *l);

/* Forward over the window: x [T,B,I] → y [T,B,H] (written). hx/cx [L,B,H] the initial state
 * (NULL: zero), hy/cy [L,B,H] the final one (may be NULL). What backward needs is kept. */
int lstmd_cuda_ln_forward(struct lstmd_cuda_ln_lstm *l, const float *params, const float *x,
                          float *y, const float *hx, const float *cx, float *hy, float *cy);
/* Backward after a forward on the same x: dx [T,B,I] written from dy [T,B,H] (no gradient into
 * the initial state: truncated BPTT, as the cuDNN path), every weight's, bias's, gain's and
 * shift's gradient ADDED to grads [n_params]. */
int lstmd_cuda_ln_backward(struct lstmd_cuda_ln_lstm *l, const float *params, float *grads,
                           const float *x, const float *dy, float *dx);

#ifdef __cplusplus
}
#endif

#endif
