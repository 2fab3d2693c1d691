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
 * Run by `lstmd selftest --gpu` (gpu_selftest.c) on device 0. The engine-level checks (pruning,
 * distillation, the checkpoint round trip) are in gpu_model_engine.c, the host-side fixtures in
 * gpu_model_fixtures.c. */
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
#include "gpu_model_fixtures.h"

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

static void test_gradients(int text, int dtype, int algo) {
  struct lstmd_model *m = gm_make_model(text, 16, 2, 5 + text);
  struct lstmd_batch b;
  gm_fill_batch(&b, m, T, B);
  struct lstmd_workspace *ws = NULL;
  lstmd_workspace_create(m, T, B, 0.0f, &ws);
  const float gs = (float)(1.0 / gm_targets_of(m, T, B));
  const double cpu_loss = cpu_step(m, ws, &b, gs, 0);
  struct gpu_fixture f;
  char what[160];
  int rc = gpu_fixture_open(&f, m, dtype, algo);
  snprintf(what, sizeof what, "%s %s algo %s: GPU model built", gm_kind_name(text),
           gm_dtype_name(dtype), algo < 0 ? "auto" : lstmd_rnn_algo_name(algo));
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
    gm_check_rel(what, g + t->offset, m->grads + t->offset, t->count, tol);
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
  gm_free_batch(&b);
  lstmd_model_destroy(m);
}

/* Two consecutive windows with the state carried: loss, gradients and final state. With 16-bit
 * data and L·B·H odd, h and c of a state buffer must each be aligned (model_cuda.c, 3.): then
 * also an exact set/get round trip of values every type holds exactly (k/8). */
