/* gpu_model_engine.c (selftest group "model", with gpu_model.c) — the GPU engine's own ops
 * against the CPU engine's: pruning through the prune op, distillation with a teacher on the
 * device, and a checkpoint that goes CPU → GPU → CPU. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_model_fixtures.h"
#include "kernels/status.h"
#include "worker/io/checkpoint.h"
#include "worker/model/prune.h"
#include "worker/train/train_config.h"
#include "worker/selftest/selftest.h"

/* Pruning on the GPU engine (its prune op: masks on the device, recomputed on the host at a
 * pruning step) against the trainer's host path on the CPU engine: 5 SGD steps pruning to
 * 43.75 % and 50 % at steps 2 and 3, the GPU's steps unlogged but the last (no host wait). Masks
 * are a function of weights that differ by rounding between the backends, so they must agree on
 * all but a few near-ties; the GPU's pruned weights must be exactly zero, its masks exactly at
 * the schedule's sparsity, and the five steps' summed loss (which needs the masked weights in
 * cuDNN's weight space) the CPU's. Then a second GPU engine, as a resumed run would, starts from
 * the pruned weights with those masks and trains a step: the pruned weights stay zero. */
void gm_test_pruning(void) {
  enum { kSteps = 5 };
  struct lstmd_model *cpu = gm_make_model(1, 16, 2, 41), *gpu = gm_clone_model(cpu);
  struct lstmd_batch b[2];
  for (int i = 0; i < 2; i++) gm_fill_batch(&b[i], cpu, T, B);
  struct lstmd_optim_config oc = {.algo = LSTMD_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f,
                                  .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = 2 * kSteps};
  const struct lstmd_prune_config pc = {.target_sparsity = 0.5f, .begin_step = 1, .end_step = 3,
                                        .frequency = 1, .power = 3.0f};
  struct lstmd_optim *o_cpu = NULL, *o_gpu = NULL, *o_res = NULL;
  struct lstmd_prune *p_cpu = NULL, *p_gpu = NULL;
  lstmd_optim_create(&oc, cpu->n_params, &o_cpu);
  lstmd_optim_create(&oc, cpu->n_params, &o_gpu);
  lstmd_optim_create(&oc, cpu->n_params, &o_res);
  lstmd_prune_create(&pc, cpu, &p_cpu);
  lstmd_prune_create(&pc, gpu, &p_gpu);
  struct lstmd_engine *dc = gm_make_engine(cpu, -1, LSTMD_PRECISION_FP32, 0);
  struct lstmd_engine *dg = gm_make_engine(gpu, 0, LSTMD_PRECISION_FP32, 0);
  int rc = dg && dc && p_cpu && p_gpu && dg->ops->prune ? dg->ops->start(dg, o_gpu, NULL) : LSTMD_EINVAL;
  const double targets = gm_targets_of(cpu, T, B);
  double cpu_sum = 0.0, gpu_sum = 0.0;
  for (int s = 1; !rc && s <= kSteps; s++) {
    double loss = 0.0;
    rc = gm_train(dc, o_cpu, cpu, b + (s - 1) % 2, 1, 1, 1, &loss);
    cpu_sum += loss;
    if (!rc) lstmd_prune_after_step(p_cpu, cpu, cpu->params, s);
    struct gm_batch_feed feed = {b + (s - 1) % 2, 1, 0};
    const int report = s == kSteps; /* the loss of the unlogged steps comes with this one */
    const struct lstmd_step_input in = {gm_next_batch, &feed, 1, (uint64_t)s, (float)(1.0 / targets), report};
    struct lstmd_step_result out;
    struct lstmd_optim_outcome outcome;
    int recomputed = 0;
    if (!rc) rc = dg->ops->step(dg, &in, &out);
    if (!rc) gpu_sum += out.loss_sum / targets;
    if (!rc) rc = dg->ops->optim_step(dg, o_gpu, report, &outcome);
    if (!rc) rc = dg->ops->prune(dg, p_gpu, s, &recomputed);
    if (!rc && recomputed != lstmd_prune_due(&pc, s)) rc = LSTMD_EINVAL;
  }
  if (!rc) rc = dg->ops->sync_host(dg, o_gpu, NULL);
  lstmd_check_true("pruning: 5 steps on the GPU engine with its prune op", rc == 0);
  if (!rc) {
    size_t differ = 0, total = 0, nonzero_pruned = 0;
    double worst_sparsity = 0.0;
    for (int i = 0; i < p_gpu->n; i++) {
      const struct lstmd_tensor *t = &gpu->tensors[p_gpu->tensor[i]];
      for (size_t j = 0; j < t->count; j++) {
        differ += p_gpu->mask[i][j] != p_cpu->mask[i][j];
        nonzero_pruned += !p_gpu->mask[i][j] && gpu->params[t->offset + j] != 0.0f;
      }
      total += t->count;
      worst_sparsity = fmax(worst_sparsity, fabs(lstmd_prune_mask_sparsity(p_gpu, gpu, i) - 0.5));
    }
    char what[200];
    snprintf(what, sizeof what, "pruning: the GPU's pruned weights are exactly zero (%zu are not)",
             nonzero_pruned);
    lstmd_check_true(what, nonzero_pruned == 0);
    snprintf(what, sizeof what, "pruning: masks at 50 %% (worst off by %.4f)", worst_sparsity);
    lstmd_check_true(what, worst_sparsity < 0.01);
    snprintf(what, sizeof what, "pruning: GPU and CPU masks agree (%zu of %zu differ, < 1 %%)",
             differ, total);
    lstmd_check_true(what, differ * 100 < total);
    const double rel = fabs(gpu_sum - cpu_sum) / cpu_sum;
    snprintf(what, sizeof what, "pruning: the 5 steps' loss %.6f vs CPU %.6f (rel %.1e < 1e-3)",
             gpu_sum, cpu_sum, rel);
    lstmd_check_true(what, rel < 1e-3);
    /* a resumed run: pruned weights and masks from the start, not yet uploaded */
    struct lstmd_engine *dr = gm_make_engine(gpu, 0, LSTMD_PRECISION_FP32, 0);
    int recomputed = 0;
    int rr = dr ? dr->ops->start(dr, o_res, NULL) : LSTMD_EINVAL;
    if (!rr) rr = gm_train(dr, o_res, gpu, b, 2, 1, 1, NULL);
    if (!rr) rr = dr->ops->prune(dr, p_gpu, kSteps + 1, &recomputed);
    if (!rr) rr = dr->ops->sync_host(dr, o_res, NULL);
    nonzero_pruned = 0;
    for (int i = 0; !rr && i < p_gpu->n; i++) {
      const struct lstmd_tensor *t = &gpu->tensors[p_gpu->tensor[i]];
      for (size_t j = 0; j < t->count; j++)
        nonzero_pruned += !p_gpu->mask[i][j] && gpu->params[t->offset + j] != 0.0f;
    }
    snprintf(what, sizeof what, "pruning: a resumed engine keeps the pruned weights zero (%zu are not)",
             nonzero_pruned);
    lstmd_check_true(what, !rr && !recomputed && nonzero_pruned == 0);
    lstmd_engine_destroy(dr);
  }
  lstmd_engine_destroy(dc);
  lstmd_engine_destroy(dg);
  lstmd_prune_destroy(p_cpu);
  lstmd_prune_destroy(p_gpu);
  lstmd_optim_destroy(o_cpu);
  lstmd_optim_destroy(o_gpu);
  lstmd_optim_destroy(o_res);
  for (int i = 0; i < 2; i++) gm_free_batch(&b[i]);
  lstmd_model_destroy(cpu);
  lstmd_model_destroy(gpu);
}

