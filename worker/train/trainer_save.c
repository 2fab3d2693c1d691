/* trainer_save.c — what rank 0 writes for the training loop (trainer.c): checkpoints (step-<N>,
 * latest, best.safetensors), the text samples, and, before the first step, the run's outputs
 * (run dir and its lock, metrics, samples.txt, the run's description). Each write is collective:
 * the engine brings rank 0's host copy up to date, rank 0 works alone while the others wait
 * (lstmd_comm_solo), and every rank votes on the outcome. */
#define _GNU_SOURCE
#include "trainer_save.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "kernels/clock.h"
#include "kernels/cpu/dense_cpu.h"
#include "kernels/status.h"
#include "fault.h"
#include "val_watch.h"
#include "worker/io/durable.h"
#include "worker/io/trace.h"
#include "worker/model/infer.h"

/* Rank 0, before writing: a checkpoint must never hold a non-finite value (an update can
 * overflow, or divide 0 by 0, before any loss shows it), so that resuming from the last one is
 * always possible. The sums are in double: finite for any finite floats. */
static int check_finite(const struct run *r) {
  const struct lstmd_optim *o = r->optim;
  const char *bad = !isfinite(lstmd_cpu_sumsq(r->model->n_params, r->model->params)) ? "parameters"
                    : !isfinite(lstmd_cpu_sumsq(o->n, o->m))                       ? "first moments"
                    : o->v && !isfinite(lstmd_cpu_sumsq(o->n, o->v))              ? "second moments"
                                                                                   : NULL;
  if (!bad) return LSTMD_OK;
  char last[96];
  if (r->written_step >= 0)
    snprintf(last, sizeof last, "the last one written, step-%ld.safetensors, is whole",
             r->written_step);
  else
    snprintf(last, sizeof last, r->resumed ? "the one this run resumed from is whole"
                                           : "none was written before it");
  lstmd_errorf("step %ld: the %s after the update are not finite; not writing this checkpoint "
               "(%s). Lower optim.lr or set optim.clip_norm", r->progress.step, bad, last);
  return LSTMD_ENONFINITE;
}


/* Rank 0, alone (lstmd_comm_solo's work): checks and writes the checkpoint (SAVE_BEST_LINK:
 * links, nothing else). */
struct save_work {
  struct run *r;
  enum save_kind kind;
};

static int write_checkpoint(void *ctx) {
  struct run *r = ((struct save_work *)ctx)->r;
  const enum save_kind kind = ((struct save_work *)ctx)->kind;
  const struct lstmd_train_config *cfg = r->cfg;
  char path[4096], latest[4096], best_path[4096];
  snprintf(path, sizeof path, "%s/step-%ld.safetensors", cfg->run_dir, r->progress.step);
  snprintf(best_path, sizeof best_path, "%s/best.safetensors", cfg->run_dir);
  if (lstmd_fault_due(LSTMD_FAULT_CKPT_FREEZE, r->progress.step, r->rank)) raise(SIGSTOP);
  if (lstmd_fault_due(LSTMD_FAULT_CKPT_SLOW, r->progress.step, r->rank))
    lstmd_sleep_us((long)(2e6 * cfg->comm_timeout_s));
  if (kind == SAVE_BEST_LINK) return lstmd_durable_link(path, best_path);
  const int best = kind == SAVE_BEST;
  LSTMD_TRY(check_finite(r));
  snprintf(latest, sizeof latest, "%s/latest.safetensors", cfg->run_dir);
  r->progress.cursor = lstmd_prefetch_cursor(r->prefetch);
  if (r->samples) r->progress.samples_bytes = ftell(r->samples);
  LSTMD_TRY(lstmd_checkpoint_save(best ? best_path : path, r->model, r->optim, &r->data_meta,
                                  &r->progress, r->config_json));
  if (best) return LSTMD_OK;
  LSTMD_TRY(lstmd_durable_link(path, latest));
  r->written_step = r->progress.step;
  /* after latest names the new file: a crash between the two leaves one more file, never less */
  lstmd_keep_checkpoints(cfg->run_dir, cfg->keep_checkpoints, r->progress.step);
  return LSTMD_OK;
}

/* Collective: the engine gathers the carried state and brings rank 0's host copy up to date;
 * then rank 0 writes while the others wait (lstmd_comm_solo: their wait ends the job when rank
 * 0 is frozen for train.comm_timeout_s, not when its disk is slow), and all vote on the outcome,
 * so that every rank stops here together when rank 0 failed to check or write it. */
