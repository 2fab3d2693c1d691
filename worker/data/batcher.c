/* batcher.c — data orders (shuffle, stream) and window reads with pread; see batcher.h. */
#include "batcher.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"

struct lstmd_batcher {
  const struct lstmd_dataset *ds;
  int order, T, B, rank, world;
  uint64_t seed;
  uint64_t n_windows;  /* shuffle: windows in the split */
  uint64_t *perm;      /* shuffle: permutation of the current epoch */
  uint64_t max_offset; /* shuffle, series: window i starts at i·T + offset[i] <= i·T + this */
  uint32_t *offset;    /* shuffle, series: this epoch's offsets (NULL: none) */
  uint64_t stream_len; /* stream: elements per stream */
  uint64_t stream_windows;
  struct lstmd_batcher_cursor cur;
  int need_reset; /* stream: the next batch starts the streams over */
  void *scratch;
};

static int horizon_of(const struct lstmd_dataset *ds) {
  return ds->info.kind == LSTMD_DATASET_TEXT ? 1 : ds->info.horizon;
}

uint64_t lstmd_window_count(const struct lstmd_dataset *ds, int T) {
  if (ds->info.kind == LSTMD_DATASET_CLASSIFY) return ds->info.count; /* a window = a sequence */
  uint64_t K = (uint64_t)horizon_of(ds);
  return ds->info.count < K ? 0 : (ds->info.count - K) / (uint64_t)T;
}

size_t lstmd_window_scratch_bytes(const struct lstmd_dataset *ds, int T) {
  /* series: raw rows with the history the window statistics read, then the normalised copy */
  if (ds->info.kind == LSTMD_DATASET_TEXT) return ((size_t)T + 1) * ds->elem_bytes;
  if (ds->info.kind == LSTMD_DATASET_CLASSIFY) return ds->elem_bytes;
  return 2 * ((size_t)T + (size_t)lstmd_series_history(&ds->tf, T) + (size_t)horizon_of(ds)) *
         ds->elem_bytes;
}

int lstmd_read_window(const struct lstmd_dataset *ds, uint64_t first, int T, int B, int col,
                      struct lstmd_batch *out, void *scratch) {
  const int K = horizon_of(ds);
  if (ds->info.kind == LSTMD_DATASET_CLASSIFY) { /* `first`: the record; T >= its width */
    LSTMD_TRY(lstmd_dataset_read(ds, first, 1, scratch));
    const uint8_t *rec = scratch;
    if (T < ds->info.width || lstmd_classify_record_check(&ds->info, rec) != LSTMD_OK) {
      lstmd_errorf("%s: record %llu is corrupt, or longer than %d steps", ds->path,
                   (unsigned long long)first, T);
      return LSTMD_EFORMAT;
    }
    uint32_t label, len;
    const uint8_t *ids = lstmd_classify_record_get(rec, &label, &len);
    if (ds->info.numeric) { /* values, normalised as prepare measured the training split */
      const float mean = ds->info.mean[0], std = ds->info.std[0];
      for (int t = 0; t < T; t++) {
        float v = 0.0f;
        if ((uint32_t)t < len) memcpy(&v, ids + 4 * (size_t)t, 4);
        out->x[(size_t)t * B + col] = (uint32_t)t < len ? (v - mean) / std : 0.0f;
      }
    } else {
      for (int t = 0; t < T; t++) out->ids[(size_t)t * B + col] = (uint32_t)t < len ? ids[t] : 0;
    }
    out->lengths[col] = (int32_t)len;
    out->labels[col] = (int32_t)label;
    return LSTMD_OK;
  }
  if (ds->info.kind == LSTMD_DATASET_TEXT) {
    LSTMD_TRY(lstmd_dataset_read(ds, first, (uint64_t)T + K, scratch));
    const uint8_t *tok = scratch;
    for (int t = 0; t <= T; t++)
      if (tok[t] >= ds->info.vocab_size) { /* a rank that did not verify the whole file */
        lstmd_errorf("%s: token id %d at %llu is outside the vocabulary (corrupt file)", ds->path,
                     tok[t], (unsigned long long)(first + (uint64_t)t));
        return LSTMD_EFORMAT;
      }
    for (int t = 0; t < T; t++) {
      out->ids[(size_t)t * B + col] = tok[t];
      out->targets[(size_t)t * B + col] = tok[t + 1];
    }
    return LSTMD_OK;
  }
  const int W = ds->info.width;
  const uint64_t want = (uint64_t)lstmd_series_history(&ds->tf, T);
  const uint64_t hist = first < want ? first : want, n = hist + (uint64_t)T + (uint64_t)K;
  LSTMD_TRY(lstmd_dataset_read(ds, first - hist, n, scratch));
  const float *rows = scratch, *mean = ds->info.mean, *std = ds->info.std;
  float *z = (float *)scratch + n * (uint64_t)W;
  for (uint64_t i = 0; i < n; i++)
    for (int w = 0; w < W; w++) z[i * W + w] = (rows[i * W + w] - mean[w]) / std[w];
  float shift[LSTMD_MAX_COLUMNS], scale[LSTMD_MAX_COLUMNS];
  const float *z0 = z + hist * (uint64_t)W;
  lstmd_series_window_stats(&ds->tf, z0, (int)hist, T, W, shift, scale);
  lstmd_series_window_apply(&ds->tf, z0, T, W, K, shift, scale, B, col, out->x, out->y);
  return LSTMD_OK;
}

