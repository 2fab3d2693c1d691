/* pipe_grid.h — what both pipeline engines (engine_pipe.c on CPU ranks, engine_pipe_gpu.c on
 * GPUs) agree on before any compute: where this rank sits in the D × S grid, which layers and
 * which slice of the flat parameter buffer its stage owns, the op list of pipe_schedule.c, how
 * the step's windows are cut into units and time chunks, and the host-side collectives over
 * that layout (the global gradient norm, gathering the stage ranges and the carried state on
 * rank 0); also the receive waits and trace events of the items, which both engines record
 * alike. One definition, so the two engines cannot disagree on a layout or an order.
 *
 * Rank r is stage s = r mod S of replica d = r / S. A step's A windows (optim.grad_accum) are
 * cut into M column micro-batches each: the U = A·M units, unit u = a·M + m is columns
 * [m·b, m·b + b) of window a; each unit's window is K time chunks of Tc = T / K steps. Units live
 * in P slots (P = the schedule's peak), unit u in slot u mod P.
 *
 * model.stage_split=balanced (CPU engine): whole layers cannot balance a model of few layers
 * (E64 H512 L2 at S = 2: stage 1's layer reads 512 wide, stage 0's 64, and the head is on
 * stage 1: 59% of the measured work). So the rows [0, R_s) of the input projection of stage
 * s's first layer (weight_ih_l{l} of a layer l ≥ 1, whose input is the stage below's output)
 * move to stage s − 1, R_s from a per-stage cost model (lstmd_pipe_split_rows). weight_ih is
 * row-major and precedes the layer's other tensors in the flat buffer (model.h), so its first
 * R_s rows are the end of stage s − 1's range, which stays contiguous and simply ends inside
 * the tensor; bias_ih stays with stage s (its gate pass adds both biases). Every transfer
 * between s − 1 and s carries the R_s pre-activation columns (up) or their gate gradients
 * (down) after the H-wide activations: Tc·b·(H + R_s) floats a chunk. */
#ifndef LSTMD_PIPE_GRID_H
#define LSTMD_PIPE_GRID_H

#include <stddef.h>

#include "comm/p2p.h"
#include "engine.h"
#include "pipe_schedule.h"
#include "worker/model/model_stage.h"

struct lstmd_comm;
struct lstmd_trace;

struct lstmd_pipe_grid {
  int S, D, s, d;        /* stages, replicas; this rank's stage and replica */
  int A, M, U, K;        /* windows, micro-batches per window, units, time chunks */
  int T, Tc, B, b, H, P; /* window steps, chunk steps, columns per window / per unit, hidden, slots */
  enum lstmd_pipe_kind kind;
  struct lstmd_stage st;                             /* this stage's layers */
  size_t lo[LSTMD_MAX_LAYERS], hi[LSTMD_MAX_LAYERS]; /* every stage's parameter range */
  int rows[LSTMD_MAX_LAYERS];   /* R_s: rows of stage s's first weight_ih on s − 1 (rows[0] 0) */
  int t_lo, t_hi;               /* this stage's tensors (a split one is in both stages') */
  struct lstmd_pipe_op *ops;                         /* this stage's op list */
  int n_ops;
};

/* The balanced split of a model cut into S stages of stage_layers (pipe_split.c): rows[s] for s
 * in [1, S) (a multiple of 32, or 4H; rows[0] = 0) minimising (exactly at S = 2, locally beyond:
 * one boundary at a time) the slowest stage's forward cost plus the slowest stage's backward
 * cost per token (model.h's FLOP model cut into the F, B and W phases, and the copies of
 * received messages); work[s] gets each stage's FLOPs per token
 * with its rows (lstmd_model_layer_flops_per_token of its layers, the head's on the last stage,
 * lstmd_model_ih_row_flops_per_token per moved row). A text model's first stage folds its
 * embedding into layer 0 where a unit's window of unit_tokens (T·b) tokens folds by the
 * automatic rule (embed_fold_cpu.h; model_stage.c): its input projection then costs the
 * table's V rows a window instead of a row per token. LSTMD_EMBED_FOLD is left out, so that a
 * rank's environment cannot change the layout: forcing the fold, or a rank's threads splitting
 * a unit's columns below the rule, makes stage 0's work differ from the model (a less even
 * split, never a wrong one). Pure: every rank gets the same. balanced 0: every rows[s] 0 (whole
 * layers) and their work. work may be NULL (only the rows wanted). */
