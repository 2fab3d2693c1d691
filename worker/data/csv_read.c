/* csv_read.c — the one CSV reader under `prepare series`, `prepare classify --series`, `predict`
 * and `classify` of a series classifier: libcsv (strict) fed line by line, a UTF-8 byte order
 * mark dropped before the parser sees it, errors as "FILE:LINE: ..." with what to look at (the
 * field and byte of a bad quote, the line an unclosed quote follows, a file that looks
 * ';'- or tab-delimited), numbers and the names of column options read one way. */
#define _GNU_SOURCE
#include <csv.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/status.h"
#include "prepare.h"


void lstmd_csv_fail(struct lstmd_csv_pos *pos, const char *fmt, ...) {
  if (!pos->failed) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "lstmd: %s:%ld: ", pos->input, pos->line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    /* Most errors in such a file (a missing column, "a label and no values", a bad number) are
     * its delimiter: say so beside whichever error it caused. */
    if (pos->looks_delimited)
      fprintf(stderr, "lstmd: %s: its first line is split by %s, not by ',': the file looks "
              "%s-delimited, and lstmd reads comma-separated CSV only (export it with ',' "
              "between fields and '.' as the decimal point)\n", pos->input,
              pos->looks_delimited == '\t' ? "TABs" : "';'",
              pos->looks_delimited == '\t' ? "tab" : "';'");
  }
  pos->failed = 1;
}

/* The largest magnitude read as a number: float32 ends at 3.4e38, and the normalisation of a
 * column (its mean and standard deviation, the window's scale) needs room above its values. */
static const double kMaxMagnitude = 3.0e38;

int lstmd_csv_number(const char *text, size_t len, float *out) {
  /* strtod also reads C's hexadecimal ("0x10" as 16, "0x1p3" as 8); no decimal number holds an
   * 'x', and in a CSV cell one is a mistake far more often than meant, so it is refused. */
  if (memchr(text, 'x', len) || memchr(text, 'X', len)) return -1;
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  while (*end == ' ' || *end == '\t' || *end == '\r') end++;
  if (len == 0 || end == text || *end != '\0' || !isfinite(v) || fabs(v) > kMaxMagnitude) return -1;
  *out = (float)v;
  return 0;
}

/* The first of ';' and TAB in data[0, len), 0 when neither is there. */
static char other_delimiter(const char *data, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (data[i] == ';' || data[i] == '\t') return data[i];
  return 0;
}

/* Between libcsv and the caller's callbacks: counts the fields of the record being parsed and
 * the records done, and notes a first record of one field holding ';' or TAB, so that errors
 * can say where and why. */
struct relay {
  struct lstmd_csv_pos *pos;
  void (*on_field)(void *, size_t, void *);
  void (*on_record)(int, void *);
  void *ctx;
  char first_field_delim; /* ';' or '\t' in the first record's first field */
};

static void relay_field(void *data, size_t len, void *ctx) {
  struct relay *r = ctx;
  /* libcsv hands over length-counted fields; everything after it reads them as C strings, so a
   * NUL inside one would cut it short unseen ("2\x0099" read as 2) */
  const char *nul = data ? memchr(data, '\0', len) : NULL;
  if (nul)
    lstmd_csv_fail(r->pos, "field %d holds a NUL byte (at byte %zu of the field): a binary "
                   "file, or text saved as UTF-16 (save it as UTF-8)", r->pos->field + 1,
                   (size_t)(nul - (const char *)data) + 1);
  if (r->pos->records == 0 && r->pos->field == 0 && data)
    r->first_field_delim = other_delimiter(data, len);
  r->pos->field++;
  r->on_field(data, len, r->ctx);
}

static void relay_record(int term, void *ctx) {
  struct relay *r = ctx;
  if (r->pos->records == 0 && r->pos->field == 1) r->pos->looks_delimited = r->first_field_delim;
  r->on_record(term, r->ctx); /* before the counts move on: its errors are about this record */
  r->pos->field = 0;
  r->pos->records++;
  r->pos->record_end_line = r->pos->line;
}

/* A strict-mode parse error at text[at] (libcsv returns how many bytes it took: the offending
 * one is the next). libcsv's own words ("error parsing data while strict checking enabled") do
 * not say what to fix; the parser's quoted flag tells its two causes apart. */
static void parse_error(struct lstmd_csv_pos *pos, const struct csv_parser *p, const char *text,
                        size_t len, size_t at, size_t skipped) {
  const int err = csv_error((struct csv_parser *)p);
  if (err != CSV_EPARSE) {
    lstmd_csv_fail(pos, "cannot read the CSV: %s", csv_strerror(err));
    return;
  }
  if (pos->records == 0 && at < len && (text[at] == ';' || text[at] == '\t'))
    pos->looks_delimited = text[at]; /* "a";"b": a quoted header, another delimiter */
  char near[48];
  size_t from = at > 12 ? at - 12 : 0, k = 0;
  for (size_t i = from; i < len && i < at + 12 && k + 5 < sizeof near; i++) {
    const unsigned char c = (unsigned char)text[i];
    if (c == '\r' || c == '\n') break;
    k += (size_t)snprintf(near + k, sizeof near - k, c < 0x20 || c == 0x7f ? "\\x%02x" : "%c", c);
  }
  near[k] = '\0';
  lstmd_csv_fail(pos, "malformed CSV in field %d, byte %zu of the line (near '%s'): %s",
                 pos->field + 1, at + skipped + 1, near,
                 p->quoted ? "text after the field's closing quote; a quoted field ends at its "
                             "closing '\"' (a quote inside it is written twice: \"a \"\"b\"\"\")"
                           : "a '\"' inside a field that does not begin with one; quote the "
                             "whole field and write each quote inside it twice (\"a \"\"b\"\"\")");
}

