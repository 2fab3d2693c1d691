/* classify_eval.c — a classifier over whole splits and single sequences: loss, accuracy and the
 * confusion matrix of `lstmd eval` and the validation of `lstmd train`, and the probabilities
 * `lstmd classify` prints. Records are read as training reads them (lstmd_read_window). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "classify.h"
#include "eval_pool.h"
#include "kernels/cpu/blas_cpu.h"
#include "kernels/status.h"
#include "worker/data/batcher.h"

/* An evaluation's chunks of B sequences (the last one shorter), scored through eval_pool.h:
 * each chunk's summed loss goes to its slot, and every sequence's (label, prediction) to the
 * shared confusion counts. */
struct clf_job {
  const struct lstmd_model *m;
  const struct lstmd_dataset *ds;
  int T, B, C;
  uint64_t n;
  uint64_t confusion[LSTMD_MAX_CLASSES][LSTMD_MAX_CLASSES]; /* atomic */
};

struct clf_state {
  struct lstmd_clf_workspace *ws;
  void *scratch;
};

static void clf_close(void *ctx, void *state) {
  (void)ctx;
  struct clf_state *st = state;
  if (!st) return;
  lstmd_clf_workspace_destroy(st->ws);
  free(st->scratch);
  free(st);
}

static int clf_open(void *ctx, int helper, void **state) {
  (void)helper; /* one workspace serves every chunk: open it now */
  const struct clf_job *j = ctx;
  struct clf_state *st = calloc(1, sizeof *st);
  *state = st;
  if (!st || !(st->scratch = malloc(lstmd_window_scratch_bytes(j->ds, j->T)))) return LSTMD_ENOMEM;
  return lstmd_clf_workspace_create(j->m, j->T, j->B, &st->ws);
}

static int clf_score(void *ctx, void *state, uint64_t chunk, double *sum) {
  struct clf_job *j = ctx;
  struct clf_state *st = state;
  const uint64_t first = chunk * (uint64_t)j->B;
  const int cols = j->n - first < (uint64_t)j->B ? (int)(j->n - first) : j->B;
  struct lstmd_batch *cb = lstmd_clf_workspace_batch(st->ws);
  lstmd_batch_zero(cb); /* columns past the split: empty */
  for (int col = 0; col < cols; col++)
    LSTMD_TRY(lstmd_read_window(j->ds, first + (uint64_t)col, j->T, j->B, col, cb, st->scratch));
  const double l = lstmd_clf_forward(j->m, st->ws, 0.0f);
  if (isnan(l)) return LSTMD_EFORMAT;
  *sum = l;
  const float *z = lstmd_clf_workspace_logits(st->ws);
  for (int col = 0; col < cols; col++) {
    int best = 0;
    for (int k = 1; k < j->C; k++)
      if (z[col * j->C + k] > z[col * j->C + best]) best = k;
    __atomic_fetch_add(&j->confusion[cb->labels[col]][best], 1, __ATOMIC_RELAXED);
  }
  return LSTMD_OK;
}

/* Threads as infer.c's evaluation takes them: as many as BLAS was given, as the memory allows
 * with a workspace of about T·B·(9·L·D·H + 3·D·H + 5·H + 2·max(In, D·H) + In) floats each (the
 * arena of lstmd_clf_workspace_create). */
static int clf_threads(const struct clf_job *j) {
  const struct lstmd_model_shape *s = &j->m->shape;
  const double D = s->bidirectional ? 2 : 1, H = s->hidden;
  const double in = s->width > 0 ? s->width : s->embed, wide = in > D * H ? in : D * H;
  const double bytes =
      4.0 * j->T * j->B * (9.0 * s->layers * D * H + 3.0 * D * H + 5.0 * H + 2.0 * wide + in);
  return lstmd_eval_threads_fit(bytes, lstmd_cpu_blas_threads());
}

int lstmd_clf_evaluate_shared(const struct lstmd_model *m, const struct lstmd_dataset *ds, int B,
                              const struct lstmd_eval_share *share, struct lstmd_clf_eval *res) {
  memset(res, 0, sizeof *res);
  const int C = res->classes = m->shape.classes;
  const uint64_t n = ds->info.count;
  if ((uint64_t)B > n) B = (int)n;
  if (B < 1) B = 1;
  struct clf_job *j = calloc(1, sizeof *j);
  const uint64_t count = (n + (uint64_t)B - 1) / (uint64_t)B, slots = count + (uint64_t)C * C;
  const struct lstmd_eval_pool pool = {count, share, j, clf_open, clf_score, clf_close};
  double *sums = NULL;
  int rc = j ? LSTMD_OK : LSTMD_ENOMEM;
  if (!rc && slots > INT_MAX) rc = LSTMD_ECONFIG; /* combine's count is an int */
  if (!rc && !(sums = calloc(slots, sizeof *sums))) rc = LSTMD_ENOMEM;
  if (!rc) {
    *j = (struct clf_job){m, ds, (int)ds->info.width, B, C, n, {{0}}};
    rc = lstmd_eval_pool_run(&pool, clf_threads(j), sums);
    for (int a = 0; a < C; a++) /* counts, exact in a double up to 2^53 */
      for (int b = 0; b < C; b++) sums[count + (uint64_t)a * C + b] = (double)j->confusion[a][b];
  }
  rc = lstmd_eval_pool_combine(&pool, sums, (int)slots, rc); /* failed or not */
  double loss = 0.0;
  for (uint64_t c = 0; !rc && c < count; c++) loss += sums[c];
  for (int a = 0; !rc && a < C; a++)
    for (int b = 0; b < C; b++) {
      const uint64_t k = (uint64_t)sums[count + (uint64_t)a * C + b];
      res->confusion[a][b] = k;
      res->sequences += k;
      if (a == b) res->correct += k;
    }
  res->loss = res->sequences ? loss / (double)res->sequences : NAN;
  free(sums);
  free(j);
  return rc;
}

int lstmd_clf_evaluate(const struct lstmd_model *m, const struct lstmd_dataset *ds, int B,
                       struct lstmd_clf_eval *res) {
  return lstmd_clf_evaluate_shared(m, ds, B, NULL, res);
}

int lstmd_clf_predict(const struct lstmd_model *m, struct lstmd_clf_workspace *ws,
                      const int32_t *ids, const float *x, int n, double *probs) {
  struct lstmd_batch *cb = lstmd_clf_workspace_batch(ws);
  if (n < 1 || n > cb->steps || cb->batch != 1 || !cb->ids != !ids || !cb->x != !x)
    return LSTMD_EINVAL;
  if (ids) {
    memset(cb->ids, 0, sizeof(int32_t) * (size_t)cb->steps);
    memcpy(cb->ids, ids, sizeof(int32_t) * (size_t)n);
  } else {
    const size_t W = (size_t)cb->width;
    memset(cb->x, 0, sizeof(float) * (size_t)cb->steps * W);
    memcpy(cb->x, x, sizeof(float) * (size_t)n * W);
  }
  cb->lengths[0] = n;
  cb->labels[0] = 0;
  if (isnan(lstmd_clf_forward(m, ws, 0.0f))) return LSTMD_EINVAL;
  const int C = m->shape.classes;
  const float *z = lstmd_clf_workspace_logits(ws);
  double mx = z[0], sum = 0;
  for (int k = 1; k < C; k++) mx = z[k] > mx ? z[k] : mx;
  for (int k = 0; k < C; k++) sum += (probs[k] = exp(z[k] - mx));
  for (int k = 0; k < C; k++) probs[k] /= sum;
  return LSTMD_OK;
}
