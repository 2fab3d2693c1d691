/* engine.h — the step-engine interface: what the training loop (worker/train/) asks of whatever
 * computes a step on this rank, as one table of operations (the way nccl-tests gives each
 * collective a table). An engine owns the compute and the gradient sum over the ranks; the
 * trainer owns the data, the loop, the votes between ranks, logging and checkpoints.
 *
 *   engine_cpu.c  the CPU backend: the batch split into slices on threads, gradients summed
 *                 over slices and then over ranks by the reducer thread while backward runs
 *   engine_gpu.c  one GPU per rank: cuDNN LSTM, cuBLAS head, NCCL (built with the GPU backend);
 *                 also sequence classifiers (cuDNN's bidirectional, variable-length mode)
 *   engine_pipe.c pipeline stages on CPU ranks: a stage's layers, units × time chunks in the
 *                 order of pipe_schedule.c, activations and gradients between stages over p2p
 *   engine_pipe_gpu.c  the same on one GPU per rank: one cuDNN call per chunk (in the module)
 *
 * A new engine is one more table: fill every operation, add it to
 * lstmd_engine_create (engine.c), and the trainer runs it unchanged. Every operation marked
 * "collective" is called on every rank in the same order; the others are rank-local.
 *
 * Object layout: an engine embeds struct lstmd_engine as its first member, so the table's
 * functions receive the base and cast it to their own type (libuv's handles do the same). */
#ifndef LSTMD_ENGINE_H
#define LSTMD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/model/model.h"

struct lstmd_comm;
struct lstmd_dataset;
struct lstmd_optim;
struct lstmd_prune;
struct lstmd_trace;
struct lstmd_train_progress;

enum lstmd_engine_kind { LSTMD_ENGINE_CPU = 0, LSTMD_ENGINE_GPU = 1, LSTMD_ENGINE_PIPE = 2 };

/* model.stage_split: whole layers per pipeline stage, or balanced (pipe_grid.h: stage s − 1
 * also computes the first rows of stage s's first input projection; the CPU pipeline only), or
 * auto, which the trainer resolves before an engine sees it (lstmd_stage_split_resolve). */
enum lstmd_stage_split { LSTMD_SPLIT_LAYERS = 0, LSTMD_SPLIT_BALANCED = 1, LSTMD_SPLIT_AUTO = 2 };

/* auto: balanced where it runs (the CPU backend, without model.layer_norm, whose kernel
 * normalises a step's whole projection), whole layers otherwise; other values as they are. */
static inline int lstmd_stage_split_resolve(int split, int cpu_backend, int layer_norm) {
  if (split != LSTMD_SPLIT_AUTO) return split;
  return cpu_backend && !layer_norm ? LSTMD_SPLIT_BALANCED : LSTMD_SPLIT_LAYERS;
}

/* Everything an engine needs from the run's config, filled in one place (train_setup.c) from
 * struct lstmd_train_config and the device choice. */
struct lstmd_engine_config {
  int seq_len;           /* T: inputs per window */
  int batch;             /* B: windows (columns) of this rank per window of the step */
  int carry_state;       /* stream order: each column's (h, c) carries on to its next window */
  float dropout;         /* on the output of every LSTM layer but the top one */
  uint64_t seed;         /* dropout masks (CPU: with the window counter and global column) */
  double bucket_mb;      /* gradient all-reduce bucket size, MiB */
  double comm_timeout_s; /* GPU: limit on one step's gradient all-reduce */
  int threads;           /* CPU: threads splitting the batch (0: node cores / ranks on it) */
  int precision;         /* enum lstmd_precision; the CPU engine is fp32 only */
  int gpu_device;        /* GPU: this rank's CUDA device */
  /* pipeline stages (engine_pipe.c; stages = 1 for the others) */
  int stages;                              /* S: the world is replicas × S */
  int stage_layers[LSTMD_MAX_LAYERS];      /* layers of each stage */
  int stage_split;                         /* enum lstmd_stage_split (above) */
  int schedule;                            /* enum lstmd_pipe_kind */
  int micro_batches, time_chunks, windows; /* M, K (effective), A = optim.grad_accum */
  /* distillation (the CPU engine only; train_setup.c refuses it elsewhere) */
  struct lstmd_model *teacher;             /* run forward on every window; NULL: off */
  float kd_temperature, kd_alpha;          /* distill.temperature, distill.alpha */
};

/* The trainer's side of a step: where the windows come from. Called exactly `windows` times per
 * step, in order; returns the next window of this rank (valid until the next call) and sets
 * *reset when the carried state must be zeroed before it. Never fails from the engine's view: a
 * window that could not be read comes as zeros, and the trainer votes the step down. */
typedef const struct lstmd_batch *(*lstmd_window_source)(void *ctx, int *reset);

