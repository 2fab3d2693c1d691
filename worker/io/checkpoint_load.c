/* checkpoint_load.c — safetensors -> model + training state (layout in checkpoint.h; writing
 * them: checkpoint_save.c). */
#define _GNU_SOURCE
#include "checkpoint.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "nvtx.h"
#include "safetensors.h"

static int meta_long(const struct lstmd_st_file *f, const char *path, const char *key, long lo,
                     long hi, long *out) {
  const char *v = lstmd_st_meta_get(f, key);
  char *end;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || *v == '\0' || *end != '\0' || x < lo || x > hi) {
    lstmd_errorf("%s: metadata '%s' is missing or out of range", path, key);
    return LSTMD_EFORMAT;
  }
  *out = x;
  return LSTMD_OK;
}

static int meta_u64(const struct lstmd_st_file *f, const char *path, const char *key, int base,
                    uint64_t *out) {
  const char *v = lstmd_st_meta_get(f, key);
  char *end;
  errno = 0;
  /* digits only: strtoull takes "-1" (as 2^64 - 1), a sign or blanks, and wraps past 2^64 */
  const int digit = v && (base == 16 ? isxdigit((unsigned char)v[0]) : isdigit((unsigned char)v[0]));
  unsigned long long x = digit ? strtoull(v, &end, base) : 0;
  if (!digit || errno || *end != '\0') {
    lstmd_errorf("%s: metadata '%s' is missing or malformed", path, key);
    return LSTMD_EFORMAT;
  }
  *out = x;
  return LSTMD_OK;
}

/* Parses a JSON list metadata value; returns the array (caller decrefs) or NULL + message. */
static json_t *meta_list(const struct lstmd_st_file *f, const char *path, const char *key,
                         size_t expect) {
  const char *v = lstmd_st_meta_get(f, key);
  json_t *a = v ? json_loads(v, 0, NULL) : NULL;
  if (!json_is_array(a) || json_array_size(a) != expect) {
    lstmd_errorf("%s: metadata '%s' is missing or malformed", path, key);
    json_decref(a);
    return NULL;
  }
  return a;
}

/* add_missing_meta's key into *missing; without it (data prepared without --missing, or a file
 * from before the key) *missing is left as it is. LSTMD_EFORMAT after a message when it names
 * no method. */
static int read_missing_meta(const struct lstmd_st_file *f, const char *path, const char *key,
                             int *missing) {
  const char *text = lstmd_st_meta_get(f, key);
  if (!text || (*missing = lstmd_missing_parse(text)) >= 0) return LSTMD_OK;
  lstmd_errorf("%s: metadata '%s' is '%s', not error, previous or linear", path, key, text);
  return LSTMD_EFORMAT;
}

