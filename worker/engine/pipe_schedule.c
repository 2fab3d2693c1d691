/* pipe_schedule.c — the pipeline op lists (fill-drain for wavefront/gpipe, PipeDream-Flush for
 * 1f1b) and the list-scheduling simulator that checks them: list validation, the per-pair message
 * order check, the dataflow run (deadlock, makespan, busy time, bubble) and resident units. The
 * idea is ../shared/tools/pipesim.py's; see pipe_schedule.h for the contracts. */
#include "pipe_schedule.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/status.h"

static const char *const g_kind_names[] = {"wavefront", "gpipe", "1f1b"};

const char *lstmd_pipe_kind_name(enum lstmd_pipe_kind kind) {
  if ((unsigned)kind < sizeof g_kind_names / sizeof g_kind_names[0]) return g_kind_names[kind];
  return "unknown";
}

int lstmd_pipe_kind_parse(const char *name, enum lstmd_pipe_kind *out) {
  for (unsigned i = 0; name && i < sizeof g_kind_names / sizeof g_kind_names[0]; i++)
    if (strcmp(name, g_kind_names[i]) == 0) {
      *out = (enum lstmd_pipe_kind)i;
      return 0;
    }
  return LSTMD_EINVAL;
}

int lstmd_pipe_check_tags(int units, int chunks) {
  if (units < 1 || chunks < 1 || (long long)units * chunks > LSTMD_PIPE_TAG_COUNT)
    return LSTMD_EINVAL;
  return 0;
}

/* S, U, K usable for lists whose length 3·U·K fits an int. */
static int shape_ok(int stages, int units, int chunks) {
  return stages >= 1 && stages <= LSTMD_PIPE_MAX_STAGES && units >= 1 && chunks >= 1 &&
         units <= INT_MAX / 3 / chunks;
}

/* The op of item (kind, u, k) on stage s of S, with the messages it implies there. */
static struct lstmd_pipe_op make_op(enum lstmd_pipe_op_kind kind, int stages, int s, int u,
                                    int k) {
  struct lstmd_pipe_op op = {.kind = kind, .unit = u, .chunk = k, .recv_from = -1, .send_to = -1};
  if (kind == LSTMD_PIPE_F) {
    if (s > 0) op.recv_from = s - 1;
    if (s < stages - 1) op.send_to = s + 1;
  } else if (kind == LSTMD_PIPE_B) {
    if (s < stages - 1) op.recv_from = s + 1;
    if (s > 0) op.send_to = s - 1;
  }
  return op;
}

/* Appends unit u's forward (chunks 0 … K−1) at ops[n]; returns the new length. */
static int forward_unit(struct lstmd_pipe_op *ops, int n, int stages, int s, int u, int chunks) {
  for (int k = 0; k < chunks; k++) ops[n++] = make_op(LSTMD_PIPE_F, stages, s, u, k);
  return n;
}

/* Appends unit u's backward (chunks K−1 … 0, each B then its W) at ops[n]; returns the length. */
static int backward_unit(struct lstmd_pipe_op *ops, int n, int stages, int s, int u, int chunks) {
  for (int k = chunks - 1; k >= 0; k--) {
    ops[n++] = make_op(LSTMD_PIPE_B, stages, s, u, k);
    ops[n++] = make_op(LSTMD_PIPE_W, stages, s, u, k);
  }
  return n;
}

int lstmd_pipe_schedule(enum lstmd_pipe_kind kind, int stages, int stage, int units, int chunks,
                        struct lstmd_pipe_op *ops, size_t capacity) {
  if (!shape_ok(stages, units, chunks) || stage < 0 || stage >= stages || !ops ||
      lstmd_pipe_op_count(units, chunks) > capacity)
    return LSTMD_EINVAL;
  int n = 0;
  switch (kind) {
  case LSTMD_PIPE_WAVEFRONT:
  case LSTMD_PIPE_GPIPE:
    for (int u = 0; u < units; u++) n = forward_unit(ops, n, stages, stage, u, chunks);
    for (int u = units - 1; u >= 0; u--) n = backward_unit(ops, n, stages, stage, u, chunks);
    return n;
  case LSTMD_PIPE_1F1B: {
    int warm = stages - stage - 1 < units ? stages - stage - 1 : units, nf = 0;
    for (; nf < warm; nf++) n = forward_unit(ops, n, stages, stage, nf, chunks);
    for (int nb = 0; nb < units; nb++) {
      if (nf < units) n = forward_unit(ops, n, stages, stage, nf++, chunks);
      n = backward_unit(ops, n, stages, stage, nb, chunks);
    }
    return n;
  }
  }
  return LSTMD_EINVAL;
}

