/* comm_internal.h — the MPI communicator's insides, shared by comm_mpi.c, reducer.c, p2p.c and
 * solo.c only (and tests/test_comm.c, for lstmd_comm_gatherv_pieces and the heartbeat tag). */
#ifndef LSTMD_COMM_INTERNAL_H
#define LSTMD_COMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

struct lstmd_comm {
  MPI_Comm world;  /* collectives of the main thread: a dup of MPI_COMM_WORLD, or for a
                      sub-communicator (lstmd_comm_split) the split itself */
  MPI_Comm grads;  /* the reducer thread's own, so its collectives never interleave with those */
  MPI_Comm local;  /* ranks on this node; MPI_COMM_NULL on a sub-communicator */
  int rank, size;  /* in `world` */
  int world_rank;  /* in MPI_COMM_WORLD, for messages (a sub-communicator's rank is not it) */
  int local_rank, local_size; /* of the process (copied into sub-communicators) */
  int we_initialized; /* MPI_Init was ours, so MPI_Finalize is too */
  int is_sub;         /* made by lstmd_comm_split: freed by lstmd_comm_free */
  double wait_limit_s; /* lstmd_comm_set_wait_limit (0: none) */
  const char *wait_limit_source; /* where it comes from, for the message (a string constant) */
  /* whose wait_limit_s bounds this one's waits: itself once set, else its parent's owner (a
   * pipeline's communicators follow the run's limit as it changes after set-up); NULL: none.
   * An owner outlives the communicators made from it. */
  const struct lstmd_comm *limit_owner;
  int64_t solo_epoch; /* lstmd_comm_solo calls made on it (solo.c: late heartbeats are dropped) */
  char host[MPI_MAX_PROCESSOR_NAME];
};

/* solo.c's heartbeats travel point-to-point on a communicator's `world` with this tag, which
 * nothing else there uses (here so that tests/test_comm.c can check none is left behind). */
enum { LSTMD_SOLO_BEAT_TAG = 30001 };

struct lstmd_comm_send { /* lstmd_comm_isend_msg's */
  MPI_Request req;
};

/* The pause between two polls of a wait that began at began_s (lstmd_now_s): 1/16 of the time
 * waited so far, at least 1 µs, at most max_ns (comm_mpi.c, 2.: why proportional). */
void lstmd_comm_poll_pause(double began_s, long max_ns);

/* lstmd_comm_gatherv with the piece size as a parameter (1 ≤ piece ≤ 2^30 bytes), so tests can
 * exercise the splitting of blocks into pieces with small ones. */
int lstmd_comm_gatherv_pieces(struct lstmd_comm *c, const void *in, size_t bytes, void *out,
                              const size_t *counts, const size_t *displs, int root, size_t piece);

#endif
