/* prefetch.c — double-buffered batch reading on a background thread (see prefetch.h).
 * Two slots: the producer fills a free slot, the consumer takes full slots in order; the slot a
 * consumer holds is released when it asks for the next one. */
#include "prefetch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "worker/io/nvtx.h"

enum { kSlots = 2 };

struct slot {
  struct lstmd_batch batch;
  int reset, status;
  struct lstmd_batcher_cursor cursor_after;
};

struct lstmd_prefetch {
  struct lstmd_batcher *batcher;
  struct slot slots[kSlots];
  int filled;   /* slots produced so far (slot = filled % kSlots) */
  int consumed; /* slots handed out so far */
  int started, quit;
  struct lstmd_batcher_cursor cursor; /* after the last batch handed out */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t changed;
};

static void *producer(void *arg) {
  struct lstmd_prefetch *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    /* the consumer holds slot consumed-1; fill while a slot other than that one is free */
    while (!p->quit && p->filled - (p->consumed - 1) >= kSlots) pthread_cond_wait(&p->changed, &p->mu);
    if (p->quit) break;
    struct slot *s = &p->slots[p->filled % kSlots];
    pthread_mutex_unlock(&p->mu);
    s->status = lstmd_batcher_next(p->batcher, &s->batch, &s->reset);
    s->cursor_after = lstmd_batcher_get_cursor(p->batcher);
    pthread_mutex_lock(&p->mu);
    p->filled++;
    pthread_cond_broadcast(&p->changed);
    if (s->status) break; /* the consumer reports it */
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int lstmd_prefetch_create(struct lstmd_batcher *b, const struct lstmd_dataset *ds, int steps,
                          int batch, struct lstmd_prefetch **out) {
  *out = NULL;
  struct lstmd_prefetch *p = calloc(1, sizeof *p);
  if (!p) return LSTMD_ENOMEM;
  p->batcher = b;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->changed, NULL);
  for (int i = 0; i < kSlots; i++) {
    int rc = lstmd_batch_alloc(ds, steps, batch, &p->slots[i].batch);
    if (rc) {
      lstmd_prefetch_destroy(p);
      return rc;
    }
  }
  *out = p;
  return LSTMD_OK;
}

void lstmd_prefetch_destroy(struct lstmd_prefetch *p) {
  if (!p) return;
  if (p->started) {
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
  }
  for (int i = 0; i < kSlots; i++) lstmd_batch_free(&p->slots[i].batch);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->changed);
  free(p);
}

int lstmd_prefetch_start(struct lstmd_prefetch *p) {
  if (p->started) return LSTMD_OK;
  p->cursor = lstmd_batcher_get_cursor(p->batcher);
  p->consumed = 0;
  int e = pthread_create(&p->thread, NULL, producer, p);
  if (e != 0) {
    lstmd_errorf("cannot start the data prefetch thread: %s", strerror(e));
    return LSTMD_ENOMEM;
  }
  p->started = 1;
  return LSTMD_OK;
}

int lstmd_prefetch_next(struct lstmd_prefetch *p, const struct lstmd_batch **batch, int *reset) {
  if (!p->started) { /* a caller error: hand out a zero batch rather than garbage */
    lstmd_errorf("data prefetch used before lstmd_prefetch_start");
    lstmd_batch_zero(&p->slots[0].batch);
    *batch = &p->slots[0].batch;
    *reset = 1;
    return LSTMD_EINVAL;
  }
  lstmd_nvtx_push("data wait");
  pthread_mutex_lock(&p->mu);
  p->consumed++; /* releases the slot handed out last time */
  pthread_cond_broadcast(&p->changed);
  while (p->filled < p->consumed) pthread_cond_wait(&p->changed, &p->mu);
  struct slot *s = &p->slots[(p->consumed - 1) % kSlots];
  pthread_mutex_unlock(&p->mu);
  lstmd_nvtx_pop();
  *batch = &s->batch;
  if (s->status) {
    lstmd_batch_zero(&s->batch); /* the caller may still run it to keep in step with other ranks */
    *reset = 1;
    return s->status;
  }
  *reset = s->reset;
  p->cursor = s->cursor_after;
  return LSTMD_OK;
}

struct lstmd_batcher_cursor lstmd_prefetch_cursor(const struct lstmd_prefetch *p) {
  return p->started ? p->cursor : lstmd_batcher_get_cursor(p->batcher);
}
