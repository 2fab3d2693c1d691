/* gpu_pipe.c (selftest group "pipe") — the GPU pipeline stages (kernels/cuda/stage_cuda.h)
 * against the CPU model (the reference), in one process on one device: the layers split into
 * S = 1, 2 or 3 stages, the window into K = 1, 2 or 4 time chunks, run in the wavefront's
 * order (every stage's F of chunk k, then B and W of the chunks from the last to the first),
 * activations and gradients handed between the stages' buffers with device copies as the
 * engine's transfers would. Checked: the loss, every gradient tensor (fp32 with TF32 off:
 * relative error < 1e-4; bf16: < 3e-2) and the final carried state, from a random initial
 * state (so the chunks' state gradients must chain for the gradients to match). With one layer
 * per stage every dropout mask sits at a stage boundary, where the engine applies the CPU's own
 * masks: that run with dropout 0.3 must match the CPU model's dropout exactly, too.
 * Run by `lstmd selftest --gpu` (gpu_selftest.c). */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/model_cuda.h"
#include "kernels/cuda/stage_cuda.h"
#include "kernels/status.h"
#include "worker/engine/engine_gpu.h"
#include "worker/model/model.h"
#include "worker/selftest/gpu_checks.h"
#include "worker/selftest/selftest.h"

enum { T = 8, B = 4, H = 8, L = 3, kMaxStages = 3 };
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

static void fill_batch(struct lstmd_batch *b, const struct lstmd_model *m) {
  const struct lstmd_model_shape *s = &m->shape;
  const size_t N = (size_t)T * B;
  for (size_t i = 0; b->ids && i < N; i++) {
    b->ids[i] = (int32_t)((unsigned)((selftest_uniform(&g_seed, 1.0) + 1.0) * 1e6) % (unsigned)s->vocab);
    b->targets[i] = (int32_t)((unsigned)((selftest_uniform(&g_seed, 1.0) + 1.0) * 1e6) % (unsigned)s->vocab);
  }
  for (size_t i = 0; b->x && i < N * s->width; i++) b->x[i] = (float)selftest_uniform(&g_seed, 1.0);
  for (size_t i = 0; b->y && i < N * s->horizon; i++) b->y[i] = (float)selftest_uniform(&g_seed, 1.0);
}

/* ‖a − b‖ / ‖b‖. */
static double rel_err(const float *a, const float *b, size_t n) {
  double d = 0.0, r = 0.0;
  for (size_t i = 0; i < n; i++) {
    d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return r > 0.0 ? sqrt(d / r) : sqrt(d);
}

struct case_spec {
  int text, stages, chunks, dtype;
  int split[kMaxStages];
  float dropout; /* boundary masks only: one layer per stage */
};

static void *to_device(const void *host, size_t bytes) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes) != cudaSuccess) return NULL;
  cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
  return d;
}

