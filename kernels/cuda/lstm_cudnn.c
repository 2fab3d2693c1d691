/* lstm_cudnn.c — the multi-layer LSTM on cuDNN's v8-style RNN API (see lstm_cudnn.h).
 *
 * 1. Set-up follows NVIDIA's v8 RNN sample: dropout descriptor (states kept alive as long as
 *    the RNN descriptor) → cudnnSetRNNDescriptor_v8 (LSTM, double bias, unidirectional, linear
 *    input, padded I/O for the unpacked layout) → RNN data descriptors for x and y with every
 *    length = T → h/c tensor descriptors [L,B,H] → weight space size → temp space sizes for
 *    training and inference (the larger work space is kept) → cudnnBuildRNNDynamic for the
 *    persistent-dynamic algorithm.
 * 2. With cfg->quiet, a refusal of cuDNN at set-up (or, while the object is quiet, in forward/
 *    backward) is LSTMD_EUNSUPPORTED without a message: the caller (model_cuda.c's candidate
 *    loop) decides which candidates may fail and tries the next one.
 * 3. The sequence lengths are kept on the device too (the sample passes them to every call;
 *    they are never overwritten while the object lives, so asynchronous reads are safe). Every
 *    device write at set-up goes on the handle's stream, which is synchronised before create
 *    returns (not the legacy stream, which a non-blocking stream does not wait for).
 * 4. Math type: PyTorch's rule — tensor-op math for fp16 only; bf16 with CUDNN_DEFAULT_MATH;
 *    fp32 with CUDNN_DEFAULT_MATH when TF32 is allowed, else CUDNN_FMA_MATH. Which math types
 *    cuDNN 9 accepts with 16-bit RNN data is not documented in the headers, and it may refuse a
 *    combination only when the RNN first runs, so the choice is the explicit cfg->default_math
 *    (fp16 → CUDNN_DEFAULT_MATH) and the caller retries with it after a set-up or run failure.
 * 5. Dropout is applied between layers only: with dropout 0 or L == 1 no states are allocated
 *    and the descriptor is set with NULL states and probability 0 (PyTorch's set_no_dropout;
 *    cuDNN's documentation: NULL states are not initialised, only the probability is set), so
 *    no MBs of states and no initialising kernel.
 * 6. Variable lengths (lstmd_cudnn_lstm_set_lengths, the sequence classifier): the x and y data
 *    descriptors are set again for each batch with its lengths (host array, copied into the
 *    descriptor by cuDNN; we keep our own copy alive anyway, as for 3.) and the caller's device
 *    copy is passed as devSeqLengths from then on. maxSeqLength is the batch's longest column,
 *    so steps past it are not run; the work and reserve sizes were queried for T at set-up, so
 *    the shorter descriptor is used only when cuDNN's sizes for it fit those (queried per batch,
 *    a host call), else the batch keeps maxSeqLength T. The descriptors are host objects read
 *    when a call is enqueued, so changing them never affects work already on the stream; the
 *    same descriptors serve the batch's forward and both backward calls. */
#include "lstm_cudnn.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check.h"

struct lstmd_cudnn_lstm {
  struct lstmd_cudnn_lstm_config cfg;
  cudnnHandle_t handle;
  cudnnDropoutDescriptor_t dropout;
  cudnnRNNDescriptor_t rnn;
  cudnnRNNDataDescriptor_t x_desc, y_desc;
  cudnnTensorDescriptor_t h_desc, c_desc;
  void *dropout_states;
  size_t dropout_bytes;
  int *seq_host;    /* [B], all T; with set_lengths the batch's lengths (see 6.) */
  int32_t *seq_dev; /* [B] device copy of the all-T lengths */
  const int32_t *seq_ext; /* the caller's device lengths after set_lengths, else NULL */
  int null_seq;
  int quiet;        /* failures of the RNN calls are reported quietly (algorithm trials) */
  cudaStream_t stream; /* the handle's */
  void *w, *dw;     /* weight space and its gradient */
  size_t w_bytes;
  void *work, *reserve;
  size_t work_bytes, reserve_bytes;
};

