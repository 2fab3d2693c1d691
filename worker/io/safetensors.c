/* safetensors.c — safetensors I/O with jansson for the JSON header (see safetensors.h). */
#define _GNU_SOURCE
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/status.h"
#include "durable.h"

enum { kMaxHeaderBytes = 100000000 };

static int dtype_size(const char *d) {
  static const struct { const char *name; int size; } table[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},     {"U32", 4},     {"F32", 4},
      {"F64", 8},  {"I64", 8}, {"U64", 8}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(table[i].name, d) == 0) return table[i].size;
  return 0;
}

static const char *tensor_dtype(const struct lstmd_st_tensor *t) { return t->dtype ? t->dtype : "F32"; }

static size_t tensor_bytes(const struct lstmd_st_tensor *t) {
  size_t n = (size_t)dtype_size(tensor_dtype(t));
  for (int d = 0; d < t->rank; d++) n *= (size_t)t->shape[d];
  return n;
}


int lstmd_st_write(const char *path, const struct lstmd_st_tensor *tensors, int n_tensors,
                   const struct lstmd_st_meta *meta, int n_meta) {
  json_t *root = json_object(), *md = json_object();
  size_t offset = 0;
  for (int i = 0; i < n_tensors; i++) {
    const struct lstmd_st_tensor *t = &tensors[i];
    json_t *shape = json_array();
    for (int d = 0; d < t->rank; d++) json_array_append_new(shape, json_integer(t->shape[d]));
    size_t n = tensor_bytes(t);
    json_object_set_new(root, t->name,
                        json_pack("{s:s, s:o, s:[I,I]}", "dtype", tensor_dtype(t), "shape", shape,
                                  "data_offsets", (json_int_t)offset, (json_int_t)(offset + n)));
    offset += n;
  }
  for (int i = 0; i < n_meta; i++) json_object_set_new(md, meta[i].key, json_string(meta[i].value));
  if (n_meta) json_object_set_new(root, "__metadata__", md);
  else json_decref(md);
  char *text = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (!text) return LSTMD_ENOMEM;
  size_t len = strlen(text), padded = (len + 7) / 8 * 8;
  uint8_t prefix[8];
  for (int i = 0; i < 8; i++) prefix[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  struct lstmd_durable w;
  int rc = lstmd_durable_open(&w, path);
  if (rc) {
    free(text);
    return rc;
  }
  rc = lstmd_durable_write(&w, prefix, 8);
  if (!rc) rc = lstmd_durable_write(&w, text, len);
  if (!rc) rc = lstmd_durable_write(&w, "        ", padded - len);
  for (int i = 0; !rc && i < n_tensors; i++)
    rc = lstmd_durable_write(&w, tensors[i].data, tensor_bytes(&tensors[i]));
  free(text);
  if (rc) {
    lstmd_durable_abort(&w);
    return rc;
  }
  return lstmd_durable_commit(&w);
}

struct st_entry {
  const char *name;
  const char *dtype;
  int rank;
  int64_t shape[LSTMD_ST_MAX_RANK];
  uint64_t begin, end;
};

struct lstmd_st_file {
  char *path;
  int fd;
  uint64_t data_start;
  json_t *root;
  int n;
  struct st_entry *entries;
};


static int cmp_begin(const void *a, const void *b) {
  const struct st_entry *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Checks one header entry and fills e. Returns NULL or a description of what is wrong. */
static const char *parse_entry(const char *name, json_t *v, struct st_entry *e) {
  json_t *dtype = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
  json_t *offs = json_object_get(v, "data_offsets");
  if (!json_is_object(v) || !json_is_string(dtype) || !json_is_array(shape) ||
      !json_is_array(offs) || json_array_size(offs) != 2)
    return "entry lacks dtype, shape or data_offsets";
  e->name = name;
  e->dtype = json_string_value(dtype);
  int size = dtype_size(e->dtype);
  if (!size) return "unknown dtype";
  if (json_array_size(shape) > LSTMD_ST_MAX_RANK) return "rank too high";
  e->rank = (int)json_array_size(shape);
  uint64_t count = 1;
  for (int d = 0; d < e->rank; d++) {
    json_t *x = json_array_get(shape, (size_t)d);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > (1LL << 40))
      return "bad shape";
    e->shape[d] = json_integer_value(x);
    count *= (uint64_t)e->shape[d];
    if (count > (1ULL << 40)) return "tensor too large";
  }
  json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
  if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
      json_integer_value(en) < json_integer_value(b))
    return "bad data_offsets";
  e->begin = (uint64_t)json_integer_value(b);
  e->end = (uint64_t)json_integer_value(en);
  if (e->end - e->begin != count * (uint64_t)size) return "data_offsets disagree with shape";
  return NULL;
}

