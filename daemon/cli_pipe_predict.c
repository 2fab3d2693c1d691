/* cli_pipe_predict.c — `lstmd pipe-predict`: the step time pipelines of S GPUs should reach,
 * predicted on one GPU. Each stage's F, B and W items are timed on this GPU (one cuDNN call per
 * time chunk, gpu_stage_times.h), and lstmd's schedule simulator (pipe_schedule.h, the one every
 * rank runs) turns the per-stage costs into a makespan for the wavefront over K chunks. It is a
 * prediction, labelled so, until a machine with several GPUs runs the pipeline itself; stage
 * transfers count only as --latency-ms per message.
 *
 *   lstmd pipe-predict [--stages 2,4,8] [--layers 8 --hidden 1024 --embed 64 --vocab 256]
 *                      [--seq-len 256 --batch 64 --chunks 16] [--precision bf16] [--reps 5]
 *                      [--latency-ms 0] [--device 0] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kernels/check.h"
#include "kernels/cuda/convert_cuda.h"
#include "worker/engine/gpu_backend.h"
#include "worker/engine/gpu_stage_times.h"
#include "worker/engine/pipe_schedule.h"
#include "worker/model/model.h"
#include "worker/train/train_config.h"

static const char *const kCmd = "pipe-predict";

struct args {
  long layers, hidden, embed, vocab, seq_len, batch, chunks, reps, device;
  double latency_ms;
  int dtype, tf32;
  int stages[8], n_stages;
};

static int parse_stages(const char *text, struct args *a) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", text);
  a->n_stages = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    long s;
    if (a->n_stages == 8) {
      lstmd_errorf("%s: --stages %s: at most 8 stage counts", kCmd, text);
      return 2;
    }
    if (lstmd_opt_long(kCmd, "stages", tok, 1, LSTMD_MAX_LAYERS, &s)) return 2; /* says why */
    a->stages[a->n_stages++] = (int)s;
  }
  if (!a->n_stages) lstmd_errorf("%s: --stages: a comma-separated list of stage counts", kCmd);
  return a->n_stages ? 0 : 2;
}

/* Fills a from the options: 0; 2 after a message; -1 after --help printed the usage. */
static int parse(int argc, char **argv, struct args *a) {
  const char *v[12] = {0};
  const char *names[] = {"layers", "hidden", "embed", "vocab", "seq-len", "batch", "chunks",
                         "reps", "device", "latency-ms", "precision", "stages"};
  struct lstmd_opt opts[13];
  for (int i = 0; i < 12; i++) opts[i] = (struct lstmd_opt){.name = names[i], .value = &v[i]};
  int help = 0;
  opts[12] = (struct lstmd_opt){.name = "help", .flag = &help};
  int rc = lstmd_parse_opts(kCmd, argc, argv, 2, opts, 13);
  if (rc) return rc;
  if (help) {
    printf("usage: lstmd pipe-predict [--stages 2,4,8] [--layers 8 --hidden 1024 --embed 64\n"
           "         --vocab 256] [--seq-len 256 --batch 64 --chunks 16] [--precision bf16]\n"
           "         [--reps 5] [--latency-ms 0] [--device 0]\n"
           "Times each pipeline stage's F, B and W items per time chunk on one GPU and predicts\n"
           "the step time of the K-chunk wavefront on S GPUs (a prediction, not a measurement).\n");
    return -1;
  }
  *a = (struct args){8, 1024, 64, 256, 256, 64, 16, 5, 0, 0.0, LSTMD_DT_BF16, 0, {2, 4, 8}, 3};
  long *longs[] = {&a->layers, &a->hidden, &a->embed, &a->vocab, &a->seq_len, &a->batch,
                   &a->chunks, &a->reps, &a->device};
  const long hi[] = {LSTMD_MAX_LAYERS, 16384, 16384, 1 << 20, 1 << 20, 1 << 16, 1 << 12, 1000, 64};
  for (int i = 0; i < 9; i++)
    if (v[i] && lstmd_opt_long(kCmd, names[i], v[i], i == 8 ? 0 : 1, hi[i], longs[i])) return 2;
  if (v[9] && lstmd_opt_double(kCmd, "latency-ms", v[9], 0.0, 1e6, &a->latency_ms)) return 2;
  if (v[10]) {
    const char *p = v[10];
    if (!strcmp(p, "fp32") || !strcmp(p, "tf32")) a->dtype = LSTMD_DT_F32, a->tf32 = !strcmp(p, "tf32");
    else if (!strcmp(p, "bf16")) a->dtype = LSTMD_DT_BF16;
    else if (!strcmp(p, "fp16")) a->dtype = LSTMD_DT_F16;
    else {
      lstmd_errorf("%s: --precision %s: one of fp32, tf32, bf16, fp16", kCmd, p);
      return 2;
    }
  }
  if (v[11] && parse_stages(v[11], a)) return 2;
  if (a->seq_len % a->chunks) {
    lstmd_errorf("%s: --seq-len %ld is not a multiple of --chunks %ld", kCmd, a->seq_len, a->chunks);
    return 2;
  }
  for (int i = 0; i < a->n_stages; i++)
    if (a->stages[i] > a->layers) {
      lstmd_errorf("%s: --stages %d: more stages than --layers %ld", kCmd, a->stages[i], a->layers);
      return 2;
    }
  return 0;
}

