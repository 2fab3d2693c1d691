/* cli_classify.c — a sequence classifier's two commands: `lstmd classify` (label and probability
 * of each input line, or of each CSV row for a series classifier) and the classify branch of
 * `lstmd eval` (loss, accuracy and the confusion matrix as JSON); and the refusal every other
 * consumer of a model gives a classifier. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/blas_cpu.h"
#include "kernels/status.h"
#include "worker/data/dataset.h"
#include "worker/data/prepare.h"
#include "worker/io/checkpoint.h"
#include "worker/model/classify.h"
#include "worker/model/infer.h"
#include "cli.h"

int lstmd_refuse_classifier(const char *cmd, const char *ckpt, const struct lstmd_model *m) {
  if (!m || m->shape.kind != LSTMD_MODEL_CLASSIFY) return 0;
  lstmd_errorf("%s: %s is a sequence classifier (model.kind classify); `lstmd eval` and `lstmd "
               "classify` take it, %s does not", cmd, ckpt, cmd);
  return 2;
}

int lstmd_classify_eval_print(const struct lstmd_model *m, const struct lstmd_data_meta *meta,
                              const struct lstmd_dataset *val, int batch) {
  const struct lstmd_dataset_info *a = &meta->info, *b = &val->info;
  if (b->kind != LSTMD_DATASET_CLASSIFY || a->numeric != b->numeric || a->vocab_size != b->vocab_size ||
      memcmp(a->vocab, b->vocab, (size_t)a->vocab_size) || a->horizon != b->horizon ||
      memcmp(a->names, b->names, sizeof a->names)) {
    lstmd_errorf("%s: cannot be scored with this classifier: not a classify split of the same "
                 "%s and labels", val->path, a->numeric ? "kind (numeric series)" : "bytes");
    return LSTMD_EFORMAT;
  }
  if (b->count == 0) {
    lstmd_errorf("%s: no sequences to score (prepared with --val-fraction 0?)", val->path);
    return LSTMD_EFORMAT;
  }
  if (a->numeric && a->width != b->width) { /* as classify refuses such rows */
    lstmd_errorf("%s: rows of %d values, the classifier was trained on rows of %d", val->path,
                 b->width, a->width);
    return LSTMD_EFORMAT;
  }
  struct lstmd_clf_eval *res = malloc(sizeof *res);
  if (!res) return LSTMD_ENOMEM;
  /* a series classifier's values are normalised as in its training (a split prepared from
   * another file has its own mean and std in the header) */
  struct lstmd_dataset scored = *val;
  lstmd_series_score_as_model(meta, &scored, "the classifier", ", as classify does");
  int rc = lstmd_clf_evaluate(m, &scored, batch, res);
  if (!rc) {
    const int C = res->classes;
    printf("{\"loss\":%.6f,\"accuracy\":%.6f,\"sequences\":%llu,\"labels\":[", res->loss,
           res->sequences ? (double)res->correct / (double)res->sequences : 0.0,
           (unsigned long long)res->sequences);
    for (int k = 0; k < C; k++) { /* labels are 1..63 bytes without TAB/newline; escape JSON */
      if (k) putchar(',');
      lstmd_json_put_string(stdout, a->names[k]);
    }
    printf("],\"confusion\":[");
    for (int k = 0; k < C; k++) {
      printf("%s[", k ? "," : "");
      for (int j = 0; j < C; j++) printf("%s%llu", j ? "," : "", (unsigned long long)res->confusion[k][j]);
      printf("]");
    }
    printf("]}\n");
  }
  free(res);
  return rc;
}

struct line {
  int32_t *ids; /* text: the line's token ids; series: NULL */
  float *x;     /* series: the row's normalised values; text: NULL */
  int n;
};

/* A series classifier's input: CSV rows of exactly the training rows' N values, no label column,
 * a header line detected as prepare does; missing values refused or filled within their row as
 * `missing` says (-1: as the model's training data was prepared); each row normalised with the
 * checkpoint's mean/std. lines[i].x points into *values (the caller frees both). */