int lstmd_pipe_peak_units(enum lstmd_pipe_kind kind, int stages, int stage, int units,
                          int chunks) {
  if (!shape_ok(stages, units, chunks) || stage < 0 || stage >= stages) return LSTMD_EINVAL;
  switch (kind) {
  case LSTMD_PIPE_WAVEFRONT:
  case LSTMD_PIPE_GPIPE: return units;
  case LSTMD_PIPE_1F1B: return stages - stage < units ? stages - stage : units;
  }
  return LSTMD_EINVAL;
}

/* ---- simulator ---- */

/* One call's state; the arrays come from one allocation. */
struct sim {
  const struct lstmd_pipe_sim_config *cfg;
  int S, U, K;
  double *end;         /* [S][3][U][K] end time of each item, −1 before it ran */
  double *first_start; /* [S][U] start of the unit's first F on the stage, −1 before */
  double *last_end;    /* [S][U] end of the unit's last W on the stage */
  unsigned char *seen; /* [S][3][U][K] list validation */
};

struct dep {
  int stage, kind, unit, chunk, cross;
};

static size_t item_index(const struct sim *m, int s, int kind, int u, int k) {
  return (((size_t)s * 3 + (size_t)kind) * (size_t)m->U + (size_t)u) * (size_t)m->K + (size_t)k;
}

/* The items op (on stage s) waits for, into d[0..3); returns how many (see the header). */
static int op_deps(const struct sim *m, int s, const struct lstmd_pipe_op *op, struct dep d[3]) {
  int n = 0, u = op->unit, k = op->chunk, stride = m->cfg->carry_stride;
  switch (op->kind) {
  case LSTMD_PIPE_F:
    if (s > 0) d[n++] = (struct dep){s - 1, LSTMD_PIPE_F, u, k, 1};
    if (k > 0) d[n++] = (struct dep){s, LSTMD_PIPE_F, u, k - 1, 0};
    else if (stride > 0 && u >= stride)
      d[n++] = (struct dep){s, LSTMD_PIPE_F, u - stride, m->K - 1, 0};
    break;
  case LSTMD_PIPE_B:
    if (s < m->S - 1) d[n++] = (struct dep){s + 1, LSTMD_PIPE_B, u, k, 1};
    if (k < m->K - 1) d[n++] = (struct dep){s, LSTMD_PIPE_B, u, k + 1, 0};
    d[n++] = (struct dep){s, LSTMD_PIPE_F, u, m->K - 1, 0};
    break;
  case LSTMD_PIPE_W: d[n++] = (struct dep){s, LSTMD_PIPE_B, u, k, 0}; break;
  }
  return n;
}

static double op_cost(const struct sim *m, int s, enum lstmd_pipe_op_kind kind) {
  const struct lstmd_pipe_cost *c = &m->cfg->cost[m->cfg->cost_count == 1 ? 0 : s];
  int split = m->cfg->split;
  if (kind == LSTMD_PIPE_F) return c->f;
  if (kind == LSTMD_PIPE_B) return split ? c->beta : c->beta + c->w;
  return split ? c->w : 0.0;
}

static int finite_nonneg(double x) { return isfinite(x) && x >= 0.0; }

/* Why cfg is unusable, or NULL. */
static const char *config_error(const struct lstmd_pipe_sim_config *cfg) {
  if (!shape_ok(cfg->stages, cfg->units, cfg->chunks))
    return "stages must be in 1..64, units and chunks ≥ 1 with 3·units·chunks < 2^31";
  if (cfg->carry_stride < 0) return "carry_stride must be ≥ 0";
  if (cfg->split != 0 && cfg->split != 1) return "split must be 0 or 1";
  if (!finite_nonneg(cfg->lat)) return "lat must be finite and ≥ 0";
  if (!cfg->cost || (cfg->cost_count != 1 && cfg->cost_count != cfg->stages))
    return "cost must hold 1 or S entries";
  for (int i = 0; i < cfg->cost_count; i++)
    if (!finite_nonneg(cfg->cost[i].f) || !finite_nonneg(cfg->cost[i].beta) ||
        !finite_nonneg(cfg->cost[i].w))
      return "costs must be finite and ≥ 0";
  return NULL;
}

/* Every list holds each F, B, W item exactly once, with the messages make_op gives it. Returns 0,
 * or 1 after filling out's bad_* fields. */
