/* onnx_export.h — a trained lstmd model as one ONNX graph (`lstmd export onnx`), written with
 * protoc-c from proto/onnx_subset.proto: the standard LSTM operator per layer, the embedding as
 * Gather (text) or the normalisation of raw input rows (series), the head as MatMul + Add, and
 * the recurrent state as graph inputs and outputs so a caller can stream chunk by chunk; with
 * int8 weights (`--int8`) for onnxruntime's own int8 LSTM and MatMul operators.
 * README.md ("Export to ONNX") documents the graph's names and where each weight lives. */
#ifndef LSTMD_ONNX_EXPORT_H
#define LSTMD_ONNX_EXPORT_H

#include "worker/io/checkpoint.h"
#include "worker/model/model.h"

/* Opsets lstmd writes: from 13 (Squeeze and Split take their axes/sizes as inputs, the form
 * emitted) to 26, the newest onnxruntime 1.31 (PyPI, the version the tests pin) loads; 27 is
 * refused by it. The default is the newest. */
#define LSTMD_ONNX_OPSET_MIN 13
#define LSTMD_ONNX_OPSET_MAX 26
#define LSTMD_ONNX_OPSET_DEFAULT 26

/* Writes model m (with the data description d its checkpoint carries) as an ONNX model to
 * out_path atomically (temp file, fsync, rename). ckpt_name names the source in the model's
 * metadata and in messages. opset must be within [LSTMD_ONNX_OPSET_MIN, _MAX]. int8 != 0: the
 * LSTM and head weights as `lstmd quantize` quantises them, run by onnxruntime's
 * com.microsoft DynamicQuantizeLSTM and DynamicQuantizeMatMul (faster on onnxruntime's CPU
 * provider than the same weights as DequantizeLinear + LSTM: README "Export to ONNX").
 * Returns 0, LSTMD_EINVAL (bad opset, or a model too large for one protobuf message: 2 GiB),
 * LSTMD_ENOMEM or LSTMD_EWRITE, with a message. */
int lstmd_onnx_export(const struct lstmd_model *m, const struct lstmd_data_meta *d,
                      const char *ckpt_name, int opset, int int8, const char *out_path);

#endif
