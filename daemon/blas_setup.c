/* blas_setup.c — OpenBLAS kernel selection and threads (rationale in blas_setup.h). */
#define _GNU_SOURCE
#include "blas_setup.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *core_for_this_cpu(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return NULL;
}

void lstmd_blas_select_kernels(char **argv) {
  if (getenv("OPENBLAS_CORETYPE") || getenv("LSTMD_BLAS_REEXEC")) return;
  const char *core = core_for_this_cpu();
  if (!core) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  setenv("LSTMD_BLAS_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
  /* exec failed (no /proc?): carry on with whatever OpenBLAS detected. */
}

void lstmd_blas_set_threads(int threads) {
  if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  openblas_set_num_threads(threads > 0 ? threads : 1);
}

void lstmd_blas_describe(char *buf, size_t n) {
  snprintf(buf, n, "OpenBLAS %s kernels, %d threads", openblas_get_corename(),
           openblas_get_num_threads());
}
