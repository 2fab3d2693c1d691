/* blas_setup.h — making OpenBLAS use the right kernels and thread count.
 * Debian's OpenBLAS picks its kernels when the library loads and, on VMs that hide the CPU
 * model, falls back to generic SSE3 ("Prescott") kernels that run sgemm ~4x slower than the
 * AVX-512 ones. OPENBLAS_CORETYPE must therefore be in the environment before the process
 * starts: when it is unset, we set it from the CPU's own feature flags and re-execute once. */
#ifndef LSTMD_BLAS_SETUP_H
#define LSTMD_BLAS_SETUP_H

#include <stddef.h>

/* Call first thing in main. Returns only if no re-exec was needed (or it failed). */
void lstmd_blas_select_kernels(char **argv);
/* threads == 0: all online cores. */
void lstmd_blas_set_threads(int threads);
/* "OpenBLAS <corename>, <n> threads" into buf. */
void lstmd_blas_describe(char *buf, size_t n);

#endif
