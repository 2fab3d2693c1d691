/* test_pipe_schedule.c — the pipeline schedules and their simulator (engine/pipe_schedule.c):
 * over a grid of S, U, K, kinds and carried state every list holds each item once and runs with
 * matching message orders; makespans, bubbles and peak resident units equal their closed forms
 * (PIPELINE.md §2.4-2.5); misordered lists are reported as what they are; §2.5's table. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/clock.h"
#include "kernels/status.h"
#include "worker/engine/pipe_schedule.h"
#include "check.h"

#include "pipe_lists.h"

static struct lstmd_pipe_sim_config config(int S, int U, int K, int stride, int split, double lat,
                                           const struct lstmd_pipe_cost *cost) {
  return (struct lstmd_pipe_sim_config){.stages = S, .units = U, .chunks = K,
                                        .carry_stride = stride, .split = split, .lat = lat,
                                        .cost = cost, .cost_count = 1};
}

static struct lstmd_pipe_sim_result run(int S, int U, int K, int stride, int split, double lat,
                                        struct lstmd_pipe_cost c) {
  struct lstmd_pipe_sim_config cfg = config(S, U, K, stride, split, lat, &c);
  struct lstmd_pipe_sim_result r;
  lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r);
  return r;
}

static int rel_close(double got, double want) { return fabs(got - want) <= 1e-12 * fabs(want); }

/* Stage s's list holds every F, B, W item exactly once, with the messages PIPELINE.md names. */
static int list_is_complete(int S, int s, int U, int K) {
  static unsigned char seen[3][MAX_UK][MAX_UK];
  if (g_counts[s] != 3 * U * K) return 0;
  memset(seen, 0, sizeof seen);
  for (int i = 0; i < g_counts[s]; i++) {
    const struct lstmd_pipe_op *op = &g_lists[s][i];
    if ((unsigned)op->kind > 2 || op->unit < 0 || op->unit >= U || op->chunk < 0 ||
        op->chunk >= K || seen[op->kind][op->unit][op->chunk]++)
      return 0;
    int from = -1, to = -1;
    if (op->kind == LSTMD_PIPE_F) from = s > 0 ? s - 1 : -1, to = s < S - 1 ? s + 1 : -1;
    if (op->kind == LSTMD_PIPE_B) from = s < S - 1 ? s + 1 : -1, to = s > 0 ? s - 1 : -1;
    if (op->recv_from != from || op->send_to != to) return 0;
    if (lstmd_pipe_tag(op->unit, op->chunk, K) >= LSTMD_PIPE_TAG_COUNT) return 0;
  }
  return 1;
}

struct tally {
  const char *what;
  long runs, fails;
};

static void tally(struct tally *t, int ok, const char *fmt_kind, int S, int U, int K, int stride,
                  double got, double want) {
  t->runs++;
  if (ok) return;
  if (t->fails++ < 5)
    fprintf(stderr, "  %s: %s S=%d U=%d K=%d carry_stride=%d: got %.17g, want %.17g\n", t->what,
            fmt_kind, S, U, K, stride, got, want);
}

static void tally_report(const struct tally *t) {
  char line[128];
  snprintf(line, sizeof line, "%s (%ld runs)", t->what, t->runs);
  check_true(line, t->fails == 0 && t->runs > 0);
}

/* Tests 1, 2, 3, 5 over S 1..8, U 1..12, K 1..12, every kind, carry off / M = U / M = 1 /
 * M = 2 (U even). */
