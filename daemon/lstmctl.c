/* lstmctl.c — the command-line client of `lstmd serve`: submit, status, list, cancel, watch,
 * shutdown, top (running jobs and the world's ranks) and logs (a job's train.log). Human-readable output by default, one JSON document per answer with --json.
 *
 * Exit status: 0 success (watch: the job SUCCEEDED); 1 the watched job FAILED or was CANCELLED,
 * or the daemon failed internally; 2 bad usage or a request the daemon refused (invalid job
 * settings, a malformed request, shutting down); 3 the daemon cannot be reached or the
 * connection broke; 4 no such job; 5 wrong or missing token. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "ctl_client.h"
#include "ctl_print.h"
#include "frame.h"
#include "kernels/status.h"

enum { kExitOk = 0, kExitJob = 1, kExitUsage = 2, kExitUnreachable = 3, kExitNotFound = 4,
       kExitAuth = 5 };
enum { kReplyTimeoutMs = 30000 };

static int g_json;

static void usage(FILE *out) {
  fprintf(out,
          "usage: lstmctl [--socket PATH | --tcp HOST:PORT --token-file F] [--json] COMMAND [ARGS]\n"
          "  submit --config JOB.ini [--set section.key=value ...] [--name NAME] [--no-preempt]\n"
          "         [--resume | --continue ID]\n"
          "                       queue a job; prints its id on the last line (resources.ranks,\n"
          "                       .priority, .time_limit_s pick its ranks, order and limit);\n"
          "                       --resume continues the run in its train.run_dir, --continue ID\n"
          "                       the run of ended job ID (its settings, then these; its run dir)\n"
          "  status ID            one job: ranks, priority, place in line and why it waits\n"
          "  list                 all jobs, oldest first\n"
          "  top [--once]         running jobs and the world's busy/free ranks (refreshing on a\n"
          "                       terminal; one snapshot with --once or --json)\n"
          "  logs ID [--follow]   the job's progress and messages (its run dir's train.log, as\n"
          "                       it is: no --json)\n"
          "  cancel ID            cancel (a running job stops within a step, with a checkpoint)\n"
          "  watch ID             follow a job until it ends; exit 0 only if it SUCCEEDED\n"
          "  shutdown             drain the daemon: checkpoint the running jobs and stop\n"
          "--socket, --tcp, --token-file and --json may come before or after COMMAND; --json\n"
          "prints one JSON document per answer. The socket defaults to $LSTMD_SOCKET, the token\n"
          "file to $LSTMD_TOKEN_FILE (the token is its first line). Paths in a job (data.path,\n"
          "train.run_dir) are resolved by the daemon, relative to its --data-root.\n"
          "Exit status: 0 ok; 1 job failed/cancelled (watch); 2 usage or refused; 3 daemon\n"
          "unreachable; 4 no such job; 5 wrong token.\n");
}

/* The daemon's refusal: printed, and the exit status it maps to. --json names the protocol's
 * code ("NOT_FOUND") and the exit status, so that the two numbers are never confused. */
static int error_exit(const Lstmd__Error *e) {
  int rc;
  switch (e->code) {
    case LSTMD__ERROR_CODE__NOT_FOUND: rc = kExitNotFound; break;
    case LSTMD__ERROR_CODE__UNAUTHENTICATED: rc = kExitAuth; break;
    case LSTMD__ERROR_CODE__INTERNAL: rc = kExitJob; break;
    default: rc = kExitUsage;
  }
  const ProtobufCEnumValue *code =
      protobuf_c_enum_descriptor_get_value(&lstmd__error_code__descriptor, (int)e->code);
  if (g_json)
    lstmctl_print_json(json_pack("{s:s, s:s, s:i}", "error", e->message, "code",
                                 code ? code->name : "UNKNOWN", "exit", rc));
  else fprintf(stderr, "lstmctl: %s\n", e->message);
  return rc;
}

/* ---- requests ---- */

struct settings_list {
  Lstmd__Setting **v;
  size_t n;
};

