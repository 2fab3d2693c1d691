/* serve_start.h — `lstmd serve`'s bounded start handshake, on rank 0's scheduler thread: every
 * member of a job answers its start command before any of them makes the job's communicator,
 * and a member that does not answer in time is marked unresponsive instead of hanging the others.
 * Also the exit at shutdown, with the same bound. See serve_start.c for the protocol. */
#ifndef LSTMD_SERVE_START_H
#define LSTMD_SERVE_START_H

#include <stdint.h>

#include "jobs.h"
#include "serve_sched.h"

/* The default of `lstmd serve --start-timeout` (seconds); see serve_start.c, rationale 4. */
#define LSTMD_SERVE_START_TIMEOUT_S 10.0

struct lstmd_start_gate;

/* How a start ended: go (every member answered: they make the communicator and train) or not
 * (abandoned; why: which rank(s) did not answer, for the job's reason). Called from
 * lstmd_gate_poll, on the scheduler thread. */
typedef void (*lstmd_gate_decided_fn)(void *ctx, uint64_t job_id, int go, const char *why);

/* A gate for a world of `world` ranks. hosts: world names of LSTMD_SERVE_HOST_BYTES each (copied);
 * jobs: where the unresponsive ranks are shown (ListJobs). Returns 0 or LSTMD_ENOMEM. Destroy
 * with lstmd_gate_destroy (NULL is fine). */
int lstmd_gate_create(const struct lstmd_serve_comms *c, struct lstmd_jobs *jobs, int world,
                      const char *hosts, double timeout_s, struct lstmd_start_gate **out);
void lstmd_gate_destroy(struct lstmd_start_gate *g);

/* Registers a start of job_id on ranks[0..n) about to be offered (*start_id goes in the offer,
 * struct lstmd_serve_cmd); the "go" will carry the ranks, group_tag and payload (copied).
 * Returns 0 or LSTMD_ENOMEM. */
int lstmd_gate_open(struct lstmd_start_gate *g, uint64_t job_id, const int *ranks, int n,
                    int group_tag, const char *payload, size_t payload_len, uint64_t *start_id);
/* Takes every answer waiting, sends the verdicts that are due (go when a start's members have
 * all answered, abandon for an answer to a start already given up) and gives up the starts
 * past their deadline (decided called for each start settled). Returns the number of answers
 * taken, or LSTMD_ECOMM / LSTMD_ENOMEM. */
int lstmd_gate_poll(struct lstmd_start_gate *g, lstmd_gate_decided_fn decided, void *ctx);
/* usable[r] is 0 for an unresponsive rank; NULL when every rank is usable. Valid until the next
 * lstmd_gate_poll. */
const int *lstmd_gate_usable(const struct lstmd_start_gate *g);
/* Starts not yet settled plus ranks unresponsive: nonzero while the gate has something to poll
 * for (an unresponsive rank may answer at any time). */
int lstmd_gate_waiting(const struct lstmd_start_gate *g);
/* Sends kServeExit (exit_code) to every agent and waits at most the timeout for each to answer,
 * answering late start answers with abandon meanwhile. Returns the number of ranks that did not
 * answer (each named in a line), or LSTMD_ECOMM. */
int lstmd_gate_farewell(struct lstmd_start_gate *g, int exit_code);

#endif
