/* gpu_model_fixtures.c — the host-side fixtures of the selftest group "model"
 * (gpu_model_fixtures.h). */
#include "gpu_model_fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/convert_cuda.h"
#include "kernels/status.h"
#include "worker/model/rng.h"
#include "worker/selftest/selftest.h"

unsigned long long gm_seed = 77;
int gm_layer_norm;

struct lstmd_model *gm_make_model(int text, int hidden, int layers, uint64_t seed) {
  struct lstmd_model_shape s = {.kind = text ? LSTMD_MODEL_TEXT : LSTMD_MODEL_SERIES,
                                .vocab = 11, .embed = 6, .width = 3, .horizon = 2,
                                .hidden = hidden, .layers = layers, .layer_norm = gm_layer_norm};
  if (!text) s.vocab = s.embed = 0;
  else s.width = s.horizon = 0;
  struct lstmd_model *m = NULL;
  lstmd_model_create(&s, &m);
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, seed, 1);
  lstmd_model_init_params(m, &rng);
  for (int t = 0; gm_layer_norm && t < m->n_tensors; t++) {
    const struct lstmd_tensor *x = &m->tensors[t];
    if (strncmp(x->name, "lstm.ln_", 8)) continue;
    const int gain = strstr(x->name, "_weight_") != NULL;
    for (size_t i = 0; i < x->count; i++)
      m->params[x->offset + i] = (float)(gain + selftest_uniform(&gm_seed, gain ? 0.3 : 0.2));
  }
  return m;
}

const char *gm_kind_name(int text) {
  return text ? (gm_layer_norm ? "text LN" : "text") : (gm_layer_norm ? "series LN" : "series");
}

struct lstmd_model *gm_clone_model(const struct lstmd_model *m) {
  struct lstmd_model *c = NULL;
  lstmd_model_create(&m->shape, &c);
  memcpy(c->params, m->params, m->n_params * sizeof(float));
  return c;
}

/* A batch of T×B (text: ids/targets < V; series: rows of width W and K targets). */
void gm_fill_batch(struct lstmd_batch *b, const struct lstmd_model *m, int steps, int batch) {
  const struct lstmd_model_shape *s = &m->shape;
  const size_t N = (size_t)steps * batch;
  memset(b, 0, sizeof *b);
  b->steps = steps;
  b->batch = batch;
  if (s->kind == LSTMD_MODEL_TEXT) {
    b->ids = malloc(N * sizeof(int32_t));
    b->targets = malloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) {
      b->ids[i] = (int32_t)((unsigned)(selftest_uniform(&gm_seed, 1.0) * 1e6 + 1e6) % (unsigned)s->vocab);
      b->targets[i] = (int32_t)((unsigned)(selftest_uniform(&gm_seed, 1.0) * 1e6 + 1e6) % (unsigned)s->vocab);
    }
  } else {
    b->width = s->width;
    b->horizon = s->horizon;
    b->x = selftest_rand_floats(&gm_seed, N * s->width, 1.0, NULL);
    b->y = selftest_rand_floats(&gm_seed, N * s->horizon, 1.0, NULL);
  }
}

void gm_free_batch(struct lstmd_batch *b) {
  free(b->ids);
  free(b->targets);
  free(b->x);
  free(b->y);
}

double gm_targets_of(const struct lstmd_model *m, int steps, int batch) {
  return (double)steps * batch * (m->shape.kind == LSTMD_MODEL_TEXT ? 1 : m->shape.horizon);
}

void gm_check_rel(const char *what, const float *got, const float *ref, size_t n, double tol) {
  double e = selftest_rel_err(got, ref, n);
  char line[256];
  snprintf(line, sizeof line, "%.160s (rel %.2e < %.0e)", what, e, tol);
  lstmd_check_true(line, e < tol);
}

const char *gm_dtype_name(int dt) { return dt == LSTMD_DT_F16 ? "fp16" : dt == LSTMD_DT_BF16 ? "bf16" : "fp32"; }

/* ---- the engines (engine.h: the CPU engine with device -1, the GPU engine with 0) ---- */

struct lstmd_engine *gm_make_engine(struct lstmd_model *m, int device, int precision,
                                        int carry) {
  const struct lstmd_engine_config c = {.seq_len = T, .batch = B, .carry_state = carry,
                                        .seed = 3, .bucket_mb = 4.0, .comm_timeout_s = 60.0,
                                        .threads = 1, .precision = precision,
                                        .gpu_device = device};
  struct lstmd_engine *e = NULL;
  return lstmd_engine_create(device >= 0 ? LSTMD_ENGINE_GPU : LSTMD_ENGINE_CPU, m, &c, NULL, &e)
             ? NULL : e;
}

const struct lstmd_batch *gm_next_batch(void *ctx, int *reset) {
  struct gm_batch_feed *f = ctx;
  *reset = 0;
  return &f->batches[f->next++ % f->n];
}

/* `steps` optimizer steps of `accum` windows from `batches` (cycled); losses[] per step. Every
 * step is a logged one (the engine reads its loss and optimizer state) unless `quiet`: then only
 * the last, whose loss is the sum over all (engine.h), in losses[steps - 1]. */
int gm_train_steps(struct lstmd_engine *e, struct lstmd_optim *o, struct lstmd_model *m,
                       const struct lstmd_batch *batches, int n_batches, int steps, int accum,
                       double *losses, int quiet) {
  const double targets = gm_targets_of(m, T, B) * accum;
  struct gm_batch_feed feed = {batches, n_batches, 0};
  for (int s = 0; s < steps; s++) {
    const int report = !quiet || s == steps - 1;
    const struct lstmd_step_input in = {gm_next_batch, &feed, accum, (uint64_t)s * accum,
                                        (float)(1.0 / targets), report};
    struct lstmd_step_result out;
    struct lstmd_optim_outcome outcome;
    LSTMD_TRY(e->ops->step(e, &in, &out));
    if (losses) losses[s] = out.loss_sum / targets;
    LSTMD_TRY(e->ops->optim_step(e, o, report, &outcome));
  }
  return LSTMD_OK;
}

int gm_train(struct lstmd_engine *e, struct lstmd_optim *o, struct lstmd_model *m,
                 const struct lstmd_batch *batches, int n_batches, int steps, int accum,
                 double *losses) {
  return gm_train_steps(e, o, m, batches, n_batches, steps, accum, losses, 0);
}
