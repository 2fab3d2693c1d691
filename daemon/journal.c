/* journal.c — replay, compaction and appends of the job journal (see journal.h). */
#define _GNU_SOURCE
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/status.h"
#include "worker/io/durable.h"

static const char kMagic[8] = {'L', 'S', 'T', 'M', 'D', 'J', '1', '\n'};
enum { kRecordHeader = 8, kMaxRecord = 16 << 20 };

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* One framed record in a malloc'd buffer. */
static uint8_t *encode_record(const Lstmd__Job *job, size_t *len) {
  const size_t n = lstmd__job__get_packed_size(job);
  uint8_t *buf = malloc(kRecordHeader + n);
  if (!buf) return NULL;
  lstmd__job__pack(job, buf + kRecordHeader);
  put_u32(buf, (uint32_t)n);
  put_u32(buf + 4, crc32_iscsi(buf + kRecordHeader, (int)n, 0));
  *len = kRecordHeader + n;
  return buf;
}

/* Keeps the newest record of each job id, in id order. */
static int keep_latest(Lstmd__Job ***jobs, size_t *n, Lstmd__Job *job) {
  for (size_t i = 0; i < *n; i++)
    if ((*jobs)[i]->id == job->id) {
      lstmd__job__free_unpacked((*jobs)[i], NULL);
      (*jobs)[i] = job;
      return LSTMD_OK;
    }
  Lstmd__Job **grown = realloc(*jobs, (*n + 1) * sizeof *grown);
  if (!grown) return LSTMD_ENOMEM;
  *jobs = grown;
  size_t at = *n;
  while (at > 0 && grown[at - 1]->id > job->id) {
    grown[at] = grown[at - 1];
    at--;
  }
  grown[at] = job;
  (*n)++;
  return LSTMD_OK;
}

/* *damaged: records were dropped from the middle of the file, not only a torn last one (the file
 * is then kept aside before compaction rewrites it). */
static int replay(const char *path, Lstmd__Job ***jobs, size_t *n, int *damaged) {
  *damaged = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT) return LSTMD_OK;
    lstmd_errorf("%s: cannot open the job journal: %s", path, strerror(errno));
    return LSTMD_EIO;
  }
  char magic[sizeof kMagic];
  if (fread(magic, 1, sizeof magic, f) != sizeof magic || memcmp(magic, kMagic, sizeof magic)) {
    fclose(f);
    lstmd_errorf("%s: not a lstmd job journal (bad magic); move it away to start afresh", path);
    return LSTMD_EFORMAT;
  }
  int rc = LSTMD_OK;
  long records = 0, offset = sizeof kMagic;
  uint8_t header[kRecordHeader], *payload = NULL;
  for (;;) {
    size_t got = fread(header, 1, sizeof header, f);
    if (got == 0) break;
    const uint32_t len = get_u32(header);
    const char *bad = NULL;
    uint8_t *grown;
    if (got < sizeof header) bad = "a torn record header";
    else if (len > kMaxRecord) bad = "an impossible record length";
    else if (!(grown = realloc(payload, len ? len : 1))) { rc = LSTMD_ENOMEM; break; }
    else if ((payload = grown), fread(payload, 1, len, f) != len) bad = "a torn record";
    else if (crc32_iscsi(payload, (int)len, 0) != get_u32(header + 4)) bad = "a checksum mismatch";
    Lstmd__Job *job = bad ? NULL : lstmd__job__unpack(NULL, len, payload);
    if (!bad && !job) bad = "an undecodable record";
    if (bad) {
      struct stat st;
      const long end = fstat(fileno(f), &st) == 0 ? (long)st.st_size : offset;
      const long after = end - offset - (long)sizeof header - (long)len; /* bytes past the record */
      if (got < sizeof header || after <= 0) /* the last record: a write a crash cut short */
        fprintf(stderr, "lstmd: %s: %s at byte %ld after %ld records (a crash mid-write?); "
                "keeping the %ld records before it\n", path, bad, offset, records, records);
      else if ((*damaged = 1))
        fprintf(stderr, "lstmd: %s: %s at byte %ld after %ld records, with %ld bytes after it: "
                "the file is damaged in the middle; keeping the %ld records before it (the jobs "
                "recorded after it are lost: see the copy kept beside it)\n", path, bad, offset,
                records, end - offset, records);
      break;
    }
    if ((rc = keep_latest(jobs, n, job))) {
      lstmd__job__free_unpacked(job, NULL);
      break;
    }
    records++;
    offset += (long)(sizeof header + len);
  }
  free(payload);
  fclose(f);
  return rc;
}

