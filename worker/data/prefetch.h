/* prefetch.h — the shard reader's background thread: it reads the next batches of this rank
 * (with the batcher's pread of its own windows) into two buffers while the current one trains,
 * so a step does not wait on the disk in steady state. The data cursor it reports is the one
 * after the last batch handed out, which is what a checkpoint must record. */
#ifndef LSTMD_PREFETCH_H
#define LSTMD_PREFETCH_H

#include "batcher.h"

struct lstmd_prefetch;

/* Takes over the batcher (which must outlive it). The reading thread starts with
 * lstmd_prefetch_start, so the cursor may still be set (lstmd_batcher_set_cursor) before. */
int lstmd_prefetch_create(struct lstmd_batcher *b, const struct lstmd_dataset *ds, int steps,
                          int batch, struct lstmd_prefetch **out);
/* Starts the reading thread from the batcher's cursor. Returns 0, or LSTMD_ENOMEM (message
 * printed) when the thread cannot be created; then _next must not be called. */
int lstmd_prefetch_start(struct lstmd_prefetch *p);
void lstmd_prefetch_destroy(struct lstmd_prefetch *p);
/* The next batch (valid until the following call) and whether the state resets before it. On a
 * read error *batch is still set, to an all-zero batch of the right shape, so that a rank can
 * run the step with the others and vote to fail it instead of leaving them in a collective. */
int lstmd_prefetch_next(struct lstmd_prefetch *p, const struct lstmd_batch **batch, int *reset);
/* Cursor after the last batch returned by _next (or the batcher's, before the first). */
struct lstmd_batcher_cursor lstmd_prefetch_cursor(const struct lstmd_prefetch *p);

#endif
