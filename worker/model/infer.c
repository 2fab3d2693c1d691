/* infer.c — evaluation, sampling and series prediction with a trained model (see infer.h). */
#define _GNU_SOURCE
#include "infer.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/blas_cpu.h"
#include "kernels/status.h"
#include "worker/data/batcher.h"
#include "worker/io/durable.h"
#include "worker/io/qcheckpoint.h"
#include "worker/data/prepare.h"
#include "eval_pool.h"
#include "forecast_rows.h"

int lstmd_infer_model_load(const char *path, struct lstmd_infer_model *im,
                           struct lstmd_data_meta *d) {
  memset(im, 0, sizeof *im);
  if (lstmd_qcheckpoint_is_int8(path)) return lstmd_qcheckpoint_load(path, &im->int8, d);
  return lstmd_checkpoint_load_model(path, &im->fp32, d);
}

void lstmd_infer_model_destroy(struct lstmd_infer_model *im) {
  lstmd_model_destroy(im->fp32);
  lstmd_qmodel_destroy(im->int8);
  memset(im, 0, sizeof *im);
}

/* One (T, B) workspace of either model, and the four things inference does with it. */
struct runner {
  const struct lstmd_infer_model *im;
  struct lstmd_workspace *ws;
  struct lstmd_qworkspace *qws;
};

static int runner_open(const struct lstmd_infer_model *im, int T, int B, struct runner *r) {
  *r = (struct runner){im, NULL, NULL};
  /* The int8 model may use every online core, as the fp32 model's BLAS does in eval and predict
   * (cli_infer.c); its workspace splits a forward only where that pays (qmodel.c), which at
   * batch 1 means H >= 512 only (fp32 sample keeps BLAS at one thread: a one-row sgemm gains
   * nothing from BLAS threads). */
  if (im->int8) return lstmd_qworkspace_create(im->int8, T, B, lstmd_cpu_cores(), &r->qws);
  return lstmd_workspace_create_forward(im->fp32, T, B, &r->ws);
}
static void runner_close(struct runner *r) {
  lstmd_workspace_destroy(r->ws);
  lstmd_qworkspace_destroy(r->qws);
  r->ws = NULL, r->qws = NULL;
}
static struct lstmd_batch *runner_batch(struct runner *r) {
  return r->qws ? lstmd_qworkspace_batch(r->qws) : lstmd_workspace_batch(r->ws);
}
static void runner_reset(struct runner *r) {
  if (r->qws) lstmd_qworkspace_reset_state(r->qws);
  else lstmd_workspace_reset_state(r->ws);
}
/* Forward (no gradient, no dropout); returns the summed loss. */
static double runner_forward(struct runner *r, int carry_state) {
  if (r->qws) return lstmd_qmodel_forward(r->im->int8, r->qws, carry_state);
  return lstmd_model_step(r->im->fp32, r->ws, 0.0f, NULL, carry_state);
}
static const float *runner_output(struct runner *r) {
  return r->qws ? lstmd_qworkspace_output(r->qws) : lstmd_workspace_output(r->ws);
}
static const struct lstmd_model_shape *model_shape(const struct lstmd_infer_model *im) {
  return im->int8 ? &im->int8->shape : &im->fp32->shape;
}

/* `cols` windows starting at window `first`, each from a zero state. */
static int eval_chunk(struct runner *r, const struct lstmd_dataset *ds, int T, uint64_t first,
                      int cols, void *scratch, double *loss_sum) {
  struct lstmd_batch *b = runner_batch(r);
  for (int col = 0; col < cols; col++)
    LSTMD_TRY(lstmd_read_window(ds, (first + (uint64_t)col) * T, T, cols, col, b, scratch));
  runner_reset(r);
  *loss_sum += runner_forward(r, 0);
  return LSTMD_OK;
}

