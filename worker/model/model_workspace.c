/* model_workspace.c — the CPU forward/backward of the whole model (model.h). Activations of one
 * (T, B) shape live in one arena (struct lstmd_workspace), allocated once; nothing is allocated
 * per step. The parameter layout is model.c's. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dense_cpu.h"
#include "kernels/cpu/embed_fold_cpu.h"
#include "kernels/cpu/kd_cpu.h"
#include "kernels/cpu/lstm_cpu.h"
#include "kernels/cpu/lstm_ln_cpu.h"
#include "kernels/cpu/recur_gemm.h"
#include "kernels/cpu/recur_team.h"
#include "kernels/status.h"
#include "worker/data/dataset.h" /* LSTMD_MAX_COLUMNS: series inputs come from a dataset */

struct layer_acts {
  float *h, *c;   /* [T+1,B,H]; slot 0 is the initial state */
  float *gates;   /* [T,B,4H] */
  float *mask;    /* [T,B,H] dropout mask of this layer's output (NULL if none) */
  float *dropped; /* [T,B,H] masked output fed to the next layer (NULL if none) */
  struct lstmd_lstm_ln_acts ln; /* layer normalisation's saved rows (all NULL without it) */
};

struct lstmd_workspace {
  const struct lstmd_model *model;
  int T, B;
  float dropout;
  struct lstmd_batch batch;
  float *x0;      /* [T,B,E] embedded ids (text, unless folded) */
  float *fold;    /* [V,4H] text with the embedding folded into layer 0 (embed_fold_cpu.h): the
                   * projection table in forward, the per-token gate sums in backward; or NULL */
  struct layer_acts layer[LSTMD_MAX_LAYERS];
  float *out;     /* [T,B,O] logits or predictions, then their gradient */
  float *dh, *dx; /* [T,B,max(H,In0)] gradient w.r.t. a layer's output / input */
  float *dgates;  /* [T,B,4H] */
  struct lstmd_lstm_ln_dacts dln; /* layer normalisation: backward_input → weight (NULL without) */
  float *work;    /* [2,B,H] */
  int forward_only; /* lstmd_workspace_create_forward's: no gradient buffers, gates shared */
  float *wpack;   /* [4H·H] packed W_hh for the per-step GEMMs, or NULL (recur_gemm.h) */
  float *frozen;  /* lstmd_workspace_freeze_weights' packs, one allocation, or NULL: */
  const float *frozen_whh[LSTMD_MAX_LAYERS], *frozen_wih[LSTMD_MAX_LAYERS];
  struct lstmd_recur_team *team; /* the recurrence shared with other slices' threads, or NULL */
  int member;                    /* this workspace's place in the team */
  float *grads;   /* where gradients accumulate: m->grads or a thread's own buffer */
  lstmd_grads_ready_fn on_ready;
  void *on_ready_ctx;
  const float *teacher_out; /* [T,B,O] the teacher's output on this batch (distillation), or NULL */
  float kd_temperature, kd_alpha;
  void *arena;
};

/* ---- workspace ---- */

int lstmd_model_fold_decide(const struct lstmd_model_shape *s, size_t N, int *fold) {
  const int wanted = lstmd_cpu_fold_wanted((int)N, s->vocab); /* checked for every model */
  *fold = 0;
  if (wanted < 0) {
    lstmd_errorf("LSTMD_EMBED_FOLD=%s: 0, 1 or auto", getenv("LSTMD_EMBED_FOLD"));
    return LSTMD_ECONFIG;
  }
  /* a layer-normalised layer 0 has no folded path */
  *fold = s->kind == LSTMD_MODEL_TEXT && !s->layer_norm && wanted;
  return LSTMD_OK;
}

/* A forward-only workspace (forward_only, model.h's lstmd_workspace_create_forward) keeps what a
 * forward reads again: every layer's h and c (the next layer's input, the head's, the carried
 * state), and one layer's gates and layer-norm statistics at a time, which only backward would
 * read again; it has no gradient buffers. On the benchmark model's evaluation (T 128, B 32, H 512,
 * L 2) that is 67 MiB a thread instead of 147 MiB, which the kernel zeroes on first touch at
 * every evaluation. */
