/* config.c — the config table and everything it drives (see config.h). Here: the table, each
 * key's parsing, formatting and defaults, the inert keys, the printout, the JSON copy and
 * `lstmd train --help`; reading INI files (inih's parser), --set and the checkpoint's JSON is in
 * config_load.c, the checks across keys in config_check.c. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/numtext.h"
#include "kernels/status.h"
#include "worker/data/batcher.h"
#include "worker/data/series_tf.h"
#include "worker/engine/engine.h"
#include "kernels/utf8.h"

enum cfg_type { CFG_INT, CFG_LONG, CFG_U64, CFG_FLOAT, CFG_DOUBLE, CFG_STRING, CFG_ENUM };

struct cfg_key {
  const char *section, *key;
  enum cfg_type type;
  size_t offset, size; /* field of struct lstmd_train_config; size for strings */
  const char *def;
  double min, max;     /* inclusive, for numbers */
  const char *const *choices; /* enum names, index = stored int value; NULL-terminated */
  const char *help;
};

static const char *const kOrders[] = {"shuffle", "stream", NULL};
static const char *const kTargets[] = {"level", "delta", NULL};          /* lstmd_series_target */
static const char *const kWindowNorms[] = {"none", "last", "mean", NULL}; /* lstmd_window_norm */
static const char *const kAlgos[] = {"adamw", "sgd", NULL};
static const char *const kSchedules[] = {"cosine", "constant", "plateau", NULL};
static const char *const kDevices[] = {"cpu", "cuda", "auto", NULL}; /* enum lstmd_device */
static const char *const kPrecisions[] = {"fp32", "fp16", "bf16", "tf32", NULL};
static const char *const kBools[] = {"false", "true", NULL};
static const char *const kPools[] = {"last", "mean", "max", NULL}; /* enum lstmd_pool_kind */
static const char *const kPipeSchedules[] = {"wavefront", "gpipe", "1f1b", NULL}; /* lstmd_pipe_kind */
static const char *const kStageSplits[] = {"layers", "balanced", "auto", NULL}; /* lstmd_stage_split */

