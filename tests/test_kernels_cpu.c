/* test_kernels_cpu.c — every CPU kernel against a straightforward float64 reference:
 * vector exp/sigmoid/tanh, the packed recurrence GEMMs of the ISA in use (AVX-512 or AVX2),
 * LSTM layer forward and backward (BPTT), linear, embedding, the embedding folded into layer 0,
 * softmax cross-entropy, MSE, AdamW and SGD. Shapes include odd sizes so that the vectorised
 * loops' remainders are exercised. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dense_cpu.h"
#include "kernels/cpu/embed_fold_cpu.h"
#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lstm_cpu.h"
#include "kernels/cpu/recur_gemm.h"
#include "check.h"

static unsigned long long g_seed = 12345;

static float *rand_f(size_t n, double scale, double *copy) {
  return test_rand_floats(&g_seed, n, scale, copy);
}
static double *zeros_d(size_t n) { return calloc(n, sizeof(double)); }
static float *zeros_f(size_t n) { return calloc(n, sizeof(float)); }
static double *to_d(const float *x, size_t n) {
  double *d = malloc(n * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}
static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static void test_fastmath(void) {
  enum { N = 20001 };
  float x[N], e[N], s[N], t[N];
  double re[N], rs[N], rt[N];
  for (int i = 0; i < N; i++) {
    x[i] = -40.0f + 80.0f * (float)i / (N - 1);
    e[i] = lstmd_expf(x[i] * 2.0f);
    s[i] = lstmd_sigmoidf(x[i]);
    t[i] = lstmd_tanhf(x[i] * 0.25f);
    re[i] = exp((double)(x[i] * 2.0f));
    rs[i] = sigm(x[i]);
    rt[i] = tanh((double)(x[i] * 0.25f));
  }
  check_close("fastmath expf [-80,80]", e, re, N, 1e-37, 4e-7);
  check_close("fastmath sigmoid", s, rs, N, 1e-7, 1e-6);
  check_close("fastmath tanh", t, rt, N, 1e-7, 1e-6);
  float tiny[3] = {lstmd_tanhf(1e-6f), lstmd_tanhf(-3e-4f), lstmd_tanhf(0.0f)};
  double rtiny[3] = {tanh(1e-6f), tanh(-3e-4f), 0.0};
  check_close("fastmath tanh near 0 (relative)", tiny, rtiny, 3, 0.0, 1e-6);
  /* A NaN (a diverged step, before its check fires) comes out NaN, and no undefined conversion
   * on the way (the ASan + UBSan build: make test-asan); ±Inf saturate as the clamps say. */
  volatile float nan = NAN, inf = INFINITY;
  check_true("fastmath NaN in, NaN out", isnan(lstmd_expf(nan)) && isnan(lstmd_sigmoidf(nan)) &&
                                             isnan(lstmd_tanhf(nan)));
  check_true("fastmath ±Inf saturate", lstmd_expf(-inf) == lstmd_expf(-87.0f) &&
                                          lstmd_expf(inf) == lstmd_expf(88.0f) &&
                                          lstmd_sigmoidf(inf) == 1.0f && lstmd_tanhf(inf) == 1.0f &&
                                          lstmd_tanhf(-inf) == -1.0f);
}

/* Float64 LSTM layer: forward over T steps from (h0, c0), then BPTT for dh_out. */
struct ref_lstm {
  int T, B, In, H;
  double *wih, *whh, *bih, *bhh, *x, *h, *c, *gates; /* h, c: [T+1,B,H]; gates [T,B,4H] */
};

static void ref_forward(struct ref_lstm *r) {
  const int B = r->B, In = r->In, H = r->H;
  for (int t = 0; t < r->T; t++)
    for (int b = 0; b < B; b++) {
      const double *x = r->x + ((size_t)t * B + b) * In, *hp = r->h + ((size_t)t * B + b) * H;
      const double *cp = r->c + ((size_t)t * B + b) * H;
      double *g = r->gates + ((size_t)t * B + b) * 4 * H;
      for (int j = 0; j < 4 * H; j++) {
        double a = r->bih[j] + r->bhh[j];
        for (int k = 0; k < In; k++) a += r->wih[(size_t)j * In + k] * x[k];
        for (int k = 0; k < H; k++) a += r->whh[(size_t)j * H + k] * hp[k];
        g[j] = (j / H == 2) ? tanh(a) : sigm(a);
      }
      double *hn = r->h + ((size_t)(t + 1) * B + b) * H, *cn = r->c + ((size_t)(t + 1) * B + b) * H;
      for (int j = 0; j < H; j++) {
        cn[j] = g[H + j] * cp[j] + g[j] * g[2 * H + j];
        hn[j] = g[3 * H + j] * tanh(cn[j]);
      }
    }
}

