/* metrics.c — progress line and metrics.jsonl (see metrics.h). */
#include "metrics.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/status.h"

int lstmd_metrics_open(struct lstmd_metrics *mt, const char *run_dir) {
  char path[4096];
  memset(mt, 0, sizeof *mt);
  mt->tty = isatty(STDERR_FILENO);
  snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
  mt->jsonl = fopen(path, "a");
  if (!mt->jsonl) {
    lstmd_errorf("%s: cannot open for appending", path);
    return LSTMD_EIO;
  }
  return LSTMD_OK;
}

void lstmd_metrics_close(struct lstmd_metrics *mt) {
  if (mt->line_open) fputc('\n', stderr);
  mt->line_open = 0;
  if (mt->jsonl) fclose(mt->jsonl);
  mt->jsonl = NULL;
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
  fprintf(mt->jsonl,
          "{\"step\":%ld,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6g,\"tokens_per_s\":%.1f,"
          "\"tokens\":%lld,\"elapsed_s\":%.3f,\"world\":%d,\"global_batch\":%d,"
          "\"data_wait_s\":%.6f,\"compute_s\":%.6f,\"comm_wait_s\":%.6f}\n",
          r->step, r->loss, r->lr, r->grad_norm, r->tokens_per_s, r->tokens, r->elapsed_s,
          r->world, r->global_batch, r->data_wait_s, r->compute_s, r->comm_wait_s);
  fflush(mt->jsonl);
}

void lstmd_metrics_eval(struct lstmd_metrics *mt, long step, double val_loss, int kind_is_text) {
  if (kind_is_text) {
    lstmd_metrics_note(mt, "eval step %ld: val_loss %.4f, val_bpc %.4f", step, val_loss,
                       val_loss / M_LN2);
    fprintf(mt->jsonl, "{\"step\":%ld,\"val_loss\":%.6f,\"val_bpc\":%.6f}\n", step, val_loss,
            val_loss / M_LN2);
  } else {
    lstmd_metrics_note(mt, "eval step %ld: val_loss (MSE, normalised) %.6f", step, val_loss);
    fprintf(mt->jsonl, "{\"step\":%ld,\"val_loss\":%.6f}\n", step, val_loss);
  }
  fflush(mt->jsonl);
}

void lstmd_metrics_note(struct lstmd_metrics *mt, const char *fmt, ...) {
  if (mt && mt->line_open) fputc('\n', stderr);
  if (mt) mt->line_open = 0;
  va_list ap;
  va_start(ap, fmt);
  lstmd_verrorf(fmt, ap);
  va_end(ap);
}
