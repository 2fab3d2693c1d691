/* qmodel.c — the int8 inference model's forward pass (see qmodel.h). Per layer and window: the
 * input projection of all T·B rows in one int8 GEMM (a table lookup for text layer 0), then per
 * step the recurrence h·W_hh^T in int8 added to it and the fp32 gate pass of the fp32 model.
 * One arena per workspace, allocated once; nothing is allocated per step. A workspace made for
 * more than one thread splits the work over a thread team (rationale above qworkspace_create). */
#include "qmodel.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dense_cpu.h"
#include "kernels/cpu/lstm_cpu.h"
#include "kernels/status.h"
#include "worker/engine/pool.h"

static int output_width(const struct lstmd_model_shape *s) {
  return s->kind == LSTMD_MODEL_TEXT ? s->vocab : s->horizon;
}
static int input_width(const struct lstmd_model_shape *s) {
  return s->kind == LSTMD_MODEL_TEXT ? s->embed : s->width;
}

int lstmd_qmodel_create(const struct lstmd_model_shape *s, struct lstmd_qmodel **out) {
  *out = NULL;
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
  ok &= !!(qm->head_bias = calloc((size_t)output_width(s), sizeof(float)));
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

enum { kMaxThreads = 64 };
/* Below this many bytes of W_hh (4H·H), a step is too short to share: one pool hand-off (a
 * condition-variable wake-up, ~10-50 µs on a busy VM) costs more than half the GEMV saves. */
static const size_t kUnitSplitBytes = (size_t)1 << 20;

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
  int teams;                  /* threads in the pool (1: no pool) */
  struct lstmd_batch batch;
  float *h[LSTMD_MAX_LAYERS]; /* [T+1,B,H]; slot 0 is the initial state */
  float *c[LSTMD_MAX_LAYERS]; /* [2,B,H]: step t reads slot t%2 and writes the other */
  float *gates;               /* [T,B,4H] */
  float *out;                 /* [T,B,O] */
  struct qrows qr[kMaxThreads]; /* one per thread (SPLIT_UNITS), else qr[0]: [T·B] rows */
  struct lstmd_qworkspace *part[kMaxThreads]; /* SPLIT_STREAMS: streams [col[i], col[i+1]) */
  int col[kMaxThreads + 1];
  struct lstmd_pool *pool;
  void *arena, *qarena;
  /* what the pool's threads run: set by the forward before each lstmd_pool_run */
  const struct lstmd_qmodel *qm;
  int layer, step, carry_state;
};

/* A workspace whose forward runs on the calling thread, with qrows for `copies` threads; with
 * copies == 0, the batch and the output only (the streams split's own, its parts hold the rest). */
