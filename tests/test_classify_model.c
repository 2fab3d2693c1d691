/* test_classify_model.c — the sequence classifier (worker/model/classify.h) against a float64
 * reference written one sequence at a time, with no padding at all:
 *  1. gradcheck: loss and every parameter gradient of the float32 padded-batch path against the
 *     reference's loss and its central differences, for pool = last, mean, max, forward-only and
 *     bidirectional, 2 layers (so layer 1 reads 2H with the reverse direction);
 *  2. masks: a padded batch (random ids past each length, a workspace 2 steps longer than the
 *     longest sequence) gives the logits and gradients of the same sequences run one by one at
 *     their own lengths (B = 1, T = len);
 *  3. layout: PyTorch's names and shapes (`_reverse`, layer 1 input 2H) and bad batches refused.
 * 1 and 2 run for text (ids through embed.weight) and for the series classifier's input path
 * (width 1: one value per step straight into lstm.weight_ih_l0 [4H,1], no embedding). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cpu/blas_cpu.h"
#include "kernels/status.h"
#include "worker/model/classify.h"
#include "worker/model/model.h"
#include "worker/model/rng.h"

enum { V = 7, E = 3, H = 4, L = 2, C = 3, T = 6, B = 4 };
static const int32_t kLen[B] = {6, 3, 1, 5};
static int g_series; /* 1: the model reads values (width 1), batches fill x instead of ids */

/* ---- float64 reference: one sequence, no padding ---- */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* One direction over n steps of x [n,in] (already in the order it reads them): out [n,H]. */
static void ref_lstm(const double *p, size_t wih, size_t whh, size_t bih, size_t bhh, int in,
                     const double *x, int n, double *out) {
  double h[H] = {0}, c[H] = {0}, g[4 * H];
  for (int t = 0; t < n; t++) {
    for (int r = 0; r < 4 * H; r++) {
      double a = p[bih + r] + p[bhh + r];
      for (int i = 0; i < in; i++) a += p[wih + (size_t)r * in + i] * x[(size_t)t * in + i];
      for (int j = 0; j < H; j++) a += p[whh + (size_t)r * H + j] * h[j];
      g[r] = a;
    }
    for (int j = 0; j < H; j++) {
      double i = sigm(g[j]), f = sigm(g[H + j]), gg = tanh(g[2 * H + j]), o = sigm(g[3 * H + j]);
      c[j] = f * c[j] + i * gg;
      h[j] = o * tanh(c[j]);
      out[(size_t)t * H + j] = h[j];
    }
  }
}

/* Loss of one sequence (and its logits), parameters p laid out as m's tensor table; its ids
 * (text) or values xs (series). */
static double ref_loss(const struct lstmd_model *m, const double *p, const int32_t *ids,
                       const float *xs, int n, int label, double *logits_out) {
  const int D = m->shape.bidirectional ? 2 : 1, DH = D * H, first = g_series ? 0 : 1;
  double x[T * 2 * H], y[T * 2 * H], fwd[T * H], rev[T * H], xr[T * 2 * H];
  for (int t = 0; t < n; t++) /* series: rows of width 1 */
    for (int e = 0; e < (g_series ? 1 : E); e++)
      x[t * (g_series ? 1 : E) + e] =
          g_series ? xs[t] : p[m->tensors[0].offset + (size_t)ids[t] * E + e];
  int in = g_series ? 1 : E;
  for (int l = 0; l < L; l++) {
    const struct lstmd_tensor *tf = &m->tensors[first + 4 * (l * D)];
    ref_lstm(p, tf[0].offset, tf[1].offset, tf[2].offset, tf[3].offset, in, x, n, fwd);
    if (D == 2) {
      const struct lstmd_tensor *tr = &m->tensors[first + 4 * (l * D + 1)];
      for (int t = 0; t < n; t++) memcpy(xr + t * in, x + (n - 1 - t) * in, sizeof(double) * in);
      ref_lstm(p, tr[0].offset, tr[1].offset, tr[2].offset, tr[3].offset, in, xr, n, rev);
    }
    for (int t = 0; t < n; t++) {
      memcpy(y + t * DH, fwd + t * H, sizeof(double) * H);
      if (D == 2) memcpy(y + t * DH + H, rev + (n - 1 - t) * H, sizeof(double) * H);
    }
    memcpy(x, y, sizeof(double) * n * DH);
    in = DH;
  }
  double pooled[2 * H];
  for (int j = 0; j < DH; j++) {
    if (m->shape.pool == LSTMD_POOL_LAST) {
      pooled[j] = j < H ? y[(n - 1) * DH + j] : y[j]; /* reverse: its final state, at step 0 */
    } else if (m->shape.pool == LSTMD_POOL_MEAN) {
      double s = 0;
      for (int t = 0; t < n; t++) s += y[t * DH + j];
      pooled[j] = s / n;
    } else {
      double mx = y[j];
      for (int t = 1; t < n; t++) mx = fmax(mx, y[t * DH + j]);
      pooled[j] = mx;
    }
  }
  const struct lstmd_tensor *hw = &m->tensors[m->n_tensors - 2], *hb = &m->tensors[m->n_tensors - 1];
  double z[C], mx = -1e300, sum = 0;
  for (int k = 0; k < C; k++) {
    z[k] = p[hb->offset + k];
    for (int j = 0; j < DH; j++) z[k] += p[hw->offset + (size_t)k * DH + j] * pooled[j];
    mx = fmax(mx, z[k]);
    if (logits_out) logits_out[k] = z[k];
  }
  for (int k = 0; k < C; k++) sum += exp(z[k] - mx);
  return mx + log(sum) - z[label];
}

