/* lstm_ln_cpu.c — the layer-normalised LSTM layer (lstm_ln_cpu.h) with OpenBLAS GEMMs and fused
 * row passes. Per window (or chunk): 1 GEMM projects all T inputs, whose rows are normalised in
 * one pass; per step, 1 GEMM for the recurrent projection (into its own buffer: it is normalised
 * separately, so it cannot accumulate onto the input's as in lstm_cpu.c), its normalisation, then
 * one fused pass: gains, shifts and biases, the gate nonlinearities, c~, LN_c and h. Backward:
 * per step one fused pass back through h, LN_c and the gates, LN_hh's backward and the recurrent
 * GEMM; after the loop LN_ih's backward for all rows and the dx GEMM; the weight part as in
 * lstm_cpu.c plus the gains' and shifts' column sums. */
#include "lstm_ln_cpu.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "fastmath.h"
#include "isa_variants.h"
#include "recur_gemm.h"

/* Normalises each of `rows` rows of v [rows,n] in place to (v − mean)/sqrt(var + eps) and
 * stores 1/sqrt(var + eps) in rstd [rows]. Two passes (mean, then the centred squares). */
BODY void ln_rows_body(int rows, int n, float *v, float *rstd) {
  for (int r = 0; r < rows; r++) {
    float *x = v + (size_t)r * n, s = 0.0f, q = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < n; j++) s += x[j];
    const float mu = s / (float)n;
#pragma omp simd reduction(+ : q)
    for (int j = 0; j < n; j++) q += (x[j] - mu) * (x[j] - mu);
    const float rs = 1.0f / sqrtf(q / (float)n + LSTMD_LN_EPS);
#pragma omp simd
    for (int j = 0; j < n; j++) x[j] = (x[j] - mu) * rs;
    rstd[r] = rs;
  }
}
ISA_VARIANTS(ln_rows, (int rows, int n, float *v, float *rstd), (rows, n, v, rstd))

/* Backward of y = xhat·gain + shift for rows [rows,n]: dv = rstd·(dy − mean(dy) − xhat·mean(dy·xhat))
 * with dy = dz·gain. */
BODY void ln_rows_backward_body(int rows, int n, const float *dz, const float *xhat,
                                const float *rstd, const float *gain, float *dv) {
  for (int r = 0; r < rows; r++) {
    const float *z = dz + (size_t)r * n, *xh = xhat + (size_t)r * n;
    float *o = dv + (size_t)r * n, s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
    for (int j = 0; j < n; j++) {
      const float dy = z[j] * gain[j];
      s1 += dy;
      s2 += dy * xh[j];
    }
    const float m1 = s1 / (float)n, m2 = s2 / (float)n, rs = rstd[r];
#pragma omp simd
    for (int j = 0; j < n; j++) o[j] = rs * (z[j] * gain[j] - m1 - xh[j] * m2);
  }
}
ISA_VARIANTS(ln_rows_backward,
             (int rows, int n, const float *dz, const float *xhat, const float *rstd,
              const float *gain, float *dv),
             (rows, n, dz, xhat, rstd, gain, dv))

/* One step, B rows: z = xhat·g_ih + s_ih + rhat·g_hh + s_hh + b_ih + b_hh into g [B,4H], the
 * gates activated in place, c~ = f·c_prev + i·g normalised (chat, rstd_c), c_next = chat·g_c + s_c,
 * h_next = o·tanh(c_next). */
BODY void ln_gate_forward_body(int B, int H, float *g, const float *xhat, const float *rhat,
                               const float *b_ih, const float *b_hh, const float *g_ih,
                               const float *s_ih, const float *g_hh, const float *s_hh,
                               const float *g_c, const float *s_c, const float *c_prev,
                               float *c_next, float *h_next, float *chat, float *rstd_c) {
  const int G = 4 * H;
  for (int b = 0; b < B; b++) {
    float *z = g + (size_t)b * G;
    const float *xh = xhat + (size_t)b * G, *rh = rhat + (size_t)b * G;
#pragma omp simd
    for (int j = 0; j < G; j++)
      z[j] = xh[j] * g_ih[j] + s_ih[j] + rh[j] * g_hh[j] + s_hh[j] + b_ih[j] + b_hh[j];
    float *gi = z, *gf = z + H, *gg = z + 2 * H, *go = z + 3 * H;
    const float *cp = c_prev + (size_t)b * H;
    float *cn = c_next + (size_t)b * H, *hn = h_next + (size_t)b * H, *ch = chat + (size_t)b * H;
    float s = 0.0f, q = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < H; j++) {
      const float i = lstmd_sigmoidf(gi[j]), f = lstmd_sigmoidf(gf[j]);
      const float gv = lstmd_tanhf(gg[j]), o = lstmd_sigmoidf(go[j]);
      const float cv = f * cp[j] + i * gv;
      gi[j] = i;
      gf[j] = f;
      gg[j] = gv;
      go[j] = o;
      ch[j] = cv;
      s += cv;
    }
    const float mu = s / (float)H;
#pragma omp simd reduction(+ : q)
    for (int j = 0; j < H; j++) q += (ch[j] - mu) * (ch[j] - mu);
    const float rs = 1.0f / sqrtf(q / (float)H + LSTMD_LN_EPS);
    rstd_c[b] = rs;
#pragma omp simd
    for (int j = 0; j < H; j++) {
      const float cv = (ch[j] - mu) * rs;
      ch[j] = cv;
      cn[j] = cv * g_c[j] + s_c[j];
      hn[j] = go[j] * lstmd_tanhf(cn[j]);
    }
  }
}
ISA_VARIANTS(ln_gate_forward,
             (int B, int H, float *g, const float *xhat, const float *rhat, const float *b_ih,
              const float *b_hh, const float *g_ih, const float *s_ih, const float *g_hh,
              const float *s_hh, const float *g_c, const float *s_c, const float *c_prev,
              float *c_next, float *h_next, float *chat, float *rstd_c),
             (B, H, g, xhat, rhat, b_ih, b_hh, g_ih, s_ih, g_hh, s_hh, g_c, s_c, c_prev, c_next,
              h_next, chat, rstd_c))

