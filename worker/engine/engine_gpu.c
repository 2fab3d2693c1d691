/* engine_gpu.c — the GPU engine (engine.h): data-parallel training on one GPU per rank. Its
 * evaluation and carried state are in engine_gpu_eval.c, its pruning in engine_gpu_prune.c, and
 * the state all three share in engine_gpu_internal.h.
 *
 * The fp32 master parameters, gradients and optimizer moments live on the device in the flat
 * layout of worker/model/model.h; the host model's buffers are brought up to date only on
 * request (sync_host: checkpoints). Per window: the batch is copied through pinned memory on a
 * copy stream, forward and backward run on the compute stream (kernels/cuda/model_cuda.h), and
 * on the last window of a step each region of gradients that backward has made final (head,
 * then the LSTM, then the embedding) is summed over the ranks in buckets on a communication
 * stream that waits for it with an event, overlapping the rest of backward; the optimizer waits
 * for the last bucket with another event. Precision fp32 / tf32 / bf16 / fp16; fp16 scales the
 * loss dynamically (loss_scale.h) and skips the update of a step whose gradients overflowed.
 *
 * 1. Streams: `copy` (batches in), `compute` (model, optimizer), `comm` (all-reduce). Orders
 *    between them are events only: compute waits for the batch copy; the copy of the next batch
 *    waits for the compute stream to have finished with the input buffers (inputs_free); the
 *    comm stream waits for each gradient region; compute waits for comm_done before the
 *    optimizer. The host waits on the GPU only in steps it logs (step input `report`): for the
 *    loss, summed on the device over the steps since the last report, for the end of the
 *    all-reduce (which measures the communication backward did not hide), and for the
 *    optimizer's state. Otherwise only the double-buffered batch copy holds the host back (it
 *    never runs more than two windows ahead). Every wait polls the event and the NCCL watchdog,
 *    so a failed peer ends the wait.
 * 2. cuDNN's weight gradients accumulate (CUDNN_WGRAD_MODE_ADD): fp32/tf32 zero them once per
 *    step and copy them into the flat fp32 gradients after the last micro-batch; 16-bit types
 *    zero them every micro-batch and add them into the fp32 gradients, so accumulation over
 *    micro-batches happens in fp32.
 * 3. The pinned staging buffers of the batch are double-buffered; one is refilled only after
 *    its previous copy has completed (copy_done event).
 * 4. The optimizer never needs the host: the squared norm is summed on the device, a one-thread
 *    kernel decides the step (kernels/optim_rules.h: clip factor, fp16 overflow and the loss
 *    scale's next value, learning rate, bias corrections, or no update at all), and the AdamW /
 *    SGD kernels read that decision and fold the unscaling and clipping into the update. The
 *    fp16 loss scale lives in that device state, and the loss kernels read it from there. The
 *    host reads the state (o->step, the norm, the scale, a non-finite norm or an fp16 give-up)
 *    at logged steps and before checkpoints; after a non-finite norm the device updates nothing
 *    more, so the parameters a checkpoint would see are never the broken ones.
 * 5. The cuDNN model is made in start, collectively: rank 0 times cuDNN's algorithms, layouts
 *    and math types on the real shape and the others take its choice, so every rank runs the
 *    same kernels and a run is reproducible (timing alone could pick differently per rank).
 * 6. Pruning: the masks (worker/model/prune.h) live on the device as 0/1 floats and multiply the
 *    pruned tensors after every update. At a pruning step every rank copies its parameters to
 *    its host model (the ranks' parameters are identical: the same summed gradients), the host
 *    recomputes the masks exactly as on the CPU, and they are uploaded again.
 * 7. Distillation: the teacher is a second cuDNN model of the same (T, B) on the same device,
 *    made like the student (rank 0's cuDNN choice) but in fp32 whatever the student's precision
 *    (the CPU's soft targets), with its parameters uploaded once. Each
 *    window it runs forward in inference mode from a zero state on a device copy of the
 *    student's inputs, and the student's training loss reads its output (model_cuda.h's
 *    set_distill: kd_cpu.h's loss); evaluation scores the plain loss.
 * 8. Sequence classifiers (worker/model/classify.h; model_cuda.h's classify layout): a window
 *    is B whole sequences padded to T, with their lengths and labels, from a zero state. The
 *    lengths go to the device with the ids and labels, and from the host batch into cuDNN's
 *    descriptors (lstmd_cuda_model_set_lengths) before each forward. Evaluation copies the
 *    device parameters into rank 0's host model and runs lstmd_clf_evaluate there, so `lstmd
 *    train`'s val_loss is the CPU evaluator's number exactly (what `lstmd eval` prints for the
 *    checkpoint); a classifier's validation split is small next to its training. */
