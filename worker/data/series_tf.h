/* series_tf.h — how a series window is shown to the model (model.target, data.window_norm), the
 * inverse applied to the model's outputs, and the two naive forecasts every series evaluation is
 * compared with (persistence, seasonal naive). Pure functions on normalised rows: training
 * (lstmd_read_window, so every engine sees the same numbers), evaluation and predict share them.
 *
 * Rows here are already normalised by the training split's mean/std (z = (v − mean)/std); column
 * 0 is the target. A window starts at row `first` of its split or file: inputs z[first..first+T),
 * targets z[first+t+1 .. first+t+K] of column 0 at step t.
 *  - target level: y[t][k] = (z[t+1+k] − m0)/s0;  delta: y[t][k] = (z[t+1+k] − z[t])/s0.
 *  - window_norm none: m = 0, s = 1; last: m = z[first], s = 1; mean: m, s = mean and
 *    sqrt(var + 0.01) of the inputs z[first−T+1 .. first] (those that exist), per column. The
 *    statistics end at the window's first input, so every step of the window (the model predicts
 *    at every step) knows them: statistics of the whole window would hand the model its own
 *    targets at every step but the last.
 *  - inputs x[t][w] = (z[t][w] − m_w)/s_w; the inverse of an output p at step t:
 *    level: p·s0 + m0, delta: p·s0 + z[t][0]. */
#ifndef LSTMD_SERIES_TF_H
#define LSTMD_SERIES_TF_H

#include <stdint.h>

enum lstmd_series_target { LSTMD_TARGET_LEVEL = 0, LSTMD_TARGET_DELTA = 1 };
enum lstmd_window_norm { LSTMD_WNORM_NONE = 0, LSTMD_WNORM_LAST = 1, LSTMD_WNORM_MEAN = 2 };

/* The transform of a run: model.target and data.window_norm (both 0: the plain model). */
struct lstmd_series_tf {
  int target;      /* enum lstmd_series_target */
  int window_norm; /* enum lstmd_window_norm */
};

#define LSTMD_WNORM_EPS 0.01 /* added to the window's variance (units of the split's std²) */

/* Names as the config and checkpoint metadata spell them ("level", "delta"; "none", "last",
 * "mean"), and back (-1 for an unknown name). */
const char *lstmd_series_target_name(int target);
const char *lstmd_window_norm_name(int window_norm);
int lstmd_series_target_parse(const char *name);
int lstmd_window_norm_parse(const char *name);

/* Rows before a window's first input that its statistics read: T − 1 for mean, else 0. */
int lstmd_series_history(const struct lstmd_series_tf *tf, int T);

/* The window's statistics. z0 points at the window's first input row (W columns); `hist` rows
 * before it exist (fewer than lstmd_series_history near the start of the data). shift[W], scale[W]. */
void lstmd_series_window_stats(const struct lstmd_series_tf *tf, const float *z0, int hist, int T,
                               int W, float *shift, float *scale);

/* Writes the window's model inputs and (when y is not NULL, which needs rows up to T+K−1 after z0)
 * targets into batch column `col` of x [T,B,W] and y [T,B,K]. */
void lstmd_series_window_apply(const struct lstmd_series_tf *tf, const float *z0, int T, int W,
                               int K, const float *shift, const float *scale, int B, int col,
                               float *x, float *y);

/* The forecast, in normalised target units, of model output p at a step whose target-column
 * input is z_t (shift0, scale0: the window's column-0 statistics). */
static inline float lstmd_series_undo(const struct lstmd_series_tf *tf, float p, float z_t,
                                      float shift0, float scale0) {
  const double base = tf->target == LSTMD_TARGET_DELTA ? (double)z_t : (double)shift0;
  return (float)((double)p * scale0 + base);
}

/* Persistence and seasonal-naive forecasts of column-0 values z[i+1 .. i+K] made at row i of a
 * split or file whose column 0 is `z0col` (stride W floats): persistence z[i]; seasonal naive
 * with period P ≥ 1: z[i + k − P·ceil(k/P)], or z[i] where that row lies before row 0 (the first
 * P − 1 rows). P = 0: no seasonal forecast (out_seasonal untouched). */
void lstmd_series_baselines(const float *z, int W, uint64_t i, int K, int P, float *out_persist,
                            float *out_seasonal);

#endif
