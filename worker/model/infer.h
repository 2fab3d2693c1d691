/* infer.h — using a trained model: validation loss (also used during training), text sampling,
 * and batched series forecasts, with the fp32 model of a checkpoint or the int8 model of
 * `lstmd quantize` (qmodel.h). */
#ifndef LSTMD_INFER_H
#define LSTMD_INFER_H

#include <stdint.h>
#include <stdio.h>

#include "worker/io/checkpoint.h"
#include "worker/data/dataset.h"
#include "eval_pool.h"
#include "model.h"
#include "qmodel.h"

/* A model to run: exactly one of the two is set. */
struct lstmd_infer_model {
  struct lstmd_model *fp32;
  struct lstmd_qmodel *int8;
};

/* Loads whichever `path` holds: an int8 model file (worker/io/qcheckpoint.h) or a checkpoint.
 * Messages and statuses as those loaders give them. */
int lstmd_infer_model_load(const char *path, struct lstmd_infer_model *im,
                           struct lstmd_data_meta *d);
void lstmd_infer_model_destroy(struct lstmd_infer_model *im);

/* Scores the split as consecutive, non-overlapping windows of seq_len inputs, each from a zero
 * state, `batch` windows at a time. *mean_loss: cross-entropy (nats) per target for text, squared
 * error per normalised target value for series (after undoing ds->tf: lstmd_eval_result). *tokens: inputs scored (windows × seq_len).
 * A split with no whole window gives LSTMD_ECONFIG with a message. An fp32 model's windows are
 * split across as many threads as BLAS has (lstmd_cpu_set_blas_threads), BLAS then running on
 * one thread in each; the result does not depend on the count, bit for bit. */
int lstmd_evaluate(struct lstmd_model *m, const struct lstmd_dataset *ds, int seq_len, int batch,
                   double *mean_loss, uint64_t *tokens);
/* lstmd_evaluate shared by `parts` processes (the ranks of a data-parallel job), each with the
 * same model and split: this one scores chunks part, part + parts, ... of the chunks of `batch`
 * windows, and then calls combine (every part calls it, with status 0 or its error; only a
 * split with no whole window, the same on every part, returns LSTMD_ECONFIG before): combine
 * must make sums[n] on every part the sum over the parts of their sums[] (each chunk's slot is
 * nonzero in one part only, so that sum is exact in any order) and return 0, or an error when
 * any part failed. The chunks are then added in chunk order, so every part gets the loss
 * lstmd_evaluate gives alone, bit for bit. (struct lstmd_eval_share: eval_pool.h) */
int lstmd_evaluate_shared(struct lstmd_model *m, const struct lstmd_dataset *ds, int seq_len,
                          int batch, const struct lstmd_eval_share *share, double *mean_loss,
                          uint64_t *tokens);
/* The same for either kind of model. */
int lstmd_infer_evaluate(const struct lstmd_infer_model *im, const struct lstmd_dataset *ds,
                         int seq_len, int batch, double *mean_loss, uint64_t *tokens);

/* What an evaluation measured. Series: loss is the mean squared error of the forecasts in
 * normalised target units after undoing model.target and data.window_norm (the training loss
 * of the plain model), and with baselines the same for the persistence and seasonal-naive
 * forecasts at the same positions (series_tf.h; seasonal NAN when the dataset has no season)
 * and skill = 1 − loss / mse_persistence. Text: loss in nats, the rest NAN. */
struct lstmd_eval_result {
  double loss;
  uint64_t tokens; /* inputs scored (windows × seq_len) */
  double mse_persistence, mse_seasonal, skill;
};
int lstmd_infer_evaluate_full(const struct lstmd_infer_model *im, const struct lstmd_dataset *ds,
                              int seq_len, int batch, int baselines, struct lstmd_eval_result *res);

/* The split's rows normalised by its stored mean/std as training does, [count × width] in *out
 * (malloc'd; free). */
int lstmd_series_read_normalised(const struct lstmd_dataset *ds, float **out);
/* The persistence and seasonal-naive MSE (NAN without a season) over the positions evaluation
 * scores with seq_len T (consecutive windows of T steps, K targets each) of the normalised split
 * z. LSTMD_ECONFIG when the split holds no window. */
int lstmd_series_baseline_mse(const struct lstmd_dataset *ds, const float *z, int T,
                              double *mse_persistence, double *mse_seasonal);

/* Checks that a dataset is the kind of data the checkpoint's model was trained on (same kind
 * and vocabulary, or same columns and horizon). Prints why not and returns LSTMD_EFORMAT. */
int lstmd_check_compatible(const struct lstmd_data_meta *d, const struct lstmd_dataset *ds);

/* Makes a series split score what the model forecasts (`lstmd predict` of the same rows): the
 * checkpoint's per-column mean and std, and its model.target/data.window_norm, replace the
 * split's own, which prepare computed from whatever CSV it was given (newer data, other units).
 * Call after lstmd_check_compatible. Returns the first column whose statistics differed (why
 * says which, both values: lstmd_series_stats_differ), or -1. A series classifier's split
 * (numeric classify) takes the checkpoint's one mean and std the same way (as `lstmd classify`
 * normalises its rows): 0 when they differed, else -1; of a text split only the (unused) tf is
 * set (-1). */
int lstmd_series_use_model_stats(const struct lstmd_data_meta *d, struct lstmd_dataset *ds,
                                 char *why, size_t why_len);
/* lstmd_series_use_model_stats, and where the split's own statistics differed a note on stderr:
 * "<ds->path> was prepared with other statistics than <model> was trained with (<why>); scoring
 * with the checkpoint's<as>" (as: "" or ", as predict does"). */
void lstmd_series_score_as_model(const struct lstmd_data_meta *d, struct lstmd_dataset *ds,
                                 const char *model, const char *as);

/* Writes prime, then `length` sampled bytes, to out. temperature 0 is greedy (argmax). A prime
 * byte outside the vocabulary gives LSTMD_EINVAL with a message. prime may be NULL (starts from
 * "\n" if the vocabulary has it, else from its first byte). ckpt_name names the model in
 * messages. */
int lstmd_sample(const struct lstmd_infer_model *im, const struct lstmd_data_meta *d, const char *ckpt_name,
                 const char *prime, long length, float temperature, uint64_t seed, FILE *out);

/* Forecasts the next K target values after every row of input_csv (which must have the training
 * columns, normalised with the checkpoint's mean/std), in windows of the training seq_len T,
 * each from a zero state, the last one ending at the last row (so the newest row's forecast
 * sees T rows; rows [0, n mod T) are one shorter window), `batch` windows at a time (the output
 * does not depend on it), with the model's target and window_norm undone. Writes out_csv atomically
 * (out_csv "-": stdout, once every forecast is made; a failed write LSTMD_EWRITE):
 * "row,<target>+1,...,<target>+K", with `baselines` then persistence+1..K and (a season P in the
 * data) seasonalP+1..K, the naive forecasts of series_tf.h in the target's units. missing (enum
 * lstmd_missing, or -1: the one d->info records, the way the training data was prepared): what a
 * missing CSV field becomes, as in prepare series. */
int lstmd_predict(const struct lstmd_infer_model *im, const struct lstmd_data_meta *d, const char *ckpt_name,
                  const char *input_csv, const char *out_csv, int batch, int baselines,
                  int missing);

#endif
