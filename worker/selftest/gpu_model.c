/* gpu_model.c (selftest group "model") — the GPU backend against the CPU backend (the reference), on the same
 * weights and batches: forward loss (training and inference mode) and every gradient tensor
 * (fp32 with TF32 off: relative error < 1e-4; bf16 and fp16: < 2e-2), carried state across
 * windows (also 16-bit with L·B·H odd, where c must not sit 2 bytes after h; and an exact
 * set/get round trip of the state there), several training steps with gradient accumulation (SGD and AdamW), fp16 loss scaling
 * with an overflow forced by a huge scale, a checkpoint that goes CPU → GPU → CPU (bit for bit
 * before any GPU step, then against the CPU-only run), and the
 * validation loss computed on the GPU (inference mode) against the CPU's, pruning through the
 * engine's prune op against the host path, and distillation (a teacher on the device) against
 * the CPU engine's; gradients and carried state of layer-normalised models (lstm_ln_cuda.h).
 * Run by `lstmd selftest --gpu` (gpu_selftest.c) on device 0. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/device_cuda.h"
#include "kernels/cuda/lstm_cudnn.h"
#include "kernels/cuda/model_cuda.h"
#include "kernels/status.h"
#include "worker/io/checkpoint.h"
#include "worker/engine/engine.h"
#include "worker/engine/engine_gpu.h"
#include "worker/data/dataset.h"
#include "worker/model/infer.h"
#include "worker/data/prepare.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"
#include "worker/model/prune.h"
#include "worker/train/train_config.h"
#include "worker/selftest/selftest.h"

enum { T = 7, B = 5 };
static unsigned long long g_seed = 77;

/* ---- fixtures ---- */

/* 1: the models below are layer-normalised (model.layer_norm), their gains and shifts drawn
 * around 1 and 0 so that a gain mistaken for 1 shows. */
static int g_layer_norm;

static struct lstmd_model *make_model(int text, int hidden, int layers, uint64_t seed) {
  struct lstmd_model_shape s = {.kind = text ? LSTMD_MODEL_TEXT : LSTMD_MODEL_SERIES,
                                .vocab = 11, .embed = 6, .width = 3, .horizon = 2,
                                .hidden = hidden, .layers = layers, .layer_norm = g_layer_norm};
  if (!text) s.vocab = s.embed = 0;
  else s.width = s.horizon = 0;
  struct lstmd_model *m = NULL;
  lstmd_model_create(&s, &m);
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, seed, 1);
  lstmd_model_init_params(m, &rng);
  for (int t = 0; g_layer_norm && t < m->n_tensors; t++) {
    const struct lstmd_tensor *x = &m->tensors[t];
    if (strncmp(x->name, "lstm.ln_", 8)) continue;
    const int gain = strstr(x->name, "_weight_") != NULL;
    for (size_t i = 0; i < x->count; i++)
      m->params[x->offset + i] = (float)(gain + selftest_uniform(&g_seed, gain ? 0.3 : 0.2));
  }
  return m;
}

static const char *kind_name(int text) {
  return text ? (g_layer_norm ? "text LN" : "text") : (g_layer_norm ? "series LN" : "series");
}

static struct lstmd_model *clone_model(const struct lstmd_model *m) {
  struct lstmd_model *c = NULL;
  lstmd_model_create(&m->shape, &c);
  memcpy(c->params, m->params, m->n_params * sizeof(float));
  return c;
}

/* A batch of T×B (text: ids/targets < V; series: rows of width W and K targets). */
static void fill_batch(struct lstmd_batch *b, const struct lstmd_model *m, int steps, int batch) {
  const struct lstmd_model_shape *s = &m->shape;
  const size_t N = (size_t)steps * batch;
  memset(b, 0, sizeof *b);
  b->steps = steps;
  b->batch = batch;
  if (s->kind == LSTMD_MODEL_TEXT) {
    b->ids = malloc(N * sizeof(int32_t));
    b->targets = malloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) {
      b->ids[i] = (int32_t)((unsigned)(selftest_uniform(&g_seed, 1.0) * 1e6 + 1e6) % (unsigned)s->vocab);
      b->targets[i] = (int32_t)((unsigned)(selftest_uniform(&g_seed, 1.0) * 1e6 + 1e6) % (unsigned)s->vocab);
    }
  } else {
    b->width = s->width;
    b->horizon = s->horizon;
    b->x = selftest_rand_floats(&g_seed, N * s->width, 1.0, NULL);
    b->y = selftest_rand_floats(&g_seed, N * s->horizon, 1.0, NULL);
  }
}

static void free_batch(struct lstmd_batch *b) {
  free(b->ids);
  free(b->targets);
  free(b->x);
  free(b->y);
}

static double targets_of(const struct lstmd_model *m, int steps, int batch) {
  return (double)steps * batch * (m->shape.kind == LSTMD_MODEL_TEXT ? 1 : m->shape.horizon);
}

static void check_rel(const char *what, const float *got, const float *ref, size_t n, double tol) {
  double e = selftest_rel_err(got, ref, n);
  char line[256];
  snprintf(line, sizeof line, "%.160s (rel %.2e < %.0e)", what, e, tol);
  lstmd_check_true(line, e < tol);
}

/* ---- the GPU model alone (kernels/cuda/model_cuda) ---- */

struct gpu_fixture {
  struct lstmd_cuda_model *cm;
  cudaStream_t stream;
  float *params, *grads;
  double *loss;
};

static int gpu_fixture_open(struct gpu_fixture *f, const struct lstmd_model *m, int dtype, int algo) {
  memset(f, 0, sizeof *f);
  cudaStreamCreate(&f->stream);
  struct lstmd_cuda_model_config c = {.steps = T, .batch = B, .dtype = dtype, .allow_tf32 = 0,
                                      .dropout = 0.0f, .seed = 1, .algo = algo};
  lstmd_gpu_model_layout(m, &c.layout);
  int rc = lstmd_cuda_model_create(&c, f->stream, &f->cm);
  if (rc) return rc;
  cudaMalloc((void **)&f->params, m->n_params * sizeof(float));
  cudaMalloc((void **)&f->grads, m->n_params * sizeof(float));
  cudaMalloc((void **)&f->loss, sizeof(double));
  cudaMemcpy(f->params, m->params, m->n_params * sizeof(float), cudaMemcpyHostToDevice);
  return lstmd_cuda_model_load_weights(f->cm, f->params);
}

static void gpu_fixture_close(struct gpu_fixture *f) {
  lstmd_cuda_model_destroy(f->cm);
  cudaFree(f->params);
  cudaFree(f->grads);
  cudaFree(f->loss);
  cudaStreamDestroy(f->stream);
}

