/* stage_cuda.c — a pipeline stage on one device, a time chunk at a time (see stage_cuda.h).
 *
 * The head's algebra is model_cuda.c's (row-major matrices as column-major cuBLAS operands),
 * applied to the N = Tc·b rows of one chunk. Chunk k of a [T, b, w] buffer starts k·Tc·b·w
 * elements in, since the buffers are sequence-major.
 *
 * 1. States: the slot keeps states[0..K] (h and c, [layers, b, H] each, data type); forward of
 *    chunk k reads states[k] and writes states[k+1], so every chunk's initial state is still
 *    there for its backward. The gradient of a chunk's final state is what B of the chunk after
 *    it wrote: two buffers per slot, chunk k writing dstate[k mod 2] and reading
 *    dstate[(k+1) mod 2], since a unit's B items run from its last chunk to its first.
 * 2. Reserve: cuDNN keeps what backward needs (gate activations, dropout masks) in the reserve
 *    of the training forward; every chunk in flight has its own (slot × K).
 * 3. All work is on the caller's stream, in call order; the per-chunk scratch (fp32 copies of
 *    the output and of its gradient, row losses) is therefore shared by the slots. */
#define _GNU_SOURCE
#include "stage_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check.h"
#include "dense_cuda.h"
#include "lstm_cudnn.h"

enum { kMaxSlotAllocs = 16 };

struct stage_slot {
  struct lstmd_cuda_inputs in; /* [T,b] ids / targets, [T,b,W] x, [T,b,O] y */
  void *x, *y, *dx, *dy;       /* [T,b,I], [T,b,H], [T,b,I], [T,b,H] data type */
  float *out;                  /* last: [T·b, O] head output, then its gradient */
  char *states;                /* (K+1) × (h, c) [layers, b, H] data type, 256-aligned each */
  char *dstates;               /* 2 × (dh, dc) */
  char *reserve;               /* K × reserve bytes */
};

struct lstmd_cuda_stage {
  struct lstmd_cuda_stage_config cfg;
  cudaStream_t stream;
  cublasHandle_t blas;
  cudnnHandle_t dnn;
  struct lstmd_cudnn_lstm *lstm;
  struct lstmd_cuda_segment *segs, *segs_back; /* device [16·layers] */
  int n_segs;
  size_t max_seg;
  int I, O, N;           /* LSTM input width, head outputs, rows of a chunk (Tc·b) */
  size_t es, state_step; /* element bytes; bytes of one (h, c) pair, h at 0, c at state_step/2 */
  size_t reserve_bytes;
  struct stage_slot *slots;
  float *yf, *dyf, *dxf; /* chunk scratch in fp32 (16-bit types; yf/dyf for the last stage) */
  float *row_loss, *ones;
  const float *loss_scale;
  char desc[128];
  size_t device_bytes;
  void **allocs;
  int n_allocs, max_allocs;
};

static int dev_alloc(struct lstmd_cuda_stage *st, void *pp, size_t bytes, const char *what) {
  void **p = pp;
  *p = NULL;
  if (bytes == 0) return LSTMD_OK;
  if (st->n_allocs == st->max_allocs) {
    lstmd_errorf("GPU stage: more buffers than planned (%d): a bug", st->max_allocs);
    return LSTMD_EINVAL;
  }
  const cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *p = NULL;
    lstmd_errorf("CUDA: cannot allocate %.1f MiB for %s: %s", (double)bytes / 1048576.0, what,
                 cudaGetErrorString(e));
    return LSTMD_ENOMEM;
  }
  st->allocs[st->n_allocs++] = *p;
  st->device_bytes += bytes;
  LSTMD_CHECK_CUDA(cudaMemsetAsync(*p, 0, bytes, st->stream));
  return LSTMD_OK;
}

static size_t align256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