static void ref_backward(const struct ref_lstm *r, const double *dh_out, double *dwih, double *dwhh,
                         double *db, double *dx) {
  const int B = r->B, In = r->In, H = r->H;
  double *dh_next = zeros_d((size_t)B * H), *dc_next = zeros_d((size_t)B * H);
  double *dh_prev = zeros_d((size_t)B * H), *da = zeros_d(4 * (size_t)H);
  for (int t = r->T - 1; t >= 0; t--) {
    memset(dh_prev, 0, sizeof(double) * B * H);
    for (int b = 0; b < B; b++) {
      const double *g = r->gates + ((size_t)t * B + b) * 4 * H;
      const double *cp = r->c + ((size_t)t * B + b) * H, *cc = r->c + ((size_t)(t + 1) * B + b) * H;
      const double *x = r->x + ((size_t)t * B + b) * In, *hp = r->h + ((size_t)t * B + b) * H;
      for (int j = 0; j < H; j++) {
        double i = g[j], f = g[H + j], gg = g[2 * H + j], o = g[3 * H + j];
        double dh = dh_out[((size_t)t * B + b) * H + j] + dh_next[(size_t)b * H + j];
        double tc = tanh(cc[j]);
        double dc = dc_next[(size_t)b * H + j] + dh * o * (1 - tc * tc);
        da[j] = dc * gg * i * (1 - i);
        da[H + j] = dc * cp[j] * f * (1 - f);
        da[2 * H + j] = dc * i * (1 - gg * gg);
        da[3 * H + j] = dh * tc * o * (1 - o);
        dc_next[(size_t)b * H + j] = dc * f;
      }
      for (int j = 0; j < 4 * H; j++) {
        db[j] += da[j];
        for (int k = 0; k < In; k++) {
          dwih[(size_t)j * In + k] += da[j] * x[k];
          dx[((size_t)t * B + b) * In + k] += r->wih[(size_t)j * In + k] * da[j];
        }
        for (int k = 0; k < H; k++) {
          dwhh[(size_t)j * H + k] += da[j] * hp[k];
          dh_prev[(size_t)b * H + k] += r->whh[(size_t)j * H + k] * da[j];
        }
      }
    }
    memcpy(dh_next, dh_prev, sizeof(double) * B * H);
  }
  free(dh_next);
  free(dc_next);
  free(dh_prev);
  free(da);
}

