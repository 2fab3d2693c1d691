/* serve_sched.c — `lstmd serve`'s scheduler: a thread on rank 0 that starts queued jobs on free
 * ranks, stops them (cancel, preemption, time limit, drain) and records how they ended.
 *
 * 1. Why a thread: rank 0 is also a worker. Its main thread is an agent like every other rank's
 *    (daemon/cli_serve.c) and may be training a job for minutes, so the scheduling cannot wait
 *    for it. The thread never trains and never joins a collective; it only sends and receives
 *    point-to-point messages on the daemon's own communicators (serve_sched.h), which MPI allows
 *    from any thread (MPI_THREAD_MULTIPLE), and reads and writes the job table under its lock.
 * 2. One round: take the messages the jobs' leaders sent (progress, evaluations, ends), send the
 *    stops that are due (a cancel, a drain, a time limit passed), then plan (daemon/sched.h, a pure
 *    function of the table and of the ranks usable) and act: preempted jobs are asked to stop,
 *    started jobs are marked RUNNING on their ranks (journaled with them) and each of their ranks
 *    is offered its start. The members answer the offer and are sent the job (member list,
 *    group tag, config JSON and resume path) with this thread's "go", given when all of them
 *    have answered, and only then make the job's communicator; a member silent past the deadline makes the start
 *    abandoned, the job QUEUED again and the rank unresponsive (daemon/serve_start.c). A stop
 *    due while a start is open is held until its "go" (its leader is not listening yet).
 * 3. Waiting: with no job running and every rank responsive nothing can arrive but a request
 *    from a client, so the thread sleeps on the job table's condition variable until one does. With jobs running it also polls
 *    for messages, sleeping 1 ms growing to 20 ms between looks; a request wakes it at once, so
 *    a job submitted onto idle ranks is RUNNING within the time of one round.
 * 4. A job's ranks free when its leader reports the end (after every member has voted on the
 *    outcome); a member still freeing the job's communicator when its next start command arrives
 *    finds the command waiting. A stop that arrives after the job ended is dropped by the next
 *    leader on that rank (its job id differs).
 * 5. An MPI failure here cannot be told to the jobs: the world is aborted (a restart resumes
 *    every job from the journal). */
#define _GNU_SOURCE
#include "serve_sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "comm/comm.h"
#include "kernels/clock.h"
#include "kernels/status.h"
#include "worker/train/trainer.h"
#include "worker/train/val_watch.h"
#include "config.h"
#include "frame.h"
#include "sched.h"
#include "serve_job.h"
#include "serve_start.h"

enum stop_why { STOP_NONE = 0, STOP_CANCEL, STOP_PREEMPT, STOP_LIMIT, STOP_DRAIN };

struct slot { /* a running job */
  uint64_t id;
  int *ranks, n;
  double started_s; /* scheduler clock: its "go" */
  int pending;      /* the start is open: no "go" yet (serve_start.c) */
  int stop;         /* enum stop_why of the stop asked for (first one wins; sent once it runs) */
  uint64_t preempt_for;
  Lstmd__Job *job;  /* copy taken at start */
};

struct lstmd_sched {
  struct lstmd_serve_comms c;
  struct lstmd_jobs *jobs;
  char data_root[4096];
  int world, *node, *busy;
  struct slot *slots;
  size_t n_slots;
  struct lstmd_start_gate *gate;
  pthread_t thread;
  int status, silent; /* silent: ranks that did not answer the exit */
};

static void fatal(struct lstmd_sched *s, const char *what, int rc) {
  lstmd_errorf("scheduler: %s failed (%s); ending the daemon (a restart resumes every job)",
               what, lstmd_strerror(rc));
  lstmd_comm_abort(s->c.world, 1);
}

/* The job's config (paths checked again: the file system may have changed since it was
 * submitted) and where to resume from, as the start command's payload. */
