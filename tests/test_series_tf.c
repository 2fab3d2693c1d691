/* test_series_tf.c — the series window transforms (worker/data/series_tf.h): for every
 * model.target × data.window_norm, the model's targets undone give back the future values and
 * the inputs undone give back the rows (to float rounding), the window statistics against a
 * float64 computation of their definition, the first windows' short history, the plain
 * transform bit for bit the normalisation lstmd always had; lstmd_read_window of a written
 * dataset equal to the transform of its rows; and the naive forecasts' MSE against closed forms
 * (a line: persistence error k·a at horizon k; a pure cycle of period P: seasonal naive exact
 * after the first P − 1 rows). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "worker/data/batcher.h"
#include "worker/data/dataset.h"
#include "worker/data/series_tf.h"
#include "worker/model/infer.h"

enum { T = 12, K = 3, W = 2, B = 3, ROWS = 60 };

static double uniform(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* The statistics by their definition, in float64: rows z[first−h .. first], h = min(first, T−1). */
static void ref_stats(const struct lstmd_series_tf *tf, const float *z, int first, double *m,
                      double *s) {
  for (int w = 0; w < W; w++) {
    m[w] = 0.0, s[w] = 1.0;
    if (tf->window_norm == LSTMD_WNORM_LAST) m[w] = z[first * W + w];
    if (tf->window_norm != LSTMD_WNORM_MEAN) continue;
    const int h = first < T - 1 ? first : T - 1;
    double sum = 0.0, sq = 0.0;
    for (int i = first - h; i <= first; i++) sum += z[i * W + w];
    m[w] = sum / (h + 1);
    for (int i = first - h; i <= first; i++) sq += (z[i * W + w] - m[w]) * (z[i * W + w] - m[w]);
    s[w] = sqrt(sq / (h + 1) + 0.01);
  }
}

static void test_invert(void) {
  uint64_t seed = 7;
  float z[ROWS * W];
  for (int i = 0; i < ROWS * W; i++) z[i] = (float)(3.0 * uniform(&seed) + 0.05 * i);
  for (int target = 0; target < 2; target++)
    for (int norm = 0; norm < 3; norm++) {
      const struct lstmd_series_tf tf = {target, norm};
      char what[96];
      float x[T * B * W], y[T * B * K], got_y[T * B * K], got_x[T * B * W];
      double want_y[T * B * K], want_x[T * B * W], sref[B][2][W];
      float shift[B][W], scale[B][W];
      const int firsts[B] = {0, 5, 30}; /* no history, a short one, a whole one */
      for (int col = 0; col < B; col++) {
        const int first = firsts[col], want = lstmd_series_history(&tf, T);
        const int hist = first < want ? first : want;
        lstmd_series_window_stats(&tf, z + first * W, hist, T, W, shift[col], scale[col]);
        ref_stats(&tf, z, first, sref[col][0], sref[col][1]);
        lstmd_series_window_apply(&tf, z + first * W, T, W, K, shift[col], scale[col], B, col, x, y);
      }
      for (int col = 0; col < B; col++) {
        float sf[2 * W];
        double sr[2 * W];
        for (int w = 0; w < W; w++) {
          sf[w] = shift[col][w], sf[W + w] = scale[col][w];
          sr[w] = sref[col][0][w], sr[W + w] = sref[col][1][w];
        }
        snprintf(what, sizeof what, "%s/%s stats at row %d", lstmd_series_target_name(target),
                 lstmd_window_norm_name(norm), firsts[col]);
        check_close(what, sf, sr, 2 * W, 1e-6, 1e-6);
      }
      for (int t = 0; t < T; t++)
        for (int col = 0; col < B; col++) {
          const int row = firsts[col] + t;
          for (int k = 0; k < K; k++) {
            const size_t j = ((size_t)t * B + col) * K + k;
            got_y[j] = lstmd_series_undo(&tf, y[j], z[row * W], shift[col][0], scale[col][0]);
            want_y[j] = z[(row + 1 + k) * W];
          }
          for (int w = 0; w < W; w++) {
            const size_t j = ((size_t)t * B + col) * W + w;
            got_x[j] = (float)((double)x[j] * scale[col][w] + shift[col][w]);
            want_x[j] = z[row * W + w];
          }
        }
      /* float32 targets: the round trip is exact up to the rounding of y (|z| < 6: 1e-6) */
      snprintf(what, sizeof what, "%s/%s targets undone", lstmd_series_target_name(target),
               lstmd_window_norm_name(norm));
      check_close(what, got_y, want_y, T * B * K, 2e-6, 1e-6);
      snprintf(what, sizeof what, "%s/%s inputs undone", lstmd_series_target_name(target),
               lstmd_window_norm_name(norm));
      check_close(what, got_x, want_x, T * B * W, 2e-6, 1e-6);
      if (target == 0 && norm == 0) { /* the plain model: the values themselves, bit for bit */
        int same = 1;
        for (int t = 0; t < T; t++)
          for (int col = 0; col < B; col++) {
            for (int k = 0; k < K; k++)
              same &= y[((size_t)t * B + col) * K + k] == z[(firsts[col] + t + 1 + k) * W];
            for (int w = 0; w < W; w++)
              same &= x[((size_t)t * B + col) * W + w] == z[(firsts[col] + t) * W + w];
          }
        check_true("level/none is the identity, bitwise", same);
      }
    }
}

/* A written dataset read through lstmd_read_window (what training reads) against the transform
 * applied to its rows normalised here. */