/* The arena's arrays, in floats, into sizes (6, 11 per layer, 9 of them: WORKSPACE_SLICES);
 * returns their count. fold: lstmd_model_fold_decide's. */
enum { WORKSPACE_SLICES = 15 + 11 * LSTMD_MAX_LAYERS };
static size_t workspace_sizes(const struct lstmd_model_shape *s, int T, int B, float dropout,
                              int forward_only, int fold, size_t *sizes) {
  const size_t N = (size_t)T * B, H = (size_t)s->hidden, L = (size_t)s->layers;
  const size_t In0 = (size_t)lstmd_model_input_width(s), O = (size_t)lstmd_model_output_width(s);
  const size_t wide = H > In0 ? H : In0;
  const int masked = dropout > 0.0f && L > 1, ln = s->layer_norm;
  const int text = s->kind == LSTMD_MODEL_TEXT;
  size_t n = 0;
#define SLICE(count) (sizes[n++] = (count))
  SLICE(N);                                              /* ids (int32) */
  SLICE(N);                                              /* targets (int32) */
  SLICE(s->kind == LSTMD_MODEL_SERIES ? N * In0 : 0);     /* batch x */
  SLICE(s->kind == LSTMD_MODEL_SERIES ? N * O : 0);      /* batch y */
  SLICE(text && !fold ? N * In0 : 0);                    /* x0 */
  SLICE(fold ? (size_t)s->vocab * 4 * H : 0);            /* fold */
  for (size_t l = 0; l < L; l++) {
    SLICE((N + B) * H);                                  /* h */
    SLICE((N + B) * H);                                  /* c */
    const int own = !forward_only || l == 0; /* forward_only: layer 0's, shared (see above) */
    SLICE(own ? N * 4 * H : 0);                          /* gates */
    SLICE(masked && l + 1 < L ? N * H : 0);              /* mask */
    SLICE(masked && l + 1 < L ? N * H : 0);              /* dropped */
    SLICE(ln && own ? N * 4 * H : 0);                    /* ln.xhat */
    SLICE(ln && own ? N * 4 * H : 0);                    /* ln.rhat */
    SLICE(ln && own ? N * H : 0);                        /* ln.chat */
    SLICE(ln && own ? N : 0);                            /* ln.rstd_x */
    SLICE(ln && own ? N : 0);                            /* ln.rstd_r */
    SLICE(ln && own ? N : 0);                            /* ln.rstd_c */
  }
  const int grads = !forward_only;
  SLICE(N * O);                                          /* out */
  SLICE(grads ? N * wide : 0);                           /* dh */
  SLICE(grads ? N * wide : 0);                           /* dx */
  SLICE(grads ? N * 4 * H : 0);                          /* dgates */
  SLICE(grads && ln ? N * 4 * H : 0);                    /* dln.dxp */
  SLICE(grads && ln ? N * 4 * H : 0);                    /* dln.drp */
  SLICE(grads && ln ? N * H : 0);                        /* dln.dcn */
  SLICE(grads ? 2 * (size_t)B * H : 0);                  /* work */
#undef SLICE
  return n;
}

size_t lstmd_workspace_forward_floats(const struct lstmd_model *m, int T, int B) {
  int fold;
  if (lstmd_model_fold_decide(&m->shape, (size_t)T * B, &fold)) fold = 0;
  size_t sizes[WORKSPACE_SLICES], total = 0;
  const size_t n = workspace_sizes(&m->shape, T, B, 0.0f, 1, fold, sizes);
  for (size_t i = 0; i < n; i++) total += sizes[i];
  return total;
}

