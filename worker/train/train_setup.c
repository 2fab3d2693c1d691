/* train_setup.c — building a training run on every rank (see trainer_run.h).
 *
 * 1. Rank 0 alone verifies the dataset checksums (it reads both splits once), after the plan is
 *    agreed and while the others wait for it (check_data, bounded by rank 0's silence: solo.c);
 *    the other ranks only read the headers and, like everything else, compare with rank 0's plan.
 * 2. The plan rank 0 broadcasts is the effective config and the dataset identity. A rank that
 *    differs says how; a max-reduction of the verdicts makes every rank stop with an error at
 *    the same point, so a disagreement never leaves a rank waiting in a collective.
 * 3. Parameters come from rank 0 (initialised or resumed) by broadcast, so the ranks start from
 *    bit-identical weights and stay so (same reduced gradients, same update). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "comm/comm.h"
#include "kernels/status.h"
#include "worker/engine/device_select.h"
#include "worker/engine/engine.h"
#include "fault.h"
#include "resume_changes.h"
#include "trainer_run.h"
#include "val_watch.h"
#include "worker/model/infer.h"
#include "worker/model/prune.h"

static char *dataset_identity(const struct run *r) {
  char *s;
  if (asprintf(&s, "pair %016llx train %08x/%llu val %08x/%llu",
               (unsigned long long)r->train.info.pair_id, r->train.info.payload_crc32c,
               (unsigned long long)r->train.info.count, r->val.info.payload_crc32c,
               (unsigned long long)r->val.info.count) < 0)
    return NULL;
  return s;
}

/* Rank 0's config + dataset identity against this rank's (see 2. above). Each allocation is
 * voted before the broadcast that needs it: a rank that returned alone would leave the others
 * in that broadcast. */
static int check_plan(struct run *r) {
  char *mine = dataset_identity(r), *plan = NULL;
  int rc = lstmd_comm_agree_alloc(r->comm, mine != NULL, 0, "the dataset's identity");
  const size_t cfg_len = strlen(r->config_json), id_len = mine ? strlen(mine) : 0;
  uint64_t lens[2] = {cfg_len, id_len};
  if (!rc) rc = lstmd_comm_bcast(r->comm, lens, sizeof lens, 0);
  if (!rc) plan = malloc(lens[0] + lens[1] + 2);
  if (!rc) rc = lstmd_comm_agree_alloc(r->comm, plan != NULL, lens[0] + lens[1] + 2,
                                       "rank 0's config and dataset identity");
  if (!rc && r->rank == 0) {
    memcpy(plan, r->config_json, cfg_len + 1);
    memcpy(plan + cfg_len + 1, mine, id_len + 1);
  }
  if (!rc) rc = lstmd_comm_bcast(r->comm, plan, lens[0] + lens[1] + 2, 0);
  int differs = 0;
  if (!rc && strcmp(plan, r->config_json) != 0) {
    char *how = lstmd_config_differences(plan, r->config_json); /* NULL: say only that */
    lstmd_errorf("rank %d (%s): its config differs from rank 0's%s%s%s; every rank must run the "
                 "same command with the same config file", r->rank, lstmd_comm_host(r->comm),
                 how ? " (" : "", how ? how : "", how ? ")" : "");
    free(how);
    differs = 1;
  }
  if (!rc && strcmp(plan + lens[0] + 1, mine) != 0) {
    lstmd_errorf("rank %d (%s): dataset %s differs from rank 0's (%s here, %s on rank 0)",
                 r->rank, lstmd_comm_host(r->comm), r->cfg->data_path, mine, plan + lens[0] + 1);
    differs = 1;
  }
  free(plan);
  free(mine);
  if (rc) return rc;
  rc = lstmd_comm_agree(r->comm, differs ? LSTMD_ECONFIG : LSTMD_OK, NULL);
  if (rc && r->rank == 0)
    lstmd_errorf("the ranks disagree on the config or the dataset (see the messages above); "
                 "stopping every rank");
  return rc;
}

/* The teacher must see the student's inputs and predict its outputs: the same vocabulary (text)
 * or the same input columns, normalisation and horizon (series). Every rank reads it. */
