/* test_comm.c — collectives checked against answers known in closed form, on any number of
 * ranks (ctest runs it under mpirun -np 3): in-place and out-of-place sums of odd sizes,
 * doubles, broadcast, gather, the reducer thread's buckets that split a buffer unevenly,
 * sub-communicators (lstmd_comm_split) with collectives and a reducer on them, and gatherv of
 * blocks of 0, 1 and 1000003 bytes at scattered displacements, in pieces of 2^30, 4096 and 1000
 * bytes, at displacements beyond 2^32 (a sparse mapping), with a size mismatch; a control
 * message sent with lstmd_comm_isend_msg to a rank that is not receiving yet (the sender goes on
 * at once); lstmd_comm_solo (comm/solo.c): a root working 3 times its waiters' bound is waited
 * for (its heartbeats), and hundreds of calls back to back, some failing by the vote, with
 * every call's beats taken by that call alone and none left behind. With
 * LSTMD_TEST_BIG_GATHERV=1 rank 1 also sends a block of 2^31 + 5 bytes (2 GiB of memory on
 * root; not in ctest).
 *
 * Started without mpirun and given mpirun's path (test_comm_nested), it is an MPI singleton that
 * runs `mpirun -np 2` of itself from a forked child after lstmd_comm_forget_launch_env, as
 * `lstmd selftest` does for its two-rank nccl check: without that, the child's mpirun inherits
 * the singleton's OMPI_ and PMIX_ settings and exits 1 without a word. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/comm_internal.h" /* lstmd_comm_gatherv_pieces */
#include "comm/reducer.h"
#include "kernels/clock.h"
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

/* Sub-communicators of the world: color = rank % 2 and key = ±rank, and color < 0 for rank 0. */
static void test_split(struct lstmd_comm *c, int rank, int world) {
  const int color = rank % 2, m = (world - color + 1) / 2; /* ranks color, color + 2, ... */
  for (int reversed = 0; reversed < 2; reversed++) {
    struct lstmd_comm *sub = NULL;
    int ok = lstmd_comm_split(c, color, reversed ? -rank : rank, &sub) == 0 && sub;
    const int want_rank = reversed ? m - 1 - rank / 2 : rank / 2;
    ok = ok && lstmd_comm_size(sub) == m && lstmd_comm_rank(sub) == want_rank &&
         lstmd_comm_local_rank(sub) == lstmd_comm_local_rank(c) &&
         lstmd_comm_local_size(sub) == lstmd_comm_local_size(c) &&
         !strcmp(lstmd_comm_host(sub), lstmd_comm_host(c));
    check_true(reversed ? "split, key -rank: size, rank, host" : "split, key rank: size, rank, host", ok);
    if (!sub) continue;
    double d[2] = {rank + 1, 1.0}; /* Σ (color + 1 + 2j), j < m = m(color + 1) + m(m − 1) */
    ok = lstmd_comm_allreduce_sum_f64(sub, d, 2) == 0 && d[0] == m * (color + 1.0) + m * (m - 1.0) &&
         d[1] == m;
    check_true("split: allreduce on each sub-communicator", ok);
    char msg[32] = "";
    if (lstmd_comm_rank(sub) == 0) snprintf(msg, sizeof msg, "from world rank %d", rank);
    char want[32];
    snprintf(want, sizeof want, "from world rank %d", reversed ? color + 2 * (m - 1) : color);
    check_true("split: broadcast from sub rank 0",
               lstmd_comm_bcast(sub, msg, sizeof msg, 0) == 0 && !strcmp(msg, want));
    struct lstmd_reducer *red;
    const size_t n = 30011;
    float *g = malloc(n * sizeof *g);
    fill(g, n, lstmd_comm_rank(sub));
    ok = lstmd_reducer_create(sub, &red) == 0;
    if (ok) {
      lstmd_reducer_submit(red, g + 10000, n - 10000);
      lstmd_reducer_submit(red, g, 10000);
      ok = lstmd_reducer_wait_all(red, NULL) == 0 && all_expected(g, n, m);
      lstmd_reducer_destroy(red);
    }
    check_true("split: reducer on a sub-communicator sums", ok);
    free(g);
    lstmd_comm_free(sub);
  }
  struct lstmd_comm *sub = (struct lstmd_comm *)1;
  int ok = lstmd_comm_split(c, rank == 0 ? -1 : 0, rank, &sub) == 0;
  ok = ok && (rank == 0 ? sub == NULL
                        : sub && lstmd_comm_size(sub) == world - 1 && lstmd_comm_rank(sub) == rank - 1);
  if (rank != 0 && sub) {
    double one = 1.0;
    ok = ok && lstmd_comm_allreduce_sum_f64(sub, &one, 1) == 0 && one == world - 1;
  }
  check_true("split: color < 0 joins none", ok);
  lstmd_comm_free(rank == 0 ? NULL : sub);
}

