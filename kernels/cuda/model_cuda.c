/* model_cuda.c — the model's forward and backward on one device (see model_cuda.h).
 *
 * cuBLAS is column-major; our matrices are row-major, so a row-major [R,C] matrix is a
 * column-major C×R one. With Y [N,H] the LSTM output, W [O,H] the head and G [N,O] the logits'
 * gradient:
 *   logits = Y·Wᵀ  → sgemm(T, N, O, N, H, W, ld H, Y, ld H, → ld O)
 *   dY     = G·W   → sgemm(N, N, H, N, O, W, ld H, G, ld O, → ld H)
 *   dW    += Gᵀ·Y  → sgemm(N, T, H, O, N, Y, ld H, G, ld O, → ld H)
 *   db    += Gᵀ·1  → sgemv(N, O, N, G, ld O, ones);   logits += b·1ᵀ → sger(O, N, b, ones)
 *
 * 1. The cuDNN set-up (algorithm, data layout, math type): model_cuda_choice.c.
 * 2. Every device write at set-up (zeroing, the ones vector, the weight maps) is on the model's
 *    stream, which is non-blocking: a legacy-stream cudaMemcpy would not wait for the zeroing
 *    before it and could be overwritten by it. The stream is synchronised before create returns.
 * 3. Regions carved from one allocation (h and c in each state buffer, in the fp32 staging)
 *    start at 256-byte offsets: with 16-bit data and L·B·H odd, c right after h would be only
 *    2-byte aligned.
 * 4. Layer normalisation (layout.layer_norm): cuDNN has no such mode, so the LSTM is
 *    lstm_ln_cuda.h's stack, which reads the flat fp32 parameters directly and adds its weight
 *    gradients straight into the flat gradients (no weight space to load or flush); fp32 only.
 * 5. The sequence classifier (layout.classify; classify.c is the reference it must equal): the
 *    head reads pooled [B,D·H] instead of the LSTM output, so the formulas above hold with
 *    N → B, H → D·H, O → C and Y → pooled. The LSTM runs on padded columns with their own
 *    lengths (lstm_cudnn.h's set_lengths, from the host lengths of set_lengths, and on the
 *    device a copy clamped to ≥ 1 that a kernel makes from the inputs on the stream, so no host
 *    copy is waited for). cuDNN's bidirectional mode reverses each column within its own length,
 *    which is what classify.c's gather/scatter does. An empty column (length 0) runs one step of
 *    padding in cuDNN (whether cuDNN takes a 0 is not documented in the headers); it is pooled
 *    to 0, has no loss and a zero logits gradient, so it adds nothing to any gradient, and the
 *    embedding gradient reads the valid steps only. The initial state is zero (no carry). */
#define _GNU_SOURCE
#include "model_cuda.h"
#include "model_cuda_internal.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check.h"
#include "classify_cuda.h"
#include "convert_cuda.h"
#include "dense_cuda.h"
#include "lstm_cudnn.h"

static int dev_alloc(struct lstmd_cuda_model *m, void **p, size_t bytes, const char *what) {
  *p = NULL;
  if (bytes == 0) return LSTMD_OK;
  if (m->n_allocs == kMaxAllocs) return LSTMD_ENOMEM;
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *p = NULL;
    lstmd_errorf("CUDA: cannot allocate %.1f MiB for %s: %s", (double)bytes / 1048576.0, what,
                 cudaGetErrorString(e));
    return LSTMD_ENOMEM;
  }
  m->allocs[m->n_allocs++] = *p;
  m->device_bytes += bytes;
  LSTMD_CHECK_CUDA(cudaMemsetAsync(*p, 0, bytes, m->stream));
  return LSTMD_OK;
}

static size_t align256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

