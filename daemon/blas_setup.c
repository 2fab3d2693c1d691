/* blas_setup.c — OpenBLAS kernel selection (rationale in blas_setup.h). */
#define _GNU_SOURCE
#include "blas_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/isa.h"

/* The OpenBLAS core for the ISA lstmd uses (kernels/cpu/isa.h: the CPU's best, or lower with
 * LSTMD_CPU_ISA): SkylakeX, Haswell, or OpenBLAS's generic Prescott kernels. */
static const char *core_for_this_cpu(void) {
  __builtin_cpu_init();
  switch (lstmd_cpu_isa()) {
    case LSTMD_ISA_AVX512:
      if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
          __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
      return "Haswell"; /* AVX-512F alone (Knights Landing): OpenBLAS's AVX2 kernels */
    case LSTMD_ISA_AVX2: return "Haswell";
    default: return "Prescott";
  }
}

void lstmd_blas_select_kernels(char **argv) {
  if (getenv("LSTMD_BLAS_REEXEC")) return;
  const char *core = getenv("OPENBLAS_CORETYPE") ? NULL : core_for_this_cpu();
  const int threads_unset = !getenv("OPENBLAS_NUM_THREADS");
  if (!core && !threads_unset) return;
  if (core) setenv("OPENBLAS_CORETYPE", core, 1);
  /* Start with one BLAS thread: lstmd raises the count where a command wants more. Threads
   * OpenBLAS starts at load time but lstmd does not use still wake up and steal cycles. */
  if (threads_unset) setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("LSTMD_BLAS_REEXEC", core ? "kernels" : "threads", 1);
  /* The ISA as resolved here, so that a bad LSTMD_CPU_ISA is reported once, not again after exec. */
  if (getenv("LSTMD_CPU_ISA")) setenv("LSTMD_CPU_ISA", lstmd_cpu_isa_name(lstmd_cpu_isa()), 1);
  /* The binary's real path, not /proc/self/exe, so that ps and top still call us lstmd. */
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    execv(self, argv);
  }
  /* exec failed (no /proc?): carry on with whatever OpenBLAS detected. */
}

void lstmd_blas_warn_weak_kernels(void) {
  const char *preset = getenv("OPENBLAS_CORETYPE"), *best = core_for_this_cpu();
  const char *reexec = getenv("LSTMD_BLAS_REEXEC");
  if (preset && !(reexec && !strcmp(reexec, "kernels")) && best && !strcmp(best, "SkylakeX") &&
      strcasecmp(preset, "SkylakeX") && strcasecmp(preset, "CooperLake") &&
      strcasecmp(preset, "SapphireRapids"))
    fprintf(stderr, "lstmd: note: OPENBLAS_CORETYPE=%s is set, but this CPU has AVX-512: "
            "unset it (lstmd then picks SkylakeX) for up to 2x faster sgemm\n", preset);
}
