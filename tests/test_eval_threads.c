/* test_eval_threads.c — validation loss on several threads (worker/model/infer.c): an fp32
 * model's evaluation splits its chunks of windows across as many threads as BLAS was given, and
 * the loss (text) or forecast MSE and skill (series) must be bit for bit those of one thread,
 * for 1 to 4 threads with a short last chunk; within 1e-9 of an evaluation in one chunk of
 * every window (other sums, so only rounding may differ); and BLAS gets its thread count back.
 * The same evaluation shared by 2-4 parts (lstmd_evaluate_shared, as data-parallel ranks share
 * it; threads stand in for the ranks here): every part gets the loss of one alone, bit for bit.
 * And a bidirectional classifier's (lstmd_clf_evaluate_shared): loss and confusion matrix, the
 * same on 1-4 threads and in 2-4 parts. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/blas_cpu.h"
#include "kernels/status.h"
#include "worker/data/dataset.h"
#include "worker/data/prepare.h"
#include "worker/model/classify.h"
#include "worker/model/eval_pool.h"
#include "worker/model/infer.h"
#include "check.h"

static char g_dir[64] = "/tmp/lstmd-eval-threads.XXXXXX";

/* A model for the split `val`, its weights drawn from seed 5. */
static struct lstmd_model *model_for(const struct lstmd_dataset *val, int hidden) {
  struct lstmd_model_shape s = {.hidden = hidden, .layers = 2};
  if (val->info.kind == LSTMD_DATASET_CLASSIFY) {
    s.kind = LSTMD_MODEL_CLASSIFY, s.vocab = val->info.vocab_size, s.embed = 8;
    s.classes = val->info.horizon, s.bidirectional = 1, s.pool = LSTMD_POOL_MAX;
  } else if (val->info.kind == LSTMD_DATASET_TEXT) {
    s.kind = LSTMD_MODEL_TEXT, s.vocab = val->info.vocab_size, s.embed = 8;
  } else {
    s.kind = LSTMD_MODEL_SERIES, s.width = val->info.width, s.horizon = val->info.horizon;
  }
  struct lstmd_model *m = NULL;
  if (lstmd_model_create(&s, &m)) return NULL;
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, 5, 1);
  lstmd_model_init_params(m, &rng);
  return m;
}

/* The prepared dataset in g_dir/sub and a model for it; NULL (a failed check) when either fails,
 * with nothing left open. */
static struct lstmd_model *open_case(const char *sub, int hidden, struct lstmd_dataset *train,
                                     struct lstmd_dataset *val) {
  char dir[128];
  snprintf(dir, sizeof dir, "%s/%s", g_dir, sub);
  if (lstmd_dataset_open_dir(dir, train, val, 1)) {
    check_true("dataset opens", 0);
    return NULL;
  }
  struct lstmd_model *m = model_for(val, hidden);
  check_true("model made", m != NULL);
  if (!m) lstmd_dataset_close(train), lstmd_dataset_close(val);
  return m;
}

static void check_threads(const char *label, const char *sub, int hidden, int T, int B) {
  struct lstmd_dataset train, val;
  struct lstmd_model *m = open_case(sub, hidden, &train, &val);
  if (!m) return;
  const struct lstmd_infer_model im = {m, NULL};
  const uint64_t windows = lstmd_window_count(&val, T);
  char what[160];
  snprintf(what, sizeof what, "%s: %llu windows = %llu chunks of %d and a last one of %llu", label,
           (unsigned long long)windows, (unsigned long long)(windows / B), B,
           (unsigned long long)(windows % B));
  check_true(what, windows > 4 * (uint64_t)B && windows % B);
  struct lstmd_eval_result one = {0}, got, all = {0};
  lstmd_cpu_set_blas_threads(1);
  int rc = lstmd_infer_evaluate_full(&im, &val, T, (int)windows, 1, &all); /* one chunk */
  rc = rc ? rc : lstmd_infer_evaluate_full(&im, &val, T, B, 1, &one);
  snprintf(what, sizeof what, "%s: 1 thread, loss %.9g, within 1e-9 of one chunk of all (%.9g)",
           label, one.loss, all.loss);
  check_true(what, !rc && isfinite(one.loss) && fabs(one.loss - all.loss) <= 1e-9 * fabs(all.loss));
  for (int t = 2; t <= 4; t++) {
    lstmd_cpu_set_blas_threads(t);
    rc = lstmd_infer_evaluate_full(&im, &val, T, B, 1, &got);
    snprintf(what, sizeof what, "%s: %d threads, loss %.17g, skill %.17g: bit for bit", label, t,
             got.loss, got.skill);
    check_true(what, !rc && !memcmp(&got.loss, &one.loss, sizeof got.loss) &&
                         got.tokens == one.tokens &&
                         !memcmp(&got.skill, &one.skill, sizeof got.skill));
    snprintf(what, sizeof what, "%s: BLAS has its %d threads back", label, t);
    check_true(what, lstmd_cpu_blas_threads() == t);
  }
  lstmd_model_destroy(m);
  lstmd_dataset_close(&train);
  lstmd_dataset_close(&val);
}

