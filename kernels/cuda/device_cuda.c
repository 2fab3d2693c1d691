/* device_cuda.c — device probe and selection (see device_cuda.h). */
#include "device_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdio.h>

#include "kernels/status.h"

int lstmd_cuda_probe(char *why, size_t n) {
  int count = 0; /* cudaGetDeviceCount leaves it unwritten without a driver (PLATFORM.md) */
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    snprintf(why, n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    cudaGetLastError();
    return 0;
  }
  if (count <= 0) {
    snprintf(why, n, "cudaGetDeviceCount found no device");
    return 0;
  }
  why[0] = '\0';
  return count;
}

int lstmd_cuda_use_device(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaFree(NULL); /* creates the primary context now */
  if (e != cudaSuccess) {
    lstmd_errorf("CUDA device %d: %s", device, cudaGetErrorString(e));
    cudaGetLastError();
    return LSTMD_ECUDA;
  }
  return LSTMD_OK;
}

void lstmd_cuda_describe_device(char *buf, size_t n) {
  int dev = 0;
  struct cudaDeviceProp p;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    cudaGetLastError();
    snprintf(buf, n, "(unknown device)");
    return;
  }
  snprintf(buf, n, "%s, sm_%d%d, %.1f GiB", p.name, p.major, p.minor,
           (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
}

void lstmd_cuda_pci_bus_id(char *buf, size_t n) {
  int dev = 0;
  buf[0] = '\0';
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(buf, (int)n, dev) != cudaSuccess) {
    cudaGetLastError();
    buf[0] = '\0';
  }
}

void lstmd_cuda_describe_libraries(char *buf, size_t n) {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  cudaGetLastError();
  size_t dnn = cudnnGetVersion();
  int blas_major = 0, blas_minor = 0, blas_patch = 0;
  cublasGetProperty(MAJOR_VERSION, &blas_major);
  cublasGetProperty(MINOR_VERSION, &blas_minor);
  cublasGetProperty(PATCH_LEVEL, &blas_patch);
  char driver[32];
  if (drv > 0) snprintf(driver, sizeof driver, "%d.%d", drv / 1000, drv % 1000 / 10);
  else snprintf(driver, sizeof driver, "none");
  snprintf(buf, n, "CUDA runtime %d.%d, driver %s, cuDNN %zu.%zu.%zu, cuBLAS %d.%d.%d", rt / 1000,
           rt % 1000 / 10, driver, dnn / 10000, dnn / 100 % 100, dnn % 100, blas_major, blas_minor,
           blas_patch);
}

int lstmd_cuda_device_info(int device, char *buf, size_t n, int *cc) {
  struct cudaDeviceProp p;
  *cc = 0;
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) {
    snprintf(buf, n, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
    cudaGetLastError();
    return LSTMD_ECUDA;
  }
  *cc = p.major * 10 + p.minor;
  snprintf(buf, n, "%s, %.1f GiB, compute capability %d.%d, PCI %04x:%02x:%02x.0", p.name,
           (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.major, p.minor,
           p.pciDomainID, p.pciBusID, p.pciDeviceID);
  return LSTMD_OK;
}

long lstmd_cudnn_loaded_version(void) { return (long)cudnnGetVersion(); }