#define LSTMD_STR_(x) #x
#define LSTMD_STR(x) LSTMD_STR_(x)
#define F(field) offsetof(struct lstmd_train_config, field)
#define S(field) sizeof(((struct lstmd_train_config *)0)->field)
static const struct cfg_key kKeys[] = {
    {"data", "path", CFG_STRING, F(data_path), S(data_path), "", 0, 0, NULL,
     "prepared dataset directory (from lstmd prepare); required"},
    {"data", "seq_len", CFG_INT, F(seq_len), 0, LSTMD_STR(LSTMD_DEFAULT_SEQ_LEN), 1, 65536, NULL,
     "inputs per training window (truncated BPTT length)"},
    {"data", "batch_size", CFG_INT, F(batch_size), 0, "32", 1, 65536, NULL,
     "windows per step on each rank"},
    {"data", "order", CFG_ENUM, F(order), 0, "shuffle", 0, 0, kOrders,
     "shuffle: random windows, zero state each; stream: B parallel streams, state carried"},
    /* The default from bench/results/forecast-baselines-*.txt (README "Forecasting series"). */
    {"data", "window_norm", CFG_ENUM, F(window_norm), 0, "last", 0, 0, kWindowNorms,
     "series: shift (last) or shift and scale (mean) each window by its inputs' statistics"},
    {"model", "embed", CFG_INT, F(embed), 0, "64", 1, 65536, NULL, "embedding width (text)"},
    {"model", "hidden", CFG_INT, F(hidden), 0, "256", 1, 65536, NULL, "LSTM hidden size"},
    {"model", "layers", CFG_INT, F(layers), 0, "2", 1, 16, NULL, "stacked LSTM layers"},
    {"model", "target", CFG_ENUM, F(series_target), 0, "level", 0, 0, kTargets,
     "series: predict the next values (level) or their change from the current one (delta)"},
    {"model", "dropout", CFG_FLOAT, F(dropout), 0, "0", 0, 0.95, NULL,
     "dropout on the output of every LSTM layer but the last"},
    {"model", "layer_norm", CFG_ENUM, F(layer_norm), 0, "false", 0, 0, kBools,
     "layer-normalised LSTM (TFA's LayerNormLSTMCell): gate pre-activations and cell state; CPU"},
    {"model", "bidirectional", CFG_ENUM, F(bidirectional), 0, "false", 0, 0, kBools,
     "classification: a reverse direction per layer (refused for text LMs and forecasting)"},
    {"model", "pool", CFG_ENUM, F(pool), 0, "last", 0, 0, kPools,
     "classification: the top layer's outputs over the valid steps -> one vector"},
    {"model", "stages", CFG_INT, F(stages), 0, "1", 1, 16, NULL,
     "pipeline stages: the layers split over this many ranks (the world is replicas x stages)"},
    {"model", "stage_layers", CFG_STRING, F(stage_layers), S(stage_layers), "", 0, 0, NULL,
     "layers per stage, e.g. 3,1 (empty: an even split)"},
    {"model", "stage_split", CFG_ENUM, F(stage_split), 0, "auto", 0, 0, kStageSplits,
     "pipeline: whole layers per stage, balanced (each stage's first input projection split "
     "by rows with the stage below, estimated work balanced per phase; CPU), or auto: "
     "balanced where it runs (CPU, no layer_norm), else layers"},
    {"optim", "algo", CFG_ENUM, F(optim.algo), 0, "adamw", 0, 0, kAlgos, "optimizer"},
    {"optim", "lr", CFG_FLOAT, F(optim.lr), 0, "0.002", 0, 10, NULL, "peak learning rate"},
    {"optim", "weight_decay", CFG_FLOAT, F(optim.weight_decay), 0, "0", 0, 1, NULL,
     "AdamW: decoupled decay; SGD: L2 added to the gradient"},
    {"optim", "beta1", CFG_FLOAT, F(optim.beta1), 0, "0.9", 0, 0.99999, NULL, "AdamW beta1"},
    {"optim", "beta2", CFG_FLOAT, F(optim.beta2), 0, "0.999", 0, 0.999999, NULL, "AdamW beta2"},
    /* eps = 0 is refused: a parameter whose gradient has always been 0 (an unseen token's
     * embedding row) would be updated by 0/0 = NaN at the first step. */
    {"optim", "eps", CFG_FLOAT, F(optim.eps), 0, "1e-08", 1e-30, 1, NULL,
     "AdamW epsilon (> 0)"},
    {"optim", "momentum", CFG_FLOAT, F(optim.momentum), 0, "0.9", 0, 0.9999, NULL, "SGD momentum"},
    {"optim", "warmup", CFG_LONG, F(optim.warmup_steps), 0, "0", 0, 1e12, NULL,
     "linear warmup steps (may exceed train.steps)"},
    {"optim", "schedule", CFG_ENUM, F(optim.schedule), 0, "cosine", 0, 0, kSchedules,
     "after warmup: cosine decay to 0 at train.steps, constant, or plateau (constant, cut by "
     "optim.plateau_factor when val_loss stops improving)"},
    {"optim", "plateau_factor", CFG_DOUBLE, F(plateau_factor), 0, "0.5", 1e-6, 0.999999, NULL,
     "plateau schedule: multiply the learning rate by this ..."},
    {"optim", "plateau_patience", CFG_LONG, F(plateau_patience), 0, "3", 1, 1e9, NULL,
     "... after this many evaluations without a new best val_loss"},
    {"optim", "clip_norm", CFG_FLOAT, F(optim.clip_norm), 0, "1", 0, 1e6, NULL,
     "global gradient-norm clip (0: off)"},
    {"optim", "grad_accum", CFG_INT, F(grad_accum), 0, "1", 1, 65536, NULL,
     "micro-batches summed into each step"},
    {"train", "steps", CFG_LONG, F(steps), 0, "1000", 1, 1e12, NULL, "optimizer steps"},
    {"train", "seed", CFG_U64, F(seed), 0, "1", 0, 0, NULL,
     "seed of initialisation, shuffling and dropout (same seed: bitwise same run)"},
    {"train", "device", CFG_ENUM, F(device), 0, "auto", 0, 0, kDevices,
     "compute backend; auto: CUDA when a GPU is usable, else the CPU"},
    {"train", "precision", CFG_ENUM, F(precision), 0, "fp32", 0, 0, kPrecisions,
     "fp32 (CPU and GPU, no TF32), tf32, or mixed fp16/bf16 (GPU; fp32 master weights)"},
    {"train", "comm_timeout_s", CFG_DOUBLE, F(comm_timeout_s), 0, "600", 1, 86400, NULL,
     "a gradient all-reduce or a transfer between stages unfinished after this long fails the job"},
    {"train", "schedule", CFG_ENUM, F(pipe_schedule), 0, "wavefront", 0, 0, kPipeSchedules,
     "pipeline schedule (model.stages > 1): time-chunk wavefront, fill-drain, or 1F1B"},
    {"train", "micro_batches", CFG_INT, F(micro_batches), 0, "1", 1, 65536, NULL,
     "pipeline: column micro-batches per window (data.batch_size a multiple of it)"},
    {"train", "time_chunks", CFG_INT, F(time_chunks), 0, "0", 0, 65536, NULL,
     "pipeline: time chunks per window (data.seq_len a multiple; 0: automatic)"},
    {"train", "run_dir", CFG_STRING, F(run_dir), S(run_dir), "runs/default", 0, 0, NULL,
     "checkpoints, metrics.jsonl"},
    {"train", "checkpoint_every", CFG_LONG, F(checkpoint_every), 0, "1000", 0, 1e12, NULL,
     "steps between checkpoints (0: only at the end)"},
    {"train", "eval_every", CFG_LONG, F(eval_every), 0, "500", 0, 1e12, NULL,
     "steps between validation passes (0: only at the end)"},
    {"train", "log_every", CFG_LONG, F(log_every), 0, "10", 0, 1e12, NULL,
     "steps between progress lines and metrics records"},
    {"train", "early_stop_patience", CFG_LONG, F(early_stop_patience), 0, "0", 0, 1e9, NULL,
     "stop after this many evaluations without a new best val_loss (0: off)"},
    {"train", "early_stop_min_delta", CFG_DOUBLE, F(early_stop_min_delta), 0, "0", 0, 1e9, NULL,
     "a new best val_loss must be lower than the best so far by more than this"},
    {"train", "keep_checkpoints", CFG_LONG, F(keep_checkpoints), 0, "-1", -1, 1e9, NULL,
     "step-N checkpoints kept, oldest deleted (-1: all; 0: only latest's); never the file "
     "latest or best is"},
    {"train", "sample_every", CFG_LONG, F(sample_every), 0, "0", 0, 1e12, NULL,
     "text models: steps between samples to samples.txt and TensorBoard (0: off)"},
    {"train", "sample_length", CFG_INT, F(sample_length), 0, "200", 1, 65536, NULL,
     "bytes sampled after the prime (greedy and temperature 0.8)"},
    {"train", "sample_prime", CFG_STRING, F(sample_prime), S(sample_prime), "", 0, 0, NULL,
     "text the samples start from (empty: a newline, as lstmd sample)"},
    {"train", "threads", CFG_INT, F(threads), 0, "0", 0, 1024, NULL,
     "threads per rank the batch is split across (0: cores / ranks on the node)"},
    {"train", "bucket_mb", CFG_DOUBLE, F(bucket_mb), 0, "4", 0.01, 1024, NULL,
     "gradient all-reduce bucket size (MiB); buckets go out while backward runs"},
    {"prune", "target_sparsity", CFG_FLOAT, F(prune.target_sparsity), 0, "0", 0, 0.999, NULL,
     "magnitude pruning: final fraction of zeros in each pruned tensor (0: off)"},
    {"prune", "begin_step", CFG_LONG, F(prune.begin_step), 0, "0", 0, 1e12, NULL,
     "pruning: first step of the polynomial ramp"},
    {"prune", "end_step", CFG_LONG, F(prune.end_step), 0, "1000", 1, 1e12, NULL,
     "pruning: step at which the ramp reaches target_sparsity (> begin_step)"},
    {"prune", "frequency", CFG_LONG, F(prune.frequency), 0, "100", 1, 1e12, NULL,
     "pruning: steps between mask updates within [begin_step, end_step]"},
    /* power 0: (1 - p)^0 is 1 for every p (C's pow(0, 0) too), so nothing would ever be pruned */
    {"prune", "power", CFG_FLOAT, F(prune.power), 0, "3", 0.001, 100, NULL,
     "pruning: exponent of the ramp, target + (0 - target)(1 - p)^power"},
    {"prune", "tensors", CFG_STRING, F(prune.tensors), S(prune.tensors), "", 0, 0, NULL,
     "pruned tensors, comma-separated (empty: every lstm.weight_* and head.weight)"},
    {"distill", "teacher", CFG_STRING, F(distill_teacher), S(distill_teacher), "", 0, 0, NULL,
     "knowledge distillation: the teacher's checkpoint (same vocabulary or series inputs)"},
    {"distill", "temperature", CFG_FLOAT, F(distill_temperature), 0, "2", 0.01, 100, NULL,
     "distillation: softmax temperature T of the soft targets (text)"},
    {"distill", "alpha", CFG_FLOAT, F(distill_alpha), 0, "0.5", 0, 1, NULL,
     "distillation: weight of the teacher term; 1 - alpha weighs the data's loss"},
    /* Read by lstmd serve's scheduler only (daemon/sched.h); lstmd train ignores them. */
    {"resources", "ranks", CFG_INT, F(res_ranks), 0, "0", 0, 65536, NULL,
     "lstmd serve: ranks the job runs on (0: the daemon's whole world)"},
    {"resources", "priority", CFG_INT, F(res_priority), 0, "0", -1000000, 1000000, NULL,
     "lstmd serve: higher runs first, and may preempt lower (FIFO within a priority)"},
    {"resources", "time_limit_s", CFG_DOUBLE, F(res_time_limit_s), 0, "0", 0, 1e9, NULL,
     "lstmd serve: running time after which the job is checkpointed and FAILED (0: none); lets "
     "it be backfilled"},
    {"resources", "preemptible", CFG_INT, F(res_preemptible), 0, "1", 0, 1, NULL,
     "lstmd serve: 0 = never checkpointed and requeued for a higher-priority job"},
};
#undef F
#undef S
enum { kKeyCount = sizeof kKeys / sizeof kKeys[0] };

