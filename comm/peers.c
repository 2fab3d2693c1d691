/* peers.c — the process table of the ranks on this host, and the lost-peer check (peers.h).
 * A process counts as gone when kill(pid, 0) says ESRCH or /proc says it is a zombie (killed
 * but not yet reaped by its launcher, which is what a SIGKILLed rank is for a moment).
 * "On this host" means: the same kernel (/proc/sys/kernel/random/boot_id) and the same PID
 * namespace (/proc/self/ns/pid), not merely the same host name. Ranks in containers with a
 * private PID namespace but the host's name (docker --network host, Kubernetes hostNetwork),
 * or nodes that share a host name, cannot see each other's pids: kill(pid, 0) there says
 * ESRCH for a live peer, and the check would end a healthy job naming a rank that is fine. A
 * peer whose pid is not visible at start-up (when every rank is alive) is left out as well. */
#define _GNU_SOURCE
#include "peers.h"

#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "kernels/status.h"

struct peer {
  int pid;       /* 0: not checked (another host, another PID namespace, or not visible) */
  char host[64]; /* for messages */
  char node[96]; /* boot id and PID namespace: equal = pids mean the same processes */
};

static struct peer *g_peers; /* [size], written once by lstmd_peers_init */
static int g_size = 0, g_rank = -1;
static _Atomic double g_last_check;
static volatile sig_atomic_t g_signalled;
static volatile sig_atomic_t *g_ended; /* [size]: 1 for a peer that announced its end */

static const char *g_ending = "the job (resume from the last checkpoint)";

void lstmd_peers_signalled(void) { g_signalled = 1; }
void lstmd_peers_set_ending(const char *what) { g_ending = what; }

/* The signal of lstmd_peers_announce_end. A real-time one, as each rank that ends the job sends
 * it: a stopped rank gets every one when continued (a standard signal sent again while pending
 * is received once). Its default action ends the process, so the handler is set before any peer
 * learns this pid (the all-gather) and stays set. */
#define kEndSignal (SIGRTMIN + 3)

/* The sender's rank, if the pid is that rank's. */
static void on_end_notice(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)uc;
  const int r = si->si_code == SI_QUEUE ? si->si_value.sival_int : -1;
  if (g_ended && g_peers && r >= 0 && r < g_size && g_peers[r].pid == (int)si->si_pid)
    g_ended[r] = 1;
}

static int process_alive(int pid);

/* Only to live peers: the pid of one long gone could be another program's by now, which the
 * signal's default action would end. */
void lstmd_peers_announce_end(void) {
  for (int r = 0; g_peers && r < g_size; r++)
    if (r != g_rank && g_peers[r].pid > 0 && process_alive(g_peers[r].pid))
      sigqueue(g_peers[r].pid, kEndSignal, (union sigval){.sival_int = g_rank});
}

/* "BOOT_ID PIDNS" of this process (see the file comment), or the host name prefixed with "host "
 * when /proc cannot say (then the host name alone decides, as before /proc was consulted). */
static void node_identity(const char *host, char *out, size_t n) {
  char boot[64] = "", ns[48] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) boot[0] = '\0';
    fclose(f);
    boot[strcspn(boot, "\n")] = '\0';
  }
  const ssize_t len = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  ns[len > 0 ? len : 0] = '\0';
  if (boot[0] && ns[0]) snprintf(out, n, "%s %s", boot, ns);
  else snprintf(out, n, "host %s", host);
}

int lstmd_peers_init(void) {
  int size = 0, rank = 0;
  if (MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS ||
      MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS)
    return LSTMD_ECOMM;
  struct sigaction sa = {.sa_sigaction = on_end_notice, .sa_flags = SA_SIGINFO | SA_RESTART};
  sigemptyset(&sa.sa_mask);
  sigaction(kEndSignal, &sa, NULL);
  struct peer me = {.pid = (int)getpid()};
  gethostname(me.host, sizeof me.host - 1);
  node_identity(me.host, me.node, sizeof me.node);
  struct peer *all = calloc((size_t)size, sizeof *all);
  g_ended = calloc((size_t)size, sizeof *g_ended);
  if (!all || !g_ended) {
    free(all);
    free((void *)g_ended);
    g_ended = NULL;
    return LSTMD_ENOMEM;
  }
  if (MPI_Allgather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, MPI_COMM_WORLD) !=
      MPI_SUCCESS) {
    free(all);
    return LSTMD_ECOMM;
  }
  /* Only peers whose pids mean something here are checked; every rank is alive now (it has
   * just taken part in the all-gather), so a pid that cannot be seen is in another namespace. */
  for (int r = 0; r < size; r++)
    if (r != rank && (strcmp(all[r].node, me.node) != 0 || !process_alive(all[r].pid)))
      all[r].pid = 0;
  g_peers = all;
  g_size = size;
  g_rank = rank;
  return LSTMD_OK;
}

