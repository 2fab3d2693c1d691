/* pool.c — fork/join thread team (see pool.h). Workers sleep on a condition variable between
 * runs, so an idle team costs no CPU. */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "kernels/status.h"

struct lstmd_pool {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t start, done;
  unsigned long generation; /* bumped for each run */
  int pending;              /* workers still running the current function */
  int quit;
  void (*fn)(void *, int);
  void *arg;
};

struct worker_arg {
  struct lstmd_pool *p;
  int index;
};

static void *worker_main(void *varg) {
  struct worker_arg *wa = varg;
  struct lstmd_pool *p = wa->p;
  const int index = wa->index;
  free(wa);
  unsigned long seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->quit && p->generation == seen) pthread_cond_wait(&p->start, &p->mu);
    if (p->quit) break;
    seen = p->generation;
    void (*fn)(void *, int) = p->fn;
    void *arg = p->arg;
    pthread_mutex_unlock(&p->mu);
    fn(arg, index);
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int lstmd_pool_create(int n, struct lstmd_pool **out) {
  *out = NULL;
  struct lstmd_pool *p = calloc(1, sizeof *p);
  if (!p) return LSTMD_ENOMEM;
  p->threads = calloc((size_t)(n > 1 ? n - 1 : 1), sizeof *p->threads);
  if (!p->threads) {
    free(p);
    return LSTMD_ENOMEM;
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->start, NULL);
  pthread_cond_init(&p->done, NULL);
  p->n = 1;
  for (int i = 1; i < n; i++) {
    struct worker_arg *wa = malloc(sizeof *wa);
    if (!wa) break;
    *wa = (struct worker_arg){p, i};
    if (pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
      free(wa);
      break;
    }
    p->n++;
  }
  if (p->n != n) {
    lstmd_errorf("cannot start %d worker threads", n);
    lstmd_pool_destroy(p);
    return LSTMD_ENOMEM;
  }
  *out = p;
  return LSTMD_OK;
}

void lstmd_pool_destroy(struct lstmd_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->start);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->start);
  pthread_cond_destroy(&p->done);
  free(p->threads);
  free(p);
}


void lstmd_pool_run(struct lstmd_pool *p, void (*fn)(void *arg, int index), void *arg) {
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->arg = arg;
  p->pending = p->n - 1;
  p->generation++;
  pthread_cond_broadcast(&p->start);
  pthread_mutex_unlock(&p->mu);
  fn(arg, 0);
  pthread_mutex_lock(&p->mu);
  while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
