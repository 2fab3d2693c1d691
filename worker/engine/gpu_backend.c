/* gpu_backend.c — finding the node's CUDA libraries and loading the GPU module (gpu_backend.h).
 *
 * Why open every library by its full path first: the module's DT_NEEDED entries are bare sonames,
 * and the dynamic linker would look for them only in LD_LIBRARY_PATH and ld.so.cache. A soname
 * that is already loaded satisfies DT_NEEDED (and a later dlopen of the same soname), so after
 * the loader has opened /some/venv/.../nvidia/cudnn/lib/libcudnn.so.9, the module links to that
 * copy wherever it lives. cuDNN 9 is a dispatcher that opens its sub-libraries by bare soname
 * at run time, which fails outside the linker's path, so they are preloaded from the
 * dispatcher's folder too (graph first: the others depend on it). */
#define _GNU_SOURCE
#include "gpu_backend.h"

#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/io/paths.h"

/* The sonames this build's module was linked against (CMakeLists.txt, from the toolkit found). */
#ifndef LSTMD_SONAME_CUDART
#define LSTMD_SONAME_CUDART "libcudart.so.13"
#define LSTMD_SONAME_CUBLASLT "libcublasLt.so.13"
#define LSTMD_SONAME_CUBLAS "libcublas.so.13"
#define LSTMD_SONAME_CUDNN "libcudnn.so.9"
#define LSTMD_SONAME_NCCL ""
#endif
#ifndef LSTMD_VERSION_STRING
#define LSTMD_VERSION_STRING "unknown"
#endif

/* Directories longer than DIR_MAX are skipped; a path is a directory and a file name. */
enum { MAX_DIRS = 64, MAX_LIBS = 6, DIR_MAX = 1024, FILE_MAX = DIR_MAX + 64 };

static struct {
  pthread_once_t once;
  const struct lstmd_gpu_backend *table;
  char why[4096];
  char dirs[MAX_DIRS][DIR_MAX];
  int ndirs;
  struct lstmd_gpu_library libs[MAX_LIBS];
  int nlibs;
} g = {.once = PTHREAD_ONCE_INIT};

static void add_dir(const char *d, size_t len) {
  if (!len || g.ndirs == MAX_DIRS || len >= DIR_MAX) return;
  for (int i = 0; i < g.ndirs; i++)
    if (strlen(g.dirs[i]) == len && !strncmp(g.dirs[i], d, len)) return;
  memcpy(g.dirs[g.ndirs], d, len);
  g.dirs[g.ndirs++][len] = '\0';
}

static void add_dir_list(const char *list) {
  for (const char *p = list; p && *p;) {
    const char *end = strchr(p, ':');
    add_dir(p, end ? (size_t)(end - p) : strlen(p));
    p = end ? end + 1 : NULL;
  }
}

/* prefix/lib/python3.*\/{site,dist}-packages/nvidia/\*\/lib (the pip wheels' folders). */
static void add_python_prefix(const char *prefix) {
  if (!prefix || !*prefix) return;
  static const char *const kinds[] = {"site-packages", "dist-packages"};
  for (int k = 0; k < 2; k++) {
    char pattern[FILE_MAX];
    snprintf(pattern, sizeof pattern, "%.*s/lib/python3*/%s/nvidia/*/lib", DIR_MAX - 64, prefix,
             kinds[k]);
    glob_t gl;
    if (glob(pattern, GLOB_ONLYDIR, NULL, &gl) == 0)
      for (size_t i = 0; i < gl.gl_pathc; i++) add_dir(gl.gl_pathv[i], strlen(gl.gl_pathv[i]));
    globfree(&gl);
  }
}

/* The prefix of the first python3 on PATH (/opt/venv/bin/python3 → /opt/venv), unresolved:
 * a virtual environment's python3 is a link to the system's, but its packages are its own. */
static void add_python_on_path(void) {
  char exe[DIR_MAX];
  if (!lstmd_on_path("python3", exe, sizeof exe)) return;
  *strrchr(exe, '/') = '\0'; /* .../bin */
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0'; /* the prefix */
  add_python_prefix(exe[0] ? exe : "/");
}

static void build_search_path(void) {
  add_dir_list(getenv("LSTMD_CUDA_LIBS"));
  add_dir_list(getenv("LD_LIBRARY_PATH"));
  add_python_prefix(getenv("VIRTUAL_ENV"));
  add_python_prefix(getenv("CONDA_PREFIX"));
  add_python_on_path();
  static const char *const cuda[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                                     "/usr/local/cuda/targets/x86_64-linux/lib"};
  for (int i = 0; i < 3; i++) add_dir(cuda[i], strlen(cuda[i]));
}

void lstmd_gpu_backend_search_path(char *buf, size_t n) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < g.ndirs && at < n; i++)
    at += snprintf(buf + at, n - at, "%s%s", i ? ", " : "", g.dirs[i]);
  if (at < n) snprintf(buf + at, n - at, "%sthe system's library path", g.ndirs ? ", " : "");
}

/* Opens `soname` from the first search directory holding it, else through the system's search;
 * records the outcome. Returns the handle or NULL. */
