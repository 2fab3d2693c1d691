/* trainer.c — the training loop of every rank (see trainer.h; set-up in train_setup.c).
 * Each step: grad_accum micro-batches through the data-parallel engine (gradients summed over
 * threads and ranks while backward runs), one all-reduce of the loss and the stop flag, then the
 * same optimizer update on every rank. Rank 0 alone logs, evaluates and writes checkpoints. */
#define _GNU_SOURCE
#include "trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "kernels/cpu/blas_cpu.h"
#include "kernels/status.h"
#include "worker/io/durable.h"
#include "worker/model/infer.h"
#include "worker/io/trace.h"
#include "trainer_run.h"

static volatile sig_atomic_t g_stop_requested;

void lstmd_train_request_stop(void) { g_stop_requested = 1; }

/* Collective: every rank gathers its carried state; rank 0 writes the checkpoint. */
static int save_checkpoint_now(struct run *r) {
  if (r->progress.state_h)
    LSTMD_TRY(lstmd_dp_gather_state(r->dp, r->progress.state_h, r->progress.state_c));
  if (r->rank != 0) return LSTMD_OK;
  LSTMD_TRY(lstmd_dp_sync_host(r->dp, r->optim, &r->progress)); /* GPU: device → host */
  const struct lstmd_train_config *cfg = r->cfg;
  char path[4096], latest[4096];
  snprintf(path, sizeof path, "%s/step-%ld.safetensors", cfg->run_dir, r->progress.step);
  snprintf(latest, sizeof latest, "%s/latest.safetensors", cfg->run_dir);
  r->progress.cursor = lstmd_prefetch_cursor(r->prefetch);
  LSTMD_TRY(lstmd_checkpoint_save(path, r->model, r->optim, &r->data_meta, &r->progress,
                                  r->config_json));
  return lstmd_durable_link(path, latest);
}

/* A checkpoint only rank 0 failed to write is voted on, so that every rank stops here together
 * (the vote costs one small all-reduce per checkpoint). */
static int save_checkpoint(struct run *r) {
  const double t0 = lstmd_trace_now();
  int rc = save_checkpoint_now(r);
  lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "checkpoint", t0, lstmd_trace_now(), NULL);
  if (r->world == 1 || rc == LSTMD_ECOMM) return rc;
  double failed = rc ? 1.0 : 0.0;
  LSTMD_TRY(lstmd_comm_allreduce_max_f64(r->comm, &failed, 1));
  if (failed == 0.0) return LSTMD_OK;
  r->failure_agreed = 1;
  if (!rc) lstmd_errorf("rank %d: stopping: rank 0 could not write the checkpoint of step %ld",
                        r->rank, r->progress.step);
  return rc ? rc : LSTMD_EIO;
}

/* Rank 0: validation loss, with all of this rank's threads in BLAS. */
static void evaluate_now(struct run *r) {
  if (r->rank != 0 || !r->has_val) return;
  double loss;
  uint64_t tokens;
  lstmd_cpu_set_blas_threads(r->cfg->threads);
  const double t0 = lstmd_trace_now();
  int rc = lstmd_dp_evaluate(r->dp, &r->val, r->cfg->seq_len, r->cfg->batch_size, &loss, &tokens);
  lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "evaluation", t0, lstmd_trace_now(), NULL);
  lstmd_cpu_set_blas_threads(lstmd_dp_blas_threads(r->dp));
  if (rc != 0) return;
  const int text = r->model->shape.kind == LSTMD_MODEL_TEXT;
  lstmd_metrics_eval(&r->metrics, r->progress.step, loss, text);
  if (r->hooks->on_eval)
    r->hooks->on_eval(r->hooks->ctx, r->progress.step, loss, text ? loss / M_LN2 : NAN);
}

struct step_times {
  double data_s, compute_s, comm_s; /* waiting for batches, forward+backward, exposed all-reduce */
};