static void gpu_inputs(struct gpu_fixture *f, const struct lstmd_model *m, const struct lstmd_batch *b) {
  struct lstmd_cuda_inputs *in = lstmd_cuda_model_inputs(f->cm);
  const size_t N = (size_t)T * B;
  if (m->shape.kind == LSTMD_MODEL_TEXT) {
    cudaMemcpy(in->ids, b->ids, N * sizeof(int32_t), cudaMemcpyHostToDevice);
    cudaMemcpy(in->targets, b->targets, N * sizeof(int32_t), cudaMemcpyHostToDevice);
  } else {
    cudaMemcpy(in->x, b->x, N * m->shape.width * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(in->y, b->y, N * m->shape.horizon * sizeof(float), cudaMemcpyHostToDevice);
  }
}

/* Loss and gradients of one window on the GPU model (grads: host [n_params]). */
static double gpu_step(struct gpu_fixture *f, const struct lstmd_model *m, float grad_scale,
                       int training, int carry, float *grads) {
  double loss = 0.0;
  cudaMemset(f->loss, 0, sizeof(double));
  cudaMemset(f->grads, 0, m->n_params * sizeof(float));
  lstmd_cuda_model_zero_lstm_grads(f->cm);
  int rc = lstmd_cuda_model_forward(f->cm, f->params, grad_scale, training, carry, f->loss);
  if (!rc && grad_scale != 0.0f)
    rc = lstmd_cuda_model_backward(f->cm, f->params, f->grads, LSTMD_FLUSH_SET, NULL, NULL);
  cudaStreamSynchronize(f->stream);
  if (rc) return NAN;
  cudaMemcpy(&loss, f->loss, sizeof loss, cudaMemcpyDeviceToHost);
  if (grads) cudaMemcpy(grads, f->grads, m->n_params * sizeof(float), cudaMemcpyDeviceToHost);
  return loss;
}

/* CPU reference: loss and gradients of one window (state carried in ws when carry). */
static double cpu_step(struct lstmd_model *m, struct lstmd_workspace *ws, const struct lstmd_batch *b,
                       float grad_scale, int carry) {
  lstmd_batch_slice(b, 0, lstmd_workspace_batch(ws));
  memset(m->grads, 0, m->n_params * sizeof(float));
  return lstmd_model_step(m, ws, grad_scale, NULL, carry);
}

static const char *dtype_name(int dt) { return dt == LSTMD_DT_F16 ? "fp16" : dt == LSTMD_DT_BF16 ? "bf16" : "fp32"; }

static void test_gradients(int text, int dtype, int algo) {
  struct lstmd_model *m = make_model(text, 16, 2, 5 + text);
  struct lstmd_batch b;
  fill_batch(&b, m, T, B);
  struct lstmd_workspace *ws = NULL;
  lstmd_workspace_create(m, T, B, 0.0f, &ws);
  const float gs = (float)(1.0 / targets_of(m, T, B));
  const double cpu_loss = cpu_step(m, ws, &b, gs, 0);
  struct gpu_fixture f;
  char what[160];
  int rc = gpu_fixture_open(&f, m, dtype, algo);
  snprintf(what, sizeof what, "%s %s algo %s: GPU model built", kind_name(text),
           dtype_name(dtype), algo < 0 ? "auto" : lstmd_rnn_algo_name(algo));
  if (rc == LSTMD_EUNSUPPORTED && algo > 0) {
    lstmd_check_skip(what, "cuDNN does not support it here");
    goto done;
  }
  lstmd_check_true(what, rc == 0);
  if (rc) goto done;
  gpu_inputs(&f, m, &b);
  float *g = malloc(m->n_params * sizeof(float));
  const double tol = dtype == LSTMD_DT_F32 ? 1e-4 : 2e-2;
  const double gpu_loss = gpu_step(&f, m, gs, 1, 0, g);
  snprintf(what, sizeof what, "  loss %.6f vs CPU %.6f", gpu_loss, cpu_loss);
  lstmd_check_true(what, fabs(gpu_loss - cpu_loss) <= tol * fabs(cpu_loss));
  for (int i = 0; i < m->n_tensors; i++) {
    const struct lstmd_tensor *t = &m->tensors[i];
    snprintf(what, sizeof what, "  grad %s", t->name);
    check_rel(what, g + t->offset, m->grads + t->offset, t->count, tol);
  }
  const double infer = gpu_step(&f, m, 0.0f, 0, 0, NULL);
  snprintf(what, sizeof what, "  inference-mode loss %.6f", infer);
  lstmd_check_true(what, fabs(infer - cpu_loss) <= tol * fabs(cpu_loss));
  if (dtype == LSTMD_DT_F32 && algo < 0) { /* REFERENCE.md §1.6: is NULL accepted? */
    lstmd_cuda_model_null_seq_lengths(f.cm, 1);
    const double null_loss = gpu_step(&f, m, gs, 1, 0, NULL);
    printf("  NULL devSeqLengths: %s (loss %.6f)\n",
           isfinite(null_loss) ? "accepted" : "rejected (the device copy stays in use)", null_loss);
    lstmd_cuda_model_null_seq_lengths(f.cm, 0);
    cudaGetLastError();
  }
  free(g);
done:
  gpu_fixture_close(&f);
  lstmd_workspace_destroy(ws);
  free_batch(&b);
  lstmd_model_destroy(m);
}

/* Two consecutive windows with the state carried: loss, gradients and final state. With 16-bit
 * data and L·B·H odd, h and c of a state buffer must each be aligned (model_cuda.c, 3.): then
 * also an exact set/get round trip of values every type holds exactly (k/8). */
static void test_carried_state(int dtype, int hidden, int layers) {
  struct lstmd_model *m = make_model(1, hidden, layers, 9);
  struct lstmd_batch b1, b2;
  fill_batch(&b1, m, T, B);
  fill_batch(&b2, m, T, B);
  struct lstmd_workspace *ws = NULL;
  lstmd_workspace_create(m, T, B, 0.0f, &ws);
  const float gs = (float)(1.0 / targets_of(m, T, B));
  const double tol = dtype == LSTMD_DT_F32 ? 1e-4 : 2e-2;
  char what[160];
  struct gpu_fixture f;
  snprintf(what, sizeof what, "carried state %s%s, L·B·H = %d·%d·%d: GPU model built",
           g_layer_norm ? "LN " : "", dtype_name(dtype),
           layers, B, hidden);
  if (gpu_fixture_open(&f, m, dtype, LSTMD_RNN_STANDARD)) {
    lstmd_check_true(what, 0);
    return;
  }
  lstmd_check_true(what, 1);
  cpu_step(m, ws, &b1, gs, 1);
  const double cpu_loss = cpu_step(m, ws, &b2, gs, 1);
  gpu_inputs(&f, m, &b1);
  gpu_step(&f, m, gs, 1, 1, NULL);
  gpu_inputs(&f, m, &b2);
  float *g = malloc(m->n_params * sizeof(float));
  const double gpu_loss = gpu_step(&f, m, gs, 1, 1, g);
  lstmd_check_true("  second window's loss", fabs(gpu_loss - cpu_loss) <= tol * cpu_loss);
  check_rel("  second window's gradients", g, m->grads, m->n_params, tol);
  const size_t S = (size_t)m->shape.layers * B * m->shape.hidden;
  float *h = malloc(S * sizeof(float)), *c = malloc(S * sizeof(float));
  float *hr = malloc(S * sizeof(float)), *cr = malloc(S * sizeof(float));
  lstmd_cuda_model_get_state(f.cm, h, c);
  lstmd_workspace_get_state(ws, hr, cr, B, 0);
  check_rel("  h after two windows", h, hr, S, tol);
  check_rel("  c after two windows", c, cr, S, tol);
  for (size_t i = 0; i < S; i++) {
    hr[i] = (float)((int)(i % 17) - 8) / 8.0f;
    cr[i] = (float)((int)(i % 13) - 6) / 8.0f;
  }
  int rc = lstmd_cuda_model_set_state(f.cm, hr, cr);
  if (!rc) rc = lstmd_cuda_model_get_state(f.cm, h, c);
  lstmd_check_true("  state set then got back exactly",
             rc == 0 && !memcmp(h, hr, S * sizeof(float)) && !memcmp(c, cr, S * sizeof(float)));
  free(g);
  free(h);
  free(c);
  free(hr);
  free(cr);
  gpu_fixture_close(&f);
  lstmd_workspace_destroy(ws);
  free_batch(&b1);
  free_batch(&b2);
  lstmd_model_destroy(m);
}

/* ---- the engines (engine.h: the CPU engine with device -1, the GPU engine with 0) ---- */

static struct lstmd_engine *make_engine(struct lstmd_model *m, int device, int precision,
                                        int carry) {
  const struct lstmd_engine_config c = {.seq_len = T, .batch = B, .carry_state = carry,
                                        .seed = 3, .bucket_mb = 4.0, .comm_timeout_s = 60.0,
                                        .threads = 1, .precision = precision,
                                        .gpu_device = device};
  struct lstmd_engine *e = NULL;
  return lstmd_engine_create(device >= 0 ? LSTMD_ENGINE_GPU : LSTMD_ENGINE_CPU, m, &c, NULL, &e)
             ? NULL : e;
}

/* The window source of the steps below: `batches` cycled, never a state reset. */
struct batch_feed {
  const struct lstmd_batch *batches;
  int n, next;
};
static const struct lstmd_batch *next_batch(void *ctx, int *reset) {
  struct batch_feed *f = ctx;
  *reset = 0;
  return &f->batches[f->next++ % f->n];
}

/* `steps` optimizer steps of `accum` windows from `batches` (cycled); losses[] per step. Every
 * step is a logged one (the engine reads its loss and optimizer state) unless `quiet`: then only
 * the last, whose loss is the sum over all (engine.h), in losses[steps - 1]. */
static int train_steps(struct lstmd_engine *e, struct lstmd_optim *o, struct lstmd_model *m,
                       const struct lstmd_batch *batches, int n_batches, int steps, int accum,
                       double *losses, int quiet) {
  const double targets = targets_of(m, T, B) * accum;
  struct batch_feed feed = {batches, n_batches, 0};
  for (int s = 0; s < steps; s++) {
    const int report = !quiet || s == steps - 1;
    const struct lstmd_step_input in = {next_batch, &feed, accum, (uint64_t)s * accum,
                                        (float)(1.0 / targets), report};
    struct lstmd_step_result out;
    struct lstmd_optim_outcome outcome;
    LSTMD_TRY(e->ops->step(e, &in, &out));
    if (losses) losses[s] = out.loss_sum / targets;
    LSTMD_TRY(e->ops->optim_step(e, o, report, &outcome));
  }
  return LSTMD_OK;
}

static int train(struct lstmd_engine *e, struct lstmd_optim *o, struct lstmd_model *m,
                 const struct lstmd_batch *batches, int n_batches, int steps, int accum,
                 double *losses) {
  return train_steps(e, o, m, batches, n_batches, steps, accum, losses, 0);
}

static void test_training(int algo, int precision, const char *name) {
  enum { kSteps = 5, kAccum = 2, kBatches = 3 };
  struct lstmd_model *cpu = make_model(1, 16, 2, 21), *gpu = clone_model(cpu);
  float *p0 = malloc(cpu->n_params * sizeof(float));
  memcpy(p0, cpu->params, cpu->n_params * sizeof(float));
  struct lstmd_batch b[kBatches];
  for (int i = 0; i < kBatches; i++) fill_batch(&b[i], cpu, T, B);
  /* No clip: it would rescale both gradients to the same norm and hide a uniform scale error
   * (a loss scale left in, a wrong accumulation divisor). */
  struct lstmd_optim_config oc = {.algo = algo, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                                  .eps = 1e-8f, .momentum = 0.9f, .clip_norm = 0.0f,
                                  .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = kSteps};
  struct lstmd_optim *oc_cpu = NULL, *oc_gpu = NULL;
  lstmd_optim_create(&oc, cpu->n_params, &oc_cpu);
  lstmd_optim_create(&oc, cpu->n_params, &oc_gpu);
  struct lstmd_engine *dc = make_engine(cpu, -1, LSTMD_PRECISION_FP32, 0);
  struct lstmd_engine *dg = make_engine(gpu, 0, precision, 0);
  char what[160];
  snprintf(what, sizeof what, "%s: GPU engine built", name);
  lstmd_check_true(what, dg != NULL);
  double lc[kSteps], lg[kSteps];
  int rc = dg ? dg->ops->start(dg, oc_gpu, NULL) : LSTMD_EINVAL;
  if (!rc) rc = train(dc, oc_cpu, cpu, b, kBatches, kSteps, kAccum, lc);
  if (!rc) rc = train(dg, oc_gpu, gpu, b, kBatches, kSteps, kAccum, lg);
  if (!rc) rc = dg->ops->sync_host(dg, oc_gpu, NULL);
  snprintf(what, sizeof what, "%s: %d steps of %d micro-batches ran", name, kSteps, kAccum);
  lstmd_check_true(what, rc == 0);
  if (!rc) {
    const int fp32 = precision == LSTMD_PRECISION_FP32;
    double worst = 0.0;
    for (int s = 0; s < kSteps; s++) worst = fmax(worst, fabs(lg[s] - lc[s]) / lc[s]);
    snprintf(what, sizeof what, "%s: losses per step (rel %.1e)", name, worst);
    lstmd_check_true(what, worst < (fp32 ? 1e-4 : 2e-2));
    float *dcpu = malloc(cpu->n_params * sizeof(float)), *dgpu = malloc(cpu->n_params * sizeof(float));
    for (size_t i = 0; i < cpu->n_params; i++) {
      dcpu[i] = cpu->params[i] - p0[i];
      dgpu[i] = gpu->params[i] - p0[i];
    }
    /* SGD is linear in the gradients; Adam normalises them, so near-zero gradients can move a
     * little differently: a looser bound. */
    const double tol = !fp32 ? 5e-2 : algo == LSTMD_OPTIM_SGD ? 1e-3 : 2e-2;
    snprintf(what, sizeof what, "%s: parameter updates", name);
    check_rel(what, dgpu, dcpu, cpu->n_params, tol);
    snprintf(what, sizeof what, "%s: optimizer step count", name);
    lstmd_check_true(what, oc_gpu->step == oc_cpu->step);
    /* The same steps with the host reading nothing until the last (no wait inside them): the
     * last step's loss is the sum of all, and the updates are the same. */
    struct lstmd_model *quiet = clone_model(cpu);
    memcpy(quiet->params, p0, cpu->n_params * sizeof(float));
    struct lstmd_optim *oq = NULL;
    lstmd_optim_create(&oc, cpu->n_params, &oq);
    struct lstmd_engine *dq = make_engine(quiet, 0, precision, 0);
    double lq[kSteps], sum_c = 0.0;
    int rq = dq ? dq->ops->start(dq, oq, NULL) : LSTMD_EINVAL;
    if (!rq) rq = train_steps(dq, oq, quiet, b, kBatches, kSteps, kAccum, lq, 1);
    if (!rq) rq = dq->ops->sync_host(dq, oq, NULL);
    for (int s = 0; s < kSteps; s++) sum_c += lc[s];
    snprintf(what, sizeof what, "%s: unlogged steps: the last loss %.6g is the sum %.6g, %ld steps",
             name, rq ? 0.0 : lq[kSteps - 1], sum_c, oq->step);
    lstmd_check_true(what, !rq && fabs(lq[kSteps - 1] - sum_c) / sum_c < (fp32 ? 1e-4 : 2e-2) &&
                         lq[0] == 0.0 && oq->step == oc_cpu->step);
    for (size_t i = 0; !rq && i < cpu->n_params; i++) dgpu[i] = quiet->params[i] - p0[i];
    snprintf(what, sizeof what, "%s: parameter updates of unlogged steps", name);
    if (!rq) check_rel(what, dgpu, dcpu, cpu->n_params, tol);
    lstmd_engine_destroy(dq);
    lstmd_optim_destroy(oq);
    lstmd_model_destroy(quiet);
    free(dcpu);
    free(dgpu);
  }
  lstmd_engine_destroy(dc);
  lstmd_engine_destroy(dg);
  lstmd_optim_destroy(oc_cpu);
  lstmd_optim_destroy(oc_gpu);
  for (int i = 0; i < kBatches; i++) free_batch(&b[i]);
  free(p0);
  lstmd_model_destroy(cpu);
  lstmd_model_destroy(gpu);
}

/* Pruning on the GPU engine (its prune op: masks on the device, recomputed on the host at a
 * pruning step) against the trainer's host path on the CPU engine: 5 SGD steps pruning to
 * 43.75 % and 50 % at steps 2 and 3, the GPU's steps unlogged but the last (no host wait). Masks
 * are a function of weights that differ by rounding between the backends, so they must agree on
 * all but a few near-ties; the GPU's pruned weights must be exactly zero, its masks exactly at
 * the schedule's sparsity, and the five steps' summed loss (which needs the masked weights in
 * cuDNN's weight space) the CPU's. Then a second GPU engine, as a resumed run would, starts from
 * the pruned weights with those masks and trains a step: the pruned weights stay zero. */
static void test_pruning(void) {
  enum { kSteps = 5 };
  struct lstmd_model *cpu = make_model(1, 16, 2, 41), *gpu = clone_model(cpu);
  struct lstmd_batch b[2];
  for (int i = 0; i < 2; i++) fill_batch(&b[i], cpu, T, B);
  struct lstmd_optim_config oc = {.algo = LSTMD_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f,
                                  .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = 2 * kSteps};
  const struct lstmd_prune_config pc = {.target_sparsity = 0.5f, .begin_step = 1, .end_step = 3,
                                        .frequency = 1, .power = 3.0f};
  struct lstmd_optim *o_cpu = NULL, *o_gpu = NULL, *o_res = NULL;
  struct lstmd_prune *p_cpu = NULL, *p_gpu = NULL;
  lstmd_optim_create(&oc, cpu->n_params, &o_cpu);
  lstmd_optim_create(&oc, cpu->n_params, &o_gpu);
  lstmd_optim_create(&oc, cpu->n_params, &o_res);
  lstmd_prune_create(&pc, cpu, &p_cpu);
  lstmd_prune_create(&pc, gpu, &p_gpu);
  struct lstmd_engine *dc = make_engine(cpu, -1, LSTMD_PRECISION_FP32, 0);
  struct lstmd_engine *dg = make_engine(gpu, 0, LSTMD_PRECISION_FP32, 0);
  int rc = dg && dc && p_cpu && p_gpu && dg->ops->prune ? dg->ops->start(dg, o_gpu, NULL) : LSTMD_EINVAL;
  const double targets = targets_of(cpu, T, B);
  double cpu_sum = 0.0, gpu_sum = 0.0;
  for (int s = 1; !rc && s <= kSteps; s++) {
    double loss = 0.0;
    rc = train(dc, o_cpu, cpu, b + (s - 1) % 2, 1, 1, 1, &loss);
    cpu_sum += loss;
    if (!rc) lstmd_prune_after_step(p_cpu, cpu, cpu->params, s);
    struct batch_feed feed = {b + (s - 1) % 2, 1, 0};
    const int report = s == kSteps; /* the loss of the unlogged steps comes with this one */
    const struct lstmd_step_input in = {next_batch, &feed, 1, (uint64_t)s, (float)(1.0 / targets), report};
    struct lstmd_step_result out;
    struct lstmd_optim_outcome outcome;
    int recomputed = 0;
    if (!rc) rc = dg->ops->step(dg, &in, &out);
    if (!rc) gpu_sum += out.loss_sum / targets;
    if (!rc) rc = dg->ops->optim_step(dg, o_gpu, report, &outcome);
    if (!rc) rc = dg->ops->prune(dg, p_gpu, s, &recomputed);
    if (!rc && recomputed != lstmd_prune_due(&pc, s)) rc = LSTMD_EINVAL;
  }
  if (!rc) rc = dg->ops->sync_host(dg, o_gpu, NULL);
  lstmd_check_true("pruning: 5 steps on the GPU engine with its prune op", rc == 0);
  if (!rc) {
    size_t differ = 0, total = 0, nonzero_pruned = 0;
    double worst_sparsity = 0.0;
    for (int i = 0; i < p_gpu->n; i++) {
      const struct lstmd_tensor *t = &gpu->tensors[p_gpu->tensor[i]];
      for (size_t j = 0; j < t->count; j++) {
        differ += p_gpu->mask[i][j] != p_cpu->mask[i][j];
        nonzero_pruned += !p_gpu->mask[i][j] && gpu->params[t->offset + j] != 0.0f;
      }
      total += t->count;
      worst_sparsity = fmax(worst_sparsity, fabs(lstmd_prune_mask_sparsity(p_gpu, gpu, i) - 0.5));
    }
    char what[200];
    snprintf(what, sizeof what, "pruning: the GPU's pruned weights are exactly zero (%zu are not)",
             nonzero_pruned);
    lstmd_check_true(what, nonzero_pruned == 0);
    snprintf(what, sizeof what, "pruning: masks at 50 %% (worst off by %.4f)", worst_sparsity);
    lstmd_check_true(what, worst_sparsity < 0.01);
    snprintf(what, sizeof what, "pruning: GPU and CPU masks agree (%zu of %zu differ, < 1 %%)",
             differ, total);
    lstmd_check_true(what, differ * 100 < total);
    const double rel = fabs(gpu_sum - cpu_sum) / cpu_sum;
    snprintf(what, sizeof what, "pruning: the 5 steps' loss %.6f vs CPU %.6f (rel %.1e < 1e-3)",
             gpu_sum, cpu_sum, rel);
    lstmd_check_true(what, rel < 1e-3);
    /* a resumed run: pruned weights and masks from the start, not yet uploaded */
    struct lstmd_engine *dr = make_engine(gpu, 0, LSTMD_PRECISION_FP32, 0);
    int recomputed = 0;
    int rr = dr ? dr->ops->start(dr, o_res, NULL) : LSTMD_EINVAL;
    if (!rr) rr = train(dr, o_res, gpu, b, 2, 1, 1, NULL);
    if (!rr) rr = dr->ops->prune(dr, p_gpu, kSteps + 1, &recomputed);
    if (!rr) rr = dr->ops->sync_host(dr, o_res, NULL);
    nonzero_pruned = 0;
    for (int i = 0; !rr && i < p_gpu->n; i++) {
      const struct lstmd_tensor *t = &gpu->tensors[p_gpu->tensor[i]];
      for (size_t j = 0; j < t->count; j++)
        nonzero_pruned += !p_gpu->mask[i][j] && gpu->params[t->offset + j] != 0.0f;
    }
    snprintf(what, sizeof what, "pruning: a resumed engine keeps the pruned weights zero (%zu are not)",
             nonzero_pruned);
    lstmd_check_true(what, !rr && !recomputed && nonzero_pruned == 0);
    lstmd_engine_destroy(dr);
  }
  lstmd_engine_destroy(dc);
  lstmd_engine_destroy(dg);
  lstmd_prune_destroy(p_cpu);
  lstmd_prune_destroy(p_gpu);
  lstmd_optim_destroy(o_cpu);
  lstmd_optim_destroy(o_gpu);
  lstmd_optim_destroy(o_res);
  for (int i = 0; i < 2; i++) free_batch(&b[i]);
  lstmd_model_destroy(cpu);
  lstmd_model_destroy(gpu);
}

/* Distillation on the GPU engine (a teacher model on the device, kd losses in CUDA) against the
 * CPU engine's (kd_cpu.c): 3 steps from an H16 student and an H24 teacher of 2 layers, T = 2,
 * alpha 0.5: losses per step and the updates, with AdamW, with SGD (linear in the gradients, so a
 * uniform scale error shows) and carried state (the teacher must still start every window from
 * zero), and fp16 (the loss scale through the kd kernels). */
static void test_distill(int text, int algo, int precision, int carry) {
  enum { kSteps = 3 };
  struct lstmd_model *cpu = make_model(text, 16, 2, 51), *gpu = clone_model(cpu);
  struct lstmd_model *teacher = make_model(text, 24, 2, 52);
  float *p0 = malloc(cpu->n_params * sizeof(float));
  memcpy(p0, cpu->params, cpu->n_params * sizeof(float));
  struct lstmd_batch b[2];
  for (int i = 0; i < 2; i++) fill_batch(&b[i], cpu, T, B);
  struct lstmd_optim_config oc = {.algo = algo, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                                  .eps = 1e-8f, .momentum = 0.9f,
                                  .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = kSteps};
  struct lstmd_optim *o_cpu = NULL, *o_gpu = NULL;
  lstmd_optim_create(&oc, cpu->n_params, &o_cpu);
  lstmd_optim_create(&oc, cpu->n_params, &o_gpu);
  struct lstmd_engine_config c = {.seq_len = T, .batch = B, .carry_state = carry, .seed = 3,
                                  .bucket_mb = 4.0, .comm_timeout_s = 60.0, .threads = 1,
                                  .precision = LSTMD_PRECISION_FP32, .teacher = teacher,
                                  .kd_temperature = 2.0f, .kd_alpha = 0.5f};
  struct lstmd_engine_config cg = c;
  cg.precision = precision;
  const int fp32 = precision == LSTMD_PRECISION_FP32;
  struct lstmd_engine *dc = NULL, *dg = NULL;
  int rc = lstmd_engine_create(LSTMD_ENGINE_CPU, cpu, &c, NULL, &dc);
  if (!rc) rc = lstmd_engine_create(LSTMD_ENGINE_GPU, gpu, &cg, NULL, &dg);
  if (!rc) rc = dg->ops->start(dg, o_gpu, NULL);
  double lc[kSteps], lg[kSteps];
  if (!rc) rc = train(dc, o_cpu, cpu, b, 2, kSteps, 1, lc);
  if (!rc) rc = train(dg, o_gpu, gpu, b, 2, kSteps, 1, lg);
  if (!rc) rc = dg->ops->sync_host(dg, o_gpu, NULL);
  char what[200], name[96];
  snprintf(name, sizeof name, "distillation %s %s %s%s", text ? "text" : "series",
           algo == LSTMD_OPTIM_SGD ? "SGD" : "AdamW", fp32 ? "fp32" : "fp16",
           carry ? " carried state" : "");
  snprintf(what, sizeof what, "%s: %d steps on both engines", name, kSteps);
  lstmd_check_true(what, rc == 0);
  if (!rc) {
    double worst = 0.0;
    for (int s = 0; s < kSteps; s++) worst = fmax(worst, fabs(lg[s] - lc[s]) / lc[s]);
    snprintf(what, sizeof what, "%s: losses per step (rel %.1e < %.0e)", name, worst,
             fp32 ? 1e-4 : 2e-2);
    lstmd_check_true(what, worst < (fp32 ? 1e-4 : 2e-2));
    float *dcpu = malloc(cpu->n_params * sizeof(float)), *dgpu = malloc(cpu->n_params * sizeof(float));
    for (size_t i = 0; i < cpu->n_params; i++) {
      dcpu[i] = cpu->params[i] - p0[i];
      dgpu[i] = gpu->params[i] - p0[i];
    }
    /* SGD is linear in the gradients (a uniform scale error shows); Adam normalises them */
    snprintf(what, sizeof what, "%s: parameter updates", name);
    check_rel(what, dgpu, dcpu, cpu->n_params,
              !fp32 ? 5e-2 : algo == LSTMD_OPTIM_SGD ? 1e-3 : 2e-2);
    free(dcpu);
    free(dgpu);
  }
  lstmd_engine_destroy(dc);
  lstmd_engine_destroy(dg);
  lstmd_optim_destroy(o_cpu);
  lstmd_optim_destroy(o_gpu);
  for (int i = 0; i < 2; i++) free_batch(&b[i]);
  free(p0);
  lstmd_model_destroy(cpu);
  lstmd_model_destroy(gpu);
  lstmd_model_destroy(teacher);
}

/* fp16 with the loss scale at its maximum (2^24) on a small batch and a head 8× its usual size:
 * the scaled output gradient (~2^24/35 · 0.9 · |W|, |W| up to 1) exceeds fp16's 65504, so the
 * first steps must be skipped with the scale halved each time, until one applies. */
static void test_loss_scaling(void) {
  struct lstmd_model *m = make_model(1, 64, 1, 31);
  const struct lstmd_tensor *hw = lstmd_model_tensor(m, "head.weight");
  for (size_t i = 0; i < hw->count; i++) m->params[hw->offset + i] *= 8.0f;
  float *p0 = malloc(m->n_params * sizeof(float));
  memcpy(p0, m->params, m->n_params * sizeof(float));
  struct lstmd_batch b;
  fill_batch(&b, m, T, B);
  struct lstmd_optim_config oc = {.algo = LSTMD_OPTIM_SGD, .lr = 0.01f, .clip_norm = 0.0f,
                                  .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = 100};
  struct lstmd_optim *o = NULL;
  lstmd_optim_create(&oc, m->n_params, &o);
  struct lstmd_engine *dp = make_engine(m, 0, LSTMD_PRECISION_FP16, 0);
  struct lstmd_train_progress p = {.loss_scale = 16777216.0};
  int rc = dp ? dp->ops->start(dp, o, &p) : LSTMD_EINVAL;
  lstmd_check_true("fp16: engine with loss scale 2^24", rc == 0 && dp->ops->loss_scale(dp) == 16777216.0);
  if (rc) goto done;
  rc = train(dp, o, m, &b, 1, 1, 1, NULL);
  dp->ops->sync_host(dp, NULL, NULL);
  int same = !memcmp(m->params, p0, m->n_params * sizeof(float));
  lstmd_check_true("fp16 overflow: step skipped, weights untouched, no error", rc == 0 && same && o->step == 0);
  lstmd_check_true("fp16 overflow: scale backed off to 2^23", dp->ops->loss_scale(dp) == 8388608.0);
  int steps = 1;
  while (!rc && o->step == 0 && steps < 40) {
    rc = train(dp, o, m, &b, 1, 1, 1, NULL);
    steps++;
  }
  dp->ops->sync_host(dp, NULL, &p);
  printf("  first applied step after %d overflows, loss scale %g\n", steps - 1, dp->ops->loss_scale(dp));
  lstmd_check_true("fp16: a step applies once the scale fits", rc == 0 && o->step == 1 &&
                                                            memcmp(m->params, p0, m->n_params * sizeof(float)));
  lstmd_check_true("fp16: the scale in the progress record", p.loss_scale == dp->ops->loss_scale(dp));
done:
  lstmd_engine_destroy(dp);
  lstmd_optim_destroy(o);
  free_batch(&b);
  free(p0);
  lstmd_model_destroy(m);
}

/* got == want bit for bit; otherwise how many differ, the first, and the largest difference. */
static int check_bits(const char *what, const float *got, const float *want, size_t n) {
  size_t bad = 0, first = 0;
  double worst = 0.0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof(float))) {
      if (bad++ == 0) first = i;
      const double d = fabs((double)got[i] - want[i]);
      if (!(d <= worst)) worst = d; /* a NaN sticks */
    }
  char line[256];
  if (bad)
    snprintf(line, sizeof line, "%s: %zu of %zu differ (first [%zu] %.9g vs %.9g; max %.3g)", what,
             bad, n, first, got[first], want[first], worst);
  else
    snprintf(line, sizeof line, "%s: bit for bit (%zu values)", what, n);
  lstmd_check_true(line, bad == 0);
  return bad == 0;
}

