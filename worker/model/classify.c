/* classify.c — forward and backward of the sequence classifier (classify.h) on the CPU: the
 * LSTM kernels of kernels/cpu/lstm_cpu.h run each direction over the whole padded batch; masks
 * (the lengths) decide what the reverse direction reads, what is pooled and what gets gradient.
 * Layer 0 reads embedded ids (text) or the batch's values (series: shape.width > 0) directly.
 * All activations live in one arena allocated at creation. */
#include "classify.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dense_cpu.h"
#include "kernels/cpu/lstm_cpu.h"
#include "kernels/status.h"

struct dir_acts {
  float *x;       /* [T,B,In] reversed input (reverse direction only; the forward reads y_{l−1}) */
  float *h, *c;   /* [T+1,B,H] in the direction's own time; slot 0 is the zero initial state */
  float *gates;   /* [T,B,4H] */
};

struct lstmd_clf_workspace {
  int T, B, D; /* D: directions */
  int Tc;      /* steps of the current batch: its longest sequence (the arrays' first Tc rows) */
  struct lstmd_batch batch;
  int In0;                /* layer 0's input width: E (text) or W (series) */
  int32_t *rids;          /* [T,B] ids reversed per column (reverse direction's layer-0 input) */
  float *x0;              /* [T,B,E] embedded ids (text), or NULL: layer 0 reads batch.x */
  float *y[LSTMD_MAX_LAYERS]; /* [T,B,D·H] each layer's output in sequence time; 0 past length */
  struct dir_acts dir[LSTMD_MAX_LAYERS][2];
  float *pooled;          /* [B,D·H] */
  int32_t *argmax;        /* [B,D·H] max pooling: the step each maximum came from */
  float *logits;          /* [B,C], then their gradient */
  float *dpooled;         /* [B,D·H] */
  float *dy;              /* [T,B,D·H] gradient w.r.t. the current layer's output */
  float *dh;              /* [T,B,H] one direction's output gradient in its own time */
  float *dx[2];           /* [T,B,max(E,D·H)] each direction's input gradient, its own time */
  float *dgates;          /* [T,B,4H] */
  float *work;            /* [2,B,H] */
  float *grads;
  void *arena;
};