static int add_setting(struct settings_list *l, const char *key, const char *value) {
  Lstmd__Setting **grown = realloc(l->v, (l->n + 1) * sizeof *grown);
  Lstmd__Setting *s = malloc(sizeof *s);
  if (!grown || !s) {
    free(s);
    return -1;
  }
  l->v = grown;
  lstmd__setting__init(s);
  s->key = strdup(key);
  s->value = strdup(value);
  l->v[l->n++] = s;
  return s->key && s->value ? 0 : -1;
}

/* The job file's pairs, each checked as `lstmd train` checks it (the daemon checks them again),
 * so that a bad key or value is named with its FILE:LINE, as lstmd train names it. */
struct ini_read {
  struct settings_list *settings;
  struct lstmd_train_config cfg; /* scratch: the values applied, to check them */
};

static int on_ini_pair(void *user, const char *dotted, const char *value, char *err, size_t n) {
  struct ini_read *r = user;
  if (lstmd_config_set_key(&r->cfg, dotted, value, err, n)) return -1;
  if (add_setting(r->settings, dotted, value)) {
    snprintf(err, n, "out of memory");
    return -1;
  }
  return 0;
}

/* One request, one response (watch reads more itself). */
static Lstmd__Response *roundtrip(struct lstmd_ctl *c, Lstmd__Request *req, int *exit_code) {
  char err[512];
  Lstmd__Response *resp = NULL;
  if (lstmd_ctl_send(c, req, err, sizeof err) == 0) {
    resp = lstmd_ctl_recv(c, kReplyTimeoutMs, err, sizeof err);
  } else { /* a daemon that refused the connection may have said why before it closed it */
    char unused[512];
    resp = lstmd_ctl_recv(c, 1000, unused, sizeof unused);
    if (resp && resp->kind_case != LSTMD__RESPONSE__KIND_ERROR) {
      lstmd__response__free_unpacked(resp, NULL);
      resp = NULL;
    }
  }
  if (!resp) {
    fprintf(stderr, "lstmctl: %s\n", err);
    *exit_code = kExitUnreachable;
    return NULL;
  }
  if (resp->kind_case == LSTMD__RESPONSE__KIND_ERROR) {
    *exit_code = error_exit(resp->error);
    return NULL;
  }
  *exit_code = kExitOk;
  return resp;
}

/* A job id as typed: decimal digits only (strtoull alone took ' 1' and '+1', and wrapped
 * 99999999999999999999 to 18446744073709551615, another job's number), not 0. */
static int job_id_of(const char *text, uint64_t *id) {
  if (!text || !isdigit((unsigned char)text[0])) return -1;
  char *end;
  errno = 0;
  const unsigned long long v = strtoull(text, &end, 10);
  if (errno || *end || v == 0) return -1;
  *id = v;
  return 0;
}

static int parse_id(const char *cmd, const char *text, uint64_t *id) {
  uint64_t v = 0;
  if (job_id_of(text, &v)) {
    if (text) fprintf(stderr, "lstmctl: %s: expected a job id (a positive number), got '%s'\n", cmd, text);
    else fprintf(stderr, "lstmctl: %s: which job? (lstmctl %s ID)\n", cmd, cmd);
    return -1;
  }
  *id = v;
  return 0;
}

static void settings_free(struct settings_list *l) {
  for (size_t i = 0; i < l->n; i++) {
    free(l->v[i]->key);
    free(l->v[i]->value);
    free(l->v[i]);
  }
  free(l->v);
  *l = (struct settings_list){0};
}

/* What the command line asks for, checked before the daemon is contacted: a usage error needs
 * no daemon, and a bad config file is reported without one. */
struct ctl_args {
  const char *cmd;
  uint64_t id;         /* status, cancel, watch, logs */
  int once, follow;    /* top, logs */
  const char *name;    /* submit */
  int resume;          /* submit --resume */
  uint64_t continues;  /* submit --continue ID */
  struct settings_list settings; /* submit: the config file's, then --set's, then --no-preempt */
};

