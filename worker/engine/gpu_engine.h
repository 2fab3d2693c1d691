/* gpu_engine.h — one rank's data-parallel training on its GPU: the role of the CPU engine
 * (data_parallel.h) on a CUDA device, and reached through the same lstmd_dp_* calls.
 *
 * The fp32 master parameters, gradients and optimizer moments live on the device in the flat
 * layout of worker/model.h; the host model's buffers are brought up to date only on request
 * (checkpoints, evaluation). Per micro-batch: the batch is copied through pinned memory on a copy
 * stream, forward and backward run on the compute stream (kernels/cuda/model_cuda.h), and on the
 * last micro-batch of a step each region of gradients that backward has made final (head, then
 * the LSTM, then the embedding) is summed over the ranks in buckets on a communication stream
 * that waits for it with an event, overlapping the rest of backward; the optimizer waits for the
 * last bucket with another event. Precision fp32 / tf32 / bf16 / fp16; fp16 scales the loss
 * dynamically (worker/loss_scale.h) and skips the update of a step whose gradients overflowed. */
#ifndef LSTMD_GPU_ENGINE_H
#define LSTMD_GPU_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/io/checkpoint.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"

struct lstmd_comm;
struct lstmd_gpu;
struct lstmd_cuda_model_layout;

/* Where each tensor of the CPU model's flat buffer lies, for the GPU model (same layout). */
void lstmd_gpu_model_layout(const struct lstmd_model *m, struct lstmd_cuda_model_layout *l);

struct lstmd_gpu_config {
  int seq_len, batch;    /* T and this rank's B */
  int carry_state;       /* stream order */
  float dropout;         /* cuDNN dropout between layers */
  uint64_t seed;
  double bucket_mb;      /* all-reduce bucket size */
  int device;            /* CUDA device index */
  int precision;         /* enum lstmd_precision */
  double comm_timeout_s; /* watchdog limit for one step's all-reduce */
};

/* Selects the device and builds the GPU model (choosing cuDNN's fastest algorithm); not
 * collective. The model must outlive the engine. Returns 0 or a status after printing why. */
int lstmd_gpu_create(struct lstmd_model *m, const struct lstmd_gpu_config *cfg,
                     struct lstmd_comm *comm, struct lstmd_gpu **out);
void lstmd_gpu_destroy(struct lstmd_gpu *g);

/* Collective (every rank, after set-up and resume agreed): with more than one rank creates the
 * NCCL communicator, takes the fp16 loss scale from rank 0's p, then copies the host model's
 * parameters (and o's moments when o != NULL) to the device. Before the first step. */
int lstmd_gpu_upload(struct lstmd_gpu *g, const struct lstmd_optim *o,
                     const struct lstmd_train_progress *p);
/* Copies the device parameters (and moments when o != NULL) into the host model and o, and
 * the loss scale into p (when p != NULL). Waits for the GPU. */
int lstmd_gpu_sync_host(struct lstmd_gpu *g, struct lstmd_optim *o, struct lstmd_train_progress *p);

/* lstmd_dp_micro_step on the GPU (same contract). */
int lstmd_gpu_micro_step(struct lstmd_gpu *g, const struct lstmd_batch *batch, float grad_scale,
                         int first, int last, double *loss_sum, double *comm_wait_s);
/* Clipping and the AdamW/SGD update on the device; o->step and the schedule as on the CPU.
 * *grad_norm: the norm of the (unscaled) summed gradients. fp16 overflow: the update is
 * skipped (o->step unchanged) and 0 returned. Non-finite gradients otherwise: LSTMD_EINVAL. */
int lstmd_gpu_optim_step(struct lstmd_gpu *g, struct lstmd_optim *o, double *grad_norm);

void lstmd_gpu_reset_state(struct lstmd_gpu *g);
/* This rank's carried state as fp32 [L,B,H] (get) or from it (set). */
int lstmd_gpu_get_state(struct lstmd_gpu *g, float *h, float *c);
int lstmd_gpu_set_state(struct lstmd_gpu *g, const float *h, const float *c);

/* lstmd_evaluate on the GPU (same contract and result), with the engine's (T, B): windows in
 * chunks of B, the last chunk padded with repeats of its first window, which are not scored.
 * Inference mode; the carried training state is left alone. */
struct lstmd_dataset;
int lstmd_gpu_evaluate(struct lstmd_gpu *g, const struct lstmd_dataset *ds, double *mean_loss,
                       uint64_t *tokens);

/* fp16: the current loss scale; 0 for the other precisions. */
double lstmd_gpu_loss_scale(const struct lstmd_gpu *g);
/* Forces the fp16 loss scale (tests, resume); LSTMD_EINVAL if not usable. */
int lstmd_gpu_set_loss_scale(struct lstmd_gpu *g, double scale);
/* Steps whose update was skipped for an fp16 overflow, since creation. */
long lstmd_gpu_skipped_steps(const struct lstmd_gpu *g);
/* One line: device, precision, cuDNN algorithm, all-reduce transport. */
void lstmd_gpu_describe(const struct lstmd_gpu *g, char *buf, size_t n);

#endif
