/* recur_team.h — the threads that split a batch between them (worker/engine/engine_cpu.c's
 * slices) run each LSTM layer's recurrence together, split by hidden unit instead of by row.
 *
 * Why: at the CPU benchmark shape (H 512, batch 32 on 2 cores) each slice has 16 rows and
 * streams all of W_hh (4H·H floats = 4 MiB) from L3 on every time step, which does not fit the
 * 2 MiB L2 of one core; the packed recurrence then ran at ~0.75 of its L2-resident rate. Split
 * by unit, member m owns units [m·H/n, (m+1)·H/n): it packs and streams only the W_hh panels of
 * those units (4H·H/n floats, which stay in its own core's cache across steps) and computes them
 * for the rows of every member. The input projection, the weight gradients and everything else
 * stay per slice, on the slice's own rows.
 *
 * The members meet at a barrier once per time step (the next step's GEMM reads every unit of
 * h), and once before each layer pass (to publish their row buffers). Within a step a member
 * that has finished its own units takes the untaken ones of a member that is behind (in groups
 * of one panel width), so one held-up thread does not hold up the step by its whole share. Every member must make
 * the same sequence of calls with the same T and H; the row counts may differ. No element's
 * value depends on the split: the results are bitwise those of lstmd_cpu_lstm_forward and
 * lstmd_cpu_lstm_backward_input with packed W_hh (tests/test_recur_team.c checks it). */
#ifndef LSTMD_RECUR_TEAM_H
#define LSTMD_RECUR_TEAM_H

#include "lstm_cpu.h"

struct lstmd_recur_team;

/* 1 when n ≥ 2 threads can split hidden size H: the packed kernels run for H
 * (lstmd_cpu_recur_fast) and each member's units are whole panels (H % (n·w) == 0). */
int lstmd_recur_team_fits(int n, int H);
/* Whether n threads should form a team for H: LSTMD_RECUR_TEAM=0 never, 1 whenever it fits,
 * auto (the default) when it fits and W_hh (16·H² bytes) outgrows one core's L2. Where W_hh
 * fits in L2 anyway, the per-step barrier costs more than the split saves: on the 2-core
 * AVX-512 build machine (2 MiB L2), forward + backward_input of T 128 took team/alone
 * 0.76× at H 128 and 0.90× at H 256, and 1.04–1.08× at H 512 with 16 rows a thread, 1.15×
 * with 8 and 1.3–1.5× with 2–4 (few rows: each slice alone streamed all of W_hh for them).
 * -1: LSTMD_RECUR_TEAM is set to something else. */
int lstmd_recur_team_wanted(int n, int H);
/* A team of n members for hidden size H (lstmd_recur_team_fits must hold): 0 or LSTMD_ENOMEM. */
int lstmd_recur_team_create(int n, int H, struct lstmd_recur_team **out);
void lstmd_recur_team_destroy(struct lstmd_recur_team *t);
/* How many unit groups, over the team's life, a member computed for another (recur_team.c). */
long lstmd_recur_team_stolen(const struct lstmd_recur_team *t);

/* lstmd_cpu_lstm_forward for member `member`'s rows (its own d, x, h, c, gates), run together
 * with the other members' calls; W_hh is packed by the team (no wpack argument). d->split is 0,
 * or 4H where the caller wrote the whole input projection into gates itself (the embedding
 * folded into layer 0: embed_fold_cpu.h; x is then not read). A split in between is the
 * pipeline engine's, which has one thread a rank. */
void lstmd_cpu_lstm_forward_team(struct lstmd_recur_team *t, int member,
                                 const struct lstmd_lstm_dims *d, const float *w_ih,
                                 const float *w_hh, const float *b_ih, const float *b_hh,
                                 const float *x, float *h, float *c, float *gates);
/* lstmd_cpu_lstm_backward_input (carry_in 0, no gradient into h[0]) likewise. */
void lstmd_cpu_lstm_backward_input_team(struct lstmd_recur_team *t, int member,
                                        const struct lstmd_lstm_dims *d, const float *w_ih,
                                        const float *w_hh, const float *c, const float *gates,
                                        const float *dh_out, float *dgates, float *work,
                                        float *dx);

#endif
