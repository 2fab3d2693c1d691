/* pipe_schedule.h — the per-stage op lists of pipeline-parallel training (wavefront, gpipe,
 * 1f1b; PIPELINE.md §2) and a list-scheduling simulator that proves a set of lists runs without
 * deadlock, with matching per-pair message orders, and predicts its makespan, bubble and peak
 * activation units. Pure functions on caller arrays: no MPI, no threads, no I/O, so every rank
 * computes the same lists from the same (kind, S, U, K). */
#ifndef LSTMD_PIPE_SCHEDULE_H
#define LSTMD_PIPE_SCHEDULE_H

#include <stddef.h>

/* Stages the simulator handles (model.layers ≤ 16 bounds S far below this). */
#define LSTMD_PIPE_MAX_STAGES 64
/* Message tags are 0 .. U·K − 1; MPI guarantees MPI_TAG_UB ≥ 32767, so U·K ≤ this. */
#define LSTMD_PIPE_TAG_COUNT 32768

enum lstmd_pipe_kind { LSTMD_PIPE_WAVEFRONT, LSTMD_PIPE_GPIPE, LSTMD_PIPE_1F1B };

/* Work items of one stage. F: forward of (u, k). B: backward-input (gate recurrence + dx; dx is
 * sent down as soon as B ends). W: backward-weight (dW_ih, dW_hh, db) of the same (u, k). */
enum lstmd_pipe_op_kind { LSTMD_PIPE_F, LSTMD_PIPE_B, LSTMD_PIPE_W };

/* One op of a stage's list, with the messages it implies on that stage:
 *   F on s > 0 receives its input activations from s − 1 before it runs (recv_from = s − 1);
 *   F on s < S − 1 sends its output activations to s + 1 after it runs (send_to = s + 1);
 *   B on s < S − 1 receives the gradient from s + 1 before it runs (recv_from = s + 1);
 *   B on s > 0 sends dx to s − 1 after it runs, before the W that follows (send_to = s − 1);
 *   W never communicates. Both fields are −1 when there is no message.
 * Every message of item (u, k) carries tag lstmd_pipe_tag(u, k, K); the direction (activations up,
 * gradients down) follows from kind. */
struct lstmd_pipe_op {
  enum lstmd_pipe_op_kind kind;
  int unit;      /* u in [0, U): one column micro-batch of one grad-accum window */
  int chunk;     /* k in [0, K): one time chunk of the window */
  int recv_from; /* stage to receive from before running, or −1 */
  int send_to;   /* stage to send to after running, or −1 */
};

/* "wavefront", "gpipe", "1f1b"; "unknown" for other values. Static string. */
const char *lstmd_pipe_kind_name(enum lstmd_pipe_kind kind);
/* Parses a name of lstmd_pipe_kind_name into *out; returns 0, or LSTMD_EINVAL (out untouched). */
int lstmd_pipe_kind_parse(const char *name, enum lstmd_pipe_kind *out);

/* The message tag of item (u, k) with K chunks per unit: u·K + k. */
static inline int lstmd_pipe_tag(int unit, int chunk, int chunks) { return unit * chunks + chunk; }
/* Returns 0 when every tag of U units × K chunks is < LSTMD_PIPE_TAG_COUNT (U·K ≤ 32768, both ≥ 1),
 * else LSTMD_EINVAL; prints nothing (the caller names the config keys). */
int lstmd_pipe_check_tags(int units, int chunks);

/* Ops in each stage's list: 3·U·K (every F, B and W item once). */
static inline size_t lstmd_pipe_op_count(int units, int chunks) {
  return 3 * (size_t)units * (size_t)chunks;
}

/* Writes stage s's op list into ops[0 .. 3·U·K) and returns 3·U·K; LSTMD_EINVAL when
 * S ∉ [1, LSTMD_PIPE_MAX_STAGES], s ∉ [0, S), U < 1, K < 1, 3·U·K > capacity or kind is unknown
 * (ops untouched).
 *   wavefront, gpipe (fill-drain; the same lists, the kinds differ in their default U and K):
 *     every F in (u, k) order; then for u = U−1 … 0, k = K−1 … 0: B(u, k) and at once W(u, k).
 *   1f1b (PipeDream-Flush over units): forwards of the first min(S−s−1, U) units (a unit's
 *     forward = its K chunks in order), then alternately the next unit's forward (while any is
 *     left) and the oldest unit's backward (chunks K−1 … 0, each B then W). U < S is allowed. */
int lstmd_pipe_schedule(enum lstmd_pipe_kind kind, int stages, int stage, int units, int chunks,
                        struct lstmd_pipe_op *ops, size_t capacity);

/* Unit activation buffers stage s needs under this schedule: U for fill-drain, min(S−s, U) for
 * 1f1b (what lstmd_pipe_simulate measures as peak_units). LSTMD_EINVAL for bad arguments. */
int lstmd_pipe_peak_units(enum lstmd_pipe_kind kind, int stages, int stage, int units, int chunks);

/* Per-item cost on one stage (any time unit; finite, ≥ 0). */
struct lstmd_pipe_cost {
  double f;    /* forward of one item */
  double beta; /* backward-input part */
  double w;    /* backward-weight part */
};

