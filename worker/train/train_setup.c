/* train_setup.c — building a training run on every rank (see trainer_run.h).
 *
 * 1. Rank 0 alone verifies the dataset checksums (it reads both splits once), after the plan is
 *    agreed and while the others wait for it (check_data, bounded by rank 0's silence: solo.c);
 *    the other ranks only read the headers and, like everything else, compare with rank 0's plan.
 * 2. The plan rank 0 broadcasts is the effective config and the dataset identity. A rank that
 *    differs says how; a max-reduction of the verdicts makes every rank stop with an error at
 *    the same point, so a disagreement never leaves a rank waiting in a collective.
 * 3. Parameters come from rank 0 (initialised or resumed) by broadcast, so the ranks start from
 *    bit-identical weights and stay so (same reduced gradients, same update).
 *
 * Here: the set-up warnings, build, the data check, the grid, the state broadcast, the steps of
 * lstmd_run_setup and lstmd_run_free; the checks of the plan, the teacher, sampling and
 * classification are in train_checks.c, the read of the checkpoint to resume from in
 * train_resume.c. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "kernels/status.h"
#include "worker/engine/device_select.h"
#include "worker/engine/engine.h"
#include "dataset_fit.h"
#include "fault.h"
#include "train_checks.h"
#include "train_resume.h"
#include "trainer_run.h"
#include "val_watch.h"
#include "worker/model/infer.h"
#include "worker/model/prune.h"

/* Rank 0's set-up warning: on stderr now, and kept for train.log (describe_run, trainer_save.c),
 * which opens later: a daemon job's user reads that file (lstmctl logs), not the daemon's
 * stderr. */
void lstmd_run_setup_warn(struct run *r, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  lstmd_errorf("warning: %s", line);
  char *all = NULL;
  if (asprintf(&all, "%swarning: %s\n", r->setup_warnings ? r->setup_warnings : "", line) >= 0) {
    free(r->setup_warnings);
    r->setup_warnings = all;
  }
}