static void run_case(const struct case_spec *c) {
  struct lstmd_model *m = make_model(c->text);
  if (!m) {
    lstmd_check_true("model", 0);
    return;
  }
  const size_t S = (size_t)L * B * H, n = m->n_params;
  const float gs = (float)(1.0 / ((double)T * B * (c->text ? 1 : m->shape.horizon)));
  char name[128];
  snprintf(name, sizeof name, "%s %s S=%d K=%d%s", c->text ? "text" : "series",
           c->dtype == LSTMD_DT_F32 ? "fp32" : "bf16", c->stages, c->chunks,
           c->dropout > 0 ? " boundary dropout" : "");
  /* CPU reference */
  struct lstmd_workspace *ws = NULL;
  lstmd_workspace_create(m, T, B, c->dropout, &ws);
  struct lstmd_batch *b = lstmd_workspace_batch(ws);
  fill_batch(b, m);
  float *h0 = selftest_rand_floats(&g_seed, S, 0.5, NULL), *c0 = selftest_rand_floats(&g_seed, S, 0.5, NULL);
  lstmd_workspace_set_state(ws, h0, c0, B, 0);
  memset(m->grads, 0, n * sizeof(float));
  const struct lstmd_dropout_key key = {7, 3, 0};
  const double ref_loss = lstmd_model_forward(m, ws, gs, c->dropout > 0 ? &key : NULL);
  lstmd_model_backward(m, ws);
  lstmd_model_end_window(ws, 1);
  float *h1 = malloc(S * sizeof(float)), *c1 = malloc(S * sizeof(float));
  lstmd_workspace_get_state(ws, h1, c1, B, 0);
  /* GPU stages */
  cudaStream_t stream = NULL;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  float *params = to_device(m->params, n * sizeof(float)), *grads = NULL;
  double *loss = NULL;
  cudaMalloc((void **)&grads, n * sizeof(float));
  cudaMemset(grads, 0, n * sizeof(float));
  cudaMalloc((void **)&loss, sizeof(double));
  cudaMemset(loss, 0, sizeof(double));
  const size_t es = lstmd_dtype_bytes(c->dtype);
  /* initial state, in the data type, per stage */
  float *h0d = to_device(h0, S * sizeof(float)), *c0d = to_device(c0, S * sizeof(float));
  void *h_dt = NULL, *c_dt = NULL;
  cudaMalloc(&h_dt, S * es);
  cudaMalloc(&c_dt, S * es);
  lstmd_cuda_cast(S, h0d, LSTMD_DT_F32, h_dt, c->dtype, stream);
  lstmd_cuda_cast(S, c0d, LSTMD_DT_F32, c_dt, c->dtype, stream);
  struct lstmd_cuda_stage *st[kMaxStages] = {0};
  float *mask[kMaxStages] = {0}, *mask_host = malloc((size_t)T * B * H * sizeof(float));
  int rc = 0, layer0[kMaxStages];
  for (int s = 0, l0 = 0; !rc && s < c->stages; l0 += c->split[s], s++) {
    layer0[s] = l0;
    struct lstmd_cuda_stage_config sc = {.layer0 = l0, .layers = c->split[s], .first = s == 0,
                                         .last = s == c->stages - 1, .steps = T, .chunks = c->chunks,
                                         .batch = B, .slots = 1, .dtype = c->dtype, .seed = 5};
    lstmd_gpu_model_layout(m, &sc.layout);
    rc = lstmd_cuda_stage_create(&sc, stream, &st[s]);
    if (!rc) rc = lstmd_cuda_stage_load_weights(st[s], params);
    if (!rc) rc = lstmd_cuda_stage_begin_grads(st[s]);
    if (!rc) rc = lstmd_cuda_stage_begin_unit(st[s], 0, (char *)h_dt + (size_t)l0 * B * H * es,
                                              (char *)c_dt + (size_t)l0 * B * H * es);
    struct lstmd_cuda_inputs *in = lstmd_cuda_stage_inputs(st[s], 0);
    const size_t N = (size_t)T * B;
    if (!rc && in->ids) cudaMemcpy(in->ids, b->ids, N * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (!rc && in->targets) cudaMemcpy(in->targets, b->targets, N * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (!rc && in->x) cudaMemcpy(in->x, b->x, N * m->shape.width * sizeof(float), cudaMemcpyHostToDevice);
    if (!rc && in->y) cudaMemcpy(in->y, b->y, N * m->shape.horizon * sizeof(float), cudaMemcpyHostToDevice);
    if (!rc && s > 0 && c->dropout > 0) { /* the CPU's mask of the layer below the boundary */
      lstmd_dropout_mask_rows(&key, c->dropout, l0 - 1, 0, T, B, H, mask_host);
      mask[s] = to_device(mask_host, (size_t)T * B * H * sizeof(float));
    }
  }
  char what[200];
  snprintf(what, sizeof what, "%s: stages built", name);
  if (!lstmd_check_true(what, rc == 0)) goto done;
  const size_t rows = (size_t)T / c->chunks * B * H;
  for (int k = 0; !rc && k < c->chunks; k++) /* F: the wavefront's order */
    for (int s = 0; !rc && s < c->stages; s++) {
      if (s > 0)
        cudaMemcpyAsync(lstmd_cuda_stage_chunk(st[s], LSTMD_STAGE_INPUT, 0, k),
                        lstmd_cuda_stage_chunk(st[s - 1], LSTMD_STAGE_OUTPUT, 0, k),
                        lstmd_cuda_stage_chunk_bytes(st[s], LSTMD_STAGE_INPUT), cudaMemcpyDeviceToDevice,
                        stream);
      rc = lstmd_cuda_stage_forward(st[s], 0, k, params, gs, mask[s] ? mask[s] + k * rows : NULL, loss);
    }
  for (int k = c->chunks - 1; !rc && k >= 0; k--) /* B then W, from the last chunk */
    for (int s = c->stages - 1; !rc && s >= 0; s--) {
      if (s < c->stages - 1)
        cudaMemcpyAsync(lstmd_cuda_stage_chunk(st[s], LSTMD_STAGE_DOUTPUT, 0, k),
                        lstmd_cuda_stage_chunk(st[s + 1], LSTMD_STAGE_DINPUT, 0, k),
                        lstmd_cuda_stage_chunk_bytes(st[s], LSTMD_STAGE_DOUTPUT), cudaMemcpyDeviceToDevice,
                        stream);
      rc = lstmd_cuda_stage_backward_data(st[s], 0, k, params, mask[s] ? mask[s] + k * rows : NULL);
      if (!rc) rc = lstmd_cuda_stage_backward_weights(st[s], 0, k, grads);
    }
  for (int s = 0; !rc && s < c->stages; s++) {
    rc = lstmd_cuda_stage_finish_grads(st[s], grads);
    if (!rc) rc = lstmd_cuda_stage_end_unit(st[s], 0, (char *)h_dt + (size_t)layer0[s] * B * H * es,
                                            (char *)c_dt + (size_t)layer0[s] * B * H * es);
  }
  snprintf(what, sizeof what, "%s: items ran", name);
  if (!lstmd_check_true(what, rc == 0 && cudaStreamSynchronize(stream) == cudaSuccess)) goto done;
  double got_loss = 0.0;
  float *g = malloc(n * sizeof(float)), *hs = malloc(S * sizeof(float)), *cs = malloc(S * sizeof(float));
  cudaMemcpy(&got_loss, loss, sizeof(double), cudaMemcpyDeviceToHost);
  cudaMemcpy(g, grads, n * sizeof(float), cudaMemcpyDeviceToHost);
  lstmd_cuda_cast(S, h_dt, c->dtype, h0d, LSTMD_DT_F32, stream);
  lstmd_cuda_cast(S, c_dt, c->dtype, c0d, LSTMD_DT_F32, stream);
  cudaStreamSynchronize(stream);
  cudaMemcpy(hs, h0d, S * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(cs, c0d, S * sizeof(float), cudaMemcpyDeviceToHost);
  const double tol = c->dtype == LSTMD_DT_F32 ? 1e-4 : 3e-2;
  const double le = fabs(got_loss - ref_loss) / fabs(ref_loss);
  snprintf(what, sizeof what, "%s: loss %.6f vs CPU %.6f (rel %.1e < %.0e)", name, got_loss,
           ref_loss, le, tol);
  lstmd_check_true(what, le < tol);
  double worst = 0.0;
  const char *worst_name = "";
  for (int t = 0; t < m->n_tensors; t++) {
    const double e = rel_err(g + m->tensors[t].offset, m->grads + m->tensors[t].offset,
                             m->tensors[t].count);
    if (!(e <= worst)) {
      worst = e;
      worst_name = m->tensors[t].name;
    }
  }
  snprintf(what, sizeof what, "%s: every gradient tensor (worst %s rel %.1e < %.0e)", name,
           worst_name, worst, tol);
  lstmd_check_true(what, worst < tol);
  const double eh = rel_err(hs, h1, S), ec = rel_err(cs, c1, S);
  snprintf(what, sizeof what, "%s: final state (h rel %.1e, c rel %.1e < %.0e)", name, eh, ec, tol);
  lstmd_check_true(what, eh < tol && ec < tol);
  free(g);
  free(hs);
  free(cs);
done:
  for (int s = 0; s < kMaxStages; s++) {
    lstmd_cuda_stage_destroy(st[s]);
    cudaFree(mask[s]);
  }
  void *dev[] = {params, grads, loss, h0d, c0d, h_dt, c_dt};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaFree(dev[i]);
  if (stream) cudaStreamDestroy(stream);
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
      {1, 1, 1, LSTMD_DT_F32, {3}, 0.0f},    {1, 1, 4, LSTMD_DT_F32, {3}, 0.0f},
      {1, 2, 2, LSTMD_DT_F32, {2, 1}, 0.0f}, {1, 2, 4, LSTMD_DT_F32, {1, 2}, 0.0f},
      {1, 3, 4, LSTMD_DT_F32, {1, 1, 1}, 0.0f}, {0, 2, 4, LSTMD_DT_F32, {2, 1}, 0.0f},
      {1, 3, 2, LSTMD_DT_F32, {1, 1, 1}, 0.3f}, {0, 3, 4, LSTMD_DT_F32, {1, 1, 1}, 0.3f},
      {1, 2, 4, LSTMD_DT_BF16, {2, 1}, 0.0f}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}
