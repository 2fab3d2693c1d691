/* nvtx_recorder.c — an NVTX injection library for tests/test_nvtx.sh: records the NVTX ranges a
 * process pushes and pops, through the same interface Nsight Systems attaches by, with no GPU.
 * NVTX 3 (header-only, compiled into lstmd) dlopens the library named by NVTX_INJECTION64_PATH
 * on the first NVTX call and calls InitializeInjectionNvtx2, which points the core table's
 * RangePushA and RangePop entries here. Each event is one line appended to the file named by
 * LSTMD_NVTX_LOG: "<pid> <tid> push <name>" or "<pid> <tid> pop". One write(2) per line on an
 * O_APPEND descriptor, so lines of several threads and processes do not interleave (Linux).
 * Loaded some other way (LD_PRELOAD, test_nvtx.sh's check 3) it appends "<pid> loaded" to the
 * file named by LSTMD_NVTX_LOADED, and it also answers NVTX's lookup of a tool already in the
 * process (InitializeInjectionNvtx2Preinject), so that any way for NVTX to attach it other than
 * NVTX_INJECTION64_PATH would show as recorded ranges. Nothing from lstmd: only the NVTX headers. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

static int log_fd = -1;
static _Thread_local int depth; /* this thread's open ranges, for the return values */

static void record(const char *what, const char *name) {
  char line[512];
  int n = snprintf(line, sizeof line, "%ld %ld %s%s%s\n", (long)getpid(), (long)syscall(SYS_gettid),
                   what, name ? " " : "", name ? name : "");
  if (n >= (int)sizeof line) { /* a name too long: keep the line whole, cut the name */
    n = sizeof line - 1;
    line[n - 1] = '\n';
  }
  if (n > 0 && write(log_fd, line, (size_t)n) != n) { /* a test log: nothing to do about it */
  }
}

static int NVTX_API push_a(const char *message) {
  record("push", message ? message : "(null)");
  return depth++;
}

static int NVTX_API pop(void) {
  record("pop", NULL);
  return depth > 0 ? --depth : -1; /* -1: a pop without a push (the test flags the line) */
}

__attribute__((constructor)) static void note_loaded(void) {
  const char *path = getenv("LSTMD_NVTX_LOADED");
  if (!path || !*path) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char line[64];
  int n = snprintf(line, sizeof line, "%ld loaded\n", (long)getpid());
  if (n > 0 && write(fd, line, (size_t)n) != n) {
  }
  close(fd);
}

/* Returns 1 when attached; 0 makes NVTX unload the library and turn every call into a no-op. */
int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const char *path = getenv("LSTMD_NVTX_LOG");
  if (!path || !*path) return 0;
  const NvtxExportTableCallbacks *cb = get_export_table(NVTX_ETID_CALLBACKS);
  NvtxFunctionTable core = NULL;
  unsigned int size = 0;
  if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable ||
      !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &size) || !core ||
      size <= NVTX_CBID_CORE_RangePop || !core[NVTX_CBID_CORE_RangePushA] ||
      !core[NVTX_CBID_CORE_RangePop])
    return 0;
  log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (log_fd < 0) return 0;
  *core[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push_a;
  *core[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
  return 1;
}

/* The same entry point under the name NVTX looks up among the libraries already loaded. */
int InitializeInjectionNvtx2Preinject(NvtxGetExportTableFunc_t get_export_table) {
  return InitializeInjectionNvtx2(get_export_table);
}
