/* trainer.h — one rank's training run: dataset, model, optimizer, batches, periodic logging,
 * evaluation and checkpoints, resume, and a clean stop on request (SIGINT/SIGTERM). */
#ifndef LSTMD_TRAINER_H
#define LSTMD_TRAINER_H

#include "train_config.h"

struct lstmd_comm;

/* Trains as configured, on every rank of comm (NULL: one rank). config_json is the effective
 * config (stored in checkpoints, and compared across ranks). resume_path: NULL to start fresh,
 * or a checkpoint to continue from exactly (read by rank 0). Returns 0 when the run finished or
 * stopped cleanly (a checkpoint was written), else a negative status after printing why; a
 * failure that only some ranks see can leave the others in a collective, so the caller aborts
 * the job (lstmd_comm_abort) when the world has more than one rank, unless *all_know is set:
 * then every rank returned the same error (set-up checks) and may simply exit. */
int lstmd_train_run(const struct lstmd_train_config *cfg, const char *config_json,
                    const char *resume_path, struct lstmd_comm *comm, int *all_know);

/* Async-signal-safe: asks the running training loop to stop after the current step, write a
 * checkpoint and return. */
void lstmd_train_request_stop(void);

#endif
