/* test_protocol.c — the daemon's pure parts: frame boundaries (every split of a stream of
 * frames, lying and oversize prefixes), request validation, the job journal (replay, a torn or
 * corrupt tail, compaction, an append cut short by a full disk and written again later), the job table's states, path confinement (.., symlinks), the
 * token compare, and the arena that holds unpacked messages. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/access.h"
#include "daemon/arena.h"
#include "daemon/frame.h"
#include "daemon/jobs.h"
#include "daemon/journal.h"
#include "kernels/status.h"
#include "worker/io/safetensors.h"
#include "check.h"

static char g_dir[] = "/tmp/lstmd-test-protocol-XXXXXX";

static uint8_t *pack_request(Lstmd__Request *r, size_t *len) { return lstmd_frame_pack(&r->base, len); }

static void test_frames(void) {
  uint32_t n = 0;
  uint8_t hdr[4];
  check_true("frame: empty needs more", lstmd_frame_peek(hdr, 0, 100, &n) == LSTMD_FRAME_NEED_MORE);
  lstmd_frame_put_header(hdr, 101);
  check_true("frame: oversize prefix refused at once",
             lstmd_frame_peek(hdr, 4, 100, &n) == LSTMD_FRAME_TOO_LARGE && n == 101);
  lstmd_frame_put_header(hdr, 0xffffffffu);
  check_true("frame: 4 GiB prefix refused", lstmd_frame_peek(hdr, 4, LSTMD_FRAME_MAX_DEFAULT, &n) == LSTMD_FRAME_TOO_LARGE);

  /* Three requests back to back, cut at every byte: each prefix of the stream holds exactly the
   * frames that are complete in it. */
  Lstmd__ListJobs list = LSTMD__LIST_JOBS__INIT;
  Lstmd__GetJob get = LSTMD__GET_JOB__INIT;
  get.id = 7;
  Lstmd__Request r1 = LSTMD__REQUEST__INIT, r2 = LSTMD__REQUEST__INIT;
  r1.kind_case = LSTMD__REQUEST__KIND_LIST;
  r1.list = &list;
  r2.kind_case = LSTMD__REQUEST__KIND_GET;
  r2.get = &get;
  size_t l1, l2;
  uint8_t *f1 = pack_request(&r1, &l1), *f2 = pack_request(&r2, &l2);
  uint8_t stream[256];
  size_t total = 0;
  memcpy(stream, f1, l1), total += l1;
  memcpy(stream + total, f2, l2), total += l2;
  memcpy(stream + total, f1, l1), total += l1;
  int good = 1;
  for (size_t cut = 0; cut <= total; cut++) {
    size_t off = 0, frames = 0;
    for (;;) {
      int st = lstmd_frame_peek(stream + off, cut - off, 1024, &n);
      if (st != LSTMD_FRAME_READY) break;
      int code;
      char err[256];
      Lstmd__Request *r = lstmd_request_parse(stream + off + 4, n, NULL, &code, err, sizeof err);
      good &= r != NULL && r->kind_case == (frames == 1 ? LSTMD__REQUEST__KIND_GET : LSTMD__REQUEST__KIND_LIST);
      lstmd_request_free(r, NULL);
      off += 4 + n;
      frames++;
    }
    size_t expect = cut >= l1 + l2 + l1 ? 3 : cut >= l1 + l2 ? 2 : cut >= l1 ? 1 : 0;
    good &= frames == expect;
  }
  check_true("frame: every cut of a 3-frame stream", good);
  free(f1);
  free(f2);
}

static int parse_fails_with(const uint8_t *p, size_t n, int want_code, const char *want_text) {
  int code = -1;
  char err[512] = "";
  Lstmd__Request *r = lstmd_request_parse(p, n, NULL, &code, err, sizeof err);
  lstmd_request_free(r, NULL);
  return !r && code == want_code && strstr(err, want_text) != NULL;
}