static char *job_payload(const Lstmd__Job *job, const char *data_root, size_t *len, char *err,
                         size_t errlen) {
  struct lstmd_train_config cfg;
  int has_run_dir;
  /* world 0: a job restored from the journal whose stages no longer fit fails in set-up */
  if (lstmd_serve_job_config(job->settings, job->n_settings, data_root, 0, &cfg, &has_run_dir,
                             err, errlen))
    return NULL;
  snprintf(cfg.run_dir, sizeof cfg.run_dir, "%s", job->run_dir);
  char resume[1200] = "", found[300];
  if (job->attempts > 1 || job->resume) { /* its own run, or the one it continues, if any */
    const int found_at =
        lstmd_run_dir_resume_point(job->run_dir, resume, sizeof resume, err, errlen);
    if (found_at < 0) return NULL;
    if (found_at == 2)
      fprintf(stderr, "lstmd: job %llu: no latest.safetensors in its run dir: resuming from the "
              "newest step checkpoint there, %s\n", (unsigned long long)job->id, resume);
  } else if (lstmd_run_dir_checkpoint(job->run_dir, found, sizeof found)) {
    /* Checked at submission too; a run (a job's default run dir left from an older journal, or
     * `lstmd train` by hand) may have been written there while this one waited. */
    lstmd_run_dir_fresh_refusal(err, errlen, job->run_dir, found, LSTMD_FRESH_START);
    return NULL;
  }
  char *json = lstmd_config_to_json(&cfg), *payload = NULL;
  if (json && asprintf(&payload, "%s%c%s", json, '\0', resume) >= 0)
    *len = strlen(json) + 1 + strlen(resume) + 1;
  else
    snprintf(err, errlen, "out of memory");
  free(json);
  return payload;
}

static void format_ranks(const int *r, int n, char *out, size_t len) {
  size_t at = 0;
  out[0] = '\0';
  for (int i = 0; i < n && at < len; i++) {
    int j = i;
    while (j + 1 < n && r[j + 1] == r[j] + 1) j++;
    at += (size_t)snprintf(out + at, len - at, "%s%d", i ? "," : "", r[i]);
    if (j > i && at < len) at += (size_t)snprintf(out + at, len - at, "-%d", r[j]);
    i = j;
  }
}

static void free_slot(struct lstmd_sched *s, size_t i) {
  struct slot *sl = &s->slots[i];
  for (int k = 0; k < sl->n; k++) s->busy[sl->ranks[k]] = 0;
  free(sl->ranks);
  lstmd__job__free_unpacked(sl->job, NULL);
  s->slots[i] = s->slots[--s->n_slots];
}

/* The stop asked for, to the job's leader (once its start has its "go"). */
static void deliver_stop(struct lstmd_sched *s, struct slot *sl) {
  struct lstmd_serve_stop msg = {.job_id = sl->id};
  int rc = lstmd_comm_send_msg(s->c.down, sl->ranks[0], kServeStop, &msg, sizeof msg);
  if (rc) fatal(s, "sending a stop", rc);
}

static void send_stop(struct lstmd_sched *s, struct slot *sl, int why, uint64_t preempt_for) {
  if (sl->stop) return;
  sl->stop = why;
  sl->preempt_for = preempt_for;
  static const char *const kWhy[] = {"", "cancel", "preemption", "time limit", "drain"};
  fprintf(stderr, "lstmd: job %llu: stopping (%s%s)%s\n", (unsigned long long)sl->id, kWhy[why],
          why == STOP_PREEMPT ? (preempt_for ? " for a higher priority job" : "") : "",
          sl->pending ? " once its ranks have answered its start" : "");
  if (!sl->pending) deliver_stop(s, sl);
}

