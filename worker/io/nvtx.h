/* nvtx.h — NVTX ranges around the phases of a step (data wait, forward, backward, all-reduce,
 * optimizer, checkpoint), so Nsight Systems shows them beside the GPU kernels they launched.
 * Header-only NVTX 3 from the CUDA toolkit; without it (LSTMD_WITH_NVTX unset) the calls are
 * empty. Ranges nest per thread: every push needs its pop on the same thread. */
#ifndef LSTMD_NVTX_H
#define LSTMD_NVTX_H

#if LSTMD_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
static inline void lstmd_nvtx_push(const char *name) { nvtxRangePushA(name); }
static inline void lstmd_nvtx_pop(void) { nvtxRangePop(); }
#else
static inline void lstmd_nvtx_push(const char *name) { (void)name; }
static inline void lstmd_nvtx_pop(void) {}
#endif

#endif
