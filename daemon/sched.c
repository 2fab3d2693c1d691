/* sched.c — the scheduling policy (see sched.h): priority order, preemption, EASY backfill and
 * the choice of ranks. */
#include "sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Queued jobs in policy order: priority descending, then id ascending. */
static int cmp_queue(const void *a, const void *b) {
  const struct lstmd_sched_job *x = *(struct lstmd_sched_job *const *)a;
  const struct lstmd_sched_job *y = *(struct lstmd_sched_job *const *)b;
  if (x->priority != y->priority) return x->priority > y->priority ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Preemption victims: lowest priority first, then the most recently started. */
static int cmp_victim(const void *a, const void *b) {
  const struct lstmd_sched_job *x = *(struct lstmd_sched_job *const *)a;
  const struct lstmd_sched_job *y = *(struct lstmd_sched_job *const *)b;
  if (x->priority != y->priority) return x->priority < y->priority ? -1 : 1;
  if (x->started_s != y->started_s) return x->started_s > y->started_s ? -1 : 1;
  return x->id > y->id ? -1 : x->id < y->id;
}

struct ending {
  double at;
  int ranks;
};
static int cmp_ending(const void *a, const void *b) {
  const struct ending *x = a, *y = b;
  return x->at < y->at ? -1 : x->at > y->at;
}

/* Lowest window of k consecutive free ranks among those with ok[r] set; -1 if none. */
static int window(int world, const int *busy, const int *ok, int k) {
  int run = 0;
  for (int r = 0; r < world; r++) {
    run = !busy[r] && ok[r] ? run + 1 : 0;
    if (run == k) return r - k + 1;
  }
  return -1;
}

/* Picks k free ranks into out (ascending) and marks them busy. Returns 0, or -1 if fewer than k
 * are free. */
static int pick_ranks(int world, const int *node, int *busy, int k, int *out) {
  int *ok = calloc((size_t)world, sizeof *ok);
  if (!ok) return -1;
  int chosen_node = -1;
  for (int r = 0; r < world && chosen_node < 0; r++) {
    if (busy[r]) continue;
    int free_here = 0;
    for (int q = 0; q < world; q++) free_here += !busy[q] && node[q] == node[r];
    if (free_here >= k) chosen_node = node[r];
  }
  for (int r = 0; r < world; r++) ok[r] = chosen_node < 0 || node[r] == chosen_node;
  int got = 0;
  const int start = window(world, busy, ok, k);
  if (start >= 0) {
    for (int i = 0; i < k; i++) out[got++] = start + i;
  } else {
    for (int r = 0; r < world && got < k; r++)
      if (!busy[r] && ok[r]) out[got++] = r;
  }
  free(ok);
  if (got < k) return -1;
  for (int i = 0; i < k; i++) busy[out[i]] = 1;
  return 0;
}

static int count_free(int world, const int *busy) {
  int n = 0;
  for (int r = 0; r < world; r++) n += !busy[r];
  return n;
}

/* When will `need` ranks be free? From the running jobs' time limits (a stopping job: now).
 * INFINITY when a job that must end first has no time limit. */
static double reserved_start(const struct lstmd_sched_job *jobs, size_t n, int free_now, int need,
                             double now_s) {
  struct ending *e = calloc(n ? n : 1, sizeof *e);
  if (!e) return INFINITY;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    const struct lstmd_sched_job *j = &jobs[i];
    if (!j->running) continue;
    double at = INFINITY;
    if (j->stopping) at = now_s;
    else if (j->time_limit_s > 0) at = now_s + fmax(0.0, j->time_limit_s - j->used_s);
    e[m++] = (struct ending){at, j->ranks};
  }
  qsort(e, m, sizeof *e, cmp_ending);
  double at = free_now >= need ? now_s : INFINITY;
  for (size_t i = 0; i < m && free_now < need; i++) {
    free_now += e[i].ranks;
    if (free_now >= need) at = e[i].at;
  }
  free(e);
  return at;
}

/* "needs R rank(s), F free" (and " (U unresponsive)" when some ranks are not usable) into why;
 * returns its length, where the caller may go on. */
static size_t needs_ranks(char *why, size_t n, int ranks, int free_now, int unusable) {
  int k = snprintf(why, n, "needs %d rank%s, %d free", ranks, ranks == 1 ? "" : "s", free_now);
  if (k >= 0 && (size_t)k < n && unusable > 0)
    k += snprintf(why + k, n - (size_t)k, " (%d unresponsive)", unusable);
  return k < 0 ? 0 : (size_t)k < n ? (size_t)k : n - 1;
}

/* "; held by job 12 (not preemptible, no time limit), job 15 (priority 9, no time limit)": the
 * running jobs that keep the head waiting with no start in sight (none can be preempted for it
 * and none has a time limit to end by), so that a user sees whom to ask. At most 3, then "…". */
static void held_by(char *why, size_t n, const struct lstmd_sched_job *jobs, size_t count) {
  size_t k = strlen(why);
  int listed = 0;
  for (size_t i = 0; i < count && k + 1 < n; i++) {
    const struct lstmd_sched_job *j = &jobs[i];
    if (!j->running) continue;
    if (listed == 3) {
      snprintf(why + k, n - k, ", …");
      return;
    }
    char what[64];
    if (!j->preemptible) snprintf(what, sizeof what, "not preemptible");
    else snprintf(what, sizeof what, "priority %d", j->priority);
    const int w = snprintf(why + k, n - k, "%s job %llu (%s%s)", listed ? "," : "; held by",
                           (unsigned long long)j->id, what,
                           j->time_limit_s > 0 ? "" : ", no time limit");
    k = w < 0 ? k : k + (size_t)w < n ? k + (size_t)w : n - 1;
    listed++;
  }
}