static int load_teacher(struct run *r) {
  const char *path = r->cfg->distill_teacher;
  struct lstmd_data_meta meta;
  lstmd_last_error_clear();
  /* The loader's last message names the file and the fault: it is printed once, with the key in
   * front (and so is what a daemon job's reason shows); its earlier lines as they were. */
  char held[2048];
  struct lstmd_errors_held outer; /* lstmd_run_setup's, on a launcher's ranks */
  lstmd_errors_capture_begin(held, sizeof held, &outer);
  const int loaded = lstmd_checkpoint_load_model(path, &r->teacher, &meta);
  lstmd_errors_capture_end(&outer);
  size_t before = strlen(held);
  const char *said = path; /* the last held line, past its "lstmd: " */
  if (loaded && before && held[before - 1] == '\n') {
    held[before - 1] = '\0';
    const char *nl = strrchr(held, '\n');
    before = nl ? (size_t)(nl - held) + 1 : 0;
    said = held + before;
    if (!strncmp(said, "lstmd: ", 7)) said += 7;
  }
  const char kept = held[before];
  held[before] = '\0';
  lstmd_errors_put(held); /* the earlier lines, where lstmd_errorf's go */
  held[before] = kept;
  if (loaded) {
    lstmd_errorf("distill.teacher: %s", said);
    return loaded;
  }
  const struct lstmd_dataset_info *t = &meta.info, *d = &r->train.info;
  char why[384] = "";
  static const char *const kModel[] = {"?", "a text model", "a series model",
                                       "a classifier (model.kind classify)"};
  static const char *const kData[] = {"?", "text", "series", "a classify split"};
  if (t->kind != d->kind)
    snprintf(why, sizeof why, "it is %s, the dataset is %s", kModel[t->kind & 3],
             kData[d->kind & 3]);
  else if (t->kind == LSTMD_DATASET_TEXT &&
           (t->vocab_size != d->vocab_size || memcmp(t->vocab, d->vocab, (size_t)d->vocab_size)))
    snprintf(why, sizeof why, "its vocabulary (%d bytes) is not the dataset's (%d bytes)",
             t->vocab_size, d->vocab_size);
  else if (t->kind == LSTMD_DATASET_SERIES && t->width != d->width)
    snprintf(why, sizeof why, "it has %d input columns, the dataset %d", t->width, d->width);
  else if (t->kind == LSTMD_DATASET_SERIES && t->horizon != d->horizon)
    snprintf(why, sizeof why, "its horizon is %d, the dataset's %d", t->horizon, d->horizon);
  for (int c = 0; !why[0] && t->kind == LSTMD_DATASET_SERIES && c < d->width; c++)
    if (strcmp(t->names[c], d->names[c]))
      snprintf(why, sizeof why, "its series input %d (%s) is not the dataset's (%s)", c,
               t->names[c], d->names[c]);
  /* Refused, not renormalised: the student learns the dataset's units, and the teacher's
   * forecasts would be in its own (eval and quantize --calibrate, which score one model, use the
   * model's statistics instead: infer.h's lstmd_series_use_model_stats). */
  char stats[256];
  if (!why[0] && t->kind == LSTMD_DATASET_SERIES &&
      lstmd_series_stats_differ(t, d, stats, sizeof stats) >= 0)
    snprintf(why, sizeof why, "its normalisation differs, %s", stats);
  if (!why[0] && t->kind == LSTMD_DATASET_SERIES &&
      (meta.tf.target != r->train.tf.target || meta.tf.window_norm != r->train.tf.window_norm))
    snprintf(why, sizeof why, "it was trained with model.target=%s, data.window_norm=%s, this run "
             "has %s, %s", lstmd_series_target_name(meta.tf.target),
             lstmd_window_norm_name(meta.tf.window_norm),
             lstmd_series_target_name(r->train.tf.target),
             lstmd_window_norm_name(r->train.tf.window_norm));
  if (!why[0]) {
    r->progress.teacher_crc32c =
        lstmd_crc32c(0, r->teacher->params, r->teacher->n_params * sizeof(float)) | 1; /* not 0 */
    return LSTMD_OK;
  }
  lstmd_errorf("distill.teacher: %s: %s; the teacher must share the student's vocabulary, or "
               "its series inputs, normalisation, target and window normalisation", path, why);
  return LSTMD_ECONFIG;
}

/* train.sample_every needs a text model (refused for series: exit 2 naming the key), and the
 * prime's bytes must be in the vocabulary, so that a sample never fails mid-run. Every rank
 * has the same dataset header, so every rank returns the same; rank 0 says why. */