#define ST_FAIL(...)            \
  do {                          \
    lstmd_errorf(__VA_ARGS__);  \
    lstmd_st_close(f);          \
    return LSTMD_EFORMAT;       \
  } while (0)

int lstmd_st_open(const char *path, struct lstmd_st_file **out) {
  *out = NULL;
  struct lstmd_st_file *f = calloc(1, sizeof *f);
  if (!f) return LSTMD_ENOMEM;
  /* O_NONBLOCK: a FIFO in a checkpoint's place must be refused below, not wait for a writer
   * (it does nothing to reads of a regular file) */
  f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  f->path = strdup(path);
  if (f->fd < 0) {
    lstmd_errorf("%s: cannot open checkpoint: %s", path, strerror(errno));
    lstmd_st_close(f);
    return LSTMD_EIO;
  }
  struct stat st;
  uint8_t prefix[8];
  int dir_len = (int)strlen(path);
  while (dir_len > 1 && path[dir_len - 1] == '/') dir_len--;
  const int stat_ok = fstat(f->fd, &st) == 0;
  if (stat_ok && S_ISDIR(st.st_mode)) /* a run dir, given for its checkpoint */
    ST_FAIL("%s: a directory, not a checkpoint file: name one in it (a run dir's newest is "
            "%.*s/latest.safetensors)", path, dir_len, path);
  if (!stat_ok || !S_ISREG(st.st_mode))
    ST_FAIL("%s: not a regular file", path);
  if (st.st_size < 8 || lstmd_read_at(f->fd, prefix, 8, 0) != 0)
    ST_FAIL("%s: not a safetensors file (shorter than 8 bytes)", path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | prefix[i];
  /* What users hand over instead, by their first bytes: a dataset split, an exported ONNX
   * model (a protobuf ModelProto: field 1, ir_version, a small varint, then field 2 or 8) */
  const char *what = !memcmp(prefix, "LSTMDDAT", 8) ? ": it is an lstmd dataset split (lstmd prepare's)"
                     : prefix[0] == 0x08 && prefix[1] < 0x80 && (prefix[2] == 0x12 || prefix[2] == 0x42)
                         ? ": it looks like an ONNX model (lstmd export onnx writes those from a checkpoint)"
                         : "";
  if (n > kMaxHeaderBytes || 8 + n > (uint64_t)st.st_size)
    ST_FAIL("%s: not a safetensors file or truncated (header length %llu, file %lld bytes)%s", path,
            (unsigned long long)n, (long long)st.st_size, what);
  char *text = malloc(n + 1);
  if (!text || lstmd_read_at(f->fd, text, n, 8) != 0) {
    free(text);
    ST_FAIL("%s: cannot read header", path);
  }
  json_error_t jerr = {0};
  const int text_first_brace = n > 0 && text[0] == '{';
  f->root = text_first_brace ? json_loadb(text, n, JSON_REJECT_DUPLICATES, &jerr) : NULL;
  free(text);
  if (!json_is_object(f->root))
    ST_FAIL("%s: header is not a valid JSON object%s%s", path, f->root || text_first_brace ? ": " : "",
            f->root ? "" : jerr.text);
  f->data_start = 8 + n;
  f->entries = calloc(json_object_size(f->root) + 1, sizeof *f->entries);
  if (!f->entries) ST_FAIL("%s: out of memory", path);
  const char *key;
  json_t *value;
  json_object_foreach(f->root, key, value) {
    if (strcmp(key, "__metadata__") == 0) {
      const char *k2;
      json_t *v2;
      if (!json_is_object(value)) ST_FAIL("%s: __metadata__ is not an object", path);
      json_object_foreach(value, k2, v2) if (!json_is_string(v2))
          ST_FAIL("%s: metadata value '%s' is not a string", path, k2);
      continue;
    }
    const char *why = parse_entry(key, value, &f->entries[f->n]);
    if (why) ST_FAIL("%s: tensor '%s': %s", path, key, why);
    f->n++;
  }
  struct st_entry *sorted = malloc((size_t)(f->n + 1) * sizeof *sorted);
  if (!sorted) ST_FAIL("%s: out of memory", path);
  memcpy(sorted, f->entries, (size_t)f->n * sizeof *sorted);
  qsort(sorted, (size_t)f->n, sizeof *sorted, cmp_begin);
  uint64_t end = 0;
  int gap = 0;
  for (int i = 0; i < f->n; i++) {
    gap |= sorted[i].begin != end;
    end = sorted[i].end;
  }
  free(sorted);
  if (gap) ST_FAIL("%s: tensor data has gaps or overlaps", path);
  if (f->data_start + end != (uint64_t)st.st_size)
    ST_FAIL("%s: file is %lld bytes but the header describes %llu (truncated?)", path,
            (long long)st.st_size, (unsigned long long)(f->data_start + end));
  *out = f;
  return LSTMD_OK;
}

void lstmd_st_close(struct lstmd_st_file *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  json_decref(f->root);
  free(f->entries);
  free(f->path);
  free(f);
}

const char *lstmd_st_meta_get(const struct lstmd_st_file *f, const char *key) {
  return json_string_value(json_object_get(json_object_get(f->root, "__metadata__"), key));
}

static const struct st_entry *find(const struct lstmd_st_file *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->entries[i].name, name) == 0) return &f->entries[i];
  return NULL;
}

