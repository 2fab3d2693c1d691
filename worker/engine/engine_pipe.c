/* engine_pipe.c — the pipeline engine (engine.h): the stacked LSTM split into S stages on S
 * ranks, combined with data parallelism over D = world / S replicas, on CPU ranks.
 *
 * 1. Grid. Rank r is stage s = r mod S of replica d = r / S, so a replica's stages are
 *    consecutive ranks (the fastest links) and rank 0 is (0, 0). start() splits the world into
 *    the replica's pipeline communicator (color d, key s: p2p between stages, the norm) and the
 *    stage's data-parallel communicator (color s, key d: the gradient all-reduce) — collective
 *    calls made at one agreed point, after every rank accepted the config.
 * 2. Work. A step's windows (optim.grad_accum A) are cut into M column micro-batches each: the
 *    U = A·M units; each unit's window into K time chunks. The stage runs the op list
 *    pipe_schedule.c makes for (schedule, S, s, U, K) — F, B (the gradient to the stage below
 *    first) and W items — the same function on every rank, so both ends of every message agree
 *    on its order. Each item runs on the rank's threads, one column slice of the unit each, with
 *    single-threaded BLAS (as the CPU engine does).
 * 3. Units live in P slots (P = the schedule's peak: U for fill-drain, min(S − s, U) for 1f1b);
 *    unit u takes slot u mod P. The receives of a unit (its K activation chunks from below, its
 *    K gradient chunks from above) are posted as soon as its slot is free — for fill-drain all at
 *    step start — into the slot's workspaces or message buffers (engine_pipe_messages.c); its
 *    sends go out as each chunk is done, and a slot's sends are waited for before the slot
 *    takes its next unit. Every wait has the deadline train.comm_timeout_s (comm/p2p.h): a
 *    stalled neighbour ends the job with a message naming it, never a hang.
 * 4. State. The (h, c) carried between windows (stream order) lives in one store per stage,
 *    [layers, B, H]: a unit's first chunk starts from its columns (zero after a reset or in
 *    shuffle order), its last chunk writes them back. Dropout masks are keyed on the window
 *    counter, the layer, the window's t and the global column d·B + m·b + slice column, so they
 *    are the one-rank run's masks.
 * 5. Gradients and the update. After the step's last W the slices' gradients over the stage's
 *    parameter range [lo, hi) are summed in slice order, then over the replicas (a reducer on
 *    the data-parallel communicator). The clipping norm is global: per-tensor sums of squares,
 *    summed over the replica's stages (each tensor has one owner, or two with a split, see 6.)
 *    and then in tensor order on every rank, so every rank sees the same norm and verdict. The
 *    optimizer updates the range only; rank 0 gathers the ranges (and the carried state) for
 *    checkpoints and evaluation.
 * 6. model.stage_split=balanced (pipe_grid.h): the first R_s rows of stage s's first input
 *    projection are stage s − 1's — its parameters (the end of its range, inside weight_ih),
 *    their forward, their gradient of x and their dW_ih (model_stage.h). A message between the
 *    two then carries R_s more columns per row after the H activations or gradients; the
 *    per-tensor sums of squares of the split weight_ih come in two parts, one per stage. */
#define _GNU_SOURCE
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/p2p.h"
#include "comm/reducer.h"
#include "kernels/clock.h"
#include "kernels/cpu/blas_cpu.h"
#include "kernels/cpu/dense_cpu.h"
#include "kernels/cpu/recur_gemm.h"
#include "kernels/optim_rules.h"
#include "kernels/status.h"
#include "engine_pipe_internal.h"
#include "pipe_grid.h"
#include "pool.h"
#include "worker/data/batcher.h"
#include "worker/io/nvtx.h"
#include "worker/io/trace.h"
#include "worker/model/infer.h"
#include "worker/model/model_stage.h"
#include "worker/model/optim.h"

static struct pipe_engine *pipe_of(struct lstmd_engine *e) { return (struct pipe_engine *)e; }

