/* trace.h — a step timeline in Chrome's trace-event format (JSON), for chrome://tracing or
 * Perfetto: one process track per rank, one thread track per compute slice, the gradient
 * reducer and the main loop; complete events ("ph":"X") for each step (from its start through
 * the all-reduce of the loss: the wall time of the logged bubble) with data wait, forward,
 * backward and each all-reduce bucket inside it, then the optimizer, evaluation and checkpoints.
 *
 * All ranks append to one file: rank 0 creates it with "[" and a first event, then every event
 * is written as one line ",{...}" with O_APPEND, so lines from different ranks never interleave
 * inside a line. Rank 0 adds the closing "]" at the end of a run; viewers also accept a file
 * cut short by a crash. */
#ifndef LSTMD_TRACE_H
#define LSTMD_TRACE_H

#include <stddef.h>

#include "kernels/clock.h" /* lstmd_now_s(): the clock of every event */

struct lstmd_comm;
struct lstmd_trace;

enum { LSTMD_TRACE_TID_MAIN = 0, LSTMD_TRACE_TID_REDUCER = 999 };

/* Collective over comm (NULL: one rank). path NULL: *out = NULL, and every call below accepts
 * NULL and does nothing. */
int lstmd_trace_open(const char *path, struct lstmd_comm *comm, struct lstmd_trace **out);
/* Closes this rank's file and frees t (NULL is fine). every_rank: the run ended on every rank
 * together (collective: a barrier, then rank 0 closes the JSON array); 0 after a failure that
 * not every rank saw, when no rank may wait for another (the file is left without its "]",
 * which viewers accept). */
void lstmd_trace_close(struct lstmd_trace *t, int every_rank);
/* A complete event [begin_s, end_s] on thread `tid`; args_json is NULL or a JSON object text. */
void lstmd_trace_event(struct lstmd_trace *t, int tid, const char *name, double begin_s,
                       double end_s, const char *args_json);

#endif
