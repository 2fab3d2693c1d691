/* batcher.h — which windows of the training split make up each batch, and reading them.
 *
 * A window is T inputs plus K targets beyond them (K = 1 for text, the horizon for series),
 * taken at stride T. Two orders:
 *  - shuffle: windows i·T for i < n_windows, visited in an epoch-seeded permutation; the global
 *    batch of each step is the next world·B windows of it and rank r takes [r·B, (r+1)·B).
 *    Each window starts from a zero state. A series window starts at i·T + an offset in [0, T)
 *    drawn per window and epoch (batcher.c says why), n_windows = (rows − K − (T − 1)) / T.
 *  - stream: the split is cut into world·B equal streams, rank r owns streams [r·B, (r+1)·B);
 *    each step takes the next window of every stream, and the recurrent state is carried from
 *    one window to the next (truncated BPTT). At the end of the streams all restart at 0 and the
 *    state is reset.
 * So N ranks with batch b see exactly the windows one rank with batch N·b sees. */
#ifndef LSTMD_BATCHER_H
#define LSTMD_BATCHER_H

#include <stdint.h>

#include "dataset.h"
#include "worker/model/model.h"

enum lstmd_order { LSTMD_ORDER_SHUFFLE = 0, LSTMD_ORDER_STREAM = 1 };

struct lstmd_batcher_cursor {
  uint64_t epoch;    /* completed passes over the data */
  uint64_t position; /* shuffle: index into the epoch's permutation; stream: window index */
};

struct lstmd_batcher;

/* Checks that the split holds at least one window per stream (message + LSTMD_ECONFIG
 * otherwise). seed picks the permutations. The dataset must outlive the batcher. */
int lstmd_batcher_create(const struct lstmd_dataset *ds, int order, int steps, int batch,
                         int rank, int world, uint64_t seed, struct lstmd_batcher **out);
void lstmd_batcher_destroy(struct lstmd_batcher *b);

/* Fills the next batch of this rank. *reset_state is set when the recurrent state must start
 * from zero (always in shuffle order; at the start and wrap of the streams in stream order). */
int lstmd_batcher_next(struct lstmd_batcher *b, struct lstmd_batch *out, int *reset_state);

struct lstmd_batcher_cursor lstmd_batcher_get_cursor(const struct lstmd_batcher *b);
/* Restores a cursor saved by get_cursor (LSTMD_EINVAL if it is out of range). */
int lstmd_batcher_set_cursor(struct lstmd_batcher *b, struct lstmd_batcher_cursor c);

/* A standalone batch buffer of T×B for this dataset (free with lstmd_batch_free). */
int lstmd_batch_alloc(const struct lstmd_dataset *ds, int steps, int batch, struct lstmd_batch *b);
void lstmd_batch_free(struct lstmd_batch *b);
/* Sets every input and target of b to zero (valid ids and values). */
void lstmd_batch_zero(struct lstmd_batch *b);
/* Copies columns [col0, col0 + dst->batch) of src into dst (same steps, kind and widths); a
 * part dst has no buffer for (NULL: a pipeline stage needs only inputs or targets) is skipped. */
void lstmd_batch_slice(const struct lstmd_batch *src, int col0, struct lstmd_batch *dst);

/* Fills `out` with window `w` of ds at batch column `col` (window w covers elements
 * [w·T, w·T + T + K)). Shared with evaluation, which walks windows in order. */
int lstmd_read_window(const struct lstmd_dataset *ds, uint64_t first, int steps, int batch,
                      int col, struct lstmd_batch *out, void *scratch);
/* Bytes of scratch lstmd_read_window needs for windows of `steps`. */
size_t lstmd_window_scratch_bytes(const struct lstmd_dataset *ds, int steps);
/* Number of windows of `steps` at stride `steps` in the split. */
uint64_t lstmd_window_count(const struct lstmd_dataset *ds, int steps);

/* data.seq_len's default (config.c's table reads it from here; prepare warns against it). */
#define LSTMD_DEFAULT_SEQ_LEN 128

#endif