/* ---- set-up ---- */

static int alloc_slots(struct pipe_engine *p) {
  const size_t below = p->g.K * pipe_slot_chunk_floats(p, p->g.st.rows_in);
  const size_t above = p->g.K * pipe_slot_chunk_floats(p, p->g.st.rows_out);
  p->slots = calloc((size_t)p->g.P, sizeof *p->slots);
  if (!p->slots) return LSTMD_ENOMEM;
  for (int i = 0; i < p->g.P; i++) {
    struct pipe_slot *sl = &p->slots[i];
    for (int c = 0; c < p->n_slices; c++)
      LSTMD_TRY(lstmd_stage_ws_create(p->base.model, &p->g.st, p->g.T, p->g.Tc, p->cb[c],
                                      p->base.cfg.dropout, &sl->ws[c]));
    if (!p->g.st.first && below && (!(sl->act_in = malloc(below * sizeof(float))) ||
                                    !(sl->grad_out = malloc(below * sizeof(float)))))
      return LSTMD_ENOMEM;
    if (!p->g.st.last && above && (!(sl->act_out = malloc(above * sizeof(float))) ||
                                   !(sl->grad_in = malloc(above * sizeof(float)))))
      return LSTMD_ENOMEM;
    if (!(sl->sends = malloc(4 * (size_t)p->g.K * sizeof *sl->sends))) return LSTMD_ENOMEM;
  }
  return LSTMD_OK;
}

static void pipe_destroy(struct lstmd_engine *e);
static const struct lstmd_engine_ops kPipeOps;

int lstmd_engine_pipe_create(const struct lstmd_engine *base, struct lstmd_engine **out) {
  *out = NULL;
  const struct lstmd_engine_config *cfg = &base->cfg;
  struct pipe_engine *p = calloc(1, sizeof *p);
  if (!p) return LSTMD_ENOMEM;
  p->base = *base;
  p->base.ops = &kPipeOps;
  const struct lstmd_model *m = base->model;
  int rc = lstmd_pipe_grid_init(&p->g, base);
  if (rc) {
    pipe_destroy(&p->base);
    return rc;
  }
  p->threads = lstmd_engine_cpu_threads(base); /* one column slice each (see 2.) */
  p->n_slices = p->threads < p->g.b ? p->threads : p->g.b;
  if (p->n_slices > kMaxSlices) p->n_slices = kMaxSlices;
  p->blas_threads = p->threads / p->n_slices;
  p->direct = p->n_slices == 1;
  for (int c = 0, col = 0; c < p->n_slices; c++) {
    p->c0[c] = col;
    p->cb[c] = p->g.b / p->n_slices + (c < p->g.b % p->n_slices);
    col += p->cb[c];
  }
  const size_t grad_bytes = (m->n_params * sizeof(float) + 63) / 64 * 64;
  for (int c = 0; !rc && c < p->n_slices; c++)
    if (!(p->grads[c] = c == 0 ? m->grads : aligned_alloc(64, grad_bytes))) rc = LSTMD_ENOMEM;
  const size_t state = (size_t)p->g.st.layers * p->g.B * p->g.H;
  if (!rc && (!(p->state_h = calloc(state, sizeof(float))) ||
              !(p->state_c = calloc(state, sizeof(float)))))
    rc = LSTMD_ENOMEM;
  if (!rc && (!(p->recv_act = calloc(2 * (size_t)p->g.U * p->g.K, sizeof *p->recv_act)) ||
              !(p->recv_grad = calloc(2 * (size_t)p->g.U * p->g.K, sizeof *p->recv_grad))))
    rc = LSTMD_ENOMEM;
  if (!rc) rc = lstmd_pipe_windows_alloc(&p->g, &m->shape, &p->win, &p->reset);
  if (!rc) rc = alloc_slots(p);
  if (!rc) rc = lstmd_pool_create(p->n_slices, &p->pool);
  if (!rc && lstmd_cpu_recur_fast(p->g.H)) { /* W_hh packed once per step (model_stage.h) */
    const size_t bytes = (lstmd_cpu_pack_floats(4 * p->g.H, p->g.H) * sizeof(float) + 63) / 64 * 64;
    for (int i = 0; !rc && i < 2 * p->g.st.layers; i++)
      if (!(p->packed[i] = aligned_alloc(64, bytes))) rc = LSTMD_ENOMEM;
    for (int i = 0; !rc && i < p->g.st.layers; i++) {
      p->pk.rows[i] = p->packed[2 * i];
      p->pk.cols[i] = p->packed[2 * i + 1];
    }
  }
  p->bucket_floats = lstmd_engine_bucket_floats(cfg);
  if (rc) {
    if (rc == LSTMD_ENOMEM) lstmd_errorf("pipeline engine: out of memory for stage %d", p->g.s);
    pipe_destroy(&p->base);
    return rc;
  }
  lstmd_cpu_set_blas_threads(p->blas_threads);
  *out = &p->base;
  return LSTMD_OK;
}