int lstmd_batch_alloc(const struct lstmd_dataset *ds, int T, int B, struct lstmd_batch *b) {
  const size_t N = (size_t)T * B;
  memset(b, 0, sizeof *b);
  b->steps = T;
  b->batch = B;
  if (ds->info.kind == LSTMD_DATASET_CLASSIFY) { /* ids, or one value per step (numeric) */
    b->width = ds->info.numeric ? 1 : 0;
    if (ds->info.numeric) b->x = malloc(N * sizeof *b->x);
    else b->ids = malloc(N * sizeof *b->ids);
    b->lengths = calloc((size_t)B, sizeof *b->lengths);
    b->labels = calloc((size_t)B, sizeof *b->labels);
    if ((b->ids || b->x) && b->lengths && b->labels) return LSTMD_OK;
  } else if (ds->info.kind == LSTMD_DATASET_TEXT) {
    b->ids = malloc(N * sizeof *b->ids);
    b->targets = malloc(N * sizeof *b->targets);
    if (b->ids && b->targets) return LSTMD_OK;
  } else {
    b->width = ds->info.width;
    b->horizon = ds->info.horizon;
    b->x = malloc(N * b->width * sizeof *b->x);
    b->y = malloc(N * b->horizon * sizeof *b->y);
    if (b->x && b->y) return LSTMD_OK;
  }
  lstmd_batch_free(b);
  return LSTMD_ENOMEM;
}

void lstmd_batch_free(struct lstmd_batch *b) {
  free(b->ids);
  free(b->targets);
  free(b->x);
  free(b->y);
  free(b->lengths);
  free(b->labels);
  memset(b, 0, sizeof *b);
}

void lstmd_batch_zero(struct lstmd_batch *b) {
  const size_t tb = (size_t)b->steps * b->batch;
  if (b->ids) memset(b->ids, 0, tb * sizeof *b->ids);
  if (b->targets) memset(b->targets, 0, tb * sizeof *b->targets);
  if (b->x) memset(b->x, 0, tb * b->width * sizeof *b->x);
  if (b->y) memset(b->y, 0, tb * b->horizon * sizeof *b->y);
  if (b->lengths) memset(b->lengths, 0, (size_t)b->batch * sizeof *b->lengths); /* empty columns */
  if (b->labels) memset(b->labels, 0, (size_t)b->batch * sizeof *b->labels);
}

