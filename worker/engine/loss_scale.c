/* loss_scale.c — the dynamic loss-scale state machine (see loss_scale.h). */
#include "loss_scale.h"

#include <math.h>

#include "kernels/status.h"

void lstmd_loss_scaler_init(struct lstmd_loss_scaler *s) {
  *s = (struct lstmd_loss_scaler){.scale = 65536.0f, .growth_factor = 2.0f,
                                  .backoff_factor = 0.5f, .max_scale = 16777216.0f,
                                  .growth_interval = 2000, .max_overflows_in_row = 64};
}

int lstmd_loss_scaler_update(struct lstmd_loss_scaler *s, int found_nonfinite) {
  const int verdict = lstmd_loss_scaler_step(s, found_nonfinite);
  if (verdict != LSTMD_LOSS_SCALE_GIVE_UP) return verdict;
  lstmd_loss_scaler_give_up_message(s);
  return LSTMD_EINVAL;
}

void lstmd_loss_scaler_give_up_message(const struct lstmd_loss_scaler *s) {
  lstmd_errorf("fp16: the gradients overflowed in %d steps in a row (loss scale now %g): the "
               "model diverged; lower optim.lr or use train.precision=bf16",
               s->overflows_in_row, (double)s->scale);
}

int lstmd_loss_scaler_restore(struct lstmd_loss_scaler *s, double scale, long good_steps) {
  if (!isfinite(scale) || scale <= 0.0 || scale > s->max_scale || good_steps < 0) {
    lstmd_errorf("fp16: saved loss scale %g (after %ld clean steps) is not usable", scale,
                 good_steps);
    return LSTMD_EINVAL;
  }
  s->scale = (float)scale;
  s->good_steps = good_steps % s->growth_interval;
  s->overflows_in_row = 0;
  return LSTMD_OK;
}
