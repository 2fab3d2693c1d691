/* peers.h — telling a dead peer from a slow one. Open MPI does not fail a request whose peer
 * process died: a rank waiting for it would wait until mpirun or Slurm kills it, and say
 * nothing. So every rank records, at start-up, which ranks of the job run on its host and their
 * process ids; a wait that lasts checks, a few times a second, whether one of them is gone, and
 * if so names it and ends the job. Peers on other hosts, or in another PID namespace of this
 * one (containers), cannot be checked this way and are left out (the launcher's teardown then
 * ends the job, without lstmd naming the lost rank). */
#ifndef LSTMD_PEERS_H
#define LSTMD_PEERS_H

#include <pthread.h>
#include <stddef.h>

/* Collective over MPI_COMM_WORLD, once, from lstmd_comm_init: all-gathers (pid, host, boot id
 * and PID namespace), keeping the peers whose pids are visible from this process. Returns
 * 0, or LSTMD_ECOMM / LSTMD_ENOMEM (the checks then stay off). */
int lstmd_peers_init(void);
void lstmd_peers_free(void);

/* The world rank of a peer on this host whose process has exited (or is a zombie), or -1; one
 * that did not announce its end (lstmd_peers_announce_end) first. At most a few system calls
 * per peer; thread-safe. */
int lstmd_peers_find_lost(void);

/* For deadline messages: writes into buf (at most n bytes, NUL-terminated) "; rank P (pid N on
 * host) is stopped" for every peer on this host that is stopped (SIGSTOP, a debugger) or gone
 * ("ended the job" for one that announced it, gone yet or not), or "" when none is: what a wait past its deadline
 * can say about whom it waited for, when MPI cannot tell. Returns buf. */
char *lstmd_peers_describe_stuck(char *buf, size_t n);

/* For waits: call in the wait loop (at least every 50 ms) with the time the wait began. From
 * 50 ms into the wait, at most every 50 ms — and at once after lstmd_peers_signalled — looks for
 * a lost peer; when one is gone, prints "rank R (host): rank P (pid N on host) is gone while
 * waiting for WHAT; ending the job" and ends the job (MPI_Abort, exit code 1): never returns
 * then. (A launcher that lost a rank sends the others SIGTERM, then SIGKILL a second later:
 * the check must come first for the message to be printed.) */
void lstmd_peers_check_while_waiting(double wait_began_s, const char *what);
/* One sleep of a bounded wait on a condition variable whose clock is CLOCK_MONOTONIC, mu held:
 * ETIMEDOUT at once when `end` (lstmd_now_s time; 0: no end) has passed; else sleeps until cv is
 * signalled, 50 ms pass or `end` comes, then makes the check above (`began`, `what`) and returns
 * 0. The waits of p2p.c and reducer.c loop on it while their condition is false. */
int lstmd_peers_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double began, double end,
                          const char *what);
/* What the lost-peer message says it ends (a static string): "the job (resume from the last
 * checkpoint)" unless set. lstmd serve sets what a lost rank means there: MPI ends the whole
 * world, every job with it, and a restart resumes them (its log said "ending the job" only). */
void lstmd_peers_set_ending(const char *what);
/* Async-signal-safe: a stop signal arrived (maybe the launcher ending the job because a rank
 * died): the next check runs at once. */
void lstmd_peers_signalled(void);
/* Called by a rank about to end the job on purpose, after its message (lstmd_comm_abort, the
 * lost-peer check, the MPI_Init/MPI_Finalize watchdog): tells the peers of this host (a
 * real-time signal, SIGRTMIN + 3, with this rank in its value). A peer that then finds it
 * gone says that it ended the job, not that it is gone: the launcher's teardown after one rank's
 * deadline message had every other rank of the host blame that rank, and a rank stopped by
 * SIGSTOP blame it once continued (a 6-rank pipeline with rank 2 stopped: four lines "rank 5
 * (pid N on vm) is gone", where rank 5 had only named rank 2 and ended the job). */
void lstmd_peers_announce_end(void);

#endif
