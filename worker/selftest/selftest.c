/* selftest.c — the report of `lstmd selftest` (selftest.h): one line per check, counted. */
#define _GNU_SOURCE /* nftw */
#include "selftest.h"

#include <ftw.h>
#include <math.h>
#include <stdlib.h>

#include "comm/comm.h"

static struct lstmd_selftest *g_st; /* the report the checks count in */

void lstmd_selftest_init(struct lstmd_selftest *st, FILE *out, struct lstmd_comm *comm) {
  *st = (struct lstmd_selftest){.out = out ? out : stdout, .comm = comm, .group = "-"};
  g_st = st;
}

void lstmd_selftest_group(struct lstmd_selftest *st, const char *group) {
  st->group = group;
  g_st = st;
}

static void line(const char *verdict, const char *what, const char *detail) {
  if (!g_st) return;
  const int rank = g_st->comm ? lstmd_comm_rank(g_st->comm) : 0;
  const int world = g_st->comm ? lstmd_comm_size(g_st->comm) : 1;
  if (world > 1) fprintf(g_st->out, "%s  %-8s rank %d: %s%s\n", verdict, g_st->group, rank, what, detail);
  else fprintf(g_st->out, "%s  %-8s %s%s\n", verdict, g_st->group, what, detail);
  fflush(g_st->out);
  if (verdict[0] == 'P') g_st->pass++;
  else if (verdict[0] == 'F') g_st->fail++;
  else g_st->skip++;
}

int lstmd_check_close(const char *what, const float *got, const double *ref, size_t n,
                      double atol, double rtol) {
  size_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double err = fabs((double)got[i] - ref[i]), tol = atol + rtol * fabs(ref[i]);
    if (!(err <= tol)) {
      if (bad < 5)
        fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (err %.3g > tol %.3g)\n", what, i,
                got[i], ref[i], err, tol);
      bad++;
    }
    if (err > worst || err != err) worst = err;
  }
  char detail[160];
  snprintf(detail, sizeof detail, "  (%zu values, max abs err %.3g; tol %.3g + %.3g·|ref|%s)", n,
           worst, atol, rtol, bad ? ", out of tolerance" : "");
  line(bad ? "FAIL" : "PASS", what, detail);
  return bad == 0;
}

int lstmd_check_close_f(const char *what, const float *got, const float *ref, size_t n,
                        double atol, double rtol) {
  double *r = malloc(n * sizeof *r);
  if (!r) return lstmd_check_true(what, 0);
  for (size_t i = 0; i < n; i++) r[i] = ref[i];
  const int ok = lstmd_check_close(what, got, r, n, atol, rtol);
  free(r);
  return ok;
}

int lstmd_check_true(const char *what, int ok) {
  line(ok ? "PASS" : "FAIL", what, "");
  return ok;
}

void lstmd_check_skip(const char *what, const char *why) {
  char detail[512];
  snprintf(detail, sizeof detail, ": %s", why);
  line("SKIP", what, detail);
}

int lstmd_selftest_summary(struct lstmd_selftest *st) {
  const int status = st->fail ? 1 : (st->pass == 0 && st->skip > 0) ? 77 : 0;
  fprintf(st->out, "%s: %d passed, %d failed, %d skipped\n",
          st->fail ? "FAIL" : status == 77 ? "SKIP" : "PASS", st->pass, st->fail, st->skip);
  fflush(st->out);
  return status;
}

float *selftest_rand_floats(unsigned long long *state, size_t n, double scale, double *copy) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; x && i < n; i++) {
    x[i] = (float)selftest_uniform(state, scale);
    if (copy) copy[i] = x[i];
  }
  return x;
}

double selftest_rel_err(const float *a, const float *b, size_t n) {
  double d = 0.0, r = 0.0;
  for (size_t i = 0; i < n; i++) {
    d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return r > 0.0 ? sqrt(d / r) : sqrt(d);
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

void selftest_remove_tree(const char *dir) {
  if (nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0) printf("  (could not remove %s)\n", dir);
}
