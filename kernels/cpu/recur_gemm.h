/* recur_gemm.h — the two small GEMMs of every LSTM time step, with the recurrent weights packed
 * once per window instead of once per step.
 *
 * OpenBLAS repacks the whole 4H×H weight matrix on every call; at the recurrence shapes (a few
 * dozen rows of h against W_hh) that copy costs as much as the arithmetic. Here W_hh is packed
 * into 32-column panels once per window and an AVX-512 micro-kernel (8 rows × 32 columns of
 * accumulators) streams them for all T steps. Used when the CPU has AVX-512F and H is a multiple
 * of 8 (forward) / 32 (backward); otherwise the callers use cblas_sgemm. */
#ifndef LSTMD_RECUR_GEMM_H
#define LSTMD_RECUR_GEMM_H

#include <stddef.h>

/* 1 when the packed kernels run for hidden size H: lstmd_cpu_isa() is avx512 (isa.h). */
int lstmd_cpu_recur_fast(int H);
/* Floats of the packed buffer for W [N,K] (N a multiple of 32). */
size_t lstmd_cpu_pack_floats(int N, int K);
/* packed ← W [N,K] row-major, as N/32 panels of [K][32]. */
void lstmd_cpu_pack_rows(int N, int K, const float *W, float *packed);
/* C [M,N] += A [M,K] · W^T using W packed by lstmd_cpu_pack_rows. ldc, lda in floats. */
void lstmd_cpu_gemm_abt_packed(int M, int N, int K, const float *A, int lda, const float *packed,
                               float *C, int ldc);
/* packed ← W [K,N] row-major, as N/32 panels of [K][32] (its 32-column slices). */
void lstmd_cpu_pack_cols(int K, int N, const float *W, float *packed);
/* C [M,N] = A [M,K] · W using W [K,N] packed by lstmd_cpu_pack_cols. */
void lstmd_cpu_gemm_ab_packed(int M, int N, int K, const float *A, int lda, const float *packed,
                              float *C, int ldc);

#endif
