/* engine_gpu_prune.c — pruning on the GPU engine (engine.h's prune op; engine_gpu.c, 6.): the
 * masks live on the device as 0/1 floats and multiply the pruned tensors after every update; at
 * a pruning step the host recomputes them from the device's parameters, as on the CPU. */
#include <stdlib.h>

#include "engine_gpu_internal.h"
#include "kernels/check.h"
#include "kernels/cuda/dense_cuda.h"

/* The masks, as 0/1 floats, to the device (see 6.). */
static int upload_masks(struct gpu_engine *g, const struct lstmd_prune *pr) {
  const struct lstmd_model *m = g->base.model;
  size_t total = 0;
  for (int i = 0; i < pr->n; i++) total += m->tensors[pr->tensor[i]].count;
  if (!g->masks && cudaMalloc((void **)&g->masks, total * sizeof(float)) != cudaSuccess) {
    cudaGetLastError(); /* (not dev_alloc: its legacy-stream memset could land after the copy) */
    g->masks = NULL;
    lstmd_errorf("CUDA: cannot allocate %.1f MiB for the pruning masks", (double)total * 4 / 1048576.0);
    return LSTMD_ENOMEM;
  }
  float *host = NULL;
  LSTMD_CHECK_CUDA(cudaMallocHost((void **)&host, total * sizeof(float)));
  for (size_t i = 0, at = 0; i < (size_t)pr->n; at += m->tensors[pr->tensor[i]].count, i++)
    for (size_t j = 0; j < m->tensors[pr->tensor[i]].count; j++) host[at + j] = pr->mask[i][j];
  const int rc = LSTMD_CUDA_FAILED(cudaMemcpyAsync(g->masks, host, total * sizeof(float),
                                                   cudaMemcpyHostToDevice, g->compute)) ||
                         LSTMD_CUDA_FAILED(cudaStreamSynchronize(g->compute))
                     ? LSTMD_ECUDA
                     : LSTMD_OK;
  cudaFreeHost(host);
  g->masks_version = 1;
  return rc;
}

static int apply_masks(struct gpu_engine *g, const struct lstmd_prune *pr) {
  const struct lstmd_model *m = g->base.model;
  size_t at = 0;
  for (int i = 0; i < pr->n; i++) {
    const struct lstmd_tensor *t = &m->tensors[pr->tensor[i]];
    LSTMD_TRY(lstmd_cuda_mul(t->count, g->params + t->offset, LSTMD_DT_F32, g->masks + at, g->compute));
    at += t->count;
  }
  return LSTMD_OK;
}

/* lstmd_prune_after_step on the device's parameters (see 6.). */
int lstmd_gpu_prune(struct lstmd_engine *e, struct lstmd_prune *pr, long step, int *recomputed) {
  struct gpu_engine *g = gpu_of(e);
  const struct lstmd_model *m = e->model;
  *recomputed = 0;
  if (!g->masks_version) LSTMD_TRY(upload_masks(g, pr)); /* all ones, or a resumed run's */
  LSTMD_TRY(apply_masks(g, pr));
  if (lstmd_prune_due(&pr->cfg, step)) {
    LSTMD_CHECK_CUDA(cudaMemcpyAsync(m->params, g->params, m->n_params * sizeof(float),
                                     cudaMemcpyDeviceToHost, g->compute));
    LSTMD_CHECK_CUDA(cudaStreamSynchronize(g->compute));
    lstmd_prune_update(pr, m, m->params, lstmd_prune_sparsity_at(&pr->cfg, step));
    LSTMD_TRY(upload_masks(g, pr));
    LSTMD_TRY(apply_masks(g, pr));
    *recomputed = 1;
  }
  return lstmd_cuda_model_load_weights(g->cm, g->params);
}
