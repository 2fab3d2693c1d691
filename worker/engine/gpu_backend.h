/* gpu_backend.h — the GPU backend as a module loaded at run time.
 *
 * The lstmd executable links no CUDA library. Everything that calls CUDA, cuBLAS, cuDNN or NCCL
 * (kernels/cuda, the GPU engine, the NCCL communicator, the GPU self-test checks) is built into
 * one shared module, liblstmd_gpu.so, whose only entry point is the table below. When a caller
 * first asks for it, lstmd finds the node's CUDA runtime, cuBLAS(Lt), cuDNN (with the
 * sub-libraries cuDNN 9 opens by bare soname) and NCCL, opens each by its full path with
 * RTLD_GLOBAL, and then opens the module, whose DT_NEEDED sonames the loader now finds already
 * loaded. The module resolves lstmd's own functions (status, model, comm, engine helpers) from
 * the executable, which exports them: there is one copy of each.
 *
 * Where the libraries are looked for, in order (the first directory holding the soname wins):
 *   1. LSTMD_CUDA_LIBS (directories separated by ':'),
 *   2. LD_LIBRARY_PATH,
 *   3. the nvidia/<pkg>/lib folders of the active Python environment's pip wheels
 *      (nvidia-cudnn-cu13, nvidia-nccl-cu13, ...): $VIRTUAL_ENV, $CONDA_PREFIX, then the prefix
 *      of the first python3 on PATH, each as lib/python3.<minor>/{site,dist}-packages,
 *   4. /usr/local/cuda/{lib64,lib,targets/x86_64-linux/lib},
 *   5. the system's own search (ld.so.cache, /etc/ld.so.conf).
 * The module itself: LSTMD_GPU_MODULE (a file), else <dir of the executable>/liblstmd_gpu.so
 * (the build tree), else <dir of the executable>/../lib/lstmd/liblstmd_gpu.so (the release). */
#ifndef LSTMD_GPU_BACKEND_H
#define LSTMD_GPU_BACKEND_H

#include <stddef.h>

struct lstmd_engine;
struct lstmd_model_shape;
struct lstmd_selftest;
struct lstmd_stage_times_config;

/* Bumped whenever the table changes; the loader refuses a module of another ABI or version. */
#define LSTMD_GPU_ABI 2
#define LSTMD_GPU_MODULE_SYMBOL "lstmd_gpu_module_v2"

struct lstmd_gpu_backend {
  int abi;             /* LSTMD_GPU_ABI */
  size_t size;         /* sizeof(struct lstmd_gpu_backend) */
  const char *version; /* the lstmd version the module was built with (LSTMD_VERSION_STRING) */
  /* kernels/cuda/device_cuda.h */
  int (*probe)(char *why, size_t n);
  int (*device_info)(int device, char *buf, size_t n, int *cc);
  void (*describe_libraries)(char *buf, size_t n);
  long (*cudnn_version)(void);
  /* comm/comm_nccl.h */
  void (*describe_nccl)(char *buf, size_t n);
  /* worker/engine/engine.h */
  int (*engine_create)(const struct lstmd_engine *base, struct lstmd_engine **out);
  /* worker/selftest/selftest.h: runs the GPU checks named by `only` (NULL: all) */
  void (*selftest)(struct lstmd_selftest *st, const char *only);
  /* worker/engine/gpu_stage_times.h: per-item costs of pipeline stages on one GPU */
  int (*stage_times)(const struct lstmd_model_shape *shape,
                     const struct lstmd_stage_times_config *cfg, double *ms);
};

/* The module's table, loading it (and the CUDA libraries) on the first call; NULL when the
 * libraries or the module are missing or refuse to load, with the reason in
 * lstmd_gpu_backend_why(). Thread-safe; never unloads. */
const struct lstmd_gpu_backend *lstmd_gpu_backend(void);
/* One line: why the backend did not load, or "" when it did. */
const char *lstmd_gpu_backend_why(void);

/* What was loaded (or looked for), one entry per library, for --version and doctor. */
struct lstmd_gpu_library {
  const char *name;   /* "cudart", "cublasLt", "cublas", "cudnn", "nccl", "module" */
  const char *soname; /* "libcudart.so.13" */
  char path[1100];    /* the file opened, or "" */
  char note[1100];    /* the dlopen error or "not found", when path is "" */
};
/* Fills up to max entries (after lstmd_gpu_backend() was called); returns how many. */
int lstmd_gpu_backend_libraries(struct lstmd_gpu_library *out, int max);
/* The directories searched, in order, joined by ", " (for messages). */
void lstmd_gpu_backend_search_path(char *buf, size_t n);

#endif
