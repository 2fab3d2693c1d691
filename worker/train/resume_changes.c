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

char *lstmd_resume_changes(const char *was_json, const char *now_json) {
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
      if (!a || !b || cannot_change_weights(key) || !strcmp(a, b)) continue;
      fprintf(f, "%s%s %s → %s", n++ ? ", " : "", key, a, b);
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
