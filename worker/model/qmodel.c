/* qmodel.c — the int8 inference model's forward pass (see qmodel.h). Per layer and window: the
 * input projection of all T·B rows in one int8 GEMM (a table lookup for text layer 0), then per
 * step the recurrence h·W_hh^T in int8 added to it and the fp32 gate pass of the fp32 model.
 * One arena per workspace, allocated once; nothing is allocated per step. A workspace made for
 * more than one thread shares the work out in chunks (qteam.h; rationale above
 * lstmd_qworkspace_create). */
#include "qmodel.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dense_cpu.h"
#include "kernels/cpu/lstm_cpu.h"
#include "kernels/status.h"
#include "qteam.h"


int lstmd_qmodel_create(const struct lstmd_model_shape *s, struct lstmd_qmodel **out) {
  *out = NULL;
  if (s->layer_norm) { /* a hostile or future int8 file: this forward has no layer normalisation */
    lstmd_errorf("int8 model: model.layer_norm is on; the int8 forward has no layer-normalised LSTM");
    return LSTMD_EFORMAT;
  }
  struct lstmd_qmodel *qm = calloc(1, sizeof *qm);
  if (!qm) return LSTMD_ENOMEM;
  qm->shape = *s;
  const size_t G = 4 * (size_t)s->hidden;
  int ok = 1;
  if (s->kind == LSTMD_MODEL_TEXT) ok &= !!(qm->embed = calloc((size_t)s->vocab * s->embed, sizeof(float)));
  for (int l = 0; l < s->layers; l++) {
    ok &= !!(qm->layer[l].b_ih = calloc(G, sizeof(float)));
    ok &= !!(qm->layer[l].b_hh = calloc(G, sizeof(float)));
  }
  ok &= !!(qm->head_bias = calloc((size_t)lstmd_model_output_width(s), sizeof(float)));
  if (!ok) {
    lstmd_qmodel_destroy(qm);
    return LSTMD_ENOMEM;
  }
  *out = qm;
  return LSTMD_OK;
}

void lstmd_qmodel_destroy(struct lstmd_qmodel *qm) {
  if (!qm) return;
  free(qm->embed);
  for (int l = 0; l < LSTMD_MAX_LAYERS; l++) {
    lstmd_cpu_qweight_free(&qm->layer[l].ih);
    lstmd_cpu_qweight_free(&qm->layer[l].hh);
    free(qm->layer[l].b_ih);
    free(qm->layer[l].b_hh);
  }
  lstmd_cpu_qweight_free(&qm->head);
  free(qm->head_bias);
  free(qm->embed_proj);
  free(qm);
}

/* embed_proj [V,4H] = embed [V,E] · dequant(W_ih_l0)^T, the dequantised weight read back from
 * its panels (qgemm.h: panel n/16, group k/4, lane n%16, byte k%4). */
int lstmd_qmodel_finish(struct lstmd_qmodel *qm) {
  const struct lstmd_model_shape *s = &qm->shape;
  if (s->kind != LSTMD_MODEL_TEXT) return LSTMD_OK;
  const struct lstmd_qweight *w = &qm->layer[0].ih;
  const int G = 4 * s->hidden, E = s->embed;
  float *deq = malloc((size_t)G * E * sizeof(float)), *zero = calloc((size_t)G, sizeof(float));
  qm->embed_proj = malloc((size_t)s->vocab * G * sizeof(float));
  if (!deq || !zero || !qm->embed_proj) {
    free(deq);
    free(zero);
    return LSTMD_ENOMEM;
  }
  for (int n = 0; n < G; n++) {
    const int8_t *panel = w->panels + (size_t)(n / 16) * w->Kp * 16;
    for (int k = 0; k < E; k++)
      deq[(size_t)n * E + k] = w->scale[n] * panel[(size_t)(k / 4) * 64 + (n % 16) * 4 + k % 4];
  }
  lstmd_cpu_linear_forward(s->vocab, E, G, qm->embed, deq, zero, qm->embed_proj);
  free(deq);
  free(zero);
  return LSTMD_OK;
}

enum { kMaxChunks = 256, kStreamsPerChunk = 8 };
/* Below this many bytes of W_hh (4H·H), a batch-1 step is too short to share: two threads'
 * claims and the wait for the other's last chunk cost more than half the GEMV saves. */
