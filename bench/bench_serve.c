/* bench_serve.c — status-request latency and throughput of `lstmd serve`, with a peer.
 *
 * N client threads (default 64), each on its own connection, issue GetJob/ListJobs requests in
 * a closed loop (one outstanding request per client) for a fixed time, after a warm-up. Three
 * rows, measured one after the other in the same run:
 *   lstmd                  the daemon, through the client library (lstmd_ctl_client: protobuf
 *                          pack on send, unpack on receive), as lstmctl talks to it;
 *   lstmd, raw frames      the daemon, with the request frames packed once and the replies
 *                          only framed, not unpacked: the daemon's share without the client's;
 *   raw frame peer         a trivial single-threaded epoll server in a child process on its own
 *                          UNIX socket that answers each request frame with the daemon's reply
 *                          bytes captured at start (no protobuf on either side): the floor set
 *                          by the kernel, the scheduler and this machine. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/ctl_client.h"
#include "daemon/frame.h"

/* Latency histogram: log buckets of ratio 1.005 from 100 ns (±0.25% per value). */
enum { kBuckets = 4400, kMaxIds = 4096, kTimeoutMs = 10000 };
static const double kBase = 100e-9, kRatio = 1.005;

enum { MODE_CLIENT = 0, MODE_RAW = 1 };

struct canned { /* one request kind: its frame, and the daemon's reply to it */
  uint8_t *req, *reply;
  size_t req_len, reply_len;
};

struct worker {
  pthread_t thread;
  int index, mode;
  const char *socket;
  uint64_t count, errors;
  double max_s;
  uint64_t hist[kBuckets];
  char err[300];
};

static struct {
  int clients, list_every; /* every list_every-th request is a ListJobs, the rest GetJob */
  double duration_s, warmup_s;
  uint64_t ids[kMaxIds];
  size_t n_ids;
  struct canned get, list; /* raw modes: GetJob of ids[0], ListJobs */
} g = {.clients = 64, .list_every = 2, .duration_s = 10, .warmup_s = 1};

static atomic_int g_phase; /* 0 warm-up, 1 measuring, 2 stop */
static pthread_barrier_t g_ready;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void record(struct worker *w, double s) {
  int b = s <= kBase ? 0 : (int)(log(s / kBase) / log(kRatio)) + 1;
  if (b >= kBuckets) b = kBuckets - 1;
  w->hist[b]++;
  w->count++;
  if (s > w->max_s) w->max_s = s;
}

