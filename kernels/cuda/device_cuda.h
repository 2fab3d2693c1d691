/* device_cuda.h — the CUDA device as the rest of lstmd sees it: how many are usable (and why
 * none, as text), selecting one, its name and PCI bus id, and the runtime/library versions.
 * Plain C over the CUDA runtime; no GPU is needed to call any of these (they report "none"). */
#ifndef LSTMD_DEVICE_CUDA_H
#define LSTMD_DEVICE_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Usable devices; 0 when there is no driver or device, with the runtime's reason in why
 * (e.g. "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version").
 * Never an error; clears the sticky runtime error it may leave. */
int lstmd_cuda_probe(char *why, size_t n);
/* cudaSetDevice(device) and a first call that creates the context. Returns 0 or LSTMD_ECUDA
 * after printing the runtime's message. */
int lstmd_cuda_use_device(int device);
/* "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB" of the current device. */
void lstmd_cuda_describe_device(char *buf, size_t n);
/* PCI bus id of the current device ("0000:3b:00.0"), or "" on failure. */
void lstmd_cuda_pci_bus_id(char *buf, size_t n);
/* "CUDA runtime 13.0, driver 13.0, cuDNN 9.19.0, cuBLAS 13.0.0" (what is loaded at run time). */
void lstmd_cuda_describe_libraries(char *buf, size_t n);
/* Device `device` (no context is made): "NVIDIA H100 80GB HBM3, 79.1 GiB, compute capability
 * 9.0, PCI 0000:3b:00.0" into buf and its compute capability (major·10 + minor) in *cc.
 * Returns 0, or LSTMD_ECUDA with the runtime's reason in buf. */
int lstmd_cuda_device_info(int device, char *buf, size_t n, int *cc);
/* cuDNN's version as loaded (major·10000 + minor·100 + patch). */
long lstmd_cudnn_loaded_version(void);

#ifdef __cplusplus
}
#endif

#endif