int lstmd_run_save_checkpoint(struct run *r, enum save_kind kind) {
  const double t0 = lstmd_now_s();
  const int best = kind != SAVE_STEP;
  int rc = LSTMD_OK;
  if (kind != SAVE_BEST_LINK) {
    const struct lstmd_engine_ops *ops = r->engine->ops;
    if (r->progress.state_h) rc = ops->gather_state(r->engine, r->progress.state_h, r->progress.state_c);
    if (!rc) rc = ops->sync_host(r->engine, r->optim, &r->progress);
  }
  if (rc == LSTMD_ECOMM) return rc; /* the ranks may be out of step: not agreed */
  struct save_work w = {r, kind};
  const int agreed = lstmd_comm_solo(r->comm, 0, write_checkpoint, &w, rc, NULL,
                                     r->cfg->comm_timeout_s, best ? "rank 0's best checkpoint write"
                                                                  : "rank 0's checkpoint write");
  lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, best ? "best checkpoint" : "checkpoint", t0,
                    lstmd_now_s(), NULL);
  if (!agreed || agreed == LSTMD_ECOMM) return agreed;
  r->failure_agreed = 1;
  if (!rc && r->rank != 0)
    lstmd_errorf("rank %d: stopping: rank 0 did not write the %scheckpoint of step %ld (%s)",
                 r->rank, best ? "best " : "", r->progress.step, lstmd_strerror(agreed));
  return agreed;
}

/* Collective, after a new best at this step (and after the step's sample, so that the file
 * holds what a step checkpoint would): best.safetensors, linked to step-<N> when that was just
 * written. Rank 0 records it. */
int lstmd_run_save_best(struct run *r, int step_file_written) {
  LSTMD_TRY(lstmd_run_save_checkpoint(r, step_file_written ? SAVE_BEST_LINK : SAVE_BEST));
  r->best_astray = 0;
  if (r->rank == 0) lstmd_metrics_new_best(&r->metrics, r->progress.step, r->progress.watch.best_loss);
  return LSTMD_OK;
}

/* Rank 0: one sample with lstmd sample's own code (infer.h) into samples.txt and TensorBoard. */
static void write_sample(struct run *r, float temperature, uint64_t seed, const char *tag) {
  const struct lstmd_train_config *cfg = r->cfg;
  const long step = r->progress.step;
  char *text = NULL;
  size_t n = 0;
  FILE *mem = open_memstream(&text, &n);
  const struct lstmd_infer_model im = {.fp32 = r->model};
  int rc = mem ? lstmd_sample(&im, &r->data_meta, "train.sample_prime", cfg->sample_prime,
                              cfg->sample_length, temperature, seed, mem)
               : LSTMD_ENOMEM;
  if (mem) fclose(mem); /* text and n are final only now */
  if (rc) {
    lstmd_metrics_note(&r->metrics, "step %ld: no %s sample: %s", step, tag, lstmd_strerror(rc));
  } else {
    if (temperature > 0.0f)
      fprintf(r->samples, "=== step %ld: temperature %.2g, seed %llu ===\n", step, temperature,
              (unsigned long long)seed);
    else
      fprintf(r->samples, "=== step %ld: greedy (temperature 0) ===\n", step);
    fwrite(text, 1, n, r->samples);
    fputc('\n', r->samples);
    char full_tag[64];
    snprintf(full_tag, sizeof full_tag, "samples/%s", tag);
    lstmd_tb_text(&r->metrics.tb, step, full_tag, text, n);
  }
  free(text);
}

/* Rank 0, alone (lstmd_comm_solo's work): train.sample_length bytes after train.sample_prime,
 * greedily and at temperature 0.8, seeded by train.seed and the step (so a resumed run draws the
 * same; the seed is in samples.txt). A sample that cannot be written is reported, and training
 * goes on. */
static int sample_work(void *ctx) {
  struct run *r = ctx;
  const double t0 = lstmd_now_s();
  /* 63 bits, so that `lstmd sample --seed` takes it and reproduces the sample */
  const uint64_t seed =
      (r->cfg->seed ^ ((uint64_t)r->progress.step * 0x9e3779b97f4a7c15ull)) & 0x7fffffffffffffffull;
  write_sample(r, 0.0f, seed, "greedy");
  write_sample(r, 0.8f, seed, "temperature_0.8");
  if (fflush(r->samples) != 0)
    lstmd_metrics_note(&r->metrics, "%s/samples.txt: cannot write", r->cfg->run_dir);
  lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "sample", t0, lstmd_now_s(), NULL);
  return LSTMD_OK;
}

/* Collective: the engine brings rank 0's host model up to date, then rank 0 samples while the
 * others wait (bounded by its silence, not by the sample's length: a long sample is work rank 0
 * does alone, like a checkpoint write), and all vote. */
