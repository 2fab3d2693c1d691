/* selftest.h — `lstmd selftest`'s checks and their report, shared by the installed binary and
 * the ctest `gpu` tests (which run `lstmd selftest --gpu --only GROUP`): one implementation.
 *
 * A check prints one line, "PASS|FAIL|SKIP  group  what  (measured error, tolerance)", and is
 * counted in the current selftest. The GPU groups live in the GPU module (gpu_backend.h) and
 * report through these same functions, which the lstmd executable exports to it. */
#ifndef LSTMD_SELFTEST_H
#define LSTMD_SELFTEST_H

#include <stddef.h>
#include <stdio.h>

struct lstmd_comm;

struct lstmd_selftest {
  FILE *out;
  struct lstmd_comm *comm; /* the world of this process (NULL: one rank, no MPI) */
  const char *group;       /* the group running now ("cpu", "kernels", "model", ...) */
  int pass, fail, skip;
};

/* Starts a report on out (stdout when NULL); makes st the one the checks below count in. */
void lstmd_selftest_init(struct lstmd_selftest *st, FILE *out, struct lstmd_comm *comm);
/* Names the group of the checks that follow. */
void lstmd_selftest_group(struct lstmd_selftest *st, const char *group);
/* One line "PASS/FAIL/SKIP: N passed, N failed, N skipped"; returns the exit status: 1 when a
 * check failed, 77 when every check was skipped (ctest: skipped), else 0. */
int lstmd_selftest_summary(struct lstmd_selftest *st);

/* |got − ref| ≤ atol + rtol·|ref| element-wise against a float64 reference; the line gives the
 * count, the largest error and the tolerance; the first mismatches go to stderr. */
int lstmd_check_close(const char *what, const float *got, const double *ref, size_t n,
                      double atol, double rtol);
/* The same against a float32 reference (two paths of one computation). */
int lstmd_check_close_f(const char *what, const float *got, const float *ref, size_t n,
                        double atol, double rtol);
int lstmd_check_true(const char *what, int ok);
void lstmd_check_skip(const char *what, const char *why);

/* The GPU groups (in the GPU module; gpu_backend.h's `selftest` entry): kernels, convert, cudnn,
 * model, classify, pipe, nccl; `only` names one (NULL: all). Without a usable device each is a SKIP. */
void lstmd_selftest_gpu(struct lstmd_selftest *st, const char *only);
/* The CPU groups (worker/selftest/cpu_checks.c): cpu. */
void lstmd_selftest_cpu(struct lstmd_selftest *st, const char *only);

/* Deterministic uniform values in [-scale, scale] (a small LCG). */
static inline double selftest_uniform(unsigned long long *state, double scale) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return ((double)(*state >> 11) / 9007199254740992.0 * 2.0 - 1.0) * scale;
}
/* n floats uniform in [-scale, scale] (malloc'd); copy (may be NULL) gets them as doubles. */
float *selftest_rand_floats(unsigned long long *state, size_t n, double scale, double *copy);
/* ‖a − b‖ / ‖b‖ over n values (‖a − b‖ when b is all zeros), in double. */
double selftest_rel_err(const float *a, const float *b, size_t n);
/* Removes the scratch folder `dir` (made with mkdtemp) and all below it; says so when it cannot. */
void selftest_remove_tree(const char *dir);

#endif
