/* engine_cpu.c — the CPU engine (engine.h): one step of data-parallel training on this rank's
 * cores, with the all-reduce of its gradients overlapping backward.
 *
 * 1. Slices: the rank's B columns are split into slices, one per thread of a pool; each thread
 *    runs forward and backward of its slice with single-threaded BLAS into its own gradient
 *    buffer (slice 0's is model->grads). No per-step hand-off between threads, and the gate
 *    passes run in parallel too.
 * 2. Buckets: as backward finishes a suffix of the flat gradient buffer in every slice (head
 *    first, then the LSTM layers from the top, then the embedding), the buckets inside it are
 *    summed over the slices in slice order (deterministic) and handed to the reducer thread,
 *    whose all-reduce over the ranks overlaps the rest of backward. Buckets become final from
 *    the end of the buffer towards its start, so they go out in the same order on every rank.
 * 3. Distillation: each slice also holds a workspace of the teacher, which runs forward only,
 *    without dropout and from a zero state in every window (so nothing of it needs a
 *    checkpoint), on the slice's columns just before the student; the student's loss then
 *    reads the teacher's output (kd_cpu.h).
 * 4. Columns are global: rank r's slice starting at local column j holds global columns r·B + j
 *    and on, which is what dropout masks and the carried state are keyed on, so N ranks with
 *    batch b compute what one rank with batch N·b computes.
 * 5. Recurrence: where recur_team.h wants it (plain LSTM layers, H a multiple of the threads
 *    times the packed panel width, W_hh larger than a core's L2), the slices' threads run each
 *    layer's per-step recurrence together, split by hidden unit, so each core streams mostly
 *    its own share of W_hh (a thread that is ahead takes over groups of a thread behind);
 *    everything else stays per slice. The results are bitwise those of the slices alone.
 * 6. A sequence classifier (worker/model/classify.h) runs the same slices on its own workspace;
 *    its gradients are summed and sent after backward (no overlap yet), and it has no state.
 *    (The GPU engine runs classifiers too: engine_gpu.c, 8.) */
#define _GNU_SOURCE
#include "engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/reducer.h"
#include "kernels/cpu/blas_cpu.h"
#include "kernels/cpu/recur_team.h"
#include "kernels/status.h"
#include "pool.h"
#include "worker/io/nvtx.h"
#include "worker/io/trace.h"
#include "worker/model/classify.h"
#include "worker/model/infer.h"
#include "worker/model/optim.h"
#include "worker/train/fault.h"

enum { kMaxSlices = 256 };

struct slice {
  struct cpu_engine *eng;
  struct lstmd_workspace *ws;
  struct lstmd_workspace *teacher_ws; /* distillation (see 3.), or NULL */
  struct lstmd_clf_workspace *cws; /* a classifier's workspace (then ws is NULL), see 6. */
  float *grads; /* slice 0: model->grads */
  int col0, cols;
  double loss;
  size_t ready; /* [ready, n_params) of this slice's gradients is final */
};

struct cpu_engine {
  struct lstmd_engine base;
  struct lstmd_pool *pool;
  struct lstmd_reducer *reducer; /* NULL with one rank */
  struct lstmd_recur_team *team; /* the slices' shared recurrence (see 5.), or NULL */
  int n_slices, blas_threads, eval_threads;
  struct slice slices[kMaxSlices];
  /* the window in flight */
  const struct lstmd_batch *batch;
  float grad_scale;
  uint64_t window;
  int first, collecting;
  /* buckets: bucket k is [bucket_lo(k), bucket_hi(k)), k = 0 at the end of the buffer */
  size_t bucket_floats;
  int n_buckets, next_bucket;
  pthread_mutex_t mu;
};

static struct cpu_engine *cpu_of(struct lstmd_engine *e) { return (struct cpu_engine *)e; }

static size_t bucket_hi(const struct cpu_engine *c, int k) {
  return c->base.model->n_params - (size_t)k * c->bucket_floats;
}
static size_t bucket_lo(const struct cpu_engine *c, int k) {
  size_t hi = bucket_hi(c, k);
  return hi > c->bucket_floats ? hi - c->bucket_floats : 0;
}