static int read_rows(const char *path, const struct lstmd_data_meta *meta, int missing,
                     struct line **out, size_t *n_out, float **values) {
  char how[LSTMD_MISSING_HOW_BYTES];
  missing = lstmd_missing_how(missing, meta->info.missing, how);
  struct lstmd_csv_rows rows;
  LSTMD_TRY(lstmd_csv_read_rows(path, -1, -1, meta->info.width, missing, how, &rows));
  struct line *lines = calloc(rows.rows, sizeof *lines);
  if (!lines) {
    lstmd_csv_rows_free(&rows);
    return LSTMD_ENOMEM;
  }
  const size_t N = (size_t)rows.n_values;
  for (size_t r = 0; r < rows.rows; r++) {
    lines[r] = (struct line){NULL, rows.values + r * N, (int)N};
    for (size_t j = 0; j < N; j++)
      lines[r].x[j] = (lines[r].x[j] - meta->info.mean[0]) / meta->info.std[0];
  }
  *values = rows.values;
  rows.values = NULL;
  lstmd_csv_rows_free(&rows);
  *out = lines;
  *n_out = rows.rows;
  return LSTMD_OK;
}

/* Reads every line of path (a trailing '\r' dropped) as token ids of the model's vocabulary.
 * An empty line, a byte the training data never had or a line longer than LSTMD_MAX_SEQ_BYTES
 * is refused naming FILE:LINE; nothing is printed before the whole file is read. */
static int read_lines(const char *path, const struct lstmd_data_meta *meta, struct line **out,
                      size_t *n_out, int *longest) {
  int id_of[256];
  for (int b = 0; b < 256; b++) id_of[b] = -1;
  for (int k = 0; k < meta->info.vocab_size; k++) id_of[meta->info.vocab[k]] = k;
  FILE *f = fopen(path, "r");
  if (!f) {
    lstmd_errorf("%s: cannot open input: %s", path, strerror(errno));
    return LSTMD_EIO;
  }
  char *buf = NULL;
  size_t cap = 0, n = 0, lines_cap = 0;
  ssize_t len;
  long lineno = 0;
  struct line *lines = NULL;
  int rc = LSTMD_OK;
  *longest = 1;
  while (!rc && (len = getline(&buf, &cap, f)) > 0) {
    lineno++;
    if (buf[len - 1] == '\n') len--;
    if (len > 0 && buf[len - 1] == '\r') len--;
    const size_t bom = lineno == 1 ? lstmd_utf8_bom_len(buf, (size_t)len) : 0;
    if (bom) {
      memmove(buf, buf + bom, (size_t)len - bom);
      len -= (ssize_t)bom;
    }
    if (len == 0 || len > LSTMD_MAX_SEQ_BYTES) {
      lstmd_errorf("%s:%ld: %s", path, lineno, len ? "longer than 4096 bytes" : "empty line");
      rc = LSTMD_EFORMAT;
      break;
    }
    if (n == lines_cap) {
      lines_cap = lines_cap ? 2 * lines_cap : 256;
      struct line *l = realloc(lines, lines_cap * sizeof *l);
      if (!l) {
        rc = LSTMD_ENOMEM;
        break;
      }
      lines = l;
    }
    int32_t *ids = malloc((size_t)len * sizeof *ids);
    if (!ids) {
      rc = LSTMD_ENOMEM;
      break;
    }
    lines[n++] = (struct line){ids, NULL, (int)len};
    for (ssize_t i = 0; i < len && !rc; i++) {
      ids[i] = id_of[(unsigned char)buf[i]];
      if (ids[i] < 0) {
        lstmd_errorf("%s:%ld: byte 0x%02x at column %zd never occurs in the training data%s", path,
                     lineno, (unsigned char)buf[i], i + 1,
                     buf[i] == '\t' ? " (a TAB: classify reads one text per line, without the "
                                      "label<TAB> of prepare classify's input)" : "");
        rc = LSTMD_EFORMAT;
      }
    }
    if (len > *longest) *longest = (int)len;
  }
  if (!rc && ferror(f)) {
    lstmd_errorf("%s: read error: %s", path, strerror(errno));
    rc = LSTMD_EIO;
  } else if (!rc && n == 0) {
    lstmd_errorf("%s: no lines to classify", path);
    rc = LSTMD_EFORMAT;
  }
  free(buf);
  fclose(f);
  *out = lines;
  *n_out = n;
  return rc;
}

