/* fuzz_frame.c — libFuzzer target for the control protocol's pure functions: lstmd_frame_peek over
 * a byte stream of frames, lstmd_request_parse on every payload, and the settings of a parsed
 * submit applied to a defaults-initialised config through the config table (as the daemon does,
 * minus the path checks that touch the file system). Invariants are checked with abort(), so a
 * violation is a crash to libFuzzer and a failure to the plain driver (fuzz_driver.c). */
#include "fuzz_frame.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/arena.h"
#include "daemon/config.h"
#include "daemon/frame.h"
#include "kernels/status.h"

struct fuzz_frame_counts fuzz_frame_counts;

#define REQUIRE(cond)                                                              \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "fuzz_frame: %s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                     \
    }                                                                              \
  } while (0)

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The daemon turns settings into JSON for every rank, which loads it back (cli_serve.c): what
 * one rank accepted, every rank must accept, with the same effective config. */
static void check_json_round_trip(const struct lstmd_train_config *c) {
  char *json = lstmd_config_to_json(c);
  REQUIRE(json != NULL);
  struct lstmd_train_config again;
  lstmd_config_defaults(&again);
  REQUIRE(lstmd_config_load_json(&again, json) == LSTMD_OK);
  char *json2 = lstmd_config_to_json(&again);
  if (!json2 || strcmp(json, json2) != 0)
    fprintf(stderr, "fuzz_frame: %s\n  became %s\n", json, json2 ? json2 : "(null)");
  REQUIRE(json2 != NULL && strcmp(json, json2) == 0);
  free(json);
  free(json2);
}

static void apply_settings(const Lstmd__JobSpec *spec) {
  struct lstmd_train_config c;
  lstmd_config_defaults(&c);
  char err[512];
  for (size_t i = 0; i < spec->n_settings; i++) {
    memset(err, 0, sizeof err);
    int rc = lstmd_config_set_key(&c, spec->settings[i]->key, spec->settings[i]->value, err, sizeof err);
    if (rc) {
      REQUIRE(rc == LSTMD_ECONFIG && err[0] != '\0' && memchr(err, 0, sizeof err));
      fuzz_frame_counts.config_rejected++;
      return;
    }
  }
  fuzz_frame_counts.config_ok++;
  (void)lstmd_config_check(&c, err, sizeof err);
  check_json_round_trip(&c);
}

/* An error reply must frame and decode back to the same code and message. */
static void check_error_reply(int code, const char *msg) {
  size_t len = 0;
  uint8_t *f = lstmd_frame_pack_error(code, msg, &len);
  REQUIRE(f != NULL && len >= LSTMD_FRAME_HEADER && be32(f) == len - LSTMD_FRAME_HEADER);
  Lstmd__Response *resp = lstmd__response__unpack(NULL, len - LSTMD_FRAME_HEADER, f + LSTMD_FRAME_HEADER);
  REQUIRE(resp && resp->kind_case == LSTMD__RESPONSE__KIND_ERROR);
  REQUIRE(resp->error->code == (Lstmd__ErrorCode)code && strcmp(resp->error->message, msg) == 0);
  lstmd__response__free_unpacked(resp, NULL);
  free(f);
}

/* The daemon parses into an arena (server_conn.c). The input is parsed with malloc first (so that
 * AddressSanitizer sees every piece protobuf-c allocates), then into the arena, which must give
 * the same verdict and, re-encoded, the same bytes. */
static struct lstmd_arena g_arena;

static void check_arena_agrees(const uint8_t *payload, size_t n, const Lstmd__Request *r, int code) {
  char err[1600];
  int code2 = -1;
  lstmd_arena_reset(&g_arena);
  ProtobufCAllocator *arena = lstmd_arena_allocator(&g_arena);
  Lstmd__Request *ra = lstmd_request_parse(payload, n, arena, &code2, err, sizeof err);
  REQUIRE((ra == NULL) == (r == NULL));
  if (!r) {
    REQUIRE(code2 == code);
    return;
  }
  size_t len = 0, len2 = 0;
  uint8_t *f = lstmd_frame_pack(&r->base, &len), *f2 = lstmd_frame_pack(&ra->base, &len2);
  REQUIRE(f && f2 && len == len2 && memcmp(f, f2, len) == 0);
  free(f);
  free(f2);
  lstmd_request_free(ra, arena);
}

