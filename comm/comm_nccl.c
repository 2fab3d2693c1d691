/* comm_nccl.c — NCCL (or host-staged MPI) sums of device buffers (see comm_nccl.h).
 *
 * 1. Set-up, collective over MPI: every rank all-gathers (host name, PCI bus id of its current
 *    GPU). If two ranks share a GPU, every rank sees it in the same table and all switch to the
 *    host-staged fallback together, with one warning from rank 0. Otherwise rank 0 makes the
 *    unique id, MPI_Bcast sends it, and ncclCommInitRankConfig runs non-blocking: the rank
 *    polls ncclCommGetAsyncError until the communicator is ready or timeout_s passes (then
 *    aborts it). The ranks agree on the outcome with an MPI max-reduction, so a rank whose init
 *    failed never leaves the others inside a later collective.
 * 2. A non-blocking communicator may return ncclInProgress from ncclAllReduce; the call is then
 *    still being enqueued and we poll ncclCommGetAsyncError until it is not, as NCCL requires
 *    before the next call on the communicator.
 * 3. Watchdog thread: every 10 ms it checks ncclCommGetAsyncError and whether the watched event
 *    has completed; an error, or the event still pending timeout_s after it was handed over,
 *    makes it print the reason (rank, host, NCCL's last error), ncclCommAbort the communicator
 *    (which also unblocks kernels waiting on a dead peer) and set `failed`. The host side of the
 *    engine polls lstmd_nccl_failed while it waits on the GPU, so the job fails on every rank
 *    whose peer died instead of hanging. The abort frees the communicator, so every use of it
 *    after set-up (the engine's ncclAllReduce and its polling, the watchdog's checks and abort)
 *    happens under `mu`, and only while `failed` is unset.
 * 4. A region of gradients is summed in pieces (train.bucket_mb) inside one ncclGroupStart/End,
 *    so NCCL launches them as one operation instead of one kernel per bucket; the pieces keep
 *    each call's count bounded (MPI-style int limits and the staging buffer do not apply). */
#define _GNU_SOURCE
#include "comm_nccl.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if LSTMD_WITH_NCCL
#include <nccl.h>
#endif

#include "kernels/check.h"
#include "kernels/clock.h"
#include "comm.h"
#include "comm_internal.h"
#include "nccl_internal.h"

struct peer {
  char host[MPI_MAX_PROCESSOR_NAME];
  char bus[32];
};

struct lstmd_nccl {
  struct lstmd_comm *c;
  int mode;
  char desc[256];
  double timeout_s;
  int device;     /* the rank's CUDA device, made current on the watchdog thread too */
  float *staging; /* host-staged: pinned [max_count] */
  size_t max_count;
#if LSTMD_WITH_NCCL
  ncclComm_t comm;
#endif
  pthread_t watchdog;
  int watchdog_running;
  pthread_mutex_t mu;   /* guards comm (after set-up), watched and watched_since */
  cudaEvent_t watched; /* NULL: nothing in flight */
  double watched_since;
  atomic_int failed, quit; /* failed: set under mu when the communicator was aborted */
};

/* Looks for two ranks on one GPU in the gathered table; describes the first pair in why. */
static int find_shared_gpu(const struct peer *all, int n, char *why, size_t len) {
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (all[i].bus[0] && !strcmp(all[i].host, all[j].host) && !strcmp(all[i].bus, all[j].bus)) {
        snprintf(why, len, "ranks %d and %d share GPU %s on %s", i, j, all[i].bus, all[i].host);
        return 1;
      }
  return 0;
}

int lstmd_nccl_probe_gpus(struct lstmd_comm *c, int *shared, char *why, size_t len) {
  struct peer me, *all = calloc((size_t)c->size, sizeof *all);
  /* agreed first: a rank without its buffer must not leave the others in the all-gather */
  const int rc = lstmd_comm_agree_alloc(c, all != NULL, (size_t)c->size * sizeof *all,
                                       "the GPU probe's table of ranks");
  if (rc) {
    free(all);
    return rc;
  }
  memset(&me, 0, sizeof me);
  snprintf(me.host, sizeof me.host, "%s", c->host);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(me.bus, sizeof me.bus, dev) != cudaSuccess) {
    cudaGetLastError();
    me.bus[0] = '\0';
  }
  if (LSTMD_MPI_FAILED(MPI_Allgather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, c->world))) {
    free(all);
    return LSTMD_ECOMM;
  }
  *shared = find_shared_gpu(all, c->size, why, len);
  free(all);
  return LSTMD_OK;
}