static const size_t kUnitSplitBytes = (size_t)1 << 20;
/* Batch-1 jobs come 2·L a token, a few µs to ~100 µs apart (a sampling loop draws the next
 * token in between): idle helpers poll this long before they sleep. */
static const long kSpinNs = 100000;

enum split { SPLIT_NONE, SPLIT_STREAMS, SPLIT_UNITS };

/* Activation rows quantised for a GEMM: q [rows, Kp], scale and zero [rows]. */
struct qrows {
  uint8_t *q;
  float *scale;
  int32_t *zero;
};

struct lstmd_qworkspace {
  int T, B, H, L;
  enum split split;
  int chunks;                 /* SPLIT_STREAMS: parts; SPLIT_UNITS: unit ranges */
  struct lstmd_batch batch;
  float *h[LSTMD_MAX_LAYERS]; /* [T+1,B,H]; slot 0 is the initial state */
  float *c[LSTMD_MAX_LAYERS]; /* [2,B,H]: step t reads slot t%2 and writes the other */
  float *gates;               /* [T,B,4H] */
  float *out;                 /* [T,B,O] */
  /* quantised rows: [0] for the serial path; SPLIT_UNITS: [2i] the layer input of thread i
   * ([T·B] rows), [2i+1] its h of the step ([B] rows) */
  struct qrows *qr;
  struct lstmd_qworkspace **part; /* SPLIT_STREAMS: streams [col[i], col[i+1]) of chunk i */
  int *col;                       /* [chunks+1]: first stream or unit of each chunk */
  struct lstmd_qteam *team;
  void *arena, *qarena;
  /* the job the team runs: set by the forward before each lstmd_qteam_run */
  const struct lstmd_qmodel *qm;
  int layer, step, carry_state;
};

/* A workspace whose forward runs on the calling thread, with `copies` sets of quantised rows;
 * with copies == 0, the batch and the output only (SPLIT_STREAMS: its parts hold the rest). */
static int create_serial(const struct lstmd_qmodel *qm, int T, int B, int copies,
                         struct lstmd_qworkspace **out) {
  *out = NULL;
  const struct lstmd_model_shape *s = &qm->shape;
  const size_t N = (size_t)T * B, H = (size_t)s->hidden, L = copies ? (size_t)s->layers : 0;
  const int in0 = lstmd_model_input_width(s), kmax = in0 > s->hidden ? in0 : s->hidden;
  struct lstmd_qworkspace *ws = calloc(1, sizeof *ws);
  if (!ws) return LSTMD_ENOMEM;
  ws->T = T, ws->B = B, ws->H = s->hidden, ws->L = s->layers;
  /* ids, targets, x, y, gates, out, then h and c per layer */
  size_t sizes[6 + 2 * LSTMD_MAX_LAYERS] = {
      N, N, N * (size_t)(s->kind == LSTMD_MODEL_SERIES ? s->width : 0),
      N * (size_t)(s->kind == LSTMD_MODEL_SERIES ? s->horizon : 0), copies ? N * 4 * H : 0,
      N * (size_t)lstmd_model_output_width(s)};
  for (size_t l = 0; l < L; l++) sizes[6 + 2 * l] = (N + B) * H, sizes[7 + 2 * l] = 2 * B * H;
  float *slices[6 + 2 * LSTMD_MAX_LAYERS];
  ws->arena = lstmd_arena_carve(sizes, 6 + 2 * L, slices);
  /* per copy: q [N,Kp] (a multiple of 4 bytes), zero [N], scale [N] */
  const size_t qbytes = N * (size_t)lstmd_cpu_qpad(kmax), copy_bytes = qbytes + 2 * N * 4;
  ws->qarena = malloc(copies ? copy_bytes * (size_t)copies : 1);
  ws->qr = calloc(copies ? (size_t)copies : 1, sizeof *ws->qr);
  if (!ws->arena || !ws->qarena || !ws->qr) {
    lstmd_qworkspace_destroy(ws);
    return LSTMD_ENOMEM;
  }
  ws->batch = (struct lstmd_batch){T, B, s->kind == LSTMD_MODEL_SERIES ? s->width : 0,
                                   s->kind == LSTMD_MODEL_SERIES ? s->horizon : 0,
                                   (int32_t *)slices[0], (int32_t *)slices[1], slices[2], slices[3]};
  ws->gates = slices[4], ws->out = slices[5];
  for (size_t l = 0; l < L; l++) ws->h[l] = slices[6 + 2 * l], ws->c[l] = slices[7 + 2 * l];
  for (int i = 0; i < copies; i++) {
    uint8_t *base = (uint8_t *)ws->qarena + copy_bytes * (size_t)i;
    ws->qr[i] = (struct qrows){base, (float *)(base + qbytes + N * 4), (int32_t *)(base + qbytes)};
  }
  *out = ws;
  return LSTMD_OK;
}

