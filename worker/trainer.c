/* trainer.c — the training loop of one rank (see trainer.h). */
#define _GNU_SOURCE
#include "trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../kernels/cpu/blas_cpu.h"
#include "../kernels/status.h"
#include "batcher.h"
#include "checkpoint.h"
#include "dataset.h"
#include "durable.h"
#include "infer.h"
#include "metrics.h"
#include "model.h"
#include "optim.h"
#include "pool.h"

static volatile sig_atomic_t g_stop_requested;

void lstmd_train_request_stop(void) { g_stop_requested = 1; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One thread's share of each batch: columns [col0, col0 + cols) of the global batch, with its
 * own activations and gradient buffer (slice 0 uses the model's). */
struct slice {
  struct lstmd_workspace *ws;
  float *grads;
  int col0, cols;
  double loss;
};

enum { kMaxSlices = 256 };

struct run {
  const struct lstmd_train_config *cfg;
  const char *config_json;
  struct lstmd_dataset train, val;
  struct lstmd_model *model;
  struct lstmd_optim *optim;
  struct lstmd_batcher *batcher;
  struct lstmd_batch batch; /* the whole batch of one micro-step, split across the slices */
  struct lstmd_pool *pool;
  int n_slices, blas_threads, eval_blas_threads;
  struct slice slices[kMaxSlices];
  float grad_scale;         /* of the current micro-step */
  uint64_t micro_step;      /* dropout key */
  int first_micro;          /* slices zero their gradients first */
  struct lstmd_data_meta data_meta;
  struct lstmd_train_progress progress;
  struct lstmd_metrics metrics;
  int has_val;
};

static void run_free(struct run *r) {
  lstmd_metrics_close(&r->metrics);
  lstmd_pool_destroy(r->pool);
  for (int i = 0; i < r->n_slices; i++) {
    lstmd_workspace_destroy(r->slices[i].ws);
    if (i > 0) free(r->slices[i].grads);
  }
  lstmd_batch_free(&r->batch);
  lstmd_batcher_destroy(r->batcher);
  lstmd_optim_destroy(r->optim);
  lstmd_model_destroy(r->model);
  free(r->progress.state_h);
  free(r->progress.state_c);
  lstmd_dataset_close(&r->train);
  lstmd_dataset_close(&r->val);
}

static int save_checkpoint(struct run *r) {
  const struct lstmd_train_config *cfg = r->cfg;
  char path[4096], latest[4096];
  snprintf(path, sizeof path, "%s/step-%ld.safetensors", cfg->run_dir, r->progress.step);
  snprintf(latest, sizeof latest, "%s/latest.safetensors", cfg->run_dir);
  r->progress.cursor = lstmd_batcher_get_cursor(r->batcher);
  for (int i = 0; r->progress.state_h && i < r->n_slices; i++)
    lstmd_workspace_get_state(r->slices[i].ws, r->progress.state_h, r->progress.state_c,
                              r->cfg->batch_size, r->slices[i].col0);
  LSTMD_TRY(lstmd_checkpoint_save(path, r->model, r->optim, &r->data_meta, &r->progress,
                                  r->config_json));
  LSTMD_TRY(lstmd_durable_link(path, latest));
  return LSTMD_OK;
}

/* Splits the batch across threads: as many slices as threads (at most one per window), each
 * calling BLAS with the remaining share of the threads. */
static int setup_slices(struct run *r) {
  const struct lstmd_train_config *cfg = r->cfg;
  const int threads = cfg->threads > 0 ? cfg->threads : lstmd_cpu_cores();
  int n = threads < cfg->batch_size ? threads : cfg->batch_size;
  if (n > kMaxSlices) n = kMaxSlices;
  r->eval_blas_threads = threads;
  r->blas_threads = threads / n;
  LSTMD_TRY(lstmd_batch_alloc(&r->train, cfg->seq_len, cfg->batch_size, &r->batch));
  LSTMD_TRY(lstmd_pool_create(n, &r->pool));
  const size_t grad_bytes = (r->model->n_params * sizeof(float) + 63) / 64 * 64;
  for (int i = 0, col = 0; i < n; i++) {
    struct slice *s = &r->slices[i];
    s->col0 = col;
    s->cols = cfg->batch_size / n + (i < cfg->batch_size % n);
    col += s->cols;
    LSTMD_TRY(lstmd_workspace_create(r->model, cfg->seq_len, s->cols, cfg->dropout, &s->ws));
    r->n_slices = i + 1;
    s->grads = i == 0 ? r->model->grads : aligned_alloc(64, grad_bytes);
    if (!s->grads) return LSTMD_ENOMEM;
    lstmd_workspace_set_grads(s->ws, s->grads);
  }
  lstmd_cpu_set_blas_threads(r->blas_threads);
  return LSTMD_OK;
}

/* Builds everything a run needs from the config and the dataset. */
static int setup(struct run *r) {
  const struct lstmd_train_config *cfg = r->cfg;
  if (cfg->device != LSTMD_DEVICE_CPU) {
    lstmd_errorf("train.device=cuda: this build has no GPU backend yet; use train.device=cpu");
    return LSTMD_EUNSUPPORTED;
  }
  if (cfg->precision != LSTMD_PRECISION_FP32) {
    lstmd_errorf("train.precision: the CPU backend trains in fp32 only");
    return LSTMD_ECONFIG;
  }
  LSTMD_TRY(lstmd_dataset_open_dir(cfg->data_path, &r->train, &r->val));
  const struct lstmd_dataset_info *info = &r->train.info;
  struct lstmd_model_shape shape = {.hidden = cfg->hidden, .layers = cfg->layers};
  if (info->kind == LSTMD_DATASET_TEXT) {
    shape.kind = LSTMD_MODEL_TEXT;
    shape.vocab = info->vocab_size;
    shape.embed = cfg->embed;
  } else {
    shape.kind = LSTMD_MODEL_SERIES;
    shape.width = info->width;
    shape.horizon = info->horizon;
  }
  r->data_meta = (struct lstmd_data_meta){*info, cfg->seq_len, cfg->batch_size};
  LSTMD_TRY(lstmd_model_create(&shape, &r->model));
  struct lstmd_rng init_rng;
  lstmd_rng_seed(&init_rng, cfg->seed, 1);
  lstmd_model_init_params(r->model, &init_rng);
  struct lstmd_optim_config oc = cfg->optim;
  oc.total_steps = cfg->steps;
  LSTMD_TRY(lstmd_optim_create(&oc, r->model->n_params, &r->optim));
  LSTMD_TRY(lstmd_batcher_create(&r->train, cfg->order, cfg->seq_len, cfg->batch_size, 0, 1,
                                 cfg->seed, &r->batcher));
  LSTMD_TRY(setup_slices(r));
  r->progress.state_batch = cfg->batch_size;
  if (cfg->order == LSTMD_ORDER_STREAM) {
    size_t n = (size_t)cfg->layers * cfg->batch_size * cfg->hidden;
    r->progress.state_h = calloc(n, sizeof(float));
    r->progress.state_c = calloc(n, sizeof(float));
    if (!r->progress.state_h || !r->progress.state_c) return LSTMD_ENOMEM;
  }
  r->has_val = lstmd_window_count(&r->val, cfg->seq_len) > 0;
  return LSTMD_OK;
}

static int resume(struct run *r, const char *path) {
  struct lstmd_model *saved;
  struct lstmd_data_meta meta;
  LSTMD_TRY(lstmd_checkpoint_load_model(path, &saved, &meta));
  lstmd_model_destroy(saved);
  if (meta.info.pair_id != r->train.info.pair_id) {
    lstmd_errorf("%s: was trained on another dataset than %s (re-prepared or replaced); "
                 "the data cursor would not mean the same windows", path, r->cfg->data_path);
    return LSTMD_ECONFIG;
  }
  if (meta.seq_len != r->cfg->seq_len || meta.batch != r->cfg->batch_size) {
    lstmd_errorf("%s: was trained with data.seq_len=%d data.batch_size=%d; resume needs the same",
                 path, meta.seq_len, meta.batch);
    return LSTMD_ECONFIG;
  }
  LSTMD_TRY(lstmd_checkpoint_load_train(path, r->model, r->optim, &r->progress, NULL));
  LSTMD_TRY(lstmd_batcher_set_cursor(r->batcher, r->progress.cursor));
  for (int i = 0; r->progress.state_h && i < r->n_slices; i++)
    lstmd_workspace_set_state(r->slices[i].ws, r->progress.state_h, r->progress.state_c,
                              r->cfg->batch_size, r->slices[i].col0);
  return LSTMD_OK;
}

static void evaluate_now(struct run *r) {
  double loss;
  uint64_t tokens;
  lstmd_cpu_set_blas_threads(r->eval_blas_threads); /* evaluation runs on one thread's BLAS */
  int rc = lstmd_evaluate(r->model, &r->val, r->cfg->seq_len, r->cfg->batch_size, &loss, &tokens);
  lstmd_cpu_set_blas_threads(r->blas_threads);
  if (rc == 0)
    lstmd_metrics_eval(&r->metrics, r->progress.step, loss, r->model->shape.kind == LSTMD_MODEL_TEXT);
}

/* Pool task: slice i runs forward/backward on its columns of r->batch. */
static void step_slice(void *arg, int i) {
  struct run *r = arg;
  struct slice *s = &r->slices[i];
  if (r->first_micro) memset(s->grads, 0, r->model->n_params * sizeof(float));
  lstmd_batch_slice(&r->batch, s->col0, lstmd_workspace_batch(s->ws));
  const struct lstmd_dropout_key key = {r->cfg->seed, r->micro_step, s->col0};
  s->loss += lstmd_model_step(r->model, s->ws, r->grad_scale, r->cfg->dropout > 0 ? &key : NULL,
                              r->cfg->order == LSTMD_ORDER_STREAM);
}

/* Pool task: thread i adds every other slice's gradients into slice 0's (the model's) over its
 * share of the parameters, always in slice order. */
static void reduce_slices(void *arg, int i) {
  struct run *r = arg;
  const size_t n = r->model->n_params, per = (n + r->n_slices - 1) / r->n_slices;
  const size_t lo = (size_t)i * per, hi = lo + per < n ? lo + per : n;
  float *g0 = r->slices[0].grads;
  for (int k = 1; k < r->n_slices; k++) {
    const float *gk = r->slices[k].grads;
    for (size_t j = lo; j < hi; j++) g0[j] += gk[j];
  }
}

/* One optimizer step: grad_accum micro-batches, then clip + update. */
static int train_step(struct run *r, double *loss_out, double *grad_norm) {
  const struct lstmd_train_config *cfg = r->cfg;
  struct lstmd_model *m = r->model;
  const int per_input = m->shape.kind == LSTMD_MODEL_TEXT ? 1 : m->shape.horizon;
  const double targets = (double)cfg->seq_len * cfg->batch_size * per_input * cfg->grad_accum;
  r->grad_scale = (float)(1.0 / targets);
  for (int i = 0; i < r->n_slices; i++) r->slices[i].loss = 0.0;
  for (int a = 0; a < cfg->grad_accum; a++) {
    int reset;
    LSTMD_TRY(lstmd_batcher_next(r->batcher, &r->batch, &reset));
    for (int i = 0; reset && i < r->n_slices; i++) lstmd_workspace_reset_state(r->slices[i].ws);
    r->first_micro = a == 0;
    r->micro_step = (uint64_t)r->progress.step * cfg->grad_accum + a;
    lstmd_pool_run(r->pool, step_slice, r);
  }
  if (r->n_slices > 1) lstmd_pool_run(r->pool, reduce_slices, r);
  double loss = 0.0;
  for (int i = 0; i < r->n_slices; i++) loss += r->slices[i].loss;
  *loss_out = loss / targets;
  if (lstmd_optim_step(r->optim, m->params, m->grads, grad_norm) != 0) {
    lstmd_errorf("step %ld: non-finite gradient norm (loss %g); lower optim.lr or set "
                 "optim.clip_norm", r->progress.step + 1, *loss_out);
    return LSTMD_EINVAL;
  }
  r->progress.step++;
  return LSTMD_OK;
}

static int train_loop(struct run *r) {
  const struct lstmd_train_config *cfg = r->cfg;
  const double tokens_per_step = (double)cfg->seq_len * cfg->batch_size * cfg->grad_accum;
  const long first_step = r->progress.step;
  double t0 = now_s(), interval_t0 = t0, interval_loss = 0.0;
  long interval_steps = 0;
  while (r->progress.step < cfg->steps && !g_stop_requested) {
    double loss, grad_norm;
    LSTMD_TRY(train_step(r, &loss, &grad_norm));
    interval_loss += loss;
    interval_steps++;
    const long step = r->progress.step;
    if ((cfg->log_every && step % cfg->log_every == 0) || step == cfg->steps) {
      double t = now_s(), rate = interval_steps * tokens_per_step / (t - interval_t0);
      struct lstmd_step_report rep = {
          .step = step, .total_steps = cfg->steps, .loss = interval_loss / interval_steps,
          .lr = lstmd_optim_lr(&r->optim->cfg, step - 1), .grad_norm = grad_norm,
          .tokens_per_s = rate, .elapsed_s = t - t0,
          .eta_s = (cfg->steps - step) * tokens_per_step / rate,
          .tokens = (long long)(step * tokens_per_step)};
      lstmd_metrics_step(&r->metrics, &rep);
      interval_t0 = t;
      interval_loss = 0.0;
      interval_steps = 0;
    }
    const double pause_t0 = now_s(); /* evaluation and checkpoints are not training time */
    if (r->has_val && cfg->eval_every && step % cfg->eval_every == 0) evaluate_now(r);
    if (cfg->checkpoint_every && step % cfg->checkpoint_every == 0 && step != cfg->steps)
      LSTMD_TRY(save_checkpoint(r));
    const double paused = now_s() - pause_t0;
    interval_t0 += paused;
    t0 += paused;
  }
  double elapsed = now_s() - t0;
  if (r->progress.step > first_step)
    lstmd_metrics_note(&r->metrics, "trained steps %ld..%ld in %.1f s of training (%.0f tokens/s)",
                       first_step + 1, r->progress.step, elapsed,
                       (r->progress.step - first_step) * tokens_per_step / elapsed);
  if (r->has_val && !(cfg->eval_every && r->progress.step % cfg->eval_every == 0)) evaluate_now(r);
  LSTMD_TRY(save_checkpoint(r));
  if (g_stop_requested && r->progress.step < cfg->steps)
    lstmd_metrics_note(&r->metrics, "stopped at step %ld on request; checkpoint %s/latest.safetensors"
                       " (resume with: lstmd train --config ... --resume)", r->progress.step, cfg->run_dir);
  else
    lstmd_metrics_note(&r->metrics, "done: %s/step-%ld.safetensors", cfg->run_dir, r->progress.step);
  return LSTMD_OK;
}

int lstmd_train_run(const struct lstmd_train_config *cfg, const char *config_json,
                    const char *resume_path) {
  struct run r = {.cfg = cfg, .config_json = config_json, .train.fd = -1, .val.fd = -1};
  int rc = setup(&r);
  if (!rc && resume_path) rc = resume(&r, resume_path);
  if (!rc) rc = lstmd_mkdir_p(cfg->run_dir);
  if (!rc) rc = lstmd_metrics_open(&r.metrics, cfg->run_dir);
  if (!rc) {
    const struct lstmd_dataset_info *info = &r.train.info;
    size_t params = 0;
    for (int i = 0; i < r.model->n_tensors; i++) params += r.model->tensors[i].count;
    char blas[96];
    lstmd_cpu_blas_describe(blas, sizeof blas);
    lstmd_metrics_note(&r.metrics, "compute: CPU, batch split across %d threads, %s with %d "
                       "thread%s per call", r.n_slices, blas, r.blas_threads,
                       r.blas_threads == 1 ? "" : "s");
    lstmd_metrics_note(&r.metrics, "data: %s, %llu training %s%s, model %zu parameters%s",
                       info->kind == LSTMD_DATASET_TEXT ? "text" : "series",
                       (unsigned long long)info->count,
                       info->kind == LSTMD_DATASET_TEXT ? "tokens" : "rows",
                       r.has_val ? "" : " (validation split too short to evaluate)",
                       params, resume_path ? ", resumed" : "");
    if (resume_path)
      lstmd_metrics_note(&r.metrics, "resumed from %s at step %ld", resume_path, r.progress.step);
    rc = train_loop(&r);
  }
  run_free(&r);
  return rc;
}
