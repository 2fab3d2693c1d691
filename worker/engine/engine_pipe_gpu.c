/* engine_pipe_gpu.c — pipeline stages on GPUs (engine.h): the GPU twin of engine_pipe.c, in the
 * GPU module. The grid, the units, the slots and the op list are pipe_grid.h's, so both
 * engines run the same items in the same order; the compute of an item is one cuDNN call per
 * time chunk (kernels/cuda/stage_cuda.h) on the rank's GPU.
 *
 * 1. Transfers between stages take one of two paths, chosen at start for the whole replica:
 *    a. NCCL send/recv on the four lanes of pipe_groups.h (comm/p2p_nccl.h), straight between
 *       the stages' device buffers. The host enqueues everything and never waits inside a step:
 *       a receive goes on its lane's stream behind an event of W(u − P, 0) (its slot is free),
 *       the op that needs it waits for its event; a send goes on its lane behind the op's event;
 *       a unit's first op waits for the last sends of the slot's previous unit. At the step's
 *       end the compute stream joins the lanes. The lanes' watchdog times every transfer against
 *       train.comm_timeout_s and names the item.
 *    b. When stages share a GPU (NCCL cannot run that), pinned host memory over MPI (comm/p2p.h):
 *       every receive of a unit is posted into the slot's pinned buffers as soon as the slot is
 *       free (at step start for fill-drain), the progress thread completes them while the GPU
 *       computes, and every wait has the deadline train.comm_timeout_s. A chunk's output is
 *       copied to the host and sent as soon as its item is done; B sends the input gradient
 *       before W computes the weight gradients.
 * 2. Dropout at a stage boundary is the CPU's mask (lstmd_dropout_mask_rows of the layer below,
 *    keyed on the window, the window's t and the global column), made on the device bit for bit
 *    (lstmd_cuda_dropout_mask_rows) per chunk and applied by the receiving stage to its input in
 *    F and to its input gradient in B; between the layers of one stage it is cuDNN's own.
 * 3. The update: per-tensor sums of squares on the device, read by the host, summed over the
 *    replica's stages in tensor order (lstmd_pipe_global_norm), then the step's decision
 *    (kernels/optim_rules.h: clip, fp16 overflow and the next loss scale, learning rate) is
 *    made on the host from that global norm — the same on every rank, so an fp16 overflow on
 *    any stage skips the update on all of them — and uploaded for the AdamW / SGD kernels, which
 *    update this stage's range. The host waits for the GPU at every step here (the host-staged
 *    transfers wait anyway); the data-parallel GPU engine's device-side decision is not needed.
 * 4. Gradients of the stage's range are summed over the replicas with lstmd_nccl (NCCL, or
 *    through the host when replicas share a GPU) on the stage's data-parallel communicator.
 * 5. The carried state (stream order) lives on the device per micro-batch column block m,
 *    [layers, b, H] in the data type; evaluation runs on rank 0's CPU from the gathered
 *    parameters (the stages' layers are on different GPUs). */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "comm/p2p.h"
#include "comm/p2p_nccl.h"
#include "engine.h"
#include "engine_gpu.h"
#include "kernels/check.h"
#include "kernels/clock.h"
#include "kernels/cuda/dense_cuda.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/cuda/stage_cuda.h"
#include "loss_scale.h"
#include "pipe_gpu.h"
#include "pipe_grid.h"
#include "pipe_groups.h"
#include "worker/io/checkpoint.h"
#include "worker/io/nvtx.h"
#include "worker/model/infer.h"
#include "worker/model/optim.h"
#include "worker/train/train_config.h"

static struct gpipe_engine *gp_of(struct lstmd_engine *e) { return (struct gpipe_engine *)e; }

static size_t carry_floats(const struct gpipe_engine *p) {
  return (size_t)p->g.st.layers * p->g.b * p->g.H; /* one of h or c of one block m */
}
static void *carry_at(const struct gpipe_engine *p, int m, int c) {
  return (char *)p->carry + ((size_t)2 * m + c) * carry_floats(p) * p->es;
}

static int device(void *pp, size_t bytes, const char *what) {
  void **p = pp;
  *p = NULL;
  if (bytes == 0) return LSTMD_OK;
  if (cudaMalloc(p, bytes) != cudaSuccess) {
    cudaGetLastError();
    *p = NULL;
    lstmd_errorf("CUDA: cannot allocate %.1f MiB for %s", (double)bytes / 1048576.0, what);
    return LSTMD_ENOMEM;
  }
  return cudaMemset(*p, 0, bytes) == cudaSuccess ? LSTMD_OK : LSTMD_ECUDA;
}