#define _GNU_SOURCE
#include "engine_gpu.h"
#include "engine_gpu_internal.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "kernels/cuda/dense_cuda.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/cuda/lstm_cudnn.h"
#include "kernels/cuda/model_cuda.h"
#include "kernels/check.h"
#include "kernels/clock.h"
#include "engine.h"
#include "loss_scale.h"
#include "worker/data/batcher.h"
#include "worker/io/checkpoint.h"
#include "worker/io/nvtx.h"
#include "worker/io/trace.h"
#include "worker/model/optim.h"
#include "worker/train/train_config.h"

static int dtype_of(int precision) {
  return precision == LSTMD_PRECISION_FP16 ? LSTMD_DT_F16
         : precision == LSTMD_PRECISION_BF16 ? LSTMD_DT_BF16 : LSTMD_DT_F32;
}
static const char *precision_name(int p) {
  return p == LSTMD_PRECISION_FP16 ? "fp16 (dynamic loss scaling)" : p == LSTMD_PRECISION_BF16 ? "bf16"
         : p == LSTMD_PRECISION_TF32 ? "tf32" : "fp32";
}

void lstmd_gpu_model_layout(const struct lstmd_model *m, struct lstmd_cuda_model_layout *l) {
  const struct lstmd_model_shape *s = &m->shape;
  memset(l, 0, sizeof *l);
  l->text = s->kind == LSTMD_MODEL_TEXT;
  l->vocab = s->vocab;
  l->embed = s->embed;
  l->width = s->width;
  l->horizon = s->horizon;
  l->hidden = s->hidden;
  l->layers = s->layers;
  l->n_params = m->n_params;
  if (l->text) l->off_embed = m->tensors[0].offset;
  l->layer_norm = s->layer_norm;
  l->off_head_w = m->tensors[m->n_tensors - 2].offset;
  l->off_head_b = m->tensors[m->n_tensors - 1].offset;
  if (s->kind == LSTMD_MODEL_CLASSIFY) { /* model.h: embed.weight, then 4 per (layer, direction) */
    const int D = s->bidirectional ? 2 : 1;
    l->classify = 1;
    l->classes = s->classes;
    l->bidirectional = s->bidirectional;
    l->pool = s->pool;
    l->off_embed = m->tensors[0].offset;
    for (int p = 0; p < s->layers * D; p++) { /* cuDNN's pseudo-layer p = k·D + d */
      const struct lstmd_tensor *t = &m->tensors[1 + 4 * p];
      l->off_w_ih[p] = t[0].offset;
      l->off_w_hh[p] = t[1].offset;
      l->off_b_ih[p] = t[2].offset;
      l->off_b_hh[p] = t[3].offset;
    }
    return;
  }
  for (int k = 0; k < s->layers; k++) {
    const struct lstmd_tensor *t = &m->tensors[lstmd_layer_first_tensor(s, k)];
    l->off_w_ih[k] = t[0].offset;
    l->off_w_hh[k] = t[1].offset;
    l->off_b_ih[k] = t[2].offset;
    l->off_b_hh[k] = t[3].offset;
    if (s->layer_norm) /* lstm.ln_{ih,hh}_{weight,bias}_l{k}, lstm.ln_c_{weight,bias}_l{k} */
      l->ln[k] = (struct lstmd_cuda_ln_layer){t[0].offset, t[1].offset, t[2].offset, t[3].offset,
                                              t[4].offset, t[5].offset, t[6].offset, t[7].offset,
                                              t[8].offset, t[9].offset};
  }
}

static int dev_alloc(void **p, size_t bytes, const char *what) {
  if (cudaMalloc(p, bytes) == cudaSuccess) return cudaMemset(*p, 0, bytes) == cudaSuccess ? LSTMD_OK : LSTMD_ECUDA;
  cudaGetLastError();
  *p = NULL;
  lstmd_errorf("CUDA: cannot allocate %.1f MiB for %s", (double)bytes / 1048576.0, what);
  return LSTMD_ENOMEM;
}

static int create_streams(struct gpu_engine *g) {
  LSTMD_CHECK_CUDA(cudaStreamCreateWithFlags(&g->compute, cudaStreamNonBlocking));
  LSTMD_CHECK_CUDA(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking));
  LSTMD_CHECK_CUDA(cudaStreamCreateWithFlags(&g->comm_stream, cudaStreamNonBlocking));
  for (int i = 0; i < 2; i++) LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&g->copy_done[i], cudaEventDisableTiming));
  LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&g->inputs_free, cudaEventDisableTiming));
  LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&g->scalars_ready, cudaEventDisableTiming));
  LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&g->comm_done, cudaEventDisableTiming));
  for (int i = 0; i < kMaxRegions; i++)
    LSTMD_CHECK_CUDA(cudaEventCreateWithFlags(&g->regions[i], cudaEventDisableTiming));
  LSTMD_CHECK_CUDA(cudaEventRecord(g->inputs_free, g->compute));
  for (int i = 0; i < 2; i++) LSTMD_CHECK_CUDA(cudaEventRecord(g->copy_done[i], g->copy));
  return LSTMD_OK;
}

