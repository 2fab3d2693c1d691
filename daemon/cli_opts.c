/* cli_opts.c — what the subcommands share: the option parser, strict number parsing, --missing,
 * the check that an output is not an input, the exit codes and the stop signals. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>

#include "kernels/status.h"
#include "worker/data/dataset.h"
#include "worker/io/qcheckpoint.h"
#include "cli.h"

int lstmd_parse_opts(const char *cmd, int argc, char **argv, int first, struct lstmd_opt *opts,
                     int n_opts) {
  for (int i = first; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h")) arg = "--help"; /* an unknown option where there is no --help */
    if (strncmp(arg, "--", 2) != 0) {
      lstmd_errorf("%s: unexpected argument '%s'", cmd, arg);
      return 2;
    }
    const char *name = arg + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    struct lstmd_opt *o = NULL;
    for (int k = 0; k < n_opts; k++)
      if (strlen(opts[k].name) == len && !strncmp(opts[k].name, name, len)) o = &opts[k];
    if (!o) {
      lstmd_errorf("%s: unknown option '%s' (try lstmd %s --help)", cmd, arg, cmd);
      return 2;
    }
    if (o->flag) {
      *o->flag = 1;
      continue;
    }
    const char *value = eq ? eq + 1 : NULL;
    if (!value && i + 1 < argc && (strncmp(argv[i + 1], "--", 2) != 0 || !o->optional_value))
      value = argv[++i];
    if (!value && !o->optional_value) {
      lstmd_errorf("%s: option --%s needs a value", cmd, o->name);
      return 2;
    }
    if (o->on_value) {
      o->on_value(o->ctx, value);
      continue;
    }
    if (o->once && *o->value) { /* --config a.ini --config b.ini dropped a.ini */
      lstmd_errorf("%s: --%s given twice ('%s', then '%s'); it takes one (put the settings in "
                   "one file, or add them with --set)", cmd, o->name, *o->value,
                   value ? value : "");
      return 2;
    }
    *o->value = value ? value : "";
  }
  return 0;
}

int lstmd_opt_long(const char *cmd, const char *name, const char *text, long lo, long hi,
                   long *out) {
  char *end;
  errno = 0;
  long v = text ? strtol(text, &end, 10) : 0;
  if (!text || !*text || *end || errno || v < lo || v > hi) {
    lstmd_errorf("%s: --%s '%s' must be an integer in [%ld, %ld]", cmd, name, text ? text : "",
                 lo, hi);
    return 2;
  }
  *out = v;
  return 0;
}

int lstmd_opt_double(const char *cmd, const char *name, const char *text, double lo, double hi,
                     double *out) {
  char *end;
  errno = 0;
  double v = text ? strtod(text, &end) : 0;
  if (!text || !*text || *end || errno || !isfinite(v) || v < lo || v > hi) {
    lstmd_errorf("%s: --%s '%s' must be a number in [%g, %g]", cmd, name, text ? text : "", lo, hi);
    return 2;
  }
  *out = v;
  return 0;
}

int lstmd_opt_missing(const char *cmd, const char *text, int dflt, int *out) {
  *out = text ? lstmd_missing_parse(text) : dflt;
  if (*out >= 0 || !text) return 0;
  lstmd_errorf("%s: --missing '%s' is not one of error previous linear", cmd, text);
  return 2;
}

int lstmd_opt_not_same_file(const char *cmd, const char *in_name, const char *in,
                             const char *out_name, const char *out) {
  /* The file, not its name: "x.csv", "./x.csv", a symlink or a hard link to it are the same
   * inode on the same device. An output that does not exist yet is no input; an input that
   * cannot be stat'ed is left to the reader's own message. */
  struct stat a, b;
  if (stat(in, &a) != 0 || stat(out, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
    return 0;
  lstmd_errorf("%s: --%s '%s' is the --%s file '%s': writing it would replace the input; name "
               "another file", cmd, out_name, out, in_name, in);
  return 2;
}

int lstmd_opt_out_not_stdout(const char *cmd, const char *out, const char *what) {
  if (!out || strcmp(out, "-") != 0) return 0;
  lstmd_errorf("%s: --out -: '-' means stdout only for text output, and %s writes %s; name "
               "where it goes (./- for a path called '-')", cmd, cmd, what);
  return 2;
}

int lstmd_opt_out_replaces_no_input(const char *cmd, const char *out) {
  /* The rename would put an int8 model, an ONNX graph or a CSV in the place of a run's
   * checkpoint (its latest.safetensors: what --resume reads) or of a prepared split. Another
   * file (an earlier int8 model, ONNX graph or forecast) is replaced, as outputs are. */
  const char *what = lstmd_file_not_to_replace(out);
  if (!what) return 0;
  lstmd_errorf("%s: --out '%s' is %s: writing it would replace it; name another file (or remove "
               "it first)", cmd, out, what);
  return 2;
}

int lstmd_exit_code(int status) {
  switch (status) {
    case LSTMD_OK: return 0;
    case LSTMD_ENOMEM:
    case LSTMD_ECUDA:
    case LSTMD_ECOMM:
    case LSTMD_ENONFINITE: /* the run diverged: not the input's fault */
    case LSTMD_EWRITE:     /* a checkpoint, metrics or dataset file could not be written */
      return 1;
    default: return 2; /* bad usage or bad input: config, dataset, checkpoint, CSV */
  }
}

int lstmd_exit_after_stdout(const char *cmd, int exit_code) {
  errno = 0;
  if (fflush(stdout) == 0 && !ferror(stdout)) return exit_code;
  lstmd_errorf("%s: writing to stdout failed: %s", cmd, errno ? strerror(errno) : "write error");
  return exit_code ? exit_code : 1;
}

void lstmd_on_stop_signals(void (*handler)(int sig)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  const int sigs[] = {SIGINT, SIGTERM, SIGUSR1};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}

void lstmd_json_put_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
    else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
    else fputc(*c, f);
  fputc('"', f);
}