int lstmd_clf_workspace_create(const struct lstmd_model *m, int T, int B,
                               struct lstmd_clf_workspace **out) {
  *out = NULL;
  const struct lstmd_model_shape *s = &m->shape;
  if (s->kind != LSTMD_MODEL_CLASSIFY || T < 1 || B < 1) {
    lstmd_errorf("classify: not a classification model, or an empty batch shape");
    return LSTMD_EINVAL;
  }
  const int D = s->bidirectional ? 2 : 1, L = s->layers, series = s->width > 0;
  const size_t N = (size_t)T * B, H = (size_t)s->hidden, DH = D * H;
  const size_t E = (size_t)(series ? s->width : s->embed); /* layer 0's input width */
  const size_t wide = E > DH ? E : DH;
  size_t sizes[16 + 5 * LSTMD_MAX_LAYERS * 2], n = 0;
#define SLICE(count) (sizes[n++] = (count))
  SLICE(series ? 0 : N); /* ids */
  SLICE(series ? N * E : 0); /* x */
  SLICE(B);         /* lengths */
  SLICE(B);         /* labels */
  SLICE(series ? 0 : N); /* rids */
  SLICE(series ? 0 : N * E); /* x0 */
  for (int l = 0; l < L; l++) {
    SLICE(N * DH);  /* y */
    for (int d = 0; d < D; d++) {
      SLICE(d ? N * (l ? DH : E) : 0); /* x: reversed input (layer 0: embedded rids) */
      SLICE((N + B) * H);              /* h */
      SLICE((N + B) * H);              /* c */
      SLICE(N * 4 * H);                /* gates */
    }
  }
  SLICE(B * DH);                   /* pooled */
  SLICE(B * DH);                   /* argmax */
  SLICE((size_t)B * s->classes);   /* logits */
  SLICE(B * DH);                   /* dpooled */
  SLICE(N * DH);                   /* dy */
  SLICE(N * H);                    /* dh */
  SLICE(N * wide);                 /* dx[0] */
  SLICE(D == 2 ? N * wide : 0);    /* dx[1] */
  SLICE(N * 4 * H);                /* dgates */
  SLICE(2 * (size_t)B * H);        /* work */
#undef SLICE
  float *slice[sizeof sizes / sizeof sizes[0]];
  struct lstmd_clf_workspace *ws = calloc(1, sizeof *ws);
  if (!ws || !(ws->arena = lstmd_arena_carve(sizes, n, slice))) {
    free(ws);
    return LSTMD_ENOMEM;
  }
  size_t i = 0;
#define TAKE() (slice[i++])
  ws->T = T;
  ws->B = B;
  ws->D = D;
  ws->In0 = (int)E;
  ws->grads = m->grads;
  ws->batch = (struct lstmd_batch){.steps = T, .batch = B, .width = series ? s->width : 0};
  ws->batch.ids = (int32_t *)TAKE();
  ws->batch.x = TAKE();
  ws->batch.lengths = (int32_t *)TAKE();
  ws->batch.labels = (int32_t *)TAKE();
  ws->rids = (int32_t *)TAKE();
  ws->x0 = TAKE();
  for (int l = 0; l < L; l++) {
    ws->y[l] = TAKE();
    for (int d = 0; d < D; d++) {
      ws->dir[l][d].x = TAKE();
      ws->dir[l][d].h = TAKE();
      ws->dir[l][d].c = TAKE();
      ws->dir[l][d].gates = TAKE();
    }
  }
  ws->pooled = TAKE();
  ws->argmax = (int32_t *)TAKE();
  ws->logits = TAKE();
  ws->dpooled = TAKE();
  ws->dy = TAKE();
  ws->dh = TAKE();
  ws->dx[0] = TAKE();
  ws->dx[1] = TAKE();
  ws->dgates = TAKE();
  ws->work = TAKE();
#undef TAKE
  *out = ws;
  return LSTMD_OK;
}

void lstmd_clf_workspace_destroy(struct lstmd_clf_workspace *ws) {
  if (!ws) return;
  lstmd_workspace_arena_free(ws->arena);
  free(ws);
}

struct lstmd_batch *lstmd_clf_workspace_batch(struct lstmd_clf_workspace *ws) {
  return &ws->batch;
}
void lstmd_clf_workspace_set_grads(struct lstmd_clf_workspace *ws, float *grads) {
  ws->grads = grads;
}
const float *lstmd_clf_workspace_logits(const struct lstmd_clf_workspace *ws) { return ws->logits; }

/* dst[t,b,:] = src[len_b−1−t, b, :] for t < len_b, 0 after: each column's valid steps reversed.
 * Its own adjoint on the valid steps (see unreverse_add). W: floats per (t, b). */
static void reverse_rows(int T, int B, size_t W, const int32_t *len, const float *src, float *dst) {
  for (int t = 0; t < T; t++)
    for (int b = 0; b < B; b++) {
      float *o = dst + ((size_t)t * B + b) * W;
      if (t < len[b])
        memcpy(o, src + ((size_t)(len[b] - 1 - t) * B + b) * W, W * sizeof(float));
      else
        memset(o, 0, W * sizeof(float));
    }
}

/* dst[len_b−1−t, b, :] += src[t, b, :] for t < len_b: a reversed direction's gradient back in
 * sequence time. */
static void unreverse_add(int T, int B, size_t W, const int32_t *len, const float *src, float *dst) {
  for (int t = 0; t < T; t++)
    for (int b = 0; b < B; b++) {
      if (t >= len[b]) continue;
      const float *g = src + ((size_t)t * B + b) * W;
      float *o = dst + ((size_t)(len[b] - 1 - t) * B + b) * W;
      for (size_t j = 0; j < W; j++) o[j] += g[j];
    }
}