struct lstmd_step_input {
  lstmd_window_source next_window;
  void *ctx;
  int windows;           /* A: windows summed into this step's gradients (optim.grad_accum) */
  uint64_t first_window; /* the run's counter of the step's first window (dropout masks) */
  float grad_scale;      /* gradients are of grad_scale · Σ loss (1 / the global target count) */
  int report;            /* the trainer reads this step's loss and gradient norm (a logged step,
                          * or the run's last); an engine may defer them on the others */
};

struct lstmd_step_result {
  double loss_sum;    /* Σ loss over this rank's targets of the step, and of the earlier steps
                       * whose loss was pending */
  int loss_pending;   /* 1: this step's loss stays on the device (loss_sum 0) until a step with
                       * `report` set returns it (the GPU: no host wait in unlogged steps) */
  int comm_untimed;   /* 1: comm_wait_s was not measured this step (the GPU's unlogged steps) */
  double comm_wait_s; /* time spent waiting for the gradient sum after backward ended */
  double busy_s;      /* time spent computing (forward, backward); 0: not measured */
  double p2p_wait_s;  /* pipeline: time spent waiting for the neighbour stages */
};

struct lstmd_optim_outcome {
  double grad_norm;   /* before clipping; NAN when not read (optim_step without report) */
  long bad_steps_ago; /* LSTMD_ENONFINITE: how many steps before this one the norm was first
                       * non-finite (0: this one) */
};

struct lstmd_engine;

struct lstmd_engine_ops {
  const char *name;
  /* Frees everything; a half-built engine is fine. */
  void (*destroy)(struct lstmd_engine *e);
  /* Collective, once after set-up and resume, before the first step: takes the host model's
   * parameters, o's moments and p's fp16 loss scale (o and p may be NULL). */
  int (*start)(struct lstmd_engine *e, const struct lstmd_optim *o,
               const struct lstmd_train_progress *p);
  /* Collective: forward and backward of the step's windows; on return every rank holds the
   * gradients summed over all ranks' windows, ready for optim_step. */
  int (*step)(struct lstmd_engine *e, const struct lstmd_step_input *in,
              struct lstmd_step_result *out);
  /* Clipping to o->cfg.clip_norm by the global norm and one update of o. 0, also when an fp16
   * overflow skipped the update (o->step unchanged); LSTMD_ENONFINITE for a non-finite norm
   * otherwise (nothing updated from then on); or another failure. report: as in the step's
   * input; without it an engine may decide on its device and tell the host later (the GPU:
   * out->grad_norm NAN, o->step brought up to date at the next report or sync_host, and a
   * non-finite norm found then, out->bad_steps_ago steps before). */
  int (*optim_step)(struct lstmd_engine *e, struct lstmd_optim *o, int report,
                    struct lstmd_optim_outcome *out);
  /* Collective: rank 0's host model, o and p (either may be NULL) get the current parameters,
   * moments and loss scale, for a checkpoint or a check. */
  int (*sync_host)(struct lstmd_engine *e, struct lstmd_optim *o, struct lstmd_train_progress *p);
  /* Collective: the validation loss as lstmd_evaluate (infer.h) defines it, on rank 0 (the
   * other ranks leave *mean_loss, *tokens and *accuracy alone: they return 0 at once, or, on
   * every engine but for classifiers, after scoring their share of the windows). A
   * classifier also sets *accuracy (the fraction of sequences whose most probable class is the
   * label; *tokens counts sequences); other models leave it alone. */
  int (*evaluate)(struct lstmd_engine *e, const struct lstmd_dataset *val, double *mean_loss,
                  uint64_t *tokens, double *accuracy);
  /* Collective: the carried state of every rank as [L, global batch, H] into h and c on
   * rank 0 (the global batch: data-parallel replicas × B). */
  int (*gather_state)(struct lstmd_engine *e, float *h, float *c);
  /* This rank's part of a global [L, global batch, H] state (the same arrays on every rank).
   * After start. */
  int (*set_state)(struct lstmd_engine *e, const float *h, const float *c);
  /* fp16: the current loss scale; 0 for the other precisions. */
  double (*loss_scale)(const struct lstmd_engine *e);
  /* Pruning (worker/model/prune.h) after every optim_step, on every rank, for an engine whose
   * parameters do not live in the host model: what lstmd_prune_after_step does to the host
   * parameters, done to the engine's (the masks applied; at a pruning step recomputed on the
   * host from this rank's parameters, which every rank holds identical, then applied). Sets
   * *recomputed. NULL: the engine trains the host model's parameters, which the trainer masks. */
  int (*prune)(struct lstmd_engine *e, struct lstmd_prune *p, long step, int *recomputed);
  /* One line for the run's start: device, threads or precision, algorithms, gradient transport. */
  void (*describe)(const struct lstmd_engine *e, char *buf, size_t n);
};

/* The part every engine shares; engines embed it first. */
struct lstmd_engine {
  const struct lstmd_engine_ops *ops;
  struct lstmd_model *model; /* the host model (outlives the engine) */
  struct lstmd_engine_config cfg;
  struct lstmd_comm *comm; /* NULL: one rank */
  int rank, world;
  struct lstmd_trace *trace; /* the step timeline, or NULL */
};

