/* infer.c — evaluation, sampling and series prediction with a trained model (see infer.h). */
#define _GNU_SOURCE
#include "infer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "worker/data/batcher.h"
#include "worker/io/durable.h"
#include "worker/data/prepare.h"

/* Forward (no gradient, no dropout) over `cols` windows starting at window `first`. */
static int eval_chunk(struct lstmd_model *m, struct lstmd_workspace *ws,
                      const struct lstmd_dataset *ds, int T, uint64_t first, int cols,
                      void *scratch, double *loss_sum) {
  struct lstmd_batch *b = lstmd_workspace_batch(ws);
  for (int col = 0; col < cols; col++)
    LSTMD_TRY(lstmd_read_window(ds, (first + (uint64_t)col) * T, T, cols, col, b, scratch));
  lstmd_workspace_reset_state(ws);
  *loss_sum += lstmd_model_step(m, ws, 0.0f, NULL, 0);
  return LSTMD_OK;
}

int lstmd_evaluate(struct lstmd_model *m, const struct lstmd_dataset *ds, int T, int B,
                   double *mean_loss, uint64_t *tokens) {
  const uint64_t n = lstmd_window_count(ds, T);
  if (n == 0) {
    lstmd_errorf("%s: too short for one window of seq_len %d", ds->path, T);
    return LSTMD_ECONFIG;
  }
  if ((uint64_t)B > n) B = (int)n;
  struct lstmd_workspace *full = NULL, *tail = NULL;
  const int rest = (int)(n % (uint64_t)B);
  void *scratch = malloc(lstmd_window_scratch_bytes(ds, T));
  int rc = scratch ? lstmd_workspace_create(m, T, B, 0.0f, &full) : LSTMD_ENOMEM;
  if (!rc && rest) rc = lstmd_workspace_create(m, T, rest, 0.0f, &tail);
  double sum = 0.0;
  uint64_t w = 0;
  for (; !rc && w + (uint64_t)B <= n; w += (uint64_t)B) rc = eval_chunk(m, full, ds, T, w, B, scratch, &sum);
  if (!rc && rest) rc = eval_chunk(m, tail, ds, T, w, rest, scratch, &sum);
  lstmd_workspace_destroy(full);
  lstmd_workspace_destroy(tail);
  free(scratch);
  if (rc) return rc;
  const int per_input = m->shape.kind == LSTMD_MODEL_TEXT ? 1 : m->shape.horizon;
  *tokens = n * (uint64_t)T;
  *mean_loss = sum / ((double)*tokens * per_input);
  return LSTMD_OK;
}

int lstmd_check_compatible(const struct lstmd_data_meta *d, const struct lstmd_dataset *ds) {
  const struct lstmd_dataset_info *a = &d->info, *b = &ds->info;
  const char *why = NULL;
  if (a->kind != b->kind) why = "it is a different kind of dataset (text vs series)";
  else if (a->kind == LSTMD_DATASET_TEXT &&
           (a->vocab_size != b->vocab_size || memcmp(a->vocab, b->vocab, (size_t)a->vocab_size)))
    why = "its vocabulary differs from the model's";
  else if (a->kind == LSTMD_DATASET_SERIES &&
           (a->width != b->width || a->horizon != b->horizon ||
            memcmp(a->names, b->names, sizeof a->names)))
    why = "its columns or horizon differ from the model's";
  if (!why) return LSTMD_OK;
  lstmd_errorf("%s: cannot be scored with this checkpoint: %s", ds->path, why);
  return LSTMD_EFORMAT;
}

/* Draws a token from logits [V] at the given temperature (0: argmax). */
static int draw(const float *logits, int V, float temperature, struct lstmd_rng *rng) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (logits[v] > logits[best]) best = v;
  if (temperature <= 0.0f) return best;
  double total = 0.0, p[256];
  for (int v = 0; v < V; v++) total += p[v] = exp(((double)logits[v] - logits[best]) / temperature);
  double u = (lstmd_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0) * total;
  for (int v = 0; v < V; v++) {
    if (u < p[v]) return v;
    u -= p[v];
  }
  return V - 1;
}

int lstmd_sample(struct lstmd_model *m, const struct lstmd_data_meta *d, const char *ckpt_name,
                 const char *prime, long length, float temperature, uint64_t seed, FILE *out) {
  const struct lstmd_dataset_info *info = &d->info;
  if (m->shape.kind != LSTMD_MODEL_TEXT) {
    lstmd_errorf("%s: a series model; sample needs a text model (use predict)", ckpt_name);
    return LSTMD_EINVAL;
  }
  int id_of[256];
  for (int b = 0; b < 256; b++) id_of[b] = -1;
  for (int k = 0; k < info->vocab_size; k++) id_of[info->vocab[k]] = k;
  char fallback[2] = {id_of['\n'] >= 0 ? '\n' : (char)info->vocab[0], 0};
  if (!prime || !*prime) prime = fallback;
  const size_t n = strlen(prime);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)prime[i];
    if (id_of[c] < 0) {
      char shown[8] = "";
      if (c >= 32 && c < 127) snprintf(shown, sizeof shown, " '%c'", c);
      lstmd_errorf("%s: prime byte %zu (0x%02x%s) is not in the model's vocabulary", ckpt_name, i,
                   c, shown);
      return LSTMD_EINVAL;
    }
  }
  struct lstmd_workspace *ws;
  LSTMD_TRY(lstmd_workspace_create(m, 1, 1, 0.0f, &ws));
  struct lstmd_batch *b = lstmd_workspace_batch(ws);
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, seed, 0x5a3b1e);
  fwrite(prime, 1, n, out);
  b->targets[0] = 0;
  for (size_t i = 0; i < n; i++) {
    b->ids[0] = id_of[(unsigned char)prime[i]];
    lstmd_model_step(m, ws, 0.0f, NULL, 1);
  }
  for (long k = 0; k < length; k++) {
    int id = draw(lstmd_workspace_output(ws), info->vocab_size, temperature, &rng);
    fputc(info->vocab[id], out);
    b->ids[0] = id;
    lstmd_model_step(m, ws, 0.0f, NULL, 1);
  }
  lstmd_workspace_destroy(ws);
  return fflush(out) == 0 ? LSTMD_OK : LSTMD_EIO;
}