#if LSTMD_WITH_NCCL

/* Polls until the communicator's pending operation is done (see 2.); bounded by the timeout. */
ncclResult_t lstmd_nccl_settle(ncclComm_t comm, double timeout_s) {
  const double t0 = lstmd_now_s();
  ncclResult_t st = ncclInProgress;
  for (;;) {
    ncclResult_t q = ncclCommGetAsyncError(comm, &st);
    if (q != ncclSuccess) return q; /* the query's own failure, not a timeout */
    if (st != ncclInProgress) return st;
    if (lstmd_now_s() - t0 > timeout_s) return ncclInProgress;
    lstmd_sleep_us(100);
  }
}

static ncclResult_t settle(struct lstmd_nccl *n) { return lstmd_nccl_settle(n->comm, n->timeout_s); }

void lstmd_nccl_close(ncclComm_t comm, int in_flight) {
  if (in_flight) { /* a blocking destroy could wait for a dead peer */
    ncclCommAbort(comm);
    return;
  }
  /* non-blocking communicator: finalize, wait for it (bounded), then free. Finalize waits for
   * every peer to be quiescent; one that died outside a collective would hold it for the whole
   * comm timeout, so 10 s at most. A healthy finalize takes milliseconds. */
  ncclResult_t r = ncclCommFinalize(comm);
  if (r == ncclSuccess || r == ncclInProgress) r = lstmd_nccl_settle(comm, 10.0);
  if (r == ncclSuccess) ncclCommDestroy(comm);
  else ncclCommAbort(comm);
}

static void *watchdog_main(void *arg) {
  struct lstmd_nccl *n = arg;
  cudaSetDevice(n->device); /* else the runtime would create a context on device 0 here */
  while (!n->quit && !n->failed) {
    lstmd_sleep_us(10000);
    pthread_mutex_lock(&n->mu);
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(n->comm, &st);
    const char *why = NULL;
    char buf[160];
    if (r != ncclSuccess || (st != ncclSuccess && st != ncclInProgress)) {
      why = ncclGetErrorString(r != ncclSuccess ? r : st);
    } else {
      if (n->watched) {
        cudaError_t q = cudaEventQuery(n->watched);
        if (q == cudaSuccess) {
          n->watched = NULL;
        } else if (q != cudaErrorNotReady) {
          snprintf(buf, sizeof buf, "CUDA error while waiting for the all-reduce: %s", cudaGetErrorString(q));
          why = buf;
        } else if (lstmd_now_s() - n->watched_since > n->timeout_s) {
          snprintf(buf, sizeof buf, "gradient all-reduce unfinished after %.0f s (train.comm_timeout_s); "
                   "a rank has probably died or hangs", n->timeout_s);
          why = buf;
        }
      }
    }
    if (why) {
      const char *last = ncclGetLastError(n->comm);
      lstmd_errorf("rank %d (%s): NCCL failed: %s%s%s; aborting the communicator", n->c->rank,
                   n->c->host, why, last && *last ? ": " : "", last ? last : "");
      ncclCommAbort(n->comm);
      n->comm = NULL;
      n->failed = 1;
    }
    pthread_mutex_unlock(&n->mu);
  }
  return NULL;
}

