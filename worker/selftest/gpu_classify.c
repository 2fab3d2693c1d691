/* gpu_classify.c (selftest group "classify") — the GPU sequence classifier (model_cuda.h's
 * classify layout: cuDNN bidirectional LSTM on padded variable-length columns, classify_cuda.h)
 * against the CPU's (worker/model/classify.c, the reference) on the same weights and batch:
 * logits (inference mode), loss and every parameter gradient (training mode), unidirectional and
 * bidirectional, pooling last / mean / max, 2 layers, a padded batch of mixed lengths with an
 * empty column, the longest column shorter than T too (cuDNN then runs fewer steps); fp32 with
 * TF32 off (relative error < 1e-4), bf16 and fp16 (< 2e-2). Then the engines: SGD steps on the
 * GPU engine against the CPU engine, and the GPU engine's validation loss on a classify split
 * against lstmd_clf_evaluate. Run by `lstmd selftest --gpu` (gpu_selftest.c) on device 0. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/model_cuda.h"
#include "kernels/status.h"
#include "worker/data/dataset.h"
#include "worker/data/prepare.h"
#include "worker/engine/engine.h"
#include "worker/engine/engine_gpu.h"
#include "worker/model/classify.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"
#include "worker/selftest/gpu_checks.h"
#include "worker/selftest/selftest.h"
#include "worker/train/train_config.h"

enum { T = 7, B = 5, kClasses = 4 };
static unsigned long long g_seed = 1919;

static const char *const kPool[] = {"last", "mean", "max"};

static struct lstmd_model *make_classifier(int bidirectional, int pool, uint64_t seed) {
  const struct lstmd_model_shape s = {.kind = LSTMD_MODEL_CLASSIFY, .vocab = 11, .embed = 6,
                                      .hidden = 12, .layers = 2, .classes = kClasses,
                                      .bidirectional = bidirectional, .pool = pool};
  struct lstmd_model *m = NULL;
  if (lstmd_model_create(&s, &m)) return NULL;
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, seed, 1);
  lstmd_model_init_params(m, &rng);
  return m;
}

/* A deterministic draw in 0..n−1. */
static int draw(int n) {
  return (int)((unsigned)(selftest_uniform(&g_seed, 1.0) * 1e6 + 1e6) % (unsigned)n);
}

/* ids [T,B] (0 past each length, as the batcher pads), lengths `len`, labels < C. */
static void fill(struct lstmd_batch *b, const int *len, int vocab) {
  for (int j = 0; j < B; j++) {
    b->lengths[j] = len[j];
    b->labels[j] = draw(kClasses);
    for (int t = 0; t < T; t++) b->ids[(size_t)t * B + j] = t < len[j] ? draw(vocab) : 0;
  }
}

static void check_rel(const char *what, const float *got, const float *ref, size_t n, double tol) {
  char line[256];
  const double e = selftest_rel_err(got, ref, n);
  snprintf(line, sizeof line, "%.180s (rel %.2e < %.0e)", what, e, tol);
  lstmd_check_true(line, e < tol);
}

static const char *dtype_name(int dt) {
  return dt == LSTMD_DT_F16 ? "fp16" : dt == LSTMD_DT_BF16 ? "bf16" : "fp32";
}

/* The GPU model's forward (and backward when gs != 0) of batch b: loss, and the host copies of
 * the logits [B,C] (gs == 0) or the gradients [n_params]. */
