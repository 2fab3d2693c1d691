/* model_cuda_choice.c — the cuDNN LSTM set-up of a device model (model_cuda.h), tried and timed.
 *
 * The cuDNN set-up (algorithm, data layout, math type) is chosen once, from the candidates
 * of lstmd_cuda_model_candidates. Each is created and run (one forward + backward of the
 * real (T, B), quietly) by try_candidate: cuDNN may refuse a combination at set-up or only
 * when it first runs, so a candidate counts only once it has run. Timed (time_candidate): on
 * input, output gradient and weights filled with a fixed pseudo-random pattern
 * (lstmd_cuda_fill_hash; zeros again afterwards), a warm-up, then blocks of two runs until
 * two blocks in a row agree within 3% (at most 6 blocks), the candidate's time its fastest
 * block; the fastest candidate is kept. Both after the first GPU run (an H200, 2026-11-27),
 * where one timed block each on zeros chose three set-ups in three runs of one shape, none
 * timed near its training step (21.98 ms reported, 18.9 ms a whole step): a GPU idles at a
 * low clock and raises it under load, during the first candidates, and zeros run faster
 * than data (lower power, higher clocks). fp16's default-math
 * candidate is tried only where the tensor-op one before it failed (lstm_cudnn.c, 4.).
 * Forced (an algorithm or a full choice): the first that runs is kept; none →
 * LSTMD_EUNSUPPORTED naming what was tried. When nothing runs, the first candidate is run
 * once more with cuDNN's messages on, so the log says why. */
#include "model_cuda_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check.h"

/* The timing trials' data (see above): with on, the LSTM's input and output gradient hold a
 * fixed pseudo-random fill instead of zeros; with !on, zeros again, as set-up left them. */
static int trial_data(struct lstmd_cuda_model *m, int on) {
  const struct lstmd_cuda_model_layout *l = &m->cfg.layout;
  const size_t N = (size_t)m->cfg.steps * m->cfg.batch;
  const size_t nx = N * (size_t)input_width(l), ndy = N * (size_t)l->hidden * dirs(l);
  const int xt = m->x16 ? m->cfg.dtype : LSTMD_DT_F32, dyt = m->dy16 ? m->cfg.dtype : LSTMD_DT_F32;
  void *x = lstm_input(m), *dy = m->dy16 ? m->dy16 : (void *)m->dyf;
  if (!on) {
    LSTMD_CHECK_CUDA(cudaMemsetAsync(x, 0, nx * lstmd_dtype_bytes(xt), m->stream));
    LSTMD_CHECK_CUDA(cudaMemsetAsync(dy, 0, ndy * lstmd_dtype_bytes(dyt), m->stream));
    return LSTMD_OK;
  }
  LSTMD_TRY(lstmd_cuda_fill_hash(nx, x, xt, 1.0f, 1, m->stream));
  return lstmd_cuda_fill_hash(ndy, dy, dyt, 1e-3f, 2, m->stream);
}

/* One forward + backward of the LSTM alone, for trying the candidates. */
static int lstm_trial(struct lstmd_cuda_model *m, struct lstmd_cudnn_lstm *l) {
  LSTMD_TRY(lstmd_cudnn_lstm_forward(l, 1, lstm_input(m), m->y_rnn, NULL, NULL, NULL, NULL));
  return lstmd_cudnn_lstm_backward(l, lstm_input(m), m->y_rnn, m->dy16 ? m->dy16 : m->dyf,
                                   m->dx_rnn, NULL, NULL);
}

static int parse_algo(const char *s) {
  for (int a = 0; a < LSTMD_RNN_ALGO_COUNT; a++)
    if (!strcmp(s, lstmd_rnn_algo_name(a))) return a;
  return -2;
}

