/* pipe_grid.c — the layout and host collectives both pipeline engines share (pipe_grid.h). */
#define _GNU_SOURCE
#include "pipe_grid.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/p2p.h"
#include "kernels/status.h"
#include "worker/data/batcher.h"
#include "worker/io/trace.h"

int lstmd_pipe_first_tensor_of_layer(const struct lstmd_model *m, int l) {
  return lstmd_layer_first_tensor(&m->shape, l);
}

/* Every stage's [lo, hi) of the flat buffer: contiguous, since the order is embedding, layer 0,
 * ..., layer L−1, head (model.h), and a split's rows are the first of weight_ih, the first
 * tensor of its layer (pipe_grid.h). */
static void stage_ranges(struct lstmd_pipe_grid *g, const struct lstmd_model *m,
                         const int *stage_layers) {
  const size_t H = (size_t)g->H;
  for (int s = 0, layer = 0; s < g->S; layer += stage_layers[s], s++) {
    const int next = layer + stage_layers[s];
    g->lo[s] = s == 0 ? 0
                      : m->tensors[lstmd_pipe_first_tensor_of_layer(m, layer)].offset +
                            (size_t)g->rows[s] * H;
    g->hi[s] = s == g->S - 1 ? m->n_params
                             : m->tensors[lstmd_pipe_first_tensor_of_layer(m, next)].offset +
                                   (size_t)g->rows[s + 1] * H;
    if (s == g->s) {
      g->t_lo = s == 0 ? 0 : lstmd_pipe_first_tensor_of_layer(m, layer);
      g->t_hi = s == g->S - 1 ? m->n_tensors
                              : lstmd_pipe_first_tensor_of_layer(m, next) + (g->rows[s + 1] > 0);
    }
  }
}

int lstmd_pipe_grid_init(struct lstmd_pipe_grid *g, const struct lstmd_engine *base) {
  memset(g, 0, sizeof *g);
  const struct lstmd_engine_config *cfg = &base->cfg;
  if (cfg->stages < 2 || base->world % cfg->stages || cfg->batch % cfg->micro_batches ||
      cfg->seq_len % cfg->time_chunks) {
    lstmd_errorf("pipeline engine: inconsistent layout (the config checks should have refused it)");
    return LSTMD_ECONFIG;
  }
  g->S = cfg->stages;
  g->D = base->world / g->S;
  g->s = base->rank % g->S;
  g->d = base->rank / g->S;
  g->A = cfg->windows;
  g->M = cfg->micro_batches;
  g->U = g->A * g->M;
  g->K = cfg->time_chunks;
  g->T = cfg->seq_len;
  g->Tc = g->T / g->K;
  g->B = cfg->batch;
  g->b = g->B / g->M;
  g->H = base->model->shape.hidden;
  g->kind = (enum lstmd_pipe_kind)cfg->schedule;
  int layer0 = 0;
  for (int s = 0; s < g->s; s++) layer0 += cfg->stage_layers[s];
  lstmd_pipe_split_rows(&base->model->shape, g->S, cfg->stage_layers, (long)g->T * g->b,
                        cfg->stage_split == LSTMD_SPLIT_BALANCED, g->rows, NULL);
  g->st = (struct lstmd_stage){layer0, cfg->stage_layers[g->s], g->s == 0, g->s == g->S - 1,
                               g->rows[g->s], g->s + 1 < g->S ? g->rows[g->s + 1] : 0};
  stage_ranges(g, base->model, cfg->stage_layers);
  g->P = lstmd_pipe_peak_units(g->kind, g->S, g->s, g->U, g->K);
  g->n_ops = (int)lstmd_pipe_op_count(g->U, g->K);
  if (g->P <= 0 || lstmd_pipe_check_tags(g->U, g->K)) return LSTMD_ECONFIG;
  if (!(g->ops = malloc((size_t)g->n_ops * sizeof *g->ops))) return LSTMD_ENOMEM;
  if (lstmd_pipe_schedule(g->kind, g->S, g->s, g->U, g->K, g->ops, (size_t)g->n_ops) != g->n_ops)
    return LSTMD_ECONFIG;
  return LSTMD_OK;
}

