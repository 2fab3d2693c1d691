/* test_frozen_weights.c — lstmd_workspace_freeze_weights (model.h), the one-row forwards of
 * `lstmd sample`: a workspace whose W_hh and W_ih were packed once gives, step after step with
 * the state carried, the outputs of one that packs at every forward (‖Δ‖/‖ref‖ ≤ 1e-6: the
 * frozen input projection runs the packed kernel instead of cblas_sgemm, so only rounding may
 * differ) and the same carried state; the weights changed after the freeze are not seen (the
 * promise is the caller's), and a second freeze is a no-op. Text and series, one and two layers,
 * an input width that is not a panel multiple, layer norm (W_hh frozen only), and B = 3 rows.
 * Runs on the ISA in use (_avx2 forces AVX2; generic has no packed kernels: the freeze is a
 * no-op there and the outputs are bit for bit).
 * Also lstmd_workspace_create_forward (evaluation's and inference's workspace: the layers share
 * one gates buffer, no gradient buffers): window after window, carried or not, its outputs, loss
 * and carried state are those of a training workspace bit for bit (the same arithmetic in other
 * buffers), with the embedding folded and not, layer norm and three layers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/recur_gemm.h"
#include "kernels/status.h"
#include "worker/model/model.h"
#include "check.h"

enum { STEPS = 12 };

/* Step t's input, the same for both workspaces. */
static void fill_step(const struct lstmd_model_shape *s, struct lstmd_batch *b, int B, int t) {
  for (int n = 0; n < B; n++) {
    if (s->kind == LSTMD_MODEL_TEXT) {
      b->ids[n] = (int32_t)((t * 7 + n * 3 + 1) % s->vocab);
      b->targets[n] = (int32_t)((t * 5 + n + 2) % s->vocab);
    } else {
      for (int w = 0; w < s->width; w++) b->x[n * s->width + w] = sinf(0.7f * t + n + w);
      for (int k = 0; k < s->horizon; k++) b->y[n * s->horizon + k] = cosf(0.3f * t + k);
    }
  }
}

static void compare(const char *label, const struct lstmd_model_shape *shape, int B) {
  struct lstmd_model *m;
  struct lstmd_workspace *ref, *frozen;
  if (lstmd_model_create(shape, &m)) {
    check_true("model create", 0);
    return;
  }
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 7, 3);
  lstmd_model_init_params(m, &rng);
  if (lstmd_workspace_create(m, 1, B, 0.0f, &ref) || lstmd_workspace_create(m, 1, B, 0.0f, &frozen)) {
    check_true("workspace create", 0);
    return;
  }
  char what[160];
  snprintf(what, sizeof what, "%s: freeze", label);
  check_true(what, lstmd_workspace_freeze_weights(frozen) == LSTMD_OK &&
                       lstmd_workspace_freeze_weights(frozen) == LSTMD_OK);
  lstmd_workspace_reset_state(ref);
  lstmd_workspace_reset_state(frozen);
  const int O = shape->kind == LSTMD_MODEL_TEXT ? shape->vocab : shape->horizon;
  const size_t out_n = (size_t)B * O, state_n = (size_t)shape->layers * B * shape->hidden;
  double worst = 0.0, loss_err = 0.0;
  for (int t = 0; t < STEPS; t++) {
    fill_step(shape, lstmd_workspace_batch(ref), B, t);
    fill_step(shape, lstmd_workspace_batch(frozen), B, t);
    const double a = lstmd_model_step(m, ref, 0.0f, NULL, 1);
    const double b = lstmd_model_step(m, frozen, 0.0f, NULL, 1);
    const double e = norm_rel(lstmd_workspace_output(frozen), lstmd_workspace_output(ref), out_n);
    if (e > worst) worst = e;
    if (fabs(a - b) > loss_err) loss_err = fabs(a - b) / (fabs(a) > 1e-30 ? fabs(a) : 1.0);
  }
  snprintf(what, sizeof what, "%s: %d steps (rel %.1e, loss %.1e)", label, STEPS, worst, loss_err);
  check_true(what, worst <= 1e-6 && loss_err <= 1e-6);
  float *h[2], *c[2];
  for (int i = 0; i < 2; i++) h[i] = malloc(state_n * sizeof(float)), c[i] = malloc(state_n * sizeof(float));
  lstmd_workspace_get_state(ref, h[0], c[0], B, 0);
  lstmd_workspace_get_state(frozen, h[1], c[1], B, 0);
  snprintf(what, sizeof what, "%s: carried h and c", label);
  check_true(what, norm_rel(h[1], h[0], state_n) <= 1e-6 && norm_rel(c[1], c[0], state_n) <= 1e-6);

  /* Weights changed after the freeze: the packed kernels' ISAs keep the packs (the caller broke
   * the promise); generic has none, so it sees the change. */
  for (size_t i = 0; i < m->n_params; i++) m->params[i] *= 0.5f;
  fill_step(shape, lstmd_workspace_batch(ref), B, STEPS);
  fill_step(shape, lstmd_workspace_batch(frozen), B, STEPS);
  lstmd_model_step(m, ref, 0.0f, NULL, 1);
  lstmd_model_step(m, frozen, 0.0f, NULL, 1);
  const double moved = norm_rel(lstmd_workspace_output(frozen), lstmd_workspace_output(ref), out_n);
  snprintf(what, sizeof what, "%s: packs made at the freeze", label);
  check_true(what, lstmd_cpu_recur_fast(shape->hidden) ? moved > 1e-3 : moved == 0.0);
  for (int i = 0; i < 2; i++) free(h[i]), free(c[i]);
  lstmd_workspace_destroy(ref);
  lstmd_workspace_destroy(frozen);
  lstmd_model_destroy(m);
}