static int check_sampling(const struct run *r) {
  const struct lstmd_train_config *cfg = r->cfg;
  const struct lstmd_dataset_info *info = &r->train.info;
  if (!cfg->sample_every) return LSTMD_OK;
  if (info->kind != LSTMD_DATASET_TEXT) {
    if (r->rank == 0)
      lstmd_errorf("train.sample_every: samples need a text model; %s is a series dataset (set "
                   "train.sample_every = 0; lstmd predict forecasts series)", cfg->data_path);
    return LSTMD_ECONFIG;
  }
  int in_vocab[256] = {0};
  for (int k = 0; k < info->vocab_size; k++) in_vocab[info->vocab[k]] = 1;
  for (const unsigned char *p = (const unsigned char *)cfg->sample_prime; *p; p++)
    if (!in_vocab[*p]) {
      if (r->rank == 0)
        lstmd_errorf("train.sample_prime: byte %ld (0x%02x) is not in the vocabulary of %s",
                     (long)(p - (const unsigned char *)cfg->sample_prime), *p, cfg->data_path);
      return LSTMD_ECONFIG;
    }
  return LSTMD_OK;
}

/* Sequence classification (a classify dataset) trains whole sequences from a zero state on the
 * CPU engine or the GPU engine (model_cuda.h's classify layout; train.device=auto takes the GPU
 * where there is one, like any model): the settings it has no meaning or no path for yet are
 * refused, naming the key. Every rank reads the same header and config, so every rank returns
 * the same; rank 0 says why. */
static int check_classify(const struct run *r) {
  const struct lstmd_train_config *cfg = r->cfg;
  const char *key = NULL, *why = NULL;
  if (cfg->order == LSTMD_ORDER_STREAM)
    key = "data.order", why = "stream order carries state between windows; a sequence is "
                              "classified from a zero state (use shuffle)";
  else if (cfg->stages > 1)
    key = "model.stages", why = "pipeline stages do not run classifiers yet";
  else if (cfg->dropout > 0.0f)
    key = "model.dropout", why = "classifiers have no dropout yet";
  else if (cfg->layer_norm)
    key = "model.layer_norm", why = "the layer-normalised LSTM is not available to classifiers";
  else if (cfg->distill_teacher[0])
    key = "distill.teacher", why = "distillation of classifiers is not available";
  else if (cfg->prune.target_sparsity > 0.0f)
    key = "prune.target_sparsity", why = "pruning of classifiers is not available";
  else if (cfg->sample_every)
    key = "train.sample_every", why = "a classifier does not generate text";
  if (key) {
    if (r->rank == 0)
      lstmd_errorf("%s: %s is a classify dataset: %s", key, cfg->data_path, why);
    return LSTMD_ECONFIG;
  }
  return LSTMD_OK;
}

/* Rank 0's set-up warning: on stderr now, and kept for train.log (describe_run, trainer_save.c),
 * which opens later: a daemon job's user reads that file (lstmctl logs), not the daemon's
 * stderr. */
