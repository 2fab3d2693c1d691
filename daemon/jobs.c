/* jobs.c — the job table (see jobs.h). Here: the reply and event frames, the journaled
 * changes (and those the journal could not take yet), the table's opening and closing, and the
 * control server's side: submit, get, list, cancel, watch and drain. The scheduler's side is in
 * jobs_sched.c; the helpers both use are in jobs_table.h. */
#define _GNU_SOURCE
#include "jobs_table.h"

#include <math.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>

#include "kernels/status.h"
#include "worker/train/val_watch.h"
#include "frame.h"

enum { kMaxCrashes = 3 }; /* the daemon died under a job this many times: it is failed */

static uint8_t *job_frame(const Lstmd__Job *job, size_t *len) {
  Lstmd__Response resp = LSTMD__RESPONSE__INIT;
  resp.kind_case = LSTMD__RESPONSE__KIND_JOB;
  resp.job = (Lstmd__Job *)job;
  return lstmd_frame_pack(&resp.base, len);
}

/* A copy of the cached reply, packed again first when it is missing or older than version
 * (lock held). */
static uint8_t *cached_reply(struct lstmd_reply_cache *c, uint64_t version,
                             uint8_t *(*pack)(const void *what, size_t *len), const void *what,
                             size_t *len) {
  if (!c->frame || c->version != version) {
    free(c->frame);
    c->frame = pack(what, &c->len);
    c->version = version;
    if (!c->frame) return NULL;
  }
  uint8_t *copy = malloc(c->len);
  if (copy) memcpy(copy, c->frame, c->len);
  *len = c->len;
  return copy;
}

static uint8_t *pack_job(const void *job, size_t *len) { return job_frame(job, len); }

static uint8_t *pack_list(const void *table, size_t *len) {
  const struct lstmd_jobs *t = table;
  Lstmd__JobList list = LSTMD__JOB_LIST__INIT;
  list.n_jobs = t->n;
  list.jobs = t->v;
  list.world = t->world;
  list.n_unresponsive_ranks = t->n_unresponsive;
  list.unresponsive_ranks = t->unresponsive;
  Lstmd__Response resp = LSTMD__RESPONSE__INIT;
  resp.kind_case = LSTMD__RESPONSE__KIND_JOBS;
  resp.jobs = &list;
  return lstmd_frame_pack(&resp.base, len);
}

static uint8_t *event_frame(const Lstmd__Job *job, int final, const Lstmd__Metrics *m, size_t *len) {
  Lstmd__Event ev = LSTMD__EVENT__INIT;
  ev.job_id = job->id;
  if (m) {
    ev.kind_case = LSTMD__EVENT__KIND_METRICS;
    ev.metrics = (Lstmd__Metrics *)m;
  } else if (final) {
    ev.kind_case = LSTMD__EVENT__KIND_RESULT;
    ev.result = (Lstmd__Job *)job;
  } else {
    ev.kind_case = LSTMD__EVENT__KIND_STATE;
    ev.state = (Lstmd__Job *)job;
  }
  Lstmd__Response resp = LSTMD__RESPONSE__INIT;
  resp.kind_case = LSTMD__RESPONSE__KIND_EVENT;
  resp.event = &ev;
  return lstmd_frame_pack(&resp.base, len);
}

void lstmd_jobs_post(struct lstmd_jobs *t, const Lstmd__Job *job, const Lstmd__Metrics *m) {
  if (!t->post) return;
  size_t len;
  const int final = !m && is_final(job->state);
  uint8_t *frame = event_frame(job, final, m, &len);
  if (frame) t->post(t->post_ctx, job->id, final, frame, len);
}

/* A change the journal could not take (a full disk) is not dropped: the job's id is kept, and its
 * latest record is appended again at a later change or scheduler round, every 2 s at most, until
 * the disk takes it. Until then a restarted daemon would show the job's earlier state (a job that
 * ended would run again from its last checkpoint), so the log says which jobs wait. */
static void keep_unjournaled(struct lstmd_jobs *t, const Lstmd__Job *job) {
  for (size_t i = 0; i < t->n_unjournaled; i++)
    if (t->unjournaled[i] == job->id) return;
  uint64_t *grown = realloc(t->unjournaled, (t->n_unjournaled + 1) * sizeof *grown);
  if (!grown) return; /* the journal's own message stands */
  t->unjournaled = grown;
  if (!t->n_unjournaled) t->journal_retry_ms = now_ms() + kJournalRetryMs;
  t->unjournaled[t->n_unjournaled++] = job->id;
  fprintf(stderr, "lstmd: job %llu: its change to %s is not in the job journal yet; it is written "
          "once the journal's disk takes it (a daemon restarted before that shows its earlier "
          "state)\n", (unsigned long long)job->id, lstmd_job_state_name(job->state));
}

