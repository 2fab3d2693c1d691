/* prepare.h — turning user files into prepared datasets (`lstmd prepare text|series|classify`),
 * and the pieces the preparations share (CSV reading, the classify label table, shuffle and
 * writer). */
#ifndef LSTMD_PREPARE_H
#define LSTMD_PREPARE_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"

/* 3 when p (n bytes) starts with a UTF-8 byte order mark (what Excel and Notepad write in front
 * of "UTF-8" text files), else 0: the readers skip it on a file's first line, where it would
 * otherwise become part of the first cell, label or sequence. */
static inline size_t lstmd_utf8_bom_len(const char *p, size_t n) {
  return n >= 3 && (unsigned char)p[0] == 0xef && (unsigned char)p[1] == 0xbb &&
                 (unsigned char)p[2] == 0xbf ? 3 : 0;
}

/* Byte-level text: the vocabulary is the set of byte values present, ascending; the last
 * floor(val_fraction × size) bytes are the validation split. Writes DIR/train.bin and
 * DIR/val.bin atomically. Returns 0 or a negative status after printing a message naming the
 * file; on failure nothing new is left in out_dir. */
int lstmd_prepare_text(const char *input, const char *out_dir, double val_fraction);

/* Sequence classification: `label<TAB>text` per line (text: raw bytes after the first TAB, a
 * trailing '\r' dropped; labels: 1..63 bytes, at least 2 and at most 64 distinct, ids in
 * ascending byte order). Lines are shuffled with a fixed seed; the last floor(val_fraction × n)
 * are the validation split. A bad line prints file:line and returns LSTMD_EFORMAT. */
int lstmd_prepare_classify(const char *input, const char *out_dir, double val_fraction);

/* Sequence classification of numeric series (`prepare classify --series`): a CSV of rows with one
 * label column (label_column: 1-based, or 0 for the last) and the same number N >= 1 of numeric
 * values in every other column; each row is a univariate series of N steps. header: 1 the first
 * line is a header, 0 it is data, -1 detect (a header when none of its value fields is a number;
 * some but not all: refused). Labels as the text path (1..63 bytes, 2..64 distinct, ids in
 * ascending byte order); the same fixed-seed shuffle and split. Records keep the raw values; the
 * mean and std of every value of the training split are stored (a global normalisation, applied
 * when records are read and by `lstmd classify`). Bad lines print file:line, LSTMD_EFORMAT.
 * missing (enum lstmd_missing): what a missing value becomes (lstmd_csv_read_rows: refused, or
 * filled within its own row), the method recorded in both headers unless error. */
int lstmd_prepare_classify_series(const char *input, const char *out_dir, double val_fraction,
                                  int label_column, int header, int missing);

/* Warns on stderr (the preparation still succeeds) when a prepared text or series split is too
 * short for training at the default data.seq_len: an empty or short val.bin means lstmd train
 * never evaluates, a short train.bin that it refuses the dataset. unit: "tokens" or "rows";
 * targets: the elements each window reads past its seq_len (1 for text, the horizon for series).
 * prepare_text.c. */
void lstmd_prepare_warn_short(const char *out_dir, const char *unit, uint64_t train_n,
                              uint64_t val_n, int targets);

/* ---- shared by the two classify preparations (prepare_classify.c) ---- */

struct lstmd_label_table {
  char names[LSTMD_MAX_COLUMNS][LSTMD_MAX_NAME_BYTES]; /* in order of first appearance */
  int n;
};
/* The id of label[0, len) in t, added when new; -1 with *why (a static string) when the label is
 * empty, longer than 63 bytes, holds a NUL byte, or would be the 65th. */
int lstmd_label_table_id(struct lstmd_label_table *t, const char *label, size_t len,
                         const char **why);
/* info->names and info->horizon: t's labels in ascending byte order; new_id[k]: the sorted id of
 * t's label k. */
void lstmd_label_table_sort(const struct lstmd_label_table *t, struct lstmd_dataset_info *info,
                            int *new_id);
/* The training/validation sizes of n sequences (last floor(val_fraction·n) validate); prints
 * why and returns LSTMD_EFORMAT when either split would be empty (val_fraction > 0). */
int lstmd_classify_split(const char *input, size_t n, double val_fraction, size_t *train_n,
                         size_t *val_n);
/* order[0, n): a permutation of 0..n−1 from a fixed seed (the same file, the same split). */
void lstmd_classify_shuffle(size_t n, size_t *order);
/* Writes DIR/train.bin (records 0..train_n−1) and DIR/val.bin (the next val_n) atomically; fill
 * writes record i (elem bytes of info, zeroed before) into rec. */