/* Sums bucket k over the slices into slice 0 and sends it (see 2.). */
static void flush_bucket(struct cpu_engine *c, int k) {
  const size_t lo = bucket_lo(c, k), hi = bucket_hi(c, k);
  float *g0 = c->slices[0].grads;
  for (int i = 1; i < c->n_slices; i++) {
    const float *gi = c->slices[i].grads;
    for (size_t j = lo; j < hi; j++) g0[j] += gi[j];
  }
  if (c->reducer) lstmd_reducer_submit(c->reducer, g0 + lo, hi - lo);
}

/* Backward hook of every slice: sends the buckets that are now final in all slices. */
static void on_grads_ready(void *ctx, size_t first) {
  struct slice *s = ctx;
  struct cpu_engine *c = s->eng;
  if (!c->collecting) return;
  pthread_mutex_lock(&c->mu);
  s->ready = first;
  size_t all_ready = 0;
  for (int i = 0; i < c->n_slices; i++)
    if (c->slices[i].ready > all_ready) all_ready = c->slices[i].ready;
  while (c->next_bucket < c->n_buckets && bucket_lo(c, c->next_bucket) >= all_ready)
    flush_bucket(c, c->next_bucket++);
  pthread_mutex_unlock(&c->mu);
}

static void step_slice(void *arg, int i) {
  struct cpu_engine *c = arg;
  const struct lstmd_engine *e = &c->base;
  struct slice *s = &c->slices[i];
  if (c->first) memset(s->grads, 0, e->model->n_params * sizeof(float));
  s->loss = 0.0;
  if (s->cws) {
    lstmd_batch_slice(c->batch, s->col0, lstmd_clf_workspace_batch(s->cws));
    const double t0 = e->trace ? lstmd_now_s() : 0.0;
    s->loss = lstmd_clf_forward(e->model, s->cws, c->grad_scale);
    const double t1 = e->trace ? lstmd_now_s() : 0.0;
    lstmd_clf_backward(e->model, s->cws);
    if (e->trace) {
      lstmd_trace_event(e->trace, 1 + i, "forward", t0, t1, NULL);
      lstmd_trace_event(e->trace, 1 + i, "backward", t1, lstmd_now_s(), NULL);
    }
    return;
  }
  lstmd_batch_slice(c->batch, s->col0, lstmd_workspace_batch(s->ws));
  if (s->teacher_ws) {
    lstmd_batch_slice(c->batch, s->col0, lstmd_workspace_batch(s->teacher_ws));
    lstmd_model_forward(e->cfg.teacher, s->teacher_ws, 0.0f, NULL); /* reads params only */
    lstmd_model_end_window(s->teacher_ws, 0);
  }
  const struct lstmd_dropout_key key = {e->cfg.seed, c->window, e->rank * e->cfg.batch + s->col0};
  const double t0 = e->trace ? lstmd_now_s() : 0.0;
  s->loss = lstmd_model_forward(e->model, s->ws, c->grad_scale, e->cfg.dropout > 0 ? &key : NULL);
  const double t1 = e->trace ? lstmd_now_s() : 0.0;
  lstmd_model_backward(e->model, s->ws);
  lstmd_model_end_window(s->ws, e->cfg.carry_state);
  if (e->trace) {
    lstmd_trace_event(e->trace, 1 + i, "forward", t0, t1, NULL);
    lstmd_trace_event(e->trace, 1 + i, "backward", t1, lstmd_now_s(), NULL);
  }
}

static void on_bucket_done(void *ctx, size_t n, double queued_s, double begin_s, double end_s) {
  const struct cpu_engine *c = ctx;
  if (!c->base.trace) return;
  char args[96];
  snprintf(args, sizeof args, "{\"floats\":%zu,\"queued_us\":%.3f}", n, queued_s * 1e6);
  lstmd_trace_event(c->base.trace, LSTMD_TRACE_TID_REDUCER, "all-reduce bucket", begin_s, end_s,
                    args);
}

static void cpu_reset(struct lstmd_engine *e) {
  struct cpu_engine *c = cpu_of(e);
  for (int i = 0; i < c->n_slices; i++)
    if (c->slices[i].ws) lstmd_workspace_reset_state(c->slices[i].ws);
}

