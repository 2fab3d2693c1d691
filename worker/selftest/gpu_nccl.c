/* gpu_nccl.c — gradient sums between the ranks' GPUs (comm/comm_nccl) against answers known in
 * closed form: rank r contributes (r+1)·(i mod 7 + 1) at element i, so every element must come
 * back as N(N+1)/2·(i mod 7 + 1) on every rank, for several counts (odd ones, and one past
 * the 2^20-float bucket size used by the engine; the counts above 65536 summed in pieces, one
 * NCCL group of several calls as the engine's buckets are). Run under mpirun; with one GPU per rank it
 * tests NCCL, with ranks sharing a GPU the host-staged MPI fallback (the mode is printed).
 * Every buffer is filled and read back on the all-reduce's own (non-blocking) stream: a
 * legacy-stream cudaMemcpy would not be ordered with it. Every CUDA call is checked.
 * `lstmd selftest --gpu` runs it on one rank, and on two ranks sharing the GPU under mpirun. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/status.h"
#include "worker/engine/device_select.h"
#include "worker/selftest/selftest.h"
#include "kernels/check.h" /* after cuda_runtime.h: LSTMD_CUDA_FAILED prints the call and error */

void lstmd_selftest_gpu_nccl(struct lstmd_comm *c) {
  char why[256], warn[256];
  const int count = lstmd_cuda_probe(why, sizeof why);
  const int rank = lstmd_comm_rank(c), n = lstmd_comm_size(c);
  const int dev = lstmd_gpu_for_rank(count, lstmd_comm_local_rank(c), lstmd_comm_local_size(c), warn, sizeof warn);
  if (!lstmd_check_true("device selected", lstmd_cuda_use_device(dev) == 0)) return;
  static const size_t sizes[] = {1, 7, 1000, 65537, (1u << 20) + 3};
  const size_t max = sizes[sizeof sizes / sizeof sizes[0] - 1];
  struct lstmd_nccl *nc = NULL;
  int rc = lstmd_nccl_create(c, max, 60.0, &nc);
  lstmd_check_true("communicator created on every rank", rc == 0);
  if (rc) return;
  if (rank == 0) printf("ranks: %d, rank 0 on device %d, mode: %s\n", n, dev, lstmd_nccl_describe(nc));
  cudaStream_t s = NULL;
  cudaEvent_t done = NULL;
  float *h = malloc(max * sizeof(float)), *d = NULL;
  double *ref = malloc(max * sizeof(double));
  int cuda_ok = h && ref && !LSTMD_CUDA_FAILED(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) &&
                !LSTMD_CUDA_FAILED(cudaMalloc((void **)&d, max * sizeof(float))) &&
                !LSTMD_CUDA_FAILED(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  lstmd_check_true("stream, buffer and event created", cuda_ok);
  for (size_t k = 0; cuda_ok && k < sizeof sizes / sizeof sizes[0]; k++) {
    const size_t len = sizes[k];
    for (size_t i = 0; i < len; i++) {
      h[i] = (float)((rank + 1) * (int)(i % 7 + 1));
      ref[i] = (double)n * (n + 1) / 2.0 * (double)(i % 7 + 1);
    }
    /* On s, so the all-reduce enqueued after it sees the data. */
    cuda_ok = !LSTMD_CUDA_FAILED(cudaMemcpyAsync(d, h, len * sizeof(float), cudaMemcpyHostToDevice, s));
    /* elements, not bytes; the larger counts in pieces of 65536 floats, as one NCCL group of
     * several calls (the engine's buckets, comm_nccl.c 4.) */
    const size_t piece = len > 65536 ? 65536 : 0;
    rc = cuda_ok ? lstmd_nccl_allreduce_sum_pieces(nc, d, len, piece, s) : LSTMD_ECUDA;
    cuda_ok = cuda_ok && !LSTMD_CUDA_FAILED(cudaEventRecord(done, s));
    if (cuda_ok) lstmd_nccl_watch(nc, done);
    cuda_ok = cuda_ok && !LSTMD_CUDA_FAILED(cudaEventSynchronize(done)) &&
              !LSTMD_CUDA_FAILED(cudaMemcpyAsync(h, d, len * sizeof(float), cudaMemcpyDeviceToHost, s)) &&
              !LSTMD_CUDA_FAILED(cudaStreamSynchronize(s));
    char what[96];
    snprintf(what, sizeof what, "sum of %zu floats", len);
    lstmd_check_true(what, rc == 0 && cuda_ok);
    if (cuda_ok) lstmd_check_close(what, h, ref, len, 0, 0);
  }
  lstmd_check_true("watchdog saw no failure", !lstmd_nccl_failed(nc));
  lstmd_nccl_destroy(nc); /* before the event it may still watch */
  if (done) lstmd_check_true("event destroyed", !LSTMD_CUDA_FAILED(cudaEventDestroy(done)));
  if (d) lstmd_check_true("buffer freed", !LSTMD_CUDA_FAILED(cudaFree(d)));
  if (s) lstmd_check_true("stream destroyed", !LSTMD_CUDA_FAILED(cudaStreamDestroy(s)));
  free(h);
  free(ref);
}
