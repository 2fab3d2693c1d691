/* data_parallel.c — slices, gradient buckets and the overlap of their all-reduce with backward
 * (see data_parallel.h). */
#define _GNU_SOURCE
#include "data_parallel.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/reducer.h"
#include "kernels/cpu/blas_cpu.h"
#include "kernels/status.h"
#include "worker/data/batcher.h"
#include "worker/model/infer.h"
#include "worker/io/nvtx.h"
#include "worker/model/optim.h"
#include "pool.h"
#include "worker/io/trace.h"
#if LSTMD_WITH_GPU
#include "gpu_engine.h"
#endif

enum { kMaxSlices = 256 };

struct slice {
  struct lstmd_dp *dp;
  int index;
  struct lstmd_workspace *ws;
  float *grads; /* slice 0: model->grads */
  int col0, cols;
  double loss;
  size_t ready; /* [ready, n_params) of this slice's gradients is final */
};

struct lstmd_dp {
  struct lstmd_model *model;
  struct lstmd_gpu *gpu; /* the GPU engine drives the step instead of the slices below */
  struct lstmd_dp_config cfg;
  struct lstmd_comm *comm;
  int rank, world;
  const struct lstmd_batch *batch; /* of the micro-step in flight */
  struct lstmd_pool *pool;
  struct lstmd_reducer *reducer; /* NULL with one rank */
  int n_slices, blas_threads;
  struct slice slices[kMaxSlices];
  /* the micro-step in flight */
  float grad_scale;
  uint64_t micro_step;
  int first, collecting;
  /* buckets: bucket k is [bucket_lo(k), bucket_hi(k)), k = 0 at the end of the buffer */
  struct lstmd_trace *trace; /* NULL: no timeline */
  size_t bucket_floats;
  int n_buckets, next_bucket;
  pthread_mutex_t mu;
};

static size_t bucket_hi(const struct lstmd_dp *dp, int k) {
  return dp->model->n_params - (size_t)k * dp->bucket_floats;
}
static size_t bucket_lo(const struct lstmd_dp *dp, int k) {
  size_t hi = bucket_hi(dp, k);
  return hi > dp->bucket_floats ? hi - dp->bucket_floats : 0;
}

/* Sums bucket k over the slices into slice 0 (in slice order: deterministic) and sends it. */
static void flush_bucket(struct lstmd_dp *dp, int k) {
  const size_t lo = bucket_lo(dp, k), hi = bucket_hi(dp, k);
  float *g0 = dp->slices[0].grads;
  for (int i = 1; i < dp->n_slices; i++) {
    const float *gi = dp->slices[i].grads;
    for (size_t j = lo; j < hi; j++) g0[j] += gi[j];
  }
  if (dp->reducer) lstmd_reducer_submit(dp->reducer, g0 + lo, hi - lo);
}

/* Backward hook of every slice: sends the buckets that are now final in all slices. Buckets
 * become final from the end of the buffer towards its start, so they go out in index order on
 * every rank. */
static void on_grads_ready(void *ctx, size_t first) {
  struct slice *s = ctx;
  struct lstmd_dp *dp = s->dp;
  if (!dp->collecting) return;
  pthread_mutex_lock(&dp->mu);
  s->ready = first;
  size_t all_ready = 0;
  for (int i = 0; i < dp->n_slices; i++)
    if (dp->slices[i].ready > all_ready) all_ready = dp->slices[i].ready;
  while (dp->next_bucket < dp->n_buckets && bucket_lo(dp, dp->next_bucket) >= all_ready)
    flush_bucket(dp, dp->next_bucket++);
  pthread_mutex_unlock(&dp->mu);
}

static void step_slice(void *arg, int i) {
  struct lstmd_dp *dp = arg;
  struct slice *s = &dp->slices[i];
  if (dp->first) memset(s->grads, 0, dp->model->n_params * sizeof(float));
  s->loss = 0.0;
  lstmd_batch_slice(dp->batch, s->col0, lstmd_workspace_batch(s->ws));
  const struct lstmd_dropout_key key = {dp->cfg.seed, dp->micro_step,
                                        dp->rank * dp->cfg.batch + s->col0};
  const double t0 = dp->trace ? lstmd_trace_now() : 0.0;
  s->loss = lstmd_model_forward(dp->model, s->ws, dp->grad_scale,
                                dp->cfg.dropout > 0 ? &key : NULL);
  const double t1 = dp->trace ? lstmd_trace_now() : 0.0;
  lstmd_model_backward(dp->model, s->ws);
  lstmd_model_end_window(s->ws, dp->cfg.carry_state);
  if (dp->trace) {
    lstmd_trace_event(dp->trace, 1 + i, "forward", t0, t1, NULL);
    lstmd_trace_event(dp->trace, 1 + i, "backward", t1, lstmd_trace_now(), NULL);
  }
}

