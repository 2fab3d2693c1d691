/* onnx_export.c — builds the ONNX graph of an lstmd model out of protoc-c structs
 * (proto/onnx_subset.proto) and writes it atomically (see onnx_export.h), in fp32 or with the
 * int8 weights of `lstmd quantize` for onnxruntime's DynamicQuantizeLSTM/-MatMul. Every struct
 * and string of the graph is allocated from one list of blocks freed together at the end; the
 * tensors lstmd does not reorder point straight into the model's parameters. */
#define _GNU_SOURCE
#include "onnx_export.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "durable.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/status.h"
#include "onnx_builder.h"

/* IR version 13 (onnx 1.21 and later): the newest onnxruntime 1.31 loads (it refuses 14), and
 * new enough for every opset in [LSTMD_ONNX_OPSET_MIN, _MAX]. */
#define ONNX_IR_VERSION 13
/* The domain of onnxruntime's int8 operators (DynamicQuantizeLSTM, DynamicQuantizeMatMul). */
#define MS_DOMAIN "com.microsoft"

/* 1. Gate order. PyTorch (and lstmd) stack the four gate blocks of weight_ih, weight_hh and both
 *    biases as i, f, g, o; ONNX's LSTM operator stacks them as i, o, f, c (c is PyTorch's g, the
 *    cell candidate). ONNX block j is PyTorch block ONNX_FROM_TORCH[j].
 * 2. Layout. ONNX's W is [num_directions, 4H, input] and R [num_directions, 4H, H] with
 *    num_directions = 1: PyTorch's [4H, in] and [4H, H] with the blocks reordered. B is
 *    [1, 8H]: the input bias (Wb, PyTorch's bias_ih) then the recurrent bias (Rb, bias_hh), each
 *    reordered; ONNX adds both, as PyTorch does.
 * 3. The activations are the operator's defaults (sigmoid for i/o/f, tanh for c and h), no
 *    clip, input_forget 0, layout 0 (X is [seq, batch, input]): the PyTorch LSTM cell. */
static const int ONNX_FROM_TORCH[4] = {0, 3, 1, 2};

static void reorder_gates(const float *torch, int H, int cols, float *onnx) {
  const size_t block = (size_t)H * cols;
  for (int j = 0; j < 4; j++)
    memcpy(onnx + j * block, torch + ONNX_FROM_TORCH[j] * block, block * sizeof(float));
}

/* --int8: a weight w [rows, cols] in PyTorch's layout quantised exactly as `lstmd quantize`
 * stores it (lstmd_cpu_quantize_rows: symmetric, one scale per output row), then, for the LSTM
 * weights (gates != 0), its gate blocks of rows reordered as above, and transposed to
 * [cols, rows]: DynamicQuantizeLSTM takes W [1, input, 4H] and R [1, H, 4H], and
 * DynamicQuantizeMatMul B [H, out], each with one scale per column (= per output row here) and
 * a zero point of 0. Fills *qt [cols·rows] and *scale [rows]; returns 0 or LSTMD_ENOMEM. */
static int quantize_t(struct lstmd_onnx_builder *b, const float *w, int rows, int cols, int gates,
                      int8_t **qt, float **scale) {
  int8_t *q = malloc((size_t)rows * cols);
  float *s = malloc((size_t)rows * sizeof *s);
  *qt = lstmd_onnxb_alloc(b, (size_t)rows * cols);
  *scale = lstmd_onnxb_alloc(b, (size_t)rows * sizeof **scale);
  if (!q || !s || !*qt || !*scale) {
    free(q);
    free(s);
    b->oom = 1;
    return LSTMD_ENOMEM;
  }
  lstmd_cpu_quantize_rows(rows, cols, w, q, s);
  const int H = rows / 4;
  for (int r = 0; r < rows; r++) {
    const int src = gates ? ONNX_FROM_TORCH[r / H] * H + r % H : r;
    (*scale)[r] = s[src];
    for (int c = 0; c < cols; c++) (*qt)[(size_t)c * rows + r] = q[(size_t)src * cols + c];
  }
  free(q);
  free(s);
  return LSTMD_OK;
}

