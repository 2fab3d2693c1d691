/* metrics.c — progress line, metrics.jsonl and the TensorBoard scalars (see metrics.h). */
#define _GNU_SOURCE
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "kernels/numtext.h"
#include "kernels/status.h"
#include "durable.h"
#include "worker/model/model.h" /* enum lstmd_model_kind */

/* Ends a record: flushes metrics.jsonl and notes the first failure (said once, with the reason). */
static void flush_record(struct lstmd_metrics *mt) {
  if (fflush(mt->jsonl) == 0 && !ferror(mt->jsonl)) return;
  if (!mt->failed) {
    mt->failed = errno ? errno : EIO;
    lstmd_errorf("metrics.jsonl: a record could not be written (%s); stopping with a "
                 "checkpoint", strerror(mt->failed));
  }
  clearerr(mt->jsonl);
}

/* Rewrites metrics.jsonl (atomically) without the records of steps after `step`. */
static int drop_records_after(const char *path, long step) {
  struct stat st;
  if (stat(path, &st) != 0) return LSTMD_OK; /* nothing logged yet */
  if (!S_ISREG(st.st_mode)) {
    lstmd_errorf("%s: not a regular file", path);
    return LSTMD_EWRITE;
  }
  FILE *in = fopen(path, "r");
  if (!in) return LSTMD_OK;
  struct lstmd_durable out;
  int rc = lstmd_durable_open(&out, path);
  /* Records are short lines, each a JSON object: a line longer than the buffer, or one that is
   * not an object (torn by a crash or a full disk, perhaps run on into the next record), is
   * not one and is dropped. */
  enum { kLine = 1 << 16 };
  char *line = malloc(kLine);
  if (!rc && !line) rc = LSTMD_ENOMEM;
  long dropped = 0;
  while (!rc && fgets(line, kLine, in)) {
    size_t n = strlen(line);
    if (n == 0 || line[n - 1] != '\n') { /* too long, or the file's torn tail */
      for (int ch; n == kLine - 1 && (ch = fgetc(in)) != EOF && ch != '\n';) {
      }
      dropped++;
      continue;
    }
    json_t *record = json_loads(line, 0, NULL); /* a record torn mid-file, then the next */
    const int whole = json_is_object(record);
    json_decref(record);
    if (!whole) {
      dropped++;
      continue;
    }
    const char *s = strstr(line, "\"step\":");
    if (s && strtol(s + 7, NULL, 10) > step) continue;
    rc = lstmd_durable_write(&out, line, n);
  }
  free(line);
  fclose(in);
  if (!rc && dropped)
    lstmd_errorf("warning: %s: %ld torn or overlong line%s dropped", path, dropped,
                 dropped == 1 ? "" : "s");
  if (rc) {
    lstmd_durable_abort(&out);
    return rc;
  }
  return lstmd_durable_commit(&out);
}

int lstmd_metrics_open(struct lstmd_metrics *mt, const char *run_dir, long resume_step,
                       int model_kind) {
  char path[4096];
  memset(mt, 0, sizeof *mt);
  mt->model_kind = model_kind;
  mt->loss_decimals = model_kind == LSTMD_MODEL_TEXT ? 4 : 6;
  mt->tty = isatty(STDERR_FILENO);
  snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
  if (resume_step > 0) LSTMD_TRY(drop_records_after(path, resume_step));
  mt->jsonl = fopen(path, "a");
  if (!mt->jsonl) {
    lstmd_errorf("%s: cannot open for appending", path);
    return LSTMD_EWRITE;
  }
  /* the job's own log (lstmctl logs): progress and notes as a non-terminal stderr shows them;
   * a resumed run appends (its lines say it resumed). Unbuffered past each line. */
  snprintf(path, sizeof path, "%s/train.log", run_dir);
  mt->log = fopen(path, "a");
  if (mt->log) setvbuf(mt->log, NULL, _IOLBF, 0);
  /* the event file's START marks where this run's points begin (tb_events.h): past the resume
   * step, as for metrics.jsonl above */
  return lstmd_tb_open(&mt->tb, run_dir, resume_step > 0 ? resume_step + 1 : 0);
}

