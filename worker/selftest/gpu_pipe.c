/* gpu_pipe.c (selftest group "pipe") — the GPU pipeline stages (kernels/cuda/stage_cuda.h)
 * against the CPU model (the reference), in one process on one device: the layers split into
 * S = 1, 2 or 3 stages, the window into K = 1, 2 or 4 time chunks, activations and gradients
 * handed between the stages' buffers with device copies as the engine's transfers would.
 * One unit: the wavefront's order (every stage's F of chunk k, then B and W of the chunks from
 * the last to the first). Two units of half the columns each in two slots: the second unit's
 * F items run between the first unit's B and W items, as in 1F1B, so each chunk's reserve and
 * state must survive other units' cuDNN calls. Checked: the loss, every gradient tensor (fp32
 * with TF32 off: relative error < 1e-4; bf16, fp16: < 3e-2; fp16 with a loss scale of 1024 on
 * the gradients, divided out) and the final carried state, from a random initial state (so the
 * chunks' state gradients must chain for the gradients to match: a probe on the CPU model put
 * the gradients of unchained chunks 0.36–0.67 off). With one layer per stage every dropout mask
 * sits at a stage boundary, where the engine applies the CPU's own masks: those runs with
 * dropout 0.3 must match the CPU model's dropout too. Run by `lstmd selftest --gpu`. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/model_cuda.h"
#include "kernels/cuda/stage_cuda.h"
#include "kernels/status.h"
#include "worker/data/batcher.h"
#include "worker/engine/engine_gpu.h"
#include "worker/model/model.h"
#include "worker/selftest/gpu_checks.h"
#include "worker/selftest/selftest.h"

enum { T = 8, B = 4, H = 8, L = 3, kMaxStages = 3, kMaxSlots = 2 };
static unsigned long long g_seed = 1234;

static struct lstmd_model *make_model(int text) {
  struct lstmd_model_shape s = {.kind = text ? LSTMD_MODEL_TEXT : LSTMD_MODEL_SERIES,
                                .vocab = text ? 13 : 0, .embed = text ? 5 : 0,
                                .width = text ? 0 : 3, .horizon = text ? 0 : 2, .hidden = H,
                                .layers = L};
  struct lstmd_model *m = NULL;
  if (lstmd_model_create(&s, &m)) return NULL;
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 99 + text, 1);
  lstmd_model_init_params(m, &rng);
  return m;
}

/* By the model's kind, not by which pointers are set: the CPU workspace's batch has every array
 * (a series model's ids are an empty, non-NULL slice of its arena). */
static void fill_batch(struct lstmd_batch *b, const struct lstmd_model *m) {
  const struct lstmd_model_shape *s = &m->shape;
  const int text = s->kind == LSTMD_MODEL_TEXT;
  const size_t N = (size_t)T * B;
  for (size_t i = 0; text && i < N; i++) {
    b->ids[i] = (int32_t)((unsigned)((selftest_uniform(&g_seed, 1.0) + 1.0) * 1e6) % (unsigned)s->vocab);
    b->targets[i] = (int32_t)((unsigned)((selftest_uniform(&g_seed, 1.0) + 1.0) * 1e6) % (unsigned)s->vocab);
  }
  for (size_t i = 0; !text && i < N * s->width; i++) b->x[i] = (float)selftest_uniform(&g_seed, 1.0);
  for (size_t i = 0; !text && i < N * s->horizon; i++) b->y[i] = (float)selftest_uniform(&g_seed, 1.0);
}

struct case_spec {
  int text, stages, chunks, dtype, units;
  int split[kMaxStages];
  float dropout;    /* boundary masks only: one layer per stage */
  float loss_scale; /* 0: none; else the gradients carry it (fp16) */
};

