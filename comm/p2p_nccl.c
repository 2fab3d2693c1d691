/* p2p_nccl.c — NCCL send/recv lanes between pipeline stages (see p2p_nccl.h).
 *
 * 1. Set-up, collective over the replica's pipeline communicator pp: if two stages share a GPU
 *    (lstmd_nccl_probe_gpus) every rank returns NULL. Otherwise each stage s below the top makes
 *    two unique ids for the link (s, s+1), one per direction, and an all-gather over pp hands
 *    them round; every rank then starts its lanes' two-rank communicators (stage s is rank 0 of
 *    its link above, rank 1 of its link below) as non-blocking inits in one NCCL group and polls
 *    them, bounded by timeout_s. The ranks agree on the outcome.
 * 2. A lane's queue is a ring of (event, item name): transfer() records the event after each
 *    send/recv on the lane's stream. The oldest unfinished one is what the watchdog times, from
 *    the moment it became the oldest; transfer() and the watchdog both pop finished ones.
 * 3. The abort frees the communicators, so every use of them after set-up happens under `mu`
 *    and only while `failed` is unset (as comm_nccl.c). */
#define _GNU_SOURCE
#include "p2p_nccl.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if LSTMD_WITH_NCCL
#include <nccl.h>
#endif

#include "comm.h"
#include "comm_internal.h"
#include "comm_nccl.h"
#include "kernels/check.h"
#include "kernels/clock.h"
#include "nccl_internal.h"
#include "worker/engine/pipe_groups.h"

#if LSTMD_WITH_NCCL

static const char *const kLaneNames[LSTMD_LANES] = {
    "receive of activations from", "send of activations to", "receive of gradients from",
    "send of gradients to"};

struct lane {
  int present, send, peer_stage, peer_rank; /* peer_rank: in the two-rank communicator */
  ncclComm_t comm;
  cudaStream_t stream;
  cudaEvent_t *ev;   /* [cap] */
  char (*what)[112]; /* [cap] */
  size_t cap, head, tail; /* pending transfers: [head, tail) (see 2.) */
  double head_since;
  cudaEvent_t joined;
};

struct lstmd_p2p_nccl {
  struct lstmd_comm *pp;
  double timeout_s;
  int device;
  struct lane lane[LSTMD_LANES];
  char desc[96];
  pthread_t watchdog;
  int watchdog_running;
  pthread_mutex_t mu;
  atomic_int failed, quit;
};

/* Pops the lane's finished transfers; returns a CUDA error other than not-ready, else success. */
static cudaError_t pop_finished(struct lane *l) {
  while (l->head < l->tail) {
    const cudaError_t q = cudaEventQuery(l->ev[l->head % l->cap]);
    if (q == cudaErrorNotReady) return cudaSuccess;
    if (q != cudaSuccess) return q;
    l->head++;
    l->head_since = lstmd_now_s();
  }
  return cudaSuccess;
}

/* Under mu: prints why, aborts every communicator, sets failed. */
static void fail(struct lstmd_p2p_nccl *p, const char *why) {
  lstmd_errorf("rank %d (%s): pipeline transfer failed: %s; aborting its NCCL communicators",
               p->pp->world_rank, p->pp->host, why);
  for (int i = 0; i < LSTMD_LANES; i++)
    if (p->lane[i].comm) ncclCommAbort(p->lane[i].comm), p->lane[i].comm = NULL;
  p->failed = 1;
}

