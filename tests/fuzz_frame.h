/* fuzz_frame.h — what the frame/request fuzz target (fuzz_frame.c) counts, so that the plain
 * corpus driver (fuzz_driver.c) can check its seeds still reach every outcome. */
#ifndef LSTMD_FUZZ_FRAME_H
#define LSTMD_FUZZ_FRAME_H

#include <stddef.h>
#include <stdint.h>

struct fuzz_frame_counts {
  size_t frames, too_large;       /* complete frames seen; headers above the maximum */
  size_t accepted[16];            /* requests that passed validation, by oneof field number */
  size_t rejected, config_ok, config_rejected;
};
extern struct fuzz_frame_counts fuzz_frame_counts;

#include "fuzz_target.h" /* LLVMFuzzerTestOneInput and the driver's hooks */

#endif
