/* test_gpu_logic.c — the parts of the GPU backend that run without a GPU, so CI checks them:
 * train.device=auto|cpu|cuda decisions and the rank → GPU mapping, the device probe on this
 * machine, the fp16 loss-scale state machine, the config keys, the loss scale's checkpoint
 * round trip, and (in builds with the GPU backend) the cuDNN set-up decisions lstmd makes itself:
 * math type per data type, the candidates tried (timed or forced, LSTMD_CUDNN_ALGO, a forced
 * full choice; a sequence classifier's standard-unpacked-only rule) and the rejection of invalid
 * configurations (a bidirectional flag other than 0/1 too). cuDNN itself is not asked: without
 * a device its descriptor setters accept every combination, so whether cuDNN takes a set-up is
 * only tested on a device (tests/test_gpu_model.c). */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/config.h"
#include "kernels/status.h"
#include "worker/io/checkpoint.h"
#include "worker/engine/device_select.h"
#include "worker/engine/gpu_backend.h"
#include "worker/engine/loss_scale.h"
#include "check.h"
#if LSTMD_WITH_GPU
#include "kernels/cuda/lstm_cudnn.h"
#include "kernels/cuda/model_cuda.h"
#endif

static void test_gpu_for_rank(void) {
  char w[256];
  check_true("no visible GPU: no device", lstmd_gpu_for_rank(0, 0, 1, w, sizeof w) == -1);
  check_true("one visible GPU, one rank: device 0, no warning",
             lstmd_gpu_for_rank(1, 0, 1, w, sizeof w) == 0 && !w[0]);
  check_true("Slurm --gpus-per-task=1 (one visible, local rank 3 of 4): device 0",
             lstmd_gpu_for_rank(1, 3, 4, w, sizeof w) == 0);
  check_true("  ... warns that the ranks share it", strstr(w, "same single GPU") != NULL);
  check_true("mpirun, 4 GPUs, local rank 2 of 4: device 2, no warning",
             lstmd_gpu_for_rank(4, 2, 4, w, sizeof w) == 2 && !w[0]);
  check_true("8 GPUs, local rank 7 of 8: device 7", lstmd_gpu_for_rank(8, 7, 8, w, sizeof w) == 7);
  check_true("4 GPUs, local rank 5 of 8: device 1 (mod)", lstmd_gpu_for_rank(4, 5, 8, w, sizeof w) == 1);
  check_true("  ... warns that local ranks exceed devices", strstr(w, "8 ranks") && strstr(w, "4 visible"));
  check_true("CUDA_VISIBLE_DEVICES=2,3 by hand, local rank 1 of 2: device 1",
             lstmd_gpu_for_rank(2, 1, 2, w, sizeof w) == 1 && !w[0]);
}

static void test_decide(void) {
  char msg[512];
  int b = -1;
  struct lstmd_device_probe none_built = {0, 0, "this build has no GPU backend"};
  struct lstmd_device_probe no_dev = {1, 0, "cudaGetDeviceCount: CUDA driver version is insufficient"};
  struct lstmd_device_probe two = {1, 2, ""};
  check_true("cpu: the CPU, silently",
             lstmd_device_decide(LSTMD_DEVICE_CPU, &two, &b, msg, sizeof msg) == 0 &&
                 b == LSTMD_DEVICE_CPU && !msg[0]);
  check_true("auto with a device: CUDA, silently",
             lstmd_device_decide(LSTMD_DEVICE_AUTO, &two, &b, msg, sizeof msg) == 0 &&
                 b == LSTMD_DEVICE_CUDA && !msg[0]);
  int rc = lstmd_device_decide(LSTMD_DEVICE_AUTO, &no_dev, &b, msg, sizeof msg);
  check_true("auto without a device: the CPU, not an error", rc == 0 && b == LSTMD_DEVICE_CPU);
  check_true("  ... one line saying why",
             strstr(msg, "device auto: no usable CUDA device (cudaGetDeviceCount: CUDA driver") == msg &&
                 strstr(msg, "; using the CPU backend") && !strchr(msg, '\n'));
  rc = lstmd_device_decide(LSTMD_DEVICE_AUTO, &none_built, &b, msg, sizeof msg);
  check_true("auto in a build without the GPU backend: the CPU, says so",
             rc == 0 && b == LSTMD_DEVICE_CPU && strstr(msg, "no GPU backend") &&
                 strstr(msg, "using the CPU backend"));
  rc = lstmd_device_decide(LSTMD_DEVICE_CUDA, &no_dev, &b, msg, sizeof msg);
  check_true("cuda without a device: LSTMD_EUNSUPPORTED (exit 2) naming why",
             rc == LSTMD_EUNSUPPORTED && strstr(msg, "train.device=cuda") &&
                 strstr(msg, "insufficient"));
  rc = lstmd_device_decide(LSTMD_DEVICE_CUDA, &none_built, &b, msg, sizeof msg);
  check_true("cuda in a build without the backend: an error naming why",
             rc == LSTMD_EUNSUPPORTED && strstr(msg, "no GPU backend"));
  check_true("cuda with a device: CUDA",
             lstmd_device_decide(LSTMD_DEVICE_CUDA, &two, &b, msg, sizeof msg) == 0 &&
                 b == LSTMD_DEVICE_CUDA);
}