void lstmd_pipe_grid_free(struct lstmd_pipe_grid *g) {
  free(g->ops);
  g->ops = NULL;
}

int lstmd_pipe_windows_alloc(const struct lstmd_pipe_grid *g, const struct lstmd_model_shape *sh,
                             struct lstmd_batch **win, int **reset) {
  /* the batches of the dataset this model was made from (train_setup.c): the engine sees only
   * the model, and pipelines run text and series models only */
  struct lstmd_dataset ds = {.info = {.kind = sh->kind == LSTMD_MODEL_TEXT ? LSTMD_DATASET_TEXT
                                                                          : LSTMD_DATASET_SERIES,
                                      .width = sh->width, .horizon = sh->horizon}};
  *win = calloc((size_t)g->A, sizeof **win);
  *reset = calloc((size_t)g->A, sizeof **reset);
  if (!*win || !*reset) return LSTMD_ENOMEM;
  for (int a = 0; a < g->A; a++) LSTMD_TRY(lstmd_batch_alloc(&ds, g->T, g->B, &(*win)[a]));
  return LSTMD_OK;
}

void lstmd_pipe_windows_free(const struct lstmd_pipe_grid *g, struct lstmd_batch *win, int *reset) {
  for (int a = 0; win && a < g->A; a++) lstmd_batch_free(&win[a]);
  free(win);
  free(reset);
}

void lstmd_pipe_describe_item(char *buf, size_t n, int dir, int u, int k) {
  snprintf(buf, n, "%s of unit %d chunk %d", dir == LSTMD_P2P_UP ? "activations (F)" : "gradients (B)",
           u, k);
}

/* A trace event of item (u, k) on thread tid (see lstmd_pipe_trace_item). */
static void item_event(struct lstmd_trace *trace, int tid, const char *name, int u, int k,
                       double t0, double t1) {
  if (!trace) return;
  char args[64];
  snprintf(args, sizeof args, "{\"unit\":%d,\"chunk\":%d}", u, k);
  lstmd_trace_event(trace, tid, name, t0, t1, args);
}

void lstmd_pipe_trace_item(struct lstmd_trace *trace, enum lstmd_pipe_op_kind kind, int u, int k,
                           double t0, double t1) {
  static const char *const names[] = {"F", "B", "W"};
  item_event(trace, LSTMD_PIPE_TRACE_TID_ITEMS, names[kind], u, k, t0, t1);
}

int lstmd_pipe_wait_recv(struct lstmd_p2p *p2p, lstmd_p2p_req r, struct lstmd_trace *trace, int u,
                         int k, double *wait_s) {
  const double t0 = lstmd_now_s();
  LSTMD_TRY(lstmd_p2p_wait(p2p, r, NULL));
  const double t1 = lstmd_now_s();
  *wait_s += t1 - t0;
  item_event(trace, LSTMD_TRACE_TID_MAIN, "recv wait", u, k, t0, t1);
  return LSTMD_OK;
}

int lstmd_pipe_global_norm(const struct lstmd_pipe_grid *g, struct lstmd_comm *pp,
                           const struct lstmd_model *m, double *sums, double timeout_s,
                           double *norm) {
  (void)g;
  LSTMD_TRY(lstmd_comm_allreduce_sum_f64_within(pp, sums, m->n_tensors, timeout_s,
                                                "the gradient norm's all-reduce"));
  /* each tensor has one owner and the others added 0, or, split, two whose one addition is
   * commutative: the same bits on every rank; then in tensor order */
  double sq = 0.0;
  for (int t = 0; t < m->n_tensors; t++) sq += sums[t];
  *norm = sqrt(sq);
  return LSTMD_OK;
}

