/* pipe_gpu_transfer.c — activations up and gradients down between the GPU pipeline's stages
 * (engine_pipe_gpu.c, note 1): NCCL send/recv on the four lanes of pipe_groups.h, or, where stages
 * share a GPU, pinned host memory over MPI (comm/p2p.h). */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "comm/p2p.h"
#include "comm/p2p_nccl.h"
#include "kernels/check.h"
#include "kernels/clock.h"
#include "pipe_gpu.h"
#include "pipe_groups.h"

int gpipe_pinned(void *pp, size_t bytes) {
  void **p = pp;
  *p = NULL;
  if (bytes == 0) return LSTMD_OK;
  if (cudaMallocHost(p, bytes) != cudaSuccess) {
    cudaGetLastError();
    *p = NULL;
    lstmd_errorf("CUDA: cannot allocate %.1f MiB of pinned host memory", (double)bytes / 1048576.0);
    return LSTMD_ENOMEM;
  }
  memset(*p, 0, bytes);
  return LSTMD_OK;
}

/* The host-staged path's pinned message buffers (1b). */
static int gpipe_alloc_staged(struct gpipe_engine *p) {
  const struct lstmd_pipe_grid *g = &p->g;
  const size_t msg = (size_t)g->T * g->b * g->H * p->es;
  for (int i = 0; i < g->P; i++) {
    struct gslot *sl = &p->slots[i];
    if (!g->st.first) {
      LSTMD_TRY(gpipe_pinned(&sl->act_in, msg));
      LSTMD_TRY(gpipe_pinned(&sl->grad_out, msg));
    }
    if (!g->st.last) {
      LSTMD_TRY(gpipe_pinned(&sl->act_out, msg));
      LSTMD_TRY(gpipe_pinned(&sl->grad_in, msg));
    }
  }
  return LSTMD_OK;
}

/* The NCCL path's events (1a). */
static int gpipe_alloc_lane_events(struct gpipe_engine *p) {
  const int n = p->g.n_ops;
  p->op_done = calloc((size_t)n, sizeof *p->op_done);
  p->recv_done = calloc((size_t)n, sizeof *p->recv_done);
  if (!p->op_done || !p->recv_done) return LSTMD_ENOMEM;
  for (int i = 0; i < n; i++) { /* recorded after ops that send, and after W(u, 0) (slot free) */
    const struct lstmd_pipe_op *op = &p->g.ops[i];
    if (op->send_to >= 0 || (op->kind == LSTMD_PIPE_W && op->chunk == 0))
      LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&p->op_done[i], cudaEventDisableTiming));
    if (op->recv_from >= 0)
      LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&p->recv_done[i], cudaEventDisableTiming));
  }
  return LSTMD_OK;
}

/* Collective over the replica: NCCL lanes, or where stages share a GPU the host-staged path (1.),
 * the same on every rank of the replica. */
int gpipe_start_transfers(struct gpipe_engine *p) {
  char why[160] = "";
  LSTMD_TRY(lstmd_p2p_nccl_create(p->pp, (size_t)p->g.U * p->g.K, p->base.cfg.comm_timeout_s,
                                  &p->lanes, why, sizeof why));
  if (p->lanes) {
    snprintf(p->transport, sizeof p->transport, "stage transfers by %s",
             lstmd_p2p_nccl_describe(p->lanes));
    return lstmd_comm_agree(p->pp, gpipe_alloc_lane_events(p), NULL);
  }
  snprintf(p->transport, sizeof p->transport, "stage transfers through host memory over MPI (%s)",
           why);
  if (p->base.rank == 0 && p->g.S > 1)
    lstmd_errorf("warning: %s: pipeline stages exchange activations through host memory over "
                 "MPI (slower); give every rank its own GPU", why);
  LSTMD_TRY(lstmd_comm_agree(p->pp, gpipe_alloc_staged(p), NULL));
  LSTMD_TRY(lstmd_p2p_create(p->pp, p->base.cfg.comm_timeout_s, &p->p2p));
  lstmd_p2p_name_ranks(p->p2p, "stage"); /* the replica's pipeline communicator: rank = stage */
  return LSTMD_OK;
}

size_t gpipe_msg_bytes(const struct gpipe_engine *p) { return (size_t)p->g.Tc * p->g.b * p->g.H * p->es; }

/* Posts unit u's receives into its slot's pinned buffers (see 1.). */
int gpipe_post_receives(struct gpipe_engine *p, int u) {
  struct gslot *sl = &p->slots[u % p->g.P];
  const size_t chunk = gpipe_msg_bytes(p);
  char what[128];
  for (int k = 0; k < p->g.K; k++) {
    const int tag = lstmd_pipe_tag(u, k, p->g.K);
    if (!p->g.st.first) {
      lstmd_pipe_describe_item(what, sizeof what, LSTMD_P2P_UP, u, k);
      LSTMD_TRY(lstmd_p2p_irecv(p->p2p, LSTMD_P2P_UP, p->g.s - 1, tag, (char *)sl->act_in + k * chunk,
                                chunk, what, &p->recv_act[u * p->g.K + k]));
    }
    if (!p->g.st.last) {
      lstmd_pipe_describe_item(what, sizeof what, LSTMD_P2P_DOWN, u, k);
      LSTMD_TRY(lstmd_p2p_irecv(p->p2p, LSTMD_P2P_DOWN, p->g.s + 1, tag, (char *)sl->grad_in + k * chunk,
                                chunk, what, &p->recv_grad[u * p->g.K + k]));
    }
  }
  return LSTMD_OK;
}

