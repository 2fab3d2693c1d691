/* model_cuda.h — the whole LSTM model on one CUDA device for one fixed (T, B): embedding
 * (text) → L-layer cuDNN LSTM → linear head (cuBLAS) → softmax cross-entropy (text) or MSE
 * (series), forward and backward; or a sequence classifier (layout.classify, the GPU twin of
 * worker/model/classify.c): ids with per-column lengths → embedding → L-layer cuDNN LSTM,
 * bidirectional when asked, on padded variable-length columns → pooling over the valid steps
 * (classify_cuda.h) → head → softmax cross-entropy per non-empty column. The caller owns the flat fp32 master parameters and gradients
 * on the device, in the same layout as the CPU model (worker/model/model.h); this object owns the
 * activations, the cuDNN weight space (a cast copy of the LSTM tensors, refreshed with
 * _load_weights after every update) and the carried recurrent state.
 *
 * Precision: the LSTM runs in the data type (fp32, fp16 or bf16); embedding, head and loss run
 * in fp32 (TF32 allowed unless dtype is fp32 with allow_tf32 off), so only the LSTM's inputs and
 * outputs are cast. Gradients land in fp32. */
#ifndef LSTMD_MODEL_CUDA_H
#define LSTMD_MODEL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "convert_cuda.h"
#include "lstm_ln_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { LSTMD_CUDA_MAX_LAYERS = 16 };

/* Where each tensor lives in the flat parameter buffer (element offsets), and the shape. */
struct lstmd_cuda_model_layout {
  int text;            /* 1: ids → embedding, softmax; 0: series rows → MSE, or a classifier */
  int vocab, embed;    /* text, classify */
  int width, horizon;  /* series */
  int hidden, layers;
  int classify;        /* 1: a sequence classifier (then text is 0): see the top of this file */
  int classes;         /* classify: C */
  int bidirectional;   /* classify: 1 adds the reverse direction (D = 2; lstm_cudnn.h) */
  int pool;            /* classify: enum lstmd_pool_kind (worker/model/model.h) */
  size_t n_params;
  size_t off_embed;
  /* the LSTM's tensors by cuDNN pseudo-layer: layer k at k, or bidirectional at 2k (forward)
   * and 2k + 1 (its `_reverse` tensors) — lstmd_cudnn_lstm_weight_map's indexing */
  size_t off_w_ih[2 * LSTMD_CUDA_MAX_LAYERS], off_w_hh[2 * LSTMD_CUDA_MAX_LAYERS];
  size_t off_b_ih[2 * LSTMD_CUDA_MAX_LAYERS], off_b_hh[2 * LSTMD_CUDA_MAX_LAYERS];
  size_t off_head_w, off_head_b;
  int layer_norm;      /* 1: the layer-normalised LSTM (lstm_ln_cuda.h) instead of cuDNN's: fp32
                        * only, no dropout; ln[] gives every layer's tensors */
  struct lstmd_cuda_ln_layer ln[LSTMD_CUDA_MAX_LAYERS];
};

/* One cuDNN LSTM set-up: what lstmd_cuda_model_create chooses and what it can be told to use. */
struct lstmd_cuda_lstm_choice {
  int algo;         /* enum lstmd_rnn_algo (lstm_cudnn.h) */
  int packed;       /* 1: the packed data layout (see lstm_cudnn.h) */
  int default_math; /* 1: fp16 with CUDNN_DEFAULT_MATH instead of tensor-op math (see
                     * lstmd_cudnn_lstm_math_type); 0 for every other type */
};

struct lstmd_cuda_model_config {
  struct lstmd_cuda_model_layout layout;
  int steps, batch;        /* T, B */
  int dtype;               /* enum lstmd_cuda_dtype of the LSTM */
  int allow_tf32;          /* fp32: TF32 tensor cores in cuDNN and cuBLAS */
  float dropout;           /* cuDNN dropout between layers (training only) */
  unsigned long long seed; /* of the dropout states */
  int algo;                /* enum lstmd_rnn_algo to force one (its layouts and math types are
                            * tried in turn, the first that runs is kept), or -1: time every
                            * candidate and keep the fastest */
  int force_choice;        /* 1: use exactly `choice` (no timing, no other candidate); overrides
                            * algo and LSTMD_CUDNN_ALGO. 0 (what a zeroed config says): choose. */
  struct lstmd_cuda_lstm_choice choice;
};