static void parse_one(const uint8_t *payload, size_t n) {
  char err[1600];
  memset(err, 0x5a, sizeof err);
  int code = -1;
  Lstmd__Request *r = lstmd_request_parse(payload, n, NULL, &code, err, sizeof err);
  check_arena_agrees(payload, n, r, code);
  if (!r) {
    fuzz_frame_counts.rejected++;
    REQUIRE(code == LSTMD__ERROR_CODE__BAD_REQUEST || code == LSTMD__ERROR_CODE__INVALID_JOB);
    REQUIRE(memchr(err, 0, sizeof err) != NULL && err[0] != '\0');
    check_error_reply(code, err);
    return;
  }
  REQUIRE(strcmp(lstmd_request_kind_name(r->kind_case), "unknown") != 0);
  REQUIRE(r->kind_case > 0 && r->kind_case < 16);
  fuzz_frame_counts.accepted[r->kind_case]++;
  switch (r->kind_case) {
    case LSTMD__REQUEST__KIND_GET: REQUIRE(r->get->id != 0); break;
    case LSTMD__REQUEST__KIND_CANCEL: REQUIRE(r->cancel->id != 0); break;
    case LSTMD__REQUEST__KIND_WATCH: REQUIRE(r->watch->id != 0); break;
    case LSTMD__REQUEST__KIND_SUBMIT:
      REQUIRE(r->submit->spec && r->submit->spec->n_settings <= LSTMD_MAX_SETTINGS);
      apply_settings(r->submit->spec);
      break;
    default: break;
  }
  /* What the daemon accepted re-encodes to a request it accepts again, byte-stable. */
  size_t len = 0, len2 = 0;
  uint8_t *f = lstmd_frame_pack(&r->base, &len);
  REQUIRE(f != NULL);
  uint32_t plen = 0;
  REQUIRE(lstmd_frame_peek(f, len, UINT32_MAX, &plen) == LSTMD_FRAME_READY);
  REQUIRE(plen == len - LSTMD_FRAME_HEADER);
  Lstmd__Request *r2 = lstmd_request_parse(f + LSTMD_FRAME_HEADER, plen, NULL, &code, err, sizeof err);
  if (!r2) fprintf(stderr, "fuzz_frame: a re-encoded %s request is refused: %s\n",
                   lstmd_request_kind_name(r->kind_case), err);
  REQUIRE(r2 != NULL && r2->kind_case == r->kind_case);
  uint8_t *f2 = lstmd_frame_pack(&r2->base, &len2);
  REQUIRE(f2 && len2 == len && memcmp(f, f2, len) == 0);
  free(f);
  free(f2);
  lstmd_request_free(r2, NULL);
  lstmd_request_free(r, NULL);
}

/* Walks the input as the daemon walks a connection's bytes, under a given maximum. */
static void walk_frames(const uint8_t *data, size_t size, uint32_t max) {
  size_t off = 0;
  while (off < size) {
    const size_t left = size - off;
    uint32_t n = 0xdeadbeef;
    int st = lstmd_frame_peek(data + off, left, max, &n);
    if (left < LSTMD_FRAME_HEADER) {
      REQUIRE(st == LSTMD_FRAME_NEED_MORE && n == 0xdeadbeef);
      return;
    }
    REQUIRE(n == be32(data + off));
    if (n > max) {
      REQUIRE(st == LSTMD_FRAME_TOO_LARGE);
      fuzz_frame_counts.too_large++;
      return;
    }
    if (left - LSTMD_FRAME_HEADER < n) {
      REQUIRE(st == LSTMD_FRAME_NEED_MORE);
      return;
    }
    REQUIRE(st == LSTMD_FRAME_READY);
    /* one byte short of the frame is never ready */
    uint32_t again = 0;
    REQUIRE(lstmd_frame_peek(data + off, LSTMD_FRAME_HEADER + n - 1, max, &again) ==
            LSTMD_FRAME_NEED_MORE);
    fuzz_frame_counts.frames++;
    parse_one(data + off + LSTMD_FRAME_HEADER, n);
    off += LSTMD_FRAME_HEADER + (size_t)n;
  }
}

/* The raw input as one `section.key=value` assignment (what --set and INI lines feed the table). */
static void raw_assignment(const uint8_t *data, size_t size) {
  if (size > 4096) return;
  char buf[4097];
  memcpy(buf, data, size);
  buf[size] = '\0';
  char *eq = strchr(buf, '=');
  if (!eq) return;
  *eq = '\0';
  struct lstmd_train_config c;
  lstmd_config_defaults(&c);
  char err[512];
  if (lstmd_config_set_key(&c, buf, eq + 1, err, sizeof err) == LSTMD_OK) check_json_round_trip(&c);
}

/* The seeds must reach every request kind, the validator's rejections, the config table's
 * both outcomes and the too-large check. */
int fuzz_target_seeds_ok(void) {
  static const int kKinds[] = {LSTMD__REQUEST__KIND_SUBMIT, LSTMD__REQUEST__KIND_GET,
                               LSTMD__REQUEST__KIND_LIST,   LSTMD__REQUEST__KIND_CANCEL,
                               LSTMD__REQUEST__KIND_WATCH,  LSTMD__REQUEST__KIND_SHUTDOWN};
  int stale = 0;
  for (size_t i = 0; i < sizeof kKinds / sizeof kKinds[0]; i++)
    if (!fuzz_frame_counts.accepted[kKinds[i]]) {
      fprintf(stderr, "fuzz_driver: no seed is an accepted '%s' request\n",
              lstmd_request_kind_name(kKinds[i]));
      stale = 1;
    }
  if (!fuzz_frame_counts.rejected || !fuzz_frame_counts.config_ok ||
      !fuzz_frame_counts.config_rejected || !fuzz_frame_counts.too_large) {
    fprintf(stderr, "fuzz_driver: the seeds miss an outcome (rejected %zu, config ok %zu, config "
            "rejected %zu, too large %zu)\n", fuzz_frame_counts.rejected, fuzz_frame_counts.config_ok,
            fuzz_frame_counts.config_rejected, fuzz_frame_counts.too_large);
    stale = 1;
  }
  return !stale;
}

void fuzz_target_report(FILE *out) {
  size_t accepted = 0;
  for (int i = 0; i < 16; i++) accepted += fuzz_frame_counts.accepted[i];
  fprintf(out, "%zu frames, %zu too large, %zu requests accepted, %zu rejected; settings: %zu "
          "configs accepted, %zu rejected", fuzz_frame_counts.frames, fuzz_frame_counts.too_large,
          accepted, fuzz_frame_counts.rejected, fuzz_frame_counts.config_ok,
          fuzz_frame_counts.config_rejected);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  walk_frames(data, size, LSTMD_FRAME_MAX_DEFAULT);
  walk_frames(data, size, 64); /* a small --max-frame */
  if (size <= 1 << 20) parse_one(data, size); /* the whole input as one payload */
  raw_assignment(data, size);
  return 0;
}
