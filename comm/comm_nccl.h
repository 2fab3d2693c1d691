/* comm_nccl.h — summing gradient buffers that live on the ranks' GPUs. Normally NCCL,
 * bootstrapped over MPI (rank 0's unique id by MPI_Bcast, ncclCommInitRank after the device is
 * selected); when two ranks turn out to share one GPU (NCCL cannot run that), or the build has
 * no NCCL, a host-staged fallback copies each buffer to pinned memory and sums it over MPI.
 *
 * Collectives are enqueued on a caller's stream and never waited for by the host here. A
 * watchdog thread polls ncclCommGetAsyncError and the completion of the last watched event;
 * an error, or an all-reduce unfinished after timeout_s, aborts the communicator (never a
 * blocking destroy) and leaves lstmd_nccl_failed() set, with the reason printed once. Counts are
 * element counts (floats), never bytes. */
#ifndef LSTMD_COMM_NCCL_H
#define LSTMD_COMM_NCCL_H

#include <stddef.h>

struct lstmd_comm;
struct lstmd_nccl;

enum lstmd_nccl_mode { LSTMD_NCCL_DEVICE = 0, LSTMD_NCCL_HOST_STAGED = 1 };

/* Collective over c's ranks; the CUDA device of this rank must be current. max_count: the
 * largest all-reduce to come (sizes the staging buffer of the fallback). Returns 0 (every rank in
 * the same mode) or LSTMD_ECOMM / LSTMD_ENOMEM after printing why (agreed by every rank when
 * MPI still works). */
int lstmd_nccl_create(struct lstmd_comm *c, size_t max_count, double timeout_s,
                      struct lstmd_nccl **out);
/* Stops the watchdog; destroys the communicator, or aborts it when a collective may still be
 * in flight or failed. NULL is fine. */
void lstmd_nccl_destroy(struct lstmd_nccl *n);

int lstmd_nccl_mode(const struct lstmd_nccl *n);
/* One line: "NCCL 2.28.9" or "MPI through host memory (ranks 0 and 1 share GPU ...)". */
const char *lstmd_nccl_describe(const struct lstmd_nccl *n);

/* In-place sum over the ranks of buf[0..count) (device floats), enqueued on `stream` (a
 * cudaStream_t). Host-staged mode: copies out, waits for the stream, sums over MPI and copies
 * back (the host blocks). Returns 0 or LSTMD_ECOMM. */
int lstmd_nccl_allreduce_sum(struct lstmd_nccl *n, float *buf, size_t count, void *stream);
/* The same in pieces of at most `piece` floats (0: one), enqueued as one NCCL group. */
int lstmd_nccl_allreduce_sum_pieces(struct lstmd_nccl *n, float *buf, size_t count, size_t piece,
                                    void *stream);
/* Hands the watchdog an event (a cudaEvent_t) just recorded after the collectives enqueued so
 * far: if it has not completed timeout_s from now, the job fails. */
void lstmd_nccl_watch(struct lstmd_nccl *n, void *event);
/* "NCCL 2.28.9" as loaded at run time, or "not built in". Needs no MPI or GPU. */
void lstmd_nccl_describe_library(char *buf, size_t n);
/* Non-zero once the communicator failed (error or timeout; already aborted, reason printed). */
int lstmd_nccl_failed(struct lstmd_nccl *n);
/* Waits on the host for an event (a cudaEvent_t), polling it and n's failure flag (n may be
 * NULL), so that a failed peer ends the wait: 0, LSTMD_ECUDA (printed) or LSTMD_ECOMM. */
int lstmd_nccl_wait_event(struct lstmd_nccl *n, void *event);

#endif
