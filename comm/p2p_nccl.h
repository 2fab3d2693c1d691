/* p2p_nccl.h — NCCL send/recv between the pipeline stages of one replica, on the lanes of
 * worker/engine/pipe_groups.h: four per stage (receive activations from below, send them up,
 * receive gradients from above, send them down), each with its own CUDA stream and its own
 * two-rank NCCL communicator (one per link between neighbour stages and direction), so a send
 * that waits for its receiver never holds up another kind of transfer.
 *
 * Every transfer is enqueued on its lane's stream and never waited for by the host here. A
 * watchdog thread looks at the oldest unfinished transfer of each lane: one still pending
 * timeout_s after it became the oldest (the peer died or hangs), or an NCCL error, makes it print
 * the rank, the lane's peer stage and the item, abort every communicator (which ends the kernels
 * waiting on the peer) and set the failed flag the engine polls while it waits on the GPU.
 *
 * When two stages of the replica share a GPU (NCCL cannot run that) or the build has no NCCL,
 * create says so and the engine keeps its host-staged MPI transfers (comm/p2p.h). */
#ifndef LSTMD_P2P_NCCL_H
#define LSTMD_P2P_NCCL_H

#include <stddef.h>

struct lstmd_comm;
struct lstmd_p2p_nccl;

/* Collective over pp (a replica's pipeline communicator, rank = stage); this rank's CUDA device
 * must be current. per_lane: the most transfers one lane holds before the engine waits for them
 * all (a step's U·K). Returns 0 with *out set, or 0 with *out NULL and why filled when the
 * host-staged path must be used (the same on every rank), or LSTMD_ECOMM / LSTMD_ENOMEM after
 * printing why (agreed over pp). */
int lstmd_p2p_nccl_create(struct lstmd_comm *pp, size_t per_lane, double timeout_s,
                          struct lstmd_p2p_nccl **out, char *why, size_t why_len);
/* Stops the watchdog; aborts the communicators when a transfer may be in flight, else closes
 * them. NULL is fine. */
void lstmd_p2p_nccl_destroy(struct lstmd_p2p_nccl *p);

/* The lane's stream (a cudaStream_t); NULL for a lane this stage does not have (no stage below
 * for the receive of activations and the send of gradients, none above for the others). */
void *lstmd_p2p_nccl_stream(struct lstmd_p2p_nccl *p, int lane);
/* Enqueues the lane's next transfer of `bytes` (a send from buf, or a receive into it) on the
 * lane's stream; `what` (copied, ≤ 111 chars) names the item if it never completes. Returns 0,
 * LSTMD_ECOMM (failed, or NCCL refused it: printed) or LSTMD_EINVAL (no such lane, or the lane's
 * queue is full). */
int lstmd_p2p_nccl_transfer(struct lstmd_p2p_nccl *p, int lane, void *buf, size_t bytes,
                            const char *what);
/* Makes `stream` (a cudaStream_t) wait for every transfer enqueued so far on every lane. */
int lstmd_p2p_nccl_join(struct lstmd_p2p_nccl *p, void *stream);
/* Non-zero once a transfer failed or timed out (communicators aborted, reason printed). */
int lstmd_p2p_nccl_failed(struct lstmd_p2p_nccl *p);
/* "NCCL 2.28.9 send/recv on 4 lanes". */
const char *lstmd_p2p_nccl_describe(const struct lstmd_p2p_nccl *p);

#endif