/* Runs `cols` windows of T rows starting at row `first` and prints their forecasts. */
static int predict_chunk(struct lstmd_model *m, struct lstmd_workspace *ws,
                         const struct lstmd_dataset_info *info, const float *rows, size_t first,
                         int T, int cols, FILE *out) {
  const int W = info->width, K = info->horizon;
  struct lstmd_batch *b = lstmd_workspace_batch(ws);
  for (int col = 0; col < cols; col++)
    for (int t = 0; t < T; t++) {
      const float *r = rows + (first + (size_t)col * T + t) * W;
      float *x = b->x + ((size_t)t * cols + col) * W;
      for (int w = 0; w < W; w++) x[w] = (r[w] - info->mean[w]) / info->std[w];
    }
  memset(b->y, 0, (size_t)T * cols * K * sizeof(float));
  lstmd_workspace_reset_state(ws);
  lstmd_model_step(m, ws, 0.0f, NULL, 0);
  const float *pred = lstmd_workspace_output(ws);
  for (int col = 0; col < cols; col++)
    for (int t = 0; t < T; t++) {
      fprintf(out, "%zu", first + (size_t)col * T + t);
      const float *p = pred + ((size_t)t * cols + col) * K;
      for (int k = 0; k < K; k++) fprintf(out, ",%.9g", p[k] * info->std[0] + info->mean[0]);
      fputc('\n', out);
    }
  return LSTMD_OK;
}

int lstmd_predict(struct lstmd_model *m, const struct lstmd_data_meta *d, const char *ckpt_name,
                  const char *input_csv, const char *out_csv, int batch) {
  const struct lstmd_dataset_info *info = &d->info;
  if (m->shape.kind != LSTMD_MODEL_SERIES) {
    lstmd_errorf("%s: a text model; predict needs a series model (use sample)", ckpt_name);
    return LSTMD_EINVAL;
  }
  const char *names[LSTMD_MAX_COLUMNS];
  for (int c = 0; c < info->width; c++) names[c] = info->names[c];
  float *rows = NULL;
  size_t n = 0;
  LSTMD_TRY(lstmd_csv_read_columns(input_csv, names, info->width, &rows, &n));
  if (n == 0) {
    lstmd_errorf("%s: no data rows", input_csv);
    free(rows);
    return LSTMD_EFORMAT;
  }
  const int T = d->seq_len;
  const size_t windows = n / (size_t)T, rest = n % (size_t)T;
  char *text = NULL;
  size_t text_len = 0;
  FILE *out = open_memstream(&text, &text_len);
  int rc = out ? LSTMD_OK : LSTMD_ENOMEM;
  if (!rc) {
    fprintf(out, "row");
    for (int k = 1; k <= info->horizon; k++) fprintf(out, ",%s+%d", info->names[0], k);
    fputc('\n', out);
  }
  struct lstmd_workspace *ws = NULL;
  size_t w = 0;
  int ws_cols = 0;
  while (!rc && w < windows) {
    int cols = windows - w < (size_t)batch ? (int)(windows - w) : batch;
    if (cols != ws_cols) { /* the first chunk, and the last one if it is smaller */
      lstmd_workspace_destroy(ws);
      ws = NULL;
      rc = lstmd_workspace_create(m, T, cols, 0.0f, &ws);
      ws_cols = cols;
    }
    if (!rc) rc = predict_chunk(m, ws, info, rows, w * T, T, cols, out);
    w += (size_t)cols;
  }
  if (!rc && rest) {
    lstmd_workspace_destroy(ws);
    ws = NULL;
    rc = lstmd_workspace_create(m, (int)rest, 1, 0.0f, &ws);
    if (!rc) rc = predict_chunk(m, ws, info, rows, windows * T, (int)rest, 1, out);
  }
  lstmd_workspace_destroy(ws);
  free(rows);
  if (out && fclose(out) != 0 && !rc) rc = LSTMD_ENOMEM;
  struct lstmd_durable file;
  if (!rc) rc = lstmd_durable_open(&file, out_csv);
  if (!rc) {
    rc = lstmd_durable_write(&file, text, text_len);
    rc = rc ? (lstmd_durable_abort(&file), rc) : lstmd_durable_commit(&file);
  }
  free(text);
  return rc;
}