/* submit's options that take a value (the next argument, which main must not read as one of
 * its own options). */
static int submit_takes_value(const char *arg) {
  return !strcmp(arg, "--config") || !strcmp(arg, "--name") || !strcmp(arg, "--set") ||
         !strcmp(arg, "--continue");
}

/* submit's options into a->settings (the file first, then --set, as with lstmd train).
 * Returns kExitOk or the exit status after a message. */
static int parse_submit(int argc, char **argv, struct ctl_args *a) {
  const char *config = NULL;
  int no_preempt = 0;
  struct settings_list sets = {0};
  int rc = kExitOk;
  a->name = "";
  for (int i = 0; i < argc && !rc; i++) {
    const char *arg = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(arg, "--config") && v && config) { /* the second file replaced the first */
      fprintf(stderr, "lstmctl: submit: --config given twice ('%s', then '%s'); it takes one "
              "(put the settings in one file, or add them with --set)\n", config, v);
      rc = kExitUsage;
    } else if (!strcmp(arg, "--config") && v) config = argv[++i];
    else if (!strcmp(arg, "--name") && v) a->name = argv[++i];
    else if (!strcmp(arg, "--no-preempt")) no_preempt = 1;
    else if (!strcmp(arg, "--resume")) a->resume = 1;
    else if (!strcmp(arg, "--continue") && v) {
      uint64_t id = 0;
      if (job_id_of(v, &id)) {
        fprintf(stderr, "lstmctl: submit --continue %s: expected a job id\n", v);
        rc = kExitUsage;
      }
      a->continues = id;
      i++;
    }
    else if (!strcmp(arg, "--set") && v) {
      const char *eq = strchr(v, '=');
      if (!eq || eq == v) {
        fprintf(stderr, "lstmctl: --set %s: expected section.key=value\n", v);
        rc = kExitUsage;
      } else {
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - v), v);
        if (add_setting(&sets, key, eq + 1)) rc = kExitJob;
      }
      i++;
    } else {
      fprintf(stderr, "lstmctl: submit: unexpected '%s'%s\n", arg,
              v || strncmp(arg, "--", 2) ? "" : " (it needs a value)");
      rc = kExitUsage;
    }
  }
  if (!rc && config) {
    struct ini_read *r = malloc(sizeof *r);
    if (!r) rc = kExitJob;
    else {
      r->settings = &a->settings;
      lstmd_config_defaults(&r->cfg);
      if (lstmd_config_read_ini(config, on_ini_pair, r) != 0) rc = kExitUsage;
      free(r);
    }
  }
  for (size_t i = 0; i < sets.n && !rc; i++)
    if (add_setting(&a->settings, sets.v[i]->key, sets.v[i]->value)) rc = kExitJob;
  if (!rc && no_preempt && add_setting(&a->settings, "resources.preemptible", "0")) rc = kExitJob;
  if (!rc && !config && !sets.n && !a->continues) {
    fprintf(stderr, "lstmctl: submit needs --config JOB.ini and/or --set options (or --continue "
            "ID)\n");
    rc = kExitUsage;
  }
  settings_free(&sets);
  return rc;
}

/* A GetJob, CancelJob (by id) or ListJobs round trip; the response belongs to c (valid until the
 * next one). */
static Lstmd__Response *ask(struct lstmd_ctl *c, int kind, uint64_t id, int *rc) {
  Lstmd__Request req = LSTMD__REQUEST__INIT;
  Lstmd__GetJob get = LSTMD__GET_JOB__INIT;
  Lstmd__CancelJob cancel = LSTMD__CANCEL_JOB__INIT;
  Lstmd__ListJobs list = LSTMD__LIST_JOBS__INIT;
  if (kind == LSTMD__REQUEST__KIND_GET) {
    get.id = id;
    req.get = &get;
  } else if (kind == LSTMD__REQUEST__KIND_CANCEL) {
    cancel.id = id;
    req.cancel = &cancel;
  } else {
    req.list = &list;
  }
  req.kind_case = kind;
  return roundtrip(c, &req, rc);
}

