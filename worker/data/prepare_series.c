/* prepare_series.c — `lstmd prepare series`: numeric CSV (header line, parsed with libcsv) →
 * train.bin/val.bin holding the target and feature columns as float32 rows, with the training
 * split's mean/std per column. Errors name the file and line; nothing is written on error. */
#define _GNU_SOURCE
#include <csv.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "dataset.h"
#include "prepare.h"

struct csv_state {
  struct lstmd_csv_pos pos; /* file, line being parsed, failed */
  int field;          /* index of the next field in the current record */
  int record;         /* records seen, header included */
  int header_fields;  /* fields in the header */
  char **header;      /* header names */
  int used;           /* used columns: target first, then features */
  const char *want[LSTMD_MAX_COLUMNS];
  int col_of_used[LSTMD_MAX_COLUMNS]; /* header index of each used column */
  float row[LSTMD_MAX_COLUMNS];
  float *values;      /* rows × used */
  size_t rows, cap_rows;
};

void lstmd_csv_fail(struct lstmd_csv_pos *pos, const char *fmt, ...) {
  if (!pos->failed) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "lstmd: %s:%ld: ", pos->input, pos->line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
  pos->failed = 1;
}
#define fail(st, ...) lstmd_csv_fail(&(st)->pos, __VA_ARGS__)

int lstmd_csv_number(const char *text, size_t len, float *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  while (*end == ' ' || *end == '\t' || *end == '\r') end++;
  if (len == 0 || end == text || *end != '\0' || !isfinite(v) || fabs(v) > 3.0e38) return -1;
  *out = (float)v;
  return 0;
}

static void on_field(void *data, size_t len, void *ctx) {
  struct csv_state *st = ctx;
  if (st->pos.failed) return;
  int f = st->field++;
  const char *text = data ? data : "";
  if (st->record == 0 && f == 0 && len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) {
    text += 3; /* UTF-8 byte order mark */
    len -= 3;
  }
  if (st->record == 0) {
    char **h = realloc(st->header, (size_t)(f + 1) * sizeof *h);
    if (!h) {
      fail(st, "out of memory");
      return;
    }
    st->header = h;
    h[f] = strndup(text, len);
    st->header_fields = f + 1;
    return;
  }
  for (int u = 0; u < st->used; u++) {
    if (st->col_of_used[u] != f) continue;
    if (lstmd_csv_number(text, len, &st->row[u]) != 0) {
      fail(st, "column '%s': '%.40s' is not a finite number", st->want[u], text);
      return;
    }
  }
}

/* The header is complete: find each wanted column in it. */
static void resolve_columns(struct csv_state *st) {
  for (int u = 0; u < st->used; u++) {
    st->col_of_used[u] = -1;
    for (int f = 0; f < st->header_fields; f++)
      if (strcmp(st->header[f], st->want[u]) == 0) {
        if (st->col_of_used[u] >= 0) {
      fail(st, "column '%s' appears twice in the header", st->want[u]);
      return;
    }
        st->col_of_used[u] = f;
      }
    if (st->col_of_used[u] < 0) {
      fail(st, "no column named '%s' in the header", st->want[u]);
      return;
    }
  }
}

static void on_record(int term, void *ctx) {
  (void)term;
  struct csv_state *st = ctx;
  if (st->pos.failed) return;
  int fields = st->field;
  st->field = 0;
  if (st->record++ == 0) return resolve_columns(st);
  if (fields != st->header_fields)
    {
      fail(st, "%d fields, the header has %d (ragged CSV)", fields, st->header_fields);
      return;
    }
  if (st->rows == st->cap_rows) {
    size_t cap = st->cap_rows ? 2 * st->cap_rows : 4096;
    float *v = realloc(st->values, cap * (size_t)st->used * sizeof(float));
    if (!v) {
      fail(st, "out of memory");
      return;
    }
    st->values = v;
    st->cap_rows = cap;
  }
  memcpy(st->values + st->rows * (size_t)st->used, st->row, (size_t)st->used * sizeof(float));
  st->rows++;
}