static void on_bucket_done(void *ctx, size_t n, double queued_s, double begin_s, double end_s) {
  char args[96];
  snprintf(args, sizeof args, "{\"floats\":%zu,\"queued_us\":%.3f}", n, queued_s * 1e6);
  lstmd_trace_event(ctx, LSTMD_TRACE_TID_REDUCER, "all-reduce bucket", begin_s, end_s, args);
}

void lstmd_dp_set_trace(struct lstmd_dp *dp, struct lstmd_trace *trace) {
  dp->trace = trace;
  if (dp->reducer && trace) lstmd_reducer_observe(dp->reducer, on_bucket_done, trace);
}

int lstmd_dp_create(struct lstmd_model *m, const struct lstmd_dp_config *cfg,
                    struct lstmd_comm *comm, struct lstmd_dp **out) {
  *out = NULL;
  struct lstmd_dp *dp = calloc(1, sizeof *dp);
  if (!dp) return LSTMD_ENOMEM;
  dp->model = m;
  dp->cfg = *cfg;
  dp->comm = comm;
  dp->rank = comm ? lstmd_comm_rank(comm) : 0;
  dp->world = comm ? lstmd_comm_size(comm) : 1;
  pthread_mutex_init(&dp->mu, NULL);
  if (cfg->use_gpu) {
#if LSTMD_WITH_GPU
    const struct lstmd_gpu_config gc = {cfg->seq_len, cfg->batch, cfg->carry_state, cfg->dropout,
                                        cfg->seed, cfg->bucket_mb, cfg->gpu_device, cfg->precision,
                                        cfg->comm_timeout_s};
    int rc = lstmd_gpu_create(m, &gc, comm, &dp->gpu);
#else
    lstmd_errorf("this build has no GPU backend");
    int rc = LSTMD_EUNSUPPORTED;
#endif
    if (rc) {
      lstmd_dp_destroy(dp);
      return rc;
    }
    dp->n_slices = 0;
    dp->blas_threads = 1;
    *out = dp;
    return LSTMD_OK;
  }
  /* threads = 0: this node's cores shared among the ranks on it */
  const int local_ranks = comm ? lstmd_comm_local_size(comm) : 1;
  int threads = cfg->threads > 0 ? cfg->threads : lstmd_cpu_cores() / local_ranks;
  if (threads < 1) threads = 1;
  int n = threads < cfg->batch ? threads : cfg->batch;
  if (n > kMaxSlices) n = kMaxSlices;
  dp->blas_threads = threads / n;
  size_t bucket = (size_t)(cfg->bucket_mb * 1048576.0 / sizeof(float));
  dp->bucket_floats = bucket < 1024 ? 1024 : bucket > (1u << 30) ? (1u << 30) : bucket;
  dp->n_buckets = (int)((m->n_params + dp->bucket_floats - 1) / dp->bucket_floats);
  int rc = lstmd_pool_create(n, &dp->pool);
  if (!rc && dp->world > 1) rc = lstmd_reducer_create(comm, &dp->reducer);
  const size_t grad_bytes = (m->n_params * sizeof(float) + 63) / 64 * 64;
  for (int i = 0, col = 0; !rc && i < n; i++) {
    struct slice *s = &dp->slices[i];
    s->dp = dp;
    s->index = i;
    s->col0 = col;
    s->cols = cfg->batch / n + (i < cfg->batch % n);
    col += s->cols;
    rc = lstmd_workspace_create(m, cfg->seq_len, s->cols, cfg->dropout, &s->ws);
    if (rc) break;
    dp->n_slices = i + 1;
    s->grads = i == 0 ? m->grads : aligned_alloc(64, grad_bytes);
    if (!s->grads) {
      rc = LSTMD_ENOMEM;
      break;
    }
    lstmd_workspace_set_grads(s->ws, s->grads);
    lstmd_workspace_on_grads_ready(s->ws, on_grads_ready, s);
  }
  if (rc) {
    lstmd_dp_destroy(dp);
    return rc;
  }
  lstmd_cpu_set_blas_threads(dp->blas_threads);
  *out = dp;
  return LSTMD_OK;
}

