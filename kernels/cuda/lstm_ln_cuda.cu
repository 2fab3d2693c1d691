/* lstm_ln_cuda.cu — the layer-normalised LSTM stack on a device (lstm_ln_cuda.h), following
 * kernels/cpu/lstm_ln_cpu.c step for step so that both compute the same function:
 *   forward, per layer: one GEMM projects all T inputs (xhat), one kernel normalises its rows;
 *     per step one GEMM for the recurrent projection (rhat), one kernel normalises its rows, one
 *     fused kernel adds gains, shifts and biases, activates the gates, forms c~, normalises it
 *     (LN_c) and writes c and h.
 *   backward, per layer from the top: per step (from the last) one fused kernel back through h,
 *     LN_c and the gates (dz, dcn, the carried dc), one kernel back through LN_hh (drp), one GEMM
 *     for the recurrent gradient; then LN_ih's backward for all rows (dxp), the GEMM for the
 *     layer's input gradient, the two weight GEMMs and the column sums of the biases, gains and
 *     shifts.
 * Row kernels run one block per row (a row of 4H or H values); reductions are block-wide in
 * float, as the CPU's are in float. cuBLAS is column-major: a row-major [R,C] matrix is a
 * column-major C×R one (see model_cuda.c for the same algebra). */
#include "lstm_ln_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check.h"

#define check_launch(kernel) \
  (lstmd_cuda_failed_(cudaGetLastError(), "kernel " kernel, __FILE__, __LINE__) ? LSTMD_ECUDA : LSTMD_OK)

enum { kThreads = 256, kMaxLnLayers = 16 };

/* Sum of one float per thread over the block (blockDim.x a multiple of 32, at most 1024). */
__device__ float block_sum_f(float v, float *shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? shared[threadIdx.x] : 0.0f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Row r of v [rows,n] normalised in place; rstd[r] = 1/sqrt(var + eps) (biased variance). */
__global__ void ln_rows(int n, float *v, float *rstd) {
  __shared__ float shared[32];
  float *x = v + (size_t)blockIdx.x * n;
  float s = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) s += x[j];
  const float mu = block_sum_f(s, shared) / (float)n;
  float q = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) q += (x[j] - mu) * (x[j] - mu);
  const float rs = 1.0f / sqrtf(block_sum_f(q, shared) / (float)n + LSTMD_CUDA_LN_EPS);
  for (int j = threadIdx.x; j < n; j += blockDim.x) x[j] = (x[j] - mu) * rs;
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
}

/* dv = rstd·(dz·gain − mean(dz·gain) − xhat·mean(dz·gain·xhat)), row by row. */
__global__ void ln_rows_backward(int n, const float *dz, const float *xhat, const float *rstd,
                                 const float *gain, float *dv) {
  __shared__ float shared[32];
  const size_t r = blockIdx.x;
  const float *z = dz + r * n, *xh = xhat + r * n;
  float s1 = 0.0f, s2 = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float dy = z[j] * gain[j];
    s1 += dy;
    s2 += dy * xh[j];
  }
  const float m1 = block_sum_f(s1, shared) / (float)n, m2 = block_sum_f(s2, shared) / (float)n;
  const float rs = rstd[r];
  for (int j = threadIdx.x; j < n; j += blockDim.x) dv[r * n + j] = rs * (z[j] * gain[j] - m1 - xh[j] * m2);
}

struct ln_params { /* device pointers of one layer */
  const float *b_ih, *b_hh, *g_ih, *s_ih, *g_hh, *s_hh, *g_c, *s_c;
};

/* One step, one block per column b: z, the gates, c~, LN_c, c and h (lstm_ln_cpu.c's
 * ln_gate_forward). g [B,4H] receives the activated gates; chat the normalised c~. */
