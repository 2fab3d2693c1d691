/* model_stage.c — a pipeline stage's layers by time chunk (see model_stage.h). One arena per
 * workspace, allocated once (lstmd_arena_carve): the window's activations (kept until the
 * unit's last W) and one chunk's scratch (the gate gradients of every layer between a chunk's B
 * and its W, and a split projection's rows, which live from the copy into the workspace to the
 * end of the same chunk's F or W: model_stage.h).
 *
 * A first stage folds a text model's embedding into layer 0 as one rank does (model_workspace.c;
 * where lstmd_model_fold_decide says so for the unit's window): the table is made at the window's
 * first chunk (the weights do not change within a step), each chunk's projection rows are copied
 * from it, each W adds its chunk's gate gradients into the window's sums, and the W that
 * completes the window's chunks (in whatever order the schedule runs them) turns the sums into
 * the gradients of weight_ih_l0, the biases and the embedding. */
#include "model_stage.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dense_cpu.h"
#include "kernels/cpu/embed_fold_cpu.h"
#include "kernels/cpu/lstm_cpu.h"
#include "kernels/cpu/lstm_ln_cpu.h"
#include "kernels/status.h"

struct stage_layer {
  float *h, *c;   /* [T+1,B,H]; slot 0 is the window's initial state */
  float *gates;   /* [T,B,4H] */
  float *mask;    /* [T,B,H] dropout mask of the layer's output, or NULL */
  float *dropped; /* [T,B,H] masked output fed onward, or NULL */
  float *work;    /* [2,B,H] (dh, dc) carried backwards from the chunk after */
  float *dgates;  /* [Tc,B,4H] the chunk's gate gradients, from B to W */
  struct lstmd_lstm_ln_acts ln;   /* layer normalisation: the window's saved rows ([T,...]) */
  struct lstmd_lstm_ln_dacts dln; /* and the chunk's gradients from B to W ([Tc,...]) */
};

struct lstmd_stage_ws {
  struct lstmd_stage st;
  int T, Tc, B, H, in0, out; /* in0: width of the first layer's input; out: the head's width */
  float dropout;
  struct lstmd_batch batch;
  float *x0;               /* [T,B,E] embedded ids (first stage, text, not folded) */
  float *fold, *fold_sums; /* [V,4H] each: the folded embedding's table and gradient sums */
  int fold_chunks;         /* W chunks of the window summed into fold_sums so far */
  float *input, *dinput;   /* [T,B,H] to and from the stage below (not first) */
  float *doutput;          /* [T,B,H] from the stage above (not last) */
  float *logits, *dh_top;  /* [T,B,O], [T,B,H]: the head's output (then its gradient) and the
                            * gradient it passes into the top layer (last stage) */
  float *dh, *dx;          /* [Tc,B,max(H,in0)] one chunk's gradients between layers */
  float *input_rows, *dinput_rows;   /* [Tc,B,rows_in] a split projection's part from below */
  float *output_rows, *doutput_rows; /* [Tc,B,rows_out] the part computed here for above */
  float *own_rows[4];                /* the four above as allocated (lstmd_stage_ws_use_rows) */
  struct stage_layer layer[LSTMD_MAX_LAYERS];
  void *arena;
};