static int chunk_rows(const struct lstmd_cuda_stage *st) { return st->N; }
static size_t chunk_off(const struct lstmd_cuda_stage *st, int k, int width) {
  return (size_t)k * st->N * width;
}
static char *at(void *base, size_t elements, size_t es) { return (char *)base + elements * es; }

/* One forward, backward-data and backward-weights of a chunk on zeroed scratch buffers, while
 * the stack is quiet: cuDNN may refuse a math type only when it first runs (lstm_cudnn.c, 4.). */
static int trial(struct lstmd_cuda_stage *st) {
  const size_t N = (size_t)st->N, H = (size_t)st->cfg.layout.hidden;
  /* each buffer 256-byte aligned, as the stage's own: an odd N·I in fp16 would leave y, dy and
   * the reserve 2-byte aligned */
  const size_t xb = align256(N * st->I * st->es), yb = align256(N * H * st->es);
  const size_t rb = lstmd_cudnn_lstm_reserve_bytes(st->lstm);
  char *buf = NULL;
  cudaGetLastError(); /* an earlier error must not read as this trial's */
  if (cudaMalloc((void **)&buf, 2 * xb + 2 * yb + rb) != cudaSuccess) {
    cudaGetLastError();
    return LSTMD_ENOMEM;
  }
  int rc = LSTMD_CUDA_FAILED(cudaMemsetAsync(buf, 0, 2 * xb + 2 * yb + rb, st->stream)) ? LSTMD_ECUDA : LSTMD_OK;
  char *x = buf, *dx = x + xb, *y = dx + xb, *dy = y + yb, *reserve = dy + yb;
  if (!rc) rc = lstmd_cudnn_lstm_forward_train(st->lstm, x, y, NULL, NULL, NULL, NULL, reserve);
  if (!rc) rc = lstmd_cudnn_lstm_backward_data(st->lstm, y, dy, dx, NULL, NULL, NULL, NULL, NULL,
                                               NULL, reserve);
  if (!rc) rc = lstmd_cudnn_lstm_backward_weights(st->lstm, x, NULL, y, reserve);
  cudaError_t e = cudaStreamSynchronize(st->stream); /* a kernel that fails does so here */
  if (e == cudaSuccess) e = cudaGetLastError();
  cudaFree(buf);
  if (e == cudaSuccess) return rc;
  /* a sticky error (the context is lost) is a failure, not a math type to retry without */
  const int sticky = cudaDeviceSynchronize() != cudaSuccess;
  if (sticky) lstmd_errorf("cuDNN LSTM trial run: %s", cudaGetErrorString(e));
  cudaGetLastError();
  return rc ? rc : sticky ? LSTMD_ECUDA : LSTMD_EUNSUPPORTED;
}

/* The cuDNN stack of the stage: tensor-op math first for fp16, default math if it is refused
 * at set-up or in the trial run (see lstm_cudnn.c, 4.). */
static int make_lstm(struct lstmd_cuda_stage *st) {
  const struct lstmd_cuda_stage_config *c = &st->cfg;
  struct lstmd_cudnn_lstm_config lc = {
      .input = st->I, .hidden = c->layout.hidden, .layers = c->layers, .steps = c->steps / c->chunks,
      .batch = c->batch, .dtype = c->dtype, .allow_tf32 = c->allow_tf32, .dropout = c->dropout,
      .seed = c->seed, .algo = LSTMD_RNN_STANDARD, .packed = 0, .default_math = 0,
      .quiet = c->dtype == LSTMD_DT_F16};
  int rc = lstmd_cudnn_lstm_create(st->dnn, &lc, &st->lstm);
  if (!rc && lc.quiet) rc = trial(st);
  if (rc == LSTMD_EUNSUPPORTED && lc.quiet) {
    lstmd_cudnn_lstm_destroy(st->lstm);
    st->lstm = NULL;
    lc.default_math = 1;
    lc.quiet = 0;
    rc = lstmd_cudnn_lstm_create(st->dnn, &lc, &st->lstm);
    if (!rc) rc = trial(st);
  }
  if (rc) return rc;
  lstmd_cudnn_lstm_set_quiet(st->lstm, 0);
  LSTMD_TRY(lstmd_cudnn_lstm_zero_dweights(st->lstm)); /* the trial added into them */
  snprintf(st->desc, sizeof st->desc, "cuDNN standard, %s math, %d step%s x %d column%s per call",
           lstmd_cudnn_math_name(lstmd_cudnn_lstm_math_type(&lc)), lc.steps,
           lc.steps == 1 ? "" : "s", lc.batch, lc.batch == 1 ? "" : "s");
  st->reserve_bytes = align256(lstmd_cudnn_lstm_reserve_bytes(st->lstm));
  return LSTMD_OK;
}