static int alloc_host(struct gpipe_engine *p) {
  const struct lstmd_model_shape *sh = &p->base.model->shape;
  const struct lstmd_pipe_grid *g = &p->g;
  const size_t n = (size_t)g->T * g->b;
  LSTMD_TRY(lstmd_pipe_windows_alloc(g, sh, &p->win, &p->reset));
  p->slots = calloc((size_t)g->P, sizeof *p->slots);
  p->units = calloc((size_t)g->U, sizeof *p->units);
  p->recv_act = calloc((size_t)g->U * g->K, sizeof *p->recv_act);
  p->recv_grad = calloc((size_t)g->U * g->K, sizeof *p->recv_grad);
  p->w0_op = calloc((size_t)g->U, sizeof *p->w0_op);
  if (!p->slots || !p->units || !p->recv_act || !p->recv_grad || !p->w0_op) return LSTMD_ENOMEM;
  for (int i = 0; i < g->n_ops; i++)
    if (g->ops[i].kind == LSTMD_PIPE_W && g->ops[i].chunk == 0) p->w0_op[g->ops[i].unit] = i;
  const int text = sh->kind == LSTMD_MODEL_TEXT;
  for (int i = 0; i < g->U; i++) { /* one per unit, so no host buffer is refilled in a step */
    struct lstmd_batch *u = &p->units[i];
    *u = (struct lstmd_batch){.steps = g->T, .batch = g->b, .width = p->win[0].width,
                              .horizon = p->win[0].horizon};
    if (g->st.first) LSTMD_TRY(text ? gpipe_pinned(&u->ids, n * sizeof *u->ids) : gpipe_pinned(&u->x, n * sh->width * sizeof(float)));
    if (g->st.last) LSTMD_TRY(text ? gpipe_pinned(&u->targets, n * sizeof *u->targets) : gpipe_pinned(&u->y, n * sh->horizon * sizeof(float)));
  }
  for (int i = 0; i < g->P; i++) {
    struct gslot *sl = &p->slots[i];
    if (!g->st.first && p->base.cfg.dropout > 0)
      LSTMD_TRY(device(&sl->mask, n * g->H * sizeof(float), "boundary dropout masks"));
    if (!(sl->sends = malloc(2 * (size_t)g->K * sizeof *sl->sends))) return LSTMD_ENOMEM;
    for (int j = 0; j < 2; j++)
      LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&sl->sent[j], cudaEventDisableTiming));
  }
  return LSTMD_OK;
}

static int alloc_device(struct gpipe_engine *p) {
  const struct lstmd_model *m = p->base.model;
  const size_t n = m->n_params * sizeof(float), T = (size_t)m->n_tensors * sizeof(double);
  LSTMD_TRY(device(&p->params, n, "parameters"));
  LSTMD_TRY(device(&p->grads, n, "gradients"));
  LSTMD_TRY(device(&p->m, n, "optimizer moments"));
  LSTMD_TRY(device(&p->v, n, "optimizer moments"));
  LSTMD_TRY(device(&p->d_loss, sizeof(double), "the loss sum"));
  LSTMD_TRY(device(&p->d_sums, T, "gradient sums"));
  LSTMD_TRY(device(&p->d_state, sizeof *p->d_state, "the optimizer's decision"));
  LSTMD_TRY(gpipe_pinned(&p->h_loss, sizeof(double)));
  LSTMD_TRY(gpipe_pinned(&p->h_sums, T));
  LSTMD_TRY(gpipe_pinned(&p->h_state, sizeof *p->h_state));
  const size_t carry = 2 * (size_t)p->g.M * carry_floats(p);
  LSTMD_TRY(device(&p->carry, carry * p->es, "the carried state"));
  LSTMD_TRY(device(&p->carry_f, carry * sizeof(float), "the carried state (fp32)"));
  if (!(p->carry_h = malloc(carry * sizeof(float)))) return LSTMD_ENOMEM;
  LSTMD_CHECK_CUDA(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking));
  LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&p->copied, cudaEventDisableTiming));
  LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&p->reduced, cudaEventDisableTiming));
  return LSTMD_OK;
}

static void gp_destroy(struct lstmd_engine *e);
static const struct lstmd_engine_ops kGpuPipeOps;

int lstmd_engine_pipe_gpu_create(const struct lstmd_engine *base, struct lstmd_engine **out) {
  *out = NULL;
  struct gpipe_engine *p = calloc(1, sizeof *p);
  if (!p) return LSTMD_ENOMEM;
  p->base = *base;
  p->base.ops = &kGpuPipeOps;
  const int prec = base->cfg.precision;
  p->dtype = prec == LSTMD_PRECISION_FP16 ? LSTMD_DT_F16
             : prec == LSTMD_PRECISION_BF16 ? LSTMD_DT_BF16 : LSTMD_DT_F32;
  p->fp16 = prec == LSTMD_PRECISION_FP16;
  p->es = lstmd_dtype_bytes(p->dtype);
  lstmd_loss_scaler_init(&p->seen.scaler);
  int rc = lstmd_pipe_grid_init(&p->g, base);
  if (!rc) rc = lstmd_cuda_use_device(base->cfg.gpu_device);
  p->device_ready = !rc;
  if (!rc) lstmd_cuda_describe_device(p->device_desc, sizeof p->device_desc);
  if (!rc) rc = alloc_device(p);
  if (!rc) rc = alloc_host(p);
  if (rc) {
    if (rc == LSTMD_ENOMEM) lstmd_errorf("GPU pipeline engine: out of memory for stage %d", p->g.s);
    gp_destroy(&p->base);
    return rc;
  }
  *out = &p->base; /* the cuDNN stage is made in start, after the collectives */
  return LSTMD_OK;
}

