/* csv_missing.c — gaps in the numeric columns of a series CSV (`--missing` of `prepare series`
 * and `predict`): which fields count as missing, and filling them once the whole file is read.
 *
 * Why the fill runs after parsing rather than field by field: `linear` needs the next value seen
 * in the column, and a gap at the start of a column (under either method) takes the first value
 * seen, so both need the column's later rows. The reader (prepare_series.c) stores NaN for a
 * missing field; NaN is free as a marker because lstmd_csv_number refuses every non-finite
 * number, so no value read from the file can be one. */
#include <math.h>
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

/* Column c (stride width) of rows: fills the NaNs, which are neither all of it nor none. */
static void fill_column(float *v, size_t rows, int width, int c, int method) {
  const size_t w = (size_t)width;
  size_t first = 0;
  while (isnan(v[first * w + c])) first++;
  for (size_t r = 0; r < first; r++) v[r * w + c] = v[first * w + c]; /* a leading run */
  size_t last = first; /* the last row with a value so far */
  for (size_t r = first + 1; r < rows; r++) {
    if (isnan(v[r * w + c])) continue;
    if (r > last + 1) { /* the run last+1 .. r−1 lies between two values */
      const double a = v[last * w + c], b = v[r * w + c], span = (double)(r - last);
      for (size_t g = last + 1; g < r; g++)
        v[g * w + c] = method == LSTMD_MISSING_PREVIOUS
                           ? (float)a
                           : (float)(a + (b - a) * ((double)(g - last) / span));
    }
    last = r;
  }
  for (size_t r = last + 1; r < rows; r++) v[r * w + c] = v[last * w + c]; /* a trailing run */
}

int lstmd_csv_fill_missing(const char *input, float *values, size_t rows, int width,
                           const char *const *names, int method, const char *how,
                           uint64_t *filled) {
  size_t gaps[LSTMD_MAX_COLUMNS] = {0};
  uint64_t total = 0;
  for (int c = 0; c < width; c++) {
    for (size_t r = 0; r < rows; r++) gaps[c] += isnan(values[r * (size_t)width + c]) != 0;
    if (rows > 0 && gaps[c] == rows) {
      lstmd_errorf("%s: column '%s' is missing in every one of its %zu rows: there is no value "
                   "to fill its gaps from", input, names[c], rows);
      return LSTMD_EFORMAT;
    }
    total += gaps[c];
  }
  if (filled) *filled = total;
  if (total == 0) return LSTMD_OK;
  char line[LSTMD_MAX_COLUMNS * (LSTMD_MAX_NAME_BYTES + 32)];
  size_t k = 0;
  for (int c = 0; c < width; c++) {
    if (gaps[c] == 0) continue;
    /* the method only ever sees columns with a gap and a value (checked above) */
    fill_column(values, rows, width, c, method);
    k += (size_t)snprintf(line + k, sizeof line - k, "%s'%s' %zu", k ? ", " : "", names[c],
                          gaps[c]);
  }
  fprintf(stderr, "lstmd: %s: filled %llu missing values (%s): %s\n", input,
          (unsigned long long)total, how, line);
  return LSTMD_OK;
}