static const char *const kAlgoNames[] = {"standard", "persist_static", "persist_dynamic",
                                         "persist_static_small_h"};

const char *lstmd_rnn_algo_name(int algo) {
  return algo >= 0 && algo < LSTMD_RNN_ALGO_COUNT ? kAlgoNames[algo] : "unknown";
}

static cudnnDataType_t cudnn_type(int dtype) {
  return dtype == LSTMD_DT_F16 ? CUDNN_DATA_HALF
         : dtype == LSTMD_DT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* See 4. above. */
int lstmd_cudnn_lstm_math_type(const struct lstmd_cudnn_lstm_config *c) {
  if (c->dtype == LSTMD_DT_F16) return c->default_math ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH;
  if (c->dtype == LSTMD_DT_BF16) return CUDNN_DEFAULT_MATH;
  return c->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

const char *lstmd_cudnn_math_name(int math_type) {
  switch (math_type) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor_op_allow_conversion";
    case CUDNN_FMA_MATH: return "fma";
    default: return "unknown";
  }
}

/* A cuDNN call that may be refused quietly: while trying candidates a refusal only means the
 * candidate is skipped (see 2. above); otherwise it is reported through check.h. */
static int cudnn_refused_(cudnnStatus_t s, int quiet, const char *call, const char *file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return 0;
  if (!quiet) lstmd_cudnn_failed_(s, call, file, line);
  return 1;
}
#define CUDNN_REFUSED(call, quiet) cudnn_refused_((call), (quiet), #call, __FILE__, __LINE__)
#define CHECK_CUDNN(call, quiet)                                     \
  do {                                                               \
    if (CUDNN_REFUSED(call, quiet)) return (quiet) ? LSTMD_EUNSUPPORTED : LSTMD_ECUDA; \
  } while (0)

static int cuda_alloc(void **p, size_t bytes, const char *what) {
  *p = NULL;
  if (bytes == 0) return LSTMD_OK;
  cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaSuccess) return LSTMD_OK;
  cudaGetLastError();
  *p = NULL;
  lstmd_errorf("CUDA: cannot allocate %.1f MiB for %s: %s", (double)bytes / 1048576.0, what,
               cudaGetErrorString(e));
  return LSTMD_ENOMEM;
}

static int directions(const struct lstmd_cudnn_lstm_config *c) { return c->bidirectional ? 2 : 1; }

/* The x and y data descriptors for maxSeqLength `steps` and the lengths in seq_host. */
static int set_data_descriptors(struct lstmd_cudnn_lstm *l, int steps, int quiet) {
  const struct lstmd_cudnn_lstm_config *c = &l->cfg;
  const cudnnDataType_t dt = cudnn_type(c->dtype);
  const cudnnRNNDataLayout_t layout = c->packed ? CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED
                                                : CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED;
  double pad = 0.0; /* zero bits: 0 in every data type */
  CHECK_CUDNN(cudnnSetRNNDataDescriptor(l->x_desc, dt, layout, steps, c->batch, c->input,
                                        l->seq_host, &pad), quiet);
  CHECK_CUDNN(cudnnSetRNNDataDescriptor(l->y_desc, dt, layout, steps, c->batch,
                                        c->hidden * directions(c), l->seq_host, &pad), quiet);
  return LSTMD_OK;
}

