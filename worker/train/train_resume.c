/* train_resume.c — resuming a run (train_setup.c calls lstmd_run_load_work): rank 0 alone reads
 * the checkpoint after checking that it belongs to this data, batch and series transform, says
 * which settings changed, warns about a different teacher, pruning masks that are dropped or
 * that no mask update will change, and names an older checkpoint beside a damaged one. */
#define _GNU_SOURCE
#include "train_resume.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kernels/status.h"
#include "resume_changes.h"
#include "val_watch.h"
#include "worker/model/prune.h"

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
    lstmd_run_setup_warn(
        r, "%s holds pruning masks of %s, and this run prunes %s%s: those masks are "
        "dropped and the weights they held at zero train again; to keep them zero, resume "
        "with the prune settings that wrote them (past prune.end_step the masks only hold)",
        path, list, r->prune ? "only prune.tensors = " : "nothing (prune.target_sparsity 0)",
        r->prune ? r->cfg->prune.tensors : "");
  free(list);
  json_decref(masks);
  free(json);
}

/* Rank 0, resuming with pruning at a step past the schedule's last mask update (prune.end_step,
 * or train.steps before it): the masks only hold, so a prune.target_sparsity changed since the
 * checkpoint (or a tensor added to prune.tensors) is never reached. Said, with the sparsity the
 * masks keep: the changed-settings line alone read as if the new target applied. */
static void warn_masks_only_hold(struct run *r, const char *path) {
  const struct lstmd_prune_config *pc = &r->cfg->prune;
  const long from = r->progress.step;
  if (!r->prune || from >= r->cfg->steps) return; /* nothing to train: nothing to say */
  const long until = pc->end_step < r->cfg->steps ? pc->end_step : r->cfg->steps;
  const long next = pc->begin_step > from
                        ? pc->begin_step
                        : pc->begin_step + ((from - pc->begin_step) / pc->frequency + 1) * pc->frequency;
  if (next <= until && lstmd_prune_due(pc, next)) return; /* an update lies ahead */
  double sum = 0.0;
  int off = 0;
  for (int i = 0; i < r->prune->n; i++) {
    const double have = lstmd_prune_mask_sparsity(r->prune, r->model, i);
    const size_t n = r->model->tensors[r->prune->tensor[i]].count;
    sum += have;
    off |= have < pc->target_sparsity - 1.0 / (double)n || have > pc->target_sparsity + 1.0 / (double)n;
  }
  if (!off) return;
  lstmd_run_setup_warn(
      r, "%s is at step %ld, and no mask update of prune.begin_step %ld, prune.end_step %ld, "
      "prune.frequency %ld comes after it: its masks only hold, at sparsity %.4f (mean over %d "
      "tensors), not prune.target_sparsity %.4g; to reach it, resume with a prune.end_step "
      "after step %ld", path, from, pc->begin_step,
      pc->end_step, pc->frequency, sum / r->prune->n, r->prune->n, pc->target_sparsity, from);
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
    lstmd_run_setup_warn(
        r, "distill.teacher %s is not the model %s was distilled from (its parameters' "
        "CRC-32C is %08x, the checkpoint's teacher's %08x): the resumed run learns from "
        "other soft targets, and equals a run that never stopped only with the same "
        "teacher", r->cfg->distill_teacher, path, (unsigned)teacher_now,
        (unsigned)r->progress.teacher_crc32c);
  r->progress.teacher_crc32c = teacher_now;
  r->resume_changes = lstmd_resume_changes(was, r->config_json);
  free(was);
  warn_dropped_masks(r, path);
  warn_masks_only_hold(r, path);
  return LSTMD_OK;
}
int lstmd_run_load_work(void *ctx) {
  const struct load_work *w = ctx;
  const int rc = load_checkpoint(w->r, w->path);
  char older[4200];
  if ((rc == LSTMD_EFORMAT || rc == LSTMD_ECRC || rc == LSTMD_EIO) &&
      lstmd_run_dir_older_checkpoint(w->path, older, sizeof older))
    lstmd_errorf("%s cannot be resumed from; the newest other checkpoint beside it is %s: to go "
                 "on from there, --resume %s", w->path, older, older);
  return rc;
}