static int stop_wanted(const struct run *r) {
  return g_stop_requested || (r->hooks->stop_requested && r->hooks->stop_requested(r->hooks->ctx));
}

/* One optimizer step. *stop is set when any rank was asked to stop (SIGINT/SIGTERM, or the
 * hooks). A rank that cannot read its batch still runs the step on a zero batch, so that the
 * gradient all-reduces stay matched, and votes to fail it: every rank then returns the failure
 * here, before the optimizer, and no rank is left waiting in a collective. */
static int train_step(struct run *r, double *loss_out, double *grad_norm, int *stop,
                      struct step_times *tm) {
  const struct lstmd_train_config *cfg = r->cfg;
  struct lstmd_model *m = r->model;
  const int per_input = m->shape.kind == LSTMD_MODEL_TEXT ? 1 : m->shape.horizon;
  const double targets = (double)cfg->seq_len * r->global_batch * per_input * cfg->grad_accum;
  double totals[3] = {0.0, stop_wanted(r) ? 1.0 : 0.0, 0.0}; /* loss sum, stop, failure votes */
  int data_rc = LSTMD_OK;
  for (int a = 0; a < cfg->grad_accum; a++) {
    int reset;
    const struct lstmd_batch *batch;
    double t0 = lstmd_trace_now();
    int rc = lstmd_prefetch_next(r->prefetch, &batch, &reset);
    if (rc) {
      if (!data_rc) lstmd_errorf("rank %d: step %ld: reading this rank's batch failed: %s",
                                 r->rank, r->progress.step + 1, lstmd_strerror(rc));
      data_rc = rc;
      totals[2] = 1.0;
    }
    if (reset) lstmd_dp_reset_state(r->dp);
    double t1 = lstmd_trace_now(), loss, comm_wait;
    LSTMD_TRY(lstmd_dp_micro_step(r->dp, batch, (float)(1.0 / targets),
                                  (uint64_t)r->progress.step * cfg->grad_accum + a, a == 0,
                                  a == cfg->grad_accum - 1, &loss, &comm_wait));
    double t2 = lstmd_trace_now();
    lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "data wait", t0, t1, NULL);
    if (comm_wait > 0) lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "wait for all-reduce",
                                         t2 - comm_wait, t2, NULL);
    tm->data_s += t1 - t0;
    tm->compute_s += t2 - t1 - comm_wait;
    tm->comm_s += comm_wait;
    totals[0] += loss;
  }
  if (r->world > 1) LSTMD_TRY(lstmd_comm_allreduce_sum_f64(r->comm, totals, 3));
  if (totals[2] > 0.0) {
    r->failure_agreed = 1;
    if (data_rc) return data_rc;
    lstmd_errorf("rank %d: stopping at step %ld: %.0f rank(s) could not read their data",
                 r->rank, r->progress.step + 1, totals[2]);
    return LSTMD_EIO;
  }
  *loss_out = totals[0] / targets;
  *stop = totals[1] > 0.0;
  if (!isfinite(*loss_out)) { /* the same sum on every rank: an agreed failure */
    r->failure_agreed = 1;
    lstmd_errorf("step %ld: the training loss is not finite (%g); lower optim.lr or set "
                 "optim.clip_norm", r->progress.step + 1, *loss_out);
    return LSTMD_EINVAL;
  }
  const double t_opt = lstmd_trace_now();
  int bad = lstmd_dp_optim_step(r->dp, r->optim, grad_norm);
  if (bad && bad != LSTMD_EINVAL) return bad; /* GPU engine: a CUDA or communication failure */
  lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "optimizer", t_opt, lstmd_trace_now(), NULL);
  if (bad) { /* the norm of the all-reduced gradients: the same verdict on every rank */
    r->failure_agreed = 1;
    lstmd_errorf("step %ld: non-finite gradient norm (loss %g); lower optim.lr or set "
                 "optim.clip_norm", r->progress.step + 1, *loss_out);
    return LSTMD_EINVAL;
  }
  r->progress.step++;
  return LSTMD_OK;
}

