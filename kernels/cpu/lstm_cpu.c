/* lstm_cpu.c — float32 LSTM layer forward/backward with OpenBLAS GEMMs and fused gate passes.
 * Per window (or time chunk): 1 GEMM for the input projection of all steps, 1 per step for the
 * recurrence; backward: 1 per step for the recurrent dh and 1 large GEMM for dx (the input part,
 * which the layer below waits for), then 2 large GEMMs for dW_ih and dW_hh (the weight part).
 * The per-step GEMMs use the packed-panel kernels of recur_gemm.c when the caller passes W_hh
 * packed (once per window or step, however many chunks use it). With dims.split > 0 the
 * projection's first rows are another stage's (lstm_cpu.h): the large GEMMs cover rows
 * [split, 4H) of w_ih only, and the lstmd_cpu_lstm_rows_* functions are the owner's part. */
#include "lstm_cpu.h"

#include <cblas.h>
#include <string.h>

#include "fastmath.h"
#include "isa_variants.h"
#include "recur_gemm.h"

/* The vectorized passes are written once and compiled per ISA (isa_variants.h). */

/* Adds both biases, applies the gate nonlinearities in place, and advances c and h by one step,
 * for units [j0, j1) of each row. g [B,4H] holds pre-activations on entry and activated gates
 * (i,f,g,o) on exit. */
BODY void gate_forward_pass_body(int B, int H, int j0, int j1, float *g, const float *b_ih,
                                 const float *b_hh, const float *c_prev, float *c_next,
                                 float *h_next) {
  for (int b = 0; b < B; b++) {
    float *gi = g + (size_t)b * 4 * H, *gf = gi + H, *gg = gi + 2 * H, *go = gi + 3 * H;
    const float *cp = c_prev + (size_t)b * H;
    float *cn = c_next + (size_t)b * H, *hn = h_next + (size_t)b * H;
#pragma omp simd
    for (int j = j0; j < j1; j++) {
      float i = lstmd_sigmoidf(gi[j] + b_ih[j] + b_hh[j]);
      float f = lstmd_sigmoidf(gf[j] + b_ih[H + j] + b_hh[H + j]);
      float gv = lstmd_tanhf(gg[j] + b_ih[2 * H + j] + b_hh[2 * H + j]);
      float o = lstmd_sigmoidf(go[j] + b_ih[3 * H + j] + b_hh[3 * H + j]);
      float cv = f * cp[j] + i * gv;
      gi[j] = i;
      gf[j] = f;
      gg[j] = gv;
      go[j] = o;
      cn[j] = cv;
      hn[j] = o * lstmd_tanhf(cv);
    }
  }
}
ISA_VARIANTS(gate_forward_pass,
             (int B, int H, int j0, int j1, float *g, const float *b_ih, const float *b_hh,
              const float *c_prev, float *c_next, float *h_next),
             (B, H, j0, j1, g, b_ih, b_hh, c_prev, c_next, h_next))

/* One step of the backward gate pass, for units [j0, j1) of each row: from dh (output gradient +
 * recurrent part) and the carried dc, writes the pre-activation gradients da [B,4H] and updates
 * dc_carry in place. */
