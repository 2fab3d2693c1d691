/* engine_gpu_internal.h — the GPU engine's state, shared by its files: engine_gpu.c (the engine
 * and its rationale, numbered 1. to 8.; "see N." below refers there), engine_gpu_eval.c
 * (evaluation and the carried recurrent state) and engine_gpu_prune.c (pruning on the device). */
#ifndef LSTMD_ENGINE_GPU_INTERNAL_H
#define LSTMD_ENGINE_GPU_INTERNAL_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm_nccl.h"
#include "engine.h"
#include "kernels/cuda/model_cuda.h"
#include "kernels/optim_rules.h"
#include "worker/data/batcher.h"
#include "worker/model/optim.h"
#include "worker/model/prune.h"

enum { kMaxRegions = 8 };

struct gpu_engine {
  struct lstmd_engine base;
  int dtype, fp16;
  cudaStream_t compute, copy, comm_stream;
  struct lstmd_cuda_model_config mc; /* made in start, with rank 0's cuDNN choice (5.) */
  struct lstmd_cuda_model *cm;
  struct lstmd_cuda_model_config tc;  /* distillation: the teacher's, made in start too (see 7.) */
  struct lstmd_cuda_model *teacher;   /* NULL: no distillation */
  float *t_params;                    /* device: the teacher's parameters */
  double *d_teacher_loss;             /* device: the teacher forward's loss (unused) */
  struct lstmd_nccl *nccl; /* NULL with one rank */
  float *params, *grads, *m, *v; /* device [n_params] */
  double *d_loss;                /* device: loss summed since the host last read it (see 1.) */
  double *h_loss;                /* pinned */
  struct lstmd_optim_state *d_state; /* device: the optimizer's decisions (see 4.) */
  struct lstmd_optim_state *h_state; /* pinned: its copy at the last read */
  struct lstmd_optim_state seen;     /* host: that copy, as read */
  int report, told_failure;      /* the step being run is logged; its failure was printed */
  void *staging[2];              /* pinned batch buffers */
  size_t staging_bytes;
  long micro_count;
  cudaEvent_t copy_done[2], inputs_free, scalars_ready, comm_done, regions[kMaxRegions];
  int n_regions, collecting, uploaded;
  size_t ready_hi, bucket_floats;
  float *masks;      /* device: the pruning masks (0/1) of the pruned tensors, one after the
                      * other (see 6.); NULL until the first prune */
  int masks_version; /* the masks uploaded: never / current */
  char device_desc[160];
};

static inline struct gpu_engine *gpu_of(struct lstmd_engine *e) { return (struct gpu_engine *)e; }

/* Waits for an event, watching the NCCL watchdog (see 1.). */
static inline int wait_event(struct gpu_engine *g, cudaEvent_t ev) { return lstmd_nccl_wait_event(g->nccl, ev); }

/* The batch into the model's device inputs through pinned memory on the copy stream (see 3.). */
int lstmd_gpu_copy_batch(struct gpu_engine *g, const struct lstmd_batch *b);

/* engine.h's ops, engine_gpu_eval.c */
int lstmd_gpu_evaluate(struct lstmd_engine *e, const struct lstmd_dataset *ds, double *mean_loss,
                       uint64_t *tokens, double *accuracy);
int lstmd_gpu_gather_state(struct lstmd_engine *e, float *h, float *c);
int lstmd_gpu_set_state(struct lstmd_engine *e, const float *h, const float *c);
/* engine.h's prune op, engine_gpu_prune.c */
int lstmd_gpu_prune(struct lstmd_engine *e, struct lstmd_prune *pr, long step, int *recomputed);

#endif
