/* dataset.h — the prepared-dataset file format (one file per split, DIR/train.bin and
 * DIR/val.bin) and ranged reads of it. Byte layout (little-endian), documented in README.md:
 *   0  "LSTMDDAT"      8  u32 version (1; 2 for files of dtype 4, which older lstmd cannot read)
 *   12 u32 kind (1 text, 2 series, 3 classify)
 *   16 u32 dtype (1 u8 token ids, 2 f32 rows, 3 classify records of byte ids, 4 classify records
 *      of f32 values: a numeric series per record, `prepare classify --series`)
 *   20 u32 header_bytes (payload offset, 64-aligned)
 *   24 u64 count (tokens, rows or sequences)    32 u32 width (1, columns per row, or classify:
 *      the longest sequence in bytes (dtype 4: in values), which every record is padded to)
 *   36 u32 vocab_size (text, classify; 0 for dtype 4)  40 u32 horizon (series) or classes (classify)
 *   44 u32 payload_crc32c                       48 u32 header_crc32c (this field read as 0)
 *   52 u32 season (series: period P of the seasonal-naive baseline, 0 = none; 0 in files made
 *      before it existed, where it was a reserved zero)  56 u64 pair_id (same in both splits)
 *   64 text: vocab_size bytes, the byte value of each token id, ascending
 *      classify: the same vocabulary, then classes × (u8 length + label bytes), labels in
 *      ascending byte order (label id k is the k-th); the payload is count records of u8 token
 *      ids (the record layout: above lstmd_classify_record_bytes, below)
 *      classify dtype 4: no vocabulary; the labels as above, then f32 mean, f32 std (one of each:
 *      every value of the training split, so a global normalisation), then, only when prepare
 *      filled missing values (--missing previous|linear), the fill record as for series below;
 *      zero padding to header_bytes; the payload is count records of raw f32 values (finite)
 *      series: width × (u8 length + name bytes), then f32 mean[width], f32 std[width]
 *      (training-split statistics; column 0 is the target), then, only when prepare filled
 *      missing values (--missing previous|linear), the fill record: "FILL", u32 method
 *      (enum lstmd_missing), u64 values filled; zero padding to header_bytes. */
#ifndef LSTMD_DATASET_H
#define LSTMD_DATASET_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "worker/io/durable.h"
#include "series_tf.h"

enum lstmd_dataset_kind { LSTMD_DATASET_TEXT = 1, LSTMD_DATASET_SERIES = 2, LSTMD_DATASET_CLASSIFY = 3 };
#define LSTMD_MAX_SEQ_BYTES 4096 /* classify: longest sequence (bytes or values) prepare accepts */
#define LSTMD_MAX_COLUMNS 64
#define LSTMD_MAX_NAME_BYTES 64 /* including the NUL */
#define LSTMD_MAX_SEASON 1000000 /* prepare --season: at most this many rows */

/* `--missing` of prepare series, predict, prepare classify --series and classify: what a
 * missing CSV field becomes (csv_missing.c).
 * Inline here, not in csv_missing.c, as the checkpoint code (which the loader fuzzers build
 * without the data sources) names it too. */
enum lstmd_missing { LSTMD_MISSING_ERROR = 0, LSTMD_MISSING_PREVIOUS = 1, LSTMD_MISSING_LINEAR = 2 };
static inline const char *lstmd_missing_name(int m) {
  return m == LSTMD_MISSING_PREVIOUS ? "previous" : m == LSTMD_MISSING_LINEAR ? "linear" : "error";
}
/* The method named text, or -1. */
static inline int lstmd_missing_parse(const char *text) {
  for (int m = LSTMD_MISSING_ERROR; m <= LSTMD_MISSING_LINEAR; m++)
    if (strcmp(text, lstmd_missing_name(m)) == 0) return m;
  return -1;
}

struct lstmd_dataset_info {
  int kind;
  uint64_t count;                /* tokens (text), rows (series) or sequences (classify) */
  int width;                     /* 1 (text), columns per row (series), target first, or
                                  * classify: bytes per record's sequence (the longest) */
  int vocab_size;                /* text, classify: number of distinct byte values */
  uint8_t vocab[256];            /* text, classify: byte value of token id k */
  int horizon;                   /* series: how many next target values are predicted;
                                  * classify: the number of classes */
  int season;                    /* series: seasonal period P in rows (prepare --season), 0 = none */
  int numeric;                   /* classify: 1 when records hold f32 values (dtype 4; vocab_size
                                  * 0, mean[0]/std[0] the training split's), 0 for byte ids */
  int missing;                   /* series, numeric classify: how prepare filled missing CSV
                                  * values (enum lstmd_missing; 0: it did not, or a file from
                                  * before) */
  uint64_t missing_filled;       /* series, numeric classify: how many values it filled (both
                                  * splits together) */
  char names[LSTMD_MAX_COLUMNS][LSTMD_MAX_NAME_BYTES]; /* series column names, or classify:
                                                       * the label of each class id */
  float mean[LSTMD_MAX_COLUMNS]; /* series: training-split mean of each column; numeric
                                  * classify: [0] is the mean of every training value */
  float std[LSTMD_MAX_COLUMNS];  /* series: training-split std (1 where constant); numeric
                                  * classify: [0] likewise */
  uint32_t payload_crc32c;
  uint64_t pair_id;
};