/* Reproducible multi-rank runs. Timing can pick different cuDNN algorithms on different ranks
 * (different numerics, and a weight-gradient layout that need not match). The intended use:
 * rank 0 creates its model with force_choice = 0, reads lstmd_cuda_model_choice, broadcasts the
 * three ints; the other ranks create theirs with force_choice = 1 and that choice. A rank where
 * the choice does not run gets LSTMD_EUNSUPPORTED, which the ranks must vote on (fail together).
 * The engine does the broadcast; this module only takes and reports the choice. */

enum { LSTMD_CUDA_MAX_CANDIDATES = 2 * 2 * 4 }; /* algorithms × layouts × fp16 math types */
/* A classifier's candidates are cuDNN's standard algorithm in the unpacked layout only (with
 * fp16's default-math retry), untimed: the packed layout needs columns sorted by length, and the
 * persistent algorithms are not for variable lengths (REFERENCE.md §1.8: SMALL_H refuses them),
 * while a trial run on full-length columns could not tell. LSTMD_CUDNN_ALGO other than
 * `standard` and a forced choice other than standard/unpacked are then refused. */

/* The cuDNN set-ups lstmd_cuda_model_create tries for cfg, in order, into out (room for
 * LSTMD_CUDA_MAX_CANDIDATES): algorithms in enum order, each unpacked then packed, and for fp16
 * each tensor-op candidate followed by its default-math retry (tried only when the tensor-op one
 * fails to build or run). *timed = 1 when every one is timed and the fastest kept, 0 when the
 * first one that runs its trial forward+backward is kept (a forced algorithm or choice).
 * Reads LSTMD_CUDNN_ALGO (see lstmd_cuda_model_create) unless cfg->force_choice. Needs no
 * device. Returns the count (> 0), or LSTMD_ECONFIG (bad LSTMD_CUDNN_ALGO) / LSTMD_EINVAL (bad
 * algo or choice) after printing why. */
int lstmd_cuda_model_candidates(const struct lstmd_cuda_model_config *cfg,
                                struct lstmd_cuda_lstm_choice *out, int *timed);

/* The batch buffers on the device that the caller fills before a step (sequence-major). */
struct lstmd_cuda_inputs {
  int32_t *ids, *targets; /* text: [T,B]; classify: ids [T,B] (padding: any id < V) */
  float *x, *y;           /* series: [T,B,W] inputs, [T,B,K] targets */
  int32_t *lengths;       /* classify: [B] valid steps of each column, 0..T (0: empty, no loss) */
  int32_t *labels;        /* classify: [B] class ids < C */
};

/* Called while a step is being enqueued, right after the work that makes the gradients
 * [first, n_params) final has been enqueued on the stream (head first, then the LSTM when
 * flushed, then the embedding with first == 0). Lets the caller start all-reduces early. */
typedef int (*lstmd_cuda_ready_fn)(void *ctx, size_t first);

struct lstmd_cuda_model;

/* Creates cuBLAS/cuDNN handles on `stream` (a cudaStream_t) of the current device, chooses the
 * cuDNN set-up (lstmd_cuda_model_candidates: cfg->choice when forced; else cfg->algo, or the
 * fastest that works; the environment variable
 * LSTMD_CUDNN_ALGO=standard|persist_static|persist_dynamic|persist_static_small_h forces an
 * algorithm like cfg->algo) and allocates everything. Every candidate kept has run one forward
 * + backward on the device (on zeroed weights); a forced algorithm or choice none of whose
 * candidates runs gives LSTMD_EUNSUPPORTED naming it. All set-up work is on `stream`, which is
 * synchronised before returning. Returns 0 or a status after printing why. */
int lstmd_cuda_model_create(const struct lstmd_cuda_model_config *cfg, void *stream,
                            struct lstmd_cuda_model **out);
void lstmd_cuda_model_destroy(struct lstmd_cuda_model *m);

struct lstmd_cuda_inputs *lstmd_cuda_model_inputs(struct lstmd_cuda_model *m);
/* The full set-up in use (algorithm, layout, math) into *out: what another rank passes as
 * cfg->choice with force_choice = 1 to run the same one. Returns how long one forward+backward
 * took when the candidates were timed (ms; 0 when not). */
