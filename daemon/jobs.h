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
 * States: QUEUED → RUNNING → SUCCEEDED | FAILED | CANCELLED; a running job interrupted by a
 * shutdown or a daemon crash goes back to QUEUED and resumes from its last checkpoint; one that
 * was interrupted kMaxAttempts times is failed instead of being retried forever. */
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
  pthread_cond_t wake; /* the runner waits on it for a queued job or a drain */
  Lstmd__Job **v;      /* ordered by id */
  size_t n;
  uint64_t version;    /* bumped by every change to v or a job in it */
  struct lstmd_reply_cache *job_replies; /* GetJob, parallel to v */
  struct lstmd_reply_cache list_reply;   /* ListJobs */
  uint64_t next_id;
  uint64_t running_id; /* 0: none */
  int draining;
  atomic_int stop_running; /* cancel of the running job, or drain: polled by the trainer */
  struct lstmd_journal journal;
  char state_dir[1024];
  lstmd_jobs_post_fn post;
  void *post_ctx;
};

/* Replays the journal in state_dir. Jobs found RUNNING (the daemon died under them) are queued
 * again to resume, or failed after too many attempts. Returns 0 or a status (message printed). */
int lstmd_jobs_open(struct lstmd_jobs *t, const char *state_dir);
void lstmd_jobs_close(struct lstmd_jobs *t);
void lstmd_jobs_set_post(struct lstmd_jobs *t, lstmd_jobs_post_fn post, void *ctx);

/* Queues a job with the given (already validated) spec. run_dir: where it trains, or NULL for
 * <state_dir>/runs/job-<id>. Returns a Response{job} frame, or a Response{error} frame when the
 * journal cannot be written or the daemon is draining. */
uint8_t *lstmd_jobs_submit(struct lstmd_jobs *t, const Lstmd__JobSpec *spec, const char *run_dir,
                           long total_steps, size_t *len);
/* Response{job} / Response{jobs} / Response{error: NOT_FOUND} frames. */
uint8_t *lstmd_jobs_get(struct lstmd_jobs *t, uint64_t id, size_t *len);
uint8_t *lstmd_jobs_list(struct lstmd_jobs *t, size_t *len);
/* A queued job is cancelled at once; a running one is asked to stop (checkpoint, then
 * CANCELLED); a finished one is left as it is. Replies with the job. */
uint8_t *lstmd_jobs_cancel(struct lstmd_jobs *t, uint64_t id, size_t *len);
/* The first frame of a watch: Event{state} of the job, or Event{result} when it has already
 * ended (*final = 1; 0 otherwise), or Response{error: NOT_FOUND} (*final = -1). */
uint8_t *lstmd_jobs_watch(struct lstmd_jobs *t, uint64_t id, int *final, size_t *len);
/* Stops taking jobs and asks the running one to stop. Returns its id (0: none). */
uint64_t lstmd_jobs_drain(struct lstmd_jobs *t);

/* Runner side. Waits for the oldest queued job, marks it RUNNING and returns a copy (free with
 * lstmd__job__free_unpacked); NULL once draining. */
Lstmd__Job *lstmd_jobs_next(struct lstmd_jobs *t);
void lstmd_jobs_progress(struct lstmd_jobs *t, uint64_t id, long step, long total, double loss,
                         double lr, double grad_norm, double tokens_per_s, double elapsed_s,
                         double eta_s);
void lstmd_jobs_eval(struct lstmd_jobs *t, uint64_t id, long step, double val_loss, double val_bpc);
/* Ends the running job: SUCCEEDED, FAILED or CANCELLED, or QUEUED again (interrupted). */
void lstmd_jobs_finish(struct lstmd_jobs *t, uint64_t id, int state, long step, const char *reason);
int lstmd_jobs_stop_requested(struct lstmd_jobs *t);
int lstmd_jobs_cancel_requested(struct lstmd_jobs *t, uint64_t id);

#endif
