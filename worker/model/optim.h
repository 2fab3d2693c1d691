/* optim.h — optimizer state and one update on the flat fp32 parameters: global-norm gradient
 * clipping, learning-rate schedule (linear warmup, then cosine to zero or constant), and AdamW
 * or SGD with momentum. Moments are flat buffers aligned with the parameter buffer. */
#ifndef LSTMD_OPTIM_H
#define LSTMD_OPTIM_H

#include <stddef.h>

enum lstmd_optim_algo { LSTMD_OPTIM_ADAMW = 0, LSTMD_OPTIM_SGD = 1 };
/* PLATEAU: constant after warmup; the trainer multiplies cfg.lr by optim.plateau_factor when the
 * validation loss stops improving (worker/train/val_watch.h). */
enum lstmd_schedule {
  LSTMD_SCHEDULE_COSINE = 0,
  LSTMD_SCHEDULE_CONSTANT = 1,
  LSTMD_SCHEDULE_PLATEAU = 2
};

struct lstmd_optim_config {
  int algo;           /* enum lstmd_optim_algo */
  float lr;           /* peak learning rate */
  float weight_decay; /* AdamW: decoupled; SGD: added to the gradient */
  float beta1, beta2, eps;
  float momentum;     /* SGD */
  float clip_norm;    /* 0: no clipping */
  long warmup_steps;  /* may exceed total_steps */
  int schedule;       /* enum lstmd_schedule */
  long total_steps;
};

struct lstmd_optim {
  struct lstmd_optim_config cfg;
  size_t n;
  float *m;  /* AdamW first moment / SGD momentum buffer [n] */
  float *v;  /* AdamW second moment [n] (NULL for SGD) */
  long step; /* updates done so far */
};

int lstmd_optim_create(const struct lstmd_optim_config *cfg, size_t n, struct lstmd_optim **out);
void lstmd_optim_destroy(struct lstmd_optim *o);
/* Learning rate of update number `step` (0-based). */
float lstmd_optim_lr(const struct lstmd_optim_config *cfg, long step);
/* Clips grads in place to cfg.clip_norm (global L2 norm), applies one update to params, and
 * advances step. Returns the gradient norm before clipping in *grad_norm. A non-finite norm
 * skips the update and returns LSTMD_ENONFINITE (parameters stay as they were). */
int lstmd_optim_step(struct lstmd_optim *o, float *params, float *grads, double *grad_norm);
/* lstmd_optim_step's first part: the gradient norm in *grad_norm, and LSTMD_ENONFINITE where it
 * is not finite (then no update may follow). */
int lstmd_optim_norm(const struct lstmd_optim *o, const float *grads, double *grad_norm);
/* The update of lstmd_optim_step for a known gradient norm (finite), on the parameters [lo, hi)
 * only (a pipeline stage's range; moments at the same offsets): clips by `norm`, applies the
 * update, advances step. lstmd_optim_step is this over [0, n) after computing the norm. */
void lstmd_optim_apply(struct lstmd_optim *o, float *params, float *grads, size_t lo, size_t hi,
                       double norm);
/* lstmd_optim_apply in pieces: the update of step o->step on [lo, hi), step unchanged (ranges
 * of one step may run on several threads at once: every element updates on its own, so the
 * result is that of one call), then lstmd_optim_advance once for the step. */
void lstmd_optim_update(const struct lstmd_optim *o, float *params, float *grads, size_t lo,
                        size_t hi, double norm);
void lstmd_optim_advance(struct lstmd_optim *o);

#endif
