/* tb_events.c — TensorBoard event-file writer (see tb_events.h). */
#define _GNU_SOURCE
#include "tb_events.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "kernels/status.h"
#include "worker/data/dataset.h" /* lstmd_crc32c */

static uint32_t masked_crc(const void *p, size_t n) {
  uint32_t crc = lstmd_crc32c(0, p, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* A tiny protobuf encoder over a bounded buffer; `ok` drops to 0 on overflow. */
struct pb {
  uint8_t *p;
  size_t n, cap;
  int ok;
};

static void put(struct pb *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    b->ok = 0;
    return;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}
static void put_varint(struct pb *b, uint64_t v) {
  uint8_t tmp[10];
  int k = 0;
  do {
    tmp[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  put(b, tmp, (size_t)k);
}
static void put_tag(struct pb *b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }
static void put_bytes_field(struct pb *b, int field, const void *data, size_t n) {
  put_tag(b, field, 2);
  put_varint(b, n);
  put(b, data, n);
}
static void put_le(struct pb *b, uint64_t v, int bytes) {
  uint8_t tmp[8];
  for (int i = 0; i < bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
  put(b, tmp, (size_t)bytes);
}

/* Event.wall_time (1: double) and Event.step (2: int64; left out when 0, proto3's default). */
static void put_wall_step(struct pb *e, double wall, long step) {
  uint64_t bits;
  memcpy(&bits, &wall, sizeof bits);
  put_tag(e, 1, 1);
  put_le(e, bits, 8);
  if (step) {
    put_tag(e, 2, 0);
    put_varint(e, (uint64_t)step);
  }
}

/* The TFRecord framing of one serialized Event: length, its masked CRC, data, its masked CRC. */
static void put_record(struct pb *r, const uint8_t *event, size_t n) {
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)n >> (8 * i));
  put(r, len, 8);
  put_le(r, masked_crc(len, 8), 4);
  put(r, event, n);
  put_le(r, masked_crc(event, n), 4);
}

size_t lstmd_tb_encode_record(uint8_t *buf, size_t cap, double wall_time, long step,
                              const char *file_version, int n, const char *const *tags,
                              const float *values) {
  uint8_t event[4096], summary[3584], value[256];
  struct pb e = {event, 0, sizeof event, 1};
  put_wall_step(&e, wall_time, step);
  if (file_version) put_bytes_field(&e, 3, file_version, strlen(file_version));
  if (n > 0) {
    struct pb s = {summary, 0, sizeof summary, 1};
    for (int i = 0; i < n; i++) {
      struct pb v = {value, 0, sizeof value, 1};
      put_bytes_field(&v, 1, tags[i], strlen(tags[i])); /* Summary.Value.tag */
      uint32_t fbits;
      memcpy(&fbits, &values[i], sizeof fbits);
      put_tag(&v, 2, 5); /* Summary.Value.simple_value: float */
      put_le(&v, fbits, 4);
      s.ok &= v.ok;
      put_bytes_field(&s, 1, value, v.n); /* Summary.value */
    }
    e.ok &= s.ok;
    put_bytes_field(&e, 5, summary, s.n); /* Event.summary */
  }
  struct pb r = {buf, 0, cap, e.ok};
  put_record(&r, event, e.n);
  return r.ok ? r.n : 0;
}

/* Event.session_log = 7: SessionLog {status = 1: START (1)} (tensorboard/compat/proto/event.proto).
 * TensorBoard's accumulators purge, on such an event, every point already read for the run at
 * this event's step or later (the plugin accumulator that `tensorboard` serves from does so for
 * every START but the run's first). */
size_t lstmd_tb_encode_session_start(uint8_t *buf, size_t cap, double wall_time, long step) {
  uint8_t event[64];
  struct pb e = {event, 0, sizeof event, 1};
  put_wall_step(&e, wall_time, step);
  const uint8_t session_log[2] = {0x08, 0x01}; /* SessionLog.status = START */
  put_bytes_field(&e, 7, session_log, sizeof session_log);
  struct pb r = {buf, 0, cap, e.ok};
  put_record(&r, event, e.n);
  return r.ok ? r.n : 0;
}

static double wall_now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

int lstmd_tb_open(struct lstmd_tb *tb, const char *run_dir, long start_step) {
  char host[256] = "host", path[4096];
  gethostname(host, sizeof host - 1);
  /* The name is TensorBoard's: time, host, pid. One process may open several in the same run dir
   * within a second: `lstmd serve`'s rank 0 runs every job, and a job preempted and resumed in
   * the second it started (a short job of a higher priority) opened its second attempt's file
   * under the first one's name; "wb" emptied it, and TensorBoard lost the first attempt's points
   * (metrics.jsonl kept them). So the file is created exclusively, and a name already taken gets
   * a suffix .1, .2, ...: it sorts after the plain name, in the order TensorBoard reads them. */
  int n0 = snprintf(path, sizeof path, "%s/events.out.tfevents.%010ld.%s.%d", run_dir,
                    (long)time(NULL), host, (int)getpid());
  int fd = -1;
  errno = n0 > 0 && (size_t)n0 < sizeof path - 8 ? 0 : ENAMETOOLONG; /* no try: say why */
  for (int k = 0; k < 1000 && !errno; k++) {
    if (k) snprintf(path + n0, sizeof path - (size_t)n0, ".%d", k);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
    errno = 0;
  }
  if (fd < 0 && !errno) errno = EEXIST; /* 1000 names taken */
  tb->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (!tb->f) {
    lstmd_errorf("%s: cannot create the TensorBoard event file: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return LSTMD_EWRITE;
  }
  uint8_t rec[256];
  size_t n = lstmd_tb_encode_record(rec, sizeof rec, wall_now(), 0, "brain.Event:2", 0, NULL, NULL);
  fwrite(rec, 1, n, tb->f);
  n = lstmd_tb_encode_session_start(rec, sizeof rec, wall_now(), start_step);
  fwrite(rec, 1, n, tb->f);
  fflush(tb->f);
  return LSTMD_OK;
}

void lstmd_tb_scalars(struct lstmd_tb *tb, long step, int n, const char *const *tags,
                      const float *values) {
  if (!tb->f) return;
  uint8_t rec[4096];
  size_t len = lstmd_tb_encode_record(rec, sizeof rec, wall_now(), step, NULL, n, tags, values);
  if (len) fwrite(rec, 1, len, tb->f);
  fflush(tb->f);
}

/* Summary.Value {tag = 1, tensor = 8: TensorProto {dtype = 1: DT_STRING (7), tensor_shape = 2:
 * {} (a scalar), string_val = 8: the text}, metadata = 9: SummaryMetadata {plugin_data = 1:
 * {plugin_name = 1: "text"}}} (tensorboard/compat/proto: summary.proto, tensor.proto,
 * types.proto), in an Event {wall_time, step, summary = 5}, framed as a TFRecord. */
void lstmd_tb_text(struct lstmd_tb *tb, long step, const char *tag, const char *text, size_t n) {
  if (!tb->f) return;
  const size_t cap = n + strlen(tag) + 256;
  uint8_t *mem = malloc(5 * cap);
  if (!mem) return;
  uint8_t *tensor = mem, *value = mem + cap, *summary = mem + 2 * cap, *event = mem + 3 * cap,
          *rec = mem + 4 * cap;
  struct pb t = {tensor, 0, cap, 1};
  put_tag(&t, 1, 0);
  put_varint(&t, 7); /* DT_STRING */
  put_bytes_field(&t, 2, "", 0);
  put_bytes_field(&t, 8, text, n);
  uint8_t meta[32], plugin[16];
  struct pb pl = {plugin, 0, sizeof plugin, 1}, md = {meta, 0, sizeof meta, 1};
  put_bytes_field(&pl, 1, "text", 4);
  put_bytes_field(&md, 1, plugin, pl.n);
  struct pb v = {value, 0, cap, t.ok && pl.ok && md.ok};
  put_bytes_field(&v, 1, tag, strlen(tag));
  put_bytes_field(&v, 8, tensor, t.n);
  put_bytes_field(&v, 9, meta, md.n);
  struct pb s = {summary, 0, cap, v.ok};
  put_bytes_field(&s, 1, value, v.n);
  struct pb e = {event, 0, cap, s.ok};
  put_wall_step(&e, wall_now(), step);
  put_bytes_field(&e, 5, summary, s.n);
  struct pb r = {rec, 0, cap, e.ok};
  put_record(&r, event, e.n);
  if (r.ok) fwrite(rec, 1, r.n, tb->f);
  fflush(tb->f);
  free(mem);
}

void lstmd_tb_close(struct lstmd_tb *tb) {
  if (tb->f) fclose(tb->f);
  tb->f = NULL;
}
