/* fuzz_qckpt.c — libFuzzer target for the int8 model loader (worker/io/qcheckpoint.c): the input
 * is written to a memfd and loaded by path, as `lstmd eval` loads a file. Invariants (abort() on
 * a violation): the loader returns OK or a bad-input status (EFORMAT, EIO), never anything
 * else; a model it accepts has the weights its shape says and runs one forward step (a read past
 * a buffer there is a crash under ASan). Seeds: tests/fuzz/corpus-qckpt (make_loader_corpora.sh). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/status.h"
#include "worker/io/qcheckpoint.h"
#include "fuzz_target.h"

static size_t g_loaded, g_rejected;

static void check_model(const struct lstmd_qmodel *qm) {
  const struct lstmd_model_shape *s = &qm->shape;
  const int O = s->kind == LSTMD_MODEL_TEXT ? s->vocab : s->horizon;
  if (qm->head.N != O || qm->head.K != s->hidden) abort();
  for (int l = 0; l < s->layers; l++)
    if (qm->layer[l].hh.N != 4 * s->hidden || qm->layer[l].hh.K != s->hidden) abort();
  if (s->hidden > 256 || O > 256) return; /* a forward of a huge mutated shape only costs time */
  struct lstmd_qworkspace *ws;
  if (lstmd_qworkspace_create(qm, 2, 1, 1, &ws) != LSTMD_OK) return;
  lstmd_qworkspace_reset_state(ws);
  struct lstmd_batch *b = lstmd_qworkspace_batch(ws);
  for (int i = 0; i < 2; i++) {
    if (s->kind == LSTMD_MODEL_TEXT) b->ids[i] = s->vocab - 1, b->targets[i] = 0;
    for (int w = 0; w < b->width; w++) b->x[i * b->width + w] = 0.5f;
  }
  lstmd_qmodel_forward(qm, ws, 1);
  lstmd_qworkspace_destroy(ws);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  const int fd = fuzz_input_file(data, size, path);
  struct lstmd_qmodel *qm = NULL;
  struct lstmd_data_meta meta;
  fuzz_quiet();
  const int rc = lstmd_qcheckpoint_load(path, &qm, &meta);
  fuzz_loud();
  close(fd);
  if (rc == LSTMD_OK) {
    g_loaded++;
    check_model(qm);
    lstmd_qmodel_destroy(qm);
  } else if (rc == LSTMD_EFORMAT || rc == LSTMD_EIO) {
    g_rejected++;
    if (qm) abort();
  } else if (rc != LSTMD_ENOMEM) { /* a mutated shape may ask for more than the machine has */
    abort();
  }
  return 0;
}

/* The seeds must hold files the loader accepts and files it rejects. */
int fuzz_target_seeds_ok(void) {
  if (g_loaded && g_rejected) return 1;
  fprintf(stderr, "fuzz_driver: the seeds miss an outcome (loaded %zu, rejected %zu)\n", g_loaded,
          g_rejected);
  return 0;
}

void fuzz_target_report(FILE *out) {
  fprintf(out, "%zu int8 models loaded, %zu rejected", g_loaded, g_rejected);
}
