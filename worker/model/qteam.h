/* qteam.h — a thread team that shares out the chunks of one job at a time, for the int8 model's
 * forward (qmodel.c): at batch 1 that is 2·L jobs a token of 20–300 µs each, so a hand-off must
 * cost little, and the 2-core hosts lstmd runs on are often busy with other work.
 *
 * Unlike lstmd_pool (worker/engine/pool.h), a job waits for its chunks, not for its threads: a
 * chunk is claimed by whichever thread comes first, so a helper the scheduler has not run yet
 * finds every chunk taken and does nothing, and the caller never waits for a thread to wake up;
 * on a busy host the team is at worst about as fast as the caller alone. Idle helpers poll for
 * spin_ns, then sleep on a condition variable. */
#ifndef LSTMD_QTEAM_H
#define LSTMD_QTEAM_H

struct lstmd_qteam;

/* One chunk: fn(arg, thread, chunk, first), thread in [0, n) (0 is the caller), first != 0 on
 * the first chunk this thread takes in this job (for per-thread set-up such as quantising the
 * job's input once). */
typedef void (*lstmd_qteam_fn)(void *arg, int thread, int chunk, int first);

/* n threads in all (the caller of lstmd_qteam_run and n − 1 started here). Destroy with
 * lstmd_qteam_destroy (NULL is fine). */
int lstmd_qteam_create(int n, long spin_ns, struct lstmd_qteam **out);
void lstmd_qteam_destroy(struct lstmd_qteam *t);
/* Runs fn for chunks 0..chunks−1, each exactly once, on the calling thread and whichever helpers
 * join in; returns when all have returned. One job at a time (one caller). */
void lstmd_qteam_run(struct lstmd_qteam *t, int chunks, lstmd_qteam_fn fn, void *arg);

#endif
