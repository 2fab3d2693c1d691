/* p2p.c — pipeline point-to-point transfers (see p2p.h): a table of requests, a progress thread
 * that owns their completion, and waits with deadlines. The numbered rationale for the threading
 * and the protocol is above progress_main; the test is tests/test_p2p.c. */
#define _GNU_SOURCE
#include "p2p.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "comm.h"
#include "comm_internal.h"
#include "peers.h"
#include "kernels/check.h"
#include "kernels/clock.h"

enum {
  kWhatLen = 112,
  kIdxBits = 20,               /* a handle is (generation << kIdxBits) | slot index */
  kMaxSlots = 1 << kIdxBits,   /* outstanding requests at most */
  kGenMask = (1 << 11) - 1,    /* so a handle stays a positive int */
  kPollFastNs = 20000,         /* while a caller waits */
  kPollSlowNs = 500000,        /* the backoff limit while requests are merely in flight */
  kLargeSend = 32768,          /* a send above this moves in fragments the sender must push */
  kShowAtDeadline = 5,         /* unfinished requests named when wait_all's deadline passes */
};

enum slot_state { SLOT_FREE = 0, SLOT_POSTING, SLOT_IN_FLIGHT, SLOT_DONE };

struct slot {
  int state;               /* enum slot_state */
  int is_recv, dir, peer, tag;
  size_t bytes;
  MPI_Request req;         /* handed to the thread at SLOT_IN_FLIGHT */
  int mpi_error;           /* SLOT_DONE: MPI_SUCCESS or the request's error */
  int got_bytes;           /* SLOT_DONE, receives: MPI_Get_count in bytes */
  int gen;                 /* bumped at each allocation, so stale handles are refused */
  int next_free;
  char what[kWhatLen];
};

struct lstmd_p2p {
  struct lstmd_comm *c;
  MPI_Comm comm[2];        /* per direction: dups of c's communicator */
  double timeout_s;
  int rank, size, world_rank;
  int *world_of;           /* [size]: the world rank of each rank of c (for messages) */
  const char *noun;        /* what messages call c's ranks (lstmd_p2p_name_ranks); NULL: "rank" */
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;      /* guards everything below but the thread's own arrays */
  pthread_cond_t work;     /* the thread sleeps on it; posts and new waiters signal it */
  pthread_cond_t done;     /* waiters sleep on it; the thread broadcasts completions */
  struct slot *slots;
  int cap, free_head, in_use;
  int *fresh, n_fresh;     /* slots posted but not yet in the thread's array; capacity cap */
  int waiters, quit;
  int large_sends;         /* sends above kLargeSend in flight: poll fast (rationale 3) */
  /* The thread's own: the requests it polls, compact (no lock while it polls them). */
  MPI_Request *active;
  int *active_slot, *indices, n_active, cap_active;
  MPI_Status *statuses;
};

/* ---- the progress thread ------------------------------------------------------------------ */

/* Grows the thread's arrays to the slot table's capacity (under mu). 0 or LSTMD_ENOMEM. */
static int grow_active(struct lstmd_p2p *p) {
  if (p->cap_active >= p->cap) return LSTMD_OK;
  const size_t n = (size_t)p->cap;
  MPI_Request *a = realloc(p->active, n * sizeof *a);
  if (a) p->active = a;
  int *s = realloc(p->active_slot, n * sizeof *s);
  if (s) p->active_slot = s;
  int *ix = realloc(p->indices, n * sizeof *ix);
  if (ix) p->indices = ix;
  MPI_Status *st = realloc(p->statuses, n * sizeof *st);
  if (st) p->statuses = st;
  if (!a || !s || !ix || !st) return LSTMD_ENOMEM;
  p->cap_active = p->cap;
  return LSTMD_OK;
}

static void complete(struct lstmd_p2p *p, int slot, int mpi_error, const MPI_Status *st) {
  struct slot *s = &p->slots[slot];
  if (!s->is_recv && s->bytes > kLargeSend) p->large_sends--;
  s->state = SLOT_DONE;
  s->mpi_error = mpi_error;
  s->got_bytes = -1;
  if (s->is_recv && st && MPI_Get_count(st, MPI_BYTE, &s->got_bytes) != MPI_SUCCESS)
    s->got_bytes = -1;
}