static int build(struct run *r) {
  const struct lstmd_train_config *cfg = r->cfg;
  const char *ln_gpu_why = !cfg->layer_norm ? NULL
                           : cfg->precision == LSTMD_PRECISION_FP16 ||
                                   cfg->precision == LSTMD_PRECISION_BF16
                               ? "runs in fp32 or tf32 only (train.precision)"
                           : cfg->dropout > 0.0f && cfg->layers > 1
                               ? "has no dropout between layers yet (model.dropout)"
                           : cfg->stages > 1     ? "has no pipeline stages yet (model.stages)"
                                                 : NULL;
  /* A config error before any device is touched (so also without a GPU), voted on: ranks whose
   * configs differ (found later, in the plan) must all reach the collective device choice. */
  const int ln_refused = ln_gpu_why && cfg->device == LSTMD_DEVICE_CUDA;
  if (ln_refused)
    lstmd_errorf("model.layer_norm: the layer-normalised LSTM on the GPU %s (train.device=cuda)",
                 ln_gpu_why);
  LSTMD_TRY(lstmd_comm_agree(r->comm, ln_refused ? LSTMD_ECONFIG : LSTMD_OK, NULL));
  /* Before anything a rank can fail at alone: the choice is collective (device_select.h). */
  int backend, gpu;
  LSTMD_TRY(lstmd_device_choose(cfg->device, r->comm, &backend, &gpu));
  if (backend == LSTMD_DEVICE_CPU && cfg->device == LSTMD_DEVICE_CPU &&
      cfg->precision != LSTMD_PRECISION_FP32) {
    lstmd_errorf("train.precision: the CPU backend trains in fp32 only");
    return LSTMD_ECONFIG;
  }
  if (backend == LSTMD_DEVICE_CPU && cfg->precision != LSTMD_PRECISION_FP32 && r->rank == 0)
    lstmd_run_setup_warn(
        r, "train.precision applies to the GPU backend; the CPU backend trains in fp32");
  /* Keys that are valid but change nothing (prune.* without a target, distill.* without a
   * teacher): lstmd train and lstmctl submit note them (lstmd_config_inert_keys, config.h). */
  if (r->rank == 0 && cfg->prune.target_sparsity > 0.0f) {
    /* where the run's last mask update (steps count from 1) leaves the sparsity, when that is
     * short of the target: the ramp ends after the run, or no update falls within it at all
     * (prune.frequency past end_step - begin_step, with begin_step 0 never a step) */
    const struct lstmd_prune_config *pc = &cfg->prune;
    const long until = pc->end_step < cfg->steps ? pc->end_step : cfg->steps;
    long last = until < pc->begin_step ? 0 /* none */
                : pc->begin_step + (until - pc->begin_step) / pc->frequency * pc->frequency;
    if (last >= 1 && !lstmd_prune_due(pc, last)) last = 0;
    if (pc->end_step > cfg->steps && last < 1)
      lstmd_run_setup_warn(
          r, "prune.end_step %ld is past train.steps %ld, and no mask update falls "
          "within the run: nothing is pruned (raise train.steps or lower prune.end_step "
          "and prune.begin_step)", pc->end_step, cfg->steps);
    else if (pc->end_step > cfg->steps)
      lstmd_run_setup_warn(
          r, "prune.end_step %ld is past train.steps %ld: the last mask update, "
          "after step %ld, leaves sparsity %.4f, not prune.target_sparsity %.4g (raise "
          "train.steps or lower prune.end_step)", pc->end_step, cfg->steps, last,
          lstmd_prune_sparsity_at(pc, last), pc->target_sparsity);
    else if (last < 1 || lstmd_prune_sparsity_at(pc, last) <= 0.0)
      lstmd_run_setup_warn(
          r, "no mask update of the run prunes anything: updates come after steps "
          "prune.begin_step %ld + k·prune.frequency %ld up to prune.end_step %ld (steps "
          "count from 1; the update at begin_step has sparsity 0): nothing is pruned "
          "(lower prune.frequency to at most prune.end_step − prune.begin_step)",
          pc->begin_step, pc->frequency, pc->end_step);
    else if (lstmd_prune_sparsity_at(pc, last) < pc->target_sparsity)
      lstmd_run_setup_warn(
          r, "the last mask update, after step %ld, leaves sparsity %.4f, not "
          "prune.target_sparsity %.4g: prune.end_step − prune.begin_step (%ld) is not a "
          "multiple of prune.frequency %ld", last, lstmd_prune_sparsity_at(pc, last),
          pc->target_sparsity, pc->end_step - pc->begin_step, pc->frequency);
  }
  if (r->rank == 0 && cfg->dropout > 0.0f && cfg->layers == 1)
    lstmd_run_setup_warn(
        r, "model.dropout acts between LSTM layers; with model.layers = 1 it "
        "changes nothing");
  /* The layer-normalised LSTM's GPU path (kernels/cuda/lstm_ln_cuda.h) is fp32/tf32 only, with
   * no dropout and no pipeline stages yet. */
  if (ln_gpu_why && backend == LSTMD_DEVICE_CUDA) {
    if (r->rank == 0)
      lstmd_errorf("device auto: model.layer_norm on the GPU %s; using the CPU backend", ln_gpu_why);
    backend = LSTMD_DEVICE_CPU;
  }
  /* data.window_norm=mean scales each window: the GPU engine's validation loss would be in the
   * scaled units, not the forecast's (lstmd_evaluate undoes the scale on the CPU). */
  if (cfg->window_norm == LSTMD_WNORM_MEAN && backend == LSTMD_DEVICE_CUDA) {
    if (cfg->device == LSTMD_DEVICE_CUDA) {
      lstmd_errorf("data.window_norm: mean runs on the CPU backend only so far "
                   "(train.device=cuda); none and last run on both");
      return LSTMD_ECONFIG;
    }
    if (r->rank == 0)
      lstmd_errorf("device auto: data.window_norm=mean runs on the CPU backend only so far; "
                   "using it");
    backend = LSTMD_DEVICE_CPU;
  }
  /* The balanced split of the stages is the CPU pipeline engine's (engine_pipe.c; cuda is
   * refused by the config check): device auto trains it on the CPU. */
  if (cfg->stage_split == LSTMD_SPLIT_BALANCED && cfg->stages > 1 && backend == LSTMD_DEVICE_CUDA) {
    if (r->rank == 0)
      lstmd_errorf("device auto: model.stage_split=balanced runs on the CPU pipeline engine only "
                   "so far; using the CPU backend");
    backend = LSTMD_DEVICE_CPU;
  }
  /* headers only: rank 0 reads the payloads later, alone (check_data) */
  LSTMD_TRY(lstmd_dataset_open_dir(cfg->data_path, &r->train, &r->val, 0));
  const int classify = r->train.info.kind == LSTMD_DATASET_CLASSIFY;
  char unfit[1400]; /* the same header on every rank: every rank returns the same, rank 0 says why */
  if (lstmd_dataset_fit(cfg, &r->train.info, cfg->data_path, unfit, sizeof unfit)) {
    if (r->rank == 0) lstmd_errorf("%s", unfit);
    return LSTMD_ECONFIG;
  }
  /* The GPU classifier (kernels/cuda/classify_cuda.h) reads token ids through an embedding;
   * numeric series classifiers run on the CPU backend. */
  if (classify && r->train.info.numeric && backend == LSTMD_DEVICE_CUDA) {
    if (cfg->device == LSTMD_DEVICE_CUDA) {
      if (r->rank == 0)
        lstmd_errorf("train.device: %s is a series classify dataset: series classifiers run on "
                     "the CPU backend only so far (cpu or auto)", cfg->data_path);
      return LSTMD_ECONFIG;
    }
    if (r->rank == 0)
      lstmd_errorf("device auto: series classifiers run on the CPU backend only so far; using it");
    backend = LSTMD_DEVICE_CPU;
  }
  if (r->train.info.kind == LSTMD_DATASET_SERIES) /* text ignores both keys */
    r->train.tf = r->val.tf = (struct lstmd_series_tf){cfg->series_target, cfg->window_norm};
  const struct lstmd_dataset_info *info = &r->train.info;
  struct lstmd_model_shape shape = {.hidden = cfg->hidden, .layers = cfg->layers,
                                    .layer_norm = cfg->layer_norm};
  /* A classifier's window is one sequence, padded to the split's longest (data.seq_len unused) */
  const int T = classify ? info->width : cfg->seq_len;
  if (classify) {
    shape.kind = LSTMD_MODEL_CLASSIFY; /* text: ids through an embedding; series: 1 value a step */
    shape.vocab = info->vocab_size;
    shape.embed = info->numeric ? 0 : cfg->embed;
    shape.width = info->numeric ? 1 : 0;
    shape.classes = info->horizon;
    shape.bidirectional = cfg->bidirectional;
    shape.pool = cfg->pool;
  } else if (info->kind == LSTMD_DATASET_TEXT) {
    shape.kind = LSTMD_MODEL_TEXT;
    shape.vocab = info->vocab_size;
    shape.embed = cfg->embed;
  } else {
    shape.kind = LSTMD_MODEL_SERIES;
    shape.width = info->width;
    shape.horizon = info->horizon;
  }
  r->data_meta = (struct lstmd_data_meta){*info, T, r->global_batch, r->train.tf};
  LSTMD_TRY(lstmd_model_create(&shape, &r->model));
  if (cfg->distill_teacher[0]) LSTMD_TRY(lstmd_run_load_teacher(r));
  if (cfg->prune.target_sparsity > 0.0f) {
    LSTMD_TRY(lstmd_prune_create(&cfg->prune, r->model, &r->prune));
    r->progress.prune = r->prune;
  }
  struct lstmd_rng init_rng;
  lstmd_rng_seed(&init_rng, cfg->seed, 1);
  lstmd_model_init_params(r->model, &init_rng);
  struct lstmd_optim_config oc = cfg->optim;
  oc.total_steps = cfg->steps;
  LSTMD_TRY(lstmd_optim_create(&oc, r->model->n_params, &r->optim));
  /* every stage of replica d reads the windows of data-parallel rank d of D */
  LSTMD_TRY(lstmd_batcher_create(&r->train, cfg->order, T, cfg->batch_size, r->replica,
                                 r->replicas, cfg->seed, &r->batcher));
  /* The one hop from the config table to the engine (engine.h). */
  struct lstmd_engine_config ec = {
      .seq_len = T, .batch = cfg->batch_size,
      .carry_state = cfg->order == LSTMD_ORDER_STREAM, .dropout = cfg->dropout,
      .seed = cfg->seed, .bucket_mb = cfg->bucket_mb, .comm_timeout_s = cfg->comm_timeout_s,
      .threads = cfg->threads, .precision = cfg->precision, .gpu_device = gpu,
      .stages = cfg->stages,
      .stage_split = lstmd_stage_split_resolve(cfg->stage_split, backend == LSTMD_DEVICE_CPU,
                                               cfg->layer_norm),
      .schedule = cfg->pipe_schedule,
      .micro_batches = cfg->micro_batches,
      .time_chunks = lstmd_effective_time_chunks(cfg), .windows = cfg->grad_accum,
      .teacher = r->teacher, .kd_temperature = cfg->distill_temperature,
      .kd_alpha = cfg->distill_alpha};
  char why[256];
  if (lstmd_stage_layer_counts(cfg->stage_layers, cfg->stages, cfg->layers, ec.stage_layers, why,
                               sizeof why)) { /* the config check refused this already */
    lstmd_errorf("%s", why);
    return LSTMD_ECONFIG;
  }
  /* the GPU engine hands a config with stages to its pipeline twin (engine_pipe_gpu.c) */
  const enum lstmd_engine_kind kind = backend == LSTMD_DEVICE_CUDA ? LSTMD_ENGINE_GPU
                                      : cfg->stages > 1             ? LSTMD_ENGINE_PIPE
                                                                    : LSTMD_ENGINE_CPU;
  LSTMD_TRY(lstmd_prefetch_create(r->batcher, &r->train, T, cfg->batch_size,
                                  &r->prefetch));
  const int rc = lstmd_engine_create(kind, r->model, &ec, r->comm, &r->engine);
  if (rc == LSTMD_ENOMEM) /* the other failures say why where they happen */
    lstmd_errorf("rank %d: out of memory for the training workspaces (data.batch_size %d x "
                 "data.seq_len %d, model.hidden %d, model.layers %d)",
                 r->rank, cfg->batch_size, cfg->seq_len, cfg->hidden, cfg->layers);
  if (rc) return rc;
  r->progress.state_batch = r->global_batch;
  lstmd_val_watch_init(&r->progress.watch);
  if (cfg->order == LSTMD_ORDER_STREAM) {
    size_t n = (size_t)cfg->layers * r->global_batch * cfg->hidden;
    r->progress.state_h = calloc(n, sizeof(float));
    r->progress.state_c = calloc(n, sizeof(float));
    if (!r->progress.state_h || !r->progress.state_c) return LSTMD_ENOMEM;
  }
  r->has_val = lstmd_window_count(&r->val, T) > 0;
  /* As train.eval_every = 0 is refused with these (config_check.c), so is a split with nothing to
   * evaluate: the same on every rank (same dataset header); rank 0 says why. */
  if (!r->has_val && (cfg->early_stop_patience > 0 || cfg->optim.schedule == LSTMD_SCHEDULE_PLATEAU)) {
    /* a classify split is sequences, not windows: data.seq_len means nothing to it */
    char why[96];
    if (r->val.info.kind == LSTMD_DATASET_CLASSIFY)
      snprintf(why, sizeof why, "it holds no sequence");
    else
      snprintf(why, sizeof why, "no whole window of data.seq_len %d", T);
    if (r->rank == 0)
      lstmd_errorf("%s: needs evaluations during the run, but the validation split of %s is too "
                   "short to evaluate (%s); prepare it with a larger --val-fraction",
                   cfg->early_stop_patience > 0 ? "train.early_stop_patience" : "optim.schedule",
                   cfg->data_path, why);
    return LSTMD_ECONFIG;
  }
  return LSTMD_OK;
}