/* ---- raw frames ---- */

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int read_all(int fd, uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* One request frame out, one reply frame back into buf (cap bytes). Returns the reply's
 * length or -1. */
static long raw_round_trip(int fd, const struct canned *c, uint8_t *buf, size_t cap) {
  uint32_t len;
  if (write_all(fd, c->req, c->req_len) || read_all(fd, buf, LSTMD_FRAME_HEADER)) return -1;
  if (lstmd_frame_peek(buf, LSTMD_FRAME_HEADER, (uint32_t)(cap - LSTMD_FRAME_HEADER), &len) ==
      LSTMD_FRAME_TOO_LARGE)
    return -1;
  if (read_all(fd, buf + LSTMD_FRAME_HEADER, len)) return -1;
  return (long)len + LSTMD_FRAME_HEADER;
}

/* ---- clients ---- */

static void request_init(Lstmd__Request *r, Lstmd__GetJob *get, Lstmd__ListJobs *list, int is_list,
                         uint64_t id) {
  lstmd__request__init(r);
  if (is_list) {
    lstmd__list_jobs__init(list);
    r->kind_case = LSTMD__REQUEST__KIND_LIST;
    r->list = list;
  } else {
    lstmd__get_job__init(get);
    get->id = id;
    r->kind_case = LSTMD__REQUEST__KIND_GET;
    r->get = get;
  }
}

static void *client_main(void *arg) {
  struct worker *w = arg;
  struct lstmd_ctl ctl;
  int ok = lstmd_ctl_connect(&ctl, w->socket, 0, w->err, sizeof w->err) == 0;
  size_t cap = (g.get.reply_len > g.list.reply_len ? g.get.reply_len : g.list.reply_len) + 4096;
  uint8_t *buf = malloc(cap);
  pthread_barrier_wait(&g_ready);
  if (!ok || !buf) {
    w->errors++;
    free(buf);
    return NULL;
  }
  for (uint64_t i = (uint64_t)w->index;; i++) {
    const int phase = atomic_load_explicit(&g_phase, memory_order_relaxed);
    if (phase == 2) break;
    const int is_list = g.list_every > 0 && i % (uint64_t)g.list_every == 0;
    const double t0 = now_s();
    int good;
    if (w->mode == MODE_CLIENT) {
      Lstmd__Request req;
      Lstmd__GetJob get;
      Lstmd__ListJobs list;
      request_init(&req, &get, &list, is_list, g.ids[i % g.n_ids]);
      Lstmd__Response *resp = NULL;
      if (lstmd_ctl_send(&ctl, &req, w->err, sizeof w->err) == 0)
        resp = lstmd_ctl_recv(&ctl, kTimeoutMs, w->err, sizeof w->err);
      if (!resp) {
        w->errors++;
        break;
      }
      good = resp->kind_case == (is_list ? LSTMD__RESPONSE__KIND_JOBS : LSTMD__RESPONSE__KIND_JOB);
    } else {
      const struct canned *c = is_list ? &g.list : &g.get;
      long n = raw_round_trip(ctl.fd, c, buf, cap);
      if (n < 0) {
        snprintf(w->err, sizeof w->err, "connection lost");
        w->errors++;
        break;
      }
      good = (size_t)n == c->reply_len;
    }
    const double t1 = now_s();
    if (!good) w->errors++;
    /* Only requests that started and ended inside the measured window count. */
    if (phase == 1 && atomic_load_explicit(&g_phase, memory_order_relaxed) == 1) record(w, t1 - t0);
  }
  free(buf);
  lstmd_ctl_close(&ctl);
  return NULL;
}

static double percentile(const uint64_t *hist, uint64_t total, double q) {
  uint64_t want = (uint64_t)ceil(q * (double)total), seen = 0;
  for (int b = 0; b < kBuckets; b++) {
    seen += hist[b];
    if (seen >= want && hist[b]) /* the bucket's geometric middle */
      return b == 0 ? kBase : kBase * pow(kRatio, b - 0.5);
  }
  return NAN;
}

struct row {
  double p50_s, p99_s, rate;
};

/* Runs one row; prints it and fills *out. Returns 0, or 1 when any client failed. */
static int run_row(const char *label, const char *socket, int mode, struct row *out) {
  struct worker *w = calloc((size_t)g.clients, sizeof *w);
  if (!w) return 1;
  atomic_store(&g_phase, 0);
  pthread_barrier_init(&g_ready, NULL, (unsigned)g.clients + 1);
  for (int i = 0; i < g.clients; i++) {
    w[i] = (struct worker){.index = i, .mode = mode, .socket = socket};
    pthread_create(&w[i].thread, NULL, client_main, &w[i]);
  }
  pthread_barrier_wait(&g_ready);
  struct timespec warm = {(time_t)g.warmup_s, (long)(fmod(g.warmup_s, 1.0) * 1e9)};
  nanosleep(&warm, NULL);
  const double t0 = now_s();
  atomic_store(&g_phase, 1);
  struct timespec run = {(time_t)g.duration_s, (long)(fmod(g.duration_s, 1.0) * 1e9)};
  nanosleep(&run, NULL);
  atomic_store(&g_phase, 2);
  const double elapsed = now_s() - t0;
  static uint64_t hist[kBuckets];
  memset(hist, 0, sizeof hist);
  uint64_t total = 0, errors = 0;
  double max_s = 0;
  int failed = 0;
  for (int i = 0; i < g.clients; i++) {
    pthread_join(w[i].thread, NULL);
    for (int b = 0; b < kBuckets; b++) hist[b] += w[i].hist[b];
    total += w[i].count;
    errors += w[i].errors;
    if (w[i].max_s > max_s) max_s = w[i].max_s;
    if (w[i].err[0] && !failed++) fprintf(stderr, "bench_serve: %s: client %d: %s\n", label, i, w[i].err);
  }
  pthread_barrier_destroy(&g_ready);
  free(w);
  *out = (struct row){percentile(hist, total, 0.50), percentile(hist, total, 0.99), total / elapsed};
  printf("%-22s %9.3f %9.3f %9.3f %11.0f %9llu %7llu\n", label,
         1e3 * percentile(hist, total, 0.50), 1e3 * percentile(hist, total, 0.99), 1e3 * max_s,
         total / elapsed, (unsigned long long)total, (unsigned long long)errors);
  fflush(stdout);
  return failed || errors ? 1 : 0;
}

/* ---- the raw frame peer ---- */

/* Child process: answers every whole request frame with the canned reply for those bytes. */
static void peer_main(int listen_fd) {
  enum { kMaxConn = 1024, kBuf = 4096 };
  static uint8_t bufs[kMaxConn][kBuf];
  static size_t fill[kMaxConn];
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = listen_fd};
  epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &ev);
  struct epoll_event ready[64];
  for (;;) {
    int n = epoll_wait(ep, ready, 64, -1);
    for (int i = 0; i < n; i++) {
      int fd = ready[i].data.fd;
      if (fd == listen_fd) {
        int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) continue;
        if (c >= kMaxConn) {
          close(c);
          continue;
        }
        fill[c] = 0;
        struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        continue;
      }
      ssize_t k = recv(fd, bufs[fd] + fill[fd], kBuf - fill[fd], 0);
      if (k <= 0) {
        close(fd); /* also leaves the epoll set */
        continue;
      }
      fill[fd] += (size_t)k;
      uint32_t len;
      while (lstmd_frame_peek(bufs[fd], fill[fd], kBuf - LSTMD_FRAME_HEADER, &len) ==
             LSTMD_FRAME_READY) {
        const size_t whole = LSTMD_FRAME_HEADER + len;
        const struct canned *c = whole == g.list.req_len && !memcmp(bufs[fd], g.list.req, whole)
                                     ? &g.list : &g.get;
        if (write_all(fd, c->reply, c->reply_len)) break;
        memmove(bufs[fd], bufs[fd] + whole, fill[fd] - whole);
        fill[fd] -= whole;
      }
    }
  }
}

