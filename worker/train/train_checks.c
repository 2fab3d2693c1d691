/* train_checks.c — the set-up's checks of one run (train_setup.c calls them): that every rank
 * has rank 0's config and dataset (lstmd_run_check_plan, see 2. in train_setup.c), the
 * distillation teacher, read by every rank and checked against the dataset
 * (lstmd_run_load_teacher). The settings a dataset rules out are dataset_fit.c's. */
#define _GNU_SOURCE
#include "train_checks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/status.h"
#include "resume_changes.h"
#include "worker/model/infer.h"

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
int lstmd_run_check_plan(struct run *r) {
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
int lstmd_run_load_teacher(struct run *r) {
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

