/* dense_cpu.h — the non-recurrent pieces of the model on the CPU: embedding lookup, linear
 * layers, softmax cross-entropy and MSE losses (each fused with its gradient), and the
 * optimizer updates. float32 buffers; reductions that feed a loss or a norm use double. */
#ifndef LSTMD_DENSE_CPU_H
#define LSTMD_DENSE_CPU_H

#include <stddef.h>
#include <stdint.h>

/* out[n,:] = table[ids[n],:] for n < N; table [V,E], out [N,E]. ids must be < V. */
void lstmd_cpu_embedding_forward(int N, int E, const float *table, const int32_t *ids, float *out);
/* dtable[ids[n],:] += dout[n,:] (in order of n, so the result is deterministic). */
void lstmd_cpu_embedding_backward(int N, int E, const float *dout, const int32_t *ids,
                                  float *dtable);

/* y [N,O] = x [N,In] · w[O,In]^T + b[O]. (In, not I: complex.h, which cblas.h may include,
 * defines I.) */
void lstmd_cpu_linear_forward(int N, int In, int O, const float *x, const float *w, const float *b,
                              float *y);
/* dx [N,In] = dy [N,O] · w [O,In]: the input part of linear_backward alone. */
void lstmd_cpu_linear_backward_input(int N, int In, int O, const float *w, const float *dy,
                                     float *dx);
/* dw += dy^T·x, db += column sums of dy, dx = dy·w (dx may be NULL). */
void lstmd_cpu_linear_backward(int N, int In, int O, const float *x, const float *w,
                               const float *dy, float *dw, float *db, float *dx);

/* Softmax cross-entropy over rows of logits [N,V] with targets [N] (each < V).
 * Returns the summed loss (nats). If grad_scale != 0, logits are overwritten with
 * grad_scale·(softmax − onehot); otherwise they are left as they were. */
double lstmd_cpu_softmax_xent(int N, int V, float *logits, const int32_t *targets,
                              float grad_scale);
/* The row steps of lstmd_cpu_softmax_xent, for losses built on it (kd_cpu.c): one row's
 * log Σ exp(z) (max-shifted), and z[v] = scale·exp(z[v] − logsum) in place. */
double lstmd_cpu_logsumexp(int V, const float *z);
void lstmd_cpu_softmax_scaled(int V, float *z, double logsum, float scale);

/* Squared error summed over pred [N] vs target [N]; if grad_scale != 0, pred is overwritten
 * with grad_scale·2·(pred − target). */
double lstmd_cpu_mse(size_t N, float *pred, const float *target, float grad_scale);

/* x[i] *= m[i] (dropout masks, already scaled by 1/(1-p)). */
void lstmd_cpu_mul_inplace(size_t n, float *x, const float *m);

/* Sum of squares in double (gradient norms). */
double lstmd_cpu_sumsq(size_t n, const float *x);
/* x[i] *= s. */
void lstmd_cpu_scale(size_t n, float *x, float s);

/* AdamW (torch.optim.AdamW semantics, decoupled weight decay). step counts from 1. */
void lstmd_cpu_adamw(size_t n, float *p, const float *g, float *m, float *v, float lr, float beta1,
                     float beta2, float eps, float weight_decay, long step);
/* SGD with momentum (torch.optim.SGD semantics: g += wd·p; buf = μ·buf + g; p -= lr·buf). */
void lstmd_cpu_sgd(size_t n, float *p, const float *g, float *buf, float lr, float momentum,
                   float weight_decay);

#endif