/* gatherv: rank r's block has size block_size(r) and byte i = block_byte(r, i). */
static size_t block_size(int r) {
  static const size_t sizes[] = {1000003, 0, 1, 4099};
  return sizes[r % 4];
}
static uint8_t block_byte(int r, size_t i) { return (uint8_t)(i * 31 + (size_t)r * 7 + 1); }

/* Gathers every rank's block to root at displacements base + (scattered, with gaps) through
 * lstmd_comm_gatherv_pieces (piece 0: lstmd_comm_gatherv); checks the blocks and the gaps. */
static int gatherv_case(struct lstmd_comm *c, int rank, int world, int root, size_t piece,
                        size_t base, uint8_t *out, size_t out_bytes) {
  const size_t mine = block_size(rank);
  uint8_t *in = malloc(mine + 1);
  for (size_t i = 0; i < mine; i++) in[i] = block_byte(rank, i);
  size_t *counts = calloc((size_t)world, sizeof *counts), *displs = calloc((size_t)world, sizeof *displs);
  size_t end = base;
  for (int r = world - 1; r >= 0; r--) { /* reverse order, odd gaps */
    counts[r] = block_size(r);
    displs[r] = end + 13 + (size_t)r;
    end = displs[r] + counts[r];
  }
  int ok = rank != root || end <= out_bytes;
  if (rank == root && ok) memset(out + base, 0xEE, end - base);
  const int rc = piece ? lstmd_comm_gatherv_pieces(c, in, mine, out, counts, displs, root, piece)
                       : lstmd_comm_gatherv(c, in, mine, out, counts, displs, root);
  ok = ok && rc == 0;
  if (rank == root && ok) {
    size_t at = base;
    for (int r = world - 1; r >= 0; r--) {
      for (; at < displs[r]; at++) ok &= out[at] == 0xEE;
      for (size_t i = 0; i < counts[r]; i++) ok &= out[at++] == block_byte(r, i);
    }
  }
  free(in);
  free(counts);
  free(displs);
  return ok;
}

