/* tb_events.h — TensorBoard event files: TFRecord framing (little-endian length, masked CRC-32C
 * of the length, the serialized Event, masked CRC-32C of it), a first event carrying
 * file_version "brain.Event:2", then Summary scalars (simple_value). The few protobuf fields
 * needed are encoded here by hand (layout in REFERENCE.md §4, checked by test_formats against a
 * known record and by test_tensorboard with TensorBoard's own reader). */
#ifndef LSTMD_TB_EVENTS_H
#define LSTMD_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct lstmd_tb {
  FILE *f;
};

/* Creates <run_dir>/events.out.tfevents.<unix time>.<host>.<pid> (exclusively: a name already
 * taken, by an earlier open of this process in the same second, gets a suffix .1, .2, ...;
 * tb_events.c) and writes the file_version
 * event, then a SessionLog START event at `start_step`: 0 for a fresh run, resume step + 1 for
 * a resumed one. TensorBoard drops, on every START after a run's first, the points of the run's
 * earlier event files at that step or later: what a crashed or rolled-back run logged past the
 * checkpoint it resumed from (metrics.jsonl drops those records too). Without it, TensorBoard
 * showed both the old and the resumed values at those steps. Returns 0 or LSTMD_EIO (message
 * printed). */
int lstmd_tb_open(struct lstmd_tb *tb, const char *run_dir, long start_step);
/* One event at `step` holding n scalars tags[i] = values[i]; flushed. */
void lstmd_tb_scalars(struct lstmd_tb *tb, long step, int n, const char *const *tags,
                      const float *values);
/* One event at `step` holding a text summary: a Summary.Value with `tag`, metadata plugin_data
 * {plugin_name "text"} and a scalar DT_STRING tensor of the n bytes (TensorBoard's text
 * plugin; REFERENCE.md §4); flushed. Nothing is written if the buffers cannot be allocated. */
void lstmd_tb_text(struct lstmd_tb *tb, long step, const char *tag, const char *text, size_t n);
void lstmd_tb_close(struct lstmd_tb *tb);

/* Encodes one TFRecord of an Event {wall_time, step, file_version or scalars} into buf
 * (capacity cap). Returns the record's length, or 0 if it does not fit. For tests. */
size_t lstmd_tb_encode_record(uint8_t *buf, size_t cap, double wall_time, long step,
                              const char *file_version, int n, const char *const *tags,
                              const float *values);
/* Encodes one TFRecord of an Event {wall_time, step, session_log {status START}}. For tests. */
size_t lstmd_tb_encode_session_start(uint8_t *buf, size_t cap, double wall_time, long step);

#endif
