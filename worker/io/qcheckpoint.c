/* qcheckpoint.c — writing and strictly reading the int8 model file (format in qcheckpoint.h). */
#define _GNU_SOURCE
#include "qcheckpoint.h"

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/status.h"
#include "durable.h"
#include "safetensors.h"

/* A weight of the layout (rank 2, not the embedding) is stored in int8 with its scales. */
static int is_weight(const struct lstmd_tensor *t) {
  return t->rank == 2 && strcmp(t->name, "embed.weight") != 0;
}

int lstmd_qcheckpoint_save(const char *path, const struct lstmd_model *m,
                           const struct lstmd_data_meta *data, const char *source) {
  if (m->shape.layer_norm) { /* the int8 forward (qmodel.c) has no layer normalisation */
    lstmd_errorf("quantize: %s: model.layer_norm is on, and the int8 model has no layer-normalised "
                 "LSTM yet; use the fp32 checkpoint with eval, sample and predict", source);
    return LSTMD_ECONFIG;
  }
  struct lstmd_st_tensor f32[LSTMD_MAX_TENSORS * 2], i8[LSTMD_MAX_TENSORS];
  char scale_names[LSTMD_MAX_TENSORS][48];
  void *owned[LSTMD_MAX_TENSORS * 2] = {0};
  int nf = 0, ni = 0, no = 0, rc = LSTMD_OK;
  for (int i = 0; i < m->n_tensors && !rc; i++) {
    const struct lstmd_tensor *t = &m->tensors[i];
    const float *src = m->params + t->offset;
    if (!is_weight(t)) {
      f32[nf++] = (struct lstmd_st_tensor){t->name, src, t->rank, {t->shape[0], t->shape[1]}};
      continue;
    }
    const int rows = (int)t->shape[0], cols = (int)t->shape[1];
    int8_t *q = owned[no++] = malloc((size_t)rows * cols + 1);
    float *scale = owned[no++] = malloc((size_t)rows * sizeof(float));
    if (!q || !scale) {
      rc = LSTMD_ENOMEM;
      break;
    }
    lstmd_cpu_quantize_rows(rows, cols, src, q, scale);
    snprintf(scale_names[ni], sizeof scale_names[ni], "%s.scale", t->name);
    f32[nf++] = (struct lstmd_st_tensor){scale_names[ni], scale, 1, {rows}};
    i8[ni++] = (struct lstmd_st_tensor){t->name, q, 2, {rows, cols}, "I8"};
  }
  /* F32 first, then I8: every tensor starts aligned to its element size. */
  for (int i = 0; i < ni; i++) f32[nf + i] = i8[i];
  const struct lstmd_st_meta extra[] = {
      {"quant.weights", "int8, symmetric, one F32 scale per output row in '<weight>.scale': "
                        "w[r,:] = scale[r] * q[r,:]"},
      {"quant.activations", "dynamic: per row and step, uint8 in [0,127] with a scale and a zero "
                            "point from the row's min and max"},
      {"quant.source", source}};
  if (!rc) rc = lstmd_checkpoint_write_tagged(path, LSTMD_INT8_TAG, &m->shape, data, f32, nf + ni,
                                              extra, 3);
  for (int i = 0; i < no; i++) free(owned[i]);
  return rc;
}

/* ---- loading ---- */

/* Checks an I8 weight [rows, cols] and its scale tensor before anything is allocated. */
static int check_weight(const struct lstmd_st_file *f, const char *path,
                        const struct lstmd_tensor *t) {
  LSTMD_TRY(lstmd_st_check(f, t->name, "I8", 2, t->shape));
  char name[48];
  snprintf(name, sizeof name, "%s.scale", t->name);
  const char *dtype;
  int rank;
  int64_t shape[LSTMD_ST_MAX_RANK];
  LSTMD_TRY(lstmd_st_info(f, name, &dtype, &rank, shape));
  if (strcmp(dtype, "F32") != 0 || rank != 1 || shape[0] != t->shape[0]) {
    lstmd_errorf("%s: tensor '%s' must be F32 [%lld], one scale per row of '%s' (it is %s with "
                 "%lld values)", path, name, (long long)t->shape[0], t->name, dtype,
                 rank == 1 ? (long long)shape[0] : -1LL);
    return LSTMD_EFORMAT;
  }
  return LSTMD_OK;
}

/* Reads weight t and its scales (checked: finite, > 0) and packs them into w. */
static int read_weight(const struct lstmd_st_file *f, const char *path,
                       const struct lstmd_tensor *t, struct lstmd_qweight *w) {
  const int rows = (int)t->shape[0], cols = (int)t->shape[1];
  int8_t *q = malloc((size_t)rows * cols + 1);
  float *scale = malloc((size_t)rows * sizeof(float));
  char name[48];
  snprintf(name, sizeof name, "%s.scale", t->name);
  int64_t n = rows;
  int rc = q && scale ? LSTMD_OK : LSTMD_ENOMEM;
  if (!rc) rc = lstmd_st_read(f, t->name, "I8", 2, t->shape, q);
  if (!rc) rc = lstmd_st_read(f, name, "F32", 1, &n, scale);
  for (int r = 0; !rc && r < rows; r++)
    if (!(isfinite(scale[r]) && scale[r] > 0.0f)) {
      lstmd_errorf("%s: tensor '%s': the scale of row %d is %g; scales must be finite and > 0",
                   path, name, r, scale[r]);
      rc = LSTMD_EFORMAT;
    }
  if (!rc) rc = lstmd_cpu_qweight_pack(rows, cols, q, scale, w);
  free(q);
  free(scale);
  return rc;
}