/* ids (text) or values (series) of column b of a [T,B] batch, its valid steps only. */
static void column_ids(const struct lstmd_batch *bt, int b, int n, int32_t *ids, float *x) {
  for (int t = 0; t < n; t++) {
    if (bt->ids) ids[t] = bt->ids[t * B + b];
    if (bt->x) x[t] = bt->x[t * B + b];
  }
}

static double ref_batch_loss(const struct lstmd_model *m, const double *p,
                             const struct lstmd_batch *bt) {
  double loss = 0;
  int32_t col[T];
  float xs[T];
  for (int b = 0; b < B; b++) {
    column_ids(bt, b, kLen[b], col, xs);
    loss += ref_loss(m, p, col, xs, kLen[b], bt->labels[b], NULL);
  }
  return loss;
}

static struct lstmd_model *make_model(int bidirectional, int pool, uint64_t seed) {
  struct lstmd_model_shape s = {.kind = LSTMD_MODEL_CLASSIFY, .vocab = g_series ? 0 : V,
                                .embed = g_series ? 0 : E, .width = g_series, .hidden = H,
                                .layers = L, .classes = C, .bidirectional = bidirectional,
                                .pool = pool};
  struct lstmd_model *m;
  if (lstmd_model_create(&s, &m)) return NULL;
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, seed, 0);
  lstmd_model_init_params(m, &rng);
  for (size_t i = 0; i < m->n_params; i++) m->params[i] *= 1.5f; /* livelier gates */
  return m;
}

static void fill_batch(struct lstmd_batch *bt, struct lstmd_rng *rng) {
  for (int t = 0; t < bt->steps; t++) /* padding too */
    for (int b = 0; b < B; b++) {
      if (bt->ids) bt->ids[t * B + b] = (int32_t)lstmd_rng_below(rng, V);
      if (bt->x) bt->x[t * B + b] = lstmd_rng_normal(rng);
    }
  for (int b = 0; b < B; b++) {
    bt->lengths[b] = kLen[b];
    bt->labels[b] = (int32_t)lstmd_rng_below(rng, C);
  }
}

static const char *const kPool[3] = {"last", "mean", "max"};

