/* gpu_cudnn.c (selftest group "cudnn") — the cuDNN LSTM's set-up on a device (kernels/cuda/lstm_cudnn.c) and the
 * GPU model's choice of it (kernels/cuda/model_cuda.c): the weight space and its gradient start
 * zeroed; dropout states exist only where dropout happens (p > 0 and L > 1); every data type's
 * math types are built and run (fp16 tensor-op with its default-math fallback); forced
 * algorithms and forced full choices are trial-run at create (0 or LSTMD_EUNSUPPORTED, never
 * another failure, and a model that is built runs); a choice made by timing is reproduced by a
 * model given it (what rank 0 broadcasts to the others).
 * Run by `lstmd selftest --gpu` (gpu_selftest.c) on device 0. */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/device_cuda.h"
#include "kernels/cuda/lstm_cudnn.h"
#include "kernels/cuda/model_cuda.h"
#include "kernels/status.h"
#include "worker/engine/engine_gpu.h"
#include "worker/model/model.h"
#include "worker/selftest/selftest.h"

enum { T = 7, B = 5, W = 3, K = 2 };
static cudaStream_t g_stream;
static cudnnHandle_t g_dnn;

static const char *dtype_name(int dt) {
  return dt == LSTMD_DT_F16 ? "fp16" : dt == LSTMD_DT_BF16 ? "bf16" : "fp32";
}

static struct lstmd_cudnn_lstm_config lstm_cfg(int dtype, int layers, float dropout) {
  return (struct lstmd_cudnn_lstm_config){.input = 6, .hidden = 16, .layers = layers, .steps = T,
                                          .batch = B, .dtype = dtype, .dropout = dropout,
                                          .seed = 1, .algo = LSTMD_RNN_STANDARD};
}

/* All bytes of a device buffer zero. */
static int all_zero(const void *d, size_t bytes) {
  unsigned char *h = malloc(bytes ? bytes : 1);
  int ok = h && cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
  for (size_t i = 0; ok && i < bytes; i++) ok = h[i] == 0;
  free(h);
  return ok;
}

static void test_zeroed_weights(void) {
  for (int dt = LSTMD_DT_F32; dt <= LSTMD_DT_BF16; dt++) {
    struct lstmd_cudnn_lstm_config c = lstm_cfg(dt, 2, 0.0f);
    c.default_math = dt == LSTMD_DT_F16; /* default math: the most likely to be accepted */
    struct lstmd_cudnn_lstm *l = NULL;
    int rc = lstmd_cudnn_lstm_create(g_dnn, &c, &l);
    char what[128];
    snprintf(what, sizeof what, "%s: weight space and gradient zero after create", dtype_name(dt));
    const size_t bytes = rc ? 0 : lstmd_cudnn_lstm_weight_count(l) * lstmd_dtype_bytes(dt);
    lstmd_check_true(what, rc == 0 && bytes > 0 && all_zero(lstmd_cudnn_lstm_weights(l), bytes) &&
                         all_zero(lstmd_cudnn_lstm_dweights(l), bytes));
    lstmd_cudnn_lstm_destroy(l);
  }
}

/* Device bytes of the standard fp32 LSTM with L layers and dropout p (0 on failure). */
static size_t lstm_bytes(int layers, float p) {
  struct lstmd_cudnn_lstm_config c = lstm_cfg(LSTMD_DT_F32, layers, p);
  struct lstmd_cudnn_lstm *l = NULL;
  size_t n = lstmd_cudnn_lstm_create(g_dnn, &c, &l) ? 0 : lstmd_cudnn_lstm_device_bytes(l);
  lstmd_cudnn_lstm_destroy(l);
  return n;
}

static void test_dropout_states(void) {
  size_t states = 0;
  lstmd_check_true("cudnnDropoutGetStatesSize", cudnnDropoutGetStatesSize(g_dnn, &states) == CUDNN_STATUS_SUCCESS);
  const size_t l2p0 = lstm_bytes(2, 0.0f), l2p3 = lstm_bytes(2, 0.3f);
  const size_t l1p0 = lstm_bytes(1, 0.0f), l1p3 = lstm_bytes(1, 0.3f);
  printf("  dropout states %zu bytes; L=2: %zu (p 0) %zu (p 0.3); L=1: %zu (p 0) %zu (p 0.3)\n",
         states, l2p0, l2p3, l1p0, l1p3);
  lstmd_check_true("L=2: dropout 0.3 holds the states, dropout 0 does not", l2p0 && l2p3 >= l2p0 + states);
  lstmd_check_true("L=1, dropout 0.3 (nothing between layers): none", l1p0 && l1p3 && l1p3 < l1p0 + states);
}