static int read_data_meta(const struct lstmd_st_file *f, const char *path,
                          const struct lstmd_model_shape *s, struct lstmd_data_meta *d) {
  memset(d, 0, sizeof *d);
  struct lstmd_dataset_info *info = &d->info;
  long x;
  LSTMD_TRY(meta_long(f, path, "data.seq_len", 1, 1 << 24, &x));
  d->seq_len = (int)x;
  LSTMD_TRY(meta_long(f, path, "data.batch", 1, 1 << 24, &x));
  d->batch = (int)x;
  LSTMD_TRY(meta_u64(f, path, "data.pair_id", 16, &info->pair_id));
  if (s->kind != LSTMD_MODEL_SERIES) {
    info->kind = s->kind == LSTMD_MODEL_TEXT ? LSTMD_DATASET_TEXT : LSTMD_DATASET_CLASSIFY;
    info->width = s->kind == LSTMD_MODEL_TEXT ? 1 : d->seq_len;
    info->vocab_size = s->vocab;
    info->numeric = s->kind == LSTMD_MODEL_CLASSIFY && s->width > 0; /* a series classifier */
    json_t *a = info->numeric ? json_array() : meta_list(f, path, "vocab", (size_t)s->vocab);
    if (!a) return LSTMD_EFORMAT;
    int ok = 1;
    for (int k = 0; k < s->vocab; k++) {
      json_t *b = json_array_get(a, (size_t)k);
      ok &= json_is_integer(b) && json_integer_value(b) >= 0 && json_integer_value(b) <= 255 &&
            (k == 0 || json_integer_value(b) > info->vocab[k - 1]);
      info->vocab[k] = (uint8_t)json_integer_value(b);
    }
    json_decref(a);
    if (!ok) lstmd_errorf("%s: metadata 'vocab' is not an ascending list of bytes", path);
    if (!ok || s->kind == LSTMD_MODEL_TEXT) return ok ? LSTMD_OK : LSTMD_EFORMAT;
    info->horizon = s->classes; /* classify: the labels, ascending as prepare stores them */
    json_t *labels = meta_list(f, path, "classify.labels", (size_t)s->classes);
    if (!labels) return LSTMD_EFORMAT;
    for (int k = 0; ok && k < s->classes; k++) {
      json_t *nm = json_array_get(labels, (size_t)k);
      ok = json_is_string(nm) && strlen(json_string_value(nm)) > 0 &&
           strlen(json_string_value(nm)) < LSTMD_MAX_NAME_BYTES;
      if (ok) snprintf(info->names[k], LSTMD_MAX_NAME_BYTES, "%s", json_string_value(nm));
      ok = ok && (k == 0 || strcmp(info->names[k - 1], info->names[k]) < 0);
    }
    json_decref(labels);
    if (!ok) lstmd_errorf("%s: metadata 'classify.labels' is not an ascending list of labels", path);
    if (!ok || !info->numeric) return ok ? LSTMD_OK : LSTMD_EFORMAT;
    json_t *mean = meta_list(f, path, "classify.mean", 1), *std = meta_list(f, path, "classify.std", 1);
    ok = mean && std && json_is_number(json_array_get(mean, 0)) &&
         json_number_value(json_array_get(std, 0)) > 0;
    if (ok) {
      info->mean[0] = (float)json_number_value(json_array_get(mean, 0));
      info->std[0] = (float)json_number_value(json_array_get(std, 0));
      ok = isfinite(info->mean[0]) && isfinite(info->std[0]);
    }
    if (mean && std && !ok) lstmd_errorf("%s: malformed classify.mean/classify.std metadata", path);
    json_decref(mean);
    json_decref(std);
    ok = ok && read_missing_meta(f, path, "classify.missing", &info->missing) == LSTMD_OK;
    return ok ? LSTMD_OK : LSTMD_EFORMAT;
  }
  info->kind = LSTMD_DATASET_SERIES;
  info->width = s->width;
  info->horizon = s->horizon;
  json_t *names = meta_list(f, path, "series.columns", (size_t)s->width);
  json_t *mean = meta_list(f, path, "series.mean", (size_t)s->width);
  json_t *std = meta_list(f, path, "series.std", (size_t)s->width);
  int ok = names && mean && std;
  for (int c = 0; ok && c < s->width; c++) {
    json_t *nm = json_array_get(names, (size_t)c);
    ok = json_is_string(nm) && strlen(json_string_value(nm)) < LSTMD_MAX_NAME_BYTES &&
         json_is_number(json_array_get(mean, (size_t)c)) &&
         json_number_value(json_array_get(std, (size_t)c)) > 0;
    if (!ok) break;
    snprintf(info->names[c], LSTMD_MAX_NAME_BYTES, "%s", json_string_value(nm));
    info->mean[c] = (float)json_number_value(json_array_get(mean, (size_t)c));
    info->std[c] = (float)json_number_value(json_array_get(std, (size_t)c));
  }
  if (names && mean && std && !ok) lstmd_errorf("%s: malformed series column metadata", path);
  /* Optional: files written before these existed hold a plain model without a season. */
  const char *season = lstmd_st_meta_get(f, "series.season");
  const char *target = lstmd_st_meta_get(f, "series.target");
  const char *norm = lstmd_st_meta_get(f, "series.window_norm");
  if (ok && season) {
    char *end;
    long p = strtol(season, &end, 10);
    if (!*season || *end || p < 0 || p > LSTMD_MAX_SEASON) {
      lstmd_errorf("%s: metadata 'series.season' is malformed ('%s')", path, season);
      ok = 0;
    }
    info->season = (int)p;
  }
  if (ok && target && (d->tf.target = lstmd_series_target_parse(target)) < 0) {
    lstmd_errorf("%s: metadata 'series.target' is '%s', not level or delta", path, target);
    ok = 0;
  }
  if (ok && norm && (d->tf.window_norm = lstmd_window_norm_parse(norm)) < 0) {
    lstmd_errorf("%s: metadata 'series.window_norm' is '%s', not none, last or mean", path, norm);
    ok = 0;
  }
  ok = ok && read_missing_meta(f, path, "series.missing", &info->missing) == LSTMD_OK;
  json_decref(names);
  json_decref(mean);
  json_decref(std);
  return ok ? LSTMD_OK : LSTMD_EFORMAT;
}

