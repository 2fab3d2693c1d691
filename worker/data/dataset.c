/* dataset.c — reading and writing the prepared-dataset format described in dataset.h. */
#define _GNU_SOURCE
#include "dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/status.h"
#include "worker/io/durable.h"

static const char kMagic[8] = {'L', 'S', 'T', 'M', 'D', 'D', 'A', 'T'};
/* The fill record after the statistics of a series or numeric classify header (dataset.h). Why
 * there and not a new field or version: the fixed 64 bytes are all taken, and what follows the
 * statistics has always been zero padding, covered by the header CRC and never read, so an
 * lstmd from before it still opens such a file (the same version, the same checks), and a file
 * from before it, all zeros there, reads as "not filled". A file prepared without --missing is
 * byte for byte what it was. */
static const char kFillTag[4] = {'F', 'I', 'L', 'L'};
enum { kFillRecordBytes = 16 };
/* Version 2 marks the files an lstmd without numeric classify records cannot read (dtype 4);
 * everything else is still written as version 1, byte for byte what it was. */
enum { kVersion = 1, kVersionNumeric = 2, kFixedHeaderBytes = 64, kDtypeU8 = 1, kDtypeF32 = 2,
       kDtypeRecord = 3, kDtypeF32Record = 4 };
#define MAX_HEADER_BYTES (64 + 256 + LSTMD_MAX_COLUMNS * (LSTMD_MAX_NAME_BYTES + 8) + 64)

