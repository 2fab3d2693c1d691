/* gpu_stage_times.c — per-item costs of pipeline stages on this GPU (gpu_stage_times.h).
 *
 * Each stage is built alone on the GPU with one unit, its inputs random token ids (or series
 * rows) and its received messages left zero: the cost of a cuDNN call does not depend on the
 * values. A pass runs the K forwards, then the K backwards as the wavefront does (B then W of
 * each chunk, last chunk first), every item between two events on the stage's stream. The first
 * pass is not timed (cuDNN and cuBLAS pick and warm their kernels). */
#define _GNU_SOURCE
#include "gpu_stage_times.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/cuda/stage_cuda.h"
#include "worker/engine/engine_gpu.h"
#include "worker/model/model.h"
#include "worker/model/rng.h"
#include "worker/train/train_config.h"

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct timing {
  cudaStream_t stream;
  cudaEvent_t *ev; /* [2 · 3K] */
  double *ms[3];   /* [K · reps] per item kind */
};

/* One pass over the stage's items; with `into` >= 0, their times at ms[kind][into·K + k]. */
static int pass(struct lstmd_cuda_stage *st, const struct lstmd_stage_times_config *c,
                const float *params, float *grads, double *loss, struct timing *t, int into) {
  const int K = c->chunks;
  int rc = lstmd_cuda_stage_begin_grads(st);
  if (!rc) rc = lstmd_cuda_stage_begin_unit(st, 0, NULL, NULL);
  for (int i = 0; !rc && i < 3 * K; i++) { /* F0..F(K−1), then B(K−1) W(K−1) … B0 W0 */
    const int kind = i < K ? 0 : 1 + (i - K) % 2, k = i < K ? i : K - 1 - (i - K) / 2;
    LSTMD_CHECK_CUDA(cudaEventRecord(t->ev[2 * i], t->stream));
    rc = kind == 0   ? lstmd_cuda_stage_forward(st, 0, k, params, 1.0f, NULL, loss)
         : kind == 1 ? lstmd_cuda_stage_backward_data(st, 0, k, params, NULL)
                     : lstmd_cuda_stage_backward_weights(st, 0, k, grads);
    LSTMD_CHECK_CUDA(cudaEventRecord(t->ev[2 * i + 1], t->stream));
  }
  if (!rc) rc = lstmd_cuda_stage_finish_grads(st, grads);
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(t->stream));
  for (int i = 0; !rc && into >= 0 && i < 3 * K; i++) {
    const int kind = i < K ? 0 : 1 + (i - K) % 2, k = i < K ? i : K - 1 - (i - K) / 2;
    float ms = 0.0f;
    LSTMD_CHECK_CUDA(cudaEventElapsedTime(&ms, t->ev[2 * i], t->ev[2 * i + 1]));
    t->ms[kind][into * K + k] = ms;
  }
  return rc;
}

/* Random inputs of the unit: token ids / targets (text) or rows (series). */
static int fill_inputs(struct lstmd_cuda_inputs *in, const struct lstmd_model_shape *sh,
                       size_t n) {
  const size_t floats = n * (size_t)(sh->width > sh->horizon ? sh->width : sh->horizon);
  void *host = malloc((n > floats ? n : floats) * sizeof(float));
  if (!host) return LSTMD_ENOMEM;
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 7, 3);
  int32_t *ids = host;
  float *rows = host;
  int rc = LSTMD_OK;
  if (in->ids || in->targets) {
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)lstmd_rng_below(&rng, (uint64_t)sh->vocab);
    if (in->ids) rc |= cudaMemcpy(in->ids, ids, n * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (in->targets) rc |= cudaMemcpy(in->targets, ids, n * sizeof(int32_t), cudaMemcpyHostToDevice);
  }
  if (in->x || in->y) {
    for (size_t i = 0; i < floats; i++) rows[i] = lstmd_rng_uniform(&rng);
    if (in->x) rc |= cudaMemcpy(in->x, rows, n * sh->width * sizeof(float), cudaMemcpyHostToDevice);
    if (in->y) rc |= cudaMemcpy(in->y, rows, n * sh->horizon * sizeof(float), cudaMemcpyHostToDevice);
  }
  free(host);
  return rc ? LSTMD_ECUDA : LSTMD_OK;
}