/* Writes the inputs and prepares them: text (bytes of a few words) and a series CSV. */
static int prepare_inputs(void) {
  char path[128], out[128];
  snprintf(path, sizeof path, "%s/text.txt", g_dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  static const char *const kWords[] = {"lstm ", "gate ", "cell ", "state ", "rank ", "step\n"};
  unsigned long long seed = 11;
  for (int i = 0; i < 6000; i++) fputs(kWords[(int)(test_uniform(&seed, 3.0) + 3.0) % 6], f);
  fclose(f);
  snprintf(out, sizeof out, "%s/text", g_dir);
  if (lstmd_prepare_text(path, out, 0.5)) return -1;
  snprintf(path, sizeof path, "%s/series.csv", g_dir);
  if (!(f = fopen(path, "w"))) return -1;
  fprintf(f, "x,y\n");
  for (int i = 0; i < 3000; i++) fprintf(f, "%.4f,%.4f\n", sin(0.1 * i) + 0.01 * (i % 7), cos(0.05 * i));
  fclose(f);
  snprintf(out, sizeof out, "%s/series", g_dir);
  if (lstmd_prepare_series(path, out, "x", "y", 3, 0.5, 0, LSTMD_MISSING_ERROR)) return -1;
  snprintf(path, sizeof path, "%s/classify.tsv", g_dir);
  if (!(f = fopen(path, "w"))) return -1;
  static const char *const kLabels[] = {"gate", "cell", "rank"};
  for (int i = 0; i < 200; i++) { /* words of mixed lengths: padded batches */
    fprintf(f, "%s\t", kLabels[i % 3]);
    for (int w = 0; w < 1 + i % 5; w++) fputs(kWords[(int)(test_uniform(&seed, 2.5) + 2.5) % 5], f);
    fputc('\n', f);
  }
  fclose(f);
  snprintf(out, sizeof out, "%s/classify", g_dir);
  return lstmd_prepare_classify(path, out, 0.5);
}

/* lstmd_evaluate_shared with `parts` threads standing in for ranks: each part's combine meets
 * the others at a barrier and sums every part's chunk sums. BLAS stays at one thread (the parts
 * share the process's BLAS setting, which ranks do not). */
struct share_sim {
  pthread_barrier_t meet;
  double *sums[4];
  int status[4];
};
struct part_job {
  struct share_sim *sim;
  struct lstmd_model *m;
  const struct lstmd_dataset *val;
  int part, parts, T, B, rc;
  double loss;
  uint64_t tokens;
};

static int combine_sim(void *ctx, double *sums, int n, int status) {
  struct part_job *j = ctx;
  struct share_sim *sim = j->sim;
  sim->sums[j->part] = sums, sim->status[j->part] = status;
  pthread_barrier_wait(&sim->meet);
  int rc = 0;
  for (int p = 0; p < j->parts; p++) rc = rc ? rc : sim->status[p];
  double *total = rc ? NULL : calloc((size_t)n, sizeof *total);
  for (int p = 0; total && p < j->parts; p++)
    for (int i = 0; i < n; i++) total[i] += sim->sums[p][i];
  pthread_barrier_wait(&sim->meet); /* every part has read the others' sums */
  if (total) memcpy(sums, total, (size_t)n * sizeof *total);
  free(total);
  return rc ? rc : total ? 0 : LSTMD_ENOMEM;
}

static void *part_main(void *arg) {
  struct part_job *j = arg;
  const struct lstmd_eval_share share = {j->part, j->parts, combine_sim, j};
  j->rc = lstmd_evaluate_shared(j->m, j->val, j->T, j->B, &share, &j->loss, &j->tokens);
  return NULL;
}

static void check_parts(const char *label, const char *sub, int hidden, int T, int B) {
  char what[160];
  struct lstmd_dataset train, val;
  struct lstmd_model *m = open_case(sub, hidden, &train, &val);
  if (!m) return;
  lstmd_cpu_set_blas_threads(1);
  double alone = 0.0;
  uint64_t tokens = 0;
  int rc = lstmd_evaluate(m, &val, T, B, &alone, &tokens);
  for (int parts = 2; parts <= 4 && !rc; parts++) {
    struct share_sim sim;
    pthread_barrier_init(&sim.meet, NULL, (unsigned)parts);
    struct part_job jobs[4];
    pthread_t th[4];
    for (int p = 0; p < parts; p++) {
      jobs[p] = (struct part_job){&sim, m, &val, p, parts, T, B, -1, 0.0, 0};
      pthread_create(&th[p], NULL, part_main, &jobs[p]);
    }
    int same = 1;
    for (int p = 0; p < parts; p++) {
      pthread_join(th[p], NULL);
      same = same && jobs[p].rc == 0 && jobs[p].tokens == tokens &&
             !memcmp(&jobs[p].loss, &alone, sizeof alone);
    }
    pthread_barrier_destroy(&sim.meet);
    snprintf(what, sizeof what, "%s: shared by %d parts, every part's loss %.17g: bit for bit",
             label, parts, jobs[parts - 1].loss);
    check_true(what, same);
  }
  check_true("evaluation alone", rc == 0);
  lstmd_model_destroy(m);
  lstmd_dataset_close(&train);
  lstmd_dataset_close(&val);
}

/* A classifier's evaluation (worker/model/classify_eval.c) on 1 to 4 threads, and shared by 2-4
 * parts: every loss bit for bit that of one thread alone, every confusion matrix the same. */
struct clf_part_job {
  struct share_sim *sim;
  const struct lstmd_model *m;
  const struct lstmd_dataset *val;
  int part, parts, B, rc;
  struct lstmd_clf_eval res;
};

static int clf_combine_sim(void *ctx, double *sums, int n, int status) {
  struct clf_part_job *j = ctx;
  struct part_job pj = {.sim = j->sim, .part = j->part, .parts = j->parts};
  return combine_sim(&pj, sums, n, status);
}

static void *clf_part_main(void *arg) {
  struct clf_part_job *j = arg;
  const struct lstmd_eval_share share = {j->part, j->parts, clf_combine_sim, j};
  j->rc = lstmd_clf_evaluate_shared(j->m, j->val, j->B, &share, &j->res);
  return NULL;
}

static int same_clf(const struct lstmd_clf_eval *a, const struct lstmd_clf_eval *b) {
  return !memcmp(&a->loss, &b->loss, sizeof a->loss) && a->sequences == b->sequences &&
         a->correct == b->correct && !memcmp(a->confusion, b->confusion, sizeof a->confusion);
}

static void check_classifier(int B) {
  char what[200];
  struct lstmd_dataset train, val;
  struct lstmd_model *m = open_case("classify", 24, &train, &val);
  if (!m) return;
  static struct lstmd_clf_eval one, got;
  lstmd_cpu_set_blas_threads(1);
  int rc = lstmd_clf_evaluate(m, &val, B, &one);
  snprintf(what, sizeof what, "classifier: %llu sequences in chunks of %d and a last one of %llu, "
           "1 thread: loss %.9g, %llu correct", (unsigned long long)val.info.count, B,
           (unsigned long long)(val.info.count % B), one.loss, (unsigned long long)one.correct);
  check_true(what, !rc && isfinite(one.loss) && one.sequences == val.info.count &&
                       val.info.count > 4 * (uint64_t)B && val.info.count % B);
  for (int t = 2; t <= 4; t++) {
    lstmd_cpu_set_blas_threads(t);
    rc = lstmd_clf_evaluate(m, &val, B, &got);
    snprintf(what, sizeof what, "classifier: %d threads, loss %.17g, %llu correct: bit for bit", t,
             got.loss, (unsigned long long)got.correct);
    check_true(what, !rc && same_clf(&got, &one) && lstmd_cpu_blas_threads() == t);
  }
  lstmd_cpu_set_blas_threads(1);
  for (int parts = 2; parts <= 4; parts++) {
    struct share_sim sim;
    pthread_barrier_init(&sim.meet, NULL, (unsigned)parts);
    static struct clf_part_job jobs[4];
    pthread_t th[4];
    for (int p = 0; p < parts; p++) {
      jobs[p] = (struct clf_part_job){&sim, m, &val, p, parts, B, -1, {0}};
      pthread_create(&th[p], NULL, clf_part_main, &jobs[p]);
    }
    int same = 1;
    for (int p = 0; p < parts; p++) {
      pthread_join(th[p], NULL);
      same = same && jobs[p].rc == 0 && same_clf(&jobs[p].res, &one);
    }
    pthread_barrier_destroy(&sim.meet);
    snprintf(what, sizeof what, "classifier: shared by %d parts, every part's loss %.17g and "
             "confusion: bit for bit", parts, jobs[parts - 1].res.loss);
    check_true(what, same);
  }
  lstmd_model_destroy(m);
  lstmd_dataset_close(&train);
  lstmd_dataset_close(&val);
}

/* eval_pool.c itself: helper threads that cannot open their state leave every chunk to the
 * others (all chunks still scored once, the same sums), and a chunk that fails fails the run. */
struct pool_case {
  int helpers_fail;
  uint64_t fail_chunk; /* UINT64_MAX: none */
  int helpers_fail_chunks;
  pthread_t caller;
  int scored[40];      /* atomic: times each chunk was scored */
};

static int pool_open(void *ctx, int helper, void **state) {
  const struct pool_case *pc = ctx;
  *state = NULL;
  return helper && pc->helpers_fail ? LSTMD_ENOMEM : LSTMD_OK;
}

static int pool_score(void *ctx, void *state, uint64_t chunk, double *sum) {
  (void)state;
  struct pool_case *pc = ctx;
  __atomic_fetch_add(&pc->scored[chunk], 1, __ATOMIC_RELAXED);
  *sum = 1.0 / (double)(chunk + 1);
  usleep(1000); /* so that every thread gets chunks */
  if (pc->helpers_fail_chunks && !pthread_equal(pthread_self(), pc->caller)) return LSTMD_EIO;
  return chunk == pc->fail_chunk ? LSTMD_EIO : LSTMD_OK;
}

static void pool_close(void *ctx, void *state) { (void)ctx, (void)state; }

static void check_pool(void) {
  char what[160];
  for (int fail = 0; fail <= 1; fail++) {
    static struct pool_case pc;
    memset(&pc, 0, sizeof pc);
    pc.helpers_fail = fail, pc.fail_chunk = UINT64_MAX;
    double sums[40] = {0};
    const struct lstmd_eval_share third = {1, 3, NULL, NULL}; /* part 1 of 3; no combine here */
    const struct lstmd_eval_pool pool = {40, &third, &pc, pool_open, pool_score, pool_close};
    const int rc = lstmd_eval_pool_run(&pool, 4, sums);
    int right = rc == 0 && lstmd_eval_pool_mine(&pool) == 13;
    for (uint64_t c = 0; c < 40; c++)
      right = right && pc.scored[c] == (c % 3 == 1) && sums[c] == (c % 3 == 1 ? 1.0 / (c + 1) : 0);
    snprintf(what, sizeof what, "pool: part 1 of 3 scores chunks 1, 4, ... 37 once each on 4 "
             "threads%s", fail ? ", the 3 helpers unable to open" : "");
    check_true(what, right);
  }
  static struct pool_case pc;
  memset(&pc, 0, sizeof pc);
  pc.fail_chunk = 5;
  double sums[40] = {0};
  const struct lstmd_eval_pool pool = {40, NULL, &pc, pool_open, pool_score, pool_close};
  check_true("pool: a chunk that fails fails the run", lstmd_eval_pool_run(&pool, 3, sums) == LSTMD_EIO);
  memset(&pc, 0, sizeof pc);
  pc.fail_chunk = UINT64_MAX, pc.helpers_fail_chunks = 1, pc.caller = pthread_self();
  check_true("pool: a chunk that fails on a helper thread fails the run",
             lstmd_eval_pool_run(&pool, 3, sums) == LSTMD_EIO);
}

int main(void) {
  if (!mkdtemp(g_dir)) return 1;
  check_true("inputs prepared", prepare_inputs() == LSTMD_OK);
  check_threads("text H64", "text", 64, 16, 7);
  check_threads("series H32", "series", 32, 12, 5);
  check_parts("text H64", "text", 64, 16, 7);
  check_parts("series H32", "series", 32, 12, 5);
  check_classifier(6);
  check_pool();
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
  return check_summary("test_eval_threads");
}
