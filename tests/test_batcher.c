/* test_batcher.c — the data orders of worker/data/batcher.c across epoch boundaries, on tiny
 * text splits whose token at element i is i (so a batch column names the window it holds):
 *  1. shuffle: every epoch visits each window exactly once, and each new epoch is a different
 *     permutation (reshuffled at the wrap); the state is reset for every batch; the cursor is
 *     (epoch, windows consumed) — (0, n) at the end of epoch 0, (1, k) once epoch 1 has begun;
 *     2 ranks take the slices of the global batch one rank takes, also for a batch that
 *     straddles the wrap;
 *  2. stream: each step takes the next window of every stream; at the end of the streams all
 *     start over at position 0 with the state reset (and only then, besides the first batch);
 *     2 ranks own the streams one rank with their combined batch owns;
 *  3. resume: a batcher restored from the cursor saved after any step — before, at and after a
 *     wrap — yields the batches (and resets) the uninterrupted one yields;
 *  4. classify records (dataset.h): put then get returns the label and length, little-endian at
 *     their documented offsets; lstmd_classify_record_check accepts a well-formed record of
 *     ids and of f32 values and refuses each malformed field;
 *  5. series in shuffle order: window i starts at i·T plus an offset in [0, T) drawn per window
 *     and epoch, so the windows begin at every phase of a season dividing T (they all began at
 *     i·T, and a model of seq_len 48 on hourly data learned windows that start at midnight only);
 *     each epoch visits each of its (count − K − (T − 1)) / T windows once, every window lies
 *     inside the split, 2 ranks see what 1 rank sees and a restored cursor continues alike; the
 *     cursor at the end of an epoch of one window more (a checkpoint from before) is accepted. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/status.h"
#include "worker/data/batcher.h"
#include "worker/data/dataset.h"
#include "check.h"

enum { T = 2, kMaxSteps = 64, kMaxB = 8 };

static char g_dir[] = "/tmp/lstmd-test-batcher-XXXXXX";

/* A text split of `count` tokens, token i = i (vocabulary: all 256 byte values). */
static int make_split(const char *name, uint64_t count, struct lstmd_dataset *ds) {
  struct lstmd_dataset_info info = {.kind = LSTMD_DATASET_TEXT, .width = 1, .vocab_size = 256};
  for (int k = 0; k < 256; k++) info.vocab[k] = (uint8_t)k;
  uint8_t tok[256];
  for (uint64_t i = 0; i < count; i++) tok[i] = (uint8_t)i;
  char path[300];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  struct lstmd_dataset_writer w = {0};
  int rc = lstmd_dataset_writer_open(&w, path, &info);
  if (!rc) rc = lstmd_dataset_writer_append(&w, tok, count);
  if (!rc) rc = lstmd_dataset_writer_finish(&w, 7);
  if (!rc) rc = lstmd_dataset_writer_commit(&w);
  if (!rc) rc = lstmd_dataset_open(path, ds);
  return rc;
}

/* What one rank's batcher hands out over `steps` steps: the first element of the window in
 * each column, the reset flag, and the cursor after each step. */
struct trace {
  int steps, B;
  int first[kMaxSteps][kMaxB];
  int reset[kMaxSteps];
  struct lstmd_batcher_cursor after[kMaxSteps];
};

static int run(struct lstmd_batcher *b, const struct lstmd_dataset *ds, int B, int steps,
               struct trace *tr) {
  struct lstmd_batch batch;
  if (lstmd_batch_alloc(ds, T, B, &batch)) return -1;
  tr->steps = steps;
  tr->B = B;
  int rc = 0;
  for (int s = 0; s < steps && !rc; s++) {
    rc = lstmd_batcher_next(b, &batch, &tr->reset[s]);
    for (int c = 0; c < B; c++) tr->first[s][c] = batch.ids[c]; /* row t = 0 */
    tr->after[s] = lstmd_batcher_get_cursor(b);
  }
  lstmd_batch_free(&batch);
  return rc;
}