/* The job's settings that do nothing as configured (config.h, lstmd_config_inert_keys), as
 * `lstmd train` notes them; the daemon accepted them. */
static void note_inert_settings(const Lstmd__Job *job) {
  struct lstmd_train_config *cfg = malloc(sizeof *cfg);
  if (!cfg) return;
  lstmd_config_defaults(cfg);
  char err[512], inert[600];
  for (size_t i = 0; i < job->n_settings; i++)
    lstmd_config_set_key(cfg, job->settings[i]->key, job->settings[i]->value, err, sizeof err);
  if (lstmd_config_inert_keys(cfg, inert, sizeof inert))
    fprintf(stderr, "lstmctl: note: job %llu: %s\n", (unsigned long long)job->id, inert);
  free(cfg);
}

static int cmd_submit(struct lstmd_ctl *c, const struct ctl_args *a) {
  Lstmd__JobSpec spec = LSTMD__JOB_SPEC__INIT;
  spec.name = (char *)a->name;
  spec.resume = a->resume;
  spec.continues = a->continues;
  spec.n_settings = a->settings.n;
  spec.settings = a->settings.v;
  Lstmd__SubmitJob submit = LSTMD__SUBMIT_JOB__INIT;
  submit.spec = &spec;
  Lstmd__Request req = LSTMD__REQUEST__INIT;
  req.kind_case = LSTMD__REQUEST__KIND_SUBMIT;
  req.submit = &submit;
  int rc;
  Lstmd__Response *resp = roundtrip(c, &req, &rc);
  if (resp && resp->kind_case == LSTMD__RESPONSE__KIND_JOB &&
      ((a->resume && !resp->job->resume) || (a->continues && !resp->job->continues))) {
    /* A daemon older than --resume/--continue drops the field it does not know (protobuf) and
     * queues a fresh job, which would train over the run it was meant to continue. */
    const uint64_t id = resp->job->id;
    int crc;
    ask(c, LSTMD__REQUEST__KIND_CANCEL, id, &crc);
    fprintf(stderr, "lstmctl: the daemon does not know %s (it is older than this lstmctl) and "
            "queued job %llu as a fresh run; cancelled it%s\n",
            a->continues ? "--continue" : "--resume", (unsigned long long)id,
            crc ? " -- check it with lstmctl status" : "");
    return kExitUsage;
  }
  if (resp && resp->kind_case == LSTMD__RESPONSE__KIND_JOB) {
    if (g_json) lstmctl_print_json(lstmctl_job_json(resp->job));
    else printf("submitted job %llu (%s)\n%llu\n", (unsigned long long)resp->job->id,
                lstmd_job_state_name(resp->job->state), (unsigned long long)resp->job->id);
    note_inert_settings(resp->job);
  }
  return rc;
}