static int alloc_activations(struct lstmd_cuda_model *m) {
  const struct lstmd_cuda_model_layout *l = &m->cfg.layout;
  const size_t N = (size_t)m->cfg.steps * m->cfg.batch, H = (size_t)l->hidden * dirs(l);
  const size_t I = (size_t)input_width(l), O = (size_t)output_width(l);
  const size_t es = lstmd_dtype_bytes(m->cfg.dtype), B = (size_t)m->cfg.batch;
  const size_t S = (size_t)l->layers * B * l->hidden; /* the carried state (never a classifier's) */
  const size_t rows = l->classify ? B : N; /* of the head's output */
  const int half = m->cfg.dtype != LSTMD_DT_F32;
  if (l->classify) {
    LSTMD_TRY(dev_alloc(m, (void **)&m->in.ids, N * sizeof(int32_t), "token ids"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->in.lengths, B * sizeof(int32_t), "sequence lengths"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->in.labels, B * sizeof(int32_t), "labels"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->seq_dev, B * sizeof(int32_t), "cuDNN sequence lengths"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->xf, N * I * sizeof(float), "embedded inputs"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->row_loss, B * sizeof(float), "column losses"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->pooled, B * H * sizeof(float), "pooled outputs"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->dpooled, B * H * sizeof(float), "pooled gradient"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->argmax, B * H * sizeof(int32_t), "pooling steps"));
    if (half) LSTMD_TRY(dev_alloc(m, (void **)&m->dxf, N * I * sizeof(float), "input gradient"));
  } else if (l->text) {
    LSTMD_TRY(dev_alloc(m, (void **)&m->in.ids, N * sizeof(int32_t), "token ids"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->in.targets, N * sizeof(int32_t), "targets"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->xf, N * I * sizeof(float), "embedded inputs"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->row_loss, N * sizeof(float), "row losses"));
    if (half) LSTMD_TRY(dev_alloc(m, (void **)&m->dxf, N * I * sizeof(float), "input gradient"));
  } else {
    LSTMD_TRY(dev_alloc(m, (void **)&m->in.x, N * I * sizeof(float), "input rows"));
    LSTMD_TRY(dev_alloc(m, (void **)&m->in.y, N * O * sizeof(float), "target rows"));
  }
  if (half) LSTMD_TRY(dev_alloc(m, &m->x16, N * I * es, "16-bit inputs"));
  LSTMD_TRY(dev_alloc(m, &m->y_rnn, N * H * es, "LSTM output"));
  if (half) LSTMD_TRY(dev_alloc(m, (void **)&m->yf, N * H * sizeof(float), "LSTM output (fp32)"));
  else m->yf = m->y_rnn;
  LSTMD_TRY(dev_alloc(m, (void **)&m->out, rows * O * sizeof(float), "head output"));
  LSTMD_TRY(dev_alloc(m, (void **)&m->dyf, N * H * sizeof(float), "output gradient"));
  if (half) LSTMD_TRY(dev_alloc(m, &m->dy16, N * H * es, "16-bit output gradient"));
  LSTMD_TRY(dev_alloc(m, &m->dx_rnn, N * I * es, "LSTM input gradient"));
  if (!half && (l->text || l->classify)) m->dxf = m->dx_rnn;
  m->c_off = align256(S * es);
  m->cf_off = align256(S * sizeof(float)) / sizeof(float);
  LSTMD_TRY(dev_alloc(m, &m->state[0], m->c_off + S * es, "recurrent state"));
  LSTMD_TRY(dev_alloc(m, &m->state[1], m->c_off + S * es, "recurrent state"));
  LSTMD_TRY(dev_alloc(m, (void **)&m->state_f, (m->cf_off + S) * sizeof(float), "state staging"));
  LSTMD_TRY(dev_alloc(m, (void **)&m->ones, N * sizeof(float), "ones"));
  LSTMD_TRY(dev_alloc(m, (void **)&m->eval_loss, sizeof(double), "evaluation loss"));
  const size_t n_segs = 16 * (size_t)l->layers * dirs(l);
  LSTMD_TRY(dev_alloc(m, (void **)&m->segs, sizeof(struct lstmd_cuda_segment) * n_segs, "weight map"));
  LSTMD_TRY(dev_alloc(m, (void **)&m->segs_back, sizeof(struct lstmd_cuda_segment) * n_segs,
                      "weight map"));
  float *ones = malloc(N * sizeof(float));
  if (!ones) return LSTMD_ENOMEM;
  for (size_t i = 0; i < N; i++) ones[i] = 1.0f;
  /* After the zeroing on the same stream (see 2. above); synchronised before ones is freed. */
  int rc = LSTMD_CUDA_FAILED(cudaMemcpyAsync(m->ones, ones, N * sizeof(float),
                                             cudaMemcpyHostToDevice, m->stream)) ||
                   LSTMD_CUDA_FAILED(cudaStreamSynchronize(m->stream))
               ? LSTMD_ECUDA
               : LSTMD_OK;
  free(ones);
  LSTMD_TRY(rc);
  m->state_zero = 1;
  return LSTMD_OK;
}