uint32_t lstmd_crc32c(uint32_t crc, const void *buf, size_t n) {
  const unsigned char *p = buf;
  crc = ~crc;
  while (n > 0) { /* ISA-L takes an int length */
    int chunk = n > (1u << 30) ? (1 << 30) : (int)n;
    crc = crc32_iscsi((unsigned char *)p, chunk, crc);
    p += chunk;
    n -= (size_t)chunk;
  }
  return ~crc;
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static size_t elem_bytes_of(const struct lstmd_dataset_info *info) {
  if (info->kind == LSTMD_DATASET_CLASSIFY) return lstmd_classify_record_bytes(info);
  return info->kind == LSTMD_DATASET_TEXT ? 1 : 4 * (size_t)info->width;
}

/* The name table: n × (u8 length + bytes); series column names or classify labels. */
static size_t encode_names(const struct lstmd_dataset_info *info, int n, uint8_t *buf) {
  size_t k = 0;
  for (int c = 0; c < n; c++) {
    size_t len = strlen(info->names[c]);
    buf[k++] = (uint8_t)len;
    memcpy(buf + k, info->names[c], len);
    k += len;
  }
  return k;
}

/* The fill record at buf (decode_fill), when prepare filled gaps; its length. */
static size_t encode_fill(const struct lstmd_dataset_info *info, uint8_t *buf) {
  if (info->missing == LSTMD_MISSING_ERROR) return 0;
  memcpy(buf, kFillTag, 4);
  put_u32(buf + 4, (uint32_t)info->missing);
  put_u64(buf + 8, info->missing_filled);
  return kFillRecordBytes;
}

/* Serialises the header into buf (MAX_HEADER_BYTES); returns its padded length. */
static size_t encode_header(const struct lstmd_dataset_info *info, uint8_t *buf) {
  memset(buf, 0, MAX_HEADER_BYTES);
  size_t n = kFixedHeaderBytes;
  if (info->kind != LSTMD_DATASET_SERIES) {
    memcpy(buf + n, info->vocab, (size_t)info->vocab_size);
    n += (size_t)info->vocab_size;
    if (info->kind == LSTMD_DATASET_CLASSIFY) n += encode_names(info, info->horizon, buf + n);
    if (info->numeric) { /* the global normalisation of numeric classify records */
      memcpy(buf + n, &info->mean[0], 4);
      memcpy(buf + n + 4, &info->std[0], 4);
      n += 8;
      n += encode_fill(info, buf + n);
    }
  } else {
    n += encode_names(info, info->width, buf + n);
    memcpy(buf + n, info->mean, 4 * (size_t)info->width);
    n += 4 * (size_t)info->width;
    memcpy(buf + n, info->std, 4 * (size_t)info->width);
    n += 4 * (size_t)info->width;
    n += encode_fill(info, buf + n);
  }
  size_t header_bytes = (n + 63) / 64 * 64;
  memcpy(buf, kMagic, 8);
  put_u32(buf + 8, info->numeric ? kVersionNumeric : kVersion);
  put_u32(buf + 12, (uint32_t)info->kind);
  put_u32(buf + 16, info->kind == LSTMD_DATASET_TEXT     ? kDtypeU8
                    : info->kind == LSTMD_DATASET_SERIES ? kDtypeF32
                    : info->numeric                      ? kDtypeF32Record
                                                         : kDtypeRecord);
  put_u32(buf + 20, (uint32_t)header_bytes);
  put_u64(buf + 24, info->count);
  put_u32(buf + 32, (uint32_t)info->width);
  put_u32(buf + 36, (uint32_t)info->vocab_size);
  put_u32(buf + 40, (uint32_t)info->horizon);
  put_u32(buf + 44, info->payload_crc32c);
  put_u32(buf + 52, info->kind == LSTMD_DATASET_SERIES ? (uint32_t)info->season : 0);
  put_u64(buf + 56, info->pair_id);
  put_u32(buf + 48, lstmd_crc32c(0, buf, header_bytes));
  return header_bytes;
}

int lstmd_dataset_writer_open(struct lstmd_dataset_writer *w, const char *path,
                              const struct lstmd_dataset_info *info) {
  uint8_t header[MAX_HEADER_BYTES];
  w->info = *info;
  w->info.count = 0;
  w->info.payload_crc32c = 0;
  w->header_bytes = encode_header(&w->info, header);
  LSTMD_TRY(lstmd_durable_open(&w->file, path));
  int rc = lstmd_durable_write(&w->file, header, w->header_bytes); /* placeholder, see finish */
  if (rc) lstmd_durable_abort(&w->file);
  return rc;
}

int lstmd_dataset_writer_append(struct lstmd_dataset_writer *w, const void *data, uint64_t n) {
  size_t bytes = n * elem_bytes_of(&w->info);
  w->info.payload_crc32c = lstmd_crc32c(w->info.payload_crc32c, data, bytes);
  w->info.count += n;
  return lstmd_durable_write(&w->file, data, bytes);
}

int lstmd_dataset_writer_finish(struct lstmd_dataset_writer *w, uint64_t pair_id) {
  uint8_t header[MAX_HEADER_BYTES];
  w->info.pair_id = pair_id;
  encode_header(&w->info, header);
  return lstmd_durable_pwrite(&w->file, header, w->header_bytes, 0);
}

int lstmd_dataset_writer_commit(struct lstmd_dataset_writer *w) {
  return lstmd_durable_commit(&w->file);
}

void lstmd_dataset_writer_abort(struct lstmd_dataset_writer *w) { lstmd_durable_abort(&w->file); }

#define BAD(...)                        \
  do {                                  \
    lstmd_errorf(__VA_ARGS__);          \
    lstmd_dataset_close(ds);            \
    return LSTMD_EFORMAT;               \
  } while (0)

/* Decodes n names (u8 length + bytes, each non-empty) at *pos; -1 if the table is corrupt. */
static int decode_names(struct lstmd_dataset_info *info, int count, const uint8_t *buf, size_t *pos,
                        size_t header_bytes) {
  size_t n = *pos;
  for (int c = 0; c < count; c++) {
    if (n >= header_bytes) return -1;
    size_t len = buf[n++];
    if (len == 0 || len >= LSTMD_MAX_NAME_BYTES || n + len > header_bytes) return -1;
    memcpy(info->names[c], buf + n, len);
    info->names[c][len] = '\0';
    n += len;
  }
  *pos = n;
  return 0;
}

/* The fill record at buf[n] (encode_fill), when its tag is there: a method other than
 * previous or linear is a corrupt header. No tag (zero padding, or no room): not filled. */
static int decode_fill(struct lstmd_dataset_info *info, const uint8_t *buf, size_t n,
                       size_t header_bytes) {
  info->missing = LSTMD_MISSING_ERROR;
  info->missing_filled = 0;
  if (n + kFillRecordBytes > header_bytes || memcmp(buf + n, kFillTag, 4) != 0) return 0;
  const uint32_t method = get_u32(buf + n + 4);
  if (method != LSTMD_MISSING_PREVIOUS && method != LSTMD_MISSING_LINEAR) return -1;
  info->missing = (int)method;
  info->missing_filled = get_u64(buf + n + 8);
  return 0;
}

/* Decodes and checks the variable part of the header (vocabulary, labels or column table). */
static int decode_tables(struct lstmd_dataset_info *info, const uint8_t *buf, size_t header_bytes) {
  size_t n = kFixedHeaderBytes;
  if (info->kind != LSTMD_DATASET_SERIES) {
    if (n + (size_t)info->vocab_size > header_bytes) return -1;
    memcpy(info->vocab, buf + n, (size_t)info->vocab_size);
    for (int k = 1; k < info->vocab_size; k++)
      if (info->vocab[k] <= info->vocab[k - 1]) return -1;
    if (info->kind == LSTMD_DATASET_TEXT) return 0;
    n += (size_t)info->vocab_size;
    if (decode_names(info, info->horizon, buf, &n, header_bytes) != 0) return -1;
    for (int k = 1; k < info->horizon; k++) /* labels strictly ascending: ids are their order */
      if (strcmp(info->names[k - 1], info->names[k]) >= 0) return -1;
    if (!info->numeric) return 0;
    if (n + 8 > header_bytes) return -1;
    memcpy(&info->mean[0], buf + n, 4);
    memcpy(&info->std[0], buf + n + 4, 4);
    if (!(isfinite(info->mean[0]) && isfinite(info->std[0]) && info->std[0] > 0.0f)) return -1;
    return decode_fill(info, buf, n + 8, header_bytes);
  }
  if (decode_names(info, info->width, buf, &n, header_bytes) != 0) return -1;
  if (n + 8 * (size_t)info->width > header_bytes) return -1;
  memcpy(info->mean, buf + n, 4 * (size_t)info->width);
  memcpy(info->std, buf + n + 4 * (size_t)info->width, 4 * (size_t)info->width);
  for (int c = 0; c < info->width; c++)
    if (!(info->std[c] > 0.0f) || info->mean[c] != info->mean[c]) return -1;
  return decode_fill(info, buf, n + 8 * (size_t)info->width, header_bytes);
}

int lstmd_dataset_open(const char *path, struct lstmd_dataset *ds) {
  memset(ds, 0, sizeof *ds);
  ds->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: refused below, no wait */
  if (ds->fd < 0) {
    /* ENOTDIR: the folder part is a file — usually the split itself given as data.path,
     * --data or --calibrate (DIR/val.bin/val.bin); say what is wanted. */
    const int e = errno;
    lstmd_errorf("%s: cannot open dataset: %s%s", path, strerror(e),
                 e == ENOTDIR ? " (name the folder `lstmd prepare --out` wrote, which holds "
                                "train.bin and val.bin, not a file)" : "");
    return LSTMD_EIO;
  }
  ds->path = strdup(path);
  struct stat st;
  if (!ds->path || fstat(ds->fd, &st) != 0) BAD("%s: cannot stat: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) BAD("%s: not a regular file", path);
  uint8_t buf[MAX_HEADER_BYTES] = {0};
  if ((uint64_t)st.st_size < kFixedHeaderBytes ||
      lstmd_read_at(ds->fd, buf, kFixedHeaderBytes, 0) != LSTMD_OK)
    BAD("%s: truncated dataset header (%lld bytes)", path, (long long)st.st_size);
  if (memcmp(buf, kMagic, 8) != 0) BAD("%s: not an lstmd dataset (bad magic)", path);
  const uint32_t version = get_u32(buf + 8);
  if (version != kVersion && version != kVersionNumeric)
    BAD("%s: dataset version %u, this lstmd reads versions %d and %d", path, version, kVersion,
        kVersionNumeric);
  struct lstmd_dataset_info *info = &ds->info;
  info->kind = (int)get_u32(buf + 12);
  uint32_t dtype = get_u32(buf + 16), header_bytes = get_u32(buf + 20);
  info->count = get_u64(buf + 24);
  uint32_t width = get_u32(buf + 32), vocab = get_u32(buf + 36), horizon = get_u32(buf + 40);
  info->payload_crc32c = get_u32(buf + 44);
  uint32_t header_crc = get_u32(buf + 48), season = get_u32(buf + 52);
  info->pair_id = get_u64(buf + 56);
  int text_ok = info->kind == LSTMD_DATASET_TEXT && dtype == kDtypeU8 && width == 1 &&
                vocab >= 1 && vocab <= 256;
  int series_ok = info->kind == LSTMD_DATASET_SERIES && dtype == kDtypeF32 && width >= 1 &&
                  width <= LSTMD_MAX_COLUMNS && horizon >= 1 && horizon <= 4096;
  /* numeric records (dtype 4) come with version 2 only, and the other kinds with version 1 */
  info->numeric = dtype == kDtypeF32Record;
  int classify_ok = info->kind == LSTMD_DATASET_CLASSIFY && width >= 1 &&
                    width <= LSTMD_MAX_SEQ_BYTES && horizon >= 2 && horizon <= LSTMD_MAX_COLUMNS &&
                    (info->numeric ? vocab == 0 : dtype == kDtypeRecord && vocab >= 1 && vocab <= 256);
  if ((!text_ok && !series_ok && !classify_ok) ||
      version != (info->numeric ? (uint32_t)kVersionNumeric : (uint32_t)kVersion))
    BAD("%s: inconsistent dataset header fields", path);
  if (season > (series_ok ? (uint32_t)LSTMD_MAX_SEASON : 0u))
    BAD("%s: bad season %u in the dataset header", path, season);
  info->season = (int)season;
  if (header_bytes < kFixedHeaderBytes || header_bytes > MAX_HEADER_BYTES || header_bytes % 64)
    BAD("%s: bad header length %u", path, header_bytes);
  info->width = (int)width;
  info->vocab_size = text_ok || classify_ok ? (int)vocab : 0; /* numeric classify: 0 */
  info->horizon = series_ok || classify_ok ? (int)horizon : 0;
  if ((uint64_t)st.st_size < header_bytes ||
      lstmd_read_at(ds->fd, buf, header_bytes, 0) != LSTMD_OK)
    BAD("%s: truncated dataset header", path);
  put_u32(buf + 48, 0);
  if (lstmd_crc32c(0, buf, header_bytes) != header_crc) BAD("%s: header checksum mismatch", path);
  if (decode_tables(info, buf, header_bytes) != 0) BAD("%s: corrupt vocabulary or column table", path);
  ds->payload_offset = header_bytes;
  ds->elem_bytes = elem_bytes_of(info);
  if (info->count > ((uint64_t)st.st_size - header_bytes) / ds->elem_bytes ||
      (uint64_t)st.st_size != header_bytes + info->count * ds->elem_bytes)
    BAD("%s: file is %lld bytes, header promises %llu (truncated or padded)", path,
        (long long)st.st_size, (unsigned long long)(header_bytes + info->count * ds->elem_bytes));
  return LSTMD_OK;
}

int lstmd_classify_record_check(const struct lstmd_dataset_info *info, const uint8_t *rec) {
  uint32_t label, len;
  const uint8_t *ids = lstmd_classify_record_get(rec, &label, &len);
  if (label >= (uint32_t)info->horizon || len < 1 || len > (uint32_t)info->width) return LSTMD_EFORMAT;
  for (uint32_t i = 0; i < (uint32_t)info->width && !info->numeric; i++)
    if (i < len ? ids[i] >= info->vocab_size : ids[i] != 0) return LSTMD_EFORMAT;
  for (uint32_t i = 0; i < (uint32_t)info->width && info->numeric; i++) {
    float v;
    memcpy(&v, ids + 4 * (size_t)i, 4);
    if (i < len ? !isfinite(v) : v != 0.0f) return LSTMD_EFORMAT;
  }
  return LSTMD_OK;
}

int lstmd_dataset_verify(struct lstmd_dataset *ds) {
  enum { kChunk = 1 << 20 };
  uint8_t *buf = malloc(kChunk);
  if (!buf) return LSTMD_ENOMEM;
  uint64_t left = ds->info.count * ds->elem_bytes, off = ds->payload_offset;
  uint32_t crc = 0;
  int rc = LSTMD_OK;
  uint8_t max_id = ds->info.kind == LSTMD_DATASET_TEXT ? (uint8_t)(ds->info.vocab_size - 1) : 0;
  size_t chunk = kChunk / ds->elem_bytes * ds->elem_bytes; /* whole records */
  while (left > 0 && rc == LSTMD_OK) {
    size_t n = left > chunk ? chunk : (size_t)left;
    rc = lstmd_read_at(ds->fd, buf, n, off);
    if (rc) break;
    crc = lstmd_crc32c(crc, buf, n);
    if (ds->info.kind == LSTMD_DATASET_TEXT)
      for (size_t i = 0; i < n; i++)
        if (buf[i] > max_id) rc = LSTMD_EFORMAT;
    if (ds->info.kind == LSTMD_DATASET_CLASSIFY) /* chunks hold whole records */
      for (size_t r = 0; r + ds->elem_bytes <= n && rc == LSTMD_OK; r += ds->elem_bytes)
        rc = lstmd_classify_record_check(&ds->info, buf + r);
    left -= n;
    off += n;
  }
  free(buf);
  if (rc == LSTMD_OK && crc != ds->info.payload_crc32c) {
    lstmd_errorf("%s: payload checksum mismatch (stored %08x, computed %08x): the file is corrupt",
                 ds->path, ds->info.payload_crc32c, crc);
    return LSTMD_ECRC;
  }
  if (rc) lstmd_errorf("%s: cannot read payload (%s)", ds->path, lstmd_strerror(rc));
  return rc;
}

int lstmd_dataset_read(const struct lstmd_dataset *ds, uint64_t first, uint64_t n, void *out) {
  if (first > ds->info.count || n > ds->info.count - first) return LSTMD_EINVAL;
  int rc = lstmd_read_at(ds->fd, out, n * ds->elem_bytes, ds->payload_offset + first * ds->elem_bytes);
  if (rc) lstmd_errorf("%s: read failed at element %llu", ds->path, (unsigned long long)first);
  return rc;
}

void lstmd_dataset_close(struct lstmd_dataset *ds) {
  if (ds->fd >= 0) close(ds->fd);
  free(ds->path);
  ds->fd = -1;
  ds->path = NULL;
}

int lstmd_dataset_open_dir(const char *dir, struct lstmd_dataset *train, struct lstmd_dataset *val,
                           int verify) {
  char path[4096];
  memset(val, 0, sizeof *val);
  val->fd = -1;
  memset(train, 0, sizeof *train);
  train->fd = -1;
  snprintf(path, sizeof path, "%s/train.bin", dir);
  LSTMD_TRY(lstmd_dataset_open(path, train));
  snprintf(path, sizeof path, "%s/val.bin", dir);
  int rc = lstmd_dataset_open(path, val);
  if (!rc && verify) rc = lstmd_dataset_verify(train);
  if (!rc && verify) rc = lstmd_dataset_verify(val);
  const struct lstmd_dataset_info *a = &train->info, *b = &val->info;
  if (!rc && (a->pair_id != b->pair_id || a->kind != b->kind || a->width != b->width ||
              a->vocab_size != b->vocab_size || memcmp(a->vocab, b->vocab, 256) ||
              memcmp(a->names, b->names, sizeof a->names) || a->horizon != b->horizon ||
              a->season != b->season || a->numeric != b->numeric ||
              a->missing != b->missing || a->missing_filled != b->missing_filled ||
              memcmp(a->mean, b->mean, sizeof a->mean) || memcmp(a->std, b->std, sizeof a->std))) {
    lstmd_errorf("%s: train.bin and val.bin come from different preparations", dir);
    rc = LSTMD_EFORMAT;
  }
  if (rc) {
    lstmd_dataset_close(train);
    lstmd_dataset_close(val);
  }
  return rc;
}

int lstmd_series_stats_differ(const struct lstmd_dataset_info *model,
                              const struct lstmd_dataset_info *data, char *why, size_t why_len) {
  for (int c = 0; c < model->width; c++) {
    if (model->mean[c] == data->mean[c] && model->std[c] == data->std[c]) continue;
    snprintf(why, why_len, "column %d '%s': mean %.9g, std %.9g in the checkpoint, %.9g, %.9g in "
             "the dataset", c, model->names[c], (double)model->mean[c], (double)model->std[c],
             (double)data->mean[c], (double)data->std[c]);
    return c;
  }
  return -1;
}