int lstmd_stage_ws_create(const struct lstmd_model *m, const struct lstmd_stage *st, int T,
                          int Tc, int B, float dropout, struct lstmd_stage_ws **out) {
  *out = NULL;
  const struct lstmd_model_shape *s = &m->shape;
  if (st->layers < 1 || st->layer0 < 0 || st->layer0 + st->layers > s->layers || Tc < 1 ||
      T % Tc != 0 || st->rows_in < 0 || st->rows_in > 4 * s->hidden || st->rows_out < 0 ||
      st->rows_out > 4 * s->hidden || (st->first && st->rows_in) || (st->last && st->rows_out) ||
      (s->layer_norm && (st->rows_in || st->rows_out)))
    return LSTMD_EINVAL;
  const size_t N = (size_t)T * B, Nc = (size_t)Tc * B, H = (size_t)s->hidden;
  const int text = s->kind == LSTMD_MODEL_TEXT;
  const size_t in0 = st->first ? (size_t)lstmd_model_input_width(s) : H;
  const size_t O = (size_t)(text ? s->vocab : s->horizon), wide = H > in0 ? H : in0;
  const int ln = s->layer_norm;
  const size_t Ri = (size_t)st->rows_in, Ro = (size_t)st->rows_out;
  int fold = 0;
  if (lstmd_model_fold_decide(s, N, &fold)) return LSTMD_ECONFIG;
  fold = fold && st->first;
  const size_t table = fold ? (size_t)s->vocab * 4 * H : 0;
  size_t sizes[18 + 16 * LSTMD_MAX_LAYERS], n = 0; /* 18, and 16 per layer */
#define SLICE(count) (sizes[n++] = (count))
  SLICE(st->first && text ? N : 0);                  /* ids (int32) */
  SLICE(st->last && text ? N : 0);                   /* targets (int32) */
  SLICE(st->first && !text ? N * in0 : 0);           /* batch x */
  SLICE(st->last && !text ? N * O : 0);              /* batch y */
  SLICE(st->first && text && !fold ? N * in0 : 0);   /* x0 */
  SLICE(table);                                      /* fold */
  SLICE(table);                                      /* fold_sums */
  SLICE(st->first ? 0 : N * H);                      /* input */
  SLICE(st->first ? 0 : N * H);                      /* dinput */
  SLICE(st->last ? 0 : N * H);                       /* doutput */
  SLICE(st->last ? N * O : 0);                       /* logits */
  SLICE(st->last ? N * H : 0);                       /* dh_top */
  SLICE(Nc * wide);                                  /* dh */
  SLICE(Nc * wide);                                  /* dx */
  SLICE(Nc * Ri);                                    /* input_rows */
  SLICE(Nc * Ri);                                    /* dinput_rows */
  SLICE(Nc * Ro);                                    /* output_rows */
  SLICE(Nc * Ro);                                    /* doutput_rows */
  for (int i = 0; i < st->layers; i++) {
    const int masked = dropout > 0.0f && st->layer0 + i < s->layers - 1;
    SLICE((N + B) * H);                              /* h */
    SLICE((N + B) * H);                              /* c */
    SLICE(N * 4 * H);                                /* gates */
    SLICE(masked ? N * H : 0);                       /* mask */
    SLICE(masked ? N * H : 0);                       /* dropped */
    SLICE(2 * (size_t)B * H);                        /* work */
    SLICE(Nc * 4 * H);                               /* dgates */
    SLICE(ln ? N * 4 * H : 0);                       /* ln.xhat */
    SLICE(ln ? N * 4 * H : 0);                       /* ln.rhat */
    SLICE(ln ? N * H : 0);                           /* ln.chat */
    SLICE(ln ? N : 0);                               /* ln.rstd_x */
    SLICE(ln ? N : 0);                               /* ln.rstd_r */
    SLICE(ln ? N : 0);                               /* ln.rstd_c */
    SLICE(ln ? Nc * 4 * H : 0);                      /* dln.dxp */
    SLICE(ln ? Nc * 4 * H : 0);                      /* dln.drp */
    SLICE(ln ? Nc * H : 0);                          /* dln.dcn */
  }
#undef SLICE
  float *slice[sizeof sizes / sizeof sizes[0]];
  struct lstmd_stage_ws *ws = calloc(1, sizeof *ws);
  if (!ws || !(ws->arena = lstmd_arena_carve(sizes, n, slice))) {
    free(ws);
    return LSTMD_ENOMEM;
  }
  ws->st = *st;
  ws->T = T;
  ws->Tc = Tc;
  ws->B = B;
  ws->H = (int)H;
  ws->in0 = (int)in0;
  ws->out = (int)O;
  ws->dropout = dropout;
  size_t i = 0;
#define TAKE() (slice[i++])
  ws->batch.steps = T;
  ws->batch.batch = B;
  ws->batch.width = text ? 0 : s->width;
  ws->batch.horizon = text ? 0 : s->horizon;
  ws->batch.ids = (int32_t *)TAKE();
  ws->batch.targets = (int32_t *)TAKE();
  ws->batch.x = TAKE();
  ws->batch.y = TAKE();
  ws->x0 = TAKE();
  ws->fold = TAKE();
  ws->fold_sums = TAKE();
  ws->input = TAKE();
  ws->dinput = TAKE();
  ws->doutput = TAKE();
  ws->logits = TAKE();
  ws->dh_top = TAKE();
  ws->dh = TAKE();
  ws->dx = TAKE();
  ws->input_rows = TAKE();
  ws->dinput_rows = TAKE();
  ws->output_rows = TAKE();
  ws->doutput_rows = TAKE();
  ws->own_rows[0] = ws->input_rows;
  ws->own_rows[1] = ws->dinput_rows;
  ws->own_rows[2] = ws->output_rows;
  ws->own_rows[3] = ws->doutput_rows;
  for (int l = 0; l < st->layers; l++) {
    struct stage_layer *y = &ws->layer[l];
    y->h = TAKE();
    y->c = TAKE();
    y->gates = TAKE();
    y->mask = TAKE();
    y->dropped = TAKE();
    y->work = TAKE();
    y->dgates = TAKE();
    y->ln.xhat = TAKE();
    y->ln.rhat = TAKE();
    y->ln.chat = TAKE();
    y->ln.rstd_x = TAKE();
    y->ln.rstd_r = TAKE();
    y->ln.rstd_c = TAKE();
    y->dln.dxp = TAKE();
    y->dln.drp = TAKE();
    y->dln.dcn = TAKE();
  }
#undef TAKE
  *out = ws;
  return LSTMD_OK;
}