int lstmd_cmd_classify(int argc, char **argv) {
  const char *ckpt = NULL, *input = NULL, *missing_text = NULL;
  int help = 0;
  struct lstmd_opt opts[] = {{"checkpoint", &ckpt}, {"input", &input},
                             {"missing", &missing_text}, {"help", NULL, &help}};
  int rc = lstmd_parse_opts("classify", argc, argv, 2, opts, 4);
  if (rc || help) {
    fprintf(help ? stdout : stderr,
            "usage: lstmd classify --checkpoint CKPT --input FILE [--missing error|previous|linear]\n"
            "Prints label<TAB>probability of the most probable class for every line of FILE\n"
            "(a series classifier: every row of FILE.csv, N numbers as in its training rows,\n"
            "no label column; a header line is detected as prepare classify --series does).\n"
            "--missing (a series classifier): what an empty, NA, N/A, NaN or null value becomes,\n"
            "  filled within its row as prepare classify --series fills it (default: what the\n"
            "  model's training data was prepared with, else error).\n");
    return rc;
  }
  if (!ckpt || !input) {
    lstmd_errorf("classify: --%s is required", ckpt ? "input" : "checkpoint");
    return 2;
  }
  int missing; /* -1: as the model's training data was prepared */
  if ((rc = lstmd_opt_missing("classify", missing_text, -1, &missing))) return rc;
  lstmd_cpu_set_blas_threads(1);
  struct lstmd_model *m = NULL;
  struct lstmd_data_meta meta;
  if ((rc = lstmd_checkpoint_load_model(ckpt, &m, &meta))) return lstmd_exit_code(rc);
  if (m->shape.kind != LSTMD_MODEL_CLASSIFY) {
    lstmd_errorf("classify: %s is not a sequence classifier (train one on `lstmd prepare "
                 "classify` data)", ckpt);
    lstmd_model_destroy(m);
    return 2;
  }
  if (missing_text && !meta.info.numeric) {
    lstmd_errorf("classify: --missing is for a series classifier's CSV; %s classifies lines of "
                 "text", ckpt);
    lstmd_model_destroy(m);
    return 2;
  }
  struct line *lines = NULL;
  size_t n = 0;
  int longest = meta.info.width;
  float *values = NULL; /* series: the rows' values, lines[i].x point into them */
  struct lstmd_clf_workspace *ws = NULL;
  rc = meta.info.numeric ? read_rows(input, &meta, missing, &lines, &n, &values)
                         : read_lines(input, &meta, &lines, &n, &longest);
  if (!rc) rc = lstmd_clf_workspace_create(m, longest, 1, &ws);
  double probs[LSTMD_MAX_CLASSES];
  for (size_t i = 0; !rc && i < n; i++) {
    if ((rc = lstmd_clf_predict(m, ws, lines[i].ids, lines[i].x, lines[i].n, probs))) {
      lstmd_errorf("classify: %s:%zu: cannot classify this line (%s)", input, i + 1,
                   lstmd_strerror(rc));
      break;
    }
    int best = 0;
    for (int k = 1; k < m->shape.classes; k++) best = probs[k] > probs[best] ? k : best;
    printf("%s\t%.4f\n", meta.info.names[best], probs[best]);
  }
  for (size_t i = 0; i < n; i++) free(lines[i].ids);
  free(lines);
  free(values);
  lstmd_clf_workspace_destroy(ws);
  lstmd_model_destroy(m);
  return lstmd_exit_after_stdout("classify", lstmd_exit_code(rc));
}