static void poison(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = NAN;
}

/* The round trip by itself, no step on the GPU: d's device copy (uploaded from the CPU checkpoint
 * into g, og) → host, over NaN-poisoned host buffers → a checkpoint → a fresh CPU model. Each hop
 * moves fp32 bits (cudaMemcpy, an F32→F32 copy of the state, F32 safetensors) and computes
 * nothing, so the parameters, both moments, the step and the carried state must equal the CPU's
 * (m, o, h, c) exactly; a tolerance would hide a dropped tensor, an offset or a 16-bit detour. */
static void check_round_trip_exact(struct lstmd_engine *d, struct lstmd_model *g, struct lstmd_optim *og,
                                   const struct lstmd_train_progress *p, const struct lstmd_model *m,
                                   const struct lstmd_optim *o, const float *h, const float *c,
                                   size_t S, const char *path, const struct lstmd_data_meta *meta) {
  const size_t n = m->n_params;
  struct lstmd_train_progress q = *p;
  q.state_h = malloc(S * sizeof(float));
  q.state_c = malloc(S * sizeof(float));
  poison(g->params, n);
  poison(og->m, n);
  poison(og->v, n);
  poison(q.state_h, S);
  poison(q.state_c, S);
  int rc = d->ops->sync_host(d, og, &q);
  if (!rc) rc = d->ops->gather_state(d, q.state_h, q.state_c);
  lstmd_check_true("round trip CPU -> GPU -> host, no step: copied back", rc == 0);
  if (!rc) {
    check_bits("  GPU -> host: parameters", g->params, m->params, n);
    check_bits("  GPU -> host: exp_avg", og->m, o->m, n);
    check_bits("  GPU -> host: exp_avg_sq", og->v, o->v, n);
    check_bits("  GPU -> host: state h", q.state_h, h, S);
    check_bits("  GPU -> host: state c", q.state_c, c, S);
  }
  /* and through a checkpoint into a fresh CPU model */
  struct lstmd_model *back = NULL;
  struct lstmd_optim *ob = NULL;
  struct lstmd_data_meta mb;
  struct lstmd_train_progress r = {.state_batch = p->state_batch};
  r.state_h = malloc(S * sizeof(float));
  r.state_c = malloc(S * sizeof(float));
  if (!rc) rc = lstmd_checkpoint_save(path, g, og, meta, &q, "{}");
  if (!rc) rc = lstmd_checkpoint_load_model(path, &back, &mb);
  if (!rc) rc = lstmd_optim_create(&og->cfg, back->n_params, &ob);
  if (!rc) rc = lstmd_checkpoint_load_train(path, back, ob, &r, NULL);
  lstmd_check_true("round trip CPU -> GPU -> checkpoint -> CPU, no step: loaded", rc == 0);
  if (!rc) {
    lstmd_check_true("  back on the CPU: same shape and step",
               back->n_params == n && ob->step == o->step && r.step == p->step);
    check_bits("  back on the CPU: parameters", back->params, m->params, n);
    check_bits("  back on the CPU: exp_avg", ob->m, o->m, n);
    check_bits("  back on the CPU: exp_avg_sq", ob->v, o->v, n);
    check_bits("  back on the CPU: state h", r.state_h, h, S);
    check_bits("  back on the CPU: state c", r.state_c, c, S);
  }
  lstmd_model_destroy(back);
  lstmd_optim_destroy(ob);
  free(q.state_h);
  free(q.state_c);
  free(r.state_h);
  free(r.state_c);
  unlink(path);
}