static void pipe_destroy(struct lstmd_engine *e) {
  struct pipe_engine *p = pipe_of(e);
  lstmd_p2p_destroy(p->p2p);
  lstmd_reducer_destroy(p->reducer);
  lstmd_comm_free(p->pp);
  lstmd_comm_free(p->dp);
  lstmd_pool_destroy(p->pool);
  for (int i = 0; p->slots && i < p->g.P; i++) {
    struct pipe_slot *sl = &p->slots[i];
    for (int c = 0; c < p->n_slices; c++) lstmd_stage_ws_destroy(sl->ws[c]);
    free(sl->act_in);
    free(sl->act_out);
    free(sl->grad_in);
    free(sl->grad_out);
    free(sl->sends);
  }
  free(p->slots);
  lstmd_pipe_windows_free(&p->g, p->win, p->reset);
  for (int c = 1; c < p->n_slices; c++) free(p->grads[c]);
  for (int i = 0; i < 2 * LSTMD_MAX_LAYERS; i++) free(p->packed[i]);
  free(p->state_h);
  free(p->state_c);
  free(p->recv_act);
  free(p->recv_grad);
  lstmd_pipe_grid_free(&p->g);
  free(p);
}

/* Collective over the world (see 1.): the grid's communicators, p2p and the reducer. */
static int pipe_start(struct lstmd_engine *e, const struct lstmd_optim *o,
                      const struct lstmd_train_progress *pr) {
  (void)o, (void)pr; /* the host model is the engine's: nothing to copy */
  struct pipe_engine *p = pipe_of(e);
  if (p->pp) return LSTMD_OK;
  /* Each step voted over the world: a split's or p2p's collectives come first, so a rank that
   * failed only its allocation must say so before the others enter the next collective. */
  LSTMD_TRY(lstmd_comm_agree(e->comm, lstmd_comm_split(e->comm, p->g.d, p->g.s, &p->pp), NULL));
  LSTMD_TRY(lstmd_comm_agree(e->comm, lstmd_comm_split(e->comm, p->g.s, p->g.d, &p->dp), NULL));
  LSTMD_TRY(lstmd_comm_agree(e->comm, lstmd_p2p_create(p->pp, e->cfg.comm_timeout_s, &p->p2p), NULL));
  lstmd_p2p_name_ranks(p->p2p, "stage"); /* the replica's pipeline communicator: rank = stage */
  if (p->g.D > 1) {
    LSTMD_TRY(lstmd_reducer_create(p->dp, &p->reducer)); /* local: setup votes on start() */
    lstmd_reducer_set_timeout(p->reducer, e->cfg.comm_timeout_s);
  }
  return LSTMD_OK;
}

/* ---- one step (the messages: engine_pipe_messages.c) ---- */

