/* main.c — the lstmd entry point: picks BLAS kernels, then dispatches the subcommand. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/cpu/blas_cpu.h"
#include "kernels/status.h"
#include "blas_setup.h"
#include "cli.h"
#include "worker/engine/gpu_backend.h"

#define LSTMD_VERSION LSTMD_VERSION_STRING /* CMakeLists.txt: project(VERSION) */

/* Set by CMakeLists.txt from cmake/DetectGpu.cmake: LSTMD_BUILT_WITH_* say what this binary
 * contains (the GPU backend needs CUDA and cuDNN; NCCL is optional), LSTMD_CONFIGURE_* what the
 * configure step found. */
#ifndef LSTMD_BUILT_WITH_CUDA
#define LSTMD_BUILT_WITH_CUDA 0
#endif
#ifndef LSTMD_BUILT_WITH_CUDNN
#define LSTMD_BUILT_WITH_CUDNN 0
#endif
#ifndef LSTMD_BUILT_WITH_NCCL
#define LSTMD_BUILT_WITH_NCCL 0
#endif
#ifndef LSTMD_CONFIGURE_CUDA
#define LSTMD_CONFIGURE_CUDA "not found"
#endif
#ifndef LSTMD_CONFIGURE_CUDNN
#define LSTMD_CONFIGURE_CUDNN "not found"
#endif
#ifndef LSTMD_CONFIGURE_NCCL
#define LSTMD_CONFIGURE_NCCL "not found"
#endif

/* lstmd --version: this build and the libraries it runs with. No MPI_Init (a login node may
 * have no MPI runtime set up); the MPI calls used are allowed before it. */
static void print_version(void) {
  char buf[512];
  printf("lstmd %s\n", LSTMD_VERSION);
  lstmd_comm_describe_library(buf, sizeof buf);
  printf("MPI:         %s\n", buf);
  lstmd_cpu_blas_describe(buf, sizeof buf);
  printf("BLAS:        %s", buf);
  lstmd_cpu_blas_config(buf, sizeof buf);
  printf(" (%s)\n", buf);
  printf("CPU backend: built\n");
  printf("GPU backend: %s (found at configure time: CUDA %s, cuDNN %s, NCCL %s)\n",
         LSTMD_BUILT_WITH_CUDA ? "built" : "not built", LSTMD_CONFIGURE_CUDA,
         LSTMD_CONFIGURE_CUDNN, LSTMD_CONFIGURE_NCCL);
  printf("compiled in: CUDA %s, cuDNN %s, NCCL %s\n", LSTMD_BUILT_WITH_CUDA ? "yes" : "no",
         LSTMD_BUILT_WITH_CUDNN ? "yes" : "no", LSTMD_BUILT_WITH_NCCL ? "yes" : "no");
  const struct lstmd_gpu_backend *gpu = lstmd_gpu_backend();
  if (!gpu) {
    printf("GPU runtime: not loaded: %s\n", lstmd_gpu_backend_why());
    return;
  }
  struct lstmd_gpu_library libs[8];
  const int n = lstmd_gpu_backend_libraries(libs, 8);
  for (int i = 0; i < n; i++) printf("GPU library: %-8s %s\n", libs[i].name, libs[i].path);
  gpu->describe_libraries(buf, sizeof buf);
  printf("GPU runtime: %s, ", buf);
  gpu->describe_nccl(buf, sizeof buf);
  printf("%s\n", buf);
  char why[256];
  const int devices = gpu->probe(why, sizeof why);
  printf("GPU devices: %d", devices);
  if (!devices) printf(" (%s)", why);
  printf("\n");
}

