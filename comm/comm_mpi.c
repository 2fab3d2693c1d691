/* comm_mpi.c — the MPI backend of comm.h.
 *
 * 1. Every communicator gets MPI_ERRORS_RETURN before first use, so the return codes checked
 *    below are real (with the default MPI_ERRORS_ARE_FATAL such checks are dead code).
 * 2. Open MPI's blocking collectives busy-poll a core. All waits for requests here go through
 *    wait_requests_within (lstmd_comm_recv_msg, the probe for a message an idle daemon rank waits
 *    on, backs off on its own to its caller's bound): MPI_Testall, spinning briefly, then sleeping between polls for 1/16
 *    of the time waited so far (up to 2 ms in training), so a rank waiting long costs almost no
 *    CPU, while a wait is seen to end at most ~6% of its length late. A nonblocking collective
 *    moves on only inside the MPI calls of its ranks, so every sleep of one rank can delay the
 *    others too: with the interval doubling up to 2 ms after 2 ms of waiting, as it was, the
 *    pipeline's step-boundary all-reduces (the loss, the norm) took 10 ms where a partner came
 *    3 ms late, and the logged steps' straggler gather 9 ms (bench_pipeline: the 2-stage
 *    wavefront 5% faster with the proportional interval, data parallel unchanged). A wait that
 *    names no bound gets the communicator's wait limit (lstmd_comm_set_wait_limit), if it has
 *    one.
 * 3. MPI counts are int: larger buffers are sent in pieces of at most 2^30 elements.
 * 4. Sub-communicators (lstmd_comm_split) are a struct lstmd_comm like the world's, so every call
 *    here works on them; their `world` is the split itself and `grads` a dup of it for a reducer.
 *    All their collectives (split, dup) are made before anything that can fail alone (the
 *    allocation), so a rank short of memory does not leave the others stuck in a dup.
 *    lstmd_comm_abort always aborts MPI_COMM_WORLD: a stalled stage must end the whole job.
 * 5. lstmd_comm_gatherv moves 64-bit sizes at 64-bit displacements, which MPI_Gatherv's int
 *    counts and displacements cannot express. It is a collective made of simpler ones:
 *    (a) MPI_Iscatter of counts[] from root, so each rank learns the size root expects of it
 *    (nothing allocated before this collective); (b) each rank compares it with its `bytes`,
 *    allocates its requests, and all vote (lstmd_comm_agree), so a size mismatch or a failed
 *    allocation fails on every rank instead of leaving root waiting for bytes that never come;
 *    (c) point-to-point on the main thread's communicator (MPI keeps collectives and
 *    point-to-point apart, and no other thread uses it): each block in pieces of at most 2^30
 *    bytes, all posted at once, matched in order (one tag; MPI does not let messages of one
 *    pair and tag overtake each other). Root copies its own block with memmove. */
#define _GNU_SOURCE
#include "comm.h"
#include "comm_internal.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/check.h"
#include "kernels/clock.h"
#include "peers.h"

enum { kPiece = 1 << 30 };

/* Polls n requests, sleeping between polls for 1/16 of the time waited so far (see 2.), up to
 * max_sleep_ns (2 ms), and looking for a lost peer (peers.h). With timeout_s > 0, requests unfinished that long after the
 * wait began end the job with a message naming `what` (never MPI_Wait or MPI_Cancel on them: a
 * stopped peer must not hang this rank). */
