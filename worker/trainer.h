/* trainer.h — one rank's training run: dataset, model, optimizer, batches, periodic logging,
 * evaluation and checkpoints, resume, and a clean stop on request (SIGINT/SIGTERM). */
#ifndef LSTMD_TRAINER_H
#define LSTMD_TRAINER_H

#include "train_config.h"

/* Trains as configured. config_json is the effective config (stored in checkpoints).
 * resume_path: NULL to start fresh, or a checkpoint to continue from exactly.
 * Returns 0 when the run finished or stopped cleanly (a checkpoint was written), else a
 * negative status after printing why. */
int lstmd_train_run(const struct lstmd_train_config *cfg, const char *config_json,
                    const char *resume_path);

/* Async-signal-safe: asks the running training loop to stop after the current step, write a
 * checkpoint and return. */
void lstmd_train_request_stop(void);

#endif
