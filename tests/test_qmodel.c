/* test_qmodel.c — the int8 model's forward (worker/model/qmodel.h) against a float64 forward of
 * the same int8 weights, dequantised, with activations quantised by the same rule (qgemm.h), so
 * that only float rounding separates them: logits of a text model and predictions of a series
 * model over two windows carried from one to the next. Then against the fp32 model within the
 * quantisation error, and 1 thread against 2 and 3: the same bytes, for the split by streams
 * (B > 1) and by units (B = 1, H 512). Run per ISA by ctest. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "worker/model/model.h"
#include "worker/model/qmodel.h"
#include "check.h"

enum { T = 12, B = 3 };

/* A random fp32 model (PyTorch's initialisation: every weight and bias U(±1/√H)) and its int8
 * model; q and scale keep each quantised weight (W_ih, W_hh per layer, then the head) for the
 * reference. */
struct pair {
  struct lstmd_model *m;
  struct lstmd_qmodel *qm;
  int8_t *q[2 * LSTMD_MAX_LAYERS + 1];
  float *scale[2 * LSTMD_MAX_LAYERS + 1];
};

static const float *param(const struct lstmd_model *m, const char *fmt, int l) {
  char name[32];
  snprintf(name, sizeof name, fmt, l);
  return m->params + lstmd_model_tensor(m, name)->offset;
}

static void quantize_into(struct pair *p, int i, int N, int K, const float *w,
                          struct lstmd_qweight *out) {
  p->q[i] = malloc((size_t)N * K);
  p->scale[i] = malloc((size_t)N * sizeof(float));
  lstmd_cpu_quantize_rows(N, K, w, p->q[i], p->scale[i]);
  if (lstmd_cpu_qweight_pack(N, K, p->q[i], p->scale[i], out)) abort();
}

static struct pair make_pair(const struct lstmd_model_shape *s, uint64_t seed) {
  struct pair p = {0};
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, seed, 1);
  if (lstmd_model_create(s, &p.m) || lstmd_qmodel_create(s, &p.qm)) abort();
  lstmd_model_init_params(p.m, &rng);
  const int H = s->hidden, G = 4 * H, text = s->kind == LSTMD_MODEL_TEXT;
  const int O = text ? s->vocab : s->horizon;
  if (text) memcpy(p.qm->embed, param(p.m, "embed.weight", 0), (size_t)s->vocab * s->embed * 4);
  for (int l = 0; l < s->layers; l++) {
    const int in = l ? H : text ? s->embed : s->width;
    quantize_into(&p, 2 * l, G, in, param(p.m, "lstm.weight_ih_l%d", l), &p.qm->layer[l].ih);
    quantize_into(&p, 2 * l + 1, G, H, param(p.m, "lstm.weight_hh_l%d", l), &p.qm->layer[l].hh);
    memcpy(p.qm->layer[l].b_ih, param(p.m, "lstm.bias_ih_l%d", l), (size_t)G * 4);
    memcpy(p.qm->layer[l].b_hh, param(p.m, "lstm.bias_hh_l%d", l), (size_t)G * 4);
  }
  quantize_into(&p, 2 * s->layers, O, H, param(p.m, "head.weight", 0), &p.qm->head);
  memcpy(p.qm->head_bias, param(p.m, "head.bias", 0), (size_t)O * 4);
  if (lstmd_qmodel_finish(p.qm)) abort();
  return p;
}

static void free_pair(struct pair *p) {
  for (int i = 0; i < 2 * LSTMD_MAX_LAYERS + 1; i++) free(p->q[i]), free(p->scale[i]);
  lstmd_model_destroy(p->m);
  lstmd_qmodel_destroy(p->qm);
}

static int g_near_ties; /* activations within float rounding of a quantisation step's midpoint */

