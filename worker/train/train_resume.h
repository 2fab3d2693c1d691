/* train_resume.h — rank 0's read of the checkpoint to resume from (train_resume.c), run by
 * train_setup.c as lstmd_comm_solo's work. Private to worker/train. */
#ifndef LSTMD_TRAIN_RESUME_H
#define LSTMD_TRAIN_RESUME_H

#include "trainer_run.h"

struct load_work {
  struct run *r;
  const char *path;
};
int lstmd_run_load_work(void *ctx); /* ctx: a struct load_work */

#endif