static int wait_requests_within(const struct lstmd_comm *c, int n, MPI_Request *r,
                                long max_sleep_ns, double timeout_s, const char *what) {
  const double limit = c && c->limit_owner ? c->limit_owner->wait_limit_s : 0.0;
  const int from_limit = timeout_s <= 0 && limit > 0;
  if (from_limit) { /* a run's bound on every wait (comm.h) */
    timeout_s = limit;
    if (!what) what = "a collective of the run";
  }
  const double began = lstmd_now_s();
  for (int spins = 0;; spins++) {
    int done = 0;
    LSTMD_CHECK_MPI(MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE));
    if (done) return LSTMD_OK;
    if (spins < 200) continue;
    lstmd_peers_check_while_waiting(began, what ? what : "the other ranks (a collective)");
    if (timeout_s > 0 && lstmd_now_s() - began > timeout_s) {
      char stuck[512];
      /* where the limit comes from (trainer.c: train.comm_timeout_s, or during set-up a bound
       * of its own): a set-up wait of 600 s reported as a comm_timeout_s the user never set
       * would mislead */
      const char *source = from_limit ? c->limit_owner->wait_limit_source : NULL;
      lstmd_errorf("rank %d (%s): %s unfinished after %.1f s (its limit: %g s%s%s): a rank may be "
                   "stopped or hung%s; ending the job", c->world_rank, c->host, what,
                   lstmd_now_s() - began, timeout_s, source ? ", " : "", source ? source : "",
                   lstmd_peers_describe_stuck(stuck, sizeof stuck));
      lstmd_comm_abort((struct lstmd_comm *)c, 1);
    }
    lstmd_comm_poll_pause(began, max_sleep_ns);
  }
}

void lstmd_comm_poll_pause(double began_s, long max_ns) {
  const double ns = (lstmd_now_s() - began_s) * 1e9 / 16;
  const long pause = ns < 1000 ? 1000 : ns > max_ns ? max_ns : (long)ns;
  struct timespec ts = {pause / 1000000000L, pause % 1000000000L};
  nanosleep(&ts, NULL);
}

/* Bounded only by c's wait limit, if it has one. */
static int wait_requests(const struct lstmd_comm *c, int n, MPI_Request *r) {
  return wait_requests_within(c, n, r, 2000000L, 0.0, NULL);
}

static int wait_request(const struct lstmd_comm *c, MPI_Request *r) { return wait_requests(c, 1, r); }

/* MPI_Init and MPI_Finalize wait for every rank (Open MPI 4: PMIx fences), unbounded: a peer
 * stopped (SIGSTOP, a frozen node) in its start-up, or after the run's last collective, held the
 * others there forever (user trials; at the end the run was done and its checkpoint written).
 * With a limit, a watchdog thread ends the process once the call has taken longer, naming a
 * stopped or lost peer of this host where it can (after MPI_Init's all-gather of the process
 * table). _exit, not MPI_Abort, which could wait on the call in progress: the launcher sees a
 * rank end without finalizing and ends the others, the stopped one included. */
struct mpi_watch {
  const char *call, *exiting; /* "MPI_Init"; the message's end: how this rank leaves */
  int rank;                 /* world rank, -1 unknown */
  const char *host, *source;
  double limit_s;
  atomic_int done;
  pthread_t thread;
  int running;
};

static void *mpi_watchdog(void *arg) {
  struct mpi_watch *w = arg;
  const double began = lstmd_now_s();
  while (!atomic_load(&w->done)) {
    if (lstmd_now_s() - began > w->limit_s) {
      char stuck[512], who[MPI_MAX_PROCESSOR_NAME + 32] = "";
      if (w->rank >= 0) snprintf(who, sizeof who, "rank %d (%s): ", w->rank, w->host);
      lstmd_errorf("%s%s unfinished after %.1f s (its limit: %g s, %s): a rank may be stopped or "
                   "hung%s; %s", who, w->call, lstmd_now_s() - began, w->limit_s, w->source,
                   lstmd_peers_describe_stuck(stuck, sizeof stuck), w->exiting);
      lstmd_peers_announce_end();
      _exit(1);
    }
    lstmd_sleep_us(10000);
  }
  return NULL;
}

/* No watchdog without a limit, or when the thread cannot be made (the call is then unbounded). */
static void watch_begin(struct mpi_watch *w) {
  w->running = w->limit_s > 0 && pthread_create(&w->thread, NULL, mpi_watchdog, w) == 0;
}

