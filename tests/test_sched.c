/* test_sched.c — the scheduling policy (daemon/sched.h) with exact expected orders: priorities
 * and FIFO, EASY backfill (a short job ahead of the reservation, not one that ends after it, not
 * one without a time limit), preemption (lowest priority, then most recently started, just
 * enough; never a non-preemptible job) and the choice of ranks (one node, then consecutive).
 * A small event simulation drives lstmd_sched_plan: jobs arrive, run for their duration (or
 * until preempted: they stop at the next round and are queued again), and the start order with
 * times and ranks is compared with the expected text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/sched.h"

static int g_failures;

static void check(const char *what, int ok, const char *got, const char *want) {
  printf("%s  %s\n", ok ? "ok   " : "FAIL ", what);
  if (!ok) {
    printf("    got:  %s\n    want: %s\n", got, want);
    g_failures++;
  }
}

struct simjob {
  double arrive, duration, limit;
  int ranks, priority, preemptible;
  /* state */
  int state; /* 0 not yet, 1 queued, 2 running, 3 done */
  double started, ran, end;
  int stopping;
  int held[16];
};

/* Runs the jobs to completion; the log lists "id@time:ranks" of every start, and "pN" of
 * every preemption of job N, in order. */
static void simulate(int world, const int *node, struct simjob *j, int n, char *log, size_t len) {
  int busy[16] = {0};
  size_t at = 0;
  log[0] = '\0';
  struct lstmd_sched_job v[16];
  int assign[16][16];
  for (double t = 0; t < 10000; t += 0.5) {
    for (int i = 0; i < n; i++) { /* ends (a preempted job stops at the round after) */
      if (j[i].state != 2) continue;
      if (j[i].stopping || t >= j[i].end) {
        for (int k = 0; k < j[i].ranks; k++) busy[j[i].held[k]] = 0;
        j[i].ran += t - j[i].started;
        j[i].state = j[i].stopping ? 1 : 3;
        j[i].stopping = 0;
      }
    }
    for (int i = 0; i < n; i++)
      if (j[i].state == 0 && t >= j[i].arrive) j[i].state = 1;
    int m = 0, idx[16];
    for (int i = 0; i < n; i++) {
      if (j[i].state != 1 && j[i].state != 2) continue;
      v[m] = (struct lstmd_sched_job){.id = (uint64_t)i + 1, .running = j[i].state == 2,
                                      .ranks = j[i].ranks, .priority = j[i].priority,
                                      .time_limit_s = j[i].limit, .preemptible = j[i].preemptible,
                                      .started_s = j[i].started, .assign = assign[m],
                                      .used_s = j[i].ran + (j[i].state == 2 ? t - j[i].started : 0)};
      idx[m++] = i;
    }
    if (!m && t > 0) {
      int pending = 0;
      for (int i = 0; i < n; i++) pending |= j[i].state == 0;
      if (!pending) break;
    }
    lstmd_sched_plan(world, node, busy, NULL, t, v, (size_t)m);
    for (int k = 0; k < m; k++) {
      struct simjob *s = &j[idx[k]];
      if (v[k].action == LSTMD_SCHED_PREEMPT) {
        s->stopping = 1;
        at += (size_t)snprintf(log + at, len - at, "%sp%d", at ? " " : "", idx[k] + 1);
      } else if (v[k].action == LSTMD_SCHED_START) {
        s->state = 2;
        s->started = t;
        s->end = t + (s->duration - s->ran);
        at += (size_t)snprintf(log + at, len - at, "%s%d@%g:", at ? " " : "", idx[k] + 1, t);
        for (int r = 0; r < s->ranks; r++) {
          s->held[r] = v[k].assign[r];
          at += (size_t)snprintf(log + at, len - at, "%s%d", r ? "," : "", v[k].assign[r]);
        }
      }
    }
  }
}

#define J(arrive, duration, limit, ranks, priority, preemptible) \
  {arrive, duration, limit, ranks, priority, preemptible, 0, 0, 0, 0, 0, {0}}

static void expect_order(const char *what, int world, const int *node, struct simjob *j, int n,
                         const char *want) {
  char log[1024];
  simulate(world, node, j, n, log, sizeof log);
  check(what, !strcmp(log, want), log, want);
}