/* The RNN, data and state descriptors of cfg (dropout descriptor already made). */
static int make_descriptors(struct lstmd_cudnn_lstm *l, int quiet) {
  const struct lstmd_cudnn_lstm_config *c = &l->cfg;
  const cudnnDataType_t dt = cudnn_type(c->dtype);
  CHECK_CUDNN(cudnnCreateRNNDescriptor(&l->rnn), 0);
  CHECK_CUDNN(cudnnSetRNNDescriptor_v8(l->rnn, (cudnnRNNAlgo_t)c->algo, CUDNN_LSTM,
                                       CUDNN_RNN_DOUBLE_BIAS,
                                       c->bidirectional ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL,
                                       CUDNN_LINEAR_INPUT, dt, CUDNN_DATA_FLOAT,
                                       (cudnnMathType_t)lstmd_cudnn_lstm_math_type(c),
                                       c->input, c->hidden, c->hidden, c->layers, l->dropout,
                                       c->packed ? CUDNN_RNN_PADDED_IO_DISABLED
                                                 : CUDNN_RNN_PADDED_IO_ENABLED),
              quiet);
  l->seq_host = malloc(sizeof(int) * (size_t)c->batch);
  if (!l->seq_host) return LSTMD_ENOMEM;
  for (int b = 0; b < c->batch; b++) l->seq_host[b] = c->steps;
  CHECK_CUDNN(cudnnCreateRNNDataDescriptor(&l->x_desc), 0);
  CHECK_CUDNN(cudnnCreateRNNDataDescriptor(&l->y_desc), 0);
  LSTMD_TRY(set_data_descriptors(l, c->steps, quiet));
  int dims[3] = {c->layers * directions(c), c->batch, c->hidden};
  int strides[3] = {c->batch * c->hidden, c->hidden, 1};
  CHECK_CUDNN(cudnnCreateTensorDescriptor(&l->h_desc), 0);
  CHECK_CUDNN(cudnnCreateTensorDescriptor(&l->c_desc), 0);
  CHECK_CUDNN(cudnnSetTensorNdDescriptor(l->h_desc, dt, 3, dims, strides), quiet);
  CHECK_CUDNN(cudnnSetTensorNdDescriptor(l->c_desc, dt, 3, dims, strides), quiet);
  return LSTMD_OK;
}

static int check_config(const struct lstmd_cudnn_lstm_config *c) {
  if (c->input < 1 || c->hidden < 1 || c->layers < 1 || c->steps < 1 || c->batch < 1 ||
      c->dtype < LSTMD_DT_F32 || c->dtype > LSTMD_DT_BF16 || c->algo < 0 ||
      c->algo >= LSTMD_RNN_ALGO_COUNT || !(c->dropout >= 0.0f && c->dropout < 1.0f) ||
      (c->packed != 0 && c->packed != 1) || (c->default_math != 0 && c->default_math != 1) ||
      (c->bidirectional != 0 && c->bidirectional != 1)) {
    lstmd_errorf("cuDNN LSTM: invalid configuration (I %d, H %d, L %d, T %d, B %d, type %d, algo %d, "
                 "packed %d, default_math %d, bidirectional %d, dropout %g)", c->input, c->hidden,
                 c->layers, c->steps, c->batch, c->dtype, c->algo, c->packed, c->default_math,
                 c->bidirectional, (double)c->dropout);
    return LSTMD_EINVAL;
  }
  return LSTMD_OK;
}

/* The dropout descriptor; states only where dropout happens (see 5. above). */
static int make_dropout(struct lstmd_cudnn_lstm *l) {
  const struct lstmd_cudnn_lstm_config *c = &l->cfg;
  LSTMD_CHECK_CUDNN(cudnnCreateDropoutDescriptor(&l->dropout));
  const int active = c->dropout > 0.0f && c->layers > 1;
  if (active) {
    LSTMD_CHECK_CUDNN(cudnnDropoutGetStatesSize(l->handle, &l->dropout_bytes));
    LSTMD_TRY(cuda_alloc(&l->dropout_states, l->dropout_bytes, "dropout states"));
  }
  LSTMD_CHECK_CUDNN(cudnnSetDropoutDescriptor(l->dropout, l->handle, active ? c->dropout : 0.0f,
                                              l->dropout_states, l->dropout_bytes, c->seed));
  return LSTMD_OK;
}