/* Threading (threads > 1), chosen once per workspace from its shape. Work goes out in chunks
 * that any thread of the team may take (qteam.h), so a helper the scheduler keeps waiting costs
 * the caller nothing but its own share of the work.
 *  1. B ≥ 2 — by streams (SPLIT_STREAMS): chunk i is the streams [col[i], col[i+1]) (about
 *     kStreamsPerChunk, and at least one chunk per thread), run through the whole serial forward
 *     — every layer, step and the head — in a part workspace of its own, which also keeps those
 *     streams' state: one job per forward. Activations are quantised per row (qgemm.h), so a
 *     stream's outputs are the bits it gets in any batch. Every chunk reads all of W, which at
 *     the sizes batched inference uses (H ≤ 512: W_hh ≤ 1 MB int8) comes from a core's L2.
 *  2. B = 1 and W_hh ≥ kUnitSplitBytes — by units (SPLIT_UNITS): the step's GEMV is memory
 *     bound (H 1024: 4 MB of W_hh a step, more than a core's L2), so each chunk streams a share
 *     of W's rows: units [col[i], col[i+1]) (64, or 16 where H is not a multiple of 64: whole
 *     weight panels) of each of the four gate blocks, then runs the gate pass for those units,
 *     which needs no other chunk's gates. One job per layer and step: the next step needs every
 *     unit's h. A thread quantises the step's input rows on its first chunk (the same bits in
 *     every thread). The input projection rides on step 0's job. Every int32 sum is exact and
 *     the epilogue per element (lstmd_cpu_qgemm_cols), so the outputs are the serial path's bits.
 *  3. Otherwise serial: a small step (H 256: 256 KB, ~10 µs) gains less than a hand-off costs.
 * The head's GEMM stays on the calling thread in (2): V·H int8 is small next to 2·4H·H. */
int lstmd_qworkspace_create(const struct lstmd_qmodel *qm, int T, int B, int threads,
                            struct lstmd_qworkspace **out) {
  *out = NULL;
  const int H = qm->shape.hidden, unit = H % 64 == 0 ? 64 : 16;
  enum split split = SPLIT_NONE;
  int chunks = 1;
  if (threads > 1 && B > 1) {
    split = SPLIT_STREAMS;
    chunks = (B + kStreamsPerChunk - 1) / kStreamsPerChunk;
    if (chunks < threads) chunks = threads < B ? threads : B;
    if (chunks > kMaxChunks) chunks = kMaxChunks;
  } else if (threads > 1 && H % 16 == 0 && (size_t)4 * H * H >= kUnitSplitBytes) {
    split = SPLIT_UNITS, chunks = H / unit;
  }
  if (threads > chunks) threads = chunks;
  struct lstmd_qworkspace *ws = NULL;
  int rc = create_serial(qm, T, B, split == SPLIT_UNITS ? 2 * threads : split == SPLIT_NONE, &ws);
  if (rc) return rc;
  ws->split = split, ws->chunks = chunks;
  if (split != SPLIT_NONE) {
    ws->col = calloc((size_t)chunks + 1, sizeof *ws->col);
    ws->part = calloc((size_t)chunks, sizeof *ws->part);
    rc = ws->col && ws->part ? LSTMD_OK : LSTMD_ENOMEM;
  }
  for (int i = 0; !rc && split != SPLIT_NONE && i <= chunks; i++)
    ws->col[i] = split == SPLIT_UNITS ? i * unit : (int)((long)B * i / chunks);
  for (int i = 0; !rc && split == SPLIT_STREAMS && i < chunks; i++)
    rc = create_serial(qm, T, ws->col[i + 1] - ws->col[i], 1, &ws->part[i]);
  if (!rc && split != SPLIT_NONE) rc = lstmd_qteam_create(threads, kSpinNs, &ws->team);
  if (rc) {
    lstmd_qworkspace_destroy(ws);
    return rc;
  }
  *out = ws;
  return LSTMD_OK;
}