struct dir_params {
  const float *w_ih, *w_hh, *b_ih, *b_hh;
  float *dw_ih, *dw_hh, *db_ih, *db_hh;
};

/* Tensors of layer l, direction d: after embed.weight (text only), 4 per (layer, direction). */
static struct dir_params dir_params(const struct lstmd_model *m, float *grads, int l, int d) {
  const int D = m->shape.bidirectional ? 2 : 1, first = m->shape.width > 0 ? 0 : 1;
  const struct lstmd_tensor *t = &m->tensors[first + 4 * (l * D + d)];
  const float *p = m->params;
  return (struct dir_params){p + t[0].offset,     p + t[1].offset,     p + t[2].offset,
                             p + t[3].offset,     grads + t[0].offset, grads + t[1].offset,
                             grads + t[2].offset, grads + t[3].offset};
}

static int check_batch(const struct lstmd_model *m, const struct lstmd_clf_workspace *ws) {
  const struct lstmd_batch *b = &ws->batch;
  for (int j = 0; j < ws->B; j++) {
    if (b->lengths[j] < 0 || b->lengths[j] > ws->T) {
      lstmd_errorf("classify: column %d has length %d, the batch holds 0..%d steps", j,
                   b->lengths[j], ws->T);
      return LSTMD_EINVAL;
    }
    if (b->lengths[j] && (b->labels[j] < 0 || b->labels[j] >= m->shape.classes)) {
      lstmd_errorf("classify: column %d has label %d of %d classes", j, b->labels[j],
                   m->shape.classes);
      return LSTMD_EINVAL;
    }
  }
  for (size_t k = 0; b->ids && k < (size_t)ws->T * ws->B; k++) /* series: no ids */
    if (b->ids[k] < 0 || b->ids[k] >= m->shape.vocab) {
      lstmd_errorf("classify: token id %d outside the vocabulary of %d", b->ids[k], m->shape.vocab);
      return LSTMD_EINVAL;
    }
  return LSTMD_OK;
}

/* Pools y [T,B,DH] over each column's valid steps into ws->pooled [B,DH]. */
static void pool_forward(const struct lstmd_model_shape *s, struct lstmd_clf_workspace *ws,
                         const float *y) {
  const int B = ws->B, H = s->hidden, DH = ws->D * H;
  const int32_t *len = ws->batch.lengths;
  for (int b = 0; b < B; b++) {
    float *p = ws->pooled + (size_t)b * DH;
    int32_t *am = ws->argmax + (size_t)b * DH;
    memset(p, 0, (size_t)DH * sizeof(float));
    if (len[b] == 0) continue;
    for (int j = 0; j < DH; j++) {
      if (s->pool == LSTMD_POOL_LAST) {
        /* forward half: step len−1; reverse half: step 0 (where its recurrence ends) */
        const int t = j < H ? len[b] - 1 : 0;
        p[j] = y[((size_t)t * B + b) * DH + j];
        am[j] = t;
      } else if (s->pool == LSTMD_POOL_MEAN) {
        double sum = 0;
        for (int t = 0; t < len[b]; t++) sum += y[((size_t)t * B + b) * DH + j];
        p[j] = (float)(sum / len[b]);
      } else {
        float best = -FLT_MAX;
        int at = 0;
        for (int t = 0; t < len[b]; t++) {
          const float v = y[((size_t)t * B + b) * DH + j];
          if (v > best) {
            best = v;
            at = t;
          }
        }
        p[j] = best;
        am[j] = at;
      }
    }
  }
}

