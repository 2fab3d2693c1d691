/* test_compress.c — the numeric parts of pruning and distillation against independent float64
 * references: the PolynomialDecay schedule and its pruning steps against the closed form, the
 * masks against a brute-force ranking (exact count kept, ties by index), and the KD losses'
 * values against float64 and their gradients against central finite differences of the float64
 * loss; α = 0 gives the plain losses bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cpu/dense_cpu.h"
#include "kernels/cpu/kd_cpu.h"
#include "worker/model/model.h"
#include "worker/model/prune.h"

/* sparsity = s_f + (0 − s_f)(1 − (step − b)/(e − b))^p inside [b, e], 0 before, s_f after. */
static double closed_form(double s_f, long b, long e, double p, long step) {
  if (step <= b) return 0.0;
  if (step >= e) return s_f;
  return s_f - s_f * pow(1.0 - (double)(step - b) / (double)(e - b), p);
}

static void test_schedule(void) {
  const struct lstmd_prune_config cases[] = {
      {.target_sparsity = 0.9f, .begin_step = 100, .end_step = 1100, .frequency = 100, .power = 3},
      {.target_sparsity = 0.5f, .begin_step = 0, .end_step = 7, .frequency = 3, .power = 1},
      {.target_sparsity = 0.75f, .begin_step = 5, .end_step = 6, .frequency = 1, .power = 2.5f}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const struct lstmd_prune_config *k = &cases[c];
    double worst = 0.0;
    int due_ok = 1;
    for (long step = 0; step <= k->end_step + 3 * k->frequency; step++) {
      const double want = closed_form(k->target_sparsity, k->begin_step, k->end_step, k->power, step);
      const double err = fabs(lstmd_prune_sparsity_at(k, step) - want);
      worst = err > worst ? err : worst;
      const int due = step >= k->begin_step && step <= k->end_step &&
                      (step - k->begin_step) % k->frequency == 0;
      if (due != lstmd_prune_due(k, step)) {
        fprintf(stderr, "  case %zu step %ld: due %d, want %d\n", c, step,
                lstmd_prune_due(k, step), due);
        due_ok = 0;
      }
    }
    char what[64];
    snprintf(what, sizeof what, "schedule case %zu vs closed form", c);
    check_true(what, worst < 1e-12);
    snprintf(what, sizeof what, "pruning steps case %zu", c);
    check_true(what, due_ok);
  }
  /* three values by hand: 0.9·(1 − 0.5³) = 0.7875 half-way, the target at the end */
  const struct lstmd_prune_config k = cases[0];
  check_true("schedule 0.7875 half-way", fabs(lstmd_prune_sparsity_at(&k, 600) - 0.7875) < 1e-7);
  check_true("schedule target at end_step", fabs(lstmd_prune_sparsity_at(&k, 1100) - 0.9) < 1e-7);
  check_true("schedule 0 at begin_step", lstmd_prune_sparsity_at(&k, 100) == 0.0);
}

/* Keep j iff fewer than k weights come before it in (|w| desc, index asc). */
static int masks_match(const float *w, size_t n, double s, const uint8_t *mask) {
  const double keep = nearbyint((double)n * (1.0 - s)); /* TF's round: half to even */
  const size_t k = keep < 1.0 ? 1 : (size_t)keep;
  size_t kept = 0, bad = 0;
  for (size_t j = 0; j < n; j++) {
    size_t before = 0;
    for (size_t i = 0; i < n; i++)
      before += fabsf(w[i]) > fabsf(w[j]) || (fabsf(w[i]) == fabsf(w[j]) && i < j);
    if ((before < k) != mask[j] && bad++ < 3)
      fprintf(stderr, "  w[%zu] = %g: mask %d, want %d\n", j, w[j], mask[j], before < k);
    kept += mask[j];
  }
  return !bad && kept == k;
}