/* qgemm.h's activation rule in float64: x ≈ s·(q − z), s = (max(x,0) − min(x,0))/127. */
static void quantize_ref(int K, const double *x, double *xq) {
  double lo = 0.0, hi = 0.0;
  for (int k = 0; k < K; k++) lo = fmin(lo, x[k]), hi = fmax(hi, x[k]);
  double s = (hi - lo) / 127.0;
  if (!(s > 0.0)) s = 1.0;
  const double z = rint(-lo / s);
  for (int k = 0; k < K; k++) {
    const double v = x[k] / s, frac = v - floor(v);
    g_near_ties += fabs(frac - 0.5) < 1e-4;
    xq[k] = s * (fmin(fmax(rint(v) + z, 0.0), 127.0) - z);
  }
}

/* y[n] = Σ_k x[k]·scale[n]·q[n,k] over rows [0, N) of a row-major int8 weight. */
static void gemv_ref(int N, int K, const int8_t *q, const float *scale, const double *x, double *y) {
  for (int n = 0; n < N; n++) {
    double sum = 0.0;
    for (int k = 0; k < K; k++) sum += x[k] * q[(size_t)n * K + k];
    y[n] = sum * scale[n];
  }
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* windows × [T,B,O] outputs of the int8 weights in float64; ids [windows·T,B] or x. State is
 * carried from one window to the next, as the forwards under test do. */
static double *reference(const struct pair *p, int windows, const int32_t *ids, const float *x) {
  const struct lstmd_model_shape *s = &p->qm->shape;
  const int H = s->hidden, G = 4 * H, L = s->layers, text = s->kind == LSTMD_MODEL_TEXT;
  const int O = text ? s->vocab : s->horizon, W = s->width, E = s->embed;
  const int kmax = (text ? E : W) > H ? (text ? E : W) : H;
  double *out = calloc((size_t)windows * T * B * O, sizeof *out);
  double *h = calloc((size_t)L * B * H, sizeof *h), *c = calloc((size_t)L * B * H, sizeof *c);
  double *in = malloc(kmax * sizeof *in), *xq = malloc(kmax * sizeof *xq);
  double *g = malloc(G * sizeof *g), *gh = malloc(G * sizeof *gh);
  for (int t = 0; t < windows * T; t++)
    for (int b = 0; b < B; b++) {
      for (int l = 0; l < L; l++) {
        const struct lstmd_qlayer *ql = &p->qm->layer[l];
        double *hl = h + ((size_t)l * B + b) * H, *cl = c + ((size_t)l * B + b) * H;
        if (l == 0 && text) { /* the exact one-hot fold: embed row · dequant(W_ih)^T */
          for (int k = 0; k < E; k++) in[k] = p->qm->embed[(size_t)ids[t * B + b] * E + k];
          gemv_ref(G, E, p->q[0], p->scale[0], in, g);
        } else {
          const int K = l ? H : W;
          for (int k = 0; k < K; k++) in[k] = l ? h[((size_t)(l - 1) * B + b) * H + k] : x[((size_t)t * B + b) * W + k];
          quantize_ref(K, in, xq);
          gemv_ref(G, K, p->q[2 * l], p->scale[2 * l], xq, g);
        }
        quantize_ref(H, hl, xq);
        gemv_ref(G, H, p->q[2 * l + 1], p->scale[2 * l + 1], xq, gh);
        for (int j = 0; j < G; j++) g[j] += gh[j] + ql->b_ih[j] + ql->b_hh[j];
        for (int j = 0; j < H; j++) { /* PyTorch's gate order: i, f, g, o */
          cl[j] = sigmoid(g[H + j]) * cl[j] + sigmoid(g[j]) * tanh(g[2 * H + j]);
          hl[j] = sigmoid(g[3 * H + j]) * tanh(cl[j]);
        }
      }
      quantize_ref(H, h + ((size_t)(L - 1) * B + b) * H, xq);
      double *o = out + ((size_t)t * B + b) * O;
      gemv_ref(O, H, p->q[2 * L], p->scale[2 * L], xq, o);
      for (int n = 0; n < O; n++) o[n] += p->qm->head_bias[n];
    }
  free(h), free(c), free(in), free(xq), free(g), free(gh);
  return out;
}

/* Fills window w of inputs laid out as windows × [T,batch] into a batch (text ids, series x). */
static void fill(struct lstmd_batch *bt, int w, const int32_t *ids, const float *x) {
  const size_t n = (size_t)T * bt->batch;
  if (bt->width) memcpy(bt->x, x + w * n * bt->width, n * bt->width * 4);
  else memcpy(bt->ids, ids + w * n, n * 4);
}

/* windows × [T,batch,O] outputs of the int8 model on `threads` threads. */
static float *run_int8(const struct pair *p, int windows, int batch, int threads,
                       const int32_t *ids, const float *x) {
  const struct lstmd_model_shape *s = &p->qm->shape;
  const size_t per = (size_t)T * batch * (s->kind == LSTMD_MODEL_TEXT ? s->vocab : s->horizon);
  float *out = malloc(windows * per * sizeof *out);
  struct lstmd_qworkspace *ws;
  if (lstmd_qworkspace_create(p->qm, T, batch, threads, &ws)) abort();
  lstmd_qworkspace_reset_state(ws);
  for (int w = 0; w < windows; w++) {
    fill(lstmd_qworkspace_batch(ws), w, ids, x);
    lstmd_qmodel_forward(p->qm, ws, 1);
    memcpy(out + w * per, lstmd_qworkspace_output(ws), per * sizeof *out);
  }
  lstmd_qworkspace_destroy(ws);
  return out;
}

static float *run_fp32(const struct pair *p, int windows, const int32_t *ids, const float *x) {
  const struct lstmd_model_shape *s = &p->qm->shape;
  const size_t per = (size_t)T * B * (s->kind == LSTMD_MODEL_TEXT ? s->vocab : s->horizon);
  float *out = malloc(windows * per * sizeof *out);
  struct lstmd_workspace *ws;
  if (lstmd_workspace_create(p->m, T, B, 0.0f, &ws)) abort();
  lstmd_workspace_reset_state(ws);
  for (int w = 0; w < windows; w++) {
    fill(lstmd_workspace_batch(ws), w, ids, x);
    lstmd_model_step(p->m, ws, 0.0f, NULL, 1);
    memcpy(out + w * per, lstmd_workspace_output(ws), per * sizeof *out);
  }
  lstmd_workspace_destroy(ws);
  return out;
}

static unsigned long long g_seed = 4242;

/* Random inputs of `windows` windows of `batch` streams: ids below V, or x in ±2 (normalised
 * series rows). */
static void inputs(const struct lstmd_model_shape *s, int windows, int batch, int32_t **ids,
                   float **x) {
  const size_t n = (size_t)windows * T * batch;
  *ids = malloc(n * sizeof **ids);
  for (size_t i = 0; i < n; i++)
    (*ids)[i] = s->vocab ? (int32_t)((test_uniform(&g_seed, 0.5) + 0.5) * s->vocab) % s->vocab : 0;
  *x = test_rand_floats(&g_seed, n * (s->width ? s->width : 1), 2.0, NULL);
}

/* Tolerances.
 * Against float64, atol 1e-6 + rtol 1e-5: both sides take the same quantised weights and the
 * same rule for activations, so they part by float32 rounding only (the dequantisation
 * epilogue, the sum of projection, recurrence and biases, fastmath's few-ulp sigmoid/tanh) over
 * 24 steps of 2 layers: measured max 3e-8 on outputs of magnitude ~0.5. A quantised activation
 * that float rounding moved across a step's midpoint would cost one quantisation step (~1e-3)
 * and fail this: the name of the check says how many activations came within 1e-4 of a
 * midpoint (near ties), to tell that case from a bug.
 * Against the fp32 model, 0.02 absolute: here the weights differ by up to s_w/2 = max|w_row|/254
 * and the activations by up to (max − min)/254 per row; for the head's GEMV of K = 48 inputs
 * with |w| ≤ 1/√48 and |h| ≲ 0.3 the worst case Σ_k (|x|·s_w + |w|·s_x)/2 is ~0.012; the hidden
 * state's own error from the layers below adds to it without gain (sigmoid' ≤ 1/4, tanh' ≤ 1).
 * Measured max 0.0018. A broken bias moves outputs by ~1e-2..1e-1. */
static void check_model(const char *what, const struct lstmd_model_shape *s, uint64_t seed) {
  struct pair p = make_pair(s, seed);
  int32_t *ids;
  float *x;
  inputs(s, 2, B, &ids, &x);
  const size_t n = 2 * (size_t)T * B * (s->kind == LSTMD_MODEL_TEXT ? s->vocab : s->horizon);
  g_near_ties = 0;
  double *ref = reference(&p, 2, ids, x);
  float *got = run_int8(&p, 2, B, 1, ids, x), *fp = run_fp32(&p, 2, ids, x);
  char name[96];
  snprintf(name, sizeof name, "%s int8 vs float64 (%d near ties)", what, g_near_ties);
  check_close(name, got, ref, n, 1e-6, 1e-5);
  snprintf(name, sizeof name, "%s int8 vs fp32 model", what);
  check_close_f(name, got, fp, n, 0.02, 0.0);
  free(ref), free(got), free(fp), free(ids), free(x);
  free_pair(&p);
}

/* 1 thread against 2 and 3: byte-identical outputs, batch 20 (split by streams at any H: 3 chunks
 * of 6-7 streams) and batch 1 at H 512 (split by units: W_hh is 1 MB, 8 chunks of 64). Which
 * thread takes which chunk is up to the scheduler (qteam.h); on a busy host the helpers may take
 * few, so this runs 16 windows (384 batch-1 jobs) to give them many chances. */
enum { kWindows = 16 };
static void check_threads(const char *what, const struct lstmd_model_shape *s, int batch) {
  struct pair p = make_pair(s, 99);
  int32_t *ids;
  float *x;
  inputs(s, kWindows, batch, &ids, &x);
  const size_t n = (size_t)kWindows * T * batch * (s->kind == LSTMD_MODEL_TEXT ? s->vocab : s->horizon);
  float *one = run_int8(&p, kWindows, batch, 1, ids, x);
  for (int threads = 2; threads <= 3; threads++) {
    float *many = run_int8(&p, kWindows, batch, threads, ids, x);
    char name[96];
    snprintf(name, sizeof name, "%s B=%d: %d threads == 1 (bytes)", what, batch, threads);
    check_true(name, memcmp(one, many, n * sizeof *one) == 0);
    free(many);
  }
  free(one), free(ids), free(x);
  free_pair(&p);
}

int main(void) {
  const struct lstmd_model_shape text = {.kind = LSTMD_MODEL_TEXT, .vocab = 29, .embed = 8,
                                         .hidden = 48, .layers = 2};
  const struct lstmd_model_shape series = {.kind = LSTMD_MODEL_SERIES, .width = 3, .hidden = 48,
                                           .layers = 2, .horizon = 4};
  check_model("text", &text, 1);
  check_model("series", &series, 2);
  /* H 24: gate blocks that start inside a 16-row weight panel (each gate's recurrence used to be
   * added twice to the columns its panels share with the next gate: int8 MSE 5× fp32's) */
  struct lstmd_model_shape odd_text = text, odd_series = series;
  odd_text.hidden = odd_series.hidden = 24;
  check_model("text H24", &odd_text, 3);
  check_model("series H24", &odd_series, 4);
  struct lstmd_model_shape big_text = text, big_series = series;
  big_text.hidden = big_series.hidden = 512;
  check_threads("text", &text, 20);
  check_threads("text H512", &big_text, 1);
  check_threads("series", &series, 20);
  check_threads("series H512", &big_series, 1);
  return check_summary("test_qmodel");
}
