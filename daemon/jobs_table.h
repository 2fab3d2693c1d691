/* jobs_table.h — what jobs.c (the table, its journal and events, the control server's side)
 * and jobs_sched.c (the scheduler's side) both use: the small helpers that find and change a
 * job under the table's lock (static inline, one copy per file), and the journaled change and
 * the event post of jobs.c. Private to the daemon. */
#ifndef LSTMD_JOBS_TABLE_H
#define LSTMD_JOBS_TABLE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "jobs.h"

static inline int64_t now_ms(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* Replaces a string field of an unpacked message (whose unset strings point at protobuf-c's
 * shared empty string, which must not be freed). */
static inline void set_str(char **field, const char *value) {
  char *copy = strdup(value);
  if (!copy) return; /* keep the old text rather than lose the field */
  if (*field && *field != protobuf_c_empty_string) free(*field);
  *field = copy;
}

/* A deep copy that owns all of its memory (pack, then unpack). */
static inline Lstmd__Job *copy_job(const Lstmd__Job *job) {
  size_t n = lstmd__job__get_packed_size(job);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return NULL;
  lstmd__job__pack(job, buf);
  Lstmd__Job *copy = lstmd__job__unpack(NULL, n, buf);
  free(buf);
  return copy;
}

static inline size_t index_of(const struct lstmd_jobs *t, uint64_t id) {
  size_t i = 0;
  while (i < t->n && t->v[i]->id != id) i++;
  return i;
}

static inline Lstmd__Job *lookup(const struct lstmd_jobs *t, uint64_t id) {
  const size_t i = index_of(t, id);
  return i < t->n ? t->v[i] : NULL;
}

/* Job i is about to change: its cached GetJob reply goes, and the list's is out of date. */
static inline void touch(struct lstmd_jobs *t, size_t i) {
  t->version++;
  free(t->job_replies[i].frame);
  t->job_replies[i].frame = NULL;
}

/* The job with this id, about to be changed; NULL if none. */
static inline Lstmd__Job *find(struct lstmd_jobs *t, uint64_t id) {
  const size_t i = index_of(t, id);
  if (i == t->n) return NULL;
  touch(t, i);
  return t->v[i];
}

static inline int is_final(int state) {
  return state == LSTMD__JOB_STATE__SUCCEEDED || state == LSTMD__JOB_STATE__FAILED ||
         state == LSTMD__JOB_STATE__CANCELLED;
}

/* How often journal_kept retries the changes the journal could not take (jobs.c). */
enum { kJournalRetryMs = 2000 };

/* jobs.c, lock held */
void lstmd_jobs_post(struct lstmd_jobs *t, const Lstmd__Job *job, const Lstmd__Metrics *m);
size_t lstmd_jobs_journal_kept(struct lstmd_jobs *t, int force);
int lstmd_jobs_changed(struct lstmd_jobs *t, Lstmd__Job *job);

#endif
