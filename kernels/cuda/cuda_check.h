/* cuda_check.h — turning a CUDA runtime error into a status with a message, for every file of
 * kernels/cuda (C and .cu alike; in .cu files include it after status.h's extern "C" block). */
#ifndef LSTMD_CUDA_CHECK_H
#define LSTMD_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "kernels/status.h"

/* Nonzero (after printing "CUDA: what: reason" and clearing the sticky error) when e failed. */
static inline int lstmd_cuda_failed(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  cudaGetLastError();
  lstmd_errorf("CUDA: %s: %s", what, cudaGetErrorString(e));
  return 1;
}

/* After a kernel launch: LSTMD_OK, or LSTMD_ECUDA with a message. */
static inline int lstmd_cuda_check_launch(const char *what) {
  return lstmd_cuda_failed(cudaGetLastError(), what) ? LSTMD_ECUDA : LSTMD_OK;
}

#endif