static void test_requests(void) {
  const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
  check_true("request: junk bytes", parse_fails_with(junk, sizeof junk, LSTMD__ERROR_CODE__BAD_REQUEST, "malformed"));
  check_true("request: empty message has no kind", parse_fails_with(junk, 0, LSTMD__ERROR_CODE__BAD_REQUEST, "unknown request kind"));
  const uint8_t unknown_kind[] = {0xa2, 0x06, 0x00}; /* field 100, length-delimited, empty */
  check_true("request: unknown oneof field", parse_fails_with(unknown_kind, sizeof unknown_kind, LSTMD__ERROR_CODE__BAD_REQUEST, "unknown request kind"));

  Lstmd__CancelJob cancel = LSTMD__CANCEL_JOB__INIT; /* id 0 */
  Lstmd__Request r = LSTMD__REQUEST__INIT;
  r.kind_case = LSTMD__REQUEST__KIND_CANCEL;
  r.cancel = &cancel;
  size_t len;
  uint8_t *f = pack_request(&r, &len);
  check_true("request: cancel without an id", parse_fails_with(f + 4, len - 4, LSTMD__ERROR_CODE__BAD_REQUEST, "no job id"));
  free(f);

  Lstmd__Setting good = LSTMD__SETTING__INIT, bad = LSTMD__SETTING__INIT;
  good.key = "train.steps";
  good.value = "10";
  bad.key = "train.steps;rm";
  bad.value = "1";
  Lstmd__Setting *settings[] = {&good, &bad};
  Lstmd__JobSpec spec = LSTMD__JOB_SPEC__INIT;
  spec.settings = settings;
  spec.n_settings = 1;
  Lstmd__SubmitJob submit = LSTMD__SUBMIT_JOB__INIT;
  submit.spec = &spec;
  r.kind_case = LSTMD__REQUEST__KIND_SUBMIT;
  r.submit = &submit;
  f = pack_request(&r, &len);
  int code;
  char err[256];
  Lstmd__Request *ok = lstmd_request_parse(f + 4, len - 4, NULL, &code, err, sizeof err);
  check_true("request: a valid submit", ok && ok->submit->spec->n_settings == 1 &&
                                            !strcmp(ok->submit->spec->settings[0]->value, "10"));
  lstmd_request_free(ok, NULL);
  free(f);
  spec.n_settings = 2;
  f = pack_request(&r, &len);
  check_true("request: a malformed key is named", parse_fails_with(f + 4, len - 4, LSTMD__ERROR_CODE__INVALID_JOB, "train.steps;rm"));
  free(f);
  Lstmd__Setting *many[LSTMD_MAX_SETTINGS + 1];
  for (int i = 0; i <= LSTMD_MAX_SETTINGS; i++) many[i] = &good;
  spec.settings = many;
  spec.n_settings = LSTMD_MAX_SETTINGS + 1;
  f = pack_request(&r, &len);
  check_true("request: too many settings", parse_fails_with(f + 4, len - 4, LSTMD__ERROR_CODE__BAD_REQUEST, "at most"));
  free(f);
  submit.spec = NULL;
  f = pack_request(&r, &len);
  check_true("request: submit without a spec", parse_fails_with(f + 4, len - 4, LSTMD__ERROR_CODE__BAD_REQUEST, "no job spec"));
  free(f);
}

/* Unpacks a reply frame (and frees it). */
static Lstmd__Response *unpack_reply(uint8_t *frame, size_t len) {
  Lstmd__Response *r = frame ? lstmd__response__unpack(NULL, len - 4, frame + 4) : NULL;
  free(frame);
  return r;
}

static Lstmd__Response *get_reply(struct lstmd_jobs *t, uint64_t id) {
  size_t len = 0;
  uint8_t *f = lstmd_jobs_get(t, id, &len);
  return unpack_reply(f, len);
}

static Lstmd__Response *list_reply(struct lstmd_jobs *t) {
  size_t len = 0;
  uint8_t *f = lstmd_jobs_list(t, &len);
  return unpack_reply(f, len);
}

