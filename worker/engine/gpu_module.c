/* gpu_module.c — the one symbol liblstmd_gpu.so exports to lstmd (gpu_backend.h): the table of
 * the GPU backend's entry points. Everything else in the module is reached through it. */
#include "comm/comm_nccl.h"
#include "kernels/cuda/device_cuda.h"
#include "worker/engine/engine.h"
#include "worker/engine/gpu_backend.h"
#include "worker/engine/gpu_stage_times.h"
#include "worker/selftest/selftest.h"

__attribute__((visibility("default"))) const struct lstmd_gpu_backend lstmd_gpu_module_v2 = {
    .abi = LSTMD_GPU_ABI,
    .size = sizeof(struct lstmd_gpu_backend),
    .version = LSTMD_VERSION_STRING,
    .probe = lstmd_cuda_probe,
    .device_info = lstmd_cuda_device_info,
    .describe_libraries = lstmd_cuda_describe_libraries,
    .cudnn_version = lstmd_cudnn_loaded_version,
    .describe_nccl = lstmd_nccl_describe_library,
    .engine_create = lstmd_engine_gpu_create,
    .selftest = lstmd_selftest_gpu,
    .stage_times = lstmd_gpu_stage_times,
};