/* Rank 0, alone (lstmd_comm_solo's work: the others' wait is bounded by its silence, not by the
 * size of the data): the payload checksums of both splits (one full read of each), and for a
 * series the naive forecasts' validation scores, which do not change during the run. */
static int check_data(void *ctx) {
  struct run *r = ctx;
  LSTMD_TRY(lstmd_dataset_verify(&r->train));
  LSTMD_TRY(lstmd_dataset_verify(&r->val));
  if (!r->has_val || r->train.info.kind != LSTMD_DATASET_SERIES) return LSTMD_OK;
  float *z = NULL;
  LSTMD_TRY(lstmd_series_read_normalised(&r->val, &z));
  int rc = lstmd_series_baseline_mse(&r->val, z, r->cfg->seq_len, &r->baselines.mse_persistence,
                                     &r->baselines.mse_seasonal);
  free(z);
  LSTMD_TRY(rc);
  r->baselines.season = r->val.info.season;
  r->has_baselines = 1;
  return LSTMD_OK;
}


/* Sends rank 0's parameters, optimizer state and progress to every rank. */
static int share_state(struct run *r) {
  struct lstmd_comm *c = r->comm;
  const size_t n = r->model->n_params * sizeof(float);
  LSTMD_TRY(lstmd_comm_bcast(c, r->model->params, n, 0));
  if (!r->resumed) return LSTMD_OK;
  LSTMD_TRY(lstmd_comm_bcast(c, r->optim->m, n, 0));
  if (r->optim->v) LSTMD_TRY(lstmd_comm_bcast(c, r->optim->v, n, 0));
  int64_t counters[4] = {r->optim->step, r->progress.step, (int64_t)r->progress.cursor.epoch,
                         (int64_t)r->progress.cursor.position};
  LSTMD_TRY(lstmd_comm_bcast(c, counters, sizeof counters, 0));
  r->optim->step = counters[0];
  r->progress.step = counters[1];
  r->progress.cursor.epoch = (uint64_t)counters[2];
  r->progress.cursor.position = (uint64_t)counters[3];
  LSTMD_TRY(lstmd_comm_bcast(c, &r->progress.watch, sizeof r->progress.watch, 0));
  for (int i = 0; r->prune && i < r->prune->n; i++)
    LSTMD_TRY(lstmd_comm_bcast(c, r->prune->mask[i],
                               r->model->tensors[r->prune->tensor[i]].count, 0));
  if (r->progress.state_h) {
    const size_t s = (size_t)r->cfg->layers * r->global_batch * r->cfg->hidden * sizeof(float);
    LSTMD_TRY(lstmd_comm_bcast(c, r->progress.state_h, s, 0));
    LSTMD_TRY(lstmd_comm_bcast(c, r->progress.state_c, s, 0));
  }
  return LSTMD_OK;
}