/* GetJob and ListJobs replies are cached per table version: each change must show. */
static void check_status_replies(struct lstmd_jobs *t) {
  size_t len, len2;
  uint8_t *a = lstmd_jobs_get(t, 1, &len), *b = lstmd_jobs_get(t, 1, &len2);
  check_true("status: a repeated GetJob gives the same bytes", a && b && len == len2 && !memcmp(a, b, len));
  free(a);
  free(b);
  lstmd_jobs_progress(t, 1, 7, 100, 2.5, 1e-3, 0.5, 1000.0, 1.0, 10.0);
  Lstmd__Response *g = get_reply(t, 1);
  Lstmd__Response *l = list_reply(t);
  check_true("status: progress shows in GetJob and ListJobs",
             g && g->job->step == 7 && g->job->loss == 2.5 && l && l->jobs->n_jobs == 3 &&
                 l->jobs->jobs[0]->step == 7 && l->jobs->jobs[1]->state == LSTMD__JOB_STATE__CANCELLED);
  lstmd__response__free_unpacked(g, NULL);
  lstmd__response__free_unpacked(l, NULL);
  lstmd_jobs_eval(t, 1, 7, 1.25, 1.8, NAN);
  g = get_reply(t, 1);
  l = list_reply(t);
  check_true("status: an evaluation shows too", g && g->job->val_loss == 1.25 && l &&
                                                    l->jobs->jobs[0]->val_loss == 1.25);
  check_true("status: no accuracy but a classifier's", g && !g->job->has_val_accuracy);
  lstmd__response__free_unpacked(g, NULL);
  lstmd__response__free_unpacked(l, NULL);
  lstmd_jobs_eval(t, 1, 8, 0.5, NAN, 0.875);
  g = get_reply(t, 1);
  check_true("status: a classifier's evaluation shows its accuracy",
             g && g->job->has_val_accuracy && g->job->val_accuracy == 0.875 && g->job->val_loss == 0.5);
  lstmd__response__free_unpacked(g, NULL);
  free(lstmd_jobs_get(t, 3, &len));
  lstmd_jobs_finish(t, 3, LSTMD__JOB_STATE__FAILED, 0, "test failure", 0, 0);
  g = get_reply(t, 3);
  l = list_reply(t);
  check_true("status: a finished job shows at once", g && g->job->state == LSTMD__JOB_STATE__FAILED &&
                                                         !strcmp(g->job->reason, "test failure") && l &&
                                                         l->jobs->jobs[2]->state == LSTMD__JOB_STATE__FAILED);
  lstmd__response__free_unpacked(g, NULL);
  lstmd__response__free_unpacked(l, NULL);
  g = get_reply(t, 99);
  check_true("status: an unknown id is NOT_FOUND", g && g->kind_case == LSTMD__RESPONSE__KIND_ERROR &&
                                                       g->error->code == LSTMD__ERROR_CODE__NOT_FOUND);
  lstmd__response__free_unpacked(g, NULL);
}

/* The scheduler's start of the first queued job, on ranks 2 and 3. */
static Lstmd__Job *next_job(struct lstmd_jobs *t) {
  static const int ranks[2] = {2, 3};
  for (size_t i = 0; i < t->n; i++)
    if (t->v[i]->state == LSTMD__JOB_STATE__QUEUED) return lstmd_jobs_start(t, t->v[i]->id, ranks, 2);
  return NULL;
}

