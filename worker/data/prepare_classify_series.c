/* prepare_classify_series.c — `lstmd prepare classify --series`: a CSV of fixed-length numeric
 * rows with a label column → classify records of f32 values (dataset.h, dtype 4), one univariate
 * series of N steps per row. Labels, shuffle, split and writer are the text path's
 * (prepare_classify.c); the training split's global mean/std go in the header. Bad lines: a
 * message naming file and line, exit 2, nothing written. The row reader is also what
 * `lstmd classify` reads a series classifier's input with (no label column).
 *
 * Missing values (`--missing`, csv_missing.c): each row is a sequence of its own, so a gap is
 * filled along its row, from that row's values only, as soon as the row is read: the rows
 * are independent series (and are shuffled), so nothing may flow from one into another. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "dataset.h"
#include "prepare.h"

struct rows_state {
  struct lstmd_csv_pos pos;
  int label_column; /* 1-based; 0: the last; -1: none */
  int header;       /* 1 yes, 0 no, -1 detect from the first line */
  int expect;       /* values per row the caller requires (0: the first row's count) */
  int missing;      /* enum lstmd_missing: refuse a missing value, or fill it within its row */
  struct lstmd_fill_report report; /* the rows filled */
  /* the fields of the record being parsed: NUL-terminated texts at buf + off[k], k < nf (nf is
   * pos.field once the record is complete; this is the buffer's own count) */
  char *buf;
  size_t len, cap;
  size_t *off;
  int nf, cap_f;
  size_t cap_rows;
  struct lstmd_csv_rows *out;
};

static void on_field(void *data, size_t len, void *ctx) {
  struct rows_state *st = ctx;
  if (st->pos.failed) return;
  if (st->len + len + 1 > st->cap || st->nf == st->cap_f) {
    size_t cap = 2 * (st->len + len + 1) + 256;
    int cap_f = 2 * st->cap_f + 16;
    char *b = realloc(st->buf, cap);
    size_t *o = b ? realloc(st->off, (size_t)cap_f * sizeof *o) : NULL;
    if (b) st->buf = b;
    if (o) st->off = o;
    if (!b || !o) {
      lstmd_csv_fail(&st->pos, "out of memory");
      return;
    }
    st->cap = cap;
    st->cap_f = cap_f;
  }
  st->off[st->nf++] = st->len;
  if (len) memcpy(st->buf + st->len, data, len);
  st->buf[st->len + len] = '\0';
  st->len += len + 1;
}

static const char *field(const struct rows_state *st, int k) { return st->buf + st->off[k]; }

/* 1 when the first record is a header (header -1: none of its value fields is a number, and
 * not all of them are missing values). A missing value (empty, NA, ...) is neither a number nor
 * a name: a first row of numbers and gaps is data (refused or filled as --missing says), not a
 * mix of numbers and names. */
static int is_header(struct rows_state *st, int label_at) {
  if (st->header >= 0) return st->header;
  const int values = st->nf - (label_at >= 0);
  if (values < 1) return 0; /* no value fields: a bad row, said as one */
  int numbers = 0, gaps = 0;
  float v;
  for (int k = 0; k < st->nf; k++) {
    if (k == label_at) continue;
    const char *text = field(st, k);
    if (lstmd_csv_number(text, strlen(text), &v) == 0) numbers++;
    else gaps += lstmd_csv_is_missing(text, strlen(text));
  }
  /* A mix: prepare asks which it is (--header). Where a model fixes the row (classify, which
   * has no --header), the row is data, so that its own fault is named (a value that is not a
   * number, a label column the model does not have) instead of an option it cannot take. */
  if (numbers > 0 && numbers + gaps < values && !st->expect)
    lstmd_csv_fail(&st->pos, "the first line mixes numbers and names: say --header yes or no");
  return numbers == 0 && gaps < values;
}