typedef void (*lstmd_classify_record_fn)(void *ctx, size_t i, uint8_t *rec);
int lstmd_classify_write(const char *out_dir, const struct lstmd_dataset_info *info,
                         size_t train_n, size_t val_n, lstmd_classify_record_fn fill, void *ctx);

/* Numeric CSV with a header line. Inputs are the target column followed by the `features`
 * (comma-separated names, may be NULL); other columns are ignored. The model predicts the next
 * `horizon` target values. The last floor(val_fraction × rows) rows are the validation split;
 * mean/std of each column over the training split are stored in both headers, and `season`
 * (rows per seasonal cycle of the seasonal-naive baseline, 0: none). */
/* `missing` (enum lstmd_missing, dataset.h): what a missing field (lstmd_csv_is_missing) of a
 * used column becomes: refused naming its line and column (LSTMD_MISSING_ERROR), or filled
 * before the split (lstmd_csv_fill_missing) and the method recorded in both headers. */
int lstmd_prepare_series(const char *input, const char *out_dir, const char *target,
                         const char *features, int horizon, double val_fraction, int season,
                         int missing);

/* Reads the named columns of a CSV file with a header (other columns ignored; every used field
 * must be a finite number, or missing and filled by `missing` as prepare series fills it; how:
 * the words the fill report puts after the count, e.g. "--missing linear"). *values is rows × n
 * floats (malloc'd, caller frees). Errors are printed with file and line. */
int lstmd_csv_read_columns(const char *path, const char *const *names, int n, int missing,
                           const char *how, float **values, size_t *rows);

/* ---- missing values in a CSV's numbers (csv_missing.c) ---- */

/* 1 when the field text[0, len) is a missing value: empty (blanks only), or NA, N/A, NaN or
 * null in any case; 0 for anything else (a number, or a bad value the caller refuses). */
int lstmd_csv_is_missing(const char *text, size_t len);
/* --missing error's refusal of the missing field text (NUL-terminated, len bytes) at pos:
 * "FILE:LINE: <column>: a missing value ('NA'); --missing previous (...) or --missing linear
 * (...) fills such gaps" (column: how the reader names it, e.g. "column 'y'", "column 3"). */
struct lstmd_csv_pos;
void lstmd_csv_missing_refuse(struct lstmd_csv_pos *pos, const char *column, const char *text,
                              size_t len);
/* One sequence: the n values v[0], v[stride], ..., v[(n−1)·stride], NaN where a field was
 * missing. Fills every NaN by method (LSTMD_MISSING_PREVIOUS: the last value before it,
 * LINEAR: the straight line between the values either side; a run at the start takes the
 * sequence's first value, one at the end its last, under both) and returns how many there
 * were; when all n are NaN it fills nothing and returns n (the caller refuses: no value). */
size_t lstmd_missing_fill(float *v, size_t n, size_t stride, int method);
/* The method a reader fills by, and its words for the fill report's parentheses (how): asked,
 * the --missing given (an enum lstmd_missing), "--missing linear"; asked -1 (none given: predict
 * and classify), the method the model's data was prepared with (prepared), "--missing linear,
 * as the model's data was prepared". Returns the method. */
#define LSTMD_MISSING_HOW_BYTES 64
int lstmd_missing_how(int asked, int prepared, char how[LSTMD_MISSING_HOW_BYTES]);
/* The one stderr line that says what was filled: "lstmd: FILE: filled T missing values
 * (HOW)WHERE: A n, B m[, and K more MORE]", one item per sequence (a column, a row) that had
 * gaps, at most max_listed of them named. */
