/* qmodel.h — the int8 model for inference (what `lstmd quantize` makes; file format in
 * worker/io/qcheckpoint.h): W_ih, W_hh and the head's weight in int8 with one fp32 scale per
 * output row, biases and the embedding in fp32, activations quantised dynamically per row and
 * step (kernels/cpu/qgemm.h). The gates' nonlinearities and the cell state stay in fp32.
 *
 * Text models fold the embedding into layer 0 once at load: a token's input projection is the
 * row embed[id] · W_ih_l0^T (W_ih_l0 dequantised), a table of V×4H floats, so layer 0's input
 * needs neither an activation quantisation nor a GEMM (the one-hot input makes it exact). */
#ifndef LSTMD_QMODEL_H
#define LSTMD_QMODEL_H

#include "kernels/cpu/qgemm.h"
#include "model.h"

struct lstmd_qlayer {
  struct lstmd_qweight ih, hh; /* [4H,in], [4H,H] */
  float *b_ih, *b_hh;          /* [4H] */
};

struct lstmd_qmodel {
  struct lstmd_model_shape shape;
  float *embed;                /* text: [V,E] */
  struct lstmd_qlayer layer[LSTMD_MAX_LAYERS];
  struct lstmd_qweight head;   /* [O,H], O = V (text) or K (series) */
  float *head_bias;            /* [O] */
  float *embed_proj;           /* text: [V,4H], made by lstmd_qmodel_finish */
};

/* Allocates a model of a valid shape with its fp32 arrays (embed, biases) zeroed and no weights;
 * the loader packs each weight (lstmd_cpu_qweight_pack) and then calls lstmd_qmodel_finish.
 * Free with lstmd_qmodel_destroy (NULL and half-built are fine). */
int lstmd_qmodel_create(const struct lstmd_model_shape *s, struct lstmd_qmodel **out);
/* After every weight is set: folds the embedding into layer 0 (text). */
int lstmd_qmodel_finish(struct lstmd_qmodel *qm);
void lstmd_qmodel_destroy(struct lstmd_qmodel *qm);

struct lstmd_qworkspace; /* activations for one (T, B); opaque */

/* Activations for forwards of `steps` × `batch`, run on up to `threads` threads (the caller's and
 * threads − 1 it starts; 1: the caller's only). Whether and how the work is split follows from
 * the shape (qmodel.c); the outputs are the same bits for any thread count. Free with
 * lstmd_qworkspace_destroy (NULL is fine). */
int lstmd_qworkspace_create(const struct lstmd_qmodel *qm, int steps, int batch, int threads,
                            struct lstmd_qworkspace **out);
void lstmd_qworkspace_destroy(struct lstmd_qworkspace *ws);
/* The batch to fill before a forward (text: ids, targets; series: x, y), as model.h's. */
struct lstmd_batch *lstmd_qworkspace_batch(struct lstmd_qworkspace *ws);
void lstmd_qworkspace_reset_state(struct lstmd_qworkspace *ws);
/* [T,B,V] logits or [T,B,K] predictions of the last forward. */
const float *lstmd_qworkspace_output(const struct lstmd_qworkspace *ws);

/* Forward over the workspace's batch from its state; returns the summed loss over all targets
 * (cross-entropy in nats, or squared error), as lstmd_model_forward. carry_state != 0 leaves
 * each stream's final (h, c) as the next initial state. Reads qm only: threads may run
 * different workspaces of one model at once (one forward at a time per workspace). Each row of
 * the batch is quantised on its own, so a stream's outputs do not depend on the other streams in
 * the batch. */
double lstmd_qmodel_forward(const struct lstmd_qmodel *qm, struct lstmd_qworkspace *ws,
                            int carry_state);

#endif
