/* server.h — the control server of `lstmd serve`: a libuv loop on its own thread of rank 0.
 *
 * It accepts connections on the UNIX socket (and the TCP listener when configured), reads
 * length-prefixed frames (frame.h) with the size checked before anything is buffered, answers
 * requests from the job table (jobs.h), and streams job events to watchers. Nothing on this
 * thread calls MPI or trains: the job runner (cli_serve.c) owns that, and events come to the
 * loop through the job table's post hook (a locked queue + uv_async_send).
 *
 * Bad clients cost bounded resources: a frame larger than the maximum is answered with an error
 * and the connection closed; buffers grow only as bytes arrive, within a budget for all
 * connections together; a connection that does not complete a request within the idle timeout
 * is closed; a client that does not read its replies is dropped (past 16 MiB queued at once, or
 * the idle timeout after its connection was closed); beyond the connection limit new
 * connections are closed at once. SIGPIPE is ignored in the whole process (a write to a client
 * that has gone fails with EPIPE instead of ending the rank). */
#ifndef LSTMD_SERVER_H
#define LSTMD_SERVER_H

#include <sched.h>
#include <stdint.h>

#include "jobs.h"

struct lstmd_server_config {
  const char *socket_path;
  long socket_group;      /* gid for mode 0660, or -1 for 0600 */
  const char *listen_host; /* NULL: no TCP listener */
  int listen_port;
  const char *token;      /* required with a TCP listener */
  const char *data_root;  /* absolute and resolved */
  uint32_t max_frame;
  double idle_timeout_s;
  int max_connections;
  const cpu_set_t *cpus; /* where the control thread may run (NULL: where it is started) */
  int world;              /* the daemon's ranks (jobs' model.stages must divide it) */
};

struct lstmd_server;

/* Binds the listeners (errors are reported here, before any thread starts), then runs the loop
 * on a new thread. SIGINT, SIGTERM and SIGUSR1 start a drain, like a Shutdown request. Returns 0
 * and *out, or a status with *out NULL: LSTMD_EINVAL for a socket path or listen address that
 * cannot be used (a live daemon's socket, a file that is not a socket, a port in use),
 * LSTMD_ENOMEM when the system refuses a loop, a handle or the thread. A failed start leaves
 * nothing behind: no handle or descriptor, no post hook in `jobs`, and the socket file removed
 * only if this call created it. */
int lstmd_server_start(const struct lstmd_server_config *cfg, struct lstmd_jobs *jobs,
                       struct lstmd_server **out);
/* Whether `lstmd serve --listen HOST:PORT` could listen there, asked before the daemon makes its
 * state dir (cli_serve.c), so that a bad address or a port in use refuses the start leaving
 * nothing behind: HOST must be a numeric IPv4 or IPv6 address, and a socket with libuv's options
 * (SO_REUSEADDR) must bind to it; the probe's socket is closed again. Returns 0, or
 * LSTMD_EINVAL with the message printed (the same words as the server's own bind). The port can
 * still be taken between the probe and the server's bind: that start fails after the state dir
 * is made, as before. */
int lstmd_server_probe_tcp(const char *host, int port);
/* From any thread: flush what is queued for the clients, close everything and end the loop. */
void lstmd_server_stop(struct lstmd_server *s);
/* Waits for the loop thread, removes the socket file and frees the server. */
void lstmd_server_join(struct lstmd_server *s);

#endif