int lstmd_series_read_normalised(const struct lstmd_dataset *ds, float **out) {
  const size_t W = (size_t)ds->info.width, n = (size_t)ds->info.count;
  float *z = malloc((n ? n : 1) * W * sizeof *z);
  if (!z) return LSTMD_ENOMEM;
  int rc = lstmd_dataset_read(ds, 0, n, z);
  for (size_t i = 0; !rc && i < n; i++) /* as lstmd_read_window normalises, bit for bit */
    for (size_t w = 0; w < W; w++) z[i * W + w] = (z[i * W + w] - ds->info.mean[w]) / ds->info.std[w];
  if (rc) {
    free(z);
    return rc;
  }
  *out = z;
  return LSTMD_OK;
}

/* Windows [first, first + cols) of the normalised split z into r's batch, forward, and the
 * squared error of the forecasts after undoing the transform, added to *sq_sum. */
static int eval_series_chunk(struct runner *r, const struct lstmd_dataset *ds, const float *z,
                             int T, uint64_t first, int cols, double *sq_sum) {
  const struct lstmd_series_tf *tf = &ds->tf;
  const int W = ds->info.width, K = ds->info.horizon, want = lstmd_series_history(tf, T);
  struct lstmd_batch *b = runner_batch(r);
  float shift[LSTMD_MAX_COLUMNS], scale[LSTMD_MAX_COLUMNS];
  float *shift0 = malloc(2 * (size_t)cols * sizeof *shift0), *scale0 = shift0 + cols;
  if (!shift0) return LSTMD_ENOMEM;
  for (int col = 0; col < cols; col++) {
    const uint64_t row = (first + (uint64_t)col) * (uint64_t)T;
    const int hist = row < (uint64_t)want ? (int)row : want;
    const float *z0 = z + row * (uint64_t)W;
    lstmd_series_window_stats(tf, z0, hist, T, W, shift, scale);
    lstmd_series_window_apply(tf, z0, T, W, K, shift, scale, cols, col, b->x, b->y);
    shift0[col] = shift[0];
    scale0[col] = scale[0];
  }
  runner_reset(r);
  runner_forward(r, 0);
  const float *p = runner_output(r);
  double sum = 0.0;
  for (int t = 0; t < T; t++)
    for (int col = 0; col < cols; col++) {
      const uint64_t i = (first + (uint64_t)col) * (uint64_t)T + (uint64_t)t;
      const float *pt = p + ((size_t)t * cols + col) * K;
      for (int k = 0; k < K; k++) {
        const double e = (double)lstmd_series_undo(tf, pt[k], z[i * W], shift0[col], scale0[col]) -
                         z[(i + 1 + (uint64_t)k) * W];
        sum += e * e;
      }
    }
  *sq_sum += sum;
  free(shift0);
  return LSTMD_OK;
}

int lstmd_series_baseline_mse(const struct lstmd_dataset *ds, const float *z, int T,
                              double *mse_persistence, double *mse_seasonal) {
  const uint64_t n = lstmd_window_count(ds, T), steps = n * (uint64_t)T;
  const int W = ds->info.width, K = ds->info.horizon, P = ds->info.season;
  if (n == 0) return LSTMD_ECONFIG;
  double sp = 0.0, ss = 0.0;
  float *fp = malloc(2 * (size_t)K * sizeof *fp), *fs = fp + K;
  if (!fp) return LSTMD_ENOMEM;
  for (uint64_t i = 0; i < steps; i++) {
    lstmd_series_baselines(z, W, i, K, P, fp, fs);
    for (int k = 0; k < K; k++) {
      const double y = z[(i + 1 + (uint64_t)k) * W], ep = (double)fp[k] - y;
      sp += ep * ep;
      if (P) ss += ((double)fs[k] - y) * ((double)fs[k] - y);
    }
  }
  free(fp);
  *mse_persistence = sp / ((double)steps * K);
  *mse_seasonal = P ? ss / ((double)steps * K) : NAN;
  return LSTMD_OK;
}

int lstmd_evaluate(struct lstmd_model *m, const struct lstmd_dataset *ds, int T, int B,
                   double *mean_loss, uint64_t *tokens) {
  const struct lstmd_infer_model im = {m, NULL};
  return lstmd_infer_evaluate(&im, ds, T, B, mean_loss, tokens);
}