int lstmd_cuda_model_candidates(const struct lstmd_cuda_model_config *cfg,
                                struct lstmd_cuda_lstm_choice *out, int *timed) {
  *timed = 0;
  const int maths = cfg->dtype == LSTMD_DT_F16 ? 2 : 1; /* only fp16 has a fallback math */
  const int clf = cfg->layout.classify; /* standard, unpacked only (see model_cuda.h) */
  if (cfg->force_choice) {
    const struct lstmd_cuda_lstm_choice *c = &cfg->choice;
    if (c->algo < 0 || c->algo >= LSTMD_RNN_ALGO_COUNT || (c->packed != 0 && c->packed != 1) ||
        c->default_math < 0 || c->default_math >= maths ||
        (clf && (c->algo != LSTMD_RNN_STANDARD || c->packed))) {
      lstmd_errorf("GPU model: invalid forced cuDNN choice (algo %d, packed %d, default_math %d%s)",
                   c->algo, c->packed, c->default_math,
                   clf ? "; a classifier runs the standard algorithm unpacked only"
                   : maths == 1 ? "; default_math is for fp16 only" : "");
      return LSTMD_EINVAL;
    }
    out[0] = *c;
    return 1;
  }
  int forced = cfg->algo;
  const char *env = getenv("LSTMD_CUDNN_ALGO");
  if (env && *env) {
    forced = parse_algo(env);
    if (forced < 0) {
      lstmd_errorf("LSTMD_CUDNN_ALGO=%s: not one of standard, persist_static, persist_dynamic, "
                   "persist_static_small_h", env);
      return LSTMD_ECONFIG;
    }
  } else if (forced < -1 || forced >= LSTMD_RNN_ALGO_COUNT) {
    lstmd_errorf("GPU model: invalid cuDNN algorithm %d", forced);
    return LSTMD_EINVAL;
  }
  if (clf) {
    if (forced > LSTMD_RNN_STANDARD) {
      lstmd_errorf("%s%s: a sequence classifier runs cuDNN's standard algorithm only (columns of "
                   "different lengths)", env && *env ? "LSTMD_CUDNN_ALGO=" : "cuDNN algorithm ",
                   lstmd_rnn_algo_name(forced));
      return env && *env ? LSTMD_ECONFIG : LSTMD_EINVAL;
    }
    for (int math = 0; math < maths; math++)
      out[math] = (struct lstmd_cuda_lstm_choice){LSTMD_RNN_STANDARD, 0, math};
    return maths;
  }
  int n = 0;
  for (int a = 0; a < LSTMD_RNN_ALGO_COUNT; a++)
    for (int packed = 0; packed < 2 && (forced < 0 || a == forced); packed++)
      for (int math = 0; math < maths; math++)
        out[n++] = (struct lstmd_cuda_lstm_choice){a, packed, math};
  *timed = forced < 0;
  return n;
}

static struct lstmd_cudnn_lstm_config lstm_config(const struct lstmd_cuda_model *m,
                                                  const struct lstmd_cuda_lstm_choice *c, int quiet) {
  const struct lstmd_cuda_model_layout *lay = &m->cfg.layout;
  return (struct lstmd_cudnn_lstm_config){
      .input = input_width(lay), .hidden = lay->hidden, .layers = lay->layers,
      .steps = m->cfg.steps, .batch = m->cfg.batch, .dtype = m->cfg.dtype,
      .allow_tf32 = m->cfg.allow_tf32, .dropout = m->cfg.dropout, .seed = m->cfg.seed,
      .algo = c->algo, .packed = c->packed, .default_math = c->default_math, .quiet = quiet,
      .bidirectional = dirs(lay) == 2};
}

/* "persist_static, packed layout, tensor_op math" */
static void describe_choice(const struct lstmd_cuda_model *m, const struct lstmd_cuda_lstm_choice *c,
                            char *buf, size_t n) {
  const struct lstmd_cudnn_lstm_config lc = lstm_config(m, c, 1);
  snprintf(buf, n, "%s, %s layout, %s math", lstmd_rnn_algo_name(c->algo),
           c->packed ? "packed" : "unpacked", lstmd_cudnn_math_name(lstmd_cudnn_lstm_math_type(&lc)));
}

/* *ms: one forward + backward of l, from blocks of kRuns runs timed with events until two
 * blocks in a row agree within 3% (at most kBlocks): the fastest block (see above). */
static int time_candidate(struct lstmd_cuda_model *m, struct lstmd_cudnn_lstm *l, cudaEvent_t t0,
                          cudaEvent_t t1, double *ms) {
  enum { kRuns = 2, kBlocks = 6 };
  double best = 0.0, prev = 0.0;
  for (int b = 0; b < kBlocks; b++) {
    float f = 0.0f;
    if (LSTMD_CUDA_FAILED(cudaEventRecord(t0, m->stream))) return LSTMD_ECUDA;
    for (int i = 0; i < kRuns; i++) LSTMD_TRY(lstm_trial(m, l));
    if (LSTMD_CUDA_FAILED(cudaEventRecord(t1, m->stream)) || LSTMD_CUDA_FAILED(cudaEventSynchronize(t1)) ||
        LSTMD_CUDA_FAILED(cudaEventElapsedTime(&f, t0, t1)))
      return LSTMD_ECUDA;
    const double one = f / (double)kRuns;
    if (b == 0 || one < best) best = one;
    if (b > 0 && fabs(one - prev) <= 0.03 * prev) break;
    prev = one;
  }
  *ms = best;
  return LSTMD_OK;
}

/* Creates the LSTM for candidate c and runs it (see above): one forward + backward, or with
 * events a warm-up and time_candidate (*ms). quiet: cuDNN's refusals unprinted. Returns
 * 0 with *out (no longer quiet); else *out is NULL and the status says why: LSTMD_EUNSUPPORTED
 * for a quiet refusal at set-up or run, LSTMD_ENOMEM, LSTMD_ECUDA (printed). */
