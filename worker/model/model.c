/* model.c — parameter layout, initialisation and the FLOP model of the whole model. Its CPU
 * forward/backward and their workspace: model_workspace.c. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "worker/data/dataset.h" /* LSTMD_MAX_COLUMNS: series inputs come from a dataset */

int lstmd_model_output_width(const struct lstmd_model_shape *s) {
  if (s->kind == LSTMD_MODEL_CLASSIFY) return s->classes;
  return s->kind == LSTMD_MODEL_TEXT ? s->vocab : s->horizon;
}
int lstmd_model_input_width(const struct lstmd_model_shape *s) {
  return s->kind == LSTMD_MODEL_SERIES || (s->kind == LSTMD_MODEL_CLASSIFY && s->width > 0)
             ? s->width
             : s->embed;
}
/* Width of a layer's output: H, or 2H for a bidirectional classifier. */
static int layer_out_width(const struct lstmd_model_shape *s) {
  return s->kind == LSTMD_MODEL_CLASSIFY && s->bidirectional ? 2 * s->hidden : s->hidden;
}

static void add_tensor(struct lstmd_model *m, const char *name, int rank, int64_t d0, int64_t d1) {
  struct lstmd_tensor *t = &m->tensors[m->n_tensors++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->rank = rank;
  t->shape[0] = d0;
  t->shape[1] = rank == 2 ? d1 : 0;
  t->count = (size_t)d0 * (size_t)(rank == 2 ? d1 : 1);
  t->offset = m->n_params;
  m->n_params += (t->count + 15) / 16 * 16; /* keep every tensor 64-byte aligned */
}

const char *lstmd_model_shape_error(const struct lstmd_model_shape *s) {
  if (s->kind != LSTMD_MODEL_TEXT && s->kind != LSTMD_MODEL_SERIES &&
      s->kind != LSTMD_MODEL_CLASSIFY)
    return "unknown model kind";
  if (s->hidden < 1 || s->hidden > 65536) return "hidden size out of range";
  if (s->layers < 1 || s->layers > LSTMD_MAX_LAYERS) return "layer count out of range";
  if (s->kind == LSTMD_MODEL_TEXT && (s->vocab < 1 || s->vocab > 256 || s->embed < 1 || s->embed > 65536))
    return "vocabulary or embedding size out of range";
  if (s->kind == LSTMD_MODEL_SERIES &&
      (s->width < 1 || s->width > LSTMD_MAX_COLUMNS || s->horizon < 1 || s->horizon > 65536))
    return "series width or horizon out of range";
  if (s->layer_norm != 0 && s->layer_norm != 1) return "layer_norm is neither 0 nor 1";
  if (s->kind == LSTMD_MODEL_CLASSIFY) {
    /* text (ids through embed.weight) or series (width values per step, no embedding) */
    if (s->width == 0 && (s->vocab < 1 || s->vocab > 256 || s->embed < 1 || s->embed > 65536))
      return "vocabulary or embedding size out of range";
    if (s->width != 0 && (s->width < 1 || s->width > LSTMD_MAX_COLUMNS || s->vocab || s->embed))
      return "a series classifier has 1..64 values per step and no vocabulary or embedding";
    if (s->classes < 2 || s->classes > LSTMD_MAX_CLASSES) return "class count out of range";
    if (s->bidirectional != 0 && s->bidirectional != 1) return "bidirectional is neither 0 nor 1";
    if (s->pool < LSTMD_POOL_LAST || s->pool > LSTMD_POOL_MAX) return "unknown pooling";
    if (s->layer_norm) return "layer_norm is not available for classification models";
  } else if (s->classes || s->bidirectional || s->pool) {
    return "classes, bidirectional and pool belong to classification models";
  }
  return NULL;
}

void lstmd_model_layout(const struct lstmd_model_shape *s, struct lstmd_model *m) {
  memset(m, 0, sizeof *m);
  m->shape = *s;
  const int H = s->hidden;
  char name[32];
  if (s->kind != LSTMD_MODEL_SERIES && !(s->kind == LSTMD_MODEL_CLASSIFY && s->width > 0))
    add_tensor(m, "embed.weight", 2, s->vocab, s->embed);
  if (s->kind == LSTMD_MODEL_CLASSIFY) {
    const int D = s->bidirectional ? 2 : 1;
    for (int k = 0; k < s->layers; k++)
      for (int d = 0; d < D; d++) {
        static const char *const what[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
        const int in = k == 0 ? lstmd_model_input_width(s) : D * H;
        for (int i = 0; i < 4; i++) {
          snprintf(name, sizeof name, "lstm.%s_l%d%s", what[i], k, d ? "_reverse" : "");
          add_tensor(m, name, i < 2 ? 2 : 1, 4 * H, i == 0 ? in : i == 1 ? H : 0);
        }
      }
    add_tensor(m, "head.weight", 2, s->classes, D * H);
    add_tensor(m, "head.bias", 1, s->classes, 0);
    return;
  }
  for (int k = 0; k < s->layers; k++) {
    int in = k == 0 ? lstmd_model_input_width(s) : H;
    snprintf(name, sizeof name, "lstm.weight_ih_l%d", k);
    add_tensor(m, name, 2, 4 * H, in);
    snprintf(name, sizeof name, "lstm.weight_hh_l%d", k);
    add_tensor(m, name, 2, 4 * H, H);
    snprintf(name, sizeof name, "lstm.bias_ih_l%d", k);
    add_tensor(m, name, 1, 4 * H, 0);
    snprintf(name, sizeof name, "lstm.bias_hh_l%d", k);
    add_tensor(m, name, 1, 4 * H, 0);
    if (!s->layer_norm) continue;
    static const char *const ln[6] = {"ih_weight", "ih_bias", "hh_weight", "hh_bias", "c_weight",
                                      "c_bias"};
    for (int i = 0; i < 6; i++) {
      snprintf(name, sizeof name, "lstm.ln_%s_l%d", ln[i], k);
      add_tensor(m, name, 1, i < 4 ? 4 * H : H, 0);
    }
  }
  add_tensor(m, "head.weight", 2, lstmd_model_output_width(s), H);
  add_tensor(m, "head.bias", 1, lstmd_model_output_width(s), 0);
}

int lstmd_model_create(const struct lstmd_model_shape *s, struct lstmd_model **out) {
  *out = NULL;
  const char *bad = lstmd_model_shape_error(s);
  if (bad) {
    lstmd_errorf("model: %s", bad);
    return LSTMD_ECONFIG;
  }
  struct lstmd_model *m = malloc(sizeof *m);
  if (!m) return LSTMD_ENOMEM;
  lstmd_model_layout(s, m);
  size_t bytes = (m->n_params * sizeof(float) + 63) / 64 * 64;
  m->params = aligned_alloc(64, bytes);
  m->grads = aligned_alloc(64, bytes);
  if (!m->params || !m->grads) {
    lstmd_errorf("model: out of memory for %zu parameters", m->n_params);
    lstmd_model_destroy(m);
    return LSTMD_ENOMEM;
  }
  memset(m->params, 0, bytes);
  memset(m->grads, 0, bytes);
  *out = m;
  return LSTMD_OK;
}

void lstmd_model_destroy(struct lstmd_model *m) {
  if (!m) return;
  free(m->params);
  free(m->grads);
  free(m);
}

const struct lstmd_tensor *lstmd_model_tensor(const struct lstmd_model *m, const char *name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}

void lstmd_model_init_params(struct lstmd_model *m, struct lstmd_rng *rng) {
  const float bound = 1.0f / sqrtf((float)m->shape.hidden);
  for (int i = 0; i < m->n_tensors; i++) {
    const struct lstmd_tensor *t = &m->tensors[i];
    float *p = m->params + t->offset;
    int normal = strcmp(t->name, "embed.weight") == 0;
    if (strncmp(t->name, "lstm.ln_", 8) == 0) { /* gain 1, shift 0 */
      const float v = strstr(t->name, "_weight_") ? 1.0f : 0.0f;
      for (size_t k = 0; k < t->count; k++) p[k] = v;
      continue;
    }
    for (size_t k = 0; k < t->count; k++)
      p[k] = normal ? lstmd_rng_normal(rng) : (2.0f * lstmd_rng_uniform(rng) - 1.0f) * bound;
  }
}

/* The FLOP model: a weight row n inputs wide costs 2·n per token forward, and the backward two
 * forwards (input and weight gradients), so 3·2·n per training step. The terms are integers far
 * below 2^53, so every sum of them is exact whatever its order. */
double lstmd_model_ih_row_flops_per_token(const struct lstmd_model_shape *s, int l) {
  return 3.0 * 2.0 * (l == 0 ? lstmd_model_input_width(s) : layer_out_width(s));
}

double lstmd_model_layer_flops_per_token(const struct lstmd_model_shape *s, int l) {
  const int D = layer_out_width(s) / s->hidden;
  const int In = l == 0 ? lstmd_model_input_width(s) : D * s->hidden;
  return 3.0 * (D * 2.0 * 4 * s->hidden * (In + s->hidden));
}

double lstmd_model_head_flops_per_token(const struct lstmd_model_shape *s) {
  return s->kind == LSTMD_MODEL_CLASSIFY ? 0.0
                                          : 3.0 * (2.0 * lstmd_model_output_width(s) * s->hidden);
}

double lstmd_model_flops_per_token(const struct lstmd_model_shape *s) {
  double flops = lstmd_model_head_flops_per_token(s);
  for (int l = 0; l < s->layers; l++) flops += lstmd_model_layer_flops_per_token(s, l);
  return flops;
}
