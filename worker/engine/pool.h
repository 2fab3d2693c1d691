/* pool.h — a fixed team of threads that runs one function for indices 0..n-1 and waits for all
 * of them. The trainer splits each batch across the team (one slice of the batch per thread,
 * each calling single-threaded BLAS), which on small recurrent GEMMs beats one multi-threaded
 * BLAS call per step: no per-step thread hand-off, and the gate passes run in parallel too. */
#ifndef LSTMD_POOL_H
#define LSTMD_POOL_H

struct lstmd_pool;

/* n threads in all: the caller of lstmd_pool_run is index 0, n-1 threads are started. */
int lstmd_pool_create(int n, struct lstmd_pool **out);
void lstmd_pool_destroy(struct lstmd_pool *p);
/* Runs fn(arg, i) for every i in [0, n) concurrently (i = 0 on the calling thread) and returns
 * when all have returned. */
void lstmd_pool_run(struct lstmd_pool *p, void (*fn)(void *arg, int index), void *arg);

#endif