static void test_journal_and_jobs(void) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s/state", g_dir);
  mkdir(dir, 0700);
  struct lstmd_jobs t;
  check_true("jobs: open an empty state dir", lstmd_jobs_open(&t, dir) == 0 && t.n == 0);
  Lstmd__JobSpec spec = LSTMD__JOB_SPEC__INIT;
  spec.name = "a";
  size_t len;
  Lstmd__Response *l = list_reply(&t);
  check_true("status: an empty list", l && l->kind_case == LSTMD__RESPONSE__KIND_JOBS && l->jobs->n_jobs == 0);
  lstmd__response__free_unpacked(l, NULL);
  for (int i = 0; i < 3; i++) free(lstmd_jobs_submit(&t, &spec, NULL, NULL, 100, NULL, &len));
  l = list_reply(&t);
  check_true("status: submitted jobs are listed", l && l->jobs->n_jobs == 3 && l->jobs->jobs[2]->id == 3);
  lstmd__response__free_unpacked(l, NULL);
  free(lstmd_jobs_get(&t, 1, &len)); /* fill the reply caches before the changes below */
  free(lstmd_jobs_get(&t, 2, &len));
  free(lstmd_jobs_list(&t, &len));
  Lstmd__Job *j1 = next_job(&t); /* job 1 RUNNING on ranks 2-3 */
  free(lstmd_jobs_cancel(&t, 2, &len));  /* queued: CANCELLED at once */
  Lstmd__Response *g1 = get_reply(&t, 1), *g2 = get_reply(&t, 2);
  l = list_reply(&t);
  check_true("status: a job taken to run and a cancelled one show at once",
             g1 && g1->job->state == LSTMD__JOB_STATE__RUNNING && g2 &&
                 g2->job->state == LSTMD__JOB_STATE__CANCELLED && l &&
                 l->jobs->jobs[0]->state == LSTMD__JOB_STATE__RUNNING &&
                 l->jobs->jobs[1]->state == LSTMD__JOB_STATE__CANCELLED);
  lstmd__response__free_unpacked(g1, NULL);
  lstmd__response__free_unpacked(g2, NULL);
  lstmd__response__free_unpacked(l, NULL);
  check_true("jobs: FIFO and cancel of a queued job",
             j1 && j1->id == 1 && t.v[0]->state == LSTMD__JOB_STATE__RUNNING &&
                 t.v[1]->state == LSTMD__JOB_STATE__CANCELLED && t.v[2]->state == LSTMD__JOB_STATE__QUEUED);
  free(lstmd_jobs_cancel(&t, 1, &len)); /* running: asks the trainer to stop */
  uint64_t seen = t.requests;
  struct lstmd_jobs_entry *e = NULL;
  size_t ne = 0;
  int draining = 1;
  lstmd_jobs_snapshot(&t, &e, &ne, &draining);
  check_true("jobs: cancel of the running job is a request the scheduler sees",
             lstmd_jobs_cancel_requested(&t, 1) && seen > 0 && e && ne == 2 && e[0].id == 1 &&
                 e[0].running && e[0].cancel_requested && e[1].id == 3 && !e[1].running &&
                 !draining);
  free(e);
  check_status_replies(&t);
  lstmd__job__free_unpacked(j1, NULL);
  lstmd_jobs_close(&t); /* "crash" with job 1 RUNNING */

  /* A torn record at the end, as after a crash mid-append. */
  char path[300];
  snprintf(path, sizeof path, "%s/jobs.journal", dir);
  FILE *f = fopen(path, "ab");
  fwrite("\x40\x00\x00\x00\x12\x34", 1, 6, f);
  fclose(f);
  check_true("journal: replay past a torn tail", lstmd_jobs_open(&t, dir) == 0 && t.n == 3);
  check_true("journal: a job RUNNING at the crash is queued again",
             t.v[0]->state == LSTMD__JOB_STATE__QUEUED && t.v[0]->attempts == 1 &&
                 strstr(t.v[0]->reason, "resumes") != NULL && t.v[1]->state == LSTMD__JOB_STATE__CANCELLED);
  check_true("journal: ids continue after the last", t.next_id == 4);
  check_true("journal: the rank assignment of a job is recorded",
             t.v[0]->n_assigned_ranks == 2 && t.v[0]->assigned_ranks[0] == 2 &&
                 t.v[0]->assigned_ranks[1] == 3);
  lstmd_jobs_close(&t);
  struct stat st;

  /* One more record, appended last: job 4 submitted. Then flip a byte inside it (near its end,
   * where a reader that skipped the CRC would still decode it): its CRC fails and it is dropped,
   * so job 4 does not exist; a reader that trusted it would list 4 jobs. */
  int reopened = lstmd_jobs_open(&t, dir) == 0 && t.n == 3;
  free(lstmd_jobs_submit(&t, &spec, NULL, NULL, 100, NULL, &len));
  reopened &= t.n == 4 && t.v[3]->id == 4 && t.v[3]->state == LSTMD__JOB_STATE__QUEUED;
  lstmd_jobs_close(&t);
  check_true("journal: job 4 submitted, appended", reopened);
  stat(path, &st);
  f = fopen(path, "r+b");
  fseek(f, st.st_size - 3, SEEK_SET);
  int c = fgetc(f);
  fseek(f, st.st_size - 3, SEEK_SET);
  fputc(c ^ 0x5a, f);
  fclose(f);
  /* Exactly the jobs before the corrupt record: 1 QUEUED (requeued once, attempts 1),
   * 2 CANCELLED, 3 FAILED (check_status_replies); no job 4, and the next id is 4 again. */
  int opened = lstmd_jobs_open(&t, dir) == 0;
  static const int want_state[3] = {LSTMD__JOB_STATE__QUEUED, LSTMD__JOB_STATE__CANCELLED,
                                    LSTMD__JOB_STATE__FAILED};
  int exact = opened && t.n == 3 && t.next_id == 4 && t.v[0]->attempts == 1;
  if (opened && t.n != 3) fprintf(stderr, "  %zu jobs after the corrupt record, want 3\n", t.n);
  for (size_t i = 0; opened && i < t.n; i++) {
    int want = i < 3 && t.v[i]->id == i + 1 && (int)t.v[i]->state == want_state[i];
    if (!want && i < 3)
      fprintf(stderr, "  job at %zu: id %llu state %d, want id %zu state %d\n", i,
              (unsigned long long)t.v[i]->id, (int)t.v[i]->state, i + 1, want_state[i]);
    else if (!want)
      fprintf(stderr, "  job at %zu: id %llu state %d, want no such job\n", i,
              (unsigned long long)t.v[i]->id, (int)t.v[i]->state);
    exact &= want;
  }
  check_true("journal: a corrupt record is dropped, not trusted", exact);
  lstmd_jobs_close(&t);

  /* A job found RUNNING takes its step from the checkpoint its run will resume from (its run
   * dir's latest.safetensors, header only): the journal has the step it was started from. Above
   * its run dir held none (step 0, "none yet"); now one of step 40, for the next crash. */
  char ck[400];
  snprintf(ck, sizeof ck, "%s/runs", dir);
  mkdir(ck, 0700);
  snprintf(ck, sizeof ck, "%s/runs/job-1", dir);
  mkdir(ck, 0700);
  snprintf(ck, sizeof ck, "%s/runs/job-1/latest.safetensors", dir);
  const float one = 1.0f;
  const struct lstmd_st_tensor tensor = {"x", &one, 1, {1}, "F32"};
  const struct lstmd_st_meta step40[] = {{"train.step", "40"}};
  check_true("jobs: a checkpoint of step 40 in job 1's run dir", lstmd_st_write(ck, &tensor, 1, step40, 1) == 0);

  /* Interrupted in its 1st (above), 2nd and 3rd attempts: failed, not retried forever. */
  int attempts_ok = 1;
  for (int i = 0; i < 2; i++) {
    lstmd_jobs_open(&t, dir);
    if (i == 1) { /* the job that i = 0 started (next_job) and left RUNNING */
      const Lstmd__Job *j1 = t.n ? t.v[0] : NULL;
      char what[300];
      snprintf(what, sizeof what, "jobs: requeued after a crash at its checkpoint's step: step %lld, '%s' (%s)",
               j1 ? (long long)j1->step : -1LL, j1 ? j1->reason : "", j1 ? j1->run_dir : "");
      check_true(what, j1 && j1->step == 40 && strstr(j1->reason, "resumes from its checkpoint of step 40"));
    }
    Lstmd__Job *j = next_job(&t);
    attempts_ok &= j && j->id == 1;
    if (j) lstmd__job__free_unpacked(j, NULL);
    lstmd_jobs_close(&t);
  }
  lstmd_jobs_open(&t, dir);
  check_true("jobs: failed after 3 interrupted attempts", attempts_ok && t.v[0]->state == LSTMD__JOB_STATE__FAILED);
  check_true("jobs: the failed job's step is its checkpoint's (40)", t.v[0]->step == 40);
  lstmd_jobs_close(&t);

  snprintf(path, sizeof path, "%s/bad/jobs.journal", g_dir);
  char bad_dir[300];
  snprintf(bad_dir, sizeof bad_dir, "%s/bad", g_dir);
  mkdir(bad_dir, 0700);
  f = fopen(path, "wb");
  fputs("not a journal", f);
  fclose(f);
  check_true("journal: a foreign file is refused", lstmd_jobs_open(&t, bad_dir) == LSTMD_EFORMAT);
}