int lstmd_run_sample(struct run *r) {
  int rc = r->engine->ops->sync_host(r->engine, NULL, &r->progress); /* p: its step in messages */
  if (rc == LSTMD_ECOMM) return rc;
  rc = lstmd_comm_solo(r->comm, 0, sample_work, r, rc, NULL, r->cfg->comm_timeout_s,
                       "rank 0's text sample");
  if (rc && rc != LSTMD_ECOMM) r->failure_agreed = 1;
  return rc;
}

static void describe_run(struct run *r, const char *resume_path) {
  const struct lstmd_dataset_info *info = &r->train.info;
  size_t params = 0;
  for (int i = 0; i < r->model->n_tensors; i++) params += r->model->tensors[i].count;
  char engine[1024];
  r->engine->ops->describe(r->engine, engine, sizeof engine);
  lstmd_metrics_log_only(&r->metrics, r->setup_warnings); /* said on stderr before the log opened */
  lstmd_metrics_note(&r->metrics, "compute: %s; %d rank%s, global batch %d window%s", engine,
                     r->world, r->world == 1 ? "" : "s", r->global_batch,
                     r->global_batch == 1 ? "" : "s");
  lstmd_metrics_note(&r->metrics, "data: %s, %llu training %s%s, model %zu parameters",
                     info->kind == LSTMD_DATASET_TEXT     ? "text"
                     : info->kind == LSTMD_DATASET_SERIES ? "series"
                                                          : "classify",
                     (unsigned long long)info->count,
                     info->kind == LSTMD_DATASET_TEXT     ? "tokens"
                     : info->kind == LSTMD_DATASET_SERIES ? "rows"
                                                          : "sequences",
                     r->has_val ? "" : " (validation split too short to evaluate)", params);
  if (r->resumed)
    lstmd_metrics_note(&r->metrics, "resumed from %s at step %ld", resume_path, r->progress.step);
  if (r->resume_changes)
    lstmd_metrics_note(&r->metrics, "settings changed since that checkpoint was written: %s (a "
                       "resumed run equals one that never stopped only with the same settings)",
                       r->resume_changes);
}

/* Rank 0: <run_dir>/samples.txt for appending; a resumed run first cuts it back to its length at
 * the checkpoint (train.samples_bytes), dropping what the interrupted run sampled after it. */
static int open_samples(struct run *r) {
  char path[4096];
  snprintf(path, sizeof path, "%s/samples.txt", r->cfg->run_dir);
  struct stat st;
  if (r->resumed && stat(path, &st) == 0 && st.st_size > r->progress.samples_bytes &&
      truncate(path, r->progress.samples_bytes) != 0) {
    lstmd_errorf("%s: cannot cut back to %ld bytes for the resume: %s", path,
                 r->progress.samples_bytes, strerror(errno));
    return LSTMD_EWRITE;
  }
  r->samples = fopen(path, "a");
  if (!r->samples || fseek(r->samples, 0, SEEK_END) != 0) {
    lstmd_errorf("%s: cannot open for appending: %s", path, strerror(errno));
    return LSTMD_EWRITE;
  }
  return LSTMD_OK;
}

/* Rank 0's run directory and metrics must be usable before anyone trains (voted). */
int lstmd_run_open_outputs(struct run *r, const char *resume_path) {
  int local = LSTMD_OK;
  if (r->rank == 0) {
    /* LSTMD_ECONFIG: the path names a file or passes through one (exit 2): name the key too */
    if ((local = lstmd_mkdir_p(r->cfg->run_dir)) == LSTMD_ECONFIG)
      lstmd_errorf("train.run_dir %s: cannot be the run directory", r->cfg->run_dir);
    if (!local) local = lstmd_run_dir_lock(r->cfg->run_dir, &r->run_lock);
    long long bytes = 0; /* the run dir is this run's alone now: what a kill left is no one's */
    const int orphans = !local && r->run_lock >= 0
                            ? lstmd_remove_orphan_temps(r->cfg->run_dir, &bytes) : 0;
    if (!local)
      local = lstmd_metrics_open(&r->metrics, r->cfg->run_dir, r->resumed ? r->progress.step : 0,
                                 r->model->shape.kind);
    if (!local && r->cfg->sample_every) local = open_samples(r);
    if (!local) describe_run(r, resume_path);
    if (!local && orphans)
      lstmd_metrics_note(&r->metrics, "removed %d temp file%s of checkpoint writes an earlier run "
                         "did not finish (%.1f MB)", orphans, orphans == 1 ? "" : "s",
                         (double)bytes / 1e6);
  }
  return lstmd_comm_agree(r->comm, local, NULL);
}