int lstmd_infer_evaluate(const struct lstmd_infer_model *im, const struct lstmd_dataset *ds,
                         int T, int B, double *mean_loss, uint64_t *tokens) {
  struct lstmd_eval_result res;
  LSTMD_TRY(lstmd_infer_evaluate_full(im, ds, T, B, 0, &res));
  *mean_loss = res.loss;
  *tokens = res.tokens;
  return LSTMD_OK;
}

/* An evaluation's chunks (B windows each, the last one shorter), scored through eval_pool.h. */
struct eval_job {
  const struct lstmd_infer_model *im;
  const struct lstmd_dataset *ds;
  const float *z; /* series: the normalised split */
  int T, B;
  uint64_t windows;
  struct lstmd_eval_pool pool;
};

/* A thread's workspaces: one for full chunks and one for the short last chunk if it takes it. */
struct eval_state {
  struct runner full, tail;
  void *scratch; /* text: lstmd_read_window's */
};

static void eval_close(void *ctx, void *state) {
  (void)ctx;
  struct eval_state *st = state;
  if (!st) return;
  runner_close(&st->full);
  runner_close(&st->tail);
  free(st->scratch);
  free(st);
}

/* A helper opens both workspaces it may need before it takes a chunk; the caller, as it goes. */
static int eval_open(void *ctx, int helper, void **state) {
  const struct eval_job *e = ctx;
  struct eval_state *st = calloc(1, sizeof *st);
  *state = st;
  if (!st) return LSTMD_ENOMEM;
  int rc = LSTMD_OK;
  if (e->ds->info.kind != LSTMD_DATASET_SERIES &&
      !(st->scratch = malloc(lstmd_window_scratch_bytes(e->ds, e->T))))
    rc = LSTMD_ENOMEM;
  const int tail_cols = (int)(e->windows % (uint64_t)e->B);
  const int mine_tail = tail_cols && lstmd_eval_pool_has(&e->pool, e->pool.count - 1);
  if (helper && !rc) rc = runner_open(e->im, e->T, e->B, &st->full);
  if (helper && !rc && mine_tail) rc = runner_open(e->im, e->T, tail_cols, &st->tail);
  return rc;
}

static int eval_score(void *ctx, void *state, uint64_t chunk, double *sum) {
  const struct eval_job *e = ctx;
  struct eval_state *st = state;
  const uint64_t w = chunk * (uint64_t)e->B;
  const int cols = e->windows - w < (uint64_t)e->B ? (int)(e->windows - w) : e->B;
  struct runner *r = cols == e->B ? &st->full : &st->tail;
  if (!r->ws && !r->qws) LSTMD_TRY(runner_open(e->im, e->T, cols, r));
  if (e->ds->info.kind == LSTMD_DATASET_SERIES)
    return eval_series_chunk(r, e->ds, e->z, e->T, w, cols, sum);
  return eval_chunk(r, e->ds, e->T, w, cols, st->scratch, sum);
}

/* Threads: an fp32 model's evaluation takes as many as BLAS was given (the callers' way of
 * saying how many cores are theirs now: lstmd_cpu_set_blas_threads), each with its own chunks
 * and BLAS at one thread, as many as the memory allows with a forward workspace each
 * (lstmd_workspace_forward_floats). The int8 model splits each forward itself (runner_open). */
static int eval_threads(const struct eval_job *e) {
  if (!e->im->fp32) return 0;
  const double bytes = 4.0 * (double)lstmd_workspace_forward_floats(e->im->fp32, e->T, e->B);
  return lstmd_eval_threads_fit(bytes, lstmd_cpu_blas_threads());
}

