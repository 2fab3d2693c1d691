/* fuzz_ckpt.c — libFuzzer target for the fp32 checkpoint loader (worker/io/checkpoint_load.c over
 * safetensors.c): the input is written to a memfd and loaded by path, as `lstmd eval`, `sample`
 * and `train --resume` load a file. Invariants (abort() on a violation): the loaders return OK or
 * a bad-input status (EFORMAT, EIO; ENOMEM for a mutated shape too large for the machine), never
 * anything else; a model they accept has the parameter count its shape says and runs one forward
 * step (a read past a buffer there is a crash under ASan), and the training state (optimizer
 * moments, progress, config) loads into it or is refused the same way. Seeds: tests/fuzz/
 * corpus-ckpt (make_ckpt_corpus.sh). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/status.h"
#include "worker/io/checkpoint.h"
#include "worker/model/optim.h"
#include "fuzz_target.h"

static size_t g_loaded, g_rejected, g_train_loaded[2]; /* [with carried state] */

static int bad_input(int rc) { return rc == LSTMD_EFORMAT || rc == LSTMD_EIO || rc == LSTMD_ENOMEM; }

/* The training state into m: optimizer moments (AdamW, as most runs), progress and the config
 * text; with_state: the carried (h, c) of a stream-order run too, for the seeds' batch of 2. */
static void load_train(struct lstmd_model *m, const char *path, int with_state) {
  const struct lstmd_model_shape *s = &m->shape;
  const struct lstmd_optim_config oc = {.algo = LSTMD_OPTIM_ADAMW, .lr = 1e-3f, .beta1 = 0.9f,
                                        .beta2 = 0.999f, .eps = 1e-8f};
  struct lstmd_optim *o;
  if (lstmd_optim_create(&oc, m->n_params, &o) != LSTMD_OK) return;
  struct lstmd_train_progress progress;
  memset(&progress, 0, sizeof progress);
  const size_t state = (size_t)s->layers * 2 * s->hidden;
  if (with_state && s->hidden <= 256) {
    progress.state_batch = 2;
    progress.state_h = malloc(state * sizeof(float));
    progress.state_c = malloc(state * sizeof(float));
  }
  char *config = NULL;
  fuzz_quiet();
  const int rc = lstmd_checkpoint_load_train(path, m, o, &progress, &config);
  fuzz_loud();
  if (rc == LSTMD_OK) g_train_loaded[with_state]++;
  else if (!bad_input(rc) && rc != LSTMD_ECONFIG) abort(); /* ECONFIG: not an AdamW checkpoint */
  free(config);
  free(progress.state_h);
  free(progress.state_c);
  lstmd_optim_destroy(o);
}

static void check_model(struct lstmd_model *m, const char *path) {
  struct lstmd_model *fresh;
  if (lstmd_model_create(&m->shape, &fresh) != LSTMD_OK) abort(); /* the shape was accepted */
  if (fresh->n_params != m->n_params || fresh->n_tensors != m->n_tensors) abort();
  lstmd_model_destroy(fresh);
  const struct lstmd_model_shape *s = &m->shape;
  if (s->kind != LSTMD_MODEL_CLASSIFY && s->hidden <= 256 && s->vocab <= 256 && s->horizon <= 256) {
    struct lstmd_workspace *ws; /* one forward of two steps, as sample and eval run it */
    if (lstmd_workspace_create(m, 2, 1, 0.0f, &ws) == LSTMD_OK) {
      lstmd_workspace_reset_state(ws);
      struct lstmd_batch *b = lstmd_workspace_batch(ws);
      for (int i = 0; i < 2; i++) {
        if (s->kind == LSTMD_MODEL_TEXT) b->ids[i] = s->vocab - 1, b->targets[i] = 0;
        for (int w = 0; w < b->width; w++) b->x[i * b->width + w] = 0.5f;
        for (int k = 0; k < b->horizon; k++) b->y[i * b->horizon + k] = 0.25f;
      }
      lstmd_model_step(m, ws, 0.0f, NULL, 1);
      lstmd_workspace_destroy(ws);
    }
  }
  /* The resume path, as data.order=shuffle (no carried state) and as stream (with it). */
  load_train(m, path, 0);
  load_train(m, path, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  const int fd = fuzz_input_file(data, size, path);
  struct lstmd_model *m = NULL;
  struct lstmd_data_meta meta;
  fuzz_quiet();
  const int rc = lstmd_checkpoint_load_model(path, &m, &meta);
  fuzz_loud();
  if (rc == LSTMD_OK) {
    g_loaded++;
    check_model(m, path);
    lstmd_model_destroy(m);
  } else if (bad_input(rc)) {
    g_rejected++;
    if (m) abort();
  } else {
    abort();
  }
  close(fd);
  return 0;
}

/* The seeds must hold files the loader accepts (with their training state) and files it rejects. */
int fuzz_target_seeds_ok(void) {
  if (g_loaded && g_rejected && g_train_loaded[0] && g_train_loaded[1]) return 1;
  fprintf(stderr, "fuzz_driver: the seeds miss an outcome (loaded %zu, with training state %zu, "
                  "with carried state %zu, rejected %zu)\n", g_loaded, g_train_loaded[0],
          g_train_loaded[1], g_rejected);
  return 0;
}

void fuzz_target_report(FILE *out) {
  fprintf(out, "%zu checkpoints loaded (training state: %zu, with carried state: %zu), %zu rejected",
          g_loaded, g_train_loaded[0], g_train_loaded[1], g_rejected);
}
