/* data_parallel.h — one step of data-parallel training on the CPU backend.
 *
 * A rank's batch of B windows is split into slices, one per thread; each thread runs forward and
 * backward on its slice with single-threaded BLAS into its own gradient buffer. As backward
 * finishes a suffix of the flat gradient buffer in every slice (head first, then the LSTM
 * layers from the top, then the embedding), the buckets inside it are summed over the slices
 * and handed to the reducer thread, whose all-reduce over the ranks overlaps the rest of
 * backward. The optimizer then finds the global gradient sum in model->grads on every rank.
 *
 * Batch columns are global: rank r's slice starting at local column j holds global columns
 * r·B + j..., which is what dropout masks and carried state are keyed on, so N ranks with
 * batch b compute what one rank with batch N·b computes. */
#ifndef LSTMD_DATA_PARALLEL_H
#define LSTMD_DATA_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

struct lstmd_comm;
struct lstmd_dp;

struct lstmd_dp_config {
  int seq_len, batch;   /* T and this rank's B */
  int threads;          /* threads of this rank (0: the node's cores / ranks on the node) */
  int carry_state;      /* stream order: state carried between windows */
  float dropout;
  uint64_t seed;
  double bucket_mb;     /* gradient bucket size */
};

/* comm may be NULL (one rank). The model must outlive dp. */
int lstmd_dp_create(struct lstmd_model *m, const struct lstmd_dp_config *cfg,
                    struct lstmd_comm *comm, struct lstmd_dp **out);
void lstmd_dp_destroy(struct lstmd_dp *dp);

int lstmd_dp_threads(const struct lstmd_dp *dp);
/* BLAS threads each slice's calls use. */
int lstmd_dp_blas_threads(const struct lstmd_dp *dp);
/* Zeroes the carried state of every stream of this rank. */
void lstmd_dp_reset_state(struct lstmd_dp *dp);

/* Forward + backward of this rank's batch [T, B]. first: gradients start from zero; last: the step's gradients
 * are then summed over slices and ranks into model->grads. Returns the summed loss of this
 * rank's batch in *loss_sum, and in *comm_wait_s the all-reduce time backward did not hide. */
int lstmd_dp_micro_step(struct lstmd_dp *dp, const struct lstmd_batch *batch, float grad_scale,
                        uint64_t micro_step, int first, int last, double *loss_sum,
                        double *comm_wait_s);

/* Records forward, backward (per slice thread) and all-reduce buckets on the timeline. */
struct lstmd_trace;
void lstmd_dp_set_trace(struct lstmd_dp *dp, struct lstmd_trace *trace);

/* Carried state of all ranks as [L, N·B, H] (collective; the result is complete on rank 0). */
int lstmd_dp_gather_state(struct lstmd_dp *dp, float *h, float *c);
/* Sets this rank's columns from a global [L, N·B, H] state. */
void lstmd_dp_set_state(struct lstmd_dp *dp, const float *h, const float *c);

#endif
