/* arena.c — bump allocation in linked blocks for unpacked protobuf messages (see arena.h). */
#include "arena.h"

#include <stdint.h>
#include <stdlib.h>

enum { kBlock = 64 << 10, kAlign = 16 }; /* kAlign: as data[] in arena.h, and malloc's */

static struct lstmd_arena_block *block_new(size_t cap, struct lstmd_arena_block *next) {
  struct lstmd_arena_block *b = malloc(sizeof *b + cap);
  if (b) *b = (struct lstmd_arena_block){.next = next, .used = 0, .cap = cap};
  return b;
}

static void *arena_alloc(void *data, size_t size) {
  struct lstmd_arena *a = data;
  if (size > SIZE_MAX - sizeof(struct lstmd_arena_block) - kAlign) return NULL; /* no wrap below */
  size = (size + kAlign - 1) & ~(size_t)(kAlign - 1);
  struct lstmd_arena_block *b = a->blocks;
  if (!b || b->cap - b->used < size) {
    b = block_new(size > kBlock ? size : kBlock, a->blocks);
    if (!b) return NULL;
    a->blocks = b;
  }
  void *p = b->data + b->used;
  b->used += size;
  return p;
}

static void arena_free_one(void *data, void *p) {
  (void)data;
  (void)p; /* everything goes at the next reset */
}

void lstmd_arena_init(struct lstmd_arena *a) { *a = (struct lstmd_arena){0}; }

ProtobufCAllocator *lstmd_arena_allocator(struct lstmd_arena *a) {
  a->allocator = (ProtobufCAllocator){.alloc = arena_alloc, .free = arena_free_one,
                                      .allocator_data = a};
  return &a->allocator;
}

void lstmd_arena_reset(struct lstmd_arena *a) {
  struct lstmd_arena_block *b = a->blocks, *keep = NULL;
  while (b) {
    struct lstmd_arena_block *next = b->next;
    if (!next && b->cap == kBlock) keep = b; /* the oldest, if it is an ordinary block */
    else free(b);
    b = next;
  }
  if (keep) keep->used = 0;
  a->blocks = keep;
}

void lstmd_arena_free(struct lstmd_arena *a) {
  for (struct lstmd_arena_block *b = a->blocks, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  a->blocks = NULL;
}