static void test_read_window(void) {
  char dir[] = "/tmp/test_series_tf.XXXXXX";
  if (!mkdtemp(dir)) {
    check_true("mkdtemp", 0);
    return;
  }
  char path[256];
  snprintf(path, sizeof path, "%s/val.bin", dir);
  struct lstmd_dataset_info info = {.kind = LSTMD_DATASET_SERIES, .width = W, .horizon = K,
                                    .season = 7, .mean = {10.0f, -1.0f}, .std = {2.0f, 0.5f}};
  strcpy(info.names[0], "a");
  strcpy(info.names[1], "b");
  float rows[ROWS * W], z[ROWS * W];
  uint64_t seed = 11;
  for (int i = 0; i < ROWS * W; i++) rows[i] = (float)(10.0 + 4.0 * uniform(&seed) + 0.1 * i);
  for (int i = 0; i < ROWS; i++)
    for (int w = 0; w < W; w++) z[i * W + w] = (rows[i * W + w] - info.mean[w]) / info.std[w];
  struct lstmd_dataset_writer wr;
  int rc = lstmd_dataset_writer_open(&wr, path, &info);
  if (!rc) rc = lstmd_dataset_writer_append(&wr, rows, ROWS);
  if (!rc) rc = lstmd_dataset_writer_finish(&wr, 42);
  if (!rc) rc = lstmd_dataset_writer_commit(&wr);
  struct lstmd_dataset ds;
  if (!rc) rc = lstmd_dataset_open(path, &ds);
  check_true("dataset written and opened", rc == 0);
  if (rc) return;
  check_true("the season read back from the header", ds.info.season == 7);
  for (int target = 0; target < 2; target++)
    for (int norm = 0; norm < 3; norm++) {
      ds.tf = (struct lstmd_series_tf){target, norm};
      struct lstmd_batch b;
      lstmd_batch_alloc(&ds, T, 2, &b);
      void *scratch = malloc(lstmd_window_scratch_bytes(&ds, T));
      float x[T * 2 * W], y[T * 2 * K], sh[W], sc[W];
      const int firsts[2] = {0, 2 * T};
      int same = 1;
      for (int col = 0; col < 2; col++) {
        same &= lstmd_read_window(&ds, (uint64_t)firsts[col], T, 2, col, &b, scratch) == 0;
        const int want = lstmd_series_history(&ds.tf, T);
        const int hist = firsts[col] < want ? firsts[col] : want;
        lstmd_series_window_stats(&ds.tf, z + firsts[col] * W, hist, T, W, sh, sc);
        lstmd_series_window_apply(&ds.tf, z + firsts[col] * W, T, W, K, sh, sc, 2, col, x, y);
      }
      same &= !memcmp(x, b.x, sizeof x) && !memcmp(y, b.y, sizeof y);
      char what[96];
      snprintf(what, sizeof what, "read_window %s/%s = transform", lstmd_series_target_name(target),
               lstmd_window_norm_name(norm));
      check_true(what, same);
      free(scratch);
      lstmd_batch_free(&b);
    }
  lstmd_dataset_close(&ds);
  unlink(path);
  rmdir(dir);
}

/* MSE of the naive forecasts over evaluation's positions against closed forms. */
static void test_baselines(void) {
  enum { N = 200, TT = 10, KK = 4, P = 8 };
  static float line[N], cycle[N];
  const double a = 0.03;
  for (int i = 0; i < N; i++) {
    line[i] = (float)(a * i);
    cycle[i] = (float)sin(2.0 * M_PI * i / P);
  }
  struct lstmd_dataset ds = {.info = {.kind = LSTMD_DATASET_SERIES, .count = N, .width = 1,
                                      .horizon = KK, .season = P}};
  double mp, ms;
  /* a line: persistence misses by k·a at horizon k, so MSE = a²·Σk²/K; the seasonal naive at
   * row i, horizon k: back = P·ceil(k/P) − k = P − k rows before i, missing by P·a, except
   * for i < P − k where it falls back to persistence (k·a) */
  lstmd_series_baseline_mse(&ds, line, TT, &mp, &ms);
  const long steps = (long)((N - KK) / TT) * TT;
  double want_p = 0.0, want_s = 0.0;
  for (int k = 1; k <= KK; k++) want_p += a * a * k * k / KK;
  for (long i = 0; i < steps; i++)
    for (int k = 1; k <= KK; k++) {
      const double e = i >= P - k ? P * a : k * a;
      want_s += e * e / ((double)steps * KK);
    }
  float got[2] = {(float)mp, (float)ms};
  double want[2] = {want_p, want_s};
  check_close("baselines on a line (closed form)", got, want, 2, 1e-9, 1e-5);
  /* a cycle of period P: the seasonal naive is exact where it has a season of history */
  lstmd_series_baseline_mse(&ds, cycle, TT, &mp, &ms);
  double want_cycle = 0.0;
  for (long i = 0; i < steps; i++)
    for (int k = 1; k <= KK; k++) {
      const double pe = (double)cycle[i] - cycle[i + k];
      want_cycle += pe * pe / ((double)steps * KK);
    }
  double want_sc = 0.0; /* only rows i < P − k fall back to persistence */
  for (long i = 0; i < P; i++)
    for (int k = 1; k <= KK; k++)
      if (i < P - k) {
        const double pe = (double)cycle[i] - cycle[i + k];
        want_sc += pe * pe / ((double)steps * KK);
      }
  float got2[2] = {(float)mp, (float)ms};
  double want2[2] = {want_cycle, want_sc};
  check_close("baselines on a cycle of period P", got2, want2, 2, 1e-7, 1e-5);
  ds.info.season = 0;
  lstmd_series_baseline_mse(&ds, cycle, TT, &mp, &ms);
  check_true("no season: seasonal MSE is NaN", isnan(ms));
}

int main(void) {
  test_invert();
  test_read_window();
  test_baselines();
  if (g_failures) printf("test_series_tf: %d FAILED\n", g_failures);
  else printf("test_series_tf: passed\n");
  return g_failures ? 1 : 0;
}