static const struct cfg_key *find_key(const char *section, const char *key) {
  for (int i = 0; i < kKeyCount; i++)
    if (!strcmp(kKeys[i].section, section) && !strcmp(kKeys[i].key, key)) return &kKeys[i];
  return NULL;
}

/* Parses `value` for key k into c. On failure writes the reason into err. */
static int set_value(struct lstmd_train_config *c, const struct cfg_key *k, const char *value,
                     char *err, size_t errlen) {
  char *field = (char *)c + k->offset, *end;
  errno = 0;
  switch (k->type) {
    case CFG_STRING:
      if (strlen(value) >= k->size) {
        snprintf(err, errlen, "value is longer than %zu bytes", k->size - 1);
        return LSTMD_ECONFIG;
      }
      /* The config reaches the other ranks and checkpoints as JSON, which holds UTF-8 only. */
      if (!lstmd_utf8_valid(value)) {
        snprintf(err, errlen, "value is not valid UTF-8");
        return LSTMD_ECONFIG;
      }
      strcpy(field, value);
      return LSTMD_OK;
    case CFG_ENUM:
      for (int i = 0; k->choices[i]; i++)
        if (!strcmp(k->choices[i], value)) {
          *(int *)field = i;
          return LSTMD_OK;
        }
      snprintf(err, errlen, "'%s' is not one of", value);
      for (int i = 0; k->choices[i]; i++)
        snprintf(err + strlen(err), errlen - strlen(err), " %s", k->choices[i]);
      return LSTMD_ECONFIG;
    case CFG_U64: {
      unsigned long long v = strtoull(value, &end, 10);
      if (!*value || *end || errno || value[0] == '-') break;
      *(uint64_t *)field = v;
      return LSTMD_OK;
    }
    case CFG_INT:
    case CFG_LONG: {
      long long v = strtoll(value, &end, 10);
      if (!*value || *end || errno) break;
      if (v < k->min || v > k->max) {
        snprintf(err, errlen, "%lld is out of range [%.0f, %.0f]", v, k->min, k->max);
        return LSTMD_ECONFIG;
      }
      if (k->type == CFG_INT) *(int *)field = (int)v;
      else *(long *)field = (long)v;
      return LSTMD_OK;
    }
    case CFG_FLOAT:
    case CFG_DOUBLE: {
      double v = strtod(value, &end);
      if (!*value || *end || errno || !isfinite(v)) break;
      if (v < k->min || v > k->max) {
        snprintf(err, errlen, "%g is out of range [%g, %g]", v, k->min, k->max);
        return LSTMD_ECONFIG;
      }
      if (k->type == CFG_FLOAT) *(float *)field = (float)v;
      else *(double *)field = v;
      return LSTMD_OK;
    }
  }
  snprintf(err, errlen, "'%s' is not a valid %s", value,
           k->type == CFG_FLOAT || k->type == CFG_DOUBLE ? "number"
           : k->type == CFG_U64                        ? "unsigned integer"
                                                       : "integer");
  return LSTMD_ECONFIG;
}