/* Appends the latest record of every job kept by keep_unjournaled, quietly (each failure was
 * told once), at most every kJournalRetryMs unless forced (the scheduler's rounds come every few
 * milliseconds while a job runs). Returns how many are still waiting. */
size_t lstmd_jobs_journal_kept(struct lstmd_jobs *t, int force) {
  if (!t->n_unjournaled || (!force && now_ms() < t->journal_retry_ms)) return t->n_unjournaled;
  size_t done = 0;
  while (done < t->n_unjournaled) {
    const Lstmd__Job *job = lookup(t, t->unjournaled[done]);
    if (job && lstmd_journal_append(&t->journal, job, 1) != 0) break;
    done++;
  }
  t->journal_retry_ms = now_ms() + kJournalRetryMs;
  t->n_unjournaled -= done;
  memmove(t->unjournaled, t->unjournaled + done, t->n_unjournaled * sizeof *t->unjournaled);
  if (done && !t->n_unjournaled)
    fprintf(stderr, "lstmd: %s: the job journal took the %zu record%s it could not before\n",
            t->journal.path, done, done == 1 ? "" : "s");
  return t->n_unjournaled;
}

/* Journals and announces a state change (lock held). */
int lstmd_jobs_changed(struct lstmd_jobs *t, Lstmd__Job *job) {
  const int rc =
      lstmd_jobs_journal_kept(t, 0) ? LSTMD_EIO : lstmd_journal_append(&t->journal, job, 0);
  if (rc) keep_unjournaled(t, job);
  lstmd_jobs_post(t, job, NULL);
  return rc;
}

/* The next job id: past every id in the journal and every STATE/runs/job-N folder, so that a
 * journal that lost records (damaged, kept aside by journal.c) never hands an old job's id, and
 * its run dir, to a new job. */
static uint64_t next_free_id(const struct lstmd_jobs *t) {
  uint64_t next = 1;
  for (size_t i = 0; i < t->n; i++)
    if (t->v[i]->id >= next) next = t->v[i]->id + 1;
  char runs[sizeof t->state_dir + 8];
  snprintf(runs, sizeof runs, "%s/runs", t->state_dir);
  DIR *d = opendir(runs);
  for (struct dirent *e; d && (e = readdir(d));) {
    unsigned long long id;
    char end;
    if (sscanf(e->d_name, "job-%llu%c", &id, &end) == 1 && id >= next) next = id + 1;
  }
  if (d) closedir(d);
  return next;
}

/* Whether run_dir (resolved, as lstmd_path_inside gives it) lies in <state_dir>/runs: under the
 * resolved state dir's runs/, which need not exist yet (a run dir named there before the first
 * job made it used to pass, and a later job's own run dir then held a run), or under runs/
 * resolved where it exists (a symlink to another disk). */
static int under(const char *path, const char *dir) {
  const size_t n = strlen(dir);
  return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}
static int in_daemon_runs(const struct lstmd_jobs *t, const char *run_dir) {
  char real[PATH_MAX + 8], runs[sizeof t->state_dir + 8];
  if (realpath(t->state_dir, real) && under(run_dir, strcat(real, "/runs"))) return 1;
  snprintf(runs, sizeof runs, "%s/runs", t->state_dir); /* runs/ itself, a symlink perhaps */
  return realpath(runs, real) && under(run_dir, real);
}

/* The step a job found RUNNING resumes from: that of the checkpoint its run will read
 * (lstmd_run_dir_resume_meta); 0 where the run dir holds none (a fresh start); -1 where it
 * cannot tell (the job's start will say why). The journal keeps a job's step as of its last state
 * change, which after a crash is the step it was started from, not where its run stands. */
static long resume_step(const char *run_dir) {
  static const char *const key[] = {"train.step"};
  char path[1400];
  long step;
  const int found = lstmd_run_dir_resume_meta(run_dir, 1, key, &step, path, sizeof path);
  return found == 0 ? 0 : found < 0 ? -1 : step;
}