static int validate_lists(struct sim *m, const struct lstmd_pipe_op *const lists[],
                          const int counts[], struct lstmd_pipe_sim_result *out) {
  int want = (int)lstmd_pipe_op_count(m->U, m->K);
  for (int s = 0; s < m->S; s++) {
    out->bad_stage = s;
    out->bad_pos = -1;
    if (counts[s] != want || !lists[s]) {
      out->why = "a stage's list must hold 3·U·K ops (each F, B and W item once)";
      return 1;
    }
    for (int i = 0; i < want; i++) {
      const struct lstmd_pipe_op *op = &lists[s][i];
      out->bad_pos = i;
      if ((unsigned)op->kind > LSTMD_PIPE_W || op->unit < 0 || op->unit >= m->U ||
          op->chunk < 0 || op->chunk >= m->K) {
        out->why = "op kind, unit or chunk out of range";
        return 1;
      }
      struct lstmd_pipe_op ref = make_op(op->kind, m->S, s, op->unit, op->chunk);
      if (op->recv_from != ref.recv_from || op->send_to != ref.send_to) {
        out->why = "op's recv_from/send_to differ from what its kind implies on this stage";
        return 1;
      }
      unsigned char *seen = &m->seen[item_index(m, s, op->kind, op->unit, op->chunk)];
      if (*seen) {
        out->why = "item listed twice on this stage";
        return 1;
      }
      *seen = 1;
    }
  }
  return 0;
}

/* Index of the first op at or after pos that sends to (want_send) / receives from peer. */
static int next_message(const struct lstmd_pipe_op *list, int count, int pos, int want_send,
                        int peer) {
  while (pos < count && (want_send ? list[pos].send_to : list[pos].recv_from) != peer) pos++;
  return pos;
}

/* Compares sender's messages to receiver against receiver's receives from sender, in list order.
 * Returns 1 after filling out's fifo fields at the first mismatch, else 0. */
static int fifo_pair(const struct lstmd_pipe_op *const lists[], const int counts[], int sender,
                     int receiver, struct lstmd_pipe_sim_result *out) {
  int i = 0, j = 0;
  for (int idx = 0;; idx++, i++, j++) {
    i = next_message(lists[sender], counts[sender], i, 1, receiver);
    j = next_message(lists[receiver], counts[receiver], j, 0, sender);
    if (i == counts[sender] || j == counts[receiver]) return 0; /* equal counts: validated */
    const struct lstmd_pipe_op *a = &lists[sender][i], *b = &lists[receiver][j];
    if (a->unit != b->unit || a->chunk != b->chunk) {
      out->fifo_mismatch = 1;
      out->fifo_down = sender > receiver;
      out->fifo_lower = sender < receiver ? sender : receiver;
      out->fifo_index = idx;
      out->sent_unit = a->unit, out->sent_chunk = a->chunk;
      out->recv_unit = b->unit, out->recv_chunk = b->chunk;
      return 1;
    }
  }
}

/* Runs the lists as dataflow: each sweep lets every stage (alternately bottom-up and top-down)
 * run ops until one's dependencies are not all done. A sweep that runs nothing is a deadlock.
 * Returns 1 on deadlock (stuck_pos filled), else 0 with busy, makespan and residency filled. */
static int run_lists(struct sim *m, const struct lstmd_pipe_op *const lists[], const int counts[],
                     struct lstmd_pipe_sim_result *out) {
  int pos[LSTMD_PIPE_MAX_STAGES] = {0};
  double clock[LSTMD_PIPE_MAX_STAGES] = {0};
  long remaining = 0;
  for (int s = 0; s < m->S; s++) remaining += counts[s];
  for (int sweep = 0; remaining > 0; sweep++) {
    int progressed = 0;
    for (int i = 0; i < m->S; i++) {
      int s = sweep & 1 ? m->S - 1 - i : i;
      while (pos[s] < counts[s]) {
        const struct lstmd_pipe_op *op = &lists[s][pos[s]];
        struct dep d[3];
        int nd = op_deps(m, s, op, d), ready = 1;
        double start = clock[s];
        for (int j = 0; j < nd && ready; j++) {
          double e = m->end[item_index(m, d[j].stage, d[j].kind, d[j].unit, d[j].chunk)];
          if (e < 0) ready = 0;
          else if (e + (d[j].cross ? m->cfg->lat : 0.0) > start)
            start = e + (d[j].cross ? m->cfg->lat : 0.0);
        }
        if (!ready) break;
        double cost = op_cost(m, s, op->kind), end = start + cost;
        m->end[item_index(m, s, op->kind, op->unit, op->chunk)] = end;
        size_t su = (size_t)s * (size_t)m->U + (size_t)op->unit;
        if (op->kind == LSTMD_PIPE_F && m->first_start[su] < 0) m->first_start[su] = start;
        if (op->kind == LSTMD_PIPE_W) m->last_end[su] = end; /* ends never decrease on a stage */
        clock[s] = end;
        out->busy[s] += cost;
        pos[s]++;
        remaining--;
        progressed = 1;
      }
    }
    if (!progressed) {
      out->deadlocked = 1;
      memcpy(out->stuck_pos, pos, sizeof(int) * (size_t)m->S);
      memset(out->busy, 0, sizeof out->busy);
      return 1;
    }
  }
  for (int s = 0; s < m->S; s++)
    if (clock[s] > out->makespan) out->makespan = clock[s];
  return 0;
}