/* Forward (training) + backward of l on zeroed x/dy buffers: 0 when cuDNN runs it. */
static int run_once(struct lstmd_cudnn_lstm *l, int dtype) {
  const size_t es = lstmd_dtype_bytes(dtype), nx = (size_t)T * B * 6 * es, ny = (size_t)T * B * 16 * es;
  void *x = NULL, *y = NULL, *dy = NULL, *dx = NULL;
  /* zeroed on g_stream: a legacy-stream cudaMemset is not ordered with that non-blocking stream */
  int rc = cudaMalloc(&x, nx) || cudaMalloc(&dx, nx) || cudaMalloc(&y, ny) || cudaMalloc(&dy, ny) ||
                   cudaMemsetAsync(x, 0, nx, g_stream) || cudaMemsetAsync(dy, 0, ny, g_stream)
               ? LSTMD_ECUDA
               : LSTMD_OK;
  if (!rc) rc = lstmd_cudnn_lstm_forward(l, 1, x, y, NULL, NULL, NULL, NULL);
  if (!rc) rc = lstmd_cudnn_lstm_backward(l, x, y, dy, dx, NULL, NULL);
  if (cudaStreamSynchronize(g_stream) != cudaSuccess && !rc) rc = LSTMD_ECUDA;
  cudaGetLastError();
  cudaFree(x);
  cudaFree(y);
  cudaFree(dy);
  cudaFree(dx);
  return rc;
}

static void test_math_types(void) {
  for (int dt = LSTMD_DT_F32; dt <= LSTMD_DT_BF16; dt++) {
    int runs = 0, preferred = 0;
    for (int dm = 0; dm < 2; dm++) {
      struct lstmd_cudnn_lstm_config c = lstm_cfg(dt, 2, 0.1f);
      c.default_math = dm;
      c.quiet = 1;
      struct lstmd_cudnn_lstm *l = NULL;
      int rc = lstmd_cudnn_lstm_create(g_dnn, &c, &l);
      if (!rc) rc = run_once(l, dt);
      printf("  %s, %s math: %s\n", dtype_name(dt),
             lstmd_cudnn_math_name(lstmd_cudnn_lstm_math_type(&c)),
             rc == 0 ? "runs" : rc == LSTMD_EUNSUPPORTED ? "refused" : lstmd_status_name(rc));
      runs += rc == 0;
      if (dm == 0) preferred = rc == 0;
      lstmd_cudnn_lstm_destroy(l);
    }
    char what[96];
    snprintf(what, sizeof what, "%s: the standard algorithm runs with one math type", dtype_name(dt));
    lstmd_check_true(what, runs > 0);
    if (dt != LSTMD_DT_F16) { /* default math (bf16) and FMA (fp32) are no fallbacks: must run */
      snprintf(what, sizeof what, "%s: runs with its own math type", dtype_name(dt));
      lstmd_check_true(what, preferred);
    }
  }
}

/* ---- the model's choice ---- */

struct fixture {
  struct lstmd_model *cpu; /* for the layout and the weights */
  float *params;           /* device [n_params] */
  double *loss;            /* device */
};

static int open_model(struct fixture *f, int dtype, int algo, const struct lstmd_cuda_lstm_choice *ch,
                      struct lstmd_cuda_model **out) {
  struct lstmd_cuda_model_config c = {.steps = T, .batch = B, .dtype = dtype, .seed = 1,
                                      .algo = algo, .force_choice = ch != NULL};
  if (ch) c.choice = *ch;
  lstmd_gpu_model_layout(f->cpu, &c.layout);
  return lstmd_cuda_model_create(&c, g_stream, out);
}

/* Inference loss of the fixture's batch on cm (NAN on failure). */
static double model_loss(struct fixture *f, struct lstmd_cuda_model *cm) {
  const size_t N = (size_t)T * B;
  struct lstmd_cuda_inputs *in = lstmd_cuda_model_inputs(cm);
  unsigned long long seed = 99; /* the same batch every time */
  float *x = selftest_rand_floats(&seed, N * W, 1.0, NULL), *y = selftest_rand_floats(&seed, N * K, 1.0, NULL);
  double loss = NAN;
  int rc = cudaMemcpyAsync(in->x, x, N * W * sizeof(float), cudaMemcpyHostToDevice, g_stream) ||
                   cudaMemcpyAsync(in->y, y, N * K * sizeof(float), cudaMemcpyHostToDevice, g_stream) ||
                   cudaMemsetAsync(f->loss, 0, sizeof(double), g_stream)
               ? LSTMD_ECUDA
               : LSTMD_OK;
  if (!rc) rc = lstmd_cuda_model_load_weights(cm, f->params);
  if (!rc) rc = lstmd_cuda_model_forward(cm, f->params, 0.0f, 0, 0, f->loss);
  if (!rc && (cudaMemcpyAsync(&loss, f->loss, sizeof loss, cudaMemcpyDeviceToHost, g_stream) ||
              cudaStreamSynchronize(g_stream)))
    loss = NAN;
  free(x);
  free(y);
  return rc ? NAN : loss;
}