static pid_t start_peer(const char *path) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  unlink(path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 512)) {
    perror("bench_serve: peer socket");
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    peer_main(fd);
    _exit(0);
  }
  close(fd);
  return pid;
}

/* ---- set-up: job ids and the canned frames, from the daemon itself ---- */

static int capture(const char *socket, int is_list, uint64_t id, struct canned *out) {
  char err[300];
  struct lstmd_ctl ctl;
  if (lstmd_ctl_connect(&ctl, socket, 0, err, sizeof err)) {
    fprintf(stderr, "bench_serve: %s\n", err);
    return -1;
  }
  Lstmd__Request req;
  Lstmd__GetJob get;
  Lstmd__ListJobs list;
  request_init(&req, &get, &list, is_list, id);
  out->req = lstmd_frame_pack(&req.base, &out->req_len);
  uint8_t *buf = malloc(64 << 20);
  long n = out->req && buf ? raw_round_trip(ctl.fd, out, buf, 64 << 20) : -1;
  lstmd_ctl_close(&ctl);
  if (n < 0) {
    fprintf(stderr, "bench_serve: %s: no reply\n", socket);
    free(buf);
    return -1;
  }
  out->reply = buf;
  out->reply_len = (size_t)n;
  Lstmd__Response *r = lstmd__response__unpack(NULL, out->reply_len - 4, out->reply + 4);
  if (!r || r->kind_case == LSTMD__RESPONSE__KIND_ERROR) {
    fprintf(stderr, "bench_serve: the daemon refused the %s request: %s\n", is_list ? "list" : "get",
            r ? r->error->message : "malformed reply");
    if (r) lstmd__response__free_unpacked(r, NULL);
    return -1;
  }
  if (is_list)
    for (size_t i = 0; i < r->jobs->n_jobs && g.n_ids < kMaxIds; i++) g.ids[g.n_ids++] = r->jobs->jobs[i]->id;
  lstmd__response__free_unpacked(r, NULL);
  return 0;
}