/* A journal damaged in the middle (a flipped byte in record 2 of 4): the records before it are
 * kept, the damaged file is kept aside (jobs.journal.damaged-*), and the next id passes the
 * run dirs of the jobs whose records were lost, so no new job writes into an old one's. */
static void test_journal_damaged_inside(void) {
  char dir[256], path[300], runs[300];
  snprintf(dir, sizeof dir, "%s/mid", g_dir);
  mkdir(dir, 0700);
  struct lstmd_jobs t;
  Lstmd__JobSpec spec = LSTMD__JOB_SPEC__INIT;
  spec.name = "m";
  size_t len;
  int opened = lstmd_jobs_open(&t, dir) == 0;
  for (int i = 0; opened && i < 4; i++)
    free(lstmd_jobs_submit(&t, &spec, NULL, NULL, 100, NULL, &len));
  if (opened) lstmd_jobs_close(&t);
  snprintf(runs, sizeof runs, "%s/runs", dir);
  mkdir(runs, 0700);
  snprintf(runs, sizeof runs, "%s/runs/job-4", dir);
  mkdir(runs, 0700); /* job 4's run dir, as the daemon made it */
  snprintf(path, sizeof path, "%s/jobs.journal", dir);
  struct stat st;
  FILE *f = fopen(path, "r+b");
  const int ok_file = f && stat(path, &st) == 0;
  /* records are about equal in size: a byte a third of the way in lies in record 2 */
  const long at = ok_file ? (long)st.st_size / 3 : 0;
  if (ok_file) {
    fseek(f, at, SEEK_SET);
    const int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
  }
  if (f) fclose(f);
  opened = ok_file && lstmd_jobs_open(&t, dir) == 0;
  char what[160];
  snprintf(what, sizeof what, "journal: damaged inside: %zu job(s) kept, next id %llu (want 1, 5)",
           opened ? t.n : 0, opened ? (unsigned long long)t.next_id : 0ULL);
  check_true(what, opened && t.n == 1 && t.next_id == 5);
  if (opened) lstmd_jobs_close(&t);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "ls %s/jobs.journal.damaged-* >/dev/null 2>&1", dir);
  check_true("journal: the damaged file is kept aside", system(cmd) == 0);
}