static int cmd_simple(struct lstmd_ctl *c, const char *cmd, uint64_t id) {
  Lstmd__Request req = LSTMD__REQUEST__INIT;
  Lstmd__GetJob get = LSTMD__GET_JOB__INIT;
  Lstmd__CancelJob cancel = LSTMD__CANCEL_JOB__INIT;
  Lstmd__ListJobs list = LSTMD__LIST_JOBS__INIT;
  Lstmd__Shutdown shutdown = LSTMD__SHUTDOWN__INIT;
  if (!strcmp(cmd, "status")) {
    get.id = id;
    req.kind_case = LSTMD__REQUEST__KIND_GET;
    req.get = &get;
  } else if (!strcmp(cmd, "cancel")) {
    cancel.id = id;
    req.kind_case = LSTMD__REQUEST__KIND_CANCEL;
    req.cancel = &cancel;
  } else if (!strcmp(cmd, "list")) {
    req.kind_case = LSTMD__REQUEST__KIND_LIST;
    req.list = &list;
  } else {
    req.kind_case = LSTMD__REQUEST__KIND_SHUTDOWN;
    req.shutdown = &shutdown;
  }
  int rc;
  Lstmd__Response *resp = roundtrip(c, &req, &rc);
  if (!resp) return rc;
  if (resp->kind_case == LSTMD__RESPONSE__KIND_JOB) {
    lstmctl_print_job(resp->job, g_json);
    const int st = resp->job->state;
    if (req.kind_case == LSTMD__REQUEST__KIND_CANCEL &&
        (st == LSTMD__JOB_STATE__SUCCEEDED || st == LSTMD__JOB_STATE__FAILED)) {
      fprintf(stderr, "lstmctl: job %llu had already ended (%s): nothing to cancel\n",
              (unsigned long long)resp->job->id, lstmd_job_state_name(st));
      rc = kExitUsage;
    }
  } else if (resp->kind_case == LSTMD__RESPONSE__KIND_JOBS) {
    if (g_json) {
      json_t *a = json_array();
      for (size_t i = 0; i < resp->jobs->n_jobs; i++)
        json_array_append_new(a, lstmctl_job_json(resp->jobs->jobs[i]));
      lstmctl_print_json(a);
    } else {
      printf("%-5s %-10s %-9s %5s %4s %4s %15s\n", "ID", "STATE", "RANKS", "NEED", "PRI", "POS",
             "STEP");
      for (size_t i = 0; i < resp->jobs->n_jobs; i++) lstmctl_print_job_line(resp->jobs->jobs[i]);
    }
  } else if (resp->kind_case == LSTMD__RESPONSE__KIND_SHUTDOWN) {
    /* every running job is checkpointed: name them all (an older daemon sends only the oldest) */
    const Lstmd__ShutdownAck *ack = resp->shutdown;
    const uint64_t *ids = ack->n_running_jobs ? ack->running_jobs : &ack->running_job;
    const size_t n = ack->n_running_jobs ? ack->n_running_jobs : ack->running_job != 0;
    if (g_json) {
      json_t *all = json_array();
      for (size_t i = 0; i < n; i++) json_array_append_new(all, json_integer((json_int_t)ids[i]));
      lstmctl_print_json(json_pack("{s:b, s:I, s:o}", "draining", 1, "running_job",
                                   (json_int_t)ack->running_job, "running_jobs", all));
    } else if (n) {
      printf("daemon draining: checkpointing job%s", n == 1 ? "" : "s");
      for (size_t i = 0; i < n; i++) printf("%s %llu", i ? "," : "", (unsigned long long)ids[i]);
      printf(", then stopping\n");
    } else {
      printf("daemon draining: no job running; stopping\n");
    }
  } else {
    fprintf(stderr, "lstmctl: unexpected answer from the daemon\n");
    rc = kExitUnreachable;
  }
  return rc;
}

