/* comm.h — the communicator between ranks: collectives on host buffers over MPI (an NCCL
 * backend for device buffers comes with the GPU backend), with MPI_ERRORS_RETURN set so every
 * failure comes back as a status, and waits that sleep instead of busy-polling.
 *
 * A process started without mpirun/srun is a valid one-rank world. */
#ifndef LSTMD_COMM_H
#define LSTMD_COMM_H

#include <stddef.h>
#include <stdint.h>

struct lstmd_comm; /* opaque; one per process */

/* MPI_Init_thread(MPI_THREAD_MULTIPLE); rank and size of MPI_COMM_WORLD; local rank from
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Returns 0 or LSTMD_ECOMM with a message. */
int lstmd_comm_init(int *argc, char ***argv, struct lstmd_comm **out);
/* MPI_Finalize (after all requests are done). NULL is fine. */
void lstmd_comm_finalize(struct lstmd_comm *c);
/* Ends the whole job now (MPI_Abort), from any rank. */
void lstmd_comm_abort(struct lstmd_comm *c, int exit_code);

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
/* Out-of-place variant: dst = Σ src over ranks (src and dst must not overlap). */
int lstmd_comm_allreduce_sum_f32_to(struct lstmd_comm *c, const float *src, float *dst, size_t n);
/* In-place sum / max of n doubles (metrics, flags). */
int lstmd_comm_allreduce_sum_f64(struct lstmd_comm *c, double *buf, int n);
int lstmd_comm_allreduce_max_f64(struct lstmd_comm *c, double *buf, int n);
/* The agreement vote, the one way ranks decide together whether to go on: every rank passes its
 * own status (0: fine) and learns whether any rank failed, so that all of them go on or all
 * stop at the same point and none is left waiting in a collective. Returns 0 when every rank
 * passed 0; else this rank's own status if it failed, or else the status of the failing rank
 * chosen by the vote: the lowest rank among those with the most negative status. That rank goes
 * to *failed_rank on every rank alike (may be NULL; -1 when none failed), so it can serve as a
 * broadcast root. A failure of the vote itself returns LSTMD_ECOMM. c == NULL or one rank:
 * my_status. */
int lstmd_comm_agree(struct lstmd_comm *c, int my_status, int *failed_rank);
/* Broadcast `bytes` bytes from root (any size). */
int lstmd_comm_bcast(struct lstmd_comm *c, void *buf, size_t bytes, int root);
/* Broadcast of a small message that may be hours away (an idle daemon's next command): the
 * wait polls at most 20 times a second, so idle ranks cost next to no CPU. */
int lstmd_comm_bcast_idle(struct lstmd_comm *c, void *buf, int bytes, int root);
/* Gathers `bytes` from every rank into out (rank-major, size·bytes) on root. */
int lstmd_comm_gather(struct lstmd_comm *c, const void *in, size_t bytes, void *out, int root);
int lstmd_comm_barrier(struct lstmd_comm *c);
/* Gradient buckets go through the reducer thread (reducer.h), which overlaps them with
 * backward. */

#endif
