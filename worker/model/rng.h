/* rng.h — xoshiro256** random streams seeded from a u64 and a stream id (parameter
 * initialisation, epoch permutations, sampling), plus a stateless mixer for counter-based random
 * numbers (dropout masks). */
#ifndef LSTMD_RNG_H
#define LSTMD_RNG_H

#include <stddef.h>
#include <stdint.h>

struct lstmd_rng {
  uint64_t s[4];
};

/* Seeds stream `stream` of `seed` (splitmix64 expansion; distinct streams are independent). */
void lstmd_rng_seed(struct lstmd_rng *r, uint64_t seed, uint64_t stream);
uint64_t lstmd_rng_next(struct lstmd_rng *r);
/* Uniform in [0,1) with 24 random bits. */
float lstmd_rng_uniform(struct lstmd_rng *r);
/* Uniform integer in [0,n), n > 0, without modulo bias. */
uint64_t lstmd_rng_below(struct lstmd_rng *r, uint64_t n);
/* Standard normal (Box–Muller, one value per call). */
float lstmd_rng_normal(struct lstmd_rng *r);

/* A stateless 64-bit mixer (splitmix64's finaliser): for counter-based random numbers. */
static inline uint64_t lstmd_hash64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}


#endif