__global__ void gate_forward(int H, float *g, const float *xhat, const float *rhat,
                             struct ln_params p, const float *c_prev, float *c_next,
                             float *h_next, float *chat, float *rstd_c) {
  __shared__ float shared[32];
  const size_t b = blockIdx.x, G = 4 * (size_t)H;
  float *z = g + b * G;
  const float *xh = xhat + b * G, *rh = rhat + b * G, *cp = c_prev + b * H;
  float *cn = c_next + b * H, *hn = h_next + b * H, *ch = chat + b * H;
  float s = 0.0f;
  for (int j = threadIdx.x; j < H; j += blockDim.x) {
    float a[4];
    for (int q = 0; q < 4; q++) {
      const int k = q * H + j;
      a[q] = xh[k] * p.g_ih[k] + p.s_ih[k] + rh[k] * p.g_hh[k] + p.s_hh[k] + p.b_ih[k] + p.b_hh[k];
    }
    const float i = sigmoidf_(a[0]), f = sigmoidf_(a[1]), gv = tanhf(a[2]), o = sigmoidf_(a[3]);
    const float cv = f * cp[j] + i * gv;
    z[j] = i;
    z[H + j] = f;
    z[2 * H + j] = gv;
    z[3 * H + j] = o;
    ch[j] = cv;
    s += cv;
  }
  const float mu = block_sum_f(s, shared) / (float)H;
  float q = 0.0f;
  for (int j = threadIdx.x; j < H; j += blockDim.x) q += (ch[j] - mu) * (ch[j] - mu);
  const float rs = 1.0f / sqrtf(block_sum_f(q, shared) / (float)H + LSTMD_CUDA_LN_EPS);
  if (threadIdx.x == 0) rstd_c[b] = rs;
  for (int j = threadIdx.x; j < H; j += blockDim.x) {
    const float cv = (ch[j] - mu) * rs;
    ch[j] = cv;
    cn[j] = cv * p.g_c[j] + p.s_c[j];
    hn[j] = z[3 * H + j] * tanhf(cn[j]);
  }
}

/* One step back, one block per column b (lstm_ln_cpu.c's ln_gate_backward): from dh (output +
 * recurrent) and the carried dc, dcn (LN_c's output gradient), back through LN_c, the gate
 * pre-activation gradients da [B,4H], and dc_carry ← dc~·f. */
__global__ void gate_backward(int H, const float *gates, const float *c_prev, const float *c_cur,
                              const float *chat, const float *rstd_c, const float *g_c,
                              const float *dh_out, const float *dh_rec, float *dc_carry,
                              float *da, float *dcn) {
  __shared__ float shared[32];
  const size_t b = blockIdx.x, G = 4 * (size_t)H;
  const float *gt = gates + b * G, *cp = c_prev + b * H, *cc = c_cur + b * H, *ch = chat + b * H;
  const float *dho = dh_out + b * H, *dhr = dh_rec + b * H;
  float *dcc = dc_carry + b * H, *dn = dcn + b * H, *d = da + b * G;
  float s1 = 0.0f, s2 = 0.0f;
  for (int j = threadIdx.x; j < H; j += blockDim.x) {
    const float o = gt[3 * H + j], dh = dho[j] + dhr[j], tc = tanhf(cc[j]);
    const float dc = dcc[j] + dh * o * (1.0f - tc * tc);
    d[3 * H + j] = dh * tc * o * (1.0f - o);
    dn[j] = dc;
    const float dy = dc * g_c[j];
    s1 += dy;
    s2 += dy * ch[j];
  }
  const float m1 = block_sum_f(s1, shared) / (float)H, m2 = block_sum_f(s2, shared) / (float)H;
  const float rs = rstd_c[b];
  for (int j = threadIdx.x; j < H; j += blockDim.x) {
    const float i = gt[j], f = gt[H + j], gv = gt[2 * H + j];
    const float dc = rs * (dn[j] * g_c[j] - m1 - ch[j] * m2);
    d[j] = dc * gv * i * (1.0f - i);
    d[H + j] = dc * cp[j] * f * (1.0f - f);
    d[2 * H + j] = dc * i * (1.0f - gv * gv);
    dcc[j] = dc * f;
  }
}

/* Column sums over rows [rows,n], one thread per column: gain[j] += Σ dy·xhat (xhat may be
 * NULL: no gain), shift[j] += Σ dy, shift2[j] += Σ dy (may be NULL). */
__global__ void column_sums(int rows, int n, const float *dy, const float *xhat, float *gain,
                            float *shift, float *shift2) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float sg = 0.0f, ss = 0.0f;
  for (int r = 0; r < rows; r++) {
    const float v = dy[(size_t)r * n + j];
    ss += v;
    if (xhat) sg += v * xhat[(size_t)r * n + j];
  }
  if (gain) gain[j] += sg;
  shift[j] += ss;
  if (shift2) shift2[j] += ss;
}

struct ln_layer_acts {
  float *h, *c;              /* [(T+1),B,H]: [0] the initial state, [t+1] after step t */
  float *gates, *xhat, *rhat; /* [T,B,4H] */
  float *chat;               /* [T,B,H] */
  float *rstd_x, *rstd_r, *rstd_c; /* [T,B] */
};

