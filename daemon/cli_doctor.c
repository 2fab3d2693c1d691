/* cli_doctor.c — `lstmd doctor [--json] [--device auto|cpu|cuda]`: what this node would train
 * with and why, one line each: CPU and the ISA of lstmd's kernels, the BLAS kernels, the MPI
 * library and the launcher this process runs under, the NVIDIA driver, each GPU, the CUDA
 * runtime, cuBLAS, cuDNN and NCCL (version and the file loaded), the precisions the GPU path
 * offers there, and the device train.device would pick. Exit 0 when the node can train on the
 * device asked for (default auto: any), 1 otherwise. No MPI_Init: it runs on a login node too.
 *
 * The CPU libraries' files come from the process's own link map (dl_iterate_phdr), so they are
 * the ones this binary really uses; the CUDA libraries are the files the GPU module loader
 * opened (worker/engine/gpu_backend.h, which also documents where it looks). */
#define _GNU_SOURCE
#include <jansson.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "kernels/cpu/blas_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/status.h"
#include "worker/engine/device_select.h"
#include "worker/train/train_config.h"
#include "blas_setup.h"
#include "cli.h"
#include "worker/engine/gpu_backend.h"
#include "worker/io/paths.h"

struct doctor {
  json_t *root; /* --json: every line under its key */
  int json;
};

/* One line "key  text" (or a JSON string member). */
static void say(struct doctor *d, const char *key, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (d->json) json_object_set_new(d->root, key, json_string(text));
  else printf("%-13s %s\n", key, text);
}

struct lib_search {
  const char *stem;
  char path[512];
};

static int find_loaded(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct lib_search *s = arg;
  const char *base = strrchr(info->dlpi_name, '/');
  base = base ? base + 1 : info->dlpi_name;
  if (strncmp(base, s->stem, strlen(s->stem))) return 0;
  snprintf(s->path, sizeof s->path, "%s", info->dlpi_name);
  return 1;
}

/* The file of the loaded library whose name starts with stem ("libmpi.so"), or "not loaded". */
static const char *loaded_path(const char *stem, char *buf, size_t n) {
  struct lib_search s = {.stem = stem};
  dl_iterate_phdr(find_loaded, &s);
  snprintf(buf, n, "%s", s.path[0] ? s.path : "not loaded");
  return buf;
}

static void cpu_lines(struct doctor *d) {
  char model[256] = "unknown CPU", line[512], buf[512], path[512];
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
      snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
      model[strcspn(model, "\n")] = '\0';
      break;
    }
  if (f) fclose(f);
  say(d, "cpu", "%s, %d cores online", model, lstmd_cpu_cores());
  const char *forced = getenv("LSTMD_CPU_ISA");
  say(d, "isa", "%s (this CPU has %s%s%s)", lstmd_cpu_isa_name(lstmd_cpu_isa()),
      lstmd_cpu_isa_name(lstmd_cpu_isa_available()), forced && *forced ? "; LSTMD_CPU_ISA=" : "",
      forced && *forced ? forced : "");
  lstmd_cpu_blas_describe(buf, sizeof buf);
  say(d, "blas", "%s, %s", buf, loaded_path("libopenblas", path, sizeof path));
  char why[256];
  if (lstmd_blas_weak_kernels(why, sizeof why)) say(d, "blas note", "%s", why);
}

static void mpi_lines(struct doctor *d) {
  char buf[512], path[512], tool[512];
  lstmd_comm_describe_library(buf, sizeof buf);
  say(d, "mpi", "%s, %s", buf, loaded_path("libmpi.so", path, sizeof path));
  const char *ompi = getenv("OMPI_COMM_WORLD_SIZE"), *step = getenv("SLURM_STEP_ID");
  const char *pmix = getenv("PMIX_RANK"), *job = getenv("SLURM_JOB_ID");
  if (ompi && !step) say(d, "launcher", "mpirun (Open MPI), %s ranks", ompi);
  else if (step && pmix) say(d, "launcher", "srun with PMIx (Slurm job %s, step %s)", job ? job : "?", step);
  else if (step) say(d, "launcher", "srun without PMIx (Slurm step %s): start with srun --mpi=pmix", step);
  else if (job) say(d, "launcher", "inside Slurm job %s but not in a step: start lstmd with srun", job);
  else {
    const char *mr = lstmd_on_path("mpirun", path, sizeof path);
    const char *sr = lstmd_on_path("srun", tool, sizeof tool);
    say(d, "launcher", "none: one rank (mpirun %s, srun %s)", mr ? mr : "not on PATH",
        sr ? sr : "not on PATH");
  }
}

/* The kernel module's version, or why there is none. */
static void driver_line(struct doctor *d) {
  char v[128] = "";
  FILE *f = fopen("/sys/module/nvidia/version", "r");
  if (f) {
    if (!fgets(v, sizeof v, f)) v[0] = '\0';
    fclose(f);
    v[strcspn(v, "\n")] = '\0';
  }
  say(d, "nvidia driver", "%s", v[0] ? v : "not loaded (no /sys/module/nvidia)");
}