/* The simulator's makespan (ms) of the wavefront over K chunks with the stages' costs. */
static int predict(const struct args *a, int S, const double *ms, double *makespan, double *bubble) {
  struct lstmd_pipe_cost cost[LSTMD_PIPE_MAX_STAGES];
  for (int s = 0; s < S; s++) cost[s] = (struct lstmd_pipe_cost){ms[3 * s], ms[3 * s + 1], ms[3 * s + 2]};
  const struct lstmd_pipe_sim_config cfg = {.stages = S, .units = 1, .chunks = (int)a->chunks,
                                            .split = 1, .lat = a->latency_ms, .cost = cost,
                                            .cost_count = S};
  struct lstmd_pipe_sim_result r;
  if (lstmd_pipe_predict(LSTMD_PIPE_WAVEFRONT, &cfg, &r)) {
    char why[512];
    lstmd_errorf("%s: %s", kCmd, lstmd_pipe_describe(&r, NULL, NULL, why, sizeof why));
    return LSTMD_EINVAL;
  }
  *makespan = r.makespan;
  *bubble = r.bubble;
  return LSTMD_OK;
}

int lstmd_cmd_pipe_predict(int argc, char **argv) {
  struct args a;
  int rc = parse(argc, argv, &a);
  if (rc) return rc < 0 ? 0 : rc;
  const struct lstmd_gpu_backend *gpu = lstmd_gpu_backend();
  char why[256] = "", device[256] = "";
  if (!gpu || gpu->probe(why, sizeof why) <= 0) {
    lstmd_errorf("%s: needs a GPU: %s", kCmd, gpu ? why : lstmd_gpu_backend_why());
    return 1;
  }
  int cc = 0;
  gpu->device_info((int)a.device, device, sizeof device, &cc);
  const struct lstmd_model_shape shape = {.kind = LSTMD_MODEL_TEXT, .vocab = (int)a.vocab,
                                          .embed = (int)a.embed, .hidden = (int)a.hidden,
                                          .layers = (int)a.layers};
  const char *prec = a.dtype == LSTMD_DT_BF16 ? "bf16" : a.dtype == LSTMD_DT_F16 ? "fp16"
                     : a.tf32 ? "tf32" : "fp32";
  printf("lstmd pipe-predict on %s: E%ld H%ld L%ld V%ld, T=%ld, %ld columns per replica, K=%ld "
         "chunks, %s; per-item medians of %ld passes\n", device, a.embed, a.hidden, a.layers,
         a.vocab, a.seq_len, a.batch, a.chunks, prec, a.reps);
  printf("PREDICTION: lstmd's schedule simulator on per-chunk cuDNN times measured on this one "
         "GPU; stage transfers counted as %.3f ms per message\n", a.latency_ms);
  printf("%-7s %-24s %-26s %11s %7s %13s %8s\n", "stages", "layers per stage",
         "slowest stage F/B/W ms", "step ms", "bubble", "tokens/s", "vs 1 GPU");
  double one_gpu = 0.0;
  int list[9] = {1};
  for (int i = 0; i < a.n_stages; i++) list[i + 1] = a.stages[i];
  for (int i = 0; i <= a.n_stages; i++) {
    const int S = list[i];
    double ms[3 * LSTMD_MAX_LAYERS], makespan = 0.0, bubble = 0.0;
    const struct lstmd_stage_times_config c = {
        .stages = S, .steps = (int)a.seq_len, .chunks = (int)a.chunks, .batch = (int)a.batch,
        .dtype = a.dtype, .allow_tf32 = a.tf32, .reps = (int)a.reps, .device = (int)a.device};
    if ((rc = gpu->stage_times(&shape, &c, ms)) || (rc = predict(&a, S, ms, &makespan, &bubble)))
      return lstmd_exit_code(rc);
    int slowest = 0, counts[LSTMD_MAX_LAYERS];
    char layers[64] = "";
    if (lstmd_stage_layer_counts("", S, (int)a.layers, counts, why, sizeof why)) { /* parse()d */
      lstmd_errorf("%s: %s", kCmd, why);
      return 2;
    }
    for (int s = 0; s < S; s++) {
      if (ms[3 * s] + ms[3 * s + 1] + ms[3 * s + 2] >
          ms[3 * slowest] + ms[3 * slowest + 1] + ms[3 * slowest + 2])
        slowest = s;
      const size_t len = strlen(layers);
      snprintf(layers + len, sizeof layers - len, "%s%d", s ? "," : "", counts[s]);
    }
    if (S == 1) one_gpu = makespan;
    char fbw[64];
    snprintf(fbw, sizeof fbw, "%.3f/%.3f/%.3f", ms[3 * slowest], ms[3 * slowest + 1], ms[3 * slowest + 2]);
    printf("%-7d %-24s %-26s %11.2f %7.3f %13.0f %7.2fx\n", S, layers, fbw, makespan, bubble,
           (double)a.seq_len * a.batch / (makespan / 1000.0), one_gpu / makespan);
  }
  return 0;
}