int lstmd_jobs_open(struct lstmd_jobs *t, const char *state_dir) {
  memset(t, 0, sizeof *t);
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->wake, NULL);
  snprintf(t->state_dir, sizeof t->state_dir, "%s", state_dir);
  LSTMD_TRY(lstmd_journal_open(&t->journal, state_dir, &t->v, &t->n));
  t->job_replies = calloc(t->n ? t->n : 1, sizeof *t->job_replies);
  if (!t->job_replies) return LSTMD_ENOMEM;
  t->next_id = next_free_id(t);
  for (size_t i = 0; i < t->n; i++) {
    Lstmd__Job *job = t->v[i];
    if (job->state != LSTMD__JOB_STATE__RUNNING) continue;
    /* Only crashes count (the daemon or a rank died while it ran: a job that takes the daemon
     * down would do it forever); a drain (shutdown, SIGTERM/SIGUSR1) or a preemption left it
     * QUEUED with a checkpoint, so it is never found RUNNING here. */
    const long step = resume_step(job->run_dir);
    if (step >= 0) job->step = step;
    if (++job->crashes >= kMaxCrashes) {
      job->state = LSTMD__JOB_STATE__FAILED;
      job->finished_ms = now_ms();
      char why[200];
      snprintf(why, sizeof why, "the daemon died under it %u times (shutdowns and preemptions not "
               "counted); not retried again", job->crashes);
      set_str(&job->reason, why);
    } else {
      job->state = LSTMD__JOB_STATE__QUEUED;
      char resume[96], why[160];
      if (step > 0)
        snprintf(resume, sizeof resume, "resumes from its checkpoint of step %ld", step);
      else
        snprintf(resume, sizeof resume, "resumes from its last checkpoint%s",
                 step == 0 ? " (none yet: from the start)" : "");
      snprintf(why, sizeof why, "interrupted: the daemon stopped while it ran; %s", resume);
      set_str(&job->reason, why);
      fprintf(stderr, "lstmd: job %llu%s%s%s was running when the daemon stopped: queued again, %s\n",
              (unsigned long long)job->id, *job->name ? " (" : "", job->name,
              *job->name ? ")" : "", resume);
      /* run_ms keeps only the finished attempts: when the daemon died is not known (the time
       * since started_ms would count its downtime against resources.time_limit_s) */
    }
    LSTMD_TRY(lstmd_journal_append(&t->journal, job, 0));
  }
  return LSTMD_OK;
}

void lstmd_jobs_close(struct lstmd_jobs *t) {
  if (t->journal.fd >= 0 && lstmd_jobs_journal_kept(t, 1)) {
    fprintf(stderr, "lstmd: %s: %zu job change%s never reached the job journal (a full disk?); "
            "after a restart these jobs show their earlier state:", t->journal.path,
            t->n_unjournaled, t->n_unjournaled == 1 ? "" : "s");
    for (size_t i = 0; i < t->n_unjournaled; i++)
      fprintf(stderr, " %llu", (unsigned long long)t->unjournaled[i]);
    fputc('\n', stderr);
  }
  free(t->unjournaled);
  t->unjournaled = NULL;
  t->n_unjournaled = 0;
  for (size_t i = 0; i < t->n; i++) {
    lstmd__job__free_unpacked(t->v[i], NULL);
    if (t->job_replies) free(t->job_replies[i].frame); /* NULL when open ran out of memory */
  }
  free(t->job_replies);
  free(t->list_reply.frame);
  t->job_replies = NULL;
  t->list_reply.frame = NULL;
  free(t->v);
  t->v = NULL;
  t->n = 0;
  free(t->unresponsive);
  t->unresponsive = NULL;
  t->n_unresponsive = 0;
  lstmd_journal_close(&t->journal);
  pthread_cond_destroy(&t->wake);
  pthread_mutex_destroy(&t->mu);
}

void lstmd_jobs_set_post(struct lstmd_jobs *t, lstmd_jobs_post_fn fn, void *ctx) {
  pthread_mutex_lock(&t->mu);
  t->post = fn;
  t->post_ctx = ctx;
  pthread_mutex_unlock(&t->mu);
}