/* flat parameters ↔ the stage's part of cuDNN's weight space. */
static int make_weight_map(struct lstmd_cuda_stage *st) {
  const struct lstmd_cuda_model_layout *l = &st->cfg.layout;
  const int n = 16 * st->cfg.layers, l0 = st->cfg.layer0;
  struct lstmd_cuda_segment *segs = malloc(sizeof *segs * 2 * (size_t)n);
  if (!segs) return LSTMD_ENOMEM;
  int rc = lstmd_cudnn_lstm_weight_map(st->lstm, l->off_w_ih + l0, l->off_w_hh + l0,
                                       l->off_b_ih + l0, l->off_b_hh + l0, segs);
  struct lstmd_cuda_segment *back = segs + n;
  for (int i = 0; !rc && i < n; i++) {
    if (segs[i].count > st->max_seg) st->max_seg = segs[i].count;
    back[i] = (struct lstmd_cuda_segment){segs[i].dst_offset, segs[i].src_offset, segs[i].count};
  }
  st->n_segs = n;
  if (!rc) rc = dev_alloc(st, &st->segs, sizeof *segs * n, "weight map");
  if (!rc) rc = dev_alloc(st, &st->segs_back, sizeof *segs * n, "weight map");
  if (!rc && (LSTMD_CUDA_FAILED(cudaMemcpyAsync(st->segs, segs, sizeof *segs * n,
                                                cudaMemcpyHostToDevice, st->stream)) ||
              LSTMD_CUDA_FAILED(cudaMemcpyAsync(st->segs_back, back, sizeof *segs * n,
                                                cudaMemcpyHostToDevice, st->stream)) ||
              LSTMD_CUDA_FAILED(cudaStreamSynchronize(st->stream))))
    rc = LSTMD_ECUDA;
  free(segs);
  return rc;
}

static int alloc_slot(struct lstmd_cuda_stage *st, struct stage_slot *sl) {
  const struct lstmd_cuda_stage_config *c = &st->cfg;
  const struct lstmd_cuda_model_layout *l = &c->layout;
  const size_t rows = (size_t)c->steps * c->batch, H = (size_t)l->hidden, es = st->es;
  if (c->first && l->text) LSTMD_TRY(dev_alloc(st, &sl->in.ids, rows * sizeof(int32_t), "token ids"));
  if (c->first && !l->text) LSTMD_TRY(dev_alloc(st, &sl->in.x, rows * l->width * sizeof(float), "input rows"));
  if (c->last && l->text) LSTMD_TRY(dev_alloc(st, &sl->in.targets, rows * sizeof(int32_t), "targets"));
  if (c->last && !l->text) LSTMD_TRY(dev_alloc(st, &sl->in.y, rows * l->horizon * sizeof(float), "target rows"));
  LSTMD_TRY(dev_alloc(st, &sl->x, rows * st->I * es, "stage input"));
  LSTMD_TRY(dev_alloc(st, &sl->y, rows * H * es, "stage output"));
  LSTMD_TRY(dev_alloc(st, &sl->dx, rows * st->I * es, "stage input gradient"));
  LSTMD_TRY(dev_alloc(st, &sl->dy, rows * H * es, "stage output gradient"));
  if (c->last) LSTMD_TRY(dev_alloc(st, &sl->out, rows * st->O * sizeof(float), "head output"));
  LSTMD_TRY(dev_alloc(st, &sl->states, (size_t)(c->chunks + 1) * st->state_step, "chunk states"));
  LSTMD_TRY(dev_alloc(st, &sl->dstates, 2 * st->state_step, "chunk state gradients"));
  return dev_alloc(st, &sl->reserve, (size_t)c->chunks * st->reserve_bytes, "cuDNN reserve");
}