static void gp_destroy(struct lstmd_engine *e) {
  struct gpipe_engine *p = gp_of(e);
  const int comm_failed = (p->nccl && lstmd_nccl_failed(p->nccl)) ||
                          (p->lanes && lstmd_p2p_nccl_failed(p->lanes));
  if (p->stream && !comm_failed) cudaStreamSynchronize(p->stream); /* a failed one may never end */
  lstmd_p2p_destroy(p->p2p);
  lstmd_p2p_nccl_destroy(p->lanes);
  lstmd_nccl_destroy(p->nccl);
  lstmd_comm_free(p->pp);
  lstmd_comm_free(p->dp);
  lstmd_cuda_stage_destroy(p->cs);
  for (int i = 0; p->slots && i < p->g.P; i++) {
    struct gslot *sl = &p->slots[i];
    /* after a failed step MPI may still use the message buffers until the job ends */
    void *host[] = {p->abandoned ? NULL : sl->act_in, p->abandoned ? NULL : sl->grad_in,
                    p->abandoned ? NULL : sl->act_out, p->abandoned ? NULL : sl->grad_out};
    for (size_t j = 0; j < sizeof host / sizeof host[0]; j++)
      if (host[j]) cudaFreeHost(host[j]);
    cudaFree(sl->mask);
    free(sl->sends);
    for (int j = 0; j < 2; j++)
      if (sl->sent[j]) cudaEventDestroy(sl->sent[j]);
  }
  free(p->slots);
  for (int i = 0; p->units && i < p->g.U; i++) {
    void *host[] = {p->units[i].ids, p->units[i].targets, p->units[i].x, p->units[i].y};
    for (size_t j = 0; j < sizeof host / sizeof host[0]; j++)
      if (host[j]) cudaFreeHost(host[j]);
  }
  free(p->units);
  for (int i = 0; p->op_done && i < p->g.n_ops; i++) {
    if (p->op_done[i]) cudaEventDestroy(p->op_done[i]);
    if (p->recv_done[i]) cudaEventDestroy(p->recv_done[i]);
  }
  free(p->op_done);
  free(p->recv_done);
  free(p->w0_op);
  lstmd_pipe_windows_free(&p->g, p->win, p->reset);
  free(p->recv_act);
  free(p->recv_grad);
  if (p->device_ready) { /* cudaFree(NULL) alone would make a context on device 0 */
    void *dev[] = {p->params, p->grads, p->m, p->v, p->d_loss, p->d_sums, p->d_state, p->carry, p->carry_f};
    for (size_t j = 0; j < sizeof dev / sizeof dev[0]; j++) cudaFree(dev[j]);
    void *host[] = {p->h_loss, p->h_sums, p->h_state};
    for (size_t j = 0; j < sizeof host / sizeof host[0]; j++)
      if (host[j]) cudaFreeHost(host[j]);
    if (p->copied) cudaEventDestroy(p->copied);
    if (p->reduced) cudaEventDestroy(p->reduced);
    if (p->stream) cudaStreamDestroy(p->stream);
    cudaGetLastError();
  }
  free(p->carry_h);
  lstmd_pipe_grid_free(&p->g);
  free(p);
}

/* ---- start ---- */

static int make_stage(struct gpipe_engine *p) {
  const struct lstmd_engine_config *cfg = &p->base.cfg;
  struct lstmd_cuda_stage_config sc = {
      .layer0 = p->g.st.layer0, .layers = p->g.st.layers, .first = p->g.st.first,
      .last = p->g.st.last, .steps = p->g.T, .chunks = p->g.K, .batch = p->g.b, .slots = p->g.P,
      .dtype = p->dtype, .allow_tf32 = cfg->precision == LSTMD_PRECISION_TF32,
      .dropout = cfg->dropout, .seed = cfg->seed * 1000003ULL + (unsigned)p->base.rank};
  lstmd_gpu_model_layout(p->base.model, &sc.layout);
  if (sc.layout.layer_norm) { /* train_setup.c refuses it; the stages run cuDNN's plain LSTM */
    lstmd_errorf("GPU pipeline: the layer-normalised LSTM has no pipeline stages on the GPU");
    return LSTMD_EUNSUPPORTED;
  }
  LSTMD_TRY(lstmd_cuda_stage_create(&sc, p->stream, &p->cs));
  if (p->fp16) lstmd_cuda_stage_scale_gradients_by(p->cs, &p->d_state->scaler.scale);
  return LSTMD_OK;
}