static const float *param(const struct lstmd_model *m, const char *name) {
  return m->params + lstmd_model_tensor(m, name)->offset;
}

/* W and R of layer k for --int8 (quantize_t) with their scales, as inputs 1, 2 and 8..11 of
 * DynamicQuantizeLSTM; the zero points are the shared all-zero `lstm.zero_point` [1, 4H]. */
static void add_int8_weights(struct lstmd_onnx_builder *b, int k, const float *w_ih,
                             const float *w_hh, int H, int in, const char **inputs) {
  int8_t *qw, *qr;
  float *sw, *sr;
  if (quantize_t(b, w_ih, 4 * H, in, 1, &qw, &sw) || quantize_t(b, w_hh, 4 * H, H, 1, &qr, &sr))
    return;
  const int64_t wd[3] = {1, in, 4 * H}, rd[3] = {1, H, 4 * H}, sd[2] = {1, 4 * H};
  inputs[1] = lstmd_onnxb_i8(
      b, lstmd_onnxb_strf(b, "lstm.W_l%d", k), 3, wd, qw,
      lstmd_onnxb_strf(b,
                       "lstm.weight_ih_l%d as lstmd quantize's int8 rows, gate blocks "
                       "i,f,g,o -> i,o,f,c, transposed",
                       k));
  inputs[2] = lstmd_onnxb_i8(
      b, lstmd_onnxb_strf(b, "lstm.R_l%d", k), 3, rd, qr,
      lstmd_onnxb_strf(b,
                       "lstm.weight_hh_l%d as lstmd quantize's int8 rows, gate blocks "
                       "i,f,g,o -> i,o,f,c, transposed",
                       k));
  inputs[8] = lstmd_onnxb_f32(
      b, lstmd_onnxb_strf(b, "lstm.W_scale_l%d", k), 2, sd, sw,
      lstmd_onnxb_strf(b, "lstm.weight_ih_l%d.scale, gate blocks i,f,g,o -> i,o,f,c", k));
  inputs[9] = "lstm.zero_point";
  inputs[10] = lstmd_onnxb_f32(
      b, lstmd_onnxb_strf(b, "lstm.R_scale_l%d", k), 2, sd, sr,
      lstmd_onnxb_strf(b, "lstm.weight_hh_l%d.scale, gate blocks i,f,g,o -> i,o,f,c", k));
  inputs[11] = "lstm.zero_point";
}

/* Layer k: LSTM (fp32) or com.microsoft DynamicQuantizeLSTM (--int8) with its weights, reordered
 * (allocated from the builder). Returns the node. */