/* Builds the engine of the given kind (not collective). A kind this build lacks is
 * LSTMD_EUNSUPPORTED with a message. Free with e->ops->destroy (lstmd_engine_destroy). */
int lstmd_engine_create(enum lstmd_engine_kind kind, struct lstmd_model *m,
                        const struct lstmd_engine_config *cfg, struct lstmd_comm *comm,
                        struct lstmd_engine **out);
/* NULL is fine. */
void lstmd_engine_destroy(struct lstmd_engine *e);

/* ---- for engine implementations ---- */

/* Each engine's constructor: base is filled in (all but ops); returns the engine with its
 * ops set, or a status after printing why. */
int lstmd_engine_cpu_create(const struct lstmd_engine *base, struct lstmd_engine **out);
/* In the GPU module (gpu_backend.h); lstmd_engine_create reaches it through the module's table. */
int lstmd_engine_gpu_create(const struct lstmd_engine *base, struct lstmd_engine **out);
int lstmd_engine_pipe_create(const struct lstmd_engine *base, struct lstmd_engine **out);
/* In the GPU module too: lstmd_engine_gpu_create hands it a config with stages > 1. */
int lstmd_engine_pipe_gpu_create(const struct lstmd_engine *base, struct lstmd_engine **out);

/* Threads of this rank for an engine on the CPU: cfg.threads, or when 0 this node's cores
 * shared among its ranks (at least 1). */
int lstmd_engine_cpu_threads(const struct lstmd_engine *e);
/* The gradient all-reduce bucket (train.bucket_mb) in floats, within [1024, 2^30]. */
size_t lstmd_engine_bucket_floats(const struct lstmd_engine_config *cfg);

/* ---- helpers for data-parallel engines (every rank holds the whole model) ---- */

/* The body of step() for an engine that sums windows one by one: calls window() for each of
 * in->windows windows (first: gradients start from zero; last: the step's gradients are then
 * summed over the ranks), resetting the state through reset() when the source says so. */
typedef int (*lstmd_window_fn)(struct lstmd_engine *e, const struct lstmd_batch *batch,
                               float grad_scale, uint64_t window, int first, int last,
                               double *loss_sum, double *comm_wait_s);
int lstmd_engine_run_windows(struct lstmd_engine *e, const struct lstmd_step_input *in,
                             struct lstmd_step_result *out, lstmd_window_fn window,
                             void (*reset)(struct lstmd_engine *e));
/* lstmd_eval_share's combine (worker/model/infer.h) over a data-parallel engine's ranks (ctx: a
 * struct lstmd_eval_combine): a vote on `status`, then sums[n] summed over the world in place.
 * Every rank calls it, failed or not; an error on any rank is every rank's result. The waits
 * are bounded: every rank scores an equal share of the chunks (give or take one), so a rank
 * still not there train.comm_timeout_s plus twice this rank's own scoring time after it began
 * is stopped or hung, and the job ends naming the wait (lstmd_comm_agree_within). */
struct lstmd_eval_combine {
  struct lstmd_engine *e;
  double began; /* lstmd_now_s() when this rank began scoring */
};
int lstmd_engine_combine_eval_sums(void *ctx, double *sums, int n, int status);
/* evaluate's text and series part on the CPU with model m, every rank scoring its share of the
 * windows (lstmd_evaluate_shared over the engine's ranks, the engine's T and B); rank 0 gets
 * *mean_loss and *tokens, the others leave them alone. Collective. */
int lstmd_engine_evaluate_shared(struct lstmd_engine *e, struct lstmd_model *m,
                                 const struct lstmd_dataset *val, double *mean_loss,
                                 uint64_t *tokens);
/* evaluate for an engine whose ranks hold a part of the parameters each (the pipeline engines),
 * once they are whole in rank 0's host model (`status`: this rank's part of gathering them, 0
 * or an error, voted on first): rank 0 broadcasts them, every rank scores its share of the
 * windows with the whole model on `threads` BLAS threads (<= 0: as set) as lstmd_evaluate_shared
 * does, and rank 0 gets the loss. The other ranks' own parameters are left as they were. */
int lstmd_engine_evaluate_everywhere(struct lstmd_engine *e, const struct lstmd_dataset *val,
                                     int threads, int status, double *mean_loss,
                                     uint64_t *tokens);
/* gather_state from this rank's own [L, B, H] state `mine` (2·L·B·H floats, h then c). */
int lstmd_engine_gather_dp_state(struct lstmd_engine *e, const float *mine, float *h, float *c);
/* This rank's [L, B, H] columns of a global [L, N·B, H] state, into `mine` (h then c). */
void lstmd_engine_slice_dp_state(const struct lstmd_engine *e, const float *h, const float *c,
                                 float *mine);

#endif
