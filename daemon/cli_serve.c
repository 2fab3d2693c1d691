/* cli_serve.c — `lstmd serve`: a long-lived MPI world that runs submitted jobs, several at once
 * on disjoint sets of its ranks.
 *
 * Every rank's main thread is an agent: it waits (sleeping polls) for a command from rank 0's
 * scheduler (daemon/serve_sched.c, a thread of its own on rank 0) and answers it. For a start
 * command it answers "ready" and waits for the scheduler's verdict (daemon/serve_start.c: a
 * member that does not answer in time makes the start abandoned rather than hang the others);
 * on "go" it builds the job's communicator over the job's ranks only (MPI_Comm_create_group:
 * the ranks of other jobs are not involved), trains exactly as `lstmd train` would (lstmd_train_run) on it,
 * frees it and waits again. Rank 0's main thread is an agent too, so a 2-rank world runs two
 * 1-rank jobs; its control server (server.h) and scheduler are threads beside it.
 *
 * The job's leader (its rank 0) reports progress, evaluations and the end to the scheduler and
 * polls, once per step (the trainer's stop hook), for a stop request addressed to the job. After
 * a job every member takes part in one vote over the job's communicator: whether any rank failed
 * (the lowest failing rank then broadcasts its message, which becomes the job's reason) and
 * whether any rank was signalled to stop. A failure the trainer could not make every rank see
 * (*all_know unset) leaves ranks in different places, and only then is the world aborted; the
 * journal lets a restarted daemon resume every job. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/peers.h"
#include "kernels/clock.h"
#include "kernels/status.h"
#include "worker/engine/gpu_backend.h"
#include "worker/io/durable.h"
#include "worker/train/trainer.h"
#include "access.h"
#include "blas_setup.h"
#include "cli.h"
#include "config.h"
#include "frame.h"
#include "jobs.h"
#include "serve_job.h"
#include "serve_sched.h"
#include "serve_start.h"
#include "server.h"

static volatile sig_atomic_t g_signalled; /* ranks other than 0 (rank 0 uses the server's) */

static void on_signal(int sig) {
  (void)sig;
  g_signalled = 1;
  lstmd_train_request_stop();
  lstmd_peers_signalled();
}

struct serve_opts {
  const char *socket, *state_dir, *data_root, *listen, *token_file, *group;
  long max_frame, idle_timeout;
  double start_timeout_s;
};

/* ---- a job's leader: reports to rank 0's scheduler, stop requests from it ---- */

struct leader {
  const struct lstmd_serve_comms *c;
  uint64_t job_id;
  int stop, ended, how;
  long end_step;
};

static void report(struct leader *l, struct lstmd_serve_report *r) {
  r->job_id = l->job_id;
  int rc = lstmd_comm_send_msg(l->c->up, 0, kServeReport, r, sizeof *r);
  if (rc) {
    lstmd_errorf("rank %d: cannot report to rank 0 (%s); ending the daemon",
                 lstmd_comm_rank(l->c->world), lstmd_strerror(rc));
    lstmd_comm_abort(l->c->world, 1);
  }
}

static void hook_begin(void *ctx, long step, long total_steps) {
  struct lstmd_serve_report r = {.kind = kReportBegin, .step = step, .total_steps = total_steps};
  report(ctx, &r);
}
static void hook_step(void *ctx, const struct lstmd_step_report *s) {
  struct lstmd_serve_report r = {.kind = kReportStep, .step = s->step,
                                 .total_steps = s->total_steps, .loss = s->loss, .lr = s->lr,
                                 .grad_norm = s->grad_norm, .tokens_per_s = s->tokens_per_s,
                                 .elapsed_s = s->elapsed_s, .eta_s = s->eta_s};
  report(ctx, &r);
}
static void hook_eval(void *ctx, long step, double loss, double bpc, double accuracy) {
  struct lstmd_serve_report r = {.kind = kReportEval, .step = step, .val_loss = loss, .val_bpc = bpc,
                                 .val_accuracy = accuracy};
  report(ctx, &r);
}
/* Polled once per step: a stop addressed to this job (an older job's late stop is dropped). */
static int hook_stop(void *ctx) {
  struct leader *l = ctx;
  for (;;) {
    void *buf;
    size_t bytes;
    int rc = lstmd_comm_recv_msg(l->c->down, 0, kServeStop, 0, 0, &buf, &bytes, NULL, NULL);
    if (rc == 1) break;
    if (rc) lstmd_comm_abort(l->c->world, 1);
    struct lstmd_serve_stop m;
    if (bytes == sizeof m) {
      memcpy(&m, buf, sizeof m);
      if (m.job_id == l->job_id) l->stop = 1;
    }
    free(buf);
  }
  return l->stop;
}
static void hook_end(void *ctx, long step, int how) {
  struct leader *l = ctx;
  l->end_step = step;
  l->ended = 1;
  l->how = how;
}

