/* ctl_print.h — what lstmctl prints of the daemon's answers: human-readable by default, one JSON
 * document per answer with json set (lstmctl --json). Output goes to stdout, flushed. */
#ifndef LSTMD_CTL_PRINT_H
#define LSTMD_CTL_PRINT_H

#include <jansson.h>
#include <stdint.h>

#include "lstmd.pb-c.h"

/* A job as a JSON object (every field lstmctl shows, its settings included). */
json_t *lstmctl_job_json(const Lstmd__Job *j);
/* Prints o as one compact line and releases it. */
void lstmctl_print_json(json_t *o);
/* `status`: the job's state, reason, ranks, progress and run dir (or its JSON). */
void lstmctl_print_job(const Lstmd__Job *j, int json);
/* `list`: one line per job. */
void lstmctl_print_job_line(const Lstmd__Job *j);
/* `watch`: one progress or evaluation record of job id. */
void lstmctl_print_metrics(uint64_t id, const Lstmd__Metrics *m);
/* `top`: the world's busy/free/unresponsive ranks and the running jobs (or its JSON). */
void lstmctl_print_top(const Lstmd__JobList *l, int json);

#endif
