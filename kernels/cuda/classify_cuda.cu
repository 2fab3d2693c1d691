/* classify_cuda.cu — CUDA kernels behind classify_cuda.h. One thread per pooled element (it
 * walks its column's valid steps), one per element of the output gradient, one per logits row
 * (C ≤ LSTMD_MAX_CLASSES = 64 classes: a row is too short to share among a block). */
#include "classify_cuda.h"

#include <cuda_runtime.h>
#include <float.h>
#include <math.h>

#include "kernels/check.h"

#define check_launch(kernel) \
  (lstmd_cuda_failed_(cudaGetLastError(), "kernel " kernel, __FILE__, __LINE__) ? LSTMD_ECUDA : LSTMD_OK)

enum { kPoolLast = 0, kPoolMean = 1, kPoolMax = 2 }; /* enum lstmd_pool_kind (model.h) */

static unsigned blocks_for(size_t n, unsigned threads) {
  size_t b = (n + threads - 1) / threads;
  return (unsigned)(b > 65535 * 8 ? 65535 * 8 : (b ? b : 1));
}

__global__ void seq_lengths(int B, const int32_t *len, int32_t *out) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < B) out[b] = len[b] > 1 ? len[b] : 1;
}

extern "C" int lstmd_cuda_clf_seq_lengths(int B, const int32_t *len, int32_t *cudnn_len, void *stream) {
  seq_lengths<<<(B + 255) / 256, 256, 0, (cudaStream_t)stream>>>(B, len, cudnn_len);
  return check_launch("classifier sequence lengths");
}

__global__ void pool_forward(int B, int H, int DH, int pool, const float *y, const int32_t *len,
                             float *pooled, int32_t *argmax) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)B * DH;
       i += (size_t)gridDim.x * blockDim.x) {
    const int b = (int)(i / DH), j = (int)(i % DH), n = len[b];
    float v = 0.0f;
    int at = 0;
    if (n > 0 && pool == kPoolLast) {
      at = j < H ? n - 1 : 0; /* reverse half: step 0, where its recurrence ends */
      v = y[((size_t)at * B + b) * DH + j];
    } else if (n > 0 && pool == kPoolMean) {
      double sum = 0.0;
      for (int t = 0; t < n; t++) sum += y[((size_t)t * B + b) * DH + j];
      v = (float)(sum / n);
    } else if (n > 0) {
      v = -FLT_MAX;
      for (int t = 0; t < n; t++) {
        const float x = y[((size_t)t * B + b) * DH + j];
        if (x > v) {
          v = x;
          at = t;
        }
      }
    }
    pooled[i] = v;
    argmax[i] = at;
  }
}

extern "C" int lstmd_cuda_clf_pool_forward(int T, int B, int H, int D, int pool, const float *y,
                                           const int32_t *len, float *pooled, int32_t *argmax,
                                           void *stream) {
  (void)T; /* the lengths bound every read */
  const size_t n = (size_t)B * D * H;
  pool_forward<<<blocks_for(n, 128), 128, 0, (cudaStream_t)stream>>>(B, H, D * H, pool, y, len,
                                                                    pooled, argmax);
  return check_launch("classifier pooling");
}

__global__ void pool_backward(int T, int B, int DH, int pool, const float *dpooled,
                              const int32_t *len, const int32_t *argmax, float *dy) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)T * B * DH;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t row = i / DH;
    const int t = (int)(row / B), b = (int)(row % B), j = (int)(i % DH);
    const size_t k = (size_t)b * DH + j;
    float g = 0.0f;
    if (t < len[b]) {
      if (pool == kPoolMean) g = dpooled[k] / (float)len[b];
      else if (argmax[k] == t) g = dpooled[k];
    }
    dy[i] = g;
  }
}

extern "C" int lstmd_cuda_clf_pool_backward(int T, int B, int H, int D, int pool,
                                            const float *dpooled, const int32_t *len,
                                            const int32_t *argmax, float *dy, void *stream) {
  const size_t n = (size_t)T * B * D * H;
  pool_backward<<<blocks_for(n, 256), 256, 0, (cudaStream_t)stream>>>(T, B, D * H, pool, dpooled,
                                                                     len, argmax, dy);
  return check_launch("classifier pooling backward");
}

__global__ void softmax_xent(int B, int C, float *logits, const int32_t *labels,
                             const int32_t *len, float grad_scale, const float *scale_by,
                             float *row_loss) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  float *z = logits + (size_t)b * C;
  const int label = labels[b];
  if (len[b] == 0 || label < 0 || label >= C) {
    row_loss[b] = len[b] == 0 ? 0.0f : NAN;
    for (int k = 0; k < C; k++) z[k] = 0.0f;
    return;
  }
  double mx = z[0], sum = 0.0;
  for (int k = 1; k < C; k++) mx = z[k] > mx ? z[k] : mx;
  for (int k = 0; k < C; k++) sum += exp(z[k] - mx);
  row_loss[b] = (float)(mx + log(sum) - z[label]);
  if (grad_scale == 0.0f) return;
  const float gs = grad_scale * (scale_by ? *scale_by : 1.0f);
  for (int k = 0; k < C; k++) z[k] = gs * (float)(exp(z[k] - mx) / sum - (k == label));
}

extern "C" int lstmd_cuda_clf_softmax_xent(int B, int C, float *logits, const int32_t *labels,
                                           const int32_t *len, float grad_scale,
                                           const float *scale_by, float *row_loss, void *stream) {
  softmax_xent<<<(B + 127) / 128, 128, 0, (cudaStream_t)stream>>>(B, C, logits, labels, len,
                                                                 grad_scale, scale_by, row_loss);
  return check_launch("classifier softmax cross-entropy");
}

__global__ void embedding_backward(int T, int B, int E, const float *dx, const int32_t *ids,
                                   const int32_t *len, float *dtable) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)T * B * E;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t n = i / E;
    const int t = (int)(n / B), b = (int)(n % B);
    if (t < len[b]) atomicAdd(&dtable[(size_t)ids[n] * E + i % E], dx[i]);
  }
}

extern "C" int lstmd_cuda_clf_embedding_backward(int T, int B, int E, const float *dx,
                                                 const int32_t *ids, const int32_t *len,
                                                 float *dtable, void *stream) {
  const size_t n = (size_t)T * B * E;
  embedding_backward<<<blocks_for(n, 256), 256, 0, (cudaStream_t)stream>>>(T, B, E, dx, ids, len,
                                                                          dtable);
  return check_launch("classifier embedding backward");
}