static int workspace_create(const struct lstmd_model *m, int T, int B, float dropout,
                            int forward_only, struct lstmd_workspace **out) {
  *out = NULL;
  const struct lstmd_model_shape *s = &m->shape;
  if (s->kind == LSTMD_MODEL_CLASSIFY) { /* runs on classify.h's workspace */
    lstmd_errorf("model: a classification model has no language-model workspace");
    return LSTMD_EINVAL;
  }
  int fold;
  if (lstmd_model_fold_decide(s, (size_t)T * B, &fold)) return LSTMD_ECONFIG;
  size_t sizes[WORKSPACE_SLICES];
  const size_t n = workspace_sizes(s, T, B, dropout, forward_only, fold, sizes);
  const size_t H = (size_t)s->hidden, L = (size_t)s->layers;
  float *slice[sizeof sizes / sizeof sizes[0]];
  struct lstmd_workspace *ws = calloc(1, sizeof *ws);
  /* wpack apart from the arena: a recurrence team packs W_hh itself and frees it (set_team) */
  const size_t wpack = lstmd_cpu_recur_fast((int)H) ? lstmd_cpu_pack_floats(4 * (int)H, (int)H) : 0;
  if (!ws || !(ws->arena = lstmd_arena_carve(sizes, n, slice)) ||
      (wpack && !(ws->wpack = aligned_alloc(64, (wpack * sizeof(float) + 63) / 64 * 64)))) {
    if (ws) lstmd_workspace_arena_free(ws->arena);
    free(ws);
    return LSTMD_ENOMEM;
  }
  ws->model = m;
  ws->grads = m->grads;
  ws->T = T;
  ws->B = B;
  ws->dropout = dropout > 0.0f && L > 1 ? dropout : 0.0f; /* masks between layers only */
  size_t i = 0;
#define TAKE() (slice[i++])
  ws->batch.steps = T;
  ws->batch.batch = B;
  ws->batch.width = s->kind == LSTMD_MODEL_SERIES ? s->width : 0;
  ws->batch.horizon = s->kind == LSTMD_MODEL_SERIES ? s->horizon : 0;
  ws->batch.ids = (int32_t *)TAKE();
  ws->batch.targets = (int32_t *)TAKE();
  ws->batch.x = TAKE();
  ws->batch.y = TAKE();
  ws->x0 = TAKE();
  ws->fold = TAKE();
  for (size_t l = 0; l < L; l++) {
    ws->layer[l].h = TAKE();
    ws->layer[l].c = TAKE();
    ws->layer[l].gates = TAKE();
    ws->layer[l].mask = TAKE();
    ws->layer[l].dropped = TAKE();
    struct lstmd_lstm_ln_acts *a = &ws->layer[l].ln;
    a->xhat = TAKE();
    a->rhat = TAKE();
    a->chat = TAKE();
    a->rstd_x = TAKE();
    a->rstd_r = TAKE();
    a->rstd_c = TAKE();
    if (forward_only && l > 0) { /* layer 0's gates and statistics (see above) */
      ws->layer[l].gates = ws->layer[0].gates;
      ws->layer[l].ln = ws->layer[0].ln;
    }
  }
  ws->forward_only = forward_only;
  ws->out = TAKE();
  ws->dh = TAKE();
  ws->dx = TAKE();
  ws->dgates = TAKE();
  ws->dln.dxp = TAKE();
  ws->dln.drp = TAKE();
  ws->dln.dcn = TAKE();
  ws->work = TAKE();
#undef TAKE
  *out = ws;
  return LSTMD_OK;
}

int lstmd_workspace_create(const struct lstmd_model *m, int T, int B, float dropout,
                           struct lstmd_workspace **out) {
  return workspace_create(m, T, B, dropout, 0, out);
}

int lstmd_workspace_create_forward(const struct lstmd_model *m, int T, int B,
                                   struct lstmd_workspace **out) {
  return workspace_create(m, T, B, 0.0f, 1, out);
}

void lstmd_workspace_destroy(struct lstmd_workspace *ws) {
  if (!ws) return;
  lstmd_workspace_arena_free(ws->arena);
  free(ws->wpack);
  free(ws->frozen);
  free(ws);
}

struct lstmd_batch *lstmd_workspace_batch(struct lstmd_workspace *ws) { return &ws->batch; }
int lstmd_workspace_folds_embedding(const struct lstmd_workspace *ws) { return ws->fold != NULL; }
void lstmd_workspace_set_grads(struct lstmd_workspace *ws, float *grads) { ws->grads = grads; }