static void test_gradcheck(int bidirectional, int pool) {
  struct lstmd_model *m = make_model(bidirectional, pool, 7 + 3 * pool + bidirectional);
  struct lstmd_clf_workspace *ws;
  if (!m || lstmd_clf_workspace_create(m, T, B, &ws)) {
    printf("FAIL: set-up\n");
    g_failures++;
    return;
  }
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 99 + pool, 1);
  struct lstmd_batch *bt = lstmd_clf_workspace_batch(ws);
  fill_batch(bt, &rng);
  memset(m->grads, 0, m->n_params * sizeof(float));
  const double loss = lstmd_clf_forward(m, ws, 1.0f);
  lstmd_clf_backward(m, ws);
  double *p = malloc(m->n_params * sizeof *p), *num = calloc(m->n_params, sizeof *num);
  for (size_t i = 0; i < m->n_params; i++) p[i] = m->params[i];
  const double rloss = ref_batch_loss(m, p, bt);
  for (int i = 0; i < m->n_tensors; i++) {
    const struct lstmd_tensor *t = &m->tensors[i];
    for (size_t k = t->offset; k < t->offset + t->count; k++) {
      const double keep = p[k], step = 1e-6;
      p[k] = keep + step;
      const double up = ref_batch_loss(m, p, bt);
      p[k] = keep - step;
      const double down = ref_batch_loss(m, p, bt);
      p[k] = keep;
      num[k] = (up - down) / (2 * step);
    }
  }
  char what[64];
  float lf = (float)loss;
  const char *in = g_series ? "series " : "";
  snprintf(what, sizeof what, "%s%s %s loss", in, bidirectional ? "bi" : "uni", kPool[pool]);
  check_close(what, &lf, &rloss, 1, 1e-5, 1e-5);
  for (int i = 0; i < m->n_tensors; i++) {
    const struct lstmd_tensor *t = &m->tensors[i];
    snprintf(what, sizeof what, "%s%s %s d%s", in, bidirectional ? "bi" : "uni", kPool[pool],
             t->name);
    check_close(what, m->grads + t->offset, num + t->offset, t->count, 2e-5, 2e-3);
  }
  free(p);
  free(num);
  lstmd_clf_workspace_destroy(ws);
  lstmd_model_destroy(m);
}

/* A padded batch = the same sequences one by one, each at its own length (T = len, B = 1). */
static void test_masks(int bidirectional, int pool) {
  struct lstmd_model *m = make_model(bidirectional, pool, 31 + pool);
  struct lstmd_clf_workspace *ws; /* 2 steps longer than the longest sequence: never run */
  if (!m || lstmd_clf_workspace_create(m, T + 2, B, &ws)) {
    g_failures++;
    return;
  }
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 5 + pool, 2);
  struct lstmd_batch *bt = lstmd_clf_workspace_batch(ws);
  fill_batch(bt, &rng);
  float *gb = calloc(m->n_params, sizeof *gb), *g1 = calloc(m->n_params, sizeof *g1);
  float logits_b[B * C], logits_1[B * C];
  lstmd_clf_workspace_set_grads(ws, gb);
  lstmd_clf_forward(m, ws, 0.0f);
  memcpy(logits_b, lstmd_clf_workspace_logits(ws), sizeof logits_b);
  lstmd_clf_forward(m, ws, 1.0f);
  lstmd_clf_backward(m, ws);
  for (int b = 0; b < B; b++) {
    struct lstmd_clf_workspace *one;
    if (lstmd_clf_workspace_create(m, kLen[b], 1, &one)) {
      g_failures++;
      break;
    }
    struct lstmd_batch *o = lstmd_clf_workspace_batch(one);
    column_ids(bt, b, kLen[b], o->ids, o->x); /* one column: [len,1] */
    o->lengths[0] = kLen[b];
    o->labels[0] = bt->labels[b];
    lstmd_clf_workspace_set_grads(one, g1);
    lstmd_clf_forward(m, one, 0.0f);
    memcpy(logits_1 + b * C, lstmd_clf_workspace_logits(one), sizeof(float) * C);
    lstmd_clf_forward(m, one, 1.0f);
    lstmd_clf_backward(m, one);
    lstmd_clf_workspace_destroy(one);
  }
  char what[64];
  const char *in = g_series ? "series " : "";
  snprintf(what, sizeof what, "mask %s%s %s logits", in, bidirectional ? "bi" : "uni", kPool[pool]);
  check_close_f(what, logits_b, logits_1, B * C, 1e-6, 1e-5);
  snprintf(what, sizeof what, "mask %s%s %s grads", in, bidirectional ? "bi" : "uni", kPool[pool]);
  check_close_f(what, gb, g1, m->n_params, 1e-6, 1e-5);
  free(gb);
  free(g1);
  lstmd_clf_workspace_destroy(ws);
  lstmd_model_destroy(m);
}

static void expect(int ok, const char *what) {
  printf("%-34s %s\n", what, ok ? "ok" : "FAIL");
  if (!ok) g_failures++;
}