/* Rationale (the threading and the protocol):
 * 1. One progress thread per lstmd_p2p owns the completion of every request: only it calls
 *    MPI_Testsome on them (MPI forbids two threads completing one request, and a wait in each
 *    caller would leave the transfers nobody waits for without progress). Open MPI moves a
 *    large message (above the eager limit, and in CI with btl_vader_single_copy_mechanism=none
 *    in copy-in/copy-out fragments) only while the sender's process is inside MPI, so a stage
 *    computing 15 ms of BLAS without this thread would stall its neighbour by as much.
 * 2. Posts (MPI_Isend/MPI_Irecv) are made by the caller's thread, outside the lock, and the
 *    request is then handed to the thread in `fresh` under the lock. MPI_THREAD_MULTIPLE allows
 *    the post to run beside the thread's Testsome (different requests). Posting at once on the
 *    caller's thread keeps the matching order exactly the program order of the schedule (MPI
 *    matches one (communicator, source, tag) in posting order), starts the eager send or the
 *    rendezvous without waiting for the thread to wake, and costs no hand-off latency; handing
 *    posts to the thread would add a wake-up per message and a second queue to order.
 * 3. Polling: every 20 µs while some caller is blocked in a wait, or while a send above 32 KB is
 *    in flight; while requests are merely in flight, from 20 µs after a post or a completion
 *    backing off by doubling to 500 µs; with nothing in flight, an untimed wait on `work`, so an
 *    idle rank costs no CPU. The sleeps are timed waits on `work`, so a new waiter or post cuts
 *    them short. Measured on the 2-core CI VM (Open MPI 4.1, vader, single_copy=none): one
 *    poll-and-sleep costs ~20 µs of CPU (mostly the VM's context switch), so 500 µs polls cost
 *    ~5% of a core and 20 µs polls ~50%; the sender's process pushes ~90 KB of copy-in/copy-out
 *    fragments per poll, so an 8 MB send took 88 / 45 / 8 ms with the sender polling every
 *    1000 / 500 / 20 µs. Hence the fast polls for large sends: they last as long as the
 *    transfer. A receiver that computes moves fragments at its 500 µs polls until it waits
 *    (then 20 µs); with single-copy (CMA, the default) one poll per side moves a whole message.
 * 4. Testsome runs without the lock on the thread's own compact array; completions are written
 *    to the slots under the lock and broadcast on `done`. Waiters sleep on `done` with a
 *    CLOCK_MONOTONIC deadline and never call MPI, so a stalled peer cannot hang them: past the
 *    deadline they print and lstmd_comm_abort, never MPI_Wait or MPI_Cancel (cancelling sends
 *    is unreliable, and pending requests would block).
 * 5. Errors: MPI_ERR_IN_STATUS (a truncated receive) fails only the requests it names, as
 *    their slot's error; any other Testsome failure fails every request in flight (MPI is then
 *    unusable here) and the waiters report it. A receive's byte count is checked by the waiter
 *    against the size posted.
 * 6. The slot table grows by doubling (posters, under the lock) up to 2^20 outstanding
 *    requests, a clear error beyond; the thread grows its arrays to match when it adopts fresh
 *    requests. A handle carries the slot's generation, so a handle waited for twice is refused. */