/* The layer-normalised stack (see 4.). */
static int create_ln(struct lstmd_cuda_model *m) {
  const struct lstmd_cuda_model_layout *l = &m->cfg.layout;
  if (m->cfg.dtype != LSTMD_DT_F32 || (m->cfg.dropout > 0.0f && l->layers > 1)) {
    lstmd_errorf("GPU model: the layer-normalised LSTM runs in fp32/tf32 without dropout only");
    return LSTMD_EINVAL;
  }
  const struct lstmd_cuda_ln_config c = {.input = input_width(l), .hidden = l->hidden,
                                         .layers = l->layers, .steps = m->cfg.steps,
                                         .batch = m->cfg.batch, .layer = l->ln};
  return lstmd_cuda_ln_create(&c, m->blas, &m->ln);
}

int lstmd_cuda_model_create(const struct lstmd_cuda_model_config *cfg, void *stream,
                            struct lstmd_cuda_model **out) {
  *out = NULL;
  const struct lstmd_cuda_model_layout *lay = &cfg->layout;
  if (lay->layers < 1 || lay->layers > LSTMD_CUDA_MAX_LAYERS || cfg->steps < 1 || cfg->batch < 1 ||
      (lay->classify && (lay->text || lay->layer_norm || lay->classes < 2 ||
                         lay->pool < 0 || lay->pool > 2 || (lay->bidirectional & ~1)))) {
    lstmd_errorf("GPU model: invalid shape (L %d, T %d, B %d%s)", lay->layers, cfg->steps,
                 cfg->batch, lay->classify ? ", or a classifier's classes/pool/direction" : "");
    return LSTMD_EINVAL;
  }
  struct lstmd_cuda_model *m = calloc(1, sizeof *m);
  if (!m) return LSTMD_ENOMEM;
  m->cfg = *cfg;
  m->stream = (cudaStream_t)stream;
  int rc = LSTMD_OK;
  if (LSTMD_CUDNN_FAILED(cudnnCreate(&m->dnn))) {
    m->dnn = NULL;
    rc = LSTMD_ECUDA;
  }
  if (!rc && LSTMD_CUDNN_FAILED(cudnnSetStream(m->dnn, m->stream))) rc = LSTMD_ECUDA;
  if (!rc && LSTMD_CUBLAS_FAILED(cublasCreate(&m->blas))) {
    m->blas = NULL;
    rc = LSTMD_ECUDA;
  }
  if (!rc && LSTMD_CUBLAS_FAILED(cublasSetStream(m->blas, m->stream))) rc = LSTMD_ECUDA;
  const int tf32 = cfg->dtype != LSTMD_DT_F32 || cfg->allow_tf32;
  if (!rc && LSTMD_CUBLAS_FAILED(cublasSetMathMode(m->blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                          : CUBLAS_DEFAULT_MATH)))
    rc = LSTMD_ECUDA;
  if (!rc) rc = alloc_activations(m);
  if (!rc && lay->layer_norm) rc = create_ln(m);
  else if (!rc) rc = lstmd_cuda_model_choose_lstm(m);
  struct lstmd_cuda_segment *segs = NULL; /* [2][16·L]: flat → weight space, and back */
  if (!rc && !lay->layer_norm) {
    segs = malloc(sizeof *segs * 2 * 16 * lay->layers * dirs(lay));
    rc = segs ? lstmd_cudnn_lstm_weight_map(m->lstm, lay->off_w_ih, lay->off_w_hh, lay->off_b_ih,
                                            lay->off_b_hh, segs)
              : LSTMD_ENOMEM;
  }
  if (!rc && !lay->layer_norm) { /* the layer-normalised stack has no weight space (see 4.) */
    m->n_segs = 16 * lay->layers * dirs(lay);
    struct lstmd_cuda_segment *back = segs + m->n_segs;
    for (int i = 0; i < m->n_segs; i++) { /* the same pieces, weight space → flat */
      if (segs[i].count > m->max_seg) m->max_seg = segs[i].count;
      back[i] = (struct lstmd_cuda_segment){segs[i].dst_offset, segs[i].src_offset, segs[i].count};
    }
    /* On the model's stream, after the zeroing (see 2. above); synchronised below, before
     * segs is freed and before any use. */
    if (LSTMD_CUDA_FAILED(cudaMemcpyAsync(m->segs, segs, sizeof *segs * m->n_segs,
                                          cudaMemcpyHostToDevice, m->stream)) ||
        LSTMD_CUDA_FAILED(cudaMemcpyAsync(m->segs_back, back, sizeof *segs * m->n_segs,
                                          cudaMemcpyHostToDevice, m->stream)))
      rc = LSTMD_ECUDA;
  }
  /* Everything above was enqueued on our stream: done before the caller's streams use it. */
  if (LSTMD_CUDA_FAILED(cudaStreamSynchronize(m->stream)) && !rc) rc = LSTMD_ECUDA;
  free(segs);
  if (rc) {
    lstmd_cuda_model_destroy(m);
    return rc;
  }
  *out = m;
  return LSTMD_OK;
}