static void test_probe(void) {
  struct lstmd_device_probe p;
  lstmd_device_probe_run(&p);
  printf("  probe: backend %s, %d device(s)%s%s\n", p.backend_built ? "built" : "not built",
         p.count, p.count ? "" : ": ", p.count ? "" : p.why);
  /* This binary does not export lstmd's functions, so the module rarely loads here; loading it
   * from lstmd is tests/test_gpu_module.sh's. */
  check_true("probe: backend_built is whether the GPU module loaded",
             p.backend_built == (lstmd_gpu_backend() != NULL));
  check_true("probe: a backend that did not load says why",
             p.backend_built || strstr(p.why, "GPU backend not loaded: "));
  check_true("probe: no device comes with a reason", p.count > 0 || p.why[0]);
  /* One-rank agreement path, as lstmd train runs it. */
  int backend = -1, gpu = -2;
  int rc = lstmd_device_choose(LSTMD_DEVICE_AUTO, NULL, &backend, &gpu);
  check_true("choose auto never fails", rc == 0 && (backend == LSTMD_DEVICE_CUDA) == (gpu >= 0));
}

static void test_loss_scaler(void) {
  struct lstmd_loss_scaler s;
  lstmd_loss_scaler_init(&s);
  check_true("loss scale starts at 65536", s.scale == 65536.0f);
  check_true("overflow: skip the step",
             lstmd_loss_scaler_update(&s, 1) == LSTMD_LOSS_SCALE_SKIP && s.scale == 32768.0f);
  int grew_early = 0;
  for (int i = 0; i < 1999; i++) {
    lstmd_loss_scaler_update(&s, 0);
    grew_early |= s.scale != 32768.0f;
  }
  check_true("1999 clean steps: no growth yet", !grew_early && s.good_steps == 1999);
  check_true("2000th clean step: grows x2",
             lstmd_loss_scaler_update(&s, 0) == LSTMD_LOSS_SCALE_APPLY && s.scale == 65536.0f &&
                 s.good_steps == 0);
  lstmd_loss_scaler_update(&s, 0);
  lstmd_loss_scaler_update(&s, 1);
  check_true("an overflow resets the clean run", s.good_steps == 0 && s.scale == 32768.0f);
  check_true("restore 2^24 after 1999 clean steps", lstmd_loss_scaler_restore(&s, 16777216.0, 1999) == 0);
  lstmd_loss_scaler_update(&s, 0);
  check_true("growth stops at the maximum 2^24", s.scale == 16777216.0f && s.good_steps == 0);
  check_true("restore rejects 0, NaN, negative",
             lstmd_loss_scaler_restore(&s, 0.0, 0) != 0 && lstmd_loss_scaler_restore(&s, NAN, 0) != 0 &&
                 lstmd_loss_scaler_restore(&s, 8.0, -1) != 0);
  lstmd_loss_scaler_init(&s);
  int rc = 0, skips = 0;
  for (int i = 0; i < 100 && rc >= 0; i++) {
    rc = lstmd_loss_scaler_update(&s, 1);
    skips += rc == LSTMD_LOSS_SCALE_SKIP;
  }
  check_true("a run of 64 overflows gives up (error, not endless skipping)",
             rc == LSTMD_EINVAL && skips == 63);
}

/* The GPU optimizer's per-step decision (kernels/optim_rules.h), run here on the host: the
 * device runs the same function in a one-thread kernel. */