static int add_row(struct rows_state *st, int label_at) {
  struct lstmd_csv_rows *o = st->out;
  const int N = o->n_values;
  if (o->rows == st->cap_rows) {
    size_t cap = st->cap_rows ? 2 * st->cap_rows : 1024;
    float *v = realloc(o->values, cap * (size_t)N * sizeof *v);
    if (v) o->values = v;
    int *l = v ? realloc(o->labels, cap * sizeof *l) : NULL;
    if (l) o->labels = l;
    if (!v || !l) return -1;
    st->cap_rows = cap;
  }
  float *row = o->values + o->rows * (size_t)N;
  for (int k = 0, j = 0; k < st->nf; k++) {
    if (k == label_at) continue;
    const char *text = field(st, k);
    const size_t len = strlen(text);
    /* a number first (nearly every field is one); a gap token is never one */
    if (lstmd_csv_number(text, len, &row[j]) == 0) {
      j++;
      continue;
    }
    if (!lstmd_csv_is_missing(text, len)) {
      lstmd_csv_fail(&st->pos, "column %d: '%.40s' is not a finite number%s", k + 1, text,
                     lstmd_csv_number_hint(text));
      return 0;
    }
    if (st->missing != LSTMD_MISSING_ERROR) { /* filled below, within this row */
      row[j++] = NAN;
      continue;
    }
    char column[32];
    snprintf(column, sizeof column, "column %d", k + 1);
    lstmd_csv_missing_refuse(&st->pos, column, text, len);
    return 0;
  }
  /* the row is one sequence: its gaps are filled from its own values, never another row's */
  const size_t gaps =
      st->missing != LSTMD_MISSING_ERROR ? lstmd_missing_fill(row, (size_t)N, 1, st->missing) : 0;
  if (gaps == (size_t)N) { /* the row's value columns: 1..nf but the label's */
    char cols[64];
    const int lo = label_at == 0 ? 2 : 1, hi = label_at == st->nf - 1 ? st->nf - 1 : st->nf;
    if (N == 1) snprintf(cols, sizeof cols, "column %d", lo);
    else if (label_at > 0 && label_at < st->nf - 1)
      snprintf(cols, sizeof cols, "columns %d-%d but the label's %d", lo, hi, label_at + 1);
    else snprintf(cols, sizeof cols, "columns %d-%d", lo, hi);
    if (N == 1)
      lstmd_csv_fail(&st->pos, "the row's one value (%s) is missing: there is no value to fill "
                     "its gap from", cols);
    else
      lstmd_csv_fail(&st->pos, "every one of the row's %d values (%s) is missing: there is no "
                     "value to fill its gaps from", N, cols);
    return 0;
  }
  if (gaps) lstmd_fill_report_add(&st->report, 8, gaps, "line %ld:", st->pos.line);
  int id = 0;
  if (label_at >= 0) {
    const char *why, *label = field(st, label_at);
    if ((id = lstmd_label_table_id(&o->table, label, strlen(label), &why)) < 0) {
      lstmd_csv_fail(&st->pos, "column %d: %s", label_at + 1, why);
      return 0;
    }
  }
  o->labels[o->rows++] = id;
  return 0;
}

/* One record of the CSV (its fields in st->buf): a header, or a row of [label +] N values. */
static void take_record(struct rows_state *st) {
  const int nf = st->nf, labelled = st->label_column >= 0;
  const int label_at = !labelled ? -1 : st->label_column ? st->label_column - 1 : nf - 1;
  if (label_at >= nf) {
    lstmd_csv_fail(&st->pos, "%d field%s, the label is column %d (--label-column)", nf,
                   nf == 1 ? "" : "s", label_at + 1);
    return;
  }
  if (st->pos.records == 0 && is_header(st, label_at)) { /* the first record */
    st->out->header_seen = 1;
    return;
  }
  const int n = nf - labelled, want = st->expect ? st->expect : st->out->n_values;
  if (st->pos.failed) return;
  if (n < 1)
    lstmd_csv_fail(&st->pos, "a label and no values (a row needs a label and at least one value)");
  else if (want == 0 && n > LSTMD_MAX_SEQ_BYTES)
    lstmd_csv_fail(&st->pos, "%d values, at most %d", n, LSTMD_MAX_SEQ_BYTES);
  else if (want && n != want)
    lstmd_csv_fail(&st->pos, "%d value%s, %s %d%s", n, n == 1 ? "" : "s",
                   st->expect ? "the model was trained on rows of" : "the first row has", want,
                   st->expect ? labelled ? "" : " (no label column)"
                              : " (every row must have the same number)");
  if (st->pos.failed) return;
  st->out->n_values = n;
  if (add_row(st, label_at) != 0) lstmd_csv_fail(&st->pos, "out of memory");
}

static void on_record(int term, void *ctx) {
  (void)term;
  struct rows_state *st = ctx;
  if (!st->pos.failed) take_record(st);
  st->nf = 0;
  st->len = 0;
}