static int alloc_buffers(struct gpu_engine *g) {
  const size_t n = g->base.model->n_params * sizeof(float);
  LSTMD_TRY(dev_alloc((void **)&g->params, n, "parameters"));
  LSTMD_TRY(dev_alloc((void **)&g->grads, n, "gradients"));
  LSTMD_TRY(dev_alloc((void **)&g->m, n, "optimizer moments"));
  LSTMD_TRY(dev_alloc((void **)&g->v, n, "optimizer moments"));
  LSTMD_TRY(dev_alloc((void **)&g->d_loss, sizeof(double), "the loss sum"));
  LSTMD_TRY(dev_alloc((void **)&g->d_state, sizeof *g->d_state, "the optimizer's state"));
  LSTMD_CHECK_CUDA(cudaMallocHost((void **)&g->h_loss, sizeof(double)));
  LSTMD_CHECK_CUDA(cudaMallocHost((void **)&g->h_state, sizeof *g->h_state));
  const struct lstmd_model_shape *s = &g->base.model->shape;
  const size_t N = (size_t)g->base.cfg.seq_len * g->base.cfg.batch, B = (size_t)g->base.cfg.batch;
  g->staging_bytes = s->kind == LSTMD_MODEL_TEXT       ? 2 * N * sizeof(int32_t)
                     : s->kind == LSTMD_MODEL_CLASSIFY ? (N + 2 * B) * sizeof(int32_t)
                                                       : N * (size_t)(s->width + s->horizon) * sizeof(float);
  for (int i = 0; i < 2; i++) LSTMD_CHECK_CUDA(cudaMallocHost(&g->staging[i], g->staging_bytes));
  return LSTMD_OK;
}

static void gpu_destroy(struct lstmd_engine *e);
static const struct lstmd_engine_ops kGpuOps;

int lstmd_engine_gpu_create(const struct lstmd_engine *base, struct lstmd_engine **out) {
  *out = NULL;
  if (base->cfg.stages > 1) return lstmd_engine_pipe_gpu_create(base, out);
  struct gpu_engine *g = calloc(1, sizeof *g);
  if (!g) return LSTMD_ENOMEM;
  g->base = *base;
  g->base.ops = &kGpuOps;
  const struct lstmd_engine_config *cfg = &base->cfg;
  g->dtype = dtype_of(cfg->precision);
  g->fp16 = cfg->precision == LSTMD_PRECISION_FP16;
  lstmd_loss_scaler_init(&g->seen.scaler);
  g->bucket_floats = lstmd_engine_bucket_floats(cfg);
  int rc = lstmd_cuda_use_device(cfg->gpu_device);
  if (!rc) lstmd_cuda_describe_device(g->device_desc, sizeof g->device_desc);
  if (!rc) rc = create_streams(g);
  if (!rc) rc = alloc_buffers(g);
  if (!rc && LSTMD_CUDA_FAILED(cudaDeviceSynchronize())) rc = LSTMD_ECUDA; /* the zeroing */
  /* The model itself is made in gpu_start (see 5.). */
  g->mc = (struct lstmd_cuda_model_config){
      .steps = cfg->seq_len, .batch = cfg->batch, .dtype = g->dtype,
      .allow_tf32 = cfg->precision == LSTMD_PRECISION_TF32, .dropout = cfg->dropout,
      .seed = cfg->seed * 1000003ULL + (unsigned)base->rank, .algo = -1};
  lstmd_gpu_model_layout(base->model, &g->mc.layout);
  if (cfg->teacher) {
    g->tc = g->mc;
    g->tc.dropout = 0.0f;
    g->tc.dtype = LSTMD_DT_F32; /* soft targets without 16-bit error, as the CPU's teacher */
    g->tc.allow_tf32 = 0;
    lstmd_gpu_model_layout(cfg->teacher, &g->tc.layout);
    if (!rc) rc = dev_alloc((void **)&g->t_params, cfg->teacher->n_params * sizeof(float), "teacher parameters");
    if (!rc) rc = dev_alloc((void **)&g->d_teacher_loss, sizeof(double), "the teacher's loss");
  }
  if (rc) {
    gpu_destroy(&g->base);
    return rc;
  }
  *out = &g->base;
  return LSTMD_OK;
}