static int set_up(struct lstmd_cudnn_lstm *l) {
  const struct lstmd_cudnn_lstm_config *cfg = &l->cfg;
  const int quiet = cfg->quiet;
  LSTMD_TRY(make_dropout(l));
  LSTMD_TRY(make_descriptors(l, quiet));
  CHECK_CUDNN(cudnnGetRNNWeightSpaceSize(l->handle, l->rnn, &l->w_bytes), quiet);
  size_t work_train = 0, work_infer = 0, reserve_infer = 0; /* the last: unused */
  CHECK_CUDNN(cudnnGetRNNTempSpaceSizes(l->handle, l->rnn, CUDNN_FWD_MODE_TRAINING, l->x_desc,
                                        &work_train, &l->reserve_bytes), quiet);
  CHECK_CUDNN(cudnnGetRNNTempSpaceSizes(l->handle, l->rnn, CUDNN_FWD_MODE_INFERENCE, l->x_desc,
                                        &work_infer, &reserve_infer), quiet);
  l->work_bytes = work_train > work_infer ? work_train : work_infer;
  if (cfg->algo == LSTMD_RNN_PERSIST_DYNAMIC)
    CHECK_CUDNN(cudnnBuildRNNDynamic(l->handle, l->rnn, cfg->batch), quiet);
  LSTMD_TRY(cuda_alloc(&l->w, l->w_bytes, "the cuDNN weight space"));
  LSTMD_TRY(cuda_alloc(&l->dw, l->w_bytes, "the cuDNN weight gradients"));
  LSTMD_TRY(cuda_alloc(&l->work, l->work_bytes, "the cuDNN work space"));
  LSTMD_TRY(cuda_alloc(&l->reserve, l->reserve_bytes, "the cuDNN reserve space"));
  LSTMD_TRY(cuda_alloc((void **)&l->seq_dev, sizeof(int32_t) * (size_t)cfg->batch, "sequence lengths"));
  /* On the handle's stream (see 3. above); the host array lives until destroy. Weights zeroed:
   * trials must not run on uninitialised memory. */
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(l->seq_dev, l->seq_host, sizeof(int32_t) * (size_t)cfg->batch,
                                   cudaMemcpyHostToDevice, l->stream));
  if (l->w_bytes) {
    LSTMD_CHECK_CUDA(cudaMemsetAsync(l->w, 0, l->w_bytes, l->stream));
    LSTMD_CHECK_CUDA(cudaMemsetAsync(l->dw, 0, l->w_bytes, l->stream));
  }
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(l->stream));
  return LSTMD_OK;
}

int lstmd_cudnn_lstm_create(void *handle, const struct lstmd_cudnn_lstm_config *cfg,
                            struct lstmd_cudnn_lstm **out) {
  *out = NULL;
  LSTMD_TRY(check_config(cfg));
  struct lstmd_cudnn_lstm *l = calloc(1, sizeof *l);
  if (!l) return LSTMD_ENOMEM;
  l->cfg = *cfg;
  l->handle = (cudnnHandle_t)handle;
  l->quiet = cfg->quiet;
  int rc = LSTMD_CUDNN_FAILED(cudnnGetStream(l->handle, &l->stream)) ? LSTMD_ECUDA : LSTMD_OK;
  if (!rc) rc = set_up(l);
  if (rc) {
    lstmd_cudnn_lstm_destroy(l);
    return rc;
  }
  *out = l;
  return LSTMD_OK;
}

void lstmd_cudnn_lstm_destroy(struct lstmd_cudnn_lstm *l) {
  if (!l) return;
  if (l->h_desc) cudnnDestroyTensorDescriptor(l->h_desc);
  if (l->c_desc) cudnnDestroyTensorDescriptor(l->c_desc);
  if (l->x_desc) cudnnDestroyRNNDataDescriptor(l->x_desc);
  if (l->y_desc) cudnnDestroyRNNDataDescriptor(l->y_desc);
  if (l->rnn) cudnnDestroyRNNDescriptor(l->rnn);
  if (l->dropout) cudnnDestroyDropoutDescriptor(l->dropout);
  cudaFree(l->dropout_states);
  cudaFree(l->seq_dev);
  cudaFree(l->w);
  cudaFree(l->dw);
  cudaFree(l->work);
  cudaFree(l->reserve);
  free(l->seq_host);
  free(l);
}

