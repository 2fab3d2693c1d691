/* model.h — the LSTM model on the CPU backend: parameter layout in one flat buffer, activation
 * workspace for a (steps, batch) shape, and forward/backward over one batch.
 *
 * Text:   ids → embed.weight [V,E] → L × LSTM(H) → head [V,H] → softmax cross-entropy.
 * Series: rows [W] → L × LSTM(H) → head [K,H] → MSE against the next K target values.
 * Flat parameter order (and gradient order, the same): embed.weight (text only), then for each
 * layer k: lstm.weight_ih_l{k}, lstm.weight_hh_l{k}, lstm.bias_ih_l{k}, lstm.bias_hh_l{k}, then
 * head.weight, head.bias. Names, shapes and gate order (i,f,g,o) are PyTorch's. With
 * layer_norm (model.layer_norm; kernels/cpu/lstm_ln_cpu.h) each layer's four tensors are followed
 * by lstm.ln_ih_weight_l{k}, lstm.ln_ih_bias_l{k}, lstm.ln_hh_weight_l{k}, lstm.ln_hh_bias_l{k}
 * [4H] and lstm.ln_c_weight_l{k}, lstm.ln_c_bias_l{k} [H]: the gains and shifts of the three
 * normalisations.
 * Classify (worker/model/classify.h): ids → embed.weight [V,E] (text), or values [W] per step
 * (series classifier: width W > 0, vocab = embed = 0, no embed.weight; lstm.weight_ih_l0 is
 * [4H,W]) → L × LSTM(H), each layer with a
 * reverse direction when bidirectional → pool over the valid steps → head [C,D·H] → softmax
 * cross-entropy over the classes. Flat order: embed.weight (text), then for each layer k the four
 * tensors of the forward direction and (bidirectional) the four `..._l{k}_reverse` ones —
 * nn.LSTM(bidirectional=True)'s order — then head.weight, head.bias. */
#ifndef LSTMD_MODEL_H
#define LSTMD_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"

#define LSTMD_MAX_LAYERS 16
#define LSTMD_MAX_TENSORS (10 * LSTMD_MAX_LAYERS + 3)

enum lstmd_model_kind { LSTMD_MODEL_TEXT = 1, LSTMD_MODEL_SERIES = 2, LSTMD_MODEL_CLASSIFY = 3 };
/* Classification: how the top layer's outputs over a sequence's valid steps become one vector
 * (model.pool). worker/model/classify.h runs these models. */
enum lstmd_pool_kind { LSTMD_POOL_LAST = 0, LSTMD_POOL_MEAN = 1, LSTMD_POOL_MAX = 2 };
#define LSTMD_MAX_CLASSES 64

struct lstmd_model_shape {
  int kind;   /* enum lstmd_model_kind */
  int vocab;  /* text: V (token ids < V) */
  int embed;  /* text: E */
  int width;  /* series: W input columns; classify: W values per step (series input), 0 (text) */
  int hidden; /* H */
  int layers; /* L */
  int horizon;/* series: K */
  int layer_norm; /* 1: layer-normalised LSTM (model.layer_norm), 0: plain */
  int classes;       /* classify: C, the number of labels */
  int bidirectional; /* classify: 1 adds a reverse direction to every layer (PyTorch's
                      * `_reverse` tensors; layer k > 0 then reads 2H), 0: forward only */
  int pool;          /* classify: enum lstmd_pool_kind */
};

/* Tensors per LSTM layer: 4 (w_ih, w_hh, b_ih, b_hh), 10 with layer normalisation. */
static inline int lstmd_layer_tensor_count(const struct lstmd_model_shape *s) {
  return s->layer_norm ? 10 : 4;
}
/* Index in the tensor table of layer l's first tensor (lstm.weight_ih_l{l}). */
static inline int lstmd_layer_first_tensor(const struct lstmd_model_shape *s, int l) {
  return (s->kind == LSTMD_MODEL_TEXT) + lstmd_layer_tensor_count(s) * l;
}