static void gpu_destroy(struct lstmd_engine *e) {
  struct gpu_engine *g = gpu_of(e);
  if (g->compute) cudaStreamSynchronize(g->compute);
  lstmd_nccl_destroy(g->nccl);
  lstmd_cuda_model_destroy(g->cm);
  lstmd_cuda_model_destroy(g->teacher);
  cudaFree(g->t_params);
  cudaFree(g->d_teacher_loss);
  cudaFree(g->params);
  cudaFree(g->grads);
  cudaFree(g->m);
  cudaFree(g->v);
  cudaFree(g->d_loss);
  cudaFree(g->d_state);
  cudaFree(g->masks);
  if (g->h_loss) cudaFreeHost(g->h_loss);
  if (g->h_state) cudaFreeHost(g->h_state);
  for (int i = 0; i < 2; i++) {
    if (g->staging[i]) cudaFreeHost(g->staging[i]);
    if (g->copy_done[i]) cudaEventDestroy(g->copy_done[i]);
  }
  cudaEvent_t evs[] = {g->inputs_free, g->scalars_ready, g->comm_done};
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
    if (evs[i]) cudaEventDestroy(evs[i]);
  for (int i = 0; i < kMaxRegions; i++)
    if (g->regions[i]) cudaEventDestroy(g->regions[i]);
  if (g->copy) cudaStreamDestroy(g->copy);
  if (g->comm_stream) cudaStreamDestroy(g->comm_stream);
  if (g->compute) cudaStreamDestroy(g->compute);
  cudaGetLastError();
  free(g);
}

/* A model on every rank with rank 0's cuDNN set-up (see 5.): rank 0 times the candidates,
 * the ranks vote on its success, it broadcasts the choice, the others make theirs with it
 * forced, and the ranks vote again. Collective. */
static int create_one(struct gpu_engine *g, struct lstmd_cuda_model_config *mc,
                      struct lstmd_cuda_model **out) {
  struct lstmd_comm *c = g->base.comm;
  const int several = g->base.world > 1, root = g->base.rank == 0;
  int rc = root || !several ? lstmd_cuda_model_create(mc, g->compute, out) : LSTMD_OK;
  if (several) {
    LSTMD_TRY(lstmd_comm_agree(c, rc, NULL));
    if (root) lstmd_cuda_model_choice(*out, &mc->choice);
    LSTMD_TRY(lstmd_comm_bcast(c, &mc->choice, sizeof mc->choice, 0)); /* three ints */
    if (!root) {
      mc->force_choice = 1;
      rc = lstmd_cuda_model_create(mc, g->compute, out);
    }
    rc = lstmd_comm_agree(c, rc, NULL);
  }
  return rc;
}

/* The student, then the teacher (see 7.). Collective. */
static int create_model(struct gpu_engine *g) {
  LSTMD_TRY(create_one(g, &g->mc, &g->cm));
  if (g->fp16) lstmd_cuda_model_scale_gradients_by(g->cm, &g->d_state->scaler.scale);
  if (!g->base.cfg.teacher) return LSTMD_OK;
  LSTMD_TRY(create_one(g, &g->tc, &g->teacher));
  lstmd_cuda_model_set_distill(g->cm, lstmd_cuda_model_output(g->teacher),
                               g->base.cfg.kd_temperature, g->base.cfg.kd_alpha);
  return LSTMD_OK;
}

/* Collectives first, so that a local failure below cannot leave another rank inside one: the
 * fp16 loss scale from rank 0, then (several ranks) the NCCL communicator and the model. */
static int gpu_start(struct lstmd_engine *e, const struct lstmd_optim *o,
                     const struct lstmd_train_progress *p) {
  struct gpu_engine *g = gpu_of(e);
  const size_t n = g->base.model->n_params * sizeof(float);
  double saved[2] = {p ? p->loss_scale : 0.0, p ? (double)p->loss_scale_good_steps : 0.0};
  if (g->fp16 && g->base.world > 1) LSTMD_TRY(lstmd_comm_bcast(g->base.comm, saved, sizeof saved, 0));
  if (g->base.world > 1 && !g->nccl)
    LSTMD_TRY(lstmd_nccl_create(g->base.comm, g->base.model->n_params, g->base.cfg.comm_timeout_s, &g->nccl));
  if (!g->cm) LSTMD_TRY(create_model(g));
  struct lstmd_optim_state *st = &g->seen; /* the device's state starts from the host's */
  if (g->fp16 && saved[0] > 0.0)
    LSTMD_TRY(lstmd_loss_scaler_restore(&st->scaler, saved[0], (long)saved[1]));
  st->applied = o ? o->step : 0;
  LSTMD_CHECK_CUDA(cudaMemcpy(g->d_state, st, sizeof *st, cudaMemcpyHostToDevice));
  LSTMD_CHECK_CUDA(cudaMemcpy(g->params, g->base.model->params, n, cudaMemcpyHostToDevice));
  const struct lstmd_model *teacher = g->base.cfg.teacher;
  if (teacher)
    LSTMD_CHECK_CUDA(cudaMemcpy(g->t_params, teacher->params, teacher->n_params * sizeof(float),
                                cudaMemcpyHostToDevice));
  if (o) {
    LSTMD_CHECK_CUDA(cudaMemcpy(g->m, o->m, n, cudaMemcpyHostToDevice));
    if (o->v) LSTMD_CHECK_CUDA(cudaMemcpy(g->v, o->v, n, cudaMemcpyHostToDevice));
  }
  /* cudaMemcpy runs on the legacy stream, which our non-blocking streams do not wait for, and
   * may return before the DMA from its staging buffer is done. */
  LSTMD_CHECK_CUDA(cudaDeviceSynchronize());
  LSTMD_TRY(lstmd_cuda_model_load_weights(g->cm, g->params));
  if (g->teacher) LSTMD_TRY(lstmd_cuda_model_load_weights(g->teacher, g->t_params));
  LSTMD_CHECK_CUDA(cudaStreamSynchronize(g->compute));
  g->uploaded = 1;
  return LSTMD_OK;
}

