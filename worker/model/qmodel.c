/* qmodel.c — the int8 inference model's forward pass (see qmodel.h). Per layer and window: the
 * input projection of all T·B rows in one int8 GEMM (a table lookup for text layer 0), then per
 * step the recurrence h·W_hh^T in int8 added to it and the fp32 gate pass of the fp32 model.
 * One arena per workspace, allocated once; nothing is allocated per step. */
#include "qmodel.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dense_cpu.h"
#include "kernels/cpu/lstm_cpu.h"
#include "kernels/status.h"

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

struct lstmd_qworkspace {
  int T, B, H, L;
  struct lstmd_batch batch;
  float *h[LSTMD_MAX_LAYERS]; /* [T+1,B,H]; slot 0 is the initial state */
  float *c[LSTMD_MAX_LAYERS]; /* [2,B,H]: step t reads slot t%2 and writes the other */
  float *gates;               /* [T,B,4H] */
  uint8_t *xq;                /* [T·B, Kp] quantised rows of a GEMM's input */
  float *xscale;              /* [T·B] */
  int32_t *xzero;             /* [T·B] */
  float *out;                 /* [T,B,O] */
  void *arena, *qarena;
};

int lstmd_qworkspace_create(const struct lstmd_qmodel *qm, int T, int B,
                            struct lstmd_qworkspace **out) {
  *out = NULL;
  const struct lstmd_model_shape *s = &qm->shape;
  const size_t N = (size_t)T * B, H = (size_t)s->hidden, L = (size_t)s->layers;
  const int in0 = input_width(s), kmax = in0 > s->hidden ? in0 : s->hidden;
  struct lstmd_qworkspace *ws = calloc(1, sizeof *ws);
  if (!ws) return LSTMD_ENOMEM;
  ws->T = T, ws->B = B, ws->H = s->hidden, ws->L = s->layers;
  /* ids, targets, x, y, gates, xscale, out, then h and c per layer */
  size_t sizes[7 + 2 * LSTMD_MAX_LAYERS] = {
      N, N, N * (size_t)(s->kind == LSTMD_MODEL_SERIES ? s->width : 0),
      N * (size_t)(s->kind == LSTMD_MODEL_SERIES ? s->horizon : 0), N * 4 * H, N,
      N * (size_t)output_width(s)};
  for (size_t l = 0; l < L; l++) sizes[7 + 2 * l] = (N + B) * H, sizes[8 + 2 * l] = 2 * B * H;
  float *slices[7 + 2 * LSTMD_MAX_LAYERS];
  ws->arena = lstmd_arena_carve(sizes, 7 + 2 * L, slices);
  const size_t qbytes = N * (size_t)lstmd_cpu_qpad(kmax);
  ws->qarena = malloc(qbytes + N * sizeof(int32_t));
  if (!ws->arena || !ws->qarena) {
    lstmd_qworkspace_destroy(ws);
    return LSTMD_ENOMEM;
  }
  ws->batch = (struct lstmd_batch){T, B, s->kind == LSTMD_MODEL_SERIES ? s->width : 0,
                                   s->kind == LSTMD_MODEL_SERIES ? s->horizon : 0,
                                   (int32_t *)slices[0], (int32_t *)slices[1], slices[2], slices[3]};
  ws->gates = slices[4], ws->xscale = slices[5], ws->out = slices[6];
  for (size_t l = 0; l < L; l++) ws->h[l] = slices[7 + 2 * l], ws->c[l] = slices[8 + 2 * l];
  ws->xq = ws->qarena;
  ws->xzero = (int32_t *)((uint8_t *)ws->qarena + qbytes); /* qbytes is a multiple of 4 */
  *out = ws;
  return LSTMD_OK;
}

void lstmd_qworkspace_destroy(struct lstmd_qworkspace *ws) {
  if (!ws) return;
  free(ws->arena);
  free(ws->qarena);
  free(ws);
}

struct lstmd_batch *lstmd_qworkspace_batch(struct lstmd_qworkspace *ws) { return &ws->batch; }
const float *lstmd_qworkspace_output(const struct lstmd_qworkspace *ws) { return ws->out; }

void lstmd_qworkspace_reset_state(struct lstmd_qworkspace *ws) {
  for (int l = 0; l < ws->L; l++) { /* h slot 0 and c slot 0: the initial state */
    memset(ws->h[l], 0, (size_t)ws->B * ws->H * sizeof(float));
    memset(ws->c[l], 0, (size_t)ws->B * ws->H * sizeof(float));
  }
}

/* C [M,N] (+)= x [M,K] · W^T: x quantised row by row into the workspace's buffers first. */
static void gemm(struct lstmd_qworkspace *ws, int M, int K, const float *x,
                 const struct lstmd_qweight *w, const float *bias, float *y, int accumulate) {
  lstmd_cpu_quantize_act(M, K, x, K, ws->xq, ws->xscale, ws->xzero);
  lstmd_cpu_qgemm(M, ws->xq, ws->xscale, ws->xzero, w, bias, y, w->N, accumulate);
}

double lstmd_qmodel_forward(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws,
                            int carry_state) {
  const struct lstmd_model_shape *s = &qm->shape;
  const int T = ws->T, B = ws->B, N = T * B, H = s->hidden, G = 4 * H, O = output_width(s);
  const size_t step_h = (size_t)B * H, step_g = (size_t)B * G;
  for (int l = 0; l < s->layers; l++) {
    const struct lstmd_qlayer *p = &qm->layer[l];
    if (l == 0 && s->kind == LSTMD_MODEL_TEXT)
      for (int n = 0; n < N; n++)
        memcpy(ws->gates + (size_t)n * G, qm->embed_proj + (size_t)ws->batch.ids[n] * G,
               (size_t)G * sizeof(float));
    else
      gemm(ws, N, l == 0 ? s->width : H, l == 0 ? ws->batch.x : ws->h[l - 1] + step_h, &p->ih,
           NULL, ws->gates, 0);
    for (int t = 0; t < T; t++) {
      float *g = ws->gates + t * step_g;
      gemm(ws, B, H, ws->h[l] + t * step_h, &p->hh, NULL, g, 1);
      lstmd_cpu_lstm_gates_step(B, H, g, p->b_ih, p->b_hh, ws->c[l] + (t % 2) * step_h,
                                ws->c[l] + ((t + 1) % 2) * step_h, ws->h[l] + (t + 1) * step_h);
    }
    if (carry_state) {
      memcpy(ws->h[l], ws->h[l] + T * step_h, step_h * sizeof(float));
      if (T % 2) memcpy(ws->c[l], ws->c[l] + step_h, step_h * sizeof(float));
    }
  }
  gemm(ws, N, H, ws->h[s->layers - 1] + step_h, &qm->head, qm->head_bias, ws->out, 0);
  if (s->kind == LSTMD_MODEL_TEXT) return lstmd_cpu_softmax_xent(N, O, ws->out, ws->batch.targets, 0.0f);
  return lstmd_cpu_mse((size_t)N * O, ws->out, ws->batch.y, 0.0f);
}