/* 2 steps on the CPU → checkpoint → 2 on the GPU → checkpoint → 2 on the CPU, against 6 on the
 * CPU alone. Stream order, so the carried state travels through the checkpoints too. The trip
 * itself is checked exactly first (check_round_trip_exact); after that the runs differ only by
 * the two GPU steps, so they are held to test_training's fp32 AdamW bounds. */
static void test_checkpoint_round_trip(void) {
  enum { kBatches = 6 };
  char dir[] = "/tmp/lstmd-test-gpu-model-XXXXXX", path[256], path2[256];
  if (!mkdtemp(dir)) return;
  snprintf(path, sizeof path, "%s/ck.safetensors", dir);
  snprintf(path2, sizeof path2, "%s/trip.safetensors", dir);
  struct lstmd_model *ref = make_model(1, 16, 2, 41), *m = clone_model(ref);
  float *p0 = malloc(ref->n_params * sizeof(float));
  memcpy(p0, ref->params, ref->n_params * sizeof(float));
  struct lstmd_batch b[kBatches];
  for (int i = 0; i < kBatches; i++) fill_batch(&b[i], ref, T, B);
  struct lstmd_optim_config oc = {.algo = LSTMD_OPTIM_ADAMW, .lr = 0.003f, .beta1 = 0.9f,
                                  .beta2 = 0.999f, .eps = 1e-8f, .clip_norm = 0.0f, /* no clip */
                                  .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = 6};
  struct lstmd_optim *o_ref = NULL, *o = NULL;
  lstmd_optim_create(&oc, ref->n_params, &o_ref);
  lstmd_optim_create(&oc, ref->n_params, &o);
  struct lstmd_engine *d_ref = make_engine(ref, -1, LSTMD_PRECISION_FP32, 1);
  double loss_ref[6], loss_trip[6];
  int rc = train(d_ref, o_ref, ref, b, kBatches, 6, 1, loss_ref);
  struct lstmd_data_meta meta;
  memset(&meta, 0, sizeof meta);
  meta.info.kind = LSTMD_DATASET_TEXT;
  meta.info.vocab_size = 11;
  for (int k = 0; k < 11; k++) meta.info.vocab[k] = (uint8_t)('a' + k);
  meta.seq_len = T;
  meta.batch = B;
  const size_t S = (size_t)ref->shape.layers * B * ref->shape.hidden;
  struct lstmd_train_progress p = {.state_batch = B};
  p.state_h = calloc(S, sizeof(float));
  p.state_c = calloc(S, sizeof(float));
  float *h1 = malloc(S * sizeof(float)), *c1 = malloc(S * sizeof(float));
  /* CPU: steps 1-2, using batches 0-1 */
  struct lstmd_engine *d1 = make_engine(m, -1, LSTMD_PRECISION_FP32, 1);
  if (!rc) rc = train(d1, o, m, b, 2, 2, 1, loss_trip);
  if (!rc) rc = d1->ops->gather_state(d1, p.state_h, p.state_c);
  memcpy(h1, p.state_h, S * sizeof(float));
  memcpy(c1, p.state_c, S * sizeof(float));
  p.step = 2;
  if (!rc) rc = lstmd_checkpoint_save(path, m, o, &meta, &p, "{}");
  lstmd_engine_destroy(d1);
  /* GPU: steps 3-4 from the CPU checkpoint, batches 2-3 */
  struct lstmd_model *g = NULL;
  struct lstmd_data_meta meta2;
  if (!rc) rc = lstmd_checkpoint_load_model(path, &g, &meta2);
  struct lstmd_optim *og = NULL;
  if (!rc) rc = lstmd_optim_create(&oc, g->n_params, &og);
  if (!rc) rc = lstmd_checkpoint_load_train(path, g, og, &p, NULL);
  struct lstmd_engine *d2 = rc ? NULL : make_engine(g, 0, LSTMD_PRECISION_FP32, 1);
  if (!rc && !d2) rc = LSTMD_ECUDA;
  if (!rc) rc = d2->ops->start(d2, og, &p);
  if (!rc) rc = d2->ops->set_state(d2, p.state_h, p.state_c);
  if (!rc) check_round_trip_exact(d2, g, og, &p, m, o, h1, c1, S, path2, &meta);
  if (!rc) rc = train(d2, og, g, b + 2, 2, 2, 1, loss_trip + 2);
  if (!rc) rc = d2->ops->sync_host(d2, og, &p);
  if (!rc) rc = d2->ops->gather_state(d2, p.state_h, p.state_c);
  p.step = 4;
  if (!rc) rc = lstmd_checkpoint_save(path, g, og, &meta, &p, "{}");
  lstmd_check_true("checkpoint CPU -> GPU: resumed and saved again", rc == 0);
  lstmd_engine_destroy(d2);
  /* CPU: steps 5-6 from the GPU checkpoint, batches 4-5 */
  struct lstmd_model *c = NULL;
  struct lstmd_optim *oc2 = NULL;
  if (!rc) rc = lstmd_checkpoint_load_model(path, &c, &meta2);
  if (!rc) rc = lstmd_optim_create(&oc, c->n_params, &oc2);
  if (!rc) rc = lstmd_checkpoint_load_train(path, c, oc2, &p, NULL);
  struct lstmd_engine *d3 = rc ? NULL : make_engine(c, -1, LSTMD_PRECISION_FP32, 1);
  if (!rc) rc = d3->ops->set_state(d3, p.state_h, p.state_c);
  if (!rc) rc = train(d3, oc2, c, b + 4, 2, 2, 1, loss_trip + 4);
  lstmd_check_true("checkpoint GPU -> CPU: resumed and trained", rc == 0 && oc2->step == 6);
  if (!rc) {
    /* Steps 1-2 ran the same CPU code on the same data: bit for bit. Steps 3-6 differ by the two
     * GPU steps only, the trip being exact: test_training's fp32 bounds (loss 1e-4; AdamW
     * updates 2e-2, which is about Adam normalising near-zero gradients, not the trip). */
    lstmd_check_true("CPU→GPU→CPU vs CPU only: steps 1-2 losses identical",
               loss_trip[0] == loss_ref[0] && loss_trip[1] == loss_ref[1]);
    double worst = 0.0;
    for (int s = 2; s < 6; s++) worst = fmax(worst, fabs(loss_trip[s] - loss_ref[s]) / loss_ref[s]);
    char what[160];
    snprintf(what, sizeof what, "CPU→GPU→CPU vs CPU only: steps 3-6 losses (rel %.1e < 1e-4)", worst);
    lstmd_check_true(what, worst < 1e-4);
    float *dr = malloc(ref->n_params * sizeof(float)), *dc = malloc(ref->n_params * sizeof(float));
    for (size_t i = 0; i < ref->n_params; i++) {
      dr[i] = ref->params[i] - p0[i];
      dc[i] = c->params[i] - p0[i];
    }
    check_rel("CPU→GPU→CPU vs CPU only: parameter updates", dc, dr, ref->n_params, 2e-2);
    free(dr);
    free(dc);
  }
  lstmd_engine_destroy(d3);
  lstmd_engine_destroy(d_ref);
  lstmd_optim_destroy(o_ref);
  lstmd_optim_destroy(o);
  lstmd_optim_destroy(og);
  lstmd_optim_destroy(oc2);
  lstmd_model_destroy(ref);
  lstmd_model_destroy(m);
  lstmd_model_destroy(g);
  lstmd_model_destroy(c);
  for (int i = 0; i < kBatches; i++) free_batch(&b[i]);
  free(p.state_h);
  free(p.state_c);
  free(h1);
  free(c1);
  free(p0);
  unlink(path);
  rmdir(dir);
}

