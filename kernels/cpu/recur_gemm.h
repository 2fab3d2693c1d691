/* recur_gemm.h — the two small GEMMs of every LSTM time step, with the recurrent weights packed
 * once per window instead of once per step.
 *
 * OpenBLAS repacks the whole 4H×H weight matrix on every call; at the recurrence shapes (a few
 * dozen rows of h against W_hh) that copy costs as much as the arithmetic. Here W_hh is packed
 * into column panels once per window and a micro-kernel streams them for all T steps:
 *   avx512: 32-column panels, 8 rows × 32 columns of accumulators (16 zmm); H a multiple of 32
 *   avx2:   16-column panels, 6 rows × 16 columns of accumulators (12 ymm); H a multiple of 16
 * chosen by lstmd_cpu_isa() (isa.h), fixed for the process, so a buffer packed here is read by
 * the kernels of the same ISA. Otherwise (generic, or another H) the callers use cblas_sgemm. */
#ifndef LSTMD_RECUR_GEMM_H
#define LSTMD_RECUR_GEMM_H

#include <stddef.h>

/* 1 when the packed kernels run for hidden size H: lstmd_cpu_isa() is avx512 and H % 32 == 0,
 * or avx2 and H % 16 == 0. The functions below may be called only then. */
int lstmd_cpu_recur_fast(int H);
/* Floats of the packed buffer for W [N,K] (N a multiple of the panel width). */
size_t lstmd_cpu_pack_floats(int N, int K);
/* packed ← W [N,K] row-major, as N/w panels of [K][w] (w: the ISA's panel width). */
void lstmd_cpu_pack_rows(int N, int K, const float *W, float *packed);
/* C [M,N] += A [M,K] · W^T using W packed by lstmd_cpu_pack_rows. ldc, lda in floats. */
void lstmd_cpu_gemm_abt_packed(int M, int N, int K, const float *A, int lda, const float *packed,
                               float *C, int ldc);
/* packed ← W [K,N] row-major, as N/w panels of [K][w] (its w-column slices). */
void lstmd_cpu_pack_cols(int K, int N, const float *W, float *packed);
/* C [M,N] = A [M,K] · W using W [K,N] packed by lstmd_cpu_pack_cols. */
void lstmd_cpu_gemm_ab_packed(int M, int N, int K, const float *A, int lda, const float *packed,
                              float *C, int ldc);

/* The pieces, for callers that split the panels between threads (recur_team.c): the panel
 * width w of lstmd_cpu_isa() (0: generic, no packed kernels); packing panels [p0, p1) only
 * (panel j holds columns [j·w, j·w + w) of the product); and one panel's product
 * C [M,w] += A [M,K] · panel. No element's result depends on how the rows, columns or panels
 * were split: each is one chain of FMAs over k in order. */
int lstmd_cpu_panel_width(void);
void lstmd_cpu_pack_rows_panels(int K, const float *W, float *packed, int p0, int p1);
void lstmd_cpu_pack_cols_panels(int K, int N, const float *W, float *packed, int p0, int p1);
void lstmd_cpu_gemm_panel(int M, int K, const float *A, int lda, const float *panel, float *C,
                          int ldc);

#endif
