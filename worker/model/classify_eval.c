/* classify_eval.c — a classifier over whole splits and single sequences: loss, accuracy and the
 * confusion matrix of `lstmd eval` and the validation of `lstmd train`, and the probabilities
 * `lstmd classify` prints. Records are read as training reads them (lstmd_read_window). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "classify.h"
#include "kernels/status.h"
#include "worker/data/batcher.h"

int lstmd_clf_evaluate(const struct lstmd_model *m, const struct lstmd_dataset *ds, int B,
                       struct lstmd_clf_eval *res) {
  memset(res, 0, sizeof *res);
  res->classes = m->shape.classes;
  const int T = ds->info.width, C = m->shape.classes;
  const uint64_t n = ds->info.count;
  if ((uint64_t)B > n) B = (int)n;
  if (B < 1) B = 1;
  struct lstmd_clf_workspace *ws = NULL;
  void *scratch = malloc(lstmd_window_scratch_bytes(ds, T));
  int rc = scratch ? lstmd_clf_workspace_create(m, T, B, &ws) : LSTMD_ENOMEM;
  struct lstmd_batch *cb = rc ? NULL : lstmd_clf_workspace_batch(ws);
  double loss = 0;
  for (uint64_t first = 0; !rc && first < n; first += (uint64_t)B) {
    const int cols = n - first < (uint64_t)B ? (int)(n - first) : B;
    lstmd_batch_zero(cb); /* columns past the split: empty */
    for (int col = 0; !rc && col < cols; col++)
      rc = lstmd_read_window(ds, first + (uint64_t)col, T, B, col, cb, scratch);
    if (rc) break;
    const double l = lstmd_clf_forward(m, ws, 0.0f);
    if (isnan(l)) {
      rc = LSTMD_EFORMAT;
      break;
    }
    loss += l;
    const float *z = lstmd_clf_workspace_logits(ws);
    for (int col = 0; col < cols; col++) {
      int best = 0;
      for (int k = 1; k < C; k++)
        if (z[col * C + k] > z[col * C + best]) best = k;
      res->confusion[cb->labels[col]][best]++;
      res->correct += best == cb->labels[col];
    }
    res->sequences += (uint64_t)cols;
  }
  res->loss = res->sequences ? loss / (double)res->sequences : NAN;
  lstmd_clf_workspace_destroy(ws);
  free(scratch);
  return rc;
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