static int trace_of(const struct lstmd_dataset *ds, int order, int B, int rank, int world,
                    int steps, const struct lstmd_batcher_cursor *from, struct trace *tr) {
  struct lstmd_batcher *b;
  if (lstmd_batcher_create(ds, order, T, B, rank, world, 1234, &b)) return -1;
  int rc = from ? lstmd_batcher_set_cursor(b, *from) : 0;
  if (!rc) rc = run(b, ds, B, steps, tr);
  lstmd_batcher_destroy(b);
  return rc;
}

static int same_cursor(struct lstmd_batcher_cursor a, uint64_t epoch, uint64_t position) {
  return a.epoch == epoch && a.position == position;
}

/* 1. shuffle: 12 windows, global batch 3 → 4 steps per epoch */
static void test_shuffle(const struct lstmd_dataset *ds12, const struct lstmd_dataset *ds11) {
  const int B = 3, per_epoch = 4, epochs = 3;
  struct trace tr;
  check_true("shuffle: 3 epochs of batches", trace_of(ds12, LSTMD_ORDER_SHUFFLE, B, 0, 1,
                                                      per_epoch * epochs, NULL, &tr) == 0);
  int order[3][12], perm_ok = 1, resets = 1;
  for (int e = 0; e < epochs; e++) {
    int seen[12] = {0};
    for (int s = 0; s < per_epoch; s++)
      for (int c = 0; c < B; c++) {
        const int w = tr.first[e * per_epoch + s][c] / T;
        order[e][s * B + c] = w;
        if (w < 0 || w >= 12 || seen[w]++) perm_ok = 0;
      }
    for (int s = 0; s < per_epoch; s++) resets &= tr.reset[e * per_epoch + s] == 1;
  }
  check_true("shuffle: every epoch visits each of the 12 windows once", perm_ok);
  check_true("shuffle: epoch 1 is another permutation than epoch 0",
             memcmp(order[0], order[1], sizeof order[0]) != 0);
  check_true("shuffle: epoch 2 is another permutation than epoch 1",
             memcmp(order[1], order[2], sizeof order[1]) != 0);
  check_true("shuffle: the state is reset for every batch", resets);
  check_true("shuffle: cursor (0, 12) at the end of epoch 0, (1, 3) one step later",
             same_cursor(tr.after[per_epoch - 1], 0, 12) && same_cursor(tr.after[per_epoch], 1, 3));
  check_true("shuffle: cursor (2, 3) one step into epoch 2",
             same_cursor(tr.after[2 * per_epoch], 2, 3));

  /* 11 windows, global batch 4: the third batch takes windows 8..10 of epoch 0 and the first
   * of epoch 1; two ranks of batch 2 see the columns one rank of batch 4 sees. */
  struct trace one, r0, r1;
  int ok = trace_of(ds11, LSTMD_ORDER_SHUFFLE, 4, 0, 1, 8, NULL, &one) == 0 &&
           trace_of(ds11, LSTMD_ORDER_SHUFFLE, 2, 0, 2, 8, NULL, &r0) == 0 &&
           trace_of(ds11, LSTMD_ORDER_SHUFFLE, 2, 1, 2, 8, NULL, &r1) == 0;
  for (int s = 0; ok && s < 8; s++)
    for (int c = 0; c < 2; c++)
      ok &= r0.first[s][c] == one.first[s][c] && r1.first[s][c] == one.first[s][c + 2];
  check_true("shuffle: 2 ranks × batch 2 = 1 rank × batch 4 across the wraps", ok);
  int w0[11] = {0}, straddle_ok = 1;
  for (int s = 0; s < 2; s++)
    for (int c = 0; c < 4; c++) w0[one.first[s][c] / T]++;
  for (int c = 0; c < 3; c++) w0[one.first[2][c] / T]++;
  for (int w = 0; w < 11; w++) straddle_ok &= w0[w] == 1;
  check_true("shuffle: a batch straddling the wrap ends epoch 0 with its last 3 windows",
             straddle_ok && same_cursor(one.after[2], 1, 1));
}

