/* csv_missing.c — gaps in the numbers of a CSV (`--missing` of `prepare series`, `predict`,
 * `prepare classify --series` and `classify`): which fields count as missing, the refusal of the
 * default (error), filling them, and the one stderr line that reports what was filled.
 *
 * A sequence is filled along its own values and never across two: for a forecasting series
 * (prepare_series.c) the whole file is one sequence per column, so the fill runs over each
 * column once every row is read (`linear` needs the next value seen in the column, and a gap at
 * the start of a column, under either method, the first value seen); for series classification
 * (prepare_classify_series.c) each row is a sequence of its own, filled as soon as it is read.
 * The readers store NaN for a missing field; NaN is free as a marker because lstmd_csv_number
 * refuses every non-finite number, so no value read from the file can be one. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <strings.h>

#include "kernels/status.h"
#include "prepare.h"

int lstmd_csv_is_missing(const char *text, size_t len) {
  /* what spreadsheets, pandas (to_csv of NaN: an empty field) and R (NA) write for "no value" */
  static const char *const tokens[] = {"na", "n/a", "nan", "null"};
  const char *s;
  len = lstmd_csv_trim(text, len, &s);
  if (len == 0) return 1;
  for (size_t k = 0; k < sizeof tokens / sizeof tokens[0]; k++)
    if (strlen(tokens[k]) == len && strncasecmp(s, tokens[k], len) == 0) return 1;
  return 0;
}

void lstmd_csv_missing_refuse(struct lstmd_csv_pos *pos, const char *column, const char *text,
                              size_t len) {
  const char *s;
  const int blank = lstmd_csv_trim(text, len, &s) == 0;
  lstmd_csv_fail(pos, "%s: a missing value (%s%.40s%s); --missing previous (the last value "
                 "before it) or --missing linear (interpolated) fills such gaps", column,
                 blank ? "an empty field" : "'", blank ? "" : text, blank ? "" : "'");
}

size_t lstmd_missing_fill(float *v, size_t n, size_t stride, int method) {
  size_t gaps = 0, first = n;
  for (size_t i = 0; i < n; i++)
    if (isnan(v[i * stride])) gaps++;
    else if (first == n) first = i;
  if (gaps == 0 || gaps == n) return gaps; /* nothing to fill, or nothing to fill it from */
  for (size_t i = 0; i < first; i++) v[i * stride] = v[first * stride]; /* a leading run */
  size_t last = first; /* the last step with a value so far */
  for (size_t i = first + 1; i < n; i++) {
    if (isnan(v[i * stride])) continue;
    if (i > last + 1) { /* the run last+1 .. i−1 lies between two values */
      const double a = v[last * stride], b = v[i * stride], span = (double)(i - last);
      for (size_t g = last + 1; g < i; g++)
        v[g * stride] = method == LSTMD_MISSING_PREVIOUS
                            ? (float)a
                            : (float)(a + (b - a) * ((double)(g - last) / span));
    }
    last = i;
  }
  for (size_t i = last + 1; i < n; i++) v[i * stride] = v[last * stride]; /* a trailing run */
  return gaps;
}

/* Appends to r->text what vsnprintf makes of fmt, cut at the buffer's end. */
static void report_append(struct lstmd_fill_report *r, const char *fmt, va_list ap) {
  if (r->len + 1 >= sizeof r->text) return;
  const int k = vsnprintf(r->text + r->len, sizeof r->text - r->len, fmt, ap);
  if (k > 0) r->len += (size_t)k;
  if (r->len >= sizeof r->text) r->len = sizeof r->text - 1;
}

static void report_appendf(struct lstmd_fill_report *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report_append(r, fmt, ap);
  va_end(ap);
}

void lstmd_fill_report_add(struct lstmd_fill_report *r, size_t max_listed, uint64_t count,
                           const char *fmt, ...) {
  r->total += count;
  r->places++;
  if (r->listed >= max_listed) return;
  r->listed++;
  if (r->len) report_appendf(r, ", ");
  va_list ap;
  va_start(ap, fmt);
  report_append(r, fmt, ap);
  va_end(ap);
  report_appendf(r, " %llu", (unsigned long long)count);
}

int lstmd_missing_how(int asked, int prepared, char how[LSTMD_MISSING_HOW_BYTES]) {
  const int method = asked >= 0 ? asked : prepared;
  snprintf(how, LSTMD_MISSING_HOW_BYTES, "--missing %s%s", lstmd_missing_name(method),
           asked >= 0 ? "" : ", as the model's data was prepared");
  return method;
}

void lstmd_fill_report_print(const struct lstmd_fill_report *r, const char *input,
                             const char *how, const char *where, const char *more) {
  if (r->total == 0) return;
  fprintf(stderr, "lstmd: %s: filled %llu missing values (%s)%s: %s", input,
          (unsigned long long)r->total, how, where, r->text);
  if (r->places > r->listed) fprintf(stderr, ", and %zu more %s", r->places - r->listed, more);
  fputc('\n', stderr);
}

int lstmd_csv_fill_missing(const char *input, float *values, size_t rows, int width,
                           const char *const *names, int method, const char *how,
                           uint64_t *filled) {
  struct lstmd_fill_report report = {0};
  if (filled) *filled = 0;
  /* A header and no rows: values is NULL, and NULL + c is undefined (clang's UBSan; libFuzzer
   * fuzz_prepare, `temp,x\n` with --missing previous). Nothing to fill; the callers refuse it. */
  if (rows == 0) return LSTMD_OK;
  for (int c = 0; c < width; c++) { /* each column is one sequence, filled along its rows */
    const size_t gaps = lstmd_missing_fill(values + c, rows, (size_t)width, method);
    if (gaps == rows) { /* left as it is; the caller frees values, writes nothing */
      lstmd_errorf("%s: column '%s' is missing in every one of its %zu rows: there is no value "
                   "to fill its gaps from", input, names[c], rows);
      return LSTMD_EFORMAT;
    }
    if (gaps) lstmd_fill_report_add(&report, LSTMD_MAX_COLUMNS, gaps, "'%s'", names[c]);
  }
  if (filled) *filled = report.total;
  lstmd_fill_report_print(&report, input, how, "", "columns");
  return LSTMD_OK;
}
