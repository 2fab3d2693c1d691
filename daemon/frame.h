/* frame.h — the control socket's wire format as pure functions (no I/O, no globals), so that the
 * server, lstmctl, the tests and the fuzz target all run the same code.
 *
 * A frame is a 4-byte big-endian payload length, then the payload: one serialized message of
 * proto/lstmd.proto. The length is checked against the maximum before a byte of the payload is
 * buffered, so a lying prefix costs the daemon nothing. */
#ifndef LSTMD_FRAME_H
#define LSTMD_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "lstmd.pb-c.h"

#define LSTMD_FRAME_HEADER 4
#define LSTMD_FRAME_MAX_DEFAULT (4u << 20)

/* Limits a request must keep (beyond the frame size). */
#define LSTMD_MAX_SETTINGS 256
#define LSTMD_MAX_KEY_LEN 64
#define LSTMD_MAX_VALUE_LEN 1023
#define LSTMD_MAX_NAME_LEN 256
#define LSTMD_MAX_TOKEN_LEN 256

enum lstmd_frame_state {
  LSTMD_FRAME_NEED_MORE = 0, /* not a whole frame yet */
  LSTMD_FRAME_READY = 1,     /* a whole frame: payload at buf + LSTMD_FRAME_HEADER */
  LSTMD_FRAME_TOO_LARGE = -1 /* the header announces more than max */
};

/* Looks at the first len bytes received. Sets *payload_len once the header is complete. */
int lstmd_frame_peek(const uint8_t *buf, size_t len, uint32_t max, uint32_t *payload_len);
void lstmd_frame_put_header(uint8_t out[LSTMD_FRAME_HEADER], uint32_t payload_len);

/* Unpacks and validates one request payload: a known kind, ids present, settings within the
 * limits above and shaped "section.key". Returns the request (free with lstmd_request_free and
 * the same allocator: NULL for malloc, or an arena's, see arena.h), or NULL with *code (an
 * Lstmd__ErrorCode) and a message in err. */
Lstmd__Request *lstmd_request_parse(const uint8_t *payload, size_t len, ProtobufCAllocator *alloc,
                                    int *code, char *err, size_t errlen);
void lstmd_request_free(Lstmd__Request *r, ProtobufCAllocator *alloc);
/* "submit", "get", ...; "unknown" for anything else. */
const char *lstmd_request_kind_name(int kind_case);

/* Serializes any message into a malloc'd frame (header + payload) of *len bytes; NULL when out
 * of memory. */
uint8_t *lstmd_frame_pack(const ProtobufCMessage *msg, size_t *len);
/* A frame holding Response{error: {code, message}}. */
uint8_t *lstmd_frame_pack_error(int code, const char *message, size_t *len);

/* "QUEUED", "RUNNING", ... */
const char *lstmd_job_state_name(int state);

#endif
