/* test_comm.c — collectives checked against answers known in closed form, on any number of
 * ranks (ctest runs it under mpirun -np 3): in-place and out-of-place sums of odd sizes,
 * doubles, broadcast, gather, and the reducer thread's buckets that split a buffer unevenly. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/reducer.h"
#include "kernels/status.h"
#include "check.h"

/* Rank r contributes value(r, i) = (r + 1) · (i % 97 + 1) / 8: exact in float, and the sum over
 * N ranks is N(N+1)/2 · (i % 97 + 1) / 8. */
static float value(int r, size_t i) { return (float)((r + 1) * (int)(i % 97 + 1)) / 8.0f; }
static double expected(int n, size_t i) { return n * (n + 1) / 2.0 * (double)(i % 97 + 1) / 8.0; }

static void fill(float *x, size_t n, int rank) {
  for (size_t i = 0; i < n; i++) x[i] = value(rank, i);
}

static int all_expected(const float *x, size_t n, int world) {
  for (size_t i = 0; i < n; i++)
    if ((double)x[i] != expected(world, i)) return 0;
  return 1;
}

int main(int argc, char **argv) {
  struct lstmd_comm *c;
  if (lstmd_comm_init(&argc, &argv, &c)) return 1;
  const int rank = lstmd_comm_rank(c), world = lstmd_comm_size(c);
  char what[128];
  static const size_t sizes[] = {1, 7, 1000, 1000003};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    const size_t n = sizes[k];
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    fill(a, n, rank);
    int ok = lstmd_comm_allreduce_sum_f32(c, a, n) == 0 && all_expected(a, n, world);
    snprintf(what, sizeof what, "allreduce in place, n=%zu", n);
    check_true(what, ok);
    fill(a, n, rank);
    ok = lstmd_comm_allreduce_sum_f32_to(c, a, b, n) == 0 && all_expected(b, n, world) &&
         a[n - 1] == value(rank, n - 1);
    snprintf(what, sizeof what, "allreduce out of place, n=%zu", n);
    check_true(what, ok);
    free(a);
    free(b);
  }
  double d[3] = {rank, 1.0, -rank};
  int ok = lstmd_comm_allreduce_sum_f64(c, d, 3) == 0 && d[0] == world * (world - 1) / 2.0 &&
           d[1] == world && d[2] == -d[0];
  check_true("allreduce f64 sum", ok);
  double m[1] = {rank == world - 1 ? 5.0 : 1.0};
  check_true("allreduce f64 max", lstmd_comm_allreduce_max_f64(c, m, 1) == 0 && m[0] == 5.0);

  /* The agreement vote, with answers known in closed form for any world >= 2. */
  int who = 7;
  ok = lstmd_comm_agree(c, LSTMD_OK, &who) == LSTMD_OK && who == -1;
  check_true("agree: nobody failed -> 0, no failed rank", ok);
  int got = lstmd_comm_agree(c, rank == 1 ? LSTMD_EWRITE : LSTMD_OK, &who);
  check_true("agree: rank 1 failed -> every rank gets its status and rank",
             got == LSTMD_EWRITE && who == 1);
  /* two failures: each failing rank keeps its own status; the others get the most negative one
   * (EWRITE -12 < EIO -3), from the lowest rank holding it */
  const int mine_st = rank == 0 ? LSTMD_EIO : rank == world - 1 ? LSTMD_EWRITE : LSTMD_OK;
  got = lstmd_comm_agree(c, mine_st, &who);
  ok = who == world - 1 && (rank == 0 ? got == LSTMD_EIO : got == LSTMD_EWRITE);
  check_true("agree: two failures -> own status on the failing ranks, the chosen one elsewhere, "
             "one failed rank everywhere", ok);
  check_true("agree: NULL comm is one rank", lstmd_comm_agree(NULL, LSTMD_EIO, &who) == LSTMD_EIO &&
                                                 who == 0);

  char msg[64] = {0};
  if (rank == 0) strcpy(msg, "plan from rank 0");
  check_true("broadcast", lstmd_comm_bcast(c, msg, sizeof msg, 0) == 0 && !strcmp(msg, "plan from rank 0"));
  int mine[2] = {rank, 10 * rank}, *all = calloc(2 * (size_t)world, sizeof(int));
  ok = lstmd_comm_gather(c, mine, sizeof mine, all, 0) == 0;
  for (int r = 0; ok && rank == 0 && r < world; r++) ok = all[2 * r] == r && all[2 * r + 1] == 10 * r;
  check_true("gather to rank 0", ok);
  free(all);

  /* The reducer: an odd-size buffer in uneven buckets, submitted from the end as backward does. */
  struct lstmd_reducer *red;
  const size_t n = 100003;
  float *g = malloc(n * sizeof *g);
  fill(g, n, rank);
  ok = lstmd_reducer_create(c, &red) == 0;
  if (ok) {
    static const size_t cuts[] = {100003, 70001, 70000, 3333, 1, 0};
    for (int k = 0; k < 5; k++) lstmd_reducer_submit(red, g + cuts[k + 1], cuts[k] - cuts[k + 1]);
    double waited = -1;
    ok = lstmd_reducer_wait_all(red, &waited) == 0 && waited >= 0 && all_expected(g, n, world);
    lstmd_reducer_destroy(red);
  }
  check_true("reducer: 5 uneven buckets summed", ok);
  free(g);
  check_true("barrier", lstmd_comm_barrier(c) == 0);
  int failed = check_summary(rank == 0 ? "test_comm (rank 0)" : "test_comm");
  double f = failed;
  lstmd_comm_allreduce_max_f64(c, &f, 1);
  lstmd_comm_finalize(c);
  return f != 0.0;
}