void lstmd_pipe_split_rows(const struct lstmd_model_shape *sh, int S, const int *stage_layers,
                           long unit_tokens, int balanced, int *rows, double *work);

/* Fills g from the engine's base (cfg, rank, world, model). Returns 0, LSTMD_ECONFIG for a
 * layout the config checks should have refused (printed), or LSTMD_ENOMEM. Free with
 * lstmd_pipe_grid_free. */
int lstmd_pipe_grid_init(struct lstmd_pipe_grid *g, const struct lstmd_engine *base);
void lstmd_pipe_grid_free(struct lstmd_pipe_grid *g);

/* The step's A host windows of B columns ([T,B] ids/targets, or [T,B,W] x and [T,B,K] y: each
 * a lstmd_batch_alloc batch, its contents undefined until a step copies a window in), and
 * their reset flags: 0 or LSTMD_ENOMEM (free what was made with lstmd_pipe_windows_free). */
int lstmd_pipe_windows_alloc(const struct lstmd_pipe_grid *g, const struct lstmd_model_shape *sh,
                             struct lstmd_batch **win, int **reset);
void lstmd_pipe_windows_free(const struct lstmd_pipe_grid *g, struct lstmd_batch *win, int *reset);

/* Index of layer l's first tensor (lstm.weight_ih_l{l}); l = L gives the head's. */
int lstmd_pipe_first_tensor_of_layer(const struct lstmd_model *m, int l);

/* What a transfer carries, for messages: "activations (F) of unit 3 chunk 1" (the transfer's
 * own messages name the peer stage: p2p.h, p2p_nccl.h). */
void lstmd_pipe_describe_item(char *buf, size_t n, int dir, int u, int k);

/* Both engines' trace events of item (u, k), args {"unit":u,"chunk":k}: its compute on thread
 * LSTMD_PIPE_TRACE_TID_ITEMS, named by its kind ("F", "B", "W"), and the main thread's waits for
 * its receives ("recv wait"). trace NULL: nothing. */
enum { LSTMD_PIPE_TRACE_TID_ITEMS = 1 };
void lstmd_pipe_trace_item(struct lstmd_trace *trace, enum lstmd_pipe_op_kind kind, int u, int k,
                           double t0, double t1);
/* Waits for the receive r of item (u, k) (lstmd_p2p_wait: its deadline ends the job), adds the
 * time waited to *wait_s and traces it as a "recv wait". Returns lstmd_p2p_wait's status. */
int lstmd_pipe_wait_recv(struct lstmd_p2p *p2p, lstmd_p2p_req r, struct lstmd_trace *trace, int u,
                         int k, double *wait_s);

/* The global gradient norm from this stage's per-tensor sums of squares: sums[t] for t in
 * [t_lo, t_hi) filled by the caller (a split tensor's part of it), the others 0; summed over the
 * replica's stages (pp) and then in tensor order, so every rank gets the same value: the one-rank
 * value, up to the rounding of a split tensor's two partial sums. Collective over pp. */
int lstmd_pipe_global_norm(const struct lstmd_pipe_grid *g, struct lstmd_comm *pp,
                           const struct lstmd_model *m, double *sums, double timeout_s,
                           double *norm);

/* Replica 0's stages send their range of buf to rank 0, which gets the whole buffer (the other
 * replicas return `local` at once). Collective over the replica's pipeline communicator pp;
 * `local`, this rank's status in filling its range (a failed device copy), is voted with the
 * gather's own set-up, so that no rank returns before a collective the others enter. */
int lstmd_pipe_gather_ranges(const struct lstmd_pipe_grid *g, struct lstmd_comm *pp, float *buf,
                             int local);

/* Every rank's carried state [layers, B, H] (h, c: this stage's layers) into the global
 * [L, D·B, H] arrays h and c on rank 0. Collective over the world. */
int lstmd_pipe_gather_state(const struct lstmd_pipe_grid *g, const struct lstmd_engine *e,
                            const float *state_h, const float *state_c, float *h, float *c);
/* This rank's block [layers, B, H] of a global [L, D·B, H] state. */
void lstmd_pipe_slice_state(const struct lstmd_pipe_grid *g, const struct lstmd_engine *e,
                            const float *h, const float *c, float *state_h, float *state_c);

#endif
