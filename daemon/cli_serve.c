/* cli_serve.c — `lstmd serve`: a long-lived MPI world that runs submitted jobs one after another.
 *
 * Rank 0 owns the job table (jobs.h) and the control server (server.h, its own thread); its
 * main thread is the job runner. For each job it broadcasts a command — the job's effective
 * config as JSON and the checkpoint to resume from — and then every rank trains it together,
 * exactly as `lstmd train` would (lstmd_train_run). Between jobs the other ranks wait for the
 * next command in a broadcast that sleeps between polls (lstmd_comm_bcast_idle), so an idle
 * daemon costs next to no CPU.
 *
 * After a job every rank takes part in one vote: whether any rank failed (the lowest failing
 * rank then broadcasts its message, which becomes the job's reason) and whether any rank was
 * signalled to stop. A failure the trainer could not make every rank see (*all_know unset)
 * leaves ranks in different places, and only then is the world aborted; the journal lets a
 * restarted daemon resume the job. */
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
#include "server.h"

enum { kCmdJob = 1, kCmdExit = 2 };

struct command {
  int32_t kind, exit_code;
  uint64_t job_id, payload_len; /* payload: config JSON, NUL, resume path (may be empty), NUL */
};

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
};

/* ---- rank 0: the runner's view of the running job ---- */

struct running {
  struct lstmd_jobs *jobs;
  uint64_t id;
  long end_step;
  int ended, early_stop; /* early_stop: train.early_stop_patience ended it (finished) */
};

