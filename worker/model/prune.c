/* prune.c — magnitude pruning masks and their schedule (prune.h).
 *
 * 1. Schedule: TensorFlow Model Optimization's PolynomialDecay (tensorflow_model_optimization/
 *    python/core/sparsity/keras/pruning_schedule.py, v0.8.1, which TF's API page for
 *    tfmot.sparsity.keras.PolynomialDecay links): with p = clamp((step − begin) / (end − begin),
 *    0, 1), sparsity = final + (initial − final)·(1 − p)^power, applied when
 *    begin ≤ step ≤ end and (step − begin) mod frequency == 0. lstmd's initial sparsity is 0 and
 *    its step is the number of optimizer steps done (1 after the first update).
 * 2. Masks (pruning_impl.py's _update_mask): k = max(round(n·(1 − s)), 1) weights are kept
 *    (the product in double here, in float32 there; both round half to even).
 *    TF-MOT keeps every weight ≥ the k-th largest magnitude, so ties keep more than k; here the
 *    order is (|w| descending, flat index ascending) and exactly k are kept, so the choice is a
 *    function of the weights alone: every rank and a resumed run pick the same ones.
 * 3. Masks are recomputed from the masked weights (the old mask applied first). TF-MOT computes
 *    them from the weights as the optimizer left them, so a pruned weight may come back; here a
 *    pruned weight stays zero, as the sparsity only grows. */
#include "prune.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"

double lstmd_prune_sparsity_at(const struct lstmd_prune_config *c, long step) {
  double p = (double)(step - c->begin_step) / (double)(c->end_step - c->begin_step);
  p = p < 0.0 ? 0.0 : p > 1.0 ? 1.0 : p;
  return c->target_sparsity + (0.0 - c->target_sparsity) * pow(1.0 - p, c->power);
}

int lstmd_prune_due(const struct lstmd_prune_config *c, long step) {
  return c->target_sparsity > 0.0f && step >= c->begin_step && step <= c->end_step &&
         (step - c->begin_step) % c->frequency == 0;
}

struct create_ctx {
  struct lstmd_prune *p;
  const struct lstmd_model *m;
};

static int add_one(void *arg, const char *name) {
  struct create_ctx *c = arg;
  const struct lstmd_tensor *t = lstmd_model_tensor(c->m, name);
  if (!t) return -1;
  struct lstmd_prune *p = c->p;
  p->tensor[p->n] = (int)(t - c->m->tensors);
  p->mask[p->n] = malloc(t->count);
  if (!p->mask[p->n]) return -1;
  memset(p->mask[p->n++], 1, t->count);
  return 0;
}

struct order_key {
  float mag;
  size_t index;
};

int lstmd_prune_create(const struct lstmd_prune_config *c, const struct lstmd_model *m,
                       struct lstmd_prune **out) {
  *out = NULL;
  struct lstmd_prune *p = calloc(1, sizeof *p);
  if (!p) return LSTMD_ENOMEM;
  p->cfg = *c;
  struct create_ctx ctx = {p, m};
  size_t largest = 0;
  int rc = lstmd_prune_for_each_name(c->tensors, m->shape.layers, add_one, &ctx) ? LSTMD_ENOMEM : LSTMD_OK;
  for (int i = 0; !rc && i < p->n; i++)
    if (m->tensors[p->tensor[i]].count > largest) largest = m->tensors[p->tensor[i]].count;
  if (!rc && !(p->scratch = malloc(largest * sizeof(struct order_key)))) rc = LSTMD_ENOMEM;
  if (rc) {
    lstmd_prune_destroy(p);
    return rc;
  }
  *out = p;
  return LSTMD_OK;
}

void lstmd_prune_destroy(struct lstmd_prune *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) free(p->mask[i]);
  free(p->scratch);
  free(p);
}

static void apply_masks(const struct lstmd_prune *p, const struct lstmd_model *m, float *params) {
  for (int i = 0; i < p->n; i++) {
    const struct lstmd_tensor *t = &m->tensors[p->tensor[i]];
    float *w = params + t->offset;
    for (size_t j = 0; j < t->count; j++)
      if (!p->mask[i][j]) w[j] = 0.0f;
  }
}

/* Larger magnitude first; equal magnitudes: the lower index first (see 2.). */
static int by_magnitude(const void *a, const void *b) {
  const struct order_key *x = a, *y = b;
  if (x->mag != y->mag) return x->mag > y->mag ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

void lstmd_prune_update(struct lstmd_prune *p, const struct lstmd_model *m, float *params,
                        double sparsity) {
  struct order_key *key = p->scratch;
  for (int i = 0; i < p->n; i++) {
    const struct lstmd_tensor *t = &m->tensors[p->tensor[i]];
    const float *w = params + t->offset;
    const double keep = nearbyint((double)t->count * (1.0 - sparsity));
    const size_t k = keep < 1.0 ? 1 : (size_t)keep;
    for (size_t j = 0; j < t->count; j++) key[j] = (struct order_key){fabsf(w[j]), j};
    qsort(key, t->count, sizeof *key, by_magnitude);
    for (size_t j = 0; j < t->count; j++) p->mask[i][key[j].index] = j < k;
  }
  apply_masks(p, m, params);
}

int lstmd_prune_after_step(struct lstmd_prune *p, const struct lstmd_model *m, float *params,
                           long step) {
  apply_masks(p, m, params);
  if (!lstmd_prune_due(&p->cfg, step)) return 0;
  lstmd_prune_update(p, m, params, lstmd_prune_sparsity_at(&p->cfg, step));
  return 1;
}

double lstmd_prune_mask_sparsity(const struct lstmd_prune *p, const struct lstmd_model *m, int i) {
  const size_t n = m->tensors[p->tensor[i]].count;
  size_t zeros = 0;
  for (size_t j = 0; j < n; j++) zeros += !p->mask[i][j];
  return (double)zeros / (double)n;
}
