/* device_select.h — which backend a run trains on (train.device = auto | cpu | cuda) and which
 * GPU each rank takes. The decisions are pure functions of what the probe found, so they are
 * unit-tested on machines without a GPU; lstmd_device_choose wraps them with the probe and the
 * agreement between ranks.
 *
 * Rank → GPU: one visible device (Slurm --gpus-per-task=1, or CUDA_VISIBLE_DEVICES=<one id>)
 * → device 0; several → local rank mod the count (mpirun, or a node-wide CUDA_VISIBLE_DEVICES),
 * with a warning when the local ranks outnumber the devices (ranks then share GPUs). */
#ifndef LSTMD_DEVICE_SELECT_H
#define LSTMD_DEVICE_SELECT_H

#include <stddef.h>

struct lstmd_comm;

/* What this process can use. */
struct lstmd_device_probe {
  int backend_built; /* the GPU module and its CUDA libraries loaded (gpu_backend.h) */
  int count;         /* usable CUDA devices (0 when none, whatever the reason) */
  char why[256];     /* when count == 0: the reason, e.g. the cudaGetDeviceCount error */
};

/* Fills *p: backend_built from loading the GPU module, count and why from the CUDA runtime (no
 * GPU, no driver, no CUDA libraries or no module: count 0 and a reason; never an error). */
void lstmd_device_probe_run(struct lstmd_device_probe *p);

/* train.device `requested` (enum lstmd_device) + the probe → *backend (LSTMD_DEVICE_CPU or
 * LSTMD_DEVICE_CUDA). msg gets one line without the "lstmd: " prefix: for auto, why the CPU was
 * chosen (empty when CUDA was); for cuda without a usable device, the error. Returns 0, or
 * LSTMD_EUNSUPPORTED for an explicit cuda without a usable device. */
int lstmd_device_decide(int requested, const struct lstmd_device_probe *p, int *backend,
                        char *msg, size_t n);

/* The CUDA device index of a rank: 0 with one visible device, local_rank mod visible with
 * several; -1 with none. warn gets a line (or "") when local_size > visible. */
int lstmd_gpu_for_rank(int visible, int local_rank, int local_size, char *warn, size_t n);

/* Collective over comm (NULL: one rank): probes, decides, and makes every rank agree (auto takes
 * CUDA only when every rank has a device). Rank 0 prints the one line of an auto decision for
 * the CPU; a rank that cannot honour an explicit cuda prints why. *backend gets the agreed
 * backend and *gpu this rank's device index (-1 on the CPU). Returns 0, or LSTMD_EUNSUPPORTED
 * on the ranks without a device (LSTMD_ECONFIG on the others) for an explicit cuda. */
int lstmd_device_choose(int requested, struct lstmd_comm *comm, int *backend, int *gpu);

#endif