/* Validation loss on the GPU (inference mode, chunks of B with a padded last chunk) against
 * lstmd_evaluate on the CPU, for a text and a series dataset made here. */
static void test_evaluate(int text) {
  char dir[] = "/tmp/lstmd-test-gpu-eval-XXXXXX", in[300], out[300];
  if (!mkdtemp(dir)) return;
  snprintf(in, sizeof in, "%s/input.%s", dir, text ? "txt" : "csv");
  snprintf(out, sizeof out, "%s/data", dir);
  FILE *f = fopen(in, "w");
  if (!text) fprintf(f, "a,b\n");
  for (int i = 0; i < 600; i++) {
    if (text) fprintf(f, "%c", "the quick brown fox jumps over the lazy dog. "[i % 45]);
    else fprintf(f, "%.5f,%.5f\n", sin(i * 0.1), cos(i * 0.37));
  }
  fclose(f);
  int rc = text ? lstmd_prepare_text(in, out, 0.5) : lstmd_prepare_series(in, out, "a", "b", 2, 0.5, 0, LSTMD_MISSING_ERROR);
  struct lstmd_dataset train = {.fd = -1}, val = {.fd = -1};
  if (!rc) rc = lstmd_dataset_open_dir(out, &train, &val, 1);
  struct lstmd_model_shape s = {.kind = text ? LSTMD_MODEL_TEXT : LSTMD_MODEL_SERIES,
                                .hidden = 16, .layers = 2};
  if (text) {
    s.vocab = val.info.vocab_size;
    s.embed = 6;
  } else {
    s.width = val.info.width;
    s.horizon = val.info.horizon;
  }
  struct lstmd_model *m = NULL;
  if (!rc) rc = lstmd_model_create(&s, &m);
  if (!rc) {
    struct lstmd_rng rng;
    lstmd_rng_seed(&rng, 3, 1);
    lstmd_model_init_params(m, &rng);
  }
  double cpu = 0.0, gpu = 0.0;
  uint64_t ct = 0, gt = 0;
  if (!rc) rc = lstmd_evaluate(m, &val, T, 3, &cpu, &ct);
  struct lstmd_engine *dp = rc ? NULL : make_engine(m, 0, LSTMD_PRECISION_FP32, 1);
  if (!rc && dp) rc = dp->ops->start(dp, NULL, NULL);
  double unused_accuracy;
  if (!rc && dp) rc = dp->ops->evaluate(dp, &val, &gpu, &gt, &unused_accuracy);
  char what[160];
  snprintf(what, sizeof what, "%s evaluation on the GPU: %.6f vs CPU %.6f (%llu windows of %d)",
           text ? "text" : "series", gpu, cpu, (unsigned long long)(ct / T), T);
  lstmd_check_true(what, rc == 0 && dp && gt == ct && fabs(gpu - cpu) <= 1e-5 * fabs(cpu));
  lstmd_engine_destroy(dp);
  lstmd_model_destroy(m);
  lstmd_dataset_close(&train);
  lstmd_dataset_close(&val);
  selftest_remove_tree(dir);
}

