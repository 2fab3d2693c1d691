/* classify.h — sequence classification on the CPU backend: the forward and backward of a
 * LSTMD_MODEL_CLASSIFY model (model.h) over a padded batch of whole sequences.
 *   ids [T,B] → embed.weight (text), or values x [T,B,W] read by layer 0's W_ih directly
 *   (series: shape.width = W > 0, as the series forecaster reads its rows); padded to T, what is
 *   past a sequence's length is never read into its result, and steps past the batch's longest
 *   sequence are not run
 *   → L LSTM layers, each with a reverse direction when bidirectional
 *   → pool (last | mean | max) over each sequence's valid steps → head → softmax cross-entropy.
 * The reverse direction of sequence b reads its steps len_b−1 … 0, so padding never enters it:
 * its input rows are gathered reversed per column, run forward, and scattered back. "last" takes
 * the forward direction's output at step len_b−1 and the reverse direction's at step 0 (each
 * direction's final state, as PyTorch's h_n of a packed sequence). This is the reference of the
 * GPU classifier (kernels/cuda/model_cuda.h's classify layout: cuDNN's bidirectional mode on
 * padded columns with their lengths), which `lstmd selftest --gpu --only classify` checks
 * against it. */
#ifndef LSTMD_CLASSIFY_H
#define LSTMD_CLASSIFY_H

#include <stdint.h>

#include "model.h"

struct lstmd_clf_workspace; /* activations for one (T, B); opaque */

/* Allocates the activations of a classifier m for batches of B sequences of at most T steps.
 * LSTMD_EINVAL if m is not a classification model. Free with lstmd_clf_workspace_destroy
 * (NULL is fine). */
int lstmd_clf_workspace_create(const struct lstmd_model *m, int T, int B,
                               struct lstmd_clf_workspace **out);
void lstmd_clf_workspace_destroy(struct lstmd_clf_workspace *ws);
/* The batch the caller fills before a forward (owned by the workspace): steps T, batch B, and
 * ids (text) or x with width W (series), lengths and labels; targets, y and horizon are unused
 * (NULL, 0). Padding past a column's length may hold any id < V or any value. */
struct lstmd_batch *lstmd_clf_workspace_batch(struct lstmd_clf_workspace *ws);
/* Gradients accumulate into grads ([n_params]) instead of m->grads. */
void lstmd_clf_workspace_set_grads(struct lstmd_clf_workspace *ws, float *grads);
/* Logits [B,C] of the last forward with grad_scale == 0 (rows of empty columns are zero). */
const float *lstmd_clf_workspace_logits(const struct lstmd_clf_workspace *ws);

/* Forward over the batch. Returns the summed cross-entropy (nats) over the non-empty columns,
 * or NAN after printing why when a length is outside 0..T, an id outside the vocabulary or a
 * label outside the classes. With grad_scale != 0 the logits are replaced by grad_scale·∂loss/∂
 * logits for lstmd_clf_backward. Reads m->params only. */
double lstmd_clf_forward(const struct lstmd_model *m, struct lstmd_clf_workspace *ws,
                         float grad_scale);
/* Backward after a forward with grad_scale != 0: accumulates (+=) the parameter gradients. */
void lstmd_clf_backward(const struct lstmd_model *m, struct lstmd_clf_workspace *ws);

/* ---- whole splits (classify_eval.c) ---- */

struct lstmd_dataset;

/* What `lstmd eval` reports for a classifier, over every sequence of a split. */
struct lstmd_clf_eval {
  double loss;        /* mean cross-entropy per sequence, nats */
  uint64_t sequences; /* scored */
  uint64_t correct;   /* whose most probable class is the label */
  int classes;
  uint64_t confusion[LSTMD_MAX_CLASSES][LSTMD_MAX_CLASSES]; /* [label][predicted] counts */
};

/* Scores every sequence of ds (a classify split of m's vocabulary and classes) in batches of B.
 * Returns 0 or a status after printing why (a corrupt record, out of memory). */
int lstmd_clf_evaluate(const struct lstmd_model *m, const struct lstmd_dataset *ds, int B,
                       struct lstmd_clf_eval *res);
/* The same shared by the ranks of a data-parallel job as lstmd_evaluate_shared (infer.h) shares
 * a text evaluation: chunks of B sequences, the losses and the confusion counts combined, and
 * every part gets what one alone would, bit for bit. Both split the chunks across as many threads
 * as BLAS was given (BLAS at one thread in each); the result does not depend on the count. */
struct lstmd_eval_share;
int lstmd_clf_evaluate_shared(const struct lstmd_model *m, const struct lstmd_dataset *ds, int B,
                              const struct lstmd_eval_share *share, struct lstmd_clf_eval *res);

/* Class probabilities of one sequence of n steps: probs [C]. ids: n token ids (< vocab) of a
 * text classifier, or x: n × W normalised values of a series classifier (the other NULL). Uses a
 * workspace of (T = n, B = 1) the caller made with lstmd_clf_workspace_create, or one of larger T. */
int lstmd_clf_predict(const struct lstmd_model *m, struct lstmd_clf_workspace *ws,
                      const int32_t *ids, const float *x, int n, double *probs);

#endif