void lstmd_batch_slice(const struct lstmd_batch *src, int col0, struct lstmd_batch *dst) {
  const int n = dst->batch, W = src->width, K = src->horizon;
  if (src->lengths && dst->lengths)
    memcpy(dst->lengths, src->lengths + col0, (size_t)n * sizeof *src->lengths);
  if (src->labels && dst->labels)
    memcpy(dst->labels, src->labels + col0, (size_t)n * sizeof *src->labels);
  for (int t = 0; t < src->steps; t++) {
    const size_t from = (size_t)t * src->batch + col0, to = (size_t)t * n;
    if (src->ids && dst->ids) memcpy(dst->ids + to, src->ids + from, n * sizeof *src->ids);
    if (src->targets && dst->targets)
      memcpy(dst->targets + to, src->targets + from, n * sizeof *src->targets);
    if (src->x && dst->x) memcpy(dst->x + to * W, src->x + from * W, (size_t)n * W * sizeof *src->x);
    if (src->y && dst->y) memcpy(dst->y + to * K, src->y + from * K, (size_t)n * K * sizeof *src->y);
  }
}

/* Fisher–Yates permutation of the windows for `epoch`, from its own random stream; then, for a
 * series, each window's offset from the same stream. */
static void shuffle_epoch(struct lstmd_batcher *b, uint64_t epoch) {
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, b->seed, 0x5eed0000ULL + epoch);
  for (uint64_t i = 0; i < b->n_windows; i++) b->perm[i] = i;
  for (uint64_t i = b->n_windows - 1; i > 0; i--) {
    uint64_t j = lstmd_rng_below(&rng, i + 1), t = b->perm[i];
    b->perm[i] = b->perm[j];
    b->perm[j] = t;
  }
  for (uint64_t i = 0; b->offset && i < b->n_windows; i++)
    b->offset[i] = (uint32_t)lstmd_rng_below(&rng, b->max_offset + 1);
}

int lstmd_batcher_create(const struct lstmd_dataset *ds, int order, int T, int B, int rank,
                         int world, uint64_t seed, struct lstmd_batcher **out) {
  *out = NULL;
  struct lstmd_batcher *b = calloc(1, sizeof *b);
  if (!b) return LSTMD_ENOMEM;
  *b = (struct lstmd_batcher){.ds = ds, .order = order, .T = T, .B = B, .rank = rank,
                              .world = world, .seed = seed, .need_reset = 1};
  const uint64_t K = (uint64_t)horizon_of(ds), streams = (uint64_t)B * world;
  int rc = LSTMD_OK;
  if (order == LSTMD_ORDER_SHUFFLE) {
    b->n_windows = lstmd_window_count(ds, T);
    /* A series' windows start at a random offset within [0, T) of i·T, drawn per window and
     * epoch. At i·T alone every window began at the same phase of any season dividing T
     * (seq_len 48 on hourly data: always midnight), and the model learned that phase only:
     * windows starting at other hours (eval's from the split's first row, predict's from the
     * input's length) forecast worse than persistence. T − 1 rows are kept for the offsets, so
     * every epoch has the same number of windows (one fewer than without, unless the split's
     * rows beyond the whole windows already hold them). */
    if (ds->info.kind == LSTMD_DATASET_SERIES && b->n_windows > 0) {
      const uint64_t span = ds->info.count - K;
      if (span >= 2 * (uint64_t)T - 1) b->n_windows = (span - ((uint64_t)T - 1)) / (uint64_t)T;
      b->max_offset = span - b->n_windows * (uint64_t)T;
      if (b->max_offset > (uint64_t)T - 1) b->max_offset = (uint64_t)T - 1;
    }
    if (b->n_windows == 0) {
      lstmd_errorf("%s: %llu elements hold no window of seq_len %d (+%llu targets)", ds->path,
                   (unsigned long long)ds->info.count, T, (unsigned long long)K);
      rc = LSTMD_ECONFIG;
    } else if (!(b->perm = malloc(b->n_windows * sizeof *b->perm)) ||
               (b->max_offset && !(b->offset = malloc(b->n_windows * sizeof *b->offset)))) {
      rc = LSTMD_ENOMEM;
    } else {
      shuffle_epoch(b, 0);
    }
  } else {
    b->stream_len = ds->info.count < K ? 0 : (ds->info.count - K) / streams;
    b->stream_windows = b->stream_len / (uint64_t)T;
    if (b->stream_windows == 0) {
      lstmd_errorf("%s: %llu elements cut into %llu streams hold no window of seq_len %d", ds->path,
                   (unsigned long long)ds->info.count, (unsigned long long)streams, T);
      rc = LSTMD_ECONFIG;
    }
  }
  if (!rc && !(b->scratch = malloc(lstmd_window_scratch_bytes(ds, T)))) rc = LSTMD_ENOMEM;
  if (rc) {
    lstmd_batcher_destroy(b);
    return rc;
  }
  *out = b;
  return LSTMD_OK;
}