static int cpu_window(struct lstmd_engine *e, const struct lstmd_batch *batch, float grad_scale,
                      uint64_t window, int first, int last, double *loss_sum, double *comm_wait_s) {
  struct cpu_engine *c = cpu_of(e);
  lstmd_nvtx_push("forward+backward");
  c->batch = batch;
  c->grad_scale = grad_scale;
  c->window = window;
  c->first = first;
  c->collecting = last;
  c->next_bucket = 0;
  for (int i = 0; i < c->n_slices; i++) c->slices[i].ready = e->model->n_params;
  lstmd_pool_run(c->pool, step_slice, c);
  lstmd_nvtx_pop();
  c->collecting = 0;
  *loss_sum = 0.0;
  for (int i = 0; i < c->n_slices; i++) *loss_sum += c->slices[i].loss;
  *comm_wait_s = 0.0;
  if (!last) return LSTMD_OK;
  while (c->next_bucket < c->n_buckets) flush_bucket(c, c->next_bucket++);
  lstmd_nvtx_push("all-reduce wait"); /* also with one rank: every step has the same phases */
  const double t0 = lstmd_now_s();
  int rc = c->reducer ? lstmd_reducer_wait_all(c->reducer, comm_wait_s) : LSTMD_OK;
  if (e->trace && *comm_wait_s > 0)
    lstmd_trace_event(e->trace, LSTMD_TRACE_TID_MAIN, "wait for all-reduce", t0, lstmd_now_s(),
                      NULL);
  lstmd_nvtx_pop();
  return rc;
}

static int cpu_step(struct lstmd_engine *e, const struct lstmd_step_input *in,
                    struct lstmd_step_result *out) {
  return lstmd_engine_run_windows(e, in, out, cpu_window, cpu_reset);
}

static int cpu_start(struct lstmd_engine *e, const struct lstmd_optim *o,
                     const struct lstmd_train_progress *p) {
  (void)e, (void)o, (void)p; /* the host model is the engine's model */
  return LSTMD_OK;
}

/* The optimizer's update split over the pool's threads, in 64-byte-aligned ranges: it streams
 * params, gradients and both moments (7 floats an element), ~2 ms a step for the benchmark
 * model's 3.3 M on one core while the other idled. Bitwise the update of one thread. */
struct optim_job {
  const struct lstmd_optim *o;
  float *params, *grads;
  double norm;
  int parts;
};

static void optim_part(void *arg, int i) {
  const struct optim_job *j = arg;
  const size_t n = j->o->n;
  const size_t lo = n * i / j->parts / 16 * 16;
  const size_t hi = i + 1 == j->parts ? n : n * (i + 1) / j->parts / 16 * 16;
  if (hi > lo) lstmd_optim_update(j->o, j->params, j->grads, lo, hi, j->norm);
}

static int cpu_optim_step(struct lstmd_engine *e, struct lstmd_optim *o, int report,
                          struct lstmd_optim_outcome *out) {
  (void)report; /* the norm is on the host anyway */
  struct cpu_engine *c = cpu_of(e);
  lstmd_nvtx_push("optimizer");
  *out = (struct lstmd_optim_outcome){0};
  const int rc = lstmd_optim_norm(o, e->model->grads, &out->grad_norm);
  if (!rc) { /* as lstmd_optim_step, the update split over the threads */
    struct optim_job j = {o, e->model->params, e->model->grads, out->grad_norm, c->n_slices};
    lstmd_pool_run(c->pool, optim_part, &j);
    lstmd_optim_advance(o);
  }
  lstmd_nvtx_pop();
  return rc;
}

static int cpu_sync_host(struct lstmd_engine *e, struct lstmd_optim *o,
                         struct lstmd_train_progress *p) {
  (void)e, (void)o, (void)p; /* already there */
  return LSTMD_OK;
}

/* Every rank scores its share of the validation windows (a classifier's: sequences) with all
 * of its threads (the slices are idle meanwhile; engine.h: lstmd_engine_evaluate_shared), so N
 * ranks evaluate N times as fast, and rank 0 gets the loss one rank computes alone, bit for bit. */