static void report(struct run *r, long steps, double loss, double grad_norm, double seconds,
                   double total_seconds, const struct step_times *tm) {
  const struct lstmd_train_config *cfg = r->cfg;
  const double tokens_per_step = (double)cfg->seq_len * r->global_batch * cfg->grad_accum;
  const long step = r->progress.step;
  const double rate = steps * tokens_per_step / seconds;
  struct lstmd_step_report rep = {
      .step = step, .total_steps = cfg->steps, .loss = loss / steps,
      .lr = lstmd_optim_lr(&r->optim->cfg, step - 1), .grad_norm = grad_norm,
      .tokens_per_s = rate, .elapsed_s = total_seconds,
      .eta_s = (cfg->steps - step) * tokens_per_step / rate,
      .tokens = (long long)(step * tokens_per_step), .world = r->world,
      .global_batch = r->global_batch, .data_wait_s = tm->data_s / steps,
      .compute_s = tm->compute_s / steps, .comm_wait_s = tm->comm_s / steps,
      .loss_scale = lstmd_dp_loss_scale(r->dp)};
  lstmd_metrics_step(&r->metrics, &rep);
  if (r->hooks->on_step) r->hooks->on_step(r->hooks->ctx, &rep);
}

static int train_loop(struct run *r) {
  const struct lstmd_train_config *cfg = r->cfg;
  const double tokens_per_step = (double)cfg->seq_len * r->global_batch * cfg->grad_accum;
  const long first_step = r->progress.step;
  double t0 = lstmd_trace_now(), interval_t0 = t0, interval_loss = 0.0;
  struct step_times tm = {0};
  long interval_steps = 0;
  int stop = 0;
  while (r->progress.step < cfg->steps && !stop) {
    double loss = 0.0, grad_norm = 0.0;
    LSTMD_TRY(train_step(r, &loss, &grad_norm, &stop, &tm));
    interval_loss += loss;
    interval_steps++;
    const long step = r->progress.step;
    if (r->rank == 0 && ((cfg->log_every && step % cfg->log_every == 0) || step == cfg->steps)) {
      double t = lstmd_trace_now();
      report(r, interval_steps, interval_loss, grad_norm, t - interval_t0, t - t0, &tm);
      interval_t0 = t;
      interval_loss = 0.0;
      interval_steps = 0;
      tm = (struct step_times){0};
    }
    const double pause_t0 = lstmd_trace_now(); /* evaluation and checkpoints are not training time */
    if (cfg->eval_every && step % cfg->eval_every == 0) evaluate_now(r);
    if (cfg->checkpoint_every && step % cfg->checkpoint_every == 0 && step != cfg->steps && !stop)
      LSTMD_TRY(save_checkpoint(r));
    const double paused = lstmd_trace_now() - pause_t0;
    interval_t0 += paused;
    t0 += paused;
  }
  double elapsed = lstmd_trace_now() - t0;
  if (r->rank == 0 && r->progress.step > first_step)
    lstmd_metrics_note(&r->metrics, "trained steps %ld..%ld in %.1f s of training (%.0f tokens/s, "
                       "%.1f GFLOP/s)", first_step + 1, r->progress.step, elapsed,
                       (r->progress.step - first_step) * tokens_per_step / elapsed,
                       (r->progress.step - first_step) * tokens_per_step *
                           lstmd_model_flops_per_token(&r->model->shape) / elapsed / 1e9);
  /* On a stop request the checkpoint comes first and alone: the launcher's grace period before
   * SIGKILL may be short (mpirun: odls_base_sigkill_timeout, 1 s by default; Slurm: KillWait). */
  if (!stop && !(cfg->eval_every && r->progress.step % cfg->eval_every == 0)) evaluate_now(r);
  LSTMD_TRY(save_checkpoint(r));
  if (r->rank != 0) return LSTMD_OK;
  if (r->hooks->on_end) r->hooks->on_end(r->hooks->ctx, r->progress.step, r->progress.step < cfg->steps);
  if (stop && r->progress.step < cfg->steps)
    lstmd_metrics_note(&r->metrics, "stopped at step %ld on request; checkpoint %s/latest.safetensors"
                       " (resume with: lstmd train --config ... --resume)", r->progress.step, cfg->run_dir);
  else
    lstmd_metrics_note(&r->metrics, "done: %s/step-%ld.safetensors", cfg->run_dir, r->progress.step);
  return LSTMD_OK;
}

