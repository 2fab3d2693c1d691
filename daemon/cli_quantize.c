/* cli_quantize.c — `lstmd quantize`: the int8 model of a checkpoint (worker/io/qcheckpoint.h),
 * and with --calibrate, how much it loses against the fp32 model on a dataset's validation split.
 *
 * Why --calibrate does not pick activation ranges: the activations are quantised dynamically,
 * each row at each step from its own min and max (kernels/cpu/qgemm.h), as PyTorch's dynamic
 * quantisation of nn.LSTM does, so there are no ranges to calibrate. What a user deploying the
 * model needs to know is what it costs, so --calibrate scores both models on DIR and reports
 * the difference (bpc for text, the relative change of MSE for series). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/cpu/blas_cpu.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/status.h"
#include "worker/data/batcher.h"
#include "worker/data/dataset.h"
#include "worker/io/checkpoint.h"
#include "worker/io/qcheckpoint.h"
#include "worker/model/infer.h"
#include "worker/io/durable.h"
#include "cli.h"

static long long file_bytes(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* s as a JSON string, quotes included (malloc'd, NULL without memory): --out is printed in the
 * JSON line, and a path holding '"', '\\' or a control byte made that line invalid JSON. */
static char *json_quoted(const char *s) {
  char *q = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&q, &n);
  if (!f) return NULL;
  lstmd_json_put_string(f, s);
  if (fclose(f) != 0) {
    free(q);
    return NULL;
  }
  return q;
}

/* Opens DIR/val.bin for --calibrate and checks it against the checkpoint — before anything is
 * written, so that a wrong DIR exits 2 with no --out file made or replaced and nothing on stdout
 * (it used to be checked after the int8 file was written and its JSON half printed). Only
 * val.bin is read, as `lstmd eval` reads it. An --out that is one of DIR's splits is refused:
 * the rename would replace the dataset being scored with the int8 model. */
static int open_calibration(const char *dir, const char *out, const struct lstmd_data_meta *meta,
                            struct lstmd_dataset *val) {
  char path[4096];
  const char *split[2] = {"train.bin", "val.bin"};
  for (int k = 0; k < 2; k++) {
    snprintf(path, sizeof path, "%s/%s", dir, split[k]);
    if (lstmd_opt_not_same_file("quantize", "calibrate", path, "out", out)) return LSTMD_EINVAL;
  }
  int rc = lstmd_dataset_open(path, val); /* path: DIR/val.bin */
  if (!rc) rc = lstmd_dataset_verify(val);
  if (!rc) rc = lstmd_check_compatible(meta, val);
  if (!rc && lstmd_window_count(val, meta->seq_len) == 0) { /* what scoring it would say, later */
    lstmd_errorf("%s: too short for one window of seq_len %d", val->path, meta->seq_len);
    rc = LSTMD_ECONFIG;
  }
  if (rc) {
    lstmd_dataset_close(val);
    return rc;
  }
  lstmd_series_score_as_model(meta, val, "the checkpoint", "");
  return LSTMD_OK;
}

/* Scores both models on the validation split; appends the comparison as JSON fields to buf. */
static int calibrate(const struct lstmd_dataset *val, struct lstmd_model *fp32, const char *qpath,
                     const struct lstmd_data_meta *meta, char *buf, size_t cap) {
  struct lstmd_infer_model a = {fp32, NULL}, b = {NULL, NULL};
  struct lstmd_data_meta qmeta;
  LSTMD_TRY(lstmd_qcheckpoint_load(qpath, &b.int8, &qmeta)); /* the file as users will load it */
  double la = 0, lb = 0;
  uint64_t tokens = 0;
  int rc = LSTMD_OK;
  if (qmeta.tf.target != meta->tf.target || qmeta.tf.window_norm != meta->tf.window_norm) {
    lstmd_errorf("%s: its model.target/data.window_norm differ from the checkpoint's", qpath);
    rc = LSTMD_EFORMAT;
  }
  if (!rc) rc = lstmd_infer_evaluate(&a, val, meta->seq_len, meta->batch, &la, &tokens);
  if (!rc) rc = lstmd_infer_evaluate(&b, val, meta->seq_len, meta->batch, &lb, &tokens);
  lstmd_infer_model_destroy(&b);
  if (rc) return rc;
  size_t n = strlen(buf);
  if (meta->info.kind == LSTMD_DATASET_TEXT)
    n += snprintf(buf + n, cap - n, ",\"fp32_bpc\":%.6f,\"int8_bpc\":%.6f,\"delta_bpc\":%.6f",
                  la / M_LN2, lb / M_LN2, (lb - la) / M_LN2);
  else
    n += snprintf(buf + n, cap - n, ",\"fp32_mse\":%.6f,\"int8_mse\":%.6f,\"mse_change\":%.6f",
                  la, lb, lb / la - 1.0);
  snprintf(buf + n, cap - n, ",\"tokens\":%llu", (unsigned long long)tokens);
  return LSTMD_OK;
}