static void *watchdog_main(void *arg) {
  struct lstmd_p2p_nccl *p = arg;
  cudaSetDevice(p->device); /* else the runtime would create a context on device 0 here */
  while (!p->quit && !p->failed) {
    lstmd_sleep_us(10000);
    pthread_mutex_lock(&p->mu);
    char why[256] = "";
    for (int i = 0; i < LSTMD_LANES && !why[0] && !p->failed; i++) {
      struct lane *l = &p->lane[i];
      if (!l->present) continue;
      ncclResult_t st = ncclSuccess, r = ncclCommGetAsyncError(l->comm, &st);
      const cudaError_t q = r == ncclSuccess ? pop_finished(l) : cudaSuccess;
      if (r != ncclSuccess || (st != ncclSuccess && st != ncclInProgress))
        snprintf(why, sizeof why, "NCCL on the %s stage %d: %s", kLaneNames[i], l->peer_stage,
                 ncclGetErrorString(r != ncclSuccess ? r : st));
      else if (q != cudaSuccess)
        snprintf(why, sizeof why, "CUDA error on the %s stage %d: %s", kLaneNames[i],
                 l->peer_stage, cudaGetErrorString(q));
      else if (l->head < l->tail && lstmd_now_s() - l->head_since > p->timeout_s)
        snprintf(why, sizeof why, "%s unfinished after %.0f s (train.comm_timeout_s): stage %d has "
                 "probably died or hangs", l->what[l->head % l->cap], p->timeout_s, l->peer_stage);
    }
    if (why[0]) fail(p, why);
    pthread_mutex_unlock(&p->mu);
  }
  return NULL;
}

/* Lane i of stage s of S: whether it exists, its direction and its peer (see 1.). */
static void describe_lane(struct lane *l, int i, int s, int S) {
  const int below = i == LSTMD_LANE_RECV_ACT || i == LSTMD_LANE_SEND_GRAD;
  l->present = below ? s > 0 : s < S - 1;
  l->send = i == LSTMD_LANE_SEND_ACT || i == LSTMD_LANE_SEND_GRAD;
  l->peer_stage = below ? s - 1 : s + 1;
  l->peer_rank = below ? 0 : 1;
}

struct link_ids {
  int ok;
  ncclUniqueId id[2]; /* activations (up), gradients (down) of the link to the stage above */
};

/* Starts this rank's communicators (see 1.); this rank's verdict, not yet agreed. */
static int init_lanes(struct lstmd_p2p_nccl *p, const struct link_ids *ids) {
  const int s = p->pp->rank;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclGroupStart();
  for (int i = 0; r == ncclSuccess && i < LSTMD_LANES; i++) {
    struct lane *l = &p->lane[i];
    if (!l->present) continue;
    const int below = l->peer_stage < s, grads = i >= LSTMD_LANE_RECV_GRAD;
    const struct link_ids *link = &ids[below ? s - 1 : s];
    ncclUniqueId id = link->id[grads];
    r = ncclCommInitRankConfig(&l->comm, 2, id, below ? 1 : 0, &cfg);
    if (r == ncclInProgress) r = ncclSuccess;
  }
  ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess && end != ncclInProgress) r = end;
  for (int i = 0; r == ncclSuccess && i < LSTMD_LANES; i++)
    if (p->lane[i].present) r = lstmd_nccl_settle(p->lane[i].comm, p->timeout_s);
  if (r == ncclSuccess) return LSTMD_OK;
  for (int i = 0; i < LSTMD_LANES; i++) { /* a finalize of an unfinished init could wait 10 s */
    struct lane *l = &p->lane[i];
    if (l->comm) ncclCommAbort(l->comm);
    l->comm = NULL;
  }
  if (r == ncclInProgress)
    lstmd_errorf("rank %d (%s): the pipeline's NCCL communicators did not start in %.0f s",
                 p->pp->world_rank, p->pp->host, p->timeout_s);
  else
    lstmd_nccl_failed_(r, "ncclCommInitRankConfig (pipeline lanes)", __FILE__, __LINE__);
  return LSTMD_ECOMM;
}

static int alloc_lanes(struct lstmd_p2p_nccl *p, size_t per_lane) {
  for (int i = 0; i < LSTMD_LANES; i++) {
    struct lane *l = &p->lane[i];
    if (!l->present) continue;
    l->cap = per_lane ? per_lane : 1;
    l->ev = calloc(l->cap, sizeof *l->ev);
    l->what = calloc(l->cap, sizeof *l->what);
    if (!l->ev || !l->what) return LSTMD_ENOMEM;
    for (size_t j = 0; j < l->cap; j++)
      LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&l->ev[j], cudaEventDisableTiming));
    LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&l->joined, cudaEventDisableTiming));
    LSTMD_CHECK_CUDA(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking));
  }
  return LSTMD_OK;
}

