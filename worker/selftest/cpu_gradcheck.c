/* cpu_gradcheck.c (selftest group "cpu") — the whole model's analytic float32 gradient (every
 * parameter tensor), on the kernels of the ISA chosen (LSTMD_CPU_ISA forces one), against central finite differences of an independent float64 forward, for a text model and
 * a series model, with dropout between layers and a non-zero carried initial state; and the same
 * for the model run as pipeline stages (model_stage.h) with one time step per chunk, so that the
 * (dh, dc) carried between chunks and into each chunk's initial state is checked too. Then the
 * layer-normalised model (model.layer_norm) likewise: text, series, and H32 with dropout. Last,
 * the sequence classifier (worker/model/classify.h), bidirectional, 2 layers, pooling last /
 * mean / max, on a padded batch of mixed lengths with an empty column, against a float64
 * forward that walks each column's valid steps in place (the reverse direction from len−1 down).
 * Pass: per tensor ‖g − g_fd‖ / ‖g_fd‖ < 1e-4, and the losses agree. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/isa.h"
#include "kernels/status.h"
#include "worker/model/classify.h"
#include "worker/model/model.h"
#include "worker/selftest/selftest.h"
#include "worker/selftest/stage_driver.h"

struct ref_ctx {
  const struct lstmd_model *m;
  const struct lstmd_batch *batch;
  int T, B;
  const double *h0, *c0;        /* [L,B,H] initial state */
  const float *masks[LSTMD_MAX_LAYERS];
};

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Layer normalisation of v [n] in place: (v − mean)/sqrt(var + 1e-3)·gain + shift. */
static void ref_layer_norm(double *v, int n, const double *gain, const double *shift) {
  double mu = 0, var = 0;
  for (int j = 0; j < n; j++) mu += v[j] / n;
  for (int j = 0; j < n; j++) var += (v[j] - mu) * (v[j] - mu) / n;
  for (int j = 0; j < n; j++) v[j] = (v[j] - mu) / sqrt(var + 1e-3) * gain[j] + shift[j];
}

static const double *P(const struct ref_ctx *r, const double *p, const char *name) {
  return p + lstmd_model_tensor(r->m, name)->offset;
}

/* Float64 forward; returns the summed loss exactly as lstmd_model_step defines it. */
static double ref_loss(const struct ref_ctx *r, const double *p) {
  const struct lstmd_model_shape *s = &r->m->shape;
  const int T = r->T, B = r->B, H = s->hidden, L = s->layers, N = T * B;
  const int text = s->kind == LSTMD_MODEL_TEXT;
  const int In0 = text ? s->embed : s->width, O = text ? s->vocab : s->horizon;
  double *in = malloc(sizeof(double) * N * (In0 > H ? In0 : H));
  double *out = malloc(sizeof(double) * N * H);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < In0; k++)
      in[n * In0 + k] = text ? P(r, p, "embed.weight")[r->batch->ids[n] * In0 + k]
                             : r->batch->x[n * In0 + k];
  int width = In0;
  char name[64];
  double *h = malloc(sizeof(double) * B * H), *c = malloc(sizeof(double) * B * H);
  for (int l = 0; l < L; l++) {
    snprintf(name, sizeof name, "lstm.weight_ih_l%d", l);
    const double *wih = P(r, p, name);
    snprintf(name, sizeof name, "lstm.weight_hh_l%d", l);
    const double *whh = P(r, p, name);
    snprintf(name, sizeof name, "lstm.bias_ih_l%d", l);
    const double *bih = P(r, p, name);
    snprintf(name, sizeof name, "lstm.bias_hh_l%d", l);
    const double *bhh = P(r, p, name);
    const double *ln[6] = {NULL}; /* gains and shifts of the ih, hh and c normalisations */
    static const char *const ln_names[6] = {"ih_weight", "ih_bias", "hh_weight", "hh_bias",
                                            "c_weight", "c_bias"};
    for (int i = 0; s->layer_norm && i < 6; i++) {
      snprintf(name, sizeof name, "lstm.ln_%s_l%d", ln_names[i], l);
      ln[i] = P(r, p, name);
    }
    memcpy(h, r->h0 + (size_t)l * B * H, sizeof(double) * B * H);
    memcpy(c, r->c0 + (size_t)l * B * H, sizeof(double) * B * H);
    for (int t = 0; t < T; t++)
      for (int b = 0; b < B; b++) {
        double a[4 * 64], ax[4 * 64], ar[4 * 64], cn[64];
        for (int j = 0; j < 4 * H; j++) {
          ax[j] = ar[j] = 0;
          for (int k = 0; k < width; k++) ax[j] += wih[j * width + k] * in[(t * B + b) * width + k];
          for (int k = 0; k < H; k++) ar[j] += whh[j * H + k] * h[b * H + k];
        }
        if (s->layer_norm) {
          ref_layer_norm(ax, 4 * H, ln[0], ln[1]);
          ref_layer_norm(ar, 4 * H, ln[2], ln[3]);
        }
        for (int j = 0; j < 4 * H; j++) a[j] = ax[j] + ar[j] + bih[j] + bhh[j];
        for (int j = 0; j < H; j++)
          cn[j] = sigm(a[H + j]) * c[b * H + j] + sigm(a[j]) * tanh(a[2 * H + j]);
        if (s->layer_norm) ref_layer_norm(cn, H, ln[4], ln[5]);
        for (int j = 0; j < H; j++) {
          c[b * H + j] = cn[j];
          h[b * H + j] = sigm(a[3 * H + j]) * tanh(cn[j]);
          out[(t * B + b) * H + j] = h[b * H + j];
        }
      }
    for (int n = 0; n < N * H; n++)
      in[n] = out[n] * (r->masks[l] ? r->masks[l][n] : 1.0);
    width = H;
  }
  const double *hw = P(r, p, "head.weight"), *hb = P(r, p, "head.bias");
  double loss = 0;
  for (int n = 0; n < N; n++) {
    double z[256] = {0};
    for (int o = 0; o < O; o++) {
      z[o] = hb[o];
      for (int k = 0; k < H; k++) z[o] += hw[o * H + k] * out[n * H + k];
    }
    if (text) {
      double mx = z[0], sum = 0;
      for (int o = 1; o < O; o++) mx = fmax(mx, z[o]);
      for (int o = 0; o < O; o++) sum += exp(z[o] - mx);
      loss += log(sum) + mx - z[r->batch->targets[n]];
    } else {
      for (int o = 0; o < O; o++) {
        double d = z[o] - r->batch->y[n * O + o];
        loss += d * d;
      }
    }
  }
  free(in);
  free(out);
  free(h);
  free(c);
  return loss;
}

