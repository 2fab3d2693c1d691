/* cli_prepare.c — `lstmd prepare text|series|classify`. */
#include <stdio.h>
#include <string.h>

#include "kernels/status.h"
#include "worker/data/dataset.h"
#include "worker/data/prepare.h"
#include "worker/io/durable.h"
#include "cli.h"

static int need(const char *cmd, const char *name, const char *value) {
  if (value) return 0;
  lstmd_errorf("%s: --%s is required", cmd, name);
  return 2;
}

/* A prepare's status as the exit code; a failed one leaves no --out directory it made (empty:
 * its writers removed their temp files), as an interrupted one does. */
static int prepared(int status) {
  if (status) lstmd_mkdir_output_undo();
  return lstmd_exit_code(status);
}

int lstmd_cmd_prepare(int argc, char **argv) {
  lstmd_durable_remove_temps_on_signal(); /* a Ctrl-C leaves no partial split beside DIR's */
  const char *kind = argc > 2 ? argv[2] : "";
  const char *input = NULL, *out = NULL, *vf = "0.05", *target = NULL, *features = NULL,
             *horizon = "1", *season = "0", *missing_text = NULL;
  int help = 0;
  if (!strcmp(kind, "text")) {
    struct lstmd_opt opts[] = {{"input", &input}, {"out", &out}, {"val-fraction", &vf},
                               {"help", NULL, &help}};
    int rc = lstmd_parse_opts("prepare text", argc, argv, 3, opts, 4);
    if (rc || help) {
      fprintf(help ? stdout : stderr, "usage: lstmd prepare text --input FILE --out DIR [--val-fraction F]\n");
      return rc;
    }
    double f;
    if ((rc = need("prepare text", "input", input)) || (rc = need("prepare text", "out", out)) ||
        (rc = lstmd_opt_out_not_stdout("prepare text", out, "a dataset folder")) ||
        (rc = lstmd_opt_double("prepare text", "val-fraction", vf, 0.0, 0.5, &f)))
      return rc;
    return prepared(lstmd_prepare_text(input, out, f));
  }
  if (!strcmp(kind, "series")) {
    struct lstmd_opt opts[] = {{"input", &input},       {"out", &out},         {"target", &target},
                               {"features", &features}, {"horizon", &horizon}, {"val-fraction", &vf},
                               {"season", &season},     {"missing", &missing_text},
                               {"help", NULL, &help}};
    int rc = lstmd_parse_opts("prepare series", argc, argv, 3, opts, 9);
    if (rc || help) {
      fprintf(help ? stdout : stderr,
              "usage: lstmd prepare series --input FILE.csv --target COL [--features A,B,...]\n"
              "                            [--horizon K] --out DIR [--val-fraction F] [--season P]\n"
              "                            [--missing error|previous|linear]\n"
              "--season P: rows per seasonal cycle, for the seasonal-naive baseline (0: none)\n"
              "--missing: a field that is empty, NA, N/A, NaN or null refuses the file (error, the\n"
              "  default), takes the last value before it (previous) or the straight line between\n"
              "  its neighbours (linear); a gap at either end takes the nearest value\n");
      return rc;
    }
    double f;
    long k, p;
    int m;
    if ((rc = need("prepare series", "input", input)) || (rc = need("prepare series", "out", out)) ||
        (rc = lstmd_opt_out_not_stdout("prepare series", out, "a dataset folder")) ||
        (rc = need("prepare series", "target", target)) ||
        (rc = lstmd_opt_double("prepare series", "val-fraction", vf, 0.0, 0.5, &f)) ||
        (rc = lstmd_opt_long("prepare series", "horizon", horizon, 1, 4096, &k)) ||
        (rc = lstmd_opt_long("prepare series", "season", season, 0, LSTMD_MAX_SEASON, &p)) ||
        (rc = lstmd_opt_missing("prepare series", missing_text, LSTMD_MISSING_ERROR, &m)))
      return rc;
    return prepared(lstmd_prepare_series(input, out, target, features, (int)k, f, (int)p, m));
  }
  if (!strcmp(kind, "classify")) {
    /* defaults: 1, auto and error (--series only) */
    const char *label_column = NULL, *header = NULL;
    int series = 0;
    struct lstmd_opt opts[] = {{"input", &input},         {"out", &out},
                               {"val-fraction", &vf},     {"series", NULL, &series},
                               {"label-column", &label_column}, {"header", &header},
                               {"missing", &missing_text}, {"help", NULL, &help}};
    int rc = lstmd_parse_opts("prepare classify", argc, argv, 3, opts, 8);
    if (rc || help) {
      fprintf(help ? stdout : stderr,
              "usage: lstmd prepare classify --input FILE.tsv --out DIR [--val-fraction F]\n"
              "       lstmd prepare classify --series --input FILE.csv --out DIR [--val-fraction F]\n"
              "                              [--label-column C|last] [--header auto|yes|no]\n"
              "                              [--missing error|previous|linear]\n"
              "FILE.tsv: label<TAB>text per line (text is byte-level; labels any strings)\n"
              "--series: FILE.csv rows of one label and N numbers each (N the same in every row:\n"
              "  a univariate series of N steps); the label is column C (1-based, default 1) or\n"
              "  the last; --header auto takes the first line as a header when none of its\n"
              "  value fields is a number; --missing: a value that is empty, NA, N/A, NaN or null\n"
              "  refuses the file (error, the default), takes the last value before it in its row\n"
              "  (previous) or the straight line between its neighbours in the row (linear); a\n"
              "  row is one series, filled from its own values only\n");
      return rc;
    }
    double f;
    long col = 0;
    if ((rc = need("prepare classify", "input", input)) ||
        (rc = need("prepare classify", "out", out)) ||
        (rc = lstmd_opt_out_not_stdout("prepare classify", out, "a dataset folder")) ||
        (rc = lstmd_opt_double("prepare classify", "val-fraction", vf, 0.0, 0.5, &f)))
      return rc;
    if (!series) {
      if (label_column || header || missing_text) {
        lstmd_errorf("prepare classify: --label-column, --header and --missing belong to --series");
        return 2;
      }
      return prepared(lstmd_prepare_classify(input, out, f));
    }
    if (!label_column) label_column = "1";
    if (!header) header = "auto";
    if (strcmp(label_column, "last") &&
        (rc = lstmd_opt_long("prepare classify", "label-column", label_column, 1, 1 << 20, &col)))
      return rc;
    const int hdr = !strcmp(header, "yes") ? 1 : !strcmp(header, "no") ? 0
                    : !strcmp(header, "auto") ? -1 : -2;
    if (hdr == -2) {
      lstmd_errorf("prepare classify: --header '%s' is not one of auto yes no", header);
      return 2;
    }
    int m;
    if ((rc = lstmd_opt_missing("prepare classify", missing_text, LSTMD_MISSING_ERROR, &m)))
      return rc;
    return prepared(lstmd_prepare_classify_series(input, out, f, (int)col, hdr, m));
  }
  const int help_asked = !strcmp(kind, "--help") || !strcmp(kind, "-h");
  if (!help_asked) lstmd_errorf("prepare: expected 'text', 'series' or 'classify', got '%s'", kind);
  fprintf(help_asked ? stdout : stderr,
          "usage: lstmd prepare text|series|classify --input FILE --out DIR [...]\n"
          "(lstmd prepare text --help, and so on, for each one's options)\n");
  return help_asked ? 0 : 2;
}
