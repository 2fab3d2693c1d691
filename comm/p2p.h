/* p2p.h — nonblocking point-to-point transfers between pipeline stages: activations go up and
 * gradients down, each direction on its own duplicate of a replica's pipeline communicator, all
 * requests driven to completion by one progress thread (so transfers move while the caller
 * computes without calling MPI), and every wait bounded by a deadline past which the whole job
 * ends, naming the peer and the item that never came. */
#ifndef LSTMD_P2P_H
#define LSTMD_P2P_H

#include <stddef.h>

struct lstmd_comm;
struct lstmd_p2p;

enum lstmd_p2p_dir { LSTMD_P2P_UP = 0, LSTMD_P2P_DOWN = 1 }; /* activations go up, gradients down */

/* The largest tag (tags are 0..LSTMD_P2P_MAX_TAG, e.g. unit·K + chunk): MPI_TAG_UB is only
 * guaranteed to be at least this. */
#define LSTMD_P2P_MAX_TAG 32767

/* Collective over c (a replica's pipeline communicator, e.g. from lstmd_comm_split): duplicates
 * it once per direction (so the two directions and other threads never cross-match), sets
 * MPI_ERRORS_RETURN, starts the progress thread. timeout_s bounds every wait
 * (train.comm_timeout_s; 0 = no limit). c must outlive the result. Returns 0, LSTMD_ENOMEM or
 * LSTMD_ECOMM (*out = NULL then). */
int lstmd_p2p_create(struct lstmd_comm *c, double timeout_s, struct lstmd_p2p **out);
/* Waits for nothing: the caller has waited for its requests (lstmd_p2p_wait_all) or is failing
 * (then requests still in flight are abandoned, and their buffers must stay allocated until the
 * job ends); stops the thread, frees the communicators. NULL is fine. */
void lstmd_p2p_destroy(struct lstmd_p2p *p);
/* Names c's ranks in messages by `noun` (a string that must outlive p, e.g. "stage": "stage 1
 * (rank 3)", rank 3 of the world) instead of "rank 1 (world rank 3)". Call before any post. */
void lstmd_p2p_name_ranks(struct lstmd_p2p *p, const char *noun);

typedef int lstmd_p2p_req; /* a handle; valid until waited for */

/* Posts a receive of exactly `bytes` (< 2^31) into buf from rank `peer` of c, with a tag
 * (0..LSTMD_P2P_MAX_TAG; checked), in direction dir. `what` (copied, up to 111 chars) names the
 * item for messages, e.g. "activations (F) of unit 0 chunk 3" (the messages name the peer). The buffer belongs
 * to MPI until the request is waited for. The post is made at once on the calling thread, so
 * messages of one (direction, peer, tag) match in the order they are posted. Returns 0 and the
 * handle in *out, LSTMD_EINVAL (bad direction, peer, tag or size; nothing posted), LSTMD_ENOMEM
 * (more than 2^20 requests outstanding) or LSTMD_ECOMM. Thread-safe. */
int lstmd_p2p_irecv(struct lstmd_p2p *p, int dir, int peer, int tag, void *buf, size_t bytes,
                    const char *what, lstmd_p2p_req *out);
/* The same for a send of `bytes` from buf (read-only until the request is waited for). */
int lstmd_p2p_isend(struct lstmd_p2p *p, int dir, int peer, int tag, const void *buf, size_t bytes,
                    const char *what, lstmd_p2p_req *out);
/* Blocks until the request is complete (the progress thread drives it), adding the time spent
 * here to *waited_s (may be NULL), and frees the handle. A receive whose count differs from
 * `bytes` (shorter, or longer: MPI_ERR_TRUNCATE) is an error naming both ranks (LSTMD_ECOMM);
 * the handle is freed all the same. If the request is not complete timeout_s after this wait
 * began, prints which rank waited for which peer rank and item (`what`), and for how long, then
 * ends the whole job (lstmd_comm_abort, exit code 1) without waiting on anything: a stalled
 * stage must never hang the others. An unknown or already waited-for handle: LSTMD_EINVAL. */
int lstmd_p2p_wait(struct lstmd_p2p *p, lstmd_p2p_req r, double *waited_s);
/* Every request posted so far (sends included), the same way: returns 0 or the first failure
 * after all of them completed (one deadline, timeout_s after this wait began). */
int lstmd_p2p_wait_all(struct lstmd_p2p *p, double *waited_s);

#endif
