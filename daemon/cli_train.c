/* cli_train.c — `lstmd train`: config file + overrides → effective config → training run. */
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/peers.h"
#include "kernels/clock.h"
#include "kernels/status.h"
#include "worker/train/fault.h"
#include "worker/train/trainer.h"
#include "worker/train/val_watch.h"
#include "blas_setup.h"
#include "cli.h"
#include "config.h"

struct set_list {
  const char *items[256];
  int n, overflow;
};

static void on_set(void *ctx, const char *value) {
  struct set_list *l = ctx;
  if (l->n < 256) l->items[l->n++] = value;
  else l->overflow = 1;
}

static void on_signal(int sig) {
  (void)sig;
  lstmd_train_request_stop();
  lstmd_peers_signalled(); /* it may be the launcher ending the job for a lost rank */
}

/* The effective config: defaults, the file, the --set list in order, then --device. */
static int load_config(struct lstmd_train_config *cfg, const char *config_path,
                       const struct set_list *sets, const char *device) {
  lstmd_config_defaults(cfg);
  if (config_path) LSTMD_TRY(lstmd_config_load_ini(cfg, config_path));
  for (int i = 0; i < sets->n; i++) LSTMD_TRY(lstmd_config_set(cfg, sets->items[i]));
  if (device) {
    char assignment[96];
    snprintf(assignment, sizeof assignment, "train.device=%s", device);
    LSTMD_TRY(lstmd_config_set(cfg, assignment));
  }
  return lstmd_config_validate(cfg);
}

