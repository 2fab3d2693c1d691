/* checkpoint.h — lstmd checkpoints as safetensors: the model tensors under PyTorch's names (so
 * torch.nn.LSTM/Embedding/Linear load them as they are), optimizer moments as flat tensors,
 * carried recurrent state, and in __metadata__ everything else needed to resume exactly:
 * model shape, vocabulary / series columns, step, data cursor, the effective config. (Dropout
 * masks are a function of seed and step, so there is no random state to save.) */
#ifndef LSTMD_CHECKPOINT_H
#define LSTMD_CHECKPOINT_H

#include <stdint.h>

#include "worker/data/batcher.h"
#include "worker/data/dataset.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"
#include "worker/model/prune.h"
#include "worker/model/rng.h"

/* The metadata 'format' of a training checkpoint, and of an int8 model made from one by
 * `lstmd quantize` (qcheckpoint.h), which training refuses. */
#define LSTMD_CHECKPOINT_TAG "lstmd-checkpoint-1"
#define LSTMD_INT8_TAG "lstmd-int8-1"

struct lstmd_st_file;
struct lstmd_st_tensor;
struct lstmd_st_meta;

/* What a checkpoint says about the data the model was trained on. */
struct lstmd_data_meta {
  struct lstmd_dataset_info info; /* kind, vocab or columns/mean/std/horizon, pair_id */
  int seq_len;
  int batch;                      /* the GLOBAL batch (ranks × data.batch_size): the columns of
                                   * the carried state, and what a resume must match */
  struct lstmd_series_tf tf;      /* series: model.target and data.window_norm the model was
                                   * trained with (metadata series.target, series.window_norm;
                                   * absent in older files: level, none) */
};

/* What the validation losses decided so far (the rules: worker/train/val_watch.h). Every rank
 * holds the same values; saved as metadata train.best_val_loss, train.best_step,
 * train.evals_since_best, train.plateau_bad_evals, train.lr_scale. */
struct lstmd_val_watch {
  double best_loss;  /* lowest val_loss that was a new best; +inf: none yet */
  long best_step;    /* the step of best_loss (0: none) */
  long since_best;   /* evaluations since the last new best (early stopping) */
  long plateau_bad;  /* evaluations since the last new best or lr cut (plateau schedule) */
  double lr_scale;   /* the learning rate's multiplier from plateau cuts (1: none) */
};

/* Training progress beside the model and optimizer. */
struct lstmd_train_progress {
  long step;
  struct lstmd_batcher_cursor cursor;
  float *state_h, *state_c; /* [L,B,H] carried state of all ranks (stream order), or NULL */
  int state_batch;          /* B of state_h/state_c: the global batch */
  double loss_scale;        /* fp16 dynamic loss scale (0: none) */
  long loss_scale_good_steps; /* clean steps since it last changed */
  struct lstmd_prune *prune;  /* pruning masks, saved as I8 tensors 'prune.mask.<tensor>' and
                               * listed in metadata 'prune.masks' (PyTorch's strict load of the
                               * model's own names is unaffected), or NULL */
  struct lstmd_val_watch watch; /* all zero (lr_scale 0) is saved as a fresh watch */
  long samples_bytes;         /* rank 0: length of <run_dir>/samples.txt at this checkpoint (a
                               * resume cuts the file back to it); metadata train.samples_bytes */
  uint32_t teacher_crc32c;    /* distillation: CRC-32C of the teacher's parameters (0: no teacher);
                               * metadata distill.teacher_crc32c, so that a resume can tell that
                               * distill.teacher's file now holds another model */
};

/* Writes <path> atomically. optim and progress may be NULL (model-only export).
 * config_json: the effective config as a JSON object text (stored as metadata "config"). */
int lstmd_checkpoint_save(const char *path, const struct lstmd_model *m,
                          const struct lstmd_optim *o, const struct lstmd_data_meta *data,
                          const struct lstmd_train_progress *progress, const char *config_json);

/* Opens a checkpoint, builds the model it describes (*out_model, parameters loaded) and fills
 * *data. Any wrong, truncated or foreign file gives a message and LSTMD_EFORMAT/LSTMD_EIO. */
int lstmd_checkpoint_load_model(const char *path, struct lstmd_model **out_model,
                                struct lstmd_data_meta *data);

/* Loads optimizer moments and training progress from a checkpoint into existing objects whose
 * shapes must match (state buffers sized for the same L, B, H). The config text is returned in
 * *config_json (malloc'd) when config_json != NULL. */
int lstmd_checkpoint_load_train(const char *path, struct lstmd_model *m, struct lstmd_optim *o,
                                struct lstmd_train_progress *progress, char **config_json);

/* The pruning masks of a checkpoint as one JSON object, {"<tensor>": fraction pruned, ...} in
 * *json (malloc'd), or *json = NULL when it has none. */
int lstmd_checkpoint_sparsity_json(const char *path, char **json);

/* LSTMD_OK when x[0..n) are all finite; else a message naming `path`, the tensor and the first
 * non-finite element, and LSTMD_EFORMAT. Every loaded tensor goes through it. */
int lstmd_checkpoint_all_finite(const char *path, const char *name, const float *x, size_t n);

/* For other files of a model (qcheckpoint.c): writes `path` atomically with the tensors given,
 * metadata 'format' = tag, the model shape and the data metadata as a checkpoint has them, and
 * the extra (key, value) pairs. */
int lstmd_checkpoint_write_tagged(const char *path, const char *tag,
                                  const struct lstmd_model_shape *s,
                                  const struct lstmd_data_meta *data,
                                  const struct lstmd_st_tensor *t, int n,
                                  const struct lstmd_st_meta *extra, int n_extra);
/* Reads them back from an open file: 'format' must be tag; the shape must be valid. A message
 * naming `path` and LSTMD_EFORMAT otherwise. */
int lstmd_checkpoint_read_tagged(const struct lstmd_st_file *f, const char *path, const char *tag,
                                 struct lstmd_model_shape *s, struct lstmd_data_meta *data);

#endif
