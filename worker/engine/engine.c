/* engine.c — choosing an engine, and the pieces the data-parallel engines share (engine.h). */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/cpu/blas_cpu.h"
#include "kernels/clock.h"
#include "kernels/status.h"
#include "gpu_backend.h"
#include "worker/model/infer.h"

int lstmd_engine_create(enum lstmd_engine_kind kind, struct lstmd_model *m,
                        const struct lstmd_engine_config *cfg, struct lstmd_comm *comm,
                        struct lstmd_engine **out) {
  *out = NULL;
  struct lstmd_engine base = {.model = m, .cfg = *cfg, .comm = comm,
                              .rank = comm ? lstmd_comm_rank(comm) : 0,
                              .world = comm ? lstmd_comm_size(comm) : 1};
  switch (kind) {
    case LSTMD_ENGINE_CPU:
      return lstmd_engine_cpu_create(&base, out);
    case LSTMD_ENGINE_PIPE:
      return lstmd_engine_pipe_create(&base, out);
    case LSTMD_ENGINE_GPU: {
      const struct lstmd_gpu_backend *gpu = lstmd_gpu_backend();
      if (gpu) return gpu->engine_create(&base, out);
      lstmd_errorf("GPU backend not loaded: %s", lstmd_gpu_backend_why());
      return LSTMD_EUNSUPPORTED;
    }
  }
  return LSTMD_EINVAL;
}

void lstmd_engine_destroy(struct lstmd_engine *e) {
  if (e) e->ops->destroy(e);
}

int lstmd_engine_cpu_threads(const struct lstmd_engine *e) {
  const int local_ranks = e->comm ? lstmd_comm_local_size(e->comm) : 1;
  const int threads = e->cfg.threads > 0 ? e->cfg.threads : lstmd_cpu_cores() / local_ranks;
  return threads < 1 ? 1 : threads;
}

size_t lstmd_engine_bucket_floats(const struct lstmd_engine_config *cfg) {
  const size_t n = (size_t)(cfg->bucket_mb * 1048576.0 / sizeof(float));
  return n < 1024 ? 1024 : n > (1u << 30) ? (1u << 30) : n;
}

int lstmd_engine_run_windows(struct lstmd_engine *e, const struct lstmd_step_input *in,
                             struct lstmd_step_result *out, lstmd_window_fn window,
                             void (*reset)(struct lstmd_engine *e)) {
  *out = (struct lstmd_step_result){0};
  for (int a = 0; a < in->windows; a++) {
    int zero_state = 0;
    const struct lstmd_batch *batch = in->next_window(in->ctx, &zero_state);
    if (zero_state) reset(e);
    double loss = 0.0, waited = 0.0;
    const double t0 = lstmd_now_s();
    LSTMD_TRY(window(e, batch, in->grad_scale, in->first_window + (uint64_t)a, a == 0,
                     a == in->windows - 1, &loss, &waited));
    out->busy_s += lstmd_now_s() - t0 - waited;
    out->loss_sum += loss;
    out->comm_wait_s += waited;
  }
  return LSTMD_OK;
}

int lstmd_engine_combine_eval_sums(void *ctx, double *sums, int n, int status) {
  const struct lstmd_eval_combine *ec = ctx;
  struct lstmd_engine *e = ec->e;
  const double limit = e->cfg.comm_timeout_s > 0
                           ? e->cfg.comm_timeout_s + 2.0 * (lstmd_now_s() - ec->began) : 0.0;
  int failed_rank = -1;
  const int rc = lstmd_comm_agree_within(e->comm, status, &failed_rank, limit,
                                         "the vote after the shared evaluation");
  if (rc && e->rank == 0 && failed_rank > 0) /* rank 0 reports; the failed rank may not have */
    lstmd_errorf("rank %d could not score its share of the validation windows (%s); no val_loss "
                 "this time", failed_rank, lstmd_strerror(rc));
  if (rc) return rc;
  return lstmd_comm_allreduce_sum_f64_within(e->comm, sums, n, limit,
                                             "the sum of the evaluation's chunks")
             ? LSTMD_ECOMM
             : LSTMD_OK;
}

