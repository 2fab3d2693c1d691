/* ctl_print.c — what lstmctl prints of the daemon's answers (see ctl_print.h): a job's status
 * (text or JSON), its line in `list`, a progress record of `watch`, and `top`'s snapshot. */
#include "ctl_print.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "frame.h"

/* "4-7", "0,2-3": a job's ranks (empty when it has none yet). */
static void ranks_text(const Lstmd__Job *j, char *out, size_t len) {
  size_t at = 0;
  out[0] = '\0';
  for (size_t i = 0; i < j->n_assigned_ranks && at < len; i++) {
    size_t k = i;
    while (k + 1 < j->n_assigned_ranks && j->assigned_ranks[k + 1] == j->assigned_ranks[k] + 1) k++;
    at += (size_t)snprintf(out + at, len - at, "%s%u", i ? "," : "", j->assigned_ranks[i]);
    if (k > i && at < len) at += (size_t)snprintf(out + at, len - at, "-%u", j->assigned_ranks[k]);
    i = k;
  }
}

/* Whether a training record has reached the daemon for this job: a job resumed or preempted
 * before its first one has a step (from its checkpoint) but no loss or rate yet. */
static int has_progress(const Lstmd__Job *j) { return j->step > 0 && j->tokens_per_s > 0; }

/* Running, with a cancel requested that has not taken effect yet (it does after the step). */
static int cancelling(const Lstmd__Job *j) {
  return j->state == LSTMD__JOB_STATE__RUNNING && j->cancel_requested;
}

json_t *lstmctl_job_json(const Lstmd__Job *j) {
  json_t *settings = json_object();
  for (size_t i = 0; i < j->n_settings; i++)
    json_object_set_new(settings, j->settings[i]->key, json_string(j->settings[i]->value));
  json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:i, s:b, s:b}",
                        "id", (json_int_t)j->id, "name", j->name, "state",
                        lstmd_job_state_name(j->state), "reason", j->reason, "run_dir", j->run_dir,
                        "step", (json_int_t)j->step, "total_steps", (json_int_t)j->total_steps,
                        "submitted_ms", (json_int_t)j->submitted_ms, "started_ms",
                        (json_int_t)j->started_ms, "finished_ms", (json_int_t)j->finished_ms,
                        "attempts", (int)j->attempts, "cancel_requested", j->cancel_requested,
                        "resume", j->resume);
  json_object_set_new(o, "continues", j->continues ? json_integer((json_int_t)j->continues)
                                                  : json_null());
  /* NaN (nothing measured yet) becomes null */
  json_object_set_new(o, "loss", has_progress(j) ? json_real(j->loss) : json_null());
  json_object_set_new(o, "val_loss", isfinite(j->val_loss) ? json_real(j->val_loss) : json_null());
  json_object_set_new(o, "val_bpc", isfinite(j->val_bpc) ? json_real(j->val_bpc) : json_null());
  json_object_set_new(o, "val_accuracy", j->has_val_accuracy ? json_real(j->val_accuracy) : json_null());
  json_object_set_new(o, "tokens_per_s", has_progress(j) ? json_real(j->tokens_per_s) : json_null());
  char where[256];
  ranks_text(j, where, sizeof where);
  json_t *assigned = json_array();
  for (size_t i = 0; i < j->n_assigned_ranks; i++) json_array_append_new(assigned, json_integer(j->assigned_ranks[i]));
  json_object_set_new(o, "ranks", json_integer(j->ranks));
  json_object_set_new(o, "assigned_ranks", assigned);
  json_object_set_new(o, "ranks_text", json_string(where));
  json_object_set_new(o, "priority", json_integer(j->priority));
  json_object_set_new(o, "time_limit_s", json_real(j->time_limit_s));
  json_object_set_new(o, "preemptible", json_boolean(!j->no_preempt));
  json_object_set_new(o, "preemptions", json_integer(j->preemptions));
  json_object_set_new(o, "queue_position", json_integer(j->queue_position));
  json_object_set_new(o, "waiting", json_string(j->waiting));
  json_object_set_new(o, "run_ms", json_integer(j->run_ms));
  /* only a running job has one: an ended or requeued job kept its last attempt's */
  const int eta = j->state == LSTMD__JOB_STATE__RUNNING && has_progress(j) && isfinite(j->eta_s);
  json_object_set_new(o, "eta_s", json_real(eta ? j->eta_s : 0.0));
  json_object_set_new(o, "settings", settings);
  return o;
}

