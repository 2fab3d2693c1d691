/* utf8.h — strict UTF-8 validation (no overlong forms, no surrogates, nothing past U+10FFFF), the
 * rule that proto3 strings and JSON text (jansson) both hold values to. Config strings travel to
 * every rank as JSON, job names and settings are stored in proto3 Job records, and a dataset's
 * column and label names in every checkpoint's JSON metadata, so text that is not UTF-8 is
 * refused where it comes in instead of being dropped on the way. */
#ifndef LSTMD_UTF8_H
#define LSTMD_UTF8_H

#include <stddef.h>

/* 1 when the NUL-terminated s is valid UTF-8. */
static inline int lstmd_utf8_valid(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned c = *p;
    size_t n;
    unsigned cp;
    if (c < 0x80) {
      p++;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 1, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3, cp = c & 0x07;
    } else {
      return 0; /* continuation byte, overlong lead (c0, c1) or past U+10FFFF (f5..ff) */
    }
    for (size_t i = 1; i <= n; i++) {
      if ((p[i] & 0xc0) != 0x80) return 0; /* also stops at the NUL */
      cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    p += n + 1;
  }
  return 1;
}

#endif
