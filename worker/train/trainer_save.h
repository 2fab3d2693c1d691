/* trainer_save.h — the training loop's (trainer.c) collective writes, done by rank 0 in
 * trainer_save.c: checkpoints, best.safetensors, text samples, and the run's outputs opened
 * before the first step. Each returns the same status on every rank unless it says otherwise
 * there. Private to worker/train. */
#ifndef LSTMD_TRAINER_SAVE_H
#define LSTMD_TRAINER_SAVE_H

#include "trainer_run.h"

/* What lstmd_run_save_checkpoint writes: step-<N> (and latest, a link to it, then the old step
 * files train.keep_checkpoints does not keep are deleted); best.safetensors as a checkpoint of its
 * own; or best.safetensors as another name of the step-<N> just written (no second write). */
enum save_kind { SAVE_STEP = 0, SAVE_BEST = 1, SAVE_BEST_LINK = 2 };

int lstmd_run_save_checkpoint(struct run *r, enum save_kind kind);
int lstmd_run_save_best(struct run *r, int step_file_written);
int lstmd_run_sample(struct run *r);
int lstmd_run_open_outputs(struct run *r, const char *resume_path);

#endif
