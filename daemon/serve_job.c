/* serve_job.c — job settings to a training config, and a submission answered (see
 * serve_job.h). */
#include "serve_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "access.h"
#include "config.h"
#include "frame.h"
#include "jobs.h"
#include "worker/data/dataset.h"
#include "worker/train/dataset_fit.h"
#include "worker/train/val_watch.h"

/* The settings checked against the dataset's header (worker/train/dataset_fit.h), so that a job
 * its data rules out (samples of a series model, a classifier with dropout, ...) is refused at
 * submission with the words its start would print, not failed when it starts. A dataset whose
 * header does not open (not there yet, or broken) is left to the start, which says why, as it
 * does for every job: the loader's message is dropped here (lstmd_errors_silence), neither
 * printed by the daemon nor made the process's last error, which a job failing on rank 0 at
 * that moment reports as its reason. */
static int dataset_unfit(const struct lstmd_train_config *cfg, char *err, size_t errlen) {
  char path[sizeof cfg->data_path + 16];
  snprintf(path, sizeof path, "%s/train.bin", cfg->data_path);
  struct lstmd_dataset ds;
  lstmd_errors_silence(1);
  const int opened = lstmd_dataset_open(path, &ds) == LSTMD_OK;
  lstmd_errors_silence(0);
  if (!opened) return LSTMD_OK;
  const int rc = lstmd_dataset_fit(cfg, &ds.info, cfg->data_path, err, errlen);
  lstmd_dataset_close(&ds);
  return rc;
}

int lstmd_serve_job_config(Lstmd__Setting *const *settings, size_t n, const char *data_root,
                           int world, struct lstmd_train_config *cfg, int *has_run_dir, char *err,
                           size_t errlen) {
  lstmd_config_defaults(cfg);
  *has_run_dir = 0;
  for (size_t i = 0; i < n; i++) {
    if (lstmd_config_set_key(cfg, settings[i]->key, settings[i]->value, err, errlen))
      return LSTMD_ECONFIG;
    if (!strcmp(settings[i]->key, "train.run_dir")) *has_run_dir = 1;
  }
  if (lstmd_config_check(cfg, err, errlen)) return LSTMD_ECONFIG;
  if (world > 0 && cfg->res_ranks > world) {
    snprintf(err, errlen, "resources.ranks: %d is more than this daemon's %d rank%s",
             cfg->res_ranks, world, world == 1 ? "" : "s");
    return LSTMD_ECONFIG;
  }
  const int ranks = cfg->res_ranks ? cfg->res_ranks : world;
  if (world > 0 && ranks % cfg->stages) {
    snprintf(err, errlen, "model.stages: %d does not divide the job's %d ranks (resources.ranks; "
             "a job runs as replicas x stages)", cfg->stages, ranks);
    return LSTMD_ECONFIG;
  }
  char resolved[sizeof cfg->data_path], why[1400];
  if (lstmd_path_inside(data_root, cfg->data_path, 1, resolved, sizeof resolved, why, sizeof why)) {
    snprintf(err, errlen, "data.path: %s", why);
    return LSTMD_ECONFIG;
  }
  memcpy(cfg->data_path, resolved, sizeof resolved);
  if (dataset_unfit(cfg, err, errlen)) return LSTMD_ECONFIG;
  if (cfg->distill_teacher[0]) { /* a file the job's ranks read: confined like data.path */
    char teacher[sizeof cfg->distill_teacher];
    if (lstmd_path_inside(data_root, cfg->distill_teacher, 1, teacher, sizeof teacher, why,
                          sizeof why)) {
      snprintf(err, errlen, "distill.teacher: %s", why);
      return LSTMD_ECONFIG;
    }
    memcpy(cfg->distill_teacher, teacher, sizeof teacher);
  }
  if (*has_run_dir) {
    char dir[sizeof cfg->run_dir];
    if (lstmd_path_inside(data_root, cfg->run_dir, 0, dir, sizeof dir, why, sizeof why)) {
      snprintf(err, errlen, "train.run_dir: %s", why);
      return LSTMD_ECONFIG;
    }
    memcpy(cfg->run_dir, dir, sizeof dir);
  }
  return LSTMD_OK;
}

static uint8_t *invalid(const char *msg, size_t *len) {
  return lstmd_frame_pack_error(LSTMD__ERROR_CODE__INVALID_JOB, msg, len);
}

/* A resume that could only fail at its start: the checkpoint it would read (run_dir's resume
 * point) was trained with another data.seq_len (not a classifier's) or global batch (replicas × data.batch_size,
 * replicas = ranks / model.stages) than the job's, which train_resume.c refuses. Returns 1 with
 * msg written where so; 0 where they agree or there is nothing to read (no checkpoint yet, or one
 * whose header does not open: the start says why). Reads the header only. */