static void test_optim_decision(void) {
  const struct lstmd_optim_rule rule = {.clip_norm = 1.0f, .lr = 0.1f, .warmup = 2, .total = 12,
                                        .cosine = 1, .beta1 = 0.9f, .beta2 = 0.999f};
  struct lstmd_optim_state s = {.sumsq = 0.25};
  lstmd_optim_decide(&s, &rule);
  check_true("decision: norm 0.5 under the clip: coef 1, warmup lr 0.1/2, applied 1",
             s.apply && s.norm == 0.5 && s.coef == 1.0f && s.lr == 0.05f && s.applied == 1 &&
                 s.bc1 == 1.0f - 0.9f && fabsf(s.bc2_sqrt - sqrtf(1.0f - 0.999f)) < 1e-6f);
  s.sumsq = 16.0;
  lstmd_optim_decide(&s, &rule);
  check_true("decision: norm 4 clipped to 1 (coef 1/(4+1e-6)), lr 0.1 at the end of warmup",
             s.apply && fabs(s.coef - 1.0 / (4.0 + 1e-6)) < 1e-7 && s.lr == 0.1f && s.applied == 2);
  s.applied = 7; /* half way through the cosine: (7 - 2) / 10 */
  s.sumsq = 0.0;
  lstmd_optim_decide(&s, &rule);
  check_true("decision: cosine half way: lr 0.05", fabsf(s.lr - 0.05f) < 1e-7f && s.applied == 8);
  s.sumsq = NAN;
  lstmd_optim_decide(&s, &rule);
  const long bad_at = s.calls;
  s.sumsq = 1.0;
  lstmd_optim_decide(&s, &rule);
  check_true("decision: a non-finite norm stops every update from then on, and says when",
             !s.apply && s.coef == 0.0f && s.first_bad == bad_at && s.calls == bad_at + 1 &&
                 s.applied == 8);
  /* fp16: the norm is unscaled; an overflow skips and halves the scale; a clean step unscales
   * by the scale the gradients carried. */
  const struct lstmd_optim_rule fp16 = {.lr = 0.1f, .total = 10, .fp16 = 1, .beta1 = 0.9f,
                                        .beta2 = 0.999f};
  struct lstmd_optim_state h = {.sumsq = INFINITY};
  lstmd_loss_scaler_init(&h.scaler);
  lstmd_optim_decide(&h, &fp16);
  check_true("fp16 decision: overflow skips, scale 65536 -> 32768, nothing applied",
             !h.apply && h.scaler.scale == 32768.0f && h.applied == 0 && !h.first_bad && !h.gave_up);
  h.sumsq = 32768.0 * 32768.0 * 9.0; /* norm 3 at scale 32768 */
  h.scaler.good_steps = h.scaler.growth_interval - 1; /* this clean step grows the scale */
  lstmd_optim_decide(&h, &fp16);
  check_true("fp16 decision: clean step: norm 3, coef 1/32768 (the scale it carried), applied "
             "1, the next scale 65536",
             h.apply && h.norm == 3.0 && h.coef == 1.0f / 32768.0f && h.applied == 1 &&
                 h.scaler.scale == 65536.0f);
  int skips = 0;
  for (int i = 0; i < 100 && !h.gave_up; i++) {
    h.sumsq = NAN;
    lstmd_optim_decide(&h, &fp16);
    skips += !h.apply;
  }
  check_true("fp16 decision: 64 overflows in a row give up (and say when)",
             h.gave_up == h.calls && skips == 64 && h.applied == 1);
}

static void test_config_keys(void) {
  struct lstmd_train_config c;
  lstmd_config_defaults(&c);
  check_true("train.device defaults to auto", c.device == LSTMD_DEVICE_AUTO);
  check_true("train.device=cuda / cpu / auto", !lstmd_config_set(&c, "train.device=cuda") &&
                                                   c.device == LSTMD_DEVICE_CUDA &&
                                                   !lstmd_config_set(&c, "train.device=cpu") &&
                                                   c.device == LSTMD_DEVICE_CPU &&
                                                   !lstmd_config_set(&c, "train.device=auto"));
  check_true("train.device=gpu rejected", lstmd_config_set(&c, "train.device=gpu") != 0);
  check_true("train.precision=tf32", !lstmd_config_set(&c, "train.precision=tf32") &&
                                         c.precision == LSTMD_PRECISION_TF32);
  check_true("train.comm_timeout_s: default 600, 0 rejected",
             c.comm_timeout_s == 600.0 && lstmd_config_set(&c, "train.comm_timeout_s=0") != 0);
}