/* ---- every rank: one job ---- */

struct outcome {
  int rc, failed_rank, signalled;
  char reason[1024];
};

static void run_job(struct lstmd_comm *comm, const char *payload, const struct lstmd_train_hooks *hooks,
                    struct outcome *out) {
  const int rank = lstmd_comm_rank(comm), world = lstmd_comm_size(comm);
  const char *json = payload, *resume = payload + strlen(payload) + 1;
  struct lstmd_train_config cfg;
  lstmd_config_defaults(&cfg);
  int all_know = 1;
  lstmd_last_error_clear();
  int rc = lstmd_config_load_json(&cfg, json);
  char *effective = rc ? NULL : lstmd_config_to_json(&cfg);
  if (!rc && !effective) rc = LSTMD_ENOMEM;
  /* A config that does not load fails the same way on every rank (same text). */
  if (!rc) rc = lstmd_train_run(&cfg, effective, *resume ? resume : NULL, comm, hooks, &all_know);
  free(effective);
  if (rc && !all_know && world > 1) {
    lstmd_errorf("rank %d: job failed where the other ranks cannot follow (%s); stopping the "
                 "daemon (a restart resumes the job from its last checkpoint)", rank,
                 lstmd_strerror(rc));
    lstmd_comm_abort(comm, 1);
  }
  memset(out, 0, sizeof *out);
  out->rc = rc;
  /* Two votes: did the job fail anywhere (and on which rank, whose message becomes the reason),
   * and was any rank signalled to stop. */
  const int agreed = lstmd_comm_agree(comm, rc, &out->failed_rank);
  if (agreed == LSTMD_ECOMM && rc != LSTMD_ECOMM) lstmd_comm_abort(comm, 1); /* the vote failed */
  const int stop = lstmd_comm_agree(comm, g_signalled ? LSTMD_EINTERRUPTED : LSTMD_OK, NULL);
  if (stop == LSTMD_ECOMM) lstmd_comm_abort(comm, 1);
  out->signalled = stop != LSTMD_OK;
  if (out->failed_rank < 0) return;
  if (rank == out->failed_rank) {
    lstmd_last_error(out->reason, sizeof out->reason);
    if (!out->reason[0]) snprintf(out->reason, sizeof out->reason, "%s", lstmd_strerror(rc));
  }
  if (world > 1 && lstmd_comm_bcast(comm, out->reason, sizeof out->reason, out->failed_rank) != 0)
    lstmd_comm_abort(comm, 1);
  if (!out->rc) out->rc = LSTMD_EIO;
}

/* One start offer (daemon/serve_start.c): "ready" to the scheduler, then its verdict, waited for
 * without a deadline (rank 0 gone ends the daemon). On "go", which carries the job: the job's
 * communicator, the run, the report, the communicator freed. Only "go" leads into
 * MPI_Comm_create_group, which waits for every member without a bound; a member that freezes
 * between its answer and that call still hangs the others there (the window serve_start.c's
 * rationale 5 leaves open). */