struct lstmd_tensor {
  char name[32];
  int rank;          /* 1 or 2 */
  int64_t shape[2];
  size_t offset;     /* in floats, into params/grads */
  size_t count;      /* elements */
};

struct lstmd_model {
  struct lstmd_model_shape shape;
  int n_tensors;
  struct lstmd_tensor tensors[LSTMD_MAX_TENSORS];
  size_t n_params;
  float *params; /* [n_params], 64-byte aligned */
  float *grads;  /* [n_params] */
};

/* One batch, sequence-major ([t][b]...). Text uses ids/targets, series x/y, classify ids
 * (padded; a series classifier: x with width 1) with lengths and labels; the arrays a kind does
 * not use are NULL. The classifier's workspace batch (classify.h) is one of these too. */
struct lstmd_batch {
  int steps, batch;
  int width, horizon; /* series: W and K (0 for text); a series classifier: 1 and 0 */
  int32_t *ids;     /* [T,B] input token ids */
  int32_t *targets; /* [T,B] next token ids */
  float *x;         /* [T,B,W] normalised input rows */
  float *y;         /* [T,B,K] normalised next target values */
  int32_t *lengths; /* classify: [B] valid steps of each column's sequence, 0..T (0: an empty
                     * column, no loss; the batcher pads ids past it with 0) */
  int32_t *labels;  /* classify: [B] class id < C of each column's sequence */
};

struct lstmd_workspace; /* activations for one (T, B); opaque */

/* Dropout masks are a pure function of (seed, step, layer, t, global batch column, unit), so the
 * same windows get the same masks whatever the split of the batch across threads or ranks, and
 * no random state needs to be checkpointed. */
struct lstmd_dropout_key {
  uint64_t seed;
  uint64_t step; /* counts micro-batches */
  int col0;      /* global batch column of the workspace's column 0 */
};

/* Rows [t0, t1) of the dropout mask [T,B,H] of layer `layer` (its output), written at
 * mask + t0·B·H: 0 with probability p, else 1/(1−p), a pure function of (key, layer, t, global
 * column key->col0 + b, unit). The whole model and the pipeline stages (model_stage.h) share it,
 * so a window gets the same masks whether it runs whole, by time chunk or by column slice. */
void lstmd_dropout_mask_rows(const struct lstmd_dropout_key *key, float p, int layer, int t0,
                             int t1, int B, int H, float *mask);

/* NULL if the shape is valid, else what is wrong with it (static string). */
const char *lstmd_model_shape_error(const struct lstmd_model_shape *shape);
/* Layer 0's input width per step (the series columns, a series classifier's 1 value, or the
 * embedding's E) and the head's output width (the vocabulary, the horizon or the classes). */
int lstmd_model_input_width(const struct lstmd_model_shape *s);
int lstmd_model_output_width(const struct lstmd_model_shape *s);
/* Fills m's shape, tensor table and n_params for a valid shape without allocating anything
 * (params/grads stay NULL): lets a checkpoint reader check tensor shapes before allocating. */
void lstmd_model_layout(const struct lstmd_model_shape *shape, struct lstmd_model *m);
/* Validates the shape (message on failure, LSTMD_ECONFIG), lays out and allocates parameters
 * (zeroed) and gradients. Free with lstmd_model_destroy (NULL and half-built are fine). */
int lstmd_model_create(const struct lstmd_model_shape *shape, struct lstmd_model **out);
void lstmd_model_destroy(struct lstmd_model *m);
/* PyTorch's default initialisation: LSTM and head U(-1/√H, 1/√H), embedding N(0,1); layer
 * normalisation gains 1 and shifts 0 (TFA's), drawing no random numbers. */