static void test_checkpoint_loss_scale(void) {
  char dir[] = "/tmp/lstmd-test-gpu-logic-XXXXXX", path[256];
  if (!mkdtemp(dir)) return;
  snprintf(path, sizeof path, "%s/ck.safetensors", dir);
  struct lstmd_model_shape shape = {.kind = LSTMD_MODEL_TEXT, .vocab = 5, .embed = 3, .hidden = 4, .layers = 1};
  struct lstmd_model *m = NULL;
  struct lstmd_optim *o = NULL;
  struct lstmd_optim_config oc = {.algo = LSTMD_OPTIM_ADAMW, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f};
  lstmd_model_create(&shape, &m);
  lstmd_optim_create(&oc, m->n_params, &o);
  struct lstmd_data_meta d;
  memset(&d, 0, sizeof d);
  d.info.kind = LSTMD_DATASET_TEXT;
  d.info.vocab_size = 5;
  for (int k = 0; k < 5; k++) d.info.vocab[k] = (uint8_t)('a' + k);
  d.seq_len = 4;
  d.batch = 2;
  struct lstmd_train_progress p = {.step = 7, .loss_scale = 1024.0, .loss_scale_good_steps = 17};
  int rc = lstmd_checkpoint_save(path, m, o, &d, &p, "{}");
  struct lstmd_train_progress q;
  memset(&q, 0, sizeof q);
  if (!rc) rc = lstmd_checkpoint_load_train(path, m, o, &q, NULL);
  check_true("checkpoint keeps the fp16 loss scale",
             rc == 0 && q.step == 7 && q.loss_scale == 1024.0 && q.loss_scale_good_steps == 17);
  p.loss_scale = 0.0;
  rc = lstmd_checkpoint_save(path, m, o, &d, &p, "{}");
  q.loss_scale = 5.0;
  if (!rc) rc = lstmd_checkpoint_load_train(path, m, o, &q, NULL);
  check_true("a checkpoint without one loads with loss scale 0", rc == 0 && q.loss_scale == 0.0);
  unlink(path);
  rmdir(dir);
  lstmd_optim_destroy(o);
  lstmd_model_destroy(m);
}

#if LSTMD_WITH_GPU
static void test_cudnn_math(void) {
  static const struct {
    int dtype, tf32, default_math;
    const char *want, *what;
  } cases[] = {
      {LSTMD_DT_F16, 0, 0, "tensor_op", "fp16: tensor-op math (PyTorch)"},
      {LSTMD_DT_F16, 1, 1, "default", "fp16 with default_math: CUDNN_DEFAULT_MATH"},
      {LSTMD_DT_BF16, 0, 0, "default", "bf16: CUDNN_DEFAULT_MATH (PyTorch), not tensor-op"},
      {LSTMD_DT_BF16, 0, 1, "default", "bf16 with default_math: the same"},
      {LSTMD_DT_F32, 1, 0, "default", "fp32, TF32 allowed: CUDNN_DEFAULT_MATH"},
      {LSTMD_DT_F32, 0, 0, "fma", "fp32, TF32 off: CUDNN_FMA_MATH"},
      {LSTMD_DT_F32, 0, 1, "fma", "fp32, TF32 off, default_math: still FMA (TF32 stays off)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct lstmd_cudnn_lstm_config c = {.input = 8, .hidden = 8, .layers = 2, .steps = 4,
                                        .batch = 2, .dtype = cases[i].dtype,
                                        .allow_tf32 = cases[i].tf32,
                                        .default_math = cases[i].default_math};
    const char *got = lstmd_cudnn_math_name(lstmd_cudnn_lstm_math_type(&c));
    check_true(cases[i].what, !strcmp(got, cases[i].want));
    if (strcmp(got, cases[i].want)) printf("  got %s\n", got);
  }
}