void lstmd_stage_ws_destroy(struct lstmd_stage_ws *ws) {
  if (!ws) return;
  lstmd_workspace_arena_free(ws->arena);
  free(ws);
}

struct lstmd_batch *lstmd_stage_ws_batch(struct lstmd_stage_ws *ws) { return &ws->batch; }
float *lstmd_stage_ws_input(struct lstmd_stage_ws *ws) { return ws->input; }
float *lstmd_stage_ws_doutput(struct lstmd_stage_ws *ws) { return ws->doutput; }
const float *lstmd_stage_ws_dinput(const struct lstmd_stage_ws *ws) { return ws->dinput; }
float *lstmd_stage_ws_input_rows(struct lstmd_stage_ws *ws) { return ws->input_rows; }
const float *lstmd_stage_ws_output_rows(const struct lstmd_stage_ws *ws) { return ws->output_rows; }
float *lstmd_stage_ws_doutput_rows(struct lstmd_stage_ws *ws) { return ws->doutput_rows; }
const float *lstmd_stage_ws_dinput_rows(const struct lstmd_stage_ws *ws) { return ws->dinput_rows; }

void lstmd_stage_ws_use_rows(struct lstmd_stage_ws *ws, float *input_rows, float *dinput_rows,
                             float *output_rows, float *doutput_rows) {
  ws->input_rows = input_rows ? input_rows : ws->own_rows[0];
  ws->dinput_rows = dinput_rows ? dinput_rows : ws->own_rows[1];
  ws->output_rows = output_rows ? output_rows : ws->own_rows[2];
  ws->doutput_rows = doutput_rows ? doutput_rows : ws->own_rows[3];
}

int lstmd_stage_ws_folds_embedding(const struct lstmd_stage_ws *ws) { return ws->fold != NULL; }

const float *lstmd_stage_ws_dropout_mask(const struct lstmd_stage_ws *ws, int i) {
  return ws->layer[i].mask;
}

