/* pipe_lists.h — every stage's op list of one schedule in static arrays, for the pipeline schedule
 * tests (test_pipe_schedule.c, test_pipe_groups.c). Include once per test. */
#ifndef LSTMD_TEST_PIPE_LISTS_H
#define LSTMD_TEST_PIPE_LISTS_H

#include "worker/engine/pipe_schedule.h"

#define MAX_S 8
#define MAX_UK 12
#define MAX_OPS (3 * MAX_UK * MAX_UK)

static struct lstmd_pipe_op g_ops[MAX_S][MAX_OPS];
static const struct lstmd_pipe_op *g_lists[MAX_S];
static int g_counts[MAX_S];

static const enum lstmd_pipe_kind g_kinds[] = {LSTMD_PIPE_GPIPE, LSTMD_PIPE_1F1B,
                                               LSTMD_PIPE_WAVEFRONT};

/* Fills g_ops/g_lists/g_counts with every stage's list; returns 0 when every call succeeded. */
static int build(enum lstmd_pipe_kind kind, int S, int U, int K) {
  int bad = 0;
  for (int s = 0; s < S; s++) {
    g_counts[s] = lstmd_pipe_schedule(kind, S, s, U, K, g_ops[s], MAX_OPS);
    g_lists[s] = g_ops[s];
    bad |= g_counts[s] < 0;
  }
  return bad;
}

#endif