/* One step back, B rows: from dh (output + recurrent) and the carried dc (of the normalised c),
 * dcn = dc + dh·o·(1 − tanh²c) (kept for LN_c's gain and shift), back through LN_c to dc~, then
 * the gate pre-activation gradients da [B,4H] and dc_carry ← dc~·f (of the previous, normalised c). */
BODY void ln_gate_backward_body(int B, int H, const float *gates, const float *c_prev,
                                const float *c_cur, const float *chat, const float *rstd_c,
                                const float *g_c, const float *dh_out, const float *dh_rec,
                                float *dc_carry, float *da, float *dcn) {
  for (int b = 0; b < B; b++) {
    const float *gi = gates + (size_t)b * 4 * H, *gf = gi + H, *gg = gi + 2 * H, *go = gi + 3 * H;
    const float *cp = c_prev + (size_t)b * H, *cc = c_cur + (size_t)b * H;
    const float *ch = chat + (size_t)b * H;
    const float *dho = dh_out + (size_t)b * H, *dhr = dh_rec + (size_t)b * H;
    float *dcc = dc_carry + (size_t)b * H, *dn = dcn + (size_t)b * H;
    float *dai = da + (size_t)b * 4 * H, *daf = dai + H, *dag = dai + 2 * H, *dao = dai + 3 * H;
    float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
    for (int j = 0; j < H; j++) {
      const float o = go[j], dh = dho[j] + dhr[j], tc = lstmd_tanhf(cc[j]);
      const float dc = dcc[j] + dh * o * (1.0f - tc * tc);
      dao[j] = dh * tc * o * (1.0f - o);
      dn[j] = dc;
      const float dy = dc * g_c[j];
      s1 += dy;
      s2 += dy * ch[j];
    }
    const float m1 = s1 / (float)H, m2 = s2 / (float)H, rs = rstd_c[b];
#pragma omp simd
    for (int j = 0; j < H; j++) {
      const float i = gi[j], f = gf[j], gv = gg[j];
      const float dc = rs * (dn[j] * g_c[j] - m1 - ch[j] * m2);
      dai[j] = dc * gv * i * (1.0f - i);
      daf[j] = dc * cp[j] * f * (1.0f - f);
      dag[j] = dc * i * (1.0f - gv * gv);
      dcc[j] = dc * f;
    }
  }
}
ISA_VARIANTS(ln_gate_backward,
             (int B, int H, const float *gates, const float *c_prev, const float *c_cur,
              const float *chat, const float *rstd_c, const float *g_c, const float *dh_out,
              const float *dh_rec, float *dc_carry, float *da, float *dcn),
             (B, H, gates, c_prev, c_cur, chat, rstd_c, g_c, dh_out, dh_rec, dc_carry, da, dcn))

/* Column sums over rows [rows,n]: gain[j] += Σ dy·xhat, shift[j] += Σ dy. */
BODY void ln_param_grads_body(int rows, int n, const float *dy, const float *xhat, float *gain,
                              float *shift) {
  for (int r = 0; r < rows; r++) {
    const float *d = dy + (size_t)r * n, *x = xhat + (size_t)r * n;
#pragma omp simd
    for (int j = 0; j < n; j++) {
      gain[j] += d[j] * x[j];
      shift[j] += d[j];
    }
  }
}
ISA_VARIANTS(ln_param_grads,
             (int rows, int n, const float *dy, const float *xhat, float *gain, float *shift),
             (rows, n, dy, xhat, gain, shift))

