/* test_server_faults.c — the control server of `lstmd serve` (daemon/server.c) when a libuv call
 * or its thread start fails, in one process without MPI. Run with tests/uv_fault.c preloaded
 * (LD_PRELOAD; ctest sets it, and runs this under valgrind when it is installed, so that what a
 * failed start leaves allocated is an error too):
 *  1. a start that fails at each step — the loop, the bind over a live daemon's socket or over a
 *     file that is not a socket, the listen, the TCP bind, the wakeup and signal handles, the
 *     thread — returns a status, leaves no file descriptor open, removes the socket file only
 *     where it created it, and leaves the job table without a post hook into the dead server;
 *  2. a connection whose set-up fails (handle init, idle timer init or start, read start) is
 *     closed at once (not left to the client's timeout), and the next client is served;
 *  3. after all that a server starts, serves and stops with every descriptor given back. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/ctl_client.h"
#include "daemon/frame.h"
#include "daemon/jobs.h"
#include "daemon/server.h"
#include "kernels/status.h"
#include "check.h"

static char g_dir[] = "/tmp/lstmd-test-server-faults-XXXXXX";
static char g_sock[256];
static void (*g_fault_set)(const char *spec);

static void fault(const char *spec) { g_fault_set(spec); }

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n - 3; /* ".", ".." and the directory's own descriptor */
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static struct lstmd_server_config config(const char *listen_host, int port) {
  return (struct lstmd_server_config){.socket_path = g_sock, .socket_group = -1,
                                      .listen_host = listen_host, .listen_port = port,
                                      .token = "0123456789abcdef-token", .data_root = g_dir,
                                      .max_frame = LSTMD_FRAME_MAX_DEFAULT,
                                      .idle_timeout_s = 30, .max_connections = 100};
}

/* One ListJobs round trip: 1 answered, 0 the daemon closed the connection (within `within_s`
 * seconds), -1 anything else (no answer, cannot connect, closed only after a long wait). */
static int list_once(double within_s, char *why, size_t n) {
  struct lstmd_ctl c;
  why[0] = '\0';
  if (lstmd_ctl_connect(&c, g_sock, 0, why, n)) return -1;
  Lstmd__ListJobs list = LSTMD__LIST_JOBS__INIT;
  Lstmd__Request req = LSTMD__REQUEST__INIT;
  req.kind_case = LSTMD__REQUEST__KIND_LIST;
  req.list = &list;
  const double t0 = now_s();
  int rc = -1;
  if (lstmd_ctl_send(&c, &req, why, n) == 0) {
    Lstmd__Response *resp = lstmd_ctl_recv(&c, 10000, why, n);
    if (resp) rc = resp->kind_case == LSTMD__RESPONSE__KIND_JOBS ? 1 : -1;
    else if (strstr(why, "closed") || strstr(why, "reset")) rc = now_s() - t0 <= within_s ? 0 : -1;
  } else if (strstr(why, "reset") || strstr(why, "pipe")) { /* closed before the request went */
    rc = now_s() - t0 <= within_s ? 0 : -1;
  }
  lstmd_ctl_close(&c);
  return rc;
}

/* Waits up to `seconds` for the number of open descriptors to be `want`. */
static int fds_become(int want, double seconds) {
  const double end = now_s() + seconds;
  while (open_fds() != want) {
    if (now_s() > end) return 0;
    usleep(10000);
  }
  return 1;
}