struct lstmd_cuda_ln_lstm {
  struct lstmd_cuda_ln_config cfg;
  struct lstmd_cuda_ln_layer layer[kMaxLnLayers];
  cublasHandle_t blas;
  cudaStream_t stream;
  struct ln_layer_acts acts[kMaxLnLayers];
  float *dz, *drp, *dxp, *dcn; /* backward scratch: [T,B,4H] ×3, [T,B,H] */
  float *dh_rec, *dc_carry;    /* [B,H] */
  float *dlayer[2];            /* [T,B,H]: gradients between layers */
  void *allocs[16 * kMaxLnLayers];
  int n_allocs;
  size_t bytes;
};

static int take(struct lstmd_cuda_ln_lstm *l, float **p, size_t floats) {
  *p = NULL;
  if (l->n_allocs == (int)(sizeof l->allocs / sizeof l->allocs[0])) return LSTMD_EINVAL;
  if (cudaMalloc((void **)p, floats * sizeof(float)) != cudaSuccess) {
    cudaGetLastError();
    *p = NULL;
    lstmd_errorf("CUDA: cannot allocate %.1f MiB for the layer-normalised LSTM",
                 (double)floats * 4.0 / 1048576.0);
    return LSTMD_ENOMEM;
  }
  l->allocs[l->n_allocs++] = *p;
  l->bytes += floats * sizeof(float);
  return LSTMD_OK;
}

extern "C" int lstmd_cuda_ln_create(const struct lstmd_cuda_ln_config *cfg, void *blas,
                                    struct lstmd_cuda_ln_lstm **out) {
  *out = NULL;
  if (cfg->layers < 1 || cfg->layers > kMaxLnLayers || cfg->steps < 1 || cfg->batch < 1 ||
      cfg->hidden < 1 || cfg->input < 1) {
    lstmd_errorf("layer-normalised LSTM: invalid shape (L %d, T %d, B %d, H %d, I %d)", cfg->layers,
                 cfg->steps, cfg->batch, cfg->hidden, cfg->input);
    return LSTMD_EINVAL;
  }
  struct lstmd_cuda_ln_lstm *l = (struct lstmd_cuda_ln_lstm *)calloc(1, sizeof *l);
  if (!l) return LSTMD_ENOMEM;
  l->cfg = *cfg;
  memcpy(l->layer, cfg->layer, sizeof l->layer[0] * cfg->layers);
  l->cfg.layer = l->layer;
  l->blas = (cublasHandle_t)blas;
  int rc = LSTMD_CUBLAS_FAILED(cublasGetStream(l->blas, &l->stream)) ? LSTMD_ECUDA : LSTMD_OK;
  const size_t T = cfg->steps, B = cfg->batch, H = cfg->hidden, G = 4 * H, N = T * B;
  for (int k = 0; !rc && k < cfg->layers; k++) {
    struct ln_layer_acts *a = &l->acts[k];
    if (!rc) rc = take(l, &a->h, (T + 1) * B * H);
    if (!rc) rc = take(l, &a->c, (T + 1) * B * H);
    if (!rc) rc = take(l, &a->gates, N * G);
    if (!rc) rc = take(l, &a->xhat, N * G);
    if (!rc) rc = take(l, &a->rhat, N * G);
    if (!rc) rc = take(l, &a->chat, N * H);
    if (!rc) rc = take(l, &a->rstd_x, N);
    if (!rc) rc = take(l, &a->rstd_r, N);
    if (!rc) rc = take(l, &a->rstd_c, N);
  }
  if (!rc) rc = take(l, &l->dz, N * G);
  if (!rc) rc = take(l, &l->drp, N * G);
  if (!rc) rc = take(l, &l->dxp, N * G);
  if (!rc) rc = take(l, &l->dcn, N * H);
  if (!rc) rc = take(l, &l->dh_rec, B * H);
  if (!rc) rc = take(l, &l->dc_carry, B * H);
  if (!rc) rc = take(l, &l->dlayer[0], N * H);
  if (!rc) rc = take(l, &l->dlayer[1], N * H);
  if (rc) {
    lstmd_cuda_ln_destroy(l);
    return rc;
  }
  *out = l;
  return LSTMD_OK;
}

