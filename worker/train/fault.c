/* fault.c — LSTMD_FAULT and LSTMD_VAL_LOSSES parsing (see fault.h). */
#include "fault.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"

static struct {
  enum lstmd_fault kind;
  long step;
  int rank; /* -1: every rank */
} g_fault;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void parse(void) {
  const char *v = getenv("LSTMD_FAULT");
  if (!v || !*v) return;
  char kind[32];
  long step = 0;
  int rank = -1, n = 0;
  if (sscanf(v, "%31[a-z_]@%ld%n", kind, &step, &n) != 2 || step < 1 ||
      (v[n] && (sscanf(v + n, ":%d", &rank) != 1 || rank < 0))) {
    lstmd_errorf("LSTMD_FAULT='%s' ignored: expected KIND@STEP[:RANK]", v);
    return;
  }
  g_fault.kind = !strcmp(kind, "nan_grad")     ? LSTMD_FAULT_NAN_GRAD
                 : !strcmp(kind, "nan_update") ? LSTMD_FAULT_NAN_UPDATE
                 : !strcmp(kind, "stop")       ? LSTMD_FAULT_STOP
                 : !strcmp(kind, "slow")       ? LSTMD_FAULT_SLOW
                 : !strcmp(kind, "eval_freeze") ? LSTMD_FAULT_EVAL_FREEZE
                 : !strcmp(kind, "ckpt_freeze") ? LSTMD_FAULT_CKPT_FREEZE
                 : !strcmp(kind, "ckpt_slow")  ? LSTMD_FAULT_CKPT_SLOW
                 : !strcmp(kind, "setup_freeze") ? LSTMD_FAULT_SETUP_FREEZE
                 : !strcmp(kind, "workspace_oom") ? LSTMD_FAULT_WORKSPACE_OOM
                 : !strcmp(kind, "state_oom")  ? LSTMD_FAULT_STATE_OOM
                 : !strcmp(kind, "init_freeze") ? LSTMD_FAULT_INIT_FREEZE
                 : !strcmp(kind, "finalize_freeze") ? LSTMD_FAULT_FINALIZE_FREEZE
                 : !strcmp(kind, "finalize_slow") ? LSTMD_FAULT_FINALIZE_SLOW
                                               : LSTMD_FAULT_NONE;
  if (g_fault.kind == LSTMD_FAULT_NONE) {
    lstmd_errorf("LSTMD_FAULT='%s' ignored: the kinds are nan_grad, nan_update, stop, slow, "
                 "eval_freeze, ckpt_freeze, ckpt_slow, setup_freeze, workspace_oom, state_oom, "
                 "init_freeze, finalize_freeze and finalize_slow", v);
    return;
  }
  g_fault.step = step;
  g_fault.rank = rank;
}

int lstmd_fault_due(enum lstmd_fault kind, long step, int rank) {
  pthread_once(&g_once, parse);
  const int at = kind == LSTMD_FAULT_SLOW ? step >= g_fault.step : step == g_fault.step;
  return g_fault.kind == kind && at && (g_fault.rank < 0 || g_fault.rank == rank);
}

enum { kMaxScriptedLosses = 4096 };
static struct {
  double loss[kMaxScriptedLosses];
  long n;
} g_val;
static pthread_once_t g_val_once = PTHREAD_ONCE_INIT;

static void parse_val(void) {
  const char *v = getenv("LSTMD_VAL_LOSSES");
  if (!v || !*v) return;
  long n = 0;
  for (const char *p = v;;) {
    char *end;
    const double x = strtod(p, &end);
    if (end == p || n == kMaxScriptedLosses || (*end && *end != ',')) {
      lstmd_errorf("LSTMD_VAL_LOSSES='%s' ignored: expected up to %d comma-separated numbers", v,
                   kMaxScriptedLosses);
      return;
    }
    g_val.loss[n++] = x;
    if (!*end) break;
    p = end + 1;
  }
  g_val.n = n;
  lstmd_errorf("LSTMD_VAL_LOSSES: the first %ld validation losses are scripted (a test hook)", n);
}

int lstmd_fault_val_loss(long step, long eval_every, double *loss) {
  pthread_once(&g_val_once, parse_val);
  const long k = eval_every > 0 ? (step + eval_every - 1) / eval_every : 1; /* 1-based */
  if (k < 1 || k > g_val.n) return 0;
  *loss = g_val.loss[k - 1];
  return 1;
}