static void usage(void) {
  printf("usage: bench_serve --socket PATH [--clients N] [--duration S] [--warmup S]\n"
         "                   [--list-every K] [--rows lstmd,raw,peer]\n"
         "  N clients (default 64), each on its own connection, send status requests in a closed\n"
         "  loop for S seconds (default 10) after a warm-up (default 1 s): every K-th a ListJobs\n"
         "  (default 2; 0: GetJob only), the others GetJob over the ids the daemon lists.\n"
         "  Rows: lstmd (client library), raw (daemon, frames packed once, replies not\n"
         "  unpacked), peer (a trivial frame server on a temp UNIX socket replying with the\n"
         "  daemon's bytes). Exit 1 when a request failed or got a wrong reply.\n");
}

int main(int argc, char **argv) {
  const char *socket = NULL, *rows = "lstmd,raw,peer";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage();
      return 0;
    }
    if (!v) {
      fprintf(stderr, "bench_serve: %s needs a value (--help)\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--socket")) socket = v;
    else if (!strcmp(a, "--clients")) g.clients = atoi(v);
    else if (!strcmp(a, "--duration")) g.duration_s = atof(v);
    else if (!strcmp(a, "--warmup")) g.warmup_s = atof(v);
    else if (!strcmp(a, "--list-every")) g.list_every = atoi(v);
    else if (!strcmp(a, "--rows")) rows = v;
    else {
      fprintf(stderr, "bench_serve: unknown option %s (--help)\n", a);
      return 2;
    }
  }
  if (!socket || g.clients < 1 || g.clients > 1000 || g.duration_s <= 0 || g.warmup_s < 0 ||
      g.list_every < 0) {
    fprintf(stderr, "bench_serve: --socket is required; --clients 1..1000, --duration > 0\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  if (capture(socket, 1, 0, &g.list)) return 1;
  if (g.n_ids == 0) {
    fprintf(stderr, "bench_serve: the daemon has no jobs; submit some first (GetJob needs ids)\n");
    return 1;
  }
  if (capture(socket, 0, g.ids[0], &g.get)) return 1;
  char mix[64];
  if (g.list_every == 0) snprintf(mix, sizeof mix, "GetJob only");
  else if (g.list_every == 1) snprintf(mix, sizeof mix, "ListJobs only");
  else snprintf(mix, sizeof mix, "1 in %d requests a ListJobs, the rest GetJob", g.list_every);
  printf("%d client%s, closed loop, %.1f s after %.1f s warm-up; %s; %zu jobs in the table "
         "(reply frames: GetJob %zu bytes, ListJobs %zu bytes)\n",
         g.clients, g.clients == 1 ? "" : "s", g.duration_s, g.warmup_s, mix, g.n_ids,
         g.get.reply_len, g.list.reply_len);
  printf("%-22s %9s %9s %9s %11s %9s %7s\n", "server", "p50_ms", "p99_ms", "max_ms", "requests/s",
         "requests", "errors");
  int rc = 0;
  struct row daemon = {0}, raw = {0}, peer = {0};
  if (strstr(rows, "lstmd")) rc |= run_row("lstmd", socket, MODE_CLIENT, &daemon);
  if (strstr(rows, "raw")) rc |= run_row("lstmd, raw frames", socket, MODE_RAW, &raw);
  if (strstr(rows, "peer")) {
    char path[108];
    snprintf(path, sizeof path, "/tmp/bench_serve_peer.%d.sock", (int)getpid());
    pid_t pid = start_peer(path);
    if (pid < 0) return 1;
    rc |= run_row("raw frame peer", path, MODE_RAW, &peer);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    unlink(path);
  }
  /* The daemon's overhead: each daemon row over the peer measured in the same run. */
  const struct row *mine[2] = {&daemon, &raw};
  const char *names[2] = {"lstmd", "lstmd, raw frames"};
  for (int i = 0; i < 2; i++)
    if (mine[i]->rate > 0 && peer.rate > 0)
      printf("%-22s p50 %.2fx, p99 %.2fx, requests/s %.2fx of the peer\n", names[i],
             mine[i]->p50_s / peer.p50_s, mine[i]->p99_s / peer.p99_s, mine[i]->rate / peer.rate);
  if (daemon.rate > 0 && g.clients == 64)
    printf("target p99 < 2 ms with 64 clients (lstmd row): %s\n",
           daemon.p99_s < 2e-3 ? "met" : "NOT MET");
  return rc;
}