/* The pool's body: the item in flight on column slice c. */
static void run_item(void *arg, int c) {
  struct pipe_engine *p = arg;
  const int u = p->item_unit, k = p->item_chunk, a = u / p->g.M, m = u % p->g.M;
  const int t0 = k * p->g.Tc, t1 = t0 + p->g.Tc;
  struct pipe_slot *sl = &p->slots[u % p->g.P];
  struct lstmd_stage_ws *ws = sl->ws[c];
  const struct lstmd_model *model = p->base.model;
  const int col = m * p->g.b + p->c0[c]; /* this slice's first column among the rank's B */
  if (p->direct) pipe_use_message_rows(p, sl, k);
  switch (p->item_kind) {
    case LSTMD_PIPE_F: {
      if (k == 0) { /* the unit's window and initial state (see 4.) */
        lstmd_batch_slice(&p->win[a], col, lstmd_stage_ws_batch(ws));
        if (!p->base.cfg.carry_state || p->reset[a]) lstmd_stage_ws_zero_state(ws);
        else lstmd_stage_ws_set_state(ws, p->state_h, p->state_c, p->g.B, col);
      }
      pipe_slice_message(p, sl, ACT_IN, c, k);
      const struct lstmd_dropout_key key = {p->base.cfg.seed, p->in->first_window + (uint64_t)a,
                                            p->g.d * p->g.B + col};
      p->loss[c] += lstmd_stage_forward(model, ws, &p->pk, t0, t1, p->in->grad_scale,
                                        p->base.cfg.dropout > 0 ? &key : NULL);
      pipe_slice_message(p, sl, ACT_OUT, c, k);
      if (k == p->g.K - 1 && p->base.cfg.carry_state)
        lstmd_stage_ws_get_final_state(ws, p->state_h, p->state_c, p->g.B, col);
      break;
    }
    case LSTMD_PIPE_B:
      pipe_slice_message(p, sl, GRAD_IN, c, k);
      lstmd_stage_backward_input(model, ws, &p->pk, t0, t1);
      pipe_slice_message(p, sl, GRAD_OUT, c, k);
      break;
    case LSTMD_PIPE_W:
      lstmd_stage_backward_weight(model, ws, t0, t1, p->grads[c]);
      break;
  }
}

/* One op of the list: its receive, its compute on the slices, its send (see 3.). */
static int run_op(struct pipe_engine *p, const struct lstmd_pipe_op *op,
                  struct lstmd_step_result *out) {
  const int u = op->unit, k = op->chunk;
  struct pipe_slot *sl = &p->slots[u % p->g.P];
  if (op->kind == LSTMD_PIPE_F && k == 0) { /* the slot's previous unit must be fully sent */
    for (int i = 0; i < sl->n_sends; i++) LSTMD_TRY(lstmd_p2p_wait(p->p2p, sl->sends[i], NULL));
    sl->n_sends = 0;
  }
  if (op->kind == LSTMD_PIPE_F && !p->g.st.first) LSTMD_TRY(pipe_wait_receives(p, ACT_IN, u, k, out));
  if (op->kind == LSTMD_PIPE_B && !p->g.st.last) LSTMD_TRY(pipe_wait_receives(p, GRAD_IN, u, k, out));
  p->item_kind = op->kind;
  p->item_unit = u;
  p->item_chunk = k;
  const double t0 = lstmd_now_s();
  lstmd_pool_run(p->pool, run_item, p);
  const double t1 = lstmd_now_s();
  out->busy_s += t1 - t0;
  lstmd_pipe_trace_item(p->base.trace, op->kind, u, k, t0, t1);
  if (op->kind == LSTMD_PIPE_F && !p->g.st.last) LSTMD_TRY(pipe_send_item(p, sl, ACT_OUT, u, k));
  if (op->kind == LSTMD_PIPE_B && !p->g.st.first) LSTMD_TRY(pipe_send_item(p, sl, GRAD_OUT, u, k));
  /* the unit's last W frees its slot for unit u + P, whose receives can go out now */
  if (op->kind == LSTMD_PIPE_W && k == 0 && u + p->g.P < p->g.U) LSTMD_TRY(pipe_post_receives(p, u + p->g.P));
  return LSTMD_OK;
}

