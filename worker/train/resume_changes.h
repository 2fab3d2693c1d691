/* resume_changes.h — which settings a resumed run changed from the run that wrote its checkpoint.
 *
 * `--resume` refuses what would make the checkpoint meaningless (another dataset, seq_len,
 * global batch, model shape: train_resume.c) and accepts every other change, since changing the
 * learning rate, the step count or the pipeline layout on a resume is legitimate. But a resumed
 * run equals one that never stopped only with the same settings, and a user who changed
 * train.seed or data.order by accident would never know. So the run says what changed, on
 * stderr and in train.log. */
#ifndef LSTMD_RESUME_CHANGES_H
#define LSTMD_RESUME_CHANGES_H

/* The settings that differ between two effective configs (JSON objects of "section.key":"value"
 * strings, as checkpoints store them), as "key was → now, ..." in key order of `now`, leaving out
 * the ones that cannot change the weights (paths, logging, checkpoint and sample cadence, the
 * communication timeout, the daemon's placement). NULL when none differ or either text does not
 * parse (a checkpoint without a config says nothing). malloc'd. */
char *lstmd_resume_changes(const char *was_json, const char *now_json);

/* For a rank whose effective config is not rank 0's (train_checks.c): every setting that differs,
 * paths included, as "key MINE here, RANK0'S on rank 0, ...". NULL as above. malloc'd. */
char *lstmd_config_differences(const char *rank0_json, const char *mine_json);

#endif
