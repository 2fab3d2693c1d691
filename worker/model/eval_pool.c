/* eval_pool.c — an evaluation's chunks over threads and ranks (eval_pool.h). Why threads at all:
 * BLAS cannot split the per-step recurrence of a few rows across cores, chunks can. */
#include "eval_pool.h"

#include <pthread.h>
#include <unistd.h>

#include "kernels/cpu/blas_cpu.h"
#include "kernels/status.h"

struct run {
  const struct lstmd_eval_pool *p;
  double *sums;
  uint64_t next; /* atomic: this part's next chunk untaken (0, 1, ...) */
  int failed;    /* atomic: the first error; the others stop taking chunks */
};

static uint64_t part_of(const struct lstmd_eval_pool *p) {
  return p->share ? (uint64_t)p->share->part : 0;
}
static uint64_t parts_of(const struct lstmd_eval_pool *p) {
  return p->share ? (uint64_t)p->share->parts : 1;
}

uint64_t lstmd_eval_pool_mine(const struct lstmd_eval_pool *p) {
  const uint64_t part = part_of(p), parts = parts_of(p);
  return part < p->count ? (p->count - part + parts - 1) / parts : 0;
}

int lstmd_eval_pool_has(const struct lstmd_eval_pool *p, uint64_t c) {
  return c < p->count && c % parts_of(p) == part_of(p);
}

int lstmd_eval_pool_combine(const struct lstmd_eval_pool *p, double *sums, int n, int status) {
  return p->share ? p->share->combine(p->share->ctx, sums, sums ? n : 0, status) : status;
}

static int score_some(struct run *r, int helper) {
  const struct lstmd_eval_pool *p = r->p;
  void *state = NULL;
  int rc = p->open(p->ctx, helper, &state);
  if (rc && helper) return LSTMD_OK; /* a thread short of memory leaves it to the others */
  const uint64_t mine = lstmd_eval_pool_mine(p);
  for (uint64_t i; !rc && !__atomic_load_n(&r->failed, __ATOMIC_RELAXED) &&
                   (i = __atomic_fetch_add(&r->next, 1, __ATOMIC_RELAXED)) < mine;) {
    const uint64_t c = part_of(p) + i * parts_of(p);
    r->sums[c] = 0.0;
    rc = p->score(p->ctx, state, c, &r->sums[c]);
  }
  p->close(p->ctx, state);
  if (rc) __atomic_store_n(&r->failed, rc, __ATOMIC_RELAXED);
  return rc;
}

static void *helper_main(void *arg) {
  score_some(arg, 1);
  return NULL;
}

int lstmd_eval_pool_run(const struct lstmd_eval_pool *p, int threads, double *sums) {
  struct run r = {p, sums, 0, 0};
  if (threads <= 0) return score_some(&r, 0);
  const uint64_t mine = lstmd_eval_pool_mine(p);
  if ((uint64_t)threads > mine) threads = mine ? (int)mine : 1;
  const int blas_threads = lstmd_cpu_blas_threads();
  lstmd_cpu_set_blas_threads(1);
  pthread_t th[64];
  int started = 0;
  while (started < threads - 1 && started < 64 &&
         pthread_create(&th[started], NULL, helper_main, &r) == 0)
    started++; /* fewer threads than asked (none at all, even) only makes it slower */
  const int rc = score_some(&r, 0);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  lstmd_cpu_set_blas_threads(blas_threads);
  return rc ? rc : __atomic_load_n(&r.failed, __ATOMIC_RELAXED);
}

int lstmd_eval_threads_fit(double bytes, int want) {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0 || bytes <= 0) return want;
  const double fit = 1.0 + 0.25 * (double)pages * (double)page / bytes;
  return fit < want ? (int)fit : want;
}
