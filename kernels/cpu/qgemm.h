/* qgemm.h — int8 inference GEMMs: unsigned 7-bit activations × signed 8-bit weights, int32 sums,
 * dequantised to float with one scale per weight row and one (scale, zero point) per activation
 * row. The scheme is PyTorch's dynamic quantisation of nn.LSTM (fbgemm with reduce_range):
 *
 *   weights      q_w[n,k] ∈ [−127, 127], w ≈ s_w[n]·q_w[n,k]          (symmetric, per output row)
 *   activations  q_x[m,k] ∈ [0, 127],    x ≈ s_x[m]·(q_x[m,k] − z[m])  (asymmetric, per row,
 *                computed from the row's own min/max at every step: dynamic, no calibration)
 *   y[m,n] = s_x[m]·s_w[n]·(Σ_k q_x·q_w − z[m]·Σ_k q_w[n,k])
 *
 * Why 7-bit activations: AVX2's vpmaddubsw adds two u8×s8 products into an int16 with
 * saturation; 2·255·127 overflows it, 2·127·128 = 32512 does not. AVX-512 VNNI (vpdpbusd) sums
 * into int32 and would take 8 bits, but one scheme for every ISA makes every kernel give the
 * same int32 sums bit for bit, so a model answers the same on an AVX2 and an AVX-512 host.
 * Why per row and not per tensor: each sequence's activations get their own range, so a
 * window's result does not depend on the other windows batched with it (for batch 1 this is
 * PyTorch's per-tensor scheme), and one outlier column costs the other rows nothing.
 *
 * Kernels (chosen once, from lstmd_cpu_isa() and the CPU flags): avx512-vnni (vpdpbusd, when
 * the ISA is avx512 and the CPU has AVX512_VNNI and AVX512BW), avx2 (vpmaddubsw + vpmaddwd; also
 * used on an avx512 CPU without VNNI), generic (C). All read one packed weight layout. */
#ifndef LSTMD_QGEMM_H
#define LSTMD_QGEMM_H

#include <stddef.h>
#include <stdint.h>

enum lstmd_qkernel { LSTMD_QKERNEL_GENERIC = 0, LSTMD_QKERNEL_AVX2 = 1, LSTMD_QKERNEL_VNNI = 2 };

/* The kernel in use (fixed for the process) and its name: "avx512-vnni", "avx2", "generic". */
enum lstmd_qkernel lstmd_cpu_qkernel(void);
const char *lstmd_cpu_qkernel_name(enum lstmd_qkernel k);

/* Per-row symmetric weight quantisation of w [N,K]: scale[n] = max|w[n,:]|/127 (1 for an
 * all-zero row), q[n,k] = round(w/scale). */
void lstmd_cpu_quantize_rows(int N, int K, const float *w, int8_t *q, float *scale);

/* Weights packed for the kernels: panels of 16 output rows; in a panel, for each group of 4
 * consecutive k, the 16 rows' 4 bytes (64 bytes, one zmm or two ymm). K is padded with zeros
 * to Kp (a multiple of 4), N to a multiple of 16 (padding rows have scale 0). */
struct lstmd_qweight {
  int N, K, Kp;
  int8_t *panels;  /* [ceil(N/16)][Kp/4][16][4], 64-byte aligned */
  float *scale;    /* [N] */
  int32_t *rowsum; /* [N] Σ_k q[n,k], for the zero-point correction */
};
/* Packs q [N,K] with its scales. Free with lstmd_cpu_qweight_free (also after a failure). */
int lstmd_cpu_qweight_pack(int N, int K, const int8_t *q, const float *scale,
                           struct lstmd_qweight *out);
void lstmd_cpu_qweight_free(struct lstmd_qweight *w);
/* Kp for K: the row stride of quantised activations. */
static inline int lstmd_cpu_qpad(int K) { return (K + 3) / 4 * 4; }

/* Dynamic activation quantisation of M rows of x (row stride ldx floats): q [M,Kp] (padding
 * zero), scale[m], zero[m], each row from its own min/max (the range always includes 0). */
void lstmd_cpu_quantize_act(int M, int K, const float *x, int ldx, uint8_t *q, float *scale,
                            int32_t *zero);

/* y [M,N] (row stride ldy) = (accumulate ? y : 0) + (bias ? bias : 0) + x·W^T, with x given
 * quantised (q [M,Kp], scale, zero) and W packed. Uses lstmd_cpu_qkernel(). */
void lstmd_cpu_qgemm(int M, const uint8_t *q, const float *scale, const int32_t *zero,
                     const struct lstmd_qweight *w, const float *bias, float *y, int ldy,
                     int accumulate);
/* The same for output columns [n0, n1) of y only, any 0 ≤ n0 ≤ n1 ≤ N (columns outside are not
 * written, also where they share a 16-row panel: a gate block of an H that is not a multiple of
 * 16): threads that split W's rows between them get the bits one call over all of them gives. */
void lstmd_cpu_qgemm_cols(int M, const uint8_t *q, const float *scale, const int32_t *zero,
                          const struct lstmd_qweight *w, int n0, int n1, const float *bias,
                          float *y, int ldy, int accumulate);
/* The raw int32 sums acc [M,N] = Σ_k q[m,k]·q_w[n,k] with a given kernel (one the CPU has),
 * so that tests can compare the kernels with each other and with an exact reference. */
void lstmd_cpu_qgemm_int32(enum lstmd_qkernel k, int M, const uint8_t *q,
                           const struct lstmd_qweight *w, int32_t *acc);

#endif
