/* numtext.c — shortest round-trip number text (see numtext.h). */
#include "numtext.h"

#include <stdio.h>
#include <stdlib.h>

void lstmd_format_shortest(double v, int is_float, char *buf, size_t n) {
  for (int digits = is_float ? 6 : 15;; digits++) {
    snprintf(buf, n, "%.*g", digits, v);
    const double back = strtod(buf, NULL);
    if (digits >= (is_float ? 9 : 17) || (is_float ? (float)back == (float)v : back == v)) return;
  }
}