static int cmd_watch(struct lstmd_ctl *c, uint64_t id) {
  Lstmd__WatchJob watch = LSTMD__WATCH_JOB__INIT;
  watch.id = id;
  Lstmd__Request req = LSTMD__REQUEST__INIT;
  req.kind_case = LSTMD__REQUEST__KIND_WATCH;
  req.watch = &watch;
  int rc;
  Lstmd__Response *resp = roundtrip(c, &req, &rc);
  char err[512];
  while (resp) {
    if (resp->kind_case != LSTMD__RESPONSE__KIND_EVENT) {
      return resp->kind_case == LSTMD__RESPONSE__KIND_ERROR ? error_exit(resp->error)
                                                            : kExitUnreachable;
    }
    const Lstmd__Event *ev = resp->event;
    const Lstmd__Job *job = ev->kind_case == LSTMD__EVENT__KIND_RESULT ? ev->result
                            : ev->kind_case == LSTMD__EVENT__KIND_STATE ? ev->state : NULL;
    if (g_json) {
      json_t *o = json_pack("{s:I}", "job_id", (json_int_t)ev->job_id);
      if (job)
        json_object_set_new(o, ev->kind_case == LSTMD__EVENT__KIND_RESULT ? "result" : "state",
                            lstmctl_job_json(job));
      else if (ev->metrics) {
        json_t *mo = json_pack("{s:I, s:I, s:b, s:f, s:f, s:f, s:f}",
          "step", (json_int_t)ev->metrics->step, "total_steps", (json_int_t)ev->metrics->total_steps,
          "is_eval", ev->metrics->is_eval, "loss", isfinite(ev->metrics->loss) ? ev->metrics->loss : 0.0,
          "val_loss", isfinite(ev->metrics->val_loss) ? ev->metrics->val_loss : 0.0,
          "tokens_per_s", ev->metrics->tokens_per_s, "lr", ev->metrics->lr);
        json_object_set_new(mo, "val_accuracy", ev->metrics->has_val_accuracy
                                                    ? json_real(ev->metrics->val_accuracy)
                                                    : json_null());
        json_object_set_new(o, "metrics", mo);
      }
      lstmctl_print_json(o);
    } else if (job) {
      printf("job %llu: %s%s%s\n", (unsigned long long)job->id, lstmd_job_state_name(job->state),
             job->reason[0] ? ": " : "", job->reason);
      fflush(stdout);
    } else if (ev->metrics) {
      lstmctl_print_metrics(ev->job_id, ev->metrics);
    }
    if (ev->kind_case == LSTMD__EVENT__KIND_RESULT) {
      return job->state == LSTMD__JOB_STATE__SUCCEEDED ? kExitOk : kExitJob;
    }
    resp = lstmd_ctl_recv(c, -1, err, sizeof err);
  }
  if (rc == kExitOk) { /* the stream broke before the job ended */
    fprintf(stderr, "lstmctl: %s (the job has not ended; watch it again when the daemon is back)\n", err);
    rc = kExitUnreachable;
  }
  return rc;
}

/* ---- top and logs ---- */

static int cmd_top(struct lstmd_ctl *c, int once) {
  once = once || g_json || !isatty(STDOUT_FILENO);
  for (;;) {
    int rc;
    Lstmd__Response *resp = ask(c, LSTMD__REQUEST__KIND_LIST, 0, &rc);
    if (!resp) return rc;
    if (!once) printf("\033[H\033[2J");
    lstmctl_print_top(resp->jobs, g_json);
    if (once) return kExitOk;
    sleep(1);
  }
}

/* Why an ended job failed or was cancelled, as the daemon recorded it. */
static const char *reason_of(const Lstmd__Job *job) {
  return job->reason && job->reason[0] ? job->reason : "(no reason given)";
}

