/* isa_variants.h — one loop body compiled for each vector ISA of isa.h, chosen per call.
 *
 *   BODY void name_body(params) { ... }              (always inlined into each variant)
 *   ISA_VARIANTS(name, (params), (args))             (defines static void name(params))
 *
 * name_avx512, name_avx2 (AVX2+FMA) and name_generic are the same C compiled with different
 * target attributes, so GCC vectorizes the body to 512-, 256- or 128-bit vectors; name() calls
 * the variant of lstmd_cpu_isa(), which LSTMD_CPU_ISA can lower to test or time the others on one
 * host. Variants may differ in the last bits (FMA contraction) but not beyond rounding. */
#ifndef LSTMD_ISA_VARIANTS_H
#define LSTMD_ISA_VARIANTS_H

#include "isa.h"

#define BODY static inline __attribute__((always_inline))
#define ISA_VARIANTS(name, params, args)                                                   \
  __attribute__((target("avx512f"))) static void name##_avx512 params { name##_body args; } \
  __attribute__((target("avx2,fma"))) static void name##_avx2 params { name##_body args; }  \
  static void name##_generic params { name##_body args; }                                   \
  static void name params {                                                                 \
    switch (lstmd_cpu_isa()) {                                                              \
      case LSTMD_ISA_AVX512: name##_avx512 args; return;                                    \
      case LSTMD_ISA_AVX2: name##_avx2 args; return;                                        \
      default: name##_generic args; return;                                                 \
    }                                                                                       \
  }

#endif