/* Distillation on the GPU engine (a teacher model on the device, kd losses in CUDA) against the
 * CPU engine's (kd_cpu.c): 3 steps from an H16 student and an H24 teacher of 2 layers, T = 2,
 * alpha 0.5: losses per step and the updates, with AdamW, with SGD (linear in the gradients, so a
 * uniform scale error shows) and carried state (the teacher must still start every window from
 * zero), and fp16 (the loss scale through the kd kernels). */
void gm_test_distill(int text, int algo, int precision, int carry) {
  enum { kSteps = 3 };
  struct lstmd_model *cpu = gm_make_model(text, 16, 2, 51), *gpu = gm_clone_model(cpu);
  struct lstmd_model *teacher = gm_make_model(text, 24, 2, 52);
  float *p0 = malloc(cpu->n_params * sizeof(float));
  memcpy(p0, cpu->params, cpu->n_params * sizeof(float));
  struct lstmd_batch b[2];
  for (int i = 0; i < 2; i++) gm_fill_batch(&b[i], cpu, T, B);
  struct lstmd_optim_config oc = {.algo = algo, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                                  .eps = 1e-8f, .momentum = 0.9f,
                                  .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = kSteps};
  struct lstmd_optim *o_cpu = NULL, *o_gpu = NULL;
  lstmd_optim_create(&oc, cpu->n_params, &o_cpu);
  lstmd_optim_create(&oc, cpu->n_params, &o_gpu);
  struct lstmd_engine_config c = {.seq_len = T, .batch = B, .carry_state = carry, .seed = 3,
                                  .bucket_mb = 4.0, .comm_timeout_s = 60.0, .threads = 1,
                                  .precision = LSTMD_PRECISION_FP32, .teacher = teacher,
                                  .kd_temperature = 2.0f, .kd_alpha = 0.5f};
  struct lstmd_engine_config cg = c;
  cg.precision = precision;
  const int fp32 = precision == LSTMD_PRECISION_FP32;
  struct lstmd_engine *dc = NULL, *dg = NULL;
  int rc = lstmd_engine_create(LSTMD_ENGINE_CPU, cpu, &c, NULL, &dc);
  if (!rc) rc = lstmd_engine_create(LSTMD_ENGINE_GPU, gpu, &cg, NULL, &dg);
  if (!rc) rc = dg->ops->start(dg, o_gpu, NULL);
  double lc[kSteps], lg[kSteps];
  if (!rc) rc = gm_train(dc, o_cpu, cpu, b, 2, kSteps, 1, lc);
  if (!rc) rc = gm_train(dg, o_gpu, gpu, b, 2, kSteps, 1, lg);
  if (!rc) rc = dg->ops->sync_host(dg, o_gpu, NULL);
  char what[200], name[96];
  snprintf(name, sizeof name, "distillation %s %s %s%s", text ? "text" : "series",
           algo == LSTMD_OPTIM_SGD ? "SGD" : "AdamW", fp32 ? "fp32" : "fp16",
           carry ? " carried state" : "");
  snprintf(what, sizeof what, "%s: %d steps on both engines", name, kSteps);
  lstmd_check_true(what, rc == 0);
  if (!rc) {
    double worst = 0.0;
    for (int s = 0; s < kSteps; s++) worst = fmax(worst, fabs(lg[s] - lc[s]) / lc[s]);
    snprintf(what, sizeof what, "%s: losses per step (rel %.1e < %.0e)", name, worst,
             fp32 ? 1e-4 : 2e-2);
    lstmd_check_true(what, worst < (fp32 ? 1e-4 : 2e-2));
    float *dcpu = malloc(cpu->n_params * sizeof(float)), *dgpu = malloc(cpu->n_params * sizeof(float));
    for (size_t i = 0; i < cpu->n_params; i++) {
      dcpu[i] = cpu->params[i] - p0[i];
      dgpu[i] = gpu->params[i] - p0[i];
    }
    /* SGD is linear in the gradients (a uniform scale error shows); Adam normalises them */
    snprintf(what, sizeof what, "%s: parameter updates", name);
    gm_check_rel(what, dgpu, dcpu, cpu->n_params,
              !fp32 ? 5e-2 : algo == LSTMD_OPTIM_SGD ? 1e-3 : 2e-2);
    free(dcpu);
    free(dgpu);
  }
  lstmd_engine_destroy(dc);
  lstmd_engine_destroy(dg);
  lstmd_optim_destroy(o_cpu);
  lstmd_optim_destroy(o_gpu);
  for (int i = 0; i < 2; i++) gm_free_batch(&b[i]);
  free(p0);
  lstmd_model_destroy(cpu);
  lstmd_model_destroy(gpu);
  lstmd_model_destroy(teacher);
}

