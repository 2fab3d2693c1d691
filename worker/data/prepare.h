/* prepare.h — turning user files into prepared datasets (`lstmd prepare text|series`). */
#ifndef LSTMD_PREPARE_H
#define LSTMD_PREPARE_H

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

/* Numeric CSV with a header line. Inputs are the target column followed by the `features`
 * (comma-separated names, may be NULL); other columns are ignored. The model predicts the next
 * `horizon` target values. The last floor(val_fraction × rows) rows are the validation split;
 * mean/std of each column over the training split are stored in both headers, and `season`
 * (rows per seasonal cycle of the seasonal-naive baseline, 0: none). */
int lstmd_prepare_series(const char *input, const char *out_dir, const char *target,
                         const char *features, int horizon, double val_fraction, int season);

/* Reads the named columns of a CSV file with a header (other columns ignored; every used field
 * must be a finite number). *values is rows × n floats (malloc'd, caller frees). Errors are
 * printed with file and line. */
#include <stddef.h>
int lstmd_csv_read_columns(const char *path, const char *const *names, int n, float **values,
                           size_t *rows);

#endif