extern "C" void lstmd_cuda_ln_destroy(struct lstmd_cuda_ln_lstm *l) {
  if (!l) return;
  if (l->stream) cudaStreamSynchronize(l->stream);
  for (int i = 0; i < l->n_allocs; i++) cudaFree(l->allocs[i]);
  free(l);
}

extern "C" size_t lstmd_cuda_ln_device_bytes(const struct lstmd_cuda_ln_lstm *l) { return l->bytes; }

static struct ln_params layer_params(const struct lstmd_cuda_ln_layer *o, const float *p) {
  return (struct ln_params){p + o->b_ih, p + o->b_hh, p + o->g_ih, p + o->s_ih,
                            p + o->g_hh, p + o->s_hh, p + o->g_c, p + o->s_c};
}

/* The threads of a row kernel: enough for n values, a multiple of 32, at most kThreads. */
static unsigned row_threads(int n) {
  unsigned t = (unsigned)((n + 31) / 32 * 32);
  return t > (unsigned)kThreads ? (unsigned)kThreads : t;
}

extern "C" int lstmd_cuda_ln_forward(struct lstmd_cuda_ln_lstm *l, const float *params,
                                     const float *x, float *y, const float *hx, const float *cx,
                                     float *hy, float *cy) {
  const int T = l->cfg.steps, B = l->cfg.batch, H = l->cfg.hidden, G = 4 * H, N = T * B;
  const size_t BH = (size_t)B * H, BG = (size_t)B * G;
  const float one = 1.0f, zero = 0.0f;
  cudaStream_t s = l->stream;
  for (int k = 0; k < l->cfg.layers; k++) {
    const struct lstmd_cuda_ln_layer *o = &l->layer[k];
    struct ln_layer_acts *a = &l->acts[k];
    const int in = k == 0 ? l->cfg.input : H;
    const float *xin = k == 0 ? x : l->acts[k - 1].h + BH;
    if (hx) {
      LSTMD_CHECK_CUDA(cudaMemcpyAsync(a->h, hx + k * BH, BH * sizeof(float), cudaMemcpyDeviceToDevice, s));
      LSTMD_CHECK_CUDA(cudaMemcpyAsync(a->c, cx + k * BH, BH * sizeof(float), cudaMemcpyDeviceToDevice, s));
    } else {
      LSTMD_CHECK_CUDA(cudaMemsetAsync(a->h, 0, BH * sizeof(float), s));
      LSTMD_CHECK_CUDA(cudaMemsetAsync(a->c, 0, BH * sizeof(float), s));
    }
    /* xhat [N,G] = x [N,in] · W_ihᵀ, then its rows normalised */
    LSTMD_CHECK_CUBLAS(cublasSgemm(l->blas, CUBLAS_OP_T, CUBLAS_OP_N, G, N, in, &one,
                                   params + o->w_ih, in, xin, in, &zero, a->xhat, G));
    ln_rows<<<N, row_threads(G), 0, s>>>(G, a->xhat, a->rstd_x);
    LSTMD_TRY(check_launch("LN rows"));
    const struct ln_params p = layer_params(o, params);
    for (int t = 0; t < T; t++) {
      float *r = a->rhat + t * BG;
      LSTMD_CHECK_CUBLAS(cublasSgemm(l->blas, CUBLAS_OP_T, CUBLAS_OP_N, G, B, H, &one,
                                     params + o->w_hh, H, a->h + t * BH, H, &zero, r, G));
      ln_rows<<<B, row_threads(G), 0, s>>>(G, r, a->rstd_r + (size_t)t * B);
      gate_forward<<<B, row_threads(H), 0, s>>>(H, a->gates + t * BG, a->xhat + t * BG, r, p,
                                                a->c + t * BH, a->c + (t + 1) * BH,
                                                a->h + (t + 1) * BH, a->chat + t * BH,
                                                a->rstd_c + (size_t)t * B);
      LSTMD_TRY(check_launch("LN LSTM step"));
    }
    if (hy) LSTMD_CHECK_CUDA(cudaMemcpyAsync(hy + k * BH, a->h + T * BH, BH * sizeof(float), cudaMemcpyDeviceToDevice, s));
    if (cy) LSTMD_CHECK_CUDA(cudaMemcpyAsync(cy + k * BH, a->c + T * BH, BH * sizeof(float), cudaMemcpyDeviceToDevice, s));
  }
  const struct ln_layer_acts *top = &l->acts[l->cfg.layers - 1];
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(y, top->h + BH, (size_t)N * H * sizeof(float), cudaMemcpyDeviceToDevice, s));
  return LSTMD_OK;
}

