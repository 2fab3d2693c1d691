/* cli_infer.c — `lstmd eval`, `lstmd sample`, `lstmd predict`: using a checkpoint or the int8
 * model `lstmd quantize` made of one (whichever the file is). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "worker/io/checkpoint.h"
#include "worker/data/dataset.h"
#include "worker/model/infer.h"
#include "kernels/cpu/blas_cpu.h"
#include "cli.h"

static int require(const char *cmd, const char *name, const char *value) {
  if (value) return 0;
  lstmd_errorf("%s: --%s is required", cmd, name);
  return 2;
}

int lstmd_cmd_eval(int argc, char **argv) {
  const char *ckpt = NULL, *data = NULL, *batch_text = NULL;
  int help = 0;
  struct lstmd_opt opts[] = {{"checkpoint", &ckpt}, {"data", &data}, {"batch", &batch_text},
                             {"help", NULL, &help}};
  int rc = lstmd_parse_opts("eval", argc, argv, 2, opts, 4);
  if (rc || help) {
    fprintf(help ? stdout : stderr, "usage: lstmd eval --checkpoint CKPT --data DIR [--batch N]\n"
            "Scores the validation split; prints one JSON line: loss, bpc (text), tokens; for\n"
            "series also mse_persistence, season and mse_seasonal, skill, target, window_norm;\n"
            "for a classifier loss, accuracy, sequences, labels and confusion [label][predicted].\n");
    return rc;
  }
  if ((rc = require("eval", "checkpoint", ckpt)) || (rc = require("eval", "data", data))) return rc;
  long batch = 0;
  if (batch_text && (rc = lstmd_opt_long("eval", "batch", batch_text, 1, 65536, &batch))) return rc;
  lstmd_cpu_set_blas_threads(0);
  struct lstmd_infer_model m;
  struct lstmd_data_meta meta;
  if ((rc = lstmd_infer_model_load(ckpt, &m, &meta))) return lstmd_exit_code(rc);
  /* Only DIR/val.bin: its header carries everything eval needs besides the scores (the
   * vocabulary, columns, labels and the training split's statistics are in both splits' headers,
   * and the checkpoint holds the model's own), so a folder of just val.bin is scored. */
  struct lstmd_dataset val;
  char val_path[4096];
  snprintf(val_path, sizeof val_path, "%s/val.bin", data);
  rc = lstmd_dataset_open(val_path, &val);
  if (!rc && (rc = lstmd_dataset_verify(&val))) lstmd_dataset_close(&val);
  if (m.fp32 && m.fp32->shape.kind == LSTMD_MODEL_CLASSIFY) { /* cli_classify.c */
    if (!rc) {
      rc = lstmd_classify_eval_print(m.fp32, &meta, &val, batch ? (int)batch : meta.batch);
      lstmd_dataset_close(&val);
    }
    lstmd_infer_model_destroy(&m);
    return lstmd_exit_code(rc);
  }
  struct lstmd_eval_result res = {0};
  if (!rc) {
    rc = lstmd_check_compatible(&meta, &val);
    char why[320];
    if (!rc && lstmd_series_use_model_stats(&meta, &val, why, sizeof why) >= 0)
      fprintf(stderr, "lstmd: note: %s was prepared with other statistics than %s was trained "
              "with (%s); scoring with the checkpoint's, as predict does\n", val_path, ckpt, why);
    if (!rc)
      rc = lstmd_infer_evaluate_full(&m, &val, meta.seq_len, batch ? (int)batch : meta.batch, 1,
                                     &res);
    lstmd_dataset_close(&val);
  }
  const int int8 = m.int8 != NULL;
  lstmd_infer_model_destroy(&m);
  char *sparsity = NULL; /* a pruned checkpoint's masks (an int8 file has none) */
  if (!rc && !int8) rc = lstmd_checkpoint_sparsity_json(ckpt, &sparsity);
  if (rc) return lstmd_exit_code(rc);
  const double loss = res.loss;
  const unsigned long long tokens = (unsigned long long)res.tokens;
  if (meta.info.kind == LSTMD_DATASET_TEXT) {
    printf("{\"loss\":%.6f,\"bpc\":%.6f,\"tokens\":%llu", loss, loss / M_LN2, tokens);
  } else {
    printf("{\"loss\":%.6f,\"tokens\":%llu,\"mse_persistence\":%.6f", loss, tokens,
           res.mse_persistence);
    if (val.info.season) printf(",\"season\":%d,\"mse_seasonal\":%.6f", val.info.season,
                                res.mse_seasonal);
    if (isfinite(res.skill)) printf(",\"skill\":%.6f", res.skill);
    else printf(",\"skill\":null"); /* persistence exact (a flat split): JSON has no -inf */
    printf(",\"target\":\"%s\",\"window_norm\":\"%s\"",
           lstmd_series_target_name(meta.tf.target), lstmd_window_norm_name(meta.tf.window_norm));
  }
  printf("%s%s}\n", sparsity ? ",\"sparsity\":" : "", sparsity ? sparsity : "");
  free(sparsity);
  return 0;
}