BODY void gate_backward_pass_body(int B, int H, int j0, int j1, const float *gates,
                                  const float *c_prev, const float *c_cur, const float *dh_out,
                                  const float *dh_rec, float *dc_carry, float *da) {
  for (int b = 0; b < B; b++) {
    const float *gi = gates + (size_t)b * 4 * H, *gf = gi + H, *gg = gi + 2 * H, *go = gi + 3 * H;
    const float *cp = c_prev + (size_t)b * H, *cc = c_cur + (size_t)b * H;
    const float *dho = dh_out + (size_t)b * H, *dhr = dh_rec + (size_t)b * H;
    float *dcc = dc_carry + (size_t)b * H;
    float *dai = da + (size_t)b * 4 * H, *daf = dai + H, *dag = dai + 2 * H, *dao = dai + 3 * H;
#pragma omp simd
    for (int j = j0; j < j1; j++) {
      float i = gi[j], f = gf[j], gv = gg[j], o = go[j];
      float dh = dho[j] + dhr[j];
      float tc = lstmd_tanhf(cc[j]);
      float dc = dcc[j] + dh * o * (1.0f - tc * tc);
      dai[j] = dc * gv * i * (1.0f - i);
      daf[j] = dc * cp[j] * f * (1.0f - f);
      dag[j] = dc * i * (1.0f - gv * gv);
      dao[j] = dh * tc * o * (1.0f - o);
      dcc[j] = dc * f;
    }
  }
}
ISA_VARIANTS(gate_backward_pass,
             (int B, int H, int j0, int j1, const float *gates, const float *c_prev,
              const float *c_cur, const float *dh_out, const float *dh_rec, float *dc_carry,
              float *da),
             (B, H, j0, j1, gates, c_prev, c_cur, dh_out, dh_rec, dc_carry, da))

void lstmd_cpu_lstm_gates_step(int B, int H, int j0, int j1, float *g, const float *b_ih,
                               const float *b_hh, const float *c_prev, float *c_next,
                               float *h_next) {
  gate_forward_pass(B, H, j0, j1, g, b_ih, b_hh, c_prev, c_next, h_next);
}

void lstmd_cpu_lstm_gates_backward_step(int B, int H, int j0, int j1, const float *gates,
                                        const float *c_prev, const float *c_cur,
                                        const float *dh_out, const float *dh_rec, float *dc_carry,
                                        float *da) {
  gate_backward_pass(B, H, j0, j1, gates, c_prev, c_cur, dh_out, dh_rec, dc_carry, da);
}

void lstmd_cpu_lstm_project_input(const struct lstmd_lstm_dims *d, const float *w_ih,
                                  const float *x, float *gates) {
  const int T = d->steps, B = d->batch, In = d->input, G = 4 * d->hidden, r = d->split;
  if (r < G) /* columns [0, r) hold the other stage's part already */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T * B, G - r, In, 1.0f, x, In,
                w_ih + (size_t)r * In, In, 0.0f, gates + r, G);
}

void lstmd_cpu_lstm_input_grad(const struct lstmd_lstm_dims *d, const float *w_ih,
                               const float *dgates, float *dx) {
  const int T = d->steps, B = d->batch, In = d->input, G = 4 * d->hidden, r = d->split;
  if (!dx) return;
  if (r < G) /* rows [0, r): their owner adds theirs */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T * B, In, G - r, 1.0f, dgates + r, G,
                w_ih + (size_t)r * In, In, 0.0f, dx, In);
  else
    memset(dx, 0, (size_t)T * B * In * sizeof(float));
}

void lstmd_cpu_lstm_forward(const struct lstmd_lstm_dims *d, const float *w_ih, const float *w_hh,
                            const float *b_ih, const float *b_hh, const float *x, float *h,
                            float *c, float *gates, const float *wpack) {
  const int T = d->steps, B = d->batch, H = d->hidden, G = 4 * H;
  const size_t step_h = (size_t)B * H, step_g = (size_t)B * G;
  lstmd_cpu_lstm_project_input(d, w_ih, x, gates);
  for (int t = 0; t < T; t++) {
    float *g = gates + t * step_g;
    if (wpack)
      lstmd_cpu_gemm_abt_packed(B, G, H, h + t * step_h, H, wpack, g, G);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, G, H, 1.0f, h + t * step_h, H, w_hh,
                  H, 1.0f, g, G);
    gate_forward_pass(B, H, 0, H, g, b_ih, b_hh, c + t * step_h, c + (t + 1) * step_h,
                      h + (t + 1) * step_h);
  }
}