static void agent_job(const struct lstmd_serve_comms *c, const struct lstmd_serve_cmd *cmd) {
  const int me = lstmd_comm_rank(c->world);
  struct lstmd_serve_answer ready = {.kind = kServeStart, .job_id = cmd->job_id,
                                     .start_id = cmd->start_id};
  int rc = lstmd_comm_send_msg(c->up, 0, kServeAnswer, &ready, sizeof ready);
  /* A test hook: LSTMD_SERVE_FREEZE_AFTER_READY=R stops world rank R (SIGSTOP) right after its
   * first answer, inside the window rationale 5 of serve_start.c leaves open, so a test can see
   * that the scheduler and the other jobs go on meanwhile. */
  static int froze;
  const char *hook = getenv("LSTMD_SERVE_FREEZE_AFTER_READY");
  if (!rc && hook && !froze && atoi(hook) == me) {
    froze = 1;
    raise(SIGSTOP);
  }
  uint8_t *msg = NULL;
  size_t bytes = 0;
  if (!rc) rc = lstmd_comm_recv_msg(c->down, 0, kServeVerdict, -1, 20, (void **)&msg, &bytes, NULL, NULL);
  struct lstmd_serve_verdict v;
  if (!rc && bytes >= sizeof v) memcpy(&v, msg, sizeof v);
  if (rc || bytes < sizeof v || v.job_id != cmd->job_id || v.start_id != cmd->start_id) {
    /* the scheduler and this rank are out of step: a job would wait for this rank */
    lstmd_errorf("rank %d: job %llu: no verdict on its start from rank 0 (%s); ending the daemon",
                 me, (unsigned long long)cmd->job_id, rc ? lstmd_strerror(rc) : "a verdict for another start");
    lstmd_comm_abort(c->world, 1);
  }
  if (!v.go) { /* abandoned: a member did not answer in time; back to idle */
    free(msg);
    return;
  }
  const size_t head = sizeof v + (size_t)(v.n_members > 0 ? v.n_members : 0) * sizeof(int32_t);
  if (v.n_members < 1 || head + v.payload_len != bytes || v.payload_len < 2) {
    lstmd_errorf("rank %d: a malformed start command; ending the daemon", me);
    lstmd_comm_abort(c->world, 1);
  }
  int *members = malloc((size_t)v.n_members * sizeof *members);
  if (!members) lstmd_comm_abort(c->world, 1);
  for (int i = 0; i < v.n_members; i++) {
    int32_t r;
    memcpy(&r, msg + sizeof v + (size_t)i * sizeof r, sizeof r);
    members[i] = r;
  }
  const char *payload = (const char *)msg + head;
  struct lstmd_comm *job = NULL;
  rc = lstmd_comm_create_group(c->groups, members, v.n_members, v.group_tag, &job);
  if (rc) { /* the other members are in the same call: nothing to vote with */
    lstmd_errorf("rank %d: job %llu: its communicator could not be made (%s); ending the daemon",
                 me, (unsigned long long)cmd->job_id, lstmd_strerror(rc));
    lstmd_comm_abort(c->world, 1);
  }
  const int leader = lstmd_comm_rank(job) == 0;
  struct leader l = {.c = c, .job_id = cmd->job_id};
  struct lstmd_train_hooks hooks = {.ctx = &l, .on_begin = hook_begin, .on_step = hook_step, .on_eval = hook_eval,
                                    .stop_requested = hook_stop, .on_end = hook_end};
  struct outcome o;
  run_job(job, payload, leader ? &hooks : NULL, &o);
  if (leader) {
    struct lstmd_serve_report r = {.kind = kReportDone, .rc = o.rc, .signalled = o.signalled,
                                   .failed_rank = o.failed_rank >= 0 ? members[o.failed_rank] : -1,
                                   .ended = l.ended, .how = l.how, .step = l.end_step};
    snprintf(r.reason, sizeof r.reason, "%s", o.reason);
    report(&l, &r);
  }
  lstmd_comm_free(job);
  free(members);
  free(msg);
}

/* Every rank's main thread: start offers until the exit command. Returns its exit code. */
static int agent(const struct lstmd_serve_comms *c) {
  for (;;) {
    void *buf;
    size_t bytes;
    /* idle: at most 20 looks a second (comm_mpi.c's idle broadcast did the same) */
    int rc = lstmd_comm_recv_msg(c->down, 0, kServeCmd, -1, 50, &buf, &bytes, NULL, NULL);
    struct lstmd_serve_cmd cmd;
    if (!rc && bytes < sizeof cmd) {
      free(buf);
      rc = LSTMD_EINVAL;
    }
    if (rc) { /* rank 0 would count on this rank for its next job: end the daemon, not the rank */
      lstmd_errorf("rank %d: cannot read the daemon's next command (%s); ending the daemon",
                   lstmd_comm_rank(c->world), lstmd_strerror(rc));
      lstmd_comm_abort(c->world, 1);
    }
    memcpy(&cmd, buf, sizeof cmd);
    free(buf);
    if (cmd.kind != kServeStart) { /* answered, so the scheduler knows this rank will finalize */
      struct lstmd_serve_answer bye = {.kind = kServeExit};
      if (lstmd_comm_send_msg(c->up, 0, kServeAnswer, &bye, sizeof bye))
        lstmd_comm_abort(c->world, 1);
      return cmd.exit_code;
    }
    agent_job(c, &cmd);
  }
}

