/* comm.h — the communicator between ranks: collectives on host buffers over MPI (an NCCL
 * backend for device buffers comes with the GPU backend), with MPI_ERRORS_RETURN set so every
 * failure comes back as a status, and waits that sleep instead of busy-polling.
 *
 * A process started without mpirun/srun is a valid one-rank world. */
#ifndef LSTMD_COMM_H
#define LSTMD_COMM_H

#include <stddef.h>
#include <stdint.h>

struct lstmd_comm; /* opaque; one per process, plus any made by lstmd_comm_split */

/* MPI_Init_thread(MPI_THREAD_MULTIPLE); rank and size of MPI_COMM_WORLD; local rank from
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Returns 0 or LSTMD_ECOMM with a message. */
int lstmd_comm_init(int *argc, char ***argv, struct lstmd_comm **out);
/* Before lstmd_comm_init: an MPI_Init unfinished after `seconds` (a rank stopped in its start-up
 * holds every rank there) prints why and ends the process with exit code 1; the communicator
 * then starts with this wait limit (lstmd_comm_set_wait_limit). `source` names it in messages (a
 * string constant). 0: unbounded, as without the call. */
void lstmd_comm_set_init_limit(double seconds, const char *source);
/* The world rank the launcher gave this process (its environment), before MPI_Init can say; -1
 * when none did. */
int lstmd_comm_launcher_rank(void);
/* For a forked child about to exec a launcher (mpirun) of its own: unsets the OMPI_*, PMIX_*,
 * ORTE_* and PRTE_* variables that this process's MPI_Init put in the environment (a
 * singleton's), keeping the ones that were there before lstmd_comm_init (comm/launch_env.c).
 * Call only in the child. */
void lstmd_comm_forget_launch_env(void);
void lstmd_comm_note_launch_env(void); /* lstmd_comm_init calls it before MPI_Init */
/* MPI_Finalize (after all requests are done). NULL is fine. With a wait limit set on c
 * (lstmd_comm_set_wait_limit: `lstmd train` sets the set-up's bound), an MPI_Finalize unfinished
 * that long (a peer stopped after the last collective) prints why and ends the process with exit
 * code 1. */
void lstmd_comm_finalize(struct lstmd_comm *c);
/* Ends the whole job now (MPI_Abort on MPI_COMM_WORLD), from any rank, whichever communicator
 * (world or a sub-communicator) it is given. */
void lstmd_comm_abort(struct lstmd_comm *c, int exit_code) __attribute__((noreturn));

int lstmd_comm_rank(const struct lstmd_comm *c);
int lstmd_comm_size(const struct lstmd_comm *c);
int lstmd_comm_local_rank(const struct lstmd_comm *c);
/* Ranks on this node (MPI_COMM_TYPE_SHARED). */
int lstmd_comm_local_size(const struct lstmd_comm *c);
/* Host name of this rank (for messages). */
const char *lstmd_comm_host(const struct lstmd_comm *c);
/* "MPI <major>.<minor>, <library version string>" of the MPI library loaded at run time, first
 * line only; needs no MPI_Init (MPI_Get_version and MPI_Get_library_version may be called
 * before it). */
void lstmd_comm_describe_library(char *buf, size_t n);

/* In-place sum over all ranks of n floats (any n; split into int-sized pieces internally). */
int lstmd_comm_allreduce_sum_f32(struct lstmd_comm *c, float *buf, size_t n);
/* The same, bounded: unfinished after timeout_s (> 0) it ends the job, naming `what` (as the
 * reducer's waits do; the GPU's host-staged gradient sum). */
int lstmd_comm_allreduce_sum_f32_within(struct lstmd_comm *c, float *buf, size_t n,
                                        double timeout_s, const char *what);
/* Out-of-place variant: dst = Σ src over ranks (src and dst must not overlap). */
int lstmd_comm_allreduce_sum_f32_to(struct lstmd_comm *c, const float *src, float *dst, size_t n);
/* In-place sum / max of n doubles (metrics, flags). */
int lstmd_comm_allreduce_sum_f64(struct lstmd_comm *c, double *buf, int n);
int lstmd_comm_allreduce_max_f64(struct lstmd_comm *c, double *buf, int n);
/* The sum of n doubles for a wait that has a bound (the training step's: every rank enters it
 * within a step's compute of the others): unfinished timeout_s after it began, it prints
 * "rank R (host): WHAT unfinished after N s ..." and ends the job (lstmd_comm_abort). A wait
 * that may legitimately last (rank 0 writing a checkpoint while the others wait) is
 * lstmd_comm_solo's, bounded by the silence of the working rank instead. */
