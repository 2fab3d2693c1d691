/* checkpoint_save.c — model + training state -> safetensors (layout in checkpoint.h; reading
 * them back: checkpoint_load.c). */
#define _GNU_SOURCE
#include "checkpoint.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "nvtx.h"
#include "safetensors.h"


struct meta_list {
  struct lstmd_st_meta items[48];
  char *owned[48];
  int n;
};

static void meta_add(struct meta_list *l, const char *key, char *value /* malloc'd */) {
  l->owned[l->n] = value;
  l->items[l->n].key = key;
  l->items[l->n].value = value ? value : "";
  l->n++;
}

__attribute__((format(printf, 3, 4))) static void meta_addf(struct meta_list *l, const char *key,
                                                            const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s;
  if (vasprintf(&s, fmt, ap) < 0) s = NULL;
  va_end(ap);
  meta_add(l, key, s);
}

static char *json_text(json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(j);
  return s;
}

static char *float_list(const float *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
  return json_text(a);
}

/* series.missing / classify.missing (key): how prepare filled the data's gaps, written only for
 * data prepared with --missing previous|linear, so every other checkpoint is what it was;
 * predict's and classify's default --missing (read_missing_meta). */
static void add_missing_meta(struct meta_list *l, const char *key, int missing) {
  if (missing != LSTMD_MISSING_ERROR) meta_addf(l, key, "%s", lstmd_missing_name(missing));
}

static void add_data_meta(struct meta_list *l, const struct lstmd_data_meta *d) {
  const struct lstmd_dataset_info *info = &d->info;
  if (info->kind != LSTMD_DATASET_SERIES && !info->numeric) {
    json_t *a = json_array();
    for (int k = 0; k < info->vocab_size; k++) json_array_append_new(a, json_integer(info->vocab[k]));
    meta_add(l, "vocab", json_text(a));
  }
  if (info->kind == LSTMD_DATASET_CLASSIFY) { /* label of each class id, in id order */
    json_t *a = json_array();
    for (int k = 0; k < info->horizon; k++) json_array_append_new(a, json_string(info->names[k]));
    meta_add(l, "classify.labels", json_text(a));
    if (info->numeric) { /* a series classifier: the normalisation of its values */
      meta_add(l, "classify.mean", float_list(info->mean, 1));
      meta_add(l, "classify.std", float_list(info->std, 1));
      add_missing_meta(l, "classify.missing", info->missing);
    }
  } else if (info->kind == LSTMD_DATASET_SERIES) {
    json_t *a = json_array();
    for (int c = 0; c < info->width; c++) json_array_append_new(a, json_string(info->names[c]));
    meta_add(l, "series.columns", json_text(a));
    meta_add(l, "series.mean", float_list(info->mean, info->width));
    meta_add(l, "series.std", float_list(info->std, info->width));
    meta_addf(l, "series.season", "%d", info->season);
    meta_addf(l, "series.target", "%s", lstmd_series_target_name(d->tf.target));
    meta_addf(l, "series.window_norm", "%s", lstmd_window_norm_name(d->tf.window_norm));
    add_missing_meta(l, "series.missing", info->missing);
  }
  meta_addf(l, "data.pair_id", "%016" PRIx64, info->pair_id);
  meta_addf(l, "data.seq_len", "%d", d->seq_len);
  meta_addf(l, "data.batch", "%d", d->batch);
}

/* format tag, model shape and what the data was: what every file of lstmd's models carries. */
static void add_common_meta(struct meta_list *l, const char *tag, const struct lstmd_model_shape *s,
                            const struct lstmd_data_meta *data) {
  meta_addf(l, "format", "%s", tag);
  meta_addf(l, "model.kind", "%s", s->kind == LSTMD_MODEL_TEXT     ? "text"
                                   : s->kind == LSTMD_MODEL_SERIES ? "series"
                                                                   : "classify");
  meta_addf(l, "model.vocab", "%d", s->vocab);
  meta_addf(l, "model.embed", "%d", s->embed);
  meta_addf(l, "model.width", "%d", s->width);
  meta_addf(l, "model.hidden", "%d", s->hidden);
  meta_addf(l, "model.layers", "%d", s->layers);
  meta_addf(l, "model.horizon", "%d", s->horizon);
  /* Only when on, so that a plain model's files are what they were before the key existed; a
   * file without it is a plain model. */
  if (s->layer_norm) meta_addf(l, "model.layer_norm", "%d", s->layer_norm);
  if (s->kind == LSTMD_MODEL_CLASSIFY) {
    meta_addf(l, "model.classes", "%d", s->classes);
    meta_addf(l, "model.bidirectional", "%d", s->bidirectional);
    meta_addf(l, "model.pool", "%s", s->pool == LSTMD_POOL_LAST ? "last"
                                     : s->pool == LSTMD_POOL_MEAN ? "mean" : "max");
  }
  add_data_meta(l, data);
}

