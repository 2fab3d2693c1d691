/* test_dropout.c — the dropout masks themselves, independently of the gradient check (which
 * reuses them): for p in {0.1, 0.5, 0.9}, the drop rate within 4σ of p (binomial σ over the units
 * sampled), kept values exactly 1/(1−p) as a float, a fresh mask for every step, layer, time step,
 * global batch column and unit (pairs of them disagree at the rate 2p(1−p) of independent masks),
 * the same mask for the same seed and key, and the same mask whatever the split of the batch: a
 * workspace for columns [c0, c0+b) gets exactly those columns of the full batch's mask. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/model/model.h"
#include "check.h"

enum { T = 16, B = 16, H = 64, L = 3, STEPS = 4 };
#define MASK_COUNT ((size_t)T * B * H)

static struct lstmd_model *g_model;

/* Masks [L-1][T,B,H] of one forward pass of a workspace of `batch` columns starting at global
 * column col0, under (seed, step). Returns 0 if a mask is missing. */
static int masks_of(float p, int batch, int col0, uint64_t seed, uint64_t step, float *out) {
  struct lstmd_workspace *ws = NULL;
  if (lstmd_workspace_create(g_model, T, batch, p, &ws)) return 0;
  /* ids and targets stay 0 (the arena is zeroed): valid tokens; the masks do not depend on them */
  struct lstmd_dropout_key key = {seed, step, col0};
  lstmd_model_forward(g_model, ws, 0.0f, &key);
  int ok = 1;
  const size_t n = (size_t)T * batch * H;
  for (int l = 0; l < L - 1; l++) {
    const float *m = lstmd_workspace_dropout_mask(ws, l);
    if (!m) ok = 0;
    else memcpy(out + l * n, m, n * sizeof(float));
  }
  ok = ok && lstmd_workspace_dropout_mask(ws, L - 1) == NULL;
  lstmd_workspace_destroy(ws);
  return ok;
}

/* |rate − expected| ≤ 4σ, σ = sqrt(expected(1 − expected)/n): prints the numbers either way. */
static void check_rate(const char *what, size_t hits, size_t n, double expected) {
  const double rate = (double)hits / (double)n, sigma = sqrt(expected * (1.0 - expected) / n);
  char line[200];
  snprintf(line, sizeof line, "%s: %.4f vs %.4f (%+.1fσ of %zu)", what, rate, expected,
           (rate - expected) / sigma, n);
  check_true(line, fabs(rate - expected) <= 4.0 * sigma);
}

/* Element pairs (a[i], b[i]) that disagree on dropped vs kept. */
static size_t disagreements(const float *a, const float *b, size_t count) {
  size_t d = 0;
  for (size_t i = 0; i < count; i++) d += (a[i] == 0.0f) != (b[i] == 0.0f);
  return d;
}

