/* jobs_sched.c — the scheduler's side of the job table (see jobs.h: daemon/serve_sched.c on
 * rank 0): the snapshot it schedules from and the wait for the next request, a job's start,
 * its place in line, progress, evaluations and end, an abandoned start, and the unresponsive
 * ranks. Each change takes the table's lock; state changes are journaled and posted (jobs.c). */
#define _GNU_SOURCE
#include "jobs_table.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

uint64_t lstmd_jobs_snapshot(struct lstmd_jobs *t, struct lstmd_jobs_entry **out, size_t *n,
                             int *draining) {
  pthread_mutex_lock(&t->mu);
  lstmd_jobs_journal_kept(t, 0);
  *out = calloc(t->n ? t->n : 1, sizeof **out);
  *n = 0;
  for (size_t i = 0; *out && i < t->n; i++) {
    const Lstmd__Job *j = t->v[i];
    if (j->state != LSTMD__JOB_STATE__QUEUED && j->state != LSTMD__JOB_STATE__RUNNING) continue;
    (*out)[(*n)++] = (struct lstmd_jobs_entry){
        .id = j->id, .running = j->state == LSTMD__JOB_STATE__RUNNING,
        .ranks = j->ranks ? (int)j->ranks : (int)t->world, /* 0: a record from before resources */
        .priority = j->priority, .preemptible = !j->no_preempt,
        .cancel_requested = j->cancel_requested, .time_limit_s = j->time_limit_s,
        .run_s = (double)j->run_ms / 1000.0};
  }
  *draining = t->draining;
  const uint64_t seen = t->requests;
  pthread_mutex_unlock(&t->mu);
  return seen;
}

void lstmd_jobs_wait(struct lstmd_jobs *t, uint64_t seen, long timeout_ms) {
  pthread_mutex_lock(&t->mu);
  if (t->n_unjournaled && (timeout_ms < 0 || timeout_ms > kJournalRetryMs))
    timeout_ms = kJournalRetryMs; /* the next retry of journal_kept */
  if (timeout_ms < 0) {
    while (t->requests == seen) pthread_cond_wait(&t->wake, &t->mu);
  } else if (t->requests == seen) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (timeout_ms % 1000) * 1000000L;
    ts.tv_sec += timeout_ms / 1000 + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&t->wake, &t->mu, &ts);
  }
  pthread_mutex_unlock(&t->mu);
}

Lstmd__Job *lstmd_jobs_start(struct lstmd_jobs *t, uint64_t id, const int *ranks, int n) {
  pthread_mutex_lock(&t->mu);
  Lstmd__Job *job = lookup(t, id), *copy = NULL;
  uint32_t *assigned = job ? malloc((size_t)(n > 0 ? n : 1) * sizeof *assigned) : NULL;
  if (job && assigned && job->state == LSTMD__JOB_STATE__QUEUED) {
    touch(t, index_of(t, id));
    for (int i = 0; i < n; i++) assigned[i] = (uint32_t)ranks[i];
    free(job->assigned_ranks); /* jobs are unpacked with the default allocator (malloc) */
    job->assigned_ranks = assigned;
    job->n_assigned_ranks = (size_t)n;
    assigned = NULL;
    job->state = LSTMD__JOB_STATE__RUNNING;
    job->attempts++;
    job->started_ms = now_ms();
    job->tokens_per_s = job->eta_s = 0.0; /* the last attempt's; this one has none yet */
    job->cancel_requested = 0;
    job->queue_position = 0;
    set_str(&job->waiting, "");
    if (job->attempts > 1) {
      char note[200];
      if (!strncmp(job->reason, "preempted", 9))
        snprintf(note, sizeof note, "resumed after a preemption (attempt %u)", job->attempts);
      else
        snprintf(note, sizeof note, "resumed after an interruption (attempt %u)", job->attempts);
      set_str(&job->reason, note);
    }
    lstmd_jobs_changed(t, job); /* a journal failure is reported; the job still runs */
    copy = copy_job(job);
  }
  free(assigned);
  pthread_mutex_unlock(&t->mu);
  return copy;
}

int lstmd_jobs_set_waiting(struct lstmd_jobs *t, uint64_t id, uint32_t position, const char *why) {
  pthread_mutex_lock(&t->mu);
  const size_t i = index_of(t, id);
  const int changed = i < t->n && t->v[i]->state == LSTMD__JOB_STATE__QUEUED &&
                      (t->v[i]->queue_position != position || strcmp(t->v[i]->waiting, why));
  if (changed) {
    touch(t, i);
    t->v[i]->queue_position = position;
    set_str(&t->v[i]->waiting, why);
  }
  pthread_mutex_unlock(&t->mu);
  return changed;
}