static void grid(void) {
  struct tally complete = {"grid: each F,B,W once per list"},
               runs_ok = {"grid: no deadlock, FIFO orders agree"},
               peaks = {"grid: peak units U / min(S-s,U)"},
               folded = {"grid: (N+S-1)(f+b) folded, lat 0"},
               phi1 = {"grid: bubble (S-1)/(N+S-1)"},
               split = {"grid: split closed form, f=b=w"},
               phi2 = {"grid: bubble 2(S-1)/(3N+2(S-1))"},
               asym = {"grid: fill-drain asym split+lat"},
               asym_folded = {"grid: fill-drain asym folded+lat"},
               same = {"grid: 1f1b == fill-drain at lat 0"};
  const struct lstmd_pipe_cost one = {1, 1, 1}, uneven = {1, 1.3, 0.9};
  const double lat = 0.4;
  for (int S = 1; S <= MAX_S; S++)
    for (int U = 1; U <= MAX_UK; U++)
      for (int K = 1; K <= MAX_UK; K++)
        for (int ki = 0; ki < 3; ki++) {
          enum lstmd_pipe_kind kind = g_kinds[ki];
          const char *name = lstmd_pipe_kind_name(kind);
          int fill = kind != LSTMD_PIPE_1F1B, N = U * K;
          if (build(kind, S, U, K)) {
            tally(&complete, 0, name, S, U, K, 0, -1, 3 * N);
            continue;
          }
          for (int s = 0; s < S; s++)
            tally(&complete, list_is_complete(S, s, U, K), name, S, U, K, 0, s, s);
          int strides[4] = {0, U, 1, 2}, n_strides = U % 2 == 0 ? 4 : 3;
          for (int i = 0; i < n_strides; i++) {
            struct lstmd_pipe_sim_result r = run(S, U, K, strides[i], 1, 0.0, one);
            tally(&runs_ok, r.verdict == LSTMD_PIPE_OK && !r.deadlocked && !r.fifo_mismatch,
                  name, S, U, K, strides[i], r.verdict, 0);
            for (int s = 0; s < S; s++) {
              int want = fill ? U : (S - s < U ? S - s : U);
              tally(&peaks, r.peak_units[s] == want &&
                              lstmd_pipe_peak_units(kind, S, s, U, K) == want,
                    name, S, U, K, strides[i], r.peak_units[s], want);
            }
            /* split, f = beta = w = 1, lat 0: (N+S-1) + (S-1) + 2N */
            double t_split = (N + S - 1) + (S - 1) + 2.0 * N;
            tally(&split, rel_close(r.makespan, t_split), name, S, U, K, strides[i], r.makespan,
                  t_split);
            double phi = 2.0 * (S - 1) / (3.0 * N + 2.0 * (S - 1));
            tally(&phi2, fabs(r.bubble - phi) <= 1e-12, name, S, U, K, strides[i], r.bubble, phi);
          }
          struct lstmd_pipe_sim_result r = run(S, U, K, 0, 0, 0.0, one);
          double t_fold = (N + S - 1) * 3.0, phi = (double)(S - 1) / (N + S - 1);
          tally(&folded, r.verdict == LSTMD_PIPE_OK && rel_close(r.makespan, t_fold), name, S, U,
                K, 0, r.makespan, t_fold);
          tally(&phi1, fabs(r.bubble - phi) <= 1e-12, name, S, U, K, 0, r.bubble, phi);
          /* Uneven costs: fill-drain with latency in closed form; 1f1b at lat 0 equals it. */
          double f = uneven.f, be = uneven.beta, w = uneven.w;
          double fd_split = (N + S - 1) * f + (S - 1) * be + N * (be + w);
          double fd_fold = (N + S - 1) * (f + be + w);
          r = run(S, U, K, 0, 1, lat, uneven);
          for (int s = 0; s < S; s++) /* residency follows list order, whatever the costs */
            tally(&peaks, r.peak_units[s] == lstmd_pipe_peak_units(kind, S, s, U, K), name, S, U,
                  K, 0, r.peak_units[s], lstmd_pipe_peak_units(kind, S, s, U, K));
          if (fill) {
            tally(&asym, rel_close(r.makespan, fd_split + 2 * (S - 1) * lat), name, S, U, K, 0,
                  r.makespan, fd_split + 2 * (S - 1) * lat);
            r = run(S, U, K, 0, 0, lat, uneven);
            tally(&asym_folded, rel_close(r.makespan, fd_fold + 2 * (S - 1) * lat), name, S, U, K,
                  0, r.makespan, fd_fold + 2 * (S - 1) * lat);
          }
          r = run(S, U, K, 0, 1, 0.0, uneven);
          tally(&same, rel_close(r.makespan, fd_split), name, S, U, K, 0, r.makespan, fd_split);
          r = run(S, U, K, 0, 0, 0.0, uneven);
          tally(&same, rel_close(r.makespan, fd_fold), name, S, U, K, 0, r.makespan, fd_fold);
        }
  struct tally *all[] = {&complete, &runs_ok, &peaks, &folded, &phi1,
                         &split,    &phi2,    &asym,  &asym_folded, &same};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tally_report(all[i]);
}

