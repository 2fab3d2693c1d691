/* qgemm.c — int8 GEMMs for inference (see qgemm.h for the scheme): weight quantisation and
 * packing, dynamic activation quantisation, and one int32 micro-kernel family per ISA that
 * computes an R-row × P-panel block (P·16 output columns) of sums; one epilogue (C, and the same
 * operations 16-wide for the VNNI kernels) then dequantises, so every kernel gives the same
 * floats bit for bit. */
#include "qgemm.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "isa_variants.h"
#include "kernels/status.h"

enum { kPanel = 16, kMaxRows = 4, kMaxPanels = 4 };

static const char *const kNames[] = {"generic", "avx2", "avx512-vnni"};

const char *lstmd_cpu_qkernel_name(enum lstmd_qkernel k) {
  return k >= LSTMD_QKERNEL_GENERIC && k <= LSTMD_QKERNEL_VNNI ? kNames[k] : "unknown";
}

enum lstmd_qkernel lstmd_cpu_qkernel(void) {
  switch (lstmd_cpu_isa()) {
    case LSTMD_ISA_AVX512:
      /* An AVX-512 CPU without VNNI (Skylake-X) runs the AVX2 kernel: it has AVX2. */
      return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw")
                 ? LSTMD_QKERNEL_VNNI : LSTMD_QKERNEL_AVX2;
    case LSTMD_ISA_AVX2: return LSTMD_QKERNEL_AVX2;
    default: return LSTMD_QKERNEL_GENERIC;
  }
}

void lstmd_cpu_quantize_rows(int N, int K, const float *w, int8_t *q, float *scale) {
  for (int n = 0; n < N; n++) {
    const float *row = w + (size_t)n * K;
    float amax = 0.0f;
    for (int k = 0; k < K; k++) amax = fabsf(row[k]) > amax ? fabsf(row[k]) : amax;
    const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
    scale[n] = s;
    for (int k = 0; k < K; k++) {
      float v = rintf(row[k] / s);
      q[(size_t)n * K + k] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
    }
  }
}

void lstmd_cpu_qweight_free(struct lstmd_qweight *w) {
  if (!w) return;
  free(w->panels);
  free(w->scale);
  free(w->rowsum);
  memset(w, 0, sizeof *w);
}

int lstmd_cpu_qweight_pack(int N, int K, const int8_t *q, const float *scale,
                           struct lstmd_qweight *out) {
  const int Kp = lstmd_cpu_qpad(K), panels = (N + kPanel - 1) / kPanel;
  const size_t bytes = (size_t)panels * Kp * kPanel; /* a multiple of 64 */
  memset(out, 0, sizeof *out);
  out->N = N, out->K = K, out->Kp = Kp;
  out->panels = aligned_alloc(64, bytes ? bytes : 64);
  out->scale = malloc((size_t)N * sizeof(float) + 1);
  out->rowsum = malloc((size_t)N * sizeof(int32_t) + 1);
  if (!out->panels || !out->scale || !out->rowsum) {
    lstmd_cpu_qweight_free(out);
    return LSTMD_ENOMEM;
  }
  memset(out->panels, 0, bytes);
  for (int n = 0; n < N; n++) {
    int8_t *panel = out->panels + (size_t)(n / kPanel) * Kp * kPanel;
    const int lane = n % kPanel;
    int32_t sum = 0;
    for (int k = 0; k < K; k++) {
      const int8_t v = q[(size_t)n * K + k];
      panel[(size_t)(k / 4) * 64 + lane * 4 + k % 4] = v;
      sum += v;
    }
    out->rowsum[n] = sum;
    out->scale[n] = scale[n];
  }
  return LSTMD_OK;
}

/* ---- activations ---- */

