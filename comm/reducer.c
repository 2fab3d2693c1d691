/* reducer.c — the gradient all-reduce thread (see reducer.h).
 * MPI only progresses a nonblocking collective while some thread calls into MPI; the compute
 * threads never do, so this thread polls MPI_Test every ~20 µs while a bucket is in flight and
 * sleeps on a condition variable when there is nothing to do. It uses its own communicator, so
 * collectives that the main thread issues (metrics, flags) cannot interleave with its own.
 * With a timeout (lstmd_reducer_set_timeout), waits sleep on a CLOCK_MONOTONIC deadline, never in
 * MPI, so a stopped peer cannot hang them; past it the reducer is abandoned: the thread leaves
 * its pending all-reduce unfinished (collectives cannot be cancelled) and reduces nothing more,
 * and the caller fails (the job then aborts or exits; the pending request dies with it). */
#define _GNU_SOURCE
#include "reducer.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/clock.h"
#include "peers.h"
#include "kernels/status.h"
#include "comm.h"
#include "comm_internal.h"

enum { kMaxBuckets = 4096 };
static const char kWhat[] = "the gradient all-reduce"; /* what the waits wait for (messages) */

struct bucket {
  float *buf;
  size_t n;
  double queued_s;
};

struct lstmd_reducer {
  MPI_Comm comm;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work, idle;
  struct bucket queue[kMaxBuckets];
  int head, tail; /* queue[head..tail) waits; tail - head <= kMaxBuckets */
  int busy;       /* the thread is reducing a bucket */
  int failed, quit;
  atomic_int abandon; /* past the deadline: stop polling, reduce nothing more */
  double timeout_s;   /* 0: none */
  int world_rank;     /* for messages */
  char host[MPI_MAX_PROCESSOR_NAME];
  lstmd_bucket_observer observer;
  void *observer_ctx;
};

/* Polls every 20 µs for the first ~5 ms, then backs off to 1 ms: a bucket normally completes
 * fast, and a rank waiting for a slow peer (rank 0 writing a checkpoint) should not burn a core. */
static int reduce_one(struct lstmd_reducer *r, struct bucket b) {
  MPI_Request req;
  if (MPI_Iallreduce(MPI_IN_PLACE, b.buf, (int)b.n, MPI_FLOAT, MPI_SUM, r->comm, &req) != MPI_SUCCESS)
    return LSTMD_ECOMM;
  long sleep_ns = 20000;
  for (int polls = 0;; polls++) {
    if (atomic_load(&r->abandon)) return LSTMD_ECOMM; /* left pending: see the file comment */
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return LSTMD_ECOMM;
    if (done) return LSTMD_OK;
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    if (polls > 250 && sleep_ns < 1000000) sleep_ns *= 2;
  }
}

static void *reducer_main(void *arg) {
  struct lstmd_reducer *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (!r->quit && r->head == r->tail) pthread_cond_wait(&r->work, &r->mu);
    if (r->head == r->tail) break; /* quit with an empty queue */
    struct bucket b = r->queue[r->head % kMaxBuckets];
    if (r->tail - r->head == kMaxBuckets) pthread_cond_broadcast(&r->idle); /* room: submit */
    r->head++;
    r->busy = 1;
    int failed = r->failed;
    pthread_mutex_unlock(&r->mu);
    double t0 = lstmd_now_s();
    int rc = failed ? LSTMD_ECOMM : reduce_one(r, b);
    if (r->observer) r->observer(r->observer_ctx, b.n, b.queued_s, t0, lstmd_now_s());
    pthread_mutex_lock(&r->mu);
    r->busy = 0;
    if (rc) r->failed = 1;
    if (r->head == r->tail) pthread_cond_broadcast(&r->idle);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

int lstmd_reducer_create(struct lstmd_comm *c, struct lstmd_reducer **out) {
  *out = NULL;
  struct lstmd_reducer *r = calloc(1, sizeof *r);
  if (!r) return LSTMD_ENOMEM;
  r->comm = c->grads; /* made at lstmd_comm_init: creating it here could hang a failing job */
  MPI_Comm_rank(MPI_COMM_WORLD, &r->world_rank);
  memcpy(r->host, c->host, sizeof r->host);
  atomic_init(&r->abandon, 0);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->work, NULL);
  pthread_condattr_t ca; /* `idle` is waited on with CLOCK_MONOTONIC deadlines */
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->idle, &ca);
  pthread_condattr_destroy(&ca);
  int e = pthread_create(&r->thread, NULL, reducer_main, r);
  if (e != 0) {
    lstmd_errorf("cannot start the gradient reducer thread: %s", strerror(e));
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->work);
    pthread_cond_destroy(&r->idle);
    free(r);
    return LSTMD_ENOMEM;
  }
  *out = r;
  return LSTMD_OK;
}