/* The brief's cases by name: asymmetric costs at S = 2, 3, 4 and the 1f1b latency example. */
static void named_cases(void) {
  const struct lstmd_pipe_cost uneven = {1, 1.3, 0.9}, one = {1, 1, 1};
  int ok = 1;
  for (int S = 2; S <= 4; S++)
    for (int ki = 0; ki < 3; ki += 2) {
      build(g_kinds[ki], S, 4, 3);
      struct lstmd_pipe_sim_result r = run(S, 4, 3, 0, 1, 0.4, uneven);
      double want = (12 + S - 1) * 1.0 + (S - 1) * 1.3 + 12 * (1.3 + 0.9) + 2 * (S - 1) * 0.4;
      ok &= rel_close(r.makespan, want);
    }
  check_true("asym f=1 b=1.3 w=.9 lat=.4 S=2..4", ok);
  /* §2.5: S = 4, U = 8, K = 1, lat = 0.25, f = 1, b = 2 folded: 34.5 fill-drain, 37.0 1f1b. */
  build(LSTMD_PIPE_GPIPE, 4, 8, 1);
  struct lstmd_pipe_sim_result g = run(4, 8, 1, 0, 0, 0.25, one);
  build(LSTMD_PIPE_1F1B, 4, 8, 1);
  struct lstmd_pipe_sim_result o = run(4, 8, 1, 0, 0, 0.25, one);
  printf("  S=4 U=8 K=1 lat=0.25: gpipe %.4g, 1f1b %.4g\n", g.makespan, o.makespan);
  check_true("lat 0.25: gpipe 34.5, 1f1b 37.0", rel_close(g.makespan, 34.5) &&
                                                   rel_close(o.makespan, 37.0));
}

/* PIPELINE.md §2.5's table at f = beta = w, lat 0. */
static void table(void) {
  static const struct {
    int S;
    enum lstmd_pipe_kind kind;
    int U, K;
    double phi_fold, phi_split;
    int peak[4];
  } rows[] = {
      {2, LSTMD_PIPE_GPIPE, 4, 1, 0.200, 0.143, {4, 4}},
      {2, LSTMD_PIPE_1F1B, 4, 1, 0.200, 0.143, {2, 1}},
      {2, LSTMD_PIPE_WAVEFRONT, 1, 16, 0.059, 0.040, {1, 1}},
      {2, LSTMD_PIPE_1F1B, 4, 4, 0.059, 0.040, {2, 1}},
      {4, LSTMD_PIPE_GPIPE, 8, 1, 0.273, 0.200, {8, 8, 8, 8}},
      {4, LSTMD_PIPE_1F1B, 8, 1, 0.273, 0.200, {4, 3, 2, 1}},
      {4, LSTMD_PIPE_WAVEFRONT, 1, 16, 0.158, 0.111, {1, 1, 1, 1}},
      {4, LSTMD_PIPE_WAVEFRONT, 1, 32, 0.086, 0.059, {1, 1, 1, 1}},
      {4, LSTMD_PIPE_1F1B, 4, 8, 0.086, 0.059, {4, 3, 2, 1}},
  };
  const struct lstmd_pipe_cost one = {1, 1, 1};
  int ok = 1;
  printf("  S  kind       U   K  bubble(no split)  bubble(split)  peak units per stage\n");
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    struct lstmd_pipe_sim_config cfg = config(rows[i].S, rows[i].U, rows[i].K, 0, 0, 0.0, &one);
    struct lstmd_pipe_sim_result fold, split;
    int rc = lstmd_pipe_predict(rows[i].kind, &cfg, &fold);
    cfg.split = 1;
    rc |= lstmd_pipe_predict(rows[i].kind, &cfg, &split);
    printf("  %d  %-9s %2d  %2d  %16.3f  %13.3f  [", rows[i].S, lstmd_pipe_kind_name(rows[i].kind),
           rows[i].U, rows[i].K, fold.bubble, split.bubble);
    int row_ok = rc == 0 && fabs(fold.bubble - rows[i].phi_fold) <= 5e-4 &&
                 fabs(split.bubble - rows[i].phi_split) <= 5e-4;
    for (int s = 0; s < rows[i].S; s++) {
      printf("%s%d", s ? ", " : "", split.peak_units[s]);
      row_ok &= split.peak_units[s] == rows[i].peak[s] && fold.peak_units[s] == rows[i].peak[s];
    }
    printf("]%s\n", row_ok ? "" : "  <- differs from PIPELINE.md");
    ok &= row_ok;
  }
  check_true("PIPELINE.md 2.5 table reproduced", ok);
}