/* Rejected before any cuDNN call, so also here: LSTMD_EINVAL and no object. */
static void test_cudnn_config_rejected(void) {
  static const char *const what[] = {"hidden 0", "dropout 1", "algo 4", "packed 2",
                                     "default_math 2", "dtype 3", "bidirectional 2"};
  for (int k = 0; k < 7; k++) {
    struct lstmd_cudnn_lstm_config c = {.input = 8, .hidden = 8, .layers = 2, .steps = 4,
                                        .batch = 2, .dtype = LSTMD_DT_F16};
    if (k == 0) c.hidden = 0;
    if (k == 1) c.dropout = 1.0f;
    if (k == 2) c.algo = LSTMD_RNN_ALGO_COUNT;
    if (k == 3) c.packed = 2;
    if (k == 4) c.default_math = 2;
    if (k == 5) c.dtype = 3;
    if (k == 6) c.bidirectional = 2;
    struct lstmd_cudnn_lstm *l = (struct lstmd_cudnn_lstm *)&c; /* must be set to NULL */
    char line[96];
    snprintf(line, sizeof line, "cuDNN LSTM config with %s: LSTMD_EINVAL", what[k]);
    check_true(line, lstmd_cudnn_lstm_create(NULL, &c, &l) == LSTMD_EINVAL && l == NULL);
  }
}

static int same_choice(const struct lstmd_cuda_lstm_choice *c, int algo, int packed, int math) {
  return c->algo == algo && c->packed == packed && c->default_math == math;
}

static void test_cudnn_candidates(void) {
  struct lstmd_cuda_lstm_choice c[LSTMD_CUDA_MAX_CANDIDATES];
  struct lstmd_cuda_model_config cfg = {.steps = 4, .batch = 2, .dtype = LSTMD_DT_F32, .algo = -1};
  int timed = -1, ok = 1;
  unsetenv("LSTMD_CUDNN_ALGO");
  int n = lstmd_cuda_model_candidates(&cfg, c, &timed);
  for (int i = 0; i < n && n == 8; i++) ok &= same_choice(&c[i], i / 2, i % 2, 0);
  check_true("fp32, algo -1: 8 timed candidates (4 algorithms x 2 layouts, standard unpacked first)",
             n == 8 && timed == 1 && ok);
  cfg.dtype = LSTMD_DT_BF16;
  n = lstmd_cuda_model_candidates(&cfg, c, &timed);
  ok = n == 8;
  for (int i = 0; i < n && ok; i++) ok &= c[i].default_math == 0;
  check_true("bf16: 8 candidates, no math fallback (default math already)", ok && timed == 1);
  cfg.dtype = LSTMD_DT_F16;
  n = lstmd_cuda_model_candidates(&cfg, c, &timed);
  ok = n == 16;
  for (int i = 0; i < n && ok; i++) ok &= same_choice(&c[i], i / 4, i / 2 % 2, i % 2);
  check_true("fp16: 16 candidates, each tensor-op one followed by its default-math retry",
             ok && timed == 1);
  cfg.algo = LSTMD_RNN_PERSIST_DYNAMIC;
  n = lstmd_cuda_model_candidates(&cfg, c, &timed);
  ok = n == 4;
  for (int i = 0; i < n && ok; i++) ok &= same_choice(&c[i], LSTMD_RNN_PERSIST_DYNAMIC, i / 2, i % 2);
  check_true("fp16, algo persist_dynamic: its 4 layout/math candidates, untimed (first that runs)",
             ok && timed == 0);
  cfg.algo = -1;
  setenv("LSTMD_CUDNN_ALGO", "persist_static", 1);
  cfg.dtype = LSTMD_DT_F32;
  n = lstmd_cuda_model_candidates(&cfg, c, &timed);
  check_true("LSTMD_CUDNN_ALGO=persist_static: forces it (2 layouts, untimed)",
             n == 2 && timed == 0 && same_choice(&c[0], 1, 0, 0) && same_choice(&c[1], 1, 1, 0));
  cfg.force_choice = 1;
  cfg.dtype = LSTMD_DT_F16;
  cfg.choice = (struct lstmd_cuda_lstm_choice){LSTMD_RNN_PERSIST_STATIC_SMALL_H, 1, 1};
  n = lstmd_cuda_model_candidates(&cfg, c, &timed);
  check_true("a forced choice: exactly it, untimed, over LSTMD_CUDNN_ALGO",
             n == 1 && timed == 0 && same_choice(&c[0], LSTMD_RNN_PERSIST_STATIC_SMALL_H, 1, 1));
  setenv("LSTMD_CUDNN_ALGO", "fastest", 1);
  cfg.force_choice = 0;
  check_true("LSTMD_CUDNN_ALGO=fastest: LSTMD_ECONFIG",
             lstmd_cuda_model_candidates(&cfg, c, &timed) == LSTMD_ECONFIG);
  unsetenv("LSTMD_CUDNN_ALGO");
  cfg.algo = LSTMD_RNN_ALGO_COUNT;
  check_true("algo 4: LSTMD_EINVAL", lstmd_cuda_model_candidates(&cfg, c, &timed) == LSTMD_EINVAL);
  cfg.algo = -1;
  cfg.force_choice = 1;
  cfg.dtype = LSTMD_DT_BF16;
  check_true("a forced choice with default_math on bf16: LSTMD_EINVAL (fp16 only)",
             lstmd_cuda_model_candidates(&cfg, c, &timed) == LSTMD_EINVAL);
  cfg.choice = (struct lstmd_cuda_lstm_choice){-1, 0, 0};
  check_true("a forced choice with algo -1: LSTMD_EINVAL",
             lstmd_cuda_model_candidates(&cfg, c, &timed) == LSTMD_EINVAL);
}