void lstmctl_print_json(json_t *o) {
  char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (text) puts(text);
  free(text);
  json_decref(o);
  fflush(stdout);
}

void lstmctl_print_job_line(const Lstmd__Job *j) {
  char where[256], pos[16] = "-";
  ranks_text(j, where, sizeof where);
  if (j->state == LSTMD__JOB_STATE__QUEUED && j->queue_position)
    snprintf(pos, sizeof pos, "%u", j->queue_position);
  printf("%-5llu %-10s %-9s %5u %4d %4s %7lld/%-7lld", (unsigned long long)j->id,
         lstmd_job_state_name(j->state), j->state == LSTMD__JOB_STATE__RUNNING ? where : "-",
         j->ranks, j->priority, pos, (long long)j->step, (long long)j->total_steps);
  if (has_progress(j)) printf(" loss %.4f", j->loss);
  if (isfinite(j->val_loss)) printf(" val %.4f", j->val_loss);
  if (j->has_val_accuracy) printf(" acc %.4f", j->val_accuracy);
  if (j->name[0]) printf("  %s", j->name);
  if (j->state == LSTMD__JOB_STATE__QUEUED && j->waiting[0]) printf("  [waits: %s]", j->waiting);
  if (cancelling(j)) printf("  [cancel requested]");
  if (j->reason[0]) printf("  (%s)", j->reason);
  putchar('\n');
}

void lstmctl_print_job(const Lstmd__Job *j, int json) {
  if (json) {
    lstmctl_print_json(lstmctl_job_json(j));
    return;
  }
  /* a cancel of a running job takes effect after its step: the reply to it says RUNNING */
  printf("job %llu%s%s: %s%s\n", (unsigned long long)j->id, j->name[0] ? " " : "", j->name,
         lstmd_job_state_name(j->state), cancelling(j) ? " (cancel requested: it stops after its "
         "current step, with a checkpoint)" : "");
  if (j->reason[0]) printf("  %s\n", j->reason);
  char where[256];
  ranks_text(j, where, sizeof where);
  printf("  %u rank%s%s%s, priority %d%s", j->ranks, j->ranks == 1 ? "" : "s",
         where[0] ? (j->state == LSTMD__JOB_STATE__RUNNING ? " on " : ", last on ") : "", where,
         j->priority, j->no_preempt ? ", not preemptible" : "");
  if (j->time_limit_s > 0) printf(", time limit %g s", j->time_limit_s);
  if (j->preemptions) printf(", preempted %u time%s", j->preemptions, j->preemptions == 1 ? "" : "s");
  putchar('\n');
  if (j->state == LSTMD__JOB_STATE__QUEUED && j->queue_position)
    printf("  queue position %u: %s\n", j->queue_position, j->waiting);
  printf("  step %lld of %lld", (long long)j->step, (long long)j->total_steps);
  if (has_progress(j)) printf(", loss %.4f, %.0f tokens/s", j->loss, j->tokens_per_s);
  if (isfinite(j->val_loss)) printf(", val loss %.4f", j->val_loss);
  if (isfinite(j->val_bpc)) printf(" (%.3f bpc)", j->val_bpc);
  if (j->has_val_accuracy) printf(", val accuracy %.4f", j->val_accuracy);
  printf("\n  run dir %s%s, attempts %u\n", j->run_dir,
         j->resume ? " (continuing the run there)" : "", j->attempts);
  if (j->continues) printf("  continues job %llu\n", (unsigned long long)j->continues);
  fflush(stdout);
}