/* Sums the slices' gradients of [lo, hi) into model->grads, then over the replicas (see 5.). */
static int reduce_gradients(struct pipe_engine *p, double *comm_wait_s) {
  const size_t lo = p->g.lo[p->g.s], hi = p->g.hi[p->g.s];
  float *g0 = p->grads[0];
  for (int c = 1; c < p->n_slices; c++)
    for (size_t j = lo; j < hi; j++) g0[j] += p->grads[c][j];
  *comm_wait_s = 0.0;
  if (!p->reducer) return LSTMD_OK;
  for (size_t end = hi; end > lo;) { /* from the end, as backward would */
    const size_t start = end - lo > p->bucket_floats ? end - p->bucket_floats : lo;
    lstmd_reducer_submit(p->reducer, g0 + start, end - start);
    end = start;
  }
  lstmd_nvtx_push("all-reduce wait");
  const double t0 = lstmd_now_s();
  int rc = lstmd_reducer_wait_all(p->reducer, comm_wait_s);
  if (p->base.trace && *comm_wait_s > 0)
    lstmd_trace_event(p->base.trace, LSTMD_TRACE_TID_MAIN, "wait for all-reduce", t0,
                      lstmd_now_s(), NULL);
  lstmd_nvtx_pop();
  return rc;
}

static int pipe_step(struct lstmd_engine *e, const struct lstmd_step_input *in,
                     struct lstmd_step_result *out) {
  struct pipe_engine *p = pipe_of(e);
  *out = (struct lstmd_step_result){0};
  if (in->windows != p->g.A) {
    lstmd_errorf("pipeline engine: %d windows in a step, set up for %d", in->windows, p->g.A);
    return LSTMD_EINVAL;
  }
  for (int a = 0; a < p->g.A; a++) { /* the source's buffer is valid until its next call */
    const struct lstmd_batch *w = in->next_window(in->ctx, &p->reset[a]);
    lstmd_batch_slice(w, 0, &p->win[a]);
  }
  const struct lstmd_model *m = e->model;
  for (int i = 0; p->packed[0] && i < p->g.st.layers; i++) {
    const float *w_hh = m->params + m->tensors[lstmd_pipe_first_tensor_of_layer(m, p->g.st.layer0 + i) + 1].offset;
    lstmd_cpu_pack_rows(4 * p->g.H, p->g.H, w_hh, p->packed[2 * i]);
    lstmd_cpu_pack_cols(4 * p->g.H, p->g.H, w_hh, p->packed[2 * i + 1]);
  }
  const size_t lo = p->g.lo[p->g.s], hi = p->g.hi[p->g.s];
  for (int c = 0; c < p->n_slices; c++) {
    memset(p->grads[c] + lo, 0, (hi - lo) * sizeof(float));
    p->loss[c] = 0.0;
  }
  p->in = in;
  for (int u = 0; u < p->g.U && u < p->g.P; u++) LSTMD_TRY(pipe_post_receives(p, u));
  lstmd_nvtx_push("pipeline items");
  int rc = LSTMD_OK;
  for (int i = 0; !rc && i < p->g.n_ops; i++) rc = run_op(p, &p->g.ops[i], out);
  lstmd_nvtx_pop();
  p->in = NULL;
  if (rc) return rc; /* not agreed: the trainer aborts the job (no wait on pending requests) */
  const double t_sends = lstmd_now_s();
  LSTMD_TRY(lstmd_p2p_wait_all(p->p2p, NULL)); /* every send taken by its receiver */
  out->p2p_wait_s += lstmd_now_s() - t_sends;
  for (int i = 0; i < p->g.P; i++) p->slots[i].n_sends = 0;
  for (int c = 0; c < p->n_slices; c++) out->loss_sum += p->loss[c];
  /* Only the stage with the loss multiplies by grad_scale: a NaN one (LSTMD_FAULT=nan_grad,
   * fault.h: this rank's gradients NaN before the sum over the ranks) poisons the others here */
  if (!p->g.st.last && isnan(in->grad_scale)) p->grads[0][lo] = NAN;
  return reduce_gradients(p, &out->comm_wait_s);
}

