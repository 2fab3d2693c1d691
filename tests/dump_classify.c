/* dump_classify.c — test helper for the classifier's PyTorch parity (test_classify_parity.py):
 * builds a LSTMD_MODEL_CLASSIFY model with seeded parameters, writes them as safetensors under
 * lstmd's tensor names, runs lstmd_clf_forward on a padded batch whose padding holds random ids,
 * and writes the batch and the logits as raw little-endian arrays. With `series` the model is a
 * series classifier (one value per step into lstm.weight_ih_l0 [4H,1], no embedding) and the
 * batch holds random normal values, padding included.
 *
 * usage: dump_classify OUT_DIR BIDIRECTIONAL(0|1) POOL(last|mean|max) SEED [series]
 *   OUT_DIR/model.safetensors, ids.bin (int32 [T,B]) or x.bin (float32 [T,B]), lengths.bin
 *   (int32 [B]), logits.bin (float32 [B,C]); prints "V=.. E=.. H=.. L=.. C=.. T=.. B=..". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/blas_cpu.h"
#include "worker/io/safetensors.h"
#include "worker/model/classify.h"
#include "worker/model/rng.h"

enum { V = 11, E = 5, H = 6, L = 2, C = 4, T = 9, B = 5 };
static const int32_t kLen[B] = {9, 4, 1, 7, 2};

static int write_raw(const char *dir, const char *name, const void *data, size_t bytes) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int bad = fwrite(data, 1, bytes, f) != bytes;
  return fclose(f) != 0 || bad ? -1 : 0;
}

int main(int argc, char **argv) {
  const int series = argc == 6 && !strcmp(argv[5], "series");
  if (argc != 5 && !series) {
    fprintf(stderr, "usage: dump_classify OUT_DIR BIDIRECTIONAL POOL SEED [series]\n");
    return 2;
  }
  const char *dir = argv[1];
  int pool = !strcmp(argv[3], "last") ? LSTMD_POOL_LAST : !strcmp(argv[3], "mean") ? LSTMD_POOL_MEAN
           : !strcmp(argv[3], "max")  ? LSTMD_POOL_MAX : -1;
  if (pool < 0) return 2;
  lstmd_cpu_set_blas_threads(1);
  struct lstmd_model_shape s = {.kind = LSTMD_MODEL_CLASSIFY, .vocab = series ? 0 : V,
                                .embed = series ? 0 : E, .width = series, .hidden = H,
                                .layers = L, .classes = C, .bidirectional = atoi(argv[2]) != 0,
                                .pool = pool};
  struct lstmd_model *m;
  struct lstmd_clf_workspace *ws;
  if (lstmd_model_create(&s, &m) || lstmd_clf_workspace_create(m, T, B, &ws)) return 1;
  struct lstmd_rng rng;
  lstmd_rng_seed(&rng, strtoull(argv[4], NULL, 10), 0);
  lstmd_model_init_params(m, &rng);
  for (size_t i = 0; i < m->n_params; i++) m->params[i] *= 1.5f;
  struct lstmd_st_tensor st[LSTMD_MAX_TENSORS];
  for (int i = 0; i < m->n_tensors; i++) {
    const struct lstmd_tensor *t = &m->tensors[i];
    st[i] = (struct lstmd_st_tensor){.name = t->name, .data = m->params + t->offset,
                                     .rank = t->rank, .shape = {t->shape[0], t->shape[1]}};
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  if (lstmd_st_write(path, st, m->n_tensors, NULL, 0)) return 1;
  struct lstmd_batch *bt = lstmd_clf_workspace_batch(ws);
  for (int k = 0; k < T * B; k++) {
    if (bt->ids) bt->ids[k] = (int32_t)lstmd_rng_below(&rng, V);
    if (bt->x) bt->x[k] = lstmd_rng_normal(&rng);
  }
  for (int b = 0; b < B; b++) {
    bt->lengths[b] = kLen[b];
    bt->labels[b] = (int32_t)lstmd_rng_below(&rng, C);
  }
  double loss = lstmd_clf_forward(m, ws, 0.0f);
  if (loss != loss) return 1;
  if ((series ? write_raw(dir, "x.bin", bt->x, sizeof(float) * T * B)
              : write_raw(dir, "ids.bin", bt->ids, sizeof(int32_t) * T * B)) ||
      write_raw(dir, "lengths.bin", bt->lengths, sizeof(int32_t) * B) ||
      write_raw(dir, "logits.bin", lstmd_clf_workspace_logits(ws), sizeof(float) * B * C))
    return 1;
  printf("V=%d E=%d H=%d L=%d C=%d T=%d B=%d\n", V, E, H, L, C, T, B);
  lstmd_clf_workspace_destroy(ws);
  lstmd_model_destroy(m);
  return 0;
}
