/* workspace_arena.c — the workspaces' one-block arenas (lstmd_arena_carve, model.h).
 *
 * A large arena (4 MiB or more) is its own anonymous mapping, 2 MiB-aligned, and asks for
 * transparent huge pages (where the kernel leaves them to madvise, as Debian's does). The
 * per-step passes of the recurrence read 32 units of every row of a step, rows 16 KiB apart for
 * H = 512: every row another 4 KiB page, hundreds of pages a step. On the CPU benchmark model
 * huge pages won back ~3 ms of a 194 ms step (A/B of whole runs, 2-core EPYC, avx512). Its own
 * mapping, not malloc's: glibc serves a block from its heap once its mmap threshold has risen
 * (after a large free), and the hint would then stay on heap pages that later hold other data.
 * A small arena comes from malloc. Both keep a header in the 64 bytes before the arena, which
 * says how to release it. */
#define _GNU_SOURCE
#include "model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Under AddressSanitizer every slice is followed by a poisoned red zone (its round-up to 16
 * floats, plus 16 more), so a kernel that writes one row past its slice stops the ASan build
 * (make test-asan: CMake option LSTMD_SANITIZE) instead of silently landing in the next array.
 * GCC says __SANITIZE_ADDRESS__, clang __has_feature(address_sanitizer). */
#if defined(__SANITIZE_ADDRESS__)
#define LSTMD_ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LSTMD_ARENA_ASAN 1
#endif
#endif
#if defined(LSTMD_ARENA_ASAN)
#include <sanitizer/asan_interface.h>
enum { kArenaRedZone = 16 };
#else
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
enum { kArenaRedZone = 0 };
#endif

enum { kHead = 64 };
static const size_t kHuge = 2u << 20;

struct arena_head {
  void *base;   /* what malloc or mmap returned */
  size_t bytes; /* the mapping's length; 0: from malloc */
};

/* ASan keeps the shadow of an unmapped range: a later mapping at the same address would inherit
 * an earlier arena's red zones, so a mapping is unpoisoned when made and before it is unmapped.
 * (malloc'd arenas are ASan's allocator's business.) */

static size_t arena_span(size_t floats) { return (floats + 15) / 16 * 16 + kArenaRedZone; }

/* bytes zeroed bytes, 64-byte aligned (2 MiB for a large one), with the header before them. */
static char *arena_alloc(size_t bytes) {
  struct arena_head h = {NULL, 0};
  char *a;
  if (bytes >= 2 * kHuge) {
    /* room to align, for the header below the aligned start, and for the hint's last page */
    h.bytes = (bytes + kHuge - 1) / kHuge * kHuge + 2 * kHuge;
    char *m = mmap(NULL, h.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    h.base = m;
    ASAN_UNPOISON_MEMORY_REGION(m, h.bytes);
    a = (char *)(((uintptr_t)m + kHuge + kHuge - 1) & ~(uintptr_t)(kHuge - 1));
    (void)madvise(a, (bytes + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE); /* a hint only */
  } else {
    char *m = aligned_alloc(64, kHead + (bytes + 63) / 64 * 64);
    if (!m) return NULL;
    h.base = m;
    a = m + kHead;
    memset(a, 0, bytes);
  }
  memcpy(a - kHead, &h, sizeof h);
  return a;
}

void lstmd_workspace_arena_free(void *arena) {
  if (!arena) return;
  struct arena_head h;
  memcpy(&h, (char *)arena - kHead, sizeof h);
  if (h.bytes) {
    ASAN_UNPOISON_MEMORY_REGION(h.base, h.bytes);
    munmap(h.base, h.bytes);
  } else {
    free(h.base);
  }
}

void *lstmd_arena_carve(const size_t *sizes, size_t n, float **slices) {
  size_t total = 16;
  for (size_t i = 0; i < n; i++) total += arena_span(sizes[i]);
  float *a = (float *)arena_alloc(total * sizeof(float));
  if (!a) return NULL;
  for (size_t i = 0, at = 0; i < n; at += arena_span(sizes[i++])) {
    slices[i] = sizes[i] ? a + at : NULL;
    ASAN_POISON_MEMORY_REGION(a + at + sizes[i], (arena_span(sizes[i]) - sizes[i]) * sizeof(float));
  }
  return a;
}
