/* model_stage.h — one pipeline stage's part of the model, run one time chunk at a time on one
 * column slice of one unit (a micro-batch of one window), for the pipeline engine
 * (worker/engine/engine_pipe.c). Every stage holds LSTM layers [layer0, layer0 + layers); the
 * first also the embedding (text) or reads the input rows (series), the last also the head and
 * the loss. The items of a chunk [t0, t1) of the window:
 *   F  forward of the chunk from the state the previous chunk left (the window's initial state
 *      for the first chunk); the last stage also computes the chunk's loss, its output gradient
 *      and the gradient into the top LSTM layer (the head is local in time);
 *   B  backward through the gates from the gradient of the stage's output, carrying (dh, dc)
 *      backwards in time from the chunk after, down to the gradient of the stage's input (what
 *      the stage below waits for);
 *   W  the weight gradients of the chunk (LSTM layers, head, embedding), accumulated.
 * The numbers are the whole model's (model.h) up to rounding: the same kernels, and dropout
 * masks keyed on the window-global t and the global column (lstmd_dropout_mask_rows).
 *
 * Split input projections (model.stage_split=balanced, worker/engine/pipe_grid.c): the rows
 * [0, r) of the input projection of a stage's first layer (x·W_ih^T, x the stage below's output
 * after its dropout) may be computed by the stage below, which owns those rows of weight_ih.
 * That stage's F then also writes them (output_rows), its B adds their gradient of x
 * (doutput_rows · W_ih[0:r]) to the one from above, and its W accumulates their dW_ih; the
 * stage above takes them as columns [0, r) of its gate pre-activations (input_rows) and gives
 * back their gate gradients (dinput_rows), its dx and dW_ih leaving those rows out. */
#ifndef LSTMD_MODEL_STAGE_H
#define LSTMD_MODEL_STAGE_H

#include "model.h"

struct lstmd_stage {
  int layer0, layers; /* the LSTM layers [layer0, layer0 + layers) */
  int first, last;    /* 1: the embedding or input rows / the head and loss are here */
  int rows_in;        /* rows [0, rows_in) of layer0's input projection come from below */
  int rows_out;       /* rows [0, rows_out) of the next stage's first layer's projection are
                       * computed here (0 on the last stage) */
};

/* W_hh of each layer of the stage packed for the step's per-step GEMMs (recur_gemm.h), indexed
 * from 0 = layer0; NULL entries use cblas_sgemm. The weights do not change within a step, so the
 * engine packs them once per step for every unit, chunk and slice. */
struct lstmd_stage_packed {
  const float *rows[LSTMD_MAX_LAYERS]; /* lstmd_cpu_pack_rows: forward */
  const float *cols[LSTMD_MAX_LAYERS]; /* lstmd_cpu_pack_cols: backward */
};

/* Activations of one column slice of one unit over a whole window of T steps, plus the scratch
 * of one chunk of `chunk` steps (T a multiple of chunk). Opaque. */
struct lstmd_stage_ws;

/* dropout: the model's (masks on every layer's output but the model's top layer). A first stage
 * folds a text model's embedding into layer 0 where lstmd_model_fold_decide says so for this
 * slice's window of steps·batch tokens. Returns 0, LSTMD_EINVAL (split rows with the
 * layer-normalised LSTM, whose normalisation of the projection has no split yet), LSTMD_ECONFIG
 * (a bad LSTMD_EMBED_FOLD, reported) or LSTMD_ENOMEM. Free with lstmd_stage_ws_destroy (NULL is
 * fine). */
int lstmd_stage_ws_create(const struct lstmd_model *m, const struct lstmd_stage *st, int steps,
                          int chunk, int batch, float dropout, struct lstmd_stage_ws **out);
void lstmd_stage_ws_destroy(struct lstmd_stage_ws *ws);

/* The unit's window [T, B] (columns of this slice): the first stage reads ids / x, the last
 * targets / y. The caller fills it before the unit's first F. */
struct lstmd_batch *lstmd_stage_ws_batch(struct lstmd_stage_ws *ws);
/* [T,B,H] buffers the caller copies messages into and out of (rows [t0, t1) per chunk):
 *   input    the stage below's output (not on the first stage): written before F
 *   output   this stage's output for the stage above (not on the last): valid after F
 *   doutput  the gradient of the loss w.r.t. output (not on the last): written before B
 *   dinput   the gradient w.r.t. input, for the stage below (not on the first): valid after B */