static int read_shape(const struct lstmd_st_file *f, const char *path, const char *tag,
                      struct lstmd_model_shape *s) {
  const char *fmt = lstmd_st_meta_get(f, "format");
  if (fmt && !strcmp(fmt, LSTMD_INT8_TAG) && strcmp(tag, LSTMD_INT8_TAG) != 0) {
    lstmd_errorf("%s: an int8 model made by `lstmd quantize` (metadata 'format' is %s): only "
                 "eval, sample and predict take it; train --resume, distill.teacher and quantize "
                 "need the fp32 checkpoint it was made from", path, fmt);
    return LSTMD_EFORMAT;
  }
  if (!fmt || strcmp(fmt, tag) != 0) {
    lstmd_errorf("%s: not an %s (metadata 'format' is %s, expected %s)", path,
                 strcmp(tag, LSTMD_INT8_TAG) ? "lstmd checkpoint" : "lstmd int8 model",
                 fmt ? fmt : "absent", tag);
    return LSTMD_EFORMAT;
  }
  const char *kind = lstmd_st_meta_get(f, "model.kind");
  memset(s, 0, sizeof *s);
  s->kind = kind && !strcmp(kind, "text")       ? LSTMD_MODEL_TEXT
            : kind && !strcmp(kind, "series")   ? LSTMD_MODEL_SERIES
            : kind && !strcmp(kind, "classify") ? LSTMD_MODEL_CLASSIFY : 0;
  long v[6];
  static const char *keys[6] = {"model.vocab", "model.embed", "model.width", "model.hidden",
                                "model.layers", "model.horizon"};
  for (int i = 0; i < 6; i++) LSTMD_TRY(meta_long(f, path, keys[i], 0, 1 << 20, &v[i]));
  s->vocab = (int)v[0];
  s->embed = (int)v[1];
  s->width = (int)v[2];
  s->hidden = (int)v[3];
  s->layers = (int)v[4];
  s->horizon = (int)v[5];
  if (s->kind == LSTMD_MODEL_CLASSIFY) {
    long c = 0, bi = 0;
    LSTMD_TRY(meta_long(f, path, "model.classes", 2, LSTMD_MAX_CLASSES, &c));
    LSTMD_TRY(meta_long(f, path, "model.bidirectional", 0, 1, &bi));
    const char *pool = lstmd_st_meta_get(f, "model.pool");
    s->classes = (int)c;
    s->bidirectional = (int)bi;
    s->pool = pool && !strcmp(pool, "last") ? LSTMD_POOL_LAST
              : pool && !strcmp(pool, "mean") ? LSTMD_POOL_MEAN
              : pool && !strcmp(pool, "max")  ? LSTMD_POOL_MAX : -1;
    if (s->pool < 0) {
      lstmd_errorf("%s: metadata 'model.pool' is missing or not last, mean or max", path);
      return LSTMD_EFORMAT;
    }
  }
  if (lstmd_st_meta_get(f, "model.layer_norm")) { /* absent: a plain model */
    long ln = 0;
    LSTMD_TRY(meta_long(f, path, "model.layer_norm", 0, 1, &ln));
    s->layer_norm = (int)ln;
  }
  return LSTMD_OK;
}

int lstmd_checkpoint_read_tagged(const struct lstmd_st_file *f, const char *path, const char *tag,
                                 struct lstmd_model_shape *s, struct lstmd_data_meta *data) {
  LSTMD_TRY(read_shape(f, path, tag, s));
  const char *bad = lstmd_model_shape_error(s);
  if (bad) {
    lstmd_errorf("%s: invalid model shape in the metadata: %s", path, bad);
    return LSTMD_EFORMAT;
  }
  return read_data_meta(f, path, s, data);
}

int lstmd_checkpoint_all_finite(const char *path, const char *name, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) {
      lstmd_errorf("%s: tensor '%s' holds a non-finite value (%g at element %zu)", path, name,
                   x[i], i);
      return LSTMD_EFORMAT;
    }
  return LSTMD_OK;
}