void lstmd_model_init_params(struct lstmd_model *m, struct lstmd_rng *rng);
const struct lstmd_tensor *lstmd_model_tensor(const struct lstmd_model *m, const char *name);
/* FLOPs of one training step per token (forward + backward: 3 × the forward's 2 per
 * multiply-add), the one FLOP model of lstmd: GFLOP/s reports and the pipeline's balanced stage
 * split (worker/engine/pipe_grid.c) use it.
 *   layer l:  3 · D·2·4H·(In_l + H)  (D directions; In_l: layer 0's input width, else D·H)
 *   head:     3 · 2·O·H  (0 for a classifier: its head runs once per sequence, not per token)
 *   ih_row:   3 · 2·In_l, one row of lstm.weight_ih_l{l} (of one direction): the layer's cost is
 *             D·4H such rows plus D·4H rows of weight_hh at 3 · 2·H each
 *   total:    head + the sum over the layers. */
double lstmd_model_layer_flops_per_token(const struct lstmd_model_shape *s, int l);
double lstmd_model_head_flops_per_token(const struct lstmd_model_shape *s);
double lstmd_model_ih_row_flops_per_token(const struct lstmd_model_shape *s, int l);
double lstmd_model_flops_per_token(const struct lstmd_model_shape *s);

/* For workspaces (model.c, model_stage.c, classify.c, qmodel.c; workspace_arena.c): one zeroed
 * block holding n arrays of sizes[i] floats, each 64-byte aligned; slices[i] points at array i
 * (NULL where sizes[i] is 0). Returns the block, or NULL when out of memory;
 * lstmd_workspace_arena_free (not free) releases it, and takes NULL. */
void *lstmd_arena_carve(const size_t *sizes, size_t n, float **slices);
void lstmd_workspace_arena_free(void *arena);

int lstmd_workspace_create(const struct lstmd_model *m, int steps, int batch, float dropout,
                           struct lstmd_workspace **out);
/* A workspace for forwards only (evaluation, inference, a distillation teacher): no gradient
 * buffers and no dropout, and the layers share one buffer of gates (and of layer-norm
 * statistics), which only backward reads again; the carried state is kept per layer as above.
 * lstmd_model_step takes grad_scale 0 on it; lstmd_model_backward stops the program. */
int lstmd_workspace_create_forward(const struct lstmd_model *m, int steps, int batch,
                                   struct lstmd_workspace **out);
/* The floats lstmd_workspace_create_forward's arena holds for (steps, batch): what a thread of
 * an evaluation needs (infer.c sizes its thread count by it). */
size_t lstmd_workspace_forward_floats(const struct lstmd_model *m, int steps, int batch);
void lstmd_workspace_destroy(struct lstmd_workspace *ws);
struct lstmd_batch *lstmd_workspace_batch(struct lstmd_workspace *ws);
/* 1 where this text workspace runs its embedding folded into layer 0 (decided at create from
 * its tokens a window and the vocabulary, or LSTMD_EMBED_FOLD: kernels/cpu/embed_fold_cpu.h). */
int lstmd_workspace_folds_embedding(const struct lstmd_workspace *ws);
/* Whether a window of N tokens runs this model's embedding folded into layer 0: a text model
 * without layer normalisation, by lstmd_cpu_fold_wanted. LSTMD_ECONFIG (reported) for a bad
 * LSTMD_EMBED_FOLD, whatever the model. */
int lstmd_model_fold_decide(const struct lstmd_model_shape *s, size_t N, int *fold);
/* Gradients of this workspace's steps accumulate into `grads` ([n_params]) instead of
 * m->grads, so that threads working on slices of one batch need no locks. */
void lstmd_workspace_set_grads(struct lstmd_workspace *ws, float *grads);
/* The LSTM layers' recurrence of this workspace's forward and backward runs together with the
 * other members of `team` (kernels/cpu/recur_team.h), as member `member`: every member's
 * workspace must then run the same forward/backward calls at the same time, on its own thread.
 * NULL: alone (the default). A team packs W_hh itself, so setting one frees this workspace's
 * own packed copy (16·H² bytes; alone again, it would run the recurrence on cblas_sgemm). A
 * layer-normalised model's layers have no team path: refused with LSTMD_EUNSUPPORTED. */
struct lstmd_recur_team;
int lstmd_workspace_set_team(struct lstmd_workspace *ws, struct lstmd_recur_team *team,
                             int member);