/* ncclCommInitRank over MPI (see 1.); returns this rank's verdict, not yet agreed. */
static int init_nccl(struct lstmd_nccl *n) {
  struct lstmd_comm *c = n->c;
  struct {
    int ok;
    ncclUniqueId id;
  } msg;
  memset(&msg, 0, sizeof msg);
  if (c->rank == 0) msg.ok = !LSTMD_NCCL_FAILED(ncclGetUniqueId(&msg.id));
  LSTMD_CHECK_MPI(MPI_Bcast(&msg, sizeof msg, MPI_BYTE, 0, c->world));
  if (!msg.ok) return LSTMD_ECOMM; /* rank 0 said why; the agreement step follows */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&n->comm, c->size, msg.id, c->rank, &cfg);
  if (r == ncclInProgress || r == ncclSuccess) r = settle(n);
  if (r == ncclSuccess) return LSTMD_OK;
  if (r == ncclInProgress)
    lstmd_errorf("rank %d (%s): ncclCommInitRank did not finish in %.0f s", c->rank, c->host, n->timeout_s);
  else
    lstmd_nccl_failed_(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
  if (n->comm) ncclCommAbort(n->comm);
  n->comm = NULL;
  return LSTMD_ECOMM;
}
#endif

int lstmd_nccl_create(struct lstmd_comm *c, size_t max_count, double timeout_s,
                      struct lstmd_nccl **out) {
  *out = NULL;
  /* Every failure below is voted on before this returns, so that all ranks return the same
   * status from the same vote: a rank returning early would pair its caller's next vote with
   * one of these, and leave the others in a vote it never joins. */
  struct lstmd_nccl *n = calloc(1, sizeof *n);
  const int agreed = lstmd_comm_agree_alloc(c, n != NULL, sizeof *n, "the NCCL communicator");
  if (agreed) {
    free(n);
    return agreed;
  }
  n->c = c;
  n->timeout_s = timeout_s;
  n->max_count = max_count;
  pthread_mutex_init(&n->mu, NULL);
  char why[160] = "";
  int shared = 0;
  int rc = lstmd_nccl_probe_gpus(c, &shared, why, sizeof why);
  if (rc) {
    lstmd_nccl_destroy(n);
    return rc;
  }
  cudaGetDevice(&n->device);
#if LSTMD_WITH_NCCL
  n->mode = shared ? LSTMD_NCCL_HOST_STAGED : LSTMD_NCCL_DEVICE;
  if (shared && c->rank == 0)
    lstmd_errorf("warning: %s; NCCL cannot run two ranks on one GPU, so gradients are summed over "
                 "MPI through host memory (slower). Give every rank its own GPU (Slurm: "
                 "--gpus-per-task=1; mpirun: as many ranks per node as GPUs)", why);
  if (!shared) rc = init_nccl(n);
  rc = lstmd_comm_agree(c, rc, NULL); /* another rank's failure: it said why */
  if (!rc && n->mode == LSTMD_NCCL_DEVICE) {
    lstmd_nccl_describe_library(n->desc, sizeof n->desc);
    if (pthread_create(&n->watchdog, NULL, watchdog_main, n) != 0) rc = LSTMD_ENOMEM;
    else n->watchdog_running = 1;
  }
#else
  n->mode = LSTMD_NCCL_HOST_STAGED;
  if (!shared) snprintf(why, sizeof why, "this build has no NCCL");
  if (c->rank == 0)
    lstmd_errorf("warning: %s: gradients are summed over MPI through host memory (slower)", why);
#endif
  if (!rc && n->mode == LSTMD_NCCL_HOST_STAGED) {
    snprintf(n->desc, sizeof n->desc, "MPI through host memory (%s)", why);
    if (cudaMallocHost((void **)&n->staging, (max_count ? max_count : 1) * sizeof(float)) != cudaSuccess) {
      cudaGetLastError();
      n->staging = NULL;
      lstmd_errorf("cannot allocate %zu bytes of pinned memory for the gradient all-reduce",
                   max_count * sizeof(float));
      rc = LSTMD_ENOMEM;
    }
  }
  rc = lstmd_comm_agree(c, rc, NULL); /* the watchdog and the staging buffer too */
  if (rc) {
    lstmd_nccl_destroy(n);
    return rc;
  }
  *out = n;
  return LSTMD_OK;
}

void lstmd_nccl_destroy(struct lstmd_nccl *n) {
  if (!n) return;
  n->quit = 1;
  if (n->watchdog_running) pthread_join(n->watchdog, NULL);
#if LSTMD_WITH_NCCL
  if (n->comm) {
    const int in_flight = n->watched && cudaEventQuery(n->watched) == cudaErrorNotReady;
    cudaGetLastError();
    lstmd_nccl_close(n->comm, in_flight);
  }
#endif
  if (n->staging) cudaFreeHost(n->staging);
  pthread_mutex_destroy(&n->mu);
  free(n);
}