/* Writes one record per job into a fresh file that atomically replaces the journal. */
static int compact(const char *path, Lstmd__Job **jobs, size_t n) {
  struct lstmd_durable w = {0};
  LSTMD_TRY(lstmd_durable_open(&w, path));
  int rc = lstmd_durable_write(&w, kMagic, sizeof kMagic);
  for (size_t i = 0; i < n && !rc; i++) {
    size_t len;
    uint8_t *rec = encode_record(jobs[i], &len);
    rc = rec ? lstmd_durable_write(&w, rec, len) : LSTMD_ENOMEM;
    free(rec);
  }
  if (rc) {
    lstmd_durable_abort(&w);
    return rc;
  }
  return lstmd_durable_commit(&w);
}

int lstmd_journal_open(struct lstmd_journal *j, const char *dir, Lstmd__Job ***jobs, size_t *n) {
  *jobs = NULL;
  *n = 0;
  j->fd = -1;
  snprintf(j->path, sizeof j->path, "%s/jobs.journal", dir);
  int damaged = 0;
  int rc = replay(j->path, jobs, n, &damaged);
  if (!rc && damaged) { /* what the compaction below would drop, kept for a person to look at */
    char aside[sizeof j->path + 32];
    snprintf(aside, sizeof aside, "%s.damaged-%lld", j->path, (long long)time(NULL));
    if (lstmd_durable_link(j->path, aside) == 0)
      fprintf(stderr, "lstmd: %s: the damaged journal is kept as %s\n", j->path, aside);
  }
  if (!rc) rc = compact(j->path, *jobs, *n);
  if (!rc && (j->fd = open(j->path, O_WRONLY | O_APPEND | O_CLOEXEC)) < 0) {
    lstmd_errorf("%s: cannot open for appending: %s", j->path, strerror(errno));
    rc = LSTMD_EIO;
  }
  if (!rc) j->size = lseek(j->fd, 0, SEEK_END);
  if (rc) {
    for (size_t i = 0; i < *n; i++) lstmd__job__free_unpacked((*jobs)[i], NULL);
    free(*jobs);
    *jobs = NULL;
    *n = 0;
  }
  return rc;
}

int lstmd_journal_append(struct lstmd_journal *j, const Lstmd__Job *job, int quiet) {
  size_t len;
  uint8_t *rec = encode_record(job, &len);
  if (!rec) return LSTMD_ENOMEM;
  /* O_APPEND: a crash leaves at most one torn record at the end, which replay drops. A short
   * write (a full disk, a file size limit) is followed by another for the rest, whose failure
   * gives the reason (ENOSPC, EFBIG) the message names. */
  size_t done = 0;
  while (done < len) {
    const ssize_t wrote = write(j->fd, rec + done, len - done);
    if (wrote > 0) {
      done += (size_t)wrote;
    } else if (wrote == 0 || errno != EINTR) {
      if (wrote == 0) errno = EIO; /* a regular file does not do that; never say "Success" */
      break;
    }
  }
  const int failed = done < len || fdatasync(j->fd) != 0, err = errno;
  free(rec);
  if (failed) {
    if (!quiet) lstmd_errorf("%s: cannot append to the job journal: %s", j->path, strerror(err));
    /* so that later records are not hidden behind it */
    if (ftruncate(j->fd, j->size) != 0 && !quiet)
      lstmd_errorf("%s: cannot cut back a torn record: %s", j->path, strerror(errno));
    return LSTMD_EIO;
  }
  j->size += (off_t)len;
  return LSTMD_OK;
}

void lstmd_journal_close(struct lstmd_journal *j) {
  if (j->fd >= 0) close(j->fd);
  j->fd = -1;
}