static void gradcheck(const char *label, struct lstmd_model_shape shape, int T, int B, float dropout) {
  struct lstmd_model *m;
  if (lstmd_model_create(&shape, &m)) {
    lstmd_check_true("model create", 0);
    return;
  }
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 7, 1);
  lstmd_model_init_params(m, &rng);
  unsigned long long ln_seed = 5; /* gains and shifts away from their 1 and 0, as trained ones */
  for (int t = 0; t < m->n_tensors; t++)
    for (size_t k = 0; !strncmp(m->tensors[t].name, "lstm.ln_", 8) && k < m->tensors[t].count; k++)
      m->params[m->tensors[t].offset + k] += (float)selftest_uniform(&ln_seed, 0.3);
  struct lstmd_workspace *ws;
  if (lstmd_workspace_create(m, T, B, dropout, &ws)) {
    lstmd_check_true("workspace create", 0);
    lstmd_model_destroy(m);
    return;
  }
  char folded[160]; /* the path taken shows in every line (LSTMD_EMBED_FOLD) */
  snprintf(folded, sizeof folded, "%s%s", label,
           lstmd_workspace_folds_embedding(ws) ? " (embedding folded)" : "");
  label = folded;
  struct lstmd_batch *b = lstmd_workspace_batch(ws);
  unsigned long long seed = 99;
  const int N = T * B, H = shape.hidden, L = shape.layers;
  for (int n = 0; n < N; n++) {
    if (shape.kind == LSTMD_MODEL_TEXT) {
      b->ids[n] = (int32_t)((n * 7 + 1) % shape.vocab);
      b->targets[n] = (int32_t)((n * 3 + 2) % shape.vocab);
    } else {
      for (int w = 0; w < shape.width; w++) b->x[n * shape.width + w] = (float)selftest_uniform(&seed, 1.5);
      for (int k = 0; k < shape.horizon; k++) b->y[n * shape.horizon + k] = (float)selftest_uniform(&seed, 1.5);
    }
  }
  const size_t S = (size_t)L * B * H;
  float *h0 = malloc(S * sizeof(float)), *c0 = malloc(S * sizeof(float));
  double *h0d = malloc(S * sizeof(double)), *c0d = malloc(S * sizeof(double));
  for (size_t i = 0; i < S; i++) {
    h0d[i] = h0[i] = (float)selftest_uniform(&seed, 0.5);
    c0d[i] = c0[i] = (float)selftest_uniform(&seed, 1.0);
  }
  lstmd_workspace_set_state(ws, h0, c0, B, 0);
  const float scale = 1.0f / (float)N;
  struct lstmd_dropout_key drop = {3, 5, 0};
  memset(m->grads, 0, m->n_params * sizeof(float));
  double loss = lstmd_model_step(m, ws, scale, &drop, 1);

  struct ref_ctx r = {m, b, T, B, h0d, c0d};
  for (int l = 0; l < L; l++) r.masks[l] = lstmd_workspace_dropout_mask(ws, l);
  lstmd_check_true("dropout masks present where expected",
             dropout == 0.0f || L == 1 || (r.masks[0] != NULL && r.masks[L - 1] == NULL));
  /* the stages: the first layer alone, then the rest; one step per chunk; two column slices */
  struct stage_run sr = {.stages = L > 1 ? 2 : 1, .stage_layers = {L > 1 ? 1 : L, L - 1},
                         .chunks = T, .slices = B % 2 ? 1 : 2, .dropout = dropout, .key = &drop,
                         .grad_scale = scale, .h0 = h0, .c0 = c0};
  float *g_stage = calloc(m->n_params, sizeof(float));
  const double loss_stage = stage_run(m, b, &sr, g_stage);
  double *p = malloc(m->n_params * sizeof(double));
  for (size_t i = 0; i < m->n_params; i++) p[i] = m->params[i];
  double ref = ref_loss(&r, p);
  char what[256];
  snprintf(what, sizeof what, "%s loss vs float64", label);
  float lossf = (float)loss;
  lstmd_check_close(what, &lossf, &ref, 1, 1e-6, 1e-5);
  snprintf(what, sizeof what, "%s loss as %d stages of %d chunks vs float64", label, sr.stages, T);
  lossf = (float)loss_stage;
  lstmd_check_close(what, &lossf, &ref, 1, 1e-6, 1e-5);
  for (int t = 0; t < m->n_tensors; t++) {
    const struct lstmd_tensor *x = &m->tensors[t];
    double *fd = malloc(x->count * sizeof(double)), num = 0, den = 0, num_stage = 0;
    for (size_t k = 0; k < x->count; k++) {
      double *q = &p[x->offset + k], save = *q, eps = 1e-5;
      *q = save + eps;
      double up = ref_loss(&r, p);
      *q = save - eps;
      double down = ref_loss(&r, p);
      *q = save;
      fd[k] = (up - down) / (2 * eps) * scale;
      double d = m->grads[x->offset + k] - fd[k], ds = g_stage[x->offset + k] - fd[k];
      num += d * d;
      num_stage += ds * ds;
      den += fd[k] * fd[k];
    }
    double rel = sqrt(num) / (sqrt(den) + 1e-30);
    snprintf(what, sizeof what, "%s %s rel %.2e", label, x->name, rel);
    lstmd_check_true(what, rel < 1e-4 && den > 0);
    if (rel >= 1e-4) lstmd_check_close(x->name, m->grads + x->offset, fd, x->count, 1e-6, 1e-4);
    const double rel_stage = sqrt(num_stage) / (sqrt(den) + 1e-30);
    snprintf(what, sizeof what, "  ... as stages: rel %.2e", rel_stage);
    lstmd_check_true(what, rel_stage < 1e-4 && den > 0);
    if (rel_stage >= 1e-4) lstmd_check_close(x->name, g_stage + x->offset, fd, x->count, 1e-6, 1e-4);
    free(fd);
  }
  free(p);
  free(g_stage);
  free(h0);
  free(c0);
  free(h0d);
  free(c0d);
  lstmd_workspace_destroy(ws);
  lstmd_model_destroy(m);
}

