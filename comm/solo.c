/* solo.c — one rank works alone (rank 0 writing or reading a checkpoint) while the others wait
 * for its verdict, with a wait that ends when the working rank is frozen but not when its disk is
 * merely slow.
 *
 * 1. Why heartbeats: a checkpoint write may take minutes on a busy shared file system, longer
 *    than any fixed bound a user would set for the step's waits (train.comm_timeout_s), so the
 *    vote after it used to wait without a bound, and a rank 0 frozen there (SIGSTOP, a hung node)
 *    left every other rank waiting forever. Now, while the root works, a thread of its own sends
 *    each waiting rank a small message every beat period. A frozen process sends nothing (all its
 *    threads stop); a process blocked in write() still beats. A waiting rank ends the job when it
 *    has heard nothing from the root for timeout_s, naming it (and, through peers.h, a stopped
 *    process on its host).
 * 2. The protocol, on the communicator's `world` (point-to-point, tag kBeatTag, which nothing else
 *    there uses; collectives are matched apart from point-to-point): a beat is {epoch, 0}, the
 *    last one {epoch, 1}. The root sends the last beat after its work, before it votes; a waiting
 *    rank takes beats up to that last one and no further (the root may already be beating for
 *    the next call: messages of one pair and tag do not overtake each other, so those are behind
 *    it), and after the vote it waits for that last beat (it is in flight), so no beat of the
 *    call is left unreceived when it returns and the communicator can be freed. `epoch` counts
 *    the calls on this communicator (every rank makes the same calls): a call that ended early
 *    on a failure may leave its beats behind, and the next call drops them.
 * 3. The vote is lstmd_comm_agree's (MINLOC over the statuses), so callers read the result the
 *    same way. The root's own wait in the vote is bounded by timeout_s from when it enters: the
 *    others are already waiting then, so a rank that is not is frozen too. */
#define _GNU_SOURCE
#include "comm.h"
#include "comm_internal.h"

#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>

#include "kernels/check.h"
#include "kernels/clock.h"
#include "peers.h"

enum { kBeatTag = LSTMD_SOLO_BEAT_TAG };

struct beat {
  int64_t epoch, last;
};

/* The root's beating thread. */
struct beater {
  struct lstmd_comm *c;
  double period_s, timeout_s;
  const char *what;
  struct beat msg, last;     /* the buffers of every send: they outlive the requests */
  MPI_Request *req, *req_last; /* per rank: its beat / last beat in flight, or MPI_REQUEST_NULL */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop, status;
};

/* One beat to every other rank whose previous one has gone out. A rank that is stopped takes
 * none, and is sent no more: its buffers filling must not hold up the others' beats. */
static int send_beats(struct beater *b) {
  struct lstmd_comm *c = b->c;
  for (int r = 0; r < c->size; r++) {
    if (r == c->rank) continue;
    int done = 1;
    if (b->req[r] != MPI_REQUEST_NULL) LSTMD_CHECK_MPI(MPI_Test(&b->req[r], &done, MPI_STATUS_IGNORE));
    if (done)
      LSTMD_CHECK_MPI(MPI_Isend(&b->msg, (int)sizeof b->msg, MPI_BYTE, r, kBeatTag, c->world, &b->req[r]));
  }
  return LSTMD_OK;
}

/* The last beat to every other rank, and every beat in flight finished: bounded by timeout_s
 * (a rank that takes none that long is stopped or hung: the job ends naming it, as a wait does). */
static int send_last(struct beater *b) {
  struct lstmd_comm *c = b->c;
  for (int r = 0; r < c->size; r++)
    if (r != c->rank)
      LSTMD_CHECK_MPI(MPI_Isend(&b->last, (int)sizeof b->last, MPI_BYTE, r, kBeatTag, c->world,
                                &b->req_last[r]));
  const double began = lstmd_now_s();
  for (int r = 0; r < c->size; r++) {
    for (int done = 0;;) {
      LSTMD_CHECK_MPI(MPI_Test(&b->req[r], &done, MPI_STATUS_IGNORE));
      if (done) LSTMD_CHECK_MPI(MPI_Test(&b->req_last[r], &done, MPI_STATUS_IGNORE));
      if (done) break;
      if (b->timeout_s > 0 && lstmd_now_s() - began > b->timeout_s) {
        char stuck[512];
        lstmd_errorf("rank %d (%s): %s: rank %d took no heartbeat for %.1f s (train.comm_timeout_s "
                     "%g s): it may be stopped or hung%s; ending the job", c->world_rank, c->host,
                     b->what, r, lstmd_now_s() - began, b->timeout_s,
                     lstmd_peers_describe_stuck(stuck, sizeof stuck));
        lstmd_comm_abort(c, 1);
      }
      lstmd_sleep_us(100);
    }
  }
  return LSTMD_OK;
}