/* The number of ranks a launcher started (mpirun, srun; 0 without one), read before MPI is. */
static int launched_ranks(void) {
  static const char *const kVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
  for (size_t i = 0; i < sizeof kVars / sizeof *kVars; i++) {
    const char *v = getenv(kVars[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  return 0;
}

/* A fresh run (no --resume) into a run dir that holds another run's checkpoints: refused, saying
 * how to go on (lstmd_run_dir_fresh_refusal, as the daemon refuses such a job). */
static int run_dir_unused(const char *run_dir) {
  char found[300], msg[1600];
  if (!lstmd_run_dir_checkpoint(run_dir, found, sizeof found)) return LSTMD_OK;
  lstmd_run_dir_fresh_refusal(msg, sizeof msg, run_dir, found, LSTMD_FRESH_TRAIN);
  lstmd_errorf("%s", msg);
  return LSTMD_ECONFIG;
}

/* The same harm by another road: --resume CKPT of another directory's checkpoint into a run dir
 * that holds a run of its own appended the resumed run's metrics to that run's and replaced its
 * latest and best.safetensors (a trial lost a classifier's best model to a text run that way).
 * A checkpoint of the run dir itself (going back to an earlier step) is that run's to resume, and
 * an empty run dir is a branch; only the mix is refused. Directories are compared as files. */
static int resume_into_other_run(const char *run_dir, const char *resume) {
  char found[300];
  if (!resume || !*resume || !lstmd_run_dir_checkpoint(run_dir, found, sizeof found))
    return LSTMD_OK;
  char *copy = strdup(resume);
  if (!copy) return LSTMD_ENOMEM;
  struct stat a, b;
  const int same = stat(dirname(copy), &a) == 0 && stat(run_dir, &b) == 0 &&
                   a.st_dev == b.st_dev && a.st_ino == b.st_ino;
  free(copy);
  if (same) return LSTMD_OK;
  lstmd_errorf("train.run_dir %s already holds a run (%s), and --resume %s is not one of its "
               "checkpoints: resuming there would mix its metrics with that run's and replace "
               "its checkpoints. To branch from %s: choose another train.run_dir (an empty one); "
               "to continue the run in %s: --resume alone, or one of its own step files",
               run_dir, found, resume, resume, run_dir);
  return LSTMD_ECONFIG;
}

int lstmd_cmd_train(int argc, char **argv) {
  const char *config_path = NULL, *resume = NULL, *trace = NULL, *device = NULL;
  int help = 0;
  struct set_list sets = {0};
  struct lstmd_opt opts[] = {{"config", &config_path, .once = 1},
                             {"set", NULL, NULL, 0, on_set, &sets},
                             {"resume", &resume, NULL, 1},
                             {"trace", &trace},
                             {"device", &device},
                             {"help", NULL, &help}};
  int rc = lstmd_parse_opts("train", argc, argv, 2, opts, 6);
  if (rc) return rc;
  if (help) {
    printf("usage: lstmd train --config JOB.ini [--set section.key=value ...] [--resume [CKPT]]\n"
           "                   [--trace FILE] [--device auto|cpu|cuda]\n"
           "  --trace FILE    Chrome trace (chrome://tracing, Perfetto) of every step on every rank\n"
           "  --device D      the same as --set train.device=D, applied after the other --set\n"
           "  --resume        continue from <train.run_dir>/latest.safetensors (or its newest\n"
           "                  step-N.safetensors; a fresh start if it holds no checkpoint)\n"
           "  --resume CKPT   continue from the given checkpoint\n\n");
    lstmd_config_help(stdout);
    return 0;
  }
  if (sets.overflow) {
    lstmd_errorf("train: too many --set options (at most 256)");
    return 2;
  }
  struct lstmd_train_config cfg;
  /* Under a launcher every rank reads the config: hold its mistakes until the ranks can agree on
   * who prints them (lstmd_comm_messages_once). */
  char held[4096] = ""; /* the same size on every rank: it is gathered whole */
  const int hold = launched_ranks() > 1;
  if (hold) lstmd_errors_capture(held, sizeof held);
  rc = load_config(&cfg, config_path, &sets, device);
  if (hold) lstmd_errors_capture(NULL, 0);
  if (rc && !hold) return lstmd_exit_code(rc);
  cfg.trace_path = trace;

  char latest[1100];
  struct lstmd_comm *comm;
  const int config_rc = rc;
  const char *setup_source; /* MPI_Init and the votes below: the set-up's bound (trainer.h) */
  const double setup_wait_s = lstmd_setup_wait_limit(config_rc ? 0 : cfg.comm_timeout_s,
                                                     &setup_source, 0);
  lstmd_comm_set_init_limit(setup_wait_s, setup_source);
  if (lstmd_fault_due(LSTMD_FAULT_INIT_FREEZE, 1, lstmd_comm_launcher_rank()))
    raise(SIGSTOP); /* a test's (fault.h) */
  if ((rc = lstmd_comm_init(&argc, &argv, &comm))) {
    if (hold) fputs(held, stderr);
    return lstmd_exit_code(config_rc ? config_rc : rc);
  }
  const int rank = lstmd_comm_rank(comm), world = lstmd_comm_size(comm);
  if (hold && (rc = lstmd_comm_messages_once(comm, config_rc, held, sizeof held, 0, NULL))) {
    lstmd_comm_finalize(comm);
    return lstmd_exit_code(rc);
  }
  /* Rank 0 only: the run dir is its business (the others may not even see it). Voted on. */
  if ((rc = lstmd_comm_agree(comm, rank != 0 ? LSTMD_OK
                                   : !resume  ? run_dir_unused(cfg.run_dir)
                                              : resume_into_other_run(cfg.run_dir, resume),
                             NULL))) {
    lstmd_comm_finalize(comm);
    return lstmd_exit_code(rc);
  }
  if (resume && !*resume) { /* rank 0's answer is the one that counts (train_setup.c) */
    char why[1400];
    const int found = lstmd_run_dir_resume_point(cfg.run_dir, latest, sizeof latest, why,
                                                 sizeof why);
    if ((rc = lstmd_comm_agree(comm, rank == 0 && found < 0 ? LSTMD_ECONFIG : LSTMD_OK, NULL))) {
      if (rank == 0) lstmd_errorf("%s", why);
      lstmd_comm_finalize(comm);
      return lstmd_exit_code(rc);
    }
    if (found == 2 && rank == 0)
      fprintf(stderr, "lstmd: no %s/latest.safetensors: resuming from the newest step "
              "checkpoint there, %s\n", cfg.run_dir, latest);
    if (found == 0 && rank == 0)
      fprintf(stderr, "lstmd: no %s/latest.safetensors yet: starting a fresh run\n", cfg.run_dir);
    resume = found > 0 ? latest : NULL;
  }
  /* Ranks that are not a multiple of rank 0's model.stages: the set-up's first vote refuses the
   * run (train_setup.c: plan_grid, which prints why on every path that trains), so the dump is
   * left out rather than bury that one line under sixty (mpirun -np 3 of model.stages=2). */
  if (rank == 0 && world % cfg.stages == 0) {
    lstmd_blas_warn_weak_kernels();
    fprintf(stderr, "lstmd: effective config:\n");
    lstmd_config_print(&cfg, stderr);
    char inert[600];
    if (lstmd_config_inert_keys(&cfg, inert, sizeof inert))
      fprintf(stderr, "lstmd: note: %s\n", inert);
  }
  char *json = lstmd_config_to_json(&cfg);
  if (!json) {
    lstmd_errorf("out of memory");
    if (world > 1) lstmd_comm_abort(comm, 1);
    lstmd_comm_finalize(comm);
    return 1;
  }
  lstmd_on_stop_signals(on_signal);
  int all_know = 0;
  rc = lstmd_train_run(&cfg, json, resume, comm, NULL, &all_know);
  free(json);
  if (rc && world > 1 && !all_know) {
    /* This rank cannot go on; the others may be waiting for it in a collective. */
    lstmd_errorf("rank %d (%s) stops the job: %s", rank, lstmd_comm_host(comm), lstmd_strerror(rc));
    lstmd_comm_abort(comm, lstmd_exit_code(rc));
  }
  if (lstmd_fault_due(LSTMD_FAULT_FINALIZE_FREEZE, 1, rank)) raise(SIGSTOP); /* a test's (fault.h) */
  if (lstmd_fault_due(LSTMD_FAULT_FINALIZE_SLOW, 1, rank))
    lstmd_sleep_us((long)(2e6 * cfg.comm_timeout_s));
  /* MPI_Finalize waits for every rank, and the ranks come to it at their own pace after the
   * run's last collective (rank 0 closes its metrics files, every rank tears its engine down):
   * bounded, as MPI_Init is, by the set-up's bound, not the run's comm_timeout_s (which may be
   * 1 s: a healthy run whose rank 0 closed train.log on a slow disk failed at its end). */
  lstmd_comm_set_wait_limit(comm, setup_wait_s, setup_source);
  lstmd_comm_finalize(comm);
  return lstmd_exit_code(rc);
}