static void watch_end(struct mpi_watch *w) {
  if (!w->running) return;
  atomic_store(&w->done, 1);
  pthread_join(w->thread, NULL);
}

static double g_init_limit_s;
static const char *g_init_limit_source;

void lstmd_comm_set_init_limit(double seconds, const char *source) {
  g_init_limit_s = seconds > 0 ? seconds : 0.0;
  g_init_limit_source = source;
}

int lstmd_comm_launcher_rank(void) {
  static const char *const kVars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof kVars / sizeof *kVars; i++) {
    const char *v = getenv(kVars[i]);
    if (v && *v) return atoi(v);
  }
  return -1;
}

int lstmd_comm_init(int *argc, char ***argv, struct lstmd_comm **out) {
  *out = NULL;
  struct lstmd_comm *c = calloc(1, sizeof *c);
  if (!c) return LSTMD_ENOMEM;
  int initialized = 0, provided = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    /* An lstmd started without a launcher is an MPI singleton, and Open MPI 4 then forks an
     * orted that outlives us and removes the session folder (ompi.HOST.UID) after we exit,
     * racing whatever mpirun starts next there ("orte_init failed", seen in CI). lstmd never
     * spawns, so it needs no orted: isolated singletons clean up before exit. A launcher's
     * ranks are not singletons and ignore it; a user's own setting wins. */
    lstmd_comm_note_launch_env();
    setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    gethostname(host, sizeof host - 1);
    struct mpi_watch w = {.call = "MPI_Init", .exiting = "exiting before the run began", .rank = lstmd_comm_launcher_rank(),
                          .host = host, .limit_s = g_init_limit_s, .source = g_init_limit_source};
    watch_begin(&w);
    const int init_rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    watch_end(&w);
    if (init_rc != MPI_SUCCESS) {
      lstmd_errorf("MPI_Init_thread failed");
      free(c);
      return LSTMD_ECOMM;
    }
    c->we_initialized = 1;
  } else {
    MPI_Query_thread(&provided);
  }
  c->rank = -1;
  if (provided < MPI_THREAD_MULTIPLE) {
    lstmd_errorf("the MPI library does not provide MPI_THREAD_MULTIPLE");
    lstmd_comm_finalize(c);
    return LSTMD_ECOMM;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int len = 0;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &c->world) != MPI_SUCCESS ||
      MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
      MPI_Comm_dup(MPI_COMM_WORLD, &c->grads) != MPI_SUCCESS ||
      MPI_Comm_set_errhandler(c->grads, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
      MPI_Comm_rank(c->world, &c->rank) != MPI_SUCCESS ||
      MPI_Comm_size(c->world, &c->size) != MPI_SUCCESS ||
      MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &c->local) !=
          MPI_SUCCESS ||
      MPI_Comm_set_errhandler(c->local, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
      MPI_Comm_rank(c->local, &c->local_rank) != MPI_SUCCESS ||
      MPI_Comm_size(c->local, &c->local_size) != MPI_SUCCESS ||
      MPI_Get_processor_name(c->host, &len) != MPI_SUCCESS) {
    lstmd_errorf("MPI communicator set-up failed");
    lstmd_comm_finalize(c);
    return LSTMD_ECOMM;
  }
  c->world_rank = c->rank;
  if (g_init_limit_s > 0) /* until the caller sets its own */
    lstmd_comm_set_wait_limit(c, g_init_limit_s, g_init_limit_source);
  lstmd_set_process_label(c->rank, c->host);
  if (lstmd_peers_init()) /* only a loss of the lost-peer check (peers.h): warn, go on */
    lstmd_errorf("rank %d: the process table of this host's ranks could not be made; a lost "
                 "peer will not be named", c->rank);
  *out = c;
  return LSTMD_OK;
}