struct lstmd_dataset {
  struct lstmd_dataset_info info;
  int fd;
  char *path;
  uint64_t payload_offset;
  size_t elem_bytes; /* bytes per token (1), per row (4·width) or per classify record
                      * (lstmd_classify_record_bytes) */
  struct lstmd_series_tf tf; /* series: how windows are shown to the model (series_tf.h); set by
                              * the opener's caller from the config or checkpoint, 0: plain */
};

/* One classify record, the payload element of a classify split (kind 3), little-endian:
 *   0 u32 label id (< classes)   4 u32 length (1..width)
 *   8 width token ids (u8, < vocab_size; dtype 3) or width raw f32 values (finite; dtype 4),
 *     zero after `length`
 * so lstmd_classify_record_bytes(info) = 8 + width (dtype 3) or 8 + 4·width (dtype 4). The
 * writers (prepare_classify*.c) encode with lstmd_classify_record_put; the reader's check
 * (dataset.c) and the batcher decode with lstmd_classify_record_get: the format lives here only. */
#define LSTMD_CLASSIFY_RECORD_HEADER 8 /* bytes before a record's ids or values */

static inline size_t lstmd_classify_record_bytes(const struct lstmd_dataset_info *info) {
  return LSTMD_CLASSIFY_RECORD_HEADER + (info->numeric ? 4 : 1) * (size_t)info->width;
}
/* Writes the label and length of record rec; returns where its ids or values go. */
static inline uint8_t *lstmd_classify_record_put(uint8_t *rec, uint32_t label, uint32_t length) {
  for (int k = 0; k < 4; k++) {
    rec[k] = (uint8_t)(label >> (8 * k));
    rec[4 + k] = (uint8_t)(length >> (8 * k));
  }
  return rec + LSTMD_CLASSIFY_RECORD_HEADER;
}
/* Reads the label and length of record rec (unchecked: see lstmd_classify_record_check);
 * returns where its ids or values start. */
static inline const uint8_t *lstmd_classify_record_get(const uint8_t *rec, uint32_t *label,
                                                       uint32_t *length) {
  uint32_t l = 0, n = 0;
  for (int k = 3; k >= 0; k--) {
    l = l << 8 | rec[k];
    n = n << 8 | rec[4 + k];
  }
  *label = l;
  *length = n;
  return rec + LSTMD_CLASSIFY_RECORD_HEADER;
}

/* CRC-32C (Castagnoli) of buf, continuing from crc (start with 0). Uses ISA-L. */
uint32_t lstmd_crc32c(uint32_t crc, const void *buf, size_t n);

/* Streaming writer of one split into a temp file; nothing is visible at `path` until commit.
 * open: info describes everything but count/payload_crc32c/pair_id (filled in as data comes).
 * append: n elements (u8 token ids, or rows of width f32). finish: writes the header.
 * commit: fsync + rename into place. abort: removes the temp file (safe after any step). */
struct lstmd_dataset_writer {
  struct lstmd_durable file;
  struct lstmd_dataset_info info;
  size_t header_bytes;
};
int lstmd_dataset_writer_open(struct lstmd_dataset_writer *w, const char *path,
                              const struct lstmd_dataset_info *info);
int lstmd_dataset_writer_append(struct lstmd_dataset_writer *w, const void *data, uint64_t n);
int lstmd_dataset_writer_finish(struct lstmd_dataset_writer *w, uint64_t pair_id);
int lstmd_dataset_writer_commit(struct lstmd_dataset_writer *w);
void lstmd_dataset_writer_abort(struct lstmd_dataset_writer *w);

/* Opens a split and checks its header (magic, version, sizes, header CRC, file length).
 * Every failure prints a message naming the file and returns LSTMD_EFORMAT/LSTMD_EIO. */
int lstmd_dataset_open(const char *path, struct lstmd_dataset *ds);
/* Reads the whole payload once and checks its CRC (LSTMD_ECRC on mismatch). */
int lstmd_dataset_verify(struct lstmd_dataset *ds);
/* Checks one classify record (label id < classes, 1 <= length <= width, ids < vocab_size or
 * finite values, zero padding): LSTMD_OK or LSTMD_EFORMAT. */
int lstmd_classify_record_check(const struct lstmd_dataset_info *info, const uint8_t *rec);
/* Reads elements [first, first+n) (tokens or rows) into out with pread. */
int lstmd_dataset_read(const struct lstmd_dataset *ds, uint64_t first, uint64_t n, void *out);
void lstmd_dataset_close(struct lstmd_dataset *ds);

/* Series: the first column c < model->width whose training-split mean or std in `data` is not
 * the one in `model` (a checkpoint's dataset header), compared bit for bit, or -1 when all
 * agree. With a difference, why gets "column c 'name': mean M, std S in the checkpoint, m, s in
 * the dataset" (%.9g, enough to tell floats apart). The two must have the same width (callers
 * check the columns first). Used where a model meets data prepared apart from it: distillation's
 * teacher (refused), eval and quantize --calibrate (scored with the model's statistics). */
int lstmd_series_stats_differ(const struct lstmd_dataset_info *model,
                              const struct lstmd_dataset_info *data, char *why, size_t why_len);

/* Opens DIR/train.bin and DIR/val.bin, verifies both payloads when `verify` is set (one full
 * read of each), and checks they belong together (same pair_id, kind, vocabulary/columns). */
int lstmd_dataset_open_dir(const char *dir, struct lstmd_dataset *train, struct lstmd_dataset *val,
                           int verify);

#endif
