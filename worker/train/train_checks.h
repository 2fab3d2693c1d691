/* train_checks.h — the set-up's checks in train_checks.c, called by train_setup.c. Private to
 * worker/train. */
#ifndef LSTMD_TRAIN_CHECKS_H
#define LSTMD_TRAIN_CHECKS_H

#include "trainer_run.h"

int lstmd_run_check_plan(struct run *r);
int lstmd_run_load_teacher(struct run *r);

#endif
