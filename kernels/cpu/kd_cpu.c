/* kd_cpu.c — distillation losses with their gradients (kd_cpu.h). */
#include "kd_cpu.h"

#include <math.h>
#include <stdlib.h>

#include "dense_cpu.h"
#include "kernels/status.h"

/* log Σ_v exp(z[v]/T), max-shifted, in double. */
static double log_sum_exp(int V, const float *z, double inv_t) {
  double mx = (double)z[0] * inv_t;
  for (int v = 1; v < V; v++) mx = (double)z[v] * inv_t > mx ? (double)z[v] * inv_t : mx;
  double sum = 0.0;
  for (int v = 0; v < V; v++) sum += exp((double)z[v] * inv_t - mx);
  return log(sum) + mx;
}

double lstmd_cpu_kd_softmax_xent(int N, int V, float *z, const float *zt, const int32_t *targets,
                                 float temperature, float alpha, float grad_scale) {
  const double inv_t = 1.0 / temperature;
  const float hard_scale = (1.0f - alpha) * grad_scale;
  const float soft_scale = alpha * temperature * grad_scale;
  if (V > 256) { /* the soft term's row buffer below: a caller's bug (kd_cpu.h) */
    lstmd_errorf("distillation: %d outputs, at most 256", V);
    abort();
  }
  double total = 0.0;
  for (int n = 0; n < N; n++) {
    float *zs = z + (size_t)n * V;
    const float *tz = zt + (size_t)n * V;
    /* the hard term exactly as lstmd_cpu_softmax_xent computes it */
    const double logsum = lstmd_cpu_logsumexp(V, zs);
    /* the soft term: KL(p_t ‖ p_s) = Σ p_t (log p_t − log p_s) at temperature T */
    const double ls_s = log_sum_exp(V, zs, inv_t), ls_t = log_sum_exp(V, tz, inv_t);
    double kl = 0.0;
    for (int v = 0; v < V; v++) {
      const double log_pt = (double)tz[v] * inv_t - ls_t, log_ps = (double)zs[v] * inv_t - ls_s;
      kl += exp(log_pt) * (log_pt - log_ps);
    }
    total += (1.0 - alpha) * (logsum - zs[targets[n]]) +
             (double)alpha * temperature * temperature * kl;
    if (grad_scale != 0.0f) {
      float soft[256]; /* V <= 256 (text models, model.c); from the logits before the hard
                        * term's gradient overwrites them */
      for (int v = 0; v < V; v++)
        soft[v] = (float)(exp((double)zs[v] * inv_t - ls_s) - exp((double)tz[v] * inv_t - ls_t));
      lstmd_cpu_softmax_scaled(V, zs, logsum, hard_scale);
      for (int v = 0; v < V; v++) zs[v] += soft_scale * soft[v];
      zs[targets[n]] -= hard_scale;
    }
  }
  return total;
}

double lstmd_cpu_kd_mse(size_t N, float *pred, const float *teacher, const float *target,
                        float alpha, float grad_scale) {
  double total = 0.0;
  for (size_t i = 0; i < N; i++) {
    const double d_y = (double)pred[i] - target[i], d_t = (double)pred[i] - teacher[i];
    total += (1.0 - alpha) * (d_y * d_y) + (double)alpha * (d_t * d_t);
    if (grad_scale != 0.0f)
      pred[i] = grad_scale * 2.0f * ((1.0f - alpha) * (float)d_y + alpha * (float)d_t);
  }
  return total;
}
