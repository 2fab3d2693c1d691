/* test_lstm_ln_cpu.c — the layer-normalised LSTM layer (kernels/cpu/lstm_ln_cpu.h) against a
 * float64 reference written from the formulas (TFA's LayerNormLSTMCell): the forward's h and c,
 * and every gradient (W_ih, W_hh, both biases, the six gains and shifts, x, and the initial h and
 * c) against central finite differences of the float64 forward; then the window cut into time
 * chunks (carried state forward, carried (dh, dc) backward) against the whole window. Shapes with
 * H = 16, 32 take the packed recurrence of AVX2 / AVX-512; odd ones the vector loops' tails. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/lstm_ln_cpu.h"
#include "kernels/cpu/recur_gemm.h"
#include "check.h"

static unsigned long long g_seed = 777;

enum { P_WIH, P_WHH, P_BIH, P_BHH, P_GIH, P_SIH, P_GHH, P_SHH, P_GC, P_SC, P_X, P_H0, P_C0, NP };
static const char *const kNames[NP] = {"dW_ih", "dW_hh", "db_ih", "db_hh", "dln_ih_weight",
                                       "dln_ih_bias", "dln_hh_weight", "dln_hh_bias",
                                       "dln_c_weight", "dln_c_bias", "dx", "dh0", "dc0"};

struct problem {
  int T, B, In, H;
  size_t n[NP];
  double *d[NP]; /* float64 copies of the values */
  float *f[NP];  /* the float32 values the kernel reads */
};

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

/* LN of v [n] in place with gain g and shift s; eps as the kernel's. */
static void ref_ln(double *v, int n, const double *g, const double *s) {
  double mu = 0, var = 0;
  for (int j = 0; j < n; j++) mu += v[j];
  mu /= n;
  for (int j = 0; j < n; j++) var += (v[j] - mu) * (v[j] - mu);
  var /= n;
  const double rs = 1.0 / sqrt(var + (double)LSTMD_LN_EPS);
  for (int j = 0; j < n; j++) v[j] = (v[j] - mu) * rs * g[j] + s[j];
}

/* The float64 forward from (h0, c0); h, c [T+1,B,H] written when not NULL. Returns
 * Σ dh_out[t]·h[t+1]. */
static double ref_forward(const struct problem *p, const double *dh_out, double *h, double *c) {
  const int T = p->T, B = p->B, In = p->In, H = p->H, G = 4 * H;
  double *const *d = p->d;
  double *hp = malloc(sizeof(double) * B * H), *cp = malloc(sizeof(double) * B * H);
  double *zx = malloc(sizeof(double) * G), *zr = malloc(sizeof(double) * G);
  double *cn = malloc(sizeof(double) * H);
  memcpy(hp, d[P_H0], sizeof(double) * B * H);
  memcpy(cp, d[P_C0], sizeof(double) * B * H);
  if (h) memcpy(h, hp, sizeof(double) * B * H);
  if (c) memcpy(c, cp, sizeof(double) * B * H);
  double loss = 0;
  double *hn = malloc(sizeof(double) * B * H), *cnn = malloc(sizeof(double) * B * H);
  for (int t = 0; t < T; t++) {
    for (int b = 0; b < B; b++) {
      const double *x = d[P_X] + ((size_t)t * B + b) * In, *hb = hp + (size_t)b * H;
      for (int j = 0; j < G; j++) {
        double a = 0, r = 0;
        for (int k = 0; k < In; k++) a += d[P_WIH][(size_t)j * In + k] * x[k];
        for (int k = 0; k < H; k++) r += d[P_WHH][(size_t)j * H + k] * hb[k];
        zx[j] = a;
        zr[j] = r;
      }
      ref_ln(zx, G, d[P_GIH], d[P_SIH]);
      ref_ln(zr, G, d[P_GHH], d[P_SHH]);
      for (int j = 0; j < H; j++) {
        double z[4];
        for (int q = 0; q < 4; q++)
          z[q] = zx[q * H + j] + zr[q * H + j] + d[P_BIH][q * H + j] + d[P_BHH][q * H + j];
        cn[j] = sigm(z[1]) * cp[(size_t)b * H + j] + sigm(z[0]) * tanh(z[2]);
        hn[(size_t)b * H + j] = sigm(z[3]); /* o, until c is normalised */
      }
      ref_ln(cn, H, d[P_GC], d[P_SC]);
      for (int j = 0; j < H; j++) {
        cnn[(size_t)b * H + j] = cn[j];
        hn[(size_t)b * H + j] *= tanh(cn[j]);
        loss += dh_out[((size_t)t * B + b) * H + j] * hn[(size_t)b * H + j];
      }
    }
    memcpy(hp, hn, sizeof(double) * B * H);
    memcpy(cp, cnn, sizeof(double) * B * H);
    if (h) memcpy(h + (size_t)(t + 1) * B * H, hp, sizeof(double) * B * H);
    if (c) memcpy(c + (size_t)(t + 1) * B * H, cp, sizeof(double) * B * H);
  }
  void *all[] = {hp, cp, zx, zr, cn, hn, cnn};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  return loss;
}

