/* blas_cpu.h — the few OpenBLAS controls the rest of lstmd needs, so that only kernels/ talks to
 * the BLAS library directly. */
#ifndef LSTMD_BLAS_CPU_H
#define LSTMD_BLAS_CPU_H

#include <stddef.h>

/* Threads OpenBLAS uses inside one call (process-wide). n <= 0: all online cores. */
void lstmd_cpu_set_blas_threads(int n);
/* Threads OpenBLAS uses inside one call now. */
int lstmd_cpu_blas_threads(void);
/* Online cores of this machine (at least 1). */
int lstmd_cpu_cores(void);
/* "OpenBLAS <core> kernels, lstmd <isa> kernels" into buf (isa.h). */
void lstmd_cpu_blas_describe(char *buf, size_t n);
/* OpenBLAS's build configuration (openblas_get_config(): version, DYNAMIC_ARCH, threading,
 * max threads) into buf. */
void lstmd_cpu_blas_config(char *buf, size_t n);

#endif
