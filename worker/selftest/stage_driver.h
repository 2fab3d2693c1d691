/* stage_driver.h — runs a model as pipeline stages in one process, for the tests: the layers
 * cut into stages, the window into K time chunks and the batch into column slices, the messages
 * between stages copied by hand in the order the pipeline engine sends them (every F chunk up
 * the stages; then from the last chunk down, every stage's B of the chunk then its W). Used by
 * test_model_stage (against the whole model) and the selftest group "cpu" (cpu_gradcheck.c,
 * against finite differences). */
#ifndef LSTMD_TEST_STAGE_DRIVER_H
#define LSTMD_TEST_STAGE_DRIVER_H

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/recur_gemm.h"
#include "worker/data/batcher.h"
#include "worker/model/model_stage.h"

enum { kDriverMaxStages = 4, kDriverMaxSlices = 4 };

struct stage_run {
  int stages, stage_layers[kDriverMaxStages]; /* layers per stage, summing to L */
  int chunks, slices;                         /* K (dividing T), column slices (dividing B) */
  float dropout;
  const struct lstmd_dropout_key *key;        /* NULL: no dropout masks */
  float grad_scale;
  const float *h0, *c0;                       /* [L,B,H] initial state, or NULL for zeros */
  float *h_end, *c_end;                       /* [L,B,H] the final state, or NULL */
  float *masks[LSTMD_MAX_LAYERS];             /* [T,B,H] per layer: gets the masks used (left
                                                 alone for a layer without one), or NULL */
};

/* Forward, and backward when grad_scale != 0 (grads += into `grads`). Returns the loss sum. */
static inline double stage_run(const struct lstmd_model *m, const struct lstmd_batch *batch,
                               struct stage_run *r, float *grads) {
  const int T = batch->steps, B = batch->batch, H = m->shape.hidden, L = m->shape.layers;
  const int S = r->stages, K = r->chunks, Tc = T / K, cb = B / r->slices;
  const size_t BH = (size_t)B * H;
  struct lstmd_stage_ws *ws[kDriverMaxStages][kDriverMaxSlices];
  struct lstmd_stage_packed pk[kDriverMaxStages];
  float *packs[2 * LSTMD_MAX_LAYERS];
  memset(pk, 0, sizeof pk);
  for (int l = 0; l < 2 * L; l++) packs[l] = NULL;
  for (int s = 0, layer = 0; s < S; layer += r->stage_layers[s], s++) {
    const struct lstmd_stage st = {layer, r->stage_layers[s], s == 0, s == S - 1};
    for (int i = 0; i < st.layers; i++) {
      const int l = layer + i;
      const float *w_hh = m->params + m->tensors[lstmd_layer_first_tensor(&m->shape, l) + 1].offset;
      if (lstmd_cpu_recur_fast(H)) { /* the packed recurrence, as the engine runs it */
        const size_t bytes = (lstmd_cpu_pack_floats(4 * H, H) * sizeof(float) + 63) / 64 * 64;
        packs[2 * l] = aligned_alloc(64, bytes);
        packs[2 * l + 1] = aligned_alloc(64, bytes);
        lstmd_cpu_pack_rows(4 * H, H, w_hh, packs[2 * l]);
        lstmd_cpu_pack_cols(4 * H, H, w_hh, packs[2 * l + 1]);
      }
      pk[s].rows[i] = packs[2 * l];
      pk[s].cols[i] = packs[2 * l + 1];
    }
    for (int c = 0; c < r->slices; c++) {
      if (lstmd_stage_ws_create(m, &st, T, Tc, cb, r->dropout, &ws[s][c])) abort();
      lstmd_batch_slice(batch, c * cb, lstmd_stage_ws_batch(ws[s][c]));
      if (r->h0) lstmd_stage_ws_set_state(ws[s][c], r->h0 + (size_t)layer * BH,
                                          r->c0 + (size_t)layer * BH, B, c * cb);
    }
  }
  double loss = 0.0;
  /* F: chunk by chunk up the stages; a stage's output rows become the next one's input rows */
  for (int k = 0; k < K; k++)
    for (int s = 0; s < S; s++)
      for (int c = 0; c < r->slices; c++) {
        struct lstmd_dropout_key key;
        if (r->key) key = (struct lstmd_dropout_key){r->key->seed, r->key->step, r->key->col0 + c * cb};
        loss += lstmd_stage_forward(m, ws[s][c], &pk[s], k * Tc, (k + 1) * Tc, r->grad_scale,
                                    r->key ? &key : NULL);
        if (s + 1 < S)
          memcpy(lstmd_stage_ws_input(ws[s + 1][c]) + (size_t)k * Tc * cb * H,
                 lstmd_stage_ws_output(ws[s][c]) + (size_t)k * Tc * cb * H,
                 (size_t)Tc * cb * H * sizeof(float));
      }
  /* B then W: from the last chunk, down the stages; dx of a stage is the gradient above it */
  for (int k = K - 1; r->grad_scale != 0.0f && k >= 0; k--)
    for (int s = S - 1; s >= 0; s--)
      for (int c = 0; c < r->slices; c++) {
        lstmd_stage_backward_input(m, ws[s][c], &pk[s], k * Tc, (k + 1) * Tc);
        if (s > 0)
          memcpy(lstmd_stage_ws_doutput(ws[s - 1][c]) + (size_t)k * Tc * cb * H,
                 lstmd_stage_ws_dinput(ws[s][c]) + (size_t)k * Tc * cb * H,
                 (size_t)Tc * cb * H * sizeof(float));
        lstmd_stage_backward_weight(m, ws[s][c], k * Tc, (k + 1) * Tc, grads);
      }
  for (int s = 0, layer = 0; s < S; layer += r->stage_layers[s], s++)
    for (int c = 0; c < r->slices; c++) {
      for (int i = 0; i < r->stage_layers[s]; i++) { /* this slice's columns of each mask */
        const float *mk = lstmd_stage_ws_dropout_mask(ws[s][c], i);
        for (int t = 0; mk && r->masks[layer + i] && t < T; t++)
          memcpy(r->masks[layer + i] + ((size_t)t * B + c * cb) * H, mk + (size_t)t * cb * H,
                 (size_t)cb * H * sizeof(float));
      }
      if (r->h_end) lstmd_stage_ws_get_final_state(ws[s][c], r->h_end + (size_t)layer * BH,
                                                   r->c_end + (size_t)layer * BH, B, c * cb);
      lstmd_stage_ws_destroy(ws[s][c]);
    }
  for (int l = 0; l < 2 * L; l++) free(packs[l]);
  return loss;
}

#endif