void lstmd_selftest_gpu_model(void) {
  for (int text = 1; text >= 0; text--) test_gradients(text, LSTMD_DT_F32, -1);
  for (int algo = 0; algo < LSTMD_RNN_ALGO_COUNT; algo++) test_gradients(1, LSTMD_DT_F32, algo);
  test_gradients(1, LSTMD_DT_BF16, -1);
  test_gradients(0, LSTMD_DT_BF16, -1);
  test_gradients(1, LSTMD_DT_F16, -1);
  g_layer_norm = 1; /* the layer-normalised LSTM (lstm_ln_cuda.h): fp32 only */
  test_gradients(1, LSTMD_DT_F32, -1);
  test_gradients(0, LSTMD_DT_F32, -1);
  test_carried_state(LSTMD_DT_F32, 16, 2);
  test_carried_state(LSTMD_DT_F32, 80, 3); /* rows longer than a block, 3 layers' gradients */
  g_layer_norm = 0;
  test_carried_state(LSTMD_DT_F32, 16, 2);
  test_carried_state(LSTMD_DT_BF16, 15, 3); /* L·B·H = 225: odd */
  test_carried_state(LSTMD_DT_F16, 15, 1);  /* 75 */
  test_training(LSTMD_OPTIM_SGD, LSTMD_PRECISION_FP32, "SGD fp32");
  test_training(LSTMD_OPTIM_ADAMW, LSTMD_PRECISION_FP32, "AdamW fp32");
  test_training(LSTMD_OPTIM_SGD, LSTMD_PRECISION_BF16, "SGD bf16");
  test_loss_scaling();
  test_pruning();
  test_distill(1, LSTMD_OPTIM_ADAMW, LSTMD_PRECISION_FP32, 0);
  test_distill(0, LSTMD_OPTIM_ADAMW, LSTMD_PRECISION_FP32, 0);
  test_distill(1, LSTMD_OPTIM_SGD, LSTMD_PRECISION_FP32, 1);
  test_distill(0, LSTMD_OPTIM_SGD, LSTMD_PRECISION_FP32, 1);
  test_distill(1, LSTMD_OPTIM_SGD, LSTMD_PRECISION_FP16, 0);
  test_checkpoint_round_trip();
  test_evaluate(1);
  test_evaluate(0);
}
