/* jobs.h — the daemon's job table: FIFO queue, states, progress, and the journal behind it.
 *
 * Shared by the control server's loop thread (submit, get, list, cancel, watch, shutdown) and
 * the job runner on rank 0's main thread (next job, progress, outcome); one mutex guards it,
 * and replies are packed under it so that no caller ever holds a job outside the lock.
 * Every state change is journaled (journal.h) before it is visible, and posted as an event
 * frame to the server (which fans it out to the watchers of the job).
 *
 * Status replies are cached: a job's GetJob reply is packed once per change of that job, the
 * ListJobs reply once per change of the table (its version), and copied after that. Clients
 * that poll status (a dashboard, 64 scripts) then cost the daemon a memcpy, not a protobuf
 * pack, per request — for finished jobs even while another job reports progress.
 *
 * Several jobs may run at once (on disjoint ranks, daemon/sched.h); the scheduler thread on rank
 * 0 (daemon/serve_sched.c) starts and ends them here.
 *
 * States: QUEUED → RUNNING → SUCCEEDED | FAILED | CANCELLED; a running job interrupted by a
 * shutdown, a preemption or a daemon crash goes back to QUEUED and resumes from its last checkpoint; one that
 * the daemon died under 3 times (Job.crashes; shutdowns and preemptions are not counted) is failed
 * instead of being retried forever. */
#ifndef LSTMD_JOBS_H
#define LSTMD_JOBS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "journal.h"
#include "lstmd.pb-c.h"

/* Receives ownership of a packed Response{event} frame about job_id; final: the job has ended. */
typedef void (*lstmd_jobs_post_fn)(void *ctx, uint64_t job_id, int final, uint8_t *frame,
                                   size_t len);

/* A packed reply and the table version it shows (ListJobs; GetJob replies are dropped when
 * their job changes instead). */
struct lstmd_reply_cache {
  uint8_t *frame;
  size_t len;
  uint64_t version;
};

struct lstmd_jobs {
  pthread_mutex_t mu;
  pthread_cond_t wake; /* the scheduler waits on it for a change (submit, cancel, drain) */
  Lstmd__Job **v;      /* ordered by id */
  size_t n;
  uint64_t version;    /* bumped by every change to v or a job in it */
  uint64_t requests;   /* bumped by submissions, cancels and drains: what the scheduler acts on */
  struct lstmd_reply_cache *job_replies; /* GetJob, parallel to v */
  struct lstmd_reply_cache list_reply;   /* ListJobs */
  uint64_t next_id;
  uint32_t world;      /* the daemon's ranks (ListJobs carries it, for lstmctl top) */
  uint32_t *unresponsive; /* ranks that did not answer a start command (ListJobs carries them) */
  size_t n_unresponsive;
  int draining;
  struct lstmd_journal journal;
  uint64_t *unjournaled; /* jobs whose last change the journal could not take (a full disk): */
  size_t n_unjournaled;  /* their records are written again at a change or snapshot, */
  int64_t journal_retry_ms; /* from this time on (Unix ms): every 2 s at most */
  char state_dir[1024];
  lstmd_jobs_post_fn post;
  void *post_ctx;
};

/* Replays the journal in state_dir. Jobs found RUNNING (the daemon died under them) are queued
 * again to resume, or failed after too many attempts. Returns 0 or a status (message printed). */
int lstmd_jobs_open(struct lstmd_jobs *t, const char *state_dir);
void lstmd_jobs_close(struct lstmd_jobs *t);
void lstmd_jobs_set_post(struct lstmd_jobs *t, lstmd_jobs_post_fn post, void *ctx);

/* Queues a job with the given (already validated) spec and resources (NULL: one rank, priority
 * 0, no limit, preemptible). run_dir: where it trains, or NULL for
 * <state_dir>/runs/job-<id>; holds_run: a checkpoint already in run_dir (its file name), or NULL
 * when it holds none. Returns a Response{job} frame, or a Response{error} frame when the journal
 * cannot be written, the daemon is draining, run_dir is a live job's, or the spec is a fresh
 * run into a run dir that holds one (or resumes with no run_dir of its own). */
struct lstmd_job_resources {
  int ranks, priority, preemptible; /* ranks resolved: 1..world */
  double time_limit_s;              /* 0: none */
};
uint8_t *lstmd_jobs_submit(struct lstmd_jobs *t, const Lstmd__JobSpec *spec, const char *run_dir,
                           const char *holds_run, long total_steps,
                           const struct lstmd_job_resources *res, size_t *len);