void lstmd_qworkspace_destroy(struct lstmd_qworkspace *ws) {
  if (!ws) return;
  lstmd_qteam_destroy(ws->team);
  for (int i = 0; ws->part && i < ws->chunks; i++) lstmd_qworkspace_destroy(ws->part[i]);
  free(ws->part);
  free(ws->col);
  free(ws->qr);
  lstmd_workspace_arena_free(ws->arena);
  free(ws->qarena);
  free(ws);
}

struct lstmd_batch *lstmd_qworkspace_batch(struct lstmd_qworkspace *ws) { return &ws->batch; }
const float *lstmd_qworkspace_output(const struct lstmd_qworkspace *ws) { return ws->out; }

void lstmd_qworkspace_reset_state(struct lstmd_qworkspace *ws) {
  for (int l = 0; l < ws->L && ws->split != SPLIT_STREAMS; l++) { /* h and c slot 0 */
    memset(ws->h[l], 0, (size_t)ws->B * ws->H * sizeof(float));
    memset(ws->c[l], 0, (size_t)ws->B * ws->H * sizeof(float));
  }
  for (int i = 0; ws->split == SPLIT_STREAMS && i < ws->chunks; i++)
    lstmd_qworkspace_reset_state(ws->part[i]);
}

/* Layer l's input rows [T·B, K] quantised into qr (text layer 0 has none: a table lookup). */
static void quantize_input(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws,
                           const struct qrows *qr, int l) {
  const struct lstmd_model_shape *s = &qm->shape;
  if (l == 0 && s->kind == LSTMD_MODEL_TEXT) return;
  const float *x = l == 0 ? ws->batch.x : ws->h[l - 1] + (size_t)ws->B * s->hidden;
  const int K = l == 0 ? s->width : s->hidden;
  lstmd_cpu_quantize_act(ws->T * ws->B, K, x, K, qr->q, qr->scale, qr->zero);
}

/* Layer l's input projection into gates [T·B,4H] for units [u0, u1) of each gate block, from
 * the rows quantize_input left in qr. */
static void project(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws,
                    const struct qrows *qr, int l, int u0, int u1) {
  const int N = ws->T * ws->B, H = ws->H, G = 4 * H;
  for (int gate = 0; gate < 4; gate++) {
    if (l == 0 && qm->shape.kind == LSTMD_MODEL_TEXT)
      for (int n = 0; n < N; n++)
        memcpy(ws->gates + (size_t)n * G + gate * H + u0,
               qm->embed_proj + (size_t)ws->batch.ids[n] * G + gate * H + u0,
               (size_t)(u1 - u0) * sizeof(float));
    else
      lstmd_cpu_qgemm_cols(N, qr->q, qr->scale, qr->zero, &qm->layer[l].ih, gate * H + u0,
                           gate * H + u1, NULL, ws->gates, G, 0);
  }
}

static void quantize_h(struct lstmd_qworkspace *ws, const struct qrows *qr, int l, int t) {
  lstmd_cpu_quantize_act(ws->B, ws->H, ws->h[l] + (size_t)t * ws->B * ws->H, ws->H, qr->q,
                         qr->scale, qr->zero);
}

/* Step t of layer l for units [u0, u1): the recurrence (h_t quantised in qr) added to the
 * gates, then the gate pass. */
static void recur(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws,
                  const struct qrows *qr, int l, int t, int u0, int u1) {
  const int B = ws->B, H = ws->H, G = 4 * H;
  const size_t step_h = (size_t)B * H;
  const struct lstmd_qlayer *p = &qm->layer[l];
  float *g = ws->gates + (size_t)t * B * G;
  for (int gate = 0; gate < 4; gate++)
    lstmd_cpu_qgemm_cols(B, qr->q, qr->scale, qr->zero, &p->hh, gate * H + u0, gate * H + u1,
                         NULL, g, G, 1);
  lstmd_cpu_lstm_gates_step(B, H, u0, u1, g, p->b_ih, p->b_hh, ws->c[l] + (t % 2) * step_h,
                            ws->c[l] + ((t + 1) % 2) * step_h, ws->h[l] + (t + 1) * step_h);
}

/* carry_state: each stream's final (h, c) of layer l becomes slot 0. */
static void carry(struct lstmd_qworkspace *ws, int l) {
  const size_t step_h = (size_t)ws->B * ws->H;
  memcpy(ws->h[l], ws->h[l] + ws->T * step_h, step_h * sizeof(float));
  if (ws->T % 2) memcpy(ws->c[l], ws->c[l] + step_h, step_h * sizeof(float));
}

