/* resume_changes.c — the settings a resume changed (see resume_changes.h), with jansson. */
#define _GNU_SOURCE
#include "resume_changes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* Settings that only say where things go and how often they are reported or saved. */
static int cannot_change_weights(const char *key) {
  static const char *const kKeys[] = {
      "data.path",          "train.run_dir",      "train.comm_timeout_s", "train.log_every",
      "train.checkpoint_every", "train.keep_checkpoints", "train.sample_every", "train.sample_length",
      "train.sample_prime"};
  for (size_t i = 0; i < sizeof kKeys / sizeof kKeys[0]; i++)
    if (!strcmp(key, kKeys[i])) return 1;
  return !strncmp(key, "resources.", 10);
}

/* Whether two settings' texts say the same. Fractional numbers by value: checkpoints written
 * before the config printed its numbers shortest-first hold a float setting as
 * "0.00200000009", and the same setting reads "0.002" now; as floats (every fractional setting
 * is at most double, and a change below float precision changes nothing) they are one value.
 * Whole numbers (seeds, steps: printed as integers, always alike) by their text: a float cannot
 * tell 1732690000 from 1732690001. */
static int fractional(const char *s) { return strpbrk(s, ".eE") != NULL; }

static int same_setting(const char *a, const char *b) {
  if (!strcmp(a, b)) return 1;
  if (!fractional(a) && !fractional(b)) return 0;
  char *end_a, *end_b;
  const double x = strtod(a, &end_a), y = strtod(b, &end_b);
  return *a && *b && !*end_a && !*end_b && (float)x == (float)y;
}

/* The settings of `now` whose text in `was` differs (same_setting), each written as `fmt` with
 * the key, was's value and now's, ", " between them; `all` 0 leaves out cannot_change_weights. */
static char *differences(const char *was_json, const char *now_json, int all, const char *fmt) {
  json_t *was = json_loads(was_json, 0, NULL), *now = json_loads(now_json, 0, NULL);
  char *out = NULL;
  size_t len = 0;
  FILE *f = json_is_object(was) && json_is_object(now) ? open_memstream(&out, &len) : NULL;
  int n = 0;
  const char *key;
  json_t *value;
  if (f) json_object_foreach(now, key, value) {
      const char *a = json_string_value(json_object_get(was, key)), *b = json_string_value(value);
      /* a key the checkpoint lacks came with a later version: it had its default then */
      if (!a || !b || (!all && cannot_change_weights(key)) || same_setting(a, b)) continue;
      if (n++) fputs(", ", f);
      /* an empty value as "": "model.stage_layers  → 3,1" (the default is empty) read as a slip */
      fprintf(f, fmt, key, *a ? a : "\"\"", *b ? b : "\"\"");
    }
  if (f) fclose(f);
  json_decref(was);
  json_decref(now);
  if (n == 0 || !f) {
    free(out);
    return NULL;
  }
  return out;
}

char *lstmd_resume_changes(const char *was_json, const char *now_json) {
  return differences(was_json, now_json, 0, "%s %s → %s");
}

char *lstmd_config_differences(const char *rank0_json, const char *mine_json) {
  return differences(rank0_json, mine_json, 1, "%1$s %3$s here, %2$s on rank 0");
}
