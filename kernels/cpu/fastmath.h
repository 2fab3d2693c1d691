/* fastmath.h — branch-free float exp/sigmoid/tanh that GCC vectorizes inside loops.
 * glibc's vector math (libmvec) is only used under -ffast-math, which we do not want for a
 * reference backend, so the LSTM gate pass would otherwise make ~5H scalar libm calls per token
 * per layer. These follow Cephes' expf/tanhf (max error a few ulp; tests/test_kernels_cpu.c
 * checks them against double-precision libm). */
#ifndef LSTMD_FASTMATH_H
#define LSTMD_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float lstmd_expf(float x) {
  x = x > 88.0f ? 88.0f : x;
  x = x < -87.0f ? -87.0f : x;
  float n = floorf(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  float y = p * r * r + r + 1.0f;
  /* A NaN x passes the clamps and makes n NaN, whose int conversion (and the shift after it) is
   * undefined: it converts as 128 instead (one vminps; finite n is at most 127, unchanged), so
   * scale is +Inf and y·scale stays NaN. NaN in, NaN out (test_kernels_cpu). */
  int32_t bits = ((int32_t)(n < 128.0f ? n : 128.0f) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

static inline float lstmd_sigmoidf(float x) { return 1.0f / (1.0f + lstmd_expf(-x)); }

static inline float lstmd_tanhf(float x) {
  float ax = fabsf(x);
  float z = x * x;
  float small = ((((-5.70498872745E-3f * z + 2.06390887954E-2f) * z - 5.37397155531E-2f) * z +
                  1.33314422036E-1f) * z - 3.33332819422E-1f) * z * x + x;
  float big = 1.0f - 2.0f / (lstmd_expf(2.0f * ax) + 1.0f);
  big = copysignf(big, x);
  return ax < 0.625f ? small : big;
}

#endif
