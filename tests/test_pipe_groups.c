/* test_pipe_groups.c — the GPU pipeline's NCCL transfer lanes (engine/pipe_groups.c): which lane
 * each transfer takes, and that every schedule's lists run to the end when every transfer is a
 * rendezvous, as NCCL send/recv are; on one lane per stage 1F1B deadlocks, and a receiver taking
 * another order than its sender is reported. */
#include <stdio.h>
#include <string.h>

#include "kernels/status.h"
#include "worker/engine/pipe_groups.h"
#include "check.h"

#include "pipe_lists.h"

static void slots_of(enum lstmd_pipe_kind kind, int S, int U, int K, int *slots) {
  for (int s = 0; s < S; s++) slots[s] = lstmd_pipe_peak_units(kind, S, s, U, K);
}

/* Lanes of the middle stage of 3 under gpipe U=1 K=1: F receives and sends activations, B
 * receives and sends gradients, W has none. */
static void lanes_of_ops(void) {
  build(LSTMD_PIPE_GPIPE, 3, 1, 1);
  const struct lstmd_pipe_op *f = &g_lists[1][0], *b = &g_lists[1][1], *w = &g_lists[1][2];
  check_true("lanes: one per kind of transfer",
             lstmd_pipe_lane_of(f, 1) == LSTMD_LANE_RECV_ACT &&
                 lstmd_pipe_lane_of(f, 0) == LSTMD_LANE_SEND_ACT &&
                 lstmd_pipe_lane_of(b, 1) == LSTMD_LANE_RECV_GRAD &&
                 lstmd_pipe_lane_of(b, 0) == LSTMD_LANE_SEND_GRAD &&
                 lstmd_pipe_lane_of(w, 1) == -1 && lstmd_pipe_lane_of(w, 0) == -1 &&
                 lstmd_pipe_lane_of(&g_lists[0][0], 1) == -1 &&
                 lstmd_pipe_lane_of(&g_lists[2][0], 0) == -1);
}

/* Every kind, S, U, K, with the schedule's slots, on `lanes` lanes: how many fail to run to the
 * end with matching items. */
static int grid_failures(int lanes, int *runs_out) {
  int runs = 0, bad = 0, slots[MAX_S];
  for (int kind = 0; kind < 3; kind++)
    for (int S = 1; S <= MAX_S; S++)
      for (int U = 1; U <= 8; U++)
        for (int K = 1; K <= 8; K++) {
          struct lstmd_pipe_lanes_result r = {0};
          runs++;
          slots_of(g_kinds[kind], S, U, K, slots);
          if (build(g_kinds[kind], S, U, K) ||
              lstmd_pipe_check_lanes(S, g_lists, g_counts, slots, lanes, &r) != 0) {
            if (bad++ < 5 && lanes == LSTMD_LANES)
              fprintf(stderr, "  %s S=%d U=%d K=%d: %s\n", lstmd_pipe_kind_name(g_kinds[kind]), S,
                      U, K, r.mismatch ? "items mismatch" : "deadlock");
          }
        }
  *runs_out = runs;
  return bad;
}

static void grid(void) {
  int runs = 0, bad = grid_failures(LSTMD_LANES, &runs);
  printf("  %d schedules run on four lanes of rendezvous transfers, %d failed\n", runs, bad);
  check_true("every schedule runs to the end on NCCL lanes", bad == 0);
  /* one communicator per direction: a middle stage's send up and receive from below share one */
  bad = grid_failures(2, &runs);
  printf("  on one lane per direction: %d of %d deadlock\n", bad, runs);
  check_true("one lane per direction deadlocks some schedules", bad > 0);
}

/* One lane per stage (one stream, or one communicator): under 1F1B with K = 2 stage 0 sends unit
 * 1's activations while stage 1 first sends unit 0's gradients, which stage 0 receives only after
 * that send. Fill-drain has no such crossing. */
static void one_lane(void) {
  struct lstmd_pipe_lanes_result r;
  int slots[MAX_S];
  build(LSTMD_PIPE_1F1B, 2, 4, 2);
  slots_of(LSTMD_PIPE_1F1B, 2, 4, 2, slots);
  const int rc = lstmd_pipe_check_lanes(2, g_lists, g_counts, slots, 1, &r);
  printf("  1f1b S=2 U=4 K=2 on one lane: stuck at op %d on stage 0, op %d on stage 1\n",
         r.stuck_op[0], r.stuck_op[1]);
  check_true("1f1b on one lane deadlocks", rc == LSTMD_EINVAL && r.deadlocked && !r.mismatch);
  build(LSTMD_PIPE_GPIPE, 4, 4, 2);
  slots_of(LSTMD_PIPE_GPIPE, 4, 4, 2, slots);
  check_true("gpipe on one lane runs", lstmd_pipe_check_lanes(4, g_lists, g_counts, slots, 1, &r) == 0);
}

/* The receiver takes F1 before F0: the first message sent (F0) would land in F1's buffer. */
static void mismatch(void) {
  struct lstmd_pipe_lanes_result r;
  int slots[2] = {1, 1};
  build(LSTMD_PIPE_GPIPE, 2, 1, 2);
  struct lstmd_pipe_op t = g_ops[1][0];
  g_ops[1][0] = g_ops[1][1];
  g_ops[1][1] = t;
  const int rc = lstmd_pipe_check_lanes(2, g_lists, g_counts, slots, LSTMD_LANES, &r);
  check_true("a receive order unlike the send order is reported",
             rc == LSTMD_EINVAL && r.mismatch && r.mismatch_stage == 1 && r.mismatch_peer == 0);
}

int main(void) {
  lanes_of_ops();
  grid();
  one_lane();
  mismatch();
  return check_summary("test_pipe_groups");
}