/* Splits "a,b,c" into st->want after the target; names must be non-empty and distinct. */
static int parse_feature_list(struct csv_state *st, char *list) {
  for (char *save = NULL, *name = list ? strtok_r(list, ",", &save) : NULL; name;
       name = strtok_r(NULL, ",", &save)) {
    int dup = 0;
    for (int u = 0; u < st->used; u++) dup |= strcmp(st->want[u], name) == 0;
    if (dup) continue; /* the target may be listed as a feature too */
    if (st->used == LSTMD_MAX_COLUMNS) {
      lstmd_errorf("too many feature columns (at most %d)", LSTMD_MAX_COLUMNS - 1);
      return LSTMD_EINVAL;
    }
    if (strlen(name) >= LSTMD_MAX_NAME_BYTES) {
      lstmd_errorf("column name '%s' is longer than %d bytes", name, LSTMD_MAX_NAME_BYTES - 1);
      return LSTMD_EINVAL;
    }
    st->want[st->used++] = name;
  }
  return LSTMD_OK;
}

int lstmd_csv_parse_file(struct lstmd_csv_pos *pos, void (*on_field)(void *, size_t, void *),
                         void (*on_record)(int, void *), void *ctx) {
  FILE *f = fopen(pos->input, "r");
  if (!f) {
    lstmd_errorf("%s: cannot open input: %s", pos->input, strerror(errno));
    return LSTMD_EIO;
  }
  struct csv_parser p;
  if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0) {
    fclose(f);
    return LSTMD_ENOMEM;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while (!pos->failed && (n = getline(&line, &cap, f)) > 0) {
    pos->line++;
    if (csv_parse(&p, line, (size_t)n, on_field, on_record, ctx) != (size_t)n)
      lstmd_csv_fail(pos, "malformed CSV: %s", csv_strerror(csv_error(&p)));
  }
  /* no line++: what fini completes is the last line's record (a file without a final newline) */
  if (!pos->failed && csv_fini(&p, on_field, on_record, ctx) != 0)
    lstmd_csv_fail(pos, "malformed CSV at end of file: %s", csv_strerror(csv_error(&p)));
  csv_free(&p);
  free(line);
  int read_error = ferror(f);
  fclose(f);
  if (read_error) {
    lstmd_errorf("%s: read failed", pos->input);
    return LSTMD_EIO;
  }
  return pos->failed ? LSTMD_EFORMAT : LSTMD_OK;
}

static int parse_csv(struct csv_state *st) {
  LSTMD_TRY(lstmd_csv_parse_file(&st->pos, on_field, on_record, st));
  if (st->record == 0) {
    lstmd_errorf("%s: input is empty", st->pos.input);
    return LSTMD_EFORMAT;
  }
  return LSTMD_OK;
}

static void column_stats(const float *v, size_t rows, int width, struct lstmd_dataset_info *info) {
  for (int c = 0; c < width; c++) {
    double sum = 0, sumsq = 0;
    for (size_t r = 0; r < rows; r++) sum += v[r * (size_t)width + c];
    double mean = sum / (double)rows;
    for (size_t r = 0; r < rows; r++) {
      double d = v[r * (size_t)width + c] - mean;
      sumsq += d * d;
    }
    double std = sqrt(sumsq / (double)rows);
    info->mean[c] = (float)mean;
    info->std[c] = std > 1e-12 ? (float)std : 1.0f;
  }
}

