/* lstm_ln_cpu.h — the layer-normalised LSTM layer (model.layer_norm) on the CPU: Ba, Kiros &
 * Hinton (2016) as TensorFlow Addons' LayerNormLSTMCell computes it, over a window or a time
 * chunk, with the same shapes, gate order (i,f,g,o) and chunking contract as lstm_cpu.h:
 *   z  = LN_ih(x·W_ihᵀ) + LN_hh(h_prev·W_hhᵀ) + b_ih + b_hh        (LN over the 4H of a row)
 *   c~ = f⊙c_prev + i⊙g;   c = LN_c(c~) (over H; this normalised c is carried);   h = o⊙tanh(c)
 * LN(v) = (v − mean(v)) / sqrt(var(v) + eps) ⊙ gain + shift, biased variance, eps 1e-3
 * (Keras' LayerNormalization with TFA's norm_epsilon). */
#ifndef LSTMD_LSTM_LN_CPU_H
#define LSTMD_LSTM_LN_CPU_H

#include "lstm_cpu.h"

#define LSTMD_LN_EPS 1e-3f

/* The layer's normalisation parameters (lstm.ln_*_l{k}). */
struct lstmd_lstm_ln {
  const float *g_ih, *s_ih; /* [4H] gain and shift of LN_ih */
  const float *g_hh, *s_hh; /* [4H] gain and shift of LN_hh */
  const float *g_c, *s_c;   /* [H] gain and shift of LN_c */
};
/* Their gradients, accumulated (+=) by lstmd_cpu_lstm_ln_backward_weight. */
struct lstmd_lstm_ln_grads {
  float *g_ih, *s_ih, *g_hh, *s_hh, *g_c, *s_c;
};
/* What forward keeps for backward, row (t, b) at t·B + b; for a chunk, pointers offset to its
 * first step (lstmd_cpu_lstm_ln_acts_at). */
struct lstmd_lstm_ln_acts {
  float *xhat, *rhat;               /* [T,B,4H] the normalised projections, before gain/shift */
  float *chat;                      /* [T,B,H] the normalised c~, before gain/shift */
  float *rstd_x, *rstd_r, *rstd_c;  /* [T,B] 1/sqrt(var + eps) of the three rows */
};
/* What backward_input hands to backward_weight (the chunk's rows, from 0). */
struct lstmd_lstm_ln_dacts {
  float *dxp, *drp; /* [T,B,4H] gradients of x·W_ihᵀ and h_prev·W_hhᵀ (before LN) */
  float *dcn;       /* [T,B,H] gradient of the normalised c (LN_c's output) */
};

/* acts moved to step t0 of a window of batch B, hidden H (for time chunks). */
static inline struct lstmd_lstm_ln_acts lstmd_cpu_lstm_ln_acts_at(const struct lstmd_lstm_ln_acts *a,
                                                                  int t0, int B, int H) {
  const size_t r = (size_t)t0 * B;
  return (struct lstmd_lstm_ln_acts){a->xhat + r * 4 * H, a->rhat + r * 4 * H, a->chat + r * H,
                                     a->rstd_x + r, a->rstd_r + r, a->rstd_c + r};
}

/* Forward over T steps, as lstmd_cpu_lstm_forward (x, h, c, gates, wpack: the same), plus acts
 * written. c[1..T] hold the normalised cell states (what the next step and chunk read). */
void lstmd_cpu_lstm_ln_forward(const struct lstmd_lstm_dims *d, const float *w_ih,
                               const float *w_hh, const float *b_ih, const float *b_hh,
                               const struct lstmd_lstm_ln *ln, const float *x, float *h, float *c,
                               float *gates, const struct lstmd_lstm_ln_acts *acts,
                               const float *wpack);

/* Backward through the gates and the normalisations over T steps, from the last to the first,
 * as lstmd_cpu_lstm_backward_input (work, carry_in, grad_to_h0, dx, wpack: the same; work's dc
 * is the gradient of the carried, normalised c). dgates [T,B,4H] gets the gate pre-activation
 * gradients dz (the biases' gradient), dacts the rest of what backward_weight needs. */
void lstmd_cpu_lstm_ln_backward_input(const struct lstmd_lstm_dims *d, const float *w_ih,
                                      const float *w_hh, const struct lstmd_lstm_ln *ln,
                                      const float *c, const float *gates,
                                      const struct lstmd_lstm_ln_acts *acts, const float *dh_out,
                                      float *dgates, const struct lstmd_lstm_ln_dacts *dacts,
                                      float *work, int carry_in, int grad_to_h0, float *dx,
                                      const float *wpack);

/* The weight gradients of T steps, accumulated (+=): dw_ih += dxpᵀ·x, dw_hh += drpᵀ·h[0..T-1],
 * db_ih and db_hh += column sums of dz, and the gains and shifts of the three normalisations. */
void lstmd_cpu_lstm_ln_backward_weight(const struct lstmd_lstm_dims *d, const float *x,
                                       const float *h, const struct lstmd_lstm_ln_acts *acts,
                                       const float *dgates, const struct lstmd_lstm_ln_dacts *dacts,
                                       float *dw_ih, float *dw_hh, float *db_ih, float *db_hh,
                                       const struct lstmd_lstm_ln_grads *lng);

#endif