void lstmd_dp_destroy(struct lstmd_dp *dp) {
  if (!dp) return;
#if LSTMD_WITH_GPU
  lstmd_gpu_destroy(dp->gpu);
#endif
  lstmd_reducer_destroy(dp->reducer);
  lstmd_pool_destroy(dp->pool);
  for (int i = 0; i < dp->n_slices; i++) {
    lstmd_workspace_destroy(dp->slices[i].ws);
    if (i > 0) free(dp->slices[i].grads);
  }
  pthread_mutex_destroy(&dp->mu);
  free(dp);
}

int lstmd_dp_threads(const struct lstmd_dp *dp) { return dp->gpu ? 1 : dp->n_slices; }
int lstmd_dp_blas_threads(const struct lstmd_dp *dp) { return dp->blas_threads; }

void lstmd_dp_reset_state(struct lstmd_dp *dp) {
#if LSTMD_WITH_GPU
  if (dp->gpu) lstmd_gpu_reset_state(dp->gpu);
#endif
  for (int i = 0; i < dp->n_slices; i++) lstmd_workspace_reset_state(dp->slices[i].ws);
}

int lstmd_dp_micro_step(struct lstmd_dp *dp, const struct lstmd_batch *batch, float grad_scale,
                        uint64_t micro_step, int first, int last, double *loss_sum,
                        double *comm_wait_s) {
#if LSTMD_WITH_GPU
  if (dp->gpu) { /* on the timeline: until the GPU finished backward (the exposed all-reduce
                  * wait is the trainer's own event) */
    const double t0 = dp->trace ? lstmd_trace_now() : 0.0;
    lstmd_nvtx_push("micro-batch (GPU)");
    int rc = lstmd_gpu_micro_step(dp->gpu, batch, grad_scale, first, last, loss_sum, comm_wait_s);
    lstmd_nvtx_pop();
    if (dp->trace)
      lstmd_trace_event(dp->trace, 1, "forward+backward (GPU)", t0, lstmd_trace_now() - *comm_wait_s,
                        NULL);
    return rc;
  }
#endif
  lstmd_nvtx_push("forward+backward");
  dp->batch = batch;
  dp->grad_scale = grad_scale;
  dp->micro_step = micro_step;
  dp->first = first;
  dp->collecting = last;
  dp->next_bucket = 0;
  for (int i = 0; i < dp->n_slices; i++) dp->slices[i].ready = dp->model->n_params;
  lstmd_pool_run(dp->pool, step_slice, dp);
  lstmd_nvtx_pop();
  dp->collecting = 0;
  *loss_sum = 0.0;
  for (int i = 0; i < dp->n_slices; i++) *loss_sum += dp->slices[i].loss;
  *comm_wait_s = 0.0;
  if (!last) return LSTMD_OK;
  while (dp->next_bucket < dp->n_buckets) flush_bucket(dp, dp->next_bucket++);
  lstmd_nvtx_push("all-reduce wait");
  int rc = dp->reducer ? lstmd_reducer_wait_all(dp->reducer, comm_wait_s) : LSTMD_OK;
  lstmd_nvtx_pop();
  return rc;
}

int lstmd_dp_gather_state(struct lstmd_dp *dp, float *h, float *c) {
  const int L = dp->model->shape.layers, B = dp->cfg.batch, N = dp->world;
  const size_t H = (size_t)dp->model->shape.hidden, local = (size_t)L * B * H;
  float *mine = malloc(2 * local * sizeof(float));
#if LSTMD_WITH_GPU
  int gpu_rc = dp->gpu && mine ? lstmd_gpu_get_state(dp->gpu, mine, mine + local) : LSTMD_OK;
  if (gpu_rc) {
    free(mine);
    return gpu_rc;
  }
#endif
  float *all = dp->rank == 0 && N > 1 ? malloc(2 * local * N * sizeof(float)) : NULL;
  if (!mine || (dp->rank == 0 && N > 1 && !all)) {
    free(mine);
    free(all);
    return LSTMD_ENOMEM;
  }
  for (int i = 0; mine && i < dp->n_slices; i++)
    lstmd_workspace_get_state(dp->slices[i].ws, mine, mine + local, B, dp->slices[i].col0);
  int rc = LSTMD_OK;
  if (N == 1) {
    memcpy(h, mine, local * sizeof(float));
    memcpy(c, mine + local, local * sizeof(float));
  } else {
    rc = lstmd_comm_gather(dp->comm, mine, 2 * local * sizeof(float), all, 0);
    /* all: [rank][h|c][L][B][H] -> h, c: [L][N·B][H] with global column r·B + b */
    for (int r = 0; !rc && dp->rank == 0 && r < N; r++)
      for (int l = 0; l < L; l++) {
        const float *src = all + (size_t)r * 2 * local + (size_t)l * B * H;
        size_t at = ((size_t)l * N * B + (size_t)r * B) * H;
        memcpy(h + at, src, (size_t)B * H * sizeof(float));
        memcpy(c + at, src + local, (size_t)B * H * sizeof(float));
      }
  }
  free(mine);
  free(all);
  return rc;
}