static int alloc_scratch(struct lstmd_cuda_stage *st) {
  const struct lstmd_cuda_model_layout *l = &st->cfg.layout;
  const size_t N = (size_t)st->N, H = (size_t)l->hidden;
  const int half = st->cfg.dtype != LSTMD_DT_F32;
  if (st->cfg.first && l->text)
    LSTMD_TRY(dev_alloc(st, &st->dxf, N * l->embed * sizeof(float), "embedded chunk"));
  if (st->cfg.last) {
    if (half) LSTMD_TRY(dev_alloc(st, &st->yf, N * H * sizeof(float), "output chunk (fp32)"));
    if (half) LSTMD_TRY(dev_alloc(st, &st->dyf, N * H * sizeof(float), "output gradient chunk (fp32)"));
    LSTMD_TRY(dev_alloc(st, &st->row_loss, N * sizeof(float), "row losses"));
    LSTMD_TRY(dev_alloc(st, &st->ones, N * sizeof(float), "ones"));
    float *ones = malloc(N * sizeof(float));
    if (!ones) return LSTMD_ENOMEM;
    for (size_t i = 0; i < N; i++) ones[i] = 1.0f;
    const int rc = LSTMD_CUDA_FAILED(cudaMemcpyAsync(st->ones, ones, N * sizeof(float),
                                                     cudaMemcpyHostToDevice, st->stream)) ||
                           LSTMD_CUDA_FAILED(cudaStreamSynchronize(st->stream))
                       ? LSTMD_ECUDA
                       : LSTMD_OK;
    free(ones);
    LSTMD_TRY(rc);
  }
  return LSTMD_OK;
}

