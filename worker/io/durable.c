/* durable.c — temp + fsync + rename + fsync(dir) file replacement (see durable.h). */
#define _GNU_SOURCE
#include "durable.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/status.h"

/* A temp file is "<target>" TEMP_INFIX "<pid>" (lstmd_durable_open; lstmd_remove_orphan_temps). */
#define TEMP_INFIX ".tmp."

/* The temp files open now, for the signal handler: slot i is live when used[i] is 2 (1 while
 * its path is copied in). Fixed arrays, so the handler reads no memory a free may take. */
enum { kTempSlots = 8, kTempPathMax = 4096 };
static char g_temp_path[kTempSlots][kTempPathMax];
static int g_temp_used[kTempSlots];

static int temp_register(const char *tmp_path) {
  if (strlen(tmp_path) >= kTempPathMax) return 0;
  for (int i = 0; i < kTempSlots; i++) {
    int free_slot = 0;
    if (__atomic_compare_exchange_n(&g_temp_used[i], &free_slot, 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      strcpy(g_temp_path[i], tmp_path);
      __atomic_store_n(&g_temp_used[i], 2, __ATOMIC_RELEASE);
      return i + 1;
    }
  }
  return 0; /* more open at once than slots: that one is left to a later clean-up */
}

static void temp_unregister(struct lstmd_durable *w) {
  if (w->temp_slot) __atomic_store_n(&g_temp_used[w->temp_slot - 1], 0, __ATOMIC_RELEASE);
  w->temp_slot = 0;
}

/* The output directory lstmd_mkdir_output made, for the handler: live when g_made_dir_set is 2. */
static char g_made_dir[kTempPathMax];
static int g_made_dir_set;

void lstmd_mkdir_output_undo(void) {
  if (__atomic_load_n(&g_made_dir_set, __ATOMIC_ACQUIRE) == 2) rmdir(g_made_dir); /* if empty */
}

static void remove_temps_and_die(int sig) {
  for (int i = 0; i < kTempSlots; i++)
    if (__atomic_load_n(&g_temp_used[i], __ATOMIC_ACQUIRE) == 2) unlink(g_temp_path[i]);
  lstmd_mkdir_output_undo(); /* an atomic load and rmdir: async-signal-safe */
  signal(sig, SIG_DFL);
  raise(sig); /* delivered once the handler returns: the exit status says the signal */
}

void lstmd_durable_remove_temps_on_signal(void) {
  const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = remove_temps_and_die;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    if (sigaction(sigs[i], &sa, &old) == 0 && old.sa_handler == SIG_IGN)
      sigaction(sigs[i], &old, NULL); /* nohup, a background job: left ignored */
}

static int fsync_parent_dir(const char *path) {
  char *copy = strdup(path);
  if (!copy) return LSTMD_ENOMEM;
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
  int rc = LSTMD_OK;
  if (fd < 0 || fsync(fd) != 0) rc = LSTMD_EWRITE;
  if (rc) lstmd_errorf("%s: cannot sync directory: %s", path, strerror(errno));
  if (fd >= 0) close(fd);
  free(copy);
  return rc;
}

static const char *file_kind(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a regular file";
}

int lstmd_durable_open(struct lstmd_durable *w, const char *path) {
  memset(w, 0, sizeof *w);
  w->fd = -1;
  /* The rename at commit replaces the name, not what it points at: over /dev/null (or a FIFO, a
   * symlink to one) it would put a regular file in the device's place. */
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    lstmd_errorf("%s: is %s, not a file: lstmd writes a new file and renames it into place, "
                 "which would replace it (remove it, or name another path)", path,
                 file_kind(st.st_mode));
    return LSTMD_EWRITE;
  }
  if (asprintf(&w->tmp_path, "%s" TEMP_INFIX "%d", path, (int)getpid()) < 0) {
    w->tmp_path = NULL;
    return LSTMD_ENOMEM;
  }
  w->path = strdup(path);
  if (!w->path) {
    lstmd_durable_abort(w);
    return LSTMD_ENOMEM;
  }
  /* Known to the signal handler before the file exists: registered after open, a signal
   * between the two left the file (a Ctrl-C test under ASan caught that window). */
  w->temp_slot = temp_register(w->tmp_path);
  w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd < 0) {
    const int e = errno;
    temp_unregister(w);
    lstmd_errorf("%s: cannot create: %s (writing its temp file %s first)", path, strerror(e),
                 w->tmp_path);
    free(w->tmp_path);
    w->tmp_path = NULL; /* nothing to unlink */
    lstmd_durable_abort(w);
    return LSTMD_EWRITE;
  }
  return LSTMD_OK;
}

