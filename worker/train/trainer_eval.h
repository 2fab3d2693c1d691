/* trainer_eval.h — the training loop's (trainer.c) evaluations and the naming of the best
 * model's file, in trainer_eval.c. Private to worker/train. */
#ifndef LSTMD_TRAINER_EVAL_H
#define LSTMD_TRAINER_EVAL_H

#include <stddef.h>

#include "trainer_run.h"
#include "val_watch.h"

struct lstmd_watch_rules lstmd_run_watch_rules(const struct lstmd_train_config *cfg);
const char *lstmd_run_best_where(const struct run *r, char *buf, size_t n);
void lstmd_run_check_best_file(struct run *r);
int lstmd_run_evaluate(struct run *r, int *events);
/* The same evaluation, logged, that leaves the validation watch as it was (no new best, no
 * patience or plateau counted): for a step the watch has judged already, as a resume at or past
 * train.steps re-scores its checkpoint's step. */
int lstmd_run_evaluate_report(struct run *r);

#endif