static void format_value(const struct lstmd_train_config *c, const struct cfg_key *k, char *buf,
                         size_t n);

static int differs(const struct lstmd_train_config *a, const struct lstmd_train_config *b,
                   const struct cfg_key *k) {
  char x[1200], y[1200];
  format_value(a, k, x, sizeof x);
  format_value(b, k, y, sizeof y);
  return strcmp(x, y) != 0;
}

int lstmd_config_inert_keys(const struct lstmd_train_config *c, char *out, size_t n) {
  static const struct { const char *section, *on; } kSwitched[] = {
      {"distill", "teacher"}, {"prune", "target_sparsity"}};
  struct lstmd_train_config *d = malloc(sizeof *d);
  int count = 0;
  size_t used = 0;
  if (n) out[0] = '\0';
  if (!d) return 0;
  lstmd_config_defaults(d);
  for (size_t s = 0; s < sizeof kSwitched / sizeof kSwitched[0]; s++) {
    const struct cfg_key *on = find_key(kSwitched[s].section, kSwitched[s].on);
    if (differs(c, d, on)) continue; /* switched on: its keys act */
    char keys[512] = "";
    int nk = 0;
    for (int i = 0; i < kKeyCount; i++) {
      const struct cfg_key *k = &kKeys[i];
      if (k == on || strcmp(k->section, on->section) || !differs(c, d, k)) continue;
      const size_t len = strlen(keys);
      snprintf(keys + len, sizeof keys - len, "%s%s.%s", nk++ ? ", " : "", k->section, k->key);
    }
    if (nk && used < n)
      used += (size_t)snprintf(out + used, n - used, "%s%s %s no effect without %s.%s",
                               used ? "; " : "", keys, nk == 1 ? "has" : "have", on->section,
                               on->key);
    count += nk;
  }
  /* The pipeline's keys are in two sections and act only with model.stages > 1 (a user who set
   * train.micro_batches=4 on a data-parallel run got nothing, without a word); stage_layers is
   * refused there instead (lstmd_stage_layer_counts). */
  static const struct { const char *section, *key; } kPipe[] = {
      {"model", "stage_split"}, {"train", "schedule"}, {"train", "micro_batches"},
      {"train", "time_chunks"}};
  char keys[256] = "";
  int nk = 0;
  for (size_t i = 0; c->stages <= 1 && i < sizeof kPipe / sizeof kPipe[0]; i++) {
    const struct cfg_key *k = find_key(kPipe[i].section, kPipe[i].key);
    if (!differs(c, d, k)) continue;
    const size_t len = strlen(keys);
    snprintf(keys + len, sizeof keys - len, "%s%s.%s", nk++ ? ", " : "", k->section, k->key);
  }
  if (nk && used < n)
    used += (size_t)snprintf(out + used, n - used, "%s%s %s no effect without model.stages > 1",
                             used ? "; " : "", keys, nk == 1 ? "has" : "have");
  count += nk;
  free(d);
  return count;
}