/* got == want bit for bit; otherwise how many differ, the first, and the largest difference. */
static int check_bits(const char *what, const float *got, const float *want, size_t n) {
  size_t bad = 0, first = 0;
  double worst = 0.0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof(float))) {
      if (bad++ == 0) first = i;
      const double d = fabs((double)got[i] - want[i]);
      if (!(d <= worst)) worst = d; /* a NaN sticks */
    }
  char line[256];
  if (bad)
    snprintf(line, sizeof line, "%s: %zu of %zu differ (first [%zu] %.9g vs %.9g; max %.3g)", what,
             bad, n, first, got[first], want[first], worst);
  else
    snprintf(line, sizeof line, "%s: bit for bit (%zu values)", what, n);
  lstmd_check_true(line, bad == 0);
  return bad == 0;
}

static void poison(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = NAN;
}

/* The round trip by itself, no step on the GPU: d's device copy (uploaded from the CPU checkpoint
 * into g, og) → host, over NaN-poisoned host buffers → a checkpoint → a fresh CPU model. Each hop
 * moves fp32 bits (cudaMemcpy, an F32→F32 copy of the state, F32 safetensors) and computes
 * nothing, so the parameters, both moments, the step and the carried state must equal the CPU's
 * (m, o, h, c) exactly; a tolerance would hide a dropped tensor, an offset or a 16-bit detour. */
