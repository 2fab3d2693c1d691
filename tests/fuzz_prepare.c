/* fuzz_prepare.c — libFuzzer target for `lstmd prepare` (worker/data/prepare_*.c over libcsv):
 * the input's first byte picks the preparation (mod 8: text, series with target column `temp`
 * and a feature `x`, classify lines, classify --series, then series again with --missing
 * previous and --missing linear, then classify --series with --missing previous and linear;
 * mod 8 rather than 6 keeps what the first bytes 0-5 of the older seeds pick), the rest is the
 * user's file, written to a memfd and prepared into a scratch folder (under /dev/shm where there
 * is one). Invariants (abort() on a violation): the preparation returns OK or a bad-input status
 * (EFORMAT, EIO, ENOMEM), never anything else; on OK the two splits it wrote open, pass the full
 * verify pass (a numeric classify record must hold finite values only) and belong together
 * (lstmd_dataset_open_dir), the very check `lstmd train` makes, and a series split holds finite
 * values only (no gap left unfilled: the readers mark gaps with NaN); a series or numeric
 * classify split records the --missing method asked for in its header; on failure nothing is
 * left in the folder. Seeds: tests/fuzz/corpus-prepare (make_loader_corpora.sh). */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/status.h"
#include "worker/data/prepare.h"
#include "fuzz_target.h"

enum { kKinds = 8 };
static size_t g_prepared[kKinds], g_rejected;
static char g_dir[256];

/* 1 when the series split's header records `missing` and every value it holds is finite. */
static int series_split_ok(const struct lstmd_dataset *ds, int missing) {
  if (ds->info.missing != missing) return 0;
  float row[LSTMD_MAX_COLUMNS];
  for (uint64_t r = 0; r < ds->info.count; r++) {
    if (lstmd_dataset_read(ds, r, 1, row) != LSTMD_OK) return 0;
    for (int c = 0; c < ds->info.width; c++)
      if (!isfinite(row[c])) return 0;
  }
  return 1;
}

/* 1 when dir holds no entry but . and .. */
static int dir_empty(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) abort();
  struct dirent *e;
  int empty = 1;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
  closedir(d);
  return empty;
}

static void clear_dir(const char *dir) {
  static const char *const names[] = {"train.bin", "val.bin"};
  char path[300];
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
}

static void remove_scratch(void) {
  clear_dir(g_dir);
  rmdir(g_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dir[0]) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/lstmd-fuzz-prepare.XXXXXX", base);
    if (!mkdtemp(g_dir)) abort();
    atexit(remove_scratch);
  }
  if (size < 1) return 0;
  const int kind = data[0] % kKinds;
  static const int missing_of[kKinds] = {0,
                                         LSTMD_MISSING_ERROR,
                                         0,
                                         LSTMD_MISSING_ERROR,
                                         LSTMD_MISSING_PREVIOUS,
                                         LSTMD_MISSING_LINEAR,
                                         LSTMD_MISSING_PREVIOUS,
                                         LSTMD_MISSING_LINEAR};
  char path[64];
  const int fd = fuzz_input_file(data + 1, size - 1, path);
  fuzz_quiet();
  int rc;
  switch (kind) {
    case 0: rc = lstmd_prepare_text(path, g_dir, 0.25); break;
    case 2: rc = lstmd_prepare_classify(path, g_dir, 0.34); break;
    case 3:
    case 6:
    case 7: rc = lstmd_prepare_classify_series(path, g_dir, 0.34, 1, -1, missing_of[kind]); break;
    default: rc = lstmd_prepare_series(path, g_dir, "temp", "x", 2, 0.25, 0, missing_of[kind]);
  }
  fuzz_loud();
  close(fd);
  if (rc == LSTMD_OK) {
    g_prepared[kind]++;
    struct lstmd_dataset train, val;
    fuzz_quiet();
    const int open = lstmd_dataset_open_dir(g_dir, &train, &val, 1);
    fuzz_loud();
    if (open != LSTMD_OK) abort(); /* prepare wrote a dataset that train would refuse */
    if (train.info.kind == LSTMD_DATASET_SERIES &&
        (!series_split_ok(&train, missing_of[kind]) || !series_split_ok(&val, missing_of[kind])))
      abort(); /* a gap reached the dataset, or the method is not the one asked for */
    if (train.info.kind == LSTMD_DATASET_CLASSIFY && train.info.numeric &&
        (train.info.missing != missing_of[kind] || val.info.missing != missing_of[kind]))
      abort(); /* (a gap in a record fails the verify pass above) */
    lstmd_dataset_close(&train);
    lstmd_dataset_close(&val);
    clear_dir(g_dir);
  } else if (rc == LSTMD_EFORMAT || rc == LSTMD_EIO || rc == LSTMD_ENOMEM) {
    g_rejected++;
    if (!dir_empty(g_dir)) abort(); /* a refused input left files behind */
  } else {
    abort();
  }
  return 0;
}

/* The seeds must be prepared by each of the eight preparations, and some refused. */
int fuzz_target_seeds_ok(void) {
  int all = g_rejected > 0;
  for (int k = 0; k < kKinds; k++) all = all && g_prepared[k];
  if (all) return 1;
  fprintf(stderr, "fuzz_driver: the seeds miss an outcome (prepared text %zu, series %zu, "
                  "classify %zu, classify series %zu, series --missing previous %zu, linear %zu, "
                  "classify series --missing previous %zu, linear %zu; rejected %zu)\n",
          g_prepared[0], g_prepared[1], g_prepared[2], g_prepared[3], g_prepared[4], g_prepared[5],
          g_prepared[6], g_prepared[7], g_rejected);
  return 0;
}

void fuzz_target_report(FILE *out) {
  fprintf(out, "prepared %zu text, %zu series, %zu classify, %zu classify series, %zu series "
          "--missing previous, %zu linear, %zu classify series --missing previous, %zu linear; "
          "%zu refused", g_prepared[0], g_prepared[1], g_prepared[2], g_prepared[3],
          g_prepared[4], g_prepared[5], g_prepared[6], g_prepared[7], g_rejected);
}