static int cpu_evaluate(struct lstmd_engine *e, const struct lstmd_dataset *val, double *mean_loss,
                        uint64_t *tokens, double *accuracy) {
  struct cpu_engine *c = cpu_of(e);
  lstmd_cpu_set_blas_threads(c->eval_threads);
  int rc;
  if (e->model->shape.kind == LSTMD_MODEL_CLASSIFY) { /* mean loss per sequence */
    struct lstmd_eval_combine ec = {e, lstmd_now_s()};
    const struct lstmd_eval_share share = {e->rank, e->world, lstmd_engine_combine_eval_sums, &ec};
    struct lstmd_clf_eval res; /* 32 KiB on the stack: no allocation to vote on before the
                                * combine, whose waits are the bounded ones */
    rc = lstmd_clf_evaluate_shared(e->model, val, e->cfg.batch, e->world > 1 ? &share : NULL,
                                   &res);
    if (!rc && e->rank == 0) {
      *mean_loss = res.loss;
      *tokens = res.sequences;
      *accuracy = res.sequences ? (double)res.correct / (double)res.sequences : NAN;
    }
  } else {
    rc = lstmd_engine_evaluate_shared(e, e->model, val, mean_loss, tokens);
  }
  lstmd_cpu_set_blas_threads(c->blas_threads);
  return rc;
}

static int cpu_gather_state(struct lstmd_engine *e, float *h, float *c_out) {
  struct cpu_engine *c = cpu_of(e);
  const size_t local = (size_t)e->model->shape.layers * e->cfg.batch * e->model->shape.hidden;
  float *mine = lstmd_fault_due(LSTMD_FAULT_STATE_OOM, 1, e->rank) /* a test's (fault.h) */
                    ? NULL : malloc(2 * local * sizeof(float));
  /* voted: a rank without its buffer must not leave the others in the gather */
  int rc = lstmd_comm_agree_alloc(e->comm, mine != NULL, 2 * local * sizeof(float),
                                  "the carried state to checkpoint");
  if (mine) memset(mine, 0, 2 * local * sizeof(float)); /* a classifier has none */
  for (int i = 0; !rc && i < c->n_slices && c->slices[i].ws; i++)
    lstmd_workspace_get_state(c->slices[i].ws, mine, mine + local, e->cfg.batch, c->slices[i].col0);
  if (!rc) rc = lstmd_engine_gather_dp_state(e, mine, h, c_out);
  free(mine);
  return rc;
}

static int cpu_set_state(struct lstmd_engine *e, const float *h, const float *c_in) {
  struct cpu_engine *c = cpu_of(e);
  const int global = e->cfg.batch * e->world;
  for (int i = 0; i < c->n_slices && c->slices[i].ws; i++)
    lstmd_workspace_set_state(c->slices[i].ws, h, c_in, global,
                              e->rank * e->cfg.batch + c->slices[i].col0);
  return LSTMD_OK;
}

static double cpu_loss_scale(const struct lstmd_engine *e) {
  (void)e;
  return 0.0;
}

static void cpu_describe(const struct lstmd_engine *e, char *buf, size_t n) {
  const struct cpu_engine *c = (const struct cpu_engine *)e;
  char blas[96];
  lstmd_cpu_blas_describe(blas, sizeof blas);
  const int fold = c->slices[0].ws && lstmd_workspace_folds_embedding(c->slices[0].ws);
  snprintf(buf, n, "CPU, each rank splitting its batch across %d thread%s%s, %s with %d thread%s "
           "per call%s", c->n_slices, c->n_slices == 1 ? "" : "s",
           c->team ? " (the recurrence split by hidden unit)" : "", blas, c->blas_threads,
           c->blas_threads == 1 ? "" : "s", fold ? ", the embedding folded into layer 0" : "");
}

static void cpu_destroy(struct lstmd_engine *e) {
  struct cpu_engine *c = cpu_of(e);
  lstmd_reducer_destroy(c->reducer);
  lstmd_pool_destroy(c->pool);
  for (int i = 0; i < c->n_slices; i++) {
    lstmd_workspace_destroy(c->slices[i].ws);
    lstmd_workspace_destroy(c->slices[i].teacher_ws);
    lstmd_clf_workspace_destroy(c->slices[i].cws);
    if (i > 0) free(c->slices[i].grads);
  }
  lstmd_recur_team_destroy(c->team);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static const struct lstmd_engine_ops kCpuOps = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .start = cpu_start,
    .step = cpu_step,
    .optim_step = cpu_optim_step,
    .sync_host = cpu_sync_host,
    .evaluate = cpu_evaluate,
    .gather_state = cpu_gather_state,
    .set_state = cpu_set_state,
    .loss_scale = cpu_loss_scale,
    .describe = cpu_describe,
};