static void test_lstm(int T, int B, int In, int H, int packed) {
  const size_t G = 4 * (size_t)H, NB = (size_t)T * B;
  struct ref_lstm r = {T, B, In, H};
  r.wih = zeros_d(G * In);
  r.whh = zeros_d(G * H);
  r.bih = zeros_d(G);
  r.bhh = zeros_d(G);
  r.x = zeros_d(NB * In);
  r.h = zeros_d((NB + B) * H);
  r.c = zeros_d((NB + B) * H);
  r.gates = zeros_d(NB * G);
  float *wih = rand_f(G * In, 0.4, r.wih), *whh = rand_f(G * H, 0.4, r.whh);
  float *bih = rand_f(G, 0.3, r.bih), *bhh = rand_f(G, 0.3, r.bhh);
  float *x = rand_f(NB * In, 1.0, r.x);
  float *h = zeros_f((NB + B) * H), *c = zeros_f((NB + B) * H), *gates = zeros_f(NB * G);
  for (int i = 0; i < B * H; i++) { /* non-zero initial state, as in stream order */
    h[i] = (float)test_uniform(&g_seed, 0.8);
    c[i] = (float)test_uniform(&g_seed, 1.5);
    r.h[i] = h[i];
    r.c[i] = c[i];
  }
  struct lstmd_lstm_dims d = {T, B, In, H};
  float *wpack = packed ? zeros_f(lstmd_cpu_pack_floats(4 * H, H)) : NULL;
  if (wpack) lstmd_cpu_pack_rows(4 * H, H, whh, wpack);
  lstmd_cpu_lstm_forward(&d, wih, whh, bih, bhh, x, h, c, gates, wpack);
  ref_forward(&r);
  char name[96];
  snprintf(name, sizeof name, "lstm fwd h T%d B%d I%d H%d%s", T, B, In, H, packed ? " packed" : "");
  check_close(name, h, r.h, (NB + B) * H, 1e-6, 1e-5);
  snprintf(name, sizeof name, "lstm fwd c T%d B%d I%d H%d", T, B, In, H);
  check_close(name, c, r.c, (NB + B) * H, 1e-6, 1e-5);
  check_close("lstm fwd gates", gates, r.gates, NB * G, 1e-6, 1e-5);

  double *rdh = zeros_d(NB * H);
  float *dh_out = rand_f(NB * H, 1.0, rdh);
  float *dwih = rand_f(G * In, 0.1, NULL), *dwhh = rand_f(G * H, 0.1, NULL);
  float *dbih = rand_f(G, 0.1, NULL), *dbhh = rand_f(G, 0.1, NULL); /* backward accumulates */
  double *rdwih = to_d(dwih, G * In), *rdwhh = to_d(dwhh, G * H), *rdb = zeros_d(G);
  double *rdbih = to_d(dbih, G), *rdbhh = to_d(dbhh, G), *rdx = zeros_d(NB * In);
  float *dx = zeros_f(NB * In), *dgates = zeros_f(NB * G), *work = zeros_f(2 * (size_t)B * H);
  if (wpack) lstmd_cpu_pack_cols(4 * H, H, whh, wpack);
  lstmd_cpu_lstm_backward(&d, wih, whh, x, h, c, gates, dh_out, dgates, work, dwih, dwhh, dbih, dbhh, dx, wpack);
  ref_backward(&r, rdh, rdwih, rdwhh, rdb, rdx);
  for (size_t j = 0; j < G; j++) {
    rdbih[j] += rdb[j];
    rdbhh[j] += rdb[j];
  }
  check_close("lstm bwd dW_ih (accumulated)", dwih, rdwih, G * In, 1e-5, 1e-4);
  check_close("lstm bwd dW_hh (accumulated)", dwhh, rdwhh, G * H, 1e-5, 1e-4);
  check_close("lstm bwd db_ih", dbih, rdbih, G, 1e-5, 1e-4);
  check_close("lstm bwd db_hh", dbhh, rdbhh, G, 1e-5, 1e-4);
  check_close("lstm bwd dx", dx, rdx, NB * In, 1e-5, 1e-4);
  void *all[] = {r.wih, r.whh, r.bih, r.bhh, r.x, r.h, r.c, r.gates, wih, whh, bih, bhh, x, h, c,
                 gates, rdh, dh_out, dwih, dwhh, dbih, dbhh, rdwih, rdwhh, rdb, rdbih, rdbhh, rdx,
                 dx, dgates, work, wpack};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* The window cut into K time chunks, as a pipeline stage runs it: forward chunk by chunk from
 * the state the previous chunk left; backward from the last chunk, carrying (dh, dc) backwards
 * (carry_in) and into each chunk's initial state except the window's first (grad_to_h0), the
 * weight part per chunk. Must equal the whole-window kernels within 1e-6, and the float64
 * reference as they do. */
static void test_lstm_chunked(int T, int B, int In, int H, int K, int packed) {
  const size_t G = 4 * (size_t)H, NB = (size_t)T * B, BH = (size_t)B * H;
  const int Tc = T / K;
  struct ref_lstm r = {T, B, In, H};
  r.wih = zeros_d(G * In);
  r.whh = zeros_d(G * H);
  r.bih = zeros_d(G);
  r.bhh = zeros_d(G);
  r.x = zeros_d(NB * In);
  r.h = zeros_d((NB + B) * H);
  r.c = zeros_d((NB + B) * H);
  r.gates = zeros_d(NB * G);
  float *wih = rand_f(G * In, 0.4, r.wih), *whh = rand_f(G * H, 0.4, r.whh);
  float *bih = rand_f(G, 0.3, r.bih), *bhh = rand_f(G, 0.3, r.bhh);
  float *x = rand_f(NB * In, 1.0, r.x);
  float *h1 = zeros_f((NB + B) * H), *c1 = zeros_f((NB + B) * H), *g1 = zeros_f(NB * G);
  float *hk = zeros_f((NB + B) * H), *ck = zeros_f((NB + B) * H), *gk = zeros_f(NB * G);
  for (size_t i = 0; i < BH; i++) {
    h1[i] = hk[i] = (float)(r.h[i] = test_uniform(&g_seed, 0.8));
    c1[i] = ck[i] = (float)(r.c[i] = test_uniform(&g_seed, 1.5));
  }
  const size_t pf = lstmd_cpu_pack_floats(4 * H, H);
  float *rows = packed ? zeros_f(pf) : NULL, *cols = packed ? zeros_f(pf) : NULL;
  if (packed) {
    lstmd_cpu_pack_rows(4 * H, H, whh, rows);
    lstmd_cpu_pack_cols(4 * H, H, whh, cols);
  }
  const struct lstmd_lstm_dims whole = {T, B, In, H}, chunk = {Tc, B, In, H};
  lstmd_cpu_lstm_forward(&whole, wih, whh, bih, bhh, x, h1, c1, g1, rows);
  for (int k = 0; k < K; k++) {
    const size_t t0 = (size_t)k * Tc;
    lstmd_cpu_lstm_forward(&chunk, wih, whh, bih, bhh, x + t0 * B * In, hk + t0 * BH,
                           ck + t0 * BH, gk + t0 * B * G, rows);
  }
  ref_forward(&r);
  char name[128];
  snprintf(name, sizeof name, "lstm K=%d chunks T%d B%d H%d%s: forward h vs whole window", K, T,
           B, H, packed ? " packed" : "");
  check_close(name, hk, r.h, (NB + B) * H, 1e-6, 1e-5);
  check_close_f("  ... h vs the unchunked kernel", hk, h1, (NB + B) * H, 1e-6, 1e-6);
  check_close_f("  ... c vs the unchunked kernel", ck, c1, (NB + B) * H, 1e-6, 1e-6);
  check_close_f("  ... gates vs the unchunked kernel", gk, g1, NB * G, 1e-6, 1e-6);

  double *rdh = zeros_d(NB * H);
  float *dh_out = rand_f(NB * H, 1.0, rdh);
  double *rdwih = zeros_d(G * In), *rdwhh = zeros_d(G * H), *rdb = zeros_d(G), *rdx = zeros_d(NB * In);
  float *dw1[4] = {zeros_f(G * In), zeros_f(G * H), zeros_f(G), zeros_f(G)};
  float *dwk[4] = {zeros_f(G * In), zeros_f(G * H), zeros_f(G), zeros_f(G)};
  float *dx1 = zeros_f(NB * In), *dxk = zeros_f(NB * In), *dg1 = zeros_f(NB * G), *dgk = zeros_f(NB * G);
  float *work = zeros_f(2 * BH);
  lstmd_cpu_lstm_backward(&whole, wih, whh, x, h1, c1, g1, dh_out, dg1, work, dw1[0], dw1[1],
                          dw1[2], dw1[3], dx1, cols);
  for (int k = K - 1; k >= 0; k--) {
    const size_t t0 = (size_t)k * Tc;
    lstmd_cpu_lstm_backward_input(&chunk, wih, whh, ck + t0 * BH, gk + t0 * B * G,
                                  dh_out + t0 * BH, dgk + t0 * B * G, work, k < K - 1, k > 0,
                                  dxk + t0 * B * In, cols);
    lstmd_cpu_lstm_backward_weight(&chunk, x + t0 * B * In, hk + t0 * BH, dgk + t0 * B * G,
                                   dwk[0], dwk[1], dwk[2], dwk[3]);
  }
  ref_backward(&r, rdh, rdwih, rdwhh, rdb, rdx);
  snprintf(name, sizeof name, "lstm K=%d chunks: backward dW_hh vs float64", K);
  check_close(name, dwk[1], rdwhh, G * H, 1e-5, 1e-4);
  check_close("  ... dW_ih vs float64", dwk[0], rdwih, G * In, 1e-5, 1e-4);
  check_close("  ... db_ih vs float64", dwk[2], rdb, G, 1e-5, 1e-4);
  check_close("  ... dx vs float64", dxk, rdx, NB * In, 1e-5, 1e-4);
  static const char *const names[4] = {"dW_ih", "dW_hh", "db_ih", "db_hh"};
  const size_t counts[4] = {G * In, G * H, G, G};
  for (int i = 0; i < 4; i++) {
    snprintf(name, sizeof name, "  ... %s vs the unchunked kernel", names[i]);
    check_close_f(name, dwk[i], dw1[i], counts[i], 1e-6, 1e-6);
  }
  check_close_f("  ... dgates vs the unchunked kernel", dgk, dg1, NB * G, 1e-6, 1e-6);
  check_close_f("  ... dx vs the unchunked kernel", dxk, dx1, NB * In, 1e-6, 1e-6);
  void *all[] = {r.wih, r.whh, r.bih, r.bhh, r.x, r.h, r.c, r.gates, wih, whh, bih, bhh, x, h1,
                 c1, g1, hk, ck, gk, rows, cols, rdh, dh_out, rdwih, rdwhh, rdb, rdx, dx1, dxk,
                 dg1, dgk, work, dw1[0], dw1[1], dw1[2], dw1[3], dwk[0], dwk[1], dwk[2], dwk[3]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* A split input projection (lstm_cpu.h's dims.split, model.stage_split=balanced): the layer's
 * kernels with rows [0, r) left out, plus the lstmd_cpu_lstm_rows_* part of another stage,
 * against the unsplit kernels. The split layer gets w_ih with its rows [0, r) set to NaN (they
 * must not be read) and a dW_ih whose rows [0, r) hold NaN (they must be left alone). */
static void test_lstm_split(int T, int B, int In, int H, int r) {
  const int G = 4 * H;
  const size_t NB = (size_t)T * B, BH = (size_t)B * H;
  float *wih = rand_f(G * In, 0.4, NULL), *whh = rand_f(G * H, 0.4, NULL);
  float *bih = rand_f(G, 0.3, NULL), *bhh = rand_f(G, 0.3, NULL), *x = rand_f(NB * In, 1.0, NULL);
  float *poisoned = malloc((size_t)G * In * sizeof(float));
  memcpy(poisoned, wih, (size_t)G * In * sizeof(float));
  for (size_t i = 0; i < (size_t)r * In; i++) poisoned[i] = NAN;
  float *h1 = zeros_f((NB + B) * H), *c1 = zeros_f((NB + B) * H), *g1 = zeros_f(NB * G);
  float *hs = zeros_f((NB + B) * H), *cs = zeros_f((NB + B) * H), *gs = zeros_f(NB * G);
  float *p = zeros_f(NB * r);
  const struct lstmd_lstm_dims whole = {T, B, In, H}, split = {T, B, In, H, r};
  lstmd_cpu_lstm_forward(&whole, wih, whh, bih, bhh, x, h1, c1, g1, NULL);
  lstmd_cpu_lstm_rows_forward((int)NB, In, r, x, wih, p); /* the other stage's part */
  for (size_t i = 0; i < NB; i++) memcpy(gs + i * G, p + i * r, (size_t)r * sizeof(float));
  lstmd_cpu_lstm_forward(&split, poisoned, whh, bih, bhh, x, hs, cs, gs, NULL);
  char name[128];
  snprintf(name, sizeof name, "lstm split r=%d of 4H=%d T%d B%d In%d: forward h vs unsplit", r, G,
           T, B, In);
  check_close_f(name, hs, h1, (NB + B) * H, 1e-6, 1e-6);
  float *dh_out = rand_f(NB * H, 1.0, NULL), *work = zeros_f(2 * BH);
  float *dg1 = zeros_f(NB * G), *dgs = zeros_f(NB * G);
  float *dx1 = zeros_f(NB * In), *dxs = zeros_f(NB * In);
  float *dw1[4] = {zeros_f(G * In), zeros_f(G * H), zeros_f(G), zeros_f(G)};
  float *dws[4] = {zeros_f(G * In), zeros_f(G * H), zeros_f(G), zeros_f(G)};
  float *dp = zeros_f(NB * r), *dw_rows = zeros_f((size_t)r * In);
  for (size_t i = 0; i < (size_t)r * In; i++) dws[0][i] = NAN;
  lstmd_cpu_lstm_backward(&whole, wih, whh, x, h1, c1, g1, dh_out, dg1, work, dw1[0], dw1[1],
                          dw1[2], dw1[3], dx1, NULL);
  lstmd_cpu_lstm_backward(&split, poisoned, whh, x, hs, cs, gs, dh_out, dgs, work, dws[0], dws[1],
                          dws[2], dws[3], dxs, NULL);
  for (size_t i = 0; i < NB; i++) memcpy(dp + i * r, dgs + i * G, (size_t)r * sizeof(float));
  lstmd_cpu_lstm_rows_backward_input((int)NB, In, r, wih, dp, dxs); /* the other stage's part */
  lstmd_cpu_lstm_rows_backward_weight((int)NB, In, r, x, dp, dw_rows);
  check_close_f("  ... dx (both parts) vs unsplit", dxs, dx1, NB * In, 1e-6, 1e-6);
  check_close_f("  ... dW_ih rows [0, r) vs unsplit", dw_rows, dw1[0], (size_t)r * In, 1e-6, 1e-6);
  check_close_f("  ... dW_ih rows [r, 4H) vs unsplit", dws[0] + (size_t)r * In,
                dw1[0] + (size_t)r * In, (size_t)(G - r) * In, 1e-6, 1e-6);
  size_t left = 0;
  for (size_t i = 0; i < (size_t)r * In; i++) left += isnan(dws[0][i]) != 0;
  check_true("  ... dW_ih rows [0, r) left alone by the split layer", left == (size_t)r * In);
  check_close_f("  ... dW_hh vs unsplit", dws[1], dw1[1], (size_t)G * H, 1e-6, 1e-6);
  check_close_f("  ... db_ih vs unsplit", dws[2], dw1[2], G, 1e-6, 1e-6);
  check_close_f("  ... db_hh vs unsplit", dws[3], dw1[3], G, 1e-6, 1e-6);
  void *all[] = {wih, whh, bih, bhh, x, poisoned, h1, c1, g1, hs, cs, gs, p, dh_out, work, dg1,
                 dgs, dx1, dxs, dp, dw_rows, dw1[0], dw1[1], dw1[2], dw1[3], dws[0], dws[1],
                 dws[2], dws[3]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void test_dense(void) {
  enum { N = 13, In = 11, O = 7, V = 9 };
  double rx[N * In], rw[O * In], rb[O], rdy[N * O];
  float *x = rand_f(N * In, 1.0, rx), *w = rand_f(O * In, 0.5, rw), *b = rand_f(O, 0.5, rb);
  float y[N * O], dx[N * In], dw[O * In] = {0}, db[O] = {0};
  double ry[N * O], rdx[N * In] = {0}, rdw[O * In] = {0}, rdb[O] = {0};
  lstmd_cpu_linear_forward(N, In, O, x, w, b, y);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < O; o++) {
      ry[n * O + o] = rb[o];
      for (int k = 0; k < In; k++) ry[n * O + o] += rx[n * In + k] * rw[o * In + k];
    }
  check_close("linear forward", y, ry, N * O, 1e-6, 1e-5);
  float *dy = rand_f(N * O, 1.0, rdy);
  lstmd_cpu_linear_backward(N, In, O, x, w, dy, dw, db, dx);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < O; o++) {
      rdb[o] += rdy[n * O + o];
      for (int k = 0; k < In; k++) {
        rdw[o * In + k] += rdy[n * O + o] * rx[n * In + k];
        rdx[n * In + k] += rdy[n * O + o] * rw[o * In + k];
      }
    }
  check_close("linear backward dw", dw, rdw, O * In, 1e-5, 1e-4);
  check_close("linear backward db", db, rdb, O, 1e-5, 1e-4);
  check_close("linear backward dx", dx, rdx, N * In, 1e-5, 1e-4);

  /* embedding: repeated ids accumulate */
  int32_t ids[N];
  for (int n = 0; n < N; n++) ids[n] = (n * 5) % V;
  double rtable[V * In];
  float *table = rand_f(V * In, 1.0, rtable), emb[N * In], dtable[V * In] = {0};
  double remb[N * In], rdtable[V * In] = {0};
  lstmd_cpu_embedding_forward(N, In, table, ids, emb);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < In; k++) remb[n * In + k] = rtable[ids[n] * In + k];
  check_close("embedding forward", emb, remb, N * In, 0, 0);
  lstmd_cpu_embedding_backward(N, In, x, ids, dtable);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < In; k++) rdtable[ids[n] * In + k] += rx[n * In + k];
  check_close("embedding backward", dtable, rdtable, V * In, 1e-6, 1e-6);

  /* softmax cross-entropy: loss and gradient, with large logits for stability */
  double rz[N * V];
  float *z = rand_f(N * V, 30.0, rz);
  int32_t tg[N];
  for (int n = 0; n < N; n++) tg[n] = (n * 7 + 3) % V;
  double rloss = 0, rgrad[N * V];
  const double scale = 0.25;
  for (int n = 0; n < N; n++) {
    double mx = rz[n * V], s = 0;
    for (int v = 1; v < V; v++) mx = fmax(mx, rz[n * V + v]);
    for (int v = 0; v < V; v++) s += exp(rz[n * V + v] - mx);
    rloss += log(s) + mx - rz[n * V + tg[n]];
    for (int v = 0; v < V; v++) rgrad[n * V + v] = scale * (exp(rz[n * V + v] - mx) / s - (v == tg[n]));
  }
  float loss_f = (float)lstmd_cpu_softmax_xent(N, V, z, tg, (float)scale);
  check_close("softmax xent loss", &loss_f, &rloss, 1, 1e-5, 1e-6);
  check_close("softmax xent grad", z, rgrad, N * V, 1e-7, 1e-5);
  { /* a class 100 nats below the rest: a zero gradient, not a subnormal; NaN stays NaN */
    float far[3] = {-100.0f, 1.0f, 2.0f}, bad[3] = {1.0f, NAN, 2.0f};
    const int32_t t2[1] = {2};
    lstmd_cpu_softmax_xent(1, 3, far, t2, 0.25f);
    check_true("softmax xent: a class 100 nats below gets 0", far[0] == 0.0f && far[1] > 0.0f);
    check_true("softmax xent: NaN logit -> NaN loss and gradient",
               isnan(lstmd_cpu_softmax_xent(1, 3, bad, t2, 0.25f)) && isnan(bad[0]));
  }

  /* MSE */
  double rp[N], rt[N], rg[N], rl = 0;
  float *p = rand_f(N, 2.0, rp), *t = rand_f(N, 2.0, rt);
  for (int n = 0; n < N; n++) {
    rl += (rp[n] - rt[n]) * (rp[n] - rt[n]);
    rg[n] = scale * 2 * (rp[n] - rt[n]);
  }
  float l = (float)lstmd_cpu_mse(N, p, t, (float)scale);
  check_close("mse loss", &l, &rl, 1, 1e-6, 1e-6);
  check_close("mse grad", p, rg, N, 1e-7, 1e-6);
  free(x); free(w); free(b); free(dy); free(table); free(z); free(p); free(t);
}

/* The folded embedding (embed_fold_cpu.h) against the unfolded definitions in float64:
 * gates = E[id]·W_ihᵀ, dW_ih = Σ_n dgates_nᵀ·E[id_n], dE[v] = Σ_{n: id_n = v} dgates_n·W_ih,
 * db = Σ_n dgates_n; ids repeat, one id never occurs (its dE row stays as it was), and the
 * gradients accumulate onto what the buffers held. */
static void test_embed_fold(int N, int V, int E, int G) {
  int32_t *ids = malloc((size_t)N * sizeof *ids);
  for (int n = 0; n < N; n++) ids[n] = (n * 7 + 3) % (V - 1); /* id V-1 never occurs */
  double *re = zeros_d((size_t)V * E), *rw = zeros_d((size_t)G * E), *rdg = zeros_d((size_t)N * G);
  double *rdw0 = zeros_d((size_t)G * E), *rde0 = zeros_d((size_t)V * E), *rdb0 = zeros_d(G);
  float *emb = rand_f((size_t)V * E, 1.0, re), *w = rand_f((size_t)G * E, 0.5, rw);
  float *dg = rand_f((size_t)N * G, 1.0, rdg), *dw = rand_f((size_t)G * E, 1.0, rdw0);
  float *de = rand_f((size_t)V * E, 1.0, rde0), *db = rand_f(G, 1.0, rdb0);
  float *db2 = zeros_f(G), *gates = zeros_f((size_t)N * G), *scratch = zeros_f((size_t)V * G);
  for (int g = 0; g < G; g++) db2[g] = db[g];
  double *rgates = zeros_d((size_t)N * G), *rdb2 = zeros_d(G);
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++)
      for (int e = 0; e < E; e++) rgates[(size_t)n * G + g] += re[ids[n] * E + e] * rw[g * E + e];
  lstmd_cpu_fold_forward(N, V, E, G, ids, emb, w, scratch, gates);
  check_close("fold forward: projection rows", gates, rgates, (size_t)N * G, 1e-5, 1e-5);
  for (int n = 0; n < N; n++)
    for (int g = 0; g < G; g++) {
      const double d = rdg[(size_t)n * G + g];
      rdb0[g] += d;
      for (int e = 0; e < E; e++) {
        rdw0[g * E + e] += d * re[ids[n] * E + e];
        rde0[ids[n] * E + e] += d * rw[g * E + e];
      }
    }
  for (int g = 0; g < G; g++) rdb2[g] = rdb0[g];
  lstmd_cpu_fold_backward(N, V, E, G, ids, dg, emb, w, scratch, dw, db, db2, de);
  check_close("fold backward dW_ih", dw, rdw0, (size_t)G * E, 1e-5, 1e-4);
  check_close("fold backward dE", de, rde0, (size_t)V * E, 1e-5, 1e-4);
  check_close("fold backward db_ih", db, rdb0, G, 1e-5, 1e-4);
  check_close("fold backward db_hh", db2, rdb2, G, 1e-5, 1e-4);
  free(ids); free(re); free(rw); free(rdg); free(rdw0); free(rde0); free(rdb0); free(rgates);
  free(rdb2); free(emb); free(w); free(dg); free(dw); free(de); free(db); free(db2); free(gates);
  free(scratch);
}

static void test_optimizers(void) {
  enum { N = 37 };
  double rp[N], rg[N], rm[N], rv[N];
  float *p = rand_f(N, 1.0, rp), *g = rand_f(N, 1.0, rg), *m = rand_f(N, 0.1, rm);
  float *v = rand_f(N, 0.1, rv);
  for (int i = 0; i < N; i++) v[i] = (float)(rv[i] = fabs(rv[i]));
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  const long step = 3;
  lstmd_cpu_adamw(N, p, g, m, v, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, step);
  for (int i = 0; i < N; i++) {
    rp[i] *= 1 - lr * wd;
    rm[i] = b1 * rm[i] + (1 - b1) * rg[i];
    rv[i] = b2 * rv[i] + (1 - b2) * rg[i] * rg[i];
    double mhat = rm[i] / (1 - pow(b1, step)), vhat = rv[i] / (1 - pow(b2, step));
    rp[i] -= lr * mhat / (sqrt(vhat) + eps);
  }
  check_close("adamw params", p, rp, N, 1e-6, 1e-5);
  check_close("adamw exp_avg", m, rm, N, 1e-7, 1e-6);
  check_close("adamw exp_avg_sq", v, rv, N, 1e-8, 1e-6);

  double sp[N], sg[N], sb[N];
  float *q = rand_f(N, 1.0, sp), *h = rand_f(N, 1.0, sg), *buf = rand_f(N, 0.5, sb);
  lstmd_cpu_sgd(N, q, h, buf, 0.05f, 0.9f, 0.01f);
  for (int i = 0; i < N; i++) {
    double d = sg[i] + 0.01 * sp[i];
    sb[i] = 0.9 * sb[i] + d;
    sp[i] -= 0.05 * sb[i];
  }
  check_close("sgd momentum params", q, sp, N, 1e-6, 1e-5);
  check_close("sgd momentum buffer", buf, sb, N, 1e-6, 1e-5);
  float ss[N];
  double rs[N], sumsq = 0;
  for (int i = 0; i < N; i++) {
    ss[i] = q[i];
    rs[i] = (double)q[i] * 0.5;
    sumsq += (double)q[i] * q[i];
  }
  float got = (float)lstmd_cpu_sumsq(N, q);
  check_close("sumsq", &got, &sumsq, 1, 1e-6, 1e-6);
  lstmd_cpu_scale(N, ss, 0.5f);
  check_close("scale", ss, rs, N, 0, 1e-7);
  free(p); free(g); free(m); free(v); free(q); free(h); free(buf);
}

/* The packed recurrence GEMMs of recur_gemm.h alone, for the ISA in use, against float64, for
 * every row count M in kMs (1 .. 17: each tail of the 6-row AVX2 and 8-row AVX-512 blocks, one
 * and several whole blocks), with padded strides as the callers' (lda, ldc > the width used):
 *   rows: C [M,4H] += A [M,H] · W^T, W = W_hh [4H,H] packed by lstmd_cpu_pack_rows
 *   cols: C [M,H]   = A [M,4H] · W,  W = W_hh as [4H,H] packed by lstmd_cpu_pack_cols
 * The padding columns of C must come back untouched. */
static void test_recur_gemm(int H) {
  static const int kMs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 17};
  enum { kPad = 3 };
  const int G = 4 * H, nM = (int)(sizeof kMs / sizeof kMs[0]);
  double *rw = zeros_d((size_t)G * H);
  float *w = rand_f((size_t)G * H, 0.4, rw);
  float *rows = zeros_f(lstmd_cpu_pack_floats(G, H)), *cols = zeros_f(lstmd_cpu_pack_floats(G, H));
  lstmd_cpu_pack_rows(G, H, w, rows);
  lstmd_cpu_pack_cols(G, H, w, cols);
  size_t n_rows = 0, n_cols = 0; /* all M together: one check line per variant */
  for (int i = 0; i < nM; i++) {
    n_rows += (size_t)kMs[i] * (G + kPad);
    n_cols += (size_t)kMs[i] * (H + kPad);
  }
  float *got_r = malloc(n_rows * sizeof(float)), *got_c = malloc(n_cols * sizeof(float));
  double *ref_r = zeros_d(n_rows), *ref_c = zeros_d(n_cols);
  size_t at_r = 0, at_c = 0;
  for (int i = 0; i < nM; i++) {
    const int M = kMs[i], lda_r = H + kPad, ldc_r = G + kPad, lda_c = G + kPad, ldc_c = H + kPad;
    double *ra = zeros_d((size_t)M * lda_c);
    float *a = rand_f((size_t)M * lda_c, 1.0, ra); /* big enough for both: lda_c > lda_r */
    float *cr = got_r + at_r, *cc = got_c + at_c;
    double *er = ref_r + at_r, *ec = ref_c + at_c;
    for (size_t e = 0; e < (size_t)M * ldc_r; e++) /* accumulated into, padding included */
      er[e] = cr[e] = (float)test_uniform(&g_seed, 1.0);
    for (size_t e = 0; e < (size_t)M * ldc_c; e++) { /* overwritten but for the padding */
      cc[e] = (float)test_uniform(&g_seed, 1.0);
      ec[e] = e % ldc_c < (size_t)H ? 0.0 : cc[e];
    }
    for (int m = 0; m < M; m++) {
      const double *ar = ra + (size_t)m * lda_r, *ac = ra + (size_t)m * lda_c;
      for (int n = 0; n < G; n++)
        for (int k = 0; k < H; k++) er[(size_t)m * ldc_r + n] += ar[k] * rw[(size_t)n * H + k];
      for (int n = 0; n < H; n++)
        for (int k = 0; k < G; k++) ec[(size_t)m * ldc_c + n] += ac[k] * rw[(size_t)k * H + n];
    }
    lstmd_cpu_gemm_abt_packed(M, G, H, a, lda_r, rows, cr, ldc_r);
    lstmd_cpu_gemm_ab_packed(M, H, G, a, lda_c, cols, cc, ldc_c);
    at_r += (size_t)M * ldc_r;
    at_c += (size_t)M * ldc_c;
    free(ra);
    free(a);
  }
  char name[96];
  snprintf(name, sizeof name, "packed %s rows H%d M1..17", lstmd_cpu_isa_name(lstmd_cpu_isa()), H);
  check_close(name, got_r, ref_r, n_rows, 1e-5, 1e-5);
  snprintf(name, sizeof name, "packed %s cols H%d M1..17", lstmd_cpu_isa_name(lstmd_cpu_isa()), H);
  check_close(name, got_c, ref_c, n_cols, 1e-5, 1e-5);
  void *all[] = {rw, w, rows, cols, got_r, got_c, ref_r, ref_c};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* Which H take the packed recurrence on each ISA (recur_gemm.h), then the packed GEMMs at those
 * that do. H = 16, 48: AVX2 panels (16 columns) but not AVX-512 ones (32); 24, 37: neither. */
static void test_recur(void) {
  static const int kHs[] = {16, 24, 32, 37, 48, 64, 96};
  const enum lstmd_isa isa = lstmd_cpu_isa();
  const int width = isa == LSTMD_ISA_AVX512 ? 32 : isa == LSTMD_ISA_AVX2 ? 16 : 0;
  int packed = 0;
  for (size_t i = 0; i < sizeof kHs / sizeof kHs[0]; i++) {
    const int H = kHs[i], want = width && H % width == 0;
    char name[96];
    snprintf(name, sizeof name, "recur_fast(%d) on %s is %d", H, lstmd_cpu_isa_name(isa), want);
    check_true(name, lstmd_cpu_recur_fast(H) == want);
    if (lstmd_cpu_recur_fast(H)) {
      test_recur_gemm(H);
      packed++;
    }
  }
  if (!packed)
    printf("packed recurrence kernels: none on %s (cblas_sgemm)\n", lstmd_cpu_isa_name(isa));
}

/* The ISA the kernels run with (kernels/cpu/isa.h); under LSTMD_CPU_ISA, the one asked for, so
 * that the ctest runs forcing avx2 and generic (tests/CMakeLists.txt) cannot silently test the
 * default. 77 (skipped) when the CPU lacks the ISA asked for. */
static int check_isa(void) {
  printf("kernels: %s (this CPU: %s)\n", lstmd_cpu_isa_name(lstmd_cpu_isa()),
         lstmd_cpu_isa_name(lstmd_cpu_isa_available()));
  return check_forced_isa();
}

int main(void) {
  if (check_isa() == 77) return 77;
  test_fastmath();
  test_lstm(5, 3, 4, 6, 0);
  test_lstm(7, 5, 19, 37, 0); /* odd sizes: vector remainders */
  test_lstm(3, 2, 64, 64, 0);
  for (int K = 1; K <= 16; K *= 2) test_lstm_chunked(16, 3, 5, 8, K, 0); /* K = 1, 2, 4, 8, T */
  test_lstm_chunked(12, 5, 19, 37, 3, 0);
  test_recur();
  /* The layer with the packed recurrence where this ISA has it (the same shapes through
   * cblas_sgemm otherwise): B = 13, 16, 5, 4 give row tails 1, 4, 5, 4 of the 6-row AVX2 block
   * and 5, 0, 5, 4 of the 8-row AVX-512 one; H = 16, 48 take the AVX2 panels only. */
  test_lstm(4, 13, 24, 64, lstmd_cpu_recur_fast(64));
  test_lstm(3, 16, 64, 96, lstmd_cpu_recur_fast(96));
  test_lstm(3, 5, 7, 16, lstmd_cpu_recur_fast(16));
  test_lstm(3, 13, 9, 48, lstmd_cpu_recur_fast(48));
  test_lstm_chunked(8, 4, 24, 64, 4, lstmd_cpu_recur_fast(64));
  test_lstm_chunked(6, 7, 5, 48, 3, lstmd_cpu_recur_fast(48));
  test_lstm_split(6, 5, 24, 32, 96); /* r a multiple of 32, as the split's rows */
  test_lstm_split(4, 3, 19, 8, 7);   /* odd: the GEMMs' edges */
  test_lstm_split(3, 4, 16, 8, 32);  /* r = 4H: the whole projection elsewhere */
  test_dense();
  test_embed_fold(23, 6, 5, 28);    /* odd: the row-add's vector remainder */
  test_embed_fold(64, 9, 16, 128);
  test_optimizers();
  return check_summary("test_kernels_cpu");
}