/* Every model tensor, each checked finite: lstmd never saves a NaN or an Inf (a non-finite step
 * stops training before its checkpoint), so one here is a corrupt file, refused by name rather
 * than turned into NaN outputs. */
static int read_model_tensors(const struct lstmd_st_file *f, const char *path,
                              struct lstmd_model *m) {
  for (int i = 0; i < m->n_tensors; i++) {
    const struct lstmd_tensor *t = &m->tensors[i];
    LSTMD_TRY(lstmd_st_read_f32(f, t->name, t->rank, t->shape, m->params + t->offset));
    LSTMD_TRY(lstmd_checkpoint_all_finite(path, t->name, m->params + t->offset, t->count));
  }
  return LSTMD_OK;
}

int lstmd_checkpoint_load_model(const char *path, struct lstmd_model **out_model,
                                struct lstmd_data_meta *data) {
  *out_model = NULL;
  struct lstmd_st_file *f;
  LSTMD_TRY(lstmd_st_open(path, &f));
  struct lstmd_model_shape s;
  struct lstmd_model *m = NULL;
  int rc = read_shape(f, path, LSTMD_CHECKPOINT_TAG, &s);
  const char *bad = rc ? NULL : lstmd_model_shape_error(&s);
  if (bad) {
    lstmd_errorf("%s: invalid model shape in the metadata: %s", path, bad);
    rc = LSTMD_EFORMAT;
  }
  if (!rc) { /* every tensor present with its shape before anything is allocated */
    struct lstmd_model *layout = malloc(sizeof *layout);
    rc = layout ? LSTMD_OK : LSTMD_ENOMEM;
    if (layout) lstmd_model_layout(&s, layout);
    for (int i = 0; !rc && i < layout->n_tensors; i++)
      rc = lstmd_st_check_f32(f, layout->tensors[i].name, layout->tensors[i].rank,
                              layout->tensors[i].shape);
    free(layout);
  }
  if (!rc) rc = lstmd_model_create(&s, &m);
  if (!rc) rc = read_data_meta(f, path, &s, data);
  if (!rc) rc = read_model_tensors(f, path, m);
  lstmd_st_close(f);
  if (rc) {
    lstmd_model_destroy(m);
    return rc;
  }
  *out_model = m;
  return LSTMD_OK;
}

/* Whether `name` is in the comma-separated list. */
static int listed(const char *list, const char *name) {
  const size_t len = strlen(name);
  for (const char *p = list; (p = strstr(p, name)); p += len)
    if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0')) return 1;
  return 0;
}

/* The masks of the pruned tensors the checkpoint lists (metadata 'prune.masks'); the others
 * stay all ones (pruning that starts with this resume). Every value must be 0 or 1. */
static int read_masks(const struct lstmd_st_file *f, const char *path, const struct lstmd_model *m,
                      struct lstmd_prune *pr) {
  const char *list = lstmd_st_meta_get(f, "prune.masks");
  for (int i = 0; list && i < pr->n; i++) {
    const struct lstmd_tensor *x = &m->tensors[pr->tensor[i]];
    if (!listed(list, x->name)) continue;
    char name[48];
    snprintf(name, sizeof name, "prune.mask.%s", x->name);
    LSTMD_TRY(lstmd_st_read(f, name, "I8", x->rank, x->shape, pr->mask[i]));
    for (size_t j = 0; j < x->count; j++)
      if (pr->mask[i][j] > 1) {
        lstmd_errorf("%s: tensor %s holds %d at %zu; a mask holds 0 or 1", path, name,
                     (int8_t)pr->mask[i][j], j);
        return LSTMD_EFORMAT;
      }
  }
  return LSTMD_OK;
}