/* Collective over the world: the fp16 loss scale from rank 0, the grid's communicators, p2p,
 * the replicas' gradient sum, then the stage (voted), then the parameters and moments. */
static int gp_start(struct lstmd_engine *e, const struct lstmd_optim *o,
                    const struct lstmd_train_progress *pr) {
  struct gpipe_engine *p = gp_of(e);
  const size_t n = e->model->n_params * sizeof(float);
  double saved[2] = {pr ? pr->loss_scale : 0.0, pr ? (double)pr->loss_scale_good_steps : 0.0};
  if (p->fp16) LSTMD_TRY(lstmd_comm_bcast(e->comm, saved, sizeof saved, 0));
  if (!p->pp) {
    /* Each step is voted over the world, not only over the communicator it runs on: a rank
     * whose split failed its allocation, or a replica whose transfers failed, must not leave
     * the others in the next collective. */
    LSTMD_TRY(lstmd_comm_agree(e->comm, lstmd_comm_split(e->comm, p->g.d, p->g.s, &p->pp), NULL));
    LSTMD_TRY(lstmd_comm_agree(e->comm, lstmd_comm_split(e->comm, p->g.s, p->g.d, &p->dp), NULL));
    LSTMD_TRY(lstmd_comm_agree(e->comm, gpipe_start_transfers(p), NULL));
    if (p->g.D > 1)
      LSTMD_TRY(lstmd_comm_agree(e->comm,
                                 lstmd_nccl_create(p->dp, p->g.hi[p->g.s] - p->g.lo[p->g.s],
                                                   e->cfg.comm_timeout_s, &p->nccl),
                                 NULL));
  }
  if (!p->cs) LSTMD_TRY(lstmd_comm_agree(e->comm, make_stage(p), NULL));
  struct lstmd_optim_state *st = &p->seen;
  if (p->fp16 && saved[0] > 0.0)
    LSTMD_TRY(lstmd_loss_scaler_restore(&st->scaler, saved[0], (long)saved[1]));
  st->applied = o ? o->step : 0;
  *p->h_state = *st;
  LSTMD_CHECK_CUDA(cudaMemcpy(p->d_state, p->h_state, sizeof *st, cudaMemcpyHostToDevice));
  LSTMD_CHECK_CUDA(cudaMemcpy(p->params, e->model->params, n, cudaMemcpyHostToDevice));
  if (o) {
    LSTMD_CHECK_CUDA(cudaMemcpy(p->m, o->m, n, cudaMemcpyHostToDevice));
    if (o->v) LSTMD_CHECK_CUDA(cudaMemcpy(p->v, o->v, n, cudaMemcpyHostToDevice));
  }
  LSTMD_CHECK_CUDA(cudaDeviceSynchronize()); /* legacy-stream copies before our stream's work */
  LSTMD_TRY(lstmd_cuda_stage_load_weights(p->cs, p->params));
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(p->stream));
  return LSTMD_OK;
}

/* ---- one step ---- */

/* The unit's columns of its window to the device, and its initial state (first F). */
static int begin_unit(struct gpipe_engine *p, int u, int slot) {
  struct gslot *sl = &p->slots[slot];
  const int a = u / p->g.M, m = u % p->g.M;
  if (p->lanes) { /* the previous unit's sends read the slot's buffers (1a) */
    for (int j = 0; j < 2; j++) LSTMD_CHECK_CUDA(cudaStreamWaitEvent(p->stream, sl->sent[j], 0));
  } else {
    LSTMD_TRY(gpipe_flush_send(p));
    for (int i = 0; i < sl->n_sends; i++) LSTMD_TRY(lstmd_p2p_wait(p->p2p, sl->sends[i], NULL));
    sl->n_sends = 0;
  }
  struct lstmd_batch *unit = &p->units[u];
  lstmd_batch_slice(&p->win[a], m * p->g.b, unit);
  struct lstmd_cuda_inputs *in = lstmd_cuda_stage_inputs(p->cs, slot);
  const size_t n = (size_t)p->g.T * p->g.b;
  struct { const void *src; void *dst; size_t bytes; } copies[] = {
      {unit->ids, in->ids, n * sizeof(int32_t)},
      {unit->targets, in->targets, n * sizeof(int32_t)},
      {unit->x, in->x, n * (size_t)unit->width * sizeof(float)},
      {unit->y, in->y, n * (size_t)unit->horizon * sizeof(float)}};
  for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++)
    if (copies[i].src && copies[i].dst)
      LSTMD_CHECK_CUDA(cudaMemcpyAsync(copies[i].dst, copies[i].src, copies[i].bytes,
                                       cudaMemcpyHostToDevice, p->stream));
  const int carry = p->base.cfg.carry_state && !p->reset[a];
  return lstmd_cuda_stage_begin_unit(p->cs, slot, carry ? carry_at(p, m, 0) : NULL,
                                     carry ? carry_at(p, m, 1) : NULL);
}

