/* trace.c — Chrome trace-event writer (see trace.h). */
#define _GNU_SOURCE
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "kernels/status.h"

struct lstmd_trace {
  int fd, rank;
  struct lstmd_comm *comm;
};

static void write_line(struct lstmd_trace *t, const char *line, size_t n) {
  /* One write per line: with O_APPEND a line from another rank cannot land inside it. */
  while (write(t->fd, line, n) < 0 && errno == EINTR) {
  }
}

int lstmd_trace_open(const char *path, struct lstmd_comm *comm, struct lstmd_trace **out) {
  *out = NULL;
  if (!path) return LSTMD_OK;
  const int rank = comm ? lstmd_comm_rank(comm) : 0;
  int rc = LSTMD_OK;
  if (rank == 0) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    static const char head[] =
        "[{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"rank 0\"}}\n";
    if (fd < 0 || write(fd, head, sizeof head - 1) != (ssize_t)(sizeof head - 1)) {
      lstmd_errorf("%s: cannot create the trace file: %s", path, strerror(errno));
      rc = LSTMD_EWRITE;
    }
    if (fd >= 0) close(fd);
  }
  rc = lstmd_comm_agree(comm, rc, NULL); /* everyone learns whether rank 0 could */
  if (rc) return rc;
  /* Then every rank opens it, and votes: a rank that cannot (a path not shared with rank 0's
   * node) must not leave the others training towards a collective it never joins. */
  struct lstmd_trace *t = calloc(1, sizeof *t);
  if (t) {
    t->rank = rank;
    t->comm = comm;
    t->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (t->fd < 0)
      lstmd_errorf("%s: cannot open the trace file on rank %d (every rank appends to the one file: "
                   "give a path all nodes share): %s", path, rank, strerror(errno));
  }
  rc = lstmd_comm_agree(comm, !t ? LSTMD_ENOMEM : t->fd < 0 ? LSTMD_EWRITE : LSTMD_OK, NULL);
  if (rc) {
    if (t && t->fd >= 0) close(t->fd);
    free(t);
    return rc;
  }
  char line[256];
  int n;
  if (rank > 0) { /* rank 0 named its own track when it created the file */
    n = snprintf(line, sizeof line,
                 ",{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}\n",
                 rank, rank);
    write_line(t, line, (size_t)n);
  }
  n = snprintf(line, sizeof line,
               ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"gradient all-reduce\"}}\n",
               rank, LSTMD_TRACE_TID_REDUCER);
  write_line(t, line, (size_t)n);
  *out = t;
  return LSTMD_OK;
}

void lstmd_trace_event(struct lstmd_trace *t, int tid, const char *name, double begin_s,
                       double end_s, const char *args_json) {
  if (!t) return;
  char line[512];
  int n = snprintf(line, sizeof line,
                   ",{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f%s%s}\n",
                   name, t->rank, tid, begin_s * 1e6, (end_s - begin_s) * 1e6,
                   args_json ? ",\"args\":" : "", args_json ? args_json : "");
  if (n > 0 && n < (int)sizeof line) write_line(t, line, (size_t)n);
}

void lstmd_trace_close(struct lstmd_trace *t, int every_rank) {
  if (!t) return;
  int closing = every_rank; /* the barrier: no rank appends after rank 0's "]" */
  if (every_rank && t->comm && lstmd_comm_size(t->comm) > 1) closing = !lstmd_comm_barrier(t->comm);
  if (closing && t->rank == 0) write_line(t, "]\n", 2);
  close(t->fd);
  free(t);
}