static Onnx__NodeProto *add_lstm_layer(struct lstmd_onnx_builder *b, const struct lstmd_model *m,
                                       int k, const char *x, const char *h0, const char *c0) {
  const int H = m->shape.hidden;
  const int in = k ? H : m->shape.kind == LSTMD_MODEL_TEXT ? m->shape.embed : m->shape.width;
  char name[48];
  snprintf(name, sizeof name, "lstm.weight_ih_l%d", k);
  const float *w_ih = param(m, name);
  snprintf(name, sizeof name, "lstm.weight_hh_l%d", k);
  const float *w_hh = param(m, name);
  snprintf(name, sizeof name, "lstm.bias_ih_l%d", k);
  const float *b_ih = param(m, name);
  snprintf(name, sizeof name, "lstm.bias_hh_l%d", k);
  const float *b_hh = param(m, name);
  float *B = lstmd_onnxb_alloc(b, (size_t)8 * H * sizeof *B);
  if (!B) return NULL;
  reorder_gates(b_ih, H, 1, B);
  reorder_gates(b_hh, H, 1, B + 4 * H);
  const int64_t bd[2] = {1, 8 * H};
  const char *inputs[13] = {
      x,
      NULL, /* W, R: below */
      NULL,
      lstmd_onnxb_f32(
          b, lstmd_onnxb_strf(b, "lstm.B_l%d", k), 2, bd, B,
          lstmd_onnxb_strf(b, "lstm.bias_ih_l%d then lstm.bias_hh_l%d, each i,f,g,o -> i,o,f,c", k,
                           k)),
      "", /* sequence_lens: every sequence runs the whole chunk */
      h0,
      c0,
      "", /* int8: P (peepholes): none */
  };
  if (b->int8) {
    add_int8_weights(b, k, w_ih, w_hh, H, in, inputs);
  } else {
    float *W = lstmd_onnxb_alloc(b, (size_t)4 * H * in * sizeof *W);
    float *R = lstmd_onnxb_alloc(b, (size_t)4 * H * H * sizeof *R);
    if (!W || !R) return NULL;
    reorder_gates(w_ih, H, in, W);
    reorder_gates(w_hh, H, H, R);
    const int64_t wd[3] = {1, 4 * H, in}, rd[3] = {1, 4 * H, H};
    inputs[1] = lstmd_onnxb_f32(
        b, lstmd_onnxb_strf(b, "lstm.W_l%d", k), 3, wd, W,
        lstmd_onnxb_strf(b, "lstm.weight_ih_l%d, gate blocks i,f,g,o -> i,o,f,c", k));
    inputs[2] = lstmd_onnxb_f32(
        b, lstmd_onnxb_strf(b, "lstm.R_l%d", k), 3, rd, R,
        lstmd_onnxb_strf(b, "lstm.weight_hh_l%d, gate blocks i,f,g,o -> i,o,f,c", k));
    inputs[7] = NULL; /* the standard LSTM ends at initial_c */
  }
  if (b->oom) return NULL;
  const char *outputs[] = {lstmd_onnxb_strf(b, "lstm_l%d.Y", k),
                           lstmd_onnxb_strf(b, "lstm_l%d.Y_h", k),
                           lstmd_onnxb_strf(b, "lstm_l%d.Y_c", k), NULL};
  Onnx__NodeProto *n = lstmd_onnxb_node(b, b->int8 ? "DynamicQuantizeLSTM" : "LSTM",
                                        lstmd_onnxb_strf(b, "lstm_l%d", k), inputs, outputs);
  if (n && b->int8) n->domain = MS_DOMAIN;
  lstmd_onnxb_attr_int(b, n, "hidden_size", H);
  lstmd_onnxb_attr_string(b, n, "direction", "forward");
  return n;
}

static char *json_list_text(json_t *a) {
  char *s = a ? json_dumps(a, JSON_COMPACT) : NULL;
  json_decref(a);
  return s;
}

static char *float_json(const float *v, int n) {
  json_t *a = json_array();
  for (int i = 0; a && i < n; i++) json_array_append_new(a, json_real(v[i]));
  return json_list_text(a);
}

