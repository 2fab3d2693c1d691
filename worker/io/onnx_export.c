/* onnx_export.c — builds the ONNX graph of an lstmd model out of protoc-c structs
 * (proto/onnx_subset.proto) and writes it atomically (see onnx_export.h), in fp32 or with the
 * int8 weights of `lstmd quantize` for onnxruntime's DynamicQuantizeLSTM/-MatMul. Every struct
 * and string of the graph is allocated from one list of blocks freed together at the end; the
 * tensors lstmd does not reorder point straight into the model's parameters. */
#define _GNU_SOURCE
#include "onnx_export.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "durable.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/status.h"
#include "onnx_subset.pb-c.h"

/* IR version 13 (onnx 1.21 and later): the newest onnxruntime 1.31 loads (it refuses 14), and
 * new enough for every opset in [LSTMD_ONNX_OPSET_MIN, _MAX]. */
#define ONNX_IR_VERSION 13
#define MAX_NODES (2 * LSTMD_MAX_LAYERS + 16)
/* The domain of onnxruntime's int8 operators (DynamicQuantizeLSTM, DynamicQuantizeMatMul). */
#define MS_DOMAIN "com.microsoft"
#define MAX_INITS (3 * LSTMD_MAX_LAYERS + 16)

struct builder {
  void **blocks; /* everything allocated for the graph, freed by builder_free */
  size_t n_blocks, cap_blocks;
  int oom;       /* an allocation failed: the graph is incomplete (LSTMD_ENOMEM) */
  int int8;      /* int8 weights (onnxruntime's com.microsoft operators) */
  Onnx__NodeProto *nodes[MAX_NODES];
  size_t n_nodes;
  Onnx__TensorProto *inits[MAX_INITS];
  size_t n_inits;
};

/* Takes ownership of p (malloc'd; NULL means an allocation failed) until builder_free. */
static void *bld_keep(struct builder *b, void *p) {
  if (p && b->n_blocks == b->cap_blocks) {
    size_t cap = b->cap_blocks ? 2 * b->cap_blocks : 256;
    void **grown = realloc(b->blocks, cap * sizeof *grown);
    if (!grown) {
      free(p);
      p = NULL;
    } else {
      b->blocks = grown;
      b->cap_blocks = cap;
    }
  }
  if (!p) {
    b->oom = 1;
    return NULL;
  }
  return b->blocks[b->n_blocks++] = p;
}

/* Zeroed memory that lives until builder_free; NULL (and b->oom set) when out of memory. */
static void *bld_alloc(struct builder *b, size_t bytes) {
  return bld_keep(b, calloc(1, bytes ? bytes : 1));
}

__attribute__((format(printf, 2, 3))) static char *bld_strf(struct builder *b, const char *fmt,
                                                            ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0) s = NULL;
  va_end(ap);
  return bld_keep(b, s);
}

static void builder_free(struct builder *b) {
  for (size_t i = 0; i < b->n_blocks; i++) free(b->blocks[i]);
  free(b->blocks);
}

/* A node of the default domain; inputs and outputs are NULL-terminated name lists. */
static Onnx__NodeProto *add_node(struct builder *b, const char *op_type, const char *name,
                                 const char *const *inputs, const char *const *outputs) {
  Onnx__NodeProto *n = bld_alloc(b, sizeof *n);
  if (b->n_nodes == MAX_NODES) b->oom = 1; /* MAX_NODES is sized for L layers: cannot happen */
  if (!n || b->oom) return NULL;
  onnx__node_proto__init(n);
  n->op_type = (char *)op_type;
  n->name = (char *)name;
  while (inputs[n->n_input]) n->n_input++;
  while (outputs[n->n_output]) n->n_output++;
  n->input = bld_alloc(b, n->n_input * sizeof *n->input);
  n->output = bld_alloc(b, n->n_output * sizeof *n->output);
  n->attribute = bld_alloc(b, 4 * sizeof *n->attribute); /* the most any node here has */
  if (!n->input || !n->output || !n->attribute) return NULL;
  memcpy(n->input, inputs, n->n_input * sizeof *n->input);
  memcpy(n->output, outputs, n->n_output * sizeof *n->output);
  return b->nodes[b->n_nodes++] = n;
}