void lstmd_cuda_model_destroy(struct lstmd_cuda_model *m) {
  if (!m) return;
  if (m->stream) cudaStreamSynchronize(m->stream);
  lstmd_cudnn_lstm_destroy(m->lstm);
  lstmd_cuda_ln_destroy(m->ln);
  for (int i = 0; i < m->n_allocs; i++) cudaFree(m->allocs[i]);
  if (m->blas) cublasDestroy(m->blas);
  if (m->dnn) cudnnDestroy(m->dnn);
  free(m);
}

struct lstmd_cuda_inputs *lstmd_cuda_model_inputs(struct lstmd_cuda_model *m) { return &m->in; }

double lstmd_cuda_model_choice(const struct lstmd_cuda_model *m, struct lstmd_cuda_lstm_choice *out) {
  *out = m->choice;
  return m->trial_ms;
}

size_t lstmd_cuda_model_device_bytes(const struct lstmd_cuda_model *m) {
  return m->device_bytes + (m->lstm ? lstmd_cudnn_lstm_device_bytes(m->lstm) : 0) +
         (m->ln ? lstmd_cuda_ln_device_bytes(m->ln) : 0);
}

int lstmd_cuda_model_load_weights(struct lstmd_cuda_model *m, const float *params) {
  if (m->ln) return LSTMD_OK; /* it reads the flat parameters (see 4.) */
  return lstmd_cuda_copy_segments(m->n_segs, m->segs, m->max_seg, params, LSTMD_DT_F32,
                                  lstmd_cudnn_lstm_weights(m->lstm), m->cfg.dtype, 0, m->stream);
}

int lstmd_cuda_model_zero_lstm_grads(struct lstmd_cuda_model *m) {
  if (m->ln) return LSTMD_OK; /* it adds into the flat gradients (see 4.) */
  return lstmd_cudnn_lstm_zero_dweights(m->lstm);
}

int lstmd_cuda_model_set_lengths(struct lstmd_cuda_model *m, const int32_t *host_lengths) {
  const int B = m->cfg.batch, T = m->cfg.steps;
  if (!m->cfg.layout.classify || !m->lstm) {
    lstmd_errorf("GPU model: sequence lengths are for a classifier");
    return LSTMD_EINVAL;
  }
  int32_t *clamped = malloc((size_t)B * sizeof *clamped);
  if (!clamped) return LSTMD_ENOMEM;
  int rc = LSTMD_OK;
  for (int b = 0; b < B && !rc; b++) {
    if (host_lengths[b] < 0 || host_lengths[b] > T) {
      lstmd_errorf("GPU model: column %d has length %d, the batch holds 0..%d steps", b,
                   host_lengths[b], T);
      rc = LSTMD_EINVAL;
    }
    clamped[b] = host_lengths[b] > 1 ? host_lengths[b] : 1; /* as the device copy (see 5.) */
  }
  if (!rc) rc = lstmd_cudnn_lstm_set_lengths(m->lstm, clamped, m->seq_dev);
  free(clamped);
  m->lengths_set = rc == LSTMD_OK;
  return rc;
}

