/* access.c — peer credentials, tokens, stale sockets and path confinement (see access.h). */
#define _GNU_SOURCE
#include "access.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kernels/status.h"

int lstmd_socket_live(const char *path) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  struct stat st;
  if (strlen(path) >= sizeof addr.sun_path || lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
    return 0;
  strcpy(addr.sun_path, path);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  const int live = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
  close(fd);
  return live;
}

int lstmd_socket_make_way(const char *path, char *err, size_t n) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof addr.sun_path) {
    snprintf(err, n, "socket path %s is longer than %zu bytes", path, sizeof addr.sun_path - 1);
    return LSTMD_EINVAL;
  }
  struct stat st;
  if (lstat(path, &st) != 0) return LSTMD_OK; /* nothing there */
  if (!S_ISSOCK(st.st_mode)) {
    snprintf(err, n, "%s exists and is not a socket; not touching it", path);
    return LSTMD_EINVAL;
  }
  if (lstmd_socket_live(path)) {
    snprintf(err, n, "another daemon is listening on %s", path);
    return LSTMD_EINVAL;
  }
  if (unlink(path) != 0 && errno != ENOENT) {
    snprintf(err, n, "cannot remove the stale socket %s: %s", path, strerror(errno));
    return LSTMD_EINVAL;
  }
  return LSTMD_OK;
}

static int user_in_group(uid_t uid, gid_t primary, gid_t group) {
  if (primary == group) return 1;
  char buf[16384];
  struct passwd pw, *res = NULL;
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) != 0 || !res) return 0;
  gid_t groups[256];
  int ng = 256;
  if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &ng) < 0) return 0;
  for (int i = 0; i < ng; i++)
    if (groups[i] == group) return 1;
  return 0;
}

int lstmd_peer_allowed(int fd, long group, char *why, size_t n) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    snprintf(why, n, "SO_PEERCRED: %s", strerror(errno));
    return 0;
  }
  if (cred.uid == geteuid() || cred.uid == 0) return 1;
  if (group >= 0 && user_in_group(cred.uid, cred.gid, (gid_t)group)) return 1;
  snprintf(why, n, "uid %u (pid %d) is not the daemon's user%s", (unsigned)cred.uid, (int)cred.pid,
           group >= 0 ? " nor in its socket group" : "");
  return 0;
}

int lstmd_token_load(const char *path, char *out, size_t n) {
  FILE *f = fopen(path, "r");
  if (!f) {
    lstmd_errorf("%s: cannot read the token file: %s", path, strerror(errno));
    return LSTMD_EIO;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
    fprintf(stderr, "lstmd: warning: %s may be read by other users (mode %03o); chmod 600 it\n",
            path, (unsigned)(st.st_mode & 0777));
  if (!fgets(out, (int)n, f)) out[0] = '\0';
  fclose(f);
  out[strcspn(out, "\r\n")] = '\0';
  if (strlen(out) < 16) {
    lstmd_errorf("%s: the token must be at least 16 characters on its first line", path);
    return LSTMD_EINVAL;
  }
  return LSTMD_OK;
}

int lstmd_token_equal(const char *expected, const char *given) {
  const size_t n = strlen(expected), m = strlen(given);
  unsigned char diff = (unsigned char)(n != m);
  for (size_t i = 0; i < n; i++) diff |= (unsigned char)(expected[i] ^ (i < m ? given[i] : 0));
  return diff == 0;
}

static int inside(const char *root, const char *p) {
  size_t r = strlen(root);
  if (r == 1 && root[0] == '/') return 1;
  return strncmp(p, root, r) == 0 && (p[r] == '\0' || p[r] == '/');
}

int lstmd_path_inside(const char *root, const char *path, int must_exist, char *out, size_t n,
                      char *err, size_t errlen) {
  char joined[PATH_MAX * 2], real[PATH_MAX];
  if (!path[0]) {
    snprintf(err, errlen, "empty path");
    return LSTMD_EINVAL;
  }
  if (path[0] == '/') snprintf(joined, sizeof joined, "%s", path);
  else snprintf(joined, sizeof joined, "%s/%s", root, path);
  if (strlen(joined) >= PATH_MAX) {
    snprintf(err, errlen, "path too long");
    return LSTMD_EINVAL;
  }
  if (realpath(joined, real)) {
    if (!inside(root, real)) {
      snprintf(err, errlen, "%s resolves to %s, outside the data root %s", path, real, root);
      return LSTMD_EINVAL;
    }
    snprintf(out, n, "%s", real);
    return LSTMD_OK;
  }
  if (must_exist || errno != ENOENT) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return LSTMD_EINVAL;
  }
  /* Not there yet: resolve the deepest existing ancestor; the rest is created later, so it
   * must be plain names. */
  char head[PATH_MAX];
  snprintf(head, sizeof head, "%s", joined);
  char *tail = NULL;
  for (;;) {
    char *slash = strrchr(head, '/');
    if (!slash || slash == head) {
      snprintf(err, errlen, "%s: no existing parent directory", path);
      return LSTMD_EINVAL;
    }
    *slash = '\0';
    tail = joined + (slash - head) + 1;
    if (realpath(head, real)) break;
    if (errno != ENOENT) {
      snprintf(err, errlen, "%s: %s", head, strerror(errno));
      return LSTMD_EINVAL;
    }
  }
  for (const char *c = tail; *c;) {
    size_t len = strcspn(c, "/");
    if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.')) {
      snprintf(err, errlen, "%s: '.' and '..' are not allowed in a path that does not exist yet", path);
      return LSTMD_EINVAL;
    }
    c += len;
    while (*c == '/') c++;
  }
  if (!inside(root, real)) {
    snprintf(err, errlen, "%s lies outside the data root %s", path, root);
    return LSTMD_EINVAL;
  }
  /* the resolved ancestor, then the names still to be made, one slash apart and none at the
   * end: "runs//a/" and "runs/a" are the same folder and must read the same (jobs.c compares) */
  size_t used = (size_t)snprintf(out, n, "%s", real);
  for (const char *c = tail + strspn(tail, "/"); *c && used < n;) {
    const size_t len = strcspn(c, "/");
    used += (size_t)snprintf(out + used, n - used, "/%.*s", (int)len, c);
    c += len;
    while (*c == '/') c++;
  }
  if (used >= n) {
    snprintf(err, errlen, "path too long");
    return LSTMD_EINVAL;
  }
  return LSTMD_OK;
}