static void check_round_trip_exact(struct lstmd_engine *d, struct lstmd_model *g, struct lstmd_optim *og,
                                   const struct lstmd_train_progress *p, const struct lstmd_model *m,
                                   const struct lstmd_optim *o, const float *h, const float *c,
                                   size_t S, const char *path, const struct lstmd_data_meta *meta) {
  const size_t n = m->n_params;
  struct lstmd_train_progress q = *p;
  q.state_h = malloc(S * sizeof(float));
  q.state_c = malloc(S * sizeof(float));
  poison(g->params, n);
  poison(og->m, n);
  poison(og->v, n);
  poison(q.state_h, S);
  poison(q.state_c, S);
  int rc = d->ops->sync_host(d, og, &q);
  if (!rc) rc = d->ops->gather_state(d, q.state_h, q.state_c);
  lstmd_check_true("round trip CPU -> GPU -> host, no step: copied back", rc == 0);
  if (!rc) {
    check_bits("  GPU -> host: parameters", g->params, m->params, n);
    check_bits("  GPU -> host: exp_avg", og->m, o->m, n);
    check_bits("  GPU -> host: exp_avg_sq", og->v, o->v, n);
    check_bits("  GPU -> host: state h", q.state_h, h, S);
    check_bits("  GPU -> host: state c", q.state_c, c, S);
  }
  /* and through a checkpoint into a fresh CPU model */
  struct lstmd_model *back = NULL;
  struct lstmd_optim *ob = NULL;
  struct lstmd_data_meta mb;
  struct lstmd_train_progress r = {.state_batch = p->state_batch};
  r.state_h = malloc(S * sizeof(float));
  r.state_c = malloc(S * sizeof(float));
  if (!rc) rc = lstmd_checkpoint_save(path, g, og, meta, &q, "{}");
  if (!rc) rc = lstmd_checkpoint_load_model(path, &back, &mb);
  if (!rc) rc = lstmd_optim_create(&og->cfg, back->n_params, &ob);
  if (!rc) rc = lstmd_checkpoint_load_train(path, back, ob, &r, NULL);
  lstmd_check_true("round trip CPU -> GPU -> checkpoint -> CPU, no step: loaded", rc == 0);
  if (!rc) {
    lstmd_check_true("  back on the CPU: same shape and step",
               back->n_params == n && ob->step == o->step && r.step == p->step);
    check_bits("  back on the CPU: parameters", back->params, m->params, n);
    check_bits("  back on the CPU: exp_avg", ob->m, o->m, n);
    check_bits("  back on the CPU: exp_avg_sq", ob->v, o->v, n);
    check_bits("  back on the CPU: state h", r.state_h, h, S);
    check_bits("  back on the CPU: state c", r.state_c, c, S);
  }
  lstmd_model_destroy(back);
  lstmd_optim_destroy(ob);
  free(q.state_h);
  free(q.state_c);
  free(r.state_h);
  free(r.state_c);
  unlink(path);
}