/* The classifier's forward (see 5.): one batch of whole sequences from a zero state. */
static int classify_forward(struct lstmd_cuda_model *m, const float *params, float grad_scale,
                            int training, double *loss_acc) {
  const struct lstmd_cuda_model_layout *l = &m->cfg.layout;
  const int T = m->cfg.steps, B = m->cfg.batch, N = T * B, H = l->hidden, D = dirs(l);
  const int DH = D * H, E = l->embed, C = l->classes;
  const float one = 1.0f, zero = 0.0f;
  if (!m->lengths_set) {
    lstmd_errorf("GPU model: a classifier's forward without its batch's lengths (set_lengths)");
    return LSTMD_EINVAL;
  }
  m->lengths_set = 0; /* every batch brings its own */
  LSTMD_TRY(lstmd_cuda_embedding_forward(N, E, params + l->off_embed, m->in.ids, m->xf, m->stream));
  if (m->x16)
    LSTMD_TRY(lstmd_cuda_cast((size_t)N * E, m->xf, LSTMD_DT_F32, m->x16, m->cfg.dtype, m->stream));
  LSTMD_TRY(lstmd_cuda_clf_seq_lengths(B, m->in.lengths, m->seq_dev, m->stream));
  const void *x_rnn = lstm_input(m);
  LSTMD_TRY(lstmd_cudnn_lstm_forward(m->lstm, training, x_rnn, m->y_rnn, NULL, NULL, NULL, NULL));
  m->bw_x = x_rnn;
  m->bw_hx = m->bw_cx = NULL;
  m->state_zero = 1;
  if (m->yf != m->y_rnn)
    LSTMD_TRY(lstmd_cuda_cast((size_t)N * DH, m->y_rnn, m->cfg.dtype, m->yf, LSTMD_DT_F32, m->stream));
  LSTMD_TRY(lstmd_cuda_clf_pool_forward(T, B, H, D, l->pool, m->yf, m->in.lengths, m->pooled,
                                        m->argmax, m->stream));
  LSTMD_CHECK_CUBLAS(cublasSgemm(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, C, B, DH, &one,
                                 params + l->off_head_w, DH, m->pooled, DH, &zero, m->out, C));
  LSTMD_CHECK_CUBLAS(cublasSger(m->blas, C, B, &one, params + l->off_head_b, 1, m->ones, 1, m->out, C));
  LSTMD_TRY(lstmd_cuda_clf_softmax_xent(B, C, m->out, m->in.labels, m->in.lengths, grad_scale,
                                        training ? m->loss_scale : NULL, m->row_loss, m->stream));
  return lstmd_cuda_sum((size_t)B, m->row_loss, loss_acc, m->stream);
}