static void test_carried_state(int dtype, int hidden, int layers) {
  struct lstmd_model *m = gm_make_model(1, hidden, layers, 9);
  struct lstmd_batch b1, b2;
  gm_fill_batch(&b1, m, T, B);
  gm_fill_batch(&b2, m, T, B);
  struct lstmd_workspace *ws = NULL;
  lstmd_workspace_create(m, T, B, 0.0f, &ws);
  const float gs = (float)(1.0 / gm_targets_of(m, T, B));
  const double tol = dtype == LSTMD_DT_F32 ? 1e-4 : 2e-2;
  char what[160];
  struct gpu_fixture f;
  snprintf(what, sizeof what, "carried state %s%s, L·B·H = %d·%d·%d: GPU model built",
           gm_layer_norm ? "LN " : "", gm_dtype_name(dtype),
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
  gm_check_rel("  second window's gradients", g, m->grads, m->n_params, tol);
  const size_t S = (size_t)m->shape.layers * B * m->shape.hidden;
  float *h = malloc(S * sizeof(float)), *c = malloc(S * sizeof(float));
  float *hr = malloc(S * sizeof(float)), *cr = malloc(S * sizeof(float));
  lstmd_cuda_model_get_state(f.cm, h, c);
  lstmd_workspace_get_state(ws, hr, cr, B, 0);
  gm_check_rel("  h after two windows", h, hr, S, tol);
  gm_check_rel("  c after two windows", c, cr, S, tol);
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
  gm_free_batch(&b1);
  gm_free_batch(&b2);
  lstmd_model_destroy(m);
}

static void test_training(int algo, int precision, const char *name) {
  enum { kSteps = 5, kAccum = 2, kBatches = 3 };
  struct lstmd_model *cpu = gm_make_model(1, 16, 2, 21), *gpu = gm_clone_model(cpu);
  float *p0 = malloc(cpu->n_params * sizeof(float));
  memcpy(p0, cpu->params, cpu->n_params * sizeof(float));
  struct lstmd_batch b[kBatches];
  for (int i = 0; i < kBatches; i++) gm_fill_batch(&b[i], cpu, T, B);
  /* No clip: it would rescale both gradients to the same norm and hide a uniform scale error
   * (a loss scale left in, a wrong accumulation divisor). */
  struct lstmd_optim_config oc = {.algo = algo, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                                  .eps = 1e-8f, .momentum = 0.9f, .clip_norm = 0.0f,
                                  .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = kSteps};
  struct lstmd_optim *oc_cpu = NULL, *oc_gpu = NULL;
  lstmd_optim_create(&oc, cpu->n_params, &oc_cpu);
  lstmd_optim_create(&oc, cpu->n_params, &oc_gpu);
  struct lstmd_engine *dc = gm_make_engine(cpu, -1, LSTMD_PRECISION_FP32, 0);
  struct lstmd_engine *dg = gm_make_engine(gpu, 0, precision, 0);
  char what[160];
  snprintf(what, sizeof what, "%s: GPU engine built", name);
  lstmd_check_true(what, dg != NULL);
  double lc[kSteps], lg[kSteps];
  int rc = dg ? dg->ops->start(dg, oc_gpu, NULL) : LSTMD_EINVAL;
  if (!rc) rc = gm_train(dc, oc_cpu, cpu, b, kBatches, kSteps, kAccum, lc);
  if (!rc) rc = gm_train(dg, oc_gpu, gpu, b, kBatches, kSteps, kAccum, lg);
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
    gm_check_rel(what, dgpu, dcpu, cpu->n_params, tol);
    snprintf(what, sizeof what, "%s: optimizer step count", name);
    lstmd_check_true(what, oc_gpu->step == oc_cpu->step);
    /* The same steps with the host reading nothing until the last (no wait inside them): the
     * last step's loss is the sum of all, and the updates are the same. */
    struct lstmd_model *quiet = gm_clone_model(cpu);
    memcpy(quiet->params, p0, cpu->n_params * sizeof(float));
    struct lstmd_optim *oq = NULL;
    lstmd_optim_create(&oc, cpu->n_params, &oq);
    struct lstmd_engine *dq = gm_make_engine(quiet, 0, precision, 0);
    double lq[kSteps], sum_c = 0.0;
    int rq = dq ? dq->ops->start(dq, oq, NULL) : LSTMD_EINVAL;
    if (!rq) rq = gm_train_steps(dq, oq, quiet, b, kBatches, kSteps, kAccum, lq, 1);
    if (!rq) rq = dq->ops->sync_host(dq, oq, NULL);
    for (int s = 0; s < kSteps; s++) sum_c += lc[s];
    snprintf(what, sizeof what, "%s: unlogged steps: the last loss %.6g is the sum %.6g, %ld steps",
             name, rq ? 0.0 : lq[kSteps - 1], sum_c, oq->step);
    lstmd_check_true(what, !rq && fabs(lq[kSteps - 1] - sum_c) / sum_c < (fp32 ? 1e-4 : 2e-2) &&
                         lq[0] == 0.0 && oq->step == oc_cpu->step);
    for (size_t i = 0; !rq && i < cpu->n_params; i++) dgpu[i] = quiet->params[i] - p0[i];
    snprintf(what, sizeof what, "%s: parameter updates of unlogged steps", name);
    if (!rq) gm_check_rel(what, dgpu, dcpu, cpu->n_params, tol);
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
  for (int i = 0; i < kBatches; i++) gm_free_batch(&b[i]);
  free(p0);
  lstmd_model_destroy(cpu);
  lstmd_model_destroy(gpu);
}

/* fp16 with the loss scale at its maximum (2^24) on a small batch and a head 8× its usual size:
 * the scaled output gradient (~2^24/35 · 0.9 · |W|, |W| up to 1) exceeds fp16's 65504, so the
 * first steps must be skipped with the scale halved each time, until one applies. */
static void test_loss_scaling(void) {
  struct lstmd_model *m = gm_make_model(1, 64, 1, 31);
  const struct lstmd_tensor *hw = lstmd_model_tensor(m, "head.weight");
  for (size_t i = 0; i < hw->count; i++) m->params[hw->offset + i] *= 8.0f;
  float *p0 = malloc(m->n_params * sizeof(float));
  memcpy(p0, m->params, m->n_params * sizeof(float));
  struct lstmd_batch b;
  gm_fill_batch(&b, m, T, B);
  struct lstmd_optim_config oc = {.algo = LSTMD_OPTIM_SGD, .lr = 0.01f, .clip_norm = 0.0f,
                                  .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = 100};
  struct lstmd_optim *o = NULL;
  lstmd_optim_create(&oc, m->n_params, &o);
  struct lstmd_engine *dp = gm_make_engine(m, 0, LSTMD_PRECISION_FP16, 0);
  struct lstmd_train_progress p = {.loss_scale = 16777216.0};
  int rc = dp ? dp->ops->start(dp, o, &p) : LSTMD_EINVAL;
  lstmd_check_true("fp16: engine with loss scale 2^24", rc == 0 && dp->ops->loss_scale(dp) == 16777216.0);
  if (rc) goto done;
  rc = gm_train(dp, o, m, &b, 1, 1, 1, NULL);
  dp->ops->sync_host(dp, NULL, NULL);
  int same = !memcmp(m->params, p0, m->n_params * sizeof(float));
  lstmd_check_true("fp16 overflow: step skipped, weights untouched, no error", rc == 0 && same && o->step == 0);
  lstmd_check_true("fp16 overflow: scale backed off to 2^23", dp->ops->loss_scale(dp) == 8388608.0);
  int steps = 1;
  while (!rc && o->step == 0 && steps < 40) {
    rc = gm_train(dp, o, m, &b, 1, 1, 1, NULL);
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
  gm_free_batch(&b);
  free(p0);
  lstmd_model_destroy(m);
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
  struct lstmd_engine *dp = rc ? NULL : gm_make_engine(m, 0, LSTMD_PRECISION_FP32, 1);
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
  gm_layer_norm = 1; /* the layer-normalised LSTM (lstm_ln_cuda.h): fp32 only */
  test_gradients(1, LSTMD_DT_F32, -1);
  test_gradients(0, LSTMD_DT_F32, -1);
  test_carried_state(LSTMD_DT_F32, 16, 2);
  test_carried_state(LSTMD_DT_F32, 80, 3); /* rows longer than a block, 3 layers' gradients */
  gm_layer_norm = 0;
  test_carried_state(LSTMD_DT_F32, 16, 2);
  test_carried_state(LSTMD_DT_BF16, 15, 3); /* L·B·H = 225: odd */
  test_carried_state(LSTMD_DT_F16, 15, 1);  /* 75 */
  test_training(LSTMD_OPTIM_SGD, LSTMD_PRECISION_FP32, "SGD fp32");
  test_training(LSTMD_OPTIM_ADAMW, LSTMD_PRECISION_FP32, "AdamW fp32");
  test_training(LSTMD_OPTIM_SGD, LSTMD_PRECISION_BF16, "SGD bf16");
  test_loss_scaling();
  gm_test_pruning();
  gm_test_distill(1, LSTMD_OPTIM_ADAMW, LSTMD_PRECISION_FP32, 0);
  gm_test_distill(0, LSTMD_OPTIM_ADAMW, LSTMD_PRECISION_FP32, 0);
  gm_test_distill(1, LSTMD_OPTIM_SGD, LSTMD_PRECISION_FP32, 1);
  gm_test_distill(0, LSTMD_OPTIM_SGD, LSTMD_PRECISION_FP32, 1);
  gm_test_distill(1, LSTMD_OPTIM_SGD, LSTMD_PRECISION_FP16, 0);
  gm_test_checkpoint_round_trip();
  test_evaluate(1);
  test_evaluate(0);
}