/* dy [T,B,DH] = the pooling's adjoint applied to dpooled (zero at every step pooling skipped). */
static void pool_backward(const struct lstmd_model_shape *s, struct lstmd_clf_workspace *ws) {
  const int T = ws->Tc, B = ws->B, DH = ws->D * s->hidden;
  const int32_t *len = ws->batch.lengths;
  memset(ws->dy, 0, (size_t)T * B * DH * sizeof(float));
  for (int b = 0; b < B; b++) {
    const float *g = ws->dpooled + (size_t)b * DH;
    const int32_t *am = ws->argmax + (size_t)b * DH;
    if (len[b] == 0) continue;
    for (int j = 0; j < DH; j++) {
      if (s->pool == LSTMD_POOL_MEAN) {
        const float share = g[j] / (float)len[b];
        for (int t = 0; t < len[b]; t++) ws->dy[((size_t)t * B + b) * DH + j] = share;
      } else {
        ws->dy[((size_t)am[j] * B + b) * DH + j] = g[j];
      }
    }
  }
}

double lstmd_clf_forward(const struct lstmd_model *m, struct lstmd_clf_workspace *ws,
                         float grad_scale) {
  const struct lstmd_model_shape *s = &m->shape;
  ws->Tc = 0; /* until the batch passes its checks: backward then does nothing */
  if (check_batch(m, ws)) return NAN;
  ws->Tc = 1; /* the batch is padded to its longest sequence: steps past it are not run */
  for (int b = 0; b < ws->B; b++) ws->Tc = ws->batch.lengths[b] > ws->Tc ? ws->batch.lengths[b] : ws->Tc;
  const int T = ws->Tc, B = ws->B, D = ws->D, H = s->hidden, E = ws->In0, C = s->classes;
  const int DH = D * H, N = T * B;
  const int32_t *len = ws->batch.lengths;
  const float *table = m->params + m->tensors[0].offset;
  if (!ws->x0) { /* series: layer 0 reads the values; the reverse direction reads them reversed */
    if (D == 2) reverse_rows(T, B, (size_t)E, len, ws->batch.x, ws->dir[0][1].x);
  } else {
    lstmd_cpu_embedding_forward(N, E, table, ws->batch.ids, ws->x0);
  }
  if (D == 2 && ws->x0) { /* the reverse direction's layer-0 input: the ids reversed, then embedded */
    for (int t = 0; t < T; t++)
      for (int b = 0; b < B; b++)
        ws->rids[(size_t)t * B + b] = t < len[b] ? ws->batch.ids[(size_t)(len[b] - 1 - t) * B + b] : 0;
    lstmd_cpu_embedding_forward(N, E, table, ws->rids, ws->dir[0][1].x);
  }
  for (int l = 0; l < s->layers; l++) {
    const int in = l == 0 ? E : DH;
    const float *xf = l > 0 ? ws->y[l - 1] : ws->x0 ? ws->x0 : ws->batch.x;
    if (D == 2 && l > 0) reverse_rows(T, B, (size_t)DH, len, ws->y[l - 1], ws->dir[l][1].x);
    for (int d = 0; d < D; d++) {
      struct dir_params p = dir_params(m, ws->grads, l, d);
      struct dir_acts *a = &ws->dir[l][d];
      struct lstmd_lstm_dims dims = {T, B, in, H};
      lstmd_cpu_lstm_forward(&dims, p.w_ih, p.w_hh, p.b_ih, p.b_hh, d ? a->x : xf, a->h, a->c,
                             a->gates, NULL);
    }
    /* y in sequence time: forward h[t+1] and reverse h[len−t] side by side; 0 past the length */
    float *y = ws->y[l];
    for (int t = 0; t < T; t++)
      for (int b = 0; b < B; b++) {
        float *o = y + ((size_t)t * B + b) * DH;
        if (t >= len[b]) {
          memset(o, 0, (size_t)DH * sizeof(float));
          continue;
        }
        memcpy(o, ws->dir[l][0].h + ((size_t)(t + 1) * B + b) * H, (size_t)H * sizeof(float));
        if (D == 2)
          memcpy(o + H, ws->dir[l][1].h + ((size_t)(len[b] - t) * B + b) * H,
                 (size_t)H * sizeof(float));
      }
  }
  pool_forward(s, ws, ws->y[s->layers - 1]);
  const struct lstmd_tensor *hw = &m->tensors[m->n_tensors - 2], *hb = &m->tensors[m->n_tensors - 1];
  lstmd_cpu_linear_forward(B, DH, C, ws->pooled, m->params + hw->offset, m->params + hb->offset,
                           ws->logits);
  double loss = 0;
  for (int b = 0; b < B; b++) {
    float *z = ws->logits + (size_t)b * C;
    if (len[b] == 0) {
      memset(z, 0, (size_t)C * sizeof(float));
      continue;
    }
    double mx = z[0], sum = 0;
    for (int k = 1; k < C; k++) mx = z[k] > mx ? z[k] : mx;
    for (int k = 0; k < C; k++) sum += exp(z[k] - mx);
    loss += mx + log(sum) - z[ws->batch.labels[b]];
    if (grad_scale != 0.0f)
      for (int k = 0; k < C; k++)
        z[k] = grad_scale * (float)(exp(z[k] - mx) / sum - (k == ws->batch.labels[b]));
  }
  return loss;
}

