/* frame.c — framing and request validation of the control protocol (see frame.h). */
#include "frame.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/utf8.h"

int lstmd_frame_peek(const uint8_t *buf, size_t len, uint32_t max, uint32_t *payload_len) {
  if (len < LSTMD_FRAME_HEADER) return LSTMD_FRAME_NEED_MORE;
  const uint32_t n = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 | buf[3];
  *payload_len = n;
  if (n > max) return LSTMD_FRAME_TOO_LARGE;
  return len - LSTMD_FRAME_HEADER >= n ? LSTMD_FRAME_READY : LSTMD_FRAME_NEED_MORE;
}

void lstmd_frame_put_header(uint8_t out[LSTMD_FRAME_HEADER], uint32_t n) {
  out[0] = (uint8_t)(n >> 24);
  out[1] = (uint8_t)(n >> 16);
  out[2] = (uint8_t)(n >> 8);
  out[3] = (uint8_t)n;
}

const char *lstmd_request_kind_name(int kind_case) {
  switch (kind_case) {
    case LSTMD__REQUEST__KIND_SUBMIT: return "submit";
    case LSTMD__REQUEST__KIND_GET: return "get";
    case LSTMD__REQUEST__KIND_LIST: return "list";
    case LSTMD__REQUEST__KIND_CANCEL: return "cancel";
    case LSTMD__REQUEST__KIND_WATCH: return "watch";
    case LSTMD__REQUEST__KIND_SHUTDOWN: return "shutdown";
    default: return "unknown";
  }
}

const char *lstmd_job_state_name(int state) {
  switch (state) {
    case LSTMD__JOB_STATE__QUEUED: return "QUEUED";
    case LSTMD__JOB_STATE__RUNNING: return "RUNNING";
    case LSTMD__JOB_STATE__SUCCEEDED: return "SUCCEEDED";
    case LSTMD__JOB_STATE__FAILED: return "FAILED";
    case LSTMD__JOB_STATE__CANCELLED: return "CANCELLED";
    default: return "UNKNOWN";
  }
}

/* "section.key": lower-case letters, digits and '_' on both sides of exactly one dot. */
static int key_is_well_formed(const char *k) {
  size_t len = strlen(k), dots = 0;
  if (len == 0 || len > LSTMD_MAX_KEY_LEN || k[0] == '.' || k[len - 1] == '.') return 0;
  for (const char *p = k; *p; p++) {
    if (*p == '.') dots++;
    else if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return 0;
  }
  return dots == 1;
}

/* Field number 0 is invalid in protobuf, but protobuf-c 1.4 decodes it when the key is written
 * in an overlong varint (80 00) and keeps it as an unknown field; packed again (the daemon copies
 * a job's settings into its Job record that way) it is written canonically and no longer decodes.
 * Unknown fields with valid numbers are ignored, as proto3 wants. */
static int has_field_zero(const ProtobufCMessage *m) {
  for (unsigned i = 0; m && i < m->n_unknown_fields; i++)
    if (m->unknown_fields[i].tag == 0) return 1;
  return 0;
}

static int any_field_zero(const Lstmd__Request *r) {
  if (has_field_zero(&r->base)) return 1;
  switch (r->kind_case) {
    case LSTMD__REQUEST__KIND_SUBMIT: {
      const Lstmd__JobSpec *spec = r->submit->spec;
      if (has_field_zero(&r->submit->base) || (spec && has_field_zero(&spec->base))) return 1;
      for (size_t i = 0; spec && i < spec->n_settings; i++)
        if (has_field_zero(&spec->settings[i]->base)) return 1;
      return 0;
    }
    case LSTMD__REQUEST__KIND_GET: return has_field_zero(&r->get->base);
    case LSTMD__REQUEST__KIND_LIST: return has_field_zero(&r->list->base);
    case LSTMD__REQUEST__KIND_CANCEL: return has_field_zero(&r->cancel->base);
    case LSTMD__REQUEST__KIND_WATCH: return has_field_zero(&r->watch->base);
    case LSTMD__REQUEST__KIND_SHUTDOWN: return has_field_zero(&r->shutdown->base);
    default: return 0;
  }
}