/* metadata_props: what a caller needs beside the graph (the vocabulary, the series columns). */
static Onnx__StringStringEntryProto **metadata(struct lstmd_onnx_builder *b,
                                               const struct lstmd_model *m,
                                               const struct lstmd_data_meta *d,
                                               const char *ckpt_name, size_t *n_out) {
  const struct lstmd_dataset_info *info = &d->info;
  const char *kv[24];
  int n = 0;
  kv[n++] = "lstmd.format";
  kv[n++] = "lstmd-onnx-1";
  kv[n++] = "lstmd.kind";
  kv[n++] = m->shape.kind == LSTMD_MODEL_TEXT ? "text" : "series";
  kv[n++] = "lstmd.checkpoint";
  kv[n++] = ckpt_name;
  kv[n++] = "lstmd.seq_len";
  kv[n++] = lstmd_onnxb_strf(b, "%d", d->seq_len);
  if (b->int8) {
    kv[n++] = "lstmd.quant";
    kv[n++] = "int8 weights as lstmd quantize writes them (symmetric, one scale per output row), "
              "activations quantised by onnxruntime (com.microsoft DynamicQuantizeLSTM, "
              "DynamicQuantizeMatMul)";
  }
  char *lists[3] = {NULL, NULL, NULL};
  if (m->shape.kind == LSTMD_MODEL_TEXT) {
    json_t *a = json_array();
    for (int k = 0; a && k < info->vocab_size; k++) json_array_append_new(a, json_integer(info->vocab[k]));
    kv[n++] = "lstmd.vocab";
    kv[n++] = lists[0] = json_list_text(a);
  } else {
    json_t *a = json_array();
    for (int c = 0; a && c < info->width; c++) json_array_append_new(a, json_string(info->names[c]));
    kv[n++] = "lstmd.series.columns";
    kv[n++] = lists[0] = json_list_text(a);
    kv[n++] = "lstmd.series.mean";
    kv[n++] = lists[1] = float_json(info->mean, info->width);
    kv[n++] = "lstmd.series.std";
    kv[n++] = lists[2] = float_json(info->std, info->width);
    kv[n++] = "lstmd.series.target"; /* both undone inside the graph (Slice, Sub, Add) */
    kv[n++] = lstmd_series_target_name(d->tf.target);
    kv[n++] = "lstmd.series.window_norm";
    kv[n++] = lstmd_window_norm_name(d->tf.window_norm);
  }
  Onnx__StringStringEntryProto **props = lstmd_onnxb_alloc(b, (size_t)n / 2 * sizeof *props);
  for (int i = 0; props && i < n / 2; i++) {
    Onnx__StringStringEntryProto *e = lstmd_onnxb_alloc(b, sizeof *e);
    if (!e || !kv[2 * i + 1]) {
      b->oom = 1;
      break;
    }
    onnx__string_string_entry_proto__init(e);
    e->key = (char *)kv[2 * i];
    e->value = lstmd_onnxb_strf(b, "%s", kv[2 * i + 1]);
    props[i] = e;
  }
  for (int i = 0; i < 3; i++) free(lists[i]);
  *n_out = (size_t)n / 2;
  return props;
}

/* The graph (see README.md "Export to ONNX"):
 *   text:   tokens [seq,batch] int64 --Gather(embed.weight)--> x
 *   series: inputs [seq,batch,W] --Sub(series.mean)--Div(series.std)--> x
 *   h0, c0 [L,batch,H] --Split(axis 0)--> per-layer [1,batch,H]
 *   layer k: LSTM(x, W, R, B, "", h0_k, c0_k) -> Y [seq,1,batch,H] --Squeeze(axis 1)--> x
 *   x --MatMul(Transpose(head.weight))--Add(head.bias)--> logits [seq,batch,V]
 *     (series: data.window_norm=last first subtracts the window's first row, Slice(x, axis 0,
 *      [0,1)), from x and model.target=level adds its target value back; model.target=delta
 *      adds Slice(x, axis 2, [0,1)), the current target value; then Mul(target std),
 *      Add(target mean) --> predictions [seq,batch,K]; with last, run the graph on windows of
 *      lstmd.seq_len rows as lstmd does: the shift is each call's first row)
 *   hn, cn [L,batch,H] = Concat(axis 0) of every layer's Y_h, Y_c. */