int lstmd_engine_evaluate_shared(struct lstmd_engine *e, struct lstmd_model *m,
                                 const struct lstmd_dataset *val, double *mean_loss,
                                 uint64_t *tokens) {
  struct lstmd_eval_combine ec = {e, lstmd_now_s()};
  const struct lstmd_eval_share share = {e->rank, e->world, lstmd_engine_combine_eval_sums, &ec};
  double loss = 0.0;
  uint64_t n = 0;
  const int rc = lstmd_evaluate_shared(m, val, e->cfg.seq_len, e->cfg.batch,
                                       e->world > 1 ? &share : NULL, &loss, &n);
  if (!rc && e->rank == 0) *mean_loss = loss, *tokens = n;
  return rc;
}

int lstmd_engine_evaluate_everywhere(struct lstmd_engine *e, const struct lstmd_dataset *val,
                                     int threads, int status, double *mean_loss,
                                     uint64_t *tokens) {
  struct lstmd_model whole = *e->model; /* the other ranks' copy: params from rank 0 */
  const size_t bytes = e->model->n_params * sizeof(float);
  float *copy = NULL;
  int rc = status;
  if (e->world > 1) {
    if (!rc && e->rank != 0) {
      copy = aligned_alloc(64, (bytes + 63) / 64 * 64);
      rc = copy ? LSTMD_OK : LSTMD_ENOMEM;
      whole.params = copy;
    }
    /* nobody is left alone in the broadcast; every rank comes here from the step (bounded) */
    rc = lstmd_comm_agree_within(e->comm, rc, NULL, e->cfg.comm_timeout_s,
                                 "the vote before the evaluation's parameter broadcast");
    if (!rc && lstmd_comm_bcast(e->comm, whole.params, bytes, 0)) rc = LSTMD_ECOMM;
  }
  const int blas_threads = lstmd_cpu_blas_threads();
  if (threads > 0) lstmd_cpu_set_blas_threads(threads);
  if (!rc) rc = lstmd_engine_evaluate_shared(e, &whole, val, mean_loss, tokens);
  lstmd_cpu_set_blas_threads(blas_threads);
  free(copy);
  return rc;
}

int lstmd_engine_gather_dp_state(struct lstmd_engine *e, const float *mine, float *h, float *c) {
  const int L = e->model->shape.layers, B = e->cfg.batch, N = e->world;
  const size_t H = (size_t)e->model->shape.hidden, local = (size_t)L * B * H;
  if (N == 1) {
    memcpy(h, mine, local * sizeof(float));
    memcpy(c, mine + local, local * sizeof(float));
    return LSTMD_OK;
  }
  float *all = e->rank == 0 ? malloc(2 * local * N * sizeof(float)) : NULL;
  if (e->rank == 0 && !all) lstmd_errorf("out of memory gathering the recurrent state");
  /* voted first: rank 0 without its buffer must not leave the others in the gather */
  int rc = lstmd_comm_agree(e->comm, e->rank == 0 && !all ? LSTMD_ENOMEM : LSTMD_OK, NULL);
  if (!rc) rc = lstmd_comm_gather(e->comm, mine, 2 * local * sizeof(float), all, 0);
  /* all: [rank][h|c][L][B][H] -> h, c: [L][N·B][H] with global column r·B + b */
  for (int r = 0; !rc && e->rank == 0 && r < N; r++)
    for (int l = 0; l < L; l++) {
      const float *src = all + (size_t)r * 2 * local + (size_t)l * B * H;
      const size_t at = ((size_t)l * N * B + (size_t)r * B) * H;
      memcpy(h + at, src, (size_t)B * H * sizeof(float));
      memcpy(c + at, src + local, (size_t)B * H * sizeof(float));
    }
  free(all);
  return rc;
}

void lstmd_engine_slice_dp_state(const struct lstmd_engine *e, const float *h, const float *c,
                                 float *mine) {
  const int L = e->model->shape.layers, B = e->cfg.batch, global = B * e->world;
  const size_t H = (size_t)e->model->shape.hidden, local = (size_t)L * B * H;
  for (int l = 0; l < L; l++) {
    const size_t at = ((size_t)l * global + (size_t)e->rank * B) * H;
    memcpy(mine + (size_t)l * B * H, h + at, (size_t)B * H * sizeof(float));
    memcpy(mine + local + (size_t)l * B * H, c + at, (size_t)B * H * sizeof(float));
  }
}
