/* fuzz_target.h — what the plain corpus driver (fuzz_driver.c) needs from a fuzz target
 * (fuzz_frame.c, fuzz_qckpt.c): the libFuzzer entry point, a check that the seeds reach every
 * outcome the target counts, and a one-line report of those counts. */
#ifndef LSTMD_FUZZ_TARGET_H
#define LSTMD_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The loaders name what is wrong in a file on stderr: right for lstmd, a flood under a fuzzer.
 * fuzz_quiet() sends stderr to /dev/null, fuzz_loud() brings it back; a target calls them around
 * a loader call only. A sanitizer's report goes to the saved stderr, so that one from inside a
 * loader shows too (it went to /dev/null: the libFuzzer fuzz_prepare's first find exited 1 with
 * no word). __sanitizer_set_report_fd is weak: the plain drivers have no sanitizer runtime; under
 * gcc it moves ASan's reports only (libubsan is a runtime of its own), under clang UBSan's too. */
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>
void __sanitizer_set_report_fd(void *fd) __attribute__((weak));
static int fuzz_null_fd = -1, fuzz_saved_fd = -1;
static inline void fuzz_quiet(void) {
  if (fuzz_null_fd < 0) {
    fuzz_null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC), fuzz_saved_fd = dup(2);
    if (fuzz_saved_fd >= 0 && __sanitizer_set_report_fd)
      __sanitizer_set_report_fd((void *)(intptr_t)fuzz_saved_fd);
  }
  fflush(stderr);
  if (fuzz_null_fd >= 0) dup2(fuzz_null_fd, 2);
}
static inline void fuzz_loud(void) {
  fflush(stderr);
  if (fuzz_saved_fd >= 0) dup2(fuzz_saved_fd, 2);
}

/* The input as a file, the way lstmd opens its inputs: data[0, size) in a new memfd, whose
 * /proc/self/fd path goes to path. Returns the fd (the caller closes it); aborts on failure.
 * For the targets that define _GNU_SOURCE (memfd_create) before their includes. */
#ifdef _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>
static inline int fuzz_input_file(const uint8_t *data, size_t size, char path[64]) {
  const int fd = memfd_create("fuzz-input", MFD_CLOEXEC);
  if (fd < 0 || write(fd, data, size) != (ssize_t)size) abort();
  snprintf(path, 64, "/proc/self/fd/%d", fd);
  return fd;
}
#endif
/* 1 when the seeds run so far reached every outcome; else prints what is missing, returns 0. */
int fuzz_target_seeds_ok(void);
void fuzz_target_report(FILE *out);

#endif
