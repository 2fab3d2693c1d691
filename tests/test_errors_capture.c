/* test_errors_capture.c — lstmd_errors_capture (kernels/status.h) holds the messages of the
 * thread that asked for it, and only those: another thread's errors still reach stderr (a
 * daemon's scheduler thread must not go silent while rank 0's main thread holds a config's
 * messages), and a second thread's own capture, begun and ended while the first is active,
 * neither takes the first one's lines nor ends its capture. A capture inside another
 * (lstmd_errors_capture_begin/_end: a rank's held set-up lines around a loader's reworded
 * message) holds its own lines and gives the outer one back with what it held; lines put
 * (lstmd_errors_put) go where lstmd_errorf's go; a flush prints the held lines once.
 *
 * The two threads take turns (a turn counter under a mutex), so the interleaving is the same on
 * every run. stderr is redirected to a temporary file to see what was printed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/status.h"
#include "check.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_turn;

static void wait_turn(int t) {
  pthread_mutex_lock(&g_mu);
  while (g_turn != t) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
}
static void give_turn(int t) {
  pthread_mutex_lock(&g_mu);
  g_turn = t;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

static char g_held_a[512], g_held_b[512];

/* Thread B: turns 1, 3 and 5. */
static void *thread_b(void *arg) {
  (void)arg;
  wait_turn(1);
  lstmd_errorf("B1 while A captures");
  lstmd_errors_capture(g_held_b, sizeof g_held_b);
  lstmd_errorf("B2 held by B");
  give_turn(2);
  wait_turn(3);
  lstmd_errors_capture(NULL, 0); /* B's capture ends; A's must not */
  lstmd_errorf("B3 after B's capture");
  give_turn(4);
  wait_turn(5);
  lstmd_errorf("B5 after both");
  give_turn(6);
  return NULL;
}

int main(void) {
  char path[] = "/tmp/test_errors_capture.XXXXXX";
  const int fd = mkstemp(path);
  const int saved = dup(2);
  if (fd < 0 || saved < 0 || dup2(fd, 2) < 0) {
    perror("test_errors_capture: stderr redirection");
    return 1;
  }
  pthread_t b;
  lstmd_errors_capture(g_held_a, sizeof g_held_a); /* thread A = main */
  lstmd_errorf("A0 held by A");
  if (pthread_create(&b, NULL, thread_b, NULL)) return 1;
  give_turn(1);
  wait_turn(2);
  lstmd_errorf("A2 held by A while B captures");
  give_turn(3);
  wait_turn(4);
  lstmd_errorf("A4 held by A after B's capture ended");
  lstmd_errors_capture(NULL, 0);
  lstmd_errorf("A4b after A's capture");
  give_turn(5);
  wait_turn(6);
  pthread_join(b, NULL);
  static char outer_buf[512], inner_buf[512];
  struct lstmd_errors_held outer;
  lstmd_errors_capture(outer_buf, sizeof outer_buf);
  lstmd_errorf("N0 outer");
  lstmd_errors_capture_begin(inner_buf, sizeof inner_buf, &outer);
  lstmd_errorf("N1 inner");
  lstmd_errors_capture_end(&outer);
  lstmd_errors_put("lstmd: N2 put into outer\n");
  lstmd_errorf("N3 outer again");
  lstmd_errors_flush_held();
  lstmd_errorf("N4 outer after the flush");
  lstmd_errors_capture(NULL, 0);
  lstmd_errors_put("lstmd: N5 put without a capture\n");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);

  char printed[2048] = "";
  FILE *f = fdopen(fd, "r");
  rewind(f);
  const size_t n = fread(printed, 1, sizeof printed - 1, f);
  printed[n] = '\0';
  fclose(f);
  unlink(path);
  printf("held by A:\n%sheld by B:\n%sprinted:\n%s", g_held_a, g_held_b, printed);

  check_true("capture: A's own lines held, in order, and no other thread's",
             !strcmp(g_held_a, "lstmd: A0 held by A\nlstmd: A2 held by A while B captures\n"
                               "lstmd: A4 held by A after B's capture ended\n"));
  check_true("capture: another thread's error while A captures reaches stderr",
             strstr(printed, "lstmd: B1 while A captures\n") != NULL);
  check_true("capture: B's own capture holds B's line only",
             !strcmp(g_held_b, "lstmd: B2 held by B\n"));
  check_true("capture: lines after each thread's capture ended reach stderr",
             strstr(printed, "lstmd: B3 after B's capture\n") &&
                 strstr(printed, "lstmd: A4b after A's capture\n") &&
                 strstr(printed, "lstmd: B5 after both\n"));
  check_true("capture: no held line also printed", !strstr(printed, "held by"));
  check_true("nested: the inner capture holds its line only", !strcmp(inner_buf, "lstmd: N1 inner\n"));
  check_true("nested: the outer capture, given back, held its lines and the put one until the "
             "flush printed them once, in order",
             strstr(printed, "lstmd: N0 outer\nlstmd: N2 put into outer\nlstmd: N3 outer again\n") &&
                 !strstr(printed, "N1") && !strstr(printed, "N4"));
  check_true("nested: after the flush the capture goes on",
             !strcmp(outer_buf, "lstmd: N4 outer after the flush\n"));
  check_true("put: without a capture, to stderr", strstr(printed, "lstmd: N5 put without a capture\n") != NULL);
  return check_summary("test_errors_capture");
}