static void test_gatherv(struct lstmd_comm *c, int rank, int world) {
  const size_t cap = 4u << 20;
  uint8_t *out = malloc(cap);
  char what[96];
  static const size_t pieces[] = {0, 4096, 1000};
  for (int k = 0; k < 3; k++)
    for (int root = 0; root < world; root = root == 0 && world > 1 ? world - 1 : world) { /* 0, last */
      snprintf(what, sizeof what, "gatherv to rank %d, %s%zu-byte pieces", root,
               pieces[k] ? "" : "2^30 = default, ", pieces[k] ? pieces[k] : (size_t)1 << 30);
      check_true(what, gatherv_case(c, rank, world, root, pieces[k], 7, out, cap));
    }
  free(out);
  /* Displacements beyond 2^32 on root: a sparse mapping (only the touched pages cost memory). */
  const size_t far = (size_t)9 << 29, span = far + (8u << 20); /* 4.5 GiB + 8 MiB */
  uint8_t *big = MAP_FAILED;
  int mapped = 1;
  if (rank == 0) {
    big = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    mapped = big != MAP_FAILED;
  }
  double agree = mapped;
  lstmd_comm_allreduce_sum_f64(c, &agree, 1);
  if (agree == world) {
    check_true("gatherv: displacements beyond 2^32", gatherv_case(c, rank, world, 0, 0, far, big, span));
    if (rank == 0) munmap(big, span);
  } else {
    printf("gatherv beyond 2^32: skipped (no sparse 4.5 GiB mapping here)\n");
  }
  /* A size mismatch: root expects 5 bytes of rank 1, which has 0: an error on every rank. */
  if (world < 2) return;
  size_t *counts = calloc((size_t)world, sizeof *counts), *displs = calloc((size_t)world, sizeof *displs);
  uint8_t *small = calloc(1, 64 + 8 * (size_t)world);
  for (int r = 0; r < world; r++) {
    counts[r] = r == 1 ? 5 : 1;
    displs[r] = 8 * (size_t)r;
  }
  lstmd_last_error_clear();
  const int rc = lstmd_comm_gatherv(c, small, rank == 1 ? 0 : 1, small + 8, counts, displs, 0);
  char err[256];
  lstmd_last_error(err, sizeof err);
  int ok = rc == LSTMD_EINVAL;
  if (rank == 1) ok &= strstr(err, "rank 1 has 0 bytes, root rank 0 expects 5") != NULL;
  check_true("gatherv: a size mismatch fails on every rank", ok);
  free(counts);
  free(displs);
  free(small);
  if (getenv("LSTMD_TEST_BIG_GATHERV") && world >= 2) {
    /* Rank 1 sends 2^31 + 5 bytes (sparse: zero pages but for markers) to displacement 2^32 + 3. */
    const size_t n = ((size_t)1 << 31) + 5, at = ((size_t)1 << 32) + 3;
    size_t cnt[64] = {0}, dsp[64] = {0};
    cnt[1] = n;
    dsp[1] = at;
    uint8_t *buf = MAP_FAILED;
    if (rank <= 1) buf = mmap(NULL, rank == 0 ? at + n : n, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    static const size_t marks[] = {0, ((size_t)1 << 30) - 1, (size_t)1 << 30, ((size_t)1 << 31) - 1,
                                   (size_t)1 << 31, ((size_t)1 << 31) + 4};
    if (rank == 1)
      for (int k = 0; k < 6; k++) buf[marks[k]] = (uint8_t)(11 + k);
    if (rank == 0) memset(buf + at - 4096, 0xEE, 4096);
    const double t0 = lstmd_now_s();
    ok = world <= 64 && (rank > 1 || buf != MAP_FAILED) &&
         lstmd_comm_gatherv(c, buf, rank == 1 ? n : 0, buf, cnt, dsp, 0) == 0;
    if (rank == 0 && ok) {
      for (int k = 0; k < 6; k++) ok &= buf[at + marks[k]] == 11 + k;
      ok &= buf[at + 1] == 0 && buf[at + n - 2] == 0 && buf[at - 1] == 0xEE;
      printf("  2^31 + 5 bytes gathered in %.2f s\n", lstmd_now_s() - t0);
    }
    check_true("gatherv: 2^31 + 5 bytes at displacement 2^32 + 3", ok);
    if (rank <= 1 && buf != MAP_FAILED) munmap(buf, rank == 0 ? at + n : n);
  }
}

/* lstmd_comm_isend_msg (the daemon's "go" with the job's config, several KiB): rank 0 sends
 * 1 MiB (far above any eager limit: it moves only once the receiver takes it) to rank 1, which
 * sleeps 0.5 s before it receives. The post must return at once, not when rank 1 receives (a
 * blocking send to a frozen rank held the scheduler), and the send completes after rank 1 took
 * it, with the bytes intact. */
static void test_isend_msg(struct lstmd_comm *c, int rank, int world) {
  if (world < 2) return;
  enum { kTag = 77 };
  const size_t bytes = 1u << 20;
  lstmd_comm_barrier(c);
  if (rank == 0) {
    unsigned char *msg = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) msg[i] = (unsigned char)(i * 13 + 5);
    struct lstmd_comm_send *s = NULL;
    const double t0 = lstmd_now_s();
    int ok = lstmd_comm_isend_msg(c, 1, kTag, msg, bytes, &s) == 0 && s;
    const double posted = lstmd_now_s() - t0;
    int done = 0;
    while (ok && !done && lstmd_now_s() - t0 < 10.0) {
      ok = lstmd_comm_send_test(s, &done) == 0;
      if (!done) lstmd_sleep_us(1000);
    }
    printf("  isend of 1 MiB to a rank asleep for 0.5 s: returned after %.1f ms, done after "
           "%.0f ms\n", 1e3 * posted, 1e3 * (lstmd_now_s() - t0));
    check_true("isend_msg: returns at once (< 100 ms) while the receiver is not receiving",
               ok && posted < 0.1);
    check_true("isend_msg: the send completes once the receiver took it", ok && done);
    free(msg);
  } else if (rank == 1) {
    lstmd_sleep_us(500000);
    void *buf = NULL;
    size_t got = 0;
    int src = -1, tag = -1;
    int ok = lstmd_comm_recv_msg(c, 0, kTag, 10.0, 2.0, &buf, &got, &src, &tag) == 0 &&
             got == bytes && src == 0 && tag == kTag;
    for (size_t i = 0; ok && i < bytes; i++) ok = ((unsigned char *)buf)[i] == (unsigned char)(i * 13 + 5);
    free(buf);
    check_true("isend_msg: 1 MiB received whole", ok);
  }
  lstmd_comm_barrier(c);
}

/* lstmd_comm_solo's work in test_solo: sleep `us`, return `status`. */
struct solo_work {
  long us;
  int status;
};
static int solo_work(void *ctx) {
  const struct solo_work *w = ctx;
  if (w->us) lstmd_sleep_us(w->us);
  return w->status;
}