static void test_forced(struct fixture *f) {
  for (int k = 0; k < 2 * LSTMD_RNN_ALGO_COUNT; k++) {
    const struct lstmd_cuda_lstm_choice want = {k / 2, k % 2, 0};
    struct lstmd_cuda_model *cm = NULL;
    int rc = open_model(f, LSTMD_DT_F32, -1, &want, &cm);
    struct lstmd_cuda_lstm_choice got = {-1, -1, -1};
    double ms = -1.0, loss = NAN;
    if (!rc) {
      ms = lstmd_cuda_model_choice(cm, &got);
      loss = model_loss(f, cm);
    }
    char what[160];
    snprintf(what, sizeof what, "forced choice %s%s: %s", lstmd_rnn_algo_name(want.algo),
             want.packed ? " packed" : "", rc ? lstmd_status_name(rc) : "built, runs, untimed");
    if (k == 0 || !rc)
      lstmd_check_true(what, !rc && !memcmp(&got, &want, sizeof got) && ms == 0.0 && isfinite(loss));
    else
      lstmd_check_true(what, rc == LSTMD_EUNSUPPORTED); /* refused at set-up or at the trial run */
    lstmd_cuda_model_destroy(cm);
  }
  for (int a = 0; a < LSTMD_RNN_ALGO_COUNT; a++) {
    struct lstmd_cuda_model *cm = NULL;
    int rc = open_model(f, LSTMD_DT_F16, a, NULL, &cm);
    struct lstmd_cuda_lstm_choice got = {-1, -1, -1};
    if (!rc) lstmd_cuda_model_choice(cm, &got);
    char what[160];
    snprintf(what, sizeof what, "fp16 forced algorithm %s: %s (layout %d, default math %d)",
             lstmd_rnn_algo_name(a), rc ? lstmd_status_name(rc) : "built", got.packed, got.default_math);
    lstmd_check_true(what, rc == LSTMD_EUNSUPPORTED || (rc == 0 && got.algo == a && isfinite(model_loss(f, cm))));
    if (a == 0) lstmd_check_true("  fp16 standard builds", rc == 0);
    lstmd_cuda_model_destroy(cm);
  }
}

static void test_choice_reproduced(struct fixture *f) {
  for (int dt = LSTMD_DT_F32; dt <= LSTMD_DT_F16; dt++) {
    struct lstmd_cuda_model *a = NULL, *b = NULL;
    struct lstmd_cuda_lstm_choice ca = {-1, -1, -1}, cb = {-1, -1, -1};
    double ms = 0.0;
    int rc = open_model(f, dt, -1, NULL, &a);
    if (!rc) {
      ms = lstmd_cuda_model_choice(a, &ca);
      rc = open_model(f, dt, -1, &ca, &b); /* what another rank does with rank 0's choice */
    }
    if (!rc) lstmd_cuda_model_choice(b, &cb);
    char what[200];
    snprintf(what, sizeof what, "%s: timed choice %s%s%s (%.3f ms) given to a second model: the same",
             dtype_name(dt), lstmd_rnn_algo_name(ca.algo), ca.packed ? " packed" : "",
             ca.default_math ? " default math" : "", ms);
    lstmd_check_true(what, rc == 0 && ms > 0.0 && !memcmp(&ca, &cb, sizeof ca));
    if (!rc) {
      const double la = model_loss(f, a), lb = model_loss(f, b);
      snprintf(what, sizeof what, "  same loss (%.9g vs %.9g%s)", la, lb, la == lb ? ", bit for bit" : "");
      lstmd_check_true(what, isfinite(la) && fabs(la - lb) <= 1e-6 * fabs(la));
    }
    lstmd_cuda_model_destroy(a);
    lstmd_cuda_model_destroy(b);
  }
}

void lstmd_selftest_gpu_cudnn(void) {
  if (cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) ||
      cudnnCreate(&g_dnn) || cudnnSetStream(g_dnn, g_stream)) {
    lstmd_check_true("device, stream and cuDNN handle", 0);
    return;
  }
  test_zeroed_weights();
  test_dropout_states();
  test_math_types();
  struct lstmd_model_shape s = {.kind = LSTMD_MODEL_SERIES, .width = W, .horizon = K, .hidden = 16,
                                .layers = 2};
  struct fixture f = {0};
  int rc = lstmd_model_create(&s, &f.cpu);
  if (!rc) {
    struct lstmd_rng rng;
    lstmd_rng_seed(&rng, 5, 1);
    lstmd_model_init_params(f.cpu, &rng);
  }
  if (!rc && (cudaMalloc((void **)&f.params, f.cpu->n_params * sizeof(float)) ||
              cudaMalloc((void **)&f.loss, sizeof(double)) ||
              cudaMemcpy(f.params, f.cpu->params, f.cpu->n_params * sizeof(float), cudaMemcpyHostToDevice) ||
              cudaDeviceSynchronize())) /* the legacy-stream copy's DMA, before g_stream reads it */
    rc = LSTMD_ECUDA;
  lstmd_check_true("model fixture", rc == 0);
  if (!rc) {
    test_forced(&f);
    test_choice_reproduced(&f);
  }
  cudaFree(f.params);
  cudaFree(f.loss);
  lstmd_model_destroy(f.cpu);
  cudnnDestroy(g_dnn);
  lstmd_check_true("no CUDA error at the end", cudaStreamSynchronize(g_stream) == cudaSuccess &&
                                             cudaDeviceSynchronize() == cudaSuccess);
  cudaStreamDestroy(g_stream);
}