void lstmd_metrics_close(struct lstmd_metrics *mt) {
  if (mt->line_open) fputc('\n', stderr);
  mt->line_open = 0;
  if (mt->jsonl) fclose(mt->jsonl);
  mt->jsonl = NULL;
  if (mt->log) fclose(mt->log);
  mt->log = NULL;
  lstmd_tb_close(&mt->tb);
}

static void format_duration(double s, char *buf, size_t n) {
  if (!isfinite(s) || s < 0) s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

void lstmd_metrics_step(struct lstmd_metrics *mt, const struct lstmd_step_report *r) {
  char eta[32];
  format_duration(r->eta_s, eta, sizeof eta);
  fprintf(stderr, "%sstep %ld/%ld | loss %.4f | lr %.3g | %.0f tok/s | ETA %s%s",
          mt->tty ? "\r" : "", r->step, r->total_steps, r->loss, r->lr, r->tokens_per_s, eta,
          mt->tty ? "\033[K" : "\n");
  mt->line_open = mt->tty;
  fflush(stderr);
  if (mt->log)
    fprintf(mt->log, "step %ld/%ld | loss %.4f | lr %.3g | %.0f tok/s | ETA %s\n", r->step,
            r->total_steps, r->loss, r->lr, r->tokens_per_s, eta);
  fprintf(mt->jsonl,
          "{\"step\":%ld,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6g,\"tokens_per_s\":%.1f,"
          "\"tokens\":%lld,\"elapsed_s\":%.3f,\"world\":%d,\"global_batch\":%d,"
          "\"data_wait_s\":%.6f,\"compute_s\":%.6f,\"comm_wait_s\":%.6f",
          r->step, r->loss, r->lr, r->grad_norm, r->tokens_per_s, r->tokens, r->elapsed_s,
          r->world, r->global_batch, r->data_wait_s, r->compute_s, r->comm_wait_s);
  if (r->loss_scale > 0.0) fprintf(mt->jsonl, ",\"loss_scale\":%.9g", r->loss_scale);
  if (r->rank_times)
    fprintf(mt->jsonl, ",\"compute_min_s\":%.6f,\"compute_median_s\":%.6f,\"compute_max_s\":%.6f,"
            "\"slowest_rank\":%d", r->compute_min_s, r->compute_median_s, r->compute_max_s,
            r->slowest_rank);
  if (r->stages > 1) fprintf(mt->jsonl, ",\"stages\":%d", r->stages);
  if (r->stages > 1 && isfinite(r->bubble)) /* NaN: not measured (GPU stages on NCCL lanes) */
    fprintf(mt->jsonl, ",\"bubble\":%.6f,\"p2p_wait_s\":%.6f", r->bubble, r->p2p_wait_s);
  fputs("}\n", mt->jsonl);
  flush_record(mt);
  if (r->rank_times) {
    static const char *const rank_tags[] = {"straggler/compute_min_s", "straggler/compute_median_s",
                                            "straggler/compute_max_s", "straggler/slowest_rank"};
    const float rank_values[] = {(float)r->compute_min_s, (float)r->compute_median_s,
                                 (float)r->compute_max_s, (float)r->slowest_rank};
    lstmd_tb_scalars(&mt->tb, r->step, 4, rank_tags, rank_values);
  }
  if (r->loss_scale > 0.0) {
    static const char *const scale_tag[] = {"train/loss_scale"};
    const float scale_value[] = {(float)r->loss_scale};
    lstmd_tb_scalars(&mt->tb, r->step, 1, scale_tag, scale_value);
  }
  if (r->stages > 1 && isfinite(r->bubble)) {
    static const char *const pipe_tags[] = {"time/bubble", "time/p2p_wait_s"};
    const float pipe_values[] = {(float)r->bubble, (float)r->p2p_wait_s};
    lstmd_tb_scalars(&mt->tb, r->step, 2, pipe_tags, pipe_values);
  }
  static const char *const tags[] = {"train/loss",        "train/lr",          "train/grad_norm",
                                     "train/tokens_per_s", "time/compute_s",    "time/comm_wait_s",
                                     "time/data_wait_s"};
  const float values[] = {(float)r->loss,         (float)r->lr,          (float)r->grad_norm,
                          (float)r->tokens_per_s, (float)r->compute_s,   (float)r->comm_wait_s,
                          (float)r->data_wait_s};
  lstmd_tb_scalars(&mt->tb, r->step, 7, tags, values);
}

void lstmd_metrics_eval(struct lstmd_metrics *mt, long step, double val_loss, double accuracy,
                        const struct lstmd_series_baselines *b) {
  const int d = mt->loss_decimals;
  if (mt->model_kind == LSTMD_MODEL_TEXT) {
    lstmd_metrics_note(mt, "eval step %ld: val_loss %.*f, val_bpc %.4f", step, d, val_loss,
                       val_loss / M_LN2);
    fprintf(mt->jsonl, "{\"step\":%ld,\"val_loss\":%.6f,\"val_bpc\":%.6f}\n", step, val_loss,
            val_loss / M_LN2);
    static const char *const tags[] = {"val/loss", "val/bpc"};
    const float values[] = {(float)val_loss, (float)(val_loss / M_LN2)};
    lstmd_tb_scalars(&mt->tb, step, 2, tags, values);
  } else if (mt->model_kind == LSTMD_MODEL_CLASSIFY) {
    lstmd_metrics_note(mt, "eval step %ld: val_loss (cross-entropy per sequence) %.*f, "
                       "val_accuracy %.4f", step, d, val_loss, accuracy);
    fprintf(mt->jsonl, "{\"step\":%ld,\"val_loss\":%.6f,\"val_accuracy\":%.6f}\n", step, val_loss,
            accuracy);
    static const char *const tags[] = {"val/loss", "val/accuracy"};
    const float values[] = {(float)val_loss, (float)accuracy};
    lstmd_tb_scalars(&mt->tb, step, 2, tags, values);
  } else if (!b) {
    lstmd_metrics_note(mt, "eval step %ld: val_loss (MSE, normalised) %.*f", step, d, val_loss);
    fprintf(mt->jsonl, "{\"step\":%ld,\"val_loss\":%.6f}\n", step, val_loss);
    static const char *const tags[] = {"val/loss"};
    const float values[] = {(float)val_loss};
    lstmd_tb_scalars(&mt->tb, step, 1, tags, values);
  } else {
    const double skill = 1.0 - val_loss / b->mse_persistence;
    char seasonal[96] = "";
    if (b->season)
      snprintf(seasonal, sizeof seasonal, ", seasonal-naive (P %d) %.6f", b->season,
               b->mse_seasonal);
    lstmd_metrics_note(mt, "eval step %ld: val_loss (MSE, normalised) %.*f, persistence %.6f%s, "
                       "skill %.4f", step, d, val_loss, b->mse_persistence, seasonal, skill);
    fprintf(mt->jsonl, "{\"step\":%ld,\"val_loss\":%.6f,\"val_mse_persistence\":%.6f", step,
            val_loss, b->mse_persistence);
    if (b->season) fprintf(mt->jsonl, ",\"val_mse_seasonal\":%.6f", b->mse_seasonal);
    /* A flat validation split (a stuck sensor, weeks of zero sales) makes persistence exact:
     * skill is then -inf (or NaN), which JSON has no number for, and a --resume dropped the
     * record as torn. null keeps it a record. */
    if (isfinite(skill)) fprintf(mt->jsonl, ",\"val_skill\":%.6f}\n", skill);
    else fputs(",\"val_skill\":null}\n", mt->jsonl);
    static const char *const tags[] = {"val/loss", "val/skill", "val/mse_persistence",
                                       "val/mse_seasonal"};
    const float values[] = {(float)val_loss, (float)skill, (float)b->mse_persistence,
                            (float)b->mse_seasonal};
    lstmd_tb_scalars(&mt->tb, step, b->season ? 4 : 3, tags, values);
  }
  flush_record(mt);
}

void lstmd_metrics_prune(struct lstmd_metrics *mt, long step, double target, int n,
                         const char *const *names, const double *sparsity) {
  double mean = 0.0;
  fprintf(mt->jsonl, "{\"step\":%ld,\"prune_target\":%.6f,\"sparsity\":{", step, target);
  for (int i = 0; i < n; i++) {
    fprintf(mt->jsonl, "%s\"%s\":%.6f", i ? "," : "", names[i], sparsity[i]);
    mean += sparsity[i] / n;
  }
  fputs("}}\n", mt->jsonl);
  flush_record(mt);
  lstmd_metrics_note(mt, "prune step %ld: target sparsity %.4f, mean over %d tensors %.4f", step,
                     target, n, mean);
  char tag[48];
  const char *tags[1] = {tag};
  float value[1] = {(float)target};
  snprintf(tag, sizeof tag, "prune/target");
  lstmd_tb_scalars(&mt->tb, step, 1, tags, value);
  for (int i = 0; i < n; i++) {
    snprintf(tag, sizeof tag, "sparsity/%s", names[i]);
    value[0] = (float)sparsity[i];
    lstmd_tb_scalars(&mt->tb, step, 1, tags, value);
  }
}

void lstmd_metrics_new_best(struct lstmd_metrics *mt, long step, double best_loss) {
  fprintf(mt->jsonl, "{\"step\":%ld,\"event\":\"new_best\",\"best_val_loss\":%.6f}\n", step,
          best_loss);
  flush_record(mt);
  lstmd_metrics_note(mt, "eval step %ld: new best val_loss %.*f; best.safetensors written", step,
                     mt->loss_decimals, best_loss);
}

void lstmd_metrics_lr_cut(struct lstmd_metrics *mt, long step, double lr_scale, double peak_lr,
                          double next_lr, long plateau_patience) {
  char scale[32], peak[32], next[32]; /* the learning rates are floats: 0.001, not 0.00100000005 */
  lstmd_format_shortest(lr_scale, 1, scale, sizeof scale); /* 0.01, not 0.010000000000000002 */
  lstmd_format_shortest(peak_lr, 1, peak, sizeof peak);
  lstmd_format_shortest(next_lr, 1, next, sizeof next);
  fprintf(mt->jsonl, "{\"step\":%ld,\"event\":\"lr_cut\",\"lr_scale\":%s,\"peak_lr\":%s,"
          "\"next_lr\":%s}\n", step, scale, peak, next);
  flush_record(mt);
  lstmd_metrics_note(mt, "eval step %ld: plateau (%ld evaluation%s without a new best val_loss): "
                     "learning rate scaled to %.6g of optim.lr (peak %.6g, next update %.6g)",
                     step, plateau_patience, plateau_patience == 1 ? "" : "s", lr_scale, peak_lr,
                     next_lr);
  static const char *const tags[] = {"train/lr_scale"};
  const float values[] = {(float)lr_scale};
  lstmd_tb_scalars(&mt->tb, step, 1, tags, values);
}

void lstmd_metrics_early_stop(struct lstmd_metrics *mt, long step, double best_loss,
                              long best_step, long evals_since_best, const char *where) {
  fprintf(mt->jsonl, "{\"step\":%ld,\"event\":\"early_stop\",\"best_val_loss\":%.6f,"
          "\"best_step\":%ld,\"evals_since_best\":%ld}\n", step, best_loss, best_step,
          evals_since_best);
  flush_record(mt);
  lstmd_metrics_note(mt, "eval step %ld: early stop: no new best val_loss in %ld evaluation%s "
                     "(best %.*f at step %ld, %s)", step, evals_since_best,
                     evals_since_best == 1 ? "" : "s", mt->loss_decimals,
                     best_loss, best_step, where);
}

void lstmd_metrics_log_only(struct lstmd_metrics *mt, const char *lines) {
  for (const char *p = lines; mt && mt->log && p && *p;) {
    const char *nl = strchr(p, '\n');
    const int n = nl ? (int)(nl - p) : (int)strlen(p);
    fprintf(mt->log, "lstmd: %.*s\n", n, p);
    p += n + (nl != NULL);
  }
}

void lstmd_metrics_note(struct lstmd_metrics *mt, const char *fmt, ...) {
  if (mt && mt->line_open) fputc('\n', stderr);
  if (mt) mt->line_open = 0;
  va_list ap;
  va_start(ap, fmt);
  if (mt && mt->log) {
    va_list copy;
    va_copy(copy, ap);
    fputs("lstmd: ", mt->log);
    vfprintf(mt->log, fmt, copy);
    fputc('\n', mt->log);
    va_end(copy);
  }
  lstmd_verrorf(fmt, ap);
  va_end(ap);
}
