/* embed_fold_cpu.h — a text model's embedding folded into its first LSTM layer (CPU).
 *
 * Layer 0 reads x_n = E[id_n] only through x_n·W_ihᵀ, which is row id_n of the table
 * P = E·W_ihᵀ [V,4H]. So the input projection of N tokens costs V·4H·E multiply-adds and a row
 * copy per token instead of N·4H·E; and backward, with S[v] = Σ_{n: id_n = v} dgates_n [V,4H],
 *   dW_ih += Sᵀ·E,   dE += S·W_ih,   db_ih and db_hh += Σ_v S[v],
 * so the [N,E] input gradient and its scatter into E are never formed. The same sums in another
 * order: results agree with the unfolded layer to rounding (tests/test_kernels_cpu.c). It pays
 * where the window has several times more tokens than the vocabulary has rows: byte and
 * character models, whose projection has K = E (small, so OpenBLAS runs it well below its peak). */
#ifndef LSTMD_EMBED_FOLD_CPU_H
#define LSTMD_EMBED_FOLD_CPU_H

#include <stdint.h>

/* 1 where a window of N tokens over a vocabulary of V folds the embedding, 0 where not;
 * LSTMD_EMBED_FOLD=1 or 0 forces it either way (tests; timing both), auto or unset decides.
 * -1 for another value of LSTMD_EMBED_FOLD (the caller reports it). The caller folds only a
 * text model without layer normalisation (model_workspace.c). */
int lstmd_cpu_fold_wanted(int N, int V);
/* The automatic rule alone (N >= 4 V), whatever LSTMD_EMBED_FOLD says: for a decision that must
 * be the same on every rank (a pipeline's stage balance, worker/engine/pipe_grid.c). */
int lstmd_cpu_fold_auto(int N, int V);

/* gates [N,G] = (emb [V,E] · w_ih [G,E]ᵀ)[ids[n]]: the input projection of layer 0 without
 * bias. table [V,G] is scratch. ids must be < V. */
void lstmd_cpu_fold_forward(int N, int V, int E, int G, const int32_t *ids, const float *emb,
                            const float *w_ih, float *table, float *gates);

/* From the gate gradients dgates [N,G] of layer 0: dw_ih [G,E] += Sᵀ·emb, demb [V,E] += S·w_ih,
 * db_ih and db_hh [G] += Σ_v S[v], with S [V,G] (scratch: sums) summed in order of n. */
void lstmd_cpu_fold_backward(int N, int V, int E, int G, const int32_t *ids, const float *dgates,
                             const float *emb, const float *w_ih, float *sums, float *dw_ih,
                             float *db_ih, float *db_hh, float *demb);

/* The same in parts, for a window that runs in time chunks (a pipeline's first stage,
 * worker/model/model_stage.c): the table once, then each chunk's rows from it; each chunk's
 * gradient rows summed into S (sums += ..., zeroed by the caller before the window's first),
 * then the window's gradients from S once. fold_forward and fold_backward are these in turn. */
void lstmd_cpu_fold_table(int V, int E, int G, const float *emb, const float *w_ih, float *table);
void lstmd_cpu_fold_gather(int N, int G, const int32_t *ids, const float *table, float *gates);
void lstmd_cpu_fold_sums_add(int N, int G, const int32_t *ids, const float *dgates, float *sums);
void lstmd_cpu_fold_apply(int V, int E, int G, const float *sums, const float *emb,
                          const float *w_ih, float *dw_ih, float *db_ih, float *db_hh, float *demb);

#endif