static void hook_step(void *ctx, const struct lstmd_step_report *r) {
  struct running *j = ctx;
  lstmd_jobs_progress(j->jobs, j->id, r->step, r->total_steps, r->loss, r->lr, r->grad_norm,
                      r->tokens_per_s, r->elapsed_s, r->eta_s);
}
static void hook_eval(void *ctx, long step, double loss, double bpc) {
  struct running *j = ctx;
  lstmd_jobs_eval(j->jobs, j->id, step, loss, bpc);
}
static int hook_stop(void *ctx) { return lstmd_jobs_stop_requested(((struct running *)ctx)->jobs); }
static void hook_end(void *ctx, long step, int how) {
  struct running *j = ctx;
  j->end_step = step;
  j->ended = 1;
  j->early_stop = how == LSTMD_END_EARLY_STOP;
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

/* ---- rank 0 ---- */

static int send_command(struct lstmd_comm *comm, struct command *cmd, const char *payload) {
  if (lstmd_comm_size(comm) == 1) return LSTMD_OK;
  LSTMD_TRY(lstmd_comm_bcast_idle(comm, cmd, sizeof *cmd, 0));
  if (cmd->payload_len) LSTMD_TRY(lstmd_comm_bcast(comm, (void *)payload, cmd->payload_len, 0));
  return LSTMD_OK;
}

/* The job's config (paths checked again: the file system may have changed since it was
 * submitted) and where to resume from, as the command payload. */
static char *job_payload(const Lstmd__Job *job, const char *data_root, size_t *len, long *steps,
                         char *err, size_t errlen) {
  struct lstmd_train_config cfg;
  int has_run_dir;
  /* world 0: a job restored from the journal onto another number of ranks fails in set-up,
   * naming model.stages, like a bad dataset */
  if (lstmd_serve_job_config(job->settings, job->n_settings, data_root, 0, &cfg, &has_run_dir,
                             err, errlen))
    return NULL;
  snprintf(cfg.run_dir, sizeof cfg.run_dir, "%s", job->run_dir);
  *steps = cfg.steps;
  char resume[1200] = "";
  if (job->attempts > 1) { /* started before: continue from its last checkpoint, if any */
    snprintf(resume, sizeof resume, "%s/latest.safetensors", job->run_dir);
    if (access(resume, F_OK) != 0) resume[0] = '\0';
  }
  char *json = lstmd_config_to_json(&cfg), *payload = NULL;
  if (json && asprintf(&payload, "%s%c%s", json, '\0', resume) >= 0)
    *len = strlen(json) + 1 + strlen(resume) + 1;
  else
    snprintf(err, errlen, "out of memory");
  free(json);
  return payload;
}

static void record_outcome(struct lstmd_jobs *jobs, const Lstmd__Job *job, const struct running *run,
                           const struct outcome *o) {
  char reason[1400];
  const long step = run->ended ? run->end_step : -1;
  int state;
  if (o->rc) {
    state = LSTMD__JOB_STATE__FAILED;
    if (o->failed_rank > 0 && strncmp(o->reason, "rank ", 5))
      snprintf(reason, sizeof reason, "rank %d: %s", o->failed_rank, o->reason);
    else snprintf(reason, sizeof reason, "%s", o->reason);
  } else if (run->ended && run->end_step >= job->total_steps) {
    state = LSTMD__JOB_STATE__SUCCEEDED;
    snprintf(reason, sizeof reason, "done: %s/step-%ld.safetensors", job->run_dir, run->end_step);
  } else if (run->ended && run->early_stop) { /* finished: a requeue would stop at once */
    state = LSTMD__JOB_STATE__SUCCEEDED;
    snprintf(reason, sizeof reason, "stopped early at step %ld (train.early_stop_patience): "
             "%s/step-%ld.safetensors, best: %s/best.safetensors", run->end_step, job->run_dir,
             run->end_step, job->run_dir);
  } else if (lstmd_jobs_cancel_requested(jobs, job->id)) {
    state = LSTMD__JOB_STATE__CANCELLED;
    snprintf(reason, sizeof reason, "cancelled at step %ld; checkpoint %s/latest.safetensors", step,
             job->run_dir);
  } else {
    state = LSTMD__JOB_STATE__QUEUED;
    snprintf(reason, sizeof reason, "interrupted by a shutdown at step %ld; resumes from %s/latest"
             ".safetensors", step, job->run_dir);
  }
  fprintf(stderr, "lstmd: job %llu: %s: %s\n", (unsigned long long)job->id,
          lstmd_job_state_name(state), reason);
  lstmd_jobs_finish(jobs, job->id, state, step, reason);
}

/* The runner: next job → command → train → outcome, until a drain leaves nothing to run. */
static int runner(struct lstmd_comm *comm, struct lstmd_jobs *jobs, const char *data_root) {
  const int world = lstmd_comm_size(comm);
  Lstmd__Job *job;
  while ((job = lstmd_jobs_next(jobs))) {
    char err[1600];
    size_t len = 0;
    long steps = 0;
    char *payload = job_payload(job, data_root, &len, &steps, err, sizeof err);
    if (!payload) {
      fprintf(stderr, "lstmd: job %llu: FAILED: %s\n", (unsigned long long)job->id, err);
      lstmd_jobs_finish(jobs, job->id, LSTMD__JOB_STATE__FAILED, -1, err);
      lstmd__job__free_unpacked(job, NULL);
      continue;
    }
    fprintf(stderr, "lstmd: job %llu%s%s: starting on %d rank%s (attempt %u), run dir %s\n",
            (unsigned long long)job->id, job->name[0] ? " " : "", job->name, world,
            world == 1 ? "" : "s", job->attempts, job->run_dir);
    struct command cmd = {.kind = kCmdJob, .job_id = job->id, .payload_len = len};
    LSTMD_TRY(send_command(comm, &cmd, payload));
    struct running run = {.jobs = jobs, .id = job->id};
    struct lstmd_train_hooks hooks = {.ctx = &run, .on_step = hook_step, .on_eval = hook_eval,
                                      .stop_requested = hook_stop, .on_end = hook_end};
    struct outcome o;
    run_job(comm, payload, &hooks, &o);
    free(payload);
    job->total_steps = steps;
    record_outcome(jobs, job, &run, &o);
    if (o.signalled) lstmd_jobs_drain(jobs);
    lstmd__job__free_unpacked(job, NULL);
  }
  struct command bye = {.kind = kCmdExit};
  return send_command(comm, &bye, NULL);
}

/* ---- other ranks ---- */

static int follower(struct lstmd_comm *comm) {
  for (;;) {
    struct command cmd;
    LSTMD_TRY(lstmd_comm_bcast_idle(comm, &cmd, sizeof cmd, 0));
    if (cmd.kind != kCmdJob) return cmd.exit_code;
    if (cmd.payload_len > (64u << 20)) return LSTMD_EINVAL;
    char *payload = malloc(cmd.payload_len);
    if (!payload) lstmd_comm_abort(comm, 1);
    LSTMD_TRY(lstmd_comm_bcast(comm, payload, cmd.payload_len, 0));
    struct outcome o;
    run_job(comm, payload, NULL, &o);
    free(payload);
  }
}

/* ---- set-up ---- */

/* Rank 0: state dir (locked against a second daemon), data root, job table, server. */
static int start_rank0(const struct serve_opts *o, int world, const cpu_set_t *cpus,
                       struct lstmd_jobs *jobs,
                       struct lstmd_server **srv, int *lock_fd, char *data_root) {
  LSTMD_TRY(lstmd_mkdir_p(o->state_dir));
  char lock_path[1200];
  snprintf(lock_path, sizeof lock_path, "%s/lock", o->state_dir);
  *lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (*lock_fd < 0 || flock(*lock_fd, LOCK_EX | LOCK_NB) != 0) {
    lstmd_errorf("--state-dir %s: %s", o->state_dir,
                 *lock_fd < 0 ? strerror(errno) : "another lstmd serve is using it");
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
  }
  LSTMD_TRY(lstmd_jobs_open(jobs, o->state_dir));
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
         "                  [--max-frame BYTES] [--idle-timeout SECONDS]\n"
         "Runs submitted jobs (lstmctl submit) on all ranks, one after another.\n"
         "  --socket PATH        UNIX control socket (mode 0600; 0660 with --socket-group)\n"
         "  --state-dir DIR      job journal, default run directories (DIR/runs/job-<id>)\n"
         "  --data-root DIR      data.path and train.run_dir of jobs must lie inside it (default: .)\n"
         "  --listen [HOST:]PORT also listen on TCP (HOST defaults to 127.0.0.1); needs --token-file\n"
         "  --max-frame BYTES    largest request accepted (default 4194304)\n"
         "  --idle-timeout SEC   close connections that send no complete request for SEC (default 60)\n"
         "SIGINT, SIGTERM or SIGUSR1 (what mpirun forwards) drain: the running job is checkpointed\n"
         "and resumes when the daemon is started again with the same --state-dir.\n");
}