/* An append the disk cannot take (here a file size limit, as a full disk does it: the first
 * write is short, the next fails): the message names the reason the system gave, not "short
 * write", and the record is cut back, so the journal ends where it did. */
static void test_journal_append_fails(void) {
  char dir[256], path[300];
  snprintf(dir, sizeof dir, "%s/full", g_dir);
  mkdir(dir, 0700);
  snprintf(path, sizeof path, "%s/jobs.journal", dir);
  struct lstmd_jobs t;
  Lstmd__JobSpec spec = LSTMD__JOB_SPEC__INIT;
  spec.name = "a job whose record does not fit in the few bytes the file may still grow by";
  size_t len;
  if (lstmd_jobs_open(&t, dir) != 0) {
    check_true("journal: open for the full-disk case", 0);
    return;
  }
  free(lstmd_jobs_submit(&t, &spec, NULL, NULL, 100, NULL, &len));
  struct stat before, after;
  struct rlimit old, cap;
  const int ok = stat(path, &before) == 0 && getrlimit(RLIMIT_FSIZE, &old) == 0;
  cap = old;
  cap.rlim_cur = ok ? (rlim_t)before.st_size + 16 : 0;
  signal(SIGXFSZ, SIG_IGN); /* the write fails with EFBIG instead of killing the process */
  char msg[512] = "";
  int rc = 0;
  if (ok && setrlimit(RLIMIT_FSIZE, &cap) == 0) {
    lstmd_errors_capture(msg, sizeof msg);
    rc = lstmd_journal_append(&t.journal, t.v[0], 0);
    lstmd_errors_capture(NULL, 0);
    setrlimit(RLIMIT_FSIZE, &old);
  }
  signal(SIGXFSZ, SIG_DFL);
  char what[700];
  snprintf(what, sizeof what, "journal: a full disk is named (%s): rc %d, message: %s",
           strerror(EFBIG), rc, msg);
  check_true(what, rc == LSTMD_EIO && strstr(msg, strerror(EFBIG)) && !strstr(msg, "short write"));
  check_true("journal: a record the disk could not take is cut back",
             stat(path, &after) == 0 && after.st_size == before.st_size);

  /* A job that ends while the disk is full: its end is kept, and written when the disk takes
   * it (here: a snapshot, as the scheduler's round does it, not sooner than 2 s after the
   * failure), so a restarted daemon does not run an ended job again. */
  const int ranks[1] = {0};
  Lstmd__Job *run = lstmd_jobs_start(&t, 1, ranks, 1);
  int kept = 0;
  if (run && stat(path, &before) == 0) {
    cap.rlim_cur = (rlim_t)before.st_size + 16;
    signal(SIGXFSZ, SIG_IGN);
    lstmd_errors_capture(msg, sizeof msg);
    if (setrlimit(RLIMIT_FSIZE, &cap) == 0) {
      lstmd_jobs_finish(&t, 1, LSTMD__JOB_STATE__SUCCEEDED, 10, "done", 1000, 0);
      kept = t.n_unjournaled == 1;
      setrlimit(RLIMIT_FSIZE, &old);
    }
    lstmd_errors_capture(NULL, 0);
    signal(SIGXFSZ, SIG_DFL);
    struct lstmd_jobs_entry *e = NULL;
    size_t ne = 0;
    int draining = 0;
    lstmd_jobs_snapshot(&t, &e, &ne, &draining); /* within 2 s of the failure: not retried */
    free(e);
    kept = kept && t.n_unjournaled == 1;
    t.journal_retry_ms = 0; /* as if 2 s had passed */
    lstmd_jobs_snapshot(&t, &e, &ne, &draining);
    free(e);
  }
  if (run) lstmd__job__free_unpacked(run, NULL);
  const size_t waiting = t.n_unjournaled;
  lstmd_jobs_close(&t);
  const int reopened = lstmd_jobs_open(&t, dir) == 0;
  snprintf(what, sizeof what, "journal: an end the full disk could not take is kept (%d) and "
           "written later: after a restart job 1 is %s (want SUCCEEDED), %zu waiting", kept,
           reopened && t.n ? lstmd_job_state_name(t.v[0]->state) : "?", waiting);
  check_true(what, kept && waiting == 0 && reopened && t.n == 1 &&
                       t.v[0]->state == LSTMD__JOB_STATE__SUCCEEDED);
  if (reopened) lstmd_jobs_close(&t);
}