static int time_stage(const struct lstmd_model *m, const struct lstmd_stage_times_config *c,
                      int layer0, int layers, int s, struct timing *t, double *out) {
  struct lstmd_cuda_stage_config sc = {
      .layer0 = layer0, .layers = layers, .first = s == 0, .last = s == c->stages - 1,
      .steps = c->steps, .chunks = c->chunks, .batch = c->batch, .slots = 1, .dtype = c->dtype,
      .allow_tf32 = c->allow_tf32, .seed = 1};
  lstmd_gpu_model_layout(m, &sc.layout);
  struct lstmd_cuda_stage *st = NULL;
  float *params = NULL, *grads = NULL;
  double *loss = NULL;
  const size_t bytes = m->n_params * sizeof(float);
  int rc = cudaMalloc((void **)&params, bytes) || cudaMalloc((void **)&grads, bytes) ||
                   cudaMalloc((void **)&loss, sizeof(double))
               ? LSTMD_ENOMEM
               : LSTMD_OK;
  if (!rc && cudaMemcpy(params, m->params, bytes, cudaMemcpyHostToDevice)) rc = LSTMD_ECUDA;
  if (!rc && (cudaMemset(grads, 0, bytes) || cudaMemset(loss, 0, sizeof(double)))) rc = LSTMD_ECUDA;
  /* legacy-stream copies: t->stream is non-blocking and would not wait for them */
  if (!rc && cudaDeviceSynchronize()) rc = LSTMD_ECUDA;
  if (!rc) rc = lstmd_cuda_stage_create(&sc, t->stream, &st);
  if (!rc) rc = lstmd_cuda_stage_load_weights(st, params);
  if (!rc) rc = fill_inputs(lstmd_cuda_stage_inputs(st, 0), &m->shape, (size_t)c->steps * c->batch);
  for (int r = -1; !rc && r < c->reps; r++) rc = pass(st, c, params, grads, loss, t, r);
  for (int kind = 0; !rc && kind < 3; kind++) out[kind] = median(t->ms[kind], c->chunks * c->reps);
  if (rc == LSTMD_ENOMEM) lstmd_errorf("pipe-predict: out of GPU memory for stage %d", s);
  lstmd_cuda_stage_destroy(st);
  cudaFree(params);
  cudaFree(grads);
  cudaFree(loss);
  cudaGetLastError();
  return rc;
}

int lstmd_gpu_stage_times(const struct lstmd_model_shape *shape,
                          const struct lstmd_stage_times_config *c, double *ms) {
  const int S = c->stages, K = c->chunks, L = shape->layers;
  if (S < 1 || S > L || K < 1 || c->steps % K || c->reps < 1 || c->batch < 1) {
    lstmd_errorf("pipe-predict: need 1 <= stages <= layers (%d), steps a multiple of chunks, "
                 "reps and batch >= 1", L);
    return LSTMD_EINVAL;
  }
  LSTMD_TRY(lstmd_cuda_use_device(c->device));
  struct lstmd_model *m = NULL;
  LSTMD_TRY(lstmd_model_create(shape, &m));
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 42, 1);
  lstmd_model_init_params(m, &rng);
  struct timing t = {0};
  int rc = cudaStreamCreateWithFlags(&t.stream, cudaStreamNonBlocking) ? LSTMD_ECUDA : LSTMD_OK;
  t.ev = calloc(6 * (size_t)K, sizeof *t.ev);
  for (int kind = 0; kind < 3; kind++) t.ms[kind] = calloc((size_t)K * c->reps, sizeof(double));
  if (!t.ev || !t.ms[0] || !t.ms[1] || !t.ms[2]) rc = LSTMD_ENOMEM;
  for (int i = 0; !rc && i < 6 * K; i++)
    if (cudaEventCreate(&t.ev[i])) rc = LSTMD_ECUDA;
  int layers[LSTMD_MAX_LAYERS];
  char why[160];
  if (!rc && lstmd_stage_layer_counts("", S, L, layers, why, sizeof why)) { /* checked above */
    lstmd_errorf("pipe-predict: %s", why);
    rc = LSTMD_EINVAL;
  }
  for (int s = 0, layer0 = 0; !rc && s < S; layer0 += layers[s++])
    rc = time_stage(m, c, layer0, layers[s], s, &t, ms + 3 * s);
  for (int i = 0; t.ev && i < 6 * K; i++)
    if (t.ev[i]) cudaEventDestroy(t.ev[i]);
  if (t.stream) cudaStreamDestroy(t.stream);
  free(t.ev);
  for (int kind = 0; kind < 3; kind++) free(t.ms[kind]);
  lstmd_model_destroy(m);
  return rc;
}