int lstmd_durable_pwrite(struct lstmd_durable *w, const void *buf, size_t n, off_t offset) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = pwrite(w->fd, p, n, offset);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      lstmd_errorf("%s: write failed: %s", w->tmp_path, strerror(errno));
      return LSTMD_EWRITE;
    }
    p += k;
    n -= (size_t)k;
    offset += k;
  }
  return LSTMD_OK;
}

int lstmd_durable_write(struct lstmd_durable *w, const void *buf, size_t n) {
  LSTMD_TRY(lstmd_durable_pwrite(w, buf, n, w->end));
  w->end += (off_t)n;
  return LSTMD_OK;
}

int lstmd_durable_commit(struct lstmd_durable *w) {
  int rc = LSTMD_OK;
  if (fsync(w->fd) != 0 || close(w->fd) != 0) {
    lstmd_errorf("%s: cannot sync: %s", w->tmp_path, strerror(errno));
    rc = LSTMD_EWRITE;
  }
  w->fd = -1;
  if (!rc && rename(w->tmp_path, w->path) != 0) {
    lstmd_errorf("%s: cannot rename into place: %s", w->path, strerror(errno));
    rc = LSTMD_EWRITE;
  }
  if (rc) {
    lstmd_durable_abort(w);
    return rc;
  }
  temp_unregister(w); /* renamed: no temp file any more */
  rc = fsync_parent_dir(w->path);
  free(w->tmp_path);
  free(w->path);
  w->tmp_path = w->path = NULL;
  return rc;
}

void lstmd_durable_abort(struct lstmd_durable *w) {
  if (w->fd >= 0) close(w->fd);
  if (w->tmp_path) unlink(w->tmp_path);
  temp_unregister(w);
  free(w->tmp_path);
  free(w->path);
  w->fd = -1;
  w->tmp_path = w->path = NULL;
}

static int copy_file(const char *from, struct lstmd_durable *w) {
  int in = open(from, O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    lstmd_errorf("%s: cannot open: %s", from, strerror(errno));
    return LSTMD_EWRITE;
  }
  char buf[1 << 16];
  ssize_t k;
  int rc = LSTMD_OK;
  while (rc == LSTMD_OK && (k = read(in, buf, sizeof buf)) != 0) {
    if (k < 0) {
      if (errno == EINTR) continue;
      lstmd_errorf("%s: read failed: %s", from, strerror(errno));
      rc = LSTMD_EWRITE;
      break;
    }
    rc = lstmd_durable_write(w, buf, (size_t)k);
  }
  close(in);
  return rc;
}

int lstmd_durable_link(const char *target, const char *link_path) {
  char *tmp;
  if (asprintf(&tmp, "%s.tmp.%d", link_path, (int)getpid()) < 0) return LSTMD_ENOMEM;
  unlink(tmp);
  if (link(target, tmp) == 0) {
    int rc = LSTMD_OK;
    if (rename(tmp, link_path) != 0) {
      lstmd_errorf("%s: cannot rename into place: %s", link_path, strerror(errno));
      unlink(tmp);
      rc = LSTMD_EWRITE;
    }
    free(tmp);
    return rc ? rc : fsync_parent_dir(link_path);
  }
  free(tmp);
  /* No hard links here (e.g. some network or FAT file systems): fall back to a durable copy. */
  struct lstmd_durable w;
  LSTMD_TRY(lstmd_durable_open(&w, link_path));
  int rc = copy_file(target, &w);
  if (rc) {
    lstmd_durable_abort(&w);
    return rc;
  }
  return lstmd_durable_commit(&w);
}