void lstmd_comm_finalize(struct lstmd_comm *c) {
  if (!c) return;
  if (c->local && c->local != MPI_COMM_NULL) MPI_Comm_free(&c->local); /* NULL on a sub */
  if (c->world && c->world != MPI_COMM_NULL) MPI_Comm_free(&c->world);
  if (c->grads && c->grads != MPI_COMM_NULL) MPI_Comm_free(&c->grads);
  if (c->we_initialized) {
    struct mpi_watch w = {.call = "MPI_Finalize",
                          .exiting = "exiting without it (this rank's work had ended)",
                          .rank = c->world_rank, .host = c->host,
                          .limit_s = c->size > 1 ? c->wait_limit_s : 0.0,
                          .source = c->wait_limit_source ? c->wait_limit_source : "its wait limit"};
    watch_begin(&w);
    MPI_Finalize();
    watch_end(&w);
    lstmd_peers_free(); /* after: the watchdog names the peers */
  }
  free(c);
}

void lstmd_comm_abort(struct lstmd_comm *c, int exit_code) {
  (void)c; /* any communicator: the whole job ends (rationale 4) */
  lstmd_errors_flush_held(); /* lines this thread held for lstmd_comm_messages_once */
  lstmd_peers_announce_end(); /* after this rank's message: the others do not call it lost */
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  _exit(exit_code); /* MPI_Abort should not return */
}

/* A sub-communicator struct around w (already made, MPI_ERRORS_RETURN to be set here) with its
 * own duplicate for a reducer; collectives over w first, the allocation after (rationale 4). */
static int wrap_sub(struct lstmd_comm *c, MPI_Comm w, struct lstmd_comm **out) {
  MPI_Comm g = MPI_COMM_NULL;
  int rc = LSTMD_OK;
  if (LSTMD_MPI_FAILED(MPI_Comm_set_errhandler(w, MPI_ERRORS_RETURN)) ||
      LSTMD_MPI_FAILED(MPI_Comm_dup(w, &g)) ||
      LSTMD_MPI_FAILED(MPI_Comm_set_errhandler(g, MPI_ERRORS_RETURN)))
    rc = LSTMD_ECOMM;
  struct lstmd_comm *s = rc ? NULL : calloc(1, sizeof *s);
  if (!rc && !s) rc = LSTMD_ENOMEM;
  if (!rc && (LSTMD_MPI_FAILED(MPI_Comm_rank(w, &s->rank)) ||
              LSTMD_MPI_FAILED(MPI_Comm_size(w, &s->size))))
    rc = LSTMD_ECOMM;
  if (rc) {
    if (rc == LSTMD_ENOMEM) lstmd_errorf("out of memory for a communicator");
    free(s);
    if (g != MPI_COMM_NULL) MPI_Comm_free(&g);
    MPI_Comm_free(&w);
    return rc;
  }
  s->world = w;
  s->grads = g;
  s->world_rank = c->world_rank;
  s->limit_owner = c->limit_owner; /* the parent's limit, now and as it changes */
  s->local = MPI_COMM_NULL;
  s->local_rank = c->local_rank;
  s->local_size = c->local_size;
  s->is_sub = 1;
  memcpy(s->host, c->host, sizeof s->host);
  *out = s;
  return LSTMD_OK;
}

int lstmd_comm_split(struct lstmd_comm *c, int color, int key, struct lstmd_comm **out) {
  *out = NULL;
  MPI_Comm w = MPI_COMM_NULL;
  LSTMD_CHECK_MPI(MPI_Comm_split(c->world, color < 0 ? MPI_UNDEFINED : color, key, &w));
  if (w == MPI_COMM_NULL) return LSTMD_OK; /* color < 0: this rank joins none */
  return wrap_sub(c, w, out);
}

int lstmd_comm_dup(struct lstmd_comm *c, struct lstmd_comm **out) {
  *out = NULL;
  MPI_Comm w = MPI_COMM_NULL;
  LSTMD_CHECK_MPI(MPI_Comm_dup(c->world, &w));
  return wrap_sub(c, w, out);
}

