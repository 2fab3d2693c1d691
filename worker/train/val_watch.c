/* val_watch.c — the validation watch's decisions and train.keep_checkpoints (see val_watch.h). */
#define _GNU_SOURCE
#include "val_watch.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/status.h"
#include "worker/io/safetensors.h"

void lstmd_val_watch_init(struct lstmd_val_watch *w) {
  *w = (struct lstmd_val_watch){.best_loss = INFINITY, .lr_scale = 1.0};
}

int lstmd_val_watch_update(struct lstmd_val_watch *w, const struct lstmd_watch_rules *r,
                           long step, double loss) {
  /* best_loss − min_delta is +inf before the first evaluation, so any finite loss is a best. */
  if (loss < w->best_loss - r->min_delta) {
    w->best_loss = loss;
    w->best_step = step;
    w->since_best = 0;
    w->plateau_bad = 0;
    return LSTMD_WATCH_NEW_BEST;
  }
  int events = 0;
  w->since_best++;
  if (r->plateau && ++w->plateau_bad >= r->plateau_patience) {
    w->lr_scale *= r->plateau_factor;
    w->plateau_bad = 0;
    events |= LSTMD_WATCH_LR_CUT;
  }
  if (lstmd_val_watch_stopped(w, r)) events |= LSTMD_WATCH_STOP;
  return events;
}

int lstmd_val_watch_stopped(const struct lstmd_val_watch *w, const struct lstmd_watch_rules *r) {
  return r->patience > 0 && w->since_best >= r->patience;
}

/* "step-<N>.safetensors" exactly (N decimal, no sign); -1 otherwise. */
static long step_of(const char *name) {
  long step = -1;
  int end = 0;
  if (strncmp(name, "step-", 5) || name[5] < '0' || name[5] > '9') return -1;
  if (sscanf(name, "step-%ld.safetensors%n", &step, &end) != 1 || name[end] != '\0') return -1;
  return step;
}

static int by_step_desc(const void *a, const void *b) {
  const long x = *(const long *)a, y = *(const long *)b;
  return (x < y) - (x > y);
}

static int same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

int lstmd_run_dir_checkpoint(const char *run_dir, char *found, size_t n) {
  if (n) found[0] = '\0';
  DIR *d = opendir(run_dir);
  if (!d) return 0;
  int has = 0;
  for (struct dirent *e; !has && (e = readdir(d));) {
    struct stat st; /* a file: latest is another name of a step file, so those are enough */
    has = (!strcmp(e->d_name, "best.safetensors") || step_of(e->d_name) >= 0) &&
          fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode);
    if (has && n) snprintf(found, n, "%s", e->d_name);
  }
  closedir(d);
  return has;
}

/* The newest step-N.safetensors in dir that is a regular file, with N < below and not the file
 * *skip (NULL: none); -1 when there is none. */
static long newest_step_file(const char *dir, long below, const struct stat *skip) {
  long newest = -1;
  struct stat st;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    const long s = step_of(e->d_name);
    if (s > newest && s < below && fstatat(dirfd(d), e->d_name, &st, 0) == 0 &&
        S_ISREG(st.st_mode) && !(skip && same_file(&st, skip)))
      newest = s;
  }
  if (d) closedir(d);
  return newest;
}

int lstmd_run_dir_resume_point(const char *run_dir, char *path, size_t n, char *why,
                               size_t why_len) {
  struct stat st; /* anything under latest's name but nothing at all (a dangling link, a loop,
                   * no permission) is taken, and the loader says what is wrong with it */
  snprintf(path, n, "%s/latest.safetensors", run_dir);
  if (lstat(path, &st) == 0 || errno != ENOENT) return 1;
  const long newest = newest_step_file(run_dir, LONG_MAX, NULL);
  if (newest >= 0) {
    snprintf(path, n, "%s/step-%ld.safetensors", run_dir, newest);
    return 2;
  }
  char found[300];
  if (n) path[0] = '\0';
  if (!lstmd_run_dir_checkpoint(run_dir, found, sizeof found)) return 0;
  snprintf(why, why_len, "train.run_dir %s holds %s but no latest.safetensors or step checkpoint "
           "to resume from: resume from %s/%s by name to go on from that model, or choose another "
           "train.run_dir (a fresh run there would replace it)", run_dir, found, run_dir, found);
  return -1;
}

