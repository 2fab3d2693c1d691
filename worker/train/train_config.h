/* train_config.h — the effective configuration of a training run as plain values. daemon/config.c
 * owns the table that parses, validates, documents and prints these fields. */
#ifndef LSTMD_TRAIN_CONFIG_H
#define LSTMD_TRAIN_CONFIG_H

#include <stdint.h>

#include "worker/model/optim.h"

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
  /* [model] */
  int embed, hidden, layers;
  float dropout;
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
  double comm_timeout_s; /* GPU: a gradient all-reduce unfinished after this long fails the job */
  /* Not in the config table: from the command line (`lstmd train --trace FILE`). */
  const char *trace_path; /* Chrome trace of the steps, or NULL */
};

#endif