void lstmd_clf_backward(const struct lstmd_model *m, struct lstmd_clf_workspace *ws) {
  if (!ws->Tc) return; /* forward refused the batch (it returned NaN, which fails the step) */
  const struct lstmd_model_shape *s = &m->shape;
  const int T = ws->Tc, B = ws->B, D = ws->D, H = s->hidden, E = ws->In0, C = s->classes;
  const int DH = D * H, N = T * B;
  const int32_t *len = ws->batch.lengths;
  const struct lstmd_tensor *hw = &m->tensors[m->n_tensors - 2], *hb = &m->tensors[m->n_tensors - 1];
  lstmd_cpu_linear_backward(B, DH, C, ws->pooled, m->params + hw->offset, ws->logits,
                            ws->grads + hw->offset, ws->grads + hb->offset, ws->dpooled);
  pool_backward(s, ws);
  for (int l = s->layers - 1; l >= 0; l--) {
    const int in = l == 0 ? E : DH;
    for (int d = 0; d < D; d++) {
      struct dir_params p = dir_params(m, ws->grads, l, d);
      struct dir_acts *a = &ws->dir[l][d];
      /* this direction's slice of dy, in its own time */
      for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++) {
          float *o = ws->dh + ((size_t)t * B + b) * H;
          const int src_t = d ? len[b] - 1 - t : t;
          if (t < len[b])
            memcpy(o, ws->dy + ((size_t)src_t * B + b) * DH + d * H, (size_t)H * sizeof(float));
          else
            memset(o, 0, (size_t)H * sizeof(float));
        }
      struct lstmd_lstm_dims dims = {T, B, in, H};
      const float *x = d ? a->x : l > 0 ? ws->y[l - 1] : ws->x0 ? ws->x0 : ws->batch.x;
      float *dx = l > 0 || ws->x0 ? ws->dx[d] : NULL; /* a series input takes no gradient */
      lstmd_cpu_lstm_backward(&dims, p.w_ih, p.w_hh, x, a->h, a->c, a->gates, ws->dh, ws->dgates,
                              ws->work, p.dw_ih, p.dw_hh, p.db_ih, p.db_hh, dx, NULL);
    }
    if (l > 0) { /* dy of layer l−1: the forward's input gradient plus the reverse's, unreversed */
      memcpy(ws->dy, ws->dx[0], (size_t)N * DH * sizeof(float));
      if (D == 2) unreverse_add(T, B, (size_t)DH, len, ws->dx[1], ws->dy);
    } else if (ws->x0) { /* text: into the embedding (series inputs take no gradient) */
      float *dtable = ws->grads + m->tensors[0].offset;
      lstmd_cpu_embedding_backward(N, E, ws->dx[0], ws->batch.ids, dtable);
      if (D == 2) lstmd_cpu_embedding_backward(N, E, ws->dx[1], ws->rids, dtable);
    }
  }
}
