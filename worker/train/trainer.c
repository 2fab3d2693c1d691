/* trainer.c — the training loop of every rank (see trainer.h; set-up in train_setup.c).
 * Each step: the step engine (worker/engine/engine.h) runs the grad_accum windows and sums the
 * gradients over the ranks, one all-reduce carries the loss and the votes (stop, failed reads),
 * then the same optimizer update on every rank. Rank 0 alone logs, evaluates (through the
 * engine) and writes checkpoints. The trainer reaches the engine through its table only.
 * Here: the step, the step and straggler reports, the loop with its end-of-run notes, and the
 * run's entry point; the evaluations are in trainer_eval.c, the checkpoints, samples and the
 * run's outputs in trainer_save.c. */
#define _GNU_SOURCE
#include "trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "kernels/clock.h"
#include "kernels/optim_rules.h"
#include "kernels/status.h"
#include "fault.h"
#include "trainer_eval.h"
#include "trainer_run.h"
#include "trainer_save.h"
#include "val_watch.h"
#include "worker/io/trace.h"

static volatile sig_atomic_t g_stop_requested;

void lstmd_train_request_stop(void) { g_stop_requested = 1; }

struct step_times {
  double data_s, compute_s, comm_s; /* waiting for batches, forward+backward, exposed all-reduce */
  long comm_timed;                  /* steps whose exposed all-reduce was measured */
  long loss_pending;                /* steps whose loss the engine still holds (engine.h) */
  double busy_s, wall_s, p2p_s;     /* this rank: computing, the step through its all-reduce,
                                     * waiting for the other stages (summed over the ranks at
                                     * each log step: the bubble) */
};

/* A step whose loss and gradient norm are reported (metrics, hooks): every log_every-th and the
 * run's last. The engine may keep them on its device on the others (engine.h: report). */
static int logged_step(const struct lstmd_train_config *cfg, long step) {
  return (cfg->log_every && step % cfg->log_every == 0) || step == cfg->steps;
}

static int stop_wanted(const struct run *r) {
  return g_stop_requested || (r->rank == 0 && lstmd_metrics_failed(&r->metrics)) ||
         (r->hooks->stop_requested && r->hooks->stop_requested(r->hooks->ctx)) ||
         lstmd_fault_due(LSTMD_FAULT_STOP, r->progress.step + 1, r->rank);
}

/* The trainer's window source for the engine (engine.h): the prefetcher's next batch, timed as
 * data wait. A failed read hands over the all-zero batch the prefetcher left in its slot, and
 * is remembered for the step's vote. */
struct window_feed {
  struct run *r;
  int status;     /* the first failed read of the step */
  double wait_s;  /* time spent waiting for batches */
};

static const struct lstmd_batch *next_window(void *ctx, int *reset) {
  struct window_feed *f = ctx;
  struct run *r = f->r;
  const struct lstmd_batch *batch;
  const double t0 = lstmd_now_s();
  int rc = lstmd_prefetch_next(r->prefetch, &batch, reset);
  const double t1 = lstmd_now_s();
  lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "data wait", t0, t1, NULL);
  f->wait_s += t1 - t0;
  if (rc && !f->status) {
    lstmd_errorf("rank %d: step %ld: reading this rank's batch failed: %s", r->rank,
                 r->progress.step + 1, lstmd_strerror(rc));
    f->status = rc;
  }
  return batch;
}

/* A failure every rank saw at the same point (votes, the same sums): the ranks are in step. */
static int agreed_failure(struct run *r, int status) {
  r->failure_agreed = 1;
  return status;
}

/* After every optimizer step, on every rank: the masks zero the pruned weights again, and at a
 * pruning step they are recomputed first (prune.h). Every rank holds the same weights after the
 * update (the same summed gradients, the same update), so every rank computes the same masks
 * with no communication. Rank 0 records the sparsity reached at each pruning step. */
