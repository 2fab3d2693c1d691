/* serve_job.c — job settings to a training config (see serve_job.h). */
#include "serve_job.h"

#include <stdio.h>
#include <string.h>

#include "kernels/status.h"
#include "access.h"
#include "config.h"

int lstmd_serve_job_config(Lstmd__Setting *const *settings, size_t n, const char *data_root,
                           int world, struct lstmd_train_config *cfg, int *has_run_dir, char *err,
                           size_t errlen) {
  lstmd_config_defaults(cfg);
  *has_run_dir = 0;
  for (size_t i = 0; i < n; i++) {
    if (lstmd_config_set_key(cfg, settings[i]->key, settings[i]->value, err, errlen))
      return LSTMD_ECONFIG;
    if (!strcmp(settings[i]->key, "train.run_dir")) *has_run_dir = 1;
  }
  if (lstmd_config_check(cfg, err, errlen)) return LSTMD_ECONFIG;
  if (world > 0 && cfg->res_ranks > world) {
    snprintf(err, errlen, "resources.ranks: %d is more than this daemon's %d ranks",
             cfg->res_ranks, world);
    return LSTMD_ECONFIG;
  }
  const int ranks = cfg->res_ranks ? cfg->res_ranks : world;
  if (world > 0 && ranks % cfg->stages) {
    snprintf(err, errlen, "model.stages: %d does not divide the job's %d ranks (resources.ranks; "
             "a job runs as replicas x stages)", cfg->stages, ranks);
    return LSTMD_ECONFIG;
  }
  char resolved[sizeof cfg->data_path], why[1400];
  if (lstmd_path_inside(data_root, cfg->data_path, 1, resolved, sizeof resolved, why, sizeof why)) {
    snprintf(err, errlen, "data.path: %s", why);
    return LSTMD_ECONFIG;
  }
  memcpy(cfg->data_path, resolved, sizeof resolved);
  if (cfg->distill_teacher[0]) { /* a file the job's ranks read: confined like data.path */
    char teacher[sizeof cfg->distill_teacher];
    if (lstmd_path_inside(data_root, cfg->distill_teacher, 1, teacher, sizeof teacher, why,
                          sizeof why)) {
      snprintf(err, errlen, "distill.teacher: %s", why);
      return LSTMD_ECONFIG;
    }
    memcpy(cfg->distill_teacher, teacher, sizeof teacher);
  }
  if (*has_run_dir) {
    char dir[sizeof cfg->run_dir];
    if (lstmd_path_inside(data_root, cfg->run_dir, 0, dir, sizeof dir, why, sizeof why)) {
      snprintf(err, errlen, "train.run_dir: %s", why);
      return LSTMD_ECONFIG;
    }
    memcpy(cfg->run_dir, dir, sizeof dir);
  }
  return LSTMD_OK;
}