/* lstmd_infer_evaluate_full with the work shared as `share` says (NULL: all of it here). */
static int evaluate(const struct lstmd_infer_model *im, const struct lstmd_dataset *ds, int T,
                    int B, int baselines, const struct lstmd_eval_share *share,
                    struct lstmd_eval_result *res) {
  memset(res, 0, sizeof *res);
  res->mse_persistence = res->mse_seasonal = res->skill = NAN;
  const uint64_t n = lstmd_window_count(ds, T);
  if (n == 0) {
    lstmd_errorf("%s: too short for one window of seq_len %d", ds->path, T);
    return LSTMD_ECONFIG;
  }
  if ((uint64_t)B > n) B = (int)n;
  const int series = ds->info.kind == LSTMD_DATASET_SERIES;
  float *z = NULL;
  struct eval_job e = {im, ds, NULL, T, B, n, {0}};
  e.pool = (struct lstmd_eval_pool){(n + (uint64_t)B - 1) / (uint64_t)B, share, &e, eval_open,
                                    eval_score, eval_close};
  int rc = series ? lstmd_series_read_normalised(ds, &z) : LSTMD_OK;
  e.z = z;
  double *sums = NULL;
  if (!rc && e.pool.count > INT_MAX) rc = LSTMD_ECONFIG; /* combine's count is an int */
  if (!rc && !(sums = calloc(e.pool.count, sizeof *sums))) rc = LSTMD_ENOMEM;
  if (!rc) rc = lstmd_eval_pool_run(&e.pool, eval_threads(&e), sums);
  rc = lstmd_eval_pool_combine(&e.pool, sums, (int)e.pool.count, rc); /* failed or not */
  double sum = 0.0;
  for (uint64_t c = 0; !rc && c < e.pool.count; c++) sum += sums[c];
  free(sums);
  const struct lstmd_model_shape *s = model_shape(im);
  const int per_input = s->kind == LSTMD_MODEL_TEXT ? 1 : s->horizon;
  res->tokens = n * (uint64_t)T;
  res->loss = sum / ((double)res->tokens * per_input);
  if (!rc && series && baselines) {
    rc = lstmd_series_baseline_mse(ds, z, T, &res->mse_persistence, &res->mse_seasonal);
    res->skill = 1.0 - res->loss / res->mse_persistence;
  }
  free(z);
  return rc;
}

int lstmd_infer_evaluate_full(const struct lstmd_infer_model *im, const struct lstmd_dataset *ds,
                              int T, int B, int baselines, struct lstmd_eval_result *res) {
  return evaluate(im, ds, T, B, baselines, NULL, res);
}

int lstmd_evaluate_shared(struct lstmd_model *m, const struct lstmd_dataset *ds, int T, int B,
                          const struct lstmd_eval_share *share, double *mean_loss,
                          uint64_t *tokens) {
  const struct lstmd_infer_model im = {m, NULL};
  struct lstmd_eval_result res;
  LSTMD_TRY(evaluate(&im, ds, T, B, 0, share, &res));
  *mean_loss = res.loss;
  *tokens = res.tokens;
  return LSTMD_OK;
}

static const char *kind_name(int kind) {
  return kind == LSTMD_DATASET_TEXT ? "text" : kind == LSTMD_DATASET_SERIES ? "series" : "classify";
}