static int write_splits(const char *out_dir, struct lstmd_dataset_info *info, const float *values,
                        size_t train_rows, size_t val_rows) {
  struct lstmd_dataset_writer train = {0}, val = {0};
  char path[4096];
  snprintf(path, sizeof path, "%s/train.bin", out_dir);
  LSTMD_TRY(lstmd_mkdir_p(out_dir));
  LSTMD_TRY(lstmd_dataset_writer_open(&train, path, info));
  snprintf(path, sizeof path, "%s/val.bin", out_dir);
  int rc = lstmd_dataset_writer_open(&val, path, info);
  if (rc) {
    lstmd_dataset_writer_abort(&train);
    return rc;
  }
  rc = lstmd_dataset_writer_append(&train, values, train_rows);
  if (!rc) rc = lstmd_dataset_writer_append(&val, values + train_rows * (size_t)info->width, val_rows);
  uint64_t pair_id = (uint64_t)train.info.payload_crc32c << 32 | val.info.payload_crc32c;
  if (!rc) rc = lstmd_dataset_writer_finish(&train, pair_id);
  if (!rc) rc = lstmd_dataset_writer_finish(&val, pair_id);
  if (!rc) rc = lstmd_dataset_writer_commit(&val);
  if (!rc) rc = lstmd_dataset_writer_commit(&train);
  lstmd_dataset_writer_abort(&train); /* no-ops after a commit */
  lstmd_dataset_writer_abort(&val);
  return rc;
}

static void free_header(struct csv_state *st) {
  for (int f = 0; f < st->header_fields; f++) free(st->header[f]);
  free(st->header);
}

int lstmd_csv_read_columns(const char *path, const char *const *names, int n, float **values,
                           size_t *rows) {
  if (n < 1 || n > LSTMD_MAX_COLUMNS) {
    lstmd_errorf("%s: %d columns requested, at most %d", path, n, LSTMD_MAX_COLUMNS);
    return LSTMD_EINVAL;
  }
  struct csv_state st = {.pos = {.input = path}, .used = n};
  for (int u = 0; u < n; u++) st.want[u] = names[u];
  int rc = parse_csv(&st);
  free_header(&st);
  if (rc) {
    free(st.values);
    return rc;
  }
  *values = st.values;
  *rows = st.rows;
  return LSTMD_OK;
}

int lstmd_prepare_series(const char *input, const char *out_dir, const char *target,
                         const char *features, int horizon, double val_fraction, int season) {
  struct csv_state st = {.pos = {.input = input}, .used = 1, .want = {target}};
  char *list = features ? strdup(features) : NULL;
  int rc = strlen(target) >= LSTMD_MAX_NAME_BYTES ? LSTMD_EINVAL : LSTMD_OK;
  if (rc) lstmd_errorf("target column name is longer than %d bytes", LSTMD_MAX_NAME_BYTES - 1);
  if (!rc) rc = parse_feature_list(&st, list);
  if (!rc) rc = parse_csv(&st);
  size_t val_rows = (size_t)(val_fraction * (double)st.rows), train_rows = st.rows - val_rows;
  if (!rc && train_rows < (size_t)horizon + 2) {
    lstmd_errorf("%s: %zu data rows leave %zu for training; need at least horizon + 2 = %d", input,
                 st.rows, train_rows, horizon + 2);
    rc = LSTMD_EFORMAT;
  }
  struct lstmd_dataset_info *info = calloc(1, sizeof *info);
  if (!rc && !info) rc = LSTMD_ENOMEM;
  if (!rc) {
    info->kind = LSTMD_DATASET_SERIES;
    info->width = st.used;
    info->horizon = horizon;
    info->season = season;
    for (int u = 0; u < st.used; u++) snprintf(info->names[u], LSTMD_MAX_NAME_BYTES, "%s", st.want[u]);
    column_stats(st.values, train_rows, st.used, info);
    rc = write_splits(out_dir, info, st.values, train_rows, val_rows);
  }
  if (!rc)
    fprintf(stderr, "lstmd: prepared series %s: %zu rows × %d columns (target '%s'), horizon %d, "
            "season %d, train %zu, val %zu -> %s\n", input, st.rows, st.used, target, horizon,
            season, train_rows, val_rows, out_dir);
  if (!rc) lstmd_prepare_warn_short(out_dir, "rows", train_rows, val_rows, horizon);
  free_header(&st);
  free(st.values);
  free(list);
  free(info);
  return rc;
}