/* The boundary dropout mask of chunk k (see 2.), or NULL. */
static int chunk_mask(struct gpipe_engine *p, struct gslot *sl, int u, int k, int make,
                      const float **mask) {
  *mask = NULL;
  if (p->g.st.first || !sl->mask) return LSTMD_OK;
  *mask = sl->mask + (size_t)k * p->g.Tc * p->g.b * p->g.H;
  if (!make) return LSTMD_OK; /* B reuses F's */
  const int a = u / p->g.M, m = u % p->g.M;
  return lstmd_cuda_dropout_mask_rows(p->base.cfg.seed, p->in->first_window + (uint64_t)a,
                                      p->g.d * p->g.B + m * p->g.b, p->base.cfg.dropout,
                                      p->g.st.layer0 - 1, k * p->g.Tc, (k + 1) * p->g.Tc, p->g.b,
                                      p->g.H, sl->mask, p->stream);
}

static int run_op(struct gpipe_engine *p, int i, struct lstmd_step_result *out) {
  const struct lstmd_pipe_op *op = &p->g.ops[i];
  const int u = op->unit, k = op->chunk, slot = u % p->g.P, m = u % p->g.M;
  struct gslot *sl = &p->slots[slot];
  struct lstmd_cuda_stage *cs = p->cs;
  const float *mask;
  const double t0 = lstmd_now_s();
  double waited = 0.0;
  switch (op->kind) {
    case LSTMD_PIPE_F:
      if (k == 0) LSTMD_TRY(begin_unit(p, u, slot));
      if (!p->g.st.first) {
        void *in = lstmd_cuda_stage_chunk(cs, LSTMD_STAGE_INPUT, slot, k);
        LSTMD_TRY(p->lanes ? gpipe_lane_receive(p, i, LSTMD_LANE_RECV_ACT, in)
                           : gpipe_receive_chunk(p, p->recv_act[u * p->g.K + k], u, k, sl->act_in, in,
                                           &waited));
      }
      LSTMD_TRY(chunk_mask(p, sl, u, k, 1, &mask));
      LSTMD_TRY(lstmd_cuda_stage_forward(cs, slot, k, p->params, p->in->grad_scale, mask, p->d_loss));
      if (k == p->g.K - 1 && p->base.cfg.carry_state)
        LSTMD_TRY(lstmd_cuda_stage_end_unit(cs, slot, carry_at(p, m, 0), carry_at(p, m, 1)));
      if (!p->g.st.last) {
        void *o = lstmd_cuda_stage_chunk(cs, LSTMD_STAGE_OUTPUT, slot, k);
        if (p->lanes) {
          LSTMD_TRY(gpipe_lane_send(p, i, LSTMD_LANE_SEND_ACT, o, sl));
        } else {
          LSTMD_TRY(gpipe_flush_send(p)); /* the previous item's, now that this one is enqueued */
          LSTMD_TRY(gpipe_start_send(p, sl, LSTMD_P2P_UP, u, k, o, sl->act_out));
        }
      } else if (!p->lanes) {
        LSTMD_TRY(gpipe_flush_send(p));
      }
      break;
    case LSTMD_PIPE_B:
      if (!p->g.st.last) {
        void *dout = lstmd_cuda_stage_chunk(cs, LSTMD_STAGE_DOUTPUT, slot, k);
        LSTMD_TRY(p->lanes ? gpipe_lane_receive(p, i, LSTMD_LANE_RECV_GRAD, dout)
                           : gpipe_receive_chunk(p, p->recv_grad[u * p->g.K + k], u, k, sl->grad_in,
                                           dout, &waited));
      }
      LSTMD_TRY(chunk_mask(p, sl, u, k, 0, &mask));
      LSTMD_TRY(lstmd_cuda_stage_backward_data(cs, slot, k, p->params, mask));
      if (!p->g.st.first) { /* copied before W is enqueued, sent right after it (see 1.) */
        void *din = lstmd_cuda_stage_chunk(cs, LSTMD_STAGE_DINPUT, slot, k);
        if (p->lanes) {
          LSTMD_TRY(gpipe_lane_send(p, i, LSTMD_LANE_SEND_GRAD, din, sl));
        } else {
          LSTMD_TRY(gpipe_flush_send(p));
          LSTMD_TRY(gpipe_start_send(p, sl, LSTMD_P2P_DOWN, u, k, din, sl->grad_out));
        }
      } else if (!p->lanes) {
        LSTMD_TRY(gpipe_flush_send(p));
      }
      break;
    case LSTMD_PIPE_W:
      LSTMD_TRY(lstmd_cuda_stage_backward_weights(cs, slot, k, p->grads));
      if (p->lanes) {
        if (k == 0) LSTMD_CHECK_CUDA(cudaEventRecord(p->op_done[i], p->stream)); /* slot free */
        break;
      }
      LSTMD_TRY(gpipe_flush_send(p));
      if (k == 0 && u + p->g.P < p->g.U) { /* the slot's pinned buffers are free once done */
        LSTMD_CHECK_CUDA(cudaStreamSynchronize(p->stream));
        LSTMD_TRY(gpipe_post_receives(p, u + p->g.P));
      }
      break;
  }
  const double t1 = lstmd_now_s();
  if (!p->lanes) { /* on the NCCL lanes the host only enqueues: it sees neither waits nor work */
    out->p2p_wait_s += waited;
    out->busy_s += t1 - t0 - waited;
  }
  lstmd_pipe_trace_item(p->base.trace, op->kind, u, k, t0, t1);
  return LSTMD_OK;
}

