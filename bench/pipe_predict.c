/* pipe_predict.c — the bubble and step time a pipeline schedule should reach, from measured
 * per-item costs: lstmd's own list simulator (worker/engine/pipe_schedule.h) run on them. Used by
 * bench/bench_pipeline.sh to set each measured bubble beside its prediction.
 *
 *   pipe_predict KIND STAGES UNITS CHUNKS LAT  F0 B0 W0  [F1 B1 W1 ...]
 *
 * KIND: wavefront | gpipe | 1f1b; costs in any time unit, one (F, B, W) triple for every stage or
 * one for all; LAT the added cost of each message between stages. Prints
 * "makespan M bubble PHI formula PHI0" (PHI0: the closed form (S−1)/(N+S−1) for uniform costs). */
#include <stdio.h>
#include <stdlib.h>

#include "worker/engine/pipe_schedule.h"

int main(int argc, char **argv) {
  if (argc < 9 || (argc - 6) % 3 != 0) {
    fprintf(stderr, "usage: pipe_predict KIND STAGES UNITS CHUNKS LAT F B W [F B W ...]\n");
    return 2;
  }
  enum lstmd_pipe_kind kind;
  if (lstmd_pipe_kind_parse(argv[1], &kind)) {
    fprintf(stderr, "pipe_predict: unknown schedule '%s'\n", argv[1]);
    return 2;
  }
  const int S = atoi(argv[2]), U = atoi(argv[3]), K = atoi(argv[4]);
  const int n = (argc - 6) / 3;
  if (n != 1 && n != S) {
    fprintf(stderr, "pipe_predict: give one cost triple or one per stage (%d)\n", S);
    return 2;
  }
  struct lstmd_pipe_cost cost[LSTMD_PIPE_MAX_STAGES];
  for (int i = 0; i < n; i++)
    cost[i] = (struct lstmd_pipe_cost){atof(argv[6 + 3 * i]), atof(argv[7 + 3 * i]),
                                       atof(argv[8 + 3 * i])};
  const struct lstmd_pipe_sim_config cfg = {.stages = S, .units = U, .chunks = K,
                                            .split = 1, .lat = atof(argv[5]), .cost = cost,
                                            .cost_count = n};
  struct lstmd_pipe_sim_result r;
  if (lstmd_pipe_predict(kind, &cfg, &r)) {
    char why[512];
    fprintf(stderr, "pipe_predict: %s\n", lstmd_pipe_describe(&r, NULL, NULL, why, sizeof why));
    return 1;
  }
  printf("makespan %.6g bubble %.4f formula %.4f\n", r.makespan, r.bubble,
         (double)(S - 1) / (U * K + S - 1));
  return 0;
}
