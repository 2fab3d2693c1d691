/* trainer_run.h — the state of one training run, shared by trainer.c (the loop, with
 * trainer_eval.c and trainer_save.c) and train_setup.c (building it, with train_checks.c
 * checking that the ranks agree and train_resume.c resuming). Private to worker/. */
#ifndef LSTMD_TRAINER_RUN_H
#define LSTMD_TRAINER_RUN_H

#include "worker/data/batcher.h"
#include "worker/io/checkpoint.h"
#include "worker/engine/engine.h"
#include "worker/data/dataset.h"
#include "worker/io/metrics.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"
#include "worker/data/prefetch.h"
#include "train_config.h"
#include "trainer.h"

struct lstmd_comm;

struct run {
  const struct lstmd_train_config *cfg;
  const char *config_json;
  struct lstmd_comm *comm; /* NULL: one rank */
  int rank, world;
  int straggler_rank, straggler_streak; /* rank 0: the straggler report's streak (trainer.c) */
  int replicas, replica;   /* D = world / model.stages and this rank's d (rank = d·S + stage) */
  int global_batch;        /* replicas · batch_size */
  struct lstmd_dataset train, val;
  struct lstmd_model *model;
  struct lstmd_optim *optim;
  struct lstmd_model *teacher;  /* distill.teacher, read by every rank; NULL: no distillation */
  struct lstmd_prune *prune;    /* prune.target_sparsity > 0; also progress.prune */
  struct lstmd_batcher *batcher;
  struct lstmd_prefetch *prefetch; /* reads the batcher's next batches on a thread */
  struct lstmd_engine *engine;
  struct lstmd_data_meta data_meta;
  struct lstmd_train_progress progress; /* state_h/state_c: [L, global_batch, H] */
  struct lstmd_metrics metrics;         /* rank 0 only */
  struct lstmd_trace *trace;            /* --trace, or NULL */
  FILE *samples;                        /* rank 0, train.sample_every > 0: <run_dir>/samples.txt */
  int run_lock;                         /* rank 0: <run_dir>/.lstmd.lock held (lstmd_run_dir_lock), or -1 */
  const struct lstmd_train_hooks *hooks; /* never NULL (an empty set when none was given) */
  int has_val, resumed;
  long written_step; /* rank 0: the step of the last step checkpoint this run wrote; -1: none */
  /* rank 0, resumed: the watch's best val_loss is not the model in <run_dir>/best.safetensors
   * (none there, or another step's: val_watch.h lstmd_best_file_step), until the next new best
   * writes it; what the file holds then (-1: none), for the messages that name it */
  int best_astray;
  long best_file_step;
  char *resume_changes; /* rank 0, resumed: the settings changed since the checkpoint (resume_changes.h) */
  char *setup_warnings; /* rank 0: set-up's warnings ("warning: ...\n" lines), printed before
                         * train.log opens and written there once it has (lstmctl logs) */
  int has_baselines;                      /* rank 0, series: `baselines` holds the val split's */
  struct lstmd_series_baselines baselines;
  int failure_agreed; /* the failure being returned was voted on by every rank */
};

/* Builds the run (dataset, model, optimizer, batcher, data-parallel engine), checks that every
 * rank has the same config and dataset, and resumes from resume_path (rank 0 reads it and
 * broadcasts). Every rank returns the same status. */
int lstmd_run_setup(struct run *r, const char *resume_path);
void lstmd_run_free(struct run *r);
/* Rank 0's set-up warning, said now and written to train.log once it opens (train_setup.c). */
void lstmd_run_setup_warn(struct run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