static int run_step(struct gpipe_engine *p, const struct lstmd_step_input *in,
                    struct lstmd_step_result *out) {
  p->pending.active = 0;
  *out = (struct lstmd_step_result){0};
  if (in->windows != p->g.A) {
    lstmd_errorf("GPU pipeline engine: %d windows in a step, set up for %d", in->windows, p->g.A);
    return LSTMD_EINVAL;
  }
  if ((p->nccl && lstmd_nccl_failed(p->nccl)) || (p->lanes && lstmd_p2p_nccl_failed(p->lanes)))
    return LSTMD_ECOMM;
  for (int a = 0; a < p->g.A; a++) {
    const struct lstmd_batch *w = in->next_window(in->ctx, &p->reset[a]);
    lstmd_batch_slice(w, 0, &p->win[a]);
  }
  const size_t lo = p->g.lo[p->g.s], hi = p->g.hi[p->g.s];
  LSTMD_CHECK_CUDA(cudaMemsetAsync(p->grads + lo, 0, (hi - lo) * sizeof(float), p->stream));
  LSTMD_CHECK_CUDA(cudaMemsetAsync(p->d_loss, 0, sizeof(double), p->stream));
  LSTMD_TRY(lstmd_cuda_stage_begin_grads(p->cs));
  p->in = in;
  for (int u = 0; !p->lanes && u < p->g.U && u < p->g.P; u++) LSTMD_TRY(gpipe_post_receives(p, u));
  lstmd_nvtx_push("pipeline items (GPU)");
  int rc = LSTMD_OK;
  for (int i = 0; !rc && i < p->g.n_ops; i++) rc = run_op(p, i, out);
  if (!rc && !p->lanes) rc = gpipe_flush_send(p);
  lstmd_nvtx_pop();
  p->in = NULL;
  if (rc) return rc; /* not agreed: the trainer aborts the job */
  if (p->lanes) {
    LSTMD_TRY(lstmd_p2p_nccl_join(p->lanes, p->stream)); /* waited for below, with the sum */
  } else {
    const double t_sends = lstmd_now_s();
    LSTMD_TRY(lstmd_p2p_wait_all(p->p2p, NULL));
    out->p2p_wait_s += lstmd_now_s() - t_sends;
    for (int i = 0; i < p->g.P; i++) p->slots[i].n_sends = 0;
  }
  LSTMD_TRY(lstmd_cuda_stage_finish_grads(p->cs, p->grads));
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(p->h_loss, p->d_loss, sizeof(double), cudaMemcpyDeviceToHost, p->stream));
  const double t_reduce = lstmd_now_s();
  if (p->nccl) {
    lstmd_nvtx_push("all-reduce");
    LSTMD_TRY(lstmd_nccl_allreduce_sum(p->nccl, p->grads + lo, hi - lo, p->stream));
    lstmd_nvtx_pop();
  }
  LSTMD_CHECK_CUDA(cudaEventRecord(p->reduced, p->stream));
  if (p->nccl) lstmd_nccl_watch(p->nccl, p->reduced);
  LSTMD_TRY(gpipe_wait_gpu(p, p->reduced)); /* a stalled replica or stage ends it (see 1a., 4.) */
  if (p->nccl) out->comm_wait_s = lstmd_now_s() - t_reduce;
  out->loss_sum = *p->h_loss;
  return LSTMD_OK;
}

static int gp_step(struct lstmd_engine *e, const struct lstmd_step_input *in,
                   struct lstmd_step_result *out) {
  struct gpipe_engine *p = gp_of(e);
  const int rc = run_step(p, in, out);
  if (rc) p->abandoned = 1; /* transfers may be in flight: their buffers stay (comm/p2p.h) */
  return rc;
}

/* ---- the update (see 3.), and the state rank 0 needs ---- */

