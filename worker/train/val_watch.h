/* val_watch.h — training you can leave alone: what each validation loss decides (a new best,
 * a cut of the learning rate on a plateau, an early stop), and the deletion of old step-N
 * checkpoints (train.keep_checkpoints). The decisions are pure functions of the losses and the
 * state (struct lstmd_val_watch, worker/io/checkpoint.h), which every rank updates alike from
 * the loss rank 0 broadcasts and which checkpoints carry, so that a resumed run decides exactly
 * as an uninterrupted one. */
#ifndef LSTMD_VAL_WATCH_H
#define LSTMD_VAL_WATCH_H

#include <stdio.h>

#include "worker/io/checkpoint.h"

struct lstmd_watch_rules {
  long patience;         /* train.early_stop_patience; 0: never stop early */
  double min_delta;      /* train.early_stop_min_delta */
  int plateau;           /* optim.schedule = plateau */
  long plateau_patience; /* optim.plateau_patience */
  double plateau_factor; /* optim.plateau_factor */
};

enum { LSTMD_WATCH_NEW_BEST = 1, LSTMD_WATCH_LR_CUT = 2, LSTMD_WATCH_STOP = 4 };

/* No evaluation yet: best +inf, counters 0, lr scale 1. */
void lstmd_val_watch_init(struct lstmd_val_watch *w);

/* The evaluation at `step` gave `loss`. A new best is loss < best − min_delta (a NaN never is);
 * it resets both counters. Otherwise since_best and plateau_bad grow by one; with the plateau
 * schedule, plateau_bad reaching plateau_patience multiplies lr_scale by plateau_factor and
 * restarts plateau_bad (LSTMD_WATCH_LR_CUT); since_best reaching patience (> 0) stops
 * (LSTMD_WATCH_STOP). Returns the LSTMD_WATCH_* bits that happened. */
int lstmd_val_watch_update(struct lstmd_val_watch *w, const struct lstmd_watch_rules *r,
                           long step, double loss);

/* Nonzero when the state already says stop (a run resumed from its early stop's checkpoint). */
int lstmd_val_watch_stopped(const struct lstmd_val_watch *w, const struct lstmd_watch_rules *r);

/* The step <run_dir>/best.safetensors was written at (its metadata train.step), or -1 when there
 * is no such file. A resumed run's watch names its best step, but the run dir's best.safetensors
 * need not be that checkpoint: --resume PATH from another run dir (whose best.safetensors holds
 * it), or from a step before a best that the old run wrote later. The trainer compares the two
 * so that it does not announce a best.safetensors that is missing or another model. A file that
 * exists but cannot be read gives -2 (with the reader's message). */
long lstmd_best_file_step(const char *run_dir);

/* Whether run_dir holds a checkpoint file: best.safetensors or a step-<N>.safetensors (a regular
 * file; latest is another name of a step file). Its name goes to found (n bytes); a run dir that
 * cannot be listed (not made yet) holds none. */
int lstmd_run_dir_checkpoint(const char *run_dir, char *found, size_t n);
/* Who refuses a fresh run (no --resume) into a run dir that holds a run's checkpoints, for
 * lstmd_run_dir_fresh_refusal's words. */
enum lstmd_fresh_run {
  LSTMD_FRESH_TRAIN,  /* lstmd train */
  LSTMD_FRESH_SUBMIT, /* the daemon, at a job's submission */
  LSTMD_FRESH_START,  /* the daemon, at the job's start: the checkpoint appeared while it waited */
};
/* The refusal, into out (n bytes): "train.run_dir DIR already holds a run (FOUND): a fresh run
 * there would mix its metrics with that run's and replace its checkpoints. To continue that
 * run: add --resume; to start over: choose another train.run_dir, or remove that one first",
 * found being lstmd_run_dir_checkpoint's file name; a job's in the daemon's words. Refused, as
 * such a run appends its metrics to that run's and replaces its latest and best checkpoints (a
 * user trial lost a finished run's best model that way). Inline, as the daemon's job table
 * (jobs.c, which the protocol tests build without the training sources) writes it too. */
static inline void lstmd_run_dir_fresh_refusal(char *out, size_t n, const char *run_dir,
                                               const char *found, enum lstmd_fresh_run who) {
  const int job = who != LSTMD_FRESH_TRAIN, start = who == LSTMD_FRESH_START;
  snprintf(out, n, "train.run_dir %s %s a run (%s): a fresh %s there would mix its metrics with "
           "that run's and replace its checkpoints. To continue that run: %s --resume; to start "
           "over: %s another train.run_dir, or remove that one first", run_dir,
           start ? "now holds" : "already holds", found, job ? "job" : "run",
           !job ? "add" : start ? "submit it again with" : "submit with",
           start ? "submit it again with" : "choose");
}
/* Where a resume of run_dir goes on from: its latest.safetensors; without one (a crash between
 * writing the first step file and naming it latest, or latest removed by hand) its newest
 * step-<N>.safetensors, rather than a fresh run over them. Returns 1 (latest) or 2 (the newest
 * step file) with the file in path (n bytes), 0 when run_dir holds no checkpoint (a fresh
 * start), -1 when it holds only a
 * best.safetensors (why says so: resuming from the best model is the user's call); path is ""
 * unless 1 or 2. */
int lstmd_run_dir_resume_point(const char *run_dir, char *path, size_t n, char *why,
                               size_t why_len);
/* The resume point of run_dir and the integer metadata keys[0..n) of that checkpoint, from its
 * header only: values[i] = -1 where a key is absent or not a non-negative integer. Returns 1
 * (path: the checkpoint) where one was found and its header opened, 0 where run_dir holds no
 * checkpoint, -1 where it cannot tell (only a best.safetensors; a header that does not open,
 * printed). For the daemon's views of a run before it starts (daemon/jobs.c, serve_job.c). */
int lstmd_run_dir_resume_meta(const char *run_dir, int n, const char *const *keys, long *values,
                              char *path, size_t path_len);
/* The newest step-<N>.safetensors beside the checkpoint ckpt that is another file than it (latest
 * is another name of its step file, so that one is passed over), and older than ckpt when ckpt
 * is itself a step file: where a resume can go on from when ckpt is damaged. Returns 1 with its
 * path in out (n bytes), else 0. */
int lstmd_run_dir_older_checkpoint(const char *ckpt, char *out, size_t n);
/* train.keep_checkpoints: keeps the `keep` newest <run_dir>/step-<N>.safetensors files (highest
 * N) and deletes the others, but never the file that latest.safetensors or best.safetensors is
 * (the same inode) nor step-<latest_step> (by name too, where links are copies); a protected
 * file counts among the kept, so 0 and 1 both keep latest's file alone. keep < 0: nothing is
 * deleted. Only names of exactly that form are touched. A file that cannot be deleted is
 * reported and left. Returns the number deleted. */
int lstmd_keep_checkpoints(const char *run_dir, long keep, long latest_step);

#endif
