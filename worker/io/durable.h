/* durable.h — crash-safe file replacement: write a temp file beside the target, fsync it,
 * rename it over the target, fsync the directory. A crash at any point leaves either the old
 * file or the new one, never a torn one. */
#ifndef LSTMD_DURABLE_H
#define LSTMD_DURABLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct lstmd_durable {
  int fd;
  char *path;     /* final path (owned) */
  char *tmp_path; /* "<path>.tmp.<pid>" (owned) */
  off_t end;      /* where lstmd_durable_write appends */
  int temp_slot;  /* 1 + its place in the list lstmd_durable_remove_temps_on_signal's handler
                   * removes, 0 none */
};

/* Creates the temp file. Returns 0 or LSTMD_EWRITE (message printed, naming the file). */
int lstmd_durable_open(struct lstmd_durable *w, const char *path);
/* Writes n bytes at the current end / at an offset. Returns 0 or LSTMD_EWRITE. */
int lstmd_durable_write(struct lstmd_durable *w, const void *buf, size_t n);
int lstmd_durable_pwrite(struct lstmd_durable *w, const void *buf, size_t n, off_t offset);
/* fsync + rename + fsync(dir); frees w. On failure (LSTMD_EWRITE) the temp file is removed. */
int lstmd_durable_commit(struct lstmd_durable *w);
/* Removes the temp file and frees w. Accepts a never-opened (zeroed) w. */
void lstmd_durable_abort(struct lstmd_durable *w);

/* For a command that writes its outputs and exits (prepare, predict, quantize, export): SIGINT,
 * SIGTERM and SIGHUP remove the temp files open at that moment, then end the process as the
 * signal would (a signal ignored at start stays ignored). Without it a Ctrl-C left
 * "<out>.tmp.<pid>", a partial file, beside the output. train and serve keep their own handlers
 * (they finish the step and write a checkpoint; a resume removes a run dir's orphans). */
void lstmd_durable_remove_temps_on_signal(void);

/* Atomically makes `link_path` another name of the existing file `target` (hard link, or a
 * copy where the file system has none). Returns 0 or LSTMD_EWRITE. */
int lstmd_durable_link(const char *target, const char *link_path);

/* Reads exactly n bytes at offset (pread, retried on EINTR and short reads). Returns 0,
 * LSTMD_EFORMAT when the file ends first, or LSTMD_EIO. */
int lstmd_read_at(int fd, void *buf, size_t n, uint64_t offset);

/* Creates a directory (and its parents) if missing. Returns 0, LSTMD_ECONFIG where the path
 * names a file or passes through one, or LSTMD_EWRITE. */
int lstmd_mkdir_p(const char *dir);
/* lstmd_mkdir_p for a command's output directory (prepare's --out): when it did not exist, a
 * signal that lstmd_durable_remove_temps_on_signal handles removes it again if it is empty by
 * then, after the temp files, so a Ctrl-C leaves nothing behind. */
int lstmd_mkdir_output(const char *dir);
/* For a command that failed: removes the directory lstmd_mkdir_output made, if it is empty (its
 * writers aborted), as the signal handler does; nothing when it made none. */
void lstmd_mkdir_output_undo(void);

/* Holds <dir>/.lstmd.lock (flock, exclusive) for as long as the returned descriptor stays open,
 * with this process's pid and host written in it: one run writes a run dir at a time, whatever
 * started it (two sbatch jobs, two daemons, a daemon and a shell). *fd: the lock's descriptor, or
 * -1 where the file system has no locks (a warning, not a failure). Returns 0, LSTMD_ECONFIG
 * when another process holds it (message naming its pid and host), or LSTMD_EWRITE. */
int lstmd_run_dir_lock(const char *dir, int *fd);
/* Removes the temp files ("NAME.tmp.PID", lstmd_durable_open's) that writes cut short by a kill
 * left in dir: call it only while holding dir's lock, when no other process writes there. Returns
 * how many it removed, their bytes in *bytes. */
int lstmd_remove_orphan_temps(const char *dir, long long *bytes);

#endif
