/* fuzz_target.h — what the plain corpus driver (fuzz_driver.c) needs from a fuzz target
 * (fuzz_frame.c, fuzz_qckpt.c): the libFuzzer entry point, a check that the seeds reach every
 * outcome the target counts, and a one-line report of those counts. */
#ifndef LSTMD_FUZZ_TARGET_H
#define LSTMD_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* 1 when the seeds run so far reached every outcome; else prints what is missing, returns 0. */
int fuzz_target_seeds_ok(void);
void fuzz_target_report(FILE *out);

#endif
