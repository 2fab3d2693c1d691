/* engine_gpu.h — what the GPU engine (engine_gpu.c, behind engine.h's table) shares beyond the
 * table: where each tensor of the CPU model's flat buffer lies, for the GPU model, which keeps
 * the same layout (so checkpoints are the same on both backends). */
#ifndef LSTMD_ENGINE_GPU_H
#define LSTMD_ENGINE_GPU_H

#include "worker/model/model.h"

struct lstmd_cuda_model_layout;

void lstmd_gpu_model_layout(const struct lstmd_model *m, struct lstmd_cuda_model_layout *l);

#endif