uint8_t *lstmd_jobs_submit(struct lstmd_jobs *t, const Lstmd__JobSpec *spec, const char *run_dir,
                           const char *holds_run, long total_steps,
                           const struct lstmd_job_resources *res, size_t *len) {
  pthread_mutex_lock(&t->mu);
  if (t->draining) {
    pthread_mutex_unlock(&t->mu);
    return lstmd_frame_pack_error(LSTMD__ERROR_CODE__SHUTTING_DOWN,
                                  "the daemon is shutting down and takes no new jobs", len);
  }
  /* One run dir, one live job: two would write each other's checkpoints and metrics, and a
   * preempted job would resume from the other's latest.safetensors. */
  for (size_t i = 0; run_dir && i < t->n; i++) {
    const Lstmd__Job *o = t->v[i];
    if ((o->state != LSTMD__JOB_STATE__QUEUED && o->state != LSTMD__JOB_STATE__RUNNING) ||
        strcmp(o->run_dir, run_dir)) /* both resolved alike: lstmd_path_inside */
      continue;
    char msg[1400];
    snprintf(msg, sizeof msg,
             "train.run_dir %s is the run dir of job %llu%s%s%s (%s), which has not ended: give "
             "each job its own, or submit this one when that one has ended", run_dir,
             (unsigned long long)o->id, o->name && *o->name ? " '" : "",
             o->name && *o->name ? o->name : "", o->name && *o->name ? "'" : "",
             lstmd_job_state_name(o->state));
    pthread_mutex_unlock(&t->mu);
    return lstmd_frame_pack_error(LSTMD__ERROR_CODE__INVALID_JOB, msg, len);
  }
  /* <state_dir>/runs is where the daemon makes its jobs' own run dirs: a job naming one there
   * could take the one a later job's id gets (that job then fails: "in use by another run") or
   * an ended job's; --continue reaches an ended job's run dir the intended way. */
  if (run_dir && !spec->continues && in_daemon_runs(t, run_dir)) {
    char msg[1400];
    snprintf(msg, sizeof msg, "train.run_dir %s is inside %s/runs, where the daemon makes its "
             "jobs' own run dirs: choose one elsewhere (to continue an ended job's run: lstmctl "
             "submit --continue ID)", run_dir, t->state_dir);
    pthread_mutex_unlock(&t->mu);
    return lstmd_frame_pack_error(LSTMD__ERROR_CODE__INVALID_JOB, msg, len);
  }
  /* As `lstmd train` (cli_train.c): a fresh run into a run dir with another run's checkpoints
   * would mix the metrics and replace that run's latest and best; resuming needs a run dir that
   * is not this job's new one. */
  if ((run_dir && holds_run && !spec->resume) || (!run_dir && spec->resume)) {
    char msg[1400];
    if (run_dir)
      lstmd_run_dir_fresh_refusal(msg, sizeof msg, run_dir, holds_run, LSTMD_FRESH_SUBMIT);
    else
      snprintf(msg, sizeof msg, "--resume continues the run in the job's train.run_dir, and this "
               "job sets none (it would get a new one): add --set train.run_dir=DIR");
    pthread_mutex_unlock(&t->mu);
    return lstmd_frame_pack_error(LSTMD__ERROR_CODE__INVALID_JOB, msg, len);
  }
  char dir[1200];
  const uint64_t id = t->next_id;
  if (run_dir) snprintf(dir, sizeof dir, "%s", run_dir);
  else snprintf(dir, sizeof dir, "%s/runs/job-%llu", t->state_dir, (unsigned long long)id);
  Lstmd__Job draft = LSTMD__JOB__INIT;
  draft.id = id;
  draft.name = spec->name;
  draft.state = LSTMD__JOB_STATE__QUEUED;
  draft.n_settings = spec->n_settings;
  draft.settings = spec->settings;
  draft.run_dir = dir;
  draft.total_steps = total_steps;
  draft.resume = spec->resume;
  draft.continues = spec->continues;
  draft.val_loss = draft.val_bpc = NAN;
  draft.submitted_ms = now_ms();
  draft.ranks = res ? (uint32_t)res->ranks : 1;
  draft.priority = res ? res->priority : 0;
  draft.time_limit_s = res ? res->time_limit_s : 0;
  draft.no_preempt = res ? !res->preemptible : 0;
  Lstmd__Job *job = copy_job(&draft);
  Lstmd__Job **grown = job ? realloc(t->v, (t->n + 1) * sizeof *grown) : NULL;
  if (grown) t->v = grown;
  struct lstmd_reply_cache *caches =
      grown ? realloc(t->job_replies, (t->n + 1) * sizeof *caches) : NULL;
  if (caches) {
    t->job_replies = caches;
    t->job_replies[t->n] = (struct lstmd_reply_cache){0};
  }
  uint8_t *reply = NULL;
  if (!caches) {
    reply = lstmd_frame_pack_error(LSTMD__ERROR_CODE__INTERNAL, "out of memory", len);
  } else if (lstmd_journal_append(&t->journal, job, 0) != 0) {
    reply = lstmd_frame_pack_error(LSTMD__ERROR_CODE__INTERNAL,
                                   "the daemon could not write its job journal (see its log)", len);
  } else {
    t->v[t->n++] = job;
    job = NULL;
    t->next_id++;
    t->version++;
    t->requests++;
    reply = job_frame(t->v[t->n - 1], len);
    pthread_cond_broadcast(&t->wake);
  }
  if (job) lstmd__job__free_unpacked(job, NULL);
  pthread_mutex_unlock(&t->mu);
  return reply;
}