/* 1 when rank r's process can be checked from here (see the file comment). */
static int checkable(int r) { return r != g_rank && g_peers[r].pid > 0; }

void lstmd_peers_free(void) {
  free(g_peers);
  g_peers = NULL;
  g_size = 0;
  free((void *)g_ended);
  g_ended = NULL;
}

/* The state letter of /proc/PID/stat (R, S, D, T, t, Z, X, ...), 'X' when the process does not
 * exist, '?' when /proc cannot say. */
static char process_state(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 'X';
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return '?'; /* no /proc here: kill() said it exists */
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *close = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces */
  return close && close[1] == ' ' ? close[2] : '?';
}

/* 1 when the process exists and is not a zombie. */
static int process_alive(int pid) {
  const char s = process_state(pid);
  return s != 'X' && s != 'Z';
}

char *lstmd_peers_describe_stuck(char *buf, size_t n) {
  if (!n) return buf;
  buf[0] = '\0';
  for (int r = 0; g_peers && r < g_size; r++) {
    if (!checkable(r)) continue;
    const char s = process_state(g_peers[r].pid);
    const char *what = s == 'T' || s == 't'   ? "is stopped"
                       : g_ended[r]           ? "ended the job" /* it may still be exiting */
                       : s == 'X' || s == 'Z' ? "is gone"
                                              : NULL;
    const size_t at = strlen(buf);
    if (what && at < n)
      snprintf(buf + at, n - at, "; rank %d (pid %d on %s) %s", r, g_peers[r].pid,
               g_peers[r].host, what);
  }
  return buf;
}

int lstmd_peers_find_lost(void) {
  if (!g_peers || g_rank < 0) return -1;
  int ended = -1; /* a rank that ended the job on purpose is named only when no other is lost */
  for (int r = 0; r < g_size; r++)
    if (checkable(r) && !process_alive(g_peers[r].pid)) {
      if (!g_ended[r]) return r;
      if (ended < 0) ended = r;
    }
  return ended;
}

void lstmd_peers_check_while_waiting(double wait_began_s, const char *what) {
  const double now = lstmd_now_s();
  if (!g_peers) return;
  if (!g_signalled && (now - wait_began_s < 0.05 || now - g_last_check < 0.05)) return;
  g_signalled = 0;
  g_last_check = now;
  const int lost = lstmd_peers_find_lost();
  if (lost < 0) return;
  if (g_ended[lost])
    lstmd_errorf("rank %d (%s): rank %d (pid %d on %s) ended the job (its message says why) while "
                 "this rank waited for %s; ending %s", g_rank, g_peers[g_rank].host, lost,
                 g_peers[lost].pid, g_peers[lost].host, what, g_ending);
  else
    lstmd_errorf("rank %d (%s): rank %d (pid %d on %s) is gone while waiting for %s; ending %s",
                 g_rank, g_peers[g_rank].host, lost, g_peers[lost].pid, g_peers[lost].host, what,
                 g_ending);
  lstmd_errors_flush_held();
  lstmd_peers_announce_end();
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);
}

int lstmd_peers_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double began, double end,
                          const char *what) {
  const double now = lstmd_now_s();
  if (end > 0 && now >= end) return ETIMEDOUT;
  const struct timespec wake = lstmd_deadline_in(end > 0 && end - now < 0.05 ? end - now : 0.05);
  pthread_cond_timedwait(cv, mu, &wake);
  lstmd_peers_check_while_waiting(began, what);
  return 0;
}