int lstmd_pipe_gather_ranges(const struct lstmd_pipe_grid *g, struct lstmd_comm *pp, float *buf,
                             int local) {
  if (g->d != 0) return local;
  size_t counts[LSTMD_MAX_LAYERS], displs[LSTMD_MAX_LAYERS];
  size_t n = 0;
  for (int s = 0; s < g->S; s++) {
    counts[s] = (g->hi[s] - g->lo[s]) * sizeof(float);
    displs[s] = g->lo[s] * sizeof(float);
    n = g->hi[s];
  }
  float *all = g->s == 0 ? malloc(n * sizeof(float)) : NULL;
  int rc = lstmd_comm_agree(pp, local ? local : g->s == 0 && !all ? LSTMD_ENOMEM : LSTMD_OK, NULL);
  if (!rc) rc = lstmd_comm_gatherv(pp, buf + g->lo[g->s], counts[g->s], all, counts, displs, 0);
  if (!rc && all) memcpy(buf, all, n * sizeof(float));
  free(all);
  return rc;
}

/* [layers, B, H] of rank (d, s) ↔ its block of a global [L, D·B, H] state. */
static void state_block(const struct lstmd_pipe_grid *g, const int *stage_layers, int s, int d,
                        float *block, float *global, int to_global) {
  const int GB = g->D * g->B;
  const size_t BH = (size_t)g->B * g->H;
  int layer0 = 0;
  for (int i = 0; i < s; i++) layer0 += stage_layers[i];
  for (int i = 0; i < stage_layers[s]; i++) {
    float *gl = global + ((size_t)(layer0 + i) * GB + (size_t)d * g->B) * g->H, *bl = block + i * BH;
    if (to_global) memcpy(gl, bl, BH * sizeof(float));
    else memcpy(bl, gl, BH * sizeof(float));
  }
}

int lstmd_pipe_gather_state(const struct lstmd_pipe_grid *g, const struct lstmd_engine *e,
                            const float *state_h, const float *state_c, float *h, float *c) {
  const int *layers = e->cfg.stage_layers;
  const size_t BH = (size_t)g->B * g->H, mine = (size_t)g->st.layers * BH;
  size_t *counts = calloc(2 * (size_t)e->world, sizeof *counts), *displs = counts + e->world;
  size_t total = 0;
  for (int r = 0; counts && r < e->world; r++) {
    counts[r] = 2 * (size_t)layers[r % g->S] * BH * sizeof(float);
    displs[r] = total;
    total += counts[r];
  }
  float *send = malloc(2 * mine * sizeof(float));
  float *all = e->rank == 0 ? malloc(total) : NULL;
  int rc = lstmd_comm_agree_alloc(e->comm, counts && send && (e->rank != 0 || all),
                                  2 * mine * sizeof(float) + (e->rank == 0 ? total : 0),
                                  "the carried state to checkpoint");
  if (!rc) {
    memcpy(send, state_h, mine * sizeof(float));
    memcpy(send + mine, state_c, mine * sizeof(float));
    rc = lstmd_comm_gatherv(e->comm, send, 2 * mine * sizeof(float), all, counts, displs, 0);
  }
  for (int r = 0; !rc && all && r < e->world; r++) {
    float *blk = (float *)((char *)all + displs[r]);
    const size_t n = (size_t)layers[r % g->S] * BH;
    state_block(g, layers, r % g->S, r / g->S, blk, h, 1);
    state_block(g, layers, r % g->S, r / g->S, blk + n, c, 1);
  }
  free(send);
  free(all);
  free(counts);
  return rc;
}

void lstmd_pipe_slice_state(const struct lstmd_pipe_grid *g, const struct lstmd_engine *e,
                            const float *h, const float *c, float *state_h, float *state_c) {
  state_block(g, e->cfg.stage_layers, g->s, g->d, state_h, (float *)h, 0);
  state_block(g, e->cfg.stage_layers, g->s, g->d, state_c, (float *)c, 0);
}