static void test_paths_and_tokens(void) {
  char root[256], out[4096], err[512], p[512];
  snprintf(root, sizeof root, "%s/root", g_dir);
  mkdir(root, 0700);
  snprintf(p, sizeof p, "%s/data", root);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/escape", root);
  if (symlink("/etc", p) != 0) perror("symlink");
  check_true("path: relative inside", lstmd_path_inside(root, "data", 1, out, sizeof out, err, sizeof err) == 0 &&
                                          !strncmp(out, root, strlen(root)));
  check_true("path: .. out of the root", lstmd_path_inside(root, "data/../../x", 0, out, sizeof out, err, sizeof err) != 0);
  check_true("path: a symlink out of the root", lstmd_path_inside(root, "escape", 1, out, sizeof out, err, sizeof err) != 0);
  check_true("path: new dir under a symlink out", lstmd_path_inside(root, "escape/new/run", 0, out, sizeof out, err, sizeof err) != 0);
  check_true("path: absolute elsewhere", lstmd_path_inside(root, "/tmp", 1, out, sizeof out, err, sizeof err) != 0);
  check_true("path: new run dir inside", lstmd_path_inside(root, "runs/a/b", 0, out, sizeof out, err, sizeof err) == 0);
  char again[4096];
  check_true("path: a new folder spelled runs//a/b/ resolves as runs/a/b",
             lstmd_path_inside(root, "runs//a/b/", 0, again, sizeof again, err, sizeof err) == 0 &&
                 !strcmp(again, out));
  check_true("path: missing dataset", lstmd_path_inside(root, "nope", 1, out, sizeof out, err, sizeof err) != 0);
  check_true("token: equal", lstmd_token_equal("0123456789abcdef", "0123456789abcdef"));
  check_true("token: prefix, longer, empty differ",
             !lstmd_token_equal("0123456789abcdef", "0123456789abcde") &&
                 !lstmd_token_equal("0123456789abcdef", "0123456789abcdefX") &&
                 !lstmd_token_equal("0123456789abcdef", ""));
}