int lstmd_comm_create_group(struct lstmd_comm *c, const int *ranks, int n, int tag,
                            struct lstmd_comm **out) {
  *out = NULL;
  MPI_Group all = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  MPI_Comm w = MPI_COMM_NULL;
  LSTMD_CHECK_MPI(MPI_Comm_group(c->world, &all));
  int rc = LSTMD_OK;
  if (LSTMD_MPI_FAILED(MPI_Group_incl(all, n, ranks, &members)) ||
      LSTMD_MPI_FAILED(MPI_Comm_create_group(c->world, members, tag, &w)))
    rc = LSTMD_ECOMM;
  if (members != MPI_GROUP_NULL) MPI_Group_free(&members);
  MPI_Group_free(&all);
  if (rc) return rc;
  if (w == MPI_COMM_NULL) {
    lstmd_errorf("rank %d: MPI_Comm_create_group: this rank is not in the group", c->world_rank);
    return LSTMD_EINVAL;
  }
  return wrap_sub(c, w, out);
}

int lstmd_comm_send_msg(struct lstmd_comm *c, int dest, int tag, const void *buf, size_t bytes) {
  if (bytes > INT_MAX) {
    lstmd_errorf("a control message of %zu bytes is too large", bytes);
    return LSTMD_EINVAL;
  }
  MPI_Request r;
  LSTMD_CHECK_MPI(MPI_Isend(buf, (int)bytes, MPI_BYTE, dest, tag, c->world, &r));
  return wait_request(c, &r);
}

int lstmd_comm_isend_msg(struct lstmd_comm *c, int dest, int tag, const void *buf, size_t bytes,
                         struct lstmd_comm_send **out) {
  *out = NULL;
  if (bytes > INT_MAX) {
    lstmd_errorf("a control message of %zu bytes is too large", bytes);
    return LSTMD_EINVAL;
  }
  struct lstmd_comm_send *s = malloc(sizeof *s);
  if (!s) return LSTMD_ENOMEM;
  if (LSTMD_MPI_FAILED(MPI_Isend(buf, (int)bytes, MPI_BYTE, dest, tag, c->world, &s->req))) {
    free(s);
    return LSTMD_ECOMM;
  }
  *out = s;
  return LSTMD_OK;
}

int lstmd_comm_send_test(struct lstmd_comm_send *s, int *done) {
  *done = 1;
  if (!s) return LSTMD_OK;
  if (LSTMD_MPI_FAILED(MPI_Test(&s->req, done, MPI_STATUS_IGNORE))) return LSTMD_ECOMM;
  if (*done) free(s);
  return LSTMD_OK;
}

int lstmd_comm_recv_msg(struct lstmd_comm *c, int source, int tag, double wait_s,
                        double max_sleep_ms, void **buf, size_t *bytes, int *src, int *tag_out) {
  *buf = NULL;
  *bytes = 0;
  const double began = lstmd_now_s();
  long sleep_ns = 20000, max_ns = (long)(max_sleep_ms * 1e6);
  if (max_ns < sleep_ns) max_ns = sleep_ns;
  for (;;) {
    int found = 0;
    MPI_Message m;
    MPI_Status st;
    LSTMD_CHECK_MPI(MPI_Improbe(source < 0 ? MPI_ANY_SOURCE : source, tag < 0 ? MPI_ANY_TAG : tag,
                                c->world, &found, &m, &st));
    if (found) {
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      void *p = count > 0 ? malloc((size_t)count) : NULL;
      if (count > 0 && !p) return LSTMD_ENOMEM; /* the matched message is lost: the caller ends */
      char dummy;
      LSTMD_CHECK_MPI(MPI_Mrecv(p ? p : &dummy, count, MPI_BYTE, &m, MPI_STATUS_IGNORE));
      *buf = p;
      *bytes = (size_t)count;
      if (src) *src = st.MPI_SOURCE;
      if (tag_out) *tag_out = st.MPI_TAG;
      return LSTMD_OK;
    }
    const double waited = lstmd_now_s() - began;
    if (wait_s >= 0 && waited >= wait_s) return 1;
    long ns = sleep_ns;
    if (wait_s >= 0 && (wait_s - waited) * 1e9 < ns) ns = (long)((wait_s - waited) * 1e9) + 1;
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
    if (sleep_ns < max_ns) sleep_ns = sleep_ns * 2 < max_ns ? sleep_ns * 2 : max_ns;
  }
}