double lstmd_cuda_model_choice(const struct lstmd_cuda_model *m, struct lstmd_cuda_lstm_choice *out);
size_t lstmd_cuda_model_device_bytes(const struct lstmd_cuda_model *m);

/* Classify: the lengths of the batch (host [B], each 0..T) before EVERY forward, the same values
 * the caller puts in inputs->lengths on the device before that forward runs. Sets cuDNN's data
 * descriptors for them (host work only; lstm_cudnn.h's set_lengths). Returns 0, or LSTMD_EINVAL
 * (not a classifier, a length out of range) / LSTMD_ECUDA after printing why. */
int lstmd_cuda_model_set_lengths(struct lstmd_cuda_model *m, const int32_t *host_lengths);

/* Refreshes the cuDNN weight space from the fp32 master parameters (device, [n_params]). */
int lstmd_cuda_model_load_weights(struct lstmd_cuda_model *m, const float *params);

enum lstmd_flush { LSTMD_FLUSH_NONE = 0, LSTMD_FLUSH_SET = 1, LSTMD_FLUSH_ADD = 2 };

/* Forward of one micro-batch on the inputs. Adds the summed loss (nats / squared error, over
 * all targets; classify: nats over the non-empty columns) to *loss_acc (a device double). With grad_scale != 0 the head output is replaced
 * by grad_scale·∂loss/∂output, ready for _backward. carry_state: the final state becomes the
 * next window's initial state (else the next window starts from zero). training == 0:
 * inference mode (no dropout, no reserve), for evaluation and checks. */
int lstmd_cuda_model_forward(struct lstmd_cuda_model *m, const float *params, float grad_scale,
                             int training, int carry_state, double *loss_acc);
/* Backward after a training forward with grad_scale != 0: head and embedding gradients are
 * ADDED to grads (device fp32 [n_params]); the LSTM's are added into cuDNN's gradient space
 * (zero it with _zero_lstm_grads), and copied into grads when flush is SET / added when ADD.
 * ready (may be NULL) is called as regions become final, only when flush != NONE. */
int lstmd_cuda_model_backward(struct lstmd_cuda_model *m, const float *params, float *grads,
                              int flush, lstmd_cuda_ready_fn ready, void *ready_ctx);
int lstmd_cuda_model_zero_lstm_grads(struct lstmd_cuda_model *m);
/* Evaluation: an inference-mode forward from a zero state that leaves the carried state as it
 * was, then copies to the host (synchronously) the loss of every target: text: per-row
 * cross-entropy [T,B]; series: the error pred − target [T,B,K] (square it to score);
 * classify: per-column cross-entropy [B] (0 for empty columns; set_lengths first). */
int lstmd_cuda_model_eval(struct lstmd_cuda_model *m, const float *params, float *host_rows);

/* Training forwards multiply grad_scale by *device_scale (a device float read when the kernel
 * runs: the fp16 loss scale, which the optimizer's decision updates on the device); NULL: 1. */
void lstmd_cuda_model_scale_gradients_by(struct lstmd_cuda_model *m, const float *device_scale);

/* The head's output [N,O] on the device (logits / predictions after a forward with grad_scale
 * 0; their gradient after a training forward); classify: [B,C], rows of empty columns 0. */
const float *lstmd_cuda_model_output(const struct lstmd_cuda_model *m);
/* Distillation: training forwards score kd_cpu.h's loss against teacher_out (the device output
 * [N,O] of the teacher's forward on the same inputs, read when the loss kernel runs) at
 * temperature T and weight alpha; NULL restores the plain loss. Evaluation is always plain. */
void lstmd_cuda_model_set_distill(struct lstmd_cuda_model *m, const float *teacher_out,
                                  float temperature, float alpha);

/* Passes NULL as cuDNN's device sequence lengths from now on (the GPU test checks both). */
void lstmd_cuda_model_null_seq_lengths(struct lstmd_cuda_model *m, int on);

/* Carried state. Zero it; or copy it to / from the host as fp32 [L,B,H] h and c (synchronous). */
int lstmd_cuda_model_reset_state(struct lstmd_cuda_model *m);
int lstmd_cuda_model_get_state(struct lstmd_cuda_model *m, float *h, float *c);
int lstmd_cuda_model_set_state(struct lstmd_cuda_model *m, const float *h, const float *c);

#ifdef __cplusplus
}
#endif

#endif