static void test_masks(void) {
  const struct lstmd_model_shape shape = {.kind = LSTMD_MODEL_TEXT, .vocab = 7, .embed = 3,
                                          .hidden = 5, .layers = 2};
  struct lstmd_model *m;
  if (lstmd_model_create(&shape, &m)) exit(1);
  unsigned long long st = 17;
  for (size_t i = 0; i < m->n_params; i++) m->params[i] = (float)test_uniform(&st, 1.0);
  /* ties: quantise one tensor to 8 levels (with both signs: |w| ties across signs too) */
  const struct lstmd_tensor *hh = lstmd_model_tensor(m, "lstm.weight_hh_l1");
  for (size_t j = 0; j < hh->count; j++)
    m->params[hh->offset + j] = roundf(m->params[hh->offset + j] * 4.0f) / 4.0f;
  struct lstmd_prune_config c = {.target_sparsity = 0.9f, .begin_step = 0, .end_step = 10,
                                 .frequency = 1, .power = 3};
  struct lstmd_prune *p;
  if (lstmd_prune_create(&c, m, &p)) exit(1);
  check_true("default tensors: 2 per layer + head", p->n == 5);
  float *before = malloc(m->n_params * sizeof(float)), *original = malloc(m->n_params * sizeof(float));
  memcpy(before, m->params, m->n_params * sizeof(float));
  memcpy(original, m->params, m->n_params * sizeof(float));
  const double levels[] = {0.25, 0.5, 0.75, 0.9};
  for (size_t l = 0; l < 4; l++) {
    lstmd_prune_update(p, m, m->params, levels[l]);
    int ok = 1;
    for (int i = 0; i < p->n; i++) {
      const struct lstmd_tensor *t = &m->tensors[p->tensor[i]];
      ok &= masks_match(before + t->offset, t->count, levels[l], p->mask[i]);
      for (size_t j = 0; j < t->count; j++)
        ok &= p->mask[i][j] ? m->params[t->offset + j] == before[t->offset + j]
                            : m->params[t->offset + j] == 0.0f;
      memcpy(before + t->offset, m->params + t->offset, t->count * sizeof(float));
    }
    char what[64];
    snprintf(what, sizeof what, "masks at sparsity %.2f vs ranking", levels[l]);
    check_true(what, ok);
  }
  int others_kept = 1; /* the embedding and the biases are never pruned */
  for (int i = 0; i < m->n_tensors; i++) {
    const struct lstmd_tensor *t = &m->tensors[i];
    if (strstr(t->name, "bias") || !strcmp(t->name, "embed.weight"))
      others_kept &= !memcmp(m->params + t->offset, original + t->offset, t->count * sizeof(float));
  }
  check_true("embedding and biases untouched", others_kept);
  /* rounding of the kept count: 10·(1 − 0.25) = 7.5 keeps 8, 10·(1 − 0.35) = 6.5 keeps 6 */
  float w10[10];
  uint8_t mk[10];
  for (int j = 0; j < 10; j++) w10[j] = (float)(j + 1);
  struct lstmd_model_shape s10 = {.kind = LSTMD_MODEL_SERIES, .width = 1, .hidden = 1,
                                  .layers = 1, .horizon = 10};
  struct lstmd_model *m10;
  if (lstmd_model_create(&s10, &m10)) exit(1);
  struct lstmd_prune_config c10 = c;
  snprintf(c10.tensors, sizeof c10.tensors, "head.weight");
  struct lstmd_prune *p10;
  if (lstmd_prune_create(&c10, m10, &p10)) exit(1);
  const struct lstmd_tensor *hw = lstmd_model_tensor(m10, "head.weight");
  const double rates[] = {0.25, 0.35, 0.999};
  const size_t kept_want[] = {8, 6, 1};
  for (int r = 0; r < 3; r++) {
    memcpy(m10->params + hw->offset, w10, sizeof w10);
    lstmd_prune_update(p10, m10, m10->params, rates[r]);
    memcpy(mk, p10->mask[0], 10);
    size_t kept = 0;
    for (int j = 0; j < 10; j++) kept += mk[j];
    char what[64];
    snprintf(what, sizeof what, "kept count at sparsity %.3f: %zu", rates[r], kept_want[r]);
    check_true(what, kept == kept_want[r] && mk[9]);
  }
  char err[256];
  check_true("tensors: bias refused",
             lstmd_prune_check_tensors("lstm.bias_ih_l0", 2, err, sizeof err) != 0);
  check_true("tensors: embedding refused",
             lstmd_prune_check_tensors("embed.weight", 2, err, sizeof err) != 0);
  check_true("tensors: layer 2 of 2 refused",
             lstmd_prune_check_tensors("lstm.weight_ih_l2", 2, err, sizeof err) != 0);
  check_true("tensors: l01 refused", lstmd_prune_check_tensors("lstm.weight_hh_l01", 2, err,
                                                               sizeof err) != 0);
  check_true("tensors: a list accepted",
             lstmd_prune_check_tensors("head.weight,lstm.weight_hh_l1", 2, err, sizeof err) == 0);
  check_true("tensors: spaces around the names accepted",
             lstmd_prune_check_tensors(" head.weight , lstm.weight_hh_l1\t", 2, err, sizeof err) == 0);
  check_true("tensors: the same name twice, once spaced, refused",
             lstmd_prune_check_tensors("head.weight, head.weight", 2, err, sizeof err) != 0);
  check_true("tensors: an empty name refused",
             lstmd_prune_check_tensors("head.weight, ,lstm.weight_hh_l1", 2, err, sizeof err) != 0);
  lstmd_prune_destroy(p10);
  lstmd_model_destroy(m10);
  free(before);
  free(original);
  lstmd_prune_destroy(p);
  lstmd_model_destroy(m);
}

/* float64 references of the KD losses (kd_cpu.h), from the definitions. */
static double ref_kd_text(int N, int V, const double *z, const double *zt, const int32_t *y,
                          double T, double a) {
  double total = 0.0;
  for (int n = 0; n < N; n++) {
    const double *zs = z + (size_t)n * V, *tz = zt + (size_t)n * V;
    double s1 = 0, sT = 0, tT = 0;
    for (int v = 0; v < V; v++) {
      s1 += exp(zs[v]);
      sT += exp(zs[v] / T);
      tT += exp(tz[v] / T);
    }
    double kl = 0.0;
    for (int v = 0; v < V; v++) {
      const double pt = exp(tz[v] / T) / tT, ps = exp(zs[v] / T) / sT;
      kl += pt * log(pt / ps);
    }
    total += a * T * T * kl + (1 - a) * (log(s1) - zs[y[n]]);
  }
  return total;
}

