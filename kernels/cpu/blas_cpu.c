/* blas_cpu.c — OpenBLAS thread count and identification (see blas_cpu.h). */
#include "blas_cpu.h"

#include "isa.h"
#include "qgemm.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int lstmd_cpu_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

void lstmd_cpu_set_blas_threads(int n) { openblas_set_num_threads(n > 0 ? n : lstmd_cpu_cores()); }

int lstmd_cpu_blas_threads(void) { return openblas_get_num_threads(); }


void lstmd_cpu_blas_describe(char *buf, size_t n) {
  snprintf(buf, n, "OpenBLAS %s kernels, lstmd %s kernels (int8: %s)", openblas_get_corename(),
           lstmd_cpu_isa_name(lstmd_cpu_isa()), lstmd_cpu_qkernel_name(lstmd_cpu_qkernel()));
}

void lstmd_cpu_blas_config(char *buf, size_t n) {
  const char *cfg = openblas_get_config();
  snprintf(buf, n, "%s", cfg ? cfg : "(unknown)");
  /* The string ends in a space on some builds. */
  size_t len = strlen(buf);
  while (len > 0 && buf[len - 1] == ' ') buf[--len] = 0;
}