void *lstmd_cudnn_lstm_weights(struct lstmd_cudnn_lstm *l) { return l->w; }
void *lstmd_cudnn_lstm_dweights(struct lstmd_cudnn_lstm *l) { return l->dw; }
size_t lstmd_cudnn_lstm_weight_count(const struct lstmd_cudnn_lstm *l) {
  return l->w_bytes / lstmd_dtype_bytes(l->cfg.dtype);
}
size_t lstmd_cudnn_lstm_device_bytes(const struct lstmd_cudnn_lstm *l) {
  return 2 * l->w_bytes + l->work_bytes + l->reserve_bytes + l->dropout_bytes;
}
void lstmd_cudnn_lstm_use_null_seq_lengths(struct lstmd_cudnn_lstm *l, int on) { l->null_seq = on; }
void lstmd_cudnn_lstm_set_quiet(struct lstmd_cudnn_lstm *l, int on) { l->quiet = on; }

/* Element offset of addr in the weight space, after checking the piece's size: a row-major
 * rows × cols matrix (cuDNN reports {1, rows, cols}; like PyTorch we rely on the element count
 * only) or a bias of `rows`. */
static int piece_offset(const struct lstmd_cudnn_lstm *l, cudnnTensorDescriptor_t d,
                        const void *addr, int rows, int cols, size_t *offset, const char *what,
                        int layer, int id) {
  cudnnDataType_t dt;
  int nb = 0, dim[3] = {0, 0, 0}, stride[3];
  if (CUDNN_REFUSED(cudnnGetTensorNdDescriptor(d, 3, &dt, &nb, dim, stride), 0))
    return LSTMD_ECUDA;
  const size_t es = lstmd_dtype_bytes(l->cfg.dtype);
  const ptrdiff_t bytes = (const char *)addr - (const char *)l->w;
  long long count = 1;
  for (int i = 0; i < nb && i < 3; i++) count *= dim[i];
  if (!addr || nb < 1 || nb > 3 || count != (long long)rows * cols || bytes < 0 ||
      bytes % (ptrdiff_t)es || (size_t)bytes + (size_t)rows * cols * es > l->w_bytes) {
    lstmd_errorf("cuDNN weight layout: pseudo-layer %d linear layer %d %s is %dx%dx%d (%d dims) at "
                 "byte %td, expected 1x%dx%d inside %zu bytes", layer, id, what, dim[0], dim[1], dim[2],
                 nb, bytes, rows, cols, l->w_bytes);
    return LSTMD_EFORMAT;
  }
  *offset = (size_t)bytes / es;
  return LSTMD_OK;
}