const float *lstmd_stage_ws_output(const struct lstmd_stage_ws *ws) {
  const struct stage_layer *top = &ws->layer[ws->st.layers - 1];
  return top->dropped ? top->dropped : top->h + (size_t)ws->B * ws->H;
}

void lstmd_stage_ws_set_state(struct lstmd_stage_ws *ws, const float *h, const float *c,
                              int full_batch, int col0) {
  const size_t BH = (size_t)ws->B * ws->H;
  for (int l = 0; l < ws->st.layers; l++) {
    const size_t at = ((size_t)l * full_batch + col0) * ws->H;
    memcpy(ws->layer[l].h, h + at, BH * sizeof(float));
    memcpy(ws->layer[l].c, c + at, BH * sizeof(float));
  }
}

void lstmd_stage_ws_get_final_state(const struct lstmd_stage_ws *ws, float *h, float *c,
                                    int full_batch, int col0) {
  const size_t BH = (size_t)ws->B * ws->H, last = (size_t)ws->T * BH;
  for (int l = 0; l < ws->st.layers; l++) {
    const size_t at = ((size_t)l * full_batch + col0) * ws->H;
    memcpy(h + at, ws->layer[l].h + last, BH * sizeof(float));
    memcpy(c + at, ws->layer[l].c + last, BH * sizeof(float));
  }
}

void lstmd_stage_ws_zero_state(struct lstmd_stage_ws *ws) {
  const size_t BH = (size_t)ws->B * ws->H;
  for (int l = 0; l < ws->st.layers; l++) {
    memset(ws->layer[l].h, 0, BH * sizeof(float));
    memset(ws->layer[l].c, 0, BH * sizeof(float));
  }
}

/* The tensors of model layer `layer` (global index) in a flat buffer (params or grads). */
static const struct lstmd_tensor *layer_tensors(const struct lstmd_model *m, int layer) {
  return &m->tensors[lstmd_layer_first_tensor(&m->shape, layer)];
}

/* Layer normalisation's gains and shifts of a layer (w from layer_tensors; with layer_norm). */
static struct lstmd_lstm_ln ln_params(const struct lstmd_model *m, const struct lstmd_tensor *w) {
  const float *p = m->params;
  return (struct lstmd_lstm_ln){p + w[4].offset, p + w[5].offset, p + w[6].offset,
                                p + w[7].offset, p + w[8].offset, p + w[9].offset};
}

/* Input of the stage's layer l over the whole window ([T,B,In] at row 0). */
static const float *layer_input(const struct lstmd_stage_ws *ws, int l) {
  if (l > 0) {
    const struct stage_layer *prev = &ws->layer[l - 1];
    return prev->dropped ? prev->dropped : prev->h + (size_t)ws->B * ws->H;
  }
  if (!ws->st.first) return ws->input;
  return ws->x0 ? ws->x0 : ws->batch.x;
}

static int layer_input_width(const struct lstmd_stage_ws *ws, int l) {
  return l == 0 ? ws->in0 : ws->H;
}

/* layer_input from step t0 on; NULL for a folded layer 0 (which has no input rows). */
static const float *layer_input_at(const struct lstmd_stage_ws *ws, int l, int t0) {
  const float *x = layer_input(ws, l);
  return x ? x + (size_t)t0 * ws->B * layer_input_width(ws, l) : NULL;
}

/* The rows [0, r) of the input projection that layer l's kernels leave out (model_stage.h): the
 * stage's first layer's split, or all 4H of a folded layer 0 (the table's rows are its part). */
static int layer_split(const struct lstmd_stage_ws *ws, int l) {
  return l > 0 ? 0 : ws->fold ? 4 * ws->H : ws->st.rows_in;
}

/* weight_ih of the next stage's first layer (with rows_out: its rows [0, rows_out) are here). */
static size_t next_w_ih(const struct lstmd_model *m, const struct lstmd_stage_ws *ws) {
  return layer_tensors(m, ws->st.layer0 + ws->st.layers)[0].offset;
}