int lstmd_p2p_nccl_create(struct lstmd_comm *pp, size_t per_lane, double timeout_s,
                          struct lstmd_p2p_nccl **out, char *why, size_t why_len) {
  *out = NULL;
  int shared = 0;
  LSTMD_TRY(lstmd_nccl_probe_gpus(pp, &shared, why, why_len));
  if (shared) return LSTMD_OK;
  struct lstmd_p2p_nccl *p = calloc(1, sizeof *p);
  struct link_ids ids[LSTMD_PIPE_MAX_STAGES];
  int rc = !p ? LSTMD_ENOMEM : pp->size > LSTMD_PIPE_MAX_STAGES ? LSTMD_EINVAL : LSTMD_OK;
  if (p) {
    p->pp = pp;
    p->timeout_s = timeout_s;
    pthread_mutex_init(&p->mu, NULL);
    cudaGetDevice(&p->device);
    for (int i = 0; i < LSTMD_LANES; i++) describe_lane(&p->lane[i], i, pp->rank, pp->size);
  }
  struct link_ids mine;
  memset(&mine, 0, sizeof mine);
  mine.ok = !rc;
  if (!rc && pp->rank < pp->size - 1)
    mine.ok = !LSTMD_NCCL_FAILED(ncclGetUniqueId(&mine.id[0])) &&
              !LSTMD_NCCL_FAILED(ncclGetUniqueId(&mine.id[1]));
  /* every rank takes part, also one that failed above, so none is left in the all-gather */
  if (pp->size > LSTMD_PIPE_MAX_STAGES ||
      LSTMD_MPI_FAILED(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, ids, sizeof mine, MPI_BYTE,
                                     pp->world)))
    rc = rc ? rc : LSTMD_ECOMM;
  for (int r = 0; !rc && r < pp->size; r++)
    if (!ids[r].ok) rc = LSTMD_ECOMM; /* that rank said why */
  if (!rc) rc = alloc_lanes(p, per_lane);
  /* Agreed before the communicators start: a rank that could not allocate must not leave its
   * link peer waiting in ncclCommInitRankConfig for comm_timeout_s. */
  rc = lstmd_comm_agree(pp, rc, NULL);
  if (!rc) rc = init_lanes(p, ids);
  if (!rc) {
    lstmd_nccl_describe_library(p->desc, sizeof p->desc);
    snprintf(p->desc + strlen(p->desc), sizeof p->desc - strlen(p->desc), " send/recv on 4 lanes");
    if (pthread_create(&p->watchdog, NULL, watchdog_main, p) != 0) rc = LSTMD_ENOMEM;
    else p->watchdog_running = 1;
  }
  rc = lstmd_comm_agree(pp, rc, NULL); /* the watchdog too: no rank trains without its peers */
  if (rc) {
    lstmd_p2p_nccl_destroy(p);
    return rc;
  }
  *out = p;
  return LSTMD_OK;
}

void lstmd_p2p_nccl_destroy(struct lstmd_p2p_nccl *p) {
  if (!p) return;
  p->quit = 1;
  if (p->watchdog_running) pthread_join(p->watchdog, NULL);
  int in_flight = 0;
  for (int i = 0; i < LSTMD_LANES; i++) {
    struct lane *l = &p->lane[i];
    if (l->ev && pop_finished(l) == cudaSuccess && l->head < l->tail) in_flight = 1;
  }
  cudaGetLastError();
  for (int i = 0; i < LSTMD_LANES; i++) {
    struct lane *l = &p->lane[i];
    if (l->comm) lstmd_nccl_close(l->comm, in_flight);
    for (size_t j = 0; l->ev && j < l->cap; j++)
      if (l->ev[j]) cudaEventDestroy(l->ev[j]);
    if (l->joined) cudaEventDestroy(l->joined);
    if (l->stream && !in_flight) cudaStreamDestroy(l->stream); /* aborted: kernels may linger */
    free(l->ev);
    free(l->what);
  }
  cudaGetLastError();
  pthread_mutex_destroy(&p->mu);
  free(p);
}