int lstmd_cuda_stage_create(const struct lstmd_cuda_stage_config *cfg, void *stream,
                            struct lstmd_cuda_stage **out) {
  *out = NULL;
  const struct lstmd_cuda_model_layout *l = &cfg->layout;
  if (cfg->layers < 1 || cfg->layer0 < 0 || cfg->layer0 + cfg->layers > l->layers ||
      cfg->chunks < 1 || cfg->steps % cfg->chunks || cfg->batch < 1 || cfg->slots < 1) {
    lstmd_errorf("GPU stage: invalid shape (layers %d+%d of %d, T %d, K %d, b %d, %d slots)",
                 cfg->layer0, cfg->layers, l->layers, cfg->steps, cfg->chunks, cfg->batch,
                 cfg->slots);
    return LSTMD_EINVAL;
  }
  struct lstmd_cuda_stage *st = calloc(1, sizeof *st);
  if (!st) return LSTMD_ENOMEM;
  st->cfg = *cfg;
  st->stream = (cudaStream_t)stream;
  st->I = !cfg->first ? l->hidden : l->text ? l->embed : l->width;
  st->O = l->text ? l->vocab : l->horizon;
  st->N = cfg->steps / cfg->chunks * cfg->batch;
  st->es = lstmd_dtype_bytes(cfg->dtype);
  const size_t S = (size_t)cfg->layers * cfg->batch * l->hidden;
  st->state_step = 2 * align256(S * st->es);
  st->max_allocs = kMaxSlotAllocs * cfg->slots + 16;
  st->allocs = calloc((size_t)st->max_allocs, sizeof *st->allocs);
  st->slots = calloc((size_t)cfg->slots, sizeof *st->slots);
  int rc = st->allocs && st->slots ? LSTMD_OK : LSTMD_ENOMEM;
  if (!rc && LSTMD_CUDNN_FAILED(cudnnCreate(&st->dnn))) {
    st->dnn = NULL;
    rc = LSTMD_ECUDA;
  }
  if (!rc && LSTMD_CUDNN_FAILED(cudnnSetStream(st->dnn, st->stream))) rc = LSTMD_ECUDA;
  if (!rc && LSTMD_CUBLAS_FAILED(cublasCreate(&st->blas))) {
    st->blas = NULL;
    rc = LSTMD_ECUDA;
  }
  if (!rc && LSTMD_CUBLAS_FAILED(cublasSetStream(st->blas, st->stream))) rc = LSTMD_ECUDA;
  const int tf32 = cfg->dtype != LSTMD_DT_F32 || cfg->allow_tf32;
  if (!rc && LSTMD_CUBLAS_FAILED(cublasSetMathMode(st->blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                            : CUBLAS_DEFAULT_MATH)))
    rc = LSTMD_ECUDA;
  if (!rc) rc = make_lstm(st);
  if (!rc) rc = make_weight_map(st);
  for (int i = 0; !rc && i < cfg->slots; i++) rc = alloc_slot(st, &st->slots[i]);
  if (!rc) rc = alloc_scratch(st);
  if (LSTMD_CUDA_FAILED(cudaStreamSynchronize(st->stream)) && !rc) rc = LSTMD_ECUDA;
  if (rc) {
    if (rc == LSTMD_ENOMEM && st->allocs)
      lstmd_errorf("GPU stage: out of device memory for %d slot%s of %d x %d (layers %d-%d)",
                   cfg->slots, cfg->slots == 1 ? "" : "s", cfg->steps, cfg->batch, cfg->layer0,
                   cfg->layer0 + cfg->layers - 1);
    lstmd_cuda_stage_destroy(st);
    return rc;
  }
  *out = st;
  return LSTMD_OK;
}

void lstmd_cuda_stage_destroy(struct lstmd_cuda_stage *st) {
  if (!st) return;
  if (st->stream) cudaStreamSynchronize(st->stream);
  lstmd_cudnn_lstm_destroy(st->lstm);
  for (int i = 0; i < st->n_allocs; i++) cudaFree(st->allocs[i]);
  if (st->blas) cublasDestroy(st->blas);
  if (st->dnn) cudnnDestroy(st->dnn);
  free(st->allocs);
  free(st->slots);
  free(st);
}

struct lstmd_cuda_inputs *lstmd_cuda_stage_inputs(struct lstmd_cuda_stage *st, int slot) {
  return &st->slots[slot].in;
}

size_t lstmd_cuda_stage_chunk_bytes(const struct lstmd_cuda_stage *st, int which) {
  const int w = which == LSTMD_STAGE_INPUT || which == LSTMD_STAGE_DINPUT ? st->I
                                                                          : st->cfg.layout.hidden;
  return (size_t)chunk_rows(st) * w * st->es;
}

void *lstmd_cuda_stage_chunk(struct lstmd_cuda_stage *st, int which, int slot, int k) {
  struct stage_slot *sl = &st->slots[slot];
  const int H = st->cfg.layout.hidden;
  switch (which) {
    case LSTMD_STAGE_INPUT: return at(sl->x, chunk_off(st, k, st->I), st->es);
    case LSTMD_STAGE_OUTPUT: return at(sl->y, chunk_off(st, k, H), st->es);
    case LSTMD_STAGE_DOUTPUT: return at(sl->dy, chunk_off(st, k, H), st->es);
    default: return at(sl->dx, chunk_off(st, k, st->I), st->es);
  }
}

