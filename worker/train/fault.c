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

/* LSTMD_FAULT's KIND names, indexed by enum lstmd_fault. */
static const char *const kKindNames[LSTMD_FAULT_COUNT] = {
    [LSTMD_FAULT_NAN_GRAD] = "nan_grad",
    [LSTMD_FAULT_NAN_UPDATE] = "nan_update",
    [LSTMD_FAULT_STOP] = "stop",
    [LSTMD_FAULT_SLOW] = "slow",
    [LSTMD_FAULT_EVAL_FREEZE] = "eval_freeze",
    [LSTMD_FAULT_CKPT_FREEZE] = "ckpt_freeze",
    [LSTMD_FAULT_CKPT_SLOW] = "ckpt_slow",
    [LSTMD_FAULT_SETUP_FREEZE] = "setup_freeze",
    [LSTMD_FAULT_WORKSPACE_OOM] = "workspace_oom",
    [LSTMD_FAULT_STATE_OOM] = "state_oom",
    [LSTMD_FAULT_INIT_FREEZE] = "init_freeze",
    [LSTMD_FAULT_FINALIZE_FREEZE] = "finalize_freeze",
    [LSTMD_FAULT_FINALIZE_SLOW] = "finalize_slow",
};

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
  for (int k = LSTMD_FAULT_NONE + 1; k < LSTMD_FAULT_COUNT; k++)
    if (!strcmp(kind, kKindNames[k])) g_fault.kind = (enum lstmd_fault)k;
  if (g_fault.kind == LSTMD_FAULT_NONE) {
    char kinds[400] = "";
    for (int k = LSTMD_FAULT_NONE + 1; k < LSTMD_FAULT_COUNT; k++) {
      const size_t len = strlen(kinds);
      snprintf(kinds + len, sizeof kinds - len, "%s%s", k == LSTMD_FAULT_NONE + 1 ? ""
                                                        : k + 1 < LSTMD_FAULT_COUNT ? ", "
                                                                                    : " and ",
               kKindNames[k]);
    }
    lstmd_errorf("LSTMD_FAULT='%s' ignored: the kinds are %s", v, kinds);
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