/* The optimizer's device state into g->seen and o->step (a wait: logged steps and checkpoints
 * only, see 1.). `step`: the step the host is at, for the message. A non-finite norm or an fp16
 * give-up the device saw since is LSTMD_ENONFINITE / LSTMD_EINVAL, printed once, with
 * *bad_steps_ago (may be NULL) how many steps before `step` it happened. */
static int read_state(struct gpu_engine *g, struct lstmd_optim *o, long step, long *bad_steps_ago) {
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(g->h_state, g->d_state, sizeof *g->h_state,
                                   cudaMemcpyDeviceToHost, g->compute));
  LSTMD_CHECK_CUDA(cudaEventRecord(g->scalars_ready, g->compute));
  LSTMD_TRY(wait_event(g, g->scalars_ready));
  g->seen = *g->h_state;
  const struct lstmd_optim_state *st = &g->seen;
  if (o) o->step = st->applied;
  const long bad = st->gave_up ? st->gave_up : st->first_bad;
  if (!bad) return LSTMD_OK;
  if (bad_steps_ago) *bad_steps_ago = st->calls - bad;
  if (!g->told_failure && st->gave_up) lstmd_loss_scaler_give_up_message(&st->scaler);
  else if (!g->told_failure && !bad_steps_ago)
    lstmd_errorf("step %ld: the gradient norm was not finite, or past %.2g (optim_rules.h); no "
                 "update since, and no checkpoint of it", step - (st->calls - bad),
                 LSTMD_MAX_GRAD_NORM);
  g->told_failure = 1;
  return st->gave_up ? LSTMD_EINVAL : LSTMD_ENONFINITE;
}

/* Only rank 0's host copy is ever read (checkpoints), so the other ranks skip the copy. */
static int gpu_sync_host(struct lstmd_engine *e, struct lstmd_optim *o,
                         struct lstmd_train_progress *p) {
  struct gpu_engine *g = gpu_of(e);
  if (e->rank != 0) return LSTMD_OK;
  const size_t n = g->base.model->n_params * sizeof(float);
  LSTMD_TRY(read_state(g, o, p ? p->step : 0, NULL)); /* also orders the copies below */
  LSTMD_CHECK_CUDA(cudaMemcpy(g->base.model->params, g->params, n, cudaMemcpyDeviceToHost));
  if (o) {
    LSTMD_CHECK_CUDA(cudaMemcpy(o->m, g->m, n, cudaMemcpyDeviceToHost));
    if (o->v) LSTMD_CHECK_CUDA(cudaMemcpy(o->v, g->v, n, cudaMemcpyDeviceToHost));
  }
  if (p) {
    p->loss_scale = g->fp16 ? g->seen.scaler.scale : 0.0;
    p->loss_scale_good_steps = g->fp16 ? g->seen.scaler.good_steps : 0;
  }
  return LSTMD_OK;
}

