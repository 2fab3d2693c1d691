/* messages_once.c — one copy of what the ranks have to say (see comm.h,
 * lstmd_comm_messages_once).
 *
 * Every rank of a launcher reads the same config and opens the same dataset, so one mistake
 * (a path mistyped, a truncated file) is found by all of them at once, and 64 ranks printed it
 * 64 times. Each rank holds its lines instead (lstmd_errors_capture); rank 0 gathers them and
 * prints each distinct line once, in the order the ranks said them (rank 0's first). A line
 * that not every rank said is what tells ranks apart (a file missing on one node only, a config
 * that differs): it goes under a "lstmd: on ranks 1-3, 7:" header. Where rank 0 alone speaks for
 * the job (its notes on the set-up: "device auto: ... using the CPU backend"), root_speaks keeps
 * its own lines bare. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "kernels/status.h"

/* Whether `text` holds the line [line, line + len) whole (from a line start to a newline). */
static int has_line(const char *text, const char *line, size_t len) {
  for (const char *p = text; *p;) {
    const char *end = strchr(p, '\n');
    const size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && !memcmp(p, line, len)) return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

/* "rank 3" or "ranks 1-3, 7" for the ranks whose has[] is set. */
static void rank_list(const char *has, int world, char *buf, size_t n) {
  int count = 0;
  for (int i = 0; i < world; i++) count += has[i];
  size_t at = (size_t)snprintf(buf, n, "rank%s", count > 1 ? "s" : "");
  for (int i = 0, first = 1; i < world && at < n; i++) {
    if (!has[i]) continue;
    int j = i;
    while (j + 1 < world && has[j + 1]) j++;
    at += (size_t)snprintf(buf + at, n - at, j > i + 1 ? "%s %d-%d" : j > i ? "%s %d, %d" : "%s %d",
                           first ? "" : ",", i, j);
    first = 0;
    i = j;
  }
}

/* Rank 0's side: all[i·n] holds rank i's lines. */
static void print_once(const char *all, size_t n, int world, int root_speaks) {
  char *has = calloc((size_t)world, 1), *last = calloc((size_t)world, 1);
  if (!has || !last) { /* print everything rather than nothing */
    for (int i = 0; i < world; i++) fputs(all + (size_t)i * n, stderr);
    free(has), free(last);
    return;
  }
  int headed = 0; /* a header is in force, for the ranks in last[] */
  for (int i = 0; i < world; i++) {
    for (const char *p = all + (size_t)i * n; *p;) {
      const char *end = strchr(p, '\n');
      const size_t len = end ? (size_t)(end - p) : strlen(p);
      int seen = 0, count = 0;
      for (int j = 0; j < i && !seen; j++) seen = has_line(all + (size_t)j * n, p, len);
      if (!seen) {
        for (int j = 0; j < world; j++) count += has[j] = j >= i && has_line(all + (size_t)j * n, p, len);
        const int bare = count == world || (root_speaks && i == 0 && count == 1);
        if (!bare && (!headed || memcmp(has, last, (size_t)world))) {
          char who[256];
          rank_list(has, world, who, sizeof who);
          fprintf(stderr, "lstmd: on %s:\n", who);
          memcpy(last, has, (size_t)world);
        }
        headed = !bare;
        fprintf(stderr, "%.*s\n", (int)len, p);
      }
      if (!end) break;
      p = end + 1;
    }
  }
  free(has);
  free(last);
}

int lstmd_comm_messages_once(struct lstmd_comm *comm, int my_rc, const char *held, size_t n,
                             int root_speaks, int *failed_rank) {
  const int rank = lstmd_comm_rank(comm), world = lstmd_comm_size(comm);
  const int agreed = lstmd_comm_agree(comm, my_rc, failed_rank);
  if (agreed == LSTMD_ECOMM) lstmd_comm_abort(comm, 1);
  char *all = rank == 0 ? malloc(n * (size_t)world) : NULL;
  if (rank == 0 && !all) lstmd_comm_abort(comm, 1); /* the others are in the gather */
  if (lstmd_comm_gather(comm, held, n, all, 0)) lstmd_comm_abort(comm, 1);
  if (rank == 0) print_once(all, n, world, root_speaks);
  free(all);
  return agreed;
}
