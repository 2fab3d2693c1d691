/* recur_gemm.c — packed-panel GEMMs for the per-step recurrence (see recur_gemm.h): one
 * micro-kernel family per vector ISA, each with its own panel width. AVX-512: 32-column panels,
 * up to 8 rows × 2 zmm of accumulators. AVX2+FMA: 16-column panels, up to 6 rows × 2 ymm. The
 * pack functions and the GEMMs read the panel width of lstmd_cpu_isa(), fixed for the process. */
#include "recur_gemm.h"

#include "isa.h"

#include <immintrin.h>
#include <string.h>

/* One micro-kernel: R rows of C against one panel of width w:
 * C[r][0..w) += Σ_k A[r][k]·P[k·w .. k·w+w). */
typedef void (*panel_fn)(int K, const float *A, size_t lda, const float *P, float *C, size_t ldc);

/* A family: its panel width in floats, its row block, and kernel[r] for r = 1 .. rows. */
struct family {
  int width;
  int rows;
  panel_fn kernel[9];
};

/* AVX-512: 32 columns = 2 zmm per row; 8 rows → 16 accumulators + 2 panel loads + 1 broadcast
 * of the 32 zmm registers. With R a constant the accumulator arrays live in registers. */
#define DEFINE_PANEL32_KERNEL(R)                                                             \
  __attribute__((target("avx512f"))) static void panel32_##R(                              \
      int K, const float *A, size_t lda, const float *P, float *C, size_t ldc) {           \
    __m512 c0[R], c1[R];                                                                   \
    for (int r = 0; r < R; r++) {                                                          \
      c0[r] = _mm512_loadu_ps(C + r * ldc);                                                \
      c1[r] = _mm512_loadu_ps(C + r * ldc + 16);                                           \
    }                                                                                      \
    for (int k = 0; k < K; k++) {                                                          \
      const __m512 b0 = _mm512_loadu_ps(P + (size_t)k * 32);                               \
      const __m512 b1 = _mm512_loadu_ps(P + (size_t)k * 32 + 16);                          \
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
DEFINE_PANEL32_KERNEL(1)
DEFINE_PANEL32_KERNEL(2)
DEFINE_PANEL32_KERNEL(3)
DEFINE_PANEL32_KERNEL(4)
DEFINE_PANEL32_KERNEL(5)
DEFINE_PANEL32_KERNEL(6)
DEFINE_PANEL32_KERNEL(7)
DEFINE_PANEL32_KERNEL(8)

/* AVX2+FMA: 16 columns = 2 ymm per row; 6 rows → 12 accumulators + 2 panel loads + 1 broadcast
 * = 15 of the 16 ymm registers (the classic 6×16 Haswell shape). A 32-column panel would need
 * 4 ymm per row and leave room for 3 rows only, reading each panel twice as often. The
 * accumulators are named variables, not arrays as above: with arrays GCC 12 kept them in
 * registers but also stored all 12 to the stack on every k. Rows r ≥ R are dead code. */
#define ROW16_LOAD(R, r)                                                                    \
  if (R > r) {                                                                              \
    c##r##0 = _mm256_loadu_ps(C + r * ldc);                                                 \
    c##r##1 = _mm256_loadu_ps(C + r * ldc + 8);                                             \
  }
#define ROW16_FMA(R, r)                                                                     \
  if (R > r) {                                                                              \
    const __m256 a = _mm256_broadcast_ss(A + r * lda + k);                                  \
    c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);                                              \
    c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);                                              \
  }