size_t lstmd_cuda_stage_device_bytes(const struct lstmd_cuda_stage *st) {
  return st->device_bytes + (st->lstm ? lstmd_cudnn_lstm_device_bytes(st->lstm) : 0);
}

const char *lstmd_cuda_stage_describe(const struct lstmd_cuda_stage *st) { return st->desc; }

int lstmd_cuda_stage_load_weights(struct lstmd_cuda_stage *st, const float *params) {
  return lstmd_cuda_copy_segments(st->n_segs, st->segs, st->max_seg, params, LSTMD_DT_F32,
                                  lstmd_cudnn_lstm_weights(st->lstm), st->cfg.dtype, 0, st->stream);
}

void lstmd_cuda_stage_scale_gradients_by(struct lstmd_cuda_stage *st, const float *device_scale) {
  st->loss_scale = device_scale;
}

/* h of states[i] at 0, c half a step in (see 1.). */
static char *state_h(const struct lstmd_cuda_stage *st, char *base, int i) {
  return base + (size_t)i * st->state_step;
}
static char *state_c(const struct lstmd_cuda_stage *st, char *base, int i) {
  return state_h(st, base, i) + st->state_step / 2;
}

int lstmd_cuda_stage_begin_unit(struct lstmd_cuda_stage *st, int slot, const void *h, const void *c) {
  struct stage_slot *sl = &st->slots[slot];
  const size_t bytes = (size_t)st->cfg.layers * st->cfg.batch * st->cfg.layout.hidden * st->es;
  if (!h) {
    LSTMD_CHECK_CUDA(cudaMemsetAsync(sl->states, 0, st->state_step, st->stream));
    return LSTMD_OK;
  }
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(state_h(st, sl->states, 0), h, bytes, cudaMemcpyDeviceToDevice, st->stream));
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(state_c(st, sl->states, 0), c, bytes, cudaMemcpyDeviceToDevice, st->stream));
  return LSTMD_OK;
}

int lstmd_cuda_stage_end_unit(struct lstmd_cuda_stage *st, int slot, void *h, void *c) {
  struct stage_slot *sl = &st->slots[slot];
  const size_t bytes = (size_t)st->cfg.layers * st->cfg.batch * st->cfg.layout.hidden * st->es;
  const int K = st->cfg.chunks;
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(h, state_h(st, sl->states, K), bytes, cudaMemcpyDeviceToDevice, st->stream));
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(c, state_c(st, sl->states, K), bytes, cudaMemcpyDeviceToDevice, st->stream));
  return LSTMD_OK;
}

/* The chunk's LSTM output in fp32 (a cast copy for 16-bit types). */
static int output_f32(struct lstmd_cuda_stage *st, struct stage_slot *sl, int k, const float **yf) {
  const int H = st->cfg.layout.hidden;
  const void *y = at(sl->y, chunk_off(st, k, H), st->es);
  if (!st->yf) {
    *yf = y;
    return LSTMD_OK;
  }
  *yf = st->yf;
  return lstmd_cuda_cast((size_t)st->N * H, y, st->cfg.dtype, st->yf, LSTMD_DT_F32, st->stream);
}

/* The first stage's input of chunk k: embedded ids or the input rows, in the data type. */
static int stage_input(struct lstmd_cuda_stage *st, struct stage_slot *sl, int k,
                       const float *params) {
  const struct lstmd_cuda_model_layout *l = &st->cfg.layout;
  void *x = at(sl->x, chunk_off(st, k, st->I), st->es);
  const size_t n = (size_t)st->N * st->I;
  if (l->text) {
    float *e = st->cfg.dtype == LSTMD_DT_F32 ? x : st->dxf; /* dxf: scratch here */
    LSTMD_TRY(lstmd_cuda_embedding_forward(st->N, l->embed, params + l->off_embed,
                                           sl->in.ids + chunk_off(st, k, 1), e, st->stream));
    return e == x ? LSTMD_OK : lstmd_cuda_cast(n, e, LSTMD_DT_F32, x, st->cfg.dtype, st->stream);
  }
  return lstmd_cuda_cast(n, sl->in.x + chunk_off(st, k, l->width), LSTMD_DT_F32, x, st->cfg.dtype,
                         st->stream);
}