int lstmd_st_has(const struct lstmd_st_file *f, const char *name) { return find(f, name) != NULL; }

int lstmd_st_info(const struct lstmd_st_file *f, const char *name, const char **dtype, int *rank,
                  int64_t *shape) {
  const struct st_entry *e = find(f, name);
  if (!e) {
    lstmd_errorf("%s: no tensor '%s'", f->path, name);
    return LSTMD_EFORMAT;
  }
  *dtype = e->dtype;
  *rank = e->rank;
  memcpy(shape, e->shape, sizeof e->shape);
  return LSTMD_OK;
}

int lstmd_st_check(const struct lstmd_st_file *f, const char *name, const char *dtype, int rank,
                   const int64_t *shape) {
  const struct st_entry *e = find(f, name);
  if (!e) {
    lstmd_errorf("%s: no tensor '%s'", f->path, name);
    return LSTMD_EFORMAT;
  }
  int same = strcmp(e->dtype, dtype) == 0 && e->rank == rank;
  for (int d = 0; same && d < rank; d++) same = e->shape[d] == shape[d];
  if (!same) {
    lstmd_errorf("%s: tensor '%s' has dtype %s and a shape other than the metadata describes "
                 "(%s expected)", f->path, name, e->dtype, dtype);
    return LSTMD_EFORMAT;
  }
  return LSTMD_OK;
}

int lstmd_st_read(const struct lstmd_st_file *f, const char *name, const char *dtype, int rank,
                  const int64_t *shape, void *out) {
  LSTMD_TRY(lstmd_st_check(f, name, dtype, rank, shape));
  const struct st_entry *e = find(f, name);
  if (lstmd_read_at(f->fd, out, (size_t)(e->end - e->begin), f->data_start + e->begin) != 0) {
    lstmd_errorf("%s: cannot read tensor '%s'", f->path, name);
    return LSTMD_EIO;
  }
  return LSTMD_OK;
}

int lstmd_st_check_f32(const struct lstmd_st_file *f, const char *name, int rank,
                       const int64_t *shape) {
  return lstmd_st_check(f, name, "F32", rank, shape);
}

int lstmd_st_read_f32(const struct lstmd_st_file *f, const char *name, int rank,
                      const int64_t *shape, float *out) {
  return lstmd_st_read(f, name, "F32", rank, shape, out);
}