static int gp_optim_step(struct lstmd_engine *e, struct lstmd_optim *o, int report,
                         struct lstmd_optim_outcome *out) {
  struct gpipe_engine *p = gp_of(e);
  (void)report; /* the norm is on the host anyway */
  *out = (struct lstmd_optim_outcome){.grad_norm = NAN};
  const struct lstmd_model *mod = e->model;
  const struct lstmd_optim_config *c = &o->cfg;
  LSTMD_CHECK_CUDA(cudaMemsetAsync(p->d_sums, 0, (size_t)mod->n_tensors * sizeof(double), p->stream));
  for (int t = p->g.t_lo; t < p->g.t_hi; t++)
    LSTMD_TRY(lstmd_cuda_sumsq(mod->tensors[t].count, p->grads + mod->tensors[t].offset,
                               &p->d_sums[t], p->stream));
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(p->h_sums, p->d_sums, (size_t)mod->n_tensors * sizeof(double),
                                   cudaMemcpyDeviceToHost, p->stream));
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(p->stream));
  double sums[LSTMD_MAX_TENSORS] = {0}, norm = 0.0;
  for (int t = p->g.t_lo; t < p->g.t_hi; t++) sums[t] = p->h_sums[t];
  LSTMD_TRY(lstmd_pipe_global_norm(&p->g, p->pp, mod, sums, e->cfg.comm_timeout_s, &norm));
  const struct lstmd_optim_rule rule = {
      .clip_norm = c->clip_norm, .lr = c->lr, .warmup = c->warmup_steps, .total = c->total_steps,
      .cosine = c->schedule == LSTMD_SCHEDULE_COSINE, .beta1 = c->beta1, .beta2 = c->beta2,
      .fp16 = p->fp16};
  struct lstmd_optim_state *st = &p->seen;
  st->sumsq = norm * norm;
  lstmd_optim_decide(st, &rule); /* the same global norm on every rank: the same decision */
  out->grad_norm = st->norm;
  o->step = st->applied;
  /* the kernels read the decision, and the loss kernels the next fp16 scale, from the device */
  *p->h_state = *st;
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(p->d_state, p->h_state, sizeof *st, cudaMemcpyHostToDevice, p->stream));
  if (st->gave_up) {
    lstmd_loss_scaler_give_up_message(&st->scaler);
    return LSTMD_EINVAL;
  }
  if (st->first_bad) return LSTMD_ENONFINITE;
  if (!st->apply) return LSTMD_OK; /* fp16 overflow: skipped on every stage */
  const size_t lo = p->g.lo[p->g.s], n = p->g.hi[p->g.s] - lo;
  lstmd_nvtx_push("optimizer");
  int rc = c->algo == LSTMD_OPTIM_ADAMW
               ? lstmd_cuda_adamw(n, p->params + lo, p->grads + lo, p->m + lo, p->v + lo, c->beta1,
                                  c->beta2, c->eps, c->weight_decay, p->d_state, p->stream)
               : lstmd_cuda_sgd(n, p->params + lo, p->grads + lo, p->m + lo, c->momentum,
                                c->weight_decay, p->d_state, p->stream);
  if (!rc) rc = lstmd_cuda_stage_load_weights(p->cs, p->params);
  lstmd_nvtx_pop();
  return rc;
}

/* This stage's range of a device buffer into the host buffer, then gathered on rank 0. */
static int gather_device_range(struct gpipe_engine *p, const float *dev, float *host) {
  const size_t lo = p->g.lo[p->g.s], n = p->g.hi[p->g.s] - lo;
  /* a failed copy (an earlier kernel's fault surfaces here) goes into the gather's vote */
  const int copied =
      LSTMD_CUDA_FAILED(cudaMemcpyAsync(host + lo, dev + lo, n * sizeof(float),
                                        cudaMemcpyDeviceToHost, p->stream)) ||
              LSTMD_CUDA_FAILED(cudaStreamSynchronize(p->stream))
          ? LSTMD_ECUDA
          : LSTMD_OK;
  return lstmd_pipe_gather_ranges(&p->g, p->pp, host, copied);
}

static int gp_sync_host(struct lstmd_engine *e, struct lstmd_optim *o,
                        struct lstmd_train_progress *pr) {
  struct gpipe_engine *p = gp_of(e);
  LSTMD_TRY(gather_device_range(p, p->params, e->model->params));
  if (o) LSTMD_TRY(gather_device_range(p, p->m, o->m));
  if (o && o->v) LSTMD_TRY(gather_device_range(p, p->v, o->v));
  if (o) o->step = p->seen.applied;
  if (pr) {
    pr->loss_scale = p->fp16 ? p->seen.scaler.scale : 0.0;
    pr->loss_scale_good_steps = p->fp16 ? p->seen.scaler.good_steps : 0;
  }
  return LSTMD_OK;
}

static int gp_evaluate(struct lstmd_engine *e, const struct lstmd_dataset *val, double *mean_loss,
                       uint64_t *tokens, double *accuracy) {
  (void)accuracy; /* no classifiers in pipelines */
  struct gpipe_engine *p = gp_of(e);
  const int gathered = gather_device_range(p, p->params, e->model->params);
  return lstmd_engine_evaluate_everywhere(e, val, 0, gathered, mean_loss, tokens);
}