int lstmd_checkpoint_write_tagged(const char *path, const char *tag,
                                  const struct lstmd_model_shape *s,
                                  const struct lstmd_data_meta *data,
                                  const struct lstmd_st_tensor *t, int n,
                                  const struct lstmd_st_meta *extra, int n_extra) {
  struct meta_list l = {0};
  add_common_meta(&l, tag, s, data);
  for (int i = 0; i < n_extra && l.n < 48; i++) meta_addf(&l, extra[i].key, "%s", extra[i].value);
  int rc = LSTMD_OK;
  for (int i = 0; i < l.n; i++)
    if (!l.owned[i]) rc = LSTMD_ENOMEM;
  if (!rc) rc = lstmd_st_write(path, t, n, l.items, l.n);
  for (int i = 0; i < l.n; i++) free(l.owned[i]);
  return rc;
}

int lstmd_checkpoint_save(const char *path, const struct lstmd_model *m,
                          const struct lstmd_optim *o, const struct lstmd_data_meta *data,
                          const struct lstmd_train_progress *progress, const char *config_json) {
  const struct lstmd_model_shape *s = &m->shape;
  struct lstmd_st_tensor t[2 * LSTMD_MAX_TENSORS + 4];
  char mask_names[LSTMD_MAX_TENSORS][48], mask_list[LSTMD_MAX_TENSORS * 32] = "";
  int n = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    const struct lstmd_tensor *x = &m->tensors[i];
    t[n++] = (struct lstmd_st_tensor){x->name, m->params + x->offset, x->rank, {x->shape[0], x->shape[1]}};
  }
  if (o) {
    const int adam = o->cfg.algo == LSTMD_OPTIM_ADAMW;
    t[n++] = (struct lstmd_st_tensor){adam ? "optim.exp_avg" : "optim.momentum_buffer", o->m, 1,
                                      {(int64_t)o->n}};
    if (adam) t[n++] = (struct lstmd_st_tensor){"optim.exp_avg_sq", o->v, 1, {(int64_t)o->n}};
  }
  if (progress && progress->state_h) {
    int64_t dims[3] = {s->layers, progress->state_batch, s->hidden};
    t[n++] = (struct lstmd_st_tensor){"state.h", progress->state_h, 3, {dims[0], dims[1], dims[2]}};
    t[n++] = (struct lstmd_st_tensor){"state.c", progress->state_c, 3, {dims[0], dims[1], dims[2]}};
  }
  const struct lstmd_prune *pr = progress ? progress->prune : NULL;
  for (int i = 0; pr && i < pr->n; i++) { /* I8 after every F32 tensor: all stay aligned */
    const struct lstmd_tensor *x = &m->tensors[pr->tensor[i]];
    snprintf(mask_names[i], sizeof mask_names[i], "prune.mask.%s", x->name);
    snprintf(mask_list + strlen(mask_list), sizeof mask_list - strlen(mask_list), "%s%s",
             i ? "," : "", x->name);
    t[n++] = (struct lstmd_st_tensor){mask_names[i], pr->mask[i], x->rank,
                                      {x->shape[0], x->shape[1]}, "I8"};
  }
  struct meta_list l = {0};
  add_common_meta(&l, LSTMD_CHECKPOINT_TAG, s, data);
  if (pr) meta_addf(&l, "prune.masks", "%s", mask_list);
  if (config_json) meta_addf(&l, "config", "%s", config_json);
  if (o) {
    meta_addf(&l, "optim.algo", "%s", o->cfg.algo == LSTMD_OPTIM_ADAMW ? "adamw" : "sgd");
    meta_addf(&l, "optim.step", "%ld", o->step);
  }
  if (progress) {
    meta_addf(&l, "train.step", "%ld", progress->step);
    meta_addf(&l, "train.epoch", "%" PRIu64, progress->cursor.epoch);
    meta_addf(&l, "train.position", "%" PRIu64, progress->cursor.position);
    /* a zeroed watch (a progress built without lstmd_val_watch_init) is a fresh one */
    static const struct lstmd_val_watch kFresh = {.best_loss = INFINITY, .lr_scale = 1.0};
    const struct lstmd_val_watch *w = progress->watch.lr_scale > 0.0 ? &progress->watch : &kFresh;
    meta_addf(&l, "train.best_val_loss", "%.17g", w->best_loss);
    meta_addf(&l, "train.best_step", "%ld", w->best_step);
    meta_addf(&l, "train.evals_since_best", "%ld", w->since_best);
    meta_addf(&l, "train.plateau_bad_evals", "%ld", w->plateau_bad);
    meta_addf(&l, "train.lr_scale", "%.17g", w->lr_scale);
    meta_addf(&l, "train.samples_bytes", "%ld", progress->samples_bytes);
    if (progress->teacher_crc32c)
      meta_addf(&l, "distill.teacher_crc32c", "%08x", (unsigned)progress->teacher_crc32c);
    if (progress->loss_scale > 0.0) { /* fp16 on a GPU: the dynamic loss scale resumes too */
      meta_addf(&l, "train.loss_scale", "%.9g", progress->loss_scale);
      meta_addf(&l, "train.loss_scale_good_steps", "%ld", progress->loss_scale_good_steps);
    }
  }
  int rc = LSTMD_OK;
  for (int i = 0; i < l.n; i++)
    if (!l.owned[i]) rc = LSTMD_ENOMEM;
  lstmd_nvtx_push("checkpoint");
  if (!rc) rc = lstmd_st_write(path, t, n, l.items, l.n);
  lstmd_nvtx_pop();
  for (int i = 0; i < l.n; i++) free(l.owned[i]);
  return rc;
}