static void format_value(const struct lstmd_train_config *c, const struct cfg_key *k, char *buf,
                         size_t n) {
  const char *field = (const char *)c + k->offset;
  switch (k->type) {
    case CFG_STRING: snprintf(buf, n, "%s", field); break;
    case CFG_ENUM: snprintf(buf, n, "%s", k->choices[*(const int *)field]); break;
    case CFG_U64: snprintf(buf, n, "%" PRIu64, *(const uint64_t *)field); break;
    case CFG_INT: snprintf(buf, n, "%d", *(const int *)field); break;
    case CFG_LONG: snprintf(buf, n, "%ld", *(const long *)field); break;
    case CFG_FLOAT: lstmd_format_shortest(*(const float *)field, 1, buf, n); break;
    case CFG_DOUBLE: lstmd_format_shortest(*(const double *)field, 0, buf, n); break;
  }
}

void lstmd_config_defaults(struct lstmd_train_config *c) {
  char err[256];
  memset(c, 0, sizeof *c);
  for (int i = 0; i < kKeyCount; i++) set_value(c, &kKeys[i], kKeys[i].def, err, sizeof err);
}

int lstmd_config_set_key(struct lstmd_train_config *c, const char *dotted, const char *value,
                         char *err, size_t errlen) {
  char section[64];
  const char *dot = strchr(dotted, '.');
  size_t n = dot ? (size_t)(dot - dotted) : 0;
  const struct cfg_key *k = NULL;
  if (dot && n < sizeof section) {
    memcpy(section, dotted, n);
    section[n] = '\0';
    k = find_key(section, dot + 1);
  }
  if (!k) {
    snprintf(err, errlen, "unknown config key '%s' (lstmd train --help lists them)", dotted);
    return LSTMD_ECONFIG;
  }
  char why[384];
  if (set_value(c, k, value, why, sizeof why) != 0) {
    snprintf(err, errlen, "%s: %s", dotted, why);
    return LSTMD_ECONFIG;
  }
  return LSTMD_OK;
}

