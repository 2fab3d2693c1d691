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

/* How fast a core's sgemm kernels are: 0 generic (Prescott and the other SSE cores), 1 AVX2
 * (Haswell, Zen), 2 AVX-512; -1 for a name not listed here (no advice then). */
static int core_tier(const char *core) {
  static const char *const generic[] = {"Prescott", "Core2", "Penryn", "Nehalem", "Sandybridge"};
  static const char *const avx2[] = {"Haswell", "Zen"};
  static const char *const avx512[] = {"SkylakeX", "CooperLake", "SapphireRapids"};
  for (size_t i = 0; i < sizeof generic / sizeof *generic; i++)
    if (!strcasecmp(core, generic[i])) return 0;
  for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
    if (!strcasecmp(core, avx2[i])) return 1;
  for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
    if (!strcasecmp(core, avx512[i])) return 2;
  return -1;
}

int lstmd_blas_weak_kernels(char *buf, size_t n) {
  const char *preset = getenv("OPENBLAS_CORETYPE"), *best = core_for_this_cpu();
  const char *reexec = getenv("LSTMD_BLAS_REEXEC");
  if (!preset || (reexec && !strcmp(reexec, "kernels"))) return 0; /* lstmd chose it */
  const int have = core_tier(preset), could = core_tier(best);
  if (have < 0 || have >= could) return 0;
  /* the factors measured against SkylakeX (blas_setup.h); generic against Haswell: not measured */
  const char *gain = could < 2 ? "" : have == 0 ? "up to 4x " : "up to 2x ";
  snprintf(buf, n, "OPENBLAS_CORETYPE=%s is set, but this CPU has %s: unset it (lstmd then "
           "picks %s) for %sfaster sgemm", preset, could == 2 ? "AVX-512" : "AVX2", best, gain);
  return 1;
}

void lstmd_blas_warn_weak_kernels(void) {
  char why[256];
  if (lstmd_blas_weak_kernels(why, sizeof why)) fprintf(stderr, "lstmd: note: %s\n", why);
}