float *lstmd_stage_ws_input(struct lstmd_stage_ws *ws);
const float *lstmd_stage_ws_output(const struct lstmd_stage_ws *ws);
float *lstmd_stage_ws_doutput(struct lstmd_stage_ws *ws);
const float *lstmd_stage_ws_dinput(const struct lstmd_stage_ws *ws);
/* Their companions of a split projection, one chunk's worth, [Tc,B,rows_in] (input_rows: the
 * pre-activations from below, written before F; dinput_rows: their gate gradients, valid after
 * B) and [Tc,B,rows_out] (output_rows: valid after F; doutput_rows: written before B and read by
 * the W that follows it); NULL where the width is 0. Row t − t0 is the window's t: unlike the
 * [T,B,H] buffers, which the window's W items read again long after their F, nothing needs a
 * chunk's rows past its own F (up) or its own B and W (down), and B(u, k) is always followed at
 * once by W(u, k) (pipe_schedule.h), so one chunk is all there is to keep. */
float *lstmd_stage_ws_input_rows(struct lstmd_stage_ws *ws);
const float *lstmd_stage_ws_output_rows(const struct lstmd_stage_ws *ws);
float *lstmd_stage_ws_doutput_rows(struct lstmd_stage_ws *ws);
const float *lstmd_stage_ws_dinput_rows(const struct lstmd_stage_ws *ws);
/* Points those four at caller memory of the same one-chunk shapes, for the items that follow
 * (each argument NULL: the workspace's own buffer again): the pipeline engine's message buffers,
 * so that a unit run as one column slice receives and sends them without a copy. */
void lstmd_stage_ws_use_rows(struct lstmd_stage_ws *ws, float *input_rows, float *dinput_rows,
                             float *output_rows, float *doutput_rows);

/* 1 where this first stage's workspace folds the text embedding into layer 0 (model_stage.c). */
int lstmd_stage_ws_folds_embedding(const struct lstmd_stage_ws *ws);

/* The dropout mask [T,B,H] of the stage's layer `i` (model layer layer0 + i) that the last F
 * used, or NULL when that layer has none (the model's top layer, or no dropout). */
const float *lstmd_stage_ws_dropout_mask(const struct lstmd_stage_ws *ws, int i);

/* The initial state of the window (h[0], c[0] of every layer of the stage) from, and the final
 * state (h[T], c[T]) to, arrays [layers, full_batch, H] of which this slice is the columns
 * [col0, col0 + B); zero_state zeroes it. */
void lstmd_stage_ws_set_state(struct lstmd_stage_ws *ws, const float *h, const float *c,
                              int full_batch, int col0);
void lstmd_stage_ws_get_final_state(const struct lstmd_stage_ws *ws, float *h, float *c,
                                    int full_batch, int col0);
void lstmd_stage_ws_zero_state(struct lstmd_stage_ws *ws);

/* F of the chunk [t0, t1) (t1 − t0 = the workspace's chunk). dropout: the key of this slice (the
 * window's counter and the global column of the slice's column 0), or NULL for no dropout. The
 * last stage returns the chunk's summed loss and, with grad_scale != 0, prepares its backward;
 * the others return 0. Reads m->params only. */
double lstmd_stage_forward(const struct lstmd_model *m, struct lstmd_stage_ws *ws,
                           const struct lstmd_stage_packed *pk, int t0, int t1, float grad_scale,
                           const struct lstmd_dropout_key *dropout);
/* B of the chunk, after F of the whole window and B of the chunk after it (chunks from the last
 * to the first). The chunk at t0 = 0 passes no gradient into the window's initial state. */
void lstmd_stage_backward_input(const struct lstmd_model *m, struct lstmd_stage_ws *ws,
                                const struct lstmd_stage_packed *pk, int t0, int t1);
/* W of the chunk, right after its B: += into grads [n_params] (only the stage's tensors). Every
 * chunk's W runs once a window, in any order, into the same grads: with the embedding folded
 * (lstmd_stage_ws_folds_embedding), layer 0's weight_ih, biases and the embedding get the whole
 * window's gradients from the W that completes it (model_stage.c), and F builds the table at
 * t0 = 0, so a window's F items start at its first chunk (they run in time order anyway). */
void lstmd_stage_backward_weight(const struct lstmd_model *m, struct lstmd_stage_ws *ws, int t0,
                                 int t1, float *grads);

#endif
