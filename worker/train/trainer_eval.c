/* trainer_eval.c — the training loop's evaluations (trainer.c): the validation loss through the
 * engine, rank 0's validation watch (val_watch.h) and its verdict broadcast to every rank, and
 * how the messages name the best model's file (best.safetensors, or why it is not there). */
#include "trainer_eval.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>

#include "comm/comm.h"
#include "kernels/clock.h"
#include "kernels/status.h"
#include "fault.h"
#include "worker/io/trace.h"

struct lstmd_watch_rules lstmd_run_watch_rules(const struct lstmd_train_config *cfg) {
  return (struct lstmd_watch_rules){
      .patience = cfg->early_stop_patience, .min_delta = cfg->early_stop_min_delta,
      .plateau = cfg->optim.schedule == LSTMD_SCHEDULE_PLATEAU,
      .plateau_patience = cfg->plateau_patience, .plateau_factor = cfg->plateau_factor};
}

/* Rank 0: how the messages name the best model's file. Normally <run_dir>/best.safetensors; a
 * resumed run whose run dir's best.safetensors is not the watch's best (best_astray) says so
 * instead of naming a file that is missing or holds another step's model. */
const char *lstmd_run_best_where(const struct run *r, char *buf, size_t n) {
  if (!r->best_astray) {
    snprintf(buf, n, "%s/best.safetensors", r->cfg->run_dir);
  } else if (r->best_file_step < -1) { /* lstmd_st_open said why */
    snprintf(buf, n, "not in %s/best.safetensors, which cannot be read", r->cfg->run_dir);
  } else if (r->best_file_step < 0) {
    snprintf(buf, n, "not in %s, which has no best.safetensors (the run that evaluated it wrote "
             "it)", r->cfg->run_dir);
  } else {
    snprintf(buf, n, "not in %s/best.safetensors, which holds step %ld", r->cfg->run_dir,
             r->best_file_step);
  }
  return buf;
}

/* Rank 0, at the start of a resumed run: whether the run dir's best.safetensors is the model of
 * the best val_loss the checkpoint carries; if not, a warning, and the messages say so until
 * the next new best writes it. */
void lstmd_run_check_best_file(struct run *r) {
  const struct lstmd_val_watch *w = &r->progress.watch;
  if (r->rank != 0 || !r->resumed || !isfinite(w->best_loss)) return;
  r->best_file_step = lstmd_best_file_step(r->cfg->run_dir);
  r->best_astray = r->best_file_step != w->best_step;
  char where[4400];
  if (r->best_astray)
    lstmd_metrics_note(&r->metrics, "warning: the best val_loss so far, %.4f at step %ld, is %s; "
                       "best.safetensors is written there at the next new best", w->best_loss,
                       w->best_step, lstmd_run_best_where(r, where, sizeof where));
}

/* Collective (the engine's evaluate, then one broadcast from rank 0). Rank 0 records the
 * validation loss and updates the validation watch with it (val_watch.h); the broadcast gives
 * every rank rank 0's verdict and watch, so every rank takes the same decisions with no further
 * vote, even if their states had drifted: a plateau cut sets the optimizer's learning rate on
 * every rank here; *events gets LSTMD_WATCH_NEW_BEST (the caller writes best.safetensors) and
 * LSTMD_WATCH_STOP (every rank must stop at this step). A failed evaluation (rank 0 says why,
 * or names the rank whose share failed) decides nothing, as before the watch existed. */
static int evaluate(struct run *r, int *events, int judge) {
  *events = 0;
  if (!r->has_val) return LSTMD_OK;
  const struct lstmd_train_config *cfg = r->cfg;
  const struct lstmd_watch_rules rules = lstmd_run_watch_rules(cfg);
  const long step = r->progress.step;
  double loss = 0.0, accuracy = NAN; /* accuracy: classifiers only, rank 0 */
  uint64_t tokens = 0;
  const double t0 = lstmd_now_s();
  if (lstmd_fault_due(LSTMD_FAULT_EVAL_FREEZE, step, r->rank)) raise(SIGSTOP);
  int rc = r->engine->ops->evaluate(r->engine, &r->val, &loss, &tokens, &accuracy);
  struct {
    double ok, loss;
    int64_t events;
    struct lstmd_val_watch watch;
  } verdict = {0};
  if (r->rank == 0 && rc == 0) {
    lstmd_fault_val_loss(step, cfg->eval_every, &loss);
    verdict.ok = 1.0;
    verdict.loss = loss;
    verdict.watch = r->progress.watch;
    if (judge) verdict.events = lstmd_val_watch_update(&verdict.watch, &rules, step, loss);
  }
  /* Every rank is here once the (collective) evaluation is done: the next step's waits then
   * never include an evaluation however long it takes. */
  if (r->world > 1 && lstmd_comm_bcast(r->comm, &verdict, sizeof verdict, 0)) return LSTMD_ECOMM;
  lstmd_trace_event(r->trace, LSTMD_TRACE_TID_MAIN, "evaluation", t0, lstmd_now_s(), NULL);
  if (verdict.ok == 0.0) return LSTMD_OK;
  loss = verdict.loss;
  r->progress.watch = verdict.watch;
  *events = (int)verdict.events;
  const struct lstmd_val_watch *w = &r->progress.watch;
  const int text = r->model->shape.kind == LSTMD_MODEL_TEXT;
  if (r->rank == 0) {
    lstmd_metrics_eval(&r->metrics, step, loss, accuracy,
                       r->has_baselines ? &r->baselines : NULL);
    if (r->hooks->on_eval)
      r->hooks->on_eval(r->hooks->ctx, step, loss, text ? loss / M_LN2 : NAN, accuracy);
  }
  if (*events & LSTMD_WATCH_LR_CUT) {
    r->optim->cfg.lr = (float)((double)cfg->optim.lr * w->lr_scale);
    if (r->rank == 0)
      lstmd_metrics_lr_cut(&r->metrics, step, w->lr_scale, r->optim->cfg.lr,
                           lstmd_optim_lr(&r->optim->cfg, r->optim->step), rules.plateau_patience);
  }
  char where[4400];
  if ((*events & LSTMD_WATCH_STOP) && r->rank == 0)
    lstmd_metrics_early_stop(&r->metrics, step, w->best_loss, w->best_step, w->since_best,
                             r->best_astray ? lstmd_run_best_where(r, where, sizeof where)
                                            : "best.safetensors");
  return LSTMD_OK;
}

int lstmd_run_evaluate(struct run *r, int *events) { return evaluate(r, events, 1); }

int lstmd_run_evaluate_report(struct run *r) {
  int events;
  return evaluate(r, &events, 0);
}