static double gpu_run(struct lstmd_cuda_model *cm, const struct lstmd_model *m, const float *d_params,
                      float *d_grads, double *d_loss, const struct lstmd_batch *b, float gs,
                      float *out, cudaStream_t stream) {
  struct lstmd_cuda_inputs *in = lstmd_cuda_model_inputs(cm);
  double loss = NAN;
  cudaMemcpy(in->ids, b->ids, (size_t)T * B * sizeof(int32_t), cudaMemcpyHostToDevice);
  cudaMemcpy(in->lengths, b->lengths, B * sizeof(int32_t), cudaMemcpyHostToDevice);
  cudaMemcpy(in->labels, b->labels, B * sizeof(int32_t), cudaMemcpyHostToDevice);
  cudaMemset(d_loss, 0, sizeof(double));
  cudaMemset(d_grads, 0, m->n_params * sizeof(float));
  int rc = lstmd_cuda_model_zero_lstm_grads(cm);
  if (!rc) rc = lstmd_cuda_model_set_lengths(cm, b->lengths);
  if (!rc) rc = lstmd_cuda_model_forward(cm, d_params, gs, gs != 0.0f, 0, d_loss);
  if (!rc && gs != 0.0f)
    rc = lstmd_cuda_model_backward(cm, d_params, d_grads, LSTMD_FLUSH_SET, NULL, NULL);
  if (cudaStreamSynchronize(stream) != cudaSuccess) rc = LSTMD_ECUDA;
  if (rc) return NAN;
  cudaMemcpy(&loss, d_loss, sizeof loss, cudaMemcpyDeviceToHost);
  if (gs == 0.0f)
    cudaMemcpy(out, lstmd_cuda_model_output(cm), (size_t)B * kClasses * sizeof(float),
               cudaMemcpyDeviceToHost);
  else
    cudaMemcpy(out, d_grads, m->n_params * sizeof(float), cudaMemcpyDeviceToHost);
  return loss;
}

/* One model, one batch: logits, loss, every gradient tensor, per-column evaluation losses. */
static void test_model(int bidirectional, int pool, int dtype, const int *len) {
  struct lstmd_model *m = make_classifier(bidirectional, pool, 40 + 3 * pool + bidirectional);
  struct lstmd_clf_workspace *ws = NULL;
  if (!m || lstmd_clf_workspace_create(m, T, B, &ws)) {
    lstmd_check_true("classifier and CPU workspace made", 0);
    lstmd_model_destroy(m);
    return;
  }
  struct lstmd_batch *b = lstmd_clf_workspace_batch(ws);
  fill(b, len, m->shape.vocab);
  int longest = 0, scored = 0;
  for (int j = 0; j < B; j++) {
    longest = len[j] > longest ? len[j] : longest;
    scored += len[j] > 0;
  }
  const float gs = 1.0f / (float)scored;
  float *logits = malloc((size_t)B * kClasses * sizeof(float));
  const double cpu_loss = lstmd_clf_forward(m, ws, 0.0f);
  memcpy(logits, lstmd_clf_workspace_logits(ws), (size_t)B * kClasses * sizeof(float));
  memset(m->grads, 0, m->n_params * sizeof(float));
  lstmd_clf_forward(m, ws, gs);
  lstmd_clf_backward(m, ws);

  char what[200];
  snprintf(what, sizeof what, "%s %s-pooled %s, lengths %d %d %d %d %d (T %d): GPU model built",
           bidirectional ? "bidirectional" : "unidirectional", kPool[pool], dtype_name(dtype),
           len[0], len[1], len[2], len[3], len[4], T);
  cudaStream_t stream = NULL;
  cudaStreamCreate(&stream);
  struct lstmd_cuda_model_config c = {.steps = T, .batch = B, .dtype = dtype, .algo = -1};
  lstmd_gpu_model_layout(m, &c.layout);
  struct lstmd_cuda_model *cm = NULL;
  float *d_params = NULL, *d_grads = NULL;
  double *d_loss = NULL;
  int rc = lstmd_cuda_model_create(&c, stream, &cm);
  if (!rc && (cudaMalloc((void **)&d_params, m->n_params * sizeof(float)) != cudaSuccess ||
              cudaMalloc((void **)&d_grads, m->n_params * sizeof(float)) != cudaSuccess ||
              cudaMalloc((void **)&d_loss, sizeof(double)) != cudaSuccess))
    rc = LSTMD_ENOMEM;
  if (!rc) {
    cudaMemcpy(d_params, m->params, m->n_params * sizeof(float), cudaMemcpyHostToDevice);
    rc = lstmd_cuda_model_load_weights(cm, d_params);
  }
  lstmd_check_true(what, rc == 0);
  const double tol = dtype == LSTMD_DT_F32 ? 1e-4 : 2e-2;
  float *got = malloc(m->n_params * sizeof(float));
  if (!rc) {
    const double infer = gpu_run(cm, m, d_params, d_grads, d_loss, b, 0.0f, got, stream);
    snprintf(what, sizeof what, "  inference loss %.6f vs CPU %.6f", infer, cpu_loss);
    lstmd_check_true(what, fabs(infer - cpu_loss) <= tol * fabs(cpu_loss));
    check_rel("  logits [B,C] (the empty column's row 0)", got, logits, (size_t)B * kClasses, tol);
    const double train = gpu_run(cm, m, d_params, d_grads, d_loss, b, gs, got, stream);
    snprintf(what, sizeof what, "  training loss %.6f vs CPU %.6f", train, cpu_loss);
    lstmd_check_true(what, fabs(train - cpu_loss) <= tol * fabs(cpu_loss));
    for (int i = 0; i < m->n_tensors; i++) {
      const struct lstmd_tensor *t = &m->tensors[i];
      snprintf(what, sizeof what, "  grad %s", t->name);
      check_rel(what, got + t->offset, m->grads + t->offset, t->count, tol);
    }
    float rows[B];
    rc = lstmd_cuda_model_set_lengths(cm, b->lengths);
    if (!rc) rc = lstmd_cuda_model_eval(cm, d_params, rows);
    double sum = 0.0;
    int empty_zero = 1;
    for (int j = 0; j < B; j++) {
      sum += rows[j];
      if (!len[j]) empty_zero &= rows[j] == 0.0f;
    }
    snprintf(what, sizeof what, "  evaluation rows: sum %.6f, empty columns 0", sum);
    lstmd_check_true(what, !rc && empty_zero && fabs(sum - cpu_loss) <= tol * fabs(cpu_loss));
  }
  free(got);
  free(logits);
  lstmd_cuda_model_destroy(cm);
  cudaFree(d_params);
  cudaFree(d_grads);
  cudaFree(d_loss);
  cudaStreamDestroy(stream);
  lstmd_clf_workspace_destroy(ws);
  lstmd_model_destroy(m);
}