void lstmd_jobs_begin(struct lstmd_jobs *t, uint64_t id, long step, long total) {
  pthread_mutex_lock(&t->mu);
  Lstmd__Job *job = find(t, id);
  if (job) {
    job->step = step;
    job->total_steps = total;
    job->tokens_per_s = job->eta_s = 0.0;
  }
  pthread_mutex_unlock(&t->mu);
}

void lstmd_jobs_progress(struct lstmd_jobs *t, uint64_t id, long step, long total, double loss,
                         double lr, double grad_norm, double tokens_per_s, double elapsed_s,
                         double eta_s) {
  pthread_mutex_lock(&t->mu);
  Lstmd__Job *job = find(t, id);
  if (job) {
    job->step = step;
    job->total_steps = total;
    job->loss = loss;
    job->tokens_per_s = tokens_per_s;
    job->eta_s = eta_s;
    Lstmd__Metrics m = LSTMD__METRICS__INIT;
    m.step = step;
    m.total_steps = total;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.tokens_per_s = tokens_per_s;
    m.elapsed_s = elapsed_s;
    m.eta_s = eta_s;
    m.val_loss = m.val_bpc = NAN;
    lstmd_jobs_post(t, job, &m);
  }
  pthread_mutex_unlock(&t->mu);
}

void lstmd_jobs_eval(struct lstmd_jobs *t, uint64_t id, long step, double val_loss, double val_bpc,
                     double val_accuracy) {
  pthread_mutex_lock(&t->mu);
  Lstmd__Job *job = find(t, id);
  if (job) {
    job->val_loss = val_loss;
    job->val_bpc = val_bpc;
    job->has_val_accuracy = isfinite(val_accuracy); /* NAN: not a classifier */
    job->val_accuracy = job->has_val_accuracy ? val_accuracy : 0.0;
    Lstmd__Metrics m = LSTMD__METRICS__INIT;
    m.step = step;
    m.total_steps = job->total_steps;
    m.is_eval = 1;
    m.val_loss = val_loss;
    m.val_bpc = val_bpc;
    m.has_val_accuracy = job->has_val_accuracy;
    m.val_accuracy = job->val_accuracy;
    lstmd_jobs_post(t, job, &m);
  }
  pthread_mutex_unlock(&t->mu);
}

void lstmd_jobs_finish(struct lstmd_jobs *t, uint64_t id, int state, long step, const char *reason,
                       int64_t ran_ms, uint64_t preempted_by) {
  pthread_mutex_lock(&t->mu);
  Lstmd__Job *job = find(t, id);
  if (job) {
    job->state = state;
    if (step >= 0) job->step = step;
    set_str(&job->reason, reason ? reason : "");
    if (is_final(state)) job->finished_ms = now_ms();
    job->run_ms += ran_ms > 0 ? ran_ms : 0;
    if (preempted_by && state == LSTMD__JOB_STATE__QUEUED) {
      job->preemptions++;
      job->preempted_by = (uint32_t)preempted_by;
    }
    lstmd_jobs_changed(t, job);
  }
  pthread_mutex_unlock(&t->mu);
}

int lstmd_jobs_cancel_requested(struct lstmd_jobs *t, uint64_t id) {
  pthread_mutex_lock(&t->mu);
  Lstmd__Job *job = lookup(t, id);
  int yes = job && job->cancel_requested;
  pthread_mutex_unlock(&t->mu);
  return yes;
}

void lstmd_jobs_unstart(struct lstmd_jobs *t, uint64_t id, const char *reason) {
  pthread_mutex_lock(&t->mu);
  Lstmd__Job *job = find(t, id);
  if (job && job->state == LSTMD__JOB_STATE__RUNNING) {
    if (job->attempts) job->attempts--;
    if (job->cancel_requested) {
      char why[1200];
      snprintf(why, sizeof why, "cancelled before it started (%s)", reason);
      job->state = LSTMD__JOB_STATE__CANCELLED;
      job->finished_ms = now_ms();
      set_str(&job->reason, why);
    } else {
      job->state = LSTMD__JOB_STATE__QUEUED;
      set_str(&job->reason, reason);
    }
    lstmd_jobs_changed(t, job);
  }
  pthread_mutex_unlock(&t->mu);
}

void lstmd_jobs_set_unresponsive(struct lstmd_jobs *t, const uint32_t *ranks, size_t n) {
  uint32_t *copy = malloc((n ? n : 1) * sizeof *copy);
  if (!copy) return; /* the listing keeps the old set; the scheduler's own set is what counts */
  if (n) memcpy(copy, ranks, n * sizeof *copy);
  pthread_mutex_lock(&t->mu);
  free(t->unresponsive);
  t->unresponsive = copy;
  t->n_unresponsive = n;
  t->version++; /* the cached ListJobs reply is out of date */
  pthread_mutex_unlock(&t->mu);
}
