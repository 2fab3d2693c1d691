/* launch_env.c — what MPI_Init of a singleton writes into the environment, taken out again for a
 * child that is to run a launcher itself.
 *
 * An lstmd started without mpirun is an MPI singleton: Open MPI's MPI_Init then sets OMPI_COMMAND,
 * OMPI_MCA_ess=singleton, OMPI_MCA_pmix, OMPI_MCA_orte_*, PMIX_* and more in this process's
 * environment. An `mpirun` started from it (lstmd selftest's two-rank nccl check) inherits them,
 * takes itself for a process of that singleton's job and exits 1 without a word (seen on an H200,
 * 2026-11-27). lstmd_comm_init notes the OMPI_, PMIX_, ORTE_ and PRTE_ names present before
 * MPI_Init, the user's own settings (OMPI_ALLOW_RUN_AS_ROOT, OMPI_MCA_plm, ...);
 * lstmd_comm_forget_launch_env, in the forked child before exec, unsets every other one. */
#define _GNU_SOURCE
#include "comm.h"

#include <stdlib.h>
#include <string.h>

extern char **environ;

static char **g_before; /* names, NULL-terminated; NULL: not noted (nothing is removed) */

/* Open MPI 4's singleton also sets ORTE_SCHIZO_DETECTION; Open MPI 5 has PRTE_ for ORTE_. */
static int launch_var(const char *entry) {
  static const char *const kPrefixes[] = {"OMPI_", "PMIX_", "ORTE_", "PRTE_"};
  for (size_t i = 0; i < sizeof kPrefixes / sizeof *kPrefixes; i++)
    if (!strncmp(entry, kPrefixes[i], 5)) return 1;
  return 0;
}

static size_t name_len(const char *entry) { return strcspn(entry, "="); }

void lstmd_comm_note_launch_env(void) {
  if (g_before) return;
  size_t n = 0;
  for (char **e = environ; *e; e++) n += launch_var(*e);
  char **names = calloc(n + 1, sizeof *names);
  if (!names) return;
  size_t k = 0;
  for (char **e = environ; *e && k < n; e++)
    if (launch_var(*e) && !(names[k++] = strndup(*e, name_len(*e)))) return; /* leaks on ENOMEM: once */
  g_before = names;
}

static int noted(const char *entry) {
  const size_t len = name_len(entry);
  for (char **b = g_before; *b; b++)
    if (strlen(*b) == len && !strncmp(*b, entry, len)) return 1;
  return 0;
}

void lstmd_comm_forget_launch_env(void) {
  if (!g_before) return;
  for (int again = 1; again;) { /* unsetenv changes environ: start over after each */
    again = 0;
    for (char **e = environ; *e; e++) {
      if (!launch_var(*e) || noted(*e)) continue;
      char *name = strndup(*e, name_len(*e));
      if (!name) return;
      unsetenv(name);
      free(name);
      again = 1;
      break;
    }
  }
}