static void *beat_loop(void *arg) {
  struct beater *b = arg;
  pthread_mutex_lock(&b->mu);
  while (!b->stop) {
    pthread_mutex_unlock(&b->mu);
    const int rc = send_beats(b);
    pthread_mutex_lock(&b->mu);
    if (rc) {
      b->status = rc;
      break;
    }
    const struct timespec until = lstmd_deadline_in(b->period_s);
    while (!b->stop && pthread_cond_timedwait(&b->cv, &b->mu, &until) == 0) {
    }
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

/* The root: work while beating, then the last beat. Returns work's status (or its own failure:
 * LSTMD_ENOMEM without a beating thread, voted like any other, so that no waiting rank times out
 * on a root that is only slow; LSTMD_ECOMM when a send failed, which ends the job). */
static int root_work(struct lstmd_comm *c, int64_t epoch, double timeout_s, const char *what,
                     int my_status, int (*work)(void *), void *ctx) {
  struct beater b = {.c = c, .timeout_s = timeout_s, .what = what, .msg = {epoch, 0},
                     .last = {epoch, 1}};
  /* a quarter of the waiters' bound, so a beat or two may be late without ending the job; at
   * most a second (the messages are 16 bytes) */
  b.period_s = timeout_s > 0 ? fmin(timeout_s / 4, 1.0) : 1.0;
  b.req = malloc(2 * (size_t)c->size * sizeof *b.req);
  if (!b.req) { /* the last beats must still go: one at a time, from here */
    lstmd_errorf("rank %d: out of memory for %s's heartbeats", c->rank, what);
    for (int r = 0; r < c->size; r++)
      if (r != c->rank)
        LSTMD_CHECK_MPI(MPI_Send(&b.last, (int)sizeof b.last, MPI_BYTE, r, kBeatTag, c->world));
    return LSTMD_ENOMEM;
  }
  b.req_last = b.req + c->size;
  for (int r = 0; r < 2 * c->size; r++) b.req[r] = MPI_REQUEST_NULL;
  pthread_mutex_init(&b.mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&b.cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_t t;
  int rc = my_status;
  const int beating = !rc && pthread_create(&t, NULL, beat_loop, &b) == 0;
  if (!rc && !beating) {
    lstmd_errorf("rank %d: no heartbeat thread for %s (out of threads)", c->rank, what);
    rc = LSTMD_ENOMEM;
  }
  if (!rc) rc = work(ctx);
  if (beating) {
    pthread_mutex_lock(&b.mu);
    b.stop = 1;
    pthread_cond_signal(&b.cv);
    pthread_mutex_unlock(&b.mu);
    pthread_join(t, NULL);
  }
  pthread_cond_destroy(&b.cv);
  pthread_mutex_destroy(&b.mu);
  const int sent = send_last(&b);
  free(b.req);
  if (sent) return sent;
  if (beating && b.status) return b.status;
  return rc;
}

/* A waiting rank's part: the vote, heard out while the root's beats come, then its last beat. */
static int wait_for_root(struct lstmd_comm *c, int root, int64_t epoch, double timeout_s,
                         const char *what, void *vote) {
  MPI_Request q;
  LSTMD_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, vote, 1, MPI_2INT, MPI_MINLOC, c->world, &q));
  const double began = lstmd_now_s();
  double heard = began;
  int voted = 0, last_seen = 0;
  for (int spins = 0; !(voted && last_seen); spins++) {
    if (!voted) LSTMD_CHECK_MPI(MPI_Test(&q, &voted, MPI_STATUS_IGNORE));
    while (!last_seen) { /* the beats that have come, up to this call's last: the ones after it
                          * are the next call's (root may be in it already) */
      int found = 0;
      MPI_Message m;
      MPI_Status st;
      LSTMD_CHECK_MPI(MPI_Improbe(root, kBeatTag, c->world, &found, &m, &st));
      if (!found) break;
      struct beat b = {0, 0};
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      if (count != (int)sizeof b) { /* nothing else uses the tag: a bug, not a peer's state */
        lstmd_errorf("rank %d: a %d-byte message with the heartbeat tag from rank %d", c->rank,
                     count, root);
        return LSTMD_ECOMM;
      }
      LSTMD_CHECK_MPI(MPI_Mrecv(&b, count, MPI_BYTE, &m, MPI_STATUS_IGNORE));
      if (b.epoch < epoch) continue; /* of an earlier call that ended in a failure */
      heard = lstmd_now_s();
      if (b.last) last_seen = 1;
    }
    if (voted && last_seen) break;
    if (spins < 200) continue;
    lstmd_peers_check_while_waiting(began, what);
    if (timeout_s > 0 && lstmd_now_s() - heard > timeout_s) {
      char stuck[512];
      lstmd_errorf("rank %d (%s): %s: no sign of life from rank %d for %.1f s (its limit, from "
                   "train.comm_timeout_s: %g s; a rank that is only slow keeps sending one): it "
                   "may be stopped or hung%s; ending the job",
                   c->world_rank, c->host, what, root, lstmd_now_s() - heard, timeout_s,
                   lstmd_peers_describe_stuck(stuck, sizeof stuck));
      lstmd_comm_abort(c, 1);
    }
    lstmd_comm_poll_pause(began, 2000000L);
  }
  return LSTMD_OK;
}

int lstmd_comm_solo(struct lstmd_comm *c, int root, int (*work)(void *ctx), void *ctx,
                    int my_status, int *failed_rank, double timeout_s, const char *what) {
  if (!c || c->size == 1) {
    const int rc = my_status ? my_status : work(ctx);
    if (failed_rank) *failed_rank = rc ? 0 : -1;
    return rc;
  }
  const int64_t epoch = ++c->solo_epoch;
  if (c->rank == root) {
    const int rc = root_work(c, epoch, timeout_s, what, my_status, work, ctx);
    if (rc == LSTMD_ECOMM) return rc;
    return lstmd_comm_agree_within(c, rc, failed_rank, timeout_s, what);
  }
  struct {
    int status, rank;
  } vote = {my_status < 0 ? my_status : 0, c->rank};
  LSTMD_TRY(wait_for_root(c, root, epoch, timeout_s, what, &vote));
  if (failed_rank) *failed_rank = vote.status ? vote.rank : -1;
  if (vote.status == 0) return LSTMD_OK;
  return my_status ? my_status : vote.status;
}
