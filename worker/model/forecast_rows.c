/* forecast_rows.c — see forecast_rows.h. Every forecast is printed with "%.9g" (a float's
 * round-trip digits), which glibc formats through its multi-precision path, ~170 ns a number: in
 * a perf profile of an int8 `predict` at H 256 (24 values a row) printf and its helpers took ~30%
 * of the time, as much as the model. So a chunk's rows are formatted into memory, the first half
 * by the caller and the second by a helper thread, and then written in order. */
#include "forecast_rows.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"

struct text {
  size_t first;
  const float *vals;
  size_t r0, r1;
  int cols;
  char *buf;
  size_t len, cap;
  int failed; /* out of memory */
};

/* Room for one append of at most 32 bytes with its NUL (one number with its comma: 16 at most;
 * an index: 20; the newline); snprintf's count is clamped below, so a longer one is cut, not
 * run past the buffer. */
static int reserve(struct text *t) {
  if (t->cap - t->len >= 32) return 1;
  const size_t cap = t->cap ? 2 * t->cap : 4096;
  char *b = realloc(t->buf, cap);
  if (!b) return 0;
  t->buf = b;
  t->cap = cap;
  return 1;
}

static size_t clamp(int n) { return n < 0 ? 0 : n > 31 ? 31 : (size_t)n; }

static void *format_rows(void *arg) {
  struct text *t = arg;
  for (size_t r = t->r0; r < t->r1; r++) {
    if (!reserve(t)) goto oom;
    t->len += clamp(snprintf(t->buf + t->len, 32, "%zu", t->first + r));
    for (int c = 0; c < t->cols; c++) {
      if (!reserve(t)) goto oom;
      t->len += clamp(snprintf(t->buf + t->len, 32, ",%.9g", t->vals[r * (size_t)t->cols + c]));
    }
    if (!reserve(t)) goto oom;
    t->buf[t->len++] = '\n';
  }
  return NULL;
oom:
  t->failed = 1;
  return NULL;
}

int lstmd_forecast_rows_write(FILE *out, size_t first, const float *vals, size_t n, int cols) {
  struct text half[2] = {{first, vals, 0, n / 2, cols, NULL, 0, 0, 0},
                         {first, vals, n / 2, n, cols, NULL, 0, 0, 0}};
  pthread_t helper;
  /* A few rows are not worth a thread; without one, the caller formats both halves. */
  const int threaded = n >= 256 && pthread_create(&helper, NULL, format_rows, &half[1]) == 0;
  format_rows(&half[0]);
  if (threaded) pthread_join(helper, NULL);
  else format_rows(&half[1]);
  int rc = half[0].failed || half[1].failed ? LSTMD_ENOMEM : LSTMD_OK;
  for (int h = 0; h < 2 && !rc; h++)
    if (half[h].len && fwrite(half[h].buf, 1, half[h].len, out) != half[h].len) rc = LSTMD_EIO;
  free(half[0].buf);
  free(half[1].buf);
  return rc;
}
