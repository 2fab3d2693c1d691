/* serve_start.c — the bounded start handshake of `lstmd serve` (see serve_start.h): open starts,
 * the members' answers, the go / abandon verdicts, the unresponsive ranks, and the bounded exit.
 * Runs on rank 0's scheduler thread only (daemon/serve_sched.c); the agents' side is in
 * daemon/cli_serve.c (agent_job, agent).
 *
 * 1. Why: a job's members make its communicator with MPI_Comm_create_group, which returns only
 *    when every member has called it and has no timeout nor any way to be cancelled. One member
 *    frozen while idle (SIGSTOP, a hung node: alive, so MPI does not notice) would hang the
 *    others in it forever, the job RUNNING at step 0, and cancel and shutdown waiting for it. So
 *    no member enters it before every member is known to be alive, and that is decided in one
 *    place, here, which sees every answer: members cannot disagree (some in create_group, some
 *    not), because each one does only what this one decider tells it.
 * 2. The handshake: the start command is only an offer (job id, start id: a few dozen bytes,
 *    under every transport's eager limit, so that sending it to a frozen rank does not wait for
 *    that rank; the job's config, several KiB, would go by rendezvous and hold this thread).
 *    Each member answers "ready (job, start id)" on `up` and waits for the verdict on `down`
 *    without a deadline (agents wait on rank 0 forever when idle anyway, and rank 0 gone ends
 *    the daemon). All members ready before the deadline: "go" to each, carrying the member list,
 *    group tag, config and resume path, and the job goes on exactly as before. A member silent at the deadline: "abandon"
 *    to those that answered (back to idle), the job back to QUEUED (decided callback: not an
 *    interruption), the silent ranks marked unresponsive and named with their host in a line;
 *    the planner (daemon/sched.h) is given the usable ranks and places nothing on them.
 * 3. Waking up: an unresponsive rank that runs again (SIGCONT) reads the command it missed and
 *    answers it. That start is no longer open: the answer gets "abandon", and the rank is usable
 *    again (it answered). Nothing newer can be queued before that stale command — no job is
 *    placed on the rank while it is unresponsive, and MPI keeps the order of one sender's
 *    messages — so the rank is idle and in step with the scheduler again after this verdict.
 * 4. The deadline (`lstmd serve --start-timeout`, default LSTMD_SERVE_START_TIMEOUT_S = 10 s):
 *    an idle agent answers within one poll (at most 50 ms apart), one still freeing its last
 *    job's communicator a moment later; the slow legitimate case is an oversubscribed node where
 *    a rank waits for a core. 10 s is long against that and short against a job's own bound,
 *    train.comm_timeout_s (600 s by default, sized for a rank that writes a checkpoint while the
 *    others wait). A rank that was only slow comes back with its late answer, and its job starts
 *    again, so a deadline too short costs a restart, not a job. Tests pass a few seconds.
 * 5. The window left open: a member that freezes after its answer and before (or inside)
 *    MPI_Comm_create_group still hangs the other members there (their job stays at step 0). The
 *    "go" (several KiB, by rendezvous) is sent without waiting and progressed by each poll, so
 *    this thread, and the other jobs, go on meanwhile. It is the few
 *    milliseconds between its answer and its call; closing it would need a create_group that can
 *    time out, which MPI does not have. Once the job trains, train.comm_timeout_s bounds its
 *    waits.
 * 6. The exit: every agent answers kServeExit before MPI_Finalize, which in Open MPI waits for
 *    every rank; one that does not answer in time (frozen) is named, and the caller aborts the
 *    world instead of finalizing (every job has ended and checkpointed by then; the journal lets
 *    a restart go on). */
#include "serve_start.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/clock.h"
#include "kernels/status.h"

struct start { /* an open start: offered, not yet settled */
  uint64_t job_id, start_id;
  int *ranks, n;
  char *ready;  /* ready[k]: ranks[k] answered */
  uint8_t *go;  /* the "go" verdict: header, members, payload */
  size_t go_bytes;
  double deadline_s;
};

struct going { /* a settled start's "go", on its way to the members (rationale 5) */
  uint8_t *go; /* the buffer of every send: freed when the last one is done */
  struct lstmd_comm_send **sends;
  int n;
};