void lstmd_comm_free(struct lstmd_comm *sub) {
  if (!sub) return;
  if (!sub->is_sub) {
    lstmd_errorf("lstmd_comm_free: not a sub-communicator (the world's goes to lstmd_comm_finalize)");
    return;
  }
  lstmd_comm_finalize(sub); /* frees its communicators; we_initialized is 0, so no MPI_Finalize */
}

void lstmd_comm_set_wait_limit(struct lstmd_comm *c, double seconds, const char *source) {
  if (!c) return;
  c->wait_limit_s = seconds > 0 ? seconds : 0.0;
  c->wait_limit_source = source;
  c->limit_owner = c; /* its own from now on, and that of the communicators made from it */
}

int lstmd_comm_rank(const struct lstmd_comm *c) { return c->rank; }
int lstmd_comm_size(const struct lstmd_comm *c) { return c->size; }
int lstmd_comm_local_rank(const struct lstmd_comm *c) { return c->local_rank; }
int lstmd_comm_local_size(const struct lstmd_comm *c) { return c->local_size; }
const char *lstmd_comm_host(const struct lstmd_comm *c) { return c->host; }

void lstmd_comm_describe_library(char *buf, size_t n) {
  int major = 0, minor = 0, len = 0;
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  lib[0] = 0;
  MPI_Get_version(&major, &minor);
  MPI_Get_library_version(lib, &len);
  lib[strcspn(lib, "\n")] = 0; /* Open MPI adds the release date etc. on later lines */
  size_t l = strlen(lib);
  while (l > 0 && (lib[l - 1] == ' ' || lib[l - 1] == ',')) lib[--l] = 0;
  snprintf(buf, n, "MPI %d.%d, %s", major, minor, lib[0] ? lib : "(unknown library)");
}

/* timeout_s > 0: bounded, as wait_requests_within (what names the wait); 0: c's wait limit. */
static int allreduce_within(struct lstmd_comm *c, const void *src, void *dst, int count,
                            MPI_Datatype type, MPI_Op op, double timeout_s, const char *what) {
  MPI_Request r;
  LSTMD_CHECK_MPI(MPI_Iallreduce(src, dst, count, type, op, c->world, &r));
  return wait_requests_within(c, 1, &r, 2000000L, timeout_s, what);
}

static int allreduce(struct lstmd_comm *c, const void *src, void *dst, int count,
                     MPI_Datatype type, MPI_Op op) {
  return allreduce_within(c, src, dst, count, type, op, 0.0, NULL);
}

int lstmd_comm_allreduce_sum_f32_within(struct lstmd_comm *c, float *buf, size_t n,
                                        double timeout_s, const char *what) {
  for (size_t off = 0; off < n; off += kPiece) {
    int count = n - off < kPiece ? (int)(n - off) : kPiece;
    LSTMD_TRY(allreduce_within(c, MPI_IN_PLACE, buf + off, count, MPI_FLOAT, MPI_SUM, timeout_s, what));
  }
  return LSTMD_OK;
}

int lstmd_comm_allreduce_sum_f32(struct lstmd_comm *c, float *buf, size_t n) {
  return lstmd_comm_allreduce_sum_f32_within(c, buf, n, 0.0, NULL);
}

int lstmd_comm_allreduce_sum_f32_to(struct lstmd_comm *c, const float *src, float *dst, size_t n) {
  for (size_t off = 0; off < n; off += kPiece) {
    int count = n - off < kPiece ? (int)(n - off) : kPiece;
    LSTMD_TRY(allreduce(c, src + off, dst + off, count, MPI_FLOAT, MPI_SUM));
  }
  return LSTMD_OK;
}