/* lstmd_comm_solo (comm/solo.c; rank 0's checkpoint writes): the waiting ranks' bound is the
 * root's silence, not the length of its work, and each call takes its own heartbeats only.
 * (a) the root works 0.9 s with a bound of 0.3 s (beats every 75 ms): every rank must return 0.
 * (b) 400 calls back to back, roots 0 then the last rank, work of 0 (most: the root is beating
 *     for the next call while a waiter still finishes this one, the race solo.c's rationale 2
 *     describes: a waiter that took the next call's beats, its last one among them, would wait
 *     in that call for a last beat that never comes and end the job after 0.3 s of "silence")
 *     or 0.2 s (several beats), every 7th failing (LSTMD_EWRITE): each call's vote must be right
 *     on every rank (the root named as the failed rank).
 * (c) after them, no heartbeat is left unreceived on any rank (the communicator can be freed). */
static void test_solo(struct lstmd_comm *c, int world) {
  if (world < 2) return;
  const double bound = 0.3;
  struct solo_work slow = {900000, LSTMD_OK};
  int failed = 7;
  const double t0 = lstmd_now_s();
  int rc = lstmd_comm_solo(c, 0, solo_work, &slow, LSTMD_OK, &failed, bound, "the test's slow work");
  printf("  a root working 0.9 s, bound 0.3 s: the call took %.2f s\n", lstmd_now_s() - t0);
  check_true("solo: a root working 3x the bound is waited for (heartbeats)", rc == 0 && failed == -1);

  enum { kCalls = 400 };
  int bad = 0, first_bad = -1;
  const double t1 = lstmd_now_s();
  for (int k = 0; k < kCalls; k++) {
    const int root = k < kCalls / 2 ? 0 : world - 1;
    struct solo_work w = {k % 40 == 5 ? 200000 : 0, k % 7 == 3 ? LSTMD_EWRITE : LSTMD_OK};
    failed = 7;
    rc = lstmd_comm_solo(c, root, solo_work, &w, LSTMD_OK, &failed, bound, "the test's solo call");
    const int want = w.status ? LSTMD_EWRITE : LSTMD_OK;
    if (rc != want || failed != (w.status ? root : -1)) {
      if (first_bad < 0) first_bad = k;
      bad++;
    }
  }
  printf("  %d solo calls back to back in %.2f s: %d wrong vote(s)%s", kCalls, lstmd_now_s() - t1,
         bad, first_bad >= 0 ? "" : "\n");
  if (first_bad >= 0) printf(", the first at call %d\n", first_bad);
  check_true("solo: 400 calls back to back, each vote right on every rank", bad == 0);

  lstmd_comm_barrier(c); /* every beat sent before it has arrived by now, or is on its way: */
  lstmd_sleep_us(50000);  /* give a stray one time to land before the probe */
  int stray = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, LSTMD_SOLO_BEAT_TAG, c->world, &stray, MPI_STATUS_IGNORE);
  double strays = stray;
  lstmd_comm_allreduce_sum_f64(c, &strays, 1);
  check_true("solo: no heartbeat left unreceived on any rank after the calls", strays == 0);
}

/* This singleton's child runs `MPIRUN -np 2 SELF`; its exit status, or -1. */
static int run_nested(const char *mpirun, const char *self) {
  fflush(NULL);
  const pid_t pid = fork();
  if (pid == 0) {
    lstmd_comm_forget_launch_env();
    execlp(mpirun, mpirun, "-np", "2", self, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(int argc, char **argv) {
  struct lstmd_comm *c;
  if (lstmd_comm_init(&argc, &argv, &c)) return 1;
  const int rank = lstmd_comm_rank(c), world = lstmd_comm_size(c);
  if (world == 1 && argc > 1) {
    const int rc = run_nested(argv[1], argv[0]);
    char what[160];
    snprintf(what, sizeof what, "a singleton's child runs mpirun -np 2 of this test: exit %d", rc);
    check_true(what, rc == 0);
    lstmd_comm_finalize(c);
    return check_summary("test_comm (singleton)");
  }
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
  test_split(c, rank, world);
  test_gatherv(c, rank, world);
  test_isend_msg(c, rank, world);
  test_solo(c, world);
  check_true("barrier", lstmd_comm_barrier(c) == 0);
  int failed = check_summary(rank == 0 ? "test_comm (rank 0)" : "test_comm");
  double f = failed;
  lstmd_comm_allreduce_max_f64(c, &f, 1);
  lstmd_comm_finalize(c);
  return f != 0.0;
}