/* ---- the update, and the state rank 0 needs ---- */

static int pipe_optim_step(struct lstmd_engine *e, struct lstmd_optim *o, int report,
                           struct lstmd_optim_outcome *out) {
  struct pipe_engine *p = pipe_of(e);
  double *grad_norm = &out->grad_norm;
  (void)report; /* the norm is on the host anyway */
  *out = (struct lstmd_optim_outcome){0};
  const struct lstmd_model *m = e->model;
  double sums[LSTMD_MAX_TENSORS] = {0};
  const size_t lo = p->g.lo[p->g.s], hi = p->g.hi[p->g.s];
  for (int t = p->g.t_lo; t < p->g.t_hi; t++) { /* a split weight_ih: this stage's rows (see 6.) */
    const size_t a = m->tensors[t].offset, z = a + m->tensors[t].count;
    const size_t from = a > lo ? a : lo, to = z < hi ? z : hi;
    sums[t] = to > from ? lstmd_cpu_sumsq(to - from, m->grads + from) : 0.0;
  }
  LSTMD_TRY(lstmd_pipe_global_norm(&p->g, p->pp, m, sums, e->cfg.comm_timeout_s, grad_norm));
  if (!lstmd_optim_norm_usable(*grad_norm, o->cfg.clip_norm)) return LSTMD_ENONFINITE;
  lstmd_nvtx_push("optimizer");
  lstmd_optim_apply(o, m->params, m->grads, p->g.lo[p->g.s], p->g.hi[p->g.s], *grad_norm);
  lstmd_nvtx_pop();
  return LSTMD_OK;
}

static int pipe_sync_host(struct lstmd_engine *e, struct lstmd_optim *o,
                          struct lstmd_train_progress *pr) {
  struct pipe_engine *p = pipe_of(e);
  if (pr) pr->loss_scale = 0.0;
  LSTMD_TRY(lstmd_pipe_gather_ranges(&p->g, p->pp, e->model->params, LSTMD_OK));
  if (o) LSTMD_TRY(lstmd_pipe_gather_ranges(&p->g, p->pp, o->m, LSTMD_OK));
  if (o && o->v) LSTMD_TRY(lstmd_pipe_gather_ranges(&p->g, p->pp, o->v, LSTMD_OK));
  return LSTMD_OK;
}

static int pipe_evaluate(struct lstmd_engine *e, const struct lstmd_dataset *val,
                         double *mean_loss, uint64_t *tokens, double *accuracy) {
  (void)accuracy; /* no classifiers in pipelines */
  struct pipe_engine *p = pipe_of(e);
  const int gathered = lstmd_pipe_gather_ranges(&p->g, p->pp, e->model->params, LSTMD_OK);
  return lstmd_engine_evaluate_everywhere(e, val, p->threads, gathered, mean_loss, tokens);
}

static int pipe_gather_state(struct lstmd_engine *e, float *h, float *c) {
  struct pipe_engine *p = pipe_of(e);
  return lstmd_pipe_gather_state(&p->g, e, p->state_h, p->state_c, h, c);
}

static int pipe_set_state(struct lstmd_engine *e, const float *h, const float *c) {
  struct pipe_engine *p = pipe_of(e);
  lstmd_pipe_slice_state(&p->g, e, h, c, p->state_h, p->state_c);
  return LSTMD_OK;
}

static double pipe_loss_scale(const struct lstmd_engine *e) {
  (void)e;
  return 0.0;
}

