/* pipe_groups.c — the GPU pipeline's transfer lanes and their rendezvous checker (pipe_groups.h).
 *
 * The checker lays out, per stage, every transfer in issue order (an op's receive, the op, its
 * send), the lanes as FIFOs of those transfers, and per kind of transfer the entry holding
 * message j of its pair, so a transfer's other end is found in O(1). It sweeps the stages,
 * running ops and completing transfers whose two ends are both at their lanes' heads and ready,
 * until a sweep changes nothing. */
#include "pipe_groups.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/check.h"

int lstmd_pipe_lane_of(const struct lstmd_pipe_op *op, int recv) {
  if (recv ? op->recv_from < 0 : op->send_to < 0) return -1;
  const int grads = op->kind == LSTMD_PIPE_B;
  return grads ? (recv ? LSTMD_LANE_RECV_GRAD : LSTMD_LANE_SEND_GRAD)
               : (recv ? LSTMD_LANE_RECV_ACT : LSTMD_LANE_SEND_ACT);
}

struct entry {
  int kind, op, index; /* lane kind, op, message number among its kind */
  int lane, done;
};

struct stage {
  const struct lstmd_pipe_op *ops;
  int n, next_op, slots, units, chunks;
  int *w0;              /* [units]: op index of W(u, 0) */
  struct entry *e;      /* every transfer, in issue order */
  int *where[LSTMD_LANES]; /* kind → message number → entry */
  int count[LSTMD_LANES];
  int *lane[LSTMD_LANES];  /* lane → entries in issue order */
  int lane_len[LSTMD_LANES], lane_pos[LSTMD_LANES];
  int *recv_of;         /* op → entry of its receive, −1 */
  int *sends_left;      /* [units]: sends of unit u not yet completed */
};

static int lay_out(struct stage *st, const struct lstmd_pipe_op *ops, int n, int slots, int lanes) {
  st->ops = ops, st->n = n, st->slots = slots;
  for (int i = 0; i < n; i++) {
    if (ops[i].unit + 1 > st->units) st->units = ops[i].unit + 1;
    if (ops[i].chunk + 1 > st->chunks) st->chunks = ops[i].chunk + 1;
  }
  st->w0 = malloc(((size_t)st->units + 1) * sizeof(int));
  st->e = malloc(2 * ((size_t)n + 1) * sizeof *st->e);
  st->recv_of = malloc(((size_t)n + 1) * sizeof(int));
  st->sends_left = calloc((size_t)st->units + 1, sizeof(int));
  int ok = st->w0 && st->e && st->recv_of && st->sends_left;
  for (int k = 0; k < LSTMD_LANES; k++) {
    st->where[k] = malloc(((size_t)n + 1) * sizeof(int));
    st->lane[k] = malloc(2 * ((size_t)n + 1) * sizeof(int));
    ok &= st->where[k] && st->lane[k];
  }
  if (!ok) return LSTMD_ENOMEM;
  for (int u = 0; u < st->units; u++) st->w0[u] = n; /* never: a list without it is stuck */
  int ne = 0;
  for (int i = 0; i < n; i++) {
    if (ops[i].kind == LSTMD_PIPE_W && ops[i].chunk == 0) st->w0[ops[i].unit] = i;
    st->recv_of[i] = -1;
    for (int recv = 1; recv >= 0; recv--) { /* the receive before the op, the send after */
      const int kind = lstmd_pipe_lane_of(&ops[i], recv);
      if (kind < 0) continue;
      const int lane = lanes == 1 ? 0 : lanes == 2 ? (kind >= LSTMD_LANE_RECV_GRAD) : kind;
      st->e[ne] = (struct entry){.kind = kind, .op = i, .index = st->count[kind], .lane = lane};
      st->where[kind][st->count[kind]++] = ne;
      st->lane[lane][st->lane_len[lane]++] = ne;
      if (recv) st->recv_of[i] = ne;
      else st->sends_left[ops[i].unit]++;
      ne++;
    }
  }
  return LSTMD_OK;
}

static int at_head(const struct stage *st, int id) {
  const int l = st->e[id].lane;
  return st->lane_pos[l] < st->lane_len[l] && st->lane[l][st->lane_pos[l]] == id;
}

static int ready(const struct stage *st, int id) {
  const struct entry *e = &st->e[id];
  if (!at_head(st, id)) return 0;
  if (e->kind == LSTMD_LANE_SEND_ACT || e->kind == LSTMD_LANE_SEND_GRAD) return st->next_op > e->op;
  const int u = st->ops[e->op].unit; /* a receive: its slot must be free */
  return u < st->slots || st->next_op > st->w0[u - st->slots];
}