int lstmd_cmd_quantize(int argc, char **argv) {
  lstmd_durable_remove_temps_on_signal(); /* a Ctrl-C leaves no partial file beside --out */
  const char *ckpt = NULL, *out = NULL, *dir = NULL;
  int help = 0;
  struct lstmd_opt opts[] = {{"checkpoint", &ckpt}, {"out", &out}, {"calibrate", &dir},
                             {"help", NULL, &help}};
  int rc = lstmd_parse_opts("quantize", argc, argv, 2, opts, 4);
  if (rc || help) {
    fprintf(help ? stdout : stderr,
            "usage: lstmd quantize --checkpoint CKPT --out INT8 [--calibrate DIR]\n"
            "Writes the int8 model of CKPT (int8 weights, one fp32 scale per output row, fp32\n"
            "biases; activations quantised per step when it runs) for eval, sample and predict.\n"
            "--calibrate DIR also scores both models on DIR's validation split and reports the\n"
            "difference. Prints one JSON line.\n");
    return rc;
  }
  if (!ckpt || !out) {
    lstmd_errorf("quantize: --%s is required", ckpt ? "out" : "checkpoint");
    return 2;
  }
  if ((rc = lstmd_opt_out_not_stdout("quantize", out, "an int8 model (binary)")) ||
      (rc = lstmd_opt_not_same_file("quantize", "checkpoint", ckpt, "out", out)))
    return rc;
  lstmd_cpu_set_blas_threads(0);
  struct lstmd_model *m;
  struct lstmd_data_meta meta;
  if ((rc = lstmd_checkpoint_load_model(ckpt, &m, &meta))) return lstmd_exit_code(rc);
  if ((rc = lstmd_refuse_classifier("quantize", ckpt, m))) {
    lstmd_model_destroy(m);
    return rc;
  }
  struct lstmd_dataset val = {.fd = -1};
  if (dir && (rc = open_calibration(dir, out, &meta, &val))) {
    lstmd_model_destroy(m);
    return lstmd_exit_code(rc);
  }
  /* after DIR's own check, whose message names --calibrate for an --out among its splits */
  if ((rc = lstmd_opt_out_replaces_no_input("quantize", out))) {
    if (dir) lstmd_dataset_close(&val);
    lstmd_model_destroy(m);
    return rc;
  }
  /* The JSON line is printed whole, once everything succeeded: a failure leaves stdout empty. */
  char *quoted = json_quoted(out);
  const size_t cap = (quoted ? strlen(quoted) : 0) + 512;
  char *line = quoted ? malloc(cap) : NULL;
  rc = line ? lstmd_qcheckpoint_save(out, m, &meta, ckpt) : LSTMD_ENOMEM;
  if (!rc) {
    snprintf(line, cap, "{\"out\":%s,\"bytes\":%lld,\"fp32_bytes\":%lld,\"int8_kernel\":\"%s\"",
             quoted, file_bytes(out), file_bytes(ckpt), lstmd_cpu_qkernel_name(lstmd_cpu_qkernel()));
    if (dir) rc = calibrate(&val, m, out, &meta, line, cap);
    if (!rc) printf("%s}\n", line);
  }
  free(line);
  free(quoted);
  if (dir) lstmd_dataset_close(&val);
  lstmd_model_destroy(m);
  return lstmd_exit_code(rc);
}
