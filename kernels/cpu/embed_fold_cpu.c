/* embed_fold_cpu.c — the folded embedding of embed_fold_cpu.h: two small GEMMs on [V,·] tables
 * and one pass over the tokens each way. */
#include "embed_fold_cpu.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "dense_cpu.h"
#include "lstm_cpu.h"

int lstmd_cpu_fold_wanted(int N, int V) {
  const char *env = getenv("LSTMD_EMBED_FOLD");
  if (env && strcmp(env, "0") && strcmp(env, "1") && strcmp(env, "auto")) return -1;
  if (env && !strcmp(env, "0")) return 0;
  if (env && !strcmp(env, "1")) return 1;
  return lstmd_cpu_fold_auto(N, V);
}

/* The table costs V rows of the projection GEMM and a V·G scratch; the unfolded projection,
 * input gradient and dW_ih each cost N rows. Fold where N is at least 4 V. */
int lstmd_cpu_fold_auto(int N, int V) { return (long)N >= 4L * V; }

void lstmd_cpu_fold_table(int V, int E, int G, const float *emb, const float *w_ih, float *table) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, V, G, E, 1.0f, emb, E, w_ih, E, 0.0f, table,
              G);
}

void lstmd_cpu_fold_gather(int N, int G, const int32_t *ids, const float *table, float *gates) {
  for (int n = 0; n < N; n++)
    memcpy(gates + (size_t)n * G, table + (size_t)ids[n] * G, (size_t)G * sizeof(float));
}

void lstmd_cpu_fold_forward(int N, int V, int E, int G, const int32_t *ids, const float *emb,
                            const float *w_ih, float *table, float *gates) {
  lstmd_cpu_fold_table(V, E, G, emb, w_ih, table);
  lstmd_cpu_fold_gather(N, G, ids, table, gates);
}

void lstmd_cpu_fold_sums_add(int N, int G, const int32_t *ids, const float *dgates, float *sums) {
  lstmd_cpu_embedding_backward(N, G, dgates, ids, sums); /* the same scatter-add as E's */
}

void lstmd_cpu_fold_apply(int V, int E, int G, const float *sums, const float *emb,
                          const float *w_ih, float *dw_ih, float *db_ih, float *db_hh, float *demb) {
  lstmd_cpu_add_bias_grads(V, G, sums, db_ih, db_hh);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, G, E, V, 1.0f, sums, G, emb, E, 1.0f, dw_ih,
              E);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, V, E, G, 1.0f, sums, G, w_ih, E, 1.0f, demb,
              E);
}

void lstmd_cpu_fold_backward(int N, int V, int E, int G, const int32_t *ids, const float *dgates,
                             const float *emb, const float *w_ih, float *sums, float *dw_ih,
                             float *db_ih, float *db_hh, float *demb) {
  memset(sums, 0, (size_t)V * G * sizeof(float));
  lstmd_cpu_fold_sums_add(N, G, ids, dgates, sums);
  lstmd_cpu_fold_apply(V, E, G, sums, emb, w_ih, dw_ih, db_ih, db_hh, demb);
}