/* Marks the job RUNNING on ranks and sends each of them the start command. */
static void start_job(struct lstmd_sched *s, uint64_t id, const int *ranks, int n) {
  Lstmd__Job *job = lstmd_jobs_start(s->jobs, id, ranks, n);
  if (!job) {
    for (int k = 0; k < n; k++) s->busy[ranks[k]] = 0;
    return;
  }
  char err[1600];
  size_t len = 0;
  char *payload = job_payload(job, s->data_root, &len, err, sizeof err);
  if (!payload) {
    fprintf(stderr, "lstmd: job %llu: FAILED: %s\n", (unsigned long long)id, err);
    lstmd_jobs_finish(s->jobs, id, LSTMD__JOB_STATE__FAILED, -1, err, 0, 0);
    lstmd__job__free_unpacked(job, NULL);
    for (int k = 0; k < n; k++) s->busy[ranks[k]] = 0;
    return;
  }
  char where[256];
  format_ranks(ranks, n, where, sizeof where);
  fprintf(stderr, "lstmd: job %llu%s%s: starting on %d rank%s (%s; attempt %u), run dir %s\n",
          (unsigned long long)id, job->name[0] ? " " : "", job->name, n, n == 1 ? "" : "s", where,
          job->attempts, job->run_dir);
  struct slot *grown = realloc(s->slots, (s->n_slots + 1) * sizeof *grown);
  int *copy = malloc((size_t)n * sizeof *copy);
  if (!grown || !copy) fatal(s, "allocating a start", LSTMD_ENOMEM);
  s->slots = grown;
  memcpy(copy, ranks, (size_t)n * sizeof *copy);
  /* the job itself goes with the "go" (serve_start.c); the members are offered its start */
  uint64_t start_id = 0;
  int rc = lstmd_gate_open(s->gate, id, ranks, n, (int)(id % 30000) + 1, payload, len, &start_id);
  if (rc) fatal(s, "opening a start", rc);
  free(payload);
  s->slots[s->n_slots++] = (struct slot){.id = id, .ranks = copy, .n = n, .pending = 1,
                                         .started_s = lstmd_now_s(), .job = job};
  const struct lstmd_serve_cmd offer = {.kind = kServeStart, .job_id = id, .start_id = start_id};
  for (int k = 0; k < n; k++) {
    rc = lstmd_comm_send_msg(s->c.down, ranks[k], kServeCmd, &offer, sizeof offer);
    if (rc) fatal(s, "sending a start command", rc);
  }
}

/* How the job ended, from its leader's report. */
static void record_end(struct lstmd_sched *s, size_t i, const struct lstmd_serve_report *r) {
  struct slot *sl = &s->slots[i];
  const Lstmd__Job *job = sl->job;
  char reason[1400];
  const long step = r->ended ? (long)r->step : -1;
  const long total = job->total_steps;
  int state;
  uint64_t preempted_by = 0;
  if (r->rc) {
    state = LSTMD__JOB_STATE__FAILED;
    if (r->failed_rank > 0 && strncmp(r->reason, "rank ", 5))
      snprintf(reason, sizeof reason, "rank %d: %s", r->failed_rank, r->reason);
    else snprintf(reason, sizeof reason, "%s", r->reason);
  } else if (r->ended && r->step >= total) {
    state = LSTMD__JOB_STATE__SUCCEEDED;
    snprintf(reason, sizeof reason, "done: %s/step-%ld.safetensors", job->run_dir, step);
  } else if (r->ended && r->how == LSTMD_END_EARLY_STOP) { /* finished: a requeue would stop */
    state = LSTMD__JOB_STATE__SUCCEEDED;
    snprintf(reason, sizeof reason, "stopped early at step %ld (train.early_stop_patience): "
             "%s/step-%ld.safetensors, best: %s/best.safetensors", step, job->run_dir, step,
             job->run_dir);
  } else if (sl->stop == STOP_CANCEL || lstmd_jobs_cancel_requested(s->jobs, sl->id)) {
    state = LSTMD__JOB_STATE__CANCELLED;
    snprintf(reason, sizeof reason, "cancelled at step %ld; checkpoint %s/latest.safetensors", step,
             job->run_dir);
  } else if (sl->stop == STOP_LIMIT) {
    state = LSTMD__JOB_STATE__FAILED;
    snprintf(reason, sizeof reason, "time limit: ran past resources.time_limit_s = %g s; stopped "
             "at step %ld with a checkpoint, %s/latest.safetensors", job->time_limit_s, step,
             job->run_dir);
  } else if (sl->stop == STOP_PREEMPT) {
    state = LSTMD__JOB_STATE__QUEUED;
    preempted_by = sl->preempt_for ? sl->preempt_for : 1;
    snprintf(reason, sizeof reason, "preempted by job %llu at step %ld; resumes from %s/latest"
             ".safetensors", (unsigned long long)sl->preempt_for, step, job->run_dir);
  } else {
    state = LSTMD__JOB_STATE__QUEUED;
    snprintf(reason, sizeof reason, "interrupted by a shutdown at step %ld; resumes from %s/latest"
             ".safetensors", step, job->run_dir);
  }
  fprintf(stderr, "lstmd: job %llu: %s: %s\n", (unsigned long long)sl->id,
          lstmd_job_state_name(state), reason);
  const int64_t ran_ms = (int64_t)((lstmd_now_s() - sl->started_s) * 1000.0);
  lstmd_jobs_finish(s->jobs, sl->id, state, step, reason, ran_ms, preempted_by);
  if (r->signalled) lstmd_jobs_drain(s->jobs, NULL);
  free_slot(s, i);
}