/* 2. stream: 25 tokens in 2 streams of 12, 6 windows of T = 2 each */
static void test_stream(const struct lstmd_dataset *ds12) {
  const int B = 2, per_epoch = 6, steps = 14;
  struct trace tr;
  check_true("stream: 2+ epochs of batches",
             trace_of(ds12, LSTMD_ORDER_STREAM, B, 0, 1, steps, NULL, &tr) == 0);
  int windows_ok = 1, resets_ok = 1;
  for (int s = 0; s < steps; s++) {
    for (int c = 0; c < B; c++) windows_ok &= tr.first[s][c] == c * 12 + (s % per_epoch) * T;
    resets_ok &= tr.reset[s] == (s % per_epoch == 0);
  }
  check_true("stream: each step takes the next window of every stream; they start over at the wrap",
             windows_ok);
  check_true("stream: the state is reset at the first batch and at each wrap, only there", resets_ok);
  check_true("stream: cursor (0, 6) at the end of epoch 0, (1, 1) one step later",
             same_cursor(tr.after[per_epoch - 1], 0, 6) && same_cursor(tr.after[per_epoch], 1, 1));
  struct trace r0, r1;
  int ok = trace_of(ds12, LSTMD_ORDER_STREAM, 1, 0, 2, steps, NULL, &r0) == 0 &&
           trace_of(ds12, LSTMD_ORDER_STREAM, 1, 1, 2, steps, NULL, &r1) == 0;
  for (int s = 0; ok && s < steps; s++)
    ok &= r0.first[s][0] == tr.first[s][0] && r1.first[s][0] == tr.first[s][1] &&
          r0.reset[s] == tr.reset[s] && r1.reset[s] == tr.reset[s];
  check_true("stream: 2 ranks × batch 1 = 1 rank × batch 2 across the wraps", ok);
}

/* 3. a batcher restored from any saved cursor continues as the uninterrupted one */
static void test_resume(const struct lstmd_dataset *ds12) {
  static const struct {
    int order, B, steps;
    const char *name;
  } runs[] = {{LSTMD_ORDER_SHUFFLE, 3, 10, "shuffle"}, {LSTMD_ORDER_STREAM, 2, 14, "stream"}};
  for (int k = 0; k < 2; k++) {
    struct trace full;
    int ok = trace_of(ds12, runs[k].order, runs[k].B, 0, 1, runs[k].steps, NULL, &full) == 0;
    int bad_at = -1;
    for (int s = 0; ok && s + 1 < runs[k].steps; s++) { /* stopped after step s + 1 */
      struct trace rest;
      const int left = runs[k].steps - s - 1;
      ok = trace_of(ds12, runs[k].order, runs[k].B, 0, 1, left, &full.after[s], &rest) == 0;
      for (int i = 0; ok && i < left; i++) {
        ok &= rest.reset[i] == full.reset[s + 1 + i] &&
              same_cursor(rest.after[i], full.after[s + 1 + i].epoch, full.after[s + 1 + i].position);
        for (int c = 0; c < runs[k].B; c++) ok &= rest.first[i][c] == full.first[s + 1 + i][c];
      }
      if (!ok) bad_at = s + 1;
    }
    char what[160];
    snprintf(what, sizeof what, "%s: restored after any step (across 2 wraps) = uninterrupted",
             runs[k].name);
    check_true(what, ok);
    if (bad_at >= 0) fprintf(stderr, "  first difference when restored after step %d\n", bad_at);
  }
}

