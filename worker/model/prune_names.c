/* prune_names.c — which tensors [prune] may name (prune.h). Apart from prune.c so that the config
 * check (daemon/config_check.c, also in lstmctl, which links no model code) can use it. */
#include <stdio.h>
#include <string.h>

#include "prune.h"

int lstmd_prune_tensor_allowed(const char *name, int layers) {
  if (!strcmp(name, "head.weight")) return 1;
  int k, end = 0;
  if ((sscanf(name, "lstm.weight_ih_l%d%n", &k, &end) == 1 ||
       sscanf(name, "lstm.weight_hh_l%d%n", &k, &end) == 1) &&
      name[end] == '\0' && k >= 0 && k < layers) {
    char canon[32];
    snprintf(canon, sizeof canon, "lstm.weight_%.2s_l%d", name + 12, k);
    return !strcmp(canon, name); /* no "l01" or "l+1" */
  }
  return 0;
}

int lstmd_prune_for_each_name(const char *list, int layers, int (*fn)(void *, const char *),
                              void *ctx) {
  char name[64];
  if (!list[0]) {
    for (int k = 0; k < layers; k++) {
      snprintf(name, sizeof name, "lstm.weight_ih_l%d", k);
      if (fn(ctx, name)) return -1;
      snprintf(name, sizeof name, "lstm.weight_hh_l%d", k);
      if (fn(ctx, name)) return -1;
    }
    return fn(ctx, "head.weight") ? -1 : 0;
  }
  for (const char *p = list;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    while (len && (*p == ' ' || *p == '\t')) p++, len--; /* "a, b" as an INI file has it */
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
    if (len >= sizeof name) name[0] = '\0';
    if (fn(ctx, name)) return -1;
    if (!comma) return 0;
    p = comma + 1;
  }
}

struct check_ctx {
  int layers, count;
  char seen[LSTMD_MAX_TENSORS][32];
  char *err;
  size_t n;
};

static int check_one(void *arg, const char *name) {
  struct check_ctx *c = arg;
  if (!lstmd_prune_tensor_allowed(name, c->layers)) {
    snprintf(c->err, c->n, "prune.tensors: '%s' is not a weight matrix of this model (allowed: "
             "lstm.weight_ih_l<k>, lstm.weight_hh_l<k> for k < model.layers = %d, head.weight; "
             "never a bias, a layer-norm gain or shift, or the embedding)", name, c->layers);
    return -1;
  }
  for (int i = 0; i < c->count; i++)
    if (!strcmp(c->seen[i], name)) {
      snprintf(c->err, c->n, "prune.tensors: '%s' is named twice", name);
      return -1;
    }
  snprintf(c->seen[c->count++], sizeof c->seen[0], "%s", name);
  return 0;
}

int lstmd_prune_check_tensors(const char *tensors, int layers, char *err, size_t n) {
  struct check_ctx c = {.layers = layers, .err = err, .n = n};
  return lstmd_prune_for_each_name(tensors, layers, check_one, &c);
}