/* The batch into the model's device inputs through pinned memory on the copy stream (see 3.). */
int lstmd_gpu_copy_batch(struct gpu_engine *g, const struct lstmd_batch *b) {
  const int k = (int)(g->micro_count++ % 2);
  struct lstmd_cuda_inputs *in = lstmd_cuda_model_inputs(g->cm);
  const size_t N = (size_t)g->base.cfg.seq_len * g->base.cfg.batch;
  if (b->steps != g->base.cfg.seq_len || b->batch != g->base.cfg.batch) {
    lstmd_errorf("GPU engine: batch of %dx%d, expected %dx%d", b->steps, b->batch, g->base.cfg.seq_len,
                 g->base.cfg.batch);
    return LSTMD_EINVAL;
  }
  LSTMD_TRY(wait_event(g, g->copy_done[k])); /* the staging buffer's last copy (see 3.) */
  char *st = g->staging[k];
  void *dst[2];
  size_t bytes[2];
  if (g->base.model->shape.kind == LSTMD_MODEL_CLASSIFY) { /* see 8. */
    LSTMD_TRY(lstmd_cuda_model_set_lengths(g->cm, b->lengths)); /* host work: the descriptors */
    const size_t ids = N * sizeof(int32_t), col = (size_t)g->base.cfg.batch * sizeof(int32_t);
    memcpy(st, b->ids, ids);
    memcpy(st + ids, b->lengths, col);
    memcpy(st + ids + col, b->labels, col);
    LSTMD_CHECK_CUDA(cudaStreamWaitEvent(g->copy, g->inputs_free, 0));
    LSTMD_CHECK_CUDA(cudaMemcpyAsync(in->ids, st, ids, cudaMemcpyHostToDevice, g->copy));
    LSTMD_CHECK_CUDA(cudaMemcpyAsync(in->lengths, st + ids, col, cudaMemcpyHostToDevice, g->copy));
    LSTMD_CHECK_CUDA(cudaMemcpyAsync(in->labels, st + ids + col, col, cudaMemcpyHostToDevice, g->copy));
    LSTMD_CHECK_CUDA(cudaEventRecord(g->copy_done[k], g->copy));
    LSTMD_CHECK_CUDA(cudaStreamWaitEvent(g->compute, g->copy_done[k], 0));
    return LSTMD_OK;
  }
  if (g->base.model->shape.kind == LSTMD_MODEL_TEXT) {
    bytes[0] = bytes[1] = N * sizeof(int32_t);
    memcpy(st, b->ids, bytes[0]);
    memcpy(st + bytes[0], b->targets, bytes[1]);
    dst[0] = in->ids;
    dst[1] = in->targets;
  } else {
    bytes[0] = N * (size_t)b->width * sizeof(float);
    bytes[1] = N * (size_t)b->horizon * sizeof(float);
    memcpy(st, b->x, bytes[0]);
    memcpy(st + bytes[0], b->y, bytes[1]);
    dst[0] = in->x;
    dst[1] = in->y;
  }
  LSTMD_CHECK_CUDA(cudaStreamWaitEvent(g->copy, g->inputs_free, 0));
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(dst[0], st, bytes[0], cudaMemcpyHostToDevice, g->copy));
  LSTMD_CHECK_CUDA(cudaMemcpyAsync(dst[1], st + bytes[0], bytes[1], cudaMemcpyHostToDevice, g->copy));
  LSTMD_CHECK_CUDA(cudaEventRecord(g->copy_done[k], g->copy));
  LSTMD_CHECK_CUDA(cudaStreamWaitEvent(g->compute, g->copy_done[k], 0));
  return LSTMD_OK;
}

/* Sums [lo, hi) of the gradients over the ranks on the comm stream, in buckets, after the
 * compute stream has produced it. */
static int reduce_region(struct gpu_engine *g, size_t lo, size_t hi) {
  if (hi <= lo) return LSTMD_OK;
  if (g->n_regions == kMaxRegions) {
    lstmd_errorf("GPU engine: more than %d gradient regions in one step", kMaxRegions);
    return LSTMD_EINVAL;
  }
  cudaEvent_t ev = g->regions[g->n_regions++];
  LSTMD_CHECK_CUDA(cudaEventRecord(ev, g->compute));
  LSTMD_CHECK_CUDA(cudaStreamWaitEvent(g->comm_stream, ev, 0));
  lstmd_nvtx_push("all-reduce enqueue");
  const int rc = lstmd_nccl_allreduce_sum_pieces(g->nccl, g->grads + lo, hi - lo, g->bucket_floats,
                                                 g->comm_stream);
  lstmd_nvtx_pop();
  return rc;
}

static int on_ready(void *ctx, size_t first) {
  struct gpu_engine *g = ctx;
  if (!g->collecting) return LSTMD_OK;
  int rc = reduce_region(g, first, g->ready_hi);
  g->ready_hi = first;
  return rc;
}

/* The teacher's output on the window the student's inputs hold (see 7.). */
static int teacher_forward(struct gpu_engine *g) {
  const struct lstmd_cuda_inputs *from = lstmd_cuda_model_inputs(g->cm);
  struct lstmd_cuda_inputs *to = lstmd_cuda_model_inputs(g->teacher);
  const struct lstmd_model_shape *s = &g->base.model->shape;
  const size_t N = (size_t)g->base.cfg.seq_len * g->base.cfg.batch;
  if (s->kind == LSTMD_MODEL_TEXT)
    LSTMD_CHECK_CUDA(cudaMemcpyAsync(to->ids, from->ids, N * sizeof(int32_t), cudaMemcpyDeviceToDevice, g->compute));
  else
    LSTMD_CHECK_CUDA(cudaMemcpyAsync(to->x, from->x, N * s->width * sizeof(float), cudaMemcpyDeviceToDevice, g->compute));
  lstmd_nvtx_push("teacher forward");
  const int rc = lstmd_cuda_model_forward(g->teacher, g->t_params, 0.0f, 0, 0, g->d_teacher_loss);
  lstmd_nvtx_pop();
  return rc;
}

/* One window; dropout masks are cuDNN's own (seeded per rank), so `window` is not needed. The
 * loss is added on the device; the host reads it (and waits) only on the last window of a
 * logged step (see 1.). */
