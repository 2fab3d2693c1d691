/* config.h — the one table behind the training config: INI files, `--set section.key=value`
 * overrides, `lstmd train --help`, the effective config printed at start, and the JSON copy
 * stored in checkpoints. Values out of range are rejected with the key named, never clamped;
 * unknown sections and keys are errors. */
#ifndef LSTMD_CONFIG_H
#define LSTMD_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "worker/train/train_config.h"

void lstmd_config_defaults(struct lstmd_train_config *c);
/* Applies an INI file. Errors print "FILE:LINE: ..." and return LSTMD_ECONFIG (LSTMD_EIO when
 * the file cannot be read). */
int lstmd_config_load_ini(struct lstmd_train_config *c, const char *path);
/* Calls fn for every "section.key" = value of an INI file, inline comments dropped, stopping at
 * the first nonzero return (whose err is then printed with FILE:LINE). */
typedef int (*lstmd_config_pair_fn)(void *user, const char *dotted, const char *value, char *err,
                                    size_t n);
int lstmd_config_read_ini(const char *path, lstmd_config_pair_fn fn, void *user);
/* Applies one "section.key" = value quietly: LSTMD_ECONFIG with the reason (naming the key) in
 * err. What the daemon uses for the settings of submitted jobs. */
int lstmd_config_set_key(struct lstmd_train_config *c, const char *dotted, const char *value,
                         char *err, size_t n);
/* Applies one "section.key=value" assignment (--set; messages on stderr). */
int lstmd_config_set(struct lstmd_train_config *c, const char *assignment);
/* Applies a JSON object {"section.key": "value", ...} (as stored in checkpoints). */
int lstmd_config_load_json(struct lstmd_train_config *c, const char *json_text);
/* Checks what single keys cannot: required keys present. _check writes the reason into err. */
int lstmd_config_validate(const struct lstmd_train_config *c);
int lstmd_config_check(const struct lstmd_train_config *c, char *err, size_t n);
/* Settings that do nothing as configured: those of [distill] without distill.teacher, those of
 * [prune] without prune.target_sparsity, the pipeline's (model.stage_split, train.schedule,
 * train.micro_batches, train.time_chunks) without model.stages > 1 (a value other than the
 * default there: a user who set distill.alpha and forgot the teacher trained plainly without a
 * word). Writes e.g.
 * "distill.alpha has no effect without distill.teacher" into out (n bytes; ""), returns the
 * number of such keys. */
int lstmd_config_inert_keys(const struct lstmd_train_config *c, char *out, size_t n);
/* "section.key = value" lines. */
void lstmd_config_print(const struct lstmd_train_config *c, FILE *out);
/* JSON object text of every key (malloc'd; NULL on allocation failure or a value that is not
 * UTF-8, which set_key refuses anyway). */
char *lstmd_config_to_json(const struct lstmd_train_config *c);
/* The key reference: name, type and range, default, help. */
void lstmd_config_help(FILE *out);
/* The section of the table's key named `name` (the first, if several), or NULL: for messages. */
const char *lstmd_config_key_section(const char *name);

#endif
