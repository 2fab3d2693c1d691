/* cli_selftest.c — `lstmd selftest [--gpu] [--bench] [--out DIR] [--only GROUP]`: the acceptance
 * run of an installed lstmd, no build tree needed. One PASS/FAIL/SKIP line per check with its
 * measured error, a summary line, and the exit status 0 (all passed), 1 (a check failed) or
 * 77 (everything was skipped: what ctest reads as skipped).
 *
 * Groups: cpu (worker/selftest/cpu_gradcheck.c); with --gpu the GPU module's kernels, convert,
 * cudnn, model, classify (sequence classifiers), pipe and nccl (worker/selftest/gpu_*.c), and
 * "nccl 2 ranks": this binary again under `mpirun -np 2` with both ranks on one GPU, which takes
 * the host-staged fallback, and with two or more GPUs once more with a GPU each (NCCL). The ctest
 * `gpu` tests run `lstmd selftest --gpu --only GROUP`, so there is one implementation. Without a
 * usable GPU (no device, or the GPU backend not loaded) every GPU group is one SKIP with why.
 * --out DIR keeps the whole output in DIR/selftest-<gpu or cpu>-<date>[-N].txt; --bench adds
 * bench/bench_gpu.sh (from share/lstmd/bench in a release) and writes its results file,
 * gpu-<gpu>-<date>.txt, there too (default: the current directory). Both are meant to be
 * committed under bench/results/ as the record that a GPU build was verified. */
#define _GNU_SOURCE
#include <ctype.h>
#include <limits.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "kernels/cpu/isa.h"
#include "kernels/status.h"
#include "worker/engine/gpu_backend.h"
#include "worker/io/paths.h"
#include "worker/selftest/selftest.h"
#include "cli.h"

static const char *const kGpuGroups[] = {"kernels", "convert", "cudnn", "model", "classify", "pipe",
                                         "nccl"};

static int is_gpu_group(const char *g) {
  for (size_t i = 0; i < sizeof kGpuGroups / sizeof *kGpuGroups; i++)
    if (!strcmp(g, kGpuGroups[i])) return 1;
  return 0;
}