static void build_graph(struct lstmd_onnx_builder *b, const struct lstmd_model *m,
                        const struct lstmd_data_meta *d, Onnx__GraphProto *g) {
  const struct lstmd_model_shape *s = &m->shape;
  const int text = s->kind == LSTMD_MODEL_TEXT, L = s->layers, H = s->hidden;
  const int out_dim = text ? s->vocab : s->horizon;
  const char *x;
  if (text) {
    const int64_t ed[2] = {s->vocab, s->embed};
    const char *in[] = {lstmd_onnxb_f32(b, "embed.weight", 2, ed, param(m, "embed.weight"), NULL),
                        "tokens", NULL};
    const char *out[] = {"embedded", NULL};
    lstmd_onnxb_node(b, "Gather", "embed", in, out);
    x = "embedded";
  } else {
    const int64_t wd[1] = {s->width};
    const char *sub_in[] = {"inputs",
                            lstmd_onnxb_f32(b, "series.mean", 1, wd, d->info.mean,
                                            "training-split mean of each input column"),
                            NULL};
    const char *sub_out[] = {"inputs_centered", NULL};
    lstmd_onnxb_node(b, "Sub", "normalise_center", sub_in, sub_out);
    const char *div_in[] = {
        "inputs_centered",
        lstmd_onnxb_f32(b, "series.std", 1, wd, d->info.std,
                        "training-split standard deviation of each input column"),
        NULL};
    const char *div_out[] = {"inputs_normalised", NULL};
    lstmd_onnxb_node(b, "Div", "normalise_scale", div_in, div_out);
    x = "inputs_normalised";
    if (d->tf.window_norm == LSTMD_WNORM_LAST) { /* minus the window's first row */
      const int64_t zero1[1] = {0}, one1[1] = {1};
      const char *sl_in[] = {"inputs_normalised", lstmd_onnxb_i64(b, "window.starts", zero1, 1),
                             lstmd_onnxb_i64(b, "window.ends", one1, 1),
                             lstmd_onnxb_i64(b, "window.axes", zero1, 1), NULL};
      const char *sl_out[] = {"window_shift", NULL};
      lstmd_onnxb_node(b, "Slice", "window_first_row", sl_in, sl_out);
      const char *sub_in2[] = {"inputs_normalised", "window_shift", NULL};
      const char *sub_out2[] = {"inputs_window", NULL};
      lstmd_onnxb_node(b, "Sub", "window_norm_last", sub_in2, sub_out2);
      x = "inputs_window";
    }
  }
  int64_t ones[LSTMD_MAX_LAYERS];
  for (int k = 0; k < L; k++) ones[k] = 1;
  const char *split_sizes = lstmd_onnxb_i64(b, "layer_split", ones, L);
  if (b->int8) {
    const int64_t zd[2] = {1, 4 * H};
    lstmd_onnxb_i8(b, "lstm.zero_point", 2, zd, lstmd_onnxb_alloc(b, (size_t)4 * H),
                   "zero points of every W, R");
  }
  const int64_t axis1[1] = {1};
  const char *squeeze_axes = lstmd_onnxb_i64(b, "squeeze_axes", axis1, 1);
  const char *h_in[LSTMD_MAX_LAYERS + 1] = {0}, *c_in[LSTMD_MAX_LAYERS + 1] = {0};
  const char *h_out[LSTMD_MAX_LAYERS + 1] = {0}, *c_out[LSTMD_MAX_LAYERS + 1] = {0};
  for (int k = 0; k < L; k++) {
    h_in[k] = lstmd_onnxb_strf(b, "h0_l%d", k);
    c_in[k] = lstmd_onnxb_strf(b, "c0_l%d", k);
  }
  const char *split_h[] = {"h0", split_sizes, NULL}, *split_c[] = {"c0", split_sizes, NULL};
  lstmd_onnxb_attr_int(b, lstmd_onnxb_node(b, "Split", "split_h0", split_h, h_in), "axis", 0);
  lstmd_onnxb_attr_int(b, lstmd_onnxb_node(b, "Split", "split_c0", split_c, c_in), "axis", 0);
  for (int k = 0; k < L; k++) {
    Onnx__NodeProto *lstm = add_lstm_layer(b, m, k, x, h_in[k], c_in[k]);
    if (!lstm) return;
    h_out[k] = lstm->output[1];
    c_out[k] = lstm->output[2];
    const char *sq_in[] = {lstm->output[0], squeeze_axes, NULL};
    const char *sq_out[] = {lstmd_onnxb_strf(b, "layer%d.out", k), NULL};
    lstmd_onnxb_node(b, "Squeeze", lstmd_onnxb_strf(b, "squeeze_l%d", k), sq_in, sq_out);
    x = sq_out[0];
  }
  const char *hn_out[] = {"hn", NULL}, *cn_out[] = {"cn", NULL};
  lstmd_onnxb_attr_int(b, lstmd_onnxb_node(b, "Concat", "concat_hn", h_out, hn_out), "axis", 0);
  lstmd_onnxb_attr_int(b, lstmd_onnxb_node(b, "Concat", "concat_cn", c_out, cn_out), "axis", 0);

  const char *out_name = text ? "logits" : "predictions";
  const char *head_out[] = {text ? out_name : "predictions_normalised", NULL};
  const int64_t hbd[1] = {out_dim};
  const char *head_bias = lstmd_onnxb_f32(b, "head.bias", 1, hbd, param(m, "head.bias"), NULL);
  if (b->int8) { /* DynamicQuantizeMatMul(x, B int8 [H, out], scale, zero point, bias) */
    int8_t *q;
    float *scale;
    if (quantize_t(b, param(m, "head.weight"), out_dim, H, 0, &q, &scale)) return;
    const int64_t qd[2] = {H, out_dim};
    const char *in[] = {
        x,
        lstmd_onnxb_i8(b, "head.weight", 2, qd, q,
                       "head.weight as lstmd quantize's int8 rows, transposed"),
        lstmd_onnxb_f32(b, "head.weight_scale", 1, hbd, scale, "head.weight.scale"),
        lstmd_onnxb_i8(b, "head.zero_point", 1, hbd, lstmd_onnxb_alloc(b, (size_t)out_dim), NULL),
        head_bias,
        NULL};
    Onnx__NodeProto *n = lstmd_onnxb_node(b, "DynamicQuantizeMatMul", "head", in, head_out);
    if (n) n->domain = MS_DOMAIN;
  } else { /* MatMul(x, Transpose(head.weight)) + head.bias */
    const int64_t hwd[2] = {out_dim, H};
    const char *tr_in[] = {lstmd_onnxb_f32(b, "head.weight", 2, hwd, param(m, "head.weight"), NULL),
                           NULL};
    const char *tr_out[] = {"head.weight_t", NULL};
    int64_t *perm = lstmd_onnxb_alloc(b, 2 * sizeof *perm);
    if (perm) perm[0] = 1, perm[1] = 0;
    lstmd_onnxb_attr_ints(b, lstmd_onnxb_node(b, "Transpose", "head_transpose", tr_in, tr_out),
                          "perm", perm, 2);
    const char *mm_in[] = {x, "head.weight_t", NULL}, *mm_out[] = {"head_matmul", NULL};
    lstmd_onnxb_node(b, "MatMul", "head_matmul", mm_in, mm_out);
    const char *add_in[] = {"head_matmul", head_bias, NULL};
    lstmd_onnxb_node(b, "Add", "head_bias", add_in, head_out);
  }
  const char *pred_norm = "predictions_normalised";
  /* The transform undone: delta adds the current target value (inputs_normalised[:, :, 0:1]),
   * level with window_norm=last the window's first target value (window_shift[:, :, 0:1]). */
  const int delta = d->tf.target == LSTMD_TARGET_DELTA;
  if (!text && (delta || d->tf.window_norm == LSTMD_WNORM_LAST)) {
    const int64_t zero1[1] = {0}, one1[1] = {1}, two1[1] = {2};
    const char *sl_in[] = {
        delta ? "inputs_normalised" : "window_shift", lstmd_onnxb_i64(b, "undo.starts", zero1, 1),
        lstmd_onnxb_i64(b, "undo.ends", one1, 1), lstmd_onnxb_i64(b, "undo.axes", two1, 1), NULL};
    const char *sl_out[] = {"undo_base", NULL};
    lstmd_onnxb_node(b, "Slice", delta ? "delta_current_value" : "window_first_target", sl_in,
                     sl_out);
    const char *add_in[] = {"predictions_normalised", "undo_base", NULL};
    const char *add_out[] = {"predictions_normalised_level", NULL};
    lstmd_onnxb_node(b, "Add", "transform_undo", add_in, add_out);
    pred_norm = "predictions_normalised_level";
  }
  if (!text) { /* back to the target column's units, as `lstmd predict` writes them */
    const int64_t one[1] = {1};
    const char *mul_in[] = {pred_norm,
                            lstmd_onnxb_f32(b, "series.target_std", 1, one, &d->info.std[0],
                                            "std of the target column (series.std[0])"),
                            NULL};
    const char *mul_out[] = {"predictions_scaled", NULL};
    lstmd_onnxb_node(b, "Mul", "denormalise_scale", mul_in, mul_out);
    const char *ad_in[] = {"predictions_scaled",
                           lstmd_onnxb_f32(b, "series.target_mean", 1, one, &d->info.mean[0],
                                           "mean of the target column (series.mean[0])"),
                           NULL};
    const char *ad_out[] = {out_name, NULL};
    lstmd_onnxb_node(b, "Add", "denormalise_shift", ad_in, ad_out);
  }

  const char *seq_batch[3] = {"seq", "batch", NULL}, *state_axes[3] = {NULL, "batch", NULL};
  const int64_t x_dims[3] = {0, 0, s->width}, y_dims[3] = {0, 0, out_dim};
  const int64_t state_dims[3] = {L, 0, H};
  const char *state_doc = "[layers, batch, hidden]: zeros to start a sequence, else the previous "
                          "chunk's final state";
  g->n_input = 3;
  g->input = lstmd_onnxb_alloc(b, 3 * sizeof *g->input);
  g->n_output = 3;
  g->output = lstmd_onnxb_alloc(b, 3 * sizeof *g->output);
  if (!g->input || !g->output) return;
  g->input[0] = text ? lstmd_onnxb_value_info(b, "tokens", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 2,
                                              x_dims, seq_batch,
                                              "token ids (indices into metadata lstmd.vocab), "
                                              "[seq, batch]")
                     : lstmd_onnxb_value_info(b, "inputs", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3,
                                              x_dims, seq_batch,
                                              "raw input rows (columns lstmd.series.columns), "
                                              "[seq, batch, columns]");
  g->input[1] = lstmd_onnxb_value_info(b, "h0", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, state_dims,
                                       state_axes, state_doc);
  g->input[2] = lstmd_onnxb_value_info(b, "c0", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, state_dims,
                                       state_axes, state_doc);
  g->output[0] = lstmd_onnxb_value_info(b, out_name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3,
                                        y_dims, seq_batch,
                                        text ? "next-token logits (no softmax), [seq, batch, vocab]"
                                             : "the next K target values in the target's units, "
                                               "[seq, batch, K]");
  g->output[1] = lstmd_onnxb_value_info(b, "hn", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3,
                                        state_dims, state_axes, "final h, [layers, batch, hidden]");
  g->output[2] = lstmd_onnxb_value_info(b, "cn", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3,
                                        state_dims, state_axes, "final c, [layers, batch, hidden]");
  for (int i = 0; i < 3; i++)
    if (!g->input[i] || !g->output[i]) b->oom = 1;
  g->name = text ? "lstmd_text" : "lstmd_series";
  g->n_node = b->n_nodes;
  g->node = b->nodes;
  g->n_initializer = b->n_inits;
  g->initializer = b->inits;
}

