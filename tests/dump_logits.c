/* dump_logits.c — test helper: loads an lstmd checkpoint, runs one forward pass (no dropout,
 * zero initial state, no backward) over T×B deterministic pseudo-random inputs, and writes the
 * inputs and the head output as raw little-endian arrays, for comparison against PyTorch.
 *
 * usage: dump_logits CKPT T B SEED INPUTS_OUT OUTPUT_OUT
 *   text:   INPUTS_OUT = int32 ids [T,B] (sequence-major), OUTPUT_OUT = float32 logits [T,B,V]
 *   series: INPUTS_OUT = float32 x [T,B,W],                OUTPUT_OUT = float32 preds  [T,B,K]
 * Prints one line to stdout: "kind=text|series T=.. B=.. V=.. W=.. K=.. H=.. L=.. E=..". */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"
#include "worker/io/checkpoint.h"
#include "worker/model/model.h"
#include "worker/model/rng.h"

static int write_file(const char *path, const void *data, size_t bytes) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "dump_logits: cannot create %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t w = bytes ? fwrite(data, 1, bytes, f) : 0;
  int bad = w != bytes;
  if (fclose(f) != 0) bad = 1;
  if (bad) {
    fprintf(stderr, "dump_logits: cannot write %s\n", path);
    return -1;
  }
  return 0;
}

static long parse_long(const char *s, const char *what, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi) {
    fprintf(stderr, "dump_logits: bad %s '%s'\n", what, s);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: dump_logits CKPT T B SEED INPUTS_OUT OUTPUT_OUT\n");
    return 2;
  }
  const char *ckpt = argv[1];
  const int T = (int)parse_long(argv[2], "T", 1, 100000);
  const int B = (int)parse_long(argv[3], "B", 1, 100000);
  const uint64_t seed = (uint64_t)parse_long(argv[4], "SEED", 0, 0x7fffffffL);

  struct lstmd_model *m = NULL;
  struct lstmd_data_meta meta;
  int rc = lstmd_checkpoint_load_model(ckpt, &m, &meta);
  if (rc) {
    fprintf(stderr, "dump_logits: cannot load %s: %s\n", ckpt, lstmd_strerror(rc));
    return 1;
  }
  const struct lstmd_model_shape *s = &m->shape;
  struct lstmd_workspace *ws = NULL;
  rc = lstmd_workspace_create(m, T, B, 0.0f, &ws);
  if (rc) {
    fprintf(stderr, "dump_logits: workspace: %s\n", lstmd_strerror(rc));
    lstmd_model_destroy(m);
    return 1;
  }
  lstmd_workspace_reset_state(ws);
  struct lstmd_batch *b = lstmd_workspace_batch(ws);
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, seed, 12345);

  const int text = s->kind == LSTMD_MODEL_TEXT;
  const size_t TB = (size_t)T * B;
  size_t out_per = text ? (size_t)s->vocab : (size_t)s->horizon;
  int status = 0;
  if (text) {
    /* [t][b]; targets are the next input of the same stream (any valid id would do). */
    for (size_t i = 0; i < TB; i++) b->ids[i] = (int32_t)lstmd_rng_below(&rng, (uint64_t)s->vocab);
    for (int t = 0; t < T; t++)
      for (int j = 0; j < B; j++)
        b->targets[(size_t)t * B + j] =
            t + 1 < T ? b->ids[(size_t)(t + 1) * B + j] : (int32_t)lstmd_rng_below(&rng, s->vocab);
    status |= write_file(argv[5], b->ids, TB * sizeof(int32_t));
  } else {
    const size_t nx = TB * (size_t)s->width, ny = TB * (size_t)s->horizon;
    for (size_t i = 0; i < nx; i++) b->x[i] = lstmd_rng_normal(&rng);
    for (size_t i = 0; i < ny; i++) b->y[i] = lstmd_rng_normal(&rng);
    status |= write_file(argv[5], b->x, nx * sizeof(float));
  }
  double loss = lstmd_model_step(m, ws, 0.0f, NULL, 0);
  const float *out = lstmd_workspace_output(ws);
  status |= write_file(argv[6], out, TB * out_per * sizeof(float));
  printf("kind=%s T=%d B=%d V=%d W=%d K=%d H=%d L=%d E=%d loss=%.9g\n", text ? "text" : "series",
         T, B, s->vocab, s->width, s->horizon, s->hidden, s->layers, s->embed, loss);
  lstmd_workspace_destroy(ws);
  lstmd_model_destroy(m);
  return status ? 1 : 0;
}
