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

/* The counter-based pieces below are also compiled for CUDA devices (kernels/cuda/), so the GPU
 * makes the CPU's dropout masks bit for bit. */
#ifdef __CUDACC__
#define LSTMD_HOST_DEVICE __host__ __device__
#else
#define LSTMD_HOST_DEVICE
#endif

/* A stateless 64-bit mixer (splitmix64's finaliser): for counter-based random numbers. */
static inline LSTMD_HOST_DEVICE uint64_t lstmd_hash64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Dropout masks (model.h's lstmd_dropout_mask_rows): the key of layer `layer` of micro-batch
 * `step`, then whether unit j of (t, global column col) is dropped, with p in 24-bit units
 * (threshold = p · 2^24). */
static inline LSTMD_HOST_DEVICE uint64_t lstmd_dropout_base(uint64_t seed, uint64_t step,
                                                            int layer) {
  return lstmd_hash64(seed ^ lstmd_hash64(step * 64 + (uint64_t)layer));
}
static inline LSTMD_HOST_DEVICE uint64_t lstmd_dropout_row(uint64_t base, int t, int col) {
  return lstmd_hash64(base ^ ((uint64_t)t << 40 | (uint64_t)col));
}
static inline LSTMD_HOST_DEVICE int lstmd_dropout_dropped(uint64_t row, int j, uint32_t threshold) {
  return (uint32_t)(lstmd_hash64(row + (uint64_t)j * 0x9e3779b97f4a7c15ULL) >> 40) < threshold;
}


#endif
