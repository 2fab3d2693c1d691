/* infer.h — using a trained model: validation loss (also used during training), text sampling,
 * and batched series forecasts, with the fp32 model of a checkpoint or the int8 model of
 * `lstmd quantize` (qmodel.h). */
#ifndef LSTMD_INFER_H
#define LSTMD_INFER_H

#include <stdint.h>
#include <stdio.h>

#include "worker/io/checkpoint.h"
#include "worker/data/dataset.h"
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
 * error per normalised target value for series. *tokens: inputs scored (windows × seq_len).
 * A split with no whole window gives LSTMD_ECONFIG with a message. */
int lstmd_evaluate(struct lstmd_model *m, const struct lstmd_dataset *ds, int seq_len, int batch,
                   double *mean_loss, uint64_t *tokens);
/* The same for either kind of model. */
int lstmd_infer_evaluate(const struct lstmd_infer_model *im, const struct lstmd_dataset *ds,
                         int seq_len, int batch, double *mean_loss, uint64_t *tokens);

/* Checks that a dataset is the kind of data the checkpoint's model was trained on (same kind
 * and vocabulary, or same columns and horizon). Prints why not and returns LSTMD_EFORMAT. */
int lstmd_check_compatible(const struct lstmd_data_meta *d, const struct lstmd_dataset *ds);

/* Writes prime, then `length` sampled bytes, to out. temperature 0 is greedy (argmax). A prime
 * byte outside the vocabulary gives LSTMD_EINVAL with a message. prime may be NULL (starts from
 * "\n" if the vocabulary has it, else from its first byte). ckpt_name names the model in
 * messages. */
int lstmd_sample(const struct lstmd_infer_model *im, const struct lstmd_data_meta *d, const char *ckpt_name,
                 const char *prime, long length, float temperature, uint64_t seed, FILE *out);

/* Forecasts the next K target values after every row of input_csv (which must have the training
 * columns), in windows of the training seq_len, each from a zero state, `batch` windows at a
 * time. Writes out_csv atomically: "row,<target>+1,...,<target>+K". */
int lstmd_predict(const struct lstmd_infer_model *im, const struct lstmd_data_meta *d, const char *ckpt_name,
                  const char *input_csv, const char *out_csv, int batch);

#endif
