/* reducer.c — the gradient all-reduce thread (see reducer.h).
 * MPI only progresses a nonblocking collective while some thread calls into MPI; the compute
 * threads never do, so this thread polls MPI_Test every ~20 µs while a bucket is in flight and
 * sleeps on a condition variable when there is nothing to do. It uses its own communicator, so
 * collectives that the main thread issues (metrics, flags) cannot interleave with its own. */
#define _GNU_SOURCE
#include "reducer.h"

#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/clock.h"
#include "kernels/status.h"
#include "comm.h"
#include "comm_internal.h"

enum { kMaxBuckets = 4096 };

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
  lstmd_bucket_observer observer;
  void *observer_ctx;
};

/* Polls every 20 µs for the first ~5 ms, then backs off to 1 ms: a bucket normally completes
 * fast, and a rank waiting for a slow peer (rank 0 writing a checkpoint) should not burn a core. */
static int reduce_one(MPI_Comm comm, struct bucket b) {
  MPI_Request req;
  if (MPI_Iallreduce(MPI_IN_PLACE, b.buf, (int)b.n, MPI_FLOAT, MPI_SUM, comm, &req) != MPI_SUCCESS)
    return LSTMD_ECOMM;
  long sleep_ns = 20000;
  for (int polls = 0;; polls++) {
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
    r->head++;
    r->busy = 1;
    int failed = r->failed;
    pthread_mutex_unlock(&r->mu);
    double t0 = lstmd_now_s();
    int rc = failed ? LSTMD_ECOMM : reduce_one(r->comm, b);
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
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->work, NULL);
  pthread_cond_init(&r->idle, NULL);
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

void lstmd_reducer_destroy(struct lstmd_reducer *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->quit = 1;
  pthread_cond_broadcast(&r->work);
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

void lstmd_reducer_submit(struct lstmd_reducer *r, float *buf, size_t n) {
  pthread_mutex_lock(&r->mu);
  while (r->tail - r->head == kMaxBuckets) pthread_cond_wait(&r->idle, &r->mu);
  r->queue[r->tail % kMaxBuckets] = (struct bucket){buf, n, lstmd_now_s()};
  r->tail++;
  pthread_cond_signal(&r->work);
  pthread_mutex_unlock(&r->mu);
}

int lstmd_reducer_wait_all(struct lstmd_reducer *r, double *waited_s) {
  double t0 = lstmd_now_s();
  pthread_mutex_lock(&r->mu);
  while (r->head != r->tail || r->busy) pthread_cond_wait(&r->idle, &r->mu);
  int failed = r->failed;
  pthread_mutex_unlock(&r->mu);
  if (waited_s) *waited_s = lstmd_now_s() - t0;
  if (failed) lstmd_errorf("gradient all-reduce failed (a rank may have died)");
  return failed ? LSTMD_ECOMM : LSTMD_OK;
}
