/* paths.h — where things are: this executable's folder, and the first executable of a name on
 * PATH (what a shell would run). Used to find the GPU module, the python3 whose wheels hold the
 * CUDA libraries, mpirun for doctor, and the selftest's own binary. */
#ifndef LSTMD_PATHS_H
#define LSTMD_PATHS_H

#include <stddef.h>

/* The folder of /proc/self/exe into buf; returns 0, or -1 with buf "". */
int lstmd_exe_dir(char *buf, size_t n);
/* "<dir>/<name>" for the first PATH entry holding an executable name (the path as written, not
 * resolved), into buf; returns buf, or NULL when none does. */
const char *lstmd_on_path(const char *name, char *buf, size_t n);

#endif
