/* config_check.c — the checks across keys that single keys' ranges cannot make (see config.h:
 * lstmd_config_check): required keys, settings that need others (pruning, distillation,
 * early stopping, the pipeline layout), and what the engines do not run yet. */
#include "config.h"

#include <stdio.h>

#include "kernels/status.h"
#include "worker/data/batcher.h"
#include "worker/data/series_tf.h"
#include "worker/engine/engine.h"

int lstmd_config_check(const struct lstmd_train_config *c, char *err, size_t n) {
  if (!c->data_path[0]) {
    snprintf(err, n, "data.path is required (a directory made by lstmd prepare)");
    return LSTMD_ECONFIG;
  }
  if (!c->run_dir[0]) {
    snprintf(err, n, "train.run_dir must not be empty");
    return LSTMD_ECONFIG;
  }
  /* data.window_norm=mean scales each window: the GPU engine's validation loss would be in the
   * scaled units (train_setup.c also keeps device auto on the CPU for it). */
  if (c->window_norm == LSTMD_WNORM_MEAN && c->device == LSTMD_DEVICE_CUDA) {
    snprintf(err, n, "data.window_norm: mean runs on the CPU backend only so far "
             "(train.device=cuda); none and last run on both");
    return LSTMD_ECONFIG;
  }
  /* The pipeline layout (checked only for model.stages > 1 but model.stage_layers, which must
   * always fit; the number of ranks is checked at start, where it is known). */
  if (c->prune.target_sparsity > 0.0f) {
    if (c->prune.end_step <= c->prune.begin_step) {
      snprintf(err, n, "prune.end_step: %ld is not after prune.begin_step %ld",
               c->prune.end_step, c->prune.begin_step);
      return LSTMD_ECONFIG;
    }
    if (lstmd_prune_check_tensors(c->prune.tensors, c->layers, err, n)) return LSTMD_ECONFIG;
  }
  /* Pruning and distillation run in the data-parallel CPU engine only (train_setup.c refuses
   * them on the GPU): a stage holds only its own layers' weights. */
  if (c->stages > 1 && (c->prune.target_sparsity > 0.0f || c->distill_teacher[0])) {
    snprintf(err, n, "%s: not available with pipeline stages (model.stages = %d); train "
             "data-parallel (model.stages = 1)",
             c->prune.target_sparsity > 0.0f ? "prune.target_sparsity" : "distill.teacher",
             c->stages);
    return LSTMD_ECONFIG;
  }
  /* Early stopping and the plateau schedule act on evaluations during the run. */
  if ((c->early_stop_patience > 0 || c->optim.schedule == LSTMD_SCHEDULE_PLATEAU) &&
      c->eval_every == 0) {
    snprintf(err, n, "%s: needs evaluations during the run (train.eval_every > 0)",
             c->early_stop_patience > 0 ? "train.early_stop_patience" : "optim.schedule");
    return LSTMD_ECONFIG;
  }
  int counts[16];
  if ((c->stages > 1 || c->stage_layers[0]) &&
      lstmd_stage_layer_counts(c->stage_layers, c->stages, c->layers, counts, err, n))
    return LSTMD_ECONFIG;
  if (c->stages == 1) return LSTMD_OK; /* stage_split means nothing on one stage */
  /* The layer-normalised LSTM normalises each step's whole projection (all 4H rows) inside its
   * kernel: no split of its rows yet. */
  /* The balanced split is the CPU pipeline engine's (engine_pipe.c): refused here for cuda, so
   * that a daemon refuses it at submission; train_setup.c moves device auto to the CPU. */
  if (c->stage_split == LSTMD_SPLIT_BALANCED && c->device == LSTMD_DEVICE_CUDA) {
    snprintf(err, n, "model.stage_split: balanced runs on the CPU pipeline engine only so far (the "
             "GPU pipeline splits whole layers: use layers, or train.device=cpu)");
    return LSTMD_ECONFIG;
  }
  if (c->stage_split == LSTMD_SPLIT_BALANCED && c->layer_norm) {
    snprintf(err, n, "model.stage_split: balanced splits input projections that model.layer_norm "
             "normalises whole; use layers or auto with the layer-normalised LSTM");
    return LSTMD_ECONFIG;
  }
  if (c->batch_size % c->micro_batches) {
    snprintf(err, n, "train.micro_batches: data.batch_size %d is not a multiple of %d",
             c->batch_size, c->micro_batches);
    return LSTMD_ECONFIG;
  }
  if (c->time_chunks > c->seq_len || c->seq_len % lstmd_effective_time_chunks(c)) {
    snprintf(err, n, "train.time_chunks: data.seq_len %d is not a multiple of %d", c->seq_len,
             c->time_chunks);
    return LSTMD_ECONFIG;
  }
  const long items = (long)c->grad_accum * c->micro_batches * lstmd_effective_time_chunks(c);
  if (items > 32768) {
    snprintf(err, n, "train.time_chunks: optim.grad_accum x train.micro_batches x time chunks = "
             "%ld items per step; at most 32768", items);
    return LSTMD_ECONFIG;
  }
  return LSTMD_OK;
}

int lstmd_config_validate(const struct lstmd_train_config *c) {
  char err[256];
  int rc = lstmd_config_check(c, err, sizeof err);
  if (rc) lstmd_errorf("%s", err);
  return rc;
}
