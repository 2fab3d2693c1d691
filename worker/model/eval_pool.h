/* eval_pool.h — an evaluation's chunks spread over this process's threads and the job's ranks,
 * for every kind of model (infer.c: text and series; classify_eval.c: classifiers).
 *
 * Part p of `parts` (a data-parallel job's rank) scores chunks p, p + parts, ...; its threads
 * each take the next chunk untaken and write the chunk's sum to the chunk's own slot. Summed in
 * chunk order, the slots give a total that depends neither on the thread count nor on how the
 * parts share the chunks; the parts then add their slot arrays (lstmd_eval_share, infer.h),
 * exactly, since each slot is nonzero in one part only. */
#ifndef LSTMD_EVAL_POOL_H
#define LSTMD_EVAL_POOL_H

#include <stdint.h>

/* How the parts share an evaluation: this process is part `part` of `parts`, and combine makes
 * sums[n] on every part the sum over the parts of their sums (status: this part's 0 or error;
 * it returns 0, or an error when any part failed). Every part calls it, failed or not. */
struct lstmd_eval_share {
  int part, parts;
  int (*combine)(void *ctx, double *sums, int n, int status);
  void *ctx;
};

struct lstmd_eval_pool {
  uint64_t count;                        /* chunks in all */
  const struct lstmd_eval_share *share;  /* NULL: every chunk is this process's */
  void *ctx;
  /* A thread's own state (its workspaces). A helper thread gets everything it needs here, and
   * on a failure leaves the chunks to the others; the calling thread's failures, here or in
   * score, are the evaluation's. */
  int (*open)(void *ctx, int helper, void **state);
  /* Scores chunk `chunk` (one of this part's) into *sum, set to 0 before. */
  int (*score)(void *ctx, void *state, uint64_t chunk, double *sum);
  void (*close)(void *ctx, void *state);
};

/* This part's chunks. */
uint64_t lstmd_eval_pool_mine(const struct lstmd_eval_pool *p);
/* Whether chunk c is this part's. */
int lstmd_eval_pool_has(const struct lstmd_eval_pool *p, uint64_t c);

/* Scores this part's chunks into sums[chunk] (the other slots untouched). threads >= 1: on that
 * many threads, the caller's among them (fewer when some cannot start), with BLAS at one thread
 * inside every chunk and given its count back after; threads <= 0: on the calling thread alone,
 * BLAS as set. Returns 0 or the first failure. */
int lstmd_eval_pool_run(const struct lstmd_eval_pool *p, int threads, double *sums);
/* The parts' meeting point after the run: the share's combine over sums[n] (sums NULL: n is 0),
 * with status this part's result; without a share, status. */
int lstmd_eval_pool_combine(const struct lstmd_eval_pool *p, double *sums, int n, int status);

/* How many of `want` threads fit the memory free now when each holds `bytes`: the threads
 * beyond the first take at most a quarter of it, so that a many-core machine's evaluation does
 * not push a training rank into the OOM killer (Linux rarely refuses the allocation itself). */
int lstmd_eval_threads_fit(double bytes, int want);

#endif
