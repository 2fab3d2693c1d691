/* cli_prepare.c — `lstmd prepare text|series|classify`. */
#include <stdio.h>
#include <string.h>

#include "kernels/status.h"
#include "worker/data/dataset.h"
#include "worker/data/prepare.h"
#include "cli.h"

static int need(const char *cmd, const char *name, const char *value) {
  if (value) return 0;
  lstmd_errorf("%s: --%s is required", cmd, name);
  return 2;
}

int lstmd_cmd_prepare(int argc, char **argv) {
  const char *kind = argc > 2 ? argv[2] : "";
  const char *input = NULL, *out = NULL, *vf = "0.05", *target = NULL, *features = NULL,
             *horizon = "1", *season = "0";
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
        (rc = lstmd_opt_double("prepare text", "val-fraction", vf, 0.0, 0.5, &f)))
      return rc;
    return lstmd_exit_code(lstmd_prepare_text(input, out, f));
  }
  if (!strcmp(kind, "series")) {
    struct lstmd_opt opts[] = {{"input", &input},       {"out", &out},         {"target", &target},
                               {"features", &features}, {"horizon", &horizon}, {"val-fraction", &vf},
                               {"season", &season},     {"help", NULL, &help}};
    int rc = lstmd_parse_opts("prepare series", argc, argv, 3, opts, 8);
    if (rc || help) {
      fprintf(help ? stdout : stderr,
              "usage: lstmd prepare series --input FILE.csv --target COL [--features A,B,...]\n"
              "                            [--horizon K] --out DIR [--val-fraction F] [--season P]\n"
              "--season P: rows per seasonal cycle, for the seasonal-naive baseline (0: none)\n");
      return rc;
    }
    double f;
    long k, p;
    if ((rc = need("prepare series", "input", input)) || (rc = need("prepare series", "out", out)) ||
        (rc = need("prepare series", "target", target)) ||
        (rc = lstmd_opt_double("prepare series", "val-fraction", vf, 0.0, 0.5, &f)) ||
        (rc = lstmd_opt_long("prepare series", "horizon", horizon, 1, 4096, &k)) ||
        (rc = lstmd_opt_long("prepare series", "season", season, 0, LSTMD_MAX_SEASON, &p)))
      return rc;
    return lstmd_exit_code(lstmd_prepare_series(input, out, target, features, (int)k, f, (int)p));
  }
  if (!strcmp(kind, "classify")) {
    struct lstmd_opt opts[] = {{"input", &input}, {"out", &out}, {"val-fraction", &vf},
                               {"help", NULL, &help}};
    int rc = lstmd_parse_opts("prepare classify", argc, argv, 3, opts, 4);
    if (rc || help) {
      fprintf(help ? stdout : stderr,
              "usage: lstmd prepare classify --input FILE.tsv --out DIR [--val-fraction F]\n"
              "FILE.tsv: label<TAB>text per line (text is byte-level; labels any strings)\n");
      return rc;
    }
    double f;
    if ((rc = need("prepare classify", "input", input)) ||
        (rc = need("prepare classify", "out", out)) ||
        (rc = lstmd_opt_double("prepare classify", "val-fraction", vf, 0.0, 0.5, &f)))
      return rc;
    return lstmd_exit_code(lstmd_prepare_classify(input, out, f));
  }
  lstmd_errorf("prepare: expected 'text', 'series' or 'classify', got '%s'", kind);
  return 2;
}
