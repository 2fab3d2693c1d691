/* config_load.c — reading configs into the table of config.c (see config.h): INI files (inih,
 * through a reader that refuses over-long lines and NUL bytes; quoted values and inline
 * comments), `--set section.key=value`, and the JSON copy stored in checkpoints. */
#include "config.h"

#include <errno.h>
#include <ini.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "kernels/status.h"

/* inih reads a line into a fixed buffer (200 bytes in Debian's build) and hands the rest of a
 * longer one over as a line of its own: a long data.path would be cut short and the error
 * reported a line late, or not at all. This reader stops at such a line instead, so it is
 * reported as itself. It reads byte by byte, so that a NUL inside a line (which would cut it
 * short for inih's string functions) is seen and refused too, and a Windows line end's '\r'
 * does not count towards the length. */
struct ini_reader {
  FILE *f;
  int line;        /* lines handed to inih so far */
  size_t too_long; /* length of the line that did not fit (0: none) */
  int max;         /* the longest line inih takes, newline excluded */
  int nul;         /* the line stopped at holds a NUL byte */
  const char *bad_header; /* the line stopped at is a malformed [section] header: why */
};

/* What is wrong with a [section] line, or NULL: inih takes "[model]]" and "[model] x" as
 * [model], and for a "[model" without its ']' went on under the section before, so the
 * message named a key of the next line ("unknown config key 'data.hidden'"). */
static const char *header_error(const char *line) {
  while (*line == ' ' || *line == '\t') line++;
  if (*line != '[') return NULL;
  const char *close = strchr(line, ']');
  if (!close) return "a [section] header without its closing ']'";
  for (const char *p = close + 1; *p; p++) {
    if (*p == '#' || *p == ';') return NULL;
    if (*p != ' ' && *p != '\t' && *p != '\r')
      return "text after a [section] header's ']' (only a comment may follow)";
  }
  return NULL;
}

static char *read_ini_line(char *str, int num, void *stream) {
  struct ini_reader *r = stream;
  size_t n = 0, len = 0; /* bytes kept in str, bytes in the line (without its '\n') */
  int c, last = 0;
  while ((c = getc(r->f)) != EOF && c != '\n') {
    if (n + 1 < (size_t)num) str[n++] = (char)c;
    r->nul |= c == 0;
    last = c;
    len++;
  }
  if (c == EOF && (len == 0 || ferror(r->f))) return NULL;
  r->line++;
  const size_t shown = len - (last == '\r'); /* a '\r' beyond the room is dropped: inih trims it */
  if (r->nul || shown > (size_t)num - 1) {
    r->too_long = r->nul ? 0 : shown;
    r->max = num - 1;
    return NULL;
  }
  str[n] = '\0';
  if ((r->bad_header = header_error(str))) return NULL;
  return str;
}

struct ini_ctx {
  lstmd_config_pair_fn fn;
  void *user;
  char first_error[512];
};

/* Drops a trailing comment that starts with whitespace then '#' or ';' ("steps = 5  # quick").
 * Debian's inih is built without inline comments. */
static const char *strip_inline_comment(const char *value, char *buf, size_t n) {
  snprintf(buf, n, "%s", value);
  for (char *p = buf; *p; p++)
    if ((*p == '#' || *p == ';') && p > buf && (p[-1] == ' ' || p[-1] == '\t')) {
      *p = '\0';
      break;
    }
  for (size_t len = strlen(buf); len && (buf[len - 1] == ' ' || buf[len - 1] == '\t');) buf[--len] = '\0';
  return buf;
}

/* A value in double quotes keeps what inih would trim or cut (spaces at either end, a ' #' or
 * ' ;'), with the escapes \n, \t, \" and \\ (a sample prime of "The " or "\n"); after the
 * closing quote only spaces and a comment may follow. NULL with *err set when malformed. */
static const char *unquote(const char *raw, char *buf, size_t n, const char **err) {
  size_t len = 0;
  const char *p = raw + 1;
  for (; *p && *p != '"'; p++) {
    char ch = *p;
    if (ch == '\\') {
      const char next = *++p;
      ch = next == 'n' ? '\n' : next == 't' ? '\t' : next == '"' || next == '\\' ? next : 0;
      if (!ch) {
        *err = "a quoted value has an escape other than \\n, \\t, \\\" or \\\\";
        return NULL;
      }
    }
    if (len + 1 >= n) {
      *err = "a quoted value is too long";
      return NULL;
    }
    buf[len++] = ch;
  }
  buf[len] = '\0';
  if (*p != '"') {
    *err = "a quoted value has no closing '\"'";
    return NULL;
  }
  for (p++; *p == ' ' || *p == '\t'; p++) {
  }
  if (*p && *p != '#' && *p != ';') {
    *err = "text after a quoted value's closing '\"' (only a comment may follow)";
    return NULL;
  }
  return buf;
}