/* The grid: world = replicas × model.stages. Voted before anything else: a rank whose config
 * differs (found later, by lstmd_run_check_plan) may be the only one to fail here, and must not
 * skip the collectives of build() that the others make (they waited for ever). The lowest
 * failing rank says why (rank 0 when every rank has the same config). */
static int plan_grid(struct run *r) {
  const int S = r->cfg->stages;
  r->replicas = r->world / S;
  r->replica = r->rank / S;
  r->global_batch = r->cfg->batch_size * r->replicas;
  const int mine = r->world % S == 0 ? LSTMD_OK : LSTMD_ECONFIG;
  int failed = -1;
  const int rc = lstmd_comm_agree(r->comm, mine, &failed);
  if (mine && failed == r->rank)
    lstmd_errorf("model.stages: %d rank%s cannot be cut into pipelines of %d stages (the number "
                 "of ranks must be a multiple of model.stages)", r->world, r->world == 1 ? "" : "s",
                 S);
  if (rc && !mine && failed != r->rank && rc != LSTMD_ECOMM && r->rank == 0)
    lstmd_errorf("rank %d's model.stages does not fit %d ranks; every rank must run the same "
                 "config", failed, r->world);
  return rc;
}

int lstmd_run_setup(struct run *r, const char *resume_path) {
  if (lstmd_fault_due(LSTMD_FAULT_SETUP_FREEZE, 1, r->rank)) raise(SIGSTOP); /* a test's (fault.h) */
  int rc = plan_grid(r); /* voted */
  int failed = -1;
  if (!rc) {
    /* Every rank opens the dataset and the teacher, so one bad path was printed once per rank:
     * the ranks hold their lines, and rank 0 prints each once (lstmd_comm_messages_once). */
    char held[4096]; /* the same size on every rank: it is gathered whole */
    struct lstmd_errors_held outer;
    if (r->world > 1) lstmd_errors_capture_begin(held, sizeof held, &outer);
    const int built = build(r);
    if (r->world > 1) {
      lstmd_errors_capture_end(&outer);
      rc = lstmd_comm_messages_once(r->comm, built, held, sizeof held, 1, &failed);
    } else {
      rc = built;
    }
    /* the failing rank said why; rank 0 says why every rank stops (a rank short of memory
     * alone ended the others with no word of it) */
    if (rc && !built && rc != LSTMD_ECOMM && r->rank == 0)
      lstmd_errorf("stopping every rank: rank %d could not set up its training (%s)", failed,
                   lstmd_strerror(rc));
  }
  if (!rc && r->world > 1) rc = lstmd_run_check_plan(r);
  if (!rc)
    rc = lstmd_comm_solo(r->comm, 0, check_data, r, LSTMD_OK, NULL, r->cfg->comm_timeout_s,
                         "rank 0's check of the dataset");
  if (rc) return rc;
  /* Rank 0 decides whether this is a resume: the others may not see the same files. */
  int resume_flag = r->rank == 0 && resume_path != NULL;
  if (r->world > 1) LSTMD_TRY(lstmd_comm_bcast(r->comm, &resume_flag, sizeof resume_flag, 0));
  r->resumed = resume_flag;
  if (resume_flag) { /* rank 0 reads while the others wait (bounded by its silence, solo.c) */
    struct load_work w = {r, resume_path};
    rc = lstmd_comm_solo(r->comm, 0, lstmd_run_load_work, &w, LSTMD_OK, NULL,
                         r->cfg->comm_timeout_s, "rank 0's read of the checkpoint to resume from");
  }
  if (!rc && r->world > 1) rc = share_state(r);
  int local = LSTMD_OK;
  if (!rc && r->resumed) {
    local = lstmd_batcher_set_cursor(r->batcher, r->progress.cursor);
    if (local && r->rank == 0)
      lstmd_errorf("%s: its data cursor does not fit this run (a damaged checkpoint?)", resume_path);
  }
  /* The plateau schedule's cuts so far (1 without any, or with another schedule: lr unchanged) */
  if (!rc && r->resumed && r->cfg->optim.schedule == LSTMD_SCHEDULE_PLATEAU)
    r->optim->cfg.lr = (float)((double)r->cfg->optim.lr * r->progress.watch.lr_scale);
  if (!rc && !local) local = lstmd_prefetch_start(r->prefetch); /* after the cursor is set */
  if (!rc) rc = lstmd_comm_agree(r->comm, local, NULL);
  if (!rc) /* collective; a failure of one rank (e.g. device memory) is then voted on */
    rc = lstmd_comm_agree(r->comm, r->engine->ops->start(r->engine, r->optim, &r->progress), NULL);
  if (!rc && r->resumed && r->progress.state_h) /* after start (engine.h) */
    rc = lstmd_comm_agree(r->comm, r->engine->ops->set_state(r->engine, r->progress.state_h,
                                                             r->progress.state_c), NULL);
  return rc;
}

void lstmd_run_free(struct run *r) {
  lstmd_metrics_close(&r->metrics);
  if (r->samples) fclose(r->samples);
  if (r->run_lock >= 0) close(r->run_lock); /* the last of the run dir's writers above */
  r->run_lock = -1;
  lstmd_engine_destroy(r->engine);
  lstmd_prefetch_destroy(r->prefetch);
  lstmd_batcher_destroy(r->batcher);
  lstmd_optim_destroy(r->optim);
  lstmd_prune_destroy(r->prune);
  lstmd_model_destroy(r->teacher);
  lstmd_model_destroy(r->model);
  free(r->resume_changes);
  free(r->setup_warnings);
  free(r->progress.state_h);
  free(r->progress.state_c);
  lstmd_dataset_close(&r->train);
  lstmd_dataset_close(&r->val);
}