struct edge {
  double t;
  int delta; /* +1 a unit becomes resident, −1 it is freed */
};

static int edge_cmp(const void *pa, const void *pb) {
  const struct edge *a = pa, *b = pb;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  return a->delta - b->delta; /* a free before a start at the same time */
}

/* Peak resident units per stage from first_start / last_end; edges holds 2·U entries. */
static void residency(const struct sim *m, struct edge *edges, struct lstmd_pipe_sim_result *out) {
  for (int s = 0; s < m->S; s++) {
    for (int u = 0; u < m->U; u++) {
      size_t su = (size_t)s * (size_t)m->U + (size_t)u;
      edges[2 * u] = (struct edge){m->first_start[su], +1};
      edges[2 * u + 1] = (struct edge){m->last_end[su], -1};
    }
    qsort(edges, 2 * (size_t)m->U, sizeof *edges, edge_cmp);
    int cur = 0;
    for (int i = 0; i < 2 * m->U; i++) {
      cur += edges[i].delta;
      if (cur > out->peak_units[s]) out->peak_units[s] = cur;
    }
  }
}

int lstmd_pipe_simulate(const struct lstmd_pipe_sim_config *cfg,
                        const struct lstmd_pipe_op *const lists[], const int counts[],
                        struct lstmd_pipe_sim_result *out) {
  memset(out, 0, sizeof *out);
  out->bad_stage = out->bad_pos = -1;
  out->why = cfg ? config_error(cfg) : "no config";
  if (!out->why && (!lists || !counts)) out->why = "no lists";
  if (out->why) {
    out->verdict = LSTMD_PIPE_BAD_CONFIG;
    return LSTMD_EINVAL;
  }
  out->stages = cfg->stages;
  out->chunks = cfg->chunks;
  struct sim m = {.cfg = cfg, .S = cfg->stages, .U = cfg->units, .K = cfg->chunks};
  size_t items = (size_t)m.S * lstmd_pipe_op_count(m.U, m.K), su = (size_t)m.S * (size_t)m.U;
  size_t doubles = items + 2 * su;
  void *block = malloc(doubles * sizeof(double) + 2 * (size_t)m.U * sizeof(struct edge) + items);
  if (!block) return LSTMD_ENOMEM;
  m.end = block;
  m.first_start = m.end + items;
  m.last_end = m.first_start + su;
  struct edge *edges = (struct edge *)(m.last_end + su);
  m.seen = (unsigned char *)(edges + 2 * (size_t)m.U);
  for (size_t i = 0; i < doubles; i++) m.end[i] = -1.0;
  memset(m.seen, 0, items);

  if (validate_lists(&m, lists, counts, out)) {
    out->verdict = LSTMD_PIPE_BAD_LIST;
  } else {
    out->bad_stage = out->bad_pos = -1;
    for (int s = 0; s + 1 < m.S && !out->fifo_mismatch; s++)
      if (!fifo_pair(lists, counts, s, s + 1, out)) fifo_pair(lists, counts, s + 1, s, out);
    if (run_lists(&m, lists, counts, out)) {
      out->verdict = LSTMD_PIPE_DEADLOCK;
    } else {
      double busy = 0;
      for (int s = 0; s < m.S; s++) busy += out->busy[s];
      out->bubble = out->makespan > 0 ? 1.0 - busy / ((double)m.S * out->makespan) : 0.0;
      residency(&m, edges, out);
      out->verdict = out->fifo_mismatch ? LSTMD_PIPE_FIFO_MISMATCH : LSTMD_PIPE_OK;
    }
  }
  free(block);
  return out->verdict == LSTMD_PIPE_OK ? 0 : LSTMD_EINVAL;
}

