/* fuzz_driver.c — runs a libFuzzer target (fuzz_target.h: fuzz_frame.c, fuzz_qckpt.c) without
 * libFuzzer (any compiler, so in every CI run): every seed of the corpus, then deterministic
 * pseudo-random mutations of them (bit flips, interesting bytes and lengths, inserts, deletes,
 * splices). A broken invariant aborts.
 *   fuzz_driver CORPUS_DIR [MUTATIONS [SEED]]      (defaults: 300000, 1)
 * It also asks the target whether the seeds still reach every outcome it counts, so a corpus
 * gone stale after a format change fails here instead of silently fuzzing nothing. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_target.h"

enum { kMaxSeeds = 512, kMaxInput = 1 << 16 };

struct seed {
  uint8_t *data;
  size_t len;
};

static uint64_t g_rng;
static uint64_t next_u64(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 2685821657736338717ull;
}
static size_t below(size_t n) { return n ? (size_t)(next_u64() % n) : 0; }

/* On an abort, the input that caused it goes to ./fuzz_driver.crash (replay it with the libFuzzer
 * binary: fuzz_frame fuzz_driver.crash) and, in hex, to stderr. An abort outside any input (the
 * sanitized build's leak check at exit) writes nothing; the default action comes first, so that
 * a second fault in here ends the process instead of re-entering. */
static const uint8_t *g_input;
static size_t g_input_len;
static void on_abort(int sig) {
  signal(sig, SIG_DFL);
  if (!g_input) return; /* abort() then ends the process with the default action */
  int fd = open("fuzz_driver.crash", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    if (write(fd, g_input, g_input_len) < 0) {}
    close(fd);
  }
  static const char kHex[] = "0123456789abcdef";
  char line[3];
  if (write(2, "fuzz_driver: input (also in ./fuzz_driver.crash):", 50) < 0) {}
  for (size_t i = 0; i < g_input_len && i < 4096; i++) {
    line[0] = ' ', line[1] = kHex[g_input[i] >> 4], line[2] = kHex[g_input[i] & 15];
    if (write(2, line, 3) < 0) {}
  }
  if (write(2, "\n", 1) < 0) {}
  raise(sig);
}

static void run_one(const uint8_t *data, size_t len) {
  g_input = data;
  g_input_len = len;
  LLVMFuzzerTestOneInput(data, len);
  g_input = NULL;
  g_input_len = 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_corpus(const char *dir, struct seed *seeds, int *count) {
  DIR *d = opendir(dir);
  if (!d) {
    perror(dir);
    return -1;
  }
  char *names[kMaxSeeds];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) && n < kMaxSeeds;)
    if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
  closedir(d);
  qsort(names, n, sizeof names[0], by_name); /* the same order, so the same mutations, everywhere */
  *count = 0;
  for (int i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    free(names[i]);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    uint8_t *buf = malloc(kMaxInput);
    size_t len = fread(buf, 1, kMaxInput, f);
    fclose(f);
    seeds[(*count)++] = (struct seed){buf, len};
  }
  return 0;
}

static void put_be32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}

/* One mutation of buf (len bytes, capacity kMaxInput); returns the new length. */
static size_t mutate(uint8_t *buf, size_t len, const struct seed *seeds, int n_seeds) {
  static const uint8_t kBytes[] = {0x00, 0x01, 0x02, 0x07, 0x08, 0x0a, 0x12, 0x2e, 0x3d,
                                   0x52, 0x5a, 0x62, 0x6a, 0x72, 0x7a, 0x7f, 0x80, 0xff};
  static const uint32_t kLengths[] = {0, 1, 3, 4, 63, 64, 65, 255, 4u << 20, (4u << 20) + 1,
                                      0x7fffffff, 0x80000000u, 0xffffffffu};
  switch (below(8)) {
    case 0: /* flip a bit */
      if (len) buf[below(len)] ^= (uint8_t)(1u << below(8));
      return len;
    case 1: /* an interesting byte */
      if (len) buf[below(len)] = kBytes[below(sizeof kBytes)];
      return len;
    case 2: /* a lying length prefix, at the start or anywhere */
      if (len >= 4) put_be32(buf + (below(2) ? 0 : below(len - 3)), kLengths[below(13)]);
      return len;
    case 3: { /* insert random bytes */
      size_t k = 1 + below(16), at = below(len + 1);
      if (len + k > kMaxInput) return len;
      memmove(buf + at + k, buf + at, len - at);
      for (size_t i = 0; i < k; i++) buf[at + i] = (uint8_t)next_u64();
      return len + k;
    }
    case 4: { /* delete a range (truncation included) */
      if (!len) return len;
      size_t at = below(len), k = 1 + below(len - at);
      memmove(buf + at, buf + at + k, len - at - k);
      return len - k;
    }
    case 5: { /* duplicate a range */
      if (!len) return len;
      size_t at = below(len), k = 1 + below(len - at);
      if (len + k > kMaxInput) return len;
      memmove(buf + at + k, buf + at, len - at);
      return len + k;
    }
    case 6: { /* splice: the tail of another seed */
      const struct seed *s = &seeds[below(n_seeds)];
      size_t at = below(len + 1), from = below(s->len + 1), k = s->len - from;
      if (at + k > kMaxInput) k = kMaxInput - at;
      memcpy(buf + at, s->data + from, k);
      return at + k;
    }
    default: { /* a random varint byte run (protobuf keys and lengths) */
      if (!len) return len;
      size_t at = below(len), k = 1 + below(10);
      for (size_t i = 0; i < k && at + i < len; i++) buf[at + i] = (uint8_t)(0x80 | next_u64());
      if (at + k < len) buf[at + k] &= 0x7f;
      return len;
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: fuzz_driver CORPUS_DIR [MUTATIONS [SEED]]\n");
    return 2;
  }
  const long mutations = argc > 2 ? strtol(argv[2], NULL, 10) : 300000;
  g_rng = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
  if (!g_rng) g_rng = 1;
  static struct seed seeds[kMaxSeeds];
  int n_seeds = 0;
  if (load_corpus(argv[1], seeds, &n_seeds) != 0 || n_seeds == 0) {
    fprintf(stderr, "fuzz_driver: no seeds in %s\n", argv[1]);
    return 1;
  }
  signal(SIGABRT, on_abort);
  for (int i = 0; i < n_seeds; i++) run_one(seeds[i].data, seeds[i].len);

  if (!fuzz_target_seeds_ok()) return 1;

  uint8_t *buf = malloc(kMaxInput);
  const clock_t t0 = clock();
  for (long m = 0; m < mutations; m++) {
    const struct seed *s = &seeds[below(n_seeds)];
    size_t len = s->len;
    memcpy(buf, s->data, len);
    for (size_t k = 1 + below(6); k > 0; k--) len = mutate(buf, len, seeds, n_seeds);
    /* an exact-size copy, so that a read past the input is a read past an allocation */
    uint8_t *input = malloc(len ? len : 1);
    memcpy(input, buf, len);
    run_one(input, len);
    free(input);
  }
  const double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  printf("fuzz_driver: %d seeds + %ld mutations in %.1f s: ", n_seeds, mutations, secs);
  fuzz_target_report(stdout);
  printf("\n");
  for (int i = 0; i < n_seeds; i++) free(seeds[i].data);
  free(buf);
  return 0;
}
