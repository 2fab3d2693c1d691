/* engine_gpu_eval.c — the GPU engine's evaluation (engine.h's evaluate) and its carried
 * recurrent state (gather_state, set_state). A text or series model is scored on the devices of
 * all ranks; a classifier by the CPU evaluator on rank 0 (engine_gpu.c, 8.). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "engine_gpu_internal.h"
#include "kernels/check.h"
#include "kernels/clock.h"
#include "worker/io/nvtx.h"
#include "worker/model/classify.h"

/* A classifier's validation loss: the CPU evaluator on rank 0's host model, brought up to the
 * device's parameters first (see 8.). */
static int clf_evaluate(struct gpu_engine *g, const struct lstmd_dataset *ds, double *mean_loss,
                        uint64_t *sequences, double *accuracy) {
  struct lstmd_model *m = g->base.model;
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(m->params, g->params, m->n_params * sizeof(float),
                                   cudaMemcpyDeviceToHost, g->compute));
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(g->compute));
  struct lstmd_clf_eval *res = malloc(sizeof *res);
  int rc = res ? lstmd_clf_evaluate(m, ds, g->base.cfg.batch, res) : LSTMD_ENOMEM;
  if (!rc) {
    *mean_loss = res->loss;
    *sequences = res->sequences;
    if (accuracy) *accuracy = res->sequences ? (double)res->correct / (double)res->sequences : NAN;
  }
  free(res);
  return rc;
}

/* Every rank scores its share of the windows, in chunks of B: chunk c on rank c mod N, the last
 * chunk padded with repeats of its first window, which are not scored. The chunk sums meet in
 * lstmd_engine_combine_eval_sums and are added in chunk order, so the loss does not depend on
 * the number of ranks (infer.h's lstmd_evaluate_shared, as the CPU engine does it). Inference
 * mode; the carried training state is left alone. A classifier is scored on rank 0. */
struct clf_work {
  struct gpu_engine *g;
  const struct lstmd_dataset *ds;
  double *mean_loss, *accuracy;
  uint64_t *sequences;
};
static int clf_work(void *ctx) {
  const struct clf_work *w = ctx;
  return clf_evaluate(w->g, w->ds, w->mean_loss, w->sequences, w->accuracy);
}

int lstmd_gpu_evaluate(struct lstmd_engine *e, const struct lstmd_dataset *ds, double *mean_loss,
                        uint64_t *tokens, double *accuracy) {
  struct gpu_engine *g = gpu_of(e);
  if (e->model->shape.kind == LSTMD_MODEL_CLASSIFY) { /* rank 0 alone, the others waiting for it
                                                       * as for a checkpoint write (comm.h) */
    struct clf_work w = {g, ds, mean_loss, accuracy, tokens};
    return lstmd_comm_solo(e->comm, 0, clf_work, &w, LSTMD_OK, NULL, e->cfg.comm_timeout_s,
                           "rank 0's classifier evaluation");
  }
  const int T = g->base.cfg.seq_len, B = g->base.cfg.batch;
  const uint64_t n = lstmd_window_count(ds, T), count = (n + (uint64_t)B - 1) / (uint64_t)B;
  if (n == 0 || count > INT_MAX) { /* the same on every rank: no collective below */
    lstmd_errorf("%s: %s for seq_len %d", ds->path,
                 n ? "more chunks of windows than an evaluation can count" : "too short for one window", T);
    return LSTMD_ECONFIG;
  }
  struct lstmd_eval_combine ec = {e, lstmd_now_s()};
  const int text = g->base.model->shape.kind == LSTMD_MODEL_TEXT;
  const size_t K = text ? 1 : (size_t)g->base.model->shape.horizon;
  struct lstmd_batch b;
  memset(&b, 0, sizeof b);
  void *scratch = malloc(lstmd_window_scratch_bytes(ds, T));
  float *rows = malloc((size_t)T * B * K * sizeof(float));
  double *sums = calloc(count, sizeof *sums);
  int rc = scratch && rows && sums ? lstmd_batch_alloc(ds, T, B, &b) : LSTMD_ENOMEM;
  lstmd_nvtx_push("evaluation");
  for (uint64_t c = (uint64_t)e->rank; !rc && c < count; c += (uint64_t)e->world) {
    const uint64_t w = c * (uint64_t)B;
    const int cols = n - w < (uint64_t)B ? (int)(n - w) : B; /* the rest repeat window w */
    for (int col = 0; !rc && col < B; col++)
      rc = lstmd_read_window(ds, (w + (uint64_t)(col < cols ? col : 0)) * (uint64_t)T, T, B, col,
                             &b, scratch);
    if (!rc) rc = lstmd_gpu_copy_batch(g, &b);
    if (!rc) rc = lstmd_cuda_model_eval(g->cm, g->params, rows);
    for (int t = 0; !rc && t < T; t++)
      for (int col = 0; col < cols; col++)
        for (size_t k = 0; k < K; k++) {
          const double v = rows[((size_t)t * B + col) * K + k];
          sums[c] += text ? v : v * v;
        }
  }
  lstmd_nvtx_pop();
  if (e->world > 1) rc = lstmd_engine_combine_eval_sums(&ec, sums, sums ? (int)count : 0, rc);
  double sum = 0.0;
  for (uint64_t c = 0; !rc && c < count; c++) sum += sums[c];
  lstmd_batch_free(&b);
  free(scratch);
  free(rows);
  free(sums);
  if (rc || e->rank != 0) return rc;
  *tokens = n * (uint64_t)T;
  *mean_loss = sum / ((double)*tokens * (double)K);
  return LSTMD_OK;
}

int lstmd_gpu_gather_state(struct lstmd_engine *e, float *h, float *c) {
  struct gpu_engine *g = gpu_of(e);
  const size_t local = (size_t)e->model->shape.layers * e->cfg.batch * e->model->shape.hidden;
  float *mine = malloc(2 * local * sizeof(float));
  int rc = mine ? lstmd_cuda_model_get_state(g->cm, mine, mine + local) : LSTMD_ENOMEM;
  rc = lstmd_comm_agree(e->comm, rc, NULL); /* none is left alone in the gather */
  if (!rc) rc = lstmd_engine_gather_dp_state(e, mine, h, c);
  free(mine);
  return rc;
}

int lstmd_gpu_set_state(struct lstmd_engine *e, const float *h, const float *c) {
  const size_t local = (size_t)e->model->shape.layers * e->cfg.batch * e->model->shape.hidden;
  float *mine = malloc(2 * local * sizeof(float));
  if (!mine) {
    lstmd_errorf("out of memory for the recurrent state");
    return LSTMD_ENOMEM;
  }
  lstmd_engine_slice_dp_state(e, h, c, mine);
  int rc = lstmd_cuda_model_set_state(gpu_of(e)->cm, mine, mine + local);
  free(mine);
  return rc;
}
