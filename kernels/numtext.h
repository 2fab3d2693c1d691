/* numtext.h — numbers as text that reads back exactly and no longer than it must: 0.002 for the
 * float nearest 0.002, not the %.9g text 0.00200000009. Used where people read a number that a
 * program may read back (the config dump, metrics.jsonl). A leaf like status.h (libc only). */
#ifndef LSTMD_NUMTEXT_H
#define LSTMD_NUMTEXT_H

#include <stddef.h>

/* The shortest %g text of v that strtod reads back as v: as a float when is_float (v came from
 * a float; 6 to 9 digits), else as a double (15 to 17). */
void lstmd_format_shortest(double v, int is_float, char *buf, size_t n);

#endif