/* One well-formed record of each dtype, then one field broken at a time. */
static void test_classify_records(void) {
  struct lstmd_dataset_info ids = {.kind = LSTMD_DATASET_CLASSIFY, .width = 6, .vocab_size = 5,
                                   .horizon = 3};
  struct lstmd_dataset_info vals = ids;
  vals.numeric = 1, vals.vocab_size = 0;
  check_true("classify record bytes: 8 + width (ids), 8 + 4 width (values)",
             lstmd_classify_record_bytes(&ids) == 14 && lstmd_classify_record_bytes(&vals) == 32);
  uint8_t rec[64] __attribute__((aligned(16))) = {0};
  uint8_t *body = lstmd_classify_record_put(rec, 0x02010000u | 2u, 0x0403u);
  uint32_t label, length;
  const uint8_t *got = lstmd_classify_record_get(rec, &label, &length);
  check_true("classify record: put/get round trip, little-endian at 0 and 4",
             body == rec + 8 && got == rec + 8 && label == (0x02010000u | 2u) &&
                 length == 0x0403u && rec[0] == 2 && rec[2] == 1 && rec[3] == 2 && rec[4] == 3 &&
                 rec[5] == 4);
  memset(rec, 0, sizeof rec);
  body = lstmd_classify_record_put(rec, 2, 4);
  memcpy(body, (const uint8_t[]){4, 0, 3, 1}, 4);
  check_true("classify record of ids: well-formed accepted",
             lstmd_classify_record_check(&ids, rec) == LSTMD_OK);
  const struct {
    const char *what;
    int at;
    uint8_t value;
  } bad[] = {{"label = classes", 0, 3},   {"length 0", 4, 0},     {"length > width", 4, 7},
             {"id = vocab_size", 9, 5},  {"padding not zero", 13, 1}};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    uint8_t b[64];
    memcpy(b, rec, sizeof b);
    b[bad[k].at] = bad[k].value;
    char what[80];
    snprintf(what, sizeof what, "classify record of ids: %s refused", bad[k].what);
    check_true(what, lstmd_classify_record_check(&ids, b) == LSTMD_EFORMAT);
  }
  memset(rec, 0, sizeof rec);
  float *v = (float *)lstmd_classify_record_put(rec, 1, 2);
  v[0] = -1.5f, v[1] = 3.0f;
  check_true("classify record of values: well-formed accepted",
             lstmd_classify_record_check(&vals, rec) == LSTMD_OK);
  v[1] = NAN;
  check_true("classify record of values: NaN refused",
             lstmd_classify_record_check(&vals, rec) == LSTMD_EFORMAT);
  v[1] = 3.0f, v[5] = 1e-30f;
  check_true("classify record of values: padding not zero refused",
             lstmd_classify_record_check(&vals, rec) == LSTMD_EFORMAT);
}

/* 5. A series split of 60 rows, row i = i (mean 0, std 1, window_norm none: a window's first
 * input is its first row), K = 2, T = 5: 58 rows beyond the targets, 10 windows kept for the
 * offsets (11 without them). */
enum { kSeriesT = 5, kSeriesK = 2, kSeriesRows = 60, kSeriesWindows = 10 };
static int series_starts(const struct lstmd_dataset *ds, int B, int rank, int world, int steps,
                         const struct lstmd_batcher_cursor *from, int *starts,
                         struct lstmd_batcher_cursor *after) {
  struct lstmd_batcher *b;
  struct lstmd_batch batch;
  if (lstmd_batcher_create(ds, LSTMD_ORDER_SHUFFLE, kSeriesT, B, rank, world, 99, &b)) return -1;
  int rc = lstmd_batch_alloc(ds, kSeriesT, B, &batch), reset;
  if (!rc && from) rc = lstmd_batcher_set_cursor(b, *from);
  for (int s = 0; s < steps && !rc; s++) {
    rc = lstmd_batcher_next(b, &batch, &reset);
    for (int c = 0; c < B; c++) starts[s * B + c] = (int)batch.x[c]; /* t = 0, column c */
    if (after && s == 0) *after = lstmd_batcher_get_cursor(b);
  }
  lstmd_batch_free(&batch);
  lstmd_batcher_destroy(b);
  return rc;
}

