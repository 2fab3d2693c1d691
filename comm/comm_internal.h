/* comm_internal.h — the MPI communicator's insides, shared by comm_mpi.c and reducer.c only. */
#ifndef LSTMD_COMM_INTERNAL_H
#define LSTMD_COMM_INTERNAL_H

#include <mpi.h>

struct lstmd_comm {
  MPI_Comm world;  /* collectives of the main thread */
  MPI_Comm grads;  /* the reducer thread's own, so its collectives never interleave with those */
  MPI_Comm local;  /* ranks on this node */
  int rank, size, local_rank, local_size;
  int we_initialized; /* MPI_Init was ours, so MPI_Finalize is too */
  char host[MPI_MAX_PROCESSOR_NAME];
};

#endif
