/* optim_rules.h — the optimizer's per-step decisions as plain inline functions that compile for
 * the host and for CUDA alike: the learning-rate schedule, the fp16 loss-scale state machine,
 * and the step decision (clip factor, skip, bias corrections). The CPU optimizer (optim.c) and
 * the loss scaler (loss_scale.c) call them on the host; the GPU engine runs lstmd_optim_decide
 * in a one-thread kernel (dense_cuda.cu), so a step that is not logged needs no round trip to
 * the host for the gradient norm, the overflow check or the update's coefficients. One
 * definition for both, tested on the CPU (tests/test_gpu_logic.c). */
#ifndef LSTMD_OPTIM_RULES_H
#define LSTMD_OPTIM_RULES_H

#include <math.h>

#ifdef __CUDACC__
#define LSTMD_HD __host__ __device__
#else
#define LSTMD_HD
#endif

/* Learning rate of update number `step` (0-based): linear warmup over `warmup` updates, then
 * constant or cosine down to 0 at `total`. */
LSTMD_HD static inline float lstmd_lr_at(float lr, long warmup, int cosine, long total, long step) {
  if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
  if (!cosine) return lr;
  const long span = total - warmup;
  double progress = span > 0 ? (double)(step - warmup) / (double)span : 1.0;
  if (progress > 1.0) progress = 1.0;
  return (float)(lr * 0.5 * (1.0 + cos(3.14159265358979323846 * progress)));
}

/* fp16 dynamic loss scaling (constants and rationale: worker/engine/loss_scale.h). */
struct lstmd_loss_scaler {
  float scale;          /* current multiplier of the loss */
  long good_steps;      /* clean steps since the last change */
  int overflows_in_row; /* consecutive skipped steps */
  /* constants */
  float growth_factor, backoff_factor, max_scale;
  long growth_interval;
  int max_overflows_in_row;
};

enum { LSTMD_LOSS_SCALE_APPLY = 0, LSTMD_LOSS_SCALE_SKIP = 1, LSTMD_LOSS_SCALE_GIVE_UP = 2 };

/* After a step whose gradients held an inf/NaN (found_nonfinite) or did not. */
LSTMD_HD static inline int lstmd_loss_scaler_step(struct lstmd_loss_scaler *s, int found_nonfinite) {
  if (found_nonfinite) {
    s->good_steps = 0;
    s->scale *= s->backoff_factor;
    if (++s->overflows_in_row >= s->max_overflows_in_row || !(s->scale > 0.0f))
      return LSTMD_LOSS_SCALE_GIVE_UP;
    return LSTMD_LOSS_SCALE_SKIP;
  }
  s->overflows_in_row = 0;
  if (++s->good_steps >= s->growth_interval) {
    s->good_steps = 0;
    if (s->scale * s->growth_factor <= s->max_scale) s->scale *= s->growth_factor;
  }
  return LSTMD_LOSS_SCALE_APPLY;
}

/* The constants of one run's updates. */
struct lstmd_optim_rule {
  float clip_norm;        /* 0: no clipping */
  float lr;               /* peak */
  long warmup, total;     /* schedule (lstmd_lr_at) */
  int cosine;
  float beta1, beta2;     /* AdamW's bias corrections */
  int fp16;               /* the gradients carry scaler.scale; overflows skip the update */
};

/* What the device keeps between steps, and what each step decided. The caller zeroes sumsq
 * and adds Σ g² of the (scaled) gradients before each lstmd_optim_decide. */
struct lstmd_optim_state {
  double sumsq;           /* in: squared norm of the step's gradients */
  double norm;            /* out: the step's gradient norm (unscaled, before clipping) */
  float coef;             /* out: multiply the gradients by this in the update (unscale, clip) */
  float lr, bc1, bc2_sqrt; /* out: the update's learning rate and AdamW bias corrections */
  int apply;              /* out: 1: update; 0: leave the parameters alone */
  long applied;           /* updates done so far (the optimizer's step) */
  long calls;             /* decisions made so far */
  long first_bad;         /* not fp16: the decision (1-based) that saw a non-finite norm; 0: none.
                           * From then on nothing is updated: the run has failed and the host
                           * says so when it next reads this state. */
  long gave_up;           /* fp16: the decision at which overflows ran too long; 0: none */
  struct lstmd_loss_scaler scaler; /* fp16 */
};

/* 1 when a step with gradient norm `norm` (unscaled, before clipping) can be applied: finite,
 * and after clipping at most √FLT_MAX, so that no gradient's square overflows a float second
 * moment (AdamW's v, summed in float) and no momentum or update can reach inf. Every element is
 * at most the norm, so this is exact for the squares. A norm past it means the run diverged:
 * AdamW's v became inf there, its update 0, and the parameters stopped moving while the loss
 * still looked fine. */
#define LSTMD_MAX_GRAD_NORM 1.8446742e19 /* √FLT_MAX = 2^64 (1 - 2^-24)^½, rounded down */
LSTMD_HD static inline int lstmd_optim_norm_usable(double norm, float clip_norm) {
  if (!isfinite(norm)) return 0;
  const double applied = clip_norm > 0.0f && norm > clip_norm ? (double)clip_norm : norm;
  return applied <= LSTMD_MAX_GRAD_NORM;
}

/* One step's decision. fp16: the norm is unscaled by the scale the gradients carry, and the
 * scaler is stepped (its new scale applies to the next step's loss). */
LSTMD_HD static inline void lstmd_optim_decide(struct lstmd_optim_state *s,
                                               const struct lstmd_optim_rule *r) {
  s->calls++;
  const double scale = r->fp16 ? (double)s->scaler.scale : 1.0;
  const double norm = sqrt(s->sumsq) / scale;
  s->norm = norm;
  s->apply = 0;
  s->coef = 0.0f;
  if (s->first_bad || s->gave_up) return;
  const int finite = isfinite(norm);
  if (r->fp16) {
    const int verdict = lstmd_loss_scaler_step(&s->scaler, !finite);
    if (verdict == LSTMD_LOSS_SCALE_GIVE_UP) s->gave_up = s->calls;
    if (verdict != LSTMD_LOSS_SCALE_APPLY) return;
  } else if (!lstmd_optim_norm_usable(norm, r->clip_norm)) {
    s->first_bad = s->calls;
    return;
  }
  double coef = 1.0 / scale;
  if (r->clip_norm > 0.0f && norm > r->clip_norm) coef *= r->clip_norm / (norm + 1e-6);
  s->coef = (float)coef;
  s->lr = lstmd_lr_at(r->lr, r->warmup, r->cosine, r->total, s->applied);
  s->applied++;
  s->bc1 = 1.0f - (float)pow((double)r->beta1, (double)s->applied);
  s->bc2_sqrt = (float)sqrt(1.0 - pow((double)r->beta2, (double)s->applied));
  s->apply = 1;
}

#endif
