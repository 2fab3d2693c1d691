/* series_tf.c — the series window transforms and naive forecasts described in series_tf.h. */
#include "series_tf.h"

#include <math.h>
#include <string.h>

static const char *const kTargets[] = {"level", "delta"};
static const char *const kNorms[] = {"none", "last", "mean"};

const char *lstmd_series_target_name(int target) {
  return target >= 0 && target < 2 ? kTargets[target] : "?";
}
const char *lstmd_window_norm_name(int window_norm) {
  return window_norm >= 0 && window_norm < 3 ? kNorms[window_norm] : "?";
}
int lstmd_series_target_parse(const char *name) {
  for (int i = 0; i < 2; i++)
    if (!strcmp(name, kTargets[i])) return i;
  return -1;
}
int lstmd_window_norm_parse(const char *name) {
  for (int i = 0; i < 3; i++)
    if (!strcmp(name, kNorms[i])) return i;
  return -1;
}

int lstmd_series_history(const struct lstmd_series_tf *tf, int T) {
  return tf->window_norm == LSTMD_WNORM_MEAN ? T - 1 : 0;
}

void lstmd_series_window_stats(const struct lstmd_series_tf *tf, const float *z0, int hist, int T,
                               int W, float *shift, float *scale) {
  for (int w = 0; w < W; w++) {
    shift[w] = 0.0f;
    scale[w] = 1.0f;
    if (tf->window_norm == LSTMD_WNORM_LAST) {
      shift[w] = z0[w];
    } else if (tf->window_norm == LSTMD_WNORM_MEAN) {
      const int h = hist < T - 1 ? hist : T - 1;
      double sum = 0.0, sq = 0.0;
      for (int i = -h; i <= 0; i++) sum += z0[(long)i * W + w];
      const double mean = sum / (h + 1);
      for (int i = -h; i <= 0; i++) {
        const double d = z0[(long)i * W + w] - mean;
        sq += d * d;
      }
      shift[w] = (float)mean;
      scale[w] = (float)sqrt(sq / (h + 1) + LSTMD_WNORM_EPS);
    }
  }
}

void lstmd_series_window_apply(const struct lstmd_series_tf *tf, const float *z0, int T, int W,
                               int K, const float *shift, const float *scale, int B, int col,
                               float *x, float *y) {
  const int delta = tf->target == LSTMD_TARGET_DELTA;
  for (int t = 0; t < T; t++) {
    const float *z = z0 + (size_t)t * W;
    float *xt = x + ((size_t)t * B + col) * W;
    for (int w = 0; w < W; w++) xt[w] = (float)(((double)z[w] - shift[w]) / scale[w]);
    if (!y) continue;
    float *yt = y + ((size_t)t * B + col) * K;
    const double base = delta ? (double)z[0] : (double)shift[0];
    for (int k = 0; k < K; k++) yt[k] = (float)(((double)z[(size_t)(1 + k) * W] - base) / scale[0]);
  }
}

void lstmd_series_baselines(const float *z, int W, uint64_t i, int K, int P, float *out_persist,
                            float *out_seasonal) {
  const float now = z[i * (uint64_t)W];
  for (int k = 1; k <= K; k++) {
    out_persist[k - 1] = now;
    if (P <= 0) continue;
    const uint64_t back = (uint64_t)P * (uint64_t)((k + P - 1) / P) - (uint64_t)k; /* ≥ 0 */
    out_seasonal[k - 1] = back <= i ? z[(i - back) * (uint64_t)W] : now;
  }
}