/* The stage split for the startup line: "layers" or "balanced (stage 0 computes rows [0, 992)
 * of weight_ih_l1, ...; FLOP model per token 9.36M/9.87M, was 6.31M/12.9M)". */
static void describe_split(const struct pipe_engine *p, char *buf, size_t n) {
  if (p->base.cfg.stage_split != LSTMD_SPLIT_BALANCED) {
    snprintf(buf, n, "layers");
    return;
  }
  int rows[LSTMD_MAX_LAYERS];
  double work[2][LSTMD_MAX_LAYERS]; /* balanced (g.rows), then whole layers */
  for (int pass = 0; pass < 2; pass++)
    lstmd_pipe_split_rows(&p->base.model->shape, p->g.S, p->base.cfg.stage_layers,
                          (long)p->g.T * p->g.b, !pass, rows, work[pass]);
  size_t at = (size_t)snprintf(buf, n, "balanced (");
  for (int s = 1, layer = p->base.cfg.stage_layers[0]; s < p->g.S && at < n;
       layer += p->base.cfg.stage_layers[s++])
    at += (size_t)snprintf(buf + at, n - at, "%sstage %d computes rows [0, %d) of weight_ih_l%d",
                           s > 1 ? ", " : "", s - 1, p->g.rows[s], layer);
  for (int pass = 0; pass < 2; pass++)
    for (int s = 0; s < p->g.S && at < n; s++)
      at += (size_t)snprintf(buf + at, n - at, "%s%.3gM",
                             s ? "/" : pass ? ", was " : "; FLOP model per token ",
                             work[pass][s] / 1e6);
  if (at < n) snprintf(buf + at, n - at, ")");
}

static void pipe_describe(const struct lstmd_engine *e, char *buf, size_t n) {
  const struct pipe_engine *p = (const struct pipe_engine *)e;
  char blas[96], split[384];
  lstmd_cpu_blas_describe(blas, sizeof blas);
  describe_split(p, split, sizeof split);
  /* each column slice decides its fold (its window: model_stage.h) */
  int folded = 0;
  for (int c = 0; p->slots && c < p->n_slices; c++)
    folded += p->slots[0].ws[c] && lstmd_stage_ws_folds_embedding(p->slots[0].ws[c]);
  char fold[96] = "";
  if (folded && folded == p->n_slices)
    snprintf(fold, sizeof fold, ", the embedding folded into layer 0");
  else if (folded)
    snprintf(fold, sizeof fold, ", the embedding folded into layer 0 in %d of %d column slices",
             folded, p->n_slices);
  snprintf(buf, n, "CPU pipeline of %d stages (rank 0: layers %d-%d%s; split: %s) x %d replica%s, %s "
           "schedule, %d unit%s of %d column%s x %d time chunk%s per step, %d thread%s per rank, "
           "%s with %d thread%s per call", p->g.S, p->g.st.layer0,
           p->g.st.layer0 + p->g.st.layers - 1, fold, split,
           p->g.D, p->g.D == 1 ? "" : "s", lstmd_pipe_kind_name(p->g.kind), p->g.U, p->g.U == 1 ? "" : "s",
           p->g.b, p->g.b == 1 ? "" : "s", p->g.K, p->g.K == 1 ? "" : "s", p->n_slices,
           p->n_slices == 1 ? "" : "s", blas, p->blas_threads, p->blas_threads == 1 ? "" : "s");
}

static const struct lstmd_engine_ops kPipeOps = {
    .name = "pipeline",
    .destroy = pipe_destroy,
    .start = pipe_start,
    .step = pipe_step,
    .optim_step = pipe_optim_step,
    .sync_host = pipe_sync_host,
    .evaluate = pipe_evaluate,
    .gather_state = pipe_gather_state,
    .set_state = pipe_set_state,
    .loss_scale = pipe_loss_scale,
    .describe = pipe_describe,
};
