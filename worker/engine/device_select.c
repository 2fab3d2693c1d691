/* device_select.c — train.device = auto | cpu | cuda, and the rank → GPU mapping (see
 * device_select.h). The probe is the only part that touches CUDA, through the GPU module
 * (gpu_backend.h), which it loads. */
#define _GNU_SOURCE
#include "device_select.h"

#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/status.h"
#include "worker/train/train_config.h"
#include "gpu_backend.h"

void lstmd_device_probe_run(struct lstmd_device_probe *p) {
  memset(p, 0, sizeof *p);
  const struct lstmd_gpu_backend *gpu = lstmd_gpu_backend();
  if (gpu) {
    p->backend_built = 1;
    p->count = gpu->probe(p->why, sizeof p->why);
  } else {
    snprintf(p->why, sizeof p->why, "GPU backend not loaded: %s", lstmd_gpu_backend_why());
  }
}

int lstmd_device_decide(int requested, const struct lstmd_device_probe *p, int *backend,
                        char *msg, size_t n) {
  msg[0] = '\0';
  const int usable = p->backend_built && p->count > 0;
  switch (requested) {
    case LSTMD_DEVICE_CPU:
      *backend = LSTMD_DEVICE_CPU;
      return LSTMD_OK;
    case LSTMD_DEVICE_CUDA:
      *backend = usable ? LSTMD_DEVICE_CUDA : LSTMD_DEVICE_CPU;
      if (usable) return LSTMD_OK;
      snprintf(msg, n, "train.device=cuda, but %s%s; use train.device=auto or cpu to train on "
               "the CPU", p->backend_built ? "there is no usable CUDA device: " : "", p->why);
      return LSTMD_EUNSUPPORTED;
    default: /* auto */
      *backend = usable ? LSTMD_DEVICE_CUDA : LSTMD_DEVICE_CPU;
      if (!usable && p->backend_built)
        snprintf(msg, n, "device auto: no usable CUDA device (%s); using the CPU backend", p->why);
      else if (!usable)
        snprintf(msg, n, "device auto: %s; using the CPU backend", p->why);
      return LSTMD_OK;
  }
}

int lstmd_gpu_for_rank(int visible, int local_rank, int local_size, char *warn, size_t n) {
  warn[0] = '\0';
  if (visible <= 0) return -1;
  if (visible == 1) {
    if (local_size > 1)
      snprintf(warn, n, "%d ranks on this node each see the same single GPU (device 0); they "
               "share it (set --gpus-per-task=1 under Slurm, or CUDA_VISIBLE_DEVICES per rank)",
               local_size);
    return 0;
  }
  if (local_size > visible)
    snprintf(warn, n, "%d ranks on this node but %d visible GPUs: ranks share devices (local rank "
             "mod %d)", local_size, visible, visible);
  return (local_rank < 0 ? 0 : local_rank) % visible;
}

int lstmd_device_choose(int requested, struct lstmd_comm *comm, int *backend, int *gpu) {
  const int rank = comm ? lstmd_comm_rank(comm) : 0, world = comm ? lstmd_comm_size(comm) : 1;
  struct lstmd_device_probe p;
  *gpu = -1;
  *backend = LSTMD_DEVICE_CPU;
  if (requested != LSTMD_DEVICE_CPU) lstmd_device_probe_run(&p);
  else memset(&p, 0, sizeof p);
  char msg[512];
  int mine = LSTMD_DEVICE_CPU;
  int rc = lstmd_device_decide(requested, &p, &mine, msg, sizeof msg);
  /* Agreement: CUDA only if every rank can; [0] = ranks without a device, [1] = failures. */
  double votes[2] = {mine == LSTMD_DEVICE_CUDA || requested == LSTMD_DEVICE_CPU ? 0.0 : 1.0,
                     rc ? 1.0 : 0.0};
  if (world > 1) LSTMD_TRY(lstmd_comm_allreduce_sum_f64(comm, votes, 2));
  if (rc) { /* said by each failing rank without its name: on a launcher's ranks lstmd_run_setup
             * holds the set-up's lines and prints each once, naming the ranks unless all said it
             * (lstmd_comm_messages_once; 6 identical lines on 6 ranks before) */
    lstmd_errorf("%s", msg);
    return rc;
  }
  if (votes[1] > 0.0) return LSTMD_ECONFIG; /* another rank said why */
  if (requested == LSTMD_DEVICE_CPU) return LSTMD_OK;
  if (votes[0] > 0.0) { /* auto, and some rank has no device: everyone on the CPU */
    if (rank == 0 && msg[0]) lstmd_errorf("%s", msg);
    else if (rank == 0)
      lstmd_errorf("device auto: %.0f of %d ranks have no usable CUDA device; using the CPU "
                   "backend on every rank", votes[0], world);
    return LSTMD_OK;
  }
  char warn[256];
  const int local_rank = comm ? lstmd_comm_local_rank(comm) : 0;
  const int local_size = comm ? lstmd_comm_local_size(comm) : 1;
  *gpu = lstmd_gpu_for_rank(p.count, local_rank, local_size, warn, sizeof warn);
  if (warn[0] && local_rank == 0) lstmd_errorf("warning: %s", warn);
  *backend = LSTMD_DEVICE_CUDA;
  return LSTMD_OK;
}
