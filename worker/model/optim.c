/* optim.c — learning-rate schedule, clipping and the update (kernels in dense_cpu.c). */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dense_cpu.h"
#include "kernels/optim_rules.h"
#include "kernels/status.h"

int lstmd_optim_create(const struct lstmd_optim_config *cfg, size_t n, struct lstmd_optim **out) {
  struct lstmd_optim *o = calloc(1, sizeof *o);
  if (!o) return LSTMD_ENOMEM;
  o->cfg = *cfg;
  o->n = n;
  o->m = calloc(n, sizeof(float));
  if (cfg->algo == LSTMD_OPTIM_ADAMW) o->v = calloc(n, sizeof(float));
  if (!o->m || (cfg->algo == LSTMD_OPTIM_ADAMW && !o->v)) {
    lstmd_optim_destroy(o);
    return LSTMD_ENOMEM;
  }
  *out = o;
  return LSTMD_OK;
}

void lstmd_optim_destroy(struct lstmd_optim *o) {
  if (!o) return;
  free(o->m);
  free(o->v);
  free(o);
}

float lstmd_optim_lr(const struct lstmd_optim_config *cfg, long step) {
  return lstmd_lr_at(cfg->lr, cfg->warmup_steps, cfg->schedule == LSTMD_SCHEDULE_COSINE,
                     cfg->total_steps, step);
}

int lstmd_optim_norm(const struct lstmd_optim *o, const float *grads, double *grad_norm) {
  *grad_norm = sqrt(lstmd_cpu_sumsq(o->n, grads));
  return lstmd_optim_norm_usable(*grad_norm, o->cfg.clip_norm) ? LSTMD_OK : LSTMD_ENONFINITE;
}

int lstmd_optim_step(struct lstmd_optim *o, float *params, float *grads, double *grad_norm) {
  const int rc = lstmd_optim_norm(o, grads, grad_norm);
  if (!rc) lstmd_optim_apply(o, params, grads, 0, o->n, *grad_norm);
  return rc;
}

void lstmd_optim_apply(struct lstmd_optim *o, float *params, float *grads, size_t lo, size_t hi,
                       double norm) {
  lstmd_optim_update(o, params, grads, lo, hi, norm);
  lstmd_optim_advance(o);
}

void lstmd_optim_update(const struct lstmd_optim *o, float *params, float *grads, size_t lo,
                        size_t hi, double norm) {
  const struct lstmd_optim_config *c = &o->cfg;
  const size_t n = hi - lo;
  if (c->clip_norm > 0.0f && norm > c->clip_norm)
    lstmd_cpu_scale(n, grads + lo, (float)(c->clip_norm / (norm + 1e-6)));
  const float lr = lstmd_optim_lr(c, o->step);
  if (c->algo == LSTMD_OPTIM_ADAMW) /* bias correction counts this update: step + 1 */
    lstmd_cpu_adamw(n, params + lo, grads + lo, o->m + lo, o->v + lo, lr, c->beta1, c->beta2,
                    c->eps, c->weight_decay, o->step + 1);
  else
    lstmd_cpu_sgd(n, params + lo, grads + lo, o->m + lo, lr, c->momentum, c->weight_decay);
}

void lstmd_optim_advance(struct lstmd_optim *o) { o->step++; }