/* Rank 0 when it cannot serve: every agent (its own is not running) is told to exit, and their
 * answers are taken (at most timeout_s); a rank that does not answer would hold MPI_Finalize,
 * so the world is aborted instead. */
static void send_exit_all(const struct lstmd_serve_comms *c, int exit_code, double timeout_s) {
  struct lstmd_serve_cmd bye = {.kind = kServeExit, .exit_code = exit_code};
  const int world = lstmd_comm_size(c->world);
  for (int r = 1; r < world; r++)
    if (lstmd_comm_send_msg(c->down, r, kServeCmd, &bye, sizeof bye)) lstmd_comm_abort(c->world, 1);
  const double deadline = lstmd_now_s() + timeout_s; /* for all the answers together */
  for (int r = 1; r < world; r++) { /* no start was sent: every answer is an exit's */
    void *buf = NULL;
    size_t bytes;
    const double left = deadline - lstmd_now_s();
    const int rc = lstmd_comm_recv_msg(c->up, -1, kServeAnswer, left > 0 ? left : 0, 20, &buf,
                                       &bytes, NULL, NULL);
    free(buf);
    if (rc) {
      lstmd_errorf("serve: %d rank(s) did not answer the exit command within %g s; aborting",
                   world - r, timeout_s);
      lstmd_comm_abort(c->world, exit_code ? exit_code : 1);
    }
  }
}

/* Rank 0: the node number of every rank (ranks with the same processor name share one) and, in
 * hosts (world × LSTMD_SERVE_HOST_BYTES), their names. Collective over the world. */
static int gather_nodes(struct lstmd_comm *comm, int *node, char *hosts) {
  const int rank = lstmd_comm_rank(comm), world = lstmd_comm_size(comm);
  char me[LSTMD_SERVE_HOST_BYTES] = "";
  snprintf(me, sizeof me, "%s", lstmd_comm_host(comm));
  char *all = rank == 0 ? calloc((size_t)world, sizeof me) : NULL;
  if (rank == 0 && !all) lstmd_comm_abort(comm, 1); /* the others are in the gather */
  int rc = lstmd_comm_gather(comm, me, sizeof me, all, 0);
  if (rank == 0 && !rc) memcpy(hosts, all, (size_t)world * sizeof me);
  if (rank == 0 && !rc) {
    for (int r = 0; r < world; r++) {
      node[r] = r;
      for (int q = 0; q < r; q++)
        if (!strcmp(all + (size_t)q * sizeof me, all + (size_t)r * sizeof me)) {
          node[r] = node[q];
          break;
        }
    }
  }
  free(all);
  return rc;
}

/* ---- set-up ---- */