void lstmd_nccl_describe_library(char *buf, size_t n) {
#if LSTMD_WITH_NCCL
  int v = 0;
  if (ncclGetVersion(&v) == ncclSuccess) snprintf(buf, n, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  else snprintf(buf, n, "NCCL (version unknown)");
#else
  snprintf(buf, n, "NCCL not built in");
#endif
}

int lstmd_nccl_mode(const struct lstmd_nccl *n) { return n->mode; }
const char *lstmd_nccl_describe(const struct lstmd_nccl *n) { return n->desc; }
int lstmd_nccl_failed(struct lstmd_nccl *n) { return n->failed; }

int lstmd_nccl_wait_event(struct lstmd_nccl *n, void *event) {
  for (long spins = 0;; spins++) {
    const cudaError_t q = cudaEventQuery((cudaEvent_t)event);
    if (q == cudaSuccess) return LSTMD_OK;
    if (q != cudaErrorNotReady) {
      LSTMD_CHECK_CUDA(q); /* waiting for the GPU */
      return LSTMD_OK;
    }
    if (n && n->failed) return LSTMD_ECOMM; /* the watchdog said why */
    if (spins > 2000) lstmd_sleep_us(20);
  }
}

void lstmd_nccl_watch(struct lstmd_nccl *n, void *event) {
  pthread_mutex_lock(&n->mu);
  n->watched = (cudaEvent_t)event;
  n->watched_since = lstmd_now_s();
  pthread_mutex_unlock(&n->mu);
}

static int staged_allreduce(struct lstmd_nccl *n, float *buf, size_t count, cudaStream_t s) {
  if (count > n->max_count) {
    lstmd_errorf("host-staged all-reduce of %zu floats exceeds its buffer (%zu)", count, n->max_count);
    return LSTMD_EINVAL;
  }
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(n->staging, buf, count * sizeof(float), cudaMemcpyDeviceToHost, s));
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(s));
  LSTMD_TRY(lstmd_comm_allreduce_sum_f32_within(n->c, n->staging, count, n->timeout_s,
                                                 "the host-staged gradient all-reduce"));
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(buf, n->staging, count * sizeof(float), cudaMemcpyHostToDevice, s));
  return LSTMD_OK;
}

int lstmd_nccl_allreduce_sum(struct lstmd_nccl *n, float *buf, size_t count, void *stream) {
  return lstmd_nccl_allreduce_sum_pieces(n, buf, count, 0, stream);
}

int lstmd_nccl_allreduce_sum_pieces(struct lstmd_nccl *n, float *buf, size_t count, size_t piece,
                                    void *stream) {
  if (n->failed) return LSTMD_ECOMM;
  if (count == 0) return LSTMD_OK;
  if (n->mode == LSTMD_NCCL_HOST_STAGED) return staged_allreduce(n, buf, count, (cudaStream_t)stream);
#if LSTMD_WITH_NCCL
  if (piece == 0) piece = count;
  pthread_mutex_lock(&n->mu); /* the watchdog may abort (free) the communicator: see 3. */
  int rc = LSTMD_ECOMM;
  if (!n->failed) {
    /* One group: NCCL launches the pieces together (see 4.). */
    ncclResult_t r = ncclGroupStart();
    for (size_t at = 0; r == ncclSuccess && at < count; at += piece)
      r = ncclAllReduce(buf + at, buf + at, count - at < piece ? count - at : piece, ncclFloat,
                        ncclSum, n->comm, (cudaStream_t)stream);
    const ncclResult_t end = ncclGroupEnd(); /* always closes the group */
    if (r == ncclSuccess || r == ncclInProgress) r = end;
    if (r == ncclInProgress) r = settle(n);
    if (!lstmd_nccl_failed_(r, "ncclAllReduce (grouped)", __FILE__, __LINE__)) rc = LSTMD_OK;
  }
  pthread_mutex_unlock(&n->mu);
  return rc;
#else
  (void)piece;
  return LSTMD_EUNSUPPORTED;
#endif
}