#define ROW16_STORE(R, r)                                                                   \
  if (R > r) {                                                                              \
    _mm256_storeu_ps(C + r * ldc, c##r##0);                                                 \
    _mm256_storeu_ps(C + r * ldc + 8, c##r##1);                                             \
  }
#define ROWS16(OP, R) OP(R, 0) OP(R, 1) OP(R, 2) OP(R, 3) OP(R, 4) OP(R, 5)
#define DEFINE_PANEL16_KERNEL(R)                                                            \
  __attribute__((target("avx2,fma"))) static void panel16_##R(                              \
      int K, const float *A, size_t lda, const float *P, float *C, size_t ldc) {            \
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00;           \
    __m256 c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;     \
    ROWS16(ROW16_LOAD, R)                                                                   \
    for (int k = 0; k < K; k++) {                                                           \
      const __m256 b0 = _mm256_loadu_ps(P + (size_t)k * 16);                                \
      const __m256 b1 = _mm256_loadu_ps(P + (size_t)k * 16 + 8);                            \
      ROWS16(ROW16_FMA, R)                                                                  \
    }                                                                                       \
    ROWS16(ROW16_STORE, R)                                                                  \
  }
DEFINE_PANEL16_KERNEL(1)
DEFINE_PANEL16_KERNEL(2)
DEFINE_PANEL16_KERNEL(3)
DEFINE_PANEL16_KERNEL(4)
DEFINE_PANEL16_KERNEL(5)
DEFINE_PANEL16_KERNEL(6)

static const struct family kAvx512 = {
    32, 8,
    {NULL, panel32_1, panel32_2, panel32_3, panel32_4, panel32_5, panel32_6, panel32_7, panel32_8}};
static const struct family kAvx2 = {
    16, 6, {NULL, panel16_1, panel16_2, panel16_3, panel16_4, panel16_5, panel16_6}};

/* The family of lstmd_cpu_isa(), or NULL (generic: no packed kernels). */
static const struct family *family(void) {
  switch (lstmd_cpu_isa()) {
    case LSTMD_ISA_AVX512: return &kAvx512;
    case LSTMD_ISA_AVX2: return &kAvx2;
    default: return NULL;
  }
}

int lstmd_cpu_recur_fast(int H) {
  const struct family *f = family();
  return f && H > 0 && H % f->width == 0;
}

size_t lstmd_cpu_pack_floats(int N, int K) { return (size_t)N * K; }

int lstmd_cpu_panel_width(void) {
  const struct family *f = family();
  return f ? f->width : 0;
}

void lstmd_cpu_pack_rows_panels(int K, const float *W, float *packed, int p0, int p1) {
  const int w = lstmd_cpu_panel_width();
  for (int j = p0; j < p1; j++) {
    float *panel = packed + (size_t)j * K * w;
    for (int i = 0; i < w; i++) {
      const float *row = W + (size_t)(j * w + i) * K;
      for (int k = 0; k < K; k++) panel[(size_t)k * w + i] = row[k];
    }
  }
}

void lstmd_cpu_pack_rows(int N, int K, const float *W, float *packed) {
  lstmd_cpu_pack_rows_panels(K, W, packed, 0, N / lstmd_cpu_panel_width());
}

void lstmd_cpu_pack_cols_panels(int K, int N, const float *W, float *packed, int p0, int p1) {
  const int w = lstmd_cpu_panel_width();
  for (int j = p0; j < p1; j++) {
    float *panel = packed + (size_t)j * K * w;
    for (int k = 0; k < K; k++)
      memcpy(panel + (size_t)k * w, W + (size_t)k * N + (size_t)j * w, w * sizeof(float));
  }
}

void lstmd_cpu_pack_cols(int K, int N, const float *W, float *packed) {
  lstmd_cpu_pack_cols_panels(K, N, W, packed, 0, N / lstmd_cpu_panel_width());
}

void lstmd_cpu_gemm_panel(int M, int K, const float *A, int lda, const float *panel, float *C,
                          int ldc) {
  const struct family *f = family();
  for (int m = 0; m < M; m += f->rows) {
    const int rows = M - m < f->rows ? M - m : f->rows;
    f->kernel[rows](K, A + (size_t)m * lda, (size_t)lda, panel, C + (size_t)m * ldc, (size_t)ldc);
  }
}

/* C[M, N] += A · (panels): each panel (K×w floats, one after another) against all rows. */
static void run_panels(int M, int N, int K, const float *A, int lda, const float *P, float *C,
                       int ldc) {
  const int w = lstmd_cpu_panel_width();
  for (int j = 0; j < N / w; j++)
    lstmd_cpu_gemm_panel(M, K, A, lda, P + (size_t)j * K * w, C + (size_t)j * w, ldc);
}

void lstmd_cpu_gemm_abt_packed(int M, int N, int K, const float *A, int lda, const float *packed,
                               float *C, int ldc) {
  run_panels(M, N, K, A, lda, packed, C, ldc);
}

void lstmd_cpu_gemm_ab_packed(int M, int N, int K, const float *A, int lda, const float *packed,
                              float *C, int ldc) {
  for (int m = 0; m < M; m++) memset(C + (size_t)m * ldc, 0, (size_t)N * sizeof(float));
  run_panels(M, N, K, A, lda, packed, C, ldc);
}