static int on_ini_pair(void *user, const char *section, const char *name, const char *raw) {
  struct ini_ctx *ctx = user;
  char err[384], value_buf[1100], dotted[192];
  const char *why = NULL;
  const char *value = raw[0] == '"' ? unquote(raw, value_buf, sizeof value_buf, &why)
                                    : strip_inline_comment(raw, value_buf, sizeof value_buf);
  if (!value) {
    if (!ctx->first_error[0])
      snprintf(ctx->first_error, sizeof ctx->first_error, "%s.%s: %s", section, name, why);
    return 0;
  }
  if (!section[0]) { /* inih hands keys before the first [section] over with an empty one */
    /* the section that has a key of that name, if one does */
    const char *home = lstmd_config_key_section(name);
    if (!ctx->first_error[0])
      snprintf(ctx->first_error, sizeof ctx->first_error,
               "'%s' comes before any [section] header%s%s%s", name, home ? " (under [" : "",
               home ? home : "", home ? "] it would be a key)" : "");
    return 0;
  }
  snprintf(dotted, sizeof dotted, "%s.%s", section, name);
  int rc = ctx->fn(ctx->user, dotted, value, err, sizeof err);
  if (rc && !ctx->first_error[0]) snprintf(ctx->first_error, sizeof ctx->first_error, "%s", err);
  return rc == 0;
}

int lstmd_config_read_ini(const char *path, lstmd_config_pair_fn fn, void *user) {
  struct ini_ctx ctx = {.fn = fn, .user = user};
  /* inih stops at a read error as at the end of the file: a directory (fopen succeeds, the read
   * fails with EISDIR) would pass for an empty config. Pipes (--config <(...)) are fine. */
  FILE *f = fopen(path, "r");
  struct ini_reader reader = {.f = f};
  int line = f ? ini_parse_stream(read_ini_line, &reader, on_ini_pair, &ctx) : -1;
  if (f && line >= 0 && ferror(f)) line = -1;
  if (line == 0 && (reader.too_long || reader.nul || reader.bad_header)) {
    fclose(f);
    if (reader.bad_header)
      lstmd_errorf("%s:%d: %s", path, reader.line, reader.bad_header);
    else if (reader.nul)
      lstmd_errorf("%s:%d: the line holds a NUL byte (is this a text file?)", path, reader.line);
    else
      lstmd_errorf("%s:%d: the line is %zu characters long, and config files take lines of at "
                   "most %d: give a longer value on the command line (--set section.key=value)",
                   path, reader.line, reader.too_long, reader.max);
    return LSTMD_ECONFIG;
  }
  const int saved = errno;
  if (f) fclose(f);
  if (line < 0) {
    lstmd_errorf("%s: cannot read config file: %s", path,
                 line == -1 ? strerror(saved) : "out of memory");
    return LSTMD_EIO;
  }
  if (line > 0) {
    lstmd_errorf("%s:%d: %s", path, line,
                 ctx.first_error[0] ? ctx.first_error
                                    : "syntax error (expected [section], key = value, or a ; or # "
                                      "comment)");
    return LSTMD_ECONFIG;
  }
  return LSTMD_OK;
}

static int apply_pair(void *user, const char *dotted, const char *value, char *err, size_t n) {
  return lstmd_config_set_key(user, dotted, value, err, n);
}

int lstmd_config_load_ini(struct lstmd_train_config *c, const char *path) {
  return lstmd_config_read_ini(path, apply_pair, c);
}

/* Applies "section.key" = value; `origin` names where it came from in messages. */
static int set_dotted(struct lstmd_train_config *c, const char *dotted, const char *value,
                      const char *origin) {
  char err[512];
  int rc = lstmd_config_set_key(c, dotted, value, err, sizeof err);
  if (rc) lstmd_errorf("%s: %s", origin, err);
  return rc;
}

int lstmd_config_set(struct lstmd_train_config *c, const char *assignment) {
  const char *eq = strchr(assignment, '=');
  if (!eq || eq == assignment) {
    lstmd_errorf("--set %s: expected section.key=value", assignment);
    return LSTMD_ECONFIG;
  }
  char key[128];
  size_t n = (size_t)(eq - assignment);
  if (n >= sizeof key) n = sizeof key - 1;
  memcpy(key, assignment, n);
  key[n] = '\0';
  return set_dotted(c, key, eq + 1, "--set");
}

int lstmd_config_load_json(struct lstmd_train_config *c, const char *json_text) {
  json_t *root = json_loads(json_text, 0, NULL);
  if (!json_is_object(root)) {
    json_decref(root);
    lstmd_errorf("checkpoint config is not a JSON object");
    return LSTMD_EFORMAT;
  }
  const char *key;
  json_t *v;
  int rc = LSTMD_OK;
  json_object_foreach(root, key, v) {
    if (!rc && !json_is_string(v)) rc = LSTMD_EFORMAT;
    if (!rc) rc = set_dotted(c, key, json_string_value(v), "checkpoint config");
  }
  json_decref(root);
  return rc;
}
