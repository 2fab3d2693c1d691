/* onnx_builder.h — an ONNX graph's parts (nodes, attributes, initializers, inputs and outputs)
 * as protobuf-c structs (proto/onnx_subset.proto), for onnx_export.c. Every struct and string is
 * allocated from one list of blocks that lstmd_onnxb_free frees together; a failed allocation
 * sets `oom` and the calls after it return NULL (or the name) without effect, so a builder
 * checks once, at the end. Private to worker/io. */
#ifndef LSTMD_ONNX_BUILDER_H
#define LSTMD_ONNX_BUILDER_H

#include <stddef.h>
#include <stdint.h>

#include "onnx_subset.pb-c.h"
#include "worker/model/model.h"

#define LSTMD_ONNX_MAX_NODES (2 * LSTMD_MAX_LAYERS + 16)
#define LSTMD_ONNX_MAX_INITS (3 * LSTMD_MAX_LAYERS + 16)

struct lstmd_onnx_builder {
  void **blocks; /* everything allocated for the graph, freed by lstmd_onnxb_free */
  size_t n_blocks, cap_blocks;
  int oom;       /* an allocation failed: the graph is incomplete (LSTMD_ENOMEM) */
  int int8;      /* int8 weights (onnxruntime's com.microsoft operators) */
  Onnx__NodeProto *nodes[LSTMD_ONNX_MAX_NODES];
  size_t n_nodes;
  Onnx__TensorProto *inits[LSTMD_ONNX_MAX_INITS];
  size_t n_inits;
};

/* Takes ownership of p (malloc'd; NULL means an allocation failed) until lstmd_onnxb_free. */
void *lstmd_onnxb_keep(struct lstmd_onnx_builder *b, void *p);
/* Zeroed memory that lives until lstmd_onnxb_free; NULL (and b->oom set) when out of memory. */
void *lstmd_onnxb_alloc(struct lstmd_onnx_builder *b, size_t bytes);
__attribute__((format(printf, 2, 3))) char *lstmd_onnxb_strf(struct lstmd_onnx_builder *b,
                                                             const char *fmt, ...);
void lstmd_onnxb_free(struct lstmd_onnx_builder *b);
/* A node of the default domain; inputs and outputs are NULL-terminated name lists. */
Onnx__NodeProto *lstmd_onnxb_node(struct lstmd_onnx_builder *b, const char *op_type,
                                  const char *name, const char *const *inputs,
                                  const char *const *outputs);
void lstmd_onnxb_attr_int(struct lstmd_onnx_builder *b, Onnx__NodeProto *n, const char *name,
                          int64_t v);
void lstmd_onnxb_attr_string(struct lstmd_onnx_builder *b, Onnx__NodeProto *n, const char *name,
                             const char *v);
void lstmd_onnxb_attr_ints(struct lstmd_onnx_builder *b, Onnx__NodeProto *n, const char *name,
                           int64_t *v, size_t count);
/* Initializers whose raw little-endian data is `data` (not copied: it must outlive the write);
 * each returns the tensor's name. lstmd_onnxb_i64: an int64 vector (axes, split sizes), copied. */
const char *lstmd_onnxb_f32(struct lstmd_onnx_builder *b, const char *name, int rank,
                            const int64_t *dims, const float *data, const char *doc);
const char *lstmd_onnxb_i8(struct lstmd_onnx_builder *b, const char *name, int rank,
                           const int64_t *dims, const int8_t *data, const char *doc);
const char *lstmd_onnxb_i64(struct lstmd_onnx_builder *b, const char *name, const int64_t *values,
                            int n);
/* A graph input or output: a tensor of elem_type whose dims are fixed (dims[i] > 0) or named
 * dynamic axes (params[i] != NULL). */
Onnx__ValueInfoProto *lstmd_onnxb_value_info(struct lstmd_onnx_builder *b, const char *name,
                                             int elem_type, int rank, const int64_t *dims,
                                             const char *const *params, const char *doc);

#endif