static int gpu_window(struct lstmd_engine *e, const struct lstmd_batch *batch, float grad_scale,
                      uint64_t window, int first, int last, double *loss_sum,
                      double *comm_wait_s) {
  struct gpu_engine *g = gpu_of(e);
  (void)window;
  const double t_begin = lstmd_now_s();
  *loss_sum = 0.0;
  *comm_wait_s = 0.0;
  if (!g->uploaded) {
    lstmd_errorf("GPU engine: parameters were never uploaded");
    return LSTMD_EINVAL;
  }
  if (g->nccl && lstmd_nccl_failed(g->nccl)) return LSTMD_ECOMM; /* said why already */
  const int wide = g->dtype == LSTMD_DT_F32; /* see 2. */
  LSTMD_TRY(lstmd_gpu_copy_batch(g, batch));
  if (first) LSTMD_CHECK_CUDA(cudaMemsetAsync(g->grads, 0, g->base.model->n_params * sizeof(float), g->compute));
  if (first || !wide) LSTMD_TRY(lstmd_cuda_model_zero_lstm_grads(g->cm));
  const int staged = g->nccl && lstmd_nccl_mode(g->nccl) == LSTMD_NCCL_HOST_STAGED;
  g->collecting = last && g->nccl && !staged;
  g->ready_hi = g->base.model->n_params;
  g->n_regions = 0;
  if (g->teacher) LSTMD_TRY(teacher_forward(g)); /* see 7. */
  lstmd_nvtx_push("forward");
  int rc = lstmd_cuda_model_forward(g->cm, g->params, grad_scale, 1, g->base.cfg.carry_state,
                                    g->d_loss); /* fp16: times the device's loss scale */
  lstmd_nvtx_pop();
  if (rc) return rc;
  lstmd_nvtx_push("backward");
  const int flush = !wide ? LSTMD_FLUSH_ADD : last ? LSTMD_FLUSH_SET : LSTMD_FLUSH_NONE;
  rc = lstmd_cuda_model_backward(g->cm, g->params, g->grads, flush, on_ready, g);
  lstmd_nvtx_pop();
  if (rc) return rc;
  LSTMD_CHECK_CUDA(cudaEventRecord(g->inputs_free, g->compute));
  const int read = last && g->report;
  if (read) { /* the loss since the last read, then from zero again */
    LSTMD_CHECK_CUDA(cudaMemcpyAsync(g->h_loss, g->d_loss, sizeof(double), cudaMemcpyDeviceToHost, g->compute));
    LSTMD_CHECK_CUDA(cudaMemsetAsync(g->d_loss, 0, sizeof(double), g->compute));
    LSTMD_CHECK_CUDA(cudaEventRecord(g->scalars_ready, g->compute));
  }
  if (g->collecting) {
    LSTMD_TRY(reduce_region(g, 0, g->ready_hi)); /* whatever no callback covered */
    LSTMD_CHECK_CUDA(cudaEventRecord(g->comm_done, g->comm_stream));
    LSTMD_CHECK_CUDA(cudaStreamWaitEvent(g->compute, g->comm_done, 0));
    lstmd_nccl_watch(g->nccl, g->comm_done);
  }
  if (staged && last) { /* ranks sharing a GPU: through the host, a wait by nature */
    const double t = lstmd_now_s();
    LSTMD_TRY(lstmd_nccl_allreduce_sum(g->nccl, g->grads, g->base.model->n_params, g->compute));
    if (read) *comm_wait_s = lstmd_now_s() - t;
  }
  if (!read) {
    lstmd_trace_event(e->trace, 1, "enqueue forward+backward (GPU)", t_begin, lstmd_now_s(), NULL);
    return LSTMD_OK;
  }
  lstmd_nvtx_push("wait for backward");
  rc = wait_event(g, g->scalars_ready);
  lstmd_nvtx_pop();
  if (rc) return rc;
  *loss_sum = *g->h_loss;
  const double t_backward = lstmd_now_s(); /* the GPU has finished backward */
  lstmd_trace_event(e->trace, 1, "forward+backward (GPU)", t_begin, t_backward, NULL);
  if (!g->collecting) return LSTMD_OK;
  lstmd_nvtx_push("all-reduce wait");
  rc = wait_event(g, g->comm_done);
  lstmd_nvtx_pop();
  *comm_wait_s = lstmd_now_s() - t_backward;
  lstmd_trace_event(e->trace, LSTMD_TRACE_TID_MAIN, "wait for all-reduce", t_backward,
                    t_backward + *comm_wait_s, NULL);
  return rc;
}

static void gpu_reset(struct lstmd_engine *e) { lstmd_cuda_model_reset_state(gpu_of(e)->cm); }

