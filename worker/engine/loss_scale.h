/* loss_scale.h — dynamic loss scaling for fp16 training, as a plain state machine (no GPU):
 * the loss (and so every gradient) is multiplied by `scale`; after each step the caller reports
 * whether the gradients held an inf/NaN. On overflow the step is skipped and the scale backed
 * off (×0.5); after `growth_interval` clean steps in a row it grows (×2), up to max_scale. The
 * constants are torch.cuda.amp.GradScaler's. A long run of overflows (the model diverged, not
 * the scale) ends in an error instead of skipping forever. The state machine itself is
 * lstmd_loss_scaler_step (kernels/optim_rules.h), which the GPU runs on the device. */
#ifndef LSTMD_LOSS_SCALE_H
#define LSTMD_LOSS_SCALE_H

#include "kernels/optim_rules.h" /* struct lstmd_loss_scaler, lstmd_loss_scaler_step */

/* scale 65536, growth ×2 every 2000 clean steps, back-off ×0.5, at most 2^24, and give up after
 * 64 overflows in a row (the scale would be below 2^-48 by then from 2^16). */
void lstmd_loss_scaler_init(struct lstmd_loss_scaler *s);
/* After a step whose gradients were (found_nonfinite != 0) or were not finite. Returns
 * LSTMD_LOSS_SCALE_APPLY (update the weights), LSTMD_LOSS_SCALE_SKIP (leave them), or
 * LSTMD_EINVAL after printing why when the overflows do not stop. */
int lstmd_loss_scaler_update(struct lstmd_loss_scaler *s, int found_nonfinite);
/* The error lstmd_loss_scaler_update prints when it gives up (also for the device's verdict). */
void lstmd_loss_scaler_give_up_message(const struct lstmd_loss_scaler *s);
/* Restores a saved (scale, good_steps); LSTMD_EINVAL for a scale that is not finite and > 0. */
int lstmd_loss_scaler_restore(struct lstmd_loss_scaler *s, double scale, long good_steps);

#endif