int lstmd_read_at(int fd, void *buf, size_t n, uint64_t offset) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = pread(fd, p, n, (off_t)offset);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return k == 0 ? LSTMD_EFORMAT : LSTMD_EIO;
    p += k;
    n -= (size_t)k;
    offset += (uint64_t)k;
  }
  return LSTMD_OK;
}

int lstmd_mkdir_p(const char *dir) {
  char *copy = strdup(dir);
  if (!copy) return LSTMD_ENOMEM;
  for (char *p = copy + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char saved = *p;
      *p = '\0';
      if (mkdir(copy, 0755) != 0 && errno != EEXIST) {
        const int e = errno;
        lstmd_errorf("%s: cannot create directory: %s", copy, strerror(e));
        free(copy);
        return e == ENOTDIR ? LSTMD_ECONFIG : LSTMD_EWRITE; /* a file on the path: the user's */
      }
      *p = saved;
      if (saved == '\0') break;
    }
  }
  free(copy);
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    lstmd_errorf("%s: exists and is not a directory", dir);
    return LSTMD_ECONFIG; /* the path given names a file: a usage error (exit 2), not a write's */
  }
  return LSTMD_OK;
}

int lstmd_mkdir_output(const char *dir) {
  struct stat st;
  const int existed = stat(dir, &st) == 0;
  LSTMD_TRY(lstmd_mkdir_p(dir));
  if (!existed && strlen(dir) < kTempPathMax) {
    int unset = 0;
    if (__atomic_compare_exchange_n(&g_made_dir_set, &unset, 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      strcpy(g_made_dir, dir);
      __atomic_store_n(&g_made_dir_set, 2, __ATOMIC_RELEASE);
    }
  }
  return LSTMD_OK;
}

int lstmd_run_dir_lock(const char *dir, int *fd) {
  char path[4200], host[256] = "?", holder[320] = "";
  snprintf(path, sizeof path, "%s/.lstmd.lock", dir);
  *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (*fd < 0) {
    lstmd_errorf("%s: cannot open: %s", path, strerror(errno));
    return LSTMD_EWRITE;
  }
  int r;
  while ((r = flock(*fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (r != 0 && errno == EWOULDBLOCK) {
    const ssize_t n = pread(*fd, holder, sizeof holder - 1, 0);
    holder[n > 0 ? n : 0] = 0;
    holder[strcspn(holder, "\n")] = 0;
    lstmd_errorf("train.run_dir %s is in use by another run (%s): give this one its own, or "
                 "wait for that one to end", dir, holder[0] ? holder : "its lock holder unknown");
    close(*fd);
    *fd = -1;
    return LSTMD_ECONFIG;
  }
  if (r != 0) { /* e.g. ENOLCK on a file system without locks: unprotected, not refused */
    lstmd_errorf("warning: %s: no lock on this file system (%s); nothing stops a second run "
                 "from writing into %s at the same time", path, strerror(errno), dir);
    close(*fd);
    *fd = -1;
    return LSTMD_OK;
  }
  gethostname(host, sizeof host - 1);
  char line[320];
  const int len = snprintf(line, sizeof line, "pid %ld on %s\n", (long)getpid(), host);
  if (ftruncate(*fd, 0) != 0 || pwrite(*fd, line, (size_t)len, 0) != len)
    lstmd_errorf("warning: %s: cannot write the holder's pid: %s", path, strerror(errno));
  return LSTMD_OK;
}

int lstmd_remove_orphan_temps(const char *dir, long long *bytes) {
  *bytes = 0;
  DIR *d = opendir(dir);
  if (!d) return 0;
  int removed = 0;
  for (struct dirent *e; (e = readdir(d));) {
    const char *tmp = strstr(e->d_name, TEMP_INFIX), *pid = tmp ? tmp + strlen(TEMP_INFIX) : NULL;
    if (!tmp || tmp == e->d_name || !*pid || strspn(pid, "0123456789") != strlen(pid)) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0) removed++, *bytes += st.st_size;
  }
  closedir(d);
  return removed;
}