struct lstmd_start_gate {
  struct lstmd_serve_comms c;
  struct going *going;
  size_t n_going;
  struct lstmd_jobs *jobs;
  int world, n_unresponsive;
  int *usable;
  char *hosts;
  double timeout_s;
  struct start *open;
  size_t n_open;
  uint64_t next_start_id;
};

static const char *host_of(const struct lstmd_start_gate *g, int r) {
  return g->hosts + (size_t)r * LSTMD_SERVE_HOST_BYTES;
}

/* The table's listing of unresponsive ranks follows g->usable. */
static void show_unresponsive(struct lstmd_start_gate *g) {
  uint32_t *v = malloc((size_t)g->world * sizeof *v);
  if (!v) return; /* only the listing is late; placement reads g->usable */
  size_t n = 0;
  for (int r = 0; r < g->world; r++)
    if (!g->usable[r]) v[n++] = (uint32_t)r;
  lstmd_jobs_set_unresponsive(g->jobs, v, n);
  free(v);
}

/* "abandon" to a rank that answered (and so is listening). */
static int send_abandon(struct lstmd_start_gate *g, int rank, uint64_t job_id, uint64_t start_id) {
  struct lstmd_serve_verdict v = {.go = 0, .job_id = job_id, .start_id = start_id};
  return lstmd_comm_send_msg(g->c.down, rank, kServeVerdict, &v, sizeof v);
}

static void drop_start(struct lstmd_start_gate *g, size_t i) {
  free(g->open[i].ranks);
  free(g->open[i].ready);
  free(g->open[i].go);
  g->open[i] = g->open[--g->n_open];
}

int lstmd_gate_create(const struct lstmd_serve_comms *c, struct lstmd_jobs *jobs, int world,
                      const char *hosts, double timeout_s, struct lstmd_start_gate **out) {
  *out = NULL;
  struct lstmd_start_gate *g = calloc(1, sizeof *g);
  if (!g) return LSTMD_ENOMEM;
  g->c = *c;
  g->jobs = jobs;
  g->world = world;
  g->timeout_s = timeout_s;
  g->next_start_id = 1;
  g->usable = malloc((size_t)world * sizeof *g->usable);
  g->hosts = malloc((size_t)world * LSTMD_SERVE_HOST_BYTES);
  if (!g->usable || !g->hosts) {
    lstmd_gate_destroy(g);
    return LSTMD_ENOMEM;
  }
  for (int r = 0; r < world; r++) g->usable[r] = 1;
  memcpy(g->hosts, hosts, (size_t)world * LSTMD_SERVE_HOST_BYTES);
  *out = g;
  return LSTMD_OK;
}

/* The "go" sends in flight: each one done is freed, and a going with none left. */
static int progress_going(struct lstmd_start_gate *g) {
  for (size_t i = 0; i < g->n_going;) {
    struct going *w = &g->going[i];
    int left = 0;
    for (int m = 0; m < w->n; m++) {
      int done = 1;
      if (w->sends[m] && lstmd_comm_send_test(w->sends[m], &done)) return LSTMD_ECOMM;
      if (done) w->sends[m] = NULL;
      else left++;
    }
    if (left) {
      i++;
      continue;
    }
    free(w->go);
    free(w->sends);
    g->going[i] = g->going[--g->n_going];
  }
  return LSTMD_OK;
}

void lstmd_gate_destroy(struct lstmd_start_gate *g) {
  if (!g) return;
  while (g->n_open) drop_start(g, 0);
  /* a "go" still in flight (to a frozen rank: the world is being aborted) keeps its buffer */
  (void)progress_going(g);
  for (size_t i = 0; i < g->n_going; i++) free(g->going[i].sends);
  free(g->going);
  free(g->open);
  free(g->usable);
  free(g->hosts);
  free(g);
}