/* Rank 0: state dir (locked against a second daemon), data root, job table, server. */
static int start_rank0(const struct serve_opts *o, int world, const cpu_set_t *cpus,
                       struct lstmd_jobs *jobs,
                       struct lstmd_server **srv, int *lock_fd, char *data_root) {
  /* Most options are checked before the state dir is made, so a refused start leaves none
   * behind: a live --socket (a probe only: the server removes a stale one after the lock, so a
   * daemon starting on a busy state dir never touches the running one's socket), --data-root,
   * --socket-group, --token-file and --listen's address (a probe bind: a port taken between it
   * and the server's bind is still found after the state dir is made). */
  if (o->socket && lstmd_socket_live(o->socket)) {
    lstmd_errorf("--socket: another daemon is listening on %s", o->socket);
    return LSTMD_EINVAL;
  }
  if (!realpath(o->data_root ? o->data_root : ".", data_root)) {
    lstmd_errorf("--data-root %s: %s", o->data_root ? o->data_root : ".", strerror(errno));
    return LSTMD_EINVAL;
  }
  long group = -1;
  if (o->group) {
    struct group *g = getgrnam(o->group);
    if (!g) {
      lstmd_errorf("--socket-group %s: no such group", o->group);
      return LSTMD_EINVAL;
    }
    group = (long)g->gr_gid;
  }
  static char token[300];
  char host[256] = "127.0.0.1";
  long port = 0;
  if (o->listen) {
    if (!o->token_file) {
      lstmd_errorf("--listen needs --token-file (the TCP listener always requires a token)");
      return LSTMD_EINVAL;
    }
    LSTMD_TRY(lstmd_token_load(o->token_file, token, sizeof token));
    const char *colon = strrchr(o->listen, ':');
    const char *port_text = colon ? colon + 1 : o->listen;
    if (colon) snprintf(host, sizeof host, "%.*s", (int)(colon - o->listen), o->listen);
    if (host[0] == '[') { /* [v6]:port */
      memmove(host, host + 1, strlen(host));
      host[strcspn(host, "]")] = '\0';
    }
    LSTMD_TRY(lstmd_opt_long("serve", "listen", port_text, 1, 65535, &port));
    LSTMD_TRY(lstmd_server_probe_tcp(host, (int)port));
  }
  LSTMD_TRY(lstmd_mkdir_p(o->state_dir));
  char lock_path[1200];
  snprintf(lock_path, sizeof lock_path, "%s/lock", o->state_dir);
  *lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (*lock_fd < 0 || flock(*lock_fd, LOCK_EX | LOCK_NB) != 0) {
    lstmd_errorf("--state-dir %s: %s", o->state_dir,
                 *lock_fd < 0 ? strerror(errno) : "another lstmd serve is using it");
    return LSTMD_EINVAL;
  }
  LSTMD_TRY(lstmd_jobs_open(jobs, o->state_dir));
  jobs->world = (uint32_t)world;
  /* Connections are file descriptors: raise the soft limit to the hard one and keep a margin
   * for the job's own files below it. */
  struct rlimit nofile;
  int max_conns = 1000;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
    getrlimit(RLIMIT_NOFILE, &nofile);
    if (nofile.rlim_cur != RLIM_INFINITY && (rlim_t)max_conns + 128 > nofile.rlim_cur)
      max_conns = nofile.rlim_cur > 256 ? (int)nofile.rlim_cur - 128 : 64;
  }
  static char host_copy[256];
  snprintf(host_copy, sizeof host_copy, "%s", host);
  struct lstmd_server_config sc = {
      .socket_path = o->socket, .socket_group = group, .listen_host = o->listen ? host_copy : NULL,
      .listen_port = (int)port, .token = token, .data_root = data_root,
      .max_frame = (uint32_t)o->max_frame, .idle_timeout_s = (double)o->idle_timeout,
      .max_connections = max_conns, .cpus = CPU_COUNT(cpus) > 0 ? cpus : NULL, .world = world};
  LSTMD_TRY(lstmd_server_start(&sc, jobs, srv));
  fprintf(stderr, "lstmd: serving on %s%s%s (state %s, data root %s)\n", o->socket,
          o->listen ? " and tcp " : "", o->listen ? o->listen : "", o->state_dir, data_root);
  return LSTMD_OK;
}

/* Collective. Rank 0 gets in *out the CPUs that this job's ranks on its node are bound to
 * (the union of their affinity masks; ranks match by processor name), for the control thread:
 * it answers clients, not compute, and held to rank 0's own core(s) a burst of status requests
 * waits for that core while the job's other cores idle. The union never reaches CPUs the job
 * was not given (another job's cores on a shared node). Returns 0 or a comm status. */
static int job_cpus_here(struct lstmd_comm *comm, cpu_set_t *out) {
  struct mine {
    char host[256];
    cpu_set_t cpus;
  } me;
  memset(&me, 0, sizeof me);
  snprintf(me.host, sizeof me.host, "%s", lstmd_comm_host(comm));
  if (sched_getaffinity(0, sizeof me.cpus, &me.cpus) != 0) CPU_ZERO(&me.cpus);
  const int rank = lstmd_comm_rank(comm), world = lstmd_comm_size(comm);
  struct mine *all = rank == 0 ? calloc((size_t)world, sizeof *all) : NULL;
  if (rank == 0 && !all) return LSTMD_ENOMEM; /* the others are in the gather: abort */
  int rc = lstmd_comm_gather(comm, &me, sizeof me, all, 0);
  if (rank == 0 && rc == 0) {
    CPU_ZERO(out);
    for (int r = 0; r < world; r++)
      if (strcmp(all[r].host, me.host) == 0) CPU_OR(out, out, &all[r].cpus);
  }
  free(all);
  return rc;
}

