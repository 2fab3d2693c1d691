/* fuzz_dataset.c — libFuzzer target for the dataset split reader (worker/data/dataset.c): the input
 * is written to a memfd and opened by path, as `lstmd train` and `eval` open train.bin and
 * val.bin. Invariants (abort() on a violation): open returns OK or a bad-input status (EFORMAT,
 * EIO), never anything else; a split it accepts has a payload of count elements its size says
 * (the verify pass reads all of it: ECRC for a changed byte), its first and last elements read,
 * and every classify record of the first 64 is accepted or refused by the record check (a read
 * past a buffer in any of it is a crash under ASan). Seeds: tests/fuzz/corpus-dataset
 * (make_dataset_corpus.sh: text, series, classify by bytes and by values, and bad headers). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/status.h"
#include "worker/data/dataset.h"
#include "fuzz_target.h"

static size_t g_opened, g_verified, g_rejected;

static void check_split(struct lstmd_dataset *ds, int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) abort();
  /* open checked the file length: the payload holds exactly count elements */
  if (ds->payload_offset + ds->info.count * (uint64_t)ds->elem_bytes != (uint64_t)st.st_size) abort();
  fuzz_quiet();
  const int rc = lstmd_dataset_verify(ds);
  fuzz_loud();
  if (rc == LSTMD_OK) g_verified++;
  else if (rc != LSTMD_ECRC && rc != LSTMD_EFORMAT && rc != LSTMD_EIO && rc != LSTMD_ENOMEM) abort();
  const uint64_t n = ds->info.count < 64 ? ds->info.count : 64;
  if (!n) return;
  uint8_t *buf = malloc(n * ds->elem_bytes);
  if (!buf) return;
  if (lstmd_dataset_read(ds, 0, n, buf) != LSTMD_OK) abort();
  if (lstmd_dataset_read(ds, ds->info.count - 1, 1, buf) != LSTMD_OK) abort();
  if (ds->info.kind == LSTMD_DATASET_CLASSIFY && lstmd_dataset_read(ds, 0, n, buf) == LSTMD_OK)
    for (uint64_t i = 0; i < n; i++) {
      const int ok = lstmd_classify_record_check(&ds->info, buf + i * ds->elem_bytes);
      if (ok != LSTMD_OK && ok != LSTMD_EFORMAT) abort();
    }
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  const int fd = fuzz_input_file(data, size, path);
  struct lstmd_dataset ds;
  fuzz_quiet();
  const int rc = lstmd_dataset_open(path, &ds);
  fuzz_loud();
  if (rc == LSTMD_OK) {
    g_opened++;
    check_split(&ds, fd);
    lstmd_dataset_close(&ds);
  } else if (rc == LSTMD_EFORMAT || rc == LSTMD_EIO) {
    g_rejected++;
  } else if (rc != LSTMD_ENOMEM) {
    abort();
  }
  close(fd);
  return 0;
}

/* The seeds must hold splits the reader opens and verifies, and files it rejects. */
int fuzz_target_seeds_ok(void) {
  if (g_opened && g_verified && g_rejected) return 1;
  fprintf(stderr, "fuzz_driver: the seeds miss an outcome (opened %zu, verified %zu, rejected %zu)\n",
          g_opened, g_verified, g_rejected);
  return 0;
}

void fuzz_target_report(FILE *out) {
  fprintf(out, "%zu splits opened (%zu verified), %zu rejected", g_opened, g_verified, g_rejected);
}
