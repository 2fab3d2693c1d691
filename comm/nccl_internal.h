/* nccl_internal.h — what comm_nccl.c (gradient sums) shares with p2p_nccl.c (stage transfers):
 * the collective check for ranks sharing a GPU, and the handling of non-blocking NCCL
 * communicators (polling a pending operation, closing without hanging on a dead peer). */
#ifndef LSTMD_NCCL_INTERNAL_H
#define LSTMD_NCCL_INTERNAL_H

#include <stddef.h>

struct lstmd_comm;

/* Collective over c: all-gathers (host, PCI bus id of the current GPU); *shared = 1 when two
 * ranks use one GPU, described in why (the same verdict on every rank). 0, LSTMD_ECOMM or
 * LSTMD_ENOMEM. */
int lstmd_nccl_probe_gpus(struct lstmd_comm *c, int *shared, char *why, size_t len);

#if LSTMD_WITH_NCCL
#include <nccl.h>
/* Polls a non-blocking communicator until its pending operation is done: its result, or
 * ncclInProgress when timeout_s passed first. */
ncclResult_t lstmd_nccl_settle(ncclComm_t comm, double timeout_s);
/* Aborts (in_flight: an operation may be pending on a dead peer) or finalizes and destroys. */
void lstmd_nccl_close(ncclComm_t comm, int in_flight);
#endif

#endif