/* 2 steps on the CPU → checkpoint → 2 on the GPU → checkpoint → 2 on the CPU, against 6 on the
 * CPU alone. Stream order, so the carried state travels through the checkpoints too. The trip
 * itself is checked exactly first (check_round_trip_exact); after that the runs differ only by
 * the two GPU steps, so they are held to test_training's fp32 AdamW bounds. */
void gm_test_checkpoint_round_trip(void) {
  enum { kBatches = 6 };
  char dir[] = "/tmp/lstmd-test-gpu-model-XXXXXX", path[256], path2[256];
  if (!mkdtemp(dir)) return;
  snprintf(path, sizeof path, "%s/ck.safetensors", dir);
  snprintf(path2, sizeof path2, "%s/trip.safetensors", dir);
  struct lstmd_model *ref = gm_make_model(1, 16, 2, 41), *m = gm_clone_model(ref);
  float *p0 = malloc(ref->n_params * sizeof(float));
  memcpy(p0, ref->params, ref->n_params * sizeof(float));
  struct lstmd_batch b[kBatches];
  for (int i = 0; i < kBatches; i++) gm_fill_batch(&b[i], ref, T, B);
  struct lstmd_optim_config oc = {.algo = LSTMD_OPTIM_ADAMW, .lr = 0.003f, .beta1 = 0.9f,
                                  .beta2 = 0.999f, .eps = 1e-8f, .clip_norm = 0.0f, /* no clip */
                                  .schedule = LSTMD_SCHEDULE_CONSTANT, .total_steps = 6};
  struct lstmd_optim *o_ref = NULL, *o = NULL;
  lstmd_optim_create(&oc, ref->n_params, &o_ref);
  lstmd_optim_create(&oc, ref->n_params, &o);
  struct lstmd_engine *d_ref = gm_make_engine(ref, -1, LSTMD_PRECISION_FP32, 1);
  double loss_ref[6], loss_trip[6];
  int rc = gm_train(d_ref, o_ref, ref, b, kBatches, 6, 1, loss_ref);
  struct lstmd_data_meta meta;
  memset(&meta, 0, sizeof meta);
  meta.info.kind = LSTMD_DATASET_TEXT;
  meta.info.vocab_size = 11;
  for (int k = 0; k < 11; k++) meta.info.vocab[k] = (uint8_t)('a' + k);
  meta.seq_len = T;
  meta.batch = B;
  const size_t S = (size_t)ref->shape.layers * B * ref->shape.hidden;
  struct lstmd_train_progress p = {.state_batch = B};
  p.state_h = calloc(S, sizeof(float));
  p.state_c = calloc(S, sizeof(float));
  float *h1 = malloc(S * sizeof(float)), *c1 = malloc(S * sizeof(float));
  /* CPU: steps 1-2, using batches 0-1 */
  struct lstmd_engine *d1 = gm_make_engine(m, -1, LSTMD_PRECISION_FP32, 1);
  if (!rc) rc = gm_train(d1, o, m, b, 2, 2, 1, loss_trip);
  if (!rc) rc = d1->ops->gather_state(d1, p.state_h, p.state_c);
  memcpy(h1, p.state_h, S * sizeof(float));
  memcpy(c1, p.state_c, S * sizeof(float));
  p.step = 2;
  if (!rc) rc = lstmd_checkpoint_save(path, m, o, &meta, &p, "{}");
  lstmd_engine_destroy(d1);
  /* GPU: steps 3-4 from the CPU checkpoint, batches 2-3 */
  struct lstmd_model *g = NULL;
  struct lstmd_data_meta meta2;
  if (!rc) rc = lstmd_checkpoint_load_model(path, &g, &meta2);
  struct lstmd_optim *og = NULL;
  if (!rc) rc = lstmd_optim_create(&oc, g->n_params, &og);
  if (!rc) rc = lstmd_checkpoint_load_train(path, g, og, &p, NULL);
  struct lstmd_engine *d2 = rc ? NULL : gm_make_engine(g, 0, LSTMD_PRECISION_FP32, 1);
  if (!rc && !d2) rc = LSTMD_ECUDA;
  if (!rc) rc = d2->ops->start(d2, og, &p);
  if (!rc) rc = d2->ops->set_state(d2, p.state_h, p.state_c);
  if (!rc) check_round_trip_exact(d2, g, og, &p, m, o, h1, c1, S, path2, &meta);
  if (!rc) rc = gm_train(d2, og, g, b + 2, 2, 2, 1, loss_trip + 2);
  if (!rc) rc = d2->ops->sync_host(d2, og, &p);
  if (!rc) rc = d2->ops->gather_state(d2, p.state_h, p.state_c);
  p.step = 4;
  if (!rc) rc = lstmd_checkpoint_save(path, g, og, &meta, &p, "{}");
  lstmd_check_true("checkpoint CPU -> GPU: resumed and saved again", rc == 0);
  lstmd_engine_destroy(d2);
  /* CPU: steps 5-6 from the GPU checkpoint, batches 4-5 */
  struct lstmd_model *c = NULL;
  struct lstmd_optim *oc2 = NULL;
  if (!rc) rc = lstmd_checkpoint_load_model(path, &c, &meta2);
  if (!rc) rc = lstmd_optim_create(&oc, c->n_params, &oc2);
  if (!rc) rc = lstmd_checkpoint_load_train(path, c, oc2, &p, NULL);
  struct lstmd_engine *d3 = rc ? NULL : gm_make_engine(c, -1, LSTMD_PRECISION_FP32, 1);
  if (!rc) rc = d3->ops->set_state(d3, p.state_h, p.state_c);
  if (!rc) rc = gm_train(d3, oc2, c, b + 4, 2, 2, 1, loss_trip + 4);
  lstmd_check_true("checkpoint GPU -> CPU: resumed and trained", rc == 0 && oc2->step == 6);
  if (!rc) {
    /* Steps 1-2 ran the same CPU code on the same data: bit for bit. Steps 3-6 differ by the two
     * GPU steps only, the trip being exact: test_training's fp32 bounds (loss 1e-4; AdamW
     * updates 2e-2, which is about Adam normalising near-zero gradients, not the trip). */
    lstmd_check_true("CPU→GPU→CPU vs CPU only: steps 1-2 losses identical",
               loss_trip[0] == loss_ref[0] && loss_trip[1] == loss_ref[1]);
    double worst = 0.0;
    for (int s = 2; s < 6; s++) worst = fmax(worst, fabs(loss_trip[s] - loss_ref[s]) / loss_ref[s]);
    char what[160];
    snprintf(what, sizeof what, "CPU→GPU→CPU vs CPU only: steps 3-6 losses (rel %.1e < 1e-4)", worst);
    lstmd_check_true(what, worst < 1e-4);
    float *dr = malloc(ref->n_params * sizeof(float)), *dc = malloc(ref->n_params * sizeof(float));
    for (size_t i = 0; i < ref->n_params; i++) {
      dr[i] = ref->params[i] - p0[i];
      dc[i] = c->params[i] - p0[i];
    }
    gm_check_rel("CPU→GPU→CPU vs CPU only: parameter updates", dc, dr, ref->n_params, 2e-2);
    free(dr);
    free(dc);
  }
  lstmd_engine_destroy(d3);
  lstmd_engine_destroy(d_ref);
  lstmd_optim_destroy(o_ref);
  lstmd_optim_destroy(o);
  lstmd_optim_destroy(og);
  lstmd_optim_destroy(oc2);
  lstmd_model_destroy(ref);
  lstmd_model_destroy(m);
  lstmd_model_destroy(g);
  lstmd_model_destroy(c);
  for (int i = 0; i < kBatches; i++) gm_free_batch(&b[i]);
  free(p.state_h);
  free(p.state_c);
  free(h1);
  free(c1);
  free(p0);
  unlink(path);
  rmdir(dir);
}
