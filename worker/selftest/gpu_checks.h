/* gpu_checks.h — the GPU groups of `lstmd selftest`, each in its own file of this folder, all in
 * the GPU module; gpu_selftest.c runs them on a device it has made current. */
#ifndef LSTMD_GPU_CHECKS_H
#define LSTMD_GPU_CHECKS_H

struct lstmd_comm;

void lstmd_selftest_gpu_kernels(void);                 /* gpu_kernels.c */
void lstmd_selftest_gpu_convert(void);                 /* gpu_convert.c */
void lstmd_selftest_gpu_cudnn(void);                   /* gpu_cudnn.c */
void lstmd_selftest_gpu_model(void);                   /* gpu_model.c */
void lstmd_selftest_gpu_classify(void);                /* gpu_classify.c: sequence classifiers */
void lstmd_selftest_gpu_pipe(void);                    /* gpu_pipe.c: pipeline stages */
void lstmd_selftest_gpu_nccl(struct lstmd_comm *c);    /* gpu_nccl.c: a collective over c */

#endif