int lstmd_check_compatible(const struct lstmd_data_meta *d, const struct lstmd_dataset *ds) {
  const struct lstmd_dataset_info *a = &d->info, *b = &ds->info;
  const char *why = NULL;
  char kinds[96];
  if (a->kind != b->kind) { /* which is which: "a different kind" left the user to guess */
    snprintf(kinds, sizeof kinds, "it is a %s dataset, the checkpoint a %s model", kind_name(b->kind),
             kind_name(a->kind));
    why = kinds;
  } else if (a->kind == LSTMD_DATASET_TEXT &&
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

/* Why eval scores with the checkpoint's statistics rather than refusing other ones (as text eval
 * refuses another vocabulary, and distillation another normalisation): a vocabulary defines what
 * the ids mean, so a model cannot read another one; a series' mean and std are part of the model
 * (predict normalises raw CSV rows with them, and so does a series classifier's eval), and
 * prepare computes fresh ones from every CSV, so data newer than the training run never has the
 * model's. Scoring with the split's own rescales inputs and targets, so that a target in other
 * units (× 10) scored as well as the original while predict's forecasts of it were poor;
 * refusing would leave no way to evaluate a deployed forecaster on new data. So the split's raw
 * values are normalised as predict normalises them, and the loss is in the model's units,
 * comparable with training's val_loss; the caller says when the split's own differed. */
int lstmd_series_use_model_stats(const struct lstmd_data_meta *d, struct lstmd_dataset *ds,
                                 char *why, size_t why_len) {
  ds->tf = d->tf; /* the windows as the model was trained on them */
  if (ds->info.kind == LSTMD_DATASET_CLASSIFY && d->info.kind == LSTMD_DATASET_CLASSIFY &&
      ds->info.numeric && d->info.numeric) { /* one mean and std of every value */
    const int differ = ds->info.mean[0] != d->info.mean[0] || ds->info.std[0] != d->info.std[0];
    if (differ && why_len)
      snprintf(why, why_len, "mean %.9g, std %.9g in the checkpoint, %.9g, %.9g in the dataset",
               (double)d->info.mean[0], (double)d->info.std[0], (double)ds->info.mean[0],
               (double)ds->info.std[0]);
    ds->info.mean[0] = d->info.mean[0];
    ds->info.std[0] = d->info.std[0];
    return differ ? 0 : -1;
  }
  if (ds->info.kind != LSTMD_DATASET_SERIES || d->info.kind != LSTMD_DATASET_SERIES) return -1;
  const int c = lstmd_series_stats_differ(&d->info, &ds->info, why, why_len);
  memcpy(ds->info.mean, d->info.mean, sizeof ds->info.mean);
  memcpy(ds->info.std, d->info.std, sizeof ds->info.std);
  return c;
}

void lstmd_series_score_as_model(const struct lstmd_data_meta *d, struct lstmd_dataset *ds,
                                 const char *model, const char *as) {
  char why[320];
  if (lstmd_series_use_model_stats(d, ds, why, sizeof why) >= 0)
    fprintf(stderr, "lstmd: note: %s was prepared with other statistics than %s was trained with "
            "(%s); scoring with the checkpoint's%s\n", ds->path, model, why, as);
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

int lstmd_sample(const struct lstmd_infer_model *im, const struct lstmd_data_meta *d,
                 const char *ckpt_name, const char *prime, long length, float temperature,
                 uint64_t seed, FILE *out) {
  const struct lstmd_dataset_info *info = &d->info;
  if (model_shape(im)->kind != LSTMD_MODEL_TEXT) {
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
  struct runner r;
  LSTMD_TRY(runner_open(im, 1, 1, &r));
  /* One row a forward: pack the weights once (model.h). Without the memory it repacks them at
   * every character, as before: slower, not wrong. */
  if (r.ws) (void)lstmd_workspace_freeze_weights(r.ws);
  struct lstmd_batch *b = runner_batch(&r);
  runner_reset(&r);
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, seed, 0x5a3b1e);
  fwrite(prime, 1, n, out);
  b->targets[0] = 0;
  for (size_t i = 0; i < n; i++) {
    b->ids[0] = id_of[(unsigned char)prime[i]];
    runner_forward(&r, 1);
  }
  for (long k = 0; k < length; k++) {
    int id = draw(runner_output(&r), info->vocab_size, temperature, &rng);
    fputc(info->vocab[id], out);
    b->ids[0] = id;
    runner_forward(&r, 1);
  }
  runner_close(&r);
  /* a failed write of the text is the caller's to name (lstmd sample: to stdout, exit 1) */
  return fflush(out) == 0 && !ferror(out) ? LSTMD_OK : LSTMD_EWRITE;
}

/* Runs `cols` windows of T rows starting at row `first` of the normalised rows z and prints
 * their forecasts (and the naive ones with `baselines`). */
static int predict_chunk(struct runner *r, const struct lstmd_data_meta *d, const float *z,
                         size_t first, int T, int cols, int baselines, FILE *out) {
  const struct lstmd_dataset_info *info = &d->info;
  const struct lstmd_series_tf *tf = &d->tf;
  const int W = info->width, K = info->horizon, want = lstmd_series_history(tf, T);
  struct lstmd_batch *b = runner_batch(r);
  float shift[LSTMD_MAX_COLUMNS], scale[LSTMD_MAX_COLUMNS];
  float *shift0 = malloc((2 * (size_t)cols + 2 * (size_t)K) * sizeof *shift0);
  if (!shift0) return LSTMD_ENOMEM;
  float *scale0 = shift0 + cols, *fp = scale0 + cols, *fs = fp + K;
  for (int col = 0; col < cols; col++) {
    const size_t row = first + (size_t)col * T;
    const int hist = row < (size_t)want ? (int)row : want;
    lstmd_series_window_stats(tf, z + row * W, hist, T, W, shift, scale);
    lstmd_series_window_apply(tf, z + row * W, T, W, K, shift, scale, cols, col, b->x, NULL);
    shift0[col] = shift[0];
    scale0[col] = scale[0];
  }
  memset(b->y, 0, (size_t)T * cols * K * sizeof(float));
  runner_reset(r);
  runner_forward(r, 0);
  const float *pred = runner_output(r);
  const float sd = info->std[0], mu = info->mean[0]; /* float, as forecasts always were */
  const int per_row = K * (1 + (baselines ? 1 + (info->season != 0) : 0));
  const size_t n = (size_t)cols * T;
  float *vals = malloc(n * per_row * sizeof *vals);
  int rc = vals ? LSTMD_OK : LSTMD_ENOMEM;
  for (int col = 0; !rc && col < cols; col++)
    for (int t = 0; t < T; t++) {
      const size_t row = (size_t)col * T + t, i = first + row;
      const float *p = pred + ((size_t)t * cols + col) * K;
      float *v = vals + row * per_row;
      for (int k = 0; k < K; k++)
        *v++ = lstmd_series_undo(tf, p[k], z[i * W], shift0[col], scale0[col]) * sd + mu;
      if (baselines) {
        lstmd_series_baselines(z, W, i, K, info->season, fp, fs);
        for (int k = 0; k < K; k++) *v++ = fp[k] * sd + mu;
        for (int k = 0; info->season && k < K; k++) *v++ = fs[k] * sd + mu;
      }
    }
  /* Finite inputs can still overflow the model's float arithmetic (3e38 in a column whose
   * training values were near 1): a forecast of inf or nan would be written as such, into a CSV
   * that lstmd's own reader then refuses. The row is named instead. */
  for (size_t j = 0; !rc && j < n * (size_t)per_row; j++)
    if (!isfinite(vals[j])) {
      lstmd_errorf("predict: the forecast for row %zu is not finite (%g): the input's values in "
                   "the window up to that row are far outside what the model was trained on (each "
                   "column is scaled by its training mean and standard deviation)",
                   first + j / (size_t)per_row, vals[j]);
      rc = LSTMD_EFORMAT;
    }
  if (!rc) rc = lstmd_forecast_rows_write(out, first, vals, n, per_row);
  free(vals);
  free(shift0);
  return rc;
}

int lstmd_predict(const struct lstmd_infer_model *im, const struct lstmd_data_meta *d,
                  const char *ckpt_name, const char *input_csv, const char *out_csv, int batch,
                  int baselines, int missing) {
  const struct lstmd_dataset_info *info = &d->info;
  if (model_shape(im)->kind != LSTMD_MODEL_SERIES) {
    lstmd_errorf("%s: a text model; predict needs a series model (use sample)", ckpt_name);
    return LSTMD_EINVAL;
  }
  const char *names[LSTMD_MAX_COLUMNS];
  for (int c = 0; c < info->width; c++) names[c] = info->names[c];
  float *rows = NULL;
  size_t n = 0;
  /* Without --missing, the gaps are handled as they were when the training data was prepared:
   * a model trained on filled series forecasts from series filled the same way. */
  char how[LSTMD_MISSING_HOW_BYTES];
  missing = lstmd_missing_how(missing, info->missing, how);
  LSTMD_TRY(lstmd_csv_read_columns(input_csv, names, info->width, missing, how, &rows, &n));
  if (n == 0) {
    lstmd_errorf("%s: no data rows", input_csv);
    free(rows);
    return LSTMD_EFORMAT;
  }
  /* Normalised as training normalises (lstmd_read_window), bit for bit. */
  for (size_t i = 0; i < n; i++)
    for (int w = 0; w < info->width; w++)
      rows[i * info->width + w] = (rows[i * info->width + w] - info->mean[w]) / info->std[w];
  /* Where the windows lie. The model was trained (and eval scores it) on windows of seq_len T
   * rows, each from a zero state, so each forecast here is made the same way; what is left is
   * where the windows start. They end at the last row: rows [n − T, n) are the last window, the
   * ones before it whole windows back to row head = n mod T, and rows [0, head) one shorter
   * window (all n rows when n < T). So the forecast a deployment uses, the newest row's, sees T
   * rows, as when only the last T rows are given: row i >= head sees the (i − head) mod T + 1
   * rows up to it, row i < head its i + 1 (with window_norm mean a window's statistics also read
   * up to T − 1 rows before its first row). Starting at row 0, as before, left the newest row
   * (n − 1) mod T + 1 rows: a forecast that changed with the file's length. Carrying the state
   * from window to window would give every row all of its history, but it is not the model that
   * was trained or scored: window_norm last shifts each window by its own first row, and
   * shuffle-order runs never trained on a carried state. The windows are independent, so
   * `batch` (how many run in one forward) changes no forecast beyond float rounding (an fp32
   * model's GEMMs round a row by where it falls in them; the int8 model's rows are exact). */
  const int T = d->seq_len;
  const size_t windows = n / (size_t)T, head = n % (size_t)T;
  char *text = NULL;
  size_t text_len = 0;
  FILE *out = open_memstream(&text, &text_len);
  int rc = out ? LSTMD_OK : LSTMD_ENOMEM;
  if (!rc) {
    fprintf(out, "row");
    /* The target's name as the CSV had it, which may hold a comma or a quote ("load, kW" is a
     * quoted header cell): such a cell is quoted, its quotes doubled (RFC 4180), or the header
     * had more fields than the rows. */
    const int quote = strpbrk(info->names[0], ",\"\r\n") != NULL;
    for (int k = 1; k <= info->horizon; k++) {
      fputs(quote ? ",\"" : ",", out);
      for (const char *c = info->names[0]; *c; c++) {
        if (*c == '"') fputc('"', out);
        fputc(*c, out);
      }
      fprintf(out, quote ? "+%d\"" : "+%d", k);
    }
    for (int k = 1; baselines && k <= info->horizon; k++) fprintf(out, ",persistence+%d", k);
    for (int k = 1; baselines && info->season && k <= info->horizon; k++)
      fprintf(out, ",seasonal%d+%d", info->season, k);
    fputc('\n', out);
  }
  struct runner r = {0};
  if (!rc && head) { /* rows [0, head): the short window, printed first (rows in input order) */
    rc = runner_open(im, (int)head, 1, &r);
    if (!rc) rc = predict_chunk(&r, d, rows, 0, (int)head, 1, baselines, out);
    runner_close(&r);
  }
  size_t w = 0;
  int ws_cols = 0;
  while (!rc && w < windows) {
    int cols = windows - w < (size_t)batch ? (int)(windows - w) : batch;
    if (cols != ws_cols) { /* the first chunk, and the last one if it is smaller */
      runner_close(&r);
      rc = runner_open(im, T, cols, &r);
      ws_cols = cols;
    }
    if (!rc) rc = predict_chunk(&r, d, rows, head + w * T, T, cols, baselines, out);
    w += (size_t)cols;
  }
  runner_close(&r);
  free(rows);
  if (out && fclose(out) != 0 && !rc) rc = LSTMD_ENOMEM;
  if (!rc && !strcmp(out_csv, "-")) { /* stdout: whole, after every forecast was made */
    if (fwrite(text, 1, text_len, stdout) != text_len || fflush(stdout) != 0) {
      lstmd_errorf("predict: writing the forecasts to stdout failed: %s", strerror(errno));
      rc = LSTMD_EWRITE;
    }
    free(text);
    return rc;
  }
  struct lstmd_durable file;
  if (!rc) rc = lstmd_durable_open(&file, out_csv);
  if (!rc) {
    rc = lstmd_durable_write(&file, text, text_len);
    rc = rc ? (lstmd_durable_abort(&file), rc) : lstmd_durable_commit(&file);
  }
  free(text);
  return rc;
}
