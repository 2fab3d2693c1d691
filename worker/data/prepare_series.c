/* prepare_series.c — `lstmd prepare series`: numeric CSV (header line, parsed with libcsv) →
 * train.bin/val.bin holding the target and feature columns as float32 rows, with the training
 * split's mean/std per column. Errors name the file and line; nothing is written on error. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "kernels/utf8.h"
#include "dataset.h"
#include "prepare.h"

struct csv_state {
  struct lstmd_csv_pos pos; /* file, line, fields and records (the header first), failed */
  int header_fields;  /* fields in the header */
  char **header;      /* header names */
  int used;           /* used columns: target first, then features */
  const char *want[LSTMD_MAX_COLUMNS];
  int col_of_used[LSTMD_MAX_COLUMNS]; /* header index of each used column */
  float row[LSTMD_MAX_COLUMNS];
  int missing;        /* enum lstmd_missing: refuse a missing field, or keep it as NaN to fill */
  float *values;      /* rows × used */
  size_t rows, cap_rows;
};

#define fail(st, ...) lstmd_csv_fail(&(st)->pos, __VA_ARGS__)

static void on_field(void *data, size_t len, void *ctx) {
  struct csv_state *st = ctx;
  if (st->pos.failed) return;
  const int f = st->pos.field - 1; /* this field's index in its record */
  const char *text = data ? data : ""; /* a byte order mark is gone: lstmd_csv_parse_file */
  if (st->pos.records == 0) {
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
    /* a number first (nearly every field is one); a gap token is never one */
    if (lstmd_csv_number(text, len, &st->row[u]) == 0) continue;
    if (!lstmd_csv_is_missing(text, len)) {
      fail(st, "column '%s': '%.40s' is not a finite number%s", st->want[u], text,
           lstmd_csv_number_hint(text));
      return;
    }
    if (st->missing != LSTMD_MISSING_ERROR) { /* csv_missing.c fills the NaN after the last row */
      st->row[u] = NAN;
      continue;
    }
    char column[LSTMD_MAX_NAME_BYTES + 16];
    snprintf(column, sizeof column, "column '%s'", st->want[u]);
    lstmd_csv_missing_refuse(&st->pos, column, text, len);
    return;
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
  const int fields = st->pos.field;
  if (st->pos.records == 0) return resolve_columns(st);
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

/* One column name from the command line (--target, or an item of --features) into out: without
 * the spaces and TABs around it, as libcsv gives an unquoted header cell, so `--features 'temp_c,
 * humidity'` names the columns of a header "temp_c, humidity". Empty or too long: refused naming
 * the option and its whole value. */
static int take_name(const char *option, const char *value, const char *item, size_t len,
                     char out[LSTMD_MAX_NAME_BYTES]) {
  const char *name;
  len = lstmd_csv_trim(item, len, &name);
  if (len == 0 || len >= LSTMD_MAX_NAME_BYTES) {
    lstmd_errorf("%s '%s': %s", option, value,
                 len ? "a column name longer than 63 bytes" : "an empty column name");
    return LSTMD_EINVAL;
  }
  memcpy(out, name, len);
  out[len] = '\0';
  if (!lstmd_utf8_valid(out)) { /* checkpoints keep the names as JSON text (kernels/utf8.h) */
    char shown[4 * LSTMD_MAX_NAME_BYTES]; /* its bytes past ASCII as \xNN */
    size_t k = 0;
    for (size_t i = 0; i < len; i++)
      k += (size_t)snprintf(shown + k, sizeof shown - k,
                            (unsigned char)out[i] < 0x80 ? "%c" : "\\x%02x", (unsigned char)out[i]);
    lstmd_errorf("%s: the column name '%s' is not UTF-8 text: name the column in UTF-8 (the "
                 "CSV's header too: save the file as UTF-8)", option, shown);
    return LSTMD_EINVAL;
  }
  return LSTMD_OK;
}

/* The model's input columns: the target, then each of the comma-separated `features` (NULL or
 * blank: none), into info->names with st->want pointing at them. A feature that is the target,
 * or one listed twice, is one input column all the same: the README has the inputs as the target
 * followed by the features, so the target is there already; a warning says it was not added
 * again (the data are what was asked for, the column count is not what the list suggests). */
static int parse_names(struct csv_state *st, struct lstmd_dataset_info *info, const char *target,
                       const char *features) {
  LSTMD_TRY(take_name("--target", target, target, strlen(target), info->names[0]));
  st->want[0] = info->names[0];
  st->used = 1;
  const char *blank;
  if (!features || lstmd_csv_trim(features, strlen(features), &blank) == 0) return LSTMD_OK;
  for (const char *item = features;;) {
    const char *comma = strchr(item, ',');
    const size_t len = comma ? (size_t)(comma - item) : strlen(item);
    char name[LSTMD_MAX_NAME_BYTES];
    LSTMD_TRY(take_name("--features", features, item, len, name));
    int u = 0;
    while (u < st->used && strcmp(st->want[u], name) != 0) u++;
    if (u == 0)
      fprintf(stderr, "lstmd: warning: --features names '%s', the --target: the target is always "
              "the model's first input, so it is not added again\n", name);
    else if (u < st->used)
      fprintf(stderr, "lstmd: warning: --features names '%s' twice: it is one input column\n",
              name);
    else if (st->used == LSTMD_MAX_COLUMNS) {
      lstmd_errorf("--features: too many columns (at most %d)", LSTMD_MAX_COLUMNS - 1);
      return LSTMD_EINVAL;
    } else {
      memcpy(info->names[st->used], name, sizeof name);
      st->want[st->used] = info->names[st->used];
      st->used++;
    }
    if (!comma) return LSTMD_OK;
    item = comma + 1;
  }
}

/* What the seasonal-naive baseline needs (series_tf.c: y[t+k] = y[t+k−P·⌈k/P⌉], y[t] where that
 * row is before the split's first row): a row and the row P−k before it in one split. A season
 * of at least the training split's rows has no such pair in any window of it: refused. One of at
 * least the validation split's rows has none where evaluations score (eval, the eval lines,
 * metrics.jsonl): mse_seasonal would be mse_persistence; a warning, as prepare's other split
 * warnings, since predict --baselines reads whole input files. */
static int check_season(const char *input, int season, size_t rows, size_t train_rows,
                        size_t val_rows) {
  if (season > 0 && (size_t)season >= train_rows) {
    lstmd_errorf("%s: --season %d is not shorter than the training split (%zu of %zu rows): no "
                 "window holds a row and the row a season before it, so the seasonal-naive "
                 "forecast would be persistence everywhere (--season is rows per cycle: 24 for "
                 "hourly rows with a daily cycle)", input, season, train_rows, rows);
    return LSTMD_EINVAL;
  }
  if (season > 0 && val_rows > 0 && (size_t)season >= val_rows) {
    const double f = ceil(1000.0 * (double)(season + 1) / (double)rows) / 1000.0; /* P + 1 rows */
    char fix[64] = "more rows";
    if (f <= 0.5) snprintf(fix, sizeof fix, "a --val-fraction of at least %.3f", f);
    fprintf(stderr, "lstmd: warning: --season %d is not shorter than the validation split (%zu "
            "rows): evaluations' seasonal-naive forecast would equal persistence at every step; "
            "one cycle there needs %s\n", season, val_rows, fix);
  }
  return LSTMD_OK;
}

/* Parses the file and fills its missing values (st->missing; how: for the report line). */
static int parse_csv(struct csv_state *st, const char *how, uint64_t *filled) {
  LSTMD_TRY(lstmd_csv_parse_file(&st->pos, on_field, on_record, st));
  if (st->pos.records == 0) {
    lstmd_errorf("%s: input is empty", st->pos.input);
    return LSTMD_EFORMAT;
  }
  *filled = 0;
  if (st->missing == LSTMD_MISSING_ERROR) return LSTMD_OK; /* no NaN: a gap was refused */
  return lstmd_csv_fill_missing(st->pos.input, st->values, st->rows, st->used, st->want,
                                st->missing, how, filled);
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
  LSTMD_TRY(lstmd_mkdir_output(out_dir));
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

int lstmd_csv_read_columns(const char *path, const char *const *names, int n, int missing,
                           const char *how, float **values, size_t *rows) {
  if (n < 1 || n > LSTMD_MAX_COLUMNS) {
    lstmd_errorf("%s: %d columns requested, at most %d", path, n, LSTMD_MAX_COLUMNS);
    return LSTMD_EINVAL;
  }
  struct csv_state st = {.pos = {.input = path}, .used = n, .missing = missing};
  for (int u = 0; u < n; u++) st.want[u] = names[u];
  uint64_t filled;
  int rc = parse_csv(&st, how, &filled);
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
                         const char *features, int horizon, double val_fraction, int season,
                         int missing) {
  struct csv_state st = {.pos = {.input = input}, .missing = missing};
  struct lstmd_dataset_info *info = calloc(1, sizeof *info);
  int rc = info ? parse_names(&st, info, target, features) : LSTMD_ENOMEM;
  char how[LSTMD_MISSING_HOW_BYTES];
  lstmd_missing_how(missing, missing, how);
  uint64_t filled = 0;
  /* The gaps are filled over the whole file, before the split: a series is one sequence, so the
   * first validation rows may take (previous) or lean on (linear) the last training values,
   * and a gap just before the split is interpolated towards the first validation value. */
  if (!rc) rc = parse_csv(&st, how, &filled);
  size_t val_rows = (size_t)(val_fraction * (double)st.rows), train_rows = st.rows - val_rows;
  if (!rc && train_rows < (size_t)horizon + 2) {
    lstmd_errorf("%s: %zu data rows leave %zu for training; need at least horizon + 2 = %d", input,
                 st.rows, train_rows, horizon + 2);
    rc = LSTMD_EFORMAT;
  }
  if (!rc) rc = check_season(input, season, st.rows, train_rows, val_rows);
  if (!rc) {
    info->kind = LSTMD_DATASET_SERIES;
    info->width = st.used; /* info->names: parse_names */
    info->horizon = horizon;
    info->season = season;
    info->missing = missing; /* recorded even when nothing was filled: predict's default */
    info->missing_filled = filled;
    column_stats(st.values, train_rows, st.used, info);
    rc = write_splits(out_dir, info, st.values, train_rows, val_rows);
  }
  if (!rc)
    fprintf(stderr, "lstmd: prepared series %s: %zu rows × %d columns (target '%s'), horizon %d, "
            "season %d, train %zu, val %zu -> %s\n", input, st.rows, st.used, info->names[0],
            horizon, season, train_rows, val_rows, out_dir);
  if (!rc) lstmd_prepare_warn_short(out_dir, "rows", train_rows, val_rows, horizon);
  free_header(&st);
  free(st.values);
  free(info);
  return rc;
}
