/* serve_job.h — a daemon job's settings → the training config, with its paths confined to the
 * data root. Used twice: when a job is submitted (to refuse a bad one at once, naming the key)
 * and when it starts (the file system may have changed since). */
#ifndef LSTMD_SERVE_JOB_H
#define LSTMD_SERVE_JOB_H

#include <stddef.h>

#include "worker/train/train_config.h"
#include "lstmd.pb-c.h"

/* Applies settings over the defaults, resolves data.path (must exist) and train.run_dir (if
 * set; may not exist yet) inside data_root, and checks the result; with world > 0 (the daemon's
 * ranks) also that model.stages divides it. *has_run_dir tells whether the settings named a run
 * directory. Returns 0, or LSTMD_ECONFIG with the reason in err. */
int lstmd_serve_job_config(Lstmd__Setting *const *settings, size_t n, const char *data_root,
                           int world, struct lstmd_train_config *cfg, int *has_run_dir, char *err,
                           size_t errlen);

#endif