/* The device's [M][h, c][layers, b, H] ↔ host [layers, B, H] h and c (to_host: device → host). */
static int move_state(struct gpipe_engine *p, float *h, float *c, int to_host) {
  const size_t blk = carry_floats(p), all = 2 * (size_t)p->g.M * blk;
  const size_t bH = (size_t)p->g.b * p->g.H, BH = (size_t)p->g.B * p->g.H;
  if (to_host) {
    LSTMD_TRY(lstmd_cuda_cast(all, p->carry, p->dtype, p->carry_f, LSTMD_DT_F32, p->stream));
    LSTMD_CHECK_CUDA(cudaMemcpyAsync(p->carry_h, p->carry_f, all * sizeof(float), cudaMemcpyDeviceToHost, p->stream));
    LSTMD_CHECK_CUDA(cudaStreamSynchronize(p->stream));
  }
  for (int m = 0; m < p->g.M; m++)
    for (int which = 0; which < 2; which++)
      for (int l = 0; l < p->g.st.layers; l++) {
        float *dev = p->carry_h + (2 * (size_t)m + which) * blk + l * bH;
        float *hst = (which ? c : h) + l * BH + (size_t)m * bH;
        if (to_host) memcpy(hst, dev, bH * sizeof(float));
        else memcpy(dev, hst, bH * sizeof(float));
      }
  if (to_host) return LSTMD_OK;
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(p->carry_f, p->carry_h, all * sizeof(float), cudaMemcpyHostToDevice, p->stream));
  LSTMD_TRY(lstmd_cuda_cast(all, p->carry_f, LSTMD_DT_F32, p->carry, p->dtype, p->stream));
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(p->stream));
  return LSTMD_OK;
}

static int gp_gather_state(struct lstmd_engine *e, float *h, float *c) {
  struct gpipe_engine *p = gp_of(e);
  const size_t mine = (size_t)p->g.st.layers * p->g.B * p->g.H;
  float *buf = malloc(2 * mine * sizeof(float));
  int rc = buf ? move_state(p, buf, buf + mine, 1) : LSTMD_ENOMEM;
  rc = lstmd_comm_agree(e->comm, rc, NULL); /* none is left alone in the gather */
  if (!rc) rc = lstmd_pipe_gather_state(&p->g, e, buf, buf + mine, h, c);
  free(buf);
  return rc;
}

static int gp_set_state(struct lstmd_engine *e, const float *h, const float *c) {
  struct gpipe_engine *p = gp_of(e);
  const size_t mine = (size_t)p->g.st.layers * p->g.B * p->g.H;
  float *buf = malloc(2 * mine * sizeof(float));
  if (!buf) {
    lstmd_errorf("out of memory for the recurrent state");
    return LSTMD_ENOMEM;
  }
  lstmd_pipe_slice_state(&p->g, e, h, c, buf, buf + mine);
  const int rc = move_state(p, buf, buf + mine, 0);
  free(buf);
  return rc;
}

static double gp_loss_scale(const struct lstmd_engine *e) {
  const struct gpipe_engine *p = (const struct gpipe_engine *)e;
  return p->fp16 ? p->seen.scaler.scale : 0.0;
}

static void gp_describe(const struct lstmd_engine *e, char *buf, size_t n) {
  const struct gpipe_engine *p = (const struct gpipe_engine *)e;
  snprintf(buf, n, "GPU pipeline of %d stages x %d replica%s on GPU %d (%s; rank 0: layers %d-%d), "
           "%s schedule, %d unit%s of %d column%s x %d time chunk%s per step, %s; %s; gradients "
           "summed by %s", p->g.S, p->g.D,
           p->g.D == 1 ? "" : "s", e->cfg.gpu_device, p->device_desc, p->g.st.layer0,
           p->g.st.layer0 + p->g.st.layers - 1, lstmd_pipe_kind_name(p->g.kind), p->g.U,
           p->g.U == 1 ? "" : "s", p->g.b, p->g.b == 1 ? "" : "s", p->g.K, p->g.K == 1 ? "" : "s",
           p->cs ? lstmd_cuda_stage_describe(p->cs) : "cuDNN",
           p->transport[0] ? p->transport : "stage transfers not started",
           p->nccl ? lstmd_nccl_describe(p->nccl)
                                                                       : "nothing (one replica)");
}

static const struct lstmd_engine_ops kGpuPipeOps = {
    .name = "gpu-pipeline",
    .destroy = gp_destroy,
    .start = gp_start,
    .step = gp_step,
    .optim_step = gp_optim_step,
    .sync_host = gp_sync_host,
    .evaluate = gp_evaluate,
    .gather_state = gp_gather_state,
    .set_state = gp_set_state,
    .loss_scale = gp_loss_scale,
    .describe = gp_describe,
};
