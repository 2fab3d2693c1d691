/* data_parallel.h — one step of data-parallel training on the CPU backend.
 *
 * A rank's batch of B windows is split into slices, one per thread; each thread runs forward and
 * backward on its slice with single-threaded BLAS into its own gradient buffer. As backward
 * finishes a suffix of the flat gradient buffer in every slice (head first, then the LSTM
 * layers from the top, then the embedding), the buckets inside it are summed over the slices
 * and handed to the reducer thread, whose all-reduce over the ranks overlaps the rest of
 * backward. The optimizer then finds the global gradient sum in model->grads on every rank.
 *
 * Batch columns are global: rank r's slice starting at local column j holds global columns
 * r·B + j..., which is what dropout masks and carried state are keyed on, so N ranks with
 * batch b compute what one rank with batch N·b computes.
 *
 * With cfg.use_gpu the same calls drive the GPU engine instead (worker/gpu_engine.h): the
 * parameters, gradients and optimizer state then live on the device, and the host model is
 * brought up to date by lstmd_dp_sync_host. */
#ifndef LSTMD_DATA_PARALLEL_H
#define LSTMD_DATA_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "worker/model/model.h"

struct lstmd_comm;
struct lstmd_dp;

struct lstmd_dp_config {
  int seq_len, batch;   /* T and this rank's B */
  int threads;          /* threads of this rank (0: the node's cores / ranks on the node) */
  int carry_state;      /* stream order: state carried between windows */
  float dropout;
  uint64_t seed;
  double bucket_mb;     /* gradient bucket size */
  int use_gpu;          /* 0 (also when left out): the CPU engine; 1: the GPU engine */
  int gpu_device;       /* GPU engine: this rank's CUDA device */
  int precision;        /* enum lstmd_precision (GPU engine; the CPU engine is fp32) */
  double comm_timeout_s;/* GPU engine: limit on one step's gradient all-reduce */
};

/* comm may be NULL (one rank). The model must outlive dp. */
int lstmd_dp_create(struct lstmd_model *m, const struct lstmd_dp_config *cfg,
                    struct lstmd_comm *comm, struct lstmd_dp **out);
void lstmd_dp_destroy(struct lstmd_dp *dp);

int lstmd_dp_threads(const struct lstmd_dp *dp);
/* BLAS threads each slice's calls use. */
int lstmd_dp_blas_threads(const struct lstmd_dp *dp);
/* Zeroes the carried state of every stream of this rank. */
void lstmd_dp_reset_state(struct lstmd_dp *dp);

/* Forward + backward of this rank's batch [T, B]. first: gradients start from zero; last: the step's gradients
 * are then summed over slices and ranks into model->grads. Returns the summed loss of this
 * rank's batch in *loss_sum, and in *comm_wait_s the all-reduce time backward did not hide. */
int lstmd_dp_micro_step(struct lstmd_dp *dp, const struct lstmd_batch *batch, float grad_scale,
                        uint64_t micro_step, int first, int last, double *loss_sum,
                        double *comm_wait_s);

/* After set-up/resume, before the first step: the GPU engine copies the host model's
 * parameters, o's moments and p's loss scale to the device (CPU engine: nothing to do). */
struct lstmd_optim;
struct lstmd_train_progress;
int lstmd_dp_upload(struct lstmd_dp *dp, const struct lstmd_optim *o,
                    const struct lstmd_train_progress *p);
/* Clipping and one optimizer update of model->params from the summed gradients (on the device
 * for the GPU engine). Returns 0 (fp16: also when an overflow skipped the update) or
 * LSTMD_EINVAL for a non-finite gradient norm, like lstmd_optim_step. */
int lstmd_dp_optim_step(struct lstmd_dp *dp, struct lstmd_optim *o, double *grad_norm);
/* Brings model->params (and o's moments, p's loss scale, when not NULL) up to date on the host:
 * needed before evaluating or writing a checkpoint with the GPU engine; nothing to do on the CPU. */
int lstmd_dp_sync_host(struct lstmd_dp *dp, struct lstmd_optim *o, struct lstmd_train_progress *p);
/* Validation loss as lstmd_evaluate (infer.h) computes it, on the engine's device (the GPU
 * engine scores in its own (T, B) chunks; the result is the same). Rank-local. */
struct lstmd_dataset;
int lstmd_dp_evaluate(struct lstmd_dp *dp, const struct lstmd_dataset *ds, int seq_len, int batch,
                      double *mean_loss, uint64_t *tokens);
/* fp16 loss scale (0 when none). */
double lstmd_dp_loss_scale(const struct lstmd_dp *dp);
/* 1 with the GPU engine; then desc gets its one-line description. */
int lstmd_dp_describe_gpu(const struct lstmd_dp *dp, char *desc, size_t n);

/* Records forward, backward (per slice thread) and all-reduce buckets on the timeline. */
struct lstmd_trace;
void lstmd_dp_set_trace(struct lstmd_dp *dp, struct lstmd_trace *trace);

/* Carried state of all ranks as [L, N·B, H] (collective; the result is complete on rank 0). */
int lstmd_dp_gather_state(struct lstmd_dp *dp, float *h, float *c);
/* Sets this rank's columns from a global [L, N·B, H] state. */
void lstmd_dp_set_state(struct lstmd_dp *dp, const float *h, const float *c);

#endif