int lstmd_run_dir_resume_meta(const char *run_dir, int n, const char *const *keys, long *values,
                              char *path, size_t path_len) {
  char why[1400];
  for (int i = 0; i < n; i++) values[i] = -1;
  const int found = lstmd_run_dir_resume_point(run_dir, path, path_len, why, sizeof why);
  if (found <= 0) return found;
  struct lstmd_st_file *f;
  if (lstmd_st_open(path, &f)) return -1;
  for (int i = 0; i < n; i++) {
    const char *v = lstmd_st_meta_get(f, keys[i]); /* owned by f */
    char *end = NULL;
    const long x = v ? strtol(v, &end, 10) : -1;
    values[i] = v && end != v && !*end && x >= 0 ? x : -1;
  }
  lstmd_st_close(f);
  return 1;
}

int lstmd_run_dir_older_checkpoint(const char *ckpt, char *out, size_t n) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", ckpt);
  char *slash = strrchr(dir, '/');
  const char *name = slash ? slash + 1 : ckpt;
  if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  const long step = step_of(name);
  struct stat self;
  const int has_self = stat(ckpt, &self) == 0;
  const long newest = newest_step_file(dir, step >= 0 ? step : LONG_MAX, has_self ? &self : NULL);
  if (newest < 0) return 0;
  snprintf(out, n, "%s/step-%ld.safetensors", dir, newest);
  return 1;
}

int lstmd_keep_checkpoints(const char *run_dir, long keep, long latest_step) {
  if (keep < 0) return 0;
  DIR *d = opendir(run_dir);
  if (!d) {
    lstmd_errorf("train.keep_checkpoints: cannot list %s (%s); no checkpoint deleted", run_dir,
                 strerror(errno));
    return 0;
  }
  long *steps = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    const long s = step_of(e->d_name);
    if (s < 0) continue;
    if (n == cap) {
      long *grown = realloc(steps, (cap = cap ? 2 * cap : 64) * sizeof *steps);
      if (!grown) break; /* out of memory: delete among those listed so far */
      steps = grown;
    }
    steps[n++] = s;
  }
  closedir(d);
  qsort(steps, n, sizeof *steps, by_step_desc);
  char path[4096];
  struct stat latest, best, st;
  snprintf(path, sizeof path, "%s/latest.safetensors", run_dir);
  const int has_latest = stat(path, &latest) == 0;
  snprintf(path, sizeof path, "%s/best.safetensors", run_dir);
  const int has_best = stat(path, &best) == 0;
  long kept = 0;
  int deleted = 0;
  for (size_t i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/step-%ld.safetensors", run_dir, steps[i]);
    if (stat(path, &st) != 0) continue;
    const int protect = steps[i] == latest_step || (has_latest && same_file(&st, &latest)) ||
                        (has_best && same_file(&st, &best));
    if (protect || kept < keep) {
      kept++;
      continue;
    }
    if (unlink(path) != 0) lstmd_errorf("train.keep_checkpoints: cannot delete %s: %s", path,
                                        strerror(errno));
    else deleted++;
  }
  free(steps);
  return deleted;
}

long lstmd_best_file_step(const char *run_dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/best.safetensors", run_dir);
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  struct lstmd_st_file *f;
  if (lstmd_st_open(path, &f)) return -2;
  const char *v = lstmd_st_meta_get(f, "train.step"); /* owned by f: parsed before closing it */
  char *end = NULL;
  long step = v ? strtol(v, &end, 10) : -2;
  if (!v || end == v || *end != '\0' || step < 0) step = -2;
  lstmd_st_close(f);
  return step;
}