/* The section that has a key of that name, if one does (NULL: none): for the INI reader's
 * message on a key before any [section] (config_load.c). */
const char *lstmd_config_key_section(const char *name) {
  const char *home = NULL;
  for (int i = 0; i < kKeyCount && !home; i++)
    if (!strcmp(kKeys[i].key, name)) home = kKeys[i].section;
  return home;
}

/* A text value as an INI file would need it: in quotes with escapes (unquote's, config_load.c)
 * when it has spaces at either end, a control character, a quote, a backslash, a ' #' or ' ;',
 * else bare. */
static void print_text(FILE *out, const char *v) {
  const size_t n = strlen(v);
  int quote = n && (v[0] == ' ' || v[n - 1] == ' ' || v[0] == '"');
  for (size_t i = 0; i < n && !quote; i++)
    quote = (unsigned char)v[i] < 32 || v[i] == '\\' || v[i] == '"' ||
            ((v[i] == '#' || v[i] == ';') && i && (v[i - 1] == ' ' || v[i - 1] == '\t'));
  if (!quote) {
    fputs(v, out);
    return;
  }
  fputc('"', out);
  for (size_t i = 0; i < n; i++) {
    const char ch = v[i];
    if (ch == '\n') fputs("\\n", out);
    else if (ch == '\t') fputs("\\t", out);
    else if (ch == '"' || ch == '\\') fprintf(out, "\\%c", ch);
    else fputc(ch, out);
  }
  fputc('"', out);
}

void lstmd_config_print(const struct lstmd_train_config *c, FILE *out) {
  char buf[1100];
  for (int i = 0; i < kKeyCount; i++) {
    format_value(c, &kKeys[i], buf, sizeof buf);
    fprintf(out, "  %s.%s = ", kKeys[i].section, kKeys[i].key);
    if (kKeys[i].type == CFG_STRING) print_text(out, buf);
    else fputs(buf, out);
    fputc('\n', out);
  }
}

char *lstmd_config_to_json(const struct lstmd_train_config *c) {
  json_t *root = json_object();
  char buf[1100], name[128];
  int ok = root != NULL;
  for (int i = 0; ok && i < kKeyCount; i++) {
    format_value(c, &kKeys[i], buf, sizeof buf);
    snprintf(name, sizeof name, "%s.%s", kKeys[i].section, kKeys[i].key);
    /* json_string refuses text that is not UTF-8: fail rather than leave the key out (a rank
     * loading this JSON would silently use the default). */
    ok = json_object_set_new(root, name, json_string(buf)) == 0;
  }
  char *s = ok ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  return s;
}

void lstmd_config_help(FILE *out) {
  fprintf(out, "Config keys (INI [section] key = value, or --set section.key=value):\n");
  for (int i = 0; i < kKeyCount; i++) {
    const struct cfg_key *k = &kKeys[i];
    char range[160] = "";
    if (k->type == CFG_ENUM) {
      for (int j = 0; k->choices[j]; j++)
        snprintf(range + strlen(range), sizeof range - strlen(range), "%s%s", j ? "|" : "",
                 k->choices[j]);
    } else if (k->type == CFG_INT || k->type == CFG_LONG) {
      snprintf(range, sizeof range, "integer %.0f..%.0f", k->min, k->max);
    } else if (k->type == CFG_FLOAT || k->type == CFG_DOUBLE) {
      snprintf(range, sizeof range, "number %g..%g", k->min, k->max);
    } else {
      snprintf(range, sizeof range, k->type == CFG_U64 ? "unsigned integer" : "text");
    }
    char name[64];
    snprintf(name, sizeof name, "%s.%s", k->section, k->key);
    fprintf(out, "  %-26s %-25s default %-13s %s\n", name, range, k->def[0] ? k->def : "(none)",
            k->help);
  }
}