static void test_series_offsets(void) {
  struct lstmd_dataset_info info = {.kind = LSTMD_DATASET_SERIES, .width = 1, .horizon = kSeriesK};
  snprintf(info.names[0], sizeof info.names[0], "y");
  info.std[0] = 1.0f;
  float rows[kSeriesRows];
  for (int i = 0; i < kSeriesRows; i++) rows[i] = (float)i;
  char path[300];
  snprintf(path, sizeof path, "%s/series.bin", g_dir);
  struct lstmd_dataset_writer w = {0};
  struct lstmd_dataset ds = {.fd = -1};
  int rc = lstmd_dataset_writer_open(&w, path, &info);
  if (!rc) rc = lstmd_dataset_writer_append(&w, rows, kSeriesRows);
  if (!rc) rc = lstmd_dataset_writer_finish(&w, 7);
  if (!rc) rc = lstmd_dataset_writer_commit(&w);
  if (!rc) rc = lstmd_dataset_open(path, &ds);
  check_true("series split written and opened", rc == 0);
  enum { B = 1, epochs = 6, steps = kSeriesWindows * epochs };
  int one[steps], inside = 1, perm_ok = 1, offsets[kSeriesT] = {0}, phases = 0;
  rc = rc ? rc : series_starts(&ds, B, 0, 1, steps, NULL, one, NULL);
  check_true("series shuffle: 6 epochs of batches", rc == 0);
  for (int e = 0; !rc && e < epochs; e++) {
    int seen[kSeriesWindows] = {0};
    for (int k = 0; k < kSeriesWindows; k++) {
      const int start = one[e * kSeriesWindows + k], i = start / kSeriesT;
      inside &= start >= 0 && start + kSeriesT + kSeriesK <= kSeriesRows;
      if (i >= kSeriesWindows || seen[i]++) perm_ok = 0;
      offsets[start % kSeriesT]++;
    }
  }
  for (int o = 0; o < kSeriesT; o++) phases += offsets[o] > 0;
  check_true("series shuffle: every window inside the split", !rc && inside);
  check_true("series shuffle: every epoch visits each of its 10 windows once", !rc && perm_ok);
  char what[120];
  snprintf(what, sizeof what, "series shuffle: windows start at all %d offsets within T (%d of "
           "60 at offset 0)", kSeriesT, offsets[0]);
  check_true(what, !rc && phases == kSeriesT);
  int r0[steps], r1[steps], two[2 * steps], ok = !rc;
  ok = ok && series_starts(&ds, 2, 0, 1, steps, NULL, two, NULL) == 0 &&
       series_starts(&ds, 1, 0, 2, steps, NULL, r0, NULL) == 0 &&
       series_starts(&ds, 1, 1, 2, steps, NULL, r1, NULL) == 0;
  for (int s = 0; ok && s < steps; s++) ok &= r0[s] == two[2 * s] && r1[s] == two[2 * s + 1];
  check_true("series shuffle: 2 ranks × batch 1 = 1 rank × batch 2 (offsets included)", ok);
  struct lstmd_batcher_cursor at;
  int tail[steps];
  ok = !rc && series_starts(&ds, B, 0, 1, 1, NULL, tail, &at) == 0;
  /* `at`: the cursor after step 0; every later step from it, across the epochs' wraps */
  ok = ok && series_starts(&ds, B, 0, 1, steps - 1, &at, tail, NULL) == 0;
  for (int s = 0; ok && s < steps - 1; s++) ok &= tail[s] == one[s + 1];
  check_true("series shuffle: a restored cursor yields the same windows and offsets", ok);
  /* A checkpoint from before the offsets: 11 windows an epoch, so its cursor may be (0, 11). */
  struct lstmd_batcher_cursor old_end = {0, kSeriesWindows + 1}, beyond = {0, kSeriesWindows + 2};
  ok = !rc && series_starts(&ds, B, 0, 1, 1, &old_end, tail, &at) == 0 && same_cursor(at, 1, 1);
  check_true("series shuffle: cursor (0, 11), an epoch's end before the offsets, goes on at epoch 1",
             ok);
  check_true("series shuffle: cursor (0, 12) refused",
             !rc && series_starts(&ds, B, 0, 1, 1, &beyond, tail, NULL) != 0);
  lstmd_dataset_close(&ds);
  unlink(path);
}

int main(void) {
  test_classify_records();
  if (!mkdtemp(g_dir)) return 1;
  struct lstmd_dataset ds12 = {.fd = -1}, ds11 = {.fd = -1};
  int rc = make_split("w12.bin", 2 * 12 + 1, &ds12);
  if (!rc) rc = make_split("w11.bin", 2 * 11 + 1, &ds11);
  check_true("tiny splits written and opened", rc == 0);
  if (!rc) {
    test_shuffle(&ds12, &ds11);
    test_stream(&ds12);
    test_resume(&ds12);
    test_series_offsets();
  }
  lstmd_dataset_close(&ds12);
  lstmd_dataset_close(&ds11);
  char path[300];
  snprintf(path, sizeof path, "%s/w12.bin", g_dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/w11.bin", g_dir);
  unlink(path);
  rmdir(g_dir);
  return check_summary("test_batcher");
}