static int exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* 1. starts that fail */
static void test_failed_starts(struct lstmd_jobs *jobs) {
  static const struct {
    const char *fault, *what;
    int status;
  } cases[] = {
      {"uv_async_init:1", "the loop (uv_loop_init)", LSTMD_ENOMEM},
      {"uv_listen:1", "listen on the UNIX socket", LSTMD_EINVAL},
      {"uv_async_init:2", "the wakeup handle", LSTMD_ENOMEM},
      {"uv_signal_start:3", "the SIGUSR1 handle", LSTMD_ENOMEM},
      {"pthread_create:1", "the control thread", LSTMD_ENOMEM},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const int fds = open_fds();
    fault(cases[i].fault);
    struct lstmd_server_config cfg = config(NULL, 0);
    struct lstmd_server *srv = NULL;
    int rc = lstmd_server_start(&cfg, jobs, &srv);
    fault("");
    char what[160];
    snprintf(what, sizeof what, "start fails at %s: status %s", cases[i].what,
             lstmd_status_name(cases[i].status));
    check_true(what, rc == cases[i].status);
    /* libuv 1.44 itself leaves its epoll descriptor open when uv_loop_init fails after making
     * it (uv__platform_loop_delete closes only inotify's): not the server's to close. */
    if (i > 0) check_true("  ... no descriptor left open", open_fds() == fds);
    check_true("  ... its socket file removed", !exists(g_sock));
    check_true("  ... no post hook into it", jobs->post == NULL && jobs->post_ctx == NULL);
  }

  /* a TCP port already taken: the UNIX socket bound first is removed again */
  int taken = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  int bound = taken >= 0 && bind(taken, (struct sockaddr *)&a, sizeof a) == 0 &&
              listen(taken, 1) == 0 && getsockname(taken, (struct sockaddr *)&a, &alen) == 0;
  check_true("(a TCP port taken for the next case)", bound);
  const int fds1 = open_fds();
  struct lstmd_server_config cfg = config("127.0.0.1", ntohs(a.sin_port));
  struct lstmd_server *srv = NULL;
  int rc = lstmd_server_start(&cfg, jobs, &srv);
  check_true("start fails on a TCP port in use: EINVAL", rc == LSTMD_EINVAL);
  check_true("  ... no descriptor left open", open_fds() == fds1);
  check_true("  ... the UNIX socket it bound removed", !exists(g_sock));
  if (taken >= 0) close(taken);

  /* another daemon's live socket, and a file that is not a socket, are left alone */
  struct lstmd_jobs other;
  char other_dir[300], why[300];
  snprintf(other_dir, sizeof other_dir, "%s/other-state", g_dir);
  memset(&other, 0, sizeof other);
  struct lstmd_server *live = NULL;
  cfg = config(NULL, 0);
  mkdir(other_dir, 0700);
  rc = lstmd_jobs_open(&other, other_dir);
  if (!rc) rc = lstmd_server_start(&cfg, &other, &live);
  check_true("(a first server on the socket)", rc == 0);
  const int fds2 = open_fds(); /* before any client: the first server holds no connection */
  rc = lstmd_server_start(&cfg, jobs, &srv);
  check_true("a second server on a live socket: EINVAL", rc == LSTMD_EINVAL);
  /* Its probe of the socket was a connection the first server accepted, in this process too,
   * and closes when it sees the end of it: wait for that. */
  check_true("  ... no descriptor left open", fds_become(fds2, 5.0));
  check_true("  ... the first server's socket still there and serving",
             exists(g_sock) && list_once(5, why, sizeof why) == 1);
  if (live) {
    lstmd_server_stop(live);
    lstmd_server_join(live);
  }
  lstmd_jobs_close(&other);
  FILE *f = fopen(g_sock, "w");
  if (f) {
    fputs("not a socket\n", f);
    fclose(f);
  }
  const int fds3 = open_fds();
  rc = lstmd_server_start(&cfg, jobs, &srv);
  char text[64] = "";
  f = fopen(g_sock, "r");
  if (f) {
    if (!fgets(text, sizeof text, f)) text[0] = '\0';
    fclose(f);
  }
  check_true("a socket path that is a file: EINVAL, the file untouched",
             rc == LSTMD_EINVAL && !strcmp(text, "not a socket\n"));
  unlink(g_sock);
  check_true("  ... no descriptor left open", open_fds() == fds3);
}

/* 2. connections whose set-up fails; 3. a clean start and stop */
static void test_connections(struct lstmd_jobs *jobs) {
  /* uv_timer_start first, before any client has come and gone: a closing connection starts a
   * timer too (the linger bound), possibly after the fault is set. */
  static const struct {
    const char *fault, *what;
  } cases[] = {
      {"uv_timer_start:1", "its idle timer cannot be started"},
      {"uv_pipe_init:1", "its handle cannot be initialised"},
      {"uv_timer_init:1", "its idle timer cannot be initialised"},
      {"uv_read_start:1", "reading cannot start"},
  };
  const int fds0 = open_fds();
  struct lstmd_server_config cfg = config(NULL, 0);
  struct lstmd_server *srv = NULL;
  char why[300];
  int rc = lstmd_server_start(&cfg, jobs, &srv);
  check_true("a server starts", rc == 0 && srv != NULL);
  if (rc) return;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fault(cases[i].fault);
    char what[160];
    int got = list_once(3, why, sizeof why);
    fault("");
    snprintf(what, sizeof what, "a connection is closed at once when %s", cases[i].what);
    check_true(what, got == 0);
    if (got != 0) fprintf(stderr, "  got %d: %s\n", got, why);
    check_true("  ... and the next client is served", list_once(5, why, sizeof why) == 1);
  }
  lstmd_server_stop(srv);
  lstmd_server_join(srv);
  check_true("stopped: socket removed, every descriptor given back",
             !exists(g_sock) && open_fds() == fds0);
}

int main(void) {
  g_fault_set = (void (*)(const char *))dlsym(RTLD_DEFAULT, "uv_fault_set");
  if (!g_fault_set) {
    fprintf(stderr, "test_server_faults: run with LD_PRELOAD=uv_fault.so (tests/uv_fault.c)\n");
    return 1;
  }
  if (!mkdtemp(g_dir)) return 1;
  snprintf(g_sock, sizeof g_sock, "%s/s.sock", g_dir);
  char state[300];
  snprintf(state, sizeof state, "%s/state", g_dir);
  struct lstmd_jobs jobs;
  memset(&jobs, 0, sizeof jobs);
  if (mkdir(state, 0700) != 0 || lstmd_jobs_open(&jobs, state)) return 1;
  /* The first loop in a process creates libuv's process-wide signal pipe, which stays open:
   * create it here, before the descriptors are counted. */
  uv_loop_t warm;
  if (uv_loop_init(&warm) != 0 || uv_loop_close(&warm) != 0) return 1;
  test_failed_starts(&jobs);
  test_connections(&jobs);
  lstmd_jobs_close(&jobs);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return check_summary("test_server_faults");
}
