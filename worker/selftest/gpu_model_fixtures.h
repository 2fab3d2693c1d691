/* gpu_model_fixtures.h — what the selftest group "model" (gpu_model.c, gpu_model_engine.c) shares:
 * its models, batches and engines, made on the host, and the checks they share. */
#ifndef LSTMD_GPU_MODEL_FIXTURES_H
#define LSTMD_GPU_MODEL_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

#include "worker/data/batcher.h"
#include "worker/engine/engine.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"

enum { T = 7, B = 5 };
extern unsigned long long gm_seed; /* the random stream of every fixture */
/* 1: the models made are layer-normalised (model.layer_norm), their gains and shifts drawn
 * around 1 and 0 so that a gain mistaken for 1 shows. */
extern int gm_layer_norm;

/* A model of `hidden` units and `layers` layers, text (V 11, E 6) or series (width 3, horizon
 * 2), its parameters from `seed`; a copy of one; their kind's name in a check's line. */
struct lstmd_model *gm_make_model(int text, int hidden, int layers, uint64_t seed);
struct lstmd_model *gm_clone_model(const struct lstmd_model *m);
const char *gm_kind_name(int text);
const char *gm_dtype_name(int dt);
/* A batch of steps×batch (text: ids/targets < V; series: rows of width W and K targets). */
void gm_fill_batch(struct lstmd_batch *b, const struct lstmd_model *m, int steps, int batch);
void gm_free_batch(struct lstmd_batch *b);
double gm_targets_of(const struct lstmd_model *m, int steps, int batch);
void gm_check_rel(const char *what, const float *got, const float *ref, size_t n, double tol);

/* An engine of T×B windows: the CPU engine with device -1, the GPU engine with 0; NULL if it
 * cannot be made. */
struct lstmd_engine *gm_make_engine(struct lstmd_model *m, int device, int precision, int carry);
/* The window source of the steps below: `batches` cycled, never a state reset. */
struct gm_batch_feed {
  const struct lstmd_batch *batches;
  int n, next;
};
const struct lstmd_batch *gm_next_batch(void *ctx, int *reset);
/* `steps` optimizer steps of `accum` windows from `batches` (cycled); losses[] per step, every
 * step a logged one unless `quiet` (then only the last, its loss the sum over all). gm_train:
 * not quiet. */
int gm_train_steps(struct lstmd_engine *e, struct lstmd_optim *o, struct lstmd_model *m,
                   const struct lstmd_batch *batches, int n_batches, int steps, int accum,
                   double *losses, int quiet);
int gm_train(struct lstmd_engine *e, struct lstmd_optim *o, struct lstmd_model *m,
             const struct lstmd_batch *batches, int n_batches, int steps, int accum,
             double *losses);

/* gpu_model_engine.c: the GPU engine's pruning, distillation and checkpoint round trip. */
void gm_test_pruning(void);
void gm_test_distill(int text, int algo, int precision, int carry);
void gm_test_checkpoint_round_trip(void);

#endif