extern "C" int lstmd_cuda_ln_backward(struct lstmd_cuda_ln_lstm *l, const float *params,
                                      float *grads, const float *x, const float *dy, float *dx) {
  const int T = l->cfg.steps, B = l->cfg.batch, H = l->cfg.hidden, G = 4 * H, N = T * B;
  const size_t BH = (size_t)B * H, BG = (size_t)B * G;
  const float one = 1.0f, zero = 0.0f;
  cudaStream_t s = l->stream;
  const unsigned cols_g = (unsigned)((G + kThreads - 1) / kThreads), cols_h = (unsigned)((H + kThreads - 1) / kThreads);
  for (int k = l->cfg.layers - 1; k >= 0; k--) {
    const struct lstmd_cuda_ln_layer *o = &l->layer[k];
    const struct ln_layer_acts *a = &l->acts[k];
    const int in = k == 0 ? l->cfg.input : H;
    const float *xin = k == 0 ? x : l->acts[k - 1].h + BH;
    const float *dh_out = k == l->cfg.layers - 1 ? dy : l->dlayer[(k + 1) % 2];
    float *dx_k = k == 0 ? dx : l->dlayer[k % 2];
    LSTMD_CHECK_CUDA(cudaMemsetAsync(l->dh_rec, 0, BH * sizeof(float), s));
    LSTMD_CHECK_CUDA(cudaMemsetAsync(l->dc_carry, 0, BH * sizeof(float), s));
    for (int t = T - 1; t >= 0; t--) {
      float *dz = l->dz + t * BG, *drp = l->drp + t * BG;
      gate_backward<<<B, row_threads(H), 0, s>>>(H, a->gates + t * BG, a->c + t * BH,
                                                 a->c + (t + 1) * BH, a->chat + t * BH,
                                                 a->rstd_c + (size_t)t * B, params + o->g_c,
                                                 dh_out + t * BH, l->dh_rec, l->dc_carry, dz,
                                                 l->dcn + t * BH);
      ln_rows_backward<<<B, row_threads(G), 0, s>>>(G, dz, a->rhat + t * BG,
                                                    a->rstd_r + (size_t)t * B, params + o->g_hh, drp);
      LSTMD_TRY(check_launch("LN LSTM step back"));
      if (t > 0) /* dh_rec [B,H] = drp [B,G] · W_hh [G,H] */
        LSTMD_CHECK_CUBLAS(cublasSgemm(l->blas, CUBLAS_OP_N, CUBLAS_OP_N, H, B, G, &one,
                                       params + o->w_hh, H, drp, G, &zero, l->dh_rec, H));
    }
    ln_rows_backward<<<N, row_threads(G), 0, s>>>(G, l->dz, a->xhat, a->rstd_x, params + o->g_ih, l->dxp);
    LSTMD_TRY(check_launch("LN rows back"));
    if (dx_k) /* dx [N,in] = dxp [N,G] · W_ih [G,in] */
      LSTMD_CHECK_CUBLAS(cublasSgemm(l->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, N, G, &one,
                                     params + o->w_ih, in, l->dxp, G, &zero, dx_k, in));
    /* dW_hh [G,H] += drpᵀ · h[0..T−1];  dW_ih [G,in] += dxpᵀ · x */
    LSTMD_CHECK_CUBLAS(cublasSgemm(l->blas, CUBLAS_OP_N, CUBLAS_OP_T, H, G, N, &one, a->h, H,
                                   l->drp, G, &one, grads + o->w_hh, H));
    LSTMD_CHECK_CUBLAS(cublasSgemm(l->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, G, N, &one, xin, in,
                                   l->dxp, G, &one, grads + o->w_ih, in));
    column_sums<<<cols_g, kThreads, 0, s>>>(N, G, l->dz, NULL, NULL, grads + o->b_ih, grads + o->b_hh);
    column_sums<<<cols_g, kThreads, 0, s>>>(N, G, l->dz, a->xhat, grads + o->g_ih, grads + o->s_ih, NULL);
    column_sums<<<cols_g, kThreads, 0, s>>>(N, G, l->dz, a->rhat, grads + o->g_hh, grads + o->s_hh, NULL);
    column_sums<<<cols_h, kThreads, 0, s>>>(N, H, l->dcn, a->chat, grads + o->g_c, grads + o->s_c, NULL);
    LSTMD_TRY(check_launch("LN LSTM parameter sums"));
  }
  return LSTMD_OK;
}
