/* model_cuda_internal.h — the device model's state (model_cuda.h), shared by model_cuda.c (its
 * set-up, forward, backward and state; rationale 2. to 5.) and model_cuda_choice.c (the cuDNN
 * set-up's choice, rationale 1.). */
#ifndef LSTMD_MODEL_CUDA_INTERNAL_H
#define LSTMD_MODEL_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "convert_cuda.h"
#include "lstm_cudnn.h"
#include "model_cuda.h"

enum { kMaxAllocs = 32 };

struct lstmd_cuda_model {
  struct lstmd_cuda_model_config cfg;
  cudaStream_t stream;
  cublasHandle_t blas;
  cudnnHandle_t dnn;
  struct lstmd_cudnn_lstm *lstm;
  struct lstmd_cuda_ln_lstm *ln; /* layer_norm: instead of lstm (model_cuda.c, 4.) */
  struct lstmd_cuda_lstm_choice choice; /* the set-up in use */
  double trial_ms;
  struct lstmd_cuda_segment *segs; /* device [16·L]: flat master → cuDNN weight space */
  struct lstmd_cuda_segment *segs_back; /* device [16·L]: weight space → flat (offsets swapped) */
  int n_segs;
  size_t max_seg;
  struct lstmd_cuda_inputs in;
  float *xf;       /* text: embedded ids [N,E] */
  void *x16;       /* 16-bit LSTM input [N,I] (NULL in fp32) */
  void *y_rnn;     /* LSTM output [N,H], data type */
  float *yf;       /* fp32 view of it (a cast copy in 16-bit) */
  float *out;      /* [N,O] logits / predictions, then their gradient */
  float *dyf;      /* [N,H] */
  void *dy16;      /* 16-bit copy of dyf (NULL in fp32) */
  void *dx_rnn;    /* [N,I] data type */
  float *dxf;      /* text, 16-bit: fp32 copy of dx for the embedding gradient */
  float *row_loss; /* text: [N]; classify: [B] */
  float *pooled;   /* classify: [B,D·H] */
  float *dpooled;  /* classify: [B,D·H] */
  int32_t *argmax; /* classify: [B,D·H] the step each pooled value came from */
  int32_t *seq_dev;/* classify: [B] cuDNN's device lengths, max(length, 1) (see 5.) */
  int lengths_set; /* classify: set_lengths was called since the last forward */
  float *ones;     /* [N] */
  void *state[2];  /* data type: h [L,B,H] at 0, c [L,B,H] at byte c_off; state[cur] is the
                    * next initial state */
  size_t c_off;    /* 256-aligned (model_cuda.c, 3.) */
  float *state_f;  /* fp32 staging for get/set: h at 0, c at element cf_off (256-byte aligned) */
  size_t cf_off;
  double *eval_loss; /* the loss sum of evaluation forwards (not used: per-row results are) */
  const float *loss_scale; /* device float multiplying training gradients, or NULL */
  const float *kd_teacher; /* distillation: the teacher's output [N,O] on the device, or NULL */
  float kd_temperature, kd_alpha;
  int cur, state_zero;
  const void *bw_x, *bw_hx, *bw_cx; /* what the last training forward used, for backward */
  size_t device_bytes;
  void *allocs[kMaxAllocs];
  int n_allocs;
};


static inline int input_width(const struct lstmd_cuda_model_layout *l) {
  return l->text || l->classify ? l->embed : l->width;
}
static inline int output_width(const struct lstmd_cuda_model_layout *l) {
  return l->text ? l->vocab : l->classify ? l->classes : l->horizon;
}
/* Directions D of the LSTM: its output rows are D·H wide. */
static inline int dirs(const struct lstmd_cuda_model_layout *l) { return l->classify && l->bidirectional ? 2 : 1; }

/* The LSTM's input on the device: the 16-bit copy, the embedded ids or the series rows. */
static inline void *lstm_input(struct lstmd_cuda_model *m) {
  if (m->x16) return m->x16;
  return m->cfg.layout.text || m->cfg.layout.classify ? (void *)m->xf : (void *)m->in.x;
}

/* Creates m->lstm from the candidates of lstmd_cuda_model_candidates (model_cuda_choice.c). */
int lstmd_cuda_model_choose_lstm(struct lstmd_cuda_model *m);

#endif