static int resume_mismatch(const char *run_dir, const struct lstmd_train_config *cfg, int ranks,
                           char *msg, size_t n) {
  static const char *const keys[] = {"data.batch", "data.seq_len", "model.classes"};
  char path[1400];
  long v[3];
  if (lstmd_run_dir_resume_meta(run_dir, 3, keys, v, path, sizeof path) <= 0) return 0;
  const long batch = v[0], seq_len = v[1], classes = v[2];
  const int replicas = ranks / cfg->stages, global = replicas * cfg->batch_size;
  /* a classifier's window is one sequence: its checkpoint's data.seq_len is the longest one's,
   * not the key's (which it does not use), and its resume does not compare them */
  if (classes <= 0 && seq_len > 0 && seq_len != cfg->seq_len) {
    snprintf(msg, n, "data.seq_len: %s was trained with data.seq_len %ld, this job has %d; a resume "
             "needs the same", path, seq_len, cfg->seq_len);
    return 1;
  }
  if (batch > 0 && batch != global) {
    snprintf(msg, n, "%s was trained with a global batch of %ld windows, this job has %d (%d "
             "data-parallel replica%s: resources.ranks %d / model.stages %d, x data.batch_size %d); "
             "a resume needs the same global batch", path, batch, global, replicas,
             replicas == 1 ? "" : "s", ranks, cfg->stages, cfg->batch_size);
    return 1;
  }
  return 0;
}

/* Checked and queued; run_dir: where it trains when it is not the settings' (a continued job's,
 * which may be the daemon's own <state_dir>/runs/job-N, outside the data root). */
static uint8_t *submit_checked(struct lstmd_jobs *jobs, const Lstmd__JobSpec *spec,
                               const char *run_dir, const char *data_root, int world,
                               size_t *len) {
  struct lstmd_train_config cfg;
  int has_run_dir;
  char err[3072]; /* room for resume_mismatch's checkpoint path */
  if (lstmd_serve_job_config(spec->settings, spec->n_settings, data_root, world, &cfg,
                             &has_run_dir, err, sizeof err))
    return invalid(err, len);
  const struct lstmd_job_resources res = {
      .ranks = cfg.res_ranks ? cfg.res_ranks : world, .priority = cfg.res_priority,
      .preemptible = cfg.res_preemptible, .time_limit_s = cfg.res_time_limit_s};
  if (!run_dir && has_run_dir) run_dir = cfg.run_dir;
  if (spec->resume && run_dir && resume_mismatch(run_dir, &cfg, res.ranks, err, sizeof err))
    return invalid(err, len);
  char found[300]; /* a checkpoint already in the run dir: refused unless spec->resume */
  const int holds = run_dir && lstmd_run_dir_checkpoint(run_dir, found, sizeof found);
  return lstmd_jobs_submit(jobs, spec, run_dir, holds ? found : NULL, cfg.steps, &res, len);
}

/* spec->continues: the job it names must have ended; the new one gets its settings and then
 * spec's (so --set changes what it should: a longer time limit, more steps, a lower rate), its
 * run dir (spec may not name another) and its name unless spec gives one, and resumes from its
 * latest.safetensors. Why not "resubmit with the same settings and --resume": a job without
 * train.run_dir trains in the daemon's own state dir, which a job's settings cannot name. */
static uint8_t *submit_continued(struct lstmd_jobs *jobs, const Lstmd__JobSpec *spec,
                                 const char *data_root, int world, size_t *len) {
  Lstmd__Job *old = lstmd_jobs_copy(jobs, spec->continues);
  char msg[1400];
  if (!old) {
    snprintf(msg, sizeof msg, "no job %llu to continue", (unsigned long long)spec->continues);
    return lstmd_frame_pack_error(LSTMD__ERROR_CODE__NOT_FOUND, msg, len);
  }
  uint8_t *reply = NULL;
  if (old->state == LSTMD__JOB_STATE__QUEUED || old->state == LSTMD__JOB_STATE__RUNNING) {
    snprintf(msg, sizeof msg, "job %llu has not ended (%s): cancel it (it stops with a "
             "checkpoint) or wait for it, then continue it", (unsigned long long)old->id,
             lstmd_job_state_name(old->state));
    reply = invalid(msg, len);
  }
  for (size_t i = 0; !reply && i < spec->n_settings; i++)
    if (!strcmp(spec->settings[i]->key, "train.run_dir")) {
      snprintf(msg, sizeof msg, "train.run_dir: a job that continues job %llu trains in its run "
               "dir, %s (leave train.run_dir out, or submit a new job with --resume)",
               (unsigned long long)old->id, old->run_dir);
      reply = invalid(msg, len);
    }
  const size_t n = old->n_settings + spec->n_settings;
  Lstmd__Setting **merged = reply ? NULL : malloc((n ? n : 1) * sizeof *merged);
  if (!reply && !merged)
    reply = lstmd_frame_pack_error(LSTMD__ERROR_CODE__INTERNAL, "out of memory", len);
  if (!reply) {
    memcpy(merged, old->settings, old->n_settings * sizeof *merged);
    memcpy(merged + old->n_settings, spec->settings, spec->n_settings * sizeof *merged);
    Lstmd__JobSpec next = *spec;
    next.settings = merged;
    next.n_settings = n;
    next.resume = 1;
    if (!next.name || !*next.name) next.name = old->name;
    reply = submit_checked(jobs, &next, old->run_dir, data_root, world, len);
  }
  free(merged);
  lstmd__job__free_unpacked(old, NULL);
  return reply;
}

uint8_t *lstmd_serve_submit(struct lstmd_jobs *jobs, const Lstmd__JobSpec *spec,
                            const char *data_root, int world, size_t *len) {
  return spec->continues ? submit_continued(jobs, spec, data_root, world, len)
                         : submit_checked(jobs, spec, NULL, data_root, world, len);
}