/* [layers, B, H] rows ↔ the columns [c0, c0 + b) of a [layers, B, H] array, as [layers, b, H]. */
static void columns(float *all, float *part, int layers, int c0, int b, int to_part) {
  for (int l = 0; l < layers; l++)
    for (int j = 0; j < b; j++) {
      float *a = all + ((size_t)l * B + c0 + j) * H, *p = part + ((size_t)l * b + j) * H;
      memcpy(to_part ? p : a, to_part ? a : p, H * sizeof(float));
    }
}

/* Every device buffer of a case, freed together. */
struct dev {
  void *ptr[64];
  int n;
};
static void *dev_take(struct dev *d, size_t bytes) {
  void *p = NULL;
  if (d->n == 64 || cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
  cudaMemset(p, 0, bytes);
  return d->ptr[d->n++] = p;
}
static void *dev_copy(struct dev *d, const void *host, size_t bytes) {
  void *p = dev_take(d, bytes);
  if (p) cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
  return p;
}

struct gpu_case {
  const struct case_spec *c;
  struct lstmd_cuda_stage *st[kMaxStages];
  int layer0[kMaxStages];
  float *mask[kMaxSlots][kMaxStages];
  const float *params;
  float *grads;
  double *loss;
  float gs;
  size_t rows; /* of one chunk's mask */
  cudaStream_t stream;
};

static int forward(struct gpu_case *g, int u, int k) {
  int rc = LSTMD_OK;
  for (int s = 0; !rc && s < g->c->stages; s++) {
    if (s > 0)
      cudaMemcpyAsync(lstmd_cuda_stage_chunk(g->st[s], LSTMD_STAGE_INPUT, u, k),
                      lstmd_cuda_stage_chunk(g->st[s - 1], LSTMD_STAGE_OUTPUT, u, k),
                      lstmd_cuda_stage_chunk_bytes(g->st[s], LSTMD_STAGE_INPUT),
                      cudaMemcpyDeviceToDevice, g->stream);
    const float *mask = g->mask[u][s] ? g->mask[u][s] + k * g->rows : NULL;
    rc = lstmd_cuda_stage_forward(g->st[s], u, k, g->params, g->gs, mask, g->loss);
  }
  return rc;
}

static int backward_data(struct gpu_case *g, int u, int k) {
  int rc = LSTMD_OK;
  for (int s = g->c->stages - 1; !rc && s >= 0; s--) {
    if (s < g->c->stages - 1)
      cudaMemcpyAsync(lstmd_cuda_stage_chunk(g->st[s], LSTMD_STAGE_DOUTPUT, u, k),
                      lstmd_cuda_stage_chunk(g->st[s + 1], LSTMD_STAGE_DINPUT, u, k),
                      lstmd_cuda_stage_chunk_bytes(g->st[s], LSTMD_STAGE_DOUTPUT),
                      cudaMemcpyDeviceToDevice, g->stream);
    const float *mask = g->mask[u][s] ? g->mask[u][s] + k * g->rows : NULL;
    rc = lstmd_cuda_stage_backward_data(g->st[s], u, k, g->params, mask);
  }
  return rc;
}

static int backward_weights(struct gpu_case *g, int u, int k) {
  int rc = LSTMD_OK;
  for (int s = 0; !rc && s < g->c->stages; s++) rc = lstmd_cuda_stage_backward_weights(g->st[s], u, k, g->grads);
  return rc;
}

/* The items in the order of the case (see the top). */
static int run_items(struct gpu_case *g) {
  const int K = g->c->chunks;
  int rc = LSTMD_OK;
  for (int k = 0; !rc && k < K; k++) rc = forward(g, 0, k);
  if (g->c->units == 1) {
    for (int k = K - 1; !rc && k >= 0; k--) {
      rc = backward_data(g, 0, k);
      if (!rc) rc = backward_weights(g, 0, k);
    }
    return rc;
  }
  for (int j = 0; !rc && j < K; j++) { /* unit 1's F between unit 0's B and W */
    rc = backward_data(g, 0, K - 1 - j);
    if (!rc) rc = forward(g, 1, j);
    if (!rc) rc = backward_weights(g, 0, K - 1 - j);
  }
  for (int k = K - 1; !rc && k >= 0; k--) {
    rc = backward_data(g, 1, k);
    if (!rc) rc = backward_weights(g, 1, k);
  }
  return rc;
}

static void run_case(const struct case_spec *c) {
  struct lstmd_model *m = make_model(c->text);
  if (!m) {
    lstmd_check_true("model", 0);
    return;
  }
  const size_t S = (size_t)L * B * H, n = m->n_params;
  const int b = B / c->units;
  const float gs = (float)(1.0 / ((double)T * B * (c->text ? 1 : m->shape.horizon)));
  char name[128];
  snprintf(name, sizeof name, "%s %s S=%d K=%d%s%s", c->text ? "text" : "series",
           c->dtype == LSTMD_DT_F32 ? "fp32" : c->dtype == LSTMD_DT_BF16 ? "bf16" : "fp16",
           c->stages, c->chunks, c->units > 1 ? " 2 units interleaved" : "",
           c->dropout > 0 ? " boundary dropout" : "");
  /* CPU reference */
  struct lstmd_workspace *ws = NULL;
  lstmd_workspace_create(m, T, B, c->dropout, &ws);
  struct lstmd_batch *batch = lstmd_workspace_batch(ws);
  fill_batch(batch, m);
  float *h0 = selftest_rand_floats(&g_seed, S, 0.5, NULL), *c0 = selftest_rand_floats(&g_seed, S, 0.5, NULL);
  lstmd_workspace_set_state(ws, h0, c0, B, 0);
  memset(m->grads, 0, n * sizeof(float));
  const struct lstmd_dropout_key key = {7, 3, 0};
  const double ref_loss = lstmd_model_forward(m, ws, gs, c->dropout > 0 ? &key : NULL);
  lstmd_model_backward(m, ws);
  lstmd_model_end_window(ws, 1);
  float *h1 = malloc(S * sizeof(float)), *c1 = malloc(S * sizeof(float));
  lstmd_workspace_get_state(ws, h1, c1, B, 0);
  /* GPU stages, one slot per unit of b columns */
  struct dev d = {.n = 0};
  struct gpu_case g = {.c = c, .gs = gs, .rows = (size_t)T / c->chunks * b * H};
  cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking);
  const size_t es = lstmd_dtype_bytes(c->dtype), Sb = (size_t)L * b * H;
  g.params = dev_copy(&d, m->params, n * sizeof(float));
  g.grads = dev_take(&d, n * sizeof(float));
  g.loss = dev_take(&d, sizeof(double));
  float *scale = c->loss_scale > 0 ? dev_copy(&d, &c->loss_scale, sizeof(float)) : NULL;
  float *part = malloc(Sb * sizeof(float)), *mask_host = malloc((size_t)T * b * H * sizeof(float));
  float *state_f = dev_take(&d, 2 * Sb * sizeof(float));
  void *state[kMaxSlots];
  struct lstmd_batch unit = {.steps = T, .batch = b, .width = batch->width, .horizon = batch->horizon};
  const size_t Nb = (size_t)T * b;
  if (c->text) {
    unit.ids = malloc(Nb * sizeof(int32_t));
    unit.targets = malloc(Nb * sizeof(int32_t));
  } else {
    unit.x = malloc(Nb * m->shape.width * sizeof(float));
    unit.y = malloc(Nb * m->shape.horizon * sizeof(float));
  }
  int rc = 0;
  for (int u = 0; u < c->units; u++) { /* each unit's initial state, in the data type */
    state[u] = dev_take(&d, 2 * Sb * es);
    columns(h0, part, L, u * b, b, 1);
    cudaMemcpy(state_f, part, Sb * sizeof(float), cudaMemcpyHostToDevice);
    columns(c0, part, L, u * b, b, 1);
    cudaMemcpy(state_f + Sb, part, Sb * sizeof(float), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize(); /* the legacy-stream copies before our stream reads them */
    rc |= lstmd_cuda_cast(2 * Sb, state_f, LSTMD_DT_F32, state[u], c->dtype, g.stream);
    cudaStreamSynchronize(g.stream);
  }
  for (int s = 0, l0 = 0; !rc && s < c->stages; l0 += c->split[s], s++) {
    g.layer0[s] = l0;
    struct lstmd_cuda_stage_config sc = {.layer0 = l0, .layers = c->split[s], .first = s == 0,
                                         .last = s == c->stages - 1, .steps = T, .chunks = c->chunks,
                                         .batch = b, .slots = c->units, .dtype = c->dtype, .seed = 5};
    lstmd_gpu_model_layout(m, &sc.layout);
    rc = lstmd_cuda_stage_create(&sc, g.stream, &g.st[s]);
    if (!rc && scale) lstmd_cuda_stage_scale_gradients_by(g.st[s], scale);
    if (!rc) rc = lstmd_cuda_stage_load_weights(g.st[s], g.params);
    if (!rc) rc = lstmd_cuda_stage_begin_grads(g.st[s]);
    for (int u = 0; !rc && u < c->units; u++) {
      char *h = (char *)state[u] + (size_t)l0 * b * H * es, *cc = (char *)state[u] + (Sb + (size_t)l0 * b * H) * es;
      rc = lstmd_cuda_stage_begin_unit(g.st[s], u, h, cc);
      lstmd_batch_slice(batch, u * b, &unit);
      struct lstmd_cuda_inputs *in = lstmd_cuda_stage_inputs(g.st[s], u);
      if (!rc && in->ids) cudaMemcpy(in->ids, unit.ids, Nb * sizeof(int32_t), cudaMemcpyHostToDevice);
      if (!rc && in->targets) cudaMemcpy(in->targets, unit.targets, Nb * sizeof(int32_t), cudaMemcpyHostToDevice);
      if (!rc && in->x) cudaMemcpy(in->x, unit.x, Nb * m->shape.width * sizeof(float), cudaMemcpyHostToDevice);
      if (!rc && in->y) cudaMemcpy(in->y, unit.y, Nb * m->shape.horizon * sizeof(float), cudaMemcpyHostToDevice);
      if (!rc && s > 0 && c->dropout > 0) { /* the CPU's mask of the layer below the boundary */
        const struct lstmd_dropout_key ku = {key.seed, key.step, u * b};
        lstmd_dropout_mask_rows(&ku, c->dropout, l0 - 1, 0, T, b, H, mask_host);
        g.mask[u][s] = dev_copy(&d, mask_host, (size_t)T * b * H * sizeof(float));
      }
    }
  }
  cudaDeviceSynchronize(); /* every legacy-stream copy and memset above, before the items */
  char what[200];
  snprintf(what, sizeof what, "%s: stages built", name);
  if (!lstmd_check_true(what, rc == 0)) goto done;
  rc = run_items(&g);
  for (int s = 0; !rc && s < c->stages; s++) {
    rc = lstmd_cuda_stage_finish_grads(g.st[s], g.grads);
    for (int u = 0; !rc && u < c->units; u++)
      rc = lstmd_cuda_stage_end_unit(g.st[s], u, (char *)state[u] + (size_t)g.layer0[s] * b * H * es,
                                     (char *)state[u] + (Sb + (size_t)g.layer0[s] * b * H) * es);
  }
  snprintf(what, sizeof what, "%s: items ran", name);
  if (!lstmd_check_true(what, rc == 0 && cudaStreamSynchronize(g.stream) == cudaSuccess)) goto done;
  double got_loss = 0.0;
  float *grads = malloc(n * sizeof(float)), *hs = malloc(S * sizeof(float)), *cs = malloc(S * sizeof(float));
  cudaMemcpy(&got_loss, g.loss, sizeof(double), cudaMemcpyDeviceToHost);
  cudaMemcpy(grads, g.grads, n * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; scale && i < n; i++) grads[i] /= c->loss_scale;
  for (int u = 0; u < c->units; u++) {
    lstmd_cuda_cast(2 * Sb, state[u], c->dtype, state_f, LSTMD_DT_F32, g.stream);
    cudaStreamSynchronize(g.stream);
    cudaMemcpy(part, state_f, Sb * sizeof(float), cudaMemcpyDeviceToHost);
    columns(hs, part, L, u * b, b, 0);
    cudaMemcpy(part, state_f + Sb, Sb * sizeof(float), cudaMemcpyDeviceToHost);
    columns(cs, part, L, u * b, b, 0);
  }
  const double tol = c->dtype == LSTMD_DT_F32 ? 1e-4 : 3e-2;
  const double le = fabs(got_loss - ref_loss) / fabs(ref_loss);
  snprintf(what, sizeof what, "%s: loss %.6f vs CPU %.6f (rel %.1e < %.0e)", name, got_loss,
           ref_loss, le, tol);
  lstmd_check_true(what, le < tol);
  double worst = 0.0;
  const char *worst_name = "";
  for (int t = 0; t < m->n_tensors; t++) {
    const double e = selftest_rel_err(grads + m->tensors[t].offset, m->grads + m->tensors[t].offset,
                             m->tensors[t].count);
    if (!(e <= worst)) {
      worst = e;
      worst_name = m->tensors[t].name;
    }
  }
  snprintf(what, sizeof what, "%s: every gradient tensor (worst %s rel %.1e < %.0e)", name,
           worst_name, worst, tol);
  lstmd_check_true(what, worst < tol);
  const double eh = selftest_rel_err(hs, h1, S), ec = selftest_rel_err(cs, c1, S);
  snprintf(what, sizeof what, "%s: final state (h rel %.1e, c rel %.1e < %.0e)", name, eh, ec, tol);
  lstmd_check_true(what, eh < tol && ec < tol);
  free(grads);
  free(hs);
  free(cs);
done:
  for (int s = 0; s < kMaxStages; s++) lstmd_cuda_stage_destroy(g.st[s]);
  for (int i = 0; i < d.n; i++) cudaFree(d.ptr[i]);
  if (g.stream) cudaStreamDestroy(g.stream);
  free(unit.ids);
  free(unit.targets);
  free(unit.x);
  free(unit.y);
  free(part);
  free(mask_host);
  free(h0);
  free(c0);
  free(h1);
  free(c1);
  lstmd_workspace_destroy(ws);
  lstmd_model_destroy(m);
}

void lstmd_selftest_gpu_pipe(void) {
  static const struct case_spec cases[] = {
      /* text, S, K, type, units, split, dropout, loss scale */
      {1, 1, 1, LSTMD_DT_F32, 1, {3}, 0.0f, 0.0f},
      {1, 1, 4, LSTMD_DT_F32, 1, {3}, 0.0f, 0.0f},
      {1, 2, 2, LSTMD_DT_F32, 1, {2, 1}, 0.0f, 0.0f},
      {1, 2, 4, LSTMD_DT_F32, 1, {1, 2}, 0.0f, 0.0f},
      {1, 3, 4, LSTMD_DT_F32, 1, {1, 1, 1}, 0.0f, 0.0f},
      {0, 2, 4, LSTMD_DT_F32, 1, {2, 1}, 0.0f, 0.0f},
      {1, 2, 4, LSTMD_DT_F32, 2, {2, 1}, 0.0f, 0.0f},
      {0, 3, 2, LSTMD_DT_F32, 2, {1, 1, 1}, 0.0f, 0.0f},
      {1, 3, 2, LSTMD_DT_F32, 1, {1, 1, 1}, 0.3f, 0.0f},
      {0, 3, 4, LSTMD_DT_F32, 2, {1, 1, 1}, 0.3f, 0.0f},
      {1, 2, 4, LSTMD_DT_BF16, 1, {2, 1}, 0.0f, 0.0f},
      {1, 2, 4, LSTMD_DT_F16, 2, {2, 1}, 0.0f, 1024.0f}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}