int main(void) {
  static const int one_node[16] = {0};
  {
    /* 1 rank; job 1 (no preemption) runs; then 2 (p0), 3 (p5), 4 (p5), 5 (p1) arrive */
    struct simjob j[] = {J(0, 10, 0, 1, 0, 0), J(1, 10, 0, 1, 0, 1), J(1, 10, 0, 1, 5, 1),
                         J(1, 10, 0, 1, 5, 1), J(1, 10, 0, 1, 1, 1)};
    expect_order("priorities: highest first, FIFO within a priority", 1, one_node, j, 5,
                 "1@0:0 3@10:0 4@20:0 5@30:0 2@40:0");
  }
  {
    /* 2 ranks. Job 1 (1 rank, limit 100) runs; job 2 needs 2 ranks: reserved start 100. Behind
     * it: 3 (no limit), 4 (limit 200: would end at 201), 5 (limit 50: ends at 51): only 5 runs
     * ahead. */
    struct simjob j[] = {J(0, 100, 100, 1, 0, 0), J(1, 10, 20, 2, 0, 0), J(1, 10, 0, 1, 0, 0),
                         J(1, 10, 200, 1, 0, 0), J(1, 40, 50, 1, 0, 0)};
    expect_order("backfill: only the job ending before the reserved start runs ahead", 2,
                 one_node, j, 5, "1@0:0 5@1:1 2@100:0,1 3@110:0 4@110:1");
  }
  {
    /* The same with job 1 unlimited: no reservation can be computed, nothing is backfilled. */
    struct simjob j[] = {J(0, 100, 0, 1, 0, 0), J(1, 10, 20, 2, 0, 0), J(1, 40, 50, 1, 0, 0)};
    expect_order("backfill: none past a head whose start is unknown", 2, one_node, j, 3,
                 "1@0:0 2@100:0,1 3@110:0");
  }
  {
    /* 2 ranks: 1 (p0) at 0, 2 (p1) at 0.5, then 3 (p5, 1 rank): the lowest priority (1) is
     * preempted, not the most recent (2); 1 resumes when 3 ends. */
    struct simjob j[] = {J(0, 20, 0, 1, 0, 1), J(0.5, 20, 0, 1, 1, 1), J(1, 5, 0, 1, 5, 1)};
    expect_order("preemption: the lowest priority first", 2, one_node, j, 3,
                 "1@0:0 2@0.5:1 p1 3@1.5:0 1@6.5:0");
  }
  {
    /* equal priorities: the most recently started (2) goes; just one for a 1-rank job */
    struct simjob j[] = {J(0, 20, 0, 1, 0, 1), J(0.5, 20, 0, 1, 0, 1), J(1, 5, 0, 1, 5, 1)};
    expect_order("preemption: the most recently started, just enough", 2, one_node, j, 3,
                 "1@0:0 2@0.5:1 p2 3@1.5:1 2@6.5:1");
  }
  {
    /* --no-preempt on 2: 1 goes instead */
    struct simjob j[] = {J(0, 20, 0, 1, 0, 1), J(0.5, 20, 0, 1, 0, 0), J(1, 5, 0, 1, 5, 1)};
    expect_order("preemption: never a non-preemptible job", 2, one_node, j, 3,
                 "1@0:0 2@0.5:1 p1 3@1.5:0 1@6.5:0");
  }
  {
    /* a 2-rank job of p5 preempts both 1-rank jobs of p0 */
    struct simjob j[] = {J(0, 20, 0, 1, 0, 1), J(0, 20, 0, 1, 0, 1), J(1, 5, 0, 2, 5, 1)};
    expect_order("preemption: as many as needed", 2, one_node, j, 3,
                 "1@0:0 2@0:1 p1 p2 3@1.5:0,1 1@6.5:0 2@6.5:1");
  }
  {
    /* ranks: 4 ranks on 2 nodes, rank 0 busy: a 2-rank job goes to node 1 (2-3), then a 1-rank
     * job to rank 1 (node 0) */
    static const int two_nodes[4] = {0, 0, 1, 1};
    struct simjob j[] = {J(0, 50, 0, 1, 0, 0), J(1, 10, 0, 2, 0, 0), J(1, 10, 0, 1, 0, 0)};
    expect_order("ranks: one node first, consecutive", 4, two_nodes, j, 3,
                 "1@0:0 2@1:2,3 3@1:1");
    /* 3 ranks wanted with only 1 + 2 free on two nodes: across nodes, lowest free ranks */
    struct simjob k[] = {J(0, 50, 0, 1, 0, 0), J(1, 10, 0, 3, 0, 0)};
    expect_order("ranks: across nodes when no node has enough", 4, two_nodes, k, 2,
                 "1@0:0 2@1:1,2,3");
  }
  {
    /* why a job waits, and its place in line */
    int busy[2] = {1, 0}, node[2] = {0, 0}, a0[2], a1[2], a2[2];
    struct lstmd_sched_job v[3] = {
        {.id = 12, .running = 1, .ranks = 1, .priority = 0, .started_s = 0, .assign = a0},
        {.id = 13, .ranks = 2, .priority = 5, .assign = a1},
        {.id = 14, .ranks = 1, .priority = 0, .assign = a2}};
    v[0].preemptible = 0;
    lstmd_sched_plan(2, node, busy, NULL, 1, v, 3);
    char got[1024];
    snprintf(got, sizeof got, "%d:%s | %d:%s", v[1].position, v[1].why, v[2].position, v[2].why);
    const char *want = "1:needs 2 ranks, 1 free; held by job 12 (not preemptible, no time limit) | "
                       "2:behind job 13 (priority 5); no time limit, so not backfilled";
    check("why waiting: ranks short, and behind the head", !strcmp(got, want), got, want);
  }
  {
    /* one rank short, said in the singular: both ranks busy, a 1-rank job waits */
    int busy[2] = {1, 1}, node[2] = {0, 0}, a0[2], a1[2];
    struct lstmd_sched_job v[2] = {
        {.id = 20, .running = 1, .ranks = 2, .priority = 0, .started_s = 0, .assign = a0},
        {.id = 21, .ranks = 1, .priority = 0, .assign = a1}};
    v[0].preemptible = 0;
    lstmd_sched_plan(2, node, busy, NULL, 1, v, 2);
    const char *want = "needs 1 rank, 0 free; held by job 20 (not preemptible, no time limit)";
    check("why waiting: one rank, singular", !strcmp(v[1].why, want), v[1].why, want);
  }
  {
    /* an unresponsive rank (2 of 3, daemon/serve_start.c): a 2-rank job goes on 0-1, never on
     * it; a 3-rank job waits without holding the head, so the 1-rank job behind it still runs
     * (on no rank but the free usable one: none here, it waits); busy gets only started ranks */
    int busy[3] = {0, 0, 0}, node[3] = {0, 0, 0}, usable[3] = {1, 1, 0}, a0[3], a1[3], a2[3];
    struct lstmd_sched_job v[3] = {{.id = 30, .ranks = 3, .assign = a0},
                                   {.id = 31, .ranks = 2, .assign = a1},
                                   {.id = 32, .ranks = 1, .assign = a2}};
    lstmd_sched_plan(3, node, busy, usable, 1, v, 3);
    char got[1024];
    snprintf(got, sizeof got, "%d %d,%d | %d:%s | %d:%s | busy %d%d%d", v[1].action, a1[0], a1[1],
             v[0].position, v[0].why, v[2].position, v[2].why, busy[0], busy[1], busy[2]);
    const char *want = "1 0,1 | 1:needs 3 ranks, only 2 usable (1 unresponsive) | 2:needs 1 rank, "
                       "0 free (1 unresponsive) | busy 110";
    check("unresponsive rank: never placed on; a job too big for the rest does not block",
          !strcmp(got, want), got, want);
    /* the same rank usable again: the 3-rank job starts on all three */
    int busy2[3] = {0, 0, 0};
    lstmd_sched_plan(3, node, busy2, NULL, 1, v, 1);
    snprintf(got, sizeof got, "%d %d,%d,%d", v[0].action, a0[0], a0[1], a0[2]);
    check("unresponsive rank answered again: used", !strcmp(got, "1 0,1,2"), got, "1 0,1,2");
  }
  printf("%s\n", g_failures ? "FAILED" : "all passed");
  return g_failures ? 1 : 0;
}