int lstmd_checkpoint_sparsity_json(const char *path, char **json) {
  *json = NULL;
  struct lstmd_st_file *f;
  LSTMD_TRY(lstmd_st_open(path, &f));
  const char *list = lstmd_st_meta_get(f, "prune.masks");
  json_t *o = list ? json_object() : NULL;
  int rc = LSTMD_OK;
  for (const char *p = list; p && *p && !rc;) {
    const char *comma = strchr(p, ',');
    char name[64];
    snprintf(name, sizeof name, "prune.mask.%.*s", (int)(comma ? comma - p : (long)strlen(p)), p);
    const char *dtype;
    int rank;
    int64_t shape[LSTMD_ST_MAX_RANK];
    rc = lstmd_st_info(f, name, &dtype, &rank, shape);
    size_t count = 1;
    for (int d = 0; !rc && d < rank; d++) count *= (size_t)shape[d];
    int8_t *mask = rc ? NULL : malloc(count ? count : 1);
    if (!rc && !mask) rc = LSTMD_ENOMEM;
    if (!rc) rc = lstmd_st_read(f, name, "I8", rank, shape, mask);
    size_t zeros = 0;
    for (size_t j = 0; !rc && j < count; j++) zeros += mask[j] == 0;
    if (!rc) json_object_set_new(o, name + strlen("prune.mask."),
                                 json_real(count ? (double)zeros / (double)count : 0.0));
    free(mask);
    p = comma ? comma + 1 : NULL;
  }
  if (!rc && o) *json = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
  json_decref(o);
  lstmd_st_close(f);
  return rc;
}

/* An optional double (absent: *out unchanged); allow_inf also admits +inf. */
static int meta_double_opt(const struct lstmd_st_file *f, const char *path, const char *key,
                           double lo, double hi, int allow_inf, double *out) {
  const char *v = lstmd_st_meta_get(f, key);
  if (!v) return LSTMD_OK;
  char *end;
  const double x = strtod(v, &end);
  if (!*v || *end || !((x >= lo && x <= hi) || (allow_inf && isinf(x) && x > 0))) {
    lstmd_errorf("%s: metadata '%s' is malformed or out of range", path, key);
    return LSTMD_EFORMAT;
  }
  *out = x;
  return LSTMD_OK;
}

/* The validation watch and the samples' length; checkpoints written before they existed have
 * none of them: a fresh watch (no best yet, lr scale 1). */
static int read_watch(const struct lstmd_st_file *f, const char *path, struct lstmd_val_watch *w,
                      long *samples_bytes) {
  *w = (struct lstmd_val_watch){.best_loss = INFINITY, .lr_scale = 1.0};
  *samples_bytes = 0;
  if (!lstmd_st_meta_get(f, "train.best_val_loss")) return LSTMD_OK;
  LSTMD_TRY(meta_double_opt(f, path, "train.best_val_loss", -1e300, 1e300, 1, &w->best_loss));
  LSTMD_TRY(meta_long(f, path, "train.best_step", 0, 1L << 60, &w->best_step));
  LSTMD_TRY(meta_long(f, path, "train.evals_since_best", 0, 1L << 60, &w->since_best));
  LSTMD_TRY(meta_long(f, path, "train.plateau_bad_evals", 0, 1L << 60, &w->plateau_bad));
  LSTMD_TRY(meta_double_opt(f, path, "train.lr_scale", 1e-300, 1.0, 0, &w->lr_scale));
  return meta_long(f, path, "train.samples_bytes", 0, 1L << 60, samples_bytes);
}

