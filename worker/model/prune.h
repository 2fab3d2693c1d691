/* prune.h — magnitude pruning as TensorFlow Model Optimization's prune_low_magnitude with its
 * PolynomialDecay schedule does it: every `frequency` steps between begin_step and end_step the
 * smallest-magnitude weights of each pruned tensor are masked to reach the schedule's sparsity,
 * and the masks are applied after every optimizer step. Masks are a deterministic function of
 * the weights (ties broken by index), so every rank and a resumed run mask the same weights. */
#ifndef LSTMD_PRUNE_H
#define LSTMD_PRUNE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/model/model.h"

struct lstmd_prune_config {
  float target_sparsity; /* final fraction of zeros in each pruned tensor; 0: pruning off */
  long begin_step, end_step, frequency;
  float power;           /* exponent of the polynomial ramp */
  char tensors[512];     /* comma-separated tensor names; "": every LSTM and head matrix */
};

/* The schedule's sparsity after optimizer step `step` (steps count from 1): 0 before
 * begin_step, target after end_step, the polynomial ramp between. */
double lstmd_prune_sparsity_at(const struct lstmd_prune_config *c, long step);
/* Whether the masks are recomputed after step `step`. */
int lstmd_prune_due(const struct lstmd_prune_config *c, long step);
/* Whether `name` may be pruned in a model of `layers` layers (a weight matrix of the LSTM or
 * the head; never a bias or the embedding). */
int lstmd_prune_tensor_allowed(const char *name, int layers);
/* Checks c->tensors against a model of `layers` layers: 0, or -1 with the reason in err
 * (naming prune.tensors). */
int lstmd_prune_check_tensors(const char *tensors, int layers, char *err, size_t n);
/* Calls fn(ctx, name) for each name of the comma-separated list ("": every LSTM weight matrix
 * of `layers` layers, then head.weight); returns -1 at the first non-zero return, else 0. */
int lstmd_prune_for_each_name(const char *list, int layers, int (*fn)(void *, const char *),
                              void *ctx);

struct lstmd_prune {
  struct lstmd_prune_config cfg;
  int n;                           /* pruned tensors */
  int tensor[LSTMD_MAX_TENSORS];   /* their indices in the model's tensor table */
  uint8_t *mask[LSTMD_MAX_TENSORS];/* [count] 1 keep, 0 pruned; all 1 at the start */
  void *scratch;                   /* sort keys for the largest tensor */
};

/* Builds the masks (all ones) for the tensors c->tensors names in m (checked already by
 * lstmd_prune_check_tensors). Free with lstmd_prune_destroy (NULL and half-built are fine). */
int lstmd_prune_create(const struct lstmd_prune_config *c, const struct lstmd_model *m,
                       struct lstmd_prune **out);
void lstmd_prune_destroy(struct lstmd_prune *p);
/* After optimizer step `step`: applies the masks to params, and when the step is due,
 * recomputes each mask from the masked weights for the schedule's sparsity and applies it.
 * Returns 1 when the masks were recomputed, else 0. */
int lstmd_prune_after_step(struct lstmd_prune *p, const struct lstmd_model *m, float *params,
                           long step);
/* The masks for sparsity s: in each pruned tensor of n weights, keeps the k = max(round(n(1−s)),
 * 1) largest |w| (equal magnitudes: the lower flat index first) and zeroes the others. */
void lstmd_prune_update(struct lstmd_prune *p, const struct lstmd_model *m, float *params,
                        double sparsity);
/* Fraction of zeros in pruned tensor i's mask. */
double lstmd_prune_mask_sparsity(const struct lstmd_prune *p, const struct lstmd_model *m, int i);

#endif