int lstmd_csv_parse_file(struct lstmd_csv_pos *pos, void (*on_field)(void *, size_t, void *),
                         void (*on_record)(int, void *), void *ctx) {
  FILE *f = fopen(pos->input, "r");
  if (!f) {
    lstmd_errorf("%s: cannot open input: %s", pos->input, strerror(errno));
    return LSTMD_EIO;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) { /* fopen takes one; reading fails */
    lstmd_errorf("%s: is a directory: name the CSV file", pos->input);
    fclose(f);
    return LSTMD_EIO;
  }
  struct csv_parser p;
  if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0) {
    fclose(f);
    return LSTMD_ENOMEM;
  }
  struct relay r = {pos, on_field, on_record, ctx, 0};
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  /* blank lines with data after them, the first blank line, blank lines with none after yet
   * (trailing ones are not worth a warning) */
  long blank = 0, blank_first = 0, pending = 0;
  while (!pos->failed && (n = getline(&line, &cap, f)) > 0) {
    pos->line++;
    /* pstate 0 is libcsv's ROW_NOT_BEGUN: outside a record (a blank line inside a quoted field
     * is that field's text) */
    const int empty = (n == 1 && line[0] == '\n') || (n == 2 && line[0] == '\r' && line[1] == '\n');
    if (empty && p.pstate == 0) {
      pending++;
      if (!blank_first) blank_first = pos->line;
      continue;
    }
    blank += pending;
    pending = 0;
    /* A UTF-8 byte order mark (Excel's "CSV UTF-8") goes before libcsv sees the line: to the
     * parser it is three bytes of an unquoted first field, so a quoted first header cell behind
     * it ("\xef\xbb\xbf\"timestamp\"") is a quote inside an unquoted field, refused in strict
     * mode, and an unquoted one would keep the mark in its name. */
    size_t skip = pos->line == 1 ? lstmd_utf8_bom_len(line, (size_t)n) : 0;
    const size_t len = (size_t)n - skip;
    const size_t took = csv_parse(&p, line + skip, len, relay_field, relay_record, &r);
    if (took != len && !pos->failed) parse_error(pos, &p, line + skip, len, took, skip);
  }
  /* getline's errno, now: csv_fini's callbacks below set errno (strtod) */
  const int read_error = ferror(f) ? (errno ? errno : EIO) : 0;
  /* no line++: what fini completes is the last line's record (a file without a final newline);
   * in strict-fini mode it fails only on a quoted field still open at the end */
  if (!pos->failed && csv_fini(&p, relay_field, relay_record, &r) != 0 && !pos->failed) {
    if (csv_error(&p) == CSV_EPARSE)
      lstmd_csv_fail(pos, "malformed CSV at the end of the file: field %d of the record after "
                     "line %ld opens a quote that is never closed; look for an unmatched '\"' "
                     "from line %ld on", pos->field + 1, pos->record_end_line,
                     pos->record_end_line + 1);
    else
      lstmd_csv_fail(pos, "cannot read the CSV: %s", csv_strerror(csv_error(&p)));
  }
  if (!pos->failed && blank)
    fprintf(stderr, "lstmd: warning: %s: %ld blank line%s skipped (the first: line %ld), as pandas "
            "does; where a value is missing in a one-column file, write NA there (--missing)\n",
            pos->input, blank, blank == 1 ? "" : "s", blank_first);
  csv_free(&p);
  free(line);
  fclose(f);
  if (read_error) {
    lstmd_errorf("%s: read failed: %s", pos->input, strerror(read_error));
    return LSTMD_EIO;
  }
  return pos->failed ? LSTMD_EFORMAT : LSTMD_OK;
}

const char *lstmd_csv_number_hint(const char *text) {
  const char *digits = text;
  while (*digits == ' ' || *digits == '\t') digits++;
  if (*digits == '+' || *digits == '-') digits++;
  if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X'))
    return " (hexadecimal is not read: write the value in decimal)";
  char *end; /* a whole decimal number (as lstmd_csv_number reads it), only too large */
  const double v = strtod(text, &end);
  while (*end == ' ' || *end == '\t' || *end == '\r') end++;
  if (end != text && *end == '\0' && isfinite(v) && fabs(v) > kMaxMagnitude)
    return " within lstmd's range (at most 3e38 in magnitude: float32 ends at 3.4e38, and the "
           "normalisation of the values needs room above them)";
  return "";
}

size_t lstmd_csv_trim(const char *text, size_t len, const char **start) {
  while (len && (*text == ' ' || *text == '\t')) text++, len--;
  while (len && (text[len - 1] == ' ' || text[len - 1] == '\t')) len--;
  *start = text;
  return len;
}