static Onnx__AttributeProto *add_attr(struct builder *b, Onnx__NodeProto *n, const char *name,
                                      Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto *a = n ? bld_alloc(b, sizeof *a) : NULL;
  if (!a) return NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = type;
  return n->attribute[n->n_attribute++] = a;
}

static void attr_int(struct builder *b, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = add_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (a) a->has_i = 1, a->i = v;
}

static void attr_string(struct builder *b, Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = add_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  if (a) a->has_s = 1, a->s.len = strlen(v), a->s.data = (uint8_t *)v;
}

static void attr_ints(struct builder *b, Onnx__NodeProto *n, const char *name, int64_t *v,
                      size_t count) {
  Onnx__AttributeProto *a = add_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  if (a) a->n_ints = count, a->ints = v;
}

/* An initializer of `rank` dims whose raw little-endian data is `data` (not copied: it must
 * outlive the write). Returns the tensor's name. */
static const char *add_init(struct builder *b, const char *name, int data_type, int rank,
                            const int64_t *dims, const void *data, size_t bytes, const char *doc) {
  Onnx__TensorProto *t = bld_alloc(b, sizeof *t);
  int64_t *d = bld_alloc(b, (size_t)rank * sizeof *d);
  if (b->n_inits == MAX_INITS) b->oom = 1; /* sized for L layers: cannot happen */
  if (!t || !d || b->oom) return name;
  onnx__tensor_proto__init(t);
  memcpy(d, dims, (size_t)rank * sizeof *d);
  t->n_dims = (size_t)rank;
  t->dims = d;
  t->has_data_type = 1;
  t->data_type = data_type;
  t->name = (char *)name;
  t->has_raw_data = 1;
  t->raw_data.len = bytes;
  t->raw_data.data = (uint8_t *)data;
  t->doc_string = (char *)doc;
  b->inits[b->n_inits++] = t;
  return name;
}

static const char *add_f32(struct builder *b, const char *name, int rank, const int64_t *dims,
                           const float *data, const char *doc) {
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
  return add_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, rank, dims, data,
                  n * sizeof(float), doc);
}

static const char *add_i8(struct builder *b, const char *name, int rank, const int64_t *dims,
                          const int8_t *data, const char *doc) {
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
  return add_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT8, rank, dims, data, n, doc);
}

/* An int64 vector initializer (axes, split sizes), values copied. */
static const char *add_i64(struct builder *b, const char *name, const int64_t *values, int n) {
  int64_t *v = bld_alloc(b, (size_t)n * sizeof *v);
  if (!v) return name;
  memcpy(v, values, (size_t)n * sizeof *v);
  const int64_t dims[1] = {n};
  return add_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, dims, v,
                  (size_t)n * sizeof *v, NULL);
}

/* A graph input or output: a tensor of elem_type whose dims are fixed (dims[i] > 0) or named
 * dynamic axes (params[i] != NULL). */