/* Whether the next op of the stage may run: its receive has completed, and a unit's first op
 * also waits for every send of the unit that held its slot before (they read its buffers). */
static int op_may_run(const struct stage *st) {
  const struct lstmd_pipe_op *op = &st->ops[st->next_op];
  const int r = st->recv_of[st->next_op];
  if (r >= 0 && !st->e[r].done) return 0;
  return !(op->kind == LSTMD_PIPE_F && op->chunk == 0 && op->unit >= st->slots &&
           st->sends_left[op->unit - st->slots] > 0);
}

static void complete(struct stage *st, int id) {
  struct entry *e = &st->e[id];
  e->done = 1;
  st->lane_pos[e->lane]++;
  if (e->kind == LSTMD_LANE_SEND_ACT || e->kind == LSTMD_LANE_SEND_GRAD)
    st->sends_left[st->ops[e->op].unit]--;
}

/* Runs what can run on stage s; returns 1 when anything did. */
static int advance(struct stage *all, int stages, int s, struct lstmd_pipe_lanes_result *out) {
  struct stage *st = &all[s];
  int moved = 0;
  while (st->next_op < st->n && op_may_run(st)) st->next_op++, moved = 1;
  for (int l = 0; l < LSTMD_LANES; l++) {
    if (st->lane_pos[l] >= st->lane_len[l]) continue;
    const int id = st->lane[l][st->lane_pos[l]];
    struct entry *me = &st->e[id];
    if (!ready(st, id)) continue;
    const int send = me->kind == LSTMD_LANE_SEND_ACT || me->kind == LSTMD_LANE_SEND_GRAD;
    const int q = me->kind == LSTMD_LANE_SEND_ACT || me->kind == LSTMD_LANE_RECV_GRAD ? s + 1 : s - 1;
    if (q < 0 || q >= stages) continue; /* a list that talks past the ends is stuck */
    struct stage *peer = &all[q];
    const int pk = me->kind ^ 1; /* RECV_ACT ↔ SEND_ACT, RECV_GRAD ↔ SEND_GRAD */
    if (me->index >= peer->count[pk]) continue;
    const int pid = peer->where[pk][me->index];
    if (!ready(peer, pid)) continue;
    const struct lstmd_pipe_op *a = &st->ops[me->op], *b = &peer->ops[peer->e[pid].op];
    if (a->unit != b->unit || a->chunk != b->chunk) {
      out->mismatch = 1;
      out->mismatch_stage = send ? q : s;
      out->mismatch_peer = send ? s : q;
    }
    complete(st, id);
    complete(peer, pid);
    moved = 1;
  }
  return moved;
}

int lstmd_pipe_check_lanes(int stages, const struct lstmd_pipe_op *const lists[],
                           const int counts[], const int slots[], int lanes,
                           struct lstmd_pipe_lanes_result *out) {
  memset(out, 0, sizeof *out);
  if (stages < 1 || stages > LSTMD_PIPE_MAX_STAGES || (lanes != 1 && lanes != 2 && lanes != LSTMD_LANES))
    return LSTMD_EINVAL;
  struct stage *all = calloc((size_t)stages, sizeof *all);
  int rc = all ? LSTMD_OK : LSTMD_ENOMEM;
  for (int s = 0; !rc && s < stages; s++)
    rc = lay_out(&all[s], lists[s], counts[s], slots[s] > 0 ? slots[s] : 1, lanes);
  for (int moved = 1; !rc && moved;) {
    moved = 0;
    for (int s = 0; s < stages; s++) moved |= advance(all, stages, s, out);
  }
  for (int s = 0; !rc && s < stages; s++) {
    const struct stage *st = &all[s];
    int lanes_left = 0;
    for (int l = 0; l < LSTMD_LANES; l++) lanes_left |= st->lane_pos[l] < st->lane_len[l];
    out->stuck_op[s] = st->next_op < st->n ? st->next_op : -1;
    if (st->next_op < st->n || lanes_left) out->deadlocked = 1;
  }
  if (!rc && (out->deadlocked || out->mismatch)) rc = LSTMD_EINVAL;
  for (int s = 0; all && s < stages; s++) {
    free(all[s].w0);
    free(all[s].e);
    free(all[s].recv_of);
    free(all[s].sends_left);
    for (int k = 0; k < LSTMD_LANES; k++) free(all[s].where[k]), free(all[s].lane[k]);
  }
  free(all);
  return rc;
}