static int prune_after_step(struct run *r) {
  const struct lstmd_prune *p = r->prune;
  int recomputed = 0;
  if (r->engine->ops->prune) /* the parameters live on the device */
    LSTMD_TRY(r->engine->ops->prune(r->engine, r->prune, r->progress.step, &recomputed));
  else
    recomputed = lstmd_prune_after_step(r->prune, r->model, r->model->params, r->progress.step);
  if (!recomputed || r->rank != 0) return LSTMD_OK;
  const char *names[LSTMD_MAX_TENSORS];
  double sparsity[LSTMD_MAX_TENSORS];
  for (int i = 0; i < p->n; i++) {
    names[i] = r->model->tensors[p->tensor[i]].name;
    sparsity[i] = lstmd_prune_mask_sparsity(p, r->model, i);
  }
  lstmd_metrics_prune(&r->metrics, r->progress.step,
                      lstmd_prune_sparsity_at(&p->cfg, r->progress.step), p->n, names, sparsity);
  return LSTMD_OK;
}

/* One optimizer step. *stop is set when any rank was asked to stop (SIGINT/SIGTERM, or the
 * hooks). A rank that cannot read its batch still runs the step on a zero batch, so that the
 * gradient all-reduces stay matched, and votes to fail it: every rank then returns the failure
 * here, before the optimizer, and no rank is left waiting in a collective. The loss and the
 * gradient norm are the same on every rank, so their checks are agreed without a vote. */
static int train_step(struct run *r, double *loss_out, double *grad_norm, int *stop,
                      struct step_times *tm) {
  const struct lstmd_train_config *cfg = r->cfg;
  const long next = r->progress.step + 1;
  const int report = logged_step(cfg, next);
  const struct lstmd_model *m = r->model;
  const int per_input = m->shape.kind == LSTMD_MODEL_TEXT ? 1 : m->shape.horizon;
  /* a classifier's loss is per sequence: one target per window */
  const double targets = m->shape.kind == LSTMD_MODEL_CLASSIFY
                             ? (double)r->global_batch * cfg->grad_accum
                             : (double)r->data_meta.seq_len * r->global_batch * per_input * cfg->grad_accum;
  struct window_feed feed = {.r = r};
  const int poisoned = lstmd_fault_due(LSTMD_FAULT_NAN_GRAD, r->progress.step + 1, r->rank);
  const struct lstmd_step_input in = {.next_window = next_window, .ctx = &feed,
                                      .windows = cfg->grad_accum,
                                      .first_window = (uint64_t)r->progress.step * cfg->grad_accum,
                                      .grad_scale = poisoned ? NAN : (float)(1.0 / targets),
                                      .report = report};
  struct lstmd_step_result out;
  const double t0 = lstmd_now_s();
  LSTMD_TRY(r->engine->ops->step(r->engine, &in, &out));
  if (lstmd_fault_due(LSTMD_FAULT_SLOW, next, r->rank)) { /* 8 times this step's own compute more */
    const double own = lstmd_now_s() - t0 - feed.wait_s - out.comm_wait_s;
    const long ns = own > 0.0 ? (long)(8e9 * own) : 0;
    const struct timespec slow = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&slow, NULL);
  }
  tm->data_s += feed.wait_s;
  tm->compute_s += lstmd_now_s() - t0 - feed.wait_s - out.comm_wait_s;
  tm->comm_s += out.comm_wait_s;
  tm->comm_timed += !out.comm_untimed;
  double totals[3] = {out.loss_sum, stop_wanted(r) ? 1.0 : 0.0, feed.status ? 1.0 : 0.0};
  if (r->world > 1) { /* where the others wait for a rank slow after its gradients: traced */
    const double tw = lstmd_now_s();
    LSTMD_TRY(lstmd_comm_allreduce_sum_f64_within(r->comm, totals, 3, cfg->comm_timeout_s,
                                                  "the step's all-reduce of the loss and votes"));
    lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "wait for the loss and votes", tw,
                      lstmd_now_s(), NULL);
  }
  /* Every rank leaves this all-reduce at about the same time, so the step's wall time through
   * it is the common makespan; Σ busy / Σ wall over the ranks is the pipeline bubble. */
  const double t1 = lstmd_now_s();
  tm->busy_s += out.busy_s;
  tm->wall_s += t1 - t0;
  char args[32];
  snprintf(args, sizeof args, "{\"step\":%ld}", next);
  lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "step", t0, t1, args);
  tm->p2p_s += out.p2p_wait_s;
  if (totals[2] > 0.0) {
    if (feed.status) return agreed_failure(r, feed.status);
    lstmd_errorf("rank %d: stopping at step %ld: %.0f rank(s) could not read their data",
                 r->rank, r->progress.step + 1, totals[2]);
    return agreed_failure(r, LSTMD_EIO);
  }
  *loss_out = totals[0] / targets;
  *stop = totals[1] > 0.0;
  const long covered = tm->loss_pending; /* earlier steps in this loss (engine.h) */
  tm->loss_pending = out.loss_pending ? covered + 1 : 0;
  /* The loss and the gradient norm below are the same on every rank (summed over all of them),
   * so rank 0 alone says why the run stops: one line, not one per rank. */
  if (!isfinite(*loss_out)) {
    if (r->rank == 0 && covered)
      lstmd_errorf("steps %ld..%ld: the training loss is not finite (%g); lower optim.lr or set "
                   "optim.clip_norm", next - covered, next, *loss_out);
    else if (r->rank == 0)
      lstmd_errorf("step %ld: the training loss is not finite (%g); lower optim.lr or set "
                   "optim.clip_norm", next, *loss_out);
    return agreed_failure(r, LSTMD_ENONFINITE);
  }
  const double t_opt = lstmd_now_s();
  struct lstmd_optim_outcome outcome = {.grad_norm = NAN};
  int rc = r->engine->ops->optim_step(r->engine, r->optim, report, &outcome);
  *grad_norm = outcome.grad_norm;
  if (lstmd_fault_due(LSTMD_FAULT_NAN_UPDATE, r->progress.step + 1, r->rank)) {
    /* a pipeline stage updates, and reads, only its own range of the host parameters (the
     * others' are filled in by the gathers): every one gets the NaN, so that it lands in this
     * rank's range whatever its stage (params[0] is stage 0's) */
    const size_t n = cfg->stages > 1 ? r->model->n_params : 1;
    for (size_t i = 0; i < n; i++) r->model->params[i] = NAN;
  }
  lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "optimizer", t_opt, lstmd_now_s(), NULL);
  if (rc == LSTMD_ENONFINITE) {
    if (r->rank == 0 && outcome.bad_steps_ago) /* decided on the device, read at this logged step */
      lstmd_errorf("step %ld: the gradient norm was not finite, or past %.2g, where its squares "
                   "overflow the optimizer's float state (seen at step %ld; no update since); "
                   "lower optim.lr or set optim.clip_norm", next - outcome.bad_steps_ago,
                   LSTMD_MAX_GRAD_NORM, next);
    else if (r->rank == 0) /* kernels/optim_rules.h: lstmd_optim_norm_usable */
      lstmd_errorf("step %ld: gradient norm %g (loss %g): not finite, or past %.2g, where its "
                   "squares overflow the optimizer's float state; lower optim.lr or set "
                   "optim.clip_norm", next, outcome.grad_norm, *loss_out, LSTMD_MAX_GRAD_NORM);
    return agreed_failure(r, rc);
  }
  if (rc) return rc; /* e.g. a CUDA or communication failure: not agreed */
  r->progress.step++;
  if (r->prune) LSTMD_TRY(prune_after_step(r)); /* a device failure: not agreed */
  return LSTMD_OK;
}