/* The classifier's backward (see 5.), in the order of the regions' readiness. */
static int classify_backward(struct lstmd_cuda_model *m, const float *params, float *grads,
                             int flush, lstmd_cuda_ready_fn ready, void *ctx) {
  const struct lstmd_cuda_model_layout *l = &m->cfg.layout;
  const int T = m->cfg.steps, B = m->cfg.batch, N = T * B, H = l->hidden, D = dirs(l);
  const int DH = D * H, E = l->embed, C = l->classes;
  const float one = 1.0f, zero = 0.0f;
  LSTMD_CHECK_CUBLAS(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_T, DH, C, B, &one, m->pooled, DH,
                                 m->out, C, &one, grads + l->off_head_w, DH));
  LSTMD_CHECK_CUBLAS(cublasSgemv(m->blas, CUBLAS_OP_N, C, B, &one, m->out, C, m->ones, 1, &one,
                                 grads + l->off_head_b, 1));
  LSTMD_CHECK_CUBLAS(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_N, DH, B, C, &one,
                                 params + l->off_head_w, DH, m->out, C, &zero, m->dpooled, DH));
  if (ready) LSTMD_TRY(ready(ctx, l->off_head_w));
  LSTMD_TRY(lstmd_cuda_clf_pool_backward(T, B, H, D, l->pool, m->dpooled, m->in.lengths, m->argmax,
                                         m->dyf, m->stream));
  void *dy = m->dyf;
  if (m->dy16) {
    LSTMD_TRY(lstmd_cuda_cast((size_t)N * DH, m->dyf, LSTMD_DT_F32, m->dy16, m->cfg.dtype, m->stream));
    dy = m->dy16;
  }
  LSTMD_TRY(lstmd_cudnn_lstm_backward(m->lstm, m->bw_x, m->y_rnn, dy, m->dx_rnn, NULL, NULL));
  if (flush) {
    LSTMD_TRY(lstmd_cuda_copy_segments(m->n_segs, m->segs_back, m->max_seg,
                                       lstmd_cudnn_lstm_dweights(m->lstm), m->cfg.dtype, grads,
                                       LSTMD_DT_F32, flush == LSTMD_FLUSH_ADD, m->stream));
    if (ready) LSTMD_TRY(ready(ctx, l->off_w_ih[0]));
  }
  if (m->dxf != m->dx_rnn)
    LSTMD_TRY(lstmd_cuda_cast((size_t)N * E, m->dx_rnn, m->cfg.dtype, m->dxf, LSTMD_DT_F32, m->stream));
  LSTMD_TRY(lstmd_cuda_clf_embedding_backward(T, B, E, m->dxf, m->in.ids, m->in.lengths,
                                              grads + l->off_embed, m->stream));
  if (ready) LSTMD_TRY(ready(ctx, 0));
  return LSTMD_OK;
}

int lstmd_cuda_model_forward(struct lstmd_cuda_model *m, const float *params, float grad_scale,
                             int training, int carry_state, double *loss_acc) {
  const struct lstmd_cuda_model_layout *l = &m->cfg.layout;
  if (l->classify) {
    if (carry_state) {
      lstmd_errorf("GPU model: a classifier carries no state between batches");
      return LSTMD_EINVAL;
    }
    return classify_forward(m, params, grad_scale, training, loss_acc);
  }
  const int N = m->cfg.steps * m->cfg.batch, H = l->hidden, O = output_width(l);
  const int I = input_width(l);
  const float one = 1.0f, zero = 0.0f;
  const float *scale_by = training ? m->loss_scale : NULL;
  if (l->text)
    LSTMD_TRY(lstmd_cuda_embedding_forward(N, l->embed, params + l->off_embed, m->in.ids, m->xf,
                                           m->stream));
  if (m->x16)
    LSTMD_TRY(lstmd_cuda_cast((size_t)N * I, l->text ? m->xf : m->in.x, LSTMD_DT_F32, m->x16,
                              m->cfg.dtype, m->stream));
  const void *x_rnn = lstm_input(m);
  /* The final state goes to the other buffer, so the initial one stays intact for backward. */
  const char *hx = m->state_zero ? NULL : (const char *)m->state[m->cur];
  const char *cx = hx ? hx + m->c_off : NULL;
  char *hy = carry_state ? (char *)m->state[1 - m->cur] : NULL;
  char *cy = hy ? hy + m->c_off : NULL;
  if (m->ln)
    LSTMD_TRY(lstmd_cuda_ln_forward(m->ln, params, x_rnn, m->y_rnn, (const float *)hx,
                                    (const float *)cx, (float *)hy, (float *)cy));
  else
    LSTMD_TRY(lstmd_cudnn_lstm_forward(m->lstm, training, x_rnn, m->y_rnn, hx, cx, hy, cy));
  m->bw_x = x_rnn;
  m->bw_hx = hx;
  m->bw_cx = cx;
  if (carry_state) {
    m->cur = 1 - m->cur;
    m->state_zero = 0;
  } else {
    m->state_zero = 1;
  }
  if (m->yf != m->y_rnn)
    LSTMD_TRY(lstmd_cuda_cast((size_t)N * H, m->y_rnn, m->cfg.dtype, m->yf, LSTMD_DT_F32, m->stream));
  LSTMD_CHECK_CUBLAS(cublasSgemm(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, O, N, H, &one, params + l->off_head_w,
                         H, m->yf, H, &zero, m->out, O));
  LSTMD_CHECK_CUBLAS(cublasSger(m->blas, O, N, &one, params + l->off_head_b, 1, m->ones, 1, m->out, O));
  const float *teacher = training ? m->kd_teacher : NULL; /* evaluation scores the plain loss */
  if (l->text) {
    if (teacher)
      LSTMD_TRY(lstmd_cuda_kd_softmax_xent(N, O, m->out, teacher, m->in.targets, m->kd_temperature,
                                           m->kd_alpha, grad_scale, scale_by, m->row_loss, m->stream));
    else
      LSTMD_TRY(lstmd_cuda_softmax_xent(N, O, m->out, m->in.targets, grad_scale, scale_by,
                                        m->row_loss, m->stream));
    return lstmd_cuda_sum((size_t)N, m->row_loss, loss_acc, m->stream);
  }
  if (teacher)
    return lstmd_cuda_kd_mse((size_t)N * O, m->out, teacher, m->in.y, m->kd_alpha, grad_scale,
                             scale_by, loss_acc, m->stream);
  return lstmd_cuda_mse((size_t)N * O, m->out, m->in.y, grad_scale, scale_by, loss_acc, m->stream);
}