static size_t slot_of(const struct lstmd_sched *s, uint64_t id) {
  size_t i = 0;
  while (i < s->n_slots && s->slots[i].id != id) i++;
  return i;
}

/* Takes every report waiting; returns how many there were. */
static int take_reports(struct lstmd_sched *s) {
  int n = 0;
  for (;;) {
    void *buf;
    size_t bytes;
    int rc = lstmd_comm_recv_msg(s->c.up, -1, kServeReport, 0, 0, &buf, &bytes, NULL, NULL);
    if (rc == 1) return n;
    if (rc) fatal(s, "receiving a report", rc);
    n++;
    struct lstmd_serve_report r;
    if (bytes != sizeof r) {
      lstmd_errorf("scheduler: a report of %zu bytes (expected %zu); dropped", bytes, sizeof r);
      free(buf);
      continue;
    }
    memcpy(&r, buf, sizeof r);
    free(buf);
    r.reason[sizeof r.reason - 1] = '\0';
    if (r.kind == kReportStep)
      lstmd_jobs_progress(s->jobs, r.job_id, (long)r.step, (long)r.total_steps, r.loss, r.lr,
                          r.grad_norm, r.tokens_per_s, r.elapsed_s, r.eta_s);
    else if (r.kind == kReportBegin)
      lstmd_jobs_begin(s->jobs, r.job_id, (long)r.step, (long)r.total_steps);
    else if (r.kind == kReportEval)
      lstmd_jobs_eval(s->jobs, r.job_id, (long)r.step, r.val_loss, r.val_bpc, r.val_accuracy);
    else if (r.kind == kReportDone) {
      const size_t i = slot_of(s, r.job_id);
      if (i < s->n_slots) record_end(s, i, &r);
    }
  }
}

/* A start settled (serve_start.h): on "go" the job runs (and a stop held meanwhile is sent);
 * abandoned, its ranks are free again and it is QUEUED (or CANCELLED, if asked meanwhile) without
 * counting as an attempt. */