static void *progress_main(void *arg) {
  struct lstmd_p2p *p = arg;
#ifdef PR_SET_TIMERSLACK
  /* 1 µs timer slack: the default 50 µs would stretch the 20 µs polls */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  long backoff_ns = kPollFastNs;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    if (p->n_fresh) { /* adopt the new requests (2, 6) */
      if (grow_active(p) != LSTMD_OK) {
        for (int i = 0; i < p->n_fresh; i++) complete(p, p->fresh[i], MPI_ERR_NO_MEM, NULL);
        pthread_cond_broadcast(&p->done);
      } else {
        for (int i = 0; i < p->n_fresh; i++) {
          p->active[p->n_active] = p->slots[p->fresh[i]].req;
          p->active_slot[p->n_active++] = p->fresh[i];
        }
      }
      p->n_fresh = 0;
      backoff_ns = kPollFastNs;
    }
    if (p->quit) break;
    if (p->n_active == 0) { /* 3: nothing in flight */
      pthread_cond_wait(&p->work, &p->mu);
      continue;
    }
    pthread_mutex_unlock(&p->mu);
    int n_done = 0;
    const int rc = MPI_Testsome(p->n_active, p->active, &n_done, p->indices, p->statuses);
    pthread_mutex_lock(&p->mu);
    if (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS) { /* 5 */
      if (n_done == MPI_UNDEFINED) n_done = 0;
      for (int i = 0; i < n_done; i++) {
        const MPI_Status *st = &p->statuses[i];
        const int e = rc == MPI_ERR_IN_STATUS ? st->MPI_ERROR : MPI_SUCCESS;
        complete(p, p->active_slot[p->indices[i]], e, st);
      }
    } else {
      LSTMD_MPI_FAILED(rc); /* prints MPI's text for it */
      for (int j = 0; j < p->n_active; j++) {
        complete(p, p->active_slot[j], rc, NULL);
        p->active[j] = MPI_REQUEST_NULL;
      }
      n_done = p->n_active;
    }
    if (n_done > 0) { /* compact: completed requests are MPI_REQUEST_NULL now */
      int k = 0;
      for (int j = 0; j < p->n_active; j++) {
        if (p->active[j] == MPI_REQUEST_NULL) {
          if (p->slots[p->active_slot[j]].state != SLOT_DONE) /* not named by Testsome */
            complete(p, p->active_slot[j], MPI_ERR_REQUEST, NULL);
          continue;
        }
        p->active[k] = p->active[j];
        p->active_slot[k++] = p->active_slot[j];
      }
      p->n_active = k;
      pthread_cond_broadcast(&p->done);
      backoff_ns = kPollFastNs;
    }
    if (p->n_active == 0 || p->n_fresh || p->quit) continue;
    const long ns = p->waiters || p->large_sends ? kPollFastNs : backoff_ns;
    const struct timespec until = lstmd_deadline_in(ns * 1e-9);
    pthread_cond_timedwait(&p->work, &p->mu, &until);
    if (!p->waiters && backoff_ns < kPollSlowNs)
      backoff_ns = backoff_ns * 2 < kPollSlowNs ? backoff_ns * 2 : kPollSlowNs;
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* ---- create, destroy ---------------------------------------------------------------------- */

int lstmd_p2p_create(struct lstmd_comm *c, double timeout_s, struct lstmd_p2p **out) {
  *out = NULL;
  MPI_Comm dup[2] = {MPI_COMM_NULL, MPI_COMM_NULL};
  int rc = LSTMD_OK;
  for (int d = 0; d < 2 && !rc; d++) /* the collectives first: nothing before them fails alone */
    if (LSTMD_MPI_FAILED(MPI_Comm_dup(c->world, &dup[d])) ||
        LSTMD_MPI_FAILED(MPI_Comm_set_errhandler(dup[d], MPI_ERRORS_RETURN)))
      rc = LSTMD_ECOMM;
  struct lstmd_p2p *p = rc ? NULL : calloc(1, sizeof *p);
  if (!rc && !p) rc = LSTMD_ENOMEM;
  if (!rc) {
    p->c = c;
    p->comm[0] = dup[0];
    p->comm[1] = dup[1];
    p->timeout_s = timeout_s > 0 ? timeout_s : 0;
    p->rank = c->rank;
    p->size = c->size;
    p->free_head = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &p->world_rank);
    p->world_of = malloc((size_t)c->size * sizeof *p->world_of);
    int *mine = malloc((size_t)c->size * sizeof *mine);
    MPI_Group g = MPI_GROUP_NULL, gw = MPI_GROUP_NULL;
    if (!p->world_of || !mine) {
      rc = LSTMD_ENOMEM;
    } else {
      for (int i = 0; i < c->size; i++) mine[i] = i;
      if (LSTMD_MPI_FAILED(MPI_Comm_group(c->world, &g)) ||
          LSTMD_MPI_FAILED(MPI_Comm_group(MPI_COMM_WORLD, &gw)) ||
          LSTMD_MPI_FAILED(MPI_Group_translate_ranks(g, c->size, mine, gw, p->world_of)))
        rc = LSTMD_ECOMM;
    }
    if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
    if (gw != MPI_GROUP_NULL) MPI_Group_free(&gw);
    free(mine);
  }
  if (rc == LSTMD_ENOMEM) lstmd_errorf("p2p: out of memory");
  if (!rc) {
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca; /* both are waited on with CLOCK_MONOTONIC deadlines */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->work, &ca);
    pthread_cond_init(&p->done, &ca);
    pthread_condattr_destroy(&ca);
    const int e = pthread_create(&p->thread, NULL, progress_main, p);
    if (e != 0) {
      lstmd_errorf("cannot start the p2p progress thread: %s", strerror(e));
      pthread_mutex_destroy(&p->mu);
      pthread_cond_destroy(&p->work);
      pthread_cond_destroy(&p->done);
      rc = LSTMD_ENOMEM;
    } else {
      p->thread_started = 1;
      pthread_setname_np(p->thread, "lstmd-p2p");
    }
  }
  if (rc) {
    if (p) {
      p->comm[0] = p->comm[1] = MPI_COMM_NULL; /* freed below */
      lstmd_p2p_destroy(p);
    }
    for (int d = 0; d < 2; d++)
      if (dup[d] != MPI_COMM_NULL) MPI_Comm_free(&dup[d]);
    return rc;
  }
  *out = p;
  return LSTMD_OK;
}