/* A sequence classifier (model_cuda.h): cuDNN's standard algorithm, unpacked, only. */
static void test_classifier_candidates(void) {
  struct lstmd_cuda_lstm_choice c[LSTMD_CUDA_MAX_CANDIDATES];
  struct lstmd_cuda_model_config cfg = {.steps = 4, .batch = 2, .dtype = LSTMD_DT_F32, .algo = -1};
  cfg.layout.classify = cfg.layout.bidirectional = 1;
  int timed = -1;
  unsetenv("LSTMD_CUDNN_ALGO");
  int n = lstmd_cuda_model_candidates(&cfg, c, &timed);
  check_true("classifier fp32, algo -1: one candidate, standard unpacked, untimed",
             n == 1 && timed == 0 && same_choice(&c[0], LSTMD_RNN_STANDARD, 0, 0));
  cfg.dtype = LSTMD_DT_F16;
  n = lstmd_cuda_model_candidates(&cfg, c, &timed);
  check_true("classifier fp16: standard unpacked, then its default-math retry",
             n == 2 && timed == 0 && same_choice(&c[0], 0, 0, 0) && same_choice(&c[1], 0, 0, 1));
  cfg.algo = LSTMD_RNN_PERSIST_STATIC;
  check_true("classifier with algo persist_static: LSTMD_EINVAL",
             lstmd_cuda_model_candidates(&cfg, c, &timed) == LSTMD_EINVAL);
  cfg.algo = -1;
  setenv("LSTMD_CUDNN_ALGO", "persist_dynamic", 1);
  check_true("classifier with LSTMD_CUDNN_ALGO=persist_dynamic: LSTMD_ECONFIG",
             lstmd_cuda_model_candidates(&cfg, c, &timed) == LSTMD_ECONFIG);
  setenv("LSTMD_CUDNN_ALGO", "standard", 1);
  n = lstmd_cuda_model_candidates(&cfg, c, &timed);
  check_true("classifier with LSTMD_CUDNN_ALGO=standard: its candidates", n == 2 && timed == 0);
  unsetenv("LSTMD_CUDNN_ALGO");
  cfg.force_choice = 1;
  cfg.choice = (struct lstmd_cuda_lstm_choice){LSTMD_RNN_STANDARD, 1, 0};
  check_true("classifier with a forced packed choice: LSTMD_EINVAL",
             lstmd_cuda_model_candidates(&cfg, c, &timed) == LSTMD_EINVAL);
  cfg.choice = (struct lstmd_cuda_lstm_choice){LSTMD_RNN_STANDARD, 0, 1};
  n = lstmd_cuda_model_candidates(&cfg, c, &timed);
  check_true("classifier with rank 0's choice (standard, unpacked, fp16 default math): it",
             n == 1 && same_choice(&c[0], 0, 0, 1));
}
#endif

int main(void) {
  test_gpu_for_rank();
  test_decide();
  test_probe();
  test_loss_scaler();
  test_optim_decision();
  test_config_keys();
  test_checkpoint_loss_scale();
#if LSTMD_WITH_GPU
  test_cudnn_math();
  test_cudnn_config_rejected();
  test_cudnn_candidates();
  test_classifier_candidates();
#endif
  return check_summary("test_gpu_logic");
}