int lstmd_workspace_set_team(struct lstmd_workspace *ws, struct lstmd_recur_team *team,
                             int member) {
  if (team && ws->model->shape.layer_norm) return LSTMD_EUNSUPPORTED; /* no team path (model.h) */
  if (team) { /* the team's own packed W_hh replaces this slice's 16·H² bytes */
    free(ws->wpack);
    ws->wpack = NULL;
  }
  ws->team = team;
  ws->member = member;
  return LSTMD_OK;
}
void lstmd_workspace_on_grads_ready(struct lstmd_workspace *ws, lstmd_grads_ready_fn fn,
                                    void *ctx) {
  ws->on_ready = fn;
  ws->on_ready_ctx = ctx;
}

static void grads_ready(const struct lstmd_workspace *ws, size_t first) {
  if (ws->on_ready) ws->on_ready(ws->on_ready_ctx, first);
}
const float *lstmd_workspace_output(const struct lstmd_workspace *ws) { return ws->out; }
void lstmd_workspace_set_distill(struct lstmd_workspace *ws, const float *teacher_out,
                                 float temperature, float alpha) {
  ws->teacher_out = teacher_out;
  ws->kd_temperature = temperature;
  ws->kd_alpha = alpha;
}
const float *lstmd_workspace_dropout_mask(const struct lstmd_workspace *ws, int layer) {
  return ws->layer[layer].mask;
}

void lstmd_workspace_reset_state(struct lstmd_workspace *ws) {
  const size_t BH = (size_t)ws->B * ws->model->shape.hidden;
  for (int l = 0; l < ws->model->shape.layers; l++) {
    memset(ws->layer[l].h, 0, BH * sizeof(float));
    memset(ws->layer[l].c, 0, BH * sizeof(float));
  }
}

void lstmd_workspace_get_state(const struct lstmd_workspace *ws, float *h, float *c,
                               int full_batch, int col0) {
  const size_t H = (size_t)ws->model->shape.hidden, BH = (size_t)ws->B * H;
  for (int l = 0; l < ws->model->shape.layers; l++) {
    size_t at = ((size_t)l * full_batch + col0) * H;
    memcpy(h + at, ws->layer[l].h, BH * sizeof(float));
    memcpy(c + at, ws->layer[l].c, BH * sizeof(float));
  }
}

void lstmd_workspace_set_state(struct lstmd_workspace *ws, const float *h, const float *c,
                               int full_batch, int col0) {
  const size_t H = (size_t)ws->model->shape.hidden, BH = (size_t)ws->B * H;
  for (int l = 0; l < ws->model->shape.layers; l++) {
    size_t at = ((size_t)l * full_batch + col0) * H;
    memcpy(ws->layer[l].h, h + at, BH * sizeof(float));
    memcpy(ws->layer[l].c, c + at, BH * sizeof(float));
  }
}

/* ---- forward / backward ---- */

struct layer_params {
  const float *w_ih, *w_hh, *b_ih, *b_hh;
  float *dw_ih, *dw_hh, *db_ih, *db_hh;
  struct lstmd_lstm_ln ln;        /* layer normalisation's gains and shifts (unset without) */
  struct lstmd_lstm_ln_grads dln; /* and their gradients */
};

/* Offset of layer l's first tensor (lstm.weight_ih_l{l}) in the flat buffer. */
static size_t layer_params_offset(const struct lstmd_model *m, int l) {
  return m->tensors[lstmd_layer_first_tensor(&m->shape, l)].offset;
}

static struct layer_params layer_params(const struct lstmd_model *m, float *grads, int l) {
  const struct lstmd_tensor *t = &m->tensors[lstmd_layer_first_tensor(&m->shape, l)];
  const float *p = m->params;
  struct layer_params r = {p + t[0].offset,     p + t[1].offset,     p + t[2].offset,
                           p + t[3].offset,     grads + t[0].offset, grads + t[1].offset,
                           grads + t[2].offset, grads + t[3].offset};
  if (m->shape.layer_norm) {
    r.ln = (struct lstmd_lstm_ln){p + t[4].offset, p + t[5].offset, p + t[6].offset,
                                  p + t[7].offset, p + t[8].offset, p + t[9].offset};
    r.dln = (struct lstmd_lstm_ln_grads){grads + t[4].offset, grads + t[5].offset,
                                         grads + t[6].offset, grads + t[7].offset,
                                         grads + t[8].offset, grads + t[9].offset};
  }
  return r;
}

