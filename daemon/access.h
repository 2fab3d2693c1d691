/* access.h — who may talk to `lstmd serve`, and which paths a job may name.
 *
 * - The UNIX socket is created mode 0600 (0660 when a group is configured) and every peer's
 *   credentials are checked with SO_PEERCRED: the daemon's own user, root, or (with a group) a
 *   member of that group.
 * - The TCP listener needs a shared token, compared in constant time.
 * - Dataset and run paths in a job must resolve (symlinks and ".." included) inside the data
 *   root; anything else is refused. */
#ifndef LSTMD_ACCESS_H
#define LSTMD_ACCESS_H

#include <stddef.h>
#include <sys/types.h>

/* Makes way for a UNIX socket at path: a stale socket file (nobody listening) is removed; a
 * live one (another daemon) or any other kind of file is an error. Returns 0 or LSTMD_EINVAL
 * with the reason in err. */
int lstmd_socket_make_way(const char *path, char *err, size_t n);
/* 1 when a daemon is listening on the UNIX socket at path (a probe: nothing is removed). */
int lstmd_socket_live(const char *path);

/* Checks the peer of an accepted UNIX connection. group < 0: no group configured. Returns 1
 * when allowed, else 0 with the reason in why. */
int lstmd_peer_allowed(int fd, long group, char *why, size_t n);

/* Reads a token file (one line; at least 16 bytes). Warns when others may read it. Returns 0 or
 * LSTMD_EINVAL / LSTMD_EIO with a message. */
int lstmd_token_load(const char *path, char *out, size_t n);
/* Equality of two NUL-terminated strings in time that depends only on the expected length. */
int lstmd_token_equal(const char *expected, const char *given);

/* Resolves path (relative paths against root, which must be an absolute, resolved directory)
 * into out and checks that it lies inside root. must_exist: the path itself must exist; else
 * its deepest existing ancestor is resolved and the rest may not contain "." or "..". Returns 0,
 * or LSTMD_EINVAL with the reason in err. */
int lstmd_path_inside(const char *root, const char *path, int must_exist, char *out, size_t n,
                      char *err, size_t errlen);

#endif
