/* paths.c — this executable's folder and PATH lookup (paths.h). */
#include "paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int lstmd_exe_dir(char *buf, size_t n) {
  const ssize_t len = n > 1 ? readlink("/proc/self/exe", buf, n - 1) : -1;
  char *slash = len > 0 ? (buf[len] = '\0', strrchr(buf, '/')) : NULL;
  if (!slash) {
    if (n) buf[0] = '\0';
    return -1;
  }
  *slash = '\0';
  return 0;
}

const char *lstmd_on_path(const char *name, char *buf, size_t n) {
  const char *path = getenv("PATH");
  for (const char *p = path; p && *p;) {
    const char *end = strchr(p, ':');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    snprintf(buf, n, "%.*s/%s", (int)len, p, name);
    if (len && access(buf, X_OK) == 0) return buf;
    p = end ? end + 1 : NULL;
  }
  return NULL;
}