/* A job list of n jobs whose reasons are reason_len bytes, packed; unpacked into the arena it
 * must re-pack to the same bytes as unpacked with malloc. */
static int arena_round_trip(struct lstmd_arena *a, size_t n, size_t reason_len) {
  Lstmd__Job *jobs = calloc(n, sizeof *jobs), **ptrs = calloc(n, sizeof *ptrs);
  char *reason = malloc(reason_len + 1), names[64];
  memset(reason, 'r', reason_len);
  reason[reason_len] = '\0';
  Lstmd__Setting set = LSTMD__SETTING__INIT, *sets[] = {&set, &set};
  set.key = "train.steps";
  set.value = "100";
  for (size_t i = 0; i < n; i++) {
    lstmd__job__init(&jobs[i]);
    jobs[i].id = i + 1;
    snprintf(names, sizeof names, "job-%zu", i);
    jobs[i].name = strdup(names);
    jobs[i].reason = reason;
    jobs[i].settings = sets;
    jobs[i].n_settings = i % 3;
    jobs[i].loss = 1.0 / (double)(i + 1);
    ptrs[i] = &jobs[i];
  }
  Lstmd__JobList list = LSTMD__JOB_LIST__INIT;
  list.jobs = ptrs;
  list.n_jobs = n;
  Lstmd__Response resp = LSTMD__RESPONSE__INIT;
  resp.kind_case = LSTMD__RESPONSE__KIND_JOBS;
  resp.jobs = &list;
  size_t len = 0, len_a = 0, len_m = 0;
  uint8_t *f = lstmd_frame_pack(&resp.base, &len);
  lstmd_arena_reset(a);
  Lstmd__Response *in_arena = lstmd__response__unpack(lstmd_arena_allocator(a), len - 4, f + 4);
  Lstmd__Response *in_heap = lstmd__response__unpack(NULL, len - 4, f + 4);
  uint8_t *fa = in_arena ? lstmd_frame_pack(&in_arena->base, &len_a) : NULL;
  uint8_t *fm = in_heap ? lstmd_frame_pack(&in_heap->base, &len_m) : NULL;
  int ok = fa && fm && len_a == len && len_m == len && !memcmp(fa, f, len) && !memcmp(fm, f, len) &&
           in_arena->jobs->n_jobs == n && ((uintptr_t)in_arena->jobs->jobs % 16) == 0;
  for (size_t i = 0; ok && i < n; i++)
    ok = ((uintptr_t)in_arena->jobs->jobs[i] % 16) == 0 && in_arena->jobs->jobs[i]->loss == jobs[i].loss;
  if (in_heap) lstmd__response__free_unpacked(in_heap, NULL);
  for (size_t i = 0; i < n; i++) free(jobs[i].name);
  free(fa);
  free(fm);
  free(f);
  free(reason);
  free(ptrs);
  free(jobs);
  return ok;
}

static void test_arena(void) {
  struct lstmd_arena a;
  lstmd_arena_init(&a);
  check_true("arena: a small list unpacks as with malloc", arena_round_trip(&a, 5, 40));
  check_true("arena: thousands of jobs (many blocks)", arena_round_trip(&a, 3000, 100));
  check_true("arena: a piece larger than a block", arena_round_trip(&a, 2, 300000));
  check_true("arena: reused after big messages", arena_round_trip(&a, 5, 40));
  lstmd_arena_reset(&a);
  check_true("arena: a reset keeps at most one ordinary block, empty",
             !a.blocks || (a.blocks->next == NULL && a.blocks->used == 0));
  lstmd_arena_free(&a);
  check_true("arena: freed", a.blocks == NULL);
  struct lstmd_arena zero = {0};
  check_true("arena: a zero-initialised arena works", arena_round_trip(&zero, 50, 10));
  lstmd_arena_free(&zero);
}

int main(void) {
  if (!mkdtemp(g_dir)) return 1;
  test_arena();
  test_frames();
  test_requests();
  test_journal_and_jobs();
  test_journal_damaged_inside();
  test_journal_append_fails();
  test_paths_and_tokens();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) return 1;
  printf(g_failures ? "%d check(s) failed\n" : "all checks passed\n", g_failures);
  return g_failures != 0;
}