static void problem_init(struct problem *p, int T, int B, int In, int H) {
  const size_t G = 4 * (size_t)H, BH = (size_t)B * H;
  *p = (struct problem){T, B, In, H,
                        {G * In, G * H, G, G, G, G, G, G, H, H, (size_t)T * B * In, BH, BH}};
  static const double scale[NP] = {0.4, 0.4, 0.3, 0.3, 0.5, 0.3, 0.5, 0.3, 0.5, 0.3, 1.0, 0.8, 1.5};
  for (int i = 0; i < NP; i++) {
    p->d[i] = malloc(p->n[i] * sizeof(double));
    p->f[i] = test_rand_floats(&g_seed, p->n[i], scale[i], p->d[i]);
    if (i == P_GIH || i == P_GHH || i == P_GC) /* gains around 1, as trained ones */
      for (size_t k = 0; k < p->n[i]; k++) p->d[i][k] = p->f[i][k] += 1.0f;
  }
}

static void problem_free(struct problem *p) {
  for (int i = 0; i < NP; i++) {
    free(p->d[i]);
    free(p->f[i]);
  }
}

static struct lstmd_lstm_ln ln_of(const struct problem *p) {
  return (struct lstmd_lstm_ln){p->f[P_GIH], p->f[P_SIH], p->f[P_GHH],
                                p->f[P_SHH], p->f[P_GC],  p->f[P_SC]};
}

/* Kernel buffers of one window (or its chunks). */
struct kbufs {
  float *h, *c, *gates, *xhat, *rhat, *chat, *rx, *rr, *rc, *dz, *dxp, *drp, *dcn, *work, *dx;
  float *rows, *cols;
};