/* ---- the sequence classifier ---- */

/* One LSTM step in float64 for one column: x [in] → h, c [H] in place; the tensors of one
 * (layer, direction) start at t (w_ih, w_hh, b_ih, b_hh). */
static void clf_ref_cell(const double *p, const struct lstmd_tensor *t, int in, int H,
                         const double *x, double *h, double *c) {
  double a[4 * 64];
  for (int r = 0; r < 4 * H; r++) {
    a[r] = p[t[2].offset + r] + p[t[3].offset + r];
    for (int k = 0; k < in; k++) a[r] += p[t[0].offset + (size_t)r * in + k] * x[k];
    for (int k = 0; k < H; k++) a[r] += p[t[1].offset + (size_t)r * H + k] * h[k];
  }
  for (int j = 0; j < H; j++) {
    c[j] = sigm(a[H + j]) * c[j] + sigm(a[j]) * tanh(a[2 * H + j]);
    h[j] = sigm(a[3 * H + j]) * tanh(c[j]);
  }
}

/* Float64 summed cross-entropy of a classifier over a padded batch [T,B]: every direction of
 * every layer walks each column's own steps (forward 0 … len−1, reverse len−1 … 0) from a zero
 * state, writing its half of the layer's output at the step it read; padding is never touched. */
static double clf_ref_loss(const struct lstmd_model *m, const double *p,
                           const struct lstmd_batch *bt) {
  const struct lstmd_model_shape *s = &m->shape;
  const int T = bt->steps, B = bt->batch, H = s->hidden, E = s->embed;
  const int D = s->bidirectional ? 2 : 1, DH = D * H, W = E > DH ? E : DH;
  double *cur = calloc((size_t)T * B * W, sizeof(double)), *next = calloc((size_t)T * B * W, sizeof(double));
  for (int t = 0; t < T; t++)
    for (int b = 0; b < B; b++)
      for (int e = 0; t < bt->lengths[b] && e < E; e++)
        cur[((size_t)t * B + b) * W + e] = p[m->tensors[0].offset + (size_t)bt->ids[t * B + b] * E + e];
  for (int l = 0, in = E; l < s->layers; l++, in = DH) {
    for (int d = 0; d < D; d++)
      for (int b = 0; b < B; b++) {
        double h[64] = {0}, c[64] = {0};
        const int n = bt->lengths[b];
        for (int k = 0; k < n; k++) {
          const size_t row = ((size_t)(d ? n - 1 - k : k) * B + b) * W;
          clf_ref_cell(p, &m->tensors[1 + 4 * (l * D + d)], in, H, cur + row, h, c);
          memcpy(next + row + (size_t)d * H, h, sizeof(double) * H);
        }
      }
    double *swap = cur;
    cur = next;
    next = swap;
  }
  const struct lstmd_tensor *hw = &m->tensors[m->n_tensors - 2], *hb = &m->tensors[m->n_tensors - 1];
  double loss = 0;
  for (int b = 0; b < B; b++) {
    const int n = bt->lengths[b];
    if (n == 0) continue;
    double v[128], z[LSTMD_MAX_CLASSES], mx = -HUGE_VAL, sum = 0;
    for (int j = 0; j < DH; j++) {
      const double *at = cur + (size_t)b * W + j; /* step 0 of column b, unit j */
      if (s->pool == LSTMD_POOL_LAST) {
        v[j] = j < H ? at[(size_t)(n - 1) * B * W] : at[0];
      } else {
        v[j] = s->pool == LSTMD_POOL_MEAN ? 0 : -HUGE_VAL;
        for (int t = 0; t < n; t++)
          v[j] = s->pool == LSTMD_POOL_MEAN ? v[j] + at[(size_t)t * B * W] / n
                                            : fmax(v[j], at[(size_t)t * B * W]);
      }
    }
    for (int k = 0; k < s->classes; k++) {
      z[k] = p[hb->offset + k];
      for (int j = 0; j < DH; j++) z[k] += p[hw->offset + (size_t)k * DH + j] * v[j];
      mx = fmax(mx, z[k]);
    }
    for (int k = 0; k < s->classes; k++) sum += exp(z[k] - mx);
    loss += mx + log(sum) - z[bt->labels[b]];
  }
  free(cur);
  free(next);
  return loss;
}