int lstmd_comm_allreduce_sum_f64(struct lstmd_comm *c, double *buf, int n) {
  return allreduce(c, MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM);
}

int lstmd_comm_allreduce_sum_f64_within(struct lstmd_comm *c, double *buf, int n,
                                         double timeout_s, const char *what) {
  return allreduce_within(c, MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, timeout_s, what);
}

int lstmd_comm_allreduce_max_f64(struct lstmd_comm *c, double *buf, int n) {
  return allreduce(c, MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_MAX);
}

int lstmd_comm_agree(struct lstmd_comm *c, int my_status, int *failed_rank) {
  return lstmd_comm_agree_within(c, my_status, failed_rank, 0.0, NULL);
}

int lstmd_comm_agree_within(struct lstmd_comm *c, int my_status, int *failed_rank,
                            double timeout_s, const char *what) {
  if (failed_rank) *failed_rank = my_status ? (c ? c->rank : 0) : -1;
  if (!c || c->size == 1) return my_status;
  struct {
    int status, rank;
  } vote = {my_status < 0 ? my_status : 0, c->rank};
  LSTMD_TRY(allreduce_within(c, MPI_IN_PLACE, &vote, 1, MPI_2INT, MPI_MINLOC, timeout_s, what));
  if (failed_rank) *failed_rank = vote.status ? vote.rank : -1; /* the same on every rank */
  if (vote.status == 0) return LSTMD_OK;
  return my_status ? my_status : vote.status;
}

int lstmd_comm_agree_alloc(struct lstmd_comm *c, int ok, size_t bytes, const char *what) {
  int failed = -1;
  const int rc = lstmd_comm_agree(c, ok ? LSTMD_OK : LSTMD_ENOMEM, &failed);
  const int rank = c ? c->rank : 0;
  char size[48] = "";
  if (bytes) snprintf(size, sizeof size, " (%zu bytes)", bytes);
  if (!ok) lstmd_errorf("rank %d (%s): out of memory for %s%s", rank, c ? c->host : "-", what, size);
  else if (rc == LSTMD_ENOMEM && failed >= 0 && rank == 0)
    lstmd_errorf("stopping every rank: rank %d is out of memory for %s", failed, what);
  return rc;
}

int lstmd_comm_bcast(struct lstmd_comm *c, void *buf, size_t bytes, int root) {
  for (size_t off = 0; off < bytes; off += kPiece) {
    int count = bytes - off < kPiece ? (int)(bytes - off) : kPiece;
    MPI_Request r;
    LSTMD_CHECK_MPI(MPI_Ibcast((char *)buf + off, count, MPI_BYTE, root, c->world, &r));
    LSTMD_TRY(wait_request(c, &r));
  }
  return LSTMD_OK;
}

int lstmd_comm_gather(struct lstmd_comm *c, const void *in, size_t bytes, void *out, int root) {
  if (bytes > INT_MAX) {
    lstmd_errorf("gather of %zu bytes per rank is too large", bytes);
    return LSTMD_EINVAL;
  }
  MPI_Request r;
  LSTMD_CHECK_MPI(MPI_Igather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, root, c->world, &r));
  return wait_request(c, &r);
}

int lstmd_comm_gather_within(struct lstmd_comm *c, const void *in, size_t bytes, void *out,
                             int root, double timeout_s, const char *what) {
  if (bytes > INT_MAX) {
    lstmd_errorf("gather of %zu bytes per rank is too large", bytes);
    return LSTMD_EINVAL;
  }
  MPI_Request r;
  LSTMD_CHECK_MPI(MPI_Igather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, root, c->world, &r));
  return wait_requests_within(c, 1, &r, 2000000L, timeout_s, what);
}

int lstmd_comm_barrier(struct lstmd_comm *c) {
  MPI_Request r;
  LSTMD_CHECK_MPI(MPI_Ibarrier(c->world, &r));
  return wait_request(c, &r);
}