static void usage(FILE *out) {
  fprintf(out,
          "lstmd " LSTMD_VERSION " — LSTM training on CPUs and GPUs\n\n"
          "usage:\n"
          "  lstmd prepare text     --input FILE --out DIR [--val-fraction F]\n"
          "  lstmd prepare series   --input FILE.csv --target COL [--features A,B,...] [--horizon K]\n"
          "                         --out DIR [--val-fraction F] [--season P] [--missing error|previous|linear]\n"
          "  lstmd prepare classify --input FILE.tsv --out DIR [--val-fraction F]   (label<TAB>text per line)\n"
          "  lstmd prepare classify --series --input FILE.csv --out DIR [--val-fraction F]\n"
          "                         [--label-column C|last] [--header auto|yes|no]   (a label, N numbers per row)\n"
          "                         [--missing error|previous|linear]\n"
          "  lstmd train    --config JOB.ini [--set section.key=value ...] [--resume [CKPT]] [--trace FILE]\n"
          "                 [--device auto|cpu|cuda]\n"
          "  lstmd eval     --checkpoint CKPT --data DIR [--batch N]        (one JSON line on stdout)\n"
          "  lstmd sample   --checkpoint CKPT [--prime TEXT] [--length N] [--temperature T] [--seed S]\n"
          "  lstmd predict  --checkpoint CKPT --input FILE.csv --out FILE.csv [--batch N] [--baselines]\n"
          "                 [--missing error|previous|linear]\n"
          "  lstmd classify --checkpoint CKPT --input FILE                  (a classifier: label<TAB>p per line)\n"
          "                 [--missing error|previous|linear]                (a series classifier's CSV)\n"
          "  lstmd quantize --checkpoint CKPT --out INT8 [--calibrate DIR]  (int8 model for eval/sample/predict)\n"
          "  lstmd export onnx --checkpoint CKPT --out MODEL.onnx [--opset N] [--int8]   (an ONNX graph)\n"
          "  lstmd serve    --socket PATH --state-dir DIR [--data-root DIR] [--listen [HOST:]PORT\n"
          "                 --token-file F] [--socket-group NAME] [...]   (the job daemon, with lstmctl)\n"
          "  lstmd doctor   [--json] [--device auto|cpu|cuda]              (what this node trains with, and why)\n"
          "  lstmd selftest [--gpu] [--bench] [--out DIR] [--only GROUP]   (checks: PASS/FAIL/SKIP lines)\n"
          "  lstmd pipe-predict [--stages 2,4,8] [--layers L --hidden H ...]   (GPU pipeline step times,\n"
          "                     predicted from one GPU's per-chunk cuDNN times)\n"
          "  lstmd --version                                               (lstmd, MPI, OpenBLAS, backends built)\n"
          "\n`lstmd COMMAND --help` for each one; `lstmd train --help` lists the config keys. Data\n"
          "goes to stdout, messages to stderr. README.md \"Command line\" holds these lines.\n");
}

int main(int argc, char **argv) {
  /* Past a file size limit (ulimit -f, a quota's stand-in) a write fails with EFBIG, which every
   * writer reports (exit 1) and cleans up after (its temp file removed), instead of SIGXFSZ
   * ending the process mid-write with the temp file left. */
  signal(SIGXFSZ, SIG_IGN);
  lstmd_blas_select_kernels(argv);
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    print_version();
    return 0;
  }
  static const struct {
    const char *name;
    int (*run)(int, char **);
  } commands[] = {{"prepare", lstmd_cmd_prepare}, {"train", lstmd_cmd_train},
                  {"eval", lstmd_cmd_eval},       {"sample", lstmd_cmd_sample},
                  {"predict", lstmd_cmd_predict}, {"serve", lstmd_cmd_serve},
                  {"quantize", lstmd_cmd_quantize}, {"doctor", lstmd_cmd_doctor},
                  {"selftest", lstmd_cmd_selftest},   {"export", lstmd_cmd_export},
                  {"pipe-predict", lstmd_cmd_pipe_predict},
                  {"classify", lstmd_cmd_classify}};
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc, argv);
  lstmd_errorf("unknown command '%s'", argv[1]);
  usage(stderr);
  return 2;
}
