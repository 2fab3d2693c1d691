/* arena.h — a bump allocator for unpacked protobuf messages.
 *
 * protobuf-c's unpack makes one malloc per sub-message, string and repeated field (a ListJobs
 * reply of five jobs is dozens), and free_unpacked as many frees; with 64 busy clients that
 * churn was the largest user-space cost of a status round trip. An arena hands protobuf-c
 * pieces of a few big blocks instead and forgets them all at once: a message unpacked with
 * lstmd_arena_allocator() is never freed on its own, it lives until the next lstmd_arena_reset
 * or lstmd_arena_free. Not thread-safe: one arena per thread or connection. */
#ifndef LSTMD_ARENA_H
#define LSTMD_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

struct lstmd_arena_block {
  struct lstmd_arena_block *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

struct lstmd_arena {
  struct lstmd_arena_block *blocks; /* newest first; reset keeps the oldest if it is 64 KiB */
  ProtobufCAllocator allocator;
};

/* Empty; a zero-initialised arena is empty too. */
void lstmd_arena_init(struct lstmd_arena *a);
/* The allocator to pass to lstmd__*__unpack (its free does nothing). */
ProtobufCAllocator *lstmd_arena_allocator(struct lstmd_arena *a);
/* Forgets every allocation; keeps the first block (up to 64 KiB) for the next message. */
void lstmd_arena_reset(struct lstmd_arena *a);
void lstmd_arena_free(struct lstmd_arena *a);

#endif