static void setup_warn(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void setup_warn(struct run *r, const char *fmt, ...) {
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
    setup_warn(r, "train.precision applies to the GPU backend; the CPU backend trains in fp32");
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
      setup_warn(r, "prune.end_step %ld is past train.steps %ld, and no mask update falls "
                 "within the run: nothing is pruned (raise train.steps or lower prune.end_step "
                 "and prune.begin_step)", pc->end_step, cfg->steps);
    else if (pc->end_step > cfg->steps)
      setup_warn(r, "prune.end_step %ld is past train.steps %ld: the last mask update, "
                 "after step %ld, leaves sparsity %.4f, not prune.target_sparsity %.4g (raise "
                 "train.steps or lower prune.end_step)", pc->end_step, cfg->steps, last,
                 lstmd_prune_sparsity_at(pc, last), pc->target_sparsity);
    else if (last < 1 || lstmd_prune_sparsity_at(pc, last) <= 0.0)
      setup_warn(r, "no mask update of the run prunes anything: updates come after steps "
                 "prune.begin_step %ld + k·prune.frequency %ld up to prune.end_step %ld (steps "
                 "count from 1; the update at begin_step has sparsity 0): nothing is pruned "
                 "(lower prune.frequency to at most prune.end_step − prune.begin_step)",
                 pc->begin_step, pc->frequency, pc->end_step);
    else if (lstmd_prune_sparsity_at(pc, last) < pc->target_sparsity)
      setup_warn(r, "the last mask update, after step %ld, leaves sparsity %.4f, not "
                 "prune.target_sparsity %.4g: prune.end_step − prune.begin_step (%ld) is not a "
                 "multiple of prune.frequency %ld", last, lstmd_prune_sparsity_at(pc, last),
                 pc->target_sparsity, pc->end_step - pc->begin_step, pc->frequency);
  }
  if (r->rank == 0 && cfg->dropout > 0.0f && cfg->layers == 1)
    setup_warn(r, "model.dropout acts between LSTM layers; with model.layers = 1 it "
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
  if (classify) LSTMD_TRY(check_classify(r));
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
  if (!classify && (cfg->bidirectional || cfg->pool)) {
    /* A reverse direction reads every step of the window: the next token, or the values a
     * forecast predicts, would be among its inputs. Pooling exists only for classifiers. */
    if (r->rank == 0)
      lstmd_errorf("%s: %s; %s is a %s dataset (sequence classification only)",
                   cfg->bidirectional ? "model.bidirectional" : "model.pool",
                   cfg->bidirectional ? "a bidirectional LSTM would read the future of the "
                                        "targets it predicts"
                                      : "pooling belongs to sequence classifiers",
                   cfg->data_path,
                   r->train.info.kind == LSTMD_DATASET_TEXT ? "text (language model)"
                                                            : "series (forecasting)");
    return LSTMD_ECONFIG;
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
  LSTMD_TRY(check_sampling(r));
  LSTMD_TRY(lstmd_model_create(&shape, &r->model));
  if (cfg->distill_teacher[0]) LSTMD_TRY(load_teacher(r));
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
      .stages = cfg->stages, .stage_split = cfg->stage_split, .schedule = cfg->pipe_schedule,
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

/* Rank 0, resuming: the checkpoint's pruning masks that this run does not prune with (a
 * prune.tensors without them, or prune.target_sparsity 0) are dropped, and the weights they held
 * at zero train again. Said, naming them: a resume that fine-tunes a pruned model means to keep
 * them, and the changed-settings line alone did not say that the sparsity would be lost. */
static void warn_dropped_masks(struct run *r, const char *path) {
  char *json = NULL, *list = NULL;
  size_t len = 0;
  if (lstmd_checkpoint_sparsity_json(path, &json) != LSTMD_OK || !json) return;
  json_t *masks = json_loads(json, 0, NULL);
  FILE *f = json_is_object(masks) ? open_memstream(&list, &len) : NULL;
  int n = 0;
  const char *name;
  json_t *sparsity;
  if (f) json_object_foreach(masks, name, sparsity) {
      int kept = 0;
      for (int i = 0; r->prune && i < r->prune->n; i++)
        kept |= !strcmp(r->model->tensors[r->prune->tensor[i]].name, name);
      if (!kept)
        fprintf(f, "%s%s (sparsity %.4g)", n++ ? ", " : "", name, json_number_value(sparsity));
    }
  if (f) fclose(f);
  if (n)
    setup_warn(r, "%s holds pruning masks of %s, and this run prunes %s%s: those masks are "
               "dropped and the weights they held at zero train again; to keep them zero, resume "
               "with the prune settings that wrote them (past prune.end_step the masks only hold)",
               path, list, r->prune ? "only prune.tensors = " : "nothing (prune.target_sparsity 0)",
               r->prune ? r->cfg->prune.tensors : "");
  free(list);
  json_decref(masks);
  free(json);
}

/* Rank 0: loads the checkpoint after checking that it belongs to this data and batch. */
static int load_checkpoint(struct run *r, const char *path) {
  struct lstmd_model *saved;
  struct lstmd_data_meta meta;
  LSTMD_TRY(lstmd_checkpoint_load_model(path, &saved, &meta));
  lstmd_model_destroy(saved);
  if (meta.info.pair_id != r->train.info.pair_id) {
    lstmd_errorf("%s: was trained on another dataset than %s (re-prepared or replaced); "
                 "the data cursor would not mean the same windows", path, r->cfg->data_path);
    return LSTMD_ECONFIG;
  }
  if (meta.seq_len != r->data_meta.seq_len) {
    lstmd_errorf("%s: was trained with data.seq_len %d, this run has %d; resume needs the same",
                 path, meta.seq_len, r->data_meta.seq_len);
    return LSTMD_ECONFIG;
  }
  if (meta.batch != r->global_batch) {
    lstmd_errorf("%s: was trained with a global batch of %d windows, this run has %d (%d "
                 "data-parallel replica%s × data.batch_size %d); resume needs the same global batch",
                 path, meta.batch, r->global_batch, r->replicas, r->replicas == 1 ? "" : "s",
                 r->cfg->batch_size);
    return LSTMD_ECONFIG;
  }
  /* The transform is part of what the weights mean: a model of levels resumed as a model of
   * changes would start from nonsense. */
  const char *key = meta.tf.target != r->train.tf.target           ? "model.target"
                    : meta.tf.window_norm != r->train.tf.window_norm ? "data.window_norm"
                                                                     : NULL;
  if (key) {
    const int ckpt_target = !strcmp(key, "model.target");
    lstmd_errorf("%s: was trained with %s=%s, this run has %s; resume needs the same", path, key,
                 ckpt_target ? lstmd_series_target_name(meta.tf.target)
                             : lstmd_window_norm_name(meta.tf.window_norm),
                 ckpt_target ? lstmd_series_target_name(r->train.tf.target)
                             : lstmd_window_norm_name(r->train.tf.window_norm));
    return LSTMD_ECONFIG;
  }
  char *was = NULL;
  const uint32_t teacher_now = r->progress.teacher_crc32c;
  LSTMD_TRY(lstmd_checkpoint_load_train(path, r->model, r->optim, &r->progress, &was));
  /* the same distill.teacher path may hold another model now (a teacher trained on meanwhile) */
  if (teacher_now && r->progress.teacher_crc32c && r->progress.teacher_crc32c != teacher_now)
    setup_warn(r, "distill.teacher %s is not the model %s was distilled from (its parameters' "
               "CRC-32C is %08x, the checkpoint's teacher's %08x): the resumed run learns from "
               "other soft targets, and equals a run that never stopped only with the same "
               "teacher", r->cfg->distill_teacher, path, (unsigned)teacher_now,
               (unsigned)r->progress.teacher_crc32c);
  r->progress.teacher_crc32c = teacher_now;
  r->resume_changes = lstmd_resume_changes(was, r->config_json);
  free(was);
  warn_dropped_masks(r, path);
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
 * differs (found later, by check_plan) may be the only one to fail here, and must not skip the
 * collectives of build() that the others make (they waited for ever). The lowest failing rank
 * says why (rank 0 when every rank has the same config). */
static int plan_grid(struct run *r) {
  const int S = r->cfg->stages;
  r->replicas = r->world / S;
  r->replica = r->rank / S;
  r->global_batch = r->cfg->batch_size * r->replicas;
  const int mine = r->world % S == 0 ? LSTMD_OK : LSTMD_ECONFIG;
  int failed = -1;
  const int rc = lstmd_comm_agree(r->comm, mine, &failed);
  if (mine && failed == r->rank)
    lstmd_errorf("model.stages: %d ranks cannot be cut into pipelines of %d stages (the number of "
                 "ranks must be a multiple of model.stages)", r->world, S);
  if (rc && !mine && failed != r->rank && rc != LSTMD_ECOMM && r->rank == 0)
    lstmd_errorf("rank %d's model.stages does not fit %d ranks; every rank must run the same "
                 "config", failed, r->world);
  return rc;
}

struct load_work {
  struct run *r;
  const char *path;
};
static int load_work(void *ctx) {
  const struct load_work *w = ctx;
  const int rc = load_checkpoint(w->r, w->path);
  char older[4200];
  if ((rc == LSTMD_EFORMAT || rc == LSTMD_ECRC || rc == LSTMD_EIO) &&
      lstmd_run_dir_older_checkpoint(w->path, older, sizeof older))
    lstmd_errorf("%s cannot be resumed from; the newest other checkpoint beside it is %s: to go "
                 "on from there, --resume %s", w->path, older, older);
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
  if (!rc && r->world > 1) rc = check_plan(r);
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
    rc = lstmd_comm_solo(r->comm, 0, load_work, &w, LSTMD_OK, NULL, r->cfg->comm_timeout_s,
                         "rank 0's read of the checkpoint to resume from");
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
