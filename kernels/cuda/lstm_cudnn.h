/* lstm_cudnn.h — a stack of L LSTM layers on cuDNN 9's v8-style RNN API, for one fixed shape
 * (T steps × B windows): forward in training or inference mode, backward data, and backward
 * weights, which ADDS into the weight-gradient space (zero it once per optimizer step; that is
 * also what makes gradient accumulation over micro-batches free). Dropout (cuDNN's own) is
 * applied between layers in training mode only.
 *
 * Activations are sequence-major x[t][b][i] (CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, every
 * window full length unless lstmd_cudnn_lstm_set_lengths gives each column its own); h/c states
 * are [L·D][B][H] (D = 2 directions when bidirectional, else 1). All buffers are of the
 * configured data type (fp32, fp16 or bf16); math precision is fp32, the math type as
 * lstmd_cudnn_lstm_math_type says.
 *
 * Bidirectional (the sequence classifier, worker/model/classify.h): CUDNN_BIDIRECTIONAL, y is
 * [T,B,2H] with the forward direction's output in the first H and the reverse direction's (which
 * reads each column's steps len−1 … 0) in the second, as PyTorch's; layer k > 0 reads 2H.
 *
 * cuDNN's weight space is opaque; lstmd_cudnn_lstm_weight_map lists where each PyTorch-layout
 * piece (weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, their `_reverse` twins when
 * bidirectional, gate blocks i,f,g,o) lives in it, from cudnnGetRNNWeightParams, so parameters
 * and checkpoints keep one layout on every backend. */
#ifndef LSTMD_LSTM_CUDNN_H
#define LSTMD_LSTM_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#include "convert_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuDNN's algorithms, in cudnnRNNAlgo_t order. */
enum lstmd_rnn_algo {
  LSTMD_RNN_STANDARD = 0,
  LSTMD_RNN_PERSIST_STATIC = 1,
  LSTMD_RNN_PERSIST_DYNAMIC = 2,
  LSTMD_RNN_PERSIST_STATIC_SMALL_H = 3,
  LSTMD_RNN_ALGO_COUNT = 4
};

struct lstmd_cudnn_lstm_config {
  int input, hidden, layers; /* I (layer 0's input width), H, L */
  int steps, batch;          /* T, B */
  int dtype;                 /* enum lstmd_cuda_dtype of every buffer */
  int allow_tf32;            /* fp32 data: TF32 tensor-core math allowed */
  float dropout;             /* between layers, training mode only */
  unsigned long long seed;   /* of cuDNN's dropout states */
  int algo;                  /* enum lstmd_rnn_algo */
  int packed;                /* 1: CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED with padded I/O off;
                              * 0: SEQ_MAJOR_UNPACKED with padded I/O on. Every window has all T
                              * steps, so both describe the same memory; some algorithms may
                              * accept only one of them. */
  int default_math;          /* 0: the math type PyTorch uses for the data type; 1: fp16 with
                              * CUDNN_DEFAULT_MATH instead of tensor-op math (the fallback when
                              * cuDNN refuses the latter, at set-up or at the first run). No
                              * effect on bf16 (default math already) or fp32 (TF32 is decided
                              * by allow_tf32 alone). See lstmd_cudnn_lstm_math_type. */
  int quiet;                 /* 1: cuDNN refusals at set-up and in forward/backward return
                              * LSTMD_EUNSUPPORTED without a message (trying candidates; see
                              * lstmd_cudnn_lstm_set_quiet); 0: printed, LSTMD_ECUDA */
  int bidirectional;         /* 1: CUDNN_BIDIRECTIONAL (y and every layer k > 0's input are
                              * 2H wide, states [2L,B,H]); 0: unidirectional */
};