/* Runs argv (a child process, stdout and stderr shared); its exit status, or -1. */
static int run_child(char *const argv[], const char *env_name, const char *env_value) {
  fflush(NULL);
  const pid_t pid = fork();
  if (pid == 0) {
    lstmd_comm_forget_launch_env();
    if (env_name) setenv(env_name, env_value, 1);
    execvp(argv[0], argv);
    fprintf(stderr, "lstmd: selftest: cannot run %s\n", argv[0]);
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Two ranks of this binary under mpirun, `--only nccl`: with one_gpu, both on one device
 * (CUDA_VISIBLE_DEVICES=<the first visible>), which NCCL refuses, so it is the host-staged MPI
 * path of comm/comm_nccl.c; else each on its own GPU, NCCL itself. */
static void nccl_two_ranks(struct lstmd_selftest *st, int one_gpu) {
  lstmd_selftest_group(st, "nccl");
  const char *mpirun = getenv("LSTMD_MPIRUN") ? getenv("LSTMD_MPIRUN") : "mpirun";
  char self[PATH_MAX + 8], dir[PATH_MAX], visible[64] = "0";
  lstmd_exe_dir(dir, sizeof dir);
  snprintf(self, sizeof self, "%s/lstmd", dir);
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd && *cvd) snprintf(visible, sizeof visible, "%.*s", (int)strcspn(cvd, ","), cvd);
  char *argv[12];
  int k = 0;
  argv[k++] = (char *)mpirun;
  argv[k++] = "-np";
  argv[k++] = "2";
  argv[k++] = "--oversubscribe";
  if (geteuid() == 0) argv[k++] = "--allow-run-as-root";
  argv[k++] = self;
  argv[k++] = "selftest";
  argv[k++] = "--only";
  argv[k++] = "nccl";
  argv[k] = NULL;
  printf("nccl: %s -np 2 %s selftest --only nccl (%s%s)\n", mpirun, self,
         one_gpu ? "one GPU, two ranks: CUDA_VISIBLE_DEVICES=" : "a GPU each", one_gpu ? visible : "");
  const int rc = one_gpu ? run_child(argv, "CUDA_VISIBLE_DEVICES", visible)
                         : run_child(argv, NULL, NULL);
  char what[128];
  snprintf(what, sizeof what, "2 ranks %s: exit %d",
           one_gpu ? "on one GPU (host-staged fallback)" : "on 2 GPUs (NCCL)", rc);
  lstmd_check_true(what, rc == 0);
}

/* "nvidia-h100-80gb-hbm3" from GPU 0's name, or "cpu" without one. */
static void machine_name(const struct lstmd_gpu_backend *gpu, char *name, size_t n) {
  int cc = 0;
  char info[512], why[256];
  snprintf(name, n, "cpu");
  if (!gpu || gpu->probe(why, sizeof why) <= 0 || gpu->device_info(0, info, sizeof info, &cc)) return;
  size_t k = 0;
  for (const char *p = info; *p && *p != ',' && k + 1 < n; p++)
    name[k++] = isalnum((unsigned char)*p) ? (char)tolower((unsigned char)*p) : '-';
  name[k] = '\0';
}

static void today(char *date, size_t n) {
  const time_t now = time(NULL);
  strftime(date, n, "%Y-%m-%d", gmtime(&now));
}

/* --out: stdout and stderr from here on also go to DIR/selftest-<machine>-<date>.txt, through
 * tee(1) (children, such as the two mpirun ranks, write there too); a name taken by an earlier
 * run gets -2, -3, ... before .txt, so no report replaces another. Returns the tee's pid. */
static pid_t tee_output(const char *dir, const char *machine) {
  char path[PATH_MAX + 300], date[16];
  today(date, sizeof date);
  snprintf(path, sizeof path, "%s/selftest-%s-%s.txt", dir, machine, date);
  for (int k = 2; k < 1000 && access(path, F_OK) == 0; k++)
    snprintf(path, sizeof path, "%s/selftest-%s-%s-%d.txt", dir, machine, date, k);
  int fd[2];
  if (pipe(fd)) return -1;
  fflush(NULL);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[0], 0);
    close(fd[0]);
    close(fd[1]);
    execlp("tee", "tee", "--", path, (char *)NULL);
    _exit(127);
  }
  close(fd[0]);
  if (pid < 0) {
    close(fd[1]);
    return -1;
  }
  dup2(fd[1], 1);
  dup2(fd[1], 2);
  close(fd[1]);
  printf("selftest: writing this output to %s too\n", path);
  return pid;
}

/* bench/bench_gpu.sh with its results file named after the GPU and the date. */
static void bench(struct lstmd_selftest *st, const struct lstmd_gpu_backend *gpu, const char *out) {
  lstmd_selftest_group(st, "bench");
  char dir[PATH_MAX], script[PATH_MAX + 64], name[256], file[PATH_MAX + 512], self[PATH_MAX + 8];
  lstmd_exe_dir(dir, sizeof dir);
  snprintf(self, sizeof self, "%s/lstmd", dir);
  snprintf(script, sizeof script, "%s/../share/lstmd/bench/bench_gpu.sh", dir);
  if (access(script, R_OK)) snprintf(script, sizeof script, "%s/../bench/bench_gpu.sh", dir);
  if (access(script, R_OK)) {
    lstmd_check_skip("bench_gpu.sh", "not found beside this binary (share/lstmd/bench or ../bench)");
    return;
  }
  machine_name(gpu, name, sizeof name);
  char date[16];
  today(date, sizeof date);
  snprintf(file, sizeof file, "%s/gpu-%s-%s.txt", out, name, date);
  char *argv[] = {"bash", script, self, NULL};
  const int rc = run_child(argv, "BENCH_OUT", file);
  char what[PATH_MAX + 600];
  snprintf(what, sizeof what, "bench_gpu.sh (results in %s): exit %d", file, rc);
  lstmd_check_true(what, rc == 0);
}

