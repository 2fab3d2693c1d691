/* isa.h — which instruction set lstmd's own CPU kernels use, and the one switch that forces a
 * lower one: LSTMD_CPU_ISA=avx512|avx2|generic (read once, at first use). Without it, the best
 * this CPU has: avx512 (AVX-512F), avx2 (AVX2 and FMA) or generic. A request above what the CPU
 * has is lowered to that, with a note. It decides the gate passes' variant (lstm_cpu.c), which
 * packed recurrence kernels run (recur_gemm.h: AVX-512 or AVX2 panels, none on generic), and the
 * OpenBLAS kernels lstmd picks (daemon/blas_setup.c, bench/bench_cpu.sh), so every ISA path can
 * be tested and benchmarked on one host that has the highest. */
#ifndef LSTMD_ISA_H
#define LSTMD_ISA_H

enum lstmd_isa { LSTMD_ISA_GENERIC = 0, LSTMD_ISA_AVX2 = 1, LSTMD_ISA_AVX512 = 2 };

enum lstmd_isa lstmd_cpu_isa(void);
/* What this CPU has, whatever LSTMD_CPU_ISA says. */
enum lstmd_isa lstmd_cpu_isa_available(void);
/* "avx512", "avx2", "generic". */
const char *lstmd_cpu_isa_name(enum lstmd_isa isa);

#endif