double lstmd_stage_forward(const struct lstmd_model *m, struct lstmd_stage_ws *ws,
                           const struct lstmd_stage_packed *pk, int t0, int t1, float grad_scale,
                           const struct lstmd_dropout_key *dropout) {
  const int B = ws->B, H = ws->H, Tc = t1 - t0;
  const size_t BH = (size_t)B * H, rows = (size_t)Tc * B;
  if (ws->x0)
    lstmd_cpu_embedding_forward((int)rows, ws->in0, m->params + m->tensors[0].offset,
                                ws->batch.ids + (size_t)t0 * B, ws->x0 + (size_t)t0 * B * ws->in0);
  if (ws->fold) {
    if (t0 == 0)
      lstmd_cpu_fold_table(m->shape.vocab, ws->in0, 4 * H, m->params + m->tensors[0].offset,
                           m->params + layer_tensors(m, 0)[0].offset, ws->fold);
    lstmd_cpu_fold_gather((int)rows, 4 * H, ws->batch.ids + (size_t)t0 * B, ws->fold,
                          ws->layer[0].gates + t0 * BH * 4);
  }
  for (int l = 0; l < ws->st.layers; l++) {
    struct stage_layer *y = &ws->layer[l];
    const struct lstmd_tensor *w = layer_tensors(m, ws->st.layer0 + l);
    const int In = layer_input_width(ws, l), r = layer_split(ws, l);
    const struct lstmd_lstm_dims d = {Tc, B, In, H, r};
    if (l == 0 && ws->st.rows_in) /* the split's part from below: gates[:, 0:r) */
      for (size_t i = 0; i < rows; i++)
        memcpy(y->gates + t0 * BH * 4 + i * 4 * H, ws->input_rows + i * r,
               (size_t)r * sizeof(float));
    if (m->shape.layer_norm) {
      const struct lstmd_lstm_ln ln = ln_params(m, w);
      const struct lstmd_lstm_ln_acts a = lstmd_cpu_lstm_ln_acts_at(&y->ln, t0, B, H);
      lstmd_cpu_lstm_ln_forward(&d, m->params + w[0].offset, m->params + w[1].offset,
                                m->params + w[2].offset, m->params + w[3].offset, &ln,
                                layer_input_at(ws, l, t0), y->h + t0 * BH,
                                y->c + t0 * BH, y->gates + t0 * BH * 4, &a, pk->rows[l]);
    } else {
      lstmd_cpu_lstm_forward(&d, m->params + w[0].offset, m->params + w[1].offset,
                             m->params + w[2].offset, m->params + w[3].offset,
                             layer_input_at(ws, l, t0), y->h + t0 * BH,
                             y->c + t0 * BH, y->gates + t0 * BH * 4, pk->rows[l]);
    }
    if (!y->mask) continue;
    const size_t n = rows * H;
    if (dropout) {
      lstmd_dropout_mask_rows(dropout, ws->dropout, ws->st.layer0 + l, t0, t1, B, H, y->mask);
    } else {
      for (size_t i = 0; i < n; i++) y->mask[t0 * BH + i] = 1.0f;
    }
    memcpy(y->dropped + t0 * BH, y->h + (t0 + 1) * BH, n * sizeof(float));
    lstmd_cpu_mul_inplace(n, y->dropped + t0 * BH, y->mask + t0 * BH);
  }
  const int ro = ws->st.rows_out;
  if (ro) /* the next stage's rows [0, ro) of its input projection, from this stage's output */
    lstmd_cpu_lstm_rows_forward((int)rows, H, ro, lstmd_stage_ws_output(ws) + t0 * BH,
                                m->params + next_w_ih(m, ws), ws->output_rows);
  if (!ws->st.last) return 0.0;
  const struct lstmd_tensor *hw = &m->tensors[m->n_tensors - 2], *hb = &m->tensors[m->n_tensors - 1];
  const struct stage_layer *top = &ws->layer[ws->st.layers - 1];
  const int O = ws->out;
  float *logits = ws->logits + (size_t)t0 * B * O;
  lstmd_cpu_linear_forward((int)rows, H, O, top->h + (t0 + 1) * BH, m->params + hw->offset,
                           m->params + hb->offset, logits);
  const double loss =
      ws->batch.targets
          ? lstmd_cpu_softmax_xent((int)rows, O, logits, ws->batch.targets + (size_t)t0 * B, grad_scale)
          : lstmd_cpu_mse(rows * O, logits, ws->batch.y + (size_t)t0 * B * O, grad_scale);
  if (grad_scale != 0.0f) /* the head is local in time: the top layer's gradient of this chunk */
    lstmd_cpu_linear_backward_input((int)rows, H, O, m->params + hw->offset, logits,
                                    ws->dh_top + t0 * BH);
  return loss;
}