/* A copy of job id (free with lstmd__job__free_unpacked), or NULL when there is none. */
Lstmd__Job *lstmd_jobs_copy(struct lstmd_jobs *t, uint64_t id);
/* Response{job} / Response{jobs} / Response{error: NOT_FOUND} frames. */
uint8_t *lstmd_jobs_get(struct lstmd_jobs *t, uint64_t id, size_t *len);
uint8_t *lstmd_jobs_list(struct lstmd_jobs *t, size_t *len);
/* A queued job is cancelled at once; a running one is asked to stop (checkpoint, then
 * CANCELLED); a finished one is left as it is. Replies with the job. */
uint8_t *lstmd_jobs_cancel(struct lstmd_jobs *t, uint64_t id, size_t *len);
/* The first frame of a watch: Event{state} of the job, or Event{result} when it has already
 * ended (*final = 1; 0 otherwise), or Response{error: NOT_FOUND} (*final = -1). */
uint8_t *lstmd_jobs_watch(struct lstmd_jobs *t, uint64_t id, int *final, size_t *len);
/* Stops taking jobs; the scheduler asks the running ones to stop. Returns how many run; their
 * ids, oldest first, in *running (malloc'd, caller frees; NULL when none run or out of memory)
 * unless running is NULL. */
size_t lstmd_jobs_drain(struct lstmd_jobs *t, uint64_t **running);

/* Scheduler side (daemon/serve_sched.c, rank 0). */

/* The scheduling view of one job (sched.h's input, without the outputs). */
struct lstmd_jobs_entry {
  uint64_t id;
  int running, ranks, priority, preemptible, cancel_requested;
  double time_limit_s, run_s; /* run_s: the finished attempts' running time */
};
/* Copies the QUEUED and RUNNING jobs into *out (malloc'd, caller frees; *n of them) and returns
 * the request counter (lstmd_jobs_wait). draining is set when the daemon drains. */
uint64_t lstmd_jobs_snapshot(struct lstmd_jobs *t, struct lstmd_jobs_entry **out, size_t *n,
                             int *draining);
/* Waits until the request counter differs from seen, or timeout_ms passes (< 0: forever). */
void lstmd_jobs_wait(struct lstmd_jobs *t, uint64_t seen, long timeout_ms);
/* Marks a queued job RUNNING on these world ranks (journaled with them) and returns a copy (free
 * with lstmd__job__free_unpacked), or NULL if it is no longer queued. */
Lstmd__Job *lstmd_jobs_start(struct lstmd_jobs *t, uint64_t id, const int *ranks, int n);
/* A queued job's place in line and why it waits (shown by status/list; not journaled; the
 * cached replies change only when these do). Returns whether they changed. */
int lstmd_jobs_set_waiting(struct lstmd_jobs *t, uint64_t id, uint32_t position, const char *why);
/* Its training loop began at step (a resumed run's checkpoint step): status and list show that
 * step, and no rate until the first log step of this attempt. */
void lstmd_jobs_begin(struct lstmd_jobs *t, uint64_t id, long step, long total);
void lstmd_jobs_progress(struct lstmd_jobs *t, uint64_t id, long step, long total, double loss,
                         double lr, double grad_norm, double tokens_per_s, double elapsed_s,
                         double eta_s);
void lstmd_jobs_eval(struct lstmd_jobs *t, uint64_t id, long step, double val_loss, double val_bpc,
                     double val_accuracy);
/* Ends the job's run: SUCCEEDED, FAILED or CANCELLED, or QUEUED again (interrupted; preempted_by
 * nonzero: preempted for that job, counted apart from interruptions). ran_ms: this attempt's
 * running time, added to run_ms. */
void lstmd_jobs_finish(struct lstmd_jobs *t, uint64_t id, int state, long step, const char *reason,
                       int64_t ran_ms, uint64_t preempted_by);
int lstmd_jobs_cancel_requested(struct lstmd_jobs *t, uint64_t id);
/* A RUNNING job whose start was abandoned before it trained (a member did not answer its start
 * command, daemon/serve_start.c) goes back to QUEUED: the attempt is taken back (not counted as
 * an interruption, and a first attempt resumes from nothing), reason set, journaled. Cancelled
 * instead when a cancel was asked for meanwhile. */
void lstmd_jobs_unstart(struct lstmd_jobs *t, uint64_t id, const char *reason);
/* The ranks now unresponsive (n of them, ascending; copied), shown by ListJobs. */
void lstmd_jobs_set_unresponsive(struct lstmd_jobs *t, const uint32_t *ranks, size_t n);

#endif