static int read_f32(const struct lstmd_st_file *f, const char *path, const struct lstmd_tensor *t,
                    float *out) {
  LSTMD_TRY(lstmd_st_read_f32(f, t->name, t->rank, t->shape, out));
  return lstmd_checkpoint_all_finite(path, t->name, out, t->count);
}

int lstmd_qcheckpoint_load(const char *path, struct lstmd_qmodel **out,
                           struct lstmd_data_meta *data) {
  *out = NULL;
  struct lstmd_st_file *f;
  LSTMD_TRY(lstmd_st_open(path, &f));
  struct lstmd_model_shape s;
  struct lstmd_model *layout = malloc(sizeof *layout);
  struct lstmd_qmodel *qm = NULL;
  int rc = layout ? lstmd_checkpoint_read_tagged(f, path, LSTMD_INT8_TAG, &s, data) : LSTMD_ENOMEM;
  if (!rc) lstmd_model_layout(&s, layout);
  for (int i = 0; !rc && i < layout->n_tensors; i++) { /* all of it, before allocating */
    const struct lstmd_tensor *t = &layout->tensors[i];
    rc = is_weight(t) ? check_weight(f, path, t) : lstmd_st_check(f, t->name, "F32", t->rank, t->shape);
  }
  if (!rc) rc = lstmd_qmodel_create(&s, &qm);
  /* The layout's order: [embed.weight], then per layer weight_ih, weight_hh, bias_ih, bias_hh,
   * then head.weight, head.bias (model.h). */
  const struct lstmd_tensor *t = layout ? layout->tensors : NULL;
  if (!rc && s.kind == LSTMD_MODEL_TEXT) rc = read_f32(f, path, t++, qm->embed);
  for (int l = 0; !rc && l < s.layers; l++, t += 4) {
    rc = read_weight(f, path, &t[0], &qm->layer[l].ih);
    if (!rc) rc = read_weight(f, path, &t[1], &qm->layer[l].hh);
    if (!rc) rc = read_f32(f, path, &t[2], qm->layer[l].b_ih);
    if (!rc) rc = read_f32(f, path, &t[3], qm->layer[l].b_hh);
  }
  if (!rc) rc = read_weight(f, path, &t[0], &qm->head);
  if (!rc) rc = read_f32(f, path, &t[1], qm->head_bias);
  if (!rc) rc = lstmd_qmodel_finish(qm);
  lstmd_st_close(f);
  free(layout);
  if (rc) {
    lstmd_qmodel_destroy(qm);
    return rc;
  }
  *out = qm;
  return LSTMD_OK;
}

/* The 'format' tag of the safetensors file at path (malloc'd), or NULL; *dataset = 1 when the
 * file starts with a dataset split's magic instead. Prints nothing. */
static char *format_tag(const char *path, int *dataset) {
  *dataset = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: no wait (safetensors.c) */
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd); /* not a file: the checkpoint loader says so */
    return NULL;
  }
  if (fd < 0) return NULL;
  uint8_t prefix[8];
  uint64_t n = 0;
  char *text = NULL;
  if (lstmd_read_at(fd, prefix, 8, 0) == 0) {
    *dataset = !memcmp(prefix, "LSTMDDAT", 8);
    for (int i = 7; i >= 0; i--) n = n << 8 | prefix[i];
    if (!*dataset && n > 0 && n <= 100000000 && (text = malloc(n)) &&
        lstmd_read_at(fd, text, n, 8) != 0) {
      free(text);
      text = NULL;
    }
  }
  close(fd);
  json_t *root = text ? json_loadb(text, n, 0, NULL) : NULL;
  free(text);
  const char *fmt = json_string_value(json_object_get(json_object_get(root, "__metadata__"), "format"));
  char *tag = fmt ? strdup(fmt) : NULL;
  json_decref(root);
  return tag;
}

int lstmd_qcheckpoint_is_int8(const char *path) {
  int dataset;
  char *fmt = format_tag(path, &dataset);
  /* Any version of the tag: the int8 loader then says which one it reads. */
  const int yes = fmt && strncmp(fmt, "lstmd-int8-", 11) == 0;
  free(fmt);
  return yes;
}

/* 1 when path is one of a training run's own records (named as lstmd train names them) in a
 * directory that lstmd train has used as a run dir (its .lstmd.lock is there). */
static int run_record(const char *path) {
  const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
  if (strcmp(name, "metrics.jsonl") && strcmp(name, "train.log") && strcmp(name, "samples.txt") &&
      strncmp(name, "events.out.tfevents.", 20))
    return 0;
  char lock[4200];
  snprintf(lock, sizeof lock, "%.*s.lstmd.lock", slash ? (int)(slash - path + 1) : 0, path);
  return access(path, F_OK) == 0 && access(lock, F_OK) == 0;
}

const char *lstmd_file_not_to_replace(const char *path) {
  if (run_record(path)) return "a training run's record (lstmd train's, in its run dir)";
  int dataset;
  char *fmt = format_tag(path, &dataset);
  const int ckpt = fmt && strncmp(fmt, "lstmd-checkpoint-", 17) == 0;
  free(fmt);
  return dataset ? "a dataset split (lstmd prepare's)"
         : ckpt  ? "a training checkpoint (lstmd train's)"
                 : NULL;
}