int lstmd_cuda_stage_forward(struct lstmd_cuda_stage *st, int slot, int k, const float *params,
                             float grad_scale, const float *in_mask, double *loss_acc) {
  struct stage_slot *sl = &st->slots[slot];
  const struct lstmd_cuda_model_layout *l = &st->cfg.layout;
  const int H = l->hidden, O = st->O, N = st->N;
  void *x = at(sl->x, chunk_off(st, k, st->I), st->es);
  if (st->cfg.first) LSTMD_TRY(stage_input(st, sl, k, params));
  else if (in_mask) LSTMD_TRY(lstmd_cuda_mul((size_t)N * st->I, x, st->cfg.dtype, in_mask, st->stream));
  LSTMD_TRY(lstmd_cudnn_lstm_forward_train(
      st->lstm, x, at(sl->y, chunk_off(st, k, H), st->es), state_h(st, sl->states, k),
      state_c(st, sl->states, k), state_h(st, sl->states, k + 1), state_c(st, sl->states, k + 1),
      sl->reserve + (size_t)k * st->reserve_bytes));
  if (!st->cfg.last) return LSTMD_OK;
  const float one = 1.0f, zero = 0.0f;
  const float *yf;
  LSTMD_TRY(output_f32(st, sl, k, &yf));
  float *out = sl->out + chunk_off(st, k, O);
  LSTMD_CHECK_CUBLAS(cublasSgemm(st->blas, CUBLAS_OP_T, CUBLAS_OP_N, O, N, H, &one,
                                 params + l->off_head_w, H, yf, H, &zero, out, O));
  LSTMD_CHECK_CUBLAS(cublasSger(st->blas, O, N, &one, params + l->off_head_b, 1, st->ones, 1, out, O));
  if (l->text) {
    LSTMD_TRY(lstmd_cuda_softmax_xent(N, O, out, sl->in.targets + chunk_off(st, k, 1), grad_scale,
                                      st->loss_scale, st->row_loss, st->stream));
    return lstmd_cuda_sum((size_t)N, st->row_loss, loss_acc, st->stream);
  }
  return lstmd_cuda_mse((size_t)N * O, out, sl->in.y + chunk_off(st, k, O), grad_scale,
                        st->loss_scale, loss_acc, st->stream);
}

int lstmd_cuda_stage_backward_data(struct lstmd_cuda_stage *st, int slot, int k,
                                   const float *params, const float *in_mask) {
  struct stage_slot *sl = &st->slots[slot];
  const struct lstmd_cuda_model_layout *l = &st->cfg.layout;
  const int H = l->hidden, O = st->O, N = st->N, K = st->cfg.chunks;
  void *dy = at(sl->dy, chunk_off(st, k, H), st->es);
  if (st->cfg.last) { /* dY = G·W of the chunk */
    const float one = 1.0f, zero = 0.0f;
    float *dyf = st->dyf ? st->dyf : dy;
    LSTMD_CHECK_CUBLAS(cublasSgemm(st->blas, CUBLAS_OP_N, CUBLAS_OP_N, H, N, O, &one,
                                   params + l->off_head_w, H, sl->out + chunk_off(st, k, O), O,
                                   &zero, dyf, H));
    if (st->dyf)
      LSTMD_TRY(lstmd_cuda_cast((size_t)N * H, st->dyf, LSTMD_DT_F32, dy, st->cfg.dtype, st->stream));
  }
  char *dnext = k == K - 1 ? NULL : sl->dstates + (size_t)((k + 1) % 2) * st->state_step;
  char *dthis = k == 0 ? NULL : sl->dstates + (size_t)(k % 2) * st->state_step;
  void *dx = at(sl->dx, chunk_off(st, k, st->I), st->es);
  LSTMD_TRY(lstmd_cudnn_lstm_backward_data(
      st->lstm, at(sl->y, chunk_off(st, k, H), st->es), dy, dx, state_h(st, sl->states, k),
      state_c(st, sl->states, k), dnext, dnext ? dnext + st->state_step / 2 : NULL, dthis,
      dthis ? dthis + st->state_step / 2 : NULL, sl->reserve + (size_t)k * st->reserve_bytes));
  if (!st->cfg.first && in_mask)
    LSTMD_TRY(lstmd_cuda_mul((size_t)N * st->I, dx, st->cfg.dtype, in_mask, st->stream));
  return LSTMD_OK;
}