static void test_layout_and_refusals(void) {
  struct lstmd_model *m = make_model(1, LSTMD_POOL_LAST, 1);
  const struct lstmd_tensor *t = lstmd_model_tensor(m, "lstm.weight_ih_l1_reverse");
  expect(t && t->shape[0] == 4 * H && t->shape[1] == 2 * H, "weight_ih_l1_reverse [4H,2H]");
  t = lstmd_model_tensor(m, "head.weight");
  expect(t && t->shape[0] == C && t->shape[1] == 2 * H, "head.weight [C,2H]");
  static const char *const order[] = {"embed.weight", "lstm.weight_ih_l0", "lstm.weight_hh_l0",
                                      "lstm.bias_ih_l0", "lstm.bias_hh_l0",
                                      "lstm.weight_ih_l0_reverse", "lstm.weight_hh_l0_reverse",
                                      "lstm.bias_ih_l0_reverse", "lstm.bias_hh_l0_reverse",
                                      "lstm.weight_ih_l1"};
  int in_order = m->n_tensors == 1 + 8 * L + 2;
  for (int i = 0; i < 10; i++) in_order &= strcmp(m->tensors[i].name, order[i]) == 0;
  expect(in_order, "tensor order = nn.LSTM's");
  struct lstmd_workspace *lm;
  expect(lstmd_workspace_create(m, T, B, 0.0f, &lm) == LSTMD_EINVAL, "LM workspace refused");
  struct lstmd_clf_workspace *ws;
  lstmd_clf_workspace_create(m, T, B, &ws);
  struct lstmd_batch *bt = lstmd_clf_workspace_batch(ws);
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 3, 3);
  fill_batch(bt, &rng);
  expect(!isnan(lstmd_clf_forward(m, ws, 1.0f)), "a valid batch accepted");
  memset(m->grads, 0, m->n_params * sizeof(float));
  bt->lengths[2] = T + 1;
  expect(isnan(lstmd_clf_forward(m, ws, 0.0f)), "length > T refused");
  lstmd_clf_backward(m, ws); /* the step fails on the NaN; backward must not run on the batch */
  size_t touched = 0;
  for (size_t i = 0; i < m->n_params; i++) touched += m->grads[i] != 0.0f;
  expect(touched == 0, "backward after a refused batch leaves the gradients alone");
  bt->lengths[2] = 0;
  bt->labels[2] = C + 5; /* an empty column's label is not read */
  expect(!isnan(lstmd_clf_forward(m, ws, 0.0f)), "empty column accepted");
  bt->labels[1] = C;
  expect(isnan(lstmd_clf_forward(m, ws, 0.0f)), "label >= C refused");
  bt->labels[1] = 0;
  bt->ids[0] = V;
  expect(isnan(lstmd_clf_forward(m, ws, 0.0f)), "id >= V refused");
  lstmd_clf_workspace_destroy(ws);
  lstmd_model_destroy(m);
  struct lstmd_model_shape s = {.kind = LSTMD_MODEL_TEXT, .vocab = V, .embed = E, .hidden = H,
                                .layers = 1, .bidirectional = 1};
  expect(lstmd_model_shape_error(&s) != NULL, "bidirectional LM shape refused");
}

static void test_series_layout(void) {
  g_series = 1;
  struct lstmd_model *m = make_model(1, LSTMD_POOL_MAX, 2);
  g_series = 0;
  const struct lstmd_tensor *t = m ? lstmd_model_tensor(m, "lstm.weight_ih_l0") : NULL;
  expect(t && t->shape[0] == 4 * H && t->shape[1] == 1 && m->tensors[0].offset == t->offset &&
             !lstmd_model_tensor(m, "embed.weight"),
         "series: weight_ih_l0 [4H,1] first");
  lstmd_model_destroy(m);
  struct lstmd_model_shape s = {.kind = LSTMD_MODEL_CLASSIFY, .vocab = V, .embed = E, .width = 1,
                                .hidden = H, .layers = 1, .classes = C};
  expect(lstmd_model_shape_error(&s) != NULL, "series with a vocabulary refused");
}

int main(void) {
  lstmd_cpu_set_blas_threads(1);
  for (g_series = 0; g_series < 2; g_series++) {
    for (int bi = 0; bi < 2; bi++)
      for (int pool = 0; pool < 3; pool++) test_gradcheck(bi, pool);
    for (int bi = 0; bi < 2; bi++)
      for (int pool = 0; pool < 3; pool++) test_masks(bi, pool);
  }
  g_series = 0;
  test_layout_and_refusals();
  test_series_layout();
  printf(g_failures ? "test_classify_model: %d FAILED\n" : "test_classify_model: all passed\n",
         g_failures);
  return g_failures ? 1 : 0;
}