static double ref_kd_series(size_t N, const double *p, const double *t, const double *y,
                            double a) {
  double total = 0.0;
  for (size_t i = 0; i < N; i++)
    total += a * (p[i] - t[i]) * (p[i] - t[i]) + (1 - a) * (p[i] - y[i]) * (p[i] - y[i]);
  return total;
}

static void test_kd(void) {
  enum { N = 6, V = 11 };
  unsigned long long st = 5;
  double zd[N * V], ztd[N * V], grad[N * V];
  int32_t y[N];
  for (int n = 0; n < N; n++) y[n] = (int32_t)((n * 7 + 3) % V);
  float *z0 = test_rand_floats(&st, N * V, 3.0, zd), *zt = test_rand_floats(&st, N * V, 3.0, ztd);
  const float gs = 0.37f;
  const float temps[] = {1.0f, 2.0f, 4.0f}, alphas[] = {0.3f, 0.7f, 1.0f};
  for (int c = 0; c < 3; c++) {
    const double T = temps[c], a = alphas[c];
    float z[N * V];
    memcpy(z, z0, sizeof z);
    const double loss = lstmd_cpu_kd_softmax_xent(N, V, z, zt, y, temps[c], alphas[c], gs);
    const double want = ref_kd_text(N, V, zd, ztd, y, T, a);
    for (int i = 0; i < N * V; i++) { /* central differences of the float64 loss */
      const double h = 1e-5, keep = zd[i];
      zd[i] = keep + h;
      const double up = ref_kd_text(N, V, zd, ztd, y, T, a);
      zd[i] = keep - h;
      const double down = ref_kd_text(N, V, zd, ztd, y, T, a);
      zd[i] = keep;
      grad[i] = gs * (up - down) / (2 * h);
    }
    char what[64];
    snprintf(what, sizeof what, "kd text loss T=%g a=%g", T, a);
    float lossf = (float)loss;
    check_close(what, &lossf, &want, 1, 0, 1e-6);
    snprintf(what, sizeof what, "kd text grad T=%g a=%g vs FD", T, a);
    check_close(what, z, grad, N * V, 1e-7, 1e-4);
  }
  /* α = 0: the plain cross-entropy, bit for bit (loss and gradient) */
  float za[N * V], zb[N * V];
  memcpy(za, z0, sizeof za);
  memcpy(zb, z0, sizeof zb);
  const double la = lstmd_cpu_kd_softmax_xent(N, V, za, zt, y, 2.0f, 0.0f, gs);
  const double lb = lstmd_cpu_softmax_xent(N, V, zb, y, gs);
  check_true("kd text alpha 0 == softmax_xent bitwise", la == lb && !memcmp(za, zb, sizeof za));

  enum { M = 40 };
  double pd[M], td[M], yd[M], g[M];
  float *p0 = test_rand_floats(&st, M, 2.0, pd), *tf = test_rand_floats(&st, M, 2.0, td),
        *yf = test_rand_floats(&st, M, 2.0, yd);
  const float sa[] = {0.25f, 1.0f};
  for (int c = 0; c < 2; c++) {
    float p[M];
    memcpy(p, p0, sizeof p);
    const double loss = lstmd_cpu_kd_mse(M, p, tf, yf, sa[c], gs);
    const double want = ref_kd_series(M, pd, td, yd, sa[c]);
    for (int i = 0; i < M; i++) {
      const double h = 1e-5, keep = pd[i];
      pd[i] = keep + h;
      const double up = ref_kd_series(M, pd, td, yd, sa[c]);
      pd[i] = keep - h;
      const double down = ref_kd_series(M, pd, td, yd, sa[c]);
      pd[i] = keep;
      g[i] = gs * (up - down) / (2 * h);
    }
    char what[64];
    float lossf = (float)loss;
    snprintf(what, sizeof what, "kd series loss a=%g", sa[c]);
    check_close(what, &lossf, &want, 1, 0, 1e-6);
    snprintf(what, sizeof what, "kd series grad a=%g vs FD", sa[c]);
    check_close(what, p, g, M, 1e-6, 1e-5);
  }
  float pa[M], pb[M];
  memcpy(pa, p0, sizeof pa);
  memcpy(pb, p0, sizeof pb);
  const double ma = lstmd_cpu_kd_mse(M, pa, tf, yf, 0.0f, gs), mb = lstmd_cpu_mse(M, pb, yf, gs);
  check_true("kd series alpha 0 == mse bitwise", ma == mb && !memcmp(pa, pb, sizeof pa));
  free(z0), free(zt), free(p0), free(tf), free(yf);
}

int main(void) {
  test_schedule();
  test_masks();
  test_kd();
  return check_summary("test_compress");
}