int lstmd_checkpoint_load_train(const char *path, struct lstmd_model *m, struct lstmd_optim *o,
                                struct lstmd_train_progress *p, char **config_json) {
  struct lstmd_st_file *f;
  LSTMD_TRY(lstmd_st_open(path, &f));
  struct lstmd_model_shape s;
  int rc = read_shape(f, path, LSTMD_CHECKPOINT_TAG, &s);
  if (!rc && memcmp(&s, &m->shape, sizeof s) != 0) {
    /* Name the first field that differs (model.vocab, .width and .horizon come from the
     * dataset, the others from the config). */
    const int mine[11] = {s.kind,  s.vocab,   s.embed,     s.width,     s.hidden,  s.layers,
                          s.horizon, s.layer_norm, s.classes, s.bidirectional, s.pool};
    const int want[11] = {m->shape.kind,    m->shape.vocab,      m->shape.embed,
                          m->shape.width,   m->shape.hidden,     m->shape.layers,
                          m->shape.horizon, m->shape.layer_norm, m->shape.classes,
                          m->shape.bidirectional, m->shape.pool};
    static const char *const keys[11] = {"model.kind",    "model.vocab",      "model.embed",
                                         "model.width",   "model.hidden",     "model.layers",
                                         "model.horizon", "model.layer_norm", "model.classes",
                                         "model.bidirectional", "model.pool"};
    int k = 0;
    while (k + 1 < (int)(sizeof keys / sizeof *keys) && mine[k] == want[k]) k++;
    lstmd_errorf("%s: the checkpoint's model has %s = %d, this run's %d; resume needs the same "
                 "model shape", path, keys[k], mine[k], want[k]);
    rc = LSTMD_ECONFIG;
  }
  const char *algo = lstmd_st_meta_get(f, "optim.algo");
  const char *want = o->cfg.algo == LSTMD_OPTIM_ADAMW ? "adamw" : "sgd";
  if (!rc && (!algo || strcmp(algo, want) != 0)) {
    lstmd_errorf("%s: checkpoint optimizer is %s, the config says %s", path, algo ? algo : "absent", want);
    rc = LSTMD_ECONFIG;
  }
  long step = 0, optim_step = 0;
  uint64_t epoch = 0, position = 0;
  if (!rc) rc = read_model_tensors(f, path, m);
  int64_t n = (int64_t)o->n;
  const char *first_moment = o->v ? "optim.exp_avg" : "optim.momentum_buffer";
  if (!rc) rc = lstmd_st_read_f32(f, first_moment, 1, &n, o->m);
  if (!rc) rc = lstmd_checkpoint_all_finite(path, first_moment, o->m, o->n);
  if (!rc && o->v) rc = lstmd_st_read_f32(f, "optim.exp_avg_sq", 1, &n, o->v);
  if (!rc && o->v) rc = lstmd_checkpoint_all_finite(path, "optim.exp_avg_sq", o->v, o->n);
  if (!rc) rc = meta_long(f, path, "optim.step", 0, 1L << 60, &optim_step);
  if (!rc) rc = meta_long(f, path, "train.step", 0, 1L << 60, &step);
  if (!rc) rc = meta_u64(f, path, "train.epoch", 10, &epoch);
  if (!rc) rc = meta_u64(f, path, "train.position", 10, &position);
  if (!rc && p->state_h && !lstmd_st_has(f, "state.h")) {
    lstmd_errorf("%s: holds no carried state (it was written by a run in data.order = shuffle), "
                 "and this run's data.order = stream needs it: resume with data.order = shuffle",
                 path);
    rc = LSTMD_ECONFIG;
  }
  if (!rc && p->state_h) {
    int64_t dims[3] = {m->shape.layers, p->state_batch, m->shape.hidden};
    const size_t count = (size_t)dims[0] * dims[1] * dims[2];
    if (!rc) rc = lstmd_st_read_f32(f, "state.h", 3, dims, p->state_h);
    if (!rc) rc = lstmd_checkpoint_all_finite(path, "state.h", p->state_h, count);
    if (!rc) rc = lstmd_st_read_f32(f, "state.c", 3, dims, p->state_c);
    if (!rc) rc = lstmd_checkpoint_all_finite(path, "state.c", p->state_c, count);
  }
  double loss_scale = 0.0;
  long scale_good = 0;
  const char *ls = lstmd_st_meta_get(f, "train.loss_scale"); /* optional: fp16 runs only */
  if (!rc && ls) {
    char *end;
    loss_scale = strtod(ls, &end);
    if (!*ls || *end || !(loss_scale > 0.0 && loss_scale < 1e30)) {
      lstmd_errorf("%s: metadata 'train.loss_scale' is malformed", path);
      rc = LSTMD_EFORMAT;
    }
    if (!rc) rc = meta_long(f, path, "train.loss_scale_good_steps", 0, 1L << 60, &scale_good);
  }
  if (!rc && p->prune) rc = read_masks(f, path, m, p->prune);
  struct lstmd_val_watch watch;
  long samples_bytes = 0;
  if (!rc) rc = read_watch(f, path, &watch, &samples_bytes);
  if (!rc && config_json) {
    const char *cfg = lstmd_st_meta_get(f, "config");
    *config_json = strdup(cfg ? cfg : "{}");
  }
  if (!rc) {
    o->step = optim_step;
    p->step = step;
    p->cursor.epoch = epoch;
    p->cursor.position = position;
    p->loss_scale = loss_scale;
    p->loss_scale_good_steps = scale_good;
    p->watch = watch;
    p->samples_bytes = samples_bytes;
    const char *crc = lstmd_st_meta_get(f, "distill.teacher_crc32c"); /* optional: only to compare */
    p->teacher_crc32c = crc ? (uint32_t)strtoul(crc, NULL, 16) : 0;
  }
  lstmd_st_close(f);
  return rc;
}
