/* serve_job.h — a daemon job's settings → the training config, with its paths confined to the
 * data root. Used twice: when a job is submitted (to refuse a bad one at once, naming the key)
 * and when it starts (the file system may have changed since). And a submission, answered. */
#ifndef LSTMD_SERVE_JOB_H
#define LSTMD_SERVE_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "worker/train/train_config.h"
#include "lstmd.pb-c.h"

/* Applies settings over the defaults, resolves data.path (must exist) and train.run_dir (if
 * set; may not exist yet) inside data_root, and checks the result, and the settings against the
 * dataset's header (worker/train/dataset_fit.h); with world > 0 (the daemon's ranks) also that
 * model.stages divides it. *has_run_dir tells whether the settings named a run
 * directory. Returns 0, or LSTMD_ECONFIG with the reason in err. */
int lstmd_serve_job_config(Lstmd__Setting *const *settings, size_t n, const char *data_root,
                           int world, struct lstmd_train_config *cfg, int *has_run_dir, char *err,
                           size_t errlen);

struct lstmd_jobs;
/* A SubmitJob request, answered: the settings checked as above, a fresh job into a run dir
 * that holds checkpoints refused (unless spec->resume), and spec->continues (an ended job)
 * resolved to that job's settings followed by spec's, its run dir and a resume. Returns the
 * Response frame (a job, or an error naming the key or the job). */
uint8_t *lstmd_serve_submit(struct lstmd_jobs *jobs, const Lstmd__JobSpec *spec,
                            const char *data_root, int world, size_t *len);

#endif