/* Input of layer l: the embedded ids / input rows, or the previous layer's (masked) output. */
static const float *layer_input(const struct lstmd_workspace *ws, int l) {
  if (l == 0) return ws->model->shape.kind == LSTMD_MODEL_TEXT ? ws->x0 : ws->batch.x;
  const struct layer_acts *prev = &ws->layer[l - 1];
  return prev->dropped ? prev->dropped : prev->h + (size_t)ws->B * ws->model->shape.hidden;
}

int lstmd_workspace_freeze_weights(struct lstmd_workspace *ws) {
  const struct lstmd_model *m = ws->model;
  const struct lstmd_model_shape *s = &m->shape;
  const int H = s->hidden, L = s->layers, In0 = lstmd_model_input_width(s);
  if (ws->frozen || ws->team || !lstmd_cpu_recur_fast(H)) return LSTMD_OK;
  size_t whh = lstmd_cpu_pack_floats(4 * H, H), total = 0;
  for (int l = 0; l < L; l++)
    total += whh + (s->layer_norm ? 0 : lstmd_cpu_pack_floats(4 * H, l == 0 ? In0 : H));
  ws->frozen = aligned_alloc(64, (total * sizeof(float) + 63) / 64 * 64);
  if (!ws->frozen) return LSTMD_ENOMEM;
  float *at = ws->frozen;
  for (int l = 0; l < L; l++) {
    const struct layer_params p = layer_params(m, ws->grads, l);
    const int In = l == 0 ? In0 : H;
    lstmd_cpu_pack_rows(4 * H, H, p.w_hh, at);
    ws->frozen_whh[l] = at;
    at += whh;
    if (s->layer_norm) continue;
    lstmd_cpu_pack_rows(4 * H, In, p.w_ih, at);
    ws->frozen_wih[l] = at;
    at += lstmd_cpu_pack_floats(4 * H, In);
  }
  return LSTMD_OK;
}

void lstmd_dropout_mask_rows(const struct lstmd_dropout_key *key, float p, int layer, int t0,
                             int t1, int B, int H, float *mask) {
  const float keep_scale = 1.0f / (1.0f - p);
  const uint32_t threshold = (uint32_t)(p * 16777216.0f); /* p in 24-bit units */
  const uint64_t base = lstmd_dropout_base(key->seed, key->step, layer);
  for (int t = t0; t < t1; t++)
    for (int b = 0; b < B; b++) {
      const uint64_t row = lstmd_dropout_row(base, t, key->col0 + b);
      float *m = mask + ((size_t)t * B + b) * H;
      for (int j = 0; j < H; j++) m[j] = lstmd_dropout_dropped(row, j, threshold) ? 0.0f : keep_scale;
    }
}

/* Mask of layer l for all (t, b, j) of the workspace, from the counter-based key. */
static void make_dropout_mask(const struct lstmd_workspace *ws, int l, float *mask,
                              const struct lstmd_dropout_key *key) {
  lstmd_dropout_mask_rows(key, ws->dropout, l, 0, ws->T, ws->B, ws->model->shape.hidden, mask);
}

void lstmd_model_end_window(struct lstmd_workspace *ws, int carry) {
  const size_t BH = (size_t)ws->B * ws->model->shape.hidden, last = (size_t)ws->T * BH;
  for (int l = 0; l < ws->model->shape.layers; l++) {
    struct layer_acts *a = &ws->layer[l];
    if (carry) {
      memcpy(a->h, a->h + last, BH * sizeof(float));
      memcpy(a->c, a->c + last, BH * sizeof(float));
    } else {
      memset(a->h, 0, BH * sizeof(float));
      memset(a->c, 0, BH * sizeof(float));
    }
  }
}

