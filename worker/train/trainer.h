/* trainer.h — one rank's training run: dataset, model, optimizer, batches, periodic logging,
 * evaluation and checkpoints, resume, and a clean stop on request (SIGINT/SIGTERM). */
#ifndef LSTMD_TRAINER_H
#define LSTMD_TRAINER_H

#include "worker/io/metrics.h"
#include "train_config.h"

struct lstmd_comm;

/* How a run ended: at train.steps; stopped on request before it (resumable); stopped early by
 * train.early_stop_patience (finished: a resume stops at once). */
enum lstmd_train_end { LSTMD_END_DONE = 0, LSTMD_END_REQUESTED = 1, LSTMD_END_EARLY_STOP = 2 };

/* What a caller (the `lstmd serve` job runner) may observe and steer, on rank 0 only; every
 * member may be NULL. Called on the training thread, so they must be quick. */
struct lstmd_train_hooks {
  void *ctx;
  /* Once, as the training loop begins: the step it starts from (a resume's checkpoint step). */
  void (*on_begin)(void *ctx, long step, long total_steps);
  void (*on_step)(void *ctx, const struct lstmd_step_report *rep); /* each log step */
  /* bpc: NAN except for text models; accuracy: NAN except for classifiers */
  void (*on_eval)(void *ctx, long step, double val_loss, double val_bpc, double val_accuracy);
  /* Polled once per step: nonzero stops every rank after this step, with a checkpoint. */
  int (*stop_requested)(void *ctx);
  /* After the last checkpoint: the step reached and how the run ended (enum lstmd_train_end). */
  void (*on_end)(void *ctx, long step, int how);
};

/* Trains as configured, on every rank of comm (NULL: one rank). config_json is the effective
 * config (stored in checkpoints, and compared across ranks). resume_path: NULL to start fresh,
 * or a checkpoint to continue from exactly (read by rank 0). hooks may be NULL. Returns 0 when
 * the run finished or stopped cleanly (a checkpoint was written), else a negative status after
 * printing why. When *all_know is set, every rank returned a failure at the same point (set-up
 * checks, a non-finite loss, a rank that could not read its data, a checkpoint rank 0 could not
 * write), so the ranks are in step and may go on; otherwise a failure that only some ranks saw
 * can leave the others in a collective, and the caller must abort the job (lstmd_comm_abort)
 * when the world has more than one rank. */
/* After a failure that not every rank saw (*all_know 0, several ranks), the run's buffers are
 * left allocated, since MPI may still be writing into them: the caller must end the job. */
int lstmd_train_run(const struct lstmd_train_config *cfg, const char *config_json,
                    const char *resume_path, struct lstmd_comm *comm,
                    const struct lstmd_train_hooks *hooks, int *all_know);

/* The bound on the waits of a run's set-up (and of `lstmd train`'s MPI_Init and start-up votes
 * before it): max(comm_timeout_s, 600 s). There the ranks may differ by more than a step's time
 * for good reasons (device start-up, rank 0 choosing cuDNN's algorithms, each rank reading a
 * teacher at its file system's speed), so a small train.comm_timeout_s (set to notice a frozen
 * rank in seconds) does not end a healthy start. The test hook LSTMD_SETUP_WAIT_S replaces the
 * 600 (said on stderr when `say`). *source: the bound's name for messages (a constant). */
double lstmd_setup_wait_limit(double comm_timeout_s, const char **source, int say);

/* Async-signal-safe: asks the running training loop to stop after the current step, write a
 * checkpoint and return. */
void lstmd_train_request_stop(void);

#endif