static void swap_ops(int s, int i, int j) {
  struct lstmd_pipe_op t = g_ops[s][i];
  g_ops[s][i] = g_ops[s][j];
  g_ops[s][j] = t;
}

static int stuck_is(const struct lstmd_pipe_sim_result *r, const int *want, int S) {
  for (int s = 0; s < S; s++)
    if (r->stuck_pos[s] != want[s]) return 0;
  return 1;
}

/* Test 4: lists that must not run, and what the simulator says about each. */
static void misordered(void) {
  const struct lstmd_pipe_cost one = {1, 1, 1};
  char msg[512];
  /* gpipe S=3 U=2 K=2, stage 1: the first B (B(1,1)) before the last F (F(1,1)) it needs. The
   * F order and the B order stay as they were, so the message orders agree: a pure deadlock. */
  build(LSTMD_PIPE_GPIPE, 3, 2, 2);
  swap_ops(1, 3, 4);
  struct lstmd_pipe_sim_config cfg = config(3, 2, 2, 0, 1, 0.0, &one);
  struct lstmd_pipe_sim_result r;
  int rc = lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r);
  printf("  %s\n", lstmd_pipe_describe(&r, g_lists, g_counts, msg, sizeof msg));
  check_true("B before its F: deadlock at [4,3,3]",
             rc == LSTMD_EINVAL && r.verdict == LSTMD_PIPE_DEADLOCK && r.deadlocked &&
                 !r.fifo_mismatch && stuck_is(&r, (int[]){4, 3, 3}, 3) && strstr(msg, "deadlock"));
  /* 1f1b S=2 U=3 K=2, last stage: B(0,1) before F(0,1). */
  build(LSTMD_PIPE_1F1B, 2, 3, 2);
  swap_ops(1, 1, 2);
  cfg = config(2, 3, 2, 0, 1, 0.0, &one);
  rc = lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r);
  printf("  %s\n", lstmd_pipe_describe(&r, g_lists, g_counts, msg, sizeof msg));
  check_true("1f1b B before its F: deadlock [4,1]", rc == LSTMD_EINVAL &&
                                                        r.verdict == LSTMD_PIPE_DEADLOCK &&
                                                        stuck_is(&r, (int[]){4, 1}, 2));
  /* gpipe S=2 U=2 K=1: stage 0 sends (u=0) then (u=1); stage 1 receives (u=1) first. Items are
   * matched by tag, so every op can run: the lists complete, and the order check reports it. */
  build(LSTMD_PIPE_GPIPE, 2, 2, 1);
  swap_ops(1, 0, 1);
  cfg = config(2, 2, 1, 0, 1, 0.0, &one);
  rc = lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r);
  printf("  %s\n", lstmd_pipe_describe(&r, g_lists, g_counts, msg, sizeof msg));
  check_true("recv (u=1) first: FIFO mismatch, runs",
             rc == LSTMD_EINVAL && r.verdict == LSTMD_PIPE_FIFO_MISMATCH && !r.deadlocked &&
                 r.fifo_mismatch && !r.fifo_down && r.fifo_lower == 0 && r.fifo_index == 0 &&
                 r.sent_unit == 0 && r.recv_unit == 1 && r.makespan > 0 && strstr(msg, "FIFO"));
  /* The same lists with state carried from unit 0 to unit 1 (M = 1): F(1,1,0) needs F(1,0,0),
   * which stage 1 runs later: a deadlock, and the order mismatch is still reported. */
  cfg.carry_stride = 1;
  rc = lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r);
  printf("  %s\n", lstmd_pipe_describe(&r, g_lists, g_counts, msg, sizeof msg));
  check_true("same with carry M=1: deadlock + FIFO", rc == LSTMD_EINVAL &&
                                                         r.verdict == LSTMD_PIPE_DEADLOCK &&
                                                         r.fifo_mismatch &&
                                                         stuck_is(&r, (int[]){2, 0}, 2));
  /* Gradients: stage 1 sends B(1) then B(0); stage 0 receives B(0) first. */
  build(LSTMD_PIPE_GPIPE, 2, 2, 1);
  swap_ops(0, 2, 4);
  swap_ops(0, 3, 5);
  cfg.carry_stride = 0;
  rc = lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r);
  printf("  %s\n", lstmd_pipe_describe(&r, g_lists, g_counts, msg, sizeof msg));
  check_true("gradients out of order: FIFO mismatch", r.verdict == LSTMD_PIPE_FIFO_MISMATCH &&
                                                          r.fifo_down && r.fifo_lower == 0 &&
                                                          r.sent_unit == 1 && r.recv_unit == 0);
  /* Lists that are not every item once with its messages; configs that are not usable. */
  build(LSTMD_PIPE_GPIPE, 2, 2, 1);
  g_ops[0][5] = g_ops[0][3];
  rc = lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r);
  int ok = rc == LSTMD_EINVAL && r.verdict == LSTMD_PIPE_BAD_LIST && r.bad_stage == 0 &&
           r.bad_pos == 5;
  build(LSTMD_PIPE_GPIPE, 2, 2, 1);
  g_ops[1][0].recv_from = -1;
  lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r);
  ok &= r.verdict == LSTMD_PIPE_BAD_LIST && r.bad_stage == 1 && r.bad_pos == 0;
  build(LSTMD_PIPE_GPIPE, 2, 2, 1);
  g_counts[1]--;
  lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r);
  ok &= r.verdict == LSTMD_PIPE_BAD_LIST && r.bad_stage == 1 && r.bad_pos == -1;
  printf("  %s\n", lstmd_pipe_describe(&r, g_lists, g_counts, msg, sizeof msg));
  check_true("duplicate item, wrong peer, short list", ok);
  build(LSTMD_PIPE_GPIPE, 2, 2, 1);
  cfg.cost_count = 3;
  ok = lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r) == LSTMD_EINVAL &&
       r.verdict == LSTMD_PIPE_BAD_CONFIG;
  cfg.cost_count = 1, cfg.lat = NAN;
  ok &= lstmd_pipe_simulate(&cfg, g_lists, g_counts, &r) == LSTMD_EINVAL &&
        r.verdict == LSTMD_PIPE_BAD_CONFIG;
  check_true("bad config (cost_count, lat NaN)", ok);
}

