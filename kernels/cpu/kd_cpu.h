/* kd_cpu.h — the knowledge-distillation losses (Hinton et al. 2015), each fused with its
 * gradient like the plain losses in dense_cpu.h, for the student's output given the teacher's
 * output on the same batch. float32 buffers; the loss sums are in double. */
#ifndef LSTMD_KD_CPU_H
#define LSTMD_KD_CPU_H

#include <stddef.h>
#include <stdint.h>

/* Text, per row n of the student's logits z [N,V] and the teacher's logits zt [N,V]:
 *   loss_n = α·T²·KL(softmax(zt/T) ‖ softmax(z/T)) + (1−α)·CE(softmax(z), targets[n])
 * Returns Σ_n loss_n (nats). If grad_scale != 0, z is overwritten with grad_scale·∂loss/∂z:
 *   (1−α)·(softmax(z) − onehot) + α·T·(softmax(z/T) − softmax(zt/T)).
 * The T² keeps the soft term's gradient on the scale of the hard one as T changes (Hinton).
 * With α = 0 the loss and the gradient are bit for bit lstmd_cpu_softmax_xent's.
 * V is at most 256 (a text model's vocabulary, model.c); more stops the program. */
double lstmd_cpu_kd_softmax_xent(int N, int V, float *z, const float *zt, const int32_t *targets,
                                 float temperature, float alpha, float grad_scale);

/* Series: loss = α·Σ(pred − teacher)² + (1−α)·Σ(pred − target)² over N values; if
 * grad_scale != 0, pred is overwritten with grad_scale·2·(α(pred − teacher) + (1−α)(pred −
 * target)). With α = 0, bit for bit lstmd_cpu_mse. */
double lstmd_cpu_kd_mse(size_t N, float *pred, const float *teacher, const float *target,
                        float alpha, float grad_scale);

#endif
