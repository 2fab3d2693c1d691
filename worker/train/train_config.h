/* train_config.h — the effective configuration of a training run as plain values. daemon/config.c
 * owns the table that parses, validates, documents and prints these fields. */
#ifndef LSTMD_TRAIN_CONFIG_H
#define LSTMD_TRAIN_CONFIG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "worker/model/optim.h"
#include "worker/model/prune.h"

enum lstmd_device { LSTMD_DEVICE_CPU = 0, LSTMD_DEVICE_CUDA = 1, LSTMD_DEVICE_AUTO = 2 };
enum lstmd_precision {
  LSTMD_PRECISION_FP32 = 0, /* fp32 math, TF32 off */
  LSTMD_PRECISION_FP16 = 1, /* fp16 compute, fp32 master weights, dynamic loss scaling */
  LSTMD_PRECISION_BF16 = 2, /* bf16 compute, fp32 master weights */
  LSTMD_PRECISION_TF32 = 3  /* fp32 storage, TF32 tensor-core math */
};

struct lstmd_train_config {
  /* [data] */
  char data_path[1024];
  int seq_len;    /* T: inputs per window */
  int batch_size; /* B: windows per step per rank */
  int order;      /* enum lstmd_order */
  int window_norm; /* series: enum lstmd_window_norm (worker/data/series_tf.h) */
  /* [model] */
  int embed, hidden, layers;
  int series_target; /* series: enum lstmd_series_target (model.target) */
  float dropout;
  int layer_norm;          /* model.layer_norm: 1 = layer-normalised LSTM (0 false, 1 true) */
  int bidirectional;       /* model.bidirectional: classification only (0 false, 1 true) */
  int pool;                /* model.pool: enum lstmd_pool_kind (worker/model/model.h) */
  int stages;              /* S: pipeline stages (1: data parallel only) */
  char stage_layers[64];   /* layers per stage, "3,1"; "": an even split */
  int stage_split;         /* model.stage_split: enum lstmd_stage_split (engine/engine.h) */
  /* [optim] */
  struct lstmd_optim_config optim; /* total_steps is filled from train.steps */
  int grad_accum;
  /* [train] */
  long steps;
  uint64_t seed;
  int device;    /* enum lstmd_device (as configured; auto is resolved at set-up) */
  int precision; /* enum lstmd_precision */
  char run_dir[1024];
  long checkpoint_every, eval_every, log_every; /* steps; 0 disables periodic ones */
  int threads;   /* threads per rank the batch is split across; 0 = all cores */
  double bucket_mb; /* gradient all-reduce bucket size */
  double comm_timeout_s; /* a gradient all-reduce (and, with stages, a transfer between stages)
                          * unfinished after this long fails the job */
  int pipe_schedule;     /* train.schedule: enum lstmd_pipe_kind (wavefront, gpipe, 1f1b) */
  int micro_batches;     /* M: column micro-batches per window (stages > 1) */
  int time_chunks;       /* K: time chunks per window (stages > 1); 0: automatic */
  /* Training you can leave alone (worker/train/val_watch.h): decided from the validation
   * losses, the same on every rank, their state in checkpoints. */
  long early_stop_patience;   /* evaluations without a new best val_loss before stopping; 0: off */
  double early_stop_min_delta; /* a new best is below the best so far by more than this */
  long keep_checkpoints;      /* step-<N> files kept, newest first; -1: all (latest's and best's
                               * are never deleted) */
  double plateau_factor;      /* optim.schedule = plateau: the lr is multiplied by this ... */
  long plateau_patience;      /* ... after this many evaluations without a new best */
  long sample_every;          /* steps between text samples (rank 0, samples.txt); 0: off */
  int sample_length;          /* bytes sampled after the prime */
  char sample_prime[256];     /* "": a newline (lstmd sample's default) */
  /* [prune] */
  struct lstmd_prune_config prune; /* target_sparsity 0: off */
  /* [distill] */
  char distill_teacher[1024]; /* teacher checkpoint; "": off */
  float distill_temperature;  /* T of the soft targets */
  float distill_alpha;        /* weight of the teacher's term (1 − alpha: the data's) */
  /* Not in the config table: from the command line (`lstmd train --trace FILE`). */
  const char *trace_path; /* Chrome trace of the steps, or NULL */
  /* [resources]: read by `lstmd serve`'s scheduler only (daemon/sched.h); lstmd train ignores them */
  int res_ranks;         /* ranks the job runs on; 0 = the daemon's whole world */
  int res_priority;      /* higher first */
  double res_time_limit_s; /* 0: none; else checkpointed and FAILED past it, and used for backfill */
  int res_preemptible;   /* 0: never checkpointed and requeued for a higher priority */
};

/* The layers of each of `stages` stages for a model of `layers`: model.stage_layers ("3,1": one
 * count ≥ 1 per stage, summing to layers) or, when it is empty, an even split with the first
 * layers mod stages stages one layer larger. Returns 0, or -1 with the reason in err (naming
 * model.stage_layers or model.stages). */
static inline int lstmd_stage_layer_counts(const char *text, int stages, int layers, int *counts,
                                           char *err, size_t n) {
  if (stages < 1 || stages > layers) {
    snprintf(err, n, "model.stages: %d stage%s for %d layer%s (each stage holds at least one "
             "layer)", stages, stages == 1 ? "" : "s", layers, layers == 1 ? "" : "s");
    return -1;
  }
  if (!text[0]) {
    for (int s = 0; s < stages; s++) counts[s] = layers / stages + (s < layers % stages);
    return 0;
  }
  const char *p = text;
  long long sum = 0; /* of at most 16 counts, each capped at 2^30: no overflow */
  int k = 0;
  for (;;) {
    char *end;
    const long v = strtol(p, &end, 10);
    if (end == p || v < 1) {
      snprintf(err, n, "model.stage_layers: '%s' must be %d comma-separated layer counts >= 1",
               text, stages);
      return -1;
    }
    if (k == stages) {
      snprintf(err, n, "model.stage_layers: '%s' has more than model.stages = %d counts", text,
               stages);
      return -1;
    }
    counts[k++] = v > layers ? layers : (int)v; /* the sum below refuses a count > layers */
    sum += v < (1L << 30) ? v : (1L << 30);
    if (*end == '\0') break;
    if (*end != ',') {
      snprintf(err, n, "model.stage_layers: '%s' must be comma-separated integers", text);
      return -1;
    }
    p = end + 1;
  }
  if (k != stages) {
    snprintf(err, n, "model.stage_layers: '%s' has %d count(s); model.stages is %d", text, k,
             stages);
    return -1;
  }
  if (sum != layers) {
    snprintf(err, n, "model.stage_layers: '%s' adds up to %lld layers; the counts must add up to "
             "model.layers (%d)", text, sum, layers);
    return -1;
  }
  return 0;
}

/* K, the time chunks of a pipelined window: train.time_chunks, or when it is 0, for the
 * wavefront schedule (0) the largest divisor of seq_len that is at most 8·stages (16 at S = 2,
 * 32 at S = 4: a bubble of about 5%, PIPELINE.md §2.3), for gpipe and 1f1b 1. */
static inline int lstmd_effective_time_chunks(const struct lstmd_train_config *c) {
  if (c->time_chunks > 0) return c->time_chunks;
  if (c->pipe_schedule != 0) return 1;
  int k = 8 * c->stages < c->seq_len ? 8 * c->stages : c->seq_len;
  while (c->seq_len % k) k--;
  return k;
}

#endif
