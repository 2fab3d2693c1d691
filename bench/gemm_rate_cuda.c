/* gemm_rate_cuda.c — the cuBLAS bf16 GEMM rate of this GPU (bf16 inputs and output, fp32
 * accumulation, the tensor-core path), the denominator of lstmd's MFU in bench/bench_gpu.sh.
 * Built by bench_gpu.sh with nvcc; prints one parseable line:
 *   cublas_bf16_gemm m=8192 n=8192 k=8192 reps=R ms=... tflops=X device="..." */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call, what)                                                       \
  do {                                                                          \
    if ((call) != 0) {                                                          \
      fprintf(stderr, "gemm_rate_cuda: %s failed\n", what);                     \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

int main(int argc, char **argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 8192, reps = argc > 2 ? atoi(argv[2]) : 20;
  struct cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  void *a, *b, *c;
  const size_t bytes = (size_t)n * n * 2;
  CHECK(cudaMalloc(&a, bytes), "cudaMalloc");
  CHECK(cudaMalloc(&b, bytes), "cudaMalloc");
  CHECK(cudaMalloc(&c, bytes), "cudaMalloc");
  CHECK(cudaMemset(a, 0x3c, bytes), "cudaMemset"); /* bf16 0x3c3c ≈ 0.0115: finite values */
  CHECK(cudaMemset(b, 0x3c, bytes), "cudaMemset");
  cublasHandle_t h;
  CHECK(cublasCreate(&h), "cublasCreate");
  const float one = 1.0f, zero = 0.0f;
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  float best = 1e30f;
  for (int round = 0; round < 3; round++) {
    cudaEventRecord(t0, 0);
    for (int i = 0; i < reps; i++)
      CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b,
                         CUDA_R_16BF, n, &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT), "cublasGemmEx");
    cudaEventRecord(t1, 0);
    CHECK(cudaEventSynchronize(t1), "cudaEventSynchronize");
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, t0, t1);
    if (round > 0 && ms < best) best = ms; /* round 0 warms up */
  }
  const double tflops = 2.0 * n * (double)n * n * reps / (best * 1e-3) / 1e12;
  printf("cublas_bf16_gemm m=%d n=%d k=%d reps=%d ms=%.3f tflops=%.1f device=\"%s\"\n", n, n, n,
         reps, best / reps, tflops, p.name);
  return 0;
}