void lstmd_dp_set_state(struct lstmd_dp *dp, const float *h, const float *c) {
  const int global = dp->cfg.batch * dp->world;
#if LSTMD_WITH_GPU
  if (dp->gpu) { /* this rank's columns of the global [L, N·B, H] state */
    const int L = dp->model->shape.layers, B = dp->cfg.batch;
    const size_t H = (size_t)dp->model->shape.hidden, local = (size_t)L * B * H;
    float *mine = malloc(2 * local * sizeof(float));
    if (!mine) {
      lstmd_errorf("out of memory for the recurrent state");
      return;
    }
    for (int l = 0; l < L; l++) {
      size_t at = ((size_t)l * global + (size_t)dp->rank * B) * H;
      memcpy(mine + (size_t)l * B * H, h + at, (size_t)B * H * sizeof(float));
      memcpy(mine + local + (size_t)l * B * H, c + at, (size_t)B * H * sizeof(float));
    }
    lstmd_gpu_set_state(dp->gpu, mine, mine + local);
    free(mine);
    return;
  }
#endif
  for (int i = 0; i < dp->n_slices; i++)
    lstmd_workspace_set_state(dp->slices[i].ws, h, c, global,
                              dp->rank * dp->cfg.batch + dp->slices[i].col0);
}

int lstmd_dp_upload(struct lstmd_dp *dp, const struct lstmd_optim *o,
                    const struct lstmd_train_progress *p) {
#if LSTMD_WITH_GPU
  if (dp->gpu) return lstmd_gpu_upload(dp->gpu, o, p);
#endif
  (void)dp, (void)o, (void)p;
  return LSTMD_OK;
}

int lstmd_dp_optim_step(struct lstmd_dp *dp, struct lstmd_optim *o, double *grad_norm) {
#if LSTMD_WITH_GPU
  if (dp->gpu) return lstmd_gpu_optim_step(dp->gpu, o, grad_norm);
#endif
  lstmd_nvtx_push("optimizer");
  int rc = lstmd_optim_step(o, dp->model->params, dp->model->grads, grad_norm);
  lstmd_nvtx_pop();
  return rc;
}

int lstmd_dp_sync_host(struct lstmd_dp *dp, struct lstmd_optim *o, struct lstmd_train_progress *p) {
#if LSTMD_WITH_GPU
  if (dp->gpu) return lstmd_gpu_sync_host(dp->gpu, o, p);
#endif
  (void)dp, (void)o, (void)p;
  return LSTMD_OK;
}

int lstmd_dp_evaluate(struct lstmd_dp *dp, const struct lstmd_dataset *ds, int seq_len, int batch,
                      double *mean_loss, uint64_t *tokens) {
#if LSTMD_WITH_GPU
  if (dp->gpu) return lstmd_gpu_evaluate(dp->gpu, ds, mean_loss, tokens);
#endif
  return lstmd_evaluate(dp->model, ds, seq_len, batch, mean_loss, tokens);
}

double lstmd_dp_loss_scale(const struct lstmd_dp *dp) {
#if LSTMD_WITH_GPU
  if (dp->gpu) return lstmd_gpu_loss_scale(dp->gpu);
#endif
  (void)dp;
  return 0.0;
}

int lstmd_dp_describe_gpu(const struct lstmd_dp *dp, char *desc, size_t n) {
#if LSTMD_WITH_GPU
  if (dp->gpu) {
    lstmd_gpu_describe(dp->gpu, desc, n);
    return 1;
  }
#endif
  (void)dp;
  if (n) desc[0] = '\0';
  return 0;
}