static void test_masks(float p) {
  const float keep = (float)(1.0 / (1.0 - (double)p)); /* 1/(1−p) rounded once, to float */
  const double q = 2.0 * p * (1.0 - p); /* disagreement rate of two independent masks */
  const size_t per_step = (size_t)(L - 1) * MASK_COUNT;
  float *all = malloc(STEPS * per_step * sizeof(float)), *again = malloc(per_step * sizeof(float));
  char what[160];
  int present = 1;
  for (int s = 0; s < STEPS; s++) present &= masks_of(p, B, 0, 42, 100 + s, all + s * per_step);
  snprintf(what, sizeof what, "p=%.1f: masks on layers 0..%d, none on the top", p, L - 2);
  check_true(what, present);
  if (!present) goto done;

  /* values: 0 or exactly keep; the drop rate over every unit of every layer and step */
  size_t dropped = 0, odd = 0, first_odd = 0;
  const size_t total = STEPS * per_step;
  for (size_t i = 0; i < total; i++) {
    if (all[i] == 0.0f) dropped++;
    else if (all[i] != keep && odd++ == 0) first_odd = i;
  }
  if (odd)
    fprintf(stderr, "  p=%.1f: mask[%zu] = %.9g, want 0 or %.9g\n", p, first_odd, all[first_odd], keep);
  snprintf(what, sizeof what, "p=%.1f: kept values exactly %.9g", p, keep);
  check_true(what, odd == 0);
  snprintf(what, sizeof what, "p=%.1f: drop rate", p);
  check_rate(what, dropped, total, p);
  /* per layer and step too: a mask that is right only on average over them fails here */
  int worst_l = 0, worst_s = 0;
  double worst = 0.0;
  for (int s = 0; s < STEPS; s++)
    for (int l = 0; l < L - 1; l++) {
      const float *m = all + s * per_step + l * MASK_COUNT;
      size_t d = 0;
      for (size_t i = 0; i < MASK_COUNT; i++) d += m[i] == 0.0f;
      double z = fabs((double)d / MASK_COUNT - p) / sqrt(p * (1.0 - p) / MASK_COUNT);
      if (z >= worst) worst = z, worst_l = l, worst_s = s;
    }
  snprintf(what, sizeof what, "p=%.1f: drop rate of each mask (worst: layer %d step %d, %.1fσ)", p,
           worst_l, worst_s, worst);
  check_true(what, worst <= 4.0);

  /* independence: neighbours in each coordinate of the key disagree as independent masks do */
  const float *s0l0 = all, *s0l1 = all + MASK_COUNT, *s1l0 = all + per_step;
  snprintf(what, sizeof what, "p=%.1f: step s vs s+1 differ", p);
  size_t d = 0;
  for (int s = 0; s + 1 < STEPS; s++)
    for (int l = 0; l < L - 1; l++)
      d += disagreements(all + s * per_step + l * MASK_COUNT,
                         all + (s + 1) * per_step + l * MASK_COUNT, MASK_COUNT);
  check_rate(what, d, (size_t)(STEPS - 1) * (L - 1) * MASK_COUNT, q);
  snprintf(what, sizeof what, "p=%.1f: layer 0 vs layer 1 differ", p);
  check_rate(what, disagreements(s0l0, s0l1, MASK_COUNT), MASK_COUNT, q);
  snprintf(what, sizeof what, "p=%.1f: time step t vs t+1 differ", p);
  check_rate(what, disagreements(s0l0, s0l0 + B * H, MASK_COUNT - B * H),
             MASK_COUNT - B * H, q);
  snprintf(what, sizeof what, "p=%.1f: column b vs b+1 differ", p);
  check_rate(what, disagreements(s1l0, s1l0 + H, MASK_COUNT - H), MASK_COUNT - H, q);
  snprintf(what, sizeof what, "p=%.1f: unit j vs j+1 differ", p);
  check_rate(what, disagreements(s0l1, s0l1 + 1, MASK_COUNT - 1), MASK_COUNT - 1, q);

  /* determinism: the same seed and key in a new workspace; another seed differs */
  masks_of(p, B, 0, 42, 101, again);
  snprintf(what, sizeof what, "p=%.1f: same seed and key, same masks", p);
  check_true(what, !memcmp(again, all + per_step, per_step * sizeof(float)));
  masks_of(p, B, 0, 43, 101, again);
  snprintf(what, sizeof what, "p=%.1f: seed 42 vs 43 differ", p);
  check_rate(what, disagreements(again, all + per_step, per_step), per_step, q);

  /* the split: workspaces for global columns [c0, c0+b) get those columns of the full mask, also
   * when the full batch itself starts at a global column other than 0 (a rank's slice) */
  static const int cuts[][2] = {{0, 5}, {5, 6}, {11, 5}, {0, 1}, {15, 1}, {3, 12}};
  for (int base = 0; base <= 64; base += 64) {
    masks_of(p, B, base, 42, 102, again);
    int same = 1;
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
      const int c0 = cuts[c][0], nb = cuts[c][1];
      const size_t n = (size_t)T * nb * H;
      float *part = malloc((L - 1) * n * sizeof(float));
      if (!masks_of(p, nb, base + c0, 42, 102, part)) same = 0;
      for (int l = 0; l < L - 1 && same; l++)
        for (int t = 0; t < T && same; t++)
          for (int b = 0; b < nb && same; b++) {
            const float *want = again + l * MASK_COUNT + ((size_t)t * B + c0 + b) * H;
            const float *got = part + l * n + ((size_t)t * nb + b) * H;
            if (memcmp(got, want, H * sizeof(float))) {
              fprintf(stderr, "  p=%.1f: columns [%d,%d) of a batch at column %d: layer %d t %d b %d "
                      "differs from the full batch's column %d\n", p, c0, c0 + nb, base, l, t, b, c0 + b);
              same = 0;
            }
          }
      free(part);
    }
    snprintf(what, sizeof what, "p=%.1f: split at global column %d, same masks", p, base);
    check_true(what, same);
  }
done:
  free(all);
  free(again);
}

/* Without a key (evaluation) the mask is all ones; no mask at all with p = 0 or one layer. */
static void test_off(void) {
  struct lstmd_workspace *ws = NULL;
  lstmd_workspace_create(g_model, T, B, 0.5f, &ws);
  lstmd_model_forward(g_model, ws, 0.0f, NULL);
  const float *m = lstmd_workspace_dropout_mask(ws, 0);
  int ones = m != NULL;
  for (size_t i = 0; ones && i < MASK_COUNT; i++) ones = m[i] == 1.0f;
  check_true("no dropout key (evaluation): mask all ones", ones);
  lstmd_workspace_destroy(ws);
  lstmd_workspace_create(g_model, T, B, 0.0f, &ws);
  int none = 1;
  for (int l = 0; l < L; l++) none &= lstmd_workspace_dropout_mask(ws, l) == NULL;
  check_true("p = 0: no masks", none);
  lstmd_workspace_destroy(ws);
  struct lstmd_model_shape one = g_model->shape;
  one.layers = 1;
  struct lstmd_model *m1 = NULL;
  lstmd_model_create(&one, &m1);
  lstmd_workspace_create(m1, T, B, 0.5f, &ws);
  check_true("one layer: no mask", lstmd_workspace_dropout_mask(ws, 0) == NULL);
  lstmd_workspace_destroy(ws);
  lstmd_model_destroy(m1);
}

int main(void) {
  struct lstmd_model_shape shape = {.kind = LSTMD_MODEL_TEXT, .vocab = 5, .embed = 4, .hidden = H,
                                    .layers = L};
  if (lstmd_model_create(&shape, &g_model)) return check_summary("test_dropout: model");
  test_masks(0.1f);
  test_masks(0.5f);
  test_masks(0.9f);
  test_off();
  lstmd_model_destroy(g_model);
  return check_summary("test_dropout");
}
