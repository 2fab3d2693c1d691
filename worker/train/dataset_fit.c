/* dataset_fit.c — the settings a dataset rules out (dataset_fit.h). */
#include "dataset_fit.h"

#include <stdio.h>

#include "kernels/status.h"
#include "kernels/utf8.h"
#include "worker/data/batcher.h"

/* Sequence classification trains whole sequences from a zero state on the CPU or GPU engine:
 * the first setting it has no meaning or no path for yet (its key, and why in *why), or NULL. */
static const char *classify_refusal(const struct lstmd_train_config *cfg, const char **why) {
  const char *key = NULL;
  if (cfg->order == LSTMD_ORDER_STREAM)
    key = "data.order", *why = "stream order carries state between windows; a sequence is "
                               "classified from a zero state (use shuffle)";
  else if (cfg->stages > 1)
    key = "model.stages", *why = "pipeline stages do not run classifiers yet";
  else if (cfg->dropout > 0.0f)
    key = "model.dropout", *why = "classifiers have no dropout yet";
  else if (cfg->layer_norm)
    key = "model.layer_norm", *why = "the layer-normalised LSTM is not available to classifiers";
  else if (cfg->distill_teacher[0])
    key = "distill.teacher", *why = "distillation of classifiers is not available";
  else if (cfg->prune.target_sparsity > 0.0f)
    key = "prune.target_sparsity", *why = "pruning of classifiers is not available";
  else if (cfg->sample_every)
    key = "train.sample_every", *why = "a classifier does not generate text";
  return key;
}

int lstmd_dataset_fit(const struct lstmd_train_config *cfg, const struct lstmd_dataset_info *info,
                      const char *path, char *why, size_t n) {
  /* Checkpoints keep the column and label names as JSON text, which must be UTF-8 (jansson
   * dropped such a name, and no command could read the run's checkpoints); lstmd prepare refuses
   * such names now, a dataset prepared before did not. */
  const int classify = info->kind == LSTMD_DATASET_CLASSIFY;
  const int names = classify ? info->horizon : info->kind == LSTMD_DATASET_SERIES ? info->width : 0;
  for (int k = 0; k < names; k++)
    if (!lstmd_utf8_valid(info->names[k])) {
      snprintf(why, n, "data.path: %s: the name of %s %d is not UTF-8 text, and checkpoints keep "
               "the names as JSON text: prepare the data again from a UTF-8 file", path,
               classify ? "label" : "column", k + 1);
      return LSTMD_ECONFIG;
    }
  const char *reason = NULL, *key = NULL;
  if (classify && (key = classify_refusal(cfg, &reason))) {
    snprintf(why, n, "%s: %s is a classify dataset: %s", key, path, reason);
    return LSTMD_ECONFIG;
  }
  if (!classify && (cfg->bidirectional || cfg->pool)) {
    /* A reverse direction reads every step of the window: the next token, or the values a
     * forecast predicts, would be among its inputs. Pooling exists only for classifiers. */
    snprintf(why, n, "%s: %s; %s is a %s dataset (sequence classification only)",
             cfg->bidirectional ? "model.bidirectional" : "model.pool",
             cfg->bidirectional ? "a bidirectional LSTM would read the future of the targets it "
                                  "predicts"
                                : "pooling belongs to sequence classifiers",
             path, info->kind == LSTMD_DATASET_TEXT ? "text (language model)" : "series (forecasting)");
    return LSTMD_ECONFIG;
  }
  if (!cfg->sample_every) return LSTMD_OK;
  if (info->kind != LSTMD_DATASET_TEXT) {
    snprintf(why, n, "train.sample_every: samples need a text model; %s is a series dataset (set "
             "train.sample_every = 0; lstmd predict forecasts series)", path);
    return LSTMD_ECONFIG;
  }
  /* the prime's bytes must be in the vocabulary, so that a sample never fails mid-run */
  int in_vocab[256] = {0};
  for (int k = 0; k < info->vocab_size; k++) in_vocab[info->vocab[k]] = 1;
  for (const unsigned char *p = (const unsigned char *)cfg->sample_prime; *p; p++)
    if (!in_vocab[*p]) {
      snprintf(why, n, "train.sample_prime: byte %ld (0x%02x) is not in the vocabulary of %s",
               (long)(p - (const unsigned char *)cfg->sample_prime), *p, path);
      return LSTMD_ECONFIG;
    }
  return LSTMD_OK;
}