static void report(struct run *r, long steps, double loss, double grad_norm, double seconds,
                   double total_seconds, const struct step_times *tm,
                   const struct lstmd_step_report *ranks) {
  const struct lstmd_train_config *cfg = r->cfg;
  const double tokens_per_step = (double)r->data_meta.seq_len * r->global_batch * cfg->grad_accum;
  const long step = r->progress.step;
  const double rate = steps * tokens_per_step / seconds;
  struct lstmd_step_report rep = {
      .step = step, .total_steps = cfg->steps, .loss = loss / steps,
      .lr = lstmd_optim_lr(&r->optim->cfg, step - 1), .grad_norm = grad_norm,
      .tokens_per_s = rate, .elapsed_s = total_seconds,
      .eta_s = (cfg->steps - step) * tokens_per_step / rate,
      .tokens = (long long)(step * tokens_per_step), .world = r->world,
      .global_batch = r->global_batch, .data_wait_s = tm->data_s / steps,
      .compute_s = tm->compute_s / steps,
      .comm_wait_s = tm->comm_timed ? tm->comm_s / tm->comm_timed : 0.0,
      .loss_scale = r->engine->ops->loss_scale(r->engine), .stages = cfg->stages,
      .bubble = tm->busy_s > 0 && tm->wall_s > 0 ? 1.0 - tm->busy_s / tm->wall_s : NAN,
      .p2p_wait_s = tm->p2p_s / r->world / steps, .rank_times = ranks->rank_times,
      .compute_min_s = ranks->compute_min_s, .compute_median_s = ranks->compute_median_s,
      .compute_max_s = ranks->compute_max_s, .slowest_rank = ranks->slowest_rank};
  lstmd_metrics_step(&r->metrics, &rep);
  if (r->hooks->on_step) r->hooks->on_step(r->hooks->ctx, &rep);
}