void lstmd_model_backward(struct lstmd_model *m, struct lstmd_workspace *ws) {
  if (ws->forward_only) { /* a caller's bug: it has no gradient buffers (model.h) */
    lstmd_errorf("model: backward on a forward-only workspace");
    abort();
  }
  const struct lstmd_model_shape *s = &m->shape;
  const int T = ws->T, B = ws->B, N = T * B, H = s->hidden, L = s->layers;
  const int O = lstmd_model_output_width(s), In0 = lstmd_model_input_width(s);
  const struct lstmd_tensor *hw = &m->tensors[m->n_tensors - 2], *hb = &m->tensors[m->n_tensors - 1];
  const float *top = ws->layer[L - 1].h + (size_t)B * H;
  float *dh = ws->dh, *dx = ws->dx;
  lstmd_cpu_linear_backward(N, H, O, top, m->params + hw->offset, ws->out, ws->grads + hw->offset,
                            ws->grads + hb->offset, dh);
  grads_ready(ws, hw->offset);
  for (int l = L - 1; l >= 0; l--) {
    struct layer_params p = layer_params(m, ws->grads, l);
    struct layer_acts *a = &ws->layer[l];
    struct lstmd_lstm_dims d = {T, B, l == 0 ? In0 : H, H};
    const int fold = l == 0 && ws->fold; /* then W_ih, b and E take their gradients below */
    const int need_dx = l > 0 || (s->kind == LSTMD_MODEL_TEXT && !fold);
    if (fold) d.split = 4 * H;
    if (ws->wpack) lstmd_cpu_pack_cols(4 * H, H, p.w_hh, ws->wpack);
    if (s->layer_norm) { /* no team and no fold (set_team, workspace_create) */
      lstmd_cpu_lstm_ln_backward_input(&d, p.w_ih, p.w_hh, &p.ln, a->c, a->gates, &a->ln, dh,
                                       ws->dgates, &ws->dln, ws->work, 0, 0, need_dx ? dx : NULL,
                                       ws->wpack);
      lstmd_cpu_lstm_ln_backward_weight(&d, layer_input(ws, l), a->h, &a->ln, ws->dgates,
                                        &ws->dln, p.dw_ih, p.dw_hh, p.db_ih, p.db_hh, &p.dln);
    } else {
      if (ws->team)
        lstmd_cpu_lstm_backward_input_team(ws->team, ws->member, &d, p.w_ih, p.w_hh, a->c,
                                           a->gates, dh, ws->dgates, ws->work, need_dx ? dx : NULL);
      else
        lstmd_cpu_lstm_backward_input(&d, p.w_ih, p.w_hh, a->c, a->gates, dh, ws->dgates, ws->work,
                                      0, 0, need_dx ? dx : NULL, ws->wpack);
      lstmd_cpu_lstm_backward_weight(&d, layer_input(ws, l), a->h, ws->dgates, p.dw_ih, p.dw_hh,
                                     fold ? NULL : p.db_ih, fold ? NULL : p.db_hh);
      if (fold)
        lstmd_cpu_fold_backward(N, s->vocab, s->embed, 4 * H, ws->batch.ids, ws->dgates,
                                m->params + m->tensors[0].offset, p.w_ih, ws->fold, p.dw_ih,
                                p.db_ih, p.db_hh, ws->grads + m->tensors[0].offset);
    }
    grads_ready(ws, layer_params_offset(m, l)); /* layer l and everything above it */
    if (l > 0) {
      if (ws->layer[l - 1].mask) lstmd_cpu_mul_inplace((size_t)N * H, dx, ws->layer[l - 1].mask);
      float *t = dh;
      dh = dx;
      dx = t;
    } else if (s->kind == LSTMD_MODEL_TEXT) {
      if (!fold)
        lstmd_cpu_embedding_backward(N, s->embed, dx, ws->batch.ids,
                                     ws->grads + m->tensors[0].offset);
      grads_ready(ws, 0);
    }
  }
}

double lstmd_model_step(struct lstmd_model *m, struct lstmd_workspace *ws, float grad_scale,
                        const struct lstmd_dropout_key *dropout, int carry_state) {
  double loss = lstmd_model_forward(m, ws, grad_scale, dropout);
  if (grad_scale != 0.0f) lstmd_model_backward(m, ws);
  lstmd_model_end_window(ws, carry_state);
  return loss;
}