static Onnx__ValueInfoProto *value_info(struct builder *b, const char *name, int elem_type,
                                        int rank, const int64_t *dims,
                                        const char *const *params, const char *doc) {
  Onnx__ValueInfoProto *v = bld_alloc(b, sizeof *v);
  Onnx__TypeProto *type = bld_alloc(b, sizeof *type);
  Onnx__TypeProto__Tensor *tt = bld_alloc(b, sizeof *tt);
  Onnx__TensorShapeProto *shape = bld_alloc(b, sizeof *shape);
  Onnx__TensorShapeProto__Dimension **dim = bld_alloc(b, (size_t)rank * sizeof *dim);
  if (!v || !type || !tt || !shape || !dim) return NULL;
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(type);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(shape);
  for (int i = 0; i < rank; i++) {
    if (!(dim[i] = bld_alloc(b, sizeof *dim[i]))) return NULL;
    onnx__tensor_shape_proto__dimension__init(dim[i]);
    if (params[i]) {
      dim[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dim[i]->dim_param = (char *)params[i];
    } else {
      dim[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dim[i]->dim_value = dims[i];
    }
  }
  shape->n_dim = (size_t)rank;
  shape->dim = dim;
  tt->has_elem_type = 1;
  tt->elem_type = elem_type;
  tt->shape = shape;
  type->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  type->tensor_type = tt;
  v->name = (char *)name;
  v->type = type;
  v->doc_string = (char *)doc;
  return v;
}

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
static int quantize_t(struct builder *b, const float *w, int rows, int cols, int gates,
                      int8_t **qt, float **scale) {
  int8_t *q = malloc((size_t)rows * cols);
  float *s = malloc((size_t)rows * sizeof *s);
  *qt = bld_alloc(b, (size_t)rows * cols);
  *scale = bld_alloc(b, (size_t)rows * sizeof **scale);
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
static void add_int8_weights(struct builder *b, int k, const float *w_ih, const float *w_hh,
                             int H, int in, const char **inputs) {
  int8_t *qw, *qr;
  float *sw, *sr;
  if (quantize_t(b, w_ih, 4 * H, in, 1, &qw, &sw) || quantize_t(b, w_hh, 4 * H, H, 1, &qr, &sr))
    return;
  const int64_t wd[3] = {1, in, 4 * H}, rd[3] = {1, H, 4 * H}, sd[2] = {1, 4 * H};
  inputs[1] = add_i8(b, bld_strf(b, "lstm.W_l%d", k), 3, wd, qw,
                     bld_strf(b, "lstm.weight_ih_l%d as lstmd quantize's int8 rows, gate blocks "
                                 "i,f,g,o -> i,o,f,c, transposed", k));
  inputs[2] = add_i8(b, bld_strf(b, "lstm.R_l%d", k), 3, rd, qr,
                     bld_strf(b, "lstm.weight_hh_l%d as lstmd quantize's int8 rows, gate blocks "
                                 "i,f,g,o -> i,o,f,c, transposed", k));
  inputs[8] = add_f32(b, bld_strf(b, "lstm.W_scale_l%d", k), 2, sd, sw,
                      bld_strf(b, "lstm.weight_ih_l%d.scale, gate blocks i,f,g,o -> i,o,f,c", k));
  inputs[9] = "lstm.zero_point";
  inputs[10] = add_f32(b, bld_strf(b, "lstm.R_scale_l%d", k), 2, sd, sr,
                       bld_strf(b, "lstm.weight_hh_l%d.scale, gate blocks i,f,g,o -> i,o,f,c", k));
  inputs[11] = "lstm.zero_point";
}

/* Layer k: LSTM (fp32) or com.microsoft DynamicQuantizeLSTM (--int8) with its weights, reordered
 * (allocated from the builder). Returns the node. */
static Onnx__NodeProto *add_lstm_layer(struct builder *b, const struct lstmd_model *m, int k,
                                       const char *x, const char *h0, const char *c0) {
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
  float *B = bld_alloc(b, (size_t)8 * H * sizeof *B);
  if (!B) return NULL;
  reorder_gates(b_ih, H, 1, B);
  reorder_gates(b_hh, H, 1, B + 4 * H);
  const int64_t bd[2] = {1, 8 * H};
  const char *inputs[13] = {
      x,
      NULL, /* W, R: below */
      NULL,
      add_f32(b, bld_strf(b, "lstm.B_l%d", k), 2, bd, B,
              bld_strf(b, "lstm.bias_ih_l%d then lstm.bias_hh_l%d, each i,f,g,o -> i,o,f,c", k, k)),
      "", /* sequence_lens: every sequence runs the whole chunk */
      h0,
      c0,
      "", /* int8: P (peepholes): none */
  };
  if (b->int8) {
    add_int8_weights(b, k, w_ih, w_hh, H, in, inputs);
  } else {
    float *W = bld_alloc(b, (size_t)4 * H * in * sizeof *W);
    float *R = bld_alloc(b, (size_t)4 * H * H * sizeof *R);
    if (!W || !R) return NULL;
    reorder_gates(w_ih, H, in, W);
    reorder_gates(w_hh, H, H, R);
    const int64_t wd[3] = {1, 4 * H, in}, rd[3] = {1, 4 * H, H};
    inputs[1] = add_f32(b, bld_strf(b, "lstm.W_l%d", k), 3, wd, W,
                        bld_strf(b, "lstm.weight_ih_l%d, gate blocks i,f,g,o -> i,o,f,c", k));
    inputs[2] = add_f32(b, bld_strf(b, "lstm.R_l%d", k), 3, rd, R,
                        bld_strf(b, "lstm.weight_hh_l%d, gate blocks i,f,g,o -> i,o,f,c", k));
    inputs[7] = NULL; /* the standard LSTM ends at initial_c */
  }
  if (b->oom) return NULL;
  const char *outputs[] = {bld_strf(b, "lstm_l%d.Y", k), bld_strf(b, "lstm_l%d.Y_h", k),
                           bld_strf(b, "lstm_l%d.Y_c", k), NULL};
  Onnx__NodeProto *n = add_node(b, b->int8 ? "DynamicQuantizeLSTM" : "LSTM",
                                bld_strf(b, "lstm_l%d", k), inputs, outputs);
  if (n && b->int8) n->domain = MS_DOMAIN;
  attr_int(b, n, "hidden_size", H);
  attr_string(b, n, "direction", "forward");
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
static Onnx__StringStringEntryProto **metadata(struct builder *b, const struct lstmd_model *m,
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
  kv[n++] = bld_strf(b, "%d", d->seq_len);
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
  Onnx__StringStringEntryProto **props = bld_alloc(b, (size_t)n / 2 * sizeof *props);
  for (int i = 0; props && i < n / 2; i++) {
    Onnx__StringStringEntryProto *e = bld_alloc(b, sizeof *e);
    if (!e || !kv[2 * i + 1]) {
      b->oom = 1;
      break;
    }
    onnx__string_string_entry_proto__init(e);
    e->key = (char *)kv[2 * i];
    e->value = bld_strf(b, "%s", kv[2 * i + 1]);
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
static void build_graph(struct builder *b, const struct lstmd_model *m,
                        const struct lstmd_data_meta *d, Onnx__GraphProto *g) {
  const struct lstmd_model_shape *s = &m->shape;
  const int text = s->kind == LSTMD_MODEL_TEXT, L = s->layers, H = s->hidden;
  const int out_dim = text ? s->vocab : s->horizon;
  const char *x;
  if (text) {
    const int64_t ed[2] = {s->vocab, s->embed};
    const char *in[] = {add_f32(b, "embed.weight", 2, ed, param(m, "embed.weight"), NULL),
                        "tokens", NULL};
    const char *out[] = {"embedded", NULL};
    add_node(b, "Gather", "embed", in, out);
    x = "embedded";
  } else {
    const int64_t wd[1] = {s->width};
    const char *sub_in[] = {"inputs",
                            add_f32(b, "series.mean", 1, wd, d->info.mean,
                                    "training-split mean of each input column"),
                            NULL};
    const char *sub_out[] = {"inputs_centered", NULL};
    add_node(b, "Sub", "normalise_center", sub_in, sub_out);
    const char *div_in[] = {"inputs_centered",
                            add_f32(b, "series.std", 1, wd, d->info.std,
                                    "training-split standard deviation of each input column"),
                            NULL};
    const char *div_out[] = {"inputs_normalised", NULL};
    add_node(b, "Div", "normalise_scale", div_in, div_out);
    x = "inputs_normalised";
    if (d->tf.window_norm == LSTMD_WNORM_LAST) { /* minus the window's first row */
      const int64_t zero1[1] = {0}, one1[1] = {1};
      const char *sl_in[] = {"inputs_normalised", add_i64(b, "window.starts", zero1, 1),
                             add_i64(b, "window.ends", one1, 1),
                             add_i64(b, "window.axes", zero1, 1), NULL};
      const char *sl_out[] = {"window_shift", NULL};
      add_node(b, "Slice", "window_first_row", sl_in, sl_out);
      const char *sub_in2[] = {"inputs_normalised", "window_shift", NULL};
      const char *sub_out2[] = {"inputs_window", NULL};
      add_node(b, "Sub", "window_norm_last", sub_in2, sub_out2);
      x = "inputs_window";
    }
  }
  int64_t ones[LSTMD_MAX_LAYERS];
  for (int k = 0; k < L; k++) ones[k] = 1;
  const char *split_sizes = add_i64(b, "layer_split", ones, L);
  if (b->int8) {
    const int64_t zd[2] = {1, 4 * H};
    add_i8(b, "lstm.zero_point", 2, zd, bld_alloc(b, (size_t)4 * H), "zero points of every W, R");
  }
  const int64_t axis1[1] = {1};
  const char *squeeze_axes = add_i64(b, "squeeze_axes", axis1, 1);
  const char *h_in[LSTMD_MAX_LAYERS + 1] = {0}, *c_in[LSTMD_MAX_LAYERS + 1] = {0};
  const char *h_out[LSTMD_MAX_LAYERS + 1] = {0}, *c_out[LSTMD_MAX_LAYERS + 1] = {0};
  for (int k = 0; k < L; k++) {
    h_in[k] = bld_strf(b, "h0_l%d", k);
    c_in[k] = bld_strf(b, "c0_l%d", k);
  }
  const char *split_h[] = {"h0", split_sizes, NULL}, *split_c[] = {"c0", split_sizes, NULL};
  attr_int(b, add_node(b, "Split", "split_h0", split_h, h_in), "axis", 0);
  attr_int(b, add_node(b, "Split", "split_c0", split_c, c_in), "axis", 0);
  for (int k = 0; k < L; k++) {
    Onnx__NodeProto *lstm = add_lstm_layer(b, m, k, x, h_in[k], c_in[k]);
    if (!lstm) return;
    h_out[k] = lstm->output[1];
    c_out[k] = lstm->output[2];
    const char *sq_in[] = {lstm->output[0], squeeze_axes, NULL};
    const char *sq_out[] = {bld_strf(b, "layer%d.out", k), NULL};
    add_node(b, "Squeeze", bld_strf(b, "squeeze_l%d", k), sq_in, sq_out);
    x = sq_out[0];
  }
  const char *hn_out[] = {"hn", NULL}, *cn_out[] = {"cn", NULL};
  attr_int(b, add_node(b, "Concat", "concat_hn", h_out, hn_out), "axis", 0);
  attr_int(b, add_node(b, "Concat", "concat_cn", c_out, cn_out), "axis", 0);

  const char *out_name = text ? "logits" : "predictions";
  const char *head_out[] = {text ? out_name : "predictions_normalised", NULL};
  const int64_t hbd[1] = {out_dim};
  const char *head_bias = add_f32(b, "head.bias", 1, hbd, param(m, "head.bias"), NULL);
  if (b->int8) { /* DynamicQuantizeMatMul(x, B int8 [H, out], scale, zero point, bias) */
    int8_t *q;
    float *scale;
    if (quantize_t(b, param(m, "head.weight"), out_dim, H, 0, &q, &scale)) return;
    const int64_t qd[2] = {H, out_dim};
    const char *in[] = {x,
                        add_i8(b, "head.weight", 2, qd, q,
                               "head.weight as lstmd quantize's int8 rows, transposed"),
                        add_f32(b, "head.weight_scale", 1, hbd, scale, "head.weight.scale"),
                        add_i8(b, "head.zero_point", 1, hbd, bld_alloc(b, (size_t)out_dim), NULL),
                        head_bias,
                        NULL};
    Onnx__NodeProto *n = add_node(b, "DynamicQuantizeMatMul", "head", in, head_out);
    if (n) n->domain = MS_DOMAIN;
  } else { /* MatMul(x, Transpose(head.weight)) + head.bias */
    const int64_t hwd[2] = {out_dim, H};
    const char *tr_in[] = {add_f32(b, "head.weight", 2, hwd, param(m, "head.weight"), NULL), NULL};
    const char *tr_out[] = {"head.weight_t", NULL};
    int64_t *perm = bld_alloc(b, 2 * sizeof *perm);
    if (perm) perm[0] = 1, perm[1] = 0;
    attr_ints(b, add_node(b, "Transpose", "head_transpose", tr_in, tr_out), "perm", perm, 2);
    const char *mm_in[] = {x, "head.weight_t", NULL}, *mm_out[] = {"head_matmul", NULL};
    add_node(b, "MatMul", "head_matmul", mm_in, mm_out);
    const char *add_in[] = {"head_matmul", head_bias, NULL};
    add_node(b, "Add", "head_bias", add_in, head_out);
  }
  const char *pred_norm = "predictions_normalised";
  /* The transform undone: delta adds the current target value (inputs_normalised[:, :, 0:1]),
   * level with window_norm=last the window's first target value (window_shift[:, :, 0:1]). */
  const int delta = d->tf.target == LSTMD_TARGET_DELTA;
  if (!text && (delta || d->tf.window_norm == LSTMD_WNORM_LAST)) {
    const int64_t zero1[1] = {0}, one1[1] = {1}, two1[1] = {2};
    const char *sl_in[] = {delta ? "inputs_normalised" : "window_shift",
                           add_i64(b, "undo.starts", zero1, 1), add_i64(b, "undo.ends", one1, 1),
                           add_i64(b, "undo.axes", two1, 1), NULL};
    const char *sl_out[] = {"undo_base", NULL};
    add_node(b, "Slice", delta ? "delta_current_value" : "window_first_target", sl_in, sl_out);
    const char *add_in[] = {"predictions_normalised", "undo_base", NULL};
    const char *add_out[] = {"predictions_normalised_level", NULL};
    add_node(b, "Add", "transform_undo", add_in, add_out);
    pred_norm = "predictions_normalised_level";
  }
  if (!text) { /* back to the target column's units, as `lstmd predict` writes them */
    const int64_t one[1] = {1};
    const char *mul_in[] = {pred_norm,
                            add_f32(b, "series.target_std", 1, one, &d->info.std[0],
                                    "std of the target column (series.std[0])"),
                            NULL};
    const char *mul_out[] = {"predictions_scaled", NULL};
    add_node(b, "Mul", "denormalise_scale", mul_in, mul_out);
    const char *ad_in[] = {"predictions_scaled",
                           add_f32(b, "series.target_mean", 1, one, &d->info.mean[0],
                                   "mean of the target column (series.mean[0])"),
                           NULL};
    const char *ad_out[] = {out_name, NULL};
    add_node(b, "Add", "denormalise_shift", ad_in, ad_out);
  }

  const char *seq_batch[3] = {"seq", "batch", NULL}, *state_axes[3] = {NULL, "batch", NULL};
  const int64_t x_dims[3] = {0, 0, s->width}, y_dims[3] = {0, 0, out_dim};
  const int64_t state_dims[3] = {L, 0, H};
  const char *state_doc = "[layers, batch, hidden]: zeros to start a sequence, else the previous "
                          "chunk's final state";
  g->n_input = 3;
  g->input = bld_alloc(b, 3 * sizeof *g->input);
  g->n_output = 3;
  g->output = bld_alloc(b, 3 * sizeof *g->output);
  if (!g->input || !g->output) return;
  g->input[0] = text ? value_info(b, "tokens", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 2, x_dims,
                                  seq_batch, "token ids (indices into metadata lstmd.vocab), "
                                             "[seq, batch]")
                     : value_info(b, "inputs", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, x_dims,
                                  seq_batch, "raw input rows (columns lstmd.series.columns), "
                                             "[seq, batch, columns]");
  g->input[1] = value_info(b, "h0", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, state_dims,
                           state_axes, state_doc);
  g->input[2] = value_info(b, "c0", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, state_dims,
                           state_axes, state_doc);
  g->output[0] = value_info(b, out_name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, y_dims, seq_batch,
                            text ? "next-token logits (no softmax), [seq, batch, vocab]"
                                 : "the next K target values in the target's units, "
                                   "[seq, batch, K]");
  g->output[1] = value_info(b, "hn", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, state_dims,
                            state_axes, "final h, [layers, batch, hidden]");
  g->output[2] = value_info(b, "cn", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, state_dims,
                            state_axes, "final c, [layers, batch, hidden]");
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
  struct builder b = {.int8 = int8};
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
  model.doc_string = bld_strf(&b, "lstmd %s model from %s: %d LSTM layer(s) of %d units%s",
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
  builder_free(&b);
  return rc;
}
