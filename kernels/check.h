/* check.h — the one set of checks for calls into the libraries lstmd uses: the CUDA runtime,
 * cuBLAS, cuDNN, NCCL and MPI. A failed call prints "lstmd: rank R (host): LIB: CALL failed at
 * FILE:LINE: <the library's own error text>" and becomes a status:
 *
 *   LSTMD_CHECK_CUDA(call);          returns LSTMD_ECUDA from the enclosing function
 *   if (LSTMD_CUDA_FAILED(call)) ... the same test as an expression (nonzero on failure)
 *
 * and likewise _CUBLAS, _CUDNN (LSTMD_ECUDA), _NCCL and _MPI (LSTMD_ECOMM). A failed CUDA call
 * also clears the runtime's sticky last error. The helpers for a library are defined only when
 * that library's header was included before this one (its include guard is tested), so this
 * header needs none of them and stays a leaf that comm/ and kernels/ may both include. Using a
 * macro without its library's header is a compile error (-Werror=implicit-function-declaration). */
#ifndef LSTMD_CHECK_H
#define LSTMD_CHECK_H

#include "status.h"

#define LSTMD_CHECK_WITH_(failed_expr, status) \
  do {                                         \
    if (failed_expr) return (status);          \
  } while (0)

#if defined(__CUDA_RUNTIME_H__)
static inline int lstmd_cuda_failed_(cudaError_t e, const char *call, const char *file, int line) {
  if (e == cudaSuccess) return 0;
  cudaGetLastError();
  lstmd_call_failed("CUDA", call, file, line, cudaGetErrorString(e));
  return 1;
}
#endif
#define LSTMD_CUDA_FAILED(call) lstmd_cuda_failed_((call), #call, __FILE__, __LINE__)
#define LSTMD_CHECK_CUDA(call) LSTMD_CHECK_WITH_(LSTMD_CUDA_FAILED(call), LSTMD_ECUDA)

#if defined(CUBLAS_API_H_)
static inline int lstmd_cublas_failed_(cublasStatus_t s, const char *call, const char *file,
                                       int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  lstmd_call_failed("cuBLAS", call, file, line, cublasGetStatusString(s));
  return 1;
}
#endif
#define LSTMD_CUBLAS_FAILED(call) lstmd_cublas_failed_((call), #call, __FILE__, __LINE__)
#define LSTMD_CHECK_CUBLAS(call) LSTMD_CHECK_WITH_(LSTMD_CUBLAS_FAILED(call), LSTMD_ECUDA)

#if defined(CUDNN_H_)
static inline int lstmd_cudnn_failed_(cudnnStatus_t s, const char *call, const char *file,
                                      int line) {
  if (s == CUDNN_STATUS_SUCCESS) return 0;
  char why[640], detail[512] = "";
  cudnnGetLastErrorString(detail, sizeof detail); /* what cuDNN logged about this failure */
  snprintf(why, sizeof why, "%s%s%s", cudnnGetErrorString(s), detail[0] ? ": " : "", detail);
  lstmd_call_failed("cuDNN", call, file, line, why);
  return 1;
}
#endif
#define LSTMD_CUDNN_FAILED(call) lstmd_cudnn_failed_((call), #call, __FILE__, __LINE__)
#define LSTMD_CHECK_CUDNN(call) LSTMD_CHECK_WITH_(LSTMD_CUDNN_FAILED(call), LSTMD_ECUDA)

#if defined(NCCL_H_)
static inline int lstmd_nccl_failed_(ncclResult_t r, const char *call, const char *file, int line) {
  if (r == ncclSuccess || r == ncclInProgress) return 0; /* in progress: non-blocking comms */
  char why[512];
  const char *last = ncclGetLastError(NULL);
  snprintf(why, sizeof why, "%s%s%s", ncclGetErrorString(r), last && last[0] ? ": " : "",
           last ? last : "");
  lstmd_call_failed("NCCL", call, file, line, why);
  return 1;
}
#endif
#define LSTMD_NCCL_FAILED(call) lstmd_nccl_failed_((call), #call, __FILE__, __LINE__)
#define LSTMD_CHECK_NCCL(call) LSTMD_CHECK_WITH_(LSTMD_NCCL_FAILED(call), LSTMD_ECOMM)

#if defined(MPI_VERSION)
static inline int lstmd_mpi_failed_(int code, const char *call, const char *file, int line) {
  if (code == MPI_SUCCESS) return 0;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", code);
  lstmd_call_failed("MPI", call, file, line, text);
  return 1;
}
#endif
#define LSTMD_MPI_FAILED(call) lstmd_mpi_failed_((call), #call, __FILE__, __LINE__)
#define LSTMD_CHECK_MPI(call) LSTMD_CHECK_WITH_(LSTMD_MPI_FAILED(call), LSTMD_ECOMM)

#endif