static void start_decided(void *ctx, uint64_t job_id, int go, const char *why) {
  struct lstmd_sched *s = ctx;
  const size_t i = slot_of(s, job_id);
  if (i == s->n_slots) return;
  struct slot *sl = &s->slots[i];
  if (go) {
    sl->pending = 0;
    sl->started_s = lstmd_now_s();
    if (sl->stop) deliver_stop(s, sl);
    return;
  }
  lstmd_jobs_unstart(s->jobs, job_id, why);
  fprintf(stderr, "lstmd: job %llu: %s: %s\n", (unsigned long long)job_id,
          lstmd_jobs_cancel_requested(s->jobs, job_id) ? "CANCELLED" : "QUEUED", why);
  free_slot(s, i);
}

/* One round of planning (rationale 2). */
static void plan(struct lstmd_sched *s, const struct lstmd_jobs_entry *e, size_t n) {
  struct lstmd_sched_job *v = calloc(n ? n : 1, sizeof *v);
  int *assign = calloc((n ? n : 1) * (size_t)s->world, sizeof *assign);
  if (!v || !assign) fatal(s, "planning", LSTMD_ENOMEM);
  const double now = lstmd_now_s();
  for (size_t i = 0; i < n; i++) {
    v[i] = (struct lstmd_sched_job){.id = e[i].id, .running = e[i].running, .ranks = e[i].ranks,
                                    .priority = e[i].priority, .time_limit_s = e[i].time_limit_s,
                                    .used_s = e[i].run_s, .preemptible = e[i].preemptible,
                                    .assign = assign + i * (size_t)s->world};
    const size_t k = slot_of(s, e[i].id);
    if (e[i].running && k < s->n_slots) {
      v[i].started_s = s->slots[k].started_s;
      v[i].used_s += now - s->slots[k].started_s;
      v[i].stopping = s->slots[k].stop != STOP_NONE;
      v[i].stopping_for = s->slots[k].stop == STOP_PREEMPT ? s->slots[k].preempt_for : 0;
    }
  }
  lstmd_sched_plan(s->world, s->node, s->busy, lstmd_gate_usable(s->gate), now, v, n);
  for (size_t i = 0; i < n; i++) {
    if (v[i].action == LSTMD_SCHED_PREEMPT) {
      const size_t k = slot_of(s, v[i].id);
      if (k < s->n_slots) send_stop(s, &s->slots[k], STOP_PREEMPT, v[i].preempt_for);
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (v[i].action == LSTMD_SCHED_START) start_job(s, v[i].id, v[i].assign, v[i].ranks);
    else if (!v[i].running) lstmd_jobs_set_waiting(s->jobs, v[i].id, (uint32_t)v[i].position, v[i].why);
  }
  free(assign);
  free(v);
}

/* Stops that are due: a drain, a cancel, a time limit passed. */
static void due_stops(struct lstmd_sched *s, const struct lstmd_jobs_entry *e, size_t n, int draining) {
  const double now = lstmd_now_s();
  for (size_t i = 0; i < n; i++) {
    if (!e[i].running) continue;
    const size_t k = slot_of(s, e[i].id);
    if (k == s->n_slots) continue;
    struct slot *sl = &s->slots[k];
    if (e[i].cancel_requested) send_stop(s, sl, STOP_CANCEL, 0);
    else if (draining) send_stop(s, sl, STOP_DRAIN, 0);
    else if (e[i].time_limit_s > 0 && e[i].run_s + (now - sl->started_s) > e[i].time_limit_s)
      send_stop(s, sl, STOP_LIMIT, 0);
  }
}

static void *sched_main(void *arg) {
  struct lstmd_sched *s = arg;
  prctl(PR_SET_NAME, "lstmd-sched", 0, 0, 0);
  long idle_ms = 1;
  for (;;) {
    int got = take_reports(s);
    const int answers = lstmd_gate_poll(s->gate, start_decided, s);
    if (answers < 0) fatal(s, "the start handshake", answers);
    got += answers;
    struct lstmd_jobs_entry *e = NULL;
    size_t n = 0;
    int draining = 0;
    const uint64_t seen = lstmd_jobs_snapshot(s->jobs, &e, &n, &draining);
    if (!e) fatal(s, "a snapshot of the job table", LSTMD_ENOMEM);
    due_stops(s, e, n, draining);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
      /* A job restored from the journal of a larger world (a daemon restarted on fewer ranks,
       * a requeued serve.sbatch with a smaller allocation) waits, out of the plan, for a daemon
       * that has its ranks: failing it would end its run for good, and its checkpoints are
       * there to go on from. One with no ranks at all is a damaged record: it fails. */
      if (!e[i].running && e[i].ranks < 1) {
        static const char kWhy[] = "resources.ranks: the job's record asks for no ranks";
        fprintf(stderr, "lstmd: job %llu: FAILED: %s\n", (unsigned long long)e[i].id, kWhy);
        lstmd_jobs_finish(s->jobs, e[i].id, LSTMD__JOB_STATE__FAILED, -1, kWhy, 0, 0);
      } else if (!e[i].running && e[i].ranks > s->world) {
        char why[200];
        snprintf(why, sizeof why, "needs %d ranks and this daemon has %d: it starts when the "
                 "daemon runs on %d or more (or cancel it)", e[i].ranks, s->world, e[i].ranks);
        if (lstmd_jobs_set_waiting(s->jobs, e[i].id, 0, why))
          fprintf(stderr, "lstmd: job %llu: QUEUED: %s\n", (unsigned long long)e[i].id, why);
      } else {
        e[kept++] = e[i];
      }
    }
    n = kept;
    if (!draining) plan(s, e, n);
    free(e);
    if (draining && s->n_slots == 0) break;
    if (got) idle_ms = 1;
    if (s->n_slots == 0 && !lstmd_gate_waiting(s->gate)) {
      lstmd_jobs_wait(s->jobs, seen, -1);
    } else {
      lstmd_jobs_wait(s->jobs, seen, idle_ms);
      if (idle_ms < 20) idle_ms *= 2;
    }
  }
  s->silent = lstmd_gate_farewell(s->gate, 0);
  if (s->silent < 0) fatal(s, "sending exit", s->silent);
  return NULL;
}