static void clf_gradcheck(int pool) {
  static const char *const names[] = {"last", "mean", "max"};
  static const int32_t lens[] = {5, 2, 0, 3};
  const struct lstmd_model_shape shape = {.kind = LSTMD_MODEL_CLASSIFY, .vocab = 6, .embed = 4,
                                          .hidden = 5, .layers = 2, .classes = 3,
                                          .bidirectional = 1, .pool = pool};
  const int T = 5, B = 4;
  struct lstmd_model *m = NULL;
  struct lstmd_clf_workspace *ws = NULL;
  if (lstmd_model_create(&shape, &m) || lstmd_clf_workspace_create(m, T, B, &ws)) {
    lstmd_check_true("classifier and workspace made", 0);
    lstmd_model_destroy(m);
    return;
  }
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 11 + pool, 1);
  lstmd_model_init_params(m, &rng);
  struct lstmd_batch *bt = lstmd_clf_workspace_batch(ws);
  unsigned long long seed = 31 + pool;
  for (int t = 0; t < T; t++)
    for (int b = 0; b < B; b++) /* padding too: it must not matter */
      bt->ids[t * B + b] = (int32_t)((selftest_uniform(&seed, 1.0) + 1.0) * 0.5 * 5.999);
  for (int b = 0; b < B; b++) {
    bt->lengths[b] = lens[b];
    bt->labels[b] = (b * 2 + pool) % 3;
  }
  const float scale = 1.0f / 3; /* three non-empty columns */
  memset(m->grads, 0, m->n_params * sizeof(float));
  const double loss = lstmd_clf_forward(m, ws, scale);
  lstmd_clf_backward(m, ws);
  double *p = malloc(m->n_params * sizeof(double));
  for (size_t i = 0; i < m->n_params; i++) p[i] = m->params[i];
  const double ref = clf_ref_loss(m, p, bt);
  char what[256];
  snprintf(what, sizeof what, "classifier bi %s-pooled, lengths 5 2 0 3: loss vs float64", names[pool]);
  float lossf = (float)loss;
  lstmd_check_close(what, &lossf, &ref, 1, 1e-6, 1e-5);
  for (int t = 0; t < m->n_tensors; t++) {
    const struct lstmd_tensor *x = &m->tensors[t];
    double *fd = malloc(x->count * sizeof(double)), num = 0, den = 0;
    for (size_t k = 0; k < x->count; k++) {
      double *q = &p[x->offset + k], save = *q, eps = 1e-5;
      *q = save + eps;
      const double up = clf_ref_loss(m, p, bt);
      *q = save - eps;
      const double down = clf_ref_loss(m, p, bt);
      *q = save;
      fd[k] = (up - down) / (2 * eps) * scale;
      const double d = m->grads[x->offset + k] - fd[k];
      num += d * d;
      den += fd[k] * fd[k];
    }
    const double rel = sqrt(num) / (sqrt(den) + 1e-30);
    snprintf(what, sizeof what, "classifier bi %s %s rel %.2e", names[pool], x->name, rel);
    lstmd_check_true(what, rel < 1e-4 && den > 0);
    if (rel >= 1e-4) lstmd_check_close(x->name, m->grads + x->offset, fd, x->count, 1e-6, 1e-4);
    free(fd);
  }
  free(p);
  lstmd_clf_workspace_destroy(ws);
  lstmd_model_destroy(m);
}

