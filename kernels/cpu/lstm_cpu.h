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
  int split;  /* rows [0, split) of the input projection (w_ih's first rows) are another stage's
               * (model.stage_split=balanced, worker/engine/pipe_grid.c), 0: none. forward then
               * expects gates' columns [0, split) to hold x·w_ih[0:split]^T already and projects
               * the rest; backward_input's dx leaves those rows out (their owner adds its part,
               * lstmd_cpu_lstm_rows_backward_input); backward_weight leaves dw_ih's rows
               * [0, split) alone. Neither reads w_ih's rows [0, split). */
};

/* The one GEMM of every step's input part: gates[:, split:4H) = x·w_ih[split:4H]^T (columns
 * [0, split) are the other stage's, left as they are). Forward's first step; the recurrence team
 * (recur_team.h) calls it too. */
void lstmd_cpu_lstm_project_input(const struct lstmd_lstm_dims *d, const float *w_ih,
                                  const float *x, float *gates);
/* Backward's input gradient, dx = dgates[:, split:4H)·w_ih[split:4H] (all zero when the split
 * takes every row: the owner of rows [0, split) adds theirs); nothing for dx NULL. */
void lstmd_cpu_lstm_input_grad(const struct lstmd_lstm_dims *d, const float *w_ih,
                               const float *dgates, float *dx);

/* Forward over T steps: a whole window, or one time chunk of it (pass pointers offset to the
 * chunk's first step; h[0], c[0] are then the state the previous chunk left).
 *   x     [T,B,I]   input
 *   h     [T+1,B,H] h[0] is the initial state (read), h[1..T] are written (the layer output)
 *   c     [T+1,B,H] likewise for the cell state
 *   gates [T,B,4H]  written: activated gates (i,f,g,o), kept for the backward pass
 *   wpack           W_hh packed by lstmd_cpu_pack_rows (recur_gemm.h), or NULL for cblas_sgemm
 * One GEMM projects all T inputs, then one GEMM per step adds the recurrence; biases and the
 * four nonlinearities are applied in one fused pass per step. */
void lstmd_cpu_lstm_forward(const struct lstmd_lstm_dims *d, const float *w_ih, const float *w_hh,
                            const float *b_ih, const float *b_hh, const float *x, float *h,
                            float *c, float *gates, const float *wpack);

/* One step's gate pass alone, for callers that compute the gate pre-activations g [B,4H]
 * themselves (the int8 model, worker/model/qmodel.c): adds both biases, applies the
 * nonlinearities in place (g becomes the activated i,f,g,o) and writes c_next and h_next [B,H],
 * for units [j0, j1) of each row (0, H: all). Each unit is computed on its own, so threads that
 * split the units between them get the bits of one call over all of them. */
void lstmd_cpu_lstm_gates_step(int B, int H, int j0, int j1, float *g, const float *b_ih,
                               const float *b_hh, const float *c_prev, float *c_next,
                               float *h_next);

/* One step's backward gate pass alone (recur_team.c), for units [j0, j1) of each row: reads the
 * step's activated gates [B,4H], c_prev and c_cur [B,H], dh_out and dh_rec [B,H] (output and
 * recurrent gradients); writes the pre-activation gradients da [B,4H] of those units and
 * updates dc_carry [B,H] in place. Units are independent, as in lstmd_cpu_lstm_gates_step. */
void lstmd_cpu_lstm_gates_backward_step(int B, int H, int j0, int j1, const float *gates,
                                        const float *c_prev, const float *c_cur,
                                        const float *dh_out, const float *dh_rec, float *dc_carry,
                                        float *da);

/* Backward through the gates over T steps, from the last to the first: the part every earlier
 * layer, chunk and stage waits for (the weight gradients can come later).
 *   c, gates   as the forward left them (c [T+1,B,H])
 *   dh_out [T,B,H]  gradient of the loss w.r.t. h[1..T] (read only)
 *   dgates [T,B,4H] written: pre-activation gate gradients (kept for the weight part)
 *   work   [2,B,H]  the recurrent dh and dc carried backwards in time. carry_in = 0: zeroed first
 *                   (the window's last chunk); 1: holds what the next chunk left. On return it
 *                   holds the gradients w.r.t. h[0] and c[0] when grad_to_h0 is set (a chunk that
 *                   is not the window's first), for the previous chunk; without it no gradient
 *                   flows into the initial state (truncated BPTT at the window's start).
 *   dx     [T,B,I]  written: gradient w.r.t. x (may be NULL)
 *   wpack           W_hh packed by lstmd_cpu_pack_cols, or NULL for cblas_sgemm */
void lstmd_cpu_lstm_backward_input(const struct lstmd_lstm_dims *d, const float *w_ih,
                                   const float *w_hh, const float *c, const float *gates,
                                   const float *dh_out, float *dgates, float *work, int carry_in,
                                   int grad_to_h0, float *dx, const float *wpack);

/* The weight gradients of T steps from backward_input's dgates, accumulated (+=):
 * dw_hh += dgates^T·h[0..T-1], dw_ih += dgates^T·x, db_ih and db_hh += column sums (both
 * NULL: the caller sums the bias gradients itself, as embed_fold_cpu.h does). */
void lstmd_cpu_lstm_backward_weight(const struct lstmd_lstm_dims *d, const float *x,
                                    const float *h, const float *dgates, float *dw_ih,
                                    float *dw_hh, float *db_ih, float *db_hh);

/* A whole window: backward_input (zero carry, no gradient into h[0]) then backward_weight. */
void lstmd_cpu_lstm_backward(const struct lstmd_lstm_dims *d, const float *w_ih, const float *w_hh,
                             const float *x, const float *h, const float *c, const float *gates,
                             const float *dh_out, float *dgates, float *work, float *dw_ih,
                             float *dw_hh, float *db_ih, float *db_hh, float *dx,
                             const float *wpack);

/* The other side of a split input projection (dims.split above): the rows [0, r) of the next
 * layer's input projection, computed by the stage that produces that layer's input x [N,In]
 * (N = steps · batch), from w_ih [4H,In] (only its first r rows are read or written):
 *   forward          p [N,r] = x · w_ih[0:r]^T
 *   backward_input   dx [N,In] += dp [N,r] · w_ih[0:r]  (the gradient of x from these rows)
 *   backward_weight  dw_ih[0:r] += dp^T · x */
void lstmd_cpu_lstm_rows_forward(int N, int In, int r, const float *x, const float *w_ih, float *p);
void lstmd_cpu_lstm_rows_backward_input(int N, int In, int r, const float *w_ih, const float *dp,
                                        float *dx);
void lstmd_cpu_lstm_rows_backward_weight(int N, int In, int r, const float *x, const float *dp,
                                         float *dw_ih);

/* db_ih and db_hh += the column sums of dgates [rows, cols] (both LSTM biases get the gate
 * pre-activation gradients; shared with the layer-normalised layer, lstm_ln_cpu.c). */
void lstmd_cpu_add_bias_grads(int rows, int cols, const float *dgates, float *db_ih, float *db_hh);

#endif
