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
 *   down:   rank 0's scheduler → agents (tag kServeCmd: start/exit; kServeStop: stop a job;
 *           kServeVerdict: go / abandon for a start the agent said it is ready for)
 *   up:     a job's leader (its rank 0) → rank 0's scheduler (kServeReport: progress, end), and
 *           every agent → the scheduler (kServeAnswer: ready for a start, leaving on exit)
 *   groups: the parent of every job's communicator (MPI_Comm_create_group, tag per job)
 * The start handshake (command, answer, verdict) is daemon/serve_start.c's. */
struct lstmd_serve_comms {
  struct lstmd_comm *world, *down, *up, *groups;
};

enum { kServeCmd = 1, kServeStop = 2, kServeReport = 3, kServeAnswer = 4, kServeVerdict = 5 };
enum { kServeStart = 1, kServeExit = 2 };
enum { kReportStep = 1, kReportEval = 2, kReportDone = 3, kReportBegin = 4 };

/* kServeCmd: kind kServeStart, an offer of a start (job_id, start_id: this start of the job, the
 * scheduler's count) that the agent answers before it is sent the job itself, with the go; or
 * kServeExit (exit_code). A few dozen bytes: below every transport's eager limit, so the send
 * completes without the receiver, even one that is frozen (serve_start.c, rationale 2). */
struct lstmd_serve_cmd {
  int32_t kind, exit_code;
  uint64_t job_id, start_id;
};

/* kServeAnswer, to every kServeCmd: kind kServeStart = ready to make the job's communicator
 * (then wait for the verdict), kServeExit = leaving (then MPI_Finalize). */
struct lstmd_serve_answer {
  int32_t kind, pad;
  uint64_t job_id, start_id;
};

/* kServeVerdict, to every kServeAnswer of kind kServeStart. go = 0: the start is abandoned, back
 * to idle (this header only). go = 1: this header, then n_members int32 world ranks (ascending),
 * then payload_len bytes: the config JSON, NUL, the resume path (may be empty), NUL; make the
 * communicator (MPI_Comm_create_group, group_tag) and train. */
struct lstmd_serve_verdict {
  int32_t go, n_members, group_tag, pad;
  uint64_t job_id, start_id, payload_len;
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
  int64_t step, total_steps; /* kReportBegin: the step training starts from, and the last */
  double loss, lr, grad_norm, tokens_per_s, elapsed_s, eta_s, val_loss, val_bpc;
  double val_accuracy; /* kReportEval: NAN except for classifiers */
  char reason[1024]; /* kReportDone with rc != 0 */
};

struct lstmd_sched;

/* Host names travel as fixed fields of this many bytes (hosts[r * LSTMD_SERVE_HOST_BYTES]). */
enum { LSTMD_SERVE_HOST_BYTES = 256 };

/* Starts the scheduler thread (rank 0 only). node[r]: node number of world rank r; hosts: world
 * host names of LSTMD_SERVE_HOST_BYTES each (both copied); start_timeout_s: how long a start
 * command's members have to answer (daemon/serve_start.c). Returns 0 or a status. */
int lstmd_sched_start(const struct lstmd_serve_comms *comms, struct lstmd_jobs *jobs,
                      const char *data_root, const int *node, const char *hosts, int world,
                      double start_timeout_s, struct lstmd_sched **out);
/* Waits for the thread to end (after a drain it stops every job, waits for their ends, sends
 * every agent kServeExit and waits, at most start_timeout_s, for each to answer) and frees it.
 * *silent (may be NULL): the ranks that did not answer the exit (each named in a line); MPI_Finalize
 * would wait for them forever, so the caller aborts instead. Returns the thread's status. NULL
 * is fine. */
int lstmd_sched_join(struct lstmd_sched *s, int *silent);

#endif