void lstmd_p2p_destroy(struct lstmd_p2p *p) {
  if (!p) return;
  if (p->thread_started) {
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
  }
  /* Requests still in flight (a failing caller) are abandoned: MPI_Comm_free lets them finish. */
  for (int d = 0; d < 2; d++)
    if (p->comm[d] != MPI_COMM_NULL) MPI_Comm_free(&p->comm[d]);
  free(p->world_of);
  free(p->slots);
  free(p->fresh);
  free(p->active);
  free(p->active_slot);
  free(p->indices);
  free(p->statuses);
  free(p);
}

/* ---- posts -------------------------------------------------------------------------------- */

static const char *dir_name(int dir) { return dir == LSTMD_P2P_UP ? "up" : "down"; }

/* Rank r of c for messages, with its host when host is not NULL: "rank 2 (host)" where c is the
 * world, "rank 2 (world rank 5, host)" where it is not, "stage 2 (rank 5, host)" where c's ranks
 * have a noun (lstmd_p2p_name_ranks). */
static void rank_name(const struct lstmd_p2p *p, int r, const char *host, char *buf, size_t n) {
  const int w = r >= 0 && r < p->size ? p->world_of[r] : r;
  const char *sep = host ? ", " : "", *h = host ? host : "";
  if (p->noun) snprintf(buf, n, "%s %d (rank %d%s%s)", p->noun, r, w, sep, h);
  else if (w != r) snprintf(buf, n, "rank %d (world rank %d%s%s)", r, w, sep, h);
  else if (host) snprintf(buf, n, "rank %d (%s)", r, host);
  else snprintf(buf, n, "rank %d", r);
}

void lstmd_p2p_name_ranks(struct lstmd_p2p *p, const char *noun) { p->noun = noun; }

/* A free slot (under mu), growing the table (6). -1 when it cannot. */
static int alloc_slot(struct lstmd_p2p *p) {
  if (p->free_head < 0) {
    if (p->cap >= kMaxSlots) return -1;
    const int cap = p->cap ? 2 * p->cap : 256;
    struct slot *s = realloc(p->slots, (size_t)cap * sizeof *s);
    if (!s) return -1;
    p->slots = s;
    int *f = realloc(p->fresh, (size_t)cap * sizeof *f);
    if (!f) return -1; /* the slots grew; the next try grows fresh only */
    p->fresh = f;
    for (int i = cap - 1; i >= p->cap; i--) {
      memset(&s[i], 0, sizeof s[i]);
      s[i].next_free = p->free_head;
      p->free_head = i;
    }
    p->cap = cap;
  }
  const int i = p->free_head;
  p->free_head = p->slots[i].next_free;
  p->slots[i].gen = (p->slots[i].gen + 1) & kGenMask;
  p->in_use++;
  return i;
}

static void free_slot(struct lstmd_p2p *p, int i) {
  p->slots[i].state = SLOT_FREE;
  p->slots[i].next_free = p->free_head;
  p->free_head = i;
  p->in_use--;
}