void *lstmd_p2p_nccl_stream(struct lstmd_p2p_nccl *p, int lane) {
  return lane >= 0 && lane < LSTMD_LANES && p->lane[lane].present ? p->lane[lane].stream : NULL;
}

int lstmd_p2p_nccl_transfer(struct lstmd_p2p_nccl *p, int lane, void *buf, size_t bytes,
                            const char *what) {
  if (lane < 0 || lane >= LSTMD_LANES || !p->lane[lane].present) return LSTMD_EINVAL;
  struct lane *l = &p->lane[lane];
  pthread_mutex_lock(&p->mu);
  int rc = LSTMD_ECOMM;
  cudaError_t ce = cudaSuccess;
  if (!p->failed) {
    if ((ce = pop_finished(l)) != cudaSuccess) {
      lstmd_errorf("pipeline transfer lane of the %s stage %d: %s", kLaneNames[lane],
                   l->peer_stage, cudaGetErrorString(ce));
    } else if (l->tail - l->head == l->cap) {
      lstmd_errorf("pipeline transfer queue of the %s stage %d is full (%zu)", kLaneNames[lane],
                   l->peer_stage, l->cap);
      rc = LSTMD_EINVAL;
    } else {
      ncclResult_t r = l->send ? ncclSend(buf, bytes, ncclUint8, l->peer_rank, l->comm, l->stream)
                               : ncclRecv(buf, bytes, ncclUint8, l->peer_rank, l->comm, l->stream);
      if (r == ncclInProgress) r = lstmd_nccl_settle(l->comm, p->timeout_s);
      if (!lstmd_nccl_failed_(r, l->send ? "ncclSend" : "ncclRecv", __FILE__, __LINE__) &&
          cudaEventRecord(l->ev[l->tail % l->cap], l->stream) == cudaSuccess) {
        snprintf(l->what[l->tail % l->cap], sizeof l->what[0], "%s", what);
        if (l->head == l->tail) l->head_since = lstmd_now_s();
        l->tail++;
        rc = LSTMD_OK;
      }
    }
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int lstmd_p2p_nccl_join(struct lstmd_p2p_nccl *p, void *stream) {
  for (int i = 0; i < LSTMD_LANES; i++) {
    struct lane *l = &p->lane[i];
    if (!l->present) continue;
    LSTMD_CHECK_CUDA(cudaEventRecord(l->joined, l->stream));
    LSTMD_CHECK_CUDA(cudaStreamWaitEvent((cudaStream_t)stream, l->joined, 0));
  }
  return LSTMD_OK;
}

int lstmd_p2p_nccl_failed(struct lstmd_p2p_nccl *p) { return p->failed; }
const char *lstmd_p2p_nccl_describe(const struct lstmd_p2p_nccl *p) { return p->desc; }

#else /* no NCCL in this build: the engine keeps its host-staged transfers */

int lstmd_p2p_nccl_create(struct lstmd_comm *pp, size_t per_lane, double timeout_s,
                          struct lstmd_p2p_nccl **out, char *why, size_t why_len) {
  (void)pp, (void)per_lane, (void)timeout_s;
  *out = NULL;
  snprintf(why, why_len, "this build has no NCCL");
  return LSTMD_OK;
}
void lstmd_p2p_nccl_destroy(struct lstmd_p2p_nccl *p) { (void)p; }
void *lstmd_p2p_nccl_stream(struct lstmd_p2p_nccl *p, int lane) { (void)p, (void)lane; return NULL; }
int lstmd_p2p_nccl_transfer(struct lstmd_p2p_nccl *p, int lane, void *buf, size_t bytes,
                            const char *what) {
  (void)p, (void)lane, (void)buf, (void)bytes, (void)what;
  return LSTMD_EUNSUPPORTED;
}
int lstmd_p2p_nccl_join(struct lstmd_p2p_nccl *p, void *stream) { (void)p, (void)stream; return LSTMD_EUNSUPPORTED; }
int lstmd_p2p_nccl_failed(struct lstmd_p2p_nccl *p) { (void)p; return 0; }
const char *lstmd_p2p_nccl_describe(const struct lstmd_p2p_nccl *p) { (void)p; return "none"; }

#endif