int lstmd_engine_cpu_create(const struct lstmd_engine *base, struct lstmd_engine **out) {
  *out = NULL;
  struct cpu_engine *c = calloc(1, sizeof *c);
  if (!c) return LSTMD_ENOMEM;
  c->base = *base;
  c->base.ops = &kCpuOps;
  pthread_mutex_init(&c->mu, NULL);
  const struct lstmd_engine_config *cfg = &base->cfg;
  const struct lstmd_model *m = base->model;
  const int threads = lstmd_engine_cpu_threads(base);
  int n = threads < cfg->batch ? threads : cfg->batch;
  if (n > kMaxSlices) n = kMaxSlices;
  c->blas_threads = threads / n;
  c->eval_threads = threads;
  c->bucket_floats = lstmd_engine_bucket_floats(cfg);
  c->n_buckets = (int)((m->n_params + c->bucket_floats - 1) / c->bucket_floats);
  int rc = lstmd_pool_create(n, &c->pool);
  if (!rc && base->world > 1) rc = lstmd_reducer_create(base->comm, &c->reducer);
  if (!rc && c->reducer) {
    lstmd_reducer_observe(c->reducer, on_bucket_done, c);
    lstmd_reducer_set_timeout(c->reducer, cfg->comm_timeout_s); /* a stalled rank ends the job */
  }
  const size_t grad_bytes = (m->n_params * sizeof(float) + 63) / 64 * 64;
  for (int i = 0, col = 0; !rc && i < n; i++) {
    struct slice *s = &c->slices[i];
    s->eng = c;
    s->col0 = col;
    s->cols = cfg->batch / n + (i < cfg->batch % n);
    col += s->cols;
    const int clf = m->shape.kind == LSTMD_MODEL_CLASSIFY;
    rc = lstmd_fault_due(LSTMD_FAULT_WORKSPACE_OOM, 1, base->rank) /* a test's (fault.h) */
             ? LSTMD_ENOMEM
         : clf ? lstmd_clf_workspace_create(m, cfg->seq_len, s->cols, &s->cws)
               : lstmd_workspace_create(m, cfg->seq_len, s->cols, cfg->dropout, &s->ws);
    if (rc) break;
    c->n_slices = i + 1;
    s->grads = i == 0 ? m->grads : aligned_alloc(64, grad_bytes);
    if (!s->grads) {
      rc = LSTMD_ENOMEM;
      break;
    }
    if (clf) {
      lstmd_clf_workspace_set_grads(s->cws, s->grads);
      continue;
    }
    lstmd_workspace_set_grads(s->ws, s->grads);
    if (cfg->teacher) {
      rc = lstmd_workspace_create_forward(cfg->teacher, cfg->seq_len, s->cols, &s->teacher_ws);
      if (rc) break;
      lstmd_workspace_set_distill(s->ws, lstmd_workspace_output(s->teacher_ws),
                                  cfg->kd_temperature, cfg->kd_alpha);
    }
    lstmd_workspace_on_grads_ready(s->ws, on_grads_ready, s);
  }
  const struct lstmd_model_shape *sh = &m->shape;
  const int plain = sh->kind != LSTMD_MODEL_CLASSIFY && !sh->layer_norm; /* see 5. */
  const int team = plain ? lstmd_recur_team_wanted(c->n_slices, sh->hidden) : 0;
  if (!rc && team < 0) {
    lstmd_errorf("LSTMD_RECUR_TEAM=%s: 0, 1 or auto", getenv("LSTMD_RECUR_TEAM"));
    rc = LSTMD_ECONFIG;
  }
  if (!rc && team > 0) {
    rc = lstmd_recur_team_create(c->n_slices, sh->hidden, &c->team);
    for (int i = 0; !rc && i < c->n_slices; i++)
      rc = lstmd_workspace_set_team(c->slices[i].ws, c->team, i);
  }
  if (rc) {
    cpu_destroy(&c->base);
    return rc;
  }
  lstmd_cpu_set_blas_threads(c->blas_threads);
  *out = &c->base;
  return LSTMD_OK;
}