/* The straggler report (every logged step, several ranks; collective over the job): rank 0
 * gathers each rank's compute time per step over the interval and host, puts min / median / max
 * into the step report, and warns naming the rank and host when the slowest rank took at least
 * 1.3 times the median for 3 logged steps in a row (once per streak, and again when another rank
 * becomes the slowest). The gather is bounded by train.comm_timeout_s like the step's all-reduce:
 * every rank comes to it straight from that all-reduce, so a stopped rank cannot hold the others
 * here without a bound. */
/* Sorts v[0, n) (insertion sort: a handful of ranks) and returns its median. */
static double median_sorting(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
      const double t = v[k];
      v[k] = v[k - 1];
      v[k - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int straggler_report(struct run *r, long steps, const struct step_times *tm,
                            struct lstmd_step_report *rep) {
  struct rank_time {
    double compute_s;
    char host[56];
  } me = {.compute_s = steps > 0 ? tm->compute_s / steps : 0.0};
  snprintf(me.host, sizeof me.host, "%s", lstmd_comm_host(r->comm));
  struct rank_time *all = r->rank == 0 ? calloc((size_t)r->world, sizeof *all) : NULL;
  if (r->rank == 0 && !all) return LSTMD_ENOMEM; /* not agreed: the caller ends the job */
  int rc = lstmd_comm_gather_within(r->comm, &me, sizeof me, all, 0, r->cfg->comm_timeout_s,
                                    "the gather of the ranks' compute times (straggler report)");
  if (rc || r->rank != 0) {
    free(all);
    return rc;
  }
  double *v = malloc((size_t)r->world * sizeof *v);
  if (!v) {
    free(all);
    return LSTMD_ENOMEM;
  }
  int slowest = 0;
  for (int i = 0; i < r->world; i++) {
    v[i] = all[i].compute_s;
    if (v[i] > v[slowest]) slowest = i;
  }
  const int w = r->world;
  rep->rank_times = 1;
  rep->compute_median_s = median_sorting(v, w);
  rep->compute_min_s = v[0];
  rep->compute_max_s = v[w - 1];
  rep->slowest_rank = slowest;
  /* With pipeline stages a rank is compared with its own stage's ranks (its replicas) only: the
   * stages' work differs by design (model.stage_layers, the embedding, the head), and stage 0 of
   * 5,1,1,1 layers was reported a straggler (1.40x the median of 4 ranks). One replica: no rank
   * to compare with. */
  const int S = r->cfg->stages > 1 ? r->cfg->stages : 1, D = w / S;
  int cand = S > 1 ? -1 : slowest, peers = S > 1 ? D : w;
  double median = S > 1 ? 0.0 : rep->compute_median_s;
  for (int s = 0; S > 1 && D > 1 && s < S; s++) { /* rank d·S + s is stage s of replica d */
    for (int d = 0; d < D; d++) v[d] = all[d * S + s].compute_s;
    const double m = median_sorting(v, D);
    for (int d = 0; d < D; d++)
      if (m > 0 && (cand < 0 || all[d * S + s].compute_s / m > all[cand].compute_s / median))
        cand = d * S + s, median = m;
  }
  const int slow = cand >= 0 && median > 0 && all[cand].compute_s >= 1.3 * median;
  if (slow && cand == r->straggler_rank) r->straggler_streak++;
  else r->straggler_streak = slow;
  r->straggler_rank = slow ? cand : -1;
  char among[48];
  if (S > 1) snprintf(among, sizeof among, "the %d ranks of stage %d", peers, cand % S);
  else snprintf(among, sizeof among, "%d ranks", peers);
  if (r->straggler_streak == 3)
    lstmd_metrics_note(&r->metrics, "straggler: rank %d (%s) computed %.3f ms per step, %.2fx the "
                       "median of %s (%.3f ms), for 3 logged steps in a row (step %ld)",
                       cand, all[cand].host, 1e3 * all[cand].compute_s,
                       all[cand].compute_s / median, among, 1e3 * median, r->progress.step);
  free(v);
  free(all);
  return LSTMD_OK;
}

static int train_loop(struct run *r) {
  const struct lstmd_train_config *cfg = r->cfg;
  const double tokens_per_step = (double)r->data_meta.seq_len * r->global_batch * cfg->grad_accum;
  const long first_step = r->progress.step;
  double t0 = lstmd_now_s(), interval_t0 = t0, interval_loss = 0.0;
  struct step_times tm = {0};
  long interval_steps = 0;
  const struct lstmd_watch_rules rules = lstmd_run_watch_rules(cfg);
  /* resumed from the checkpoint of an early stop: finished (with a larger patience it goes on) */
  int early = lstmd_val_watch_stopped(&r->progress.watch, &rules), stop = early;
  lstmd_run_check_best_file(r);
  int final_best = 0; /* a new best at the last step, saved with the final checkpoint */
  if (early && r->rank == 0)
    lstmd_metrics_note(&r->metrics, "step %ld: this run stopped early (no new best val_loss in "
                       "%ld evaluations; train.early_stop_patience %ld); nothing to train",
                       r->progress.step, r->progress.watch.since_best, rules.patience);
  else if (r->progress.step >= cfg->steps && r->rank == 0)
    lstmd_metrics_note(&r->metrics, "step %ld: the checkpoint is at or past train.steps %ld; "
                       "nothing to train (raise train.steps to go on)", r->progress.step,
                       (long)cfg->steps);
  if (r->rank == 0 && r->hooks->on_begin)
    r->hooks->on_begin(r->hooks->ctx, r->progress.step, (long)cfg->steps);
  while (r->progress.step < cfg->steps && !stop) {
    double loss = 0.0, grad_norm = 0.0;
    LSTMD_TRY(train_step(r, &loss, &grad_norm, &stop, &tm));
    interval_loss += loss;
    interval_steps++;
    const long step = r->progress.step;
    if (logged_step(cfg, step)) {
      if (r->world > 1 && cfg->stages > 1) { /* the ranks' busy and wall times, for the bubble */
        double sums[3] = {tm.busy_s, tm.wall_s, tm.p2p_s};
        LSTMD_TRY(lstmd_comm_allreduce_sum_f64_within(r->comm, sums, 3, cfg->comm_timeout_s,
                                                      "the all-reduce of the step times"));
        tm.busy_s = sums[0], tm.wall_s = sums[1], tm.p2p_s = sums[2];
      }
      struct lstmd_step_report ranks = {0};
      if (r->world > 1) LSTMD_TRY(straggler_report(r, interval_steps, &tm, &ranks));
      double t = lstmd_now_s();
      if (r->rank == 0)
        report(r, interval_steps, interval_loss, grad_norm, t - interval_t0, t - t0, &tm, &ranks);
      interval_t0 = t;
      interval_loss = 0.0;
      interval_steps = 0;
      tm = (struct step_times){.loss_pending = tm.loss_pending};
    }
    const double pause_t0 = lstmd_now_s(); /* evaluation and checkpoints are not training time */
    int events = 0;
    if (cfg->eval_every && step % cfg->eval_every == 0) LSTMD_TRY(lstmd_run_evaluate(r, &events));
    if (events & LSTMD_WATCH_STOP) stop = early = 1; /* the same on every rank (trainer_eval.c) */
    /* also when stopping, so that a run resumed from this step has the same samples */
    if (cfg->sample_every && step % cfg->sample_every == 0) LSTMD_TRY(lstmd_run_sample(r));
    const int due = cfg->checkpoint_every && step % cfg->checkpoint_every == 0 &&
                    step != cfg->steps && !stop;
    if (due) LSTMD_TRY(lstmd_run_save_checkpoint(r, SAVE_STEP));
    /* at the last step the step file comes after the loop: best then links to it, not a copy */
    if ((events & LSTMD_WATCH_NEW_BEST) && (step == cfg->steps || stop)) final_best = 1;
    else if (events & LSTMD_WATCH_NEW_BEST) LSTMD_TRY(lstmd_run_save_best(r, due));
    const double paused = lstmd_now_s() - pause_t0;
    interval_t0 += paused;
    t0 += paused;
  }
  double elapsed = lstmd_now_s() - t0;
  if (r->rank == 0 && r->progress.step > first_step)
    lstmd_metrics_note(&r->metrics, "trained steps %ld..%ld in %.1f s of training (%.0f tokens/s, "
                       "%.1f GFLOP/s)", first_step + 1, r->progress.step, elapsed,
                       (r->progress.step - first_step) * tokens_per_step / elapsed,
                       (r->progress.step - first_step) * tokens_per_step *
                           lstmd_model_flops_per_token(&r->model->shape) / elapsed / 1e9);
  /* Nothing trained (a resume at or past train.steps): evaluate, as the end of a run does, and
   * keep the checkpoint resumed from when it is this run dir's own file of the step. Rewriting it
   * only changed its recorded settings, and parted it from a best.safetensors linked to it. Rank
   * 0 looks; every rank takes its answer, the save being collective. */
  const int trained = r->progress.step > first_step;
  int keep = 0;
  if (!trained) {
    if (r->rank == 0) {
      char own[4200];
      snprintf(own, sizeof own, "%s/step-%ld.safetensors", cfg->run_dir, r->progress.step);
      keep = access(own, F_OK) == 0;
    }
    if (r->world > 1) LSTMD_TRY(lstmd_comm_bcast(r->comm, &keep, sizeof keep, 0));
  }
  /* On a stop request the checkpoint comes first and alone: the launcher's grace period before
   * SIGKILL may be short (mpirun: odls_base_sigkill_timeout, 1 s by default; Slurm: KillWait). */
  int events = 0;
  if (!stop && !trained) /* its checkpoint's step: judged by the watch when it was written */
    LSTMD_TRY(lstmd_run_evaluate_report(r));
  else if (!stop && !(cfg->eval_every && r->progress.step % cfg->eval_every == 0))
    LSTMD_TRY(lstmd_run_evaluate(r, &events));
  if (!keep) LSTMD_TRY(lstmd_run_save_checkpoint(r, SAVE_STEP));
  if ((events & LSTMD_WATCH_NEW_BEST) || final_best) LSTMD_TRY(lstmd_run_save_best(r, 1));
  /* rank 0's metrics.jsonl failed (a full disk): the run stopped with its checkpoint, and every
   * rank exits 1 together */
  const int metrics_rc = lstmd_comm_agree(r->comm, r->rank == 0 && lstmd_metrics_failed(&r->metrics)
                                                       ? LSTMD_EWRITE : LSTMD_OK, NULL);
  if (metrics_rc) {
    r->failure_agreed = 1;
    if (r->rank == 0)
      lstmd_errorf("stopped at step %ld: %s/metrics.jsonl could not be written (%s); checkpoint "
                   "%s/latest.safetensors", r->progress.step, cfg->run_dir,
                   strerror(lstmd_metrics_failed(&r->metrics)), cfg->run_dir);
    return metrics_rc;
  }
  if (r->rank != 0) return LSTMD_OK;
  const int how = early                          ? LSTMD_END_EARLY_STOP
                  : r->progress.step < cfg->steps ? LSTMD_END_REQUESTED
                                                  : LSTMD_END_DONE;
  if (r->hooks->on_end) r->hooks->on_end(r->hooks->ctx, r->progress.step, how);
  char where[4400];
  if (how == LSTMD_END_EARLY_STOP)
    lstmd_metrics_note(&r->metrics, "stopped early at step %ld: %s/step-%ld.safetensors; best "
                       "val_loss %.*f at step %ld: %s", r->progress.step,
                       cfg->run_dir, r->progress.step,
                       r->metrics.loss_decimals, r->progress.watch.best_loss,
                       r->progress.watch.best_step, lstmd_run_best_where(r, where, sizeof where));
  else if (how == LSTMD_END_REQUESTED)
    lstmd_metrics_note(&r->metrics, "stopped at step %ld on request; checkpoint %s/latest.safetensors%s",
                       r->progress.step, cfg->run_dir,
                       r->hooks->on_end ? "" /* lstmd serve: the daemon says what comes next */
                                        : " (to go on: the same lstmd train command with --resume)");
  else
    lstmd_metrics_note(&r->metrics, "done: %s/step-%ld.safetensors", cfg->run_dir, r->progress.step);
  return LSTMD_OK;
}

double lstmd_setup_wait_limit(double comm_timeout_s, const char **source, int say) {
  double setup_wait_s = 600;
  /* A test hook, read here only: LSTMD_SETUP_WAIT_S=S puts S seconds in place of the 600, so that
   * a test can see a rank frozen during set-up (LSTMD_FAULT=setup_freeze@1) end the job in
   * seconds, and see the bound is max(comm_timeout_s, it), without waiting 10 minutes. Said on
   * stderr, so a run never has it unnoticed. */
  const char *hook = getenv("LSTMD_SETUP_WAIT_S");
  if (hook && *hook) {
    char *end;
    const double s = strtod(hook, &end);
    if (*end || !(s > 0) || !isfinite(s)) {
      if (say) lstmd_errorf("LSTMD_SETUP_WAIT_S='%s' ignored: expected seconds > 0", hook);
    } else {
      setup_wait_s = s;
      if (say)
        lstmd_errorf("LSTMD_SETUP_WAIT_S: set-up waits are bounded by max(train.comm_timeout_s, "
                     "%g s), not 600 s (a test hook)", s);
    }
  }
  *source = setup_wait_s == 600 ? "the set-up's: max(train.comm_timeout_s, 600 s)"
                                : "the set-up's: max(train.comm_timeout_s, LSTMD_SETUP_WAIT_S)";
  return comm_timeout_s > setup_wait_s ? comm_timeout_s : setup_wait_s;
}

int lstmd_train_run(const struct lstmd_train_config *cfg, const char *config_json,
                    const char *resume_path, struct lstmd_comm *comm,
                    const struct lstmd_train_hooks *hooks, int *all_know) {
  static const struct lstmd_train_hooks kNoHooks;
  struct run r = {.cfg = cfg, .config_json = config_json, .comm = comm, .train.fd = -1,
                  .val.fd = -1, .run_lock = -1, .hooks = hooks ? hooks : &kNoHooks,
                  .written_step = -1};
  r.rank = comm ? lstmd_comm_rank(comm) : 0;
  r.world = comm ? lstmd_comm_size(comm) : 1;
  /* Every wait of the run that names no bound of its own gets one (comm.h), so a rank that
   * freezes anywhere (not only inside a step) ends the job instead of hanging it; rank 0's long
   * work alone is lstmd_comm_solo's, bounded by its silence. During set-up: trainer.h. */
  const char *setup_source;
  const double setup_wait_s = lstmd_setup_wait_limit(cfg->comm_timeout_s, &setup_source, r.rank == 0);
  lstmd_comm_set_wait_limit(comm, setup_wait_s, setup_source);
  int rc = lstmd_run_setup(&r, resume_path); /* the same status on every rank */
  if (!rc) rc = lstmd_run_open_outputs(&r, resume_path);
  if (!rc) rc = lstmd_trace_open(cfg->trace_path, comm, &r.trace); /* agreed on too */
  if (!rc) r.engine->trace = r.trace;
  lstmd_comm_set_wait_limit(comm, cfg->comm_timeout_s, "train.comm_timeout_s");
  /* so far every failure was agreed on by all ranks, but a failed collective (a vote included) */
  *all_know = rc != 0 && rc != LSTMD_ECOMM;
  if (!rc) {
    rc = train_loop(&r);
    *all_know = rc != 0 && r.failure_agreed;
  }
  if (rc && !*all_know && r.world > 1) {
    /* The caller ends the job at once (lstmd_comm_abort). Transfers or a gradient all-reduce
     * may still be in flight into the engine's buffers, which MPI owns until they complete:
     * they are left allocated (p2p.h, reducer.h), and so is the run, and the trace (an
     * engine thread may still write to it; each event is one unbuffered write, none is lost). */
    return rc;
  }
  lstmd_run_free(&r); /* first: the engine's threads may still write trace events */
  /* collective only when every rank ended together; never leaves a rank waiting */
  lstmd_trace_close(r.trace, !rc || *all_know);
  return rc; /* the limit stays: the caller's votes on the outcome (lstmd serve) are bounded too */
}
