/* isa.c — the instruction set of lstmd's CPU kernels (see isa.h). */
#include "isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"

static const char *const kNames[] = {"generic", "avx2", "avx512"};

const char *lstmd_cpu_isa_name(enum lstmd_isa isa) {
  return isa >= LSTMD_ISA_GENERIC && isa <= LSTMD_ISA_AVX512 ? kNames[isa] : "unknown";
}

enum lstmd_isa lstmd_cpu_isa_available(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return LSTMD_ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return LSTMD_ISA_AVX2;
  return LSTMD_ISA_GENERIC;
}

/* The choice, made once; -1 until then. Threads that race here compute the same value. */
static int g_isa = -1;

enum lstmd_isa lstmd_cpu_isa(void) {
  int isa = __atomic_load_n(&g_isa, __ATOMIC_RELAXED);
  if (isa >= 0) return (enum lstmd_isa)isa;
  const enum lstmd_isa have = lstmd_cpu_isa_available();
  isa = have;
  const char *want = getenv("LSTMD_CPU_ISA");
  if (want && *want) {
    int asked = -1;
    for (int i = LSTMD_ISA_GENERIC; i <= LSTMD_ISA_AVX512; i++)
      if (!strcmp(want, kNames[i])) asked = i;
    if (asked < 0)
      lstmd_errorf("LSTMD_CPU_ISA='%s' ignored: avx512, avx2 or generic", want);
    else if (asked > (int)have)
      lstmd_errorf("LSTMD_CPU_ISA=%s: this CPU has %s at most; using that", want, kNames[have]);
    else
      isa = asked;
  }
  __atomic_store_n(&g_isa, isa, __ATOMIC_RELAXED);
  return (enum lstmd_isa)isa;
}
