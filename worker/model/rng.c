/* rng.c — xoshiro256** (Blackman & Vigna), seeded through splitmix64. */
#include "rng.h"

#include <math.h>


static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void lstmd_rng_seed(struct lstmd_rng *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xd1342543de82ef95ULL + 0x632be59bd9b4e019ULL);
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t lstmd_rng_next(struct lstmd_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

float lstmd_rng_uniform(struct lstmd_rng *r) {
  return (float)(lstmd_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

uint64_t lstmd_rng_below(struct lstmd_rng *r, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = lstmd_rng_next(r);
  while (x >= limit);
  return x % n;
}

float lstmd_rng_normal(struct lstmd_rng *r) {
  double u1 = ((lstmd_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  double u2 = (lstmd_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}