static int post(struct lstmd_p2p *p, int is_recv, int dir, int peer, int tag, void *buf,
                size_t bytes, const char *what, lstmd_p2p_req *out) {
  *out = -1;
  const char *verb = is_recv ? "receive" : "send";
  if (dir != LSTMD_P2P_UP && dir != LSTMD_P2P_DOWN) {
    lstmd_errorf("p2p %s of %s: bad direction %d", verb, what ? what : "?", dir);
    return LSTMD_EINVAL;
  }
  if (peer < 0 || peer >= p->size || tag < 0 || tag > LSTMD_P2P_MAX_TAG || bytes > INT_MAX ||
      (bytes && !buf)) {
    lstmd_errorf("p2p %s of %s: peer %d (of %d ranks), tag %d (0..%d) or size %zu bytes (< 2^31) "
                 "out of range", verb, what ? what : "?", peer, p->size, tag, LSTMD_P2P_MAX_TAG, bytes);
    return LSTMD_EINVAL;
  }
  pthread_mutex_lock(&p->mu);
  const int i = alloc_slot(p);
  if (i < 0) {
    pthread_mutex_unlock(&p->mu);
    lstmd_errorf("p2p %s of %s: cannot hold more than %d outstanding requests (out of memory, "
                 "or too many never waited for)", verb, what ? what : "?", p->cap);
    return LSTMD_ENOMEM;
  }
  struct slot *s = &p->slots[i];
  s->state = SLOT_POSTING;
  s->is_recv = is_recv;
  s->dir = dir;
  s->peer = peer;
  s->tag = tag;
  s->bytes = bytes;
  snprintf(s->what, sizeof s->what, "%s", what ? what : "(unnamed item)");
  const int handle = (s->gen << kIdxBits) | i;
  pthread_mutex_unlock(&p->mu);
  MPI_Request req; /* 2: posted here, outside the lock */
  const int n = (int)bytes; /* checked above: < 2^31 */
  const int failed = is_recv ? LSTMD_MPI_FAILED(MPI_Irecv(buf, n, MPI_BYTE, peer, tag, p->comm[dir], &req))
                             : LSTMD_MPI_FAILED(MPI_Isend(buf, n, MPI_BYTE, peer, tag, p->comm[dir], &req));
  pthread_mutex_lock(&p->mu);
  if (failed) {
    free_slot(p, i);
  } else {
    p->slots[i].req = req;
    p->slots[i].state = SLOT_IN_FLIGHT;
    if (!is_recv && bytes > kLargeSend) p->large_sends++;
    p->fresh[p->n_fresh++] = i; /* fresh holds at most cap entries: one per slot in use */
    pthread_cond_signal(&p->work);
  }
  pthread_mutex_unlock(&p->mu);
  if (failed) return LSTMD_ECOMM;
  *out = handle;
  return LSTMD_OK;
}

int lstmd_p2p_irecv(struct lstmd_p2p *p, int dir, int peer, int tag, void *buf, size_t bytes,
                    const char *what, lstmd_p2p_req *out) {
  return post(p, 1, dir, peer, tag, buf, bytes, what, out);
}

int lstmd_p2p_isend(struct lstmd_p2p *p, int dir, int peer, int tag, const void *buf, size_t bytes,
                    const char *what, lstmd_p2p_req *out) {
  return post(p, 0, dir, peer, tag, (void *)buf, bytes, what, out);
}

/* ---- waits -------------------------------------------------------------------------------- */

/* Checks a completed slot and frees it (under mu): 0 or LSTMD_ECOMM with a message naming both
 * ranks. */
static int finish(struct lstmd_p2p *p, int i) {
  struct slot *s = &p->slots[i];
  int rc = LSTMD_OK;
  char me[320], peer[64];
  rank_name(p, p->rank, p->c->host, me, sizeof me);
  rank_name(p, s->peer, NULL, peer, sizeof peer);
  if (s->mpi_error != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (s->mpi_error == MPI_ERR_NO_MEM)
      snprintf(text, sizeof text, "out of memory in the p2p engine");
    else if (MPI_Error_string(s->mpi_error, text, &len) != MPI_SUCCESS)
      snprintf(text, sizeof text, "MPI error %d", s->mpi_error);
    lstmd_errorf("%s: p2p %s of %s %s %s failed (tag %d, %s, %zu bytes posted): %s%s", me,
                 s->is_recv ? "receive" : "send", s->what, s->is_recv ? "from" : "to",
                 peer, s->tag, dir_name(s->dir), s->bytes, text,
                 s->mpi_error == MPI_ERR_TRUNCATE ? " (the message is longer than the size posted)" : "");
    rc = LSTMD_ECOMM;
  } else if (s->is_recv && (s->got_bytes < 0 || (size_t)s->got_bytes != s->bytes)) {
    lstmd_errorf("%s: p2p receive of %s from %s: got %d bytes, expected %zu (tag %d, %s)", me,
                 s->what, peer, s->got_bytes, s->bytes, s->tag, dir_name(s->dir));
    rc = LSTMD_ECOMM;
  }
  free_slot(p, i);
  return rc;
}