void lstmd_stage_backward_input(const struct lstmd_model *m, struct lstmd_stage_ws *ws,
                                const struct lstmd_stage_packed *pk, int t0, int t1) {
  const int B = ws->B, H = ws->H, Tc = t1 - t0, top = ws->st.layers - 1;
  const size_t BH = (size_t)B * H, n = (size_t)Tc * BH;
  float *dh = ws->dh, *dx = ws->dx;
  if (ws->st.last) {
    memcpy(dh, ws->dh_top + t0 * BH, n * sizeof(float));
  } else { /* the gradient w.r.t. the masked output: through this stage's top-layer mask */
    memcpy(dh, ws->doutput + t0 * BH, n * sizeof(float));
    const int ro = ws->st.rows_out;
    if (ro) /* plus the part of the rows of the next stage's projection computed here */
      lstmd_cpu_lstm_rows_backward_input(Tc * B, H, ro, m->params + next_w_ih(m, ws),
                                         ws->doutput_rows, dh);
    if (ws->layer[top].mask) lstmd_cpu_mul_inplace(n, dh, ws->layer[top].mask + t0 * BH);
  }
  for (int l = top; l >= 0; l--) {
    struct stage_layer *y = &ws->layer[l];
    const struct lstmd_tensor *w = layer_tensors(m, ws->st.layer0 + l);
    const int In = layer_input_width(ws, l), r = layer_split(ws, l);
    const struct lstmd_lstm_dims d = {Tc, B, In, H, r};
    /* the gradient of this layer's input: the layer below's, this stage's output to the stage
     * below, the embedding's (W), or nobody's (series rows) */
    float *to = l > 0 ? dx : !ws->st.first ? ws->dinput + (size_t)t0 * B * In : ws->x0 ? dx : NULL;
    if (m->shape.layer_norm) {
      const struct lstmd_lstm_ln ln = ln_params(m, w);
      const struct lstmd_lstm_ln_acts a = lstmd_cpu_lstm_ln_acts_at(&y->ln, t0, B, H);
      lstmd_cpu_lstm_ln_backward_input(&d, m->params + w[0].offset, m->params + w[1].offset, &ln,
                                       y->c + t0 * BH, y->gates + t0 * BH * 4, &a, dh, y->dgates,
                                       &y->dln, y->work, t1 < ws->T, t0 > 0, to, pk->cols[l]);
    } else {
      lstmd_cpu_lstm_backward_input(&d, m->params + w[0].offset, m->params + w[1].offset,
                                    y->c + t0 * BH, y->gates + t0 * BH * 4, dh, y->dgates,
                                    y->work, t1 < ws->T, t0 > 0, to, pk->cols[l]);
    }
    if (l == 0 && ws->st.rows_in) /* the split's gate gradients, down */
      for (size_t i = 0; i < (size_t)Tc * B; i++)
        memcpy(ws->dinput_rows + i * r, y->dgates + i * 4 * H, (size_t)r * sizeof(float));
    if (l > 0) {
      if (ws->layer[l - 1].mask) lstmd_cpu_mul_inplace(n, dx, ws->layer[l - 1].mask + t0 * BH);
      float *swap = dh;
      dh = dx;
      dx = swap;
    }
  }
  /* the embedding's gradient rows stay in ws->dx for W: after an odd number of swaps they are
   * in the other buffer */
  if (ws->x0 && dx != ws->dx) memcpy(ws->dx, dx, (size_t)Tc * B * ws->in0 * sizeof(float));
}

