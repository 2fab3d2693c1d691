/* gpu_stage_times.h — what one item of a pipeline stage costs on this GPU, measured: the input to
 * the step-time prediction of pipelines over several GPUs (`lstmd pipe-predict`,
 * daemon/cli_pipe_predict.c) while only one GPU is at hand. Built into the GPU module and reached
 * through its table (gpu_backend.h). */
#ifndef LSTMD_GPU_STAGE_TIMES_H
#define LSTMD_GPU_STAGE_TIMES_H

#include <stddef.h>

struct lstmd_model_shape;

struct lstmd_stage_times_config {
  int stages;             /* S: the layers cut evenly, the first stages one larger
                           * (lstmd_stage_layer_counts, worker/train/train_config.h) */
  int steps, chunks;      /* T (a multiple of K), K */
  int batch;              /* columns of one unit */
  int dtype, allow_tf32;  /* enum lstmd_cuda_dtype of the LSTM (kernels/cuda/convert_cuda.h) */
  int reps;               /* timed passes over the K chunks, after one untimed */
  int device;             /* the CUDA device to use */
};

/* For every stage s < S: the median milliseconds of one F, one B and one W item (over the K
 * chunks × reps) into ms[3·s .. 3·s + 2], on CUDA device cfg->device, each stage built alone
 * (kernels/cuda/stage_cuda.h: one cuDNN call per chunk) from randomly initialised parameters.
 * Returns 0, or a status after printing why. */
int lstmd_gpu_stage_times(const struct lstmd_model_shape *shape,
                          const struct lstmd_stage_times_config *cfg, double *ms);

#endif