double lstmd_model_forward(struct lstmd_model *m, struct lstmd_workspace *ws, float grad_scale,
                           const struct lstmd_dropout_key *dropout) {
  const struct lstmd_model_shape *s = &m->shape;
  const int T = ws->T, B = ws->B, N = T * B, H = s->hidden, L = s->layers;
  const int O = lstmd_model_output_width(s), In0 = lstmd_model_input_width(s);
  const float *emb = s->kind == LSTMD_MODEL_TEXT ? m->params + m->tensors[0].offset : NULL;
  if (emb && !ws->fold) lstmd_cpu_embedding_forward(N, s->embed, emb, ws->batch.ids, ws->x0);
  for (int l = 0; l < L; l++) {
    struct layer_params p = layer_params(m, ws->grads, l);
    struct layer_acts *a = &ws->layer[l];
    struct lstmd_lstm_dims d = {T, B, l == 0 ? In0 : H, H};
    const float *whh_packed = ws->frozen_whh[l] ? ws->frozen_whh[l] : ws->wpack;
    if (!ws->frozen_whh[l] && ws->wpack) lstmd_cpu_pack_rows(4 * H, H, p.w_hh, ws->wpack);
    if (l == 0 && ws->fold) { /* the projection from the table: all 4H rows "split" */
      lstmd_cpu_fold_forward(N, s->vocab, s->embed, 4 * H, ws->batch.ids, emb, p.w_ih, ws->fold,
                             a->gates);
      d.split = 4 * H;
    } else if (ws->frozen_wih[l]) { /* the projection on the frozen pack: all 4H rows "split" */
      memset(a->gates, 0, (size_t)N * 4 * H * sizeof(float));
      lstmd_cpu_gemm_abt_packed(N, 4 * H, d.input, layer_input(ws, l), d.input, ws->frozen_wih[l],
                                a->gates, 4 * H);
      d.split = 4 * H;
    }
    if (ws->team)
      lstmd_cpu_lstm_forward_team(ws->team, ws->member, &d, p.w_ih, p.w_hh, p.b_ih, p.b_hh,
                                  layer_input(ws, l), a->h, a->c, a->gates);
    else if (s->layer_norm)
      lstmd_cpu_lstm_ln_forward(&d, p.w_ih, p.w_hh, p.b_ih, p.b_hh, &p.ln, layer_input(ws, l), a->h,
                                a->c, a->gates, &a->ln, whh_packed);
    else
      lstmd_cpu_lstm_forward(&d, p.w_ih, p.w_hh, p.b_ih, p.b_hh, layer_input(ws, l), a->h, a->c,
                             a->gates, whh_packed);
    if (a->mask) {
      const size_t n = (size_t)N * H;
      if (dropout) {
        make_dropout_mask(ws, l, a->mask, dropout);
      } else {
        for (size_t i = 0; i < n; i++) a->mask[i] = 1.0f;
      }
      memcpy(a->dropped, a->h + (size_t)B * H, n * sizeof(float));
      lstmd_cpu_mul_inplace(n, a->dropped, a->mask);
    }
  }
  const struct lstmd_tensor *hw = &m->tensors[m->n_tensors - 2], *hb = &m->tensors[m->n_tensors - 1];
  lstmd_cpu_linear_forward(N, H, O, ws->layer[L - 1].h + (size_t)B * H, m->params + hw->offset,
                           m->params + hb->offset, ws->out);
  if (ws->teacher_out && s->kind == LSTMD_MODEL_TEXT)
    return lstmd_cpu_kd_softmax_xent(N, O, ws->out, ws->teacher_out, ws->batch.targets,
                                     ws->kd_temperature, ws->kd_alpha, grad_scale);
  if (ws->teacher_out)
    return lstmd_cpu_kd_mse((size_t)N * O, ws->out, ws->teacher_out, ws->batch.y, ws->kd_alpha,
                            grad_scale);
  if (s->kind == LSTMD_MODEL_TEXT)
    return lstmd_cpu_softmax_xent(N, O, ws->out, ws->batch.targets, grad_scale);
  return lstmd_cpu_mse((size_t)N * O, ws->out, ws->batch.y, grad_scale);
}