void lstmd_cpu_lstm_ln_forward(const struct lstmd_lstm_dims *d, const float *w_ih,
                               const float *w_hh, const float *b_ih, const float *b_hh,
                               const struct lstmd_lstm_ln *ln, const float *x, float *h, float *c,
                               float *gates, const struct lstmd_lstm_ln_acts *a,
                               const float *wpack) {
  const int T = d->steps, B = d->batch, In = d->input, H = d->hidden, G = 4 * H;
  const size_t step_h = (size_t)B * H, step_g = (size_t)B * G;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T * B, G, In, 1.0f, x, In, w_ih, In, 0.0f,
              a->xhat, G);
  ln_rows(T * B, G, a->xhat, a->rstd_x);
  for (int t = 0; t < T; t++) {
    float *r = a->rhat + t * step_g;
    if (wpack) {
      memset(r, 0, step_g * sizeof(float));
      lstmd_cpu_gemm_abt_packed(B, G, H, h + t * step_h, H, wpack, r, G);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, G, H, 1.0f, h + t * step_h, H, w_hh,
                  H, 0.0f, r, G);
    }
    ln_rows(B, G, r, a->rstd_r + (size_t)t * B);
    ln_gate_forward(B, H, gates + t * step_g, a->xhat + t * step_g, r, b_ih, b_hh, ln->g_ih,
                    ln->s_ih, ln->g_hh, ln->s_hh, ln->g_c, ln->s_c, c + t * step_h,
                    c + (t + 1) * step_h, h + (t + 1) * step_h, a->chat + t * step_h,
                    a->rstd_c + (size_t)t * B);
  }
}

void lstmd_cpu_lstm_ln_backward_input(const struct lstmd_lstm_dims *d, const float *w_ih,
                                      const float *w_hh, const struct lstmd_lstm_ln *ln,
                                      const float *c, const float *gates,
                                      const struct lstmd_lstm_ln_acts *a, const float *dh_out,
                                      float *dgates, const struct lstmd_lstm_ln_dacts *da,
                                      float *work, int carry_in, int grad_to_h0, float *dx,
                                      const float *wpack) {
  const int T = d->steps, B = d->batch, In = d->input, H = d->hidden, G = 4 * H;
  const size_t step_h = (size_t)B * H, step_g = (size_t)B * G;
  float *dh_rec = work, *dc_carry = work + step_h;
  if (!carry_in) memset(work, 0, 2 * step_h * sizeof(float));
  for (int t = T - 1; t >= 0; t--) {
    float *dz = dgates + t * step_g, *drp = da->drp + t * step_g;
    ln_gate_backward(B, H, gates + t * step_g, c + t * step_h, c + (t + 1) * step_h,
                     a->chat + t * step_h, a->rstd_c + (size_t)t * B, ln->g_c,
                     dh_out + t * step_h, dh_rec, dc_carry, dz, da->dcn + t * step_h);
    ln_rows_backward(B, G, dz, a->rhat + t * step_g, a->rstd_r + (size_t)t * B, ln->g_hh, drp);
    if (t == 0 && !grad_to_h0) continue; /* dc_carry then holds dc~·f for nobody: harmless */
    if (wpack)
      lstmd_cpu_gemm_ab_packed(B, H, G, drp, G, wpack, dh_rec, H);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, G, 1.0f, drp, G, w_hh, H, 0.0f,
                  dh_rec, H);
  }
  ln_rows_backward(T * B, G, dgates, a->xhat, a->rstd_x, ln->g_ih, da->dxp);
  if (dx)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T * B, In, G, 1.0f, da->dxp, G, w_ih,
                In, 0.0f, dx, In);
}

void lstmd_cpu_lstm_ln_backward_weight(const struct lstmd_lstm_dims *d, const float *x,
                                       const float *h, const struct lstmd_lstm_ln_acts *a,
                                       const float *dgates, const struct lstmd_lstm_ln_dacts *da,
                                       float *dw_ih, float *dw_hh, float *db_ih, float *db_hh,
                                       const struct lstmd_lstm_ln_grads *lng) {
  const int N = d->steps * d->batch, In = d->input, H = d->hidden, G = 4 * H;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, G, H, N, 1.0f, da->drp, G, h, H, 1.0f,
              dw_hh, H);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, G, In, N, 1.0f, da->dxp, G, x, In, 1.0f,
              dw_ih, In);
  lstmd_cpu_add_bias_grads(N, G, dgates, db_ih, db_hh);
  ln_param_grads(N, G, dgates, a->xhat, lng->g_ih, lng->s_ih);
  ln_param_grads(N, G, dgates, a->rhat, lng->g_hh, lng->s_hh);
  ln_param_grads(N, H, da->dcn, a->chat, lng->g_c, lng->s_c);
}