void lstmd_selftest_cpu(struct lstmd_selftest *st, const char *only) {
  if (only && strcmp(only, "cpu")) return;
  lstmd_selftest_group(st, "cpu");
  printf("CPU kernels: %s (LSTMD_CPU_ISA forces avx512, avx2 or generic)\n",
         lstmd_cpu_isa_name(lstmd_cpu_isa()));
  struct lstmd_model_shape text = {.kind = LSTMD_MODEL_TEXT, .vocab = 6, .embed = 5, .hidden = 7,
                                   .layers = 2};
  gradcheck("text", text, 4, 3, 0.0f);
  gradcheck("text+dropout", text, 4, 3, 0.3f);
  text.layers = 3;
  gradcheck("text L3+dropout", text, 3, 2, 0.25f);
  struct lstmd_model_shape wide = {.kind = LSTMD_MODEL_TEXT, .vocab = 5, .embed = 4, .hidden = 32,
                                   .layers = 2};
  gradcheck("text H32 (packed recurrence: avx512, avx2)", wide, 3, 9, 0.2f);
  struct lstmd_model_shape series = {.kind = LSTMD_MODEL_SERIES, .width = 3, .hidden = 5,
                                     .layers = 2, .horizon = 2};
  gradcheck("series", series, 5, 2, 0.0f);
  /* model.layer_norm (kernels/cpu/lstm_ln_cpu.h): every gain and shift too */
  text.layers = 2;
  text.layer_norm = wide.layer_norm = series.layer_norm = 1;
  gradcheck("text LN", text, 4, 3, 0.0f);
  gradcheck("series LN", series, 5, 2, 0.0f);
  gradcheck("text LN H32 (packed recurrence)+dropout", wide, 2, 9, 0.2f);
  for (int pool = LSTMD_POOL_LAST; pool <= LSTMD_POOL_MAX; pool++) clf_gradcheck(pool);
}