static void *open_library(const char *name, const char *soname) {
  struct lstmd_gpu_library *l = &g.libs[g.nlibs++];
  *l = (struct lstmd_gpu_library){.name = name, .soname = soname};
  char path[FILE_MAX], first_error[512] = "";
  for (int i = 0; i < g.ndirs; i++) {
    snprintf(path, sizeof path, "%s/%s", g.dirs[i], soname);
    if (access(path, R_OK) != 0) continue;
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (h) {
      snprintf(l->path, sizeof l->path, "%s", path);
      return h;
    }
    if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s", dlerror());
  }
  void *h = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
  if (h) {
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name[0])
      snprintf(l->path, sizeof l->path, "%s", lm->l_name);
    else
      snprintf(l->path, sizeof l->path, "%s (system library path)", soname);
    return h;
  }
  if (first_error[0]) snprintf(l->note, sizeof l->note, "%s", first_error);
  else snprintf(l->note, sizeof l->note, "not found");
  return NULL;
}

/* cuDNN 9's sub-libraries, from the dispatcher's folder, graph first (the others need it). A
 * sub-library that does not load (e.g. the runtime-compiled engines without NVRTC) is left to
 * cuDNN, which reports what it misses when an operation needs it. */
static void preload_cudnn_parts(const char *dispatcher) {
  char dir[DIR_MAX];
  snprintf(dir, sizeof dir, "%.*s", DIR_MAX - 1, dispatcher);
  char *slash = strrchr(dir, '/');
  if (!slash) return;
  *slash = '\0';
  const char *major = strrchr(LSTMD_SONAME_CUDNN, '.'); /* ".9" */
  static const char *const parts[] = {"graph", "engines_precompiled", "engines_runtime_compiled",
                                      "heuristic", "ops", "cnn", "adv"};
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
    char path[FILE_MAX];
    snprintf(path, sizeof path, "%s/libcudnn_%s.so%s", dir, parts[i], major ? major : "");
    if (access(path, R_OK) == 0) dlopen(path, RTLD_LAZY | RTLD_GLOBAL);
  }
}

/* The module file: LSTMD_GPU_MODULE, else beside the executable, else ../lib/lstmd/. */
static int find_module(char *out, size_t n) {
  const char *forced = getenv("LSTMD_GPU_MODULE");
  if (forced && *forced) {
    snprintf(out, n, "%s", forced);
    return access(out, R_OK) == 0;
  }
  char exe[DIR_MAX];
  if (lstmd_exe_dir(exe, sizeof exe)) return 0;
  snprintf(out, n, "%s/liblstmd_gpu.so", exe);
  if (access(out, R_OK) == 0) return 1;
  snprintf(out, n, "%s/../lib/lstmd/liblstmd_gpu.so", exe);
  return access(out, R_OK) == 0;
}

static void load(void) {
#if !LSTMD_GPU_MODULE_BUILT
  snprintf(g.why, sizeof g.why, "this build has no GPU backend (built without CUDA and cuDNN)");
  return;
#endif
  build_search_path();
  static const char *const names[] = {"cudart", "cublasLt", "cublas", "cudnn", "nccl"};
  const char *sonames[] = {LSTMD_SONAME_CUDART, LSTMD_SONAME_CUBLASLT, LSTMD_SONAME_CUBLAS,
                           LSTMD_SONAME_CUDNN, LSTMD_SONAME_NCCL};
  for (int i = 0; i < 5; i++) {
    if (!sonames[i][0]) continue; /* built without NCCL */
    if (!open_library(names[i], sonames[i])) {
      char where[2048];
      lstmd_gpu_backend_search_path(where, sizeof where);
      snprintf(g.why, sizeof g.why, "%s: %.1000s (looked in %s)", sonames[i],
               g.libs[g.nlibs - 1].note, where);
      return;
    }
    if (!strcmp(names[i], "cudnn")) preload_cudnn_parts(g.libs[g.nlibs - 1].path);
  }
  struct lstmd_gpu_library *m = &g.libs[g.nlibs++];
  *m = (struct lstmd_gpu_library){.name = "module", .soname = "liblstmd_gpu.so"};
  char path[FILE_MAX];
  if (!find_module(path, sizeof path)) {
    snprintf(m->note, sizeof m->note, "not found (last tried %.1000s)", path);
    snprintf(g.why, sizeof g.why, "the GPU module liblstmd_gpu.so is %.1100s", m->note);
    return;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(m->note, sizeof m->note, "%s", dlerror());
    snprintf(g.why, sizeof g.why, "the GPU module did not load: %.1100s", m->note);
    return;
  }
  snprintf(m->path, sizeof m->path, "%s", path);
  const struct lstmd_gpu_backend *t = dlsym(h, LSTMD_GPU_MODULE_SYMBOL);
  if (!t || t->abi != LSTMD_GPU_ABI || t->size != sizeof *t ||
      strcmp(t->version, LSTMD_VERSION_STRING)) {
    snprintf(g.why, sizeof g.why, "the GPU module %s is not from this lstmd %s (%s)", path,
             LSTMD_VERSION_STRING, t ? t->version : "no " LSTMD_GPU_MODULE_SYMBOL);
    return;
  }
  g.table = t;
}

const struct lstmd_gpu_backend *lstmd_gpu_backend(void) {
  pthread_once(&g.once, load);
  return g.table;
}

const char *lstmd_gpu_backend_why(void) {
  pthread_once(&g.once, load);
  return g.table ? "" : g.why;
}

int lstmd_gpu_backend_libraries(struct lstmd_gpu_library *out, int max) {
  pthread_once(&g.once, load);
  const int n = g.nlibs < max ? g.nlibs : max;
  memcpy(out, g.libs, (size_t)n * sizeof *out);
  return n;
}