const float *lstmd_cuda_model_output(const struct lstmd_cuda_model *m) { return m->out; }

void lstmd_cuda_model_set_distill(struct lstmd_cuda_model *m, const float *teacher_out,
                                  float temperature, float alpha) {
  m->kd_teacher = teacher_out;
  m->kd_temperature = temperature;
  m->kd_alpha = alpha;
}

int lstmd_cuda_model_backward(struct lstmd_cuda_model *m, const float *params, float *grads,
                              int flush, lstmd_cuda_ready_fn ready, void *ctx) {
  const struct lstmd_cuda_model_layout *l = &m->cfg.layout;
  const int N = m->cfg.steps * m->cfg.batch, H = l->hidden, O = output_width(l);
  const float one = 1.0f, zero = 0.0f;
  if (!flush) ready = NULL;
  if (l->classify) return classify_backward(m, params, grads, flush, ready, ctx);
  LSTMD_CHECK_CUBLAS(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_T, H, O, N, &one, m->yf, H, m->out, O,
                         &one, grads + l->off_head_w, H));
  LSTMD_CHECK_CUBLAS(cublasSgemv(m->blas, CUBLAS_OP_N, O, N, &one, m->out, O, m->ones, 1, &one,
                         grads + l->off_head_b, 1));
  LSTMD_CHECK_CUBLAS(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_N, H, N, O, &one, params + l->off_head_w,
                         H, m->out, O, &zero, m->dyf, H));
  if (ready) LSTMD_TRY(ready(ctx, l->off_head_w));
  void *dy = m->dyf;
  if (m->dy16) {
    LSTMD_TRY(lstmd_cuda_cast((size_t)N * H, m->dyf, LSTMD_DT_F32, m->dy16, m->cfg.dtype, m->stream));
    dy = m->dy16;
  }
  if (m->ln) { /* its weight gradients go straight into grads (see 4.) */
    LSTMD_TRY(lstmd_cuda_ln_backward(m->ln, params, grads, m->bw_x, dy, m->dx_rnn));
    if (ready) LSTMD_TRY(ready(ctx, l->off_w_ih[0]));
  } else {
    LSTMD_TRY(lstmd_cudnn_lstm_backward(m->lstm, m->bw_x, m->y_rnn, dy, m->dx_rnn, m->bw_hx, m->bw_cx));
  }
  if (flush && !m->ln) {
    LSTMD_TRY(lstmd_cuda_copy_segments(m->n_segs, m->segs_back, m->max_seg,
                                       lstmd_cudnn_lstm_dweights(m->lstm), m->cfg.dtype, grads,
                                       LSTMD_DT_F32, flush == LSTMD_FLUSH_ADD, m->stream));
    if (ready) LSTMD_TRY(ready(ctx, l->off_w_ih[0]));
  }
  if (!l->text) return LSTMD_OK;
  if (m->dxf != m->dx_rnn)
    LSTMD_TRY(lstmd_cuda_cast((size_t)N * l->embed, m->dx_rnn, m->cfg.dtype, m->dxf, LSTMD_DT_F32,
                              m->stream));
  LSTMD_TRY(lstmd_cuda_embedding_backward(N, l->embed, m->dxf, m->in.ids, grads + l->off_embed,
                                          m->stream));
  if (ready) LSTMD_TRY(ready(ctx, 0));
  return LSTMD_OK;
}

