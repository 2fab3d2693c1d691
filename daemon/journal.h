/* journal.h — the durable record of the daemon's job table: <state-dir>/jobs.journal.
 *
 * An append-only file: an 8-byte magic, then records of [u32 length][u32 CRC-32C of the
 * payload][payload: a serialized lstmd.Job]. Every state change appends the whole job and is
 * fdatasync'd before the daemon answers, so an acknowledged submission survives a crash. On
 * open the file is replayed (the last record of each job wins); a torn or corrupt tail — a crash
 * mid-append — ends the replay with a warning, and the file is compacted (one record per job)
 * into a new file that replaces the old one atomically. */
#ifndef LSTMD_JOURNAL_H
#define LSTMD_JOURNAL_H

#include <stddef.h>

#include "lstmd.pb-c.h"

#include <sys/types.h>

struct lstmd_journal {
  int fd;
  off_t size; /* bytes known good: a failed append is cut back to this */
  char path[1100];
};

/* Replays <dir>/jobs.journal (missing: an empty table) into *jobs (n of them, ordered by id;
 * free each with lstmd__job__free_unpacked and the array with free), compacts it and opens it
 * for appending. Returns 0 or a negative status with a message naming the file. */
int lstmd_journal_open(struct lstmd_journal *j, const char *dir, Lstmd__Job ***jobs, size_t *n);
/* Appends the job's current record and syncs it. Returns 0 or LSTMD_EIO, after saying why unless
 * quiet (a retry of a failure already told: jobs.c). */
int lstmd_journal_append(struct lstmd_journal *j, const Lstmd__Job *job, int quiet);
void lstmd_journal_close(struct lstmd_journal *j);

#endif
