/* lstm_cpu.h — one LSTM layer over a whole window on the CPU (float32, OpenBLAS).
 * Layout is PyTorch's: w_ih [4H,I], w_hh [4H,H], b_ih/b_hh [4H], gate blocks i,f,g,o.
 * Activations are sequence-major: x[t][b][i], h[t][b][j]. */
#ifndef LSTMD_LSTM_CPU_H
#define LSTMD_LSTM_CPU_H

#include <stddef.h>

struct lstmd_lstm_dims {
  int steps;  /* T */
  int batch;  /* B */
  int input;  /* I: width of x */
  int hidden; /* H */
};

/* Forward over T steps.
 *   x     [T,B,I]   input
 *   h     [T+1,B,H] h[0] is the initial state (read), h[1..T] are written (the layer output)
 *   c     [T+1,B,H] likewise for the cell state
 *   gates [T,B,4H]  written: activated gates (i,f,g,o), kept for the backward pass
 *   wpack [4H·H]    scratch for the packed W_hh (recur_gemm.h), or NULL to use cblas_sgemm
 * One GEMM projects all T inputs, then one GEMM per step adds the recurrence; biases and the
 * four nonlinearities are applied in one fused pass per step. */
void lstmd_cpu_lstm_forward(const struct lstmd_lstm_dims *d, const float *w_ih, const float *w_hh,
                            const float *b_ih, const float *b_hh, const float *x, float *h,
                            float *c, float *gates, float *wpack);

/* Backward over T steps (truncated BPTT: no gradient flows into h[0], c[0]).
 *   dh_out [T,B,H]  gradient of the loss w.r.t. h[1..T] (read only)
 *   dgates [T,B,4H] workspace (pre-activation gate gradients)
 *   work   [2,B,H]  workspace (recurrent dh and dc carried between steps)
 *   dw_ih, dw_hh, db_ih, db_hh are accumulated into (+=)
 *   dx     [T,B,I]  written (may be NULL when the input needs no gradient)
 *   wpack  [4H·H]   scratch for the packed W_hh, or NULL to use cblas_sgemm */
void lstmd_cpu_lstm_backward(const struct lstmd_lstm_dims *d, const float *w_ih, const float *w_hh,
                             const float *x, const float *h, const float *c, const float *gates,
                             const float *dh_out, float *dgates, float *work, float *dw_ih,
                             float *dw_hh, float *db_ih, float *db_hh, float *dx, float *wpack);

#endif