static int gpu_step(struct lstmd_engine *e, const struct lstmd_step_input *in,
                    struct lstmd_step_result *out) {
  struct gpu_engine *g = gpu_of(e);
  g->report = in->report;
  lstmd_nvtx_push("micro-batches (GPU)");
  int rc = lstmd_engine_run_windows(e, in, out, gpu_window, gpu_reset);
  lstmd_nvtx_pop();
  out->loss_pending = !in->report;
  out->comm_untimed = !in->report;
  return rc;
}

/* See 4.: no host wait unless `report`. */
static int gpu_optim_step(struct lstmd_engine *e, struct lstmd_optim *o, int report,
                          struct lstmd_optim_outcome *out) {
  struct gpu_engine *g = gpu_of(e);
  const struct lstmd_optim_config *c = &o->cfg;
  const size_t n = g->base.model->n_params;
  const struct lstmd_optim_rule rule = {
      .clip_norm = c->clip_norm, .lr = c->lr, .warmup = c->warmup_steps, .total = c->total_steps,
      .cosine = c->schedule == LSTMD_SCHEDULE_COSINE, .beta1 = c->beta1, .beta2 = c->beta2,
      .fp16 = g->fp16};
  *out = (struct lstmd_optim_outcome){.grad_norm = NAN};
  lstmd_nvtx_push("optimizer");
  int rc = LSTMD_OK;
  if (LSTMD_CUDA_FAILED(cudaMemsetAsync(&g->d_state->sumsq, 0, sizeof(double), g->compute)))
    rc = LSTMD_ECUDA;
  if (!rc) rc = lstmd_cuda_sumsq(n, g->grads, &g->d_state->sumsq, g->compute);
  if (!rc) rc = lstmd_cuda_optim_decide(g->d_state, &rule, g->compute);
  if (!rc && c->algo == LSTMD_OPTIM_ADAMW)
    rc = lstmd_cuda_adamw(n, g->params, g->grads, g->m, g->v, c->beta1, c->beta2, c->eps,
                          c->weight_decay, g->d_state, g->compute);
  else if (!rc)
    rc = lstmd_cuda_sgd(n, g->params, g->grads, g->m, c->momentum, c->weight_decay, g->d_state,
                        g->compute);
  /* unchanged when skipped; with pruning the prune op refreshes it after masking */
  if (!rc && !g->masks_version) rc = lstmd_cuda_model_load_weights(g->cm, g->params);
  if (!rc && report) {
    rc = read_state(g, o, 0, &out->bad_steps_ago);
    out->grad_norm = g->seen.norm;
  }
  lstmd_nvtx_pop();
  return rc;
}

static double gpu_loss_scale(const struct lstmd_engine *e) {
  const struct gpu_engine *g = (const struct gpu_engine *)e;
  return g->fp16 ? g->seen.scaler.scale : 0.0; /* as last read (see 4.) */
}

static void gpu_describe(const struct lstmd_engine *e, char *buf, size_t n) {
  const struct gpu_engine *g = (const struct gpu_engine *)e;
  struct lstmd_cuda_lstm_choice choice;
  const double ms = lstmd_cuda_model_choice(g->cm, &choice);
  char timing[48] = "", lstm[96];
  if (ms > 0.0) snprintf(timing, sizeof timing, ", %.2f ms per forward+backward", ms);
  if (g->mc.layout.layer_norm)
    snprintf(lstm, sizeof lstm, "layer-normalised LSTM (cuBLAS and fused kernels)");
  else if (g->mc.layout.classify)
    snprintf(lstm, sizeof lstm, "cuDNN %sLSTM algorithm %s on padded variable-length sequences",
             g->mc.layout.bidirectional ? "bidirectional " : "", lstmd_rnn_algo_name(choice.algo));
  else
    snprintf(lstm, sizeof lstm, "cuDNN LSTM algorithm %s%s%s", lstmd_rnn_algo_name(choice.algo),
             choice.packed ? " (packed layout)" : "", timing);
  snprintf(buf, n, "GPU %d (%s), %s, %s, %.2f GiB on the device; "
           "gradients summed by %s", g->base.cfg.gpu_device, g->device_desc, precision_name(g->base.cfg.precision),
           lstm,
           (double)(lstmd_cuda_model_device_bytes(g->cm) + 4 * g->base.model->n_params * sizeof(float)) /
               (1024.0 * 1024.0 * 1024.0),
           g->nccl ? lstmd_nccl_describe(g->nccl) : "nothing (one rank)");
}

static const struct lstmd_engine_ops kGpuOps = {
    .name = "gpu",
    .destroy = gpu_destroy,
    .start = gpu_start,
    .step = gpu_step,
    .optim_step = gpu_optim_step,
    .sync_host = gpu_sync_host,
    .evaluate = lstmd_gpu_evaluate,
    .gather_state = lstmd_gpu_gather_state,
    .set_state = lstmd_gpu_set_state,
    .loss_scale = gpu_loss_scale,
    .prune = lstmd_gpu_prune,
    .describe = gpu_describe,
};