/* ---- the engines ---- */

static struct lstmd_engine *make_engine(struct lstmd_model *m, int device, int steps) {
  const struct lstmd_engine_config c = {.seq_len = steps, .batch = B, .seed = 3, .bucket_mb = 4.0,
                                        .comm_timeout_s = 60.0, .threads = 1,
                                        .precision = LSTMD_PRECISION_FP32, .gpu_device = device};
  struct lstmd_engine *e = NULL;
  return lstmd_engine_create(device >= 0 ? LSTMD_ENGINE_GPU : LSTMD_ENGINE_CPU, m, &c, NULL, &e)
             ? NULL : e;
}

struct feed {
  struct lstmd_batch *b;
  int n, next;
};
static const struct lstmd_batch *feed_next(void *ctx, int *reset) {
  struct feed *f = ctx;
  *reset = 0;
  return &f->b[f->next++ % f->n];
}

/* 4 SGD steps of 2 windows each: the same losses and parameter updates on both engines. */
static void test_engine_training(void) {
  enum { kSteps = 4, kAccum = 2, kBatches = 3 };
  static const int lens[kBatches][B] = {{7, 3, 0, 1, 5}, {2, 7, 7, 4, 6}, {1, 0, 3, 3, 2}};
  struct lstmd_model *cpu = make_classifier(1, LSTMD_POOL_MEAN, 71);
  struct lstmd_model *gpu = make_classifier(1, LSTMD_POOL_MEAN, 71);
  struct lstmd_batch b[kBatches];
  for (int i = 0; i < kBatches; i++) {
    b[i] = (struct lstmd_batch){.steps = T, .batch = B};
    b[i].ids = malloc((size_t)T * B * sizeof(int32_t));
    b[i].lengths = malloc(B * sizeof(int32_t));
    b[i].labels = malloc(B * sizeof(int32_t));
    fill(&b[i], lens[i], cpu->shape.vocab);
  }
  const struct lstmd_optim_config oc = {.algo = LSTMD_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f,
                                        .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = kSteps};
  struct lstmd_optim *oc_cpu = NULL, *oc_gpu = NULL;
  lstmd_optim_create(&oc, cpu->n_params, &oc_cpu);
  lstmd_optim_create(&oc, cpu->n_params, &oc_gpu);
  float *p0 = malloc(cpu->n_params * sizeof(float));
  memcpy(p0, cpu->params, cpu->n_params * sizeof(float));
  struct lstmd_engine *dc = make_engine(cpu, -1, T), *dg = make_engine(gpu, 0, T);
  lstmd_check_true("engines: bidirectional mean-pooled classifier on the GPU engine built", dg != NULL);
  int rc = dc && dg ? dg->ops->start(dg, oc_gpu, NULL) : LSTMD_EINVAL;
  double worst = 0.0;
  struct lstmd_engine *eng[2] = {dc, dg};
  struct lstmd_optim *opt[2] = {oc_cpu, oc_gpu};
  double loss[2][kSteps];
  for (int k = 0; k < 2 && !rc; k++) {
    struct feed f = {b, kBatches, 0};
    for (int s = 0; s < kSteps && !rc; s++) {
      const struct lstmd_step_input in = {feed_next, &f, kAccum, (uint64_t)s * kAccum, 0.125f, 1};
      struct lstmd_step_result out;
      struct lstmd_optim_outcome oo;
      rc = eng[k]->ops->step(eng[k], &in, &out);
      if (!rc) rc = eng[k]->ops->optim_step(eng[k], opt[k], 1, &oo);
      loss[k][s] = out.loss_sum;
    }
  }
  if (!rc) rc = dg->ops->sync_host(dg, oc_gpu, NULL);
  lstmd_check_true("engines: 4 SGD steps of 2 windows ran on both", rc == 0);
  if (!rc) {
    for (int s = 0; s < kSteps; s++) worst = fmax(worst, fabs(loss[1][s] - loss[0][s]) / loss[0][s]);
    char what[160];
    snprintf(what, sizeof what, "engines: losses per step (rel %.1e < 1e-4)", worst);
    lstmd_check_true(what, worst < 1e-4);
    for (size_t i = 0; i < cpu->n_params; i++) {
      cpu->grads[i] = cpu->params[i] - p0[i]; /* the updates, in the spare buffers */
      gpu->grads[i] = gpu->params[i] - p0[i];
    }
    check_rel("engines: parameter updates", gpu->grads, cpu->grads, cpu->n_params, 1e-3);
  }
  lstmd_engine_destroy(dc);
  lstmd_engine_destroy(dg);
  lstmd_optim_destroy(oc_cpu);
  lstmd_optim_destroy(oc_gpu);
  for (int i = 0; i < kBatches; i++) {
    free(b[i].ids);
    free(b[i].lengths);
    free(b[i].labels);
  }
  free(p0);
  lstmd_model_destroy(cpu);
  lstmd_model_destroy(gpu);
}