/* Chunk k of a device buffer to the slot's pinned message buffer; sent by flush_send once the
 * copy is done, after the next item's compute has been enqueued (so the GPU does not idle while
 * the host waits for the copy), and before any wait that could depend on it (see 1.). */
int gpipe_start_send(struct gpipe_engine *p, struct gslot *sl, int dir, int u, int k,
                      const void *dev, void *host) {
  const size_t chunk = gpipe_msg_bytes(p);
  char *h = (char *)host + k * chunk;
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(h, dev, chunk, cudaMemcpyDeviceToHost, p->stream));
  LSTMD_CHECK_CUDA(cudaEventRecord(p->copied, p->stream));
  p->pending = (struct pending_send){1, dir, u, k, sl, h};
  return LSTMD_OK;
}

int gpipe_flush_send(struct gpipe_engine *p) {
  struct pending_send *ps = &p->pending;
  if (!ps->active) return LSTMD_OK;
  ps->active = 0;
  LSTMD_CHECK_CUDA(cudaEventSynchronize(p->copied));
  const int peer = ps->dir == LSTMD_P2P_UP ? p->g.s + 1 : p->g.s - 1;
  char what[128];
  lstmd_pipe_describe_item(what, sizeof what, ps->dir, ps->u, ps->k);
  struct gslot *sl = ps->slot;
  return lstmd_p2p_isend(p->p2p, ps->dir, peer, lstmd_pipe_tag(ps->u, ps->k, p->g.K), ps->host,
                         gpipe_msg_bytes(p), what, &sl->sends[sl->n_sends++]);
}

/* Waits for a received chunk and copies it to the device. */
int gpipe_receive_chunk(struct gpipe_engine *p, lstmd_p2p_req r, int u, int k, const void *host,
                         void *dev, double *p2p_wait_s) {
  LSTMD_TRY(gpipe_flush_send(p)); /* the peer may be waiting for it before it can send this */
  LSTMD_TRY(lstmd_pipe_wait_recv(p->p2p, r, p->base.trace, u, k, p2p_wait_s));
  const size_t chunk = gpipe_msg_bytes(p);
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(dev, (const char *)host + k * chunk, chunk,
                                   cudaMemcpyHostToDevice, p->stream));
  return LSTMD_OK;
}

/* NCCL lanes (1a): op i's receive into dev on its lane, behind the release of the unit's slot
 * (W(u − P, 0)), and the compute stream behind the receive. */
int gpipe_lane_receive(struct gpipe_engine *p, int i, int lane, void *dev) {
  const struct lstmd_pipe_op *op = &p->g.ops[i];
  cudaStream_t ls = (cudaStream_t)lstmd_p2p_nccl_stream(p->lanes, lane);
  if (op->unit >= p->g.P)
    LSTMD_CHECK_CUDA(cudaStreamWaitEvent(ls, p->op_done[p->w0_op[op->unit - p->g.P]], 0));
  char what[128];
  lstmd_pipe_describe_item(what, sizeof what, op->kind == LSTMD_PIPE_F ? LSTMD_P2P_UP : LSTMD_P2P_DOWN,
                           op->unit, op->chunk);
  LSTMD_TRY(lstmd_p2p_nccl_transfer(p->lanes, lane, dev, gpipe_msg_bytes(p), what));
  LSTMD_CHECK_CUDA(cudaEventRecord(p->recv_done[i], ls));
  LSTMD_CHECK_CUDA(cudaStreamWaitEvent(p->stream, p->recv_done[i], 0));
  return LSTMD_OK;
}

/* NCCL lanes (1a): op i's output dev sent on its lane once the op has run. */
int gpipe_lane_send(struct gpipe_engine *p, int i, int lane, const void *dev, struct gslot *sl) {
  const struct lstmd_pipe_op *op = &p->g.ops[i];
  cudaStream_t ls = (cudaStream_t)lstmd_p2p_nccl_stream(p->lanes, lane);
  LSTMD_CHECK_CUDA(cudaEventRecord(p->op_done[i], p->stream));
  LSTMD_CHECK_CUDA(cudaStreamWaitEvent(ls, p->op_done[i], 0));
  char what[128];
  lstmd_pipe_describe_item(what, sizeof what, op->kind == LSTMD_PIPE_F ? LSTMD_P2P_UP : LSTMD_P2P_DOWN,
                           op->unit, op->chunk);
  LSTMD_TRY(lstmd_p2p_nccl_transfer(p->lanes, lane, (void *)dev, gpipe_msg_bytes(p), what));
  LSTMD_CHECK_CUDA(cudaEventRecord(sl->sent[lane == LSTMD_LANE_SEND_ACT ? 0 : 1], ls));
  return LSTMD_OK;
}

/* Waits on the host for an event of the compute stream; a failed gradient sum or stage transfer
 * (their watchdogs abort the communicators, which ends the kernels) ends the wait. */
int gpipe_wait_gpu(struct gpipe_engine *p, cudaEvent_t ev) {
  for (long spins = 0;; spins++) {
    const cudaError_t q = cudaEventQuery(ev);
    if (q == cudaSuccess) return LSTMD_OK;
    if (q != cudaErrorNotReady) {
      LSTMD_CHECK_CUDA(q);
      return LSTMD_OK;
    }
    if ((p->nccl && lstmd_nccl_failed(p->nccl)) || (p->lanes && lstmd_p2p_nccl_failed(p->lanes)))
      return LSTMD_ECOMM; /* the watchdog said why */
    if (spins > 2000) lstmd_sleep_us(20);
  }
}

