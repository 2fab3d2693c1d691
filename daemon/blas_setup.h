/* blas_setup.h — making OpenBLAS use the right kernels.
 * Debian's OpenBLAS picks its kernels when the library loads and, on VMs that hide the CPU
 * model, falls back to generic SSE3 ("Prescott") kernels that run sgemm ~4x slower than the
 * AVX-512 ones. OPENBLAS_CORETYPE must therefore be in the environment before the process
 * starts: when it is unset, we set it from the CPU's own feature flags and re-execute once.
 * A value the user set is respected, with a warning when it is weaker than the CPU. The same
 * re-exec sets OPENBLAS_NUM_THREADS=1 when unset, so that OpenBLAS starts no idle threads; each
 * command then asks for the threads it uses (OpenBLAS can add threads later, not drop them). */
#ifndef LSTMD_BLAS_SETUP_H
#define LSTMD_BLAS_SETUP_H

#include <stddef.h>

/* Call first thing in main. Returns only if no re-exec was needed (or it failed). */
void lstmd_blas_select_kernels(char **argv);
/* 1 and the advice in buf when OPENBLAS_CORETYPE was preset (by the user, a module, a job
 * script) to kernels weaker than this CPU runs (at the ISA lstmd uses, LSTMD_CPU_ISA included);
 * 0 otherwise, also for a core name not known here. */
int lstmd_blas_weak_kernels(char *buf, size_t n);
/* The same advice as a note on stderr. */
void lstmd_blas_warn_weak_kernels(void);

#endif