/* Prints the job's train.log; with --follow keeps printing what is appended until the job ends. */
static int cmd_logs(struct lstmd_ctl *c, uint64_t id, int follow) {
  int rc;
  Lstmd__Response *resp = ask(c, LSTMD__REQUEST__KIND_GET, id, &rc);
  if (!resp) return rc;
  char path[1300];
  snprintf(path, sizeof path, "%s/train.log", resp->job->run_dir);
  int state = resp->job->state;
  FILE *f = NULL;
  char buf[4096];
  int lost = 0; /* the daemon stopped answering while we followed: its status, not 0 */
  for (int polls = 0;; polls++) {
    if (!f) f = fopen(path, "r");
    size_t n;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
    fflush(stdout);
    if (f) clearerr(f);
    const int ended = state != LSTMD__JOB_STATE__QUEUED && state != LSTMD__JOB_STATE__RUNNING;
    if (!follow || ended) break;
    usleep(200000);
    if (polls % 5 == 4) { /* once a second: has it ended? (then one last read) */
      resp = ask(c, LSTMD__REQUEST__KIND_GET, id, &rc);
      if (!resp) {
        lost = rc;
        break;
      }
      state = resp->job->state;
    }
  }
  if (lost) /* after the socket's error ("sending failed: Broken pipe"), what it means */
    fprintf(stderr, "lstmctl: the daemon went away while following job %llu, which had not "
            "ended: `lstmctl logs %llu --follow` again when the daemon is back\n",
            (unsigned long long)id, (unsigned long long)id);
  if (!f) {
    const int err = errno;
    if (!follow && (state == LSTMD__JOB_STATE__FAILED || state == LSTMD__JOB_STATE__CANCELLED))
      /* it ended before its run opened the log (a refused teacher, a missing dataset) */
      fprintf(stderr, "lstmctl: job %llu %s before it wrote %s: %s\n", (unsigned long long)id,
              lstmd_job_state_name(state), path, reason_of(resp->job));
    else if (!follow && state == LSTMD__JOB_STATE__QUEUED && !resp->job->attempts)
      /* lstmctl knows it has not (it asked "has job N started?") */
      fprintf(stderr, "lstmctl: job %llu has not started yet (QUEUED%s%s): no %s until it runs; "
              "`lstmctl logs %llu --follow` waits for it\n", (unsigned long long)id,
              resp->job->waiting && resp->job->waiting[0] ? ": " : "",
              resp->job->waiting ? resp->job->waiting : "", path, (unsigned long long)id);
    else if (!follow)
      fprintf(stderr, "lstmctl: %s: %s (has job %llu started?)\n", path, strerror(err),
              (unsigned long long)id);
    return lost ? lost : follow ? kExitOk : kExitJob;
  }
  /* A job that continues another (or resumes a run) shares its run dir's train.log: one that
   * failed before its own lines began (a refused resume) left only the earlier run's there,
   * ending in success. A log last written before this attempt started is that; the reason is
   * said after it. (Not the reason's text looked up in the log: errors go to stderr, not there.) */
  struct stat st;
  const int64_t started = lost ? 0 : resp->job->started_ms;
  const int before = state == LSTMD__JOB_STATE__FAILED && started > 0 &&
                     fstat(fileno(f), &st) == 0 &&
                     (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000 < started;
  fclose(f);
  if (before)
    fprintf(stderr, "lstmctl: job %llu FAILED before it wrote to %s (the lines above are an "
            "earlier run's in the same run dir): %s\n", (unsigned long long)id, path,
            reason_of(resp->job));
  return lost ? lost : before ? kExitJob : kExitOk;
}

/* The arguments of a command other than submit: the job id of status, cancel, watch and logs,
 * --once (top), --follow/-f (logs); anything else is refused. Returns kExitOk or kExitUsage after
 * a message. */
static int parse_plain(int argc, char **argv, struct ctl_args *a) {
  const char *cmd = a->cmd, *id_text = NULL;
  const int wants_id = !strcmp(cmd, "status") || !strcmp(cmd, "cancel") || !strcmp(cmd, "watch") ||
                       !strcmp(cmd, "logs");
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(cmd, "top") && !strcmp(arg, "--once")) a->once = 1;
    else if (!strcmp(cmd, "logs") && (!strcmp(arg, "--follow") || !strcmp(arg, "-f"))) a->follow = 1;
    else if (wants_id && !id_text && arg[0] != '-') id_text = arg;
    else {
      fprintf(stderr, "lstmctl: %s: unexpected '%s' (lstmctl --help)\n", cmd, arg);
      return kExitUsage;
    }
  }
  if (wants_id && parse_id(cmd, id_text, &a->id)) return kExitUsage;
  if (!strcmp(cmd, "logs") && g_json) {
    fprintf(stderr, "lstmctl: logs prints the job's train.log as it is; --json does not apply\n");
    return kExitUsage;
  }
  return kExitOk;
}

/* 1. The global options (--socket, --tcp, --token-file, --json, --help) are taken wherever they
 *    stand, before or after the command; submit's --config, --name and --set values are skipped
 *    so that a value is never read as an option.
 * 2. The command's own arguments are checked, and submit's config file read, before the daemon
 *    is contacted: usage errors exit 2 without one.
 * 3. Then one connection, one command. */
