/* pipe_groups.h — how the GPU pipeline's stage transfers travel over NCCL, and a checker that
 * the plan cannot deadlock when every transfer is a rendezvous.
 *
 * NCCL send/recv are kernels in a stream: one starts when its stream reaches it and ends only
 * once the peer's matching kernel has run, and a communicator's operations run one after the
 * other in issue order. Put every transfer of a stage in one stream or on one communicator and a
 * send that waits for its receiver blocks the receives behind it: under 1F1B with K ≥ 2 chunks,
 * stage 0 sends unit 1's activations while stage 1, before it receives them, sends unit 0's
 * gradients, which stage 0 only receives after that send — a deadlock (MPI's buffered sends
 * never see it). Grouping the send of op i−1 with the receive of op i (Megatron-LM's
 * send-forward-receive-backward) does not cure it at K ≥ 2 either; this checker shows both.
 *
 * The plan: each stage has four lanes, one per kind of transfer — receive activations from below,
 * send activations up, receive gradients from above, send gradients down — each its own stream
 * and its own communicator (one per link and direction, so a communicator carries one FIFO of
 * messages). A lane runs its transfers in the op list's order; a receive starts once its unit's
 * slot is free (W(u − P, 0) of the unit that held it has run) and the op that needs it waits for
 * it; a send starts once its op has run, and a unit's first op waits until every send of the
 * unit that held its slot before has completed (they read the slot's buffers). Receives thus run
 * ahead as MPI's pre-posted ones do.
 *
 * Pure functions on the op lists of pipe_schedule.h: every rank derives the same plan. */
#ifndef LSTMD_PIPE_GROUPS_H
#define LSTMD_PIPE_GROUPS_H

#include "pipe_schedule.h"

/* The four lanes of a stage. */
enum lstmd_pipe_lane {
  LSTMD_LANE_RECV_ACT = 0,  /* F's input from s − 1 */
  LSTMD_LANE_SEND_ACT = 1,  /* F's output to s + 1 */
  LSTMD_LANE_RECV_GRAD = 2, /* B's output gradient from s + 1 */
  LSTMD_LANE_SEND_GRAD = 3, /* B's input gradient to s − 1 */
  LSTMD_LANES = 4
};

/* The lane of op's receive (recv = 1) or send (recv = 0), or −1 when it has none. */
int lstmd_pipe_lane_of(const struct lstmd_pipe_op *op, int recv);

struct lstmd_pipe_lanes_result {
  int deadlocked;                      /* some transfer or op can never run */
  int stuck_op[LSTMD_PIPE_MAX_STAGES]; /* per stage: its first op that never ran (−1: all ran) */
  int mismatch;                        /* a matched send and receive carry different items */
  int mismatch_stage, mismatch_peer;   /* the receiving stage and its sender */
};

/* Runs every stage's list with its transfers on lanes, each transfer a rendezvous: a transfer
 * completes once it is at the head of its lane on both ends and both ends are ready (a send: its
 * op has run; a receive: its unit's slot is free, slots[s] units per stage, unit u in slot
 * u mod slots[s]); an op runs once the op before it has and its receive has completed, and the
 * first op of unit u ≥ slots[s] once every send of unit u − slots[s] has. lanes = 4
 * is the plan above; lanes = 2 gives each direction one lane (activations: the receive from below
 * and the send up; gradients likewise), as one communicator per direction would; lanes = 1 puts
 * every transfer of a stage in one lane in issue order (the receive before its op, the send
 * after), as one stream or one communicator would. Returns 0
 * when every op and transfer ran with matching items, else LSTMD_EINVAL with *out saying why;
 * LSTMD_ENOMEM. */
int lstmd_pipe_check_lanes(int stages, const struct lstmd_pipe_op *const lists[],
                           const int counts[], const int slots[], int lanes,
                           struct lstmd_pipe_lanes_result *out);

#endif