/* Window w of T steps: step t's rows as fill_step gives them for step w·T + t. */
static void fill_window(const struct lstmd_model_shape *s, struct lstmd_batch *b, int T, int B,
                        int w) {
  struct lstmd_batch row = *b;
  for (int t = 0; t < T; t++) {
    fill_step(s, &row, B, w * T + t);
    if (s->kind == LSTMD_MODEL_TEXT) row.ids += B, row.targets += B;
    else row.x += (size_t)B * s->width, row.y += (size_t)B * s->horizon;
  }
}

static void compare_forward_only(const char *label, const struct lstmd_model_shape *shape, int T,
                                 int B) {
  struct lstmd_model *m;
  struct lstmd_workspace *ref = NULL, *fwd = NULL;
  char what[160];
  if (lstmd_model_create(shape, &m)) {
    check_true("model create", 0);
    return;
  }
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 11, 5);
  lstmd_model_init_params(m, &rng);
  snprintf(what, sizeof what, "%s: forward-only workspace created", label);
  check_true(what, !lstmd_workspace_create(m, T, B, 0.0f, &ref) &&
                       !lstmd_workspace_create_forward(m, T, B, &fwd));
  if (!ref || !fwd) return;
  snprintf(what, sizeof what, "%s: the same embedding folding", label);
  check_true(what, lstmd_workspace_folds_embedding(ref) == lstmd_workspace_folds_embedding(fwd));
  const int O = shape->kind == LSTMD_MODEL_TEXT ? shape->vocab : shape->horizon;
  const size_t out_n = (size_t)T * B * O, state_n = (size_t)shape->layers * B * shape->hidden;
  static const int carry[] = {1, 1, 0, 1, 1};
  int same = 1;
  lstmd_workspace_reset_state(ref);
  lstmd_workspace_reset_state(fwd);
  for (int w = 0; w < (int)(sizeof carry / sizeof carry[0]); w++) {
    fill_window(shape, lstmd_workspace_batch(ref), T, B, w);
    fill_window(shape, lstmd_workspace_batch(fwd), T, B, w);
    const double a = lstmd_model_step(m, ref, 0.0f, NULL, carry[w]);
    const double b = lstmd_model_step(m, fwd, 0.0f, NULL, carry[w]);
    same &= a == b && !memcmp(lstmd_workspace_output(ref), lstmd_workspace_output(fwd),
                              out_n * sizeof(float));
  }
  float *h[2], *c[2];
  for (int i = 0; i < 2; i++) h[i] = malloc(state_n * sizeof(float)), c[i] = malloc(state_n * sizeof(float));
  lstmd_workspace_get_state(ref, h[0], c[0], B, 0);
  lstmd_workspace_get_state(fwd, h[1], c[1], B, 0);
  same &= !memcmp(h[0], h[1], state_n * sizeof(float)) && !memcmp(c[0], c[1], state_n * sizeof(float));
  snprintf(what, sizeof what, "%s: forward-only == training workspace, 5 windows, bit for bit%s",
           label, lstmd_workspace_folds_embedding(fwd) ? " (embedding folded)" : "");
  check_true(what, same);
  for (int i = 0; i < 2; i++) free(h[i]), free(c[i]);
  lstmd_workspace_destroy(ref);
  lstmd_workspace_destroy(fwd);
  lstmd_model_destroy(m);
}

int main(void) {
  const int skip = check_forced_isa();
  if (skip) return skip;
  printf("ISA %s, packed kernels %s at H 32\n", lstmd_cpu_isa_name(lstmd_cpu_isa()),
         lstmd_cpu_recur_fast(32) ? "on" : "off");
  const struct lstmd_model_shape text1 = {.kind = LSTMD_MODEL_TEXT, .vocab = 11, .embed = 5,
                                          .hidden = 32, .layers = 1};
  const struct lstmd_model_shape text2 = {.kind = LSTMD_MODEL_TEXT, .vocab = 11, .embed = 40,
                                          .hidden = 64, .layers = 2};
  const struct lstmd_model_shape series = {.kind = LSTMD_MODEL_SERIES, .width = 3, .hidden = 32,
                                           .layers = 2, .horizon = 4};
  struct lstmd_model_shape ln = text2;
  ln.layer_norm = 1;
  compare("text H32 L1 E5", &text1, 1);
  compare("text H64 L2 E40", &text2, 1);
  compare("text H64 L2 E40, B 3", &text2, 3);
  compare("series H32 L2 W3", &series, 1);
  compare("layer norm text H64 L2", &ln, 1);
  struct lstmd_model_shape text3 = text2, small_vocab = text2;
  text3.layers = 3;
  small_vocab.vocab = 5; /* T·B = 36 >= 4·V: the embedding folded into layer 0 */
  compare_forward_only("text H64 L2 E40 V11", &text2, 9, 4);
  compare_forward_only("text H64 L2 E40 V5", &small_vocab, 9, 4);
  compare_forward_only("text H64 L3", &text3, 9, 4);
  compare_forward_only("series H32 L2 W3", &series, 9, 4);
  compare_forward_only("layer norm text H64 L2", &ln, 9, 4);
  return check_summary("test_frozen_weights");
}