int lstmd_csv_read_rows(const char *path, int label_column, int header, int expect, int missing,
                        const char *how, struct lstmd_csv_rows *out) {
  memset(out, 0, sizeof *out);
  struct rows_state *st = calloc(1, sizeof *st); /* the report's ~6 KiB: not on the stack */
  if (!st) return LSTMD_ENOMEM;
  st->pos.input = path;
  st->label_column = label_column;
  st->header = header;
  st->expect = expect;
  st->missing = missing;
  st->out = out;
  int rc = lstmd_csv_parse_file(&st->pos, on_field, on_record, st);
  free(st->buf);
  free(st->off);
  if (!rc && out->rows == 0) {
    lstmd_errorf("%s: no data rows", path);
    rc = LSTMD_EFORMAT;
  }
  if (!rc) {
    char where[64];
    snprintf(where, sizeof where, " in %zu of %zu rows", st->report.places, out->rows);
    lstmd_fill_report_print(&st->report, path, how, where, "rows");
    out->filled = st->report.total;
  }
  free(st);
  if (rc) lstmd_csv_rows_free(out);
  return rc;
}

void lstmd_csv_rows_free(struct lstmd_csv_rows *r) {
  free(r->values);
  free(r->labels);
  r->values = NULL;
  r->labels = NULL;
}

struct writing {
  const struct lstmd_csv_rows *rows;
  const size_t *order; /* record i is row order[i] */
};

/* Record i: its label, length N and the N raw values (lstmd_classify_write). */
static void fill_series_record(void *ctx, size_t i, uint8_t *rec) {
  const struct writing *w = ctx;
  const size_t r = w->order[i];
  const uint32_t label = (uint32_t)w->rows->labels[r], len = (uint32_t)w->rows->n_values;
  uint8_t *values = lstmd_classify_record_put(rec, label, len);
  memcpy(values, w->rows->values + r * len, (size_t)len * sizeof(float));
}

/* The mean and std of every value of the training rows (a global normalisation); std 1 when
 * the values are constant. */
static void global_stats(const struct lstmd_csv_rows *r, const size_t *order, size_t train_n,
                         struct lstmd_dataset_info *info) {
  const size_t N = (size_t)r->n_values;
  double sum = 0, sumsq = 0;
  for (size_t i = 0; i < train_n; i++)
    for (size_t j = 0; j < N; j++) sum += r->values[order[i] * N + j];
  const double mean = sum / (double)(train_n * N);
  for (size_t i = 0; i < train_n; i++)
    for (size_t j = 0; j < N; j++) {
      const double d = r->values[order[i] * N + j] - mean;
      sumsq += d * d;
    }
  const double std = sqrt(sumsq / (double)(train_n * N));
  info->mean[0] = (float)mean;
  info->std[0] = std > 1e-12 && isfinite((float)std) ? (float)std : 1.0f;
}

int lstmd_prepare_classify_series(const char *input, const char *out_dir, double val_fraction,
                                  int label_column, int header, int missing) {
  struct lstmd_csv_rows rows;
  struct lstmd_dataset_info *info = calloc(1, sizeof *info);
  char how[LSTMD_MISSING_HOW_BYTES];
  lstmd_missing_how(missing, missing, how);
  int rc = info ? lstmd_csv_read_rows(input, label_column, header, 0, missing, how, &rows)
                : LSTMD_ENOMEM;
  if (rc) {
    free(info);
    return rc;
  }
  if (rows.table.n < 2) {
    lstmd_errorf("%s: one label only ('%s'); classification needs at least 2", input,
                 rows.table.names[0]);
    rc = LSTMD_EFORMAT;
  }
  size_t train_n = 0, val_n = 0, *order = NULL;
  if (!rc) rc = lstmd_classify_split(input, rows.rows, val_fraction, &train_n, &val_n);
  if (!rc && !(order = malloc(rows.rows * sizeof *order))) rc = LSTMD_ENOMEM;
  if (!rc) {
    int new_id[LSTMD_MAX_COLUMNS] = {0}; /* label ids: the labels in ascending byte order */
    lstmd_label_table_sort(&rows.table, info, new_id);
    for (size_t r = 0; r < rows.rows; r++) rows.labels[r] = new_id[rows.labels[r]];
    lstmd_classify_shuffle(rows.rows, order);
    info->kind = LSTMD_DATASET_CLASSIFY;
    info->numeric = 1;
    info->width = rows.n_values;
    info->missing = missing; /* recorded even when nothing was filled: classify's default */
    info->missing_filled = rows.filled;
    global_stats(&rows, order, train_n, info);
    struct writing w = {&rows, order};
    rc = lstmd_classify_write(out_dir, info, train_n, val_n, fill_series_record, &w);
  }
  if (!rc)
    fprintf(stderr, "lstmd: prepared classify --series %s: %zu rows of %d values%s, %d classes, "
            "train %zu, val %zu, mean %.6g, std %.6g -> %s\n", input, rows.rows, rows.n_values,
            rows.header_seen ? " (header line skipped)" : "", rows.table.n, train_n, val_n,
            info->mean[0], info->std[0], out_dir);
  lstmd_csv_rows_free(&rows);
  free(order);
  free(info);
  return rc;
}