int lstmd_comm_allreduce_sum_f64_within(struct lstmd_comm *c, double *buf, int n,
                                         double timeout_s, const char *what);
/* A bound on every wait on c (and on the communicators made from c after the first call: they
 * follow c's limit as it changes) that names none:
 * a collective unfinished `seconds` after it began ends the job with a message, as the _within
 * calls do (0: none, the default). A training run sets its train.comm_timeout_s, so that no rank
 * that freezes anywhere in the run leaves the others waiting; the waits that may legitimately
 * last longer are lstmd_comm_solo's. A daemon's idle waits use communicators without one.
 * `source` says where the limit comes from, for that message ("train.comm_timeout_s"; kept by
 * reference: a string constant). */
void lstmd_comm_set_wait_limit(struct lstmd_comm *c, double seconds, const char *source);
/* The agreement vote, the one way ranks decide together whether to go on: every rank passes its
 * own status (0: fine) and learns whether any rank failed, so that all of them go on or all
 * stop at the same point and none is left waiting in a collective. Returns 0 when every rank
 * passed 0; else this rank's own status if it failed, or else the status of the failing rank
 * chosen by the vote: the lowest rank among those with the most negative status. That rank goes
 * to *failed_rank on every rank alike (may be NULL; -1 when none failed), so it can serve as a
 * broadcast root. A failure of the vote itself returns LSTMD_ECOMM. c == NULL or one rank:
 * my_status. */
int lstmd_comm_agree(struct lstmd_comm *c, int my_status, int *failed_rank);
/* Collective: the vote of lstmd_comm_agree on my_rc (failed_rank as there; a failed vote ends the
 * job), then rank 0 prints the lines every rank held (n bytes each, NUL-terminated: what
 * lstmd_errors_capture kept) each once: bare when every rank said it, else under a header
 * naming the ranks that did ("lstmd: on ranks 1-3, 7:"). root_speaks: rank 0's lines that no
 * other rank said are bare too (its notes for the whole job). Returns the vote's status. */
int lstmd_comm_messages_once(struct lstmd_comm *comm, int my_rc, const char *held, size_t n,
                             int root_speaks, int *failed_rank);
/* The vote on an allocation that a collective after it needs (ok: this rank has its memory):
 * a rank without it prints "rank R (host): out of memory for WHAT (N bytes)" (bytes 0: unknown,
 * left out), and rank 0 names
 * that rank to the log ("stopping every rank: ..."), so that a job that stops for it does not
 * stop in silence. Returns as lstmd_comm_agree. */
int lstmd_comm_agree_alloc(struct lstmd_comm *c, int ok, size_t bytes, const char *what);
/* The same vote with a bound, as lstmd_comm_allreduce_sum_f64_within (timeout_s 0: none). */
int lstmd_comm_agree_within(struct lstmd_comm *c, int my_status, int *failed_rank,
                            double timeout_s, const char *what);
/* Rank `root` runs work(ctx) alone (work must not communicate; root skips it when its my_status
 * is not 0) while the other ranks wait; then every rank votes as lstmd_comm_agree, root with
 * work's status, the others with my_status. While root works, a thread of its sends every other
 * rank a heartbeat (solo.c), so the wait has a bound that a slow disk does not reach: a waiting
 * rank that has heard nothing from root for timeout_s (> 0; 0: no bound) says so, naming `what`
 * and root, and ends the job; root's own wait in the vote is bounded by timeout_s. For rank 0's
 * checkpoint writes and reads. c == NULL or one rank: work's status. */
int lstmd_comm_solo(struct lstmd_comm *c, int root, int (*work)(void *ctx), void *ctx,
                    int my_status, int *failed_rank, double timeout_s, const char *what);
/* Broadcast `bytes` bytes from root (any size). */
int lstmd_comm_bcast(struct lstmd_comm *c, void *buf, size_t bytes, int root);
/* Gathers `bytes` from every rank into out (rank-major, size·bytes) on root. */
int lstmd_comm_gather(struct lstmd_comm *c, const void *in, size_t bytes, void *out, int root);
/* The same with a bound (every rank enters it within a step of the others): unfinished
 * timeout_s after it began, it says so naming `what` and ends the job, as
 * lstmd_comm_allreduce_sum_f64_within does. */
int lstmd_comm_gather_within(struct lstmd_comm *c, const void *in, size_t bytes, void *out,
                             int root, double timeout_s, const char *what);