BODY void quantize_act_body(int M, int K, const float *x, int ldx, uint8_t *q, float *scale,
                            int32_t *zero) {
  const int Kp = lstmd_cpu_qpad(K);
  for (int m = 0; m < M; m++) {
    const float *xr = x + (size_t)m * ldx;
    uint8_t *qr = q + (size_t)m * Kp;
    float lo = 0.0f, hi = 0.0f;
#pragma omp simd reduction(min : lo) reduction(max : hi)
    for (int k = 0; k < K; k++) {
      lo = xr[k] < lo ? xr[k] : lo;
      hi = xr[k] > hi ? xr[k] : hi;
    }
    float s = (hi - lo) / 127.0f;
    if (!(s > 0.0f && s < INFINITY)) s = 1.0f; /* an all-zero row */
    const float inv = 1.0f / s, z = rintf(-lo / s);
    /* rintf before the add, so no variant can fuse the two into an FMA (same q everywhere). */
#pragma omp simd
    for (int k = 0; k < K; k++) {
      float v = rintf(xr[k] * inv) + z;
      v = v > 0.0f ? v : 0.0f;
      v = v < 127.0f ? v : 127.0f;
      qr[k] = (uint8_t)(int)v;
    }
    for (int k = K; k < Kp; k++) qr[k] = 0;
    scale[m] = s;
    zero[m] = (int32_t)z;
  }
}
ISA_VARIANTS(quantize_act,
             (int M, int K, const float *x, int ldx, uint8_t *q, float *scale, int32_t *zero),
             (M, K, x, ldx, q, scale, zero))

void lstmd_cpu_quantize_act(int M, int K, const float *x, int ldx, uint8_t *q, float *scale,
                            int32_t *zero) {
  quantize_act(M, K, x, ldx, q, scale, zero);
}

/* ---- micro-kernels: acc[r][p·16 + lane] (row stride 64) = Σ_g q[r][4g..4g+3] · panel_p[g][lane] ---- */

typedef void (*block_fn)(int groups, const uint8_t *q, size_t ldq, const int8_t *w,
                         size_t panel_bytes, int32_t *acc);

static inline int32_t load4(const uint8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* AVX-512 VNNI: vpdpbusd adds four u8×s8 products per int32 lane; R ≤ 4 rows × P ≤ 4 panels =
 * 16 zmm accumulators + 4 panel loads + 1 broadcast. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) BODY void vnni_body(int R, int P, int groups, const uint8_t *q, size_t ldq, const int8_t *w,
                    size_t panel_bytes, int32_t *acc) {
  __m512i c[kMaxRows][kMaxPanels];
  for (int r = 0; r < R; r++)
    for (int p = 0; p < P; p++) c[r][p] = _mm512_setzero_si512();
  for (int g = 0; g < groups; g++) {
    __m512i b[kMaxPanels];
    for (int p = 0; p < P; p++) b[p] = _mm512_loadu_si512(w + p * panel_bytes + (size_t)g * 64);
    for (int r = 0; r < R; r++) {
      const __m512i a = _mm512_set1_epi32(load4(q + r * ldq + (size_t)g * 4));
      for (int p = 0; p < P; p++) c[r][p] = _mm512_dpbusd_epi32(c[r][p], a, b[p]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int p = 0; p < P; p++) _mm512_storeu_si512(acc + r * 64 + p * 16, c[r][p]);
}

/* AVX2: vpmaddubsw multiplies u8×s8 and adds pairs into int16 with saturation — never reached,
 * as |2·127·128| < 32767 (7-bit activations, qgemm.h) — then vpmaddwd by 1 adds the pairs into
 * int32. A panel is two ymm; R ≤ 2 rows × P ≤ 2 panels = 8 accumulators + 4 loads + 3. */
__attribute__((target("avx2"))) BODY void avx2_body(int R, int P, int groups, const uint8_t *q, size_t ldq, const int8_t *w,
                    size_t panel_bytes, int32_t *acc) {
  __m256i c[2][4];
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < R; r++)
    for (int j = 0; j < 2 * P; j++) c[r][j] = _mm256_setzero_si256();
  for (int g = 0; g < groups; g++) {
    __m256i b[4];
    for (int j = 0; j < 2 * P; j++)
      b[j] = _mm256_loadu_si256((const __m256i *)(w + (j / 2) * panel_bytes + (size_t)g * 64 +
                                                  (j % 2) * 32));
    for (int r = 0; r < R; r++) {
      const __m256i a = _mm256_set1_epi32(load4(q + r * ldq + (size_t)g * 4));
      for (int j = 0; j < 2 * P; j++)
        c[r][j] = _mm256_add_epi32(c[r][j], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b[j]), ones));
    }
  }
  for (int r = 0; r < R; r++)
    for (int j = 0; j < 2 * P; j++) _mm256_storeu_si256((__m256i *)(acc + r * 64 + j * 8), c[r][j]);
}