/* Inference with few rows a forward (sampling: one character, T = B = 1): the caller promises
 * that the model's weights stay as they are while this workspace lives, and each layer's W_hh and
 * W_ih are packed here once for the packed GEMMs (recur_gemm.h) instead of at every forward (W_hh
 * by lstmd, W_ih inside cblas_sgemm): at one row a forward, that repacking was nearly all its
 * time. 0, or LSTMD_ENOMEM and nothing changes. A no-op where the packed kernels do not run for
 * H (generic ISA), with a team, or for a layer-normalised model's W_ih (its projection is
 * normalised apart from the recurrence's). Forward only: no backward after it. */
int lstmd_workspace_freeze_weights(struct lstmd_workspace *ws);
/* Called during backward each time the gradients of a suffix of the flat buffer are final for
 * this workspace: all of [first, n_params) (head first, then each LSTM layer from the top, then
 * the embedding, ending with first == 0). Lets gradient buckets go out while backward runs. */
typedef void (*lstmd_grads_ready_fn)(void *ctx, size_t first);
void lstmd_workspace_on_grads_ready(struct lstmd_workspace *ws, lstmd_grads_ready_fn fn,
                                    void *ctx);
/* Zeroes the recurrent state of all streams (h0 = c0 = 0). */
void lstmd_workspace_reset_state(struct lstmd_workspace *ws);
/* Recurrent state, for checkpoints: h and c are [L,full_batch,H]; the workspace's B streams are
 * columns [col0, col0+B) of it. Copy out / in. */
void lstmd_workspace_get_state(const struct lstmd_workspace *ws, float *h, float *c,
                               int full_batch, int col0);
void lstmd_workspace_set_state(struct lstmd_workspace *ws, const float *h, const float *c,
                               int full_batch, int col0);
/* Dropout mask [T,B,H] applied to layer `layer`'s output in the last step (NULL when the
 * layer has none: the top layer, or dropout off). Values are 0 or 1/(1-p). */
const float *lstmd_workspace_dropout_mask(const struct lstmd_workspace *ws, int layer);
/* Output of the head after a forward with grad_scale == 0 (a training step overwrites it with
 * its gradient): [T,B,V] logits (text) or [T,B,K] predictions (series). */
const float *lstmd_workspace_output(const struct lstmd_workspace *ws);
/* Distillation: the loss of this workspace's forwards becomes kd_cpu.h's, against the teacher's
 * output teacher_out ([T,B,O], the same batch; not owned, read at each forward) at temperature T
 * (text) and weight alpha of the teacher's term. NULL restores the plain loss. */
void lstmd_workspace_set_distill(struct lstmd_workspace *ws, const float *teacher_out,
                                 float temperature, float alpha);

/* Forward over the workspace's batch. Returns the summed loss (cross-entropy in nats, or squared
 * error) over all T·B targets (·K for series). With grad_scale != 0 it then runs backward and
 * accumulates grad_scale·∂loss/∂params into the workspace's gradient buffer (m->grads unless
 * set). dropout == NULL disables dropout (evaluation). carry_state != 0 leaves each stream's
 * final (h, c) as the next initial state. Reads m->params only, so several threads may step
 * different workspaces of one model at once. */
double lstmd_model_step(struct lstmd_model *m, struct lstmd_workspace *ws, float grad_scale,
                        const struct lstmd_dropout_key *dropout, int carry_state);
/* The three parts of lstmd_model_step, for callers that time them: forward and loss (the
 * output is replaced by its gradient when grad_scale != 0), backward (only after a forward with
 * grad_scale != 0), and the hand-over of the recurrent state to the next window. */
double lstmd_model_forward(struct lstmd_model *m, struct lstmd_workspace *ws, float grad_scale,
                           const struct lstmd_dropout_key *dropout);
void lstmd_model_backward(struct lstmd_model *m, struct lstmd_workspace *ws);
void lstmd_model_end_window(struct lstmd_workspace *ws, int carry_state);

#endif