/* Names, tags, argument checks. */
static void small_contracts(void) {
  enum lstmd_pipe_kind k = LSTMD_PIPE_GPIPE;
  int ok = 1;
  for (int i = 0; i < 3; i++)
    ok &= lstmd_pipe_kind_parse(lstmd_pipe_kind_name(g_kinds[i]), &k) == 0 && k == g_kinds[i];
  ok &= lstmd_pipe_kind_parse("zb", &k) == LSTMD_EINVAL && k == LSTMD_PIPE_WAVEFRONT;
  check_true("kind names round trip", ok);
  check_true("tags: U*K <= 32768 only", lstmd_pipe_check_tags(128, 256) == 0 &&
                                            lstmd_pipe_check_tags(1, 32768) == 0 &&
                                            lstmd_pipe_check_tags(129, 256) == LSTMD_EINVAL &&
                                            lstmd_pipe_check_tags(0, 4) == LSTMD_EINVAL &&
                                            lstmd_pipe_tag(3, 2, 5) == 17);
  struct lstmd_pipe_op ops[12];
  check_true("schedule: capacity and stage checked",
             lstmd_pipe_schedule(LSTMD_PIPE_1F1B, 2, 0, 2, 2, ops, 11) == LSTMD_EINVAL &&
                 lstmd_pipe_schedule(LSTMD_PIPE_1F1B, 2, 2, 2, 2, ops, 12) == LSTMD_EINVAL &&
                 lstmd_pipe_schedule(LSTMD_PIPE_1F1B, 2, 1, 2, 2, ops, 12) == 12);
}

int main(void) {
  double t0 = lstmd_now_s();
  small_contracts();
  grid();
  named_cases();
  table();
  misordered();
  printf("  %.2f s\n", lstmd_now_s() - t0);
  return check_summary("test_pipe_schedule");
}