int lstmd_cudnn_lstm_weight_map(struct lstmd_cudnn_lstm *l, const size_t *off_w_ih,
                                const size_t *off_w_hh, const size_t *off_b_ih,
                                const size_t *off_b_hh, struct lstmd_cuda_segment *segs) {
  const int H = l->cfg.hidden, D = directions(&l->cfg);
  cudnnTensorDescriptor_t md = NULL, bd = NULL;
  int rc = LSTMD_OK, n = 0;
  if (CUDNN_REFUSED(cudnnCreateTensorDescriptor(&md), 0) ||
      CUDNN_REFUSED(cudnnCreateTensorDescriptor(&bd), 0))
    rc = LSTMD_ECUDA;
  /* pseudo-layer p: layer p / D, direction p % D (1: reverse); see the header */
  for (int p = 0; !rc && p < l->cfg.layers * D; p++) {
    const int in = p / D == 0 ? l->cfg.input : H * D;
    /* linLayerID 0-3: W (input) gates i,f,g,o; 4-7: R (recurrent) gates i,f,g,o. */
    for (int id = 0; !rc && id < 8; id++) {
      void *m_addr = NULL, *b_addr = NULL;
      if (CUDNN_REFUSED(cudnnGetRNNWeightParams(l->handle, l->rnn, p, l->w_bytes, l->w, id, md,
                                               &m_addr, bd, &b_addr), 0)) {
        rc = LSTMD_ECUDA;
        break;
      }
      const int gate = id % 4, recurrent = id >= 4, cols = recurrent ? H : in;
      size_t m_off = 0, b_off = 0;
      rc = piece_offset(l, md, m_addr, H, cols, &m_off, "matrix", p, id);
      if (!rc) rc = piece_offset(l, bd, b_addr, H, 1, &b_off, "bias", p, id);
      if (rc) break;
      const size_t w_src = (recurrent ? off_w_hh[p] : off_w_ih[p]) + (size_t)gate * H * cols;
      const size_t b_src = (recurrent ? off_b_hh[p] : off_b_ih[p]) + (size_t)gate * H;
      segs[n++] = (struct lstmd_cuda_segment){w_src, m_off, (size_t)H * cols};
      segs[n++] = (struct lstmd_cuda_segment){b_src, b_off, (size_t)H};
    }
  }
  if (md) cudnnDestroyTensorDescriptor(md);
  if (bd) cudnnDestroyTensorDescriptor(bd);
  return rc;
}

size_t lstmd_cudnn_lstm_reserve_bytes(const struct lstmd_cudnn_lstm *l) { return l->reserve_bytes; }

/* devSeqLengths of the RNN calls (see 3. and 6.). */
static const int32_t *seq_lengths(const struct lstmd_cudnn_lstm *l) {
  return l->null_seq ? NULL : l->seq_ext ? l->seq_ext : l->seq_dev;
}

/* Whether cuDNN's work and reserve sizes for the descriptors as they are now fit what set_up
 * allocated (see 6.). */
static int sizes_fit(struct lstmd_cudnn_lstm *l, int *fit) {
  size_t work_train = 0, reserve = 0, work_infer = 0, reserve_infer = 0;
  *fit = 0;
  CHECK_CUDNN(cudnnGetRNNTempSpaceSizes(l->handle, l->rnn, CUDNN_FWD_MODE_TRAINING, l->x_desc,
                                        &work_train, &reserve), 0);
  CHECK_CUDNN(cudnnGetRNNTempSpaceSizes(l->handle, l->rnn, CUDNN_FWD_MODE_INFERENCE, l->x_desc,
                                        &work_infer, &reserve_infer), 0);
  *fit = work_train <= l->work_bytes && work_infer <= l->work_bytes && reserve <= l->reserve_bytes;
  return LSTMD_OK;
}

int lstmd_cudnn_lstm_set_lengths(struct lstmd_cudnn_lstm *l, const int32_t *host_len,
                                 const int32_t *dev_len) {
  const struct lstmd_cudnn_lstm_config *c = &l->cfg;
  if (c->packed || !dev_len) {
    lstmd_errorf("cuDNN LSTM: per-column lengths need the unpacked layout and a device copy");
    return LSTMD_EINVAL;
  }
  int longest = 1;
  for (int b = 0; b < c->batch; b++) {
    if (host_len[b] < 1 || host_len[b] > c->steps) {
      lstmd_errorf("cuDNN LSTM: column %d has length %d, outside 1..%d", b, host_len[b], c->steps);
      return LSTMD_EINVAL;
    }
    if (host_len[b] > longest) longest = host_len[b];
  }
  for (int b = 0; b < c->batch; b++) l->seq_host[b] = host_len[b];
  l->seq_ext = dev_len;
  int fit = 0;
  LSTMD_TRY(set_data_descriptors(l, longest, 0));
  if (longest < c->steps) LSTMD_TRY(sizes_fit(l, &fit));
  if (!fit && longest < c->steps) LSTMD_TRY(set_data_descriptors(l, c->steps, 0));
  if (!fit) { /* maxSeqLength T: what set_up sized for (all lengths T then), checked again */
    LSTMD_TRY(sizes_fit(l, &fit));
    if (!fit) {
      lstmd_errorf("cuDNN LSTM: the work or reserve space for these lengths exceeds what T = %d "
                   "needed", c->steps);
      return LSTMD_EINVAL;
    }
  }
  return LSTMD_OK;
}