BODY void add_column_sums_body(int rows, int cols, const float *m, float *sum_a, float *sum_b) {
  for (int r = 0; r < rows; r++) {
    const float *row = m + (size_t)r * cols;
#pragma omp simd
    for (int j = 0; j < cols; j++) {
      sum_a[j] += row[j];
      sum_b[j] += row[j];
    }
  }
}
ISA_VARIANTS(add_column_sums, (int rows, int cols, const float *m, float *sum_a, float *sum_b),
             (rows, cols, m, sum_a, sum_b))

void lstmd_cpu_add_bias_grads(int rows, int cols, const float *dgates, float *db_ih, float *db_hh) {
  add_column_sums(rows, cols, dgates, db_ih, db_hh);
}

void lstmd_cpu_lstm_backward_input(const struct lstmd_lstm_dims *d, const float *w_ih,
                                   const float *w_hh, const float *c, const float *gates,
                                   const float *dh_out, float *dgates, float *work, int carry_in,
                                   int grad_to_h0, float *dx, const float *wpack) {
  const int T = d->steps, B = d->batch, H = d->hidden, G = 4 * H;
  const size_t step_h = (size_t)B * H, step_g = (size_t)B * G;
  float *dh_rec = work, *dc_carry = work + step_h;
  if (!carry_in) memset(work, 0, 2 * step_h * sizeof(float));
  for (int t = T - 1; t >= 0; t--) {
    float *da = dgates + t * step_g;
    gate_backward_pass(B, H, 0, H, gates + t * step_g, c + t * step_h, c + (t + 1) * step_h,
                       dh_out + t * step_h, dh_rec, dc_carry, da);
    if (t == 0 && !grad_to_h0) continue; /* dc_carry then holds dc·f for nobody: harmless */
    if (wpack)
      lstmd_cpu_gemm_ab_packed(B, H, G, da, G, wpack, dh_rec, H);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, G, 1.0f, da, G, w_hh, H, 0.0f,
                  dh_rec, H);
  }
  lstmd_cpu_lstm_input_grad(d, w_ih, dgates, dx);
}

void lstmd_cpu_lstm_backward_weight(const struct lstmd_lstm_dims *d, const float *x,
                                    const float *h, const float *dgates, float *dw_ih,
                                    float *dw_hh, float *db_ih, float *db_hh) {
  const int N = d->steps * d->batch, In = d->input, H = d->hidden, G = 4 * H, r = d->split;
  /* h[0..T-1] are the inputs of the recurrence at steps 0..T-1: contiguous [T*B,H]. */
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, G, H, N, 1.0f, dgates, G, h, H, 1.0f, dw_hh,
              H);
  if (r < G)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, G - r, In, N, 1.0f, dgates + r, G, x, In,
                1.0f, dw_ih + (size_t)r * In, In);
  if (db_ih) add_column_sums(N, G, dgates, db_ih, db_hh);
}

void lstmd_cpu_lstm_rows_forward(int N, int In, int r, const float *x, const float *w_ih,
                                 float *p) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, r, In, 1.0f, x, In, w_ih, In, 0.0f, p, r);
}

void lstmd_cpu_lstm_rows_backward_input(int N, int In, int r, const float *w_ih, const float *dp,
                                        float *dx) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, In, r, 1.0f, dp, r, w_ih, In, 1.0f, dx,
              In);
}

void lstmd_cpu_lstm_rows_backward_weight(int N, int In, int r, const float *x, const float *dp,
                                         float *dw_ih) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, In, N, 1.0f, dp, r, x, In, 1.0f, dw_ih,
              In);
}

void lstmd_cpu_lstm_backward(const struct lstmd_lstm_dims *d, const float *w_ih, const float *w_hh,
                             const float *x, const float *h, const float *c, const float *gates,
                             const float *dh_out, float *dgates, float *work, float *dw_ih,
                             float *dw_hh, float *db_ih, float *db_hh, float *dx,
                             const float *wpack) {
  lstmd_cpu_lstm_backward_input(d, w_ih, w_hh, c, gates, dh_out, dgates, work, 0, 0, dx, wpack);
  lstmd_cpu_lstm_backward_weight(d, x, h, dgates, dw_ih, dw_hh, db_ih, db_hh);
}