static float *zf(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static void kbufs_init(struct kbufs *k, const struct problem *p, int packed) {
  const size_t N = (size_t)p->T * p->B, H = p->H, G = 4 * H;
  *k = (struct kbufs){zf((N + p->B) * H), zf((N + p->B) * H), zf(N * G), zf(N * G), zf(N * G),
                      zf(N * H), zf(N), zf(N), zf(N), zf(N * G), zf(N * G), zf(N * G), zf(N * H),
                      zf(2 * (size_t)p->B * H), zf(N * p->In)};
  memcpy(k->h, p->f[P_H0], p->n[P_H0] * sizeof(float));
  memcpy(k->c, p->f[P_C0], p->n[P_C0] * sizeof(float));
  if (packed) {
    k->rows = zf(lstmd_cpu_pack_floats(4 * p->H, p->H));
    k->cols = zf(lstmd_cpu_pack_floats(4 * p->H, p->H));
    lstmd_cpu_pack_rows(4 * p->H, p->H, p->f[P_WHH], k->rows);
    lstmd_cpu_pack_cols(4 * p->H, p->H, p->f[P_WHH], k->cols);
  }
}

static void kbufs_free(struct kbufs *k) {
  void *all[] = {k->h,  k->c,  k->gates, k->xhat, k->rhat, k->chat, k->rx, k->rr, k->rc,
                 k->dz, k->dxp, k->drp, k->dcn, k->work, k->dx, k->rows, k->cols};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* Forward and backward of the window in K chunks (K = 1: whole) into k; weight gradients
 * (zeroed first) into g[0..9]; dh0/dc0 into g[P_H0], g[P_C0] (grad_to_h0 at the first chunk). */
static void run_kernel(const struct problem *p, struct kbufs *k, int K, const float *dh_out,
                       float **g) {
  const int B = p->B, H = p->H, In = p->In, Tc = p->T / K, G = 4 * H;
  const size_t BH = (size_t)B * H;
  const struct lstmd_lstm_ln ln = ln_of(p);
  const struct lstmd_lstm_ln_acts acts = {k->xhat, k->rhat, k->chat, k->rx, k->rr, k->rc};
  const struct lstmd_lstm_dims chunk = {Tc, B, In, H};
  for (int q = 0; q < K; q++) {
    const int t0 = q * Tc;
    const struct lstmd_lstm_ln_acts a = lstmd_cpu_lstm_ln_acts_at(&acts, t0, B, H);
    lstmd_cpu_lstm_ln_forward(&chunk, p->f[P_WIH], p->f[P_WHH], p->f[P_BIH], p->f[P_BHH], &ln,
                              p->f[P_X] + (size_t)t0 * B * In, k->h + t0 * BH, k->c + t0 * BH,
                              k->gates + t0 * BH * 4, &a, k->rows);
  }
  for (int i = 0; i < P_X; i++) memset(g[i], 0, p->n[i] * sizeof(float));
  const struct lstmd_lstm_ln_grads lng = {g[P_GIH], g[P_SIH], g[P_GHH], g[P_SHH], g[P_GC], g[P_SC]};
  for (int q = K - 1; q >= 0; q--) {
    const int t0 = q * Tc;
    const struct lstmd_lstm_ln_acts a = lstmd_cpu_lstm_ln_acts_at(&acts, t0, B, H);
    const size_t r = (size_t)t0 * B; /* the chunk's rows; the d-buffers are the window's here */
    const struct lstmd_lstm_ln_dacts da = {k->dxp + r * G, k->drp + r * G, k->dcn + r * H};
    lstmd_cpu_lstm_ln_backward_input(&chunk, p->f[P_WIH], p->f[P_WHH], &ln, k->c + t0 * BH,
                                     k->gates + t0 * BH * 4, &a, dh_out + t0 * BH, k->dz + r * G,
                                     &da, k->work, q < K - 1, 1, k->dx + r * In, k->cols);
    lstmd_cpu_lstm_ln_backward_weight(&chunk, p->f[P_X] + r * In, k->h + t0 * BH, &a,
                                      k->dz + r * G, &da, g[P_WIH], g[P_WHH], g[P_BIH], g[P_BHH],
                                      &lng);
  }
  memcpy(g[P_X], k->dx, p->n[P_X] * sizeof(float));
  memcpy(g[P_H0], k->work, BH * sizeof(float));
  memcpy(g[P_C0], k->work + BH, BH * sizeof(float));
}

/* Central differences of the float64 forward for every `stride`-th element of each array. */
static void fd_grads(struct problem *p, const double *dh_out, double **fd, int stride) {
  const double eps = 1e-6;
  for (int i = 0; i < NP; i++)
    for (size_t e = 0; e < p->n[i]; e++) {
      fd[i][e] = NAN;
      if (e % stride) continue;
      const double v = p->d[i][e];
      p->d[i][e] = v + eps;
      const double up = ref_forward(p, dh_out, NULL, NULL);
      p->d[i][e] = v - eps;
      const double down = ref_forward(p, dh_out, NULL, NULL);
      p->d[i][e] = v;
      fd[i][e] = (up - down) / (2 * eps);
    }
}

/* check_close over the elements a stride picks. */
static void check_strided(const char *what, const float *got, const double *ref, size_t n,
                          int stride, double atol, double rtol) {
  const size_t m = (n + stride - 1) / stride;
  float *g = malloc(m * sizeof *g);
  double *r = malloc(m * sizeof *r);
  for (size_t e = 0, i = 0; e < n; e += stride, i++) {
    g[i] = got[e];
    r[i] = ref[e];
  }
  check_close(what, g, r, m, atol, rtol);
  free(g);
  free(r);
}

static void test_ln(int T, int B, int In, int H, int stride) {
  struct problem p;
  problem_init(&p, T, B, In, H);
  const size_t N = (size_t)T * B;
  double *rdh = malloc(N * H * sizeof(double));
  float *dh_out = test_rand_floats(&g_seed, N * H, 1.0, rdh);
  double *rh = malloc((N + B) * H * sizeof(double)), *rc = malloc((N + B) * H * sizeof(double));
  ref_forward(&p, rdh, rh, rc);
  const int packed = lstmd_cpu_recur_fast(H);
  char name[128];
  for (int K = 1; K <= 2; K++) {
    if (T % K) continue;
    struct kbufs k;
    kbufs_init(&k, &p, packed);
    float *g[NP];
    double *fd[NP];
    for (int i = 0; i < NP; i++) {
      g[i] = zf(p.n[i]);
      fd[i] = malloc(p.n[i] * sizeof(double));
    }
    run_kernel(&p, &k, K, dh_out, g);
    snprintf(name, sizeof name, "ln T%d B%d I%d H%d K%d%s: h", T, B, In, H, K,
             packed ? " packed" : "");
    check_close(name, k.h, rh, (N + B) * H, 1e-5, 1e-4);
    check_close("  ... c (normalised, carried)", k.c, rc, (N + B) * H, 1e-5, 1e-4);
    fd_grads(&p, rdh, fd, stride);
    for (int i = 0; i < NP; i++) {
      snprintf(name, sizeof name, "  ... %s vs float64 differences", kNames[i]);
      check_strided(name, g[i], fd[i], p.n[i], stride, 2e-5, 2e-4);
    }
    for (int i = 0; i < NP; i++) {
      free(g[i]);
      free(fd[i]);
    }
    kbufs_free(&k);
  }
  free(rdh);
  free(dh_out);
  free(rh);
  free(rc);
  problem_free(&p);
}

/* Chunked (K = 4, carry of (dh, dc) between chunks) against the whole window, float32 both:
 * equal up to rounding. */
static void test_ln_chunks(int T, int B, int In, int H, int K) {
  struct problem p;
  problem_init(&p, T, B, In, H);
  const size_t N = (size_t)T * B;
  float *dh_out = test_rand_floats(&g_seed, N * H, 1.0, NULL);
  const int packed = lstmd_cpu_recur_fast(H);
  struct kbufs k1, kk;
  kbufs_init(&k1, &p, packed);
  kbufs_init(&kk, &p, packed);
  float *g1[NP], *gk[NP];
  for (int i = 0; i < NP; i++) {
    g1[i] = zf(p.n[i]);
    gk[i] = zf(p.n[i]);
  }
  run_kernel(&p, &k1, 1, dh_out, g1);
  run_kernel(&p, &kk, K, dh_out, gk);
  char name[128];
  snprintf(name, sizeof name, "ln K=%d chunks T%d B%d H%d%s: h vs whole", K, T, B, H,
           packed ? " packed" : "");
  check_close_f(name, kk.h, k1.h, (N + B) * H, 1e-6, 1e-5);
  check_close_f("  ... c vs whole", kk.c, k1.c, (N + B) * H, 1e-6, 1e-5);
  for (int i = 0; i < NP; i++) {
    snprintf(name, sizeof name, "  ... %s vs whole", kNames[i]);
    check_close_f(name, gk[i], g1[i], p.n[i], 1e-5, 1e-4);
  }
  for (int i = 0; i < NP; i++) {
    free(g1[i]);
    free(gk[i]);
  }
  kbufs_free(&k1);
  kbufs_free(&kk);
  free(dh_out);
  problem_free(&p);
}

int main(void) {
  const int skip = check_forced_isa();
  if (skip) return skip;
  printf("kernels: %s\n", lstmd_cpu_isa_name(lstmd_cpu_isa()));
  test_ln(4, 3, 5, 6, 1);   /* odd sizes: every vector tail */
  test_ln(3, 2, 3, 1, 1);   /* H = 1: LN_c of one unit is its shift alone */
  test_ln(4, 5, 7, 16, 3);  /* AVX2 panels */
  test_ln(2, 9, 4, 32, 7);  /* AVX-512 panels, B past one 8-row block */
  test_ln_chunks(8, 3, 5, 6, 4);
  test_ln_chunks(8, 5, 7, 32, 4);
  return check_summary("test_lstm_ln_cpu");
}