#define VNNI_BLOCK(R, P)                                                                       \
  __attribute__((target("avx512f,avx512bw,avx512vnni"))) static void vnni_##R##_##P(          \
      int groups, const uint8_t *q, size_t ldq, const int8_t *w, size_t pb, int32_t *acc) {    \
    vnni_body(R, P, groups, q, ldq, w, pb, acc);                                               \
  }
#define AVX2_BLOCK(R, P)                                                                       \
  __attribute__((target("avx2"))) static void avx2_##R##_##P(                                 \
      int groups, const uint8_t *q, size_t ldq, const int8_t *w, size_t pb, int32_t *acc) {    \
    avx2_body(R, P, groups, q, ldq, w, pb, acc);                                               \
  }
VNNI_BLOCK(1, 1) VNNI_BLOCK(1, 2) VNNI_BLOCK(1, 3) VNNI_BLOCK(1, 4)
VNNI_BLOCK(2, 1) VNNI_BLOCK(2, 2) VNNI_BLOCK(2, 3) VNNI_BLOCK(2, 4)
VNNI_BLOCK(3, 1) VNNI_BLOCK(3, 2) VNNI_BLOCK(3, 3) VNNI_BLOCK(3, 4)
VNNI_BLOCK(4, 1) VNNI_BLOCK(4, 2) VNNI_BLOCK(4, 3) VNNI_BLOCK(4, 4)
AVX2_BLOCK(1, 1) AVX2_BLOCK(1, 2) AVX2_BLOCK(2, 1) AVX2_BLOCK(2, 2)

/* The reference-shaped C kernel: the same blocks, one product at a time. */
static void generic_block(int R, int P, int groups, const uint8_t *q, size_t ldq,
                          const int8_t *w, size_t panel_bytes, int32_t *acc) {
  for (int r = 0; r < R; r++)
    for (int p = 0; p < P; p++)
      for (int lane = 0; lane < kPanel; lane++) {
        int32_t s = 0;
        for (int g = 0; g < groups; g++)
          for (int j = 0; j < 4; j++)
            s += (int32_t)q[r * ldq + (size_t)g * 4 + j] *
                 w[p * panel_bytes + (size_t)g * 64 + lane * 4 + j];
        acc[r * 64 + p * 16 + lane] = s;
      }
}

/* A family: block sizes and kernel[R-1][P-1] (NULL for generic). */
struct family {
  int rows, panels;
  block_fn kernel[kMaxRows][kMaxPanels];
};
static const struct family kVnni = {4, 4,
                                    {{vnni_1_1, vnni_1_2, vnni_1_3, vnni_1_4},
                                     {vnni_2_1, vnni_2_2, vnni_2_3, vnni_2_4},
                                     {vnni_3_1, vnni_3_2, vnni_3_3, vnni_3_4},
                                     {vnni_4_1, vnni_4_2, vnni_4_3, vnni_4_4}}};
static const struct family kAvx2 = {2, 2, {{avx2_1_1, avx2_1_2}, {avx2_2_1, avx2_2_2}}};
static const struct family kGeneric = {4, 4, {{NULL}}};

static const struct family *family_of(enum lstmd_qkernel k) {
  return k == LSTMD_QKERNEL_VNNI ? &kVnni : k == LSTMD_QKERNEL_AVX2 ? &kAvx2 : &kGeneric;
}

/* Where a block's sums go: raw int32 (acc_out) or dequantised floats (y). */
struct sink {
  int32_t *acc_out; /* [M,N] */
  const float *scale;
  const int32_t *zero;
  const float *bias;
  float *y;
  int ldy, accumulate;
};

/* The epilogue (plain C: the same float operations whatever kernel ran; emit_avx512 below does
 * them 16 at a time). */
