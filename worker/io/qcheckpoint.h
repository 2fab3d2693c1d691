/* qcheckpoint.h — the int8 model file `lstmd quantize` writes: safetensors with
 *   metadata 'format' = "lstmd-int8-1" (LSTMD_INT8_TAG), the model shape and data metadata of
 *     the checkpoint it came from (vocab or series columns, seq_len, ...), 'quant.weights',
 *     'quant.activations' (the scheme in words) and 'quant.source' (the fp32 checkpoint);
 *   F32: embed.weight, lstm.bias_ih_l{k}, lstm.bias_hh_l{k}, head.bias (as in a checkpoint), and
 *     for each weight below its scales '<name>.scale' [rows];
 *   I8:  lstm.weight_ih_l{k} [4H,in], lstm.weight_hh_l{k} [4H,H], head.weight [out,H], with
 *     w[r,:] ≈ scale[r]·q[r,:] (PyTorch's names and shapes: safetensors.torch loads it).
 * Loading checks everything before it is used: the tag, every tensor's dtype and shape, one
 * scale per row, every scale finite and > 0, every F32 value finite; a message names the file
 * and the tensor, and the status is LSTMD_EFORMAT (exit 2). */
#ifndef LSTMD_QCHECKPOINT_H
#define LSTMD_QCHECKPOINT_H

#include "checkpoint.h"
#include "worker/model/qmodel.h"

/* Quantises m's weights (lstmd_cpu_quantize_rows) and writes `path` atomically; `source` names
 * the checkpoint it came from (metadata only). */
int lstmd_qcheckpoint_save(const char *path, const struct lstmd_model *m,
                           const struct lstmd_data_meta *data, const char *source);

/* Loads and validates an int8 model file (see above) and packs it for the kernels. */
int lstmd_qcheckpoint_load(const char *path, struct lstmd_qmodel **out,
                           struct lstmd_data_meta *data);

/* 1 when `path` is a readable safetensors file whose 'format' is an lstmd-int8-* tag (of this
 * version or another), else 0: the caller's loader then reports whatever is wrong with it.
 * Prints nothing. */
int lstmd_qcheckpoint_is_int8(const char *path);
/* What the file at `path` is when an output of quantize, export or predict must not replace it:
 * "a training checkpoint (lstmd train's)" (format lstmd-checkpoint-*), "a dataset split
 * (lstmd prepare's)", or a run's metrics.jsonl, train.log, samples.txt or TensorBoard events
 * file in a run dir (its .lstmd.lock beside it); NULL for any other file or none. Prints
 * nothing. */
const char *lstmd_file_not_to_replace(const char *path);

#endif
