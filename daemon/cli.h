/* cli.h — subcommands of the lstmd binary and the small option parser they share.
 * Exit codes: 0 success, 2 bad usage or bad input (config, data, checkpoint), 1 other failures. */
#ifndef LSTMD_CLI_H
#define LSTMD_CLI_H

#include <stdint.h>

int lstmd_cmd_prepare(int argc, char **argv);
int lstmd_cmd_train(int argc, char **argv);
int lstmd_cmd_eval(int argc, char **argv);
int lstmd_cmd_sample(int argc, char **argv);
int lstmd_cmd_predict(int argc, char **argv);
int lstmd_cmd_quantize(int argc, char **argv); /* cli_quantize.c */
int lstmd_cmd_serve(int argc, char **argv);
int lstmd_cmd_doctor(int argc, char **argv);   /* cli_doctor.c */
int lstmd_cmd_selftest(int argc, char **argv); /* cli_selftest.c */
int lstmd_cmd_export(int argc, char **argv);   /* cli_export.c */
int lstmd_cmd_classify(int argc, char **argv); /* cli_classify.c */
int lstmd_cmd_pipe_predict(int argc, char **argv); /* cli_pipe_predict.c */

struct lstmd_model;
struct lstmd_data_meta;
struct lstmd_dataset;
/* 2 after a message when m is a sequence classifier, which `cmd` cannot use; 0 otherwise. */
int lstmd_refuse_classifier(const char *cmd, const char *ckpt, const struct lstmd_model *m);
/* `lstmd eval` of a classifier: scores val, prints the JSON line (loss, accuracy, sequences,
 * labels, confusion [label][predicted]). Returns a status. */
int lstmd_classify_eval_print(const struct lstmd_model *m, const struct lstmd_data_meta *meta,
                              const struct lstmd_dataset *val, int batch);

/* One --name VALUE / --name=VALUE option a subcommand accepts. */
struct lstmd_opt {
  const char *name;    /* without the leading "--" */
  const char **value;  /* set to the option's value; NULL for flags */
  int *flag;           /* set to 1 for flags */
  int optional_value;  /* value may be absent (next arg starts with "--" or is missing) */
  void (*on_value)(void *ctx, const char *value);
  void *ctx;
  int once;            /* given twice is refused (exit 2): --config, whose second file would
                        * silently replace the first one's settings; other options: the last wins.
                        * Its variable must start NULL: a value there is the first one given */
};

/* Parses argv[first..argc) against opts ("-h" is read as "--help"). Unknown options, missing
 * values and stray arguments print a message naming the command and return 2. */
int lstmd_parse_opts(const char *cmd, int argc, char **argv, int first, struct lstmd_opt *opts,
                     int n_opts);
/* Strict numbers for option values: whole string, within [lo, hi]; message + 2 on failure. */
int lstmd_opt_long(const char *cmd, const char *name, const char *text, long lo, long hi, long *out);
/* s as a JSON string, quotes included ('"', '\\' and control bytes escaped), written to f: for
 * the names and paths the commands' JSON lines carry. */
void lstmd_json_put_string(FILE *f, const char *s);
int lstmd_opt_double(const char *cmd, const char *name, const char *text, double lo, double hi,
                     double *out);
/* --missing's value text as an enum lstmd_missing (worker/data/dataset.h) in *out: error,
 * previous or linear; NULL (not given) dflt. Anything else: "CMD: --missing 'X' is not one of
 * error previous linear" and 2. */
int lstmd_opt_missing(const char *cmd, const char *text, int dflt, int *out);
/* 2 after a message naming both options when `out` is the file `in` (the same device and
 * inode: another spelling, a symlink or a hard link of it); 0 otherwise, also when either is
 * missing. */
int lstmd_opt_not_same_file(const char *cmd, const char *in_name, const char *in,
                            const char *out_name, const char *out);
/* `--out -` is stdout where the output is text (predict's CSV); where it is binary or a folder
 * (what: "a dataset folder", "an int8 model", ...) this prints "CMD: --out -: '-' means stdout
 * only for text output, and CMD writes WHAT; ..." and returns 2; 0 for any other out (NULL
 * included). */
int lstmd_opt_out_not_stdout(const char *cmd, const char *out, const char *what);
/* 2 after a message when `out` exists and is a training checkpoint or a dataset split
 * (lstmd_file_not_to_replace), which quantize, export and predict must not replace; else 0. */
int lstmd_opt_out_replaces_no_input(const char *cmd, const char *out);
/* The signals that ask a run to stop cleanly (finish the step, checkpoint, exit 0): SIGINT,
 * SIGTERM (Slurm's scancel, time limit, preemption) and SIGUSR1 (what mpirun forwards to every
 * rank, and what the systemd unit sends). handler must be async-signal-safe. */
void lstmd_on_stop_signals(void (*handler)(int sig));
/* Maps a library status to the process exit code (see above). */
int lstmd_exit_code(int status);
/* exit_code, once stdout is flushed: where a write to it failed (a full disk, /dev/full, a
 * closed pipe) it says so ("CMD: writing to stdout failed: ...") and returns 1, an output that
 * could not be written, where the exit status said success. */
int lstmd_exit_after_stdout(const char *cmd, int exit_code);

#endif