static void emit(const struct sink *s, const struct lstmd_qweight *w, int m0, int R, int nb,
                 int n0, int n1, const int32_t *acc) {
  for (int r = 0; r < R; r++) {
    const int32_t *a = acc + r * 64 + (n0 - nb);
    const int m = m0 + r;
    if (s->acc_out) {
      memcpy(s->acc_out + (size_t)m * w->N + n0, a, (size_t)(n1 - n0) * sizeof(int32_t));
      continue;
    }
    const float sx = s->scale[m];
    const int32_t z = s->zero[m];
    float *y = s->y + (size_t)m * s->ldy;
    for (int n = n0; n < n1; n++) {
      const float v = (float)(a[n - n0] - z * w->rowsum[n]) * (sx * w->scale[n]);
      const float base = (s->accumulate ? y[n] : 0.0f) + (s->bias ? s->bias[n] : 0.0f);
      y[n] = base + v;
    }
  }
}

/* The same epilogue 16 outputs at a time with AVX-512, for the VNNI kernels (in batched GEMMs
 * the plain one, which the compiler gives 4-wide SSE, took as long as the kernel). Same float
 * operations in the same order, element by element: convert, sx·scale, multiply, then base +
 * that. The empty asm hides the product from the compiler, so it cannot fuse it with the add
 * into an FMA (one rounding instead of two), which would change the bits. */
__attribute__((target("avx512f"))) static void emit_avx512(const struct sink *s,
                                                           const struct lstmd_qweight *w, int m0,
                                                           int R, int nb, int n0, int n1,
                                                           const int32_t *acc) {
  const __m512 zero = _mm512_setzero_ps();
  for (int r = 0; r < R; r++) {
    const int m = m0 + r;
    const __m512 sx = _mm512_set1_ps(s->scale[m]);
    const __m512i z = _mm512_set1_epi32(s->zero[m]);
    float *y = s->y + (size_t)m * s->ldy;
    for (int n = n0; n < n1; n += 16) {
      const __mmask16 k = n1 - n >= 16 ? 0xffff : (__mmask16)((1u << (n1 - n)) - 1);
      const __m512i a = _mm512_maskz_loadu_epi32(k, acc + r * 64 + (n - nb));
      const __m512i d = _mm512_sub_epi32(a, _mm512_mullo_epi32(z, _mm512_maskz_loadu_epi32(k, w->rowsum + n)));
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sx, _mm512_maskz_loadu_ps(k, w->scale + n)));
      __asm__("" : "+v"(v));
      const __m512 base = _mm512_add_ps(s->accumulate ? _mm512_maskz_loadu_ps(k, y + n) : zero,
                                        s->bias ? _mm512_maskz_loadu_ps(k, s->bias + n) : zero);
      _mm512_mask_storeu_ps(y + n, k, _mm512_add_ps(base, v));
    }
  }
}

/* emit_avx512 8 at a time for the AVX2 kernels. The plain epilogue, compiled for SSE2, has no
 * 32-bit multiply (z·rowsum took shuffles and two multiplies); this one made a batched int8
 * predict (H 256, forced AVX2) ~2.5% faster, 9 interleaved whole runs, and a batch-1 H1024 sample
 * ~0.5% (in-process A/B). A partial vector goes through the plain epilogue: a first version with
 * masked loads and stores for every vector took 10.8% of that sample's profile (the plain one
 * and its caller, inlined together, 9.4%), most of it on the instruction after the masked load
 * of y; full vectors 6.8%. */