static void describe_run(struct run *r, const char *resume_path) {
  const struct lstmd_dataset_info *info = &r->train.info;
  size_t params = 0;
  for (int i = 0; i < r->model->n_tensors; i++) params += r->model->tensors[i].count;
  char blas[96];
  lstmd_cpu_blas_describe(blas, sizeof blas);
  int bt = lstmd_dp_blas_threads(r->dp);
  char gpu[512];
  if (lstmd_dp_describe_gpu(r->dp, gpu, sizeof gpu))
    lstmd_metrics_note(&r->metrics, "compute: %d rank%s, rank 0 on %s; global batch %d windows",
                       r->world, r->world == 1 ? "" : "s", gpu, r->global_batch);
  else
    lstmd_metrics_note(&r->metrics, "compute: CPU, %d rank%s, each splitting its batch across %d "
                       "threads, %s with %d thread%s per call; global batch %d windows",
                       r->world, r->world == 1 ? "" : "s", lstmd_dp_threads(r->dp), blas, bt,
                       bt == 1 ? "" : "s", r->global_batch);
  lstmd_metrics_note(&r->metrics, "data: %s, %llu training %s%s, model %zu parameters",
                     info->kind == LSTMD_DATASET_TEXT ? "text" : "series",
                     (unsigned long long)info->count,
                     info->kind == LSTMD_DATASET_TEXT ? "tokens" : "rows",
                     r->has_val ? "" : " (validation split too short to evaluate)", params);
  if (r->resumed)
    lstmd_metrics_note(&r->metrics, "resumed from %s at step %ld", resume_path, r->progress.step);
}

int lstmd_train_run(const struct lstmd_train_config *cfg, const char *config_json,
                    const char *resume_path, struct lstmd_comm *comm,
                    const struct lstmd_train_hooks *hooks, int *all_know) {
  static const struct lstmd_train_hooks kNoHooks;
  struct run r = {.cfg = cfg, .config_json = config_json, .comm = comm, .train.fd = -1,
                  .val.fd = -1, .hooks = hooks ? hooks : &kNoHooks};
  r.rank = comm ? lstmd_comm_rank(comm) : 0;
  r.world = comm ? lstmd_comm_size(comm) : 1;
  int rc = lstmd_run_setup(&r, resume_path); /* the same status on every rank */
  if (!rc) {
    int local = LSTMD_OK; /* rank 0's run directory must be usable before anyone trains */
    if (r.rank == 0) {
      local = lstmd_mkdir_p(cfg->run_dir);
      if (!local)
        local = lstmd_metrics_open(&r.metrics, cfg->run_dir, r.resumed ? r.progress.step : 0);
      if (!local) describe_run(&r, resume_path);
    }
    double failed = local ? 1.0 : 0.0;
    if (r.world > 1) rc = lstmd_comm_allreduce_max_f64(comm, &failed, 1);
    if (!rc && failed != 0.0) rc = local ? local : LSTMD_EIO;
  }
  if (!rc) rc = lstmd_trace_open(cfg->trace_path, comm, &r.trace); /* agreed on too */
  if (!rc) lstmd_dp_set_trace(r.dp, r.trace);
  *all_know = rc != 0; /* so far every failure was agreed on by all ranks */
  if (!rc) {
    rc = train_loop(&r);
    *all_know = rc != 0 && r.failure_agreed;
  }
  if (!rc) lstmd_trace_close(r.trace); /* collective: only when every rank got here */
  lstmd_run_free(&r);
  return rc;
}
