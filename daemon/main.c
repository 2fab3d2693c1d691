/* main.c — the lstmd entry point: picks BLAS kernels, then dispatches the subcommand. */
#include <stdio.h>
#include <string.h>

#include "../kernels/status.h"
#include "blas_setup.h"
#include "cli.h"

#define LSTMD_VERSION "0.1.0"

static void usage(FILE *out) {
  fprintf(out,
          "lstmd " LSTMD_VERSION " — LSTM training on CPUs and GPUs\n\n"
          "usage:\n"
          "  lstmd prepare text   --input FILE --out DIR [--val-fraction F]\n"
          "  lstmd prepare series --input FILE.csv --target COL [--features A,B,...] [--horizon K]\n"
          "                       --out DIR [--val-fraction F]\n"
          "  lstmd train   --config JOB.ini [--set section.key=value ...] [--resume [CKPT]]\n"
          "  lstmd eval    --checkpoint CKPT --data DIR [--batch N]\n"
          "  lstmd sample  --checkpoint CKPT [--prime TEXT] [--length N] [--temperature T] [--seed S]\n"
          "  lstmd predict --checkpoint CKPT --input FILE.csv --out FILE.csv [--batch N]\n\n"
          "`lstmd train --help` lists the config keys. Data goes to stdout, messages to stderr.\n");
}

int main(int argc, char **argv) {
  lstmd_blas_select_kernels(argv);
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("lstmd %s\n", LSTMD_VERSION);
    return 0;
  }
  static const struct {
    const char *name;
    int (*run)(int, char **);
  } commands[] = {{"prepare", lstmd_cmd_prepare}, {"train", lstmd_cmd_train},
                  {"eval", lstmd_cmd_eval},       {"sample", lstmd_cmd_sample},
                  {"predict", lstmd_cmd_predict}};
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc, argv);
  lstmd_errorf("unknown command '%s'", argv[1]);
  usage(stderr);
  return 2;
}
