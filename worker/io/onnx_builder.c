/* onnx_builder.c — the parts of an ONNX graph, allocated from one list of blocks (see
 * onnx_builder.h). */
#define _GNU_SOURCE
#include "onnx_builder.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *lstmd_onnxb_keep(struct lstmd_onnx_builder *b, void *p) {
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

void *lstmd_onnxb_alloc(struct lstmd_onnx_builder *b, size_t bytes) {
  return lstmd_onnxb_keep(b, calloc(1, bytes ? bytes : 1));
}

char *lstmd_onnxb_strf(struct lstmd_onnx_builder *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0) s = NULL;
  va_end(ap);
  return lstmd_onnxb_keep(b, s);
}

void lstmd_onnxb_free(struct lstmd_onnx_builder *b) {
  for (size_t i = 0; i < b->n_blocks; i++) free(b->blocks[i]);
  free(b->blocks);
}

Onnx__NodeProto *lstmd_onnxb_node(struct lstmd_onnx_builder *b, const char *op_type,
                                  const char *name, const char *const *inputs,
                                  const char *const *outputs) {
  Onnx__NodeProto *n = lstmd_onnxb_alloc(b, sizeof *n);
  if (b->n_nodes == LSTMD_ONNX_MAX_NODES)
    b->oom = 1; /* LSTMD_ONNX_MAX_NODES is sized for L layers: cannot happen */
  if (!n || b->oom) return NULL;
  onnx__node_proto__init(n);
  n->op_type = (char *)op_type;
  n->name = (char *)name;
  while (inputs[n->n_input]) n->n_input++;
  while (outputs[n->n_output]) n->n_output++;
  n->input = lstmd_onnxb_alloc(b, n->n_input * sizeof *n->input);
  n->output = lstmd_onnxb_alloc(b, n->n_output * sizeof *n->output);
  n->attribute = lstmd_onnxb_alloc(b, 4 * sizeof *n->attribute); /* the most any node here has */
  if (!n->input || !n->output || !n->attribute) return NULL;
  memcpy(n->input, inputs, n->n_input * sizeof *n->input);
  memcpy(n->output, outputs, n->n_output * sizeof *n->output);
  return b->nodes[b->n_nodes++] = n;
}

static Onnx__AttributeProto *onnxb_attr(struct lstmd_onnx_builder *b, Onnx__NodeProto *n,
                                        const char *name,
                                        Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto *a = n ? lstmd_onnxb_alloc(b, sizeof *a) : NULL;
  if (!a) return NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = type;
  return n->attribute[n->n_attribute++] = a;
}

void lstmd_onnxb_attr_int(struct lstmd_onnx_builder *b, Onnx__NodeProto *n, const char *name,
                          int64_t v) {
  Onnx__AttributeProto *a = onnxb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (a) a->has_i = 1, a->i = v;
}

void lstmd_onnxb_attr_string(struct lstmd_onnx_builder *b, Onnx__NodeProto *n, const char *name,
                             const char *v) {
  Onnx__AttributeProto *a = onnxb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  if (a) a->has_s = 1, a->s.len = strlen(v), a->s.data = (uint8_t *)v;
}

void lstmd_onnxb_attr_ints(struct lstmd_onnx_builder *b, Onnx__NodeProto *n, const char *name,
                           int64_t *v, size_t count) {
  Onnx__AttributeProto *a = onnxb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  if (a) a->n_ints = count, a->ints = v;
}

/* An initializer of `rank` dims whose raw little-endian data is `data` (not copied: it must
 * outlive the write). Returns the tensor's name. */
static const char *onnxb_init(struct lstmd_onnx_builder *b, const char *name, int data_type,
                              int rank, const int64_t *dims, const void *data, size_t bytes,
                              const char *doc) {
  Onnx__TensorProto *t = lstmd_onnxb_alloc(b, sizeof *t);
  int64_t *d = lstmd_onnxb_alloc(b, (size_t)rank * sizeof *d);
  if (b->n_inits == LSTMD_ONNX_MAX_INITS) b->oom = 1; /* sized for L layers: cannot happen */
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

const char *lstmd_onnxb_f32(struct lstmd_onnx_builder *b, const char *name, int rank,
                            const int64_t *dims, const float *data, const char *doc) {
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
  return onnxb_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, rank, dims, data,
                    n * sizeof(float), doc);
}

const char *lstmd_onnxb_i8(struct lstmd_onnx_builder *b, const char *name, int rank,
                           const int64_t *dims, const int8_t *data, const char *doc) {
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
  return onnxb_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT8, rank, dims, data, n, doc);
}

const char *lstmd_onnxb_i64(struct lstmd_onnx_builder *b, const char *name, const int64_t *values,
                            int n) {
  int64_t *v = lstmd_onnxb_alloc(b, (size_t)n * sizeof *v);
  if (!v) return name;
  memcpy(v, values, (size_t)n * sizeof *v);
  const int64_t dims[1] = {n};
  return onnxb_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, dims, v,
                    (size_t)n * sizeof *v, NULL);
}

Onnx__ValueInfoProto *lstmd_onnxb_value_info(struct lstmd_onnx_builder *b, const char *name,
                                             int elem_type, int rank, const int64_t *dims,
                                             const char *const *params, const char *doc) {
  Onnx__ValueInfoProto *v = lstmd_onnxb_alloc(b, sizeof *v);
  Onnx__TypeProto *type = lstmd_onnxb_alloc(b, sizeof *type);
  Onnx__TypeProto__Tensor *tt = lstmd_onnxb_alloc(b, sizeof *tt);
  Onnx__TensorShapeProto *shape = lstmd_onnxb_alloc(b, sizeof *shape);
  Onnx__TensorShapeProto__Dimension **dim = lstmd_onnxb_alloc(b, (size_t)rank * sizeof *dim);
  if (!v || !type || !tt || !shape || !dim) return NULL;
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(type);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(shape);
  for (int i = 0; i < rank; i++) {
    if (!(dim[i] = lstmd_onnxb_alloc(b, sizeof *dim[i]))) return NULL;
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