int lstmd_cmd_selftest(int argc, char **argv) {
  int want_gpu = 0, want_bench = 0;
  const char *out = NULL, *only = NULL;
  int help = 0;
  struct lstmd_opt opts[] = {{"gpu", NULL, &want_gpu}, {"bench", NULL, &want_bench},
                             {"out", &out}, {"only", &only}, {"help", NULL, &help}};
  int rc = lstmd_parse_opts("selftest", argc, argv, 2, opts, 5);
  if (rc || help) {
    fprintf(help ? stdout : stderr,
            "usage: lstmd selftest [--gpu] [--bench] [--out DIR] [--only GROUP]\n"
            "Checks this binary on this node: one PASS/FAIL/SKIP line per check, then a summary;\n"
            "exit 0 all passed, 1 a check failed, 77 everything skipped.\n"
            "  --gpu        also the GPU groups (each one SKIP with the reason without a GPU)\n"
            "  --only GROUP one group: cpu, kernels, convert, cudnn, model, classify, pipe, nccl\n"
            "  --out DIR    keep the output in DIR/selftest-<gpu or cpu>-<date>.txt\n"
            "  --bench      also bench_gpu.sh, its results file written to --out (default .)\n");
    return rc;
  }
  if (only && strcmp(only, "cpu") && !is_gpu_group(only)) {
    lstmd_errorf("selftest: --only %s: one of cpu, kernels, convert, cudnn, model, classify, pipe, "
                 "nccl", only);
    return 2;
  }
  if ((only && is_gpu_group(only)) || want_bench) want_gpu = 1;
  if (out && access(out, W_OK)) {
    lstmd_errorf("selftest: --out %s: %s", out,
                 errno == ENOENT ? "no such folder (make it first)" : "not a writable folder");
    return 2;
  }
  struct lstmd_comm *comm = NULL;
  if ((rc = lstmd_comm_init(&argc, &argv, &comm))) return lstmd_exit_code(rc);
  const int world = lstmd_comm_size(comm);
  struct lstmd_selftest st;
  lstmd_selftest_init(&st, stdout, comm);
  const struct lstmd_gpu_backend *gpu = want_gpu ? lstmd_gpu_backend() : NULL;
  pid_t tee = -1;
  if (out && world == 1) {
    char machine[256];
    machine_name(gpu, machine, sizeof machine);
    tee = tee_output(out, machine);
  }
  if (lstmd_comm_rank(comm) == 0) {
    printf("lstmd %s selftest: CPU kernels %s; GPU backend %s%s\n", LSTMD_VERSION_STRING,
           lstmd_cpu_isa_name(lstmd_cpu_isa()), !want_gpu ? "not asked for (--gpu)"
           : gpu ? "loaded" : "not loaded: ", want_gpu && !gpu ? lstmd_gpu_backend_why() : "");
    struct lstmd_gpu_library libs[8];
    const int n = want_gpu ? lstmd_gpu_backend_libraries(libs, 8) : 0;
    for (int i = 0; i < n; i++)
      printf("  %-8s %s\n", libs[i].name, libs[i].path[0] ? libs[i].path : libs[i].note);
  }
  lstmd_selftest_cpu(&st, only);
  if (want_gpu && gpu) {
    gpu->selftest(&st, only);
    char why[256];
    const int devices = gpu->probe(why, sizeof why);
    if (world == 1 && devices > 0 && (!only || !strcmp(only, "nccl"))) {
      nccl_two_ranks(&st, 1);
      if (devices > 1) nccl_two_ranks(&st, 0);
    }
    if (want_bench && devices > 0) bench(&st, gpu, out ? out : ".");
    else if (want_bench) lstmd_check_skip("bench", why);
  } else if (want_gpu) {
    for (size_t i = 0; i < sizeof kGpuGroups / sizeof *kGpuGroups; i++) {
      if (only && strcmp(only, kGpuGroups[i])) continue;
      lstmd_selftest_group(&st, kGpuGroups[i]);
      lstmd_check_skip("every check", lstmd_gpu_backend_why());
    }
  }
  rc = lstmd_selftest_summary(&st);
  double worst = rc == 1 ? 2.0 : rc == 77 ? 1.0 : 0.0; /* every rank exits alike */
  if (world > 1) lstmd_comm_allreduce_max_f64(comm, &worst, 1);
  lstmd_comm_finalize(comm);
  if (tee > 0) { /* end of input for tee, then wait for it to have written everything */
    fflush(NULL);
    close(1);
    close(2);
    waitpid(tee, NULL, 0);
  }
  return worst == 2.0 ? 1 : worst == 1.0 ? 77 : 0;
}