/* The GPU engine's validation loss on a prepared classify split = lstmd_clf_evaluate's (the
 * engine runs that evaluator on rank 0 with the device's parameters). */
static void test_engine_evaluate(void) {
  char dir[] = "/tmp/lstmd-test-gpu-clf-XXXXXX", in[300], out[300];
  if (!mkdtemp(dir)) return;
  snprintf(in, sizeof in, "%s/words.tsv", dir);
  snprintf(out, sizeof out, "%s/data", dir);
  FILE *f = fopen(in, "w");
  for (int i = 0; f && i < 200; i++) { /* 3 labels, words of 1..9 bytes */
    const int c = draw(3), n = 1 + draw(9);
    fprintf(f, "%s\t", c == 0 ? "vowel" : c == 1 ? "digit" : "upper");
    const char *letters = c == 0 ? "aeiouxy" : c == 1 ? "01234xy" : "ABCDExy";
    for (int k = 0; k < n; k++) fputc(letters[draw(7)], f);
    fputc('\n', f);
  }
  if (f) fclose(f);
  struct lstmd_dataset train = {.fd = -1}, val = {.fd = -1};
  int rc = f ? lstmd_prepare_classify(in, out, 0.5) : LSTMD_EIO;
  if (!rc) rc = lstmd_dataset_open_dir(out, &train, &val, 1);
  struct lstmd_model *m = NULL;
  if (!rc) {
    const struct lstmd_model_shape s = {.kind = LSTMD_MODEL_CLASSIFY, .vocab = val.info.vocab_size,
                                        .embed = 6, .hidden = 12, .layers = 2,
                                        .classes = val.info.horizon, .bidirectional = 1,
                                        .pool = LSTMD_POOL_MAX};
    rc = lstmd_model_create(&s, &m);
  }
  if (!rc) {
    struct lstmd_rng rng;
    lstmd_rng_seed(&rng, 5, 1);
    lstmd_model_init_params(m, &rng);
  }
  struct lstmd_clf_eval *ref = calloc(1, sizeof *ref);
  if (!rc) rc = ref ? lstmd_clf_evaluate(m, &val, B, ref) : LSTMD_ENOMEM;
  struct lstmd_engine *dg = rc ? NULL : make_engine(m, 0, (int)val.info.width);
  double loss = 0.0, accuracy = NAN;
  uint64_t n = 0;
  if (!rc) rc = dg ? dg->ops->start(dg, NULL, NULL) : LSTMD_EINVAL;
  if (!rc) rc = dg->ops->evaluate(dg, &val, &loss, &n, &accuracy);
  const double want_acc = ref && ref->sequences ? (double)ref->correct / (double)ref->sequences : NAN;
  char what[240];
  snprintf(what, sizeof what, "engines: GPU validation loss %.6f = lstmd_clf_evaluate's %.6f, "
           "accuracy %.4f = %.4f (%llu sequences)", loss, ref ? ref->loss : 0.0, accuracy,
           want_acc, (unsigned long long)n);
  /* the same evaluator on the same parameters: equal up to BLAS threading, if at all */
  lstmd_check_true(what, !rc && ref && n == ref->sequences &&
                             fabs(loss - ref->loss) <= 1e-9 * fabs(ref->loss) && accuracy == want_acc);
  lstmd_engine_destroy(dg);
  free(ref);
  lstmd_model_destroy(m);
  lstmd_dataset_close(&train);
  lstmd_dataset_close(&val);
  selftest_remove_tree(dir);
}

void lstmd_selftest_gpu_classify(void) {
  static const int mixed[B] = {7, 3, 0, 1, 5}, short_[B] = {4, 2, 0, 1, 3};
  for (int bidir = 0; bidir < 2; bidir++)
    for (int pool = LSTMD_POOL_LAST; pool <= LSTMD_POOL_MAX; pool++)
      test_model(bidir, pool, LSTMD_DT_F32, mixed);
  test_model(1, LSTMD_POOL_MAX, LSTMD_DT_F32, short_);
  test_model(1, LSTMD_POOL_LAST, LSTMD_DT_F32, short_);
  test_model(1, LSTMD_POOL_MEAN, LSTMD_DT_BF16, mixed);
  test_model(0, LSTMD_POOL_LAST, LSTMD_DT_F16, mixed);
  test_engine_training();
  test_engine_evaluate();
}