int lstmd_comm_barrier(struct lstmd_comm *c);
/* Gathers variable-size byte blocks to root: rank i sends `bytes` (its own count), root receives
 * counts[i] bytes at out + displs[i] (counts/displs used on root only, may be NULL elsewhere).
 * Any sizes and displacements (64-bit throughout; moved in pieces of at most 2^30 bytes). The
 * blocks must not overlap on root; root's own block is copied with memmove. Root first scatters
 * counts[], each rank checks its `bytes` against its count, and all vote, so a mismatch is an
 * error on every rank (LSTMD_EINVAL; the mismatching rank prints both sizes), never a hang.
 * Collective over c. Returns 0, LSTMD_EINVAL, LSTMD_ENOMEM or LSTMD_ECOMM. */
int lstmd_comm_gatherv(struct lstmd_comm *c, const void *in, size_t bytes, void *out,
                       const size_t *counts, const size_t *displs, int root);

/* Sub-communicators (a pipeline replica, the replicas of one stage). Collective over c: a new
 * communicator of the ranks with the same color, ordered by key (MPI_Comm_split), with its own
 * duplicate for a reducer thread (so lstmd_reducer_create works on it), MPI_ERRORS_RETURN set
 * on both; host and local rank/size are copied from c (they describe the process). A rank with
 * color < 0 joins none: *out = NULL and 0. Every comm.h call works on the result (rank and size
 * are those in the sub-communicator; lstmd_comm_abort still ends the whole job). Call it at one
 * agreed point, in the same order on every rank of c. Free with lstmd_comm_free (not
 * finalize). Returns 0, LSTMD_ENOMEM or LSTMD_ECOMM. */
int lstmd_comm_split(struct lstmd_comm *c, int color, int key, struct lstmd_comm **out);
/* Frees a communicator made by lstmd_comm_split. NULL is fine; never finalizes MPI. */
void lstmd_comm_free(struct lstmd_comm *sub);
/* A duplicate of c's communicator (collective over c), a struct like lstmd_comm_split's: for
 * traffic that must never match anything else on c (the daemon's control messages). Free with
 * lstmd_comm_free. Returns 0, LSTMD_ENOMEM or LSTMD_ECOMM. */
int lstmd_comm_dup(struct lstmd_comm *c, struct lstmd_comm **out);
/* A communicator of the ranks of c listed in ranks[0..n) (ascending or not; the new rank i is
 * ranks[i]), made with MPI_Comm_create_group: collective over those ranks only, so ranks of c
 * outside the list (training other jobs) are not involved. Concurrent calls by disjoint (or
 * overlapping, in turn) groups on c are told apart by tag (0 ≤ tag < 32768). Every member must
 * pass the same list and tag. The result is like lstmd_comm_split's (own reducer duplicate,
 * MPI_ERRORS_RETURN); free with lstmd_comm_free. Returns 0, LSTMD_ENOMEM or LSTMD_ECOMM. */
int lstmd_comm_create_group(struct lstmd_comm *c, const int *ranks, int n, int tag,
                            struct lstmd_comm **out);
/* Point-to-point messages of any size up to 2^31−1 bytes (control messages, not data): a send
 * that waits (sleeping) until the buffer may be reused. Returns 0 or LSTMD_ECOMM. */
int lstmd_comm_send_msg(struct lstmd_comm *c, int dest, int tag, const void *buf, size_t bytes);
/* The same, without waiting: the send goes on in the background while buf stays untouched
 * (a message of several KiB waits for its receiver to take it, and one that is frozen would hold
 * the caller). lstmd_comm_send_test says whether it is done, and frees *out when it is. */
struct lstmd_comm_send;
int lstmd_comm_isend_msg(struct lstmd_comm *c, int dest, int tag, const void *buf, size_t bytes,
                         struct lstmd_comm_send **out);
int lstmd_comm_send_test(struct lstmd_comm_send *s, int *done);
/* Receives the next message from source (-1: any) with tag (-1: any) on c, waiting at most
 * wait_s seconds (0: only a look; < 0: forever), polling with sleeps that grow to max_sleep_ms.
 * On a message: *buf (malloc'd, caller frees; NULL for an empty one), *bytes, and *src / *tag_out
 * (each may be NULL) are set and 0 returned. Nothing within the wait: *bytes = 0, *buf = NULL
 * and 1 returned. LSTMD_ENOMEM or LSTMD_ECOMM on failure. Thread-safe (matched probe). */
int lstmd_comm_recv_msg(struct lstmd_comm *c, int source, int tag, double wait_s,
                        double max_sleep_ms, void **buf, size_t *bytes, int *src, int *tag_out);
/* Gradient buckets go through the reducer thread (reducer.h), which overlaps them with
 * backward. */

#endif
