/* pipe_split.c — model.stage_split=balanced: how many rows of each stage's first input
 * projection the stage below computes (lstmd_pipe_split_rows, pipe_grid.h).
 *
 * Why per phase. Every schedule runs a stage's forward items in order and its backward (B, W)
 * items in order, and each phase is paced by the stage that is slowest in it: stage s + 1's
 * F(u, k) waits for stage s's, stage s's B(u, k) for stage s + 1's. Equal work in total is not
 * enough. At the benchmark shape (E64 H512 L2, S = 2) the equal-FLOP split moves 1,088 rows;
 * stage 1 was then the slower in F and stage 0 in B + W, and a step took about the sum of the
 * two phases' maxima. Fewer rows made stage 1 the slower in both phases and the step shorter
 * (interleaved runs: R 960 and 992 1.5-3% faster than 1,088; bench/results/pipeline-cpu-amd-
 * fa167bb-3rows-2core-2026-11-28.txt). So the rows minimise max_s F_s + max_s (B_s + W_s):
 * exactly at S = 2 (every candidate is tried), a local minimum beyond (one boundary at a time).
 *
 * A phase's cost per token is model.h's FLOP model cut by phase: a third of a layer's in each of
 * F, B and W (its forward; the gradient of its input and state; its weight gradients); the
 * head's two thirds in F (the last stage computes the output gradient with its forward) and a
 * third in W; a folded embedding's saving a third in each; a moved row's cost a third in each
 * phase, on the stage below instead of its owner. Plus the receives, which a stage's progress
 * thread copies in (CMA) while its items run: H + R_s floats a token from below during F, and
 * H + R_{s+1} from above during B, at kRecvFloatFlops each. That constant was measured: in
 * traces of the benchmark shape at 1,088 rows, stage 0's B items ran 0.25 ms a chunk longer
 * than their FLOPs at stage 1's B rate, while 410 K floats came in a chunk: 0.61 ns a float,
 * at ~200 GFLOP/s (5 ps a FLOP) about 120 FLOPs, taken as 128. Pure and deterministic: every rank computes the
 * same rows (no measurement at run time, so a resume on the same layout stays bitwise). */
#include "pipe_grid.h"

#include <math.h>

#include "kernels/cpu/embed_fold_cpu.h"

enum { kRowStep = 32 };                  /* rows move in whole SIMD panels of the GEMMs */
static const double kRecvFloatFlops = 128.0; /* a float received, in FLOPs of compute time */

/* Per-stage costs per token with no rows moved: f, bw (F and B + W, receives of H floats
 * included), total (FLOPs only, for the startup line), and row[s], the FLOPs of one row of
 * stage s's first weight_ih (all three phases). */
struct split_costs {
  int S, H;
  double f[LSTMD_MAX_LAYERS], bw[LSTMD_MAX_LAYERS], total[LSTMD_MAX_LAYERS], row[LSTMD_MAX_LAYERS];
};

static void base_costs(const struct lstmd_model_shape *sh, int S, const int *stage_layers,
                       long unit_tokens, struct split_costs *c) {
  c->S = S;
  c->H = sh->hidden;
  for (int s = 0, layer = 0; s < S; layer += stage_layers[s], s++) {
    double w = 0.0;
    for (int l = layer; l < layer + stage_layers[s]; l++) w += lstmd_model_layer_flops_per_token(sh, l);
    if (s == 0 && sh->kind == LSTMD_MODEL_TEXT && !sh->layer_norm &&
        lstmd_cpu_fold_auto((int)unit_tokens, sh->vocab)) /* model_stage.c's fold */
      w -= lstmd_model_ih_row_flops_per_token(sh, 0) * 4 * sh->hidden *
           (1.0 - (double)sh->vocab / (double)unit_tokens);
    const double head = s == S - 1 ? lstmd_model_head_flops_per_token(sh) : 0.0;
    c->total[s] = w + head;
    c->f[s] = w / 3.0 + head * 2.0 / 3.0 + (s > 0 ? kRecvFloatFlops * sh->hidden : 0.0);
    c->bw[s] = w * 2.0 / 3.0 + head / 3.0 + (s < S - 1 ? kRecvFloatFlops * sh->hidden : 0.0);
    c->row[s] = lstmd_model_ih_row_flops_per_token(sh, layer);
  }
}

/* max_s F_s + max_s (B_s + W_s) with rows[1 .. S) moved (rows[0] = 0). */
static double objective(const struct split_costs *c, const int *rows) {
  double max_f = 0.0, max_bw = 0.0;
  for (int s = 0; s < c->S; s++) {
    const double out = s + 1 < c->S ? rows[s + 1] * c->row[s + 1] / 3.0 : 0.0; /* rows for above */
    const double in = rows[s] * c->row[s] / 3.0;                              /* rows done below */
    const double f = c->f[s] + out - in + kRecvFloatFlops * rows[s];
    const double bw = c->bw[s] + 2.0 * (out - in) + (s + 1 < c->S ? kRecvFloatFlops * rows[s + 1] : 0.0);
    if (f > max_f) max_f = f;
    if (bw > max_bw) max_bw = bw;
  }
  return max_f + max_bw;
}

void lstmd_pipe_split_rows(const struct lstmd_model_shape *sh, int S, const int *stage_layers,
                           long unit_tokens, int balanced, int *rows, double *work) {
  struct split_costs c;
  base_costs(sh, S, stage_layers, unit_tokens, &c);
  const int top = 4 * sh->hidden;
  for (int s = 0; s < S; s++) rows[s] = 0;
  if (balanced) {
    /* From equal totals (each boundary: stages [0, s) carry s/S of the total work, rounded to
     * whole steps and clamped), each boundary in turn takes the best of its candidate rows with
     * the others fixed, until a whole pass changes nothing. */
    double all = 0.0, below = 0.0;
    for (int s = 0; s < S; s++) all += c.total[s];
    for (int s = 1; s < S; s++) {
      below += c.total[s - 1];
      const long r = lround((s * all / S - below) / c.row[s] / kRowStep) * kRowStep;
      rows[s] = r < 0 ? 0 : r > top ? top : (int)r;
    }
    for (int pass = 0, changed = 1; changed && pass < 16; pass++) {
      changed = 0;
      for (int s = 1; s < S; s++) {
        const int was = rows[s];
        int best = was;
        double best_cost = objective(&c, rows);
        for (int r = 0; r <= top; r = r + kRowStep > top && r < top ? top : r + kRowStep) {
          rows[s] = r;
          const double cost = objective(&c, rows);
          if (cost < best_cost * (1.0 - 1e-12)) {
            best_cost = cost;
            best = r;
          }
        }
        rows[s] = best;
        changed |= best != was;
      }
    }
  }
  if (!work) return;
  for (int s = 0; s < S; s++)
    work[s] = c.total[s] + (s + 1 < S ? c.row[s + 1] * rows[s + 1] : 0.0) - c.row[s] * rows[s];
}
