/* prepare_text.c — `lstmd prepare text`: byte-level corpus → train.bin/val.bin, streamed in two
 * passes (byte histogram, then id mapping) so a corpus never has to fit in memory. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/status.h"
#include "batcher.h"
#include "dataset.h"
#include "prepare.h"

enum { kChunkBytes = 1 << 20 };

/* Reads up to n bytes; returns bytes read (0 at end) or -1 with errno set. */
static ssize_t read_some(int fd, uint8_t *buf, size_t n) {
  ssize_t k;
  do k = read(fd, buf, n);
  while (k < 0 && errno == EINTR);
  return k;
}

/* "holds no window of the default data.seq_len 128 (+1 target)" and what would fit. */
static void short_split(const char *out_dir, const char *split, const char *unit, uint64_t n,
                        int targets, const char *consequence) {
  char fits[96] = "at any data.seq_len";
  if (n > (uint64_t)targets)
    snprintf(fits, sizeof fits, "unless data.seq_len <= %llu", (unsigned long long)(n - targets));
  fprintf(stderr, "lstmd: warning: %s/%s: %llu %s hold no window of the default data.seq_len %d "
          "(+%d target%s): %s %s\n", out_dir, split, (unsigned long long)n, unit,
          LSTMD_DEFAULT_SEQ_LEN, targets, targets == 1 ? "" : "s", consequence, fits);
}

void lstmd_prepare_warn_short(const char *out_dir, const char *unit, uint64_t train_n,
                              uint64_t val_n, int targets) {
  const uint64_t window = (uint64_t)LSTMD_DEFAULT_SEQ_LEN + (uint64_t)targets;
  static const char kNoEval[] = "lstmd train will not evaluate (no val_loss, no best.safetensors)";
  if (val_n == 0)
    fprintf(stderr, "lstmd: warning: %s/val.bin is empty: %s at any data.seq_len; prepare with a "
            "larger --val-fraction or more data\n", out_dir, kNoEval);
  else if (val_n < window) short_split(out_dir, "val.bin", unit, val_n, targets, kNoEval);
  if (train_n < window)
    short_split(out_dir, "train.bin", unit, train_n, targets, "lstmd train will refuse it");
}

int lstmd_prepare_text(const char *input, const char *out_dir, double val_fraction) {
  int fd = open(input, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    lstmd_errorf("%s: cannot open input: %s", input, strerror(errno));
    return LSTMD_EIO;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    lstmd_errorf("%s: not a regular file", input);
    close(fd);
    return LSTMD_EIO;
  }
  uint64_t size = (uint64_t)st.st_size;
  uint64_t val_n = (uint64_t)(val_fraction * (double)size), train_n = size - val_n;
  if (size == 0) {
    lstmd_errorf("%s: input is empty", input);
    close(fd);
    return LSTMD_EFORMAT;
  }
  if (train_n < 2) {
    lstmd_errorf("%s: %llu bytes leave fewer than 2 for training", input, (unsigned long long)size);
    close(fd);
    return LSTMD_EFORMAT;
  }
  uint8_t *buf = malloc(kChunkBytes);
  if (!buf) {
    close(fd);
    return LSTMD_ENOMEM;
  }
  /* Two passes over the file (the vocabulary, then the ids): a file written meanwhile without
   * changing its size would give ids from a vocabulary it no longer has (a byte new in the
   * second pass became id 0, exit 0), so each pass takes a CRC of the bytes and they must agree. */
  uint64_t hist[256] = {0}, seen = 0;
  uint32_t crc_first = 0, crc_second = 0;
  ssize_t k;
  while ((k = read_some(fd, buf, kChunkBytes)) > 0) {
    for (ssize_t i = 0; i < k; i++) hist[buf[i]]++;
    crc_first = lstmd_crc32c(crc_first, buf, (size_t)k);
    seen += (uint64_t)k;
  }
  struct lstmd_dataset_info info = {.kind = LSTMD_DATASET_TEXT, .width = 1};
  uint8_t id_of[256] = {0};
  for (int b = 0; b < 256; b++)
    if (hist[b]) {
      id_of[b] = (uint8_t)info.vocab_size;
      info.vocab[info.vocab_size++] = (uint8_t)b;
    }
  int rc = LSTMD_OK;
  if (k < 0 || seen != size) {
    lstmd_errorf("%s: read failed or file changed while reading", input);
    rc = LSTMD_EIO;
  }
  struct lstmd_dataset_writer train = {0}, val = {0};
  char path[4096];
  int opened = 0;
  if (!rc) rc = lstmd_mkdir_output(out_dir);
  if (!rc) {
    snprintf(path, sizeof path, "%s/train.bin", out_dir);
    rc = lstmd_dataset_writer_open(&train, path, &info);
    opened = rc == 0;
  }
  if (!rc) {
    snprintf(path, sizeof path, "%s/val.bin", out_dir);
    rc = lstmd_dataset_writer_open(&val, path, &info);
    opened += rc == 0;
  }
  if (!rc && lseek(fd, 0, SEEK_SET) != 0) rc = LSTMD_EIO;
  uint64_t pos = 0;
  while (!rc && (k = read_some(fd, buf, kChunkBytes)) > 0) {
    crc_second = lstmd_crc32c(crc_second, buf, (size_t)k);
    for (ssize_t i = 0; i < k; i++) buf[i] = id_of[buf[i]];
    uint64_t n = (uint64_t)k, to_train = pos < train_n ? train_n - pos : 0;
    if (to_train > n) to_train = n;
    if (to_train) rc = lstmd_dataset_writer_append(&train, buf, to_train);
    if (!rc && n > to_train) rc = lstmd_dataset_writer_append(&val, buf + to_train, n - to_train);
    pos += n;
  }
  if (!rc && (k < 0 || pos != size || crc_second != crc_first)) {
    lstmd_errorf("%s: read failed or file changed while reading", input);
    rc = LSTMD_EIO;
  }
  uint64_t pair_id = (uint64_t)train.info.payload_crc32c << 32 | val.info.payload_crc32c;
  if (!rc) rc = lstmd_dataset_writer_finish(&train, pair_id);
  if (!rc) rc = lstmd_dataset_writer_finish(&val, pair_id);
  if (!rc) rc = lstmd_dataset_writer_commit(&val);
  if (!rc) rc = lstmd_dataset_writer_commit(&train);
  if (rc && opened >= 1) lstmd_dataset_writer_abort(&train);
  if (rc && opened >= 2) lstmd_dataset_writer_abort(&val);
  free(buf);
  close(fd);
  if (!rc)
    fprintf(stderr, "lstmd: prepared text %s: %llu bytes, vocabulary %d, train %llu, val %llu -> %s\n",
            input, (unsigned long long)size, info.vocab_size, (unsigned long long)train_n,
            (unsigned long long)val_n, out_dir);
  if (!rc) lstmd_prepare_warn_short(out_dir, "tokens", train_n, val_n, 1);
  return rc;
}