int lstmd_cmd_sample(int argc, char **argv) {
  const char *ckpt = NULL, *prime = NULL, *length_text = "200", *temp_text = "1.0", *seed_text = "1";
  int help = 0;
  struct lstmd_opt opts[] = {{"checkpoint", &ckpt},       {"prime", &prime},
                             {"length", &length_text},    {"temperature", &temp_text},
                             {"seed", &seed_text},        {"help", NULL, &help}};
  int rc = lstmd_parse_opts("sample", argc, argv, 2, opts, 6);
  if (rc || help) {
    fprintf(help ? stdout : stderr,
            "usage: lstmd sample --checkpoint CKPT [--prime TEXT] [--length N] [--temperature T]"
            " [--seed S]\nWrites the prime, then N generated bytes, to stdout. T=0 is greedy.\n"
            "Defaults: N 200, T 1, S 1, the prime a newline (printed too).\n");
    return rc;
  }
  long length, seed;
  double temperature;
  if ((rc = require("sample", "checkpoint", ckpt)) ||
      (rc = lstmd_opt_long("sample", "length", length_text, 0, 100000000, &length)) ||
      (rc = lstmd_opt_double("sample", "temperature", temp_text, 0.0, 100.0, &temperature)) ||
      (rc = lstmd_opt_long("sample", "seed", seed_text, 0, 0x7fffffffffffffffL, &seed)))
    return rc;
  lstmd_cpu_set_blas_threads(1); /* one token at a time: threads only add overhead */
  struct lstmd_infer_model m;
  struct lstmd_data_meta meta;
  if ((rc = lstmd_infer_model_load(ckpt, &m, &meta))) return lstmd_exit_code(rc);
  if ((rc = lstmd_refuse_classifier("sample", ckpt, m.fp32))) {
    lstmd_infer_model_destroy(&m);
    return rc;
  }
  rc = lstmd_sample(&m, &meta, ckpt, prime, length, (float)temperature, (uint64_t)seed, stdout);
  lstmd_infer_model_destroy(&m);
  return lstmd_exit_code(rc);
}

int lstmd_cmd_predict(int argc, char **argv) {
  const char *ckpt = NULL, *input = NULL, *out = NULL, *batch_text = "64", *missing_text = NULL;
  int help = 0, baselines = 0;
  struct lstmd_opt opts[] = {{"checkpoint", &ckpt}, {"input", &input}, {"out", &out},
                             {"batch", &batch_text}, {"baselines", NULL, &baselines},
                             {"missing", &missing_text}, {"help", NULL, &help}};
  int rc = lstmd_parse_opts("predict", argc, argv, 2, opts, 7);
  if (rc || help) {
    fprintf(help ? stdout : stderr,
            "usage: lstmd predict --checkpoint CKPT --input FILE.csv --out FILE.csv [--batch N]"
            " [--baselines]\n"
            "                     [--missing error|previous|linear]\n"
            "Writes, for every input row, the forecast of the next K target values; --baselines\n"
            "adds the persistence and (with a season) seasonal-naive forecasts as columns.\n"
            "--missing: what an empty, NA, N/A, NaN or null field becomes, as in prepare series\n"
            "  (default: what the model's training data was prepared with, else error).\n");
    return rc;
  }
  long batch;
  int missing;
  if ((rc = require("predict", "checkpoint", ckpt)) || (rc = require("predict", "input", input)) ||
      (rc = require("predict", "out", out)) ||
      (rc = lstmd_opt_not_same_file("predict", "input", input, "out", out)) ||
      /* and not the model either: the CSV would replace the checkpoint it is forecast with */
      (rc = lstmd_opt_not_same_file("predict", "checkpoint", ckpt, "out", out)) ||
      (rc = lstmd_opt_long("predict", "batch", batch_text, 1, 65536, &batch)) ||
      /* -1: as the model's training data was prepared */
      (rc = lstmd_opt_missing("predict", missing_text, -1, &missing)))
    return rc;
  lstmd_cpu_set_blas_threads(0);
  struct lstmd_infer_model m;
  struct lstmd_data_meta meta;
  if ((rc = lstmd_infer_model_load(ckpt, &m, &meta))) return lstmd_exit_code(rc);
  if ((rc = lstmd_refuse_classifier("predict", ckpt, m.fp32))) {
    lstmd_infer_model_destroy(&m);
    return rc;
  }
  rc = lstmd_predict(&m, &meta, ckpt, input, out, (int)batch, baselines, missing);
  lstmd_infer_model_destroy(&m);
  return lstmd_exit_code(rc);
}