static int validate(const Lstmd__Request *r, int *code, char *err, size_t n) {
  *code = LSTMD__ERROR_CODE__BAD_REQUEST;
  if (any_field_zero(r)) {
    snprintf(err, n, "malformed request (a field numbered 0)");
    return -1;
  }
  if (strlen(r->token) > LSTMD_MAX_TOKEN_LEN) {
    snprintf(err, n, "token longer than %d bytes", LSTMD_MAX_TOKEN_LEN);
    return -1;
  }
  switch (r->kind_case) {
    case LSTMD__REQUEST__KIND_SUBMIT: {
      const Lstmd__JobSpec *spec = r->submit->spec;
      if (!spec) {
        snprintf(err, n, "submit: no job spec");
        return -1;
      }
      if (strlen(spec->name) > LSTMD_MAX_NAME_LEN) {
        snprintf(err, n, "submit: job name longer than %d bytes", LSTMD_MAX_NAME_LEN);
        return -1;
      }
      if (!lstmd_utf8_valid(spec->name)) { /* a proto3 string; stored in Job records */
        snprintf(err, n, "submit: job name is not valid UTF-8");
        return -1;
      }
      /* Names reach every user's terminal in lstmctl list/status/top: no line breaks or escape
       * sequences (a shared daemon's one user could otherwise write into another's terminal) */
      for (const unsigned char *c = (const unsigned char *)spec->name; *c; c++)
        if (*c < 0x20 || *c == 0x7f) {
          snprintf(err, n, "submit: job name holds a control character (byte 0x%02x at %zu): "
                   "names are one line of printable text", *c, (size_t)(c - (const unsigned char *)spec->name));
          return -1;
        }
      if (spec->n_settings > LSTMD_MAX_SETTINGS) {
        snprintf(err, n, "submit: %zu settings (at most %d)", spec->n_settings, LSTMD_MAX_SETTINGS);
        return -1;
      }
      *code = LSTMD__ERROR_CODE__INVALID_JOB;
      for (size_t i = 0; i < spec->n_settings; i++) {
        const Lstmd__Setting *s = spec->settings[i];
        if (!key_is_well_formed(s->key)) {
          snprintf(err, n, "submit: setting %zu: '%.80s' is not a section.key name", i + 1, s->key);
          return -1;
        }
        if (strlen(s->value) > LSTMD_MAX_VALUE_LEN) {
          snprintf(err, n, "submit: %s: value longer than %d bytes", s->key, LSTMD_MAX_VALUE_LEN);
          return -1;
        }
      }
      return 0;
    }
    case LSTMD__REQUEST__KIND_GET:
    case LSTMD__REQUEST__KIND_CANCEL:
    case LSTMD__REQUEST__KIND_WATCH: {
      uint64_t id = r->kind_case == LSTMD__REQUEST__KIND_GET      ? r->get->id
                    : r->kind_case == LSTMD__REQUEST__KIND_CANCEL ? r->cancel->id
                                                                  : r->watch->id;
      if (id == 0) {
        snprintf(err, n, "%s: no job id", lstmd_request_kind_name(r->kind_case));
        return -1;
      }
      return 0;
    }
    case LSTMD__REQUEST__KIND_LIST:
    case LSTMD__REQUEST__KIND_SHUTDOWN:
      return 0;
    default:
      snprintf(err, n, "unknown request kind (this daemon knows submit, get, list, cancel, watch, "
                       "shutdown)");
      return -1;
  }
}

Lstmd__Request *lstmd_request_parse(const uint8_t *payload, size_t len, ProtobufCAllocator *alloc,
                                    int *code, char *err, size_t errlen) {
  Lstmd__Request *r = lstmd__request__unpack(alloc, len, payload);
  if (!r) {
    *code = LSTMD__ERROR_CODE__BAD_REQUEST;
    snprintf(err, errlen, "malformed request (not a lstmd.Request message)");
    return NULL;
  }
  if (validate(r, code, err, errlen) != 0) {
    lstmd__request__free_unpacked(r, alloc);
    return NULL;
  }
  return r;
}

void lstmd_request_free(Lstmd__Request *r, ProtobufCAllocator *alloc) {
  if (r) lstmd__request__free_unpacked(r, alloc);
}

uint8_t *lstmd_frame_pack(const ProtobufCMessage *msg, size_t *len) {
  const size_t n = protobuf_c_message_get_packed_size(msg);
  if (n > UINT32_MAX) return NULL;
  uint8_t *buf = malloc(LSTMD_FRAME_HEADER + n);
  if (!buf) return NULL;
  lstmd_frame_put_header(buf, (uint32_t)n);
  protobuf_c_message_pack(msg, buf + LSTMD_FRAME_HEADER);
  *len = LSTMD_FRAME_HEADER + n;
  return buf;
}

uint8_t *lstmd_frame_pack_error(int code, const char *message, size_t *len) {
  Lstmd__Error e = LSTMD__ERROR__INIT;
  e.code = code;
  e.message = (char *)message;
  Lstmd__Response resp = LSTMD__RESPONSE__INIT;
  resp.kind_case = LSTMD__RESPONSE__KIND_ERROR;
  resp.error = &e;
  return lstmd_frame_pack(&resp.base, len);
}
