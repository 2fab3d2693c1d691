/* recur_team.c — the unit-split recurrence of recur_team.h: a spinning barrier, one shared
 * packed W_hh of which each member packs and reads only its own panels, and the two layer
 * passes. */
#include "recur_team.h"

#include <immintrin.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/status.h"
#include "recur_gemm.h"

/* What a member publishes before a layer pass: its row count and the buffers of its rows. */
struct member_rows {
  int B;
  float *h, *c, *gates;           /* forward writes them; backward only reads c and gates */
  const float *dh_out;            /* backward */
  float *dgates, *work;           /* backward: work = [dh_rec | dc_carry] */
} __attribute__((aligned(64)));

/* A member's side of the barrier, on its own cache line: it flips every step, and the others
 * read the member's published rows every step. */
struct member_sense {
  int sense;
} __attribute__((aligned(64)));

struct lstmd_recur_team {
  int n, H, w;
  float *packed; /* [4H·H] W_hh panels: by rows in a forward pass, by columns in a backward */
  int count __attribute__((aligned(64))); /* atomic: members at the current barrier */
  int sense;                              /* atomic: flips when the last member arrives */
  struct member_rows *rows;               /* [n] */
  struct member_sense *senses;            /* [n] */
};

int lstmd_recur_team_fits(int n, int H) {
  const int w = lstmd_cpu_panel_width();
  return n >= 2 && lstmd_cpu_recur_fast(H) && H % (n * w) == 0;
}

/* One core's L2 in bytes, 1 MiB where the C library cannot tell. */
static long l2_bytes(void) {
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l2 > 0 ? l2 : 1L << 20;
}

int lstmd_recur_team_wanted(int n, int H) {
  const char *env = getenv("LSTMD_RECUR_TEAM");
  if (env && strcmp(env, "0") && strcmp(env, "1") && strcmp(env, "auto")) return -1;
  if (!lstmd_recur_team_fits(n, H) || (env && !strcmp(env, "0"))) return 0;
  if (env && !strcmp(env, "1")) return 1;
  return 16.0 * H * H > (double)l2_bytes(); /* W_hh, 4H·H floats, outgrows one core's L2 */
}

int lstmd_recur_team_create(int n, int H, struct lstmd_recur_team **out) {
  *out = NULL;
  struct lstmd_recur_team *t = aligned_alloc(64, sizeof *t);
  if (!t) return LSTMD_ENOMEM;
  memset(t, 0, sizeof *t);
  t->n = n, t->H = H, t->w = lstmd_cpu_panel_width();
  const size_t bytes = lstmd_cpu_pack_floats(4 * H, H) * sizeof(float);
  t->packed = aligned_alloc(64, (bytes + 63) / 64 * 64);
  t->rows = aligned_alloc(64, (size_t)n * sizeof *t->rows);
  t->senses = aligned_alloc(64, (size_t)n * sizeof *t->senses);
  if (!t->packed || !t->rows || !t->senses) {
    lstmd_recur_team_destroy(t);
    return LSTMD_ENOMEM;
  }
  memset(t->rows, 0, (size_t)n * sizeof *t->rows);
  memset(t->senses, 0, (size_t)n * sizeof *t->senses);
  *out = t;
  return LSTMD_OK;
}

void lstmd_recur_team_destroy(struct lstmd_recur_team *t) {
  if (!t) return;
  free(t->packed);
  free(t->rows);
  free(t->senses);
  free(t);
}

/* Sense-reversing barrier. Waits are short when every member has a core (the members do equal
 * work between barriers); a member that waits long yields its core, for when threads outnumber
 * cores. The last member's release store publishes every member's writes before the barrier. */
static void barrier(struct lstmd_recur_team *t, int member) {
  const int sense = t->senses[member].sense ^= 1;
  if (__atomic_add_fetch(&t->count, 1, __ATOMIC_ACQ_REL) == t->n) {
    __atomic_store_n(&t->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->sense, sense, __ATOMIC_RELEASE);
    return;
  }
  for (int i = 1; __atomic_load_n(&t->sense, __ATOMIC_ACQUIRE) != sense; i++) {
    _mm_pause();
    if (i % 128 == 0) sched_yield();
  }
}

/* Panels [*p0, *p1) of gate block q (0..3, i f g o) for member m's units, in a [4H]-wide
 * rows-packed W_hh; q = 0 with a column-packed W_hh gives the units' own panels. */
static void member_panels(const struct lstmd_recur_team *t, int m, int q, int *p0, int *p1) {
  const int u0 = m * t->H / t->n, u1 = (m + 1) * t->H / t->n;
  *p0 = (q * t->H + u0) / t->w;
  *p1 = (q * t->H + u1) / t->w;
}