/* The head job could not start: preempt just enough lower-priority running jobs, if that makes
 * room. Returns 1 if it did (or a preemption for it is already under way), else 0. */
static int preempt_for(struct lstmd_sched_job *head, struct lstmd_sched_job *jobs, size_t n,
                       int free_now, int unusable) {
  int coming = free_now;
  for (size_t i = 0; i < n; i++)
    if (jobs[i].running && jobs[i].stopping && jobs[i].stopping_for == head->id) coming += jobs[i].ranks;
  if (coming >= head->ranks && coming > free_now) {
    const size_t k = needs_ranks(head->why, sizeof head->why, head->ranks, free_now, unusable);
    snprintf(head->why + k, sizeof head->why - k, "; waiting for preempted jobs to checkpoint");
    return 1;
  }
  struct lstmd_sched_job **v = calloc(n ? n : 1, sizeof *v);
  if (!v) return 0;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    struct lstmd_sched_job *j = &jobs[i];
    if (j->running && !j->stopping && j->preemptible && j->priority < head->priority) v[m++] = j;
  }
  qsort(v, m, sizeof *v, cmp_victim);
  size_t take = 0;
  int got = coming;
  while (take < m && got < head->ranks) got += v[take++]->ranks;
  int done = 0;
  if (got >= head->ranks && take > 0) {
    char list[100] = "";
    for (size_t i = 0; i < take; i++) {
      v[i]->action = LSTMD_SCHED_PREEMPT;
      v[i]->preempt_for = head->id;
      size_t l = strlen(list);
      snprintf(list + l, sizeof list - l, "%s%llu", i ? ", " : "", (unsigned long long)v[i]->id);
    }
    const size_t k = needs_ranks(head->why, sizeof head->why, head->ranks, free_now, unusable);
    snprintf(head->why + k, sizeof head->why - k, "; preempting job%s %s", take > 1 ? "s" : "",
             list);
    done = 1;
  }
  free(v);
  return done;
}

int lstmd_sched_plan(int world, const int *node, int *busy, const int *usable, double now_s,
                     struct lstmd_sched_job *jobs, size_t n) {
  struct lstmd_sched_job **q = calloc(n ? n : 1, sizeof *q);
  /* b: the ranks not free to take now, busy or not usable; busy itself gets only the ranks of
   * the jobs started here */
  int *b = calloc((size_t)world, sizeof *b);
  if (!q || !b) {
    free(q);
    free(b);
    return 0;
  }
  int unusable = 0;
  for (int r = 0; r < world; r++) {
    b[r] = busy[r] || (usable && !usable[r]);
    unusable += usable && !usable[r];
  }
  size_t nq = 0;
  for (size_t i = 0; i < n; i++) {
    jobs[i].action = LSTMD_SCHED_NONE;
    jobs[i].position = 0;
    jobs[i].why[0] = '\0';
    jobs[i].preempt_for = 0;
    if (!jobs[i].running) q[nq++] = &jobs[i];
  }
  qsort(q, nq, sizeof *q, cmp_queue);
  const struct lstmd_sched_job *head = NULL;
  double shadow = INFINITY; /* the head's reserved start */
  int started = 0, position = 0;
  for (size_t k = 0; k < nq; k++) {
    struct lstmd_sched_job *j = q[k];
    const int free_now = count_free(world, b);
    if (unusable > 0 && j->ranks > world - unusable) {
      /* more than the usable ranks: it cannot start until an unresponsive rank answers again,
       * so it holds no place at the head (it would block every job behind it) */
      j->position = ++position;
      snprintf(j->why, sizeof j->why, "needs %d ranks, only %d usable (%d unresponsive)", j->ranks,
               world - unusable, unusable);
      continue;
    }
    if (!head) {
      if (j->ranks <= free_now && pick_ranks(world, node, b, j->ranks, j->assign) == 0) {
        j->action = LSTMD_SCHED_START;
        started++;
        continue;
      }
      head = j;
      j->position = ++position;
      if (preempt_for(j, jobs, n, free_now, unusable)) {
        shadow = now_s; /* its ranks are being freed now: nothing runs ahead of it */
        continue;
      }
      shadow = reserved_start(jobs, n, free_now, j->ranks, now_s);
      const size_t k = needs_ranks(j->why, sizeof j->why, j->ranks, free_now, unusable);
      if (isfinite(shadow))
        snprintf(j->why + k, sizeof j->why - k, "; reserved start in %.0f s", shadow - now_s);
      else
        held_by(j->why, sizeof j->why, jobs, n);
      continue;
    }
    /* behind the head: EASY backfill */
    const double ends = now_s + fmax(0.0, j->time_limit_s - j->used_s);
    if (j->ranks <= free_now && j->time_limit_s > 0 && isfinite(shadow) && ends <= shadow &&
        pick_ranks(world, node, b, j->ranks, j->assign) == 0) {
      j->action = LSTMD_SCHED_START;
      started++;
      continue;
    }
    j->position = ++position;
    if (j->ranks > free_now)
      needs_ranks(j->why, sizeof j->why, j->ranks, free_now, unusable);
    else
      snprintf(j->why, sizeof j->why, "behind job %llu (priority %d)%s",
               (unsigned long long)head->id, head->priority,
               j->time_limit_s <= 0  ? "; no time limit, so not backfilled"
               : isfinite(shadow)    ? "; would end after its reserved start"
                                     : "; its start is unknown (a job it waits for has no time limit)");
  }
  for (size_t i = 0; i < n; i++)
    if (jobs[i].action == LSTMD_SCHED_START)
      for (int k = 0; k < jobs[i].ranks; k++) busy[jobs[i].assign[k]] = 1;
  free(b);
  free(q);
  return started;
}