/* The GPU module and the libraries it loaded (or where they were looked for), the GPUs, and
 * the precisions of the first GPU. */
static void gpu_lines(struct doctor *d) {
  char why[256], buf[512];
  const struct lstmd_gpu_backend *gpu = lstmd_gpu_backend();
  struct lstmd_gpu_library libs[8];
  const int nlibs = lstmd_gpu_backend_libraries(libs, 8);
  for (int i = 0; i < nlibs; i++) {
    char key[32];
    snprintf(key, sizeof key, "%s", strcmp(libs[i].name, "module") ? libs[i].name : "gpu module");
    if (libs[i].path[0]) say(d, key, "%s", libs[i].path);
    else say(d, key, "%s: %s", libs[i].soname, libs[i].note);
  }
  if (!gpu) {
    lstmd_gpu_backend_search_path(buf, sizeof buf);
    say(d, "gpu", "GPU backend not loaded: %s", lstmd_gpu_backend_why());
    say(d, "searched", "%s (LSTMD_CUDA_LIBS first)", buf);
    return;
  }
  const int count = gpu->probe(why, sizeof why);
  json_t *list = d->json ? json_array() : NULL;
  int cc0 = 0;
  for (int i = 0; i < count; i++) {
    int cc = 0;
    gpu->device_info(i, buf, sizeof buf, &cc);
    if (i == 0) cc0 = cc;
    if (d->json) json_array_append_new(list, json_string(buf));
    else printf("%-13s %d: %s\n", "gpu", i, buf);
  }
  if (list) json_object_set_new(d->root, "gpus", list);
  if (!count) say(d, "gpu", "none usable: %s", why);
  gpu->describe_libraries(buf, sizeof buf);
  say(d, "cuda", "%s", buf);
  gpu->describe_nccl(buf, sizeof buf);
  say(d, "nccl version", "%s", buf);
  /* cuDNN 9 runs every type; tensor-core TF32 and bf16 need Ampere (8.0) or newer. */
  if (!count) say(d, "precisions", "none on the GPU (no usable device); the CPU trains in fp32");
  else if (cc0 >= 80) say(d, "precisions", "fp32 tf32 bf16 fp16 (GPU 0, cuDNN %ld)", gpu->cudnn_version());
  else say(d, "precisions", "fp32 fp16 (GPU 0 is older than compute capability 8.0: no tf32, bf16)");
}

int lstmd_cmd_doctor(int argc, char **argv) {
  struct doctor d = {0};
  int want = LSTMD_DEVICE_AUTO;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      d.json = 1;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: lstmd doctor [--json] [--device auto|cpu|cuda]\n"
             "What this node trains with, and why: CPU, BLAS, MPI, the NVIDIA driver and GPU\n"
             "libraries, each GPU, and what train.device would pick. Exit 0 when it can train on\n"
             "the device asked for (default auto), 1 when not; --json gives one object.\n");
      return 0;
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      const char *v = argv[++i];
      want = !strcmp(v, "cpu") ? LSTMD_DEVICE_CPU : !strcmp(v, "cuda") ? LSTMD_DEVICE_CUDA
             : !strcmp(v, "auto") ? LSTMD_DEVICE_AUTO : -1;
      if (want < 0) {
        lstmd_errorf("doctor: --device %s: auto, cpu or cuda", v);
        return 2;
      }
    } else {
      lstmd_errorf("doctor: unknown argument '%s' (usage: lstmd doctor [--json] [--device "
                   "auto|cpu|cuda])", argv[i]);
      return 2;
    }
  }
  if (d.json) d.root = json_object();
  cpu_lines(&d);
  mpi_lines(&d);
  driver_line(&d);
  gpu_lines(&d);
  struct lstmd_device_probe probe;
  lstmd_device_probe_run(&probe);
  char msg[512];
  int backend = LSTMD_DEVICE_CPU;
  const int rc = lstmd_device_decide(want, &probe, &backend, msg, sizeof msg);
  const char *dev = backend == LSTMD_DEVICE_CUDA ? "cuda" : "cpu";
  if (rc) say(&d, "train.device", "%s: cannot: %s", want == LSTMD_DEVICE_CUDA ? "cuda" : "?", msg);
  else say(&d, "train.device", "%s -> %s%s%s", want == LSTMD_DEVICE_AUTO ? "auto"
                                               : want == LSTMD_DEVICE_CUDA ? "cuda" : "cpu",
           dev, msg[0] ? ": " : "", msg);
  say(&d, "verdict", "%s", rc ? "this node cannot train as asked" : "this node can train");
  if (d.json) {
    json_object_set_new(d.root, "can_train", json_boolean(rc == 0));
    json_dumpf(d.root, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
    printf("\n");
    json_decref(d.root);
  }
  return rc ? 1 : 0;
}
