/* cli_train.c — `lstmd train`: config file + overrides → effective config → training run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/peers.h"
#include "kernels/status.h"
#include "worker/train/trainer.h"
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

int lstmd_cmd_train(int argc, char **argv) {
  const char *config_path = NULL, *resume = NULL, *trace = NULL, *device = NULL;
  int help = 0;
  struct set_list sets = {0};
  struct lstmd_opt opts[] = {{"config", &config_path},
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
           "  --resume        continue from <train.run_dir>/latest.safetensors (fresh start if none)\n"
           "  --resume CKPT   continue from the given checkpoint\n\n");
    lstmd_config_help(stdout);
    return 0;
  }
  if (sets.overflow) {
    lstmd_errorf("train: too many --set options (at most 256)");
    return 2;
  }
  struct lstmd_train_config cfg;
  lstmd_config_defaults(&cfg);
  if (config_path && (rc = lstmd_config_load_ini(&cfg, config_path))) return lstmd_exit_code(rc);
  for (int i = 0; i < sets.n; i++)
    if ((rc = lstmd_config_set(&cfg, sets.items[i]))) return lstmd_exit_code(rc);
  if (device) {
    char assignment[96];
    snprintf(assignment, sizeof assignment, "train.device=%s", device);
    if ((rc = lstmd_config_set(&cfg, assignment))) return lstmd_exit_code(rc);
  }
  if ((rc = lstmd_config_validate(&cfg))) return lstmd_exit_code(rc);
  cfg.trace_path = trace;

  char latest[1100];
  struct lstmd_comm *comm;
  if ((rc = lstmd_comm_init(&argc, &argv, &comm))) return lstmd_exit_code(rc);
  const int rank = lstmd_comm_rank(comm), world = lstmd_comm_size(comm);
  if (resume && !*resume) { /* rank 0's answer is the one that counts (train_setup.c) */
    snprintf(latest, sizeof latest, "%s/latest.safetensors", cfg.run_dir);
    struct stat st; /* anything under that name but nothing at all (a dangling link, a loop, no
                     * permission) is loaded, and the loader says what is wrong with it */
    if (lstat(latest, &st) == 0 || errno != ENOENT) {
      resume = latest;
    } else {
      if (rank == 0) fprintf(stderr, "lstmd: no %s yet: starting a fresh run\n", latest);
      resume = NULL;
    }
  }
  if (rank == 0) {
    lstmd_blas_warn_weak_kernels();
    fprintf(stderr, "lstmd: effective config:\n");
    lstmd_config_print(&cfg, stderr);
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
  lstmd_comm_finalize(comm);
  return lstmd_exit_code(rc);
}