int lstmd_cuda_stage_backward_weights(struct lstmd_cuda_stage *st, int slot, int k, float *grads) {
  struct stage_slot *sl = &st->slots[slot];
  const struct lstmd_cuda_model_layout *l = &st->cfg.layout;
  const int H = l->hidden, O = st->O, N = st->N;
  const int wide = st->cfg.dtype == LSTMD_DT_F32;
  if (st->cfg.last) {
    const float one = 1.0f;
    const float *yf;
    LSTMD_TRY(output_f32(st, sl, k, &yf));
    const float *g = sl->out + chunk_off(st, k, O);
    LSTMD_CHECK_CUBLAS(cublasSgemm(st->blas, CUBLAS_OP_N, CUBLAS_OP_T, H, O, N, &one, yf, H, g, O,
                                   &one, grads + l->off_head_w, H));
    LSTMD_CHECK_CUBLAS(cublasSgemv(st->blas, CUBLAS_OP_N, O, N, &one, g, O, st->ones, 1, &one,
                                   grads + l->off_head_b, 1));
  }
  if (!wide) LSTMD_TRY(lstmd_cudnn_lstm_zero_dweights(st->lstm));
  LSTMD_TRY(lstmd_cudnn_lstm_backward_weights(st->lstm, at(sl->x, chunk_off(st, k, st->I), st->es),
                                              state_h(st, sl->states, k),
                                              at(sl->y, chunk_off(st, k, H), st->es),
                                              sl->reserve + (size_t)k * st->reserve_bytes));
  if (!wide)
    LSTMD_TRY(lstmd_cuda_copy_segments(st->n_segs, st->segs_back, st->max_seg,
                                       lstmd_cudnn_lstm_dweights(st->lstm), st->cfg.dtype, grads,
                                       LSTMD_DT_F32, 1, st->stream));
  if (!(st->cfg.first && l->text)) return LSTMD_OK;
  const void *dx = at(sl->dx, chunk_off(st, k, st->I), st->es);
  const float *dxf = dx;
  if (!wide) {
    LSTMD_TRY(lstmd_cuda_cast((size_t)N * l->embed, dx, st->cfg.dtype, st->dxf, LSTMD_DT_F32, st->stream));
    dxf = st->dxf;
  }
  return lstmd_cuda_embedding_backward(N, l->embed, dxf, sl->in.ids + chunk_off(st, k, 1),
                                       grads + l->off_embed, st->stream);
}

int lstmd_cuda_stage_begin_grads(struct lstmd_cuda_stage *st) {
  return lstmd_cudnn_lstm_zero_dweights(st->lstm);
}

int lstmd_cuda_stage_finish_grads(struct lstmd_cuda_stage *st, float *grads) {
  if (st->cfg.dtype != LSTMD_DT_F32) return LSTMD_OK; /* added at every W */
  return lstmd_cuda_copy_segments(st->n_segs, st->segs_back, st->max_seg,
                                  lstmd_cudnn_lstm_dweights(st->lstm), st->cfg.dtype, grads,
                                  LSTMD_DT_F32, 0, st->stream);
}
