/* pipe_gpu.h — the insides of the GPU pipeline engine, shared by engine_pipe_gpu.c (set-up, the
 * step's items, the update, the state) and pipe_gpu_transfer.c (moving activations and gradients
 * between stages: NCCL lanes or host-staged MPI, engine_pipe_gpu.c's note 1). Nothing else
 * includes it. */
#ifndef LSTMD_PIPE_GPU_H
#define LSTMD_PIPE_GPU_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "comm/p2p.h"
#include "engine.h"
#include "kernels/cuda/stage_cuda.h"
#include "kernels/optim_rules.h"
#include "pipe_grid.h"

struct lstmd_p2p_nccl;
struct lstmd_nccl;


struct gslot {
  void *act_in, *grad_in;   /* host-staged (1b): pinned [T,b,·] receives (data type) */
  void *act_out, *grad_out; /* host-staged: pinned [T,b,·] sends */
  lstmd_p2p_req *sends;     /* host-staged: [2K] */
  int n_sends;
  float *mask;              /* device [T,b,H]: boundary dropout of the unit (not first) */
  cudaEvent_t sent[2];      /* NCCL lanes (1a): after the last send of the slot's unit on the
                               activation / gradient lane */
};

struct gpipe_engine {
  struct lstmd_engine base;
  struct lstmd_pipe_grid g;
  int dtype, fp16;
  size_t es;
  cudaStream_t stream;
  cudaEvent_t copied;  /* after a device → host copy the host waits for */
  cudaEvent_t reduced; /* after the step's gradient sum, for the NCCL watchdog (see 4.) */
  struct pending_send { /* a chunk being copied to the host, sent once the copy is done */
    int active, dir, u, k;
    struct gslot *slot;
    void *host;
  } pending;
  int abandoned; /* a step failed with transfers in flight: their buffers stay (comm/p2p.h) */
  int device_ready;
  struct lstmd_cuda_stage *cs;
  struct lstmd_comm *pp, *dp;
  struct lstmd_p2p *p2p;          /* host-staged transfers (1b), or NULL */
  struct lstmd_p2p_nccl *lanes;   /* NCCL transfers (1a), or NULL */
  /* lanes: [n_ops] after op i (only ops that send, and W(u, 0); NULL for the others) / after
   * its receive (only ops that receive) */
  cudaEvent_t *op_done, *recv_done;
  int *w0_op;                     /* [U]: index of W(u, 0) in the op list */
  char transport[200];
  struct lstmd_nccl *nccl; /* D > 1 */
  float *params, *grads, *m, *v; /* device [n_params]; this stage's range is used */
  double *d_loss, *h_loss;       /* device / pinned */
  double *d_sums, *h_sums;       /* [n_tensors] per-tensor Σ g² */
  struct lstmd_optim_state *d_state, *h_state; /* device / pinned: the step's decision (see 3.) */
  struct lstmd_optim_state seen;               /* host: the decision state */
  void *carry;     /* device [M][h, c][layers·b·H] data type (see 5.) */
  float *carry_f;  /* device fp32 staging of the same, and its host copy */
  float *carry_h;
  struct gslot *slots;
  struct lstmd_batch *units;           /* [U] pinned: unit u's columns of its window (first:
                                          inputs, last: targets) */
  lstmd_p2p_req *recv_act, *recv_grad; /* [U·K] */
  struct lstmd_batch *win;             /* [A] host copies of the step's windows */
  int *reset;
  const struct lstmd_step_input *in;
  char device_desc[160];
};


/* Pinned host memory, zeroed: 0 or LSTMD_ENOMEM (printed). */
int gpipe_pinned(void *pp, size_t bytes);
/* Bytes of one chunk's message. */
size_t gpipe_msg_bytes(const struct gpipe_engine *p);

/* Collective over the replica: NCCL lanes, or where stages share a GPU the host-staged path, the
 * same on every rank of the replica; fills p->transport. */
int gpipe_start_transfers(struct gpipe_engine *p);

/* Host-staged (1b): unit u's receives into its slot's pinned buffers; chunk k of a device buffer
 * copied to the slot's pinned buffer and sent by gpipe_flush_send once the copy is done; a
 * received chunk waited for and copied to the device. */
int gpipe_post_receives(struct gpipe_engine *p, int u);
int gpipe_start_send(struct gpipe_engine *p, struct gslot *sl, int dir, int u, int k,
                     const void *dev, void *host);
int gpipe_flush_send(struct gpipe_engine *p);
int gpipe_receive_chunk(struct gpipe_engine *p, lstmd_p2p_req r, int u, int k, const void *host,
                        void *dev, double *p2p_wait_s);

/* NCCL lanes (1a): op i's receive into dev, and op i's output sent, on their lanes. */
int gpipe_lane_receive(struct gpipe_engine *p, int i, int lane, void *dev);
int gpipe_lane_send(struct gpipe_engine *p, int i, int lane, const void *dev, struct gslot *sl);

/* Waits on the host for an event of the compute stream; a failed gradient sum or stage transfer
 * ends the wait (LSTMD_ECOMM). */
int gpipe_wait_gpu(struct gpipe_engine *p, cudaEvent_t ev);

#endif