/* Rationale 5. */
int lstmd_comm_gatherv_pieces(struct lstmd_comm *c, const void *in, size_t bytes, void *out,
                              const size_t *counts, const size_t *displs, int root, size_t piece) {
  _Static_assert(sizeof(size_t) == sizeof(uint64_t), "counts[] is scattered as MPI_UINT64_T");
  enum { kTag = 1 };
  if (piece == 0 || piece > (size_t)kPiece || root < 0 || root >= c->size) {
    lstmd_errorf("gatherv: bad root %d or piece size %zu", root, piece);
    return LSTMD_EINVAL; /* the same arguments on every rank: every rank returns here */
  }
  const int me = c->rank, n = c->size;
  /* (a) */
  uint64_t expect = 0;
  MPI_Request r;
  LSTMD_CHECK_MPI(MPI_Iscatter(counts, 1, MPI_UINT64_T, &expect, 1, MPI_UINT64_T, root, c->world, &r));
  LSTMD_TRY(wait_request(c, &r));
  /* (b) */
  int rc = LSTMD_OK;
  size_t n_req = 0;
  if (expect != (uint64_t)bytes) {
    lstmd_errorf("gatherv: rank %d has %zu bytes, root rank %d expects %llu", me, bytes, root,
                 (unsigned long long)expect);
    rc = LSTMD_EINVAL;
  } else if (me != root) {
    n_req = (bytes + piece - 1) / piece;
  } else {
    for (int i = 0; i < n; i++)
      if (i != root) n_req += (counts[i] + piece - 1) / piece;
  }
  if (!rc && n_req > INT_MAX) {
    lstmd_errorf("gatherv: %zu pieces are too many", n_req); /* not with 2^30-byte pieces */
    rc = LSTMD_EINVAL;
  }
  MPI_Request *reqs = NULL;
  if (!rc && n_req && !(reqs = malloc(n_req * sizeof *reqs))) rc = LSTMD_ENOMEM;
  int failed = -1;
  const int vote = lstmd_comm_agree(c, rc, &failed);
  if (vote) {
    if (!rc && vote != LSTMD_ECOMM) lstmd_errorf("gatherv to rank %d refused: rank %d failed", root, failed);
    free(reqs);
    return vote;
  }
  /* (c) */
  size_t k = 0;
  if (me != root) {
    for (size_t off = 0; !rc && off < bytes; off += piece) {
      const int cnt = (int)(bytes - off < piece ? bytes - off : piece); /* ≤ piece ≤ 2^30 */
      if (LSTMD_MPI_FAILED(MPI_Isend((const char *)in + off, cnt, MPI_BYTE, root, kTag, c->world, &reqs[k])))
        rc = LSTMD_ECOMM;
      else
        k++;
    }
  } else {
    for (int i = 0; i < n; i++) {
      if (i == root) continue;
      char *base = (char *)out + displs[i];
      for (size_t off = 0; !rc && off < counts[i]; off += piece) {
        const int cnt = (int)(counts[i] - off < piece ? counts[i] - off : piece);
        if (LSTMD_MPI_FAILED(MPI_Irecv(base + off, cnt, MPI_BYTE, i, kTag, c->world, &reqs[k])))
          rc = LSTMD_ECOMM;
        else
          k++;
      }
    }
    if (bytes && (const char *)out + displs[root] != (const char *)in)
      memmove((char *)out + displs[root], in, bytes);
  }
  /* On a failed post the posted ones are left pending: the caller aborts the job. */
  if (!rc && k) rc = wait_requests(c, (int)k, reqs);
  free(reqs);
  return rc;
}

int lstmd_comm_gatherv(struct lstmd_comm *c, const void *in, size_t bytes, void *out,
                       const size_t *counts, const size_t *displs, int root) {
  return lstmd_comm_gatherv_pieces(c, in, bytes, out, counts, displs, root, (size_t)kPiece);
}