int lstmd_gate_open(struct lstmd_start_gate *g, uint64_t job_id, const int *ranks, int n,
                    int group_tag, const char *payload, size_t payload_len, uint64_t *start_id) {
  struct start *grown = realloc(g->open, (g->n_open + 1) * sizeof *grown);
  if (!grown) return LSTMD_ENOMEM;
  g->open = grown;
  struct lstmd_serve_verdict v = {.go = 1, .n_members = n, .group_tag = group_tag,
                                  .job_id = job_id, .start_id = g->next_start_id,
                                  .payload_len = payload_len};
  const size_t head = sizeof v + (size_t)n * sizeof(int32_t);
  struct start st = {.job_id = job_id, .start_id = v.start_id, .n = n,
                     .ranks = malloc((size_t)n * sizeof *st.ranks), .ready = calloc((size_t)n, 1),
                     .go = malloc(head + payload_len), .go_bytes = head + payload_len,
                     .deadline_s = lstmd_now_s() + g->timeout_s};
  if (!st.ranks || !st.ready || !st.go) {
    free(st.ranks);
    free(st.ready);
    free(st.go);
    return LSTMD_ENOMEM;
  }
  memcpy(st.ranks, ranks, (size_t)n * sizeof *ranks);
  memcpy(st.go, &v, sizeof v);
  for (int k = 0; k < n; k++) {
    const int32_t r = ranks[k];
    memcpy(st.go + sizeof v + (size_t)k * sizeof r, &r, sizeof r);
  }
  memcpy(st.go + head, payload, payload_len);
  g->open[g->n_open++] = st;
  *start_id = g->next_start_id++;
  return LSTMD_OK;
}

/* An answer "ready" from rank src (rationale 2 and 3). Returns 0 or LSTMD_ECOMM. */
static int on_ready(struct lstmd_start_gate *g, int src, const struct lstmd_serve_answer *a,
                    lstmd_gate_decided_fn decided, void *ctx) {
  size_t i = 0;
  int k = -1;
  for (; i < g->n_open; i++) {
    if (g->open[i].job_id != a->job_id || g->open[i].start_id != a->start_id) continue;
    for (int m = 0; m < g->open[i].n; m++)
      if (g->open[i].ranks[m] == src) k = m;
    break;
  }
  if (i == g->n_open || k < 0) { /* a start given up already: back to idle, and usable again */
    if (!g->usable[src]) {
      g->usable[src] = 1;
      g->n_unresponsive--;
      fprintf(stderr, "lstmd: rank %d (%s) answered again (late, to job %llu's abandoned start); "
              "jobs may use it again\n", src, host_of(g, src), (unsigned long long)a->job_id);
      show_unresponsive(g);
    }
    return send_abandon(g, src, a->job_id, a->start_id);
  }
  struct start *st = &g->open[i];
  st->ready[k] = 1;
  for (int m = 0; m < st->n; m++)
    if (!st->ready[m]) return LSTMD_OK;
  /* every member answered: each is listening. The sends go on in the background (progressed by
   * lstmd_gate_poll), so a member that froze since its answer holds up only its own job. */
  struct going *more = realloc(g->going, (g->n_going + 1) * sizeof *more);
  struct lstmd_comm_send **sends = more ? calloc((size_t)st->n, sizeof *sends) : NULL;
  if (more) g->going = more;
  if (!sends) return LSTMD_ENOMEM;
  for (int m = 0; m < st->n; m++) {
    const int rc = lstmd_comm_isend_msg(g->c.down, st->ranks[m], kServeVerdict, st->go,
                                        st->go_bytes, &sends[m]);
    if (rc) return rc; /* the caller ends the daemon: what was posted stays posted */
  }
  g->going[g->n_going++] = (struct going){.go = st->go, .sends = sends, .n = st->n};
  st->go = NULL; /* the going owns it now */
  const uint64_t job = st->job_id;
  drop_start(g, i);
  decided(ctx, job, 1, NULL);
  return LSTMD_OK;
}

/* Gives up start i: its deadline passed with ranks silent. Returns 0 or LSTMD_ECOMM. */
static int abandon(struct lstmd_start_gate *g, size_t i, lstmd_gate_decided_fn decided, void *ctx) {
  struct start *st = &g->open[i];
  char silent[600] = "";
  size_t at = 0;
  int n_silent = 0;
  for (int m = 0; m < st->n; m++) {
    const int r = st->ranks[m];
    if (st->ready[m]) {
      const int rc = send_abandon(g, r, st->job_id, st->start_id);
      if (rc) return rc;
      continue;
    }
    if (at < sizeof silent)
      at += (size_t)snprintf(silent + at, sizeof silent - at, "%s%d (%s)", n_silent ? ", " : "", r,
                             host_of(g, r));
    n_silent++;
    if (g->usable[r]) {
      g->usable[r] = 0;
      g->n_unresponsive++;
    }
  }
  char why[800];
  snprintf(why, sizeof why, "start abandoned: rank%s %s did not answer the start command within "
           "%g s", n_silent == 1 ? "" : "s", silent, g->timeout_s);
  fprintf(stderr, "lstmd: job %llu: %s (frozen or hung?); marked unresponsive: no job is placed "
          "on %s until %s, and the job is queued again\n", (unsigned long long)st->job_id, why,
          n_silent == 1 ? "it" : "them", n_silent == 1 ? "it answers" : "they answer");
  show_unresponsive(g);
  const uint64_t job = st->job_id;
  drop_start(g, i);
  decided(ctx, job, 0, why);
  return LSTMD_OK;
}