static int run_forward(struct lstmd_cudnn_lstm *l, int training, const void *x, void *y,
                       const void *hx, const void *cx, void *hy, void *cy, void *reserve) {
  CHECK_CUDNN(cudnnRNNForward(l->handle, l->rnn,
                              training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                              seq_lengths(l), l->x_desc, x, l->y_desc, y,
                              l->h_desc, hx, hy, l->c_desc, cx, cy, l->w_bytes, l->w,
                              l->work_bytes, l->work, training ? l->reserve_bytes : 0,
                              training ? reserve : NULL),
              l->quiet);
  return LSTMD_OK;
}

int lstmd_cudnn_lstm_forward(struct lstmd_cudnn_lstm *l, int training, const void *x, void *y,
                             const void *hx, const void *cx, void *hy, void *cy) {
  return run_forward(l, training, x, y, hx, cx, hy, cy, l->reserve);
}

int lstmd_cudnn_lstm_forward_train(struct lstmd_cudnn_lstm *l, const void *x, void *y,
                                   const void *hx, const void *cx, void *hy, void *cy,
                                   void *reserve) {
  return run_forward(l, 1, x, y, hx, cx, hy, cy, reserve);
}

int lstmd_cudnn_lstm_backward_data(struct lstmd_cudnn_lstm *l, const void *y, const void *dy,
                                   void *dx, const void *hx, const void *cx, const void *dhy,
                                   const void *dcy, void *dhx, void *dcx, void *reserve) {
  CHECK_CUDNN(cudnnRNNBackwardData_v8(l->handle, l->rnn, seq_lengths(l),
                                      l->y_desc, y, dy, l->x_desc, dx, l->h_desc, hx, dhy, dhx,
                                      l->c_desc, cx, dcy, dcx, l->w_bytes, l->w, l->work_bytes,
                                      l->work, l->reserve_bytes, reserve),
              l->quiet);
  return LSTMD_OK;
}

int lstmd_cudnn_lstm_backward_weights(struct lstmd_cudnn_lstm *l, const void *x, const void *hx,
                                      const void *y, void *reserve) {
  CHECK_CUDNN(cudnnRNNBackwardWeights_v8(l->handle, l->rnn, CUDNN_WGRAD_MODE_ADD,
                                         seq_lengths(l), l->x_desc, x, l->h_desc,
                                         hx, l->y_desc, y, l->w_bytes, l->dw, l->work_bytes,
                                         l->work, l->reserve_bytes, reserve),
              l->quiet);
  return LSTMD_OK;
}

/* One window whole: no gradient arrives from the next window (dhy, dcy NULL) and none is wanted
 * for the initial state (dhx, dcx NULL): truncated BPTT. */
int lstmd_cudnn_lstm_backward(struct lstmd_cudnn_lstm *l, const void *x, const void *y,
                              const void *dy, void *dx, const void *hx, const void *cx) {
  LSTMD_TRY(lstmd_cudnn_lstm_backward_data(l, y, dy, dx, hx, cx, NULL, NULL, NULL, NULL,
                                           l->reserve));
  return lstmd_cudnn_lstm_backward_weights(l, x, hx, y, l->reserve);
}

int lstmd_cudnn_lstm_zero_dweights(struct lstmd_cudnn_lstm *l) {
  if (l->w_bytes) LSTMD_CHECK_CUDA(cudaMemsetAsync(l->dw, 0, l->w_bytes, l->stream));
  return LSTMD_OK;
}