void lstmctl_print_metrics(uint64_t id, const Lstmd__Metrics *m) {
  if (m->is_eval) {
    printf("job %llu step %lld: val loss %.4f", (unsigned long long)id, (long long)m->step, m->val_loss);
    if (isfinite(m->val_bpc)) printf(" (%.3f bpc)", m->val_bpc);
    if (m->has_val_accuracy) printf(", accuracy %.4f", m->val_accuracy);
    putchar('\n');
  } else {
    printf("job %llu step %lld/%lld: loss %.4f lr %.3g grad norm %.3g %.0f tokens/s eta %.0f s\n",
           (unsigned long long)id, (long long)m->step, (long long)m->total_steps, m->loss, m->lr,
           m->grad_norm, m->tokens_per_s, m->eta_s);
  }
  fflush(stdout);
}

static void eta_text(double s, char *out, size_t n) {
  if (!isfinite(s) || s <= 0) snprintf(out, n, "-");
  else if (s >= 3600) snprintf(out, n, "%ldh%02ldm", (long)s / 3600, (long)s / 60 % 60);
  else snprintf(out, n, "%ldm%02lds", (long)s / 60, (long)s % 60);
}

/* One snapshot of the running jobs and the world's ranks. */
void lstmctl_print_top(const Lstmd__JobList *l, int json) {
  int busy = 0, queued = 0;
  for (size_t i = 0; i < l->n_jobs; i++) {
    if (l->jobs[i]->state == LSTMD__JOB_STATE__RUNNING) busy += (int)l->jobs[i]->n_assigned_ranks;
    queued += l->jobs[i]->state == LSTMD__JOB_STATE__QUEUED;
  }
  /* unresponsive ranks (they did not answer a start command) are neither busy nor free */
  const int silent = (int)l->n_unresponsive_ranks;
  if (json) {
    json_t *running = json_array(), *unresponsive = json_array();
    for (size_t i = 0; i < l->n_jobs; i++)
      if (l->jobs[i]->state == LSTMD__JOB_STATE__RUNNING) json_array_append_new(running, lstmctl_job_json(l->jobs[i]));
    for (int i = 0; i < silent; i++)
      json_array_append_new(unresponsive, json_integer(l->unresponsive_ranks[i]));
    lstmctl_print_json(json_pack("{s:i, s:i, s:i, s:o, s:i, s:o}", "world", (int)l->world, "busy", busy,
                         "free", (int)l->world - busy - silent, "unresponsive", unresponsive,
                         "queued", queued, "running", running));
    return;
  }
  printf("world %u ranks: %d busy, %d free", l->world, busy, (int)l->world - busy - silent);
  if (silent) {
    printf(", %d unresponsive (", silent);
    for (int i = 0; i < silent; i++) printf("%s%u", i ? "," : "", l->unresponsive_ranks[i]);
    printf(")");
  }
  printf("; %d job%s queued\n", queued, queued == 1 ? "" : "s");
  printf("%-5s %-12s %-9s %4s %17s %8s %10s %8s\n", "ID", "NAME", "RANKS", "PRI", "STEP", "LOSS",
         "TOK/S", "ETA");
  for (size_t i = 0; i < l->n_jobs; i++) {
    const Lstmd__Job *j = l->jobs[i];
    if (j->state != LSTMD__JOB_STATE__RUNNING) continue;
    char where[256], eta[32], step[48];
    ranks_text(j, where, sizeof where);
    eta_text(j->eta_s, eta, sizeof eta);
    snprintf(step, sizeof step, "%lld/%lld", (long long)j->step, (long long)j->total_steps);
    printf("%-5llu %-12.12s %-9s %4d %17s ", (unsigned long long)j->id, j->name, where,
           j->priority, step);
    if (has_progress(j)) printf("%8.4f %10.0f %8s\n", j->loss, j->tokens_per_s, eta);
    else printf("%8s %10s %8s\n", "-", "-", "-");
  }
  fflush(stdout);
}