int lstmd_cmd_serve(int argc, char **argv) {
  struct serve_opts o = {0};
  const char *max_frame = NULL, *idle = NULL;
  int help = 0;
  struct lstmd_opt opts[] = {{"socket", &o.socket},         {"state-dir", &o.state_dir},
                             {"data-root", &o.data_root},   {"listen", &o.listen},
                             {"token-file", &o.token_file}, {"socket-group", &o.group},
                             {"max-frame", &max_frame},     {"idle-timeout", &idle},
                             {"help", NULL, &help}};
  int rc = lstmd_parse_opts("serve", argc, argv, 2, opts, 9);
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
  if (!o.socket || !o.state_dir) {
    lstmd_errorf("serve: --socket and --state-dir are required (lstmd serve --help)");
    return 2;
  }
  struct lstmd_comm *comm;
  if ((rc = lstmd_comm_init(&argc, &argv, &comm))) return lstmd_exit_code(rc);
  const int rank = lstmd_comm_rank(comm);
  /* The GPU backend (CUDA libraries and module, ~190 MB resident with cuBLASLt) is loaded now,
   * once, rather than by the first job: a daemon's memory stays flat across jobs, and what it
   * will train with is in its first lines. */
  if (rank == 0) {
    if (lstmd_gpu_backend()) fprintf(stderr, "lstmd: serve: GPU backend loaded\n");
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
  if (rank != 0) {
    lstmd_on_stop_signals(on_signal);
    rc = follower(comm); /* an exit code from rank 0, or a negative status */
    lstmd_comm_finalize(comm);
    return rc < 0 ? lstmd_exit_code(rc) : rc;
  }
  lstmd_blas_warn_weak_kernels();
  struct lstmd_jobs jobs;
  struct lstmd_server *srv = NULL;
  int lock_fd = -1;
  char data_root[PATH_MAX];
  memset(&jobs, 0, sizeof jobs);
  rc = start_rank0(&o, lstmd_comm_size(comm), &job_cpus, &jobs, &srv, &lock_fd, data_root);
  if (rc) { /* the other ranks are waiting for a command: tell them to go */
    struct command bye = {.kind = kCmdExit, .exit_code = lstmd_exit_code(rc)};
    send_command(comm, &bye, NULL);
  } else {
    rc = runner(comm, &jobs, data_root);
    lstmd_server_stop(srv);
    lstmd_server_join(srv);
    fprintf(stderr, "lstmd: serve: stopped%s\n", rc ? " after an error" : "");
  }
  if (jobs.state_dir[0]) lstmd_jobs_close(&jobs); /* set once lstmd_jobs_open has begun */
  if (lock_fd >= 0) close(lock_fd);
  lstmd_comm_finalize(comm);
  return lstmd_exit_code(rc);
}