struct lstmd_fill_report {
  uint64_t total; /* values filled */
  size_t places;  /* sequences with a gap */
  size_t listed;  /* of them named in text */
  size_t len;
  char text[LSTMD_MAX_COLUMNS * (LSTMD_MAX_NAME_BYTES + 32)];
};
/* Counts one sequence's count gaps; names it as fmt makes it, then the count. */
void lstmd_fill_report_add(struct lstmd_fill_report *r, size_t max_listed, uint64_t count,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Prints the line (nothing when nothing was filled). */
void lstmd_fill_report_print(const struct lstmd_fill_report *r, const char *input,
                             const char *how, const char *where, const char *more);
/* prepare series and predict: values rows × width with NaN where a field was missing, each
 * column one sequence; fills every NaN by method (lstmd_missing_fill) and prints the report
 * line, naming the count of each column that had gaps (how: in the line's parentheses). A
 * column with no value at all: an error naming it (LSTMD_EFORMAT). *filled (may be NULL): the
 * count. */
int lstmd_csv_fill_missing(const char *input, float *values, size_t rows, int width,
                           const char *const *names, int method, const char *how,
                           uint64_t *filled);

/* ---- CSV reading shared by the preparations, predict and classify (csv_read.c) ---- */

struct lstmd_csv_pos {
  const char *input;    /* the file */
  long line;            /* line being parsed (1-based) */
  int failed;           /* an error was reported: the callbacks do nothing more */
  /* kept by lstmd_csv_parse_file (zero them, as `{.input = path}` does), for its messages and
   * the callbacks' counts: */
  int field;            /* fields of the record being parsed, the one on_field is given
                         * included (its index: field − 1); in on_record, the record's count */
  long records;         /* records done before the one being parsed (0 in the first's
                         * callbacks: the header, where a file has one) */
  long record_end_line; /* the line the last record done ended on (0: none yet) */
  char looks_delimited; /* ';' or TAB: the first record was one field holding it, or a
                         * quoted first field was followed by it */
};
/* Reports "lstmd: FILE:LINE: ..." once (the first error only) and marks pos failed; when the
 * file's first record was one field holding ';' or a TAB, a second line says the file looks
 * ';'- (tab-) delimited and lstmd reads commas. */
void lstmd_csv_fail(struct lstmd_csv_pos *pos, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Parses pos->input with libcsv (strict), line by line, calling on_field(data, len, ctx) and
 * on_record(term, ctx); a UTF-8 byte order mark at the start of the file is dropped first.
 * Unquoted fields come without the spaces and TABs around them (libcsv's default). A malformed
 * line is reported naming the field, byte and cause. Blank lines between records are skipped,
 * as pandas' read_csv does (libcsv passes them over), with one warning naming the first when
 * data follows them: in a one-column file a blank line is where a value is missing. LSTMD_EIO
 * (open/read, printed), LSTMD_EFORMAT when pos failed. */
int lstmd_csv_parse_file(struct lstmd_csv_pos *pos, void (*on_field)(void *, size_t, void *),
                         void (*on_record)(int, void *), void *ctx);
/* text[0, len) without the spaces and TABs around it, as the parser gives an unquoted field:
 * the start in *start, the length returned. For column names given on the command line. */
size_t lstmd_csv_trim(const char *text, size_t len, const char **start);
/* Rows of numbers with an optional label column (prepare_classify_series.c): label_column
 * 1-based, 0 the last, -1 none (labels all 0); header as lstmd_prepare_classify_series; expect
 * > 0: every row must hold that many values (else the first row's count, at most
 * LSTMD_MAX_SEQ_BYTES). Each row is one sequence: a missing value (lstmd_csv_is_missing) is
 * refused with --missing's hint (missing LSTMD_MISSING_ERROR) or filled along its own row
 * (lstmd_missing_fill; never from another row), a row with no value at all refused naming
 * its line, and one stderr line reports the fill (how: in its parentheses). Bad lines print
 * FILE:LINE (LSTMD_EFORMAT); no rows is an error too. Free with lstmd_csv_rows_free (also
 * after a failure). */
struct lstmd_csv_rows {
  float *values; /* rows × n_values, as written (gaps filled) */
  int *labels;   /* rows: id in table (first-appearance order), 0 without a label column */
  size_t rows;
  int n_values;
  int header_seen;
  uint64_t filled; /* missing values filled */
  struct lstmd_label_table table;
};
int lstmd_csv_read_rows(const char *path, int label_column, int header, int expect, int missing,
                        const char *how, struct lstmd_csv_rows *out);
void lstmd_csv_rows_free(struct lstmd_csv_rows *r);
/* A CSV field (NUL-terminated, as libcsv's CSV_APPEND_NULL gives it; the reader refuses a field
 * with a NUL inside) as a finite decimal float (blanks around it allowed): 0, or -1 if it is not
 * (inf, magnitudes past 3e38, and hexadecimal such as 0x10, which strtod would read, are
 * refused). */
int lstmd_csv_number(const char *text, size_t len, float *out);
/* What the refusal of text as a number adds after "'TEXT' is not a finite number": a static
 * string naming lstmd's range for a finite magnitude past 3e38, the hexadecimal note where text
 * starts as hexadecimal does (blanks, a sign, then 0x or 0X), else "". */
const char *lstmd_csv_number_hint(const char *text);

#endif
