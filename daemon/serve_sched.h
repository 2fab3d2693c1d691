/* serve_sched.h — `lstmd serve`'s scheduler thread on rank 0 and the messages between it and
 * every rank's agent (daemon/cli_serve.c). See serve_sched.c for the protocol. */
#ifndef LSTMD_SERVE_SCHED_H
#define LSTMD_SERVE_SCHED_H

#include <pthread.h>
#include <stdint.h>

#include "jobs.h"

struct lstmd_comm;

/* The daemon's communicators, each a duplicate of the world made at start-up by every rank, so
 * that no message of one kind can match a receive of another, nor a job's collectives:
 *   down:   rank 0's scheduler → agents (tag kServeCmd: start/exit; kServeStop: stop a job)
 *   up:     a job's leader (its rank 0) → rank 0's scheduler (kServeReport: progress, end)
 *   groups: the parent of every job's communicator (MPI_Comm_create_group, tag per job) */
struct lstmd_serve_comms {
  struct lstmd_comm *world, *down, *up, *groups;
};

enum { kServeCmd = 1, kServeStop = 2, kServeReport = 3 };
enum { kServeStart = 1, kServeExit = 2 };
enum { kReportStep = 1, kReportEval = 2, kReportDone = 3 };

/* kServeCmd: this header, then n_members int32 world ranks (ascending), then payload_len bytes:
 * the config JSON, NUL, the resume path (may be empty), NUL. */
struct lstmd_serve_cmd {
  int32_t kind, exit_code, n_members, group_tag;
  uint64_t job_id, payload_len;
};

/* kServeStop: ask the job's leader to stop (its trainer checkpoints and returns). */
struct lstmd_serve_stop {
  uint64_t job_id;
};

/* kServeReport, from a job's leader. */
struct lstmd_serve_report {
  int32_t kind;
  int32_t rc, failed_rank, signalled, ended, how; /* kReportDone; failed_rank: world rank or -1 */
  uint64_t job_id;
  int64_t step, total_steps;
  double loss, lr, grad_norm, tokens_per_s, elapsed_s, eta_s, val_loss, val_bpc;
  double val_accuracy; /* kReportEval: NAN except for classifiers */
  char reason[1024]; /* kReportDone with rc != 0 */
};

struct lstmd_sched;

/* Starts the scheduler thread (rank 0 only). node[r]: node number of world rank r (world of
 * them; copied). Returns 0 or a status. */
int lstmd_sched_start(const struct lstmd_serve_comms *comms, struct lstmd_jobs *jobs,
                      const char *data_root, const int *node, int world, struct lstmd_sched **out);
/* Waits for the thread to end (after a drain it stops every job, waits for their ends, and
 * sends every agent kServeExit) and frees it. Returns the thread's status. NULL is fine. */
int lstmd_sched_join(struct lstmd_sched *s);

#endif
