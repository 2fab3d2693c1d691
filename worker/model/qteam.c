/* qteam.c — the chunk-sharing thread team of qteam.h: a job is a ticket word that threads claim
 * chunks from with compare-and-swap, a count of finished chunks, and a condition variable that
 * idle helpers sleep on once they have polled for spin_ns. */
#include "qteam.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/status.h"

struct lstmd_qteam {
  int n, started;
  pthread_t *threads;
  long spin_ns;
  /* The job: fn, arg, chunks are written by the caller before it publishes the job's ticket. */
  lstmd_qteam_fn fn;
  void *arg;
  int chunks;      /* atomic (read before a claim) */
  uint32_t job;    /* jobs run so far (the caller's own count) */
  uint64_t ticket; /* atomic: job << 32 | next chunk to claim */
  int done;        /* atomic: chunks of the job that have returned */
  int sleepers;    /* atomic: helpers in (or about to be in) the condition wait */
  int quit;        /* atomic */
  pthread_mutex_t mu;
  pthread_cond_t wake;
};

static long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* The protocol.
 * 1. The caller writes fn, arg, chunks and done = 0, then publishes ticket = job << 32 (release:
 *    the fields are visible to whoever reads that ticket).
 * 2. A thread claims chunk k of job j by a CAS of ticket from j << 32 | k to j << 32 | k+1, and
 *    only reads fn and arg after it succeeded. The caller starts job j+1 only once done reached
 *    chunks, and that needs every claimed chunk of job j to have returned; so while a thread holds
 *    a claimed chunk, the fields are job j's. A helper that comes late finds the ticket of a newer
 *    job (or k = chunks) and claims nothing.
 * 3. After its chunk, a thread adds 1 to done (release); the caller, having run out of chunks to
 *    claim, waits for done == chunks (acquire: the chunks' writes are visible to it). A wait on a
 *    helper preempted mid-chunk yields the core after a few µs, so that helper can finish.
 * 4. Sleep without lost wake-ups: a helper increments sleepers, then re-reads the ticket under
 *    the mutex before it waits; the caller stores the ticket, then reads sleepers and, if any,
 *    broadcasts under the mutex. Both pairs are seq_cst, so at least one side sees the other. */
static void claim_and_run(struct lstmd_qteam *t, uint32_t job, int thread) {
  int first = 1;
  for (;;) {
    uint64_t cur = __atomic_load_n(&t->ticket, __ATOMIC_ACQUIRE);
    /* job j's chunks, or the CAS below fails (the ticket has moved on) */
    const int chunks = __atomic_load_n(&t->chunks, __ATOMIC_RELAXED);
    if ((uint32_t)(cur >> 32) != job || (int)(uint32_t)cur >= chunks) return;
    if (!__atomic_compare_exchange_n(&t->ticket, &cur, cur + 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      continue;
    t->fn(t->arg, thread, (int)(uint32_t)cur, first);
    first = 0;
    __atomic_add_fetch(&t->done, 1, __ATOMIC_RELEASE);
  }
}

static uint32_t ticket_job(struct lstmd_qteam *t) {
  return (uint32_t)(__atomic_load_n(&t->ticket, __ATOMIC_SEQ_CST) >> 32);
}

struct helper_arg {
  struct lstmd_qteam *t;
  int index;
};

static void *helper_main(void *varg) {
  struct helper_arg *ha = varg;
  struct lstmd_qteam *t = ha->t;
  const int index = ha->index;
  free(ha);
  uint32_t seen = 0;
  for (;;) {
    const long end = now_ns() + t->spin_ns;
    for (int i = 1; ticket_job(t) == seen && !__atomic_load_n(&t->quit, __ATOMIC_ACQUIRE); i++) {
      _mm_pause();
      if (i % 64 == 0 && now_ns() > end) break;
    }
    if (ticket_job(t) == seen && !__atomic_load_n(&t->quit, __ATOMIC_ACQUIRE)) {
      pthread_mutex_lock(&t->mu);
      __atomic_add_fetch(&t->sleepers, 1, __ATOMIC_SEQ_CST);
      while (ticket_job(t) == seen && !__atomic_load_n(&t->quit, __ATOMIC_ACQUIRE))
        pthread_cond_wait(&t->wake, &t->mu);
      __atomic_sub_fetch(&t->sleepers, 1, __ATOMIC_SEQ_CST);
      pthread_mutex_unlock(&t->mu);
    }
    if (__atomic_load_n(&t->quit, __ATOMIC_ACQUIRE)) return NULL;
    seen = ticket_job(t);
    claim_and_run(t, seen, index);
  }
}

int lstmd_qteam_create(int n, long spin_ns, struct lstmd_qteam **out) {
  *out = NULL;
  struct lstmd_qteam *t = calloc(1, sizeof *t);
  if (!t || !(t->threads = calloc((size_t)(n > 1 ? n - 1 : 1), sizeof *t->threads))) {
    free(t);
    return LSTMD_ENOMEM;
  }
  t->n = n, t->spin_ns = spin_ns;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->wake, NULL);
  for (int i = 1; i < n; i++) {
    struct helper_arg *ha = malloc(sizeof *ha);
    if (ha) *ha = (struct helper_arg){t, i};
    if (!ha || pthread_create(&t->threads[i - 1], NULL, helper_main, ha) != 0) {
      free(ha);
      lstmd_errorf("cannot start %d int8 worker threads", n);
      lstmd_qteam_destroy(t);
      return LSTMD_ENOMEM;
    }
    t->started++;
  }
  *out = t;
  return LSTMD_OK;
}

void lstmd_qteam_destroy(struct lstmd_qteam *t) {
  if (!t) return;
  pthread_mutex_lock(&t->mu);
  __atomic_store_n(&t->quit, 1, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&t->wake);
  pthread_mutex_unlock(&t->mu);
  for (int i = 0; i < t->started; i++) pthread_join(t->threads[i], NULL);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->wake);
  free(t->threads);
  free(t);
}

void lstmd_qteam_run(struct lstmd_qteam *t, int chunks, lstmd_qteam_fn fn, void *arg) {
  t->fn = fn, t->arg = arg;
  __atomic_store_n(&t->chunks, chunks, __ATOMIC_RELAXED);
  __atomic_store_n(&t->done, 0, __ATOMIC_RELAXED);
  const uint32_t job = ++t->job;
  __atomic_store_n(&t->ticket, (uint64_t)job << 32, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&t->sleepers, __ATOMIC_SEQ_CST) > 0) {
    pthread_mutex_lock(&t->mu);
    pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->mu);
  }
  claim_and_run(t, job, 0);
  for (int i = 1; __atomic_load_n(&t->done, __ATOMIC_ACQUIRE) < chunks; i++) {
    _mm_pause();
    if (i % 256 == 0) sched_yield();
  }
}