static uint8_t *not_found(uint64_t id, size_t *len) {
  char msg[64];
  snprintf(msg, sizeof msg, "no job %llu", (unsigned long long)id);
  return lstmd_frame_pack_error(LSTMD__ERROR_CODE__NOT_FOUND, msg, len);
}

Lstmd__Job *lstmd_jobs_copy(struct lstmd_jobs *t, uint64_t id) {
  pthread_mutex_lock(&t->mu);
  const Lstmd__Job *job = lookup(t, id);
  Lstmd__Job *copy = job ? copy_job(job) : NULL;
  pthread_mutex_unlock(&t->mu);
  return copy;
}

uint8_t *lstmd_jobs_get(struct lstmd_jobs *t, uint64_t id, size_t *len) {
  pthread_mutex_lock(&t->mu);
  const size_t i = index_of(t, id);
  /* A job's reply stays until the job itself changes (touch), whatever else runs. */
  uint8_t *reply = i < t->n ? cached_reply(&t->job_replies[i], 0, pack_job, t->v[i], len)
                            : not_found(id, len);
  pthread_mutex_unlock(&t->mu);
  return reply;
}

uint8_t *lstmd_jobs_list(struct lstmd_jobs *t, size_t *len) {
  pthread_mutex_lock(&t->mu);
  uint8_t *reply = cached_reply(&t->list_reply, t->version, pack_list, t, len);
  pthread_mutex_unlock(&t->mu);
  return reply;
}

uint8_t *lstmd_jobs_cancel(struct lstmd_jobs *t, uint64_t id, size_t *len) {
  pthread_mutex_lock(&t->mu);
  Lstmd__Job *job = find(t, id);
  uint8_t *reply;
  if (!job) {
    reply = not_found(id, len);
  } else {
    if (job->state == LSTMD__JOB_STATE__QUEUED) {
      job->state = LSTMD__JOB_STATE__CANCELLED;
      job->cancel_requested = 1;
      job->finished_ms = now_ms();
      set_str(&job->reason, "cancelled before it started");
      lstmd_jobs_changed(t, job);
    } else if (job->state == LSTMD__JOB_STATE__RUNNING && !job->cancel_requested) {
      job->cancel_requested = 1;
      t->requests++; /* the scheduler sends the stop */
      pthread_cond_broadcast(&t->wake);
      lstmd_jobs_post(t, job, NULL);
    }
    reply = job_frame(job, len);
  }
  pthread_mutex_unlock(&t->mu);
  return reply;
}

uint8_t *lstmd_jobs_watch(struct lstmd_jobs *t, uint64_t id, int *final, size_t *len) {
  pthread_mutex_lock(&t->mu);
  Lstmd__Job *job = lookup(t, id);
  uint8_t *reply;
  *final = -1;
  if (!job) {
    reply = not_found(id, len);
  } else {
    *final = is_final(job->state);
    reply = event_frame(job, *final, NULL, len);
  }
  pthread_mutex_unlock(&t->mu);
  return reply;
}

size_t lstmd_jobs_drain(struct lstmd_jobs *t, uint64_t **running) {
  pthread_mutex_lock(&t->mu);
  t->draining = 1;
  t->requests++;
  size_t n = 0;
  for (size_t i = 0; i < t->n; i++) n += t->v[i]->state == LSTMD__JOB_STATE__RUNNING;
  uint64_t *ids = running && n ? malloc(n * sizeof *ids) : NULL;
  for (size_t i = 0, k = 0; ids && i < t->n; i++) /* v is ordered by id: oldest first */
    if (t->v[i]->state == LSTMD__JOB_STATE__RUNNING) ids[k++] = t->v[i]->id;
  if (running) *running = ids;
  pthread_cond_broadcast(&t->wake);
  pthread_mutex_unlock(&t->mu);
  return n;
}