int lstmd_onnx_export(const struct lstmd_model *m, const struct lstmd_data_meta *d,
                      const char *ckpt_name, int opset, int int8, const char *out_path) {
  if (m->shape.layer_norm) { /* ONNX's LSTM operator has no layer normalisation */
    lstmd_errorf("export onnx: %s: model.layer_norm is on; ONNX's LSTM operator has no layer "
                 "normalisation, and the unrolled graph it needs is not built yet", ckpt_name);
    return LSTMD_ECONFIG;
  }
  if (opset < LSTMD_ONNX_OPSET_MIN || opset > LSTMD_ONNX_OPSET_MAX) {
    lstmd_errorf("export onnx: opset %d is not supported (%d..%d)", opset, LSTMD_ONNX_OPSET_MIN,
                 LSTMD_ONNX_OPSET_MAX);
    return LSTMD_EINVAL;
  }
  /* mean's statistics read up to seq_len − 1 rows before the window, which a graph given the
   * window's rows does not have (last's shift is the window's own first row: in the graph). */
  if (m->shape.kind == LSTMD_MODEL_SERIES && d->tf.window_norm == LSTMD_WNORM_MEAN) {
    lstmd_errorf("export onnx: %s was trained with data.window_norm=mean, whose statistics read "
                 "rows before each window, which an ONNX graph given the window cannot; train "
                 "with data.window_norm=last or none to export", ckpt_name);
    return LSTMD_EINVAL;
  }
  struct lstmd_onnx_builder b = {.int8 = int8};
  Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
  Onnx__OperatorSetIdProto op_set = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  Onnx__OperatorSetIdProto ms_set = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  Onnx__OperatorSetIdProto *op_sets[2] = {&op_set, &ms_set};
  Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
  op_set.domain = "";
  op_set.has_version = 1;
  op_set.version = opset;
  ms_set.domain = MS_DOMAIN; /* --int8: onnxruntime's contrib operators, version 1 */
  ms_set.has_version = 1;
  ms_set.version = 1;
  model.has_ir_version = 1;
  model.ir_version = ONNX_IR_VERSION;
  model.producer_name = "lstmd";
  model.producer_version = LSTMD_VERSION_STRING;
  model.n_opset_import = int8 ? 2 : 1;
  model.opset_import = op_sets;
  model.graph = &graph;
  model.doc_string =
      lstmd_onnxb_strf(&b, "lstmd %s model from %s: %d LSTM layer(s) of %d units%s",
                       m->shape.kind == LSTMD_MODEL_TEXT ? "text" : "series", ckpt_name,
                       m->shape.layers, m->shape.hidden, int8 ? ", int8 weights" : "");
  model.metadata_props = metadata(&b, m, d, ckpt_name, &model.n_metadata_props);
  build_graph(&b, m, d, &graph);
  int rc = b.oom ? LSTMD_ENOMEM : LSTMD_OK;
  if (rc) lstmd_errorf("export onnx: out of memory building the graph of %s", ckpt_name);
  const size_t bytes = rc ? 0 : onnx__model_proto__get_packed_size(&model);
  if (!rc && bytes > (size_t)INT32_MAX) { /* protobuf's limit for one message */
    lstmd_errorf("export onnx: %s gives a %zu-byte model; one ONNX protobuf holds at most 2 GiB",
                 ckpt_name, bytes);
    rc = LSTMD_EINVAL;
  }
  uint8_t *buf = rc ? NULL : malloc(bytes);
  if (!rc && !buf) {
    lstmd_errorf("export onnx: cannot allocate %zu bytes for %s", bytes, out_path);
    rc = LSTMD_ENOMEM;
  }
  if (!rc && onnx__model_proto__pack(&model, buf) != bytes) {
    lstmd_errorf("export onnx: protobuf-c packed a different size than it computed");
    rc = LSTMD_EINVAL;
  }
  struct lstmd_durable file;
  if (!rc) rc = lstmd_durable_open(&file, out_path);
  if (!rc) {
    rc = lstmd_durable_write(&file, buf, bytes);
    rc = rc ? (lstmd_durable_abort(&file), rc) : lstmd_durable_commit(&file);
  }
  free(buf);
  lstmd_onnxb_free(&b);
  return rc;
}