void lstmd_stage_backward_weight(const struct lstmd_model *m, struct lstmd_stage_ws *ws, int t0,
                                 int t1, float *grads) {
  const int B = ws->B, H = ws->H, Tc = t1 - t0;
  const size_t BH = (size_t)B * H, rows = (size_t)Tc * B;
  for (int l = 0; l < ws->st.layers; l++) {
    const struct stage_layer *y = &ws->layer[l];
    const struct lstmd_tensor *w = layer_tensors(m, ws->st.layer0 + l);
    const int In = layer_input_width(ws, l);
    const struct lstmd_lstm_dims d = {Tc, B, In, H, layer_split(ws, l)};
    if (m->shape.layer_norm) {
      const struct lstmd_lstm_ln_acts a = lstmd_cpu_lstm_ln_acts_at(&y->ln, t0, B, H);
      const struct lstmd_lstm_ln_grads g = {grads + w[4].offset, grads + w[5].offset,
                                            grads + w[6].offset, grads + w[7].offset,
                                            grads + w[8].offset, grads + w[9].offset};
      lstmd_cpu_lstm_ln_backward_weight(&d, layer_input_at(ws, l, t0),
                                        y->h + t0 * BH, &a, y->dgates, &y->dln,
                                        grads + w[0].offset, grads + w[1].offset,
                                        grads + w[2].offset, grads + w[3].offset, &g);
    } else {
      const int folded = l == 0 && ws->fold; /* its biases from the sums, below */
      lstmd_cpu_lstm_backward_weight(&d, layer_input_at(ws, l, t0),
                                     y->h + t0 * BH, y->dgates, grads + w[0].offset,
                                     grads + w[1].offset, folded ? NULL : grads + w[2].offset,
                                     folded ? NULL : grads + w[3].offset);
    }
  }
  if (ws->fold) {
    const struct lstmd_tensor *w = layer_tensors(m, 0);
    lstmd_cpu_fold_sums_add((int)rows, 4 * H, ws->batch.ids + (size_t)t0 * B, ws->layer[0].dgates,
                            ws->fold_sums);
    if (++ws->fold_chunks == ws->T / ws->Tc) { /* the window's last: its gradients */
      lstmd_cpu_fold_apply(m->shape.vocab, ws->in0, 4 * H, ws->fold_sums,
                           m->params + m->tensors[0].offset, m->params + w[0].offset,
                           grads + w[0].offset, grads + w[2].offset, grads + w[3].offset,
                           grads + m->tensors[0].offset);
      memset(ws->fold_sums, 0, (size_t)m->shape.vocab * 4 * H * sizeof(float));
      ws->fold_chunks = 0;
    }
  }
  const int ro = ws->st.rows_out;
  if (ro) /* the rows of the next stage's weight_ih owned here */
    lstmd_cpu_lstm_rows_backward_weight((int)rows, H, ro, lstmd_stage_ws_output(ws) + t0 * BH,
                                        ws->doutput_rows, grads + next_w_ih(m, ws));
  if (ws->st.last) {
    const struct lstmd_tensor *hw = &m->tensors[m->n_tensors - 2], *hb = &m->tensors[m->n_tensors - 1];
    const struct stage_layer *top = &ws->layer[ws->st.layers - 1];
    lstmd_cpu_linear_backward((int)rows, H, ws->out, top->h + (t0 + 1) * BH,
                              m->params + hw->offset, ws->logits + (size_t)t0 * B * ws->out,
                              grads + hw->offset, grads + hb->offset, NULL);
  }
  if (ws->x0)
    lstmd_cpu_embedding_backward((int)rows, ws->in0, ws->dx, ws->batch.ids + (size_t)t0 * B,
                                 grads + m->tensors[0].offset);
}