/* Past the deadline (4): names what is unfinished, then ends the job. Called with mu held. */
static void deadline_abort(struct lstmd_p2p *p, const int *slots, int n, int n_unfinished, double waited) {
  char me[320], peer[64];
  rank_name(p, p->rank, p->c->host, me, sizeof me);
  for (int k = 0; k < n; k++) {
    const struct slot *s = &p->slots[slots[k]];
    rank_name(p, s->peer, NULL, peer, sizeof peer);
    char stuck[512];
    lstmd_errorf("%s waited %.1f s for %s %s %s (p2p %s, tag %d, %s, %zu bytes): not complete "
                 "after train.comm_timeout_s = %g s%s; ending the job", me, waited,
                 s->what, s->is_recv ? "from" : "to", peer, s->is_recv ? "receive" : "send", s->tag,
                 dir_name(s->dir), s->bytes, p->timeout_s,
                 lstmd_peers_describe_stuck(stuck, sizeof stuck));
  }
  if (n_unfinished > n) lstmd_errorf("%s: and %d more unfinished p2p requests", me, n_unfinished - n);
  fflush(stderr);
  pthread_mutex_unlock(&p->mu);
  lstmd_comm_abort(p->c, 1);
}

/* Sleeps (under mu) until slot i is no longer in flight or the deadline `end` passes (0: no
 * deadline); 0 or ETIMEDOUT. Wakes at least every 50 ms to look for a peer process that is gone
 * (peers.h: the job then ends, naming it). */
static int sleep_until_done(struct lstmd_p2p *p, int i, double began, double end) {
  while (p->slots[i].state == SLOT_POSTING || p->slots[i].state == SLOT_IN_FLIGHT)
    if (lstmd_peers_cond_wait(&p->done, &p->mu, began, end, p->slots[i].what)) return ETIMEDOUT;
  return 0;
}

int lstmd_p2p_wait(struct lstmd_p2p *p, lstmd_p2p_req r, double *waited_s) {
  const double t0 = lstmd_now_s(), end = p->timeout_s > 0 ? t0 + p->timeout_s : 0.0;
  const int i = r & (kMaxSlots - 1), gen = r >> kIdxBits;
  pthread_mutex_lock(&p->mu);
  if (r < 0 || i >= p->cap || p->slots[i].state == SLOT_FREE || p->slots[i].gen != gen) {
    pthread_mutex_unlock(&p->mu);
    lstmd_errorf("p2p wait: unknown handle %d (never posted, or already waited for)", r);
    return LSTMD_EINVAL;
  }
  p->waiters++;
  pthread_cond_signal(&p->work); /* 3: poll fast from now on */
  if (sleep_until_done(p, i, t0, end)) deadline_abort(p, &i, 1, 1, lstmd_now_s() - t0);
  p->waiters--;
  const int rc = finish(p, i);
  pthread_mutex_unlock(&p->mu);
  if (waited_s) *waited_s += lstmd_now_s() - t0;
  return rc;
}

int lstmd_p2p_wait_all(struct lstmd_p2p *p, double *waited_s) {
  const double t0 = lstmd_now_s(), end = p->timeout_s > 0 ? t0 + p->timeout_s : 0.0;
  int rc = LSTMD_OK;
  pthread_mutex_lock(&p->mu);
  p->waiters++;
  pthread_cond_signal(&p->work);
  for (int i = 0; i < p->cap; i++) {
    if (p->slots[i].state == SLOT_FREE) continue;
    if (sleep_until_done(p, i, t0, end)) {
      int show[kShowAtDeadline], n_show = 0, n_unfinished = 0;
      for (int j = i; j < p->cap; j++) {
        const int st = p->slots[j].state;
        if (st != SLOT_POSTING && st != SLOT_IN_FLIGHT) continue;
        if (n_show < kShowAtDeadline) show[n_show++] = j;
        n_unfinished++;
      }
      deadline_abort(p, show, n_show, n_unfinished, lstmd_now_s() - t0);
    }
    if (p->slots[i].state != SLOT_DONE) continue; /* its post failed meanwhile */
    const int e = finish(p, i);
    if (e && !rc) rc = e;
  }
  p->waiters--;
  pthread_mutex_unlock(&p->mu);
  if (waited_s) *waited_s += lstmd_now_s() - t0;
  return rc;
}