int lstmd_sched_start(const struct lstmd_serve_comms *comms, struct lstmd_jobs *jobs,
                      const char *data_root, const int *node, const char *hosts, int world,
                      double start_timeout_s, struct lstmd_sched **out) {
  *out = NULL;
  struct lstmd_sched *s = calloc(1, sizeof *s);
  if (!s) return LSTMD_ENOMEM;
  s->c = *comms;
  s->jobs = jobs;
  s->world = world;
  snprintf(s->data_root, sizeof s->data_root, "%s", data_root);
  s->node = malloc((size_t)world * sizeof *s->node);
  s->busy = calloc((size_t)world, sizeof *s->busy);
  if (!s->node || !s->busy ||
      lstmd_gate_create(comms, jobs, world, hosts, start_timeout_s, &s->gate)) {
    free(s->node);
    free(s->busy);
    free(s);
    return LSTMD_ENOMEM;
  }
  memcpy(s->node, node, (size_t)world * sizeof *node);
  int rc = pthread_create(&s->thread, NULL, sched_main, s);
  if (rc) {
    lstmd_errorf("serve: cannot start the scheduler thread: %s", strerror(rc));
    lstmd_gate_destroy(s->gate);
    free(s->node);
    free(s->busy);
    free(s);
    return LSTMD_ENOMEM;
  }
  *out = s;
  return LSTMD_OK;
}

int lstmd_sched_join(struct lstmd_sched *s, int *silent) {
  if (silent) *silent = 0;
  if (!s) return LSTMD_OK;
  pthread_join(s->thread, NULL);
  const int rc = s->status;
  if (silent) *silent = s->silent;
  lstmd_gate_destroy(s->gate);
  while (s->n_slots) free_slot(s, 0);
  free(s->slots);
  free(s->node);
  free(s->busy);
  free(s);
  return rc;
}
