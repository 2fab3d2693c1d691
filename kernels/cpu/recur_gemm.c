/* recur_gemm.c — packed-panel AVX-512 GEMMs for the per-step recurrence (see recur_gemm.h). */
#include "recur_gemm.h"

#include "isa.h"

#include <immintrin.h>
#include <string.h>

int lstmd_cpu_recur_fast(int H) { return lstmd_cpu_isa() == LSTMD_ISA_AVX512 && H % 32 == 0; }

size_t lstmd_cpu_pack_floats(int N, int K) { return (size_t)N * K; }

void lstmd_cpu_pack_rows(int N, int K, const float *W, float *packed) {
  for (int j = 0; j < N / 32; j++) {
    float *panel = packed + (size_t)j * K * 32;
    for (int i = 0; i < 32; i++) {
      const float *row = W + (size_t)(j * 32 + i) * K;
      for (int k = 0; k < K; k++) panel[(size_t)k * 32 + i] = row[k];
    }
  }
}

void lstmd_cpu_pack_cols(int K, int N, const float *W, float *packed) {
  for (int j = 0; j < N / 32; j++) {
    float *panel = packed + (size_t)j * K * 32;
    for (int k = 0; k < K; k++) memcpy(panel + (size_t)k * 32, W + (size_t)k * N + j * 32, 32 * sizeof(float));
  }
}

/* R rows of C, one 32-column panel: C[r][0..32) += Σ_k A[r][k] · P[k·ps .. k·ps+32).
 * With R a constant the accumulators live in 2R zmm registers. */
#define DEFINE_PANEL_KERNEL(R)                                                               \
  __attribute__((target("avx512f"))) static void panel_##R(                                \
      int K, const float *A, size_t lda, const float *P, size_t ps, float *C, size_t ldc) { \
    __m512 c0[R], c1[R];                                                                   \
    for (int r = 0; r < R; r++) {                                                          \
      c0[r] = _mm512_loadu_ps(C + r * ldc);                                                \
      c1[r] = _mm512_loadu_ps(C + r * ldc + 16);                                           \
    }                                                                                      \
    for (int k = 0; k < K; k++) {                                                          \
      const __m512 b0 = _mm512_loadu_ps(P + (size_t)k * ps);                               \
      const __m512 b1 = _mm512_loadu_ps(P + (size_t)k * ps + 16);                          \
      for (int r = 0; r < R; r++) {                                                        \
        const __m512 a = _mm512_set1_ps(A[r * lda + k]);                                   \
        c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);                                             \
        c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);                                             \
      }                                                                                    \
    }                                                                                      \
    for (int r = 0; r < R; r++) {                                                          \
      _mm512_storeu_ps(C + r * ldc, c0[r]);                                                \
      _mm512_storeu_ps(C + r * ldc + 16, c1[r]);                                           \
    }                                                                                      \
  }
DEFINE_PANEL_KERNEL(1)
DEFINE_PANEL_KERNEL(2)
DEFINE_PANEL_KERNEL(3)
DEFINE_PANEL_KERNEL(4)
DEFINE_PANEL_KERNEL(5)
DEFINE_PANEL_KERNEL(6)
DEFINE_PANEL_KERNEL(7)
DEFINE_PANEL_KERNEL(8)

typedef void (*panel_fn)(int, const float *, size_t, const float *, size_t, float *, size_t);
static const panel_fn kPanels[9] = {NULL,    panel_1, panel_2, panel_3, panel_4,
                                    panel_5, panel_6, panel_7, panel_8};

/* C[M, N] += A · (panels): panel j starts at P + j·panel_step, rows of a panel ps apart. */
static void run_panels(int M, int N, int K, const float *A, int lda, const float *P,
                       size_t panel_step, size_t ps, float *C, int ldc) {
  for (int j = 0; j < N / 32; j++)
    for (int m = 0; m < M; m += 8) {
      int rows = M - m < 8 ? M - m : 8;
      kPanels[rows](K, A + (size_t)m * lda, (size_t)lda, P + (size_t)j * panel_step, ps,
                    C + (size_t)m * ldc + (size_t)j * 32, (size_t)ldc);
    }
}

void lstmd_cpu_gemm_abt_packed(int M, int N, int K, const float *A, int lda, const float *packed,
                               float *C, int ldc) {
  run_panels(M, N, K, A, lda, packed, (size_t)K * 32, 32, C, ldc);
}

void lstmd_cpu_gemm_ab_packed(int M, int N, int K, const float *A, int lda, const float *packed,
                              float *C, int ldc) {
  for (int m = 0; m < M; m++) memset(C + (size_t)m * ldc, 0, (size_t)N * sizeof(float));
  run_panels(M, N, K, A, lda, packed, (size_t)K * 32, 32, C, ldc);
}