struct lstmd_pipe_sim_config {
  int stages, units, chunks; /* S, U, K */
  int carry_stride;          /* M ≥ 1: F(s,u,0) also needs F(s,u−M,K−1) (state carried between
                                consecutive windows of the same columns; M = micro-batches per
                                window); 0: no carried state between units */
  int split;                 /* 1: B costs beta and W costs w; 0: folded, B costs beta + w, W 0 */
  double lat;                /* added to every cross-stage dependency (one p2p hop), ≥ 0 */
  const struct lstmd_pipe_cost *cost; /* cost_count entries: 1 (every stage) or S (per stage) */
  int cost_count;
};

enum lstmd_pipe_verdict {
  LSTMD_PIPE_OK = 0,
  LSTMD_PIPE_BAD_CONFIG,   /* the config is invalid (why) */
  LSTMD_PIPE_BAD_LIST,     /* a list is not every F, B, W item once with its messages (bad) */
  LSTMD_PIPE_DEADLOCK,     /* some op can never start (stuck_pos) */
  LSTMD_PIPE_FIFO_MISMATCH /* a pair's send order differs from its receive order (fifo) */
};

struct lstmd_pipe_sim_result {
  enum lstmd_pipe_verdict verdict; /* the first of: bad config, bad list, deadlock, fifo */
  int stages, chunks;              /* S and K of the config (for lstmd_pipe_describe) */
  const char *why;                 /* BAD_CONFIG / BAD_LIST: what is wrong (static string) */
  int bad_stage, bad_pos;          /* BAD_LIST: the offending op (bad_pos −1: the list's length) */
  /* Timing; valid when the lists ran to the end (verdict OK or FIFO_MISMATCH), else 0. */
  double makespan;                          /* end of the last op */
  double busy[LSTMD_PIPE_MAX_STAGES];       /* Σ op costs per stage */
  double bubble;                            /* 1 − Σ busy / (S · makespan); 0 when makespan 0 */
  int peak_units[LSTMD_PIPE_MAX_STAGES];    /* max units resident at once: a unit is resident on
                                               a stage from the start of its first F there to the
                                               end of its last W there (an end and a start at
                                               the same time do not overlap) */
  /* Deadlock (the dependencies of each list's next op can never all be met). */
  int deadlocked;
  int stuck_pos[LSTMD_PIPE_MAX_STAGES];     /* index of each stage's first op that never ran;
                                               the list's length when that stage finished */
  /* Message order, checked on the lists alone, whatever the timing: for every pair (s, s+1),
   * the F sends of s against the F receives of s+1 (up) and the B sends of s+1 against the B
   * receives of s (down). NCCL matches a pair's messages by issue order, MPI by tag: the lists
   * must agree for both. The first mismatch found (pairs bottom-up, up before down): */
  int fifo_mismatch;
  int fifo_down;              /* 0: activations s → s+1; 1: gradients s+1 → s */
  int fifo_lower;             /* s of the pair (s, s+1) */
  int fifo_index;             /* the message number (0-based) in that direction of the pair */
  int sent_unit, sent_chunk;  /* the item the sender sends as that message */
  int recv_unit, recv_chunk;  /* the item the receiver posts as that receive */
};

/* Runs stage s's list lists[s][0 .. counts[s]) for every s (one op at a time, in list order) and
 * fills *out. An op starts when the previous op of its stage has ended and every dependency has
 * ended, plus cfg->lat for a dependency on another stage:
 *   F(s,u,k) needs F(s−1,u,k) [cross], F(s,u,k−1), and with carry_stride M, at k = 0, F(s,u−M,K−1);
 *   B(s,u,k) needs B(s+1,u,k) [cross; none on the last stage: the head is time-local],
 *            B(s,u,k+1) and F(s,u,K−1);
 *   W(s,u,k) needs B(s,u,k).
 * Dependencies are met by item identity (MPI's tag matching): a list that posts receives in
 * another order than its peer sends still runs here and is reported by the FIFO check.
 * Returns 0 when out->verdict is LSTMD_PIPE_OK; LSTMD_EINVAL for any other verdict (read it, or
 * lstmd_pipe_describe); LSTMD_ENOMEM (then *out holds nothing to read). Allocates O(S·U·K) per
 * call and frees it before returning. */
int lstmd_pipe_simulate(const struct lstmd_pipe_sim_config *cfg,
                        const struct lstmd_pipe_op *const lists[], const int counts[],
                        struct lstmd_pipe_sim_result *out);

/* Builds every stage's list of `kind` (lstmd_pipe_schedule) and simulates them: from measured
 * per-item costs, the predicted makespan and bubble of a step. Returns as lstmd_pipe_simulate. */
int lstmd_pipe_predict(enum lstmd_pipe_kind kind, const struct lstmd_pipe_sim_config *cfg,
                       struct lstmd_pipe_sim_result *out);

/* Writes a one-line account of r's verdict into buf (at most n bytes, NUL-terminated), e.g.
 * "deadlock: no stage can start its next op: stage 0 waits at op 4 B(u=1,k=1), ..." or
 * "FIFO mismatch: activations stage 0 -> 1, message 0: sent as (u=0,k=0) tag 0, received as
 * (u=1,k=0) tag 1" (a deadlock with a mismatch names both). lists/counts are those given to
 * lstmd_pipe_simulate, to name the stuck ops (may be NULL). Returns buf. */
char *lstmd_pipe_describe(const struct lstmd_pipe_sim_result *r,
                          const struct lstmd_pipe_op *const lists[], const int counts[],
                          char *buf, size_t n);

#endif