int lstmd_pipe_predict(enum lstmd_pipe_kind kind, const struct lstmd_pipe_sim_config *cfg,
                       struct lstmd_pipe_sim_result *out) {
  const char *why = cfg ? config_error(cfg) : "no config";
  if (!why && lstmd_pipe_peak_units(kind, cfg->stages, 0, cfg->units, cfg->chunks) < 0)
    why = "unknown schedule kind";
  if (why) {
    memset(out, 0, sizeof *out);
    out->verdict = LSTMD_PIPE_BAD_CONFIG;
    out->why = why;
    out->bad_stage = out->bad_pos = -1;
    return LSTMD_EINVAL;
  }
  size_t per = lstmd_pipe_op_count(cfg->units, cfg->chunks);
  struct lstmd_pipe_op *all = malloc((size_t)cfg->stages * per * sizeof *all);
  if (!all) {
    memset(out, 0, sizeof *out);
    return LSTMD_ENOMEM;
  }
  const struct lstmd_pipe_op *lists[LSTMD_PIPE_MAX_STAGES];
  int counts[LSTMD_PIPE_MAX_STAGES];
  for (int s = 0; s < cfg->stages; s++) {
    counts[s] = lstmd_pipe_schedule(kind, cfg->stages, s, cfg->units, cfg->chunks,
                                    all + (size_t)s * per, per);
    lists[s] = all + (size_t)s * per;
  }
  int rc = lstmd_pipe_simulate(cfg, lists, counts, out);
  free(all);
  return rc;
}

/* ---- messages ---- */

/* snprintf at buf + *len, keeping *len ≤ n − 1. */
static void append(char *buf, size_t n, size_t *len, const char *fmt, ...) {
  if (*len + 1 >= n) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *len, n - *len, fmt, ap);
  va_end(ap);
  if (w > 0) *len += (size_t)w < n - *len ? (size_t)w : n - *len - 1;
}

static char op_letter(enum lstmd_pipe_op_kind kind) {
  return kind == LSTMD_PIPE_F ? 'F' : kind == LSTMD_PIPE_B ? 'B' : kind == LSTMD_PIPE_W ? 'W' : '?';
}

char *lstmd_pipe_describe(const struct lstmd_pipe_sim_result *r,
                          const struct lstmd_pipe_op *const lists[], const int counts[],
                          char *buf, size_t n) {
  size_t len = 0;
  if (!buf || n == 0) return buf;
  buf[0] = '\0';
  switch (r->verdict) {
  case LSTMD_PIPE_OK:
    append(buf, n, &len, "ok: makespan %.6g, bubble %.4f", r->makespan, r->bubble);
    break;
  case LSTMD_PIPE_BAD_CONFIG: append(buf, n, &len, "bad simulator config: %s", r->why); break;
  case LSTMD_PIPE_BAD_LIST:
    append(buf, n, &len, "bad op list: stage %d", r->bad_stage);
    if (r->bad_pos >= 0) append(buf, n, &len, " op %d", r->bad_pos);
    append(buf, n, &len, ": %s", r->why);
    break;
  case LSTMD_PIPE_DEADLOCK:
    append(buf, n, &len, "deadlock: no stage can start its next op:");
    for (int s = 0; s < r->stages; s++) {
      int p = r->stuck_pos[s];
      if (lists && counts && p < counts[s])
        append(buf, n, &len, "%s stage %d waits at op %d %c(u=%d,k=%d)", s ? "," : "", s, p,
               op_letter(lists[s][p].kind), lists[s][p].unit, lists[s][p].chunk);
      else if (lists && counts)
        append(buf, n, &len, "%s stage %d finished", s ? "," : "", s);
      else
        append(buf, n, &len, "%s stage %d at op %d", s ? "," : "", s, p);
    }
    break;
  case LSTMD_PIPE_FIFO_MISMATCH: break;
  }
  if (r->fifo_mismatch) {
    int from = r->fifo_down ? r->fifo_lower + 1 : r->fifo_lower;
    int to = r->fifo_down ? r->fifo_lower : r->fifo_lower + 1;
    append(buf, n, &len,
           "%sFIFO mismatch: %s stage %d -> %d, message %d: sent as (u=%d,k=%d) tag %d, "
           "received as (u=%d,k=%d) tag %d",
           len ? "; " : "", r->fifo_down ? "gradients" : "activations", from, to, r->fifo_index,
           r->sent_unit, r->sent_chunk, lstmd_pipe_tag(r->sent_unit, r->sent_chunk, r->chunks),
           r->recv_unit, r->recv_chunk, lstmd_pipe_tag(r->recv_unit, r->recv_chunk, r->chunks));
  }
  return buf;
}
