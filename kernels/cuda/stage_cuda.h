/* stage_cuda.h — one pipeline stage's part of the model on one CUDA device, run one time chunk
 * of one unit (a micro-batch of a window) at a time: the GPU twin of worker/model/model_stage.h,
 * for the GPU pipeline engine (worker/engine/engine_pipe_gpu.c). The stage holds LSTM layers
 * [layer0, layer0 + layers) as one cuDNN stack of Tc steps × b columns; the first stage also the
 * embedding (text) or reads the input rows (series), the last also the head and the loss.
 *
 * Items of chunk k (rows [k·Tc, k·Tc + Tc) of the unit's [T, b, ·] sequence-major buffers):
 *   F  one cuDNN forward from the state chunk k−1 left (states[k] → states[k+1]; states[0] is the
 *      unit's initial state), its reserve kept in the slot's reserve k; the last stage runs the
 *      head and the loss of the chunk and leaves its output gradient;
 *   B  one cuDNN backward-data from the gradient of the chunk's output and the gradient of its
 *      final state (what B of chunk k+1 left; zero for the last chunk) to the gradient of its
 *      input (what the stage below waits for) and of its initial state;
 *   W  one cuDNN backward-weights (ADD) of the chunk, the head's and the embedding's gradients.
 * Dropout: cuDNN's own between the stage's layers; at the boundary below the stage the caller's
 * mask (the CPU's lstmd_dropout_mask_rows, so the masks are the CPU run's) multiplies the
 * received input in F and the input gradient in B.
 *
 * Buffers per slot (P slots, one unit each): the unit's inputs, the LSTM input [T,b,I], output
 * [T,b,H], their gradients, the head output [T·b,O] (last), K+1 states and K reserves. The LSTM
 * buffers are of the data type; embedding, head and loss are fp32 (as model_cuda.h). */
#ifndef LSTMD_STAGE_CUDA_H
#define LSTMD_STAGE_CUDA_H

#include <stddef.h>

#include "model_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct lstmd_cuda_stage_config {
  struct lstmd_cuda_model_layout layout; /* the whole model's (offsets in the flat buffer) */
  int layer0, layers;                    /* this stage's LSTM layers */
  int first, last;                       /* embedding / input rows; head and loss */
  int steps, chunks, batch, slots;       /* T, K (T multiple of K), b, P */
  int dtype, allow_tf32;
  float dropout;                         /* cuDNN's, between this stage's layers */
  unsigned long long seed;               /* of cuDNN's dropout states */
};

struct lstmd_cuda_stage;

/* Handles on `stream` (a cudaStream_t) of the current device; cuDNN's standard algorithm,
 * unpacked layout, PyTorch's math type (fp16 retries with default math if tensor-op math is
 * refused); everything allocated and zeroed. Synchronises the stream. Returns 0 or a status
 * after printing why. */
int lstmd_cuda_stage_create(const struct lstmd_cuda_stage_config *cfg, void *stream,
                            struct lstmd_cuda_stage **out);
void lstmd_cuda_stage_destroy(struct lstmd_cuda_stage *st);

/* The slot's unit inputs the caller fills before F of chunk 0 (first: ids / x; last: targets / y). */
struct lstmd_cuda_inputs *lstmd_cuda_stage_inputs(struct lstmd_cuda_stage *st, int slot);
/* Chunk k of the slot's message buffers, of the data type, and their size in bytes:
 *   LSTMD_STAGE_INPUT   the stage below's output (not first): written before F
 *   LSTMD_STAGE_OUTPUT  this stage's output (not last): valid after F
 *   LSTMD_STAGE_DOUTPUT gradient of the output (not last): written before B
 *   LSTMD_STAGE_DINPUT  gradient of the input (not first): valid after B */
enum { LSTMD_STAGE_INPUT, LSTMD_STAGE_OUTPUT, LSTMD_STAGE_DOUTPUT, LSTMD_STAGE_DINPUT };
void *lstmd_cuda_stage_chunk(struct lstmd_cuda_stage *st, int which, int slot, int k);
size_t lstmd_cuda_stage_chunk_bytes(const struct lstmd_cuda_stage *st, int which);
size_t lstmd_cuda_stage_device_bytes(const struct lstmd_cuda_stage *st);
const char *lstmd_cuda_stage_describe(const struct lstmd_cuda_stage *st);

/* Refreshes the cuDNN weight space from the fp32 master parameters (device, [n_params]). */
int lstmd_cuda_stage_load_weights(struct lstmd_cuda_stage *st, const float *params);
/* The unit's initial state from h/c (device, data type, [layers, b, H]), NULL: zero; its
 * final state (after F of the last chunk) into h/c. */
int lstmd_cuda_stage_begin_unit(struct lstmd_cuda_stage *st, int slot, const void *h, const void *c);
int lstmd_cuda_stage_end_unit(struct lstmd_cuda_stage *st, int slot, void *h, void *c);

/* Training forwards multiply grad_scale by *device_scale (the fp16 loss scale); NULL: 1. */
void lstmd_cuda_stage_scale_gradients_by(struct lstmd_cuda_stage *st, const float *device_scale);

/* F of chunk k. in_mask: the boundary dropout mask of the chunk [Tc, b, H] (device fp32; not
 * first), or NULL. The last stage adds the chunk's loss to *loss_acc (device double) and keeps
 * grad_scale·∂loss/∂output for B and W. */
int lstmd_cuda_stage_forward(struct lstmd_cuda_stage *st, int slot, int k, const float *params,
                             float grad_scale, const float *in_mask, double *loss_acc);
/* B of chunk k, after F of the unit's chunks and B of chunk k+1. in_mask as in F. */
int lstmd_cuda_stage_backward_data(struct lstmd_cuda_stage *st, int slot, int k,
                                   const float *params, const float *in_mask);
/* W of chunk k, after its B: head and embedding gradients ADDED to grads (device fp32
 * [n_params]); the LSTM's into cuDNN's gradient space (fp32: summed there over the step and
 * copied by _finish_grads; 16-bit: added into grads at once, so the sum is fp32). */
int lstmd_cuda_stage_backward_weights(struct lstmd_cuda_stage *st, int slot, int k, float *grads);
/* Before the step's first W / after its last: zero cuDNN's gradient space / copy it into grads. */
int lstmd_cuda_stage_begin_grads(struct lstmd_cuda_stage *st);
int lstmd_cuda_stage_finish_grads(struct lstmd_cuda_stage *st, float *grads);

#ifdef __cplusplus
}
#endif

#endif
