/* metrics.h — what a training run reports: a live progress line (rewritten in place on a TTY,
 * plain lines otherwise) on stderr, and <run_dir>/metrics.jsonl with one record per log step
 * and per evaluation, and the same scalars as a TensorBoard event file. */
#ifndef LSTMD_METRICS_H
#define LSTMD_METRICS_H

#include <stdio.h>

#include "tb_events.h"

struct lstmd_metrics {
  FILE *jsonl;
  struct lstmd_tb tb; /* events.out.tfevents.* beside metrics.jsonl */
  int tty;
  int line_open; /* a progress line without newline is on screen */
  FILE *log;     /* train.log beside metrics.jsonl: the progress lines and notes, as printed */
  int failed;    /* a record of metrics.jsonl could not be written (errno; said once) */
  int model_kind;    /* enum lstmd_model_kind, from lstmd_metrics_open */
  int loss_decimals; /* of val_loss in notes: 4 for text, 6 for the others */
};


/* Nonzero once a metrics.jsonl record failed to reach the file (a full disk): the trainer then
 * stops at the step with a checkpoint and exits 1 (trainer.c). */
static inline int lstmd_metrics_failed(const struct lstmd_metrics *mt) { return mt->failed; }

struct lstmd_step_report {
  long step, total_steps;
  double loss;            /* mean training loss over the log interval */
  double lr, grad_norm;
  double tokens_per_s;
  double elapsed_s, eta_s;
  long long tokens;       /* tokens (time steps) trained so far, all ranks */
  int world, global_batch;
  double data_wait_s;     /* per step: waiting for the batch */
  double compute_s;       /* per step: forward + backward */
  double comm_wait_s;     /* per step: all-reduce time not hidden behind backward */
  double loss_scale;      /* fp16 dynamic loss scale at the end of the interval (0: none) */
  int stages;             /* pipeline stages (1: data parallel only) */
  double bubble;          /* stages > 1: 1 − Σ busy / Σ step wall time over ranks and steps;
                          * NaN where the engine cannot see its busy time (GPU NCCL lanes) */
  double p2p_wait_s;      /* stages > 1: per rank and step, waiting for the neighbour stages */
  int rank_times;         /* 1: the straggler report below is set (several ranks) */
  double compute_min_s, compute_median_s, compute_max_s; /* per step, over the ranks */
  int slowest_rank;       /* the rank of compute_max_s */
};

/* Opens <run_dir>/metrics.jsonl for appending and a new TensorBoard event file there. A run
 * that resumes at `resume_step` (0: a fresh start keeps the file as it is) first drops the
 * records of later steps, which the interrupted run logged after its last checkpoint, so the
 * file holds one history. model_kind (enum lstmd_model_kind) sets the decimals of val_loss in
 * notes: 4 for text models (bpc beside it), 6 for classifiers and series, whose losses may be far
 * below 0.0001 (a new best must not read "0.0000"). Returns 0 or LSTMD_EIO. */
int lstmd_metrics_open(struct lstmd_metrics *mt, const char *run_dir, long resume_step,
                       int model_kind);
void lstmd_metrics_close(struct lstmd_metrics *mt);
void lstmd_metrics_step(struct lstmd_metrics *mt, const struct lstmd_step_report *r);
/* The naive forecasts' MSE on the validation windows (infer.h: lstmd_series_baseline_mse). */
struct lstmd_series_baselines {
  double mse_persistence, mse_seasonal;
  int season; /* 0: no seasonal baseline */
};
/* The model's kind (given to lstmd_metrics_open) selects what is reported beside val_loss: a
 * text model's bits per character; a classifier's accuracy (val_accuracy in the note line and
 * the record, TensorBoard val/accuracy; its loss is per sequence); for a series with baselines
 * (b != NULL), val_mse_persistence, val_mse_seasonal (with a season) and
 * val_skill = 1 − val_loss / val_mse_persistence (TensorBoard val/skill, val/mse_*). */
void lstmd_metrics_eval(struct lstmd_metrics *mt, long step, double val_loss, double accuracy,
                        const struct lstmd_series_baselines *b);
/* A pruning step: the schedule's sparsity and the fraction of zeros reached in each of the n
 * pruned tensors, as one record {"step", "prune_target", "sparsity": {name: fraction}}, a note
 * line, and TensorBoard scalars prune/target and sparsity/<name>. */
void lstmd_metrics_prune(struct lstmd_metrics *mt, long step, double target, int n,
                         const char *const *names, const double *sparsity);
/* The validation watch's decisions (worker/train/val_watch.h), each a record of its own with a
 * note line: a new best val_loss (best.safetensors written), a plateau cut of the learning rate
 * (the peak lr now, and the lr of the next update), an early stop. */
void lstmd_metrics_new_best(struct lstmd_metrics *mt, long step, double best_loss);
void lstmd_metrics_lr_cut(struct lstmd_metrics *mt, long step, double lr_scale, double peak_lr,
                          double next_lr, long plateau_patience);
/* where: the file holding the best model, as the note line names it ("best.safetensors"). */
void lstmd_metrics_early_stop(struct lstmd_metrics *mt, long step, double best_loss,
                              long best_step, long evals_since_best, const char *where);
/* Lines ("...\n" each) for train.log alone, each as "lstmd: ...": what was said on stderr
 * before the log opened. */
void lstmd_metrics_log_only(struct lstmd_metrics *mt, const char *lines);
/* A message line on stderr that does not tear the live progress line. */
void lstmd_metrics_note(struct lstmd_metrics *mt, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
