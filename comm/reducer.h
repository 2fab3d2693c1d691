/* reducer.h — background gradient all-reduce: a thread that owns a communicator of its own,
 * takes buckets (slices of the flat gradient buffer) as backward makes them final, runs one
 * nonblocking all-reduce per bucket and drives it to completion, so communication overlaps the
 * rest of backward. Buckets must be submitted in the same order on every rank. */
#ifndef LSTMD_REDUCER_H
#define LSTMD_REDUCER_H

#include <stddef.h>

struct lstmd_comm;
struct lstmd_reducer;

/* Starts the thread on a duplicate of c's world communicator. */
int lstmd_reducer_create(struct lstmd_comm *c, struct lstmd_reducer **out);
/* Waits for outstanding buckets (at most the timeout, if one is set; then they are abandoned),
 * stops the thread. NULL is fine. */
void lstmd_reducer_destroy(struct lstmd_reducer *r);
/* Queues an in-place sum over ranks of buf[0..n) (n < 2^31). Thread-safe. With 4096 buckets
 * already waiting it waits for room, at most the timeout (if one is set): past it the reducer
 * fails for good as in lstmd_reducer_wait_all (message, the bucket dropped, the next wait_all
 * returns LSTMD_ECOMM). */
void lstmd_reducer_submit(struct lstmd_reducer *r, float *buf, size_t n);
/* Optional: called on the reducer thread after each bucket with its size (floats) and the
 * CLOCK_MONOTONIC seconds it was submitted, started and finished (for the step timeline). */
typedef void (*lstmd_bucket_observer)(void *ctx, size_t n, double queued_s, double begin_s,
                                      double end_s);
void lstmd_reducer_observe(struct lstmd_reducer *r, lstmd_bucket_observer fn, void *ctx);
/* Waits until every submitted bucket is reduced. Returns 0, or LSTMD_ECOMM if one failed.
 * *waited_s gets the time spent waiting here (the communication backward did not hide).
 * With a timeout set: if the buckets are not all reduced that long after this wait began, prints
 * "rank R (host): gradient all-reduce unfinished after N s (train.comm_timeout_s ...)" and
 * returns LSTMD_ECOMM; the reducer is then failed for good (the thread stops driving its
 * pending all-reduce, reduces nothing more, and every later wait returns LSTMD_ECOMM at once).
 * The buffers of unfinished buckets must stay allocated until the job ends: the caller is
 * expected to fail (exit or lstmd_comm_abort), not to go on. */
int lstmd_reducer_wait_all(struct lstmd_reducer *r, double *waited_s);
/* Bounds lstmd_reducer_wait_all and lstmd_reducer_destroy to timeout_s seconds
 * (train.comm_timeout_s); 0 (the default) means no limit. The waits never block in MPI, so a
 * stopped (SIGSTOP) or dead peer cannot hang them past the limit. */
void lstmd_reducer_set_timeout(struct lstmd_reducer *r, double timeout_s);

#endif