/* The cudnnMathType_t used for c (needs no device): fp16: CUDNN_TENSOR_OP_MATH, or
 * CUDNN_DEFAULT_MATH with default_math; bf16: CUDNN_DEFAULT_MATH; fp32: CUDNN_DEFAULT_MATH when
 * allow_tf32, else CUDNN_FMA_MATH (no TF32). PyTorch's rule (aten/src/ATen/cudnn/Descriptors.h,
 * RNNDescriptor::set). */
int lstmd_cudnn_lstm_math_type(const struct lstmd_cudnn_lstm_config *c);
/* "default", "tensor_op", "tensor_op_allow_conversion", "fma" for a cudnnMathType_t. */
const char *lstmd_cudnn_math_name(int math_type);

struct lstmd_cudnn_lstm;

/* "standard", "persist_static", ... */
const char *lstmd_rnn_algo_name(int algo);

/* Builds the descriptors and allocates weight, weight-gradient, work and reserve space on the
 * current device. handle: a cudnnHandle_t whose stream the caller set; everything is enqueued on
 * that stream and synchronised before returning. The weight space and its gradient start zeroed
 * (never uninitialised memory: a trial run on NaN/Inf could time or fail misleadingly). Dropout
 * states are allocated (and cudnnSetDropoutDescriptor's initialising kernel run) only when
 * dropout > 0 and L > 1. Returns 0; LSTMD_EINVAL for an invalid cfg (checked before any cuDNN
 * call, so also without a device); LSTMD_ENOMEM; when cuDNN refuses the algorithm/layout/math/
 * type/shape at set-up, LSTMD_EUNSUPPORTED quietly if cfg->quiet, else LSTMD_ECUDA after
 * printing cuDNN's message. Set-up success does not mean the RNN runs: cuDNN may refuse only at
 * the first forward/backward, so try one before relying on it (model_cuda.c does).
 * Free with lstmd_cudnn_lstm_destroy (NULL and half-built are fine). */
int lstmd_cudnn_lstm_create(void *handle, const struct lstmd_cudnn_lstm_config *cfg,
                            struct lstmd_cudnn_lstm **out);
void lstmd_cudnn_lstm_destroy(struct lstmd_cudnn_lstm *l);

/* Weight space and its gradient: weight_count elements of the data type each. */
void *lstmd_cudnn_lstm_weights(struct lstmd_cudnn_lstm *l);
void *lstmd_cudnn_lstm_dweights(struct lstmd_cudnn_lstm *l);
size_t lstmd_cudnn_lstm_weight_count(const struct lstmd_cudnn_lstm *l);
/* Bytes of device memory this object holds (weights, gradients, work, reserve, dropout states;
 * the last are 0 when dropout is 0 or L == 1). */
size_t lstmd_cudnn_lstm_device_bytes(const struct lstmd_cudnn_lstm *l);

/* Where the PyTorch-layout tensors of each pseudo-layer p live (p = k for layer k; bidirectional:
 * p = 2k for layer k's forward direction and 2k + 1 for its reverse, the `_reverse` tensors —
 * cuDNN's pseudo-layer numbering, which PyTorch's get_parameters relies on too). off_*[p] are
 * element offsets of lstm.weight_ih_l{k}[_reverse] [4H,in], weight_hh [4H,H], bias_ih [4H],
 * bias_hh [4H] in the caller's flat buffer (in: I for k = 0, else H·D). Writes 16·L·D segments
 * {flat offset → weight-space element offset, count} into segs (room for 16·L·D) after checking
 * every piece's shape that cuDNN reports. Returns 0 or LSTMD_ECUDA / LSTMD_EFORMAT (unexpected
 * layout) with a message. */
int lstmd_cudnn_lstm_weight_map(struct lstmd_cudnn_lstm *l, const size_t *off_w_ih,
                                const size_t *off_w_hh, const size_t *off_b_ih,
                                const size_t *off_b_hh, struct lstmd_cuda_segment *segs);