static void usage(void) {
  printf("usage: mpirun -np N lstmd serve --socket PATH --state-dir DIR [--data-root DIR]\n"
         "                  [--listen [HOST:]PORT --token-file F] [--socket-group NAME]\n"
         "                  [--max-frame BYTES] [--idle-timeout SECONDS] [--start-timeout SECONDS]\n"
         "Runs submitted jobs (lstmctl submit), several at once on parts of the world (resources.ranks).\n"
         "  --socket PATH        UNIX control socket (mode 0600; 0660 with --socket-group)\n"
         "  --state-dir DIR      job journal, default run directories (DIR/runs/job-<id>)\n"
         "  --data-root DIR      data.path and train.run_dir of jobs must lie inside it (default: .)\n"
         "  --listen [HOST:]PORT also listen on TCP (HOST defaults to 127.0.0.1); needs --token-file\n"
         "  --token-file F       the TCP clients' token: the file's first line, 16+ characters\n"
         "  --socket-group NAME  the socket is group NAME's too (mode 0660): its members may use\n"
         "                       lstmctl (their uid is checked against the group, SO_PEERCRED)\n"
         "  --max-frame BYTES    largest request accepted (default 4194304)\n"
         "  --idle-timeout SEC   close connections that send no complete request for SEC (default 60)\n"
         "  --start-timeout SEC  how long a job's ranks have to answer its start command (default 10);\n"
         "                       a rank silent past it is marked unresponsive (no job is placed on\n"
         "                       it until it answers) and the job is queued again\n"
         "SIGINT, SIGTERM or SIGUSR1 (what mpirun forwards) drain: the running job is checkpointed\n"
         "and resumes when the daemon is started again with the same --state-dir.\n");
}