static int create_serial(const struct lstmd_qmodel *qm, int T, int B, int copies,
                         struct lstmd_qworkspace **out) {
  *out = NULL;
  const struct lstmd_model_shape *s = &qm->shape;
  const size_t N = (size_t)T * B, H = (size_t)s->hidden, L = copies ? (size_t)s->layers : 0;
  const int in0 = input_width(s), kmax = in0 > s->hidden ? in0 : s->hidden;
  struct lstmd_qworkspace *ws = calloc(1, sizeof *ws);
  if (!ws) return LSTMD_ENOMEM;
  ws->T = T, ws->B = B, ws->H = s->hidden, ws->L = s->layers, ws->teams = 1;
  /* ids, targets, x, y, gates, out, then h and c per layer */
  size_t sizes[6 + 2 * LSTMD_MAX_LAYERS] = {
      N, N, N * (size_t)(s->kind == LSTMD_MODEL_SERIES ? s->width : 0),
      N * (size_t)(s->kind == LSTMD_MODEL_SERIES ? s->horizon : 0), copies ? N * 4 * H : 0,
      N * (size_t)output_width(s)};
  for (size_t l = 0; l < L; l++) sizes[6 + 2 * l] = (N + B) * H, sizes[7 + 2 * l] = 2 * B * H;
  float *slices[6 + 2 * LSTMD_MAX_LAYERS];
  ws->arena = lstmd_arena_carve(sizes, 6 + 2 * L, slices);
  /* per copy: q [N,Kp] (a multiple of 4 bytes), zero [N], scale [N] */
  const size_t qbytes = N * (size_t)lstmd_cpu_qpad(kmax), copy_bytes = qbytes + 2 * N * 4;
  ws->qarena = malloc(copies ? copy_bytes * (size_t)copies : 1);
  if (!ws->arena || !ws->qarena) {
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

/* Threading (threads > 1), chosen once per workspace from its shape:
 *  1. B ≥ 2 — by streams (SPLIT_STREAMS): thread i owns the streams [col[i], col[i+1]) and runs
 *     the whole serial forward over them in a part workspace of its own: every layer, every step
 *     and the head, with no hand-off until the end (one lstmd_pool_run per forward). Activations
 *     are quantised per row (qgemm.h), so a stream's outputs are the bits it gets in any batch.
 *     Both threads read all of W, which at the sizes batched inference uses (H ≤ 512: W_hh ≤ 1 MB
 *     int8) comes from each core's own L2.
 *  2. B = 1 and W_hh ≥ kUnitSplitBytes — by units (SPLIT_UNITS): the step's GEMV is memory
 *     bound (H 1024: 4 MB of W_hh a step, more than one core's L2), so each thread streams its
 *     share of W's rows: units [u0, u1), multiples of 16 (one weight panel), of each of the four
 *     gate blocks, then runs the gate pass for those units, which needs no other
 *     thread's gates. One hand-off per layer and step: the next step needs every unit's h. Each
 *     thread quantises the step's input row itself (the same bits in each), so no extra barrier.
 *     The input projection of layer 0 (or the text table lookup) rides on step 0's hand-off.
 *     Every int32 sum is exact and the epilogue per element (lstmd_cpu_qgemm_cols), so outputs
 *     are the serial path's bits.
 *  3. Otherwise serial: a small step (H 256: 256 KB, ~10 µs) gains less than a hand-off costs.
 * The head's GEMM stays on the calling thread in (2): V·H int8 is small next to 2·4H·H. */
int lstmd_qworkspace_create(const struct lstmd_qmodel *qm, int T, int B, int threads,
                            struct lstmd_qworkspace **out) {
  *out = NULL;
  const int H = qm->shape.hidden;
  if (threads > kMaxThreads) threads = kMaxThreads;
  enum split split = SPLIT_NONE;
  int teams = 1;
  if (threads > 1 && B > 1) split = SPLIT_STREAMS, teams = threads < B ? threads : B;
  else if (threads > 1 && H % 16 == 0 && (size_t)4 * H * H >= kUnitSplitBytes)
    split = SPLIT_UNITS, teams = threads < H / 16 ? threads : H / 16;
  struct lstmd_qworkspace *ws = NULL;
  int rc = create_serial(qm, T, B, split == SPLIT_UNITS ? teams : split == SPLIT_NONE, &ws);
  if (rc) return rc;
  ws->split = split, ws->teams = teams;
  for (int i = 0; i <= teams; i++) /* streams or units, per thread */
    ws->col[i] = split == SPLIT_UNITS ? (int)((long)H / 16 * i / teams) * 16 : (int)((long)B * i / teams);
  for (int i = 0; !rc && split == SPLIT_STREAMS && i < teams; i++)
    rc = create_serial(qm, T, ws->col[i + 1] - ws->col[i], 1, &ws->part[i]);
  if (!rc && teams > 1) rc = lstmd_pool_create(teams, &ws->pool);
  if (rc) {
    lstmd_qworkspace_destroy(ws);
    return rc;
  }
  *out = ws;
  return LSTMD_OK;
}

void lstmd_qworkspace_destroy(struct lstmd_qworkspace *ws) {
  if (!ws) return;
  lstmd_pool_destroy(ws->pool);
  for (int i = 0; i < kMaxThreads; i++) lstmd_qworkspace_destroy(ws->part[i]);
  free(ws->arena);
  free(ws->qarena);
  free(ws);
}

struct lstmd_batch *lstmd_qworkspace_batch(struct lstmd_qworkspace *ws) { return &ws->batch; }
const float *lstmd_qworkspace_output(const struct lstmd_qworkspace *ws) { return ws->out; }

void lstmd_qworkspace_reset_state(struct lstmd_qworkspace *ws) {
  for (int l = 0; l < ws->L && ws->split != SPLIT_STREAMS; l++) { /* h and c slot 0: the initial state */
    memset(ws->h[l], 0, (size_t)ws->B * ws->H * sizeof(float));
    memset(ws->c[l], 0, (size_t)ws->B * ws->H * sizeof(float));
  }
  for (int i = 0; i < ws->teams && ws->split == SPLIT_STREAMS; i++)
    lstmd_qworkspace_reset_state(ws->part[i]);
}

/* Layer l's input projection into gates [T·B,4H], for units [u0, u1) of each gate block. */
static void input_projection(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws,
                             const struct qrows *qr, int l, int u0, int u1) {
  const struct lstmd_model_shape *s = &qm->shape;
  const int N = ws->T * ws->B, H = s->hidden, G = 4 * H;
  if (l == 0 && s->kind == LSTMD_MODEL_TEXT) {
    for (int n = 0; n < N; n++)
      for (int gate = 0; gate < 4; gate++)
        memcpy(ws->gates + (size_t)n * G + gate * H + u0,
               qm->embed_proj + (size_t)ws->batch.ids[n] * G + gate * H + u0,
               (size_t)(u1 - u0) * sizeof(float));
    return;
  }
  const float *x = l == 0 ? ws->batch.x : ws->h[l - 1] + (size_t)ws->B * H;
  const int K = l == 0 ? s->width : H;
  lstmd_cpu_quantize_act(N, K, x, K, qr->q, qr->scale, qr->zero);
  for (int gate = 0; gate < 4; gate++)
    lstmd_cpu_qgemm_cols(N, qr->q, qr->scale, qr->zero, &qm->layer[l].ih, gate * H + u0,
                         gate * H + u1, NULL, ws->gates, G, 0);
}

/* Step t of layer l for units [u0, u1): the recurrence added to the gates, then the gate pass. */
static void step(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws,
                 const struct qrows *qr, int l, int t, int u0, int u1) {
  const int B = ws->B, H = ws->H, G = 4 * H;
  const size_t step_h = (size_t)B * H;
  const struct lstmd_qlayer *p = &qm->layer[l];
  float *g = ws->gates + (size_t)t * B * G;
  lstmd_cpu_quantize_act(B, H, ws->h[l] + t * step_h, H, qr->q, qr->scale, qr->zero);
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
    input_projection(qm, ws, &ws->qr[0], l, 0, ws->H);
    for (int t = 0; t < ws->T; t++) step(qm, ws, &ws->qr[0], l, t, 0, ws->H);
    if (carry_state) carry(ws, l);
  }
  head(qm, ws);
}

/* SPLIT_STREAMS, thread i: its streams' inputs into its part, the serial forward there, and its
 * outputs back into the [T,B,O] output. */
static void run_streams(void *arg, int i) {
  struct lstmd_qworkspace *ws = arg, *p = ws->part[i];
  const struct lstmd_model_shape *s = &ws->qm->shape;
  const int c0 = ws->col[i], b = p->B, O = output_width(s), W = ws->batch.width;
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

/* SPLIT_UNITS, thread i: step ws->step of layer ws->layer for its units (with the layer's input
 * projection before step 0). */
static void run_units(void *arg, int i) {
  struct lstmd_qworkspace *ws = arg;
  if (ws->step == 0) input_projection(ws->qm, ws, &ws->qr[i], ws->layer, ws->col[i], ws->col[i + 1]);
  step(ws->qm, ws, &ws->qr[i], ws->layer, ws->step, ws->col[i], ws->col[i + 1]);
}

double lstmd_qmodel_forward(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws,
                            int carry_state) {
  const struct lstmd_model_shape *s = &qm->shape;
  ws->qm = qm, ws->carry_state = carry_state;
  if (ws->split == SPLIT_STREAMS) {
    lstmd_pool_run(ws->pool, run_streams, ws);
  } else if (ws->split == SPLIT_UNITS) {
    for (ws->layer = 0; ws->layer < ws->L; ws->layer++) {
      for (ws->step = 0; ws->step < ws->T; ws->step++) lstmd_pool_run(ws->pool, run_units, ws);
      if (carry_state) carry(ws, ws->layer);
    }
    head(qm, ws);
  } else {
    forward_serial(qm, ws, carry_state);
  }
  const int N = ws->T * ws->B;
  if (s->kind == LSTMD_MODEL_TEXT) return lstmd_cpu_softmax_xent(N, output_width(s), ws->out, ws->batch.targets, 0.0f);
  return lstmd_cpu_mse((size_t)N * output_width(s), ws->out, ws->batch.y, 0.0f);
}