int lstmd_gate_poll(struct lstmd_start_gate *g, lstmd_gate_decided_fn decided, void *ctx) {
  int taken = 0;
  if (progress_going(g)) return LSTMD_ECOMM;
  for (;;) {
    void *buf;
    size_t bytes;
    int src = -1;
    int rc = lstmd_comm_recv_msg(g->c.up, -1, kServeAnswer, 0, 0, &buf, &bytes, &src, NULL);
    if (rc == 1) break;
    if (rc) return rc;
    taken++;
    struct lstmd_serve_answer a;
    const int ok = bytes == sizeof a && src >= 0 && src < g->world;
    if (ok) memcpy(&a, buf, sizeof a);
    free(buf);
    if (!ok || a.kind != kServeStart) { /* an exit answer comes only in lstmd_gate_farewell */
      lstmd_errorf("scheduler: an unexpected answer of %zu bytes from rank %d; dropped",
                   bytes, src);
      continue;
    }
    if ((rc = on_ready(g, src, &a, decided, ctx))) return rc;
  }
  const double now = lstmd_now_s();
  for (size_t i = 0; i < g->n_open;) {
    if (now < g->open[i].deadline_s) {
      i++;
      continue;
    }
    const int rc = abandon(g, i, decided, ctx); /* drops start i: look at i again */
    if (rc) return rc;
  }
  return taken;
}

const int *lstmd_gate_usable(const struct lstmd_start_gate *g) {
  return g->n_unresponsive ? g->usable : NULL;
}

int lstmd_gate_waiting(const struct lstmd_start_gate *g) {
  return (int)g->n_open + (int)g->n_going + g->n_unresponsive;
}

int lstmd_gate_farewell(struct lstmd_start_gate *g, int exit_code) {
  struct lstmd_serve_cmd bye = {.kind = kServeExit, .exit_code = exit_code};
  for (int r = 0; r < g->world; r++) {
    const int rc = lstmd_comm_send_msg(g->c.down, r, kServeCmd, &bye, sizeof bye);
    if (rc) return rc;
  }
  char *left = calloc((size_t)g->world, 1);
  if (!left) return LSTMD_ENOMEM;
  int waiting = g->world;
  const double deadline = lstmd_now_s() + g->timeout_s;
  while (waiting > 0) {
    const double wait_s = deadline - lstmd_now_s();
    if (wait_s <= 0) break;
    void *buf;
    size_t bytes;
    int src = -1;
    int rc = lstmd_comm_recv_msg(g->c.up, -1, kServeAnswer, wait_s, 20, &buf, &bytes, &src, NULL);
    if (rc == 1) break;
    if (rc) {
      free(left);
      return rc;
    }
    struct lstmd_serve_answer a;
    const int ok = bytes == sizeof a && src >= 0 && src < g->world;
    if (ok) memcpy(&a, buf, sizeof a);
    free(buf);
    if (!ok) continue;
    if (a.kind == kServeStart) { /* a rank that woke up: its stale start first, then the exit */
      if ((rc = send_abandon(g, src, a.job_id, a.start_id))) {
        free(left);
        return rc;
      }
    } else if (!left[src]) {
      left[src] = 1;
      waiting--;
    }
  }
  for (int r = 0; r < g->world; r++)
    if (!left[r])
      fprintf(stderr, "lstmd: serve: rank %d (%s) did not answer the exit command within %g s "
              "(frozen or hung?)\n", r, host_of(g, r), g->timeout_s);
  free(left);
  return waiting;
}