static int try_candidate(struct lstmd_cuda_model *m, const struct lstmd_cuda_lstm_choice *c,
                         int quiet, cudaEvent_t t0, cudaEvent_t t1, double *ms,
                         struct lstmd_cudnn_lstm **out) {
  *out = NULL;
  *ms = 0.0;
  const struct lstmd_cudnn_lstm_config lc = lstm_config(m, c, quiet);
  struct lstmd_cudnn_lstm *l = NULL;
  LSTMD_TRY(lstmd_cudnn_lstm_create(m->dnn, &lc, &l));
  int rc = LSTMD_OK;
  if (t0) /* timed on weights that are not zero, like the input (see above) */
    rc = lstmd_cuda_fill_hash(lstmd_cudnn_lstm_weight_count(l), lstmd_cudnn_lstm_weights(l),
                              m->cfg.dtype, 1.0f / sqrtf((float)m->cfg.layout.hidden), 3, m->stream);
  if (!rc) rc = lstm_trial(m, l); /* the trial, or the warm-up (and the first call's set-up) */
  if (!rc && t0) rc = time_candidate(m, l, t0, t1, ms);
  /* Drain what the calls enqueued: a kernel that fails does so here, not at the call. A
   * non-sticky error is cleared (the next candidate gets a clean slate); a sticky one fails
   * every later call too, and the explanation run prints it. */
  cudaError_t e = cudaStreamSynchronize(m->stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) {
    if (!quiet) lstmd_errorf("cuDNN LSTM trial run: %s", cudaGetErrorString(e));
    cudaGetLastError();
    if (!rc) rc = quiet ? LSTMD_EUNSUPPORTED : LSTMD_ECUDA;
  }
  if (rc) {
    lstmd_cudnn_lstm_destroy(l);
    return rc;
  }
  lstmd_cudnn_lstm_set_quiet(l, 0);
  *out = l;
  return LSTMD_OK;
}

/* Creates m->lstm from the candidates (see above). */
int lstmd_cuda_model_choose_lstm(struct lstmd_cuda_model *m) {
  struct lstmd_cuda_lstm_choice cand[LSTMD_CUDA_MAX_CANDIDATES];
  int timed = 0;
  const int n = lstmd_cuda_model_candidates(&m->cfg, cand, &timed);
  if (n < 0) return n;
  cudaEvent_t t0 = NULL, t1 = NULL;
  if (timed && (LSTMD_CUDA_FAILED(cudaEventCreate(&t0)) || LSTMD_CUDA_FAILED(cudaEventCreate(&t1)))) {
    if (t0) cudaEventDestroy(t0);
    return LSTMD_ECUDA;
  }
  if (timed && trial_data(m, 1)) {
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return LSTMD_ECUDA;
  }
  double best_ms = 0.0;
  char tried[768] = "", one[96];
  int prev_ok = 0, n_tried = 0;
  for (int i = 0; i < n && !(m->lstm && !timed); i++) {
    const struct lstmd_cuda_lstm_choice *c = &cand[i];
    if (c->default_math && prev_ok) continue; /* the tensor-op one before it ran: no retry */
    struct lstmd_cudnn_lstm *l = NULL;
    double ms = 0.0;
    const int r = try_candidate(m, c, 1, t0, t1, &ms, &l);
    prev_ok = r == LSTMD_OK;
    describe_choice(m, c, one, sizeof one);
    n_tried++;
    if (strlen(tried) + strlen(one) + 4 < sizeof tried)
      snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s", i ? "; " : "", one);
    if (r) continue; /* refused, or e.g. out of memory beside the best so far: skipped */
    if (!m->lstm || ms < best_ms) {
      lstmd_cudnn_lstm_destroy(m->lstm);
      m->lstm = l;
      m->choice = *c;
      best_ms = ms;
    } else {
      lstmd_cudnn_lstm_destroy(l);
    }
  }
  if (t0 && LSTMD_CUDA_FAILED(cudaEventDestroy(t0))) return LSTMD_ECUDA;
  if (t1 && LSTMD_CUDA_FAILED(cudaEventDestroy(t1))) return LSTMD_ECUDA;
  m->trial_ms = timed ? best_ms : 0.0;
  if (timed) LSTMD_TRY(trial_data(m, 0));
  if (timed && m->lstm) /* zero weights again, as lstmd_cudnn_lstm_create leaves them */
    LSTMD_CHECK_CUDA(cudaMemsetAsync(lstmd_cudnn_lstm_weights(m->lstm), 0,
                                     lstmd_cudnn_lstm_weight_count(m->lstm) * lstmd_dtype_bytes(m->cfg.dtype),
                                     m->stream));
  if (!m->lstm) { /* the first candidate once more, with cuDNN's messages on */
    double ms = 0.0;
    const int r = try_candidate(m, &cand[0], 0, NULL, NULL, &ms, &m->lstm);
    if (r) {
      if (timed)
        lstmd_errorf("cuDNN runs none of its LSTM set-ups for this shape and type (%d tried: %s)",
                     n_tried, tried);
      else
        lstmd_errorf("cuDNN LSTM %s %s failed its trial forward+backward (tried: %s)",
                     m->cfg.force_choice ? "choice" : "algorithm", lstmd_rnn_algo_name(cand[0].algo),
                     tried);
      return r == LSTMD_ENOMEM ? r : LSTMD_EUNSUPPORTED;
    }
    m->choice = cand[0];
  }
  /* The trials accumulated weight gradients: start from zero. */
  return lstmd_cudnn_lstm_zero_dweights(m->lstm);
}
