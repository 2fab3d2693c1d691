/* gpu_selftest.c — runs the GPU groups of `lstmd selftest` (selftest.h) in the GPU module: each
 * group the caller asked for, on this rank's device (device 0 on one rank), or one SKIP line per
 * group with the runtime's reason where no device is usable. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/cuda/device_cuda.h"
#include "worker/engine/device_select.h"
#include "worker/selftest/gpu_checks.h"
#include "worker/selftest/selftest.h"

static void run_nccl(struct lstmd_selftest *st) {
  if (!st->comm) {
    lstmd_check_skip("all-reduce", "no MPI world in this process");
    return;
  }
  lstmd_selftest_gpu_nccl(st->comm);
}

void lstmd_selftest_gpu(struct lstmd_selftest *st, const char *only) {
  static const struct {
    const char *name;
    void (*run)(void);
  } groups[] = {{"kernels", lstmd_selftest_gpu_kernels}, {"convert", lstmd_selftest_gpu_convert},
                {"cudnn", lstmd_selftest_gpu_cudnn},     {"model", lstmd_selftest_gpu_model},
                {"classify", lstmd_selftest_gpu_classify}, {"pipe", lstmd_selftest_gpu_pipe},
                {"nccl", NULL}};
  char why[256], buf[512];
  const int count = lstmd_cuda_probe(why, sizeof why);
  int device_ready = 0;
  for (size_t i = 0; i < sizeof groups / sizeof *groups; i++) {
    if (only && strcmp(only, groups[i].name)) continue;
    lstmd_selftest_group(st, groups[i].name);
    if (!count) {
      lstmd_check_skip("every check", why);
      continue;
    }
    if (!device_ready && groups[i].run) { /* nccl picks its device per rank itself */
      const int local = st->comm ? lstmd_comm_local_rank(st->comm) : 0;
      const int local_size = st->comm ? lstmd_comm_local_size(st->comm) : 1;
      const int dev = lstmd_gpu_for_rank(count, local, local_size, buf, sizeof buf);
      if (!lstmd_check_true("device selected and context created", lstmd_cuda_use_device(dev) == 0))
        return;
      lstmd_cuda_describe_device(buf, sizeof buf);
      printf("device %d: %s\n", dev, buf);
      device_ready = 1;
    }
    if (groups[i].run) groups[i].run();
    else run_nccl(st);
    lstmd_check_true("no CUDA error at the end of the group",
                     cudaDeviceSynchronize() == cudaSuccess && cudaGetLastError() == cudaSuccess);
  }
}