int main(int argc, char **argv) {
  lstmd_set_program_name("lstmctl"); /* the shared config reader's messages */
  const char *socket_path = getenv("LSTMD_SOCKET"), *tcp = NULL, *token_file = getenv("LSTMD_TOKEN_FILE");
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  if (!rest) return kExitJob;
  int n_rest = 0, socket_given = 0;
  const char *cmd = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) g_json = 1;
    else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      free(rest);
      return 0;
    } else if (!strcmp(a, "--socket") || !strcmp(a, "--tcp") || !strcmp(a, "--token-file")) {
      if (!v) {
        fprintf(stderr, "lstmctl: option '%s' needs a value\n", a);
        free(rest);
        return kExitUsage;
      }
      *(!strcmp(a, "--socket") ? &socket_path : !strcmp(a, "--tcp") ? &tcp : &token_file) = v;
      socket_given |= !strcmp(a, "--socket");
      i++;
    } else if (!cmd && a[0] == '-') {
      fprintf(stderr, "lstmctl: unknown option '%s'\n", a);
      usage(stderr);
      free(rest);
      return kExitUsage;
    } else if (!cmd) {
      cmd = a;
    } else {
      rest[n_rest++] = argv[i];
      if (!strcmp(cmd, "submit") && v && submit_takes_value(a)) rest[n_rest++] = argv[++i];
    }
  }
  if (!cmd) {
    usage(stderr);
    free(rest);
    return kExitUsage;
  }
  static const char *const kCommands[] = {"submit", "status", "list", "cancel", "watch", "shutdown",
                                          "top", "logs"};
  int known = 0;
  for (size_t k = 0; k < sizeof kCommands / sizeof *kCommands; k++) known |= !strcmp(cmd, kCommands[k]);
  if (!known) {
    fprintf(stderr, "lstmctl: unknown command '%s'\n", cmd);
    usage(stderr);
    free(rest);
    return kExitUsage;
  }
  struct ctl_args args = {.cmd = cmd};
  int rc = !strcmp(cmd, "submit") ? parse_submit(n_rest, rest, &args)
                                  : parse_plain(n_rest, rest, &args);
  free(rest);
  if (!rc && tcp && socket_given) { /* two daemons named: --tcp won, silently (LSTMD_SOCKET may stay) */
    fprintf(stderr, "lstmctl: --socket %s and --tcp %s name two daemons; give one\n", socket_path, tcp);
    rc = kExitUsage;
  }
  if (!rc && !tcp && !socket_path) {
    fprintf(stderr, "lstmctl: no daemon address: give --socket PATH (or set LSTMD_SOCKET), or --tcp\n");
    rc = kExitUsage;
  }
  char token[300] = "", err[512];
  if (!rc && tcp) {
    FILE *f = token_file ? fopen(token_file, "r") : NULL;
    if (!f || !fgets(token, sizeof token, f)) {
      fprintf(stderr, "lstmctl: --tcp needs a readable --token-file (or LSTMD_TOKEN_FILE)%s%s%s\n",
              token_file ? ": " : "", token_file ? token_file : "",
              !token_file ? "" : !f ? ": cannot open it" : ": it is empty");
      rc = kExitUsage;
    }
    if (f) fclose(f);
    token[strcspn(token, "\r\n")] = '\0';
  }
  struct lstmd_ctl c;
  if (!rc && lstmd_ctl_connect(&c, tcp ? tcp : socket_path, tcp != NULL, err, sizeof err)) {
    fprintf(stderr, "lstmctl: %s\n", err);
    rc = kExitUnreachable;
  } else if (!rc) {
    if (tcp) c.token = token;
    if (!strcmp(cmd, "submit")) rc = cmd_submit(&c, &args);
    else if (!strcmp(cmd, "watch")) rc = cmd_watch(&c, args.id);
    else if (!strcmp(cmd, "top")) rc = cmd_top(&c, args.once);
    else if (!strcmp(cmd, "logs")) rc = cmd_logs(&c, args.id, args.follow);
    else rc = cmd_simple(&c, cmd, args.id);
    lstmd_ctl_close(&c);
  }
  settings_free(&args.settings);
  return rc;
}