__attribute__((target("avx2"))) static void emit_avx2(const struct sink *s,
                                                      const struct lstmd_qweight *w, int m0,
                                                      int R, int nb, int n0, int n1,
                                                      const int32_t *acc) {
  const __m256 zero = _mm256_setzero_ps();
  const int full = n0 + (n1 - n0) / 8 * 8;
  for (int r = 0; r < R; r++) {
    const int m = m0 + r;
    const __m256 sx = _mm256_set1_ps(s->scale[m]);
    const __m256i z = _mm256_set1_epi32(s->zero[m]);
    float *y = s->y + (size_t)m * s->ldy;
    for (int n = n0; n < full; n += 8) {
      const __m256i a = _mm256_loadu_si256((const __m256i *)(acc + r * 64 + (n - nb)));
      const __m256i d = _mm256_sub_epi32(a, _mm256_mullo_epi32(z, _mm256_loadu_si256((const __m256i *)(w->rowsum + n))));
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(sx, _mm256_loadu_ps(w->scale + n)));
      __asm__("" : "+x"(v));
      const __m256 base = _mm256_add_ps(s->accumulate ? _mm256_loadu_ps(y + n) : zero,
                                        s->bias ? _mm256_loadu_ps(s->bias + n) : zero);
      _mm256_storeu_ps(y + n, _mm256_add_ps(base, v));
    }
  }
  if (full < n1) emit(s, w, m0, R, nb, full, n1, acc);
}

/* Output columns [lo, hi) only: the panels holding them, each block's epilogue clipped to the
 * range (a column outside it, in a panel it shares, is left alone: accumulate would add it twice).
 * Panel groups outside, row blocks inside: a group of P panels
 * (P·16 rows of W, P·16·Kp bytes) stays in cache while every row of q streams past it. Each sum
 * is exact in int32 and the epilogue is per element, so how the panels are grouped (and which
 * thread runs which range) does not change a bit of the output. */
static void run(enum lstmd_qkernel k, int M, const uint8_t *q, const struct lstmd_qweight *w,
                int lo, int hi, const struct sink *s) {
  const int first = lo / kPanel, panels = (hi + kPanel - 1) / kPanel;
  const struct family *f = family_of(k);
  const int groups = w->Kp / 4;
  const size_t panel_bytes = (size_t)w->Kp * kPanel;
  int32_t acc[kMaxRows * 64];
  for (int p0 = first; p0 < panels; p0 += f->panels) {
    const int P = panels - p0 < f->panels ? panels - p0 : f->panels;
    const int8_t *wp = w->panels + (size_t)p0 * panel_bytes;
    const int nb = p0 * kPanel, n0 = nb > lo ? nb : lo;
    const int n1 = (p0 + P) * kPanel < hi ? (p0 + P) * kPanel : hi;
    for (int m = 0; m < M; m += f->rows) {
      const int R = M - m < f->rows ? M - m : f->rows;
      const uint8_t *qm = q + (size_t)m * w->Kp;
      if (k == LSTMD_QKERNEL_GENERIC)
        generic_block(R, P, groups, qm, (size_t)w->Kp, wp, panel_bytes, acc);
      else
        f->kernel[R - 1][P - 1](groups, qm, (size_t)w->Kp, wp, panel_bytes, acc);
      if (k == LSTMD_QKERNEL_VNNI && !s->acc_out) emit_avx512(s, w, m, R, nb, n0, n1, acc);
      else if (k == LSTMD_QKERNEL_AVX2 && !s->acc_out) emit_avx2(s, w, m, R, nb, n0, n1, acc);
      else emit(s, w, m, R, nb, n0, n1, acc);
    }
  }
}

void lstmd_cpu_qgemm(int M, const uint8_t *q, const float *scale, const int32_t *zero,
                     const struct lstmd_qweight *w, const float *bias, float *y, int ldy,
                     int accumulate) {
  lstmd_cpu_qgemm_cols(M, q, scale, zero, w, 0, w->N, bias, y, ldy, accumulate);
}

void lstmd_cpu_qgemm_cols(int M, const uint8_t *q, const float *scale, const int32_t *zero,
                          const struct lstmd_qweight *w, int n0, int n1, const float *bias,
                          float *y, int ldy, int accumulate) {
  const struct sink s = {NULL, scale, zero, bias, y, ldy, accumulate};
  run(lstmd_cpu_qkernel(), M, q, w, n0, n1, &s);
}

void lstmd_cpu_qgemm_int32(enum lstmd_qkernel k, int M, const uint8_t *q,
                           const struct lstmd_qweight *w, int32_t *acc) {
  const struct sink s = {.acc_out = acc};
  run(k, M, q, w, 0, w->N, &s);
}