/* The end of a wait that began at `began` (0: no timeout). */
static double wait_end(const struct lstmd_reducer *r, double began) {
  return r->timeout_s > 0 ? began + r->timeout_s : 0.0;
}

/* Waits under r->mu until every bucket is reduced or the timeout (if any) passes; returns 1
 * when done. Looks for a lost peer every 50 ms (peers.h). */
static int wait_drained(struct lstmd_reducer *r) {
  const double began = lstmd_now_s();
  while (r->head != r->tail || r->busy)
    if (lstmd_peers_cond_wait(&r->idle, &r->mu, began, wait_end(r, began), kWhat)) return 0;
  return 1;
}

/* Past the timeout: the message both waits give (r->mu held). */
static void report_unfinished(const struct lstmd_reducer *r, double waited, const char *also) {
  const int pending = r->tail - r->head + r->busy;
  char stuck[512];
  lstmd_errorf("rank %d (%s): gradient all-reduce unfinished after %.1f s (train.comm_timeout_s "
               "= %g s), %d bucket%s pending%s: a rank of the group may be stopped or too slow%s",
               r->world_rank, r->host, waited, r->timeout_s, pending, pending == 1 ? "" : "s",
               also, lstmd_peers_describe_stuck(stuck, sizeof stuck));
}

void lstmd_reducer_destroy(struct lstmd_reducer *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->quit = 1;
  pthread_cond_broadcast(&r->work);
  if (!atomic_load(&r->abandon) && !wait_drained(r)) {
    r->failed = 1;
    atomic_store(&r->abandon, 1);
  }
  pthread_mutex_unlock(&r->mu);
  pthread_join(r->thread, NULL);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->work);
  pthread_cond_destroy(&r->idle);
  free(r);
}

void lstmd_reducer_observe(struct lstmd_reducer *r, lstmd_bucket_observer fn, void *ctx) {
  r->observer = fn;
  r->observer_ctx = ctx;
}

/* A full queue (kMaxBuckets waiting: a model of many buckets, train.bucket_mb small) waits for
 * the thread to take one, which a stopped peer can delay forever: the wait is bounded by the
 * timeout like wait_all's (past it the reducer is abandoned, this bucket dropped, and the next
 * wait_all fails), and looks for a lost peer every 50 ms. */
void lstmd_reducer_submit(struct lstmd_reducer *r, float *buf, size_t n) {
  pthread_mutex_lock(&r->mu);
  const double began = lstmd_now_s();
  while (r->tail - r->head == kMaxBuckets && !atomic_load(&r->abandon)) {
    if (lstmd_peers_cond_wait(&r->idle, &r->mu, began, wait_end(r, began), kWhat)) {
      r->failed = 1;
      atomic_store(&r->abandon, 1);
      report_unfinished(r, lstmd_now_s() - began, " and the queue full");
      break;
    }
  }
  if (atomic_load(&r->abandon)) { /* failed for good: nothing more is reduced (wait_all fails) */
    pthread_mutex_unlock(&r->mu);
    return;
  }
  r->queue[r->tail % kMaxBuckets] = (struct bucket){buf, n, lstmd_now_s()};
  r->tail++;
  pthread_cond_signal(&r->work);
  pthread_mutex_unlock(&r->mu);
}

void lstmd_reducer_set_timeout(struct lstmd_reducer *r, double timeout_s) {
  pthread_mutex_lock(&r->mu);
  r->timeout_s = timeout_s > 0 ? timeout_s : 0;
  pthread_mutex_unlock(&r->mu);
}

int lstmd_reducer_wait_all(struct lstmd_reducer *r, double *waited_s) {
  double t0 = lstmd_now_s();
  pthread_mutex_lock(&r->mu);
  const int drained = wait_drained(r);
  const double waited = lstmd_now_s() - t0;
  if (!drained) {
    r->failed = 1;
    atomic_store(&r->abandon, 1); /* the thread stops polling and drops what is queued */
    report_unfinished(r, waited, "");
  }
  const int failed = r->failed;
  pthread_mutex_unlock(&r->mu);
  if (waited_s) *waited_s = waited;
  if (drained && failed) lstmd_errorf("gradient all-reduce failed (a rank may have died)");
  return failed ? LSTMD_ECOMM : LSTMD_OK;
}