/* Forward over the window. x [T,B,I], y [T,B,H·D] (written). hx/cx [L·D,B,H] initial state,
 * NULL for zeros; hy/cy [L·D,B,H] final state, may be NULL. training: keeps what backward needs in the
 * reserve space and applies dropout. */
int lstmd_cudnn_lstm_forward(struct lstmd_cudnn_lstm *l, int training, const void *x, void *y,
                             const void *hx, const void *cx, void *hy, void *cy);
/* Backward after a training forward with the same x, y, hx, cx: dx [T,B,I] is written from
 * dy [T,B,H·D] (no gradient flows into the initial state: truncated BPTT), then the weight
 * gradients are ADDED into the dweight space. */
int lstmd_cudnn_lstm_backward(struct lstmd_cudnn_lstm *l, const void *x, const void *y,
                              const void *dy, void *dx, const void *hx, const void *cx);
/* The pieces of forward and backward with the reserve space passed in, for the pipeline stages
 * (kernels/cuda/stage_cuda.h), which keep one reserve per time chunk in flight. reserve: at
 * least lstmd_cudnn_lstm_reserve_bytes, written by the training forward and read by both
 * backward calls of the same chunk. backward_data takes the gradient of the final state
 * (dhy/dcy, NULL: zero) and writes that of the initial state (dhx/dcx, NULL: not wanted), so
 * time chunks chain backwards; backward_weights ADDS into the dweight space and must follow the
 * chunk's backward_data (cuDNN reads what it left in the reserve). */
size_t lstmd_cudnn_lstm_reserve_bytes(const struct lstmd_cudnn_lstm *l);
int lstmd_cudnn_lstm_forward_train(struct lstmd_cudnn_lstm *l, const void *x, void *y,
                                   const void *hx, const void *cx, void *hy, void *cy,
                                   void *reserve);
int lstmd_cudnn_lstm_backward_data(struct lstmd_cudnn_lstm *l, const void *y, const void *dy,
                                   void *dx, const void *hx, const void *cx, const void *dhy,
                                   const void *dcy, void *dhx, void *dcx, void *reserve);
int lstmd_cudnn_lstm_backward_weights(struct lstmd_cudnn_lstm *l, const void *x, const void *hx,
                                      const void *y, void *reserve);
/* Variable-length columns (the unpacked layout only): from the next RNN call on, column b has
 * host_len[b] valid steps (1..T; its input and output rows past them are padding, which cuDNN
 * neither reads nor writes but fills with 0 in y), and the reverse direction of a bidirectional
 * LSTM starts at the column's last valid step. dev_len: the same values on the device (int32
 * [B]), owned by the caller and read asynchronously by every later forward/backward until the
 * next call: keep it unchanged until they have run. The descriptors are made for the batch's
 * longest column (steps past it are not run) when cuDNN's work and reserve sizes for that fit
 * what was allocated for T, else for T. Host-only (no device work, no wait). Returns 0, or
 * LSTMD_EINVAL (a length outside 1..T, the packed layout) / LSTMD_ECUDA with a message. */
int lstmd_cudnn_lstm_set_lengths(struct lstmd_cudnn_lstm *l, const int32_t *host_len,
                                 const int32_t *dev_len);
/* Zeroes the weight-gradient space (cudaMemsetAsync on the handle's stream). */
int lstmd_cudnn_lstm_zero_dweights(struct lstmd_cudnn_lstm *l);
/* Passes NULL instead of the device copy of the sequence lengths to the RNN calls from now on
 * (cuDNN >= 8.9.1 documents NULL as accepted; the GPU test checks both). */
void lstmd_cudnn_lstm_use_null_seq_lengths(struct lstmd_cudnn_lstm *l, int on);

/* While on, cuDNN failures in forward/backward return LSTMD_EUNSUPPORTED without a message
 * (used while trying algorithms); starts as cfg->quiet. */
void lstmd_cudnn_lstm_set_quiet(struct lstmd_cudnn_lstm *l, int on);

#ifdef __cplusplus
}
#endif

#endif
