/* sched.h — the scheduling policy of `lstmd serve`: which queued jobs start now, on which ranks,
 * which running jobs are preempted for them, and why the others wait. A pure function of the
 * table it is given (no MPI, no clock, no lock), so tests/test_sched.c checks exact orders.
 *
 * Policy: highest priority first, FIFO (by id) within a priority. The first queued job that
 * cannot start (the head) may preempt running jobs of a lower priority that are preemptible —
 * the lowest priority first, the most recently started first among equals, just enough of them
 * — and otherwise gets a reservation: the time at which enough ranks are expected free (running
 * jobs' time limits; unknown, so no reservation, when a job it must wait for has none). EASY
 * backfill: a job behind the head starts now only if it fits the free ranks now and its time
 * limit ends before the head's reserved start; a job without a time limit is never backfilled. */
#ifndef LSTMD_SCHED_H
#define LSTMD_SCHED_H

#include <stddef.h>
#include <stdint.h>

enum lstmd_sched_action { LSTMD_SCHED_NONE = 0, LSTMD_SCHED_START = 1, LSTMD_SCHED_PREEMPT = 2 };

struct lstmd_sched_job {
  /* in */
  uint64_t id;          /* submission order */
  int running;          /* 0: queued */
  int ranks;            /* ranks it needs (1..world) */
  int priority;
  double time_limit_s;  /* 0: none */
  double used_s;        /* running time so far (all attempts, the current one included) */
  int preemptible;
  int stopping;         /* running and already asked to stop (preemption, cancel, time limit) */
  uint64_t stopping_for;/* stopping for a preemption: the job it makes room for (0: none) */
  double started_s;     /* running: when the current attempt started */
  /* out */
  int action;           /* enum lstmd_sched_action */
  int *assign;          /* caller's buffer of `ranks` ints: START: the world ranks, ascending */
  uint64_t preempt_for; /* PREEMPT: the job it makes room for */
  int position;         /* queued and not started: 1 = next in line */
  char why[320];        /* queued and not started: why it waits */
};

/* Plans one round. world: ranks; node[r]: a node number per rank (ranks with the same number
 * share a node); busy[r]: nonzero for ranks held by running jobs (updated: ranks of started jobs
 * become busy); usable[r]: zero for ranks no job may be placed on (unresponsive: they did not
 * answer a start command, daemon/serve_start.c), NULL: all usable — a job that needs more ranks
 * than are usable waits without holding the head of the queue. now_s: the clock of started_s. Ranks of a started job: on one node if one has
 * enough free ranks (the first such node in rank order), consecutive ranks if possible, else the
 * lowest free ones. Returns the number of jobs started. */
int lstmd_sched_plan(int world, const int *node, int *busy, const int *usable, double now_s,
                     struct lstmd_sched_job *jobs, size_t n);

#endif