void lstmd_batcher_destroy(struct lstmd_batcher *b) {
  if (!b) return;
  free(b->perm);
  free(b->offset);
  free(b->scratch);
  free(b);
}

int lstmd_batcher_next(struct lstmd_batcher *b, struct lstmd_batch *out, int *reset_state) {
  const uint64_t T = (uint64_t)b->T;
  if (b->order == LSTMD_ORDER_SHUFFLE) {
    *reset_state = 1;
    const uint64_t global = (uint64_t)b->B * b->world;
    for (uint64_t g = 0; g < global; g++) {
      if (b->cur.position == b->n_windows) {
        b->cur.epoch++;
        b->cur.position = 0;
        shuffle_epoch(b, b->cur.epoch);
      }
      uint64_t w = b->perm[b->cur.position++];
      uint64_t col = g - (uint64_t)b->rank * b->B;
      uint64_t first = b->ds->info.kind == LSTMD_DATASET_CLASSIFY ? w : w * T;
      if (b->offset) first += b->offset[w];
      if (g >= (uint64_t)b->rank * b->B && col < (uint64_t)b->B)
        LSTMD_TRY(lstmd_read_window(b->ds, first, b->T, b->B, (int)col, out, b->scratch));
    }
    return LSTMD_OK;
  }
  if (b->cur.position == b->stream_windows) {
    b->cur.epoch++;
    b->cur.position = 0;
    b->need_reset = 1;
  }
  *reset_state = b->need_reset;
  b->need_reset = 0;
  for (int col = 0; col < b->B; col++) {
    uint64_t stream = (uint64_t)b->rank * b->B + col;
    uint64_t first = stream * b->stream_len + b->cur.position * T;
    LSTMD_TRY(lstmd_read_window(b->ds, first, b->T, b->B, col, out, b->scratch));
  }
  b->cur.position++;
  return LSTMD_OK;
}

struct lstmd_batcher_cursor lstmd_batcher_get_cursor(const struct lstmd_batcher *b) {
  return b->cur;
}

int lstmd_batcher_set_cursor(struct lstmd_batcher *b, struct lstmd_batcher_cursor c) {
  uint64_t limit = b->order == LSTMD_ORDER_SHUFFLE ? b->n_windows : b->stream_windows;
  /* A series checkpoint from before the offsets counted one more window per epoch: its cursor
   * at that epoch's end is this epoch's end. */
  if (b->offset && c.position > limit && c.position <= lstmd_window_count(b->ds, b->T))
    c.position = limit;
  if (c.position > limit) {
    lstmd_errorf("the data cursor (epoch %llu, position %llu) is beyond the %llu %s of %s for "
                 "this seq_len and batch", (unsigned long long)c.epoch,
                 (unsigned long long)c.position, (unsigned long long)limit,
                 b->order == LSTMD_ORDER_SHUFFLE ? "windows" : "windows per stream", b->ds->path);
    return LSTMD_EFORMAT;
  }
  b->cur = c;
  if (b->order == LSTMD_ORDER_SHUFFLE) shuffle_epoch(b, c.epoch);
  /* A restored stream cursor continues with the carried state the checkpoint restores. */
  b->need_reset = b->order == LSTMD_ORDER_STREAM && c.position == 0 && c.epoch == 0;
  return LSTMD_OK;
}
