/* dataset_fit.h — the settings a dataset rules out, decided from its header alone: what a
 * classify dataset cannot train with yet, what only classifiers have (bidirectional, pooling),
 * what sampling needs (a text model, a prime in its vocabulary), and column or label names that
 * a checkpoint can keep (UTF-8). The trainer checks them at
 * its set-up (rank 0 says why) and `lstmd serve` when a job is submitted, so that such a job is
 * refused with the same words instead of failing when it starts. */
#ifndef LSTMD_DATASET_FIT_H
#define LSTMD_DATASET_FIT_H

#include <stddef.h>

#include "train_config.h"
#include "worker/data/dataset.h"

/* LSTMD_OK, or LSTMD_ECONFIG with "key: why" in why[n] (path: the dataset, for the message). */
int lstmd_dataset_fit(const struct lstmd_train_config *cfg, const struct lstmd_dataset_info *info,
                      const char *path, char *why, size_t n);

#endif