int lstmd_cmd_serve(int argc, char **argv) {
  struct serve_opts o = {0};
  const char *max_frame = NULL, *idle = NULL, *start_timeout = NULL;
  int help = 0;
  struct lstmd_opt opts[] = {{"socket", &o.socket},         {"state-dir", &o.state_dir},
                             {"data-root", &o.data_root},   {"listen", &o.listen},
                             {"token-file", &o.token_file}, {"socket-group", &o.group},
                             {"max-frame", &max_frame},     {"idle-timeout", &idle},
                             {"start-timeout", &start_timeout}, {"help", NULL, &help}};
  int rc = lstmd_parse_opts("serve", argc, argv, 2, opts, 10);
  if (rc) return rc;
  if (help) {
    usage();
    return 0;
  }
  o.max_frame = LSTMD_FRAME_MAX_DEFAULT;
  o.idle_timeout = 60;
  if (max_frame && (rc = lstmd_opt_long("serve", "max-frame", max_frame, 64, 1L << 30, &o.max_frame)))
    return rc;
  if (idle && (rc = lstmd_opt_long("serve", "idle-timeout", idle, 1, 86400, &o.idle_timeout)))
    return rc;
  o.start_timeout_s = LSTMD_SERVE_START_TIMEOUT_S;
  if (start_timeout && (rc = lstmd_opt_double("serve", "start-timeout", start_timeout, 0.1, 86400,
                                              &o.start_timeout_s)))
    return rc;
  if (!o.socket || !o.state_dir) {
    lstmd_errorf("serve: --socket and --state-dir are required (lstmd serve --help)");
    return 2;
  }
  struct lstmd_comm *comm;
  if ((rc = lstmd_comm_init(&argc, &argv, &comm))) return lstmd_exit_code(rc);
  const int rank = lstmd_comm_rank(comm);
  /* a lost rank (any of the world's, idle or not) ends every job here, not just the waiting one */
  lstmd_peers_set_ending("the daemon (MPI ends the whole world when a rank is lost): restart it "
                         "with the same --state-dir and its jobs resume from their last "
                         "checkpoints");
  /* The GPU backend (CUDA libraries and module, ~190 MB resident with cuBLASLt) is loaded now,
   * once, rather than by the first job: a daemon's memory stays flat across jobs, and what it
   * will train with is in its first lines. */
  if (rank == 0) {
    const struct lstmd_gpu_backend *gpu = lstmd_gpu_backend();
    char why[256] = "";
    const int devices = gpu ? gpu->probe(why, sizeof why) : 0;
    if (gpu && devices > 0)
      fprintf(stderr, "lstmd: serve: GPU backend loaded, %d usable device%s on this node\n",
              devices, devices == 1 ? "" : "s");
    else if (gpu)
      fprintf(stderr, "lstmd: serve: GPU backend loaded, but no usable device on this node (%s): "
              "train.device auto runs jobs on the CPU\n", why);
    else fprintf(stderr, "lstmd: serve: GPU backend not loaded: %s\n", lstmd_gpu_backend_why());
  } else {
    lstmd_gpu_backend();
  }
  cpu_set_t job_cpus;
  if ((rc = job_cpus_here(comm, &job_cpus))) {
    if (rc == LSTMD_ENOMEM) lstmd_comm_abort(comm, 1);
    lstmd_comm_finalize(comm);
    return lstmd_exit_code(rc);
  }
  const int world = lstmd_comm_size(comm);
  int *node = calloc((size_t)world, sizeof *node);
  char *hosts = rank == 0 ? calloc((size_t)world, LSTMD_SERVE_HOST_BYTES) : NULL;
  if (!node || (rank == 0 && !hosts)) lstmd_comm_abort(comm, 1); /* the others are in the next collective */
  /* The daemon's communicators (serve_sched.h), made by every rank in this order. */
  struct lstmd_serve_comms c = {.world = comm};
  if ((rc = gather_nodes(comm, node, hosts)) || (rc = lstmd_comm_dup(comm, &c.down)) ||
      (rc = lstmd_comm_dup(comm, &c.up)) || (rc = lstmd_comm_dup(comm, &c.groups))) {
    lstmd_errorf("rank %d: serve: set-up of the daemon's communicators failed", rank);
    lstmd_comm_abort(comm, 1);
  }
  if (rank != 0) {
    lstmd_on_stop_signals(on_signal);
    rc = agent(&c); /* the exit code rank 0 sends (a failure to hear it ends the job) */
    lstmd_comm_free(c.groups);
    lstmd_comm_free(c.up);
    lstmd_comm_free(c.down);
    free(node);
    lstmd_comm_finalize(comm);
    return rc;
  }
  lstmd_blas_warn_weak_kernels();
  struct lstmd_jobs jobs;
  struct lstmd_server *srv = NULL;
  struct lstmd_sched *sched = NULL;
  int lock_fd = -1;
  char data_root[PATH_MAX];
  memset(&jobs, 0, sizeof jobs);
  rc = start_rank0(&o, world, &job_cpus, &jobs, &srv, &lock_fd, data_root);
  if (!rc)
    rc = lstmd_sched_start(&c, &jobs, data_root, node, hosts, world, o.start_timeout_s, &sched);
  int silent = 0;
  if (rc) { /* the other ranks are waiting for a command: tell them to go */
    if (srv) {
      lstmd_server_stop(srv);
      lstmd_server_join(srv);
    }
    send_exit_all(&c, lstmd_exit_code(rc), o.start_timeout_s);
  } else {
    agent(&c); /* rank 0 trains too; returns on the scheduler's exit command */
    lstmd_sched_join(sched, &silent);
    lstmd_server_stop(srv);
    lstmd_server_join(srv);
    if (silent) { /* MPI_Finalize would wait for them forever (serve_start.c, rationale 6) */
      lstmd_jobs_close(&jobs); /* every job has ended; the journal is synced record by record */
      lstmd_errorf("serve: %d rank%s did not answer the exit command (named above); every job "
                   "has ended and the journal is closed, so the world is aborted rather than "
                   "finalized (a restart with the same --state-dir lists and resumes the jobs)",
                   silent, silent == 1 ? "" : "s");
      lstmd_comm_abort(comm, 1);
    }
    fprintf(stderr, "lstmd: serve: stopped\n");
  }
  lstmd_comm_free(c.groups);
  lstmd_comm_free(c.up);
  lstmd_comm_free(c.down);
  free(node);
  free(hosts);
  if (jobs.state_dir[0]) lstmd_jobs_close(&jobs); /* set once lstmd_jobs_open has begun */
  if (lock_fd >= 0) close(lock_fd);
  lstmd_comm_finalize(comm);
  return lstmd_exit_code(rc);
}