int lstmd_cuda_model_eval(struct lstmd_cuda_model *m, const float *params, float *host_rows) {
  const struct lstmd_cuda_model_layout *l = &m->cfg.layout;
  const size_t N = (size_t)m->cfg.steps * m->cfg.batch;
  const int saved_cur = m->cur, saved_zero = m->state_zero;
  m->state_zero = 1;
  /* Series: grad_scale 0.5 makes the MSE kernel leave 2·0.5·(pred − target) in out. */
  const int series = !l->text && !l->classify;
  int rc = lstmd_cuda_model_forward(m, params, series ? 0.5f : 0.0f, 0, 0, m->eval_loss);
  m->cur = saved_cur;
  m->state_zero = saved_zero;
  if (rc) return rc;
  const float *src = series ? m->out : m->row_loss;
  const size_t n = l->classify ? (size_t)m->cfg.batch : l->text ? N : N * (size_t)l->horizon;
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(host_rows, src, n * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(m->stream));
  return LSTMD_OK;
}

void lstmd_cuda_model_null_seq_lengths(struct lstmd_cuda_model *m, int on) {
  if (m->lstm) lstmd_cudnn_lstm_use_null_seq_lengths(m->lstm, on);
}

int lstmd_cuda_model_reset_state(struct lstmd_cuda_model *m) {
  m->state_zero = 1;
  return LSTMD_OK;
}

int lstmd_cuda_model_get_state(struct lstmd_cuda_model *m, float *h, float *c) {
  const size_t S = (size_t)m->cfg.layout.layers * m->cfg.batch * m->cfg.layout.hidden;
  if (m->state_zero) {
    memset(h, 0, S * sizeof(float));
    memset(c, 0, S * sizeof(float));
    return LSTMD_OK;
  }
  const char *st = m->state[m->cur];
  LSTMD_TRY(lstmd_cuda_cast(S, st, m->cfg.dtype, m->state_f, LSTMD_DT_F32, m->stream));
  LSTMD_TRY(lstmd_cuda_cast(S, st + m->c_off, m->cfg.dtype, m->state_f + m->cf_off, LSTMD_DT_F32,
                            m->stream));
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(h, m->state_f, S * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(c, m->state_f + m->cf_off, S * sizeof(float),
                                   cudaMemcpyDeviceToHost, m->stream));
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(m->stream));
  return LSTMD_OK;
}

int lstmd_cuda_model_set_state(struct lstmd_cuda_model *m, const float *h, const float *c) {
  const size_t S = (size_t)m->cfg.layout.layers * m->cfg.batch * m->cfg.layout.hidden;
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(m->state_f, h, S * sizeof(float), cudaMemcpyHostToDevice, m->stream));
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(m->state_f + m->cf_off, c, S * sizeof(float),
                                   cudaMemcpyHostToDevice, m->stream));
  char *st = m->state[m->cur];
  LSTMD_TRY(lstmd_cuda_cast(S, m->state_f, LSTMD_DT_F32, st, m->cfg.dtype, m->stream));
  LSTMD_TRY(lstmd_cuda_cast(S, m->state_f + m->cf_off, LSTMD_DT_F32, st + m->c_off, m->cfg.dtype,
                            m->stream));
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(m->stream));
  m->state_zero = 0;
  return LSTMD_OK;
}

void lstmd_cuda_model_scale_gradients_by(struct lstmd_cuda_model *m, const float *device_scale) {
  m->loss_scale = device_scale;
}