/* out [T·B,O] = h of the top layer · W_head^T + bias. */
static void head(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws) {
  const int N = ws->T * ws->B, H = ws->H;
  const struct qrows *qr = &ws->qr[0];
  lstmd_cpu_quantize_act(N, H, ws->h[ws->L - 1] + (size_t)ws->B * H, H, qr->q, qr->scale, qr->zero);
  lstmd_cpu_qgemm(N, qr->q, qr->scale, qr->zero, &qm->head, qm->head_bias, ws->out, qm->head.N, 0);
}

static void forward_serial(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws,
                           int carry_state) {
  for (int l = 0; l < ws->L; l++) {
    quantize_input(qm, ws, &ws->qr[0], l);
    project(qm, ws, &ws->qr[0], l, 0, ws->H);
    for (int t = 0; t < ws->T; t++) {
      quantize_h(ws, &ws->qr[0], l, t);
      recur(qm, ws, &ws->qr[0], l, t, 0, ws->H);
    }
    if (carry_state) carry(ws, l);
  }
  head(qm, ws);
}

/* SPLIT_STREAMS, chunk i: its streams' inputs into its part, the serial forward there, and its
 * outputs back into the [T,B,O] output. */
static void run_streams(void *arg, int thread, int i, int first) {
  (void)thread, (void)first;
  struct lstmd_qworkspace *ws = arg, *p = ws->part[i];
  const struct lstmd_model_shape *s = &ws->qm->shape;
  const int c0 = ws->col[i], b = p->B, O = lstmd_model_output_width(s), W = ws->batch.width;
  for (int t = 0; t < ws->T; t++) {
    const size_t from = (size_t)t * ws->B + c0, to = (size_t)t * b;
    if (s->kind == LSTMD_MODEL_TEXT)
      memcpy(p->batch.ids + to, ws->batch.ids + from, (size_t)b * sizeof(int32_t));
    else
      memcpy(p->batch.x + to * W, ws->batch.x + from * W, (size_t)b * W * sizeof(float));
  }
  forward_serial(ws->qm, p, ws->carry_state);
  for (int t = 0; t < ws->T; t++)
    memcpy(ws->out + ((size_t)t * ws->B + c0) * O, p->out + (size_t)t * b * O,
           (size_t)b * O * sizeof(float));
}

/* SPLIT_UNITS, chunk i: step ws->step of layer ws->layer for its units (with the layer's input
 * projection before step 0). */
static void run_units(void *arg, int thread, int i, int first) {
  struct lstmd_qworkspace *ws = arg;
  const struct qrows *in = &ws->qr[2 * thread], *h = &ws->qr[2 * thread + 1];
  if (first && ws->step == 0) quantize_input(ws->qm, ws, in, ws->layer);
  if (first) quantize_h(ws, h, ws->layer, ws->step);
  if (ws->step == 0) project(ws->qm, ws, in, ws->layer, ws->col[i], ws->col[i + 1]);
  recur(ws->qm, ws, h, ws->layer, ws->step, ws->col[i], ws->col[i + 1]);
}

double lstmd_qmodel_forward(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws,
                            int carry_state) {
  const struct lstmd_model_shape *s = &qm->shape;
  ws->qm = qm, ws->carry_state = carry_state;
  if (ws->split == SPLIT_STREAMS) {
    lstmd_qteam_run(ws->team, ws->chunks, run_streams, ws);
  } else if (ws->split == SPLIT_UNITS) {
    for (ws->layer = 0; ws->layer < ws->L; ws->layer++) {
      for (ws->step = 0; ws->step < ws->T; ws->step++)
        lstmd_qteam_run(ws->team, ws->chunks, run_units, ws);
      if (carry_state) carry(ws, ws->layer);
    }
    head(qm, ws);
  } else {
    forward_serial(qm, ws, carry_state);
  }
  const int N = ws->T * ws->B;
  if (s->kind == LSTMD_MODEL_TEXT)
    return lstmd_cpu_softmax_xent(N, lstmd_model_output_width(s), ws->out, ws->batch.targets, 0.0f);
  return lstmd_cpu_mse((size_t)N * lstmd_model_output_width(s), ws->out, ws->batch.y, 0.0f);
}