void lstmd_cpu_lstm_forward_team(struct lstmd_recur_team *t, int member,
                                 const struct lstmd_lstm_dims *d, const float *w_ih,
                                 const float *w_hh, const float *b_ih, const float *b_hh,
                                 const float *x, float *h, float *c, float *gates) {
  const int T = d->steps, B = d->batch, H = d->hidden, G = 4 * H, w = t->w;
  const int u0 = member * H / t->n, u1 = (member + 1) * H / t->n;
  lstmd_cpu_lstm_project_input(d, w_ih, x, gates);
  int p0, p1;
  /* Only this member reads these panels in this pass, and every member's last read of the
   * buffer in its previous pass (whose panels may overlap these: another layout) came before
   * that pass's final barrier; so packing needs no barrier. The same holds in backward. */
  for (int q = 0; q < 4; q++) {
    member_panels(t, member, q, &p0, &p1);
    lstmd_cpu_pack_rows_panels(H, w_hh, t->packed, p0, p1);
  }
  struct member_rows *me = &t->rows[member];
  me->B = B, me->h = h, me->c = c, me->gates = gates;
  barrier(t, member);
  for (int s = 0; s < T; s++) {
    for (int q = 0; q < 4; q++) {
      member_panels(t, member, q, &p0, &p1);
      for (int p = p0; p < p1; p++) /* each panel against every member's rows while cached */
        for (int m = 0; m < t->n; m++) {
          const struct member_rows *r = &t->rows[m];
          lstmd_cpu_gemm_panel(r->B, H, r->h + (size_t)s * r->B * H, H,
                               t->packed + (size_t)p * H * w,
                               r->gates + (size_t)s * r->B * G + (size_t)p * w, G);
        }
    }
    for (int m = 0; m < t->n; m++) {
      const struct member_rows *r = &t->rows[m];
      const size_t bh = (size_t)r->B * H;
      lstmd_cpu_lstm_gates_step(r->B, H, u0, u1, r->gates + (size_t)s * r->B * G, b_ih, b_hh,
                                r->c + s * bh, r->c + (s + 1) * bh, r->h + (s + 1) * bh);
    }
    barrier(t, member); /* step s+1's GEMMs read every unit of h[s+1] */
  }
}

void lstmd_cpu_lstm_backward_input_team(struct lstmd_recur_team *t, int member,
                                        const struct lstmd_lstm_dims *d, const float *w_ih,
                                        const float *w_hh, const float *c, const float *gates,
                                        const float *dh_out, float *dgates, float *work,
                                        float *dx) {
  const int T = d->steps, B = d->batch, H = d->hidden, G = 4 * H, w = t->w;
  const int u0 = member * H / t->n, u1 = (member + 1) * H / t->n;
  int p0, p1;
  member_panels(t, member, 0, &p0, &p1);
  lstmd_cpu_pack_cols_panels(G, H, w_hh, t->packed, p0, p1);
  memset(work, 0, 2 * (size_t)B * H * sizeof(float));
  struct member_rows *me = &t->rows[member];
  me->B = B, me->c = (float *)c, me->gates = (float *)gates, me->dh_out = dh_out, me->dgates = dgates;
  me->work = work;
  barrier(t, member);
  for (int s = T - 1; s >= 0; s--) {
    for (int m = 0; m < t->n; m++) {
      const struct member_rows *r = &t->rows[m];
      const size_t bh = (size_t)r->B * H, bg = (size_t)r->B * G;
      lstmd_cpu_lstm_gates_backward_step(r->B, H, u0, u1, r->gates + s * bg, r->c + s * bh,
                                         r->c + (s + 1) * bh, r->dh_out + s * bh, r->work,
                                         r->work + bh, r->dgates + s * bg);
    }
    barrier(t, member); /* the GEMM reads every unit's gate gradients; after s = 0, dx does */
    if (s == 0) break;  /* no gradient into the window's initial state */
    for (int p = p0; p < p1; p++)
      for (int m = 0; m < t->n; m++) {
        const struct member_rows *r = &t->rows[m];
        for (int b = 0; b < r->B; b++)
          memset(r->work + (size_t)b * H + (size_t)p * w, 0, w * sizeof(float));
        lstmd_cpu_gemm_panel(r->B, G, r->dgates + (size_t)s * r->B * G, G,
                             t->packed + (size_t)p * G * w, r->work + (size_t)p * w, H);
      }
  }
  lstmd_cpu_lstm_input_grad(d, w_ih, dgates, dx);
}
