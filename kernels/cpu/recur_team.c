/* recur_team.c — the unit-split recurrence of recur_team.h: a spinning barrier, one shared
 * packed W_hh, and the two layer passes, each step's units handed out in groups of one panel
 * width (below: "Groups"). */
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

/* A member's side of the barrier and its claim counter, on their own cache line: the sense
 * flips every step, and every member takes groups from every counter. */
struct member_sense {
  int sense;
  int next; /* atomic: the member's next unclaimed group in this step */
} __attribute__((aligned(64)));

struct lstmd_recur_team {
  int n, H, w, groups; /* groups = H / w */
  float *packed; /* [4H·H] W_hh panels: by rows in a forward pass, by columns in a backward */
  int count __attribute__((aligned(64))); /* atomic: members at the current barrier */
  int sense;                              /* atomic: flips when the last member arrives */
  struct member_rows *rows;               /* [n] */
  struct member_sense *senses;            /* [n] */
  long stolen __attribute__((aligned(64))); /* atomic: groups done by a member not their owner
                                             * (apart from the line the waiters poll) */
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
  t->n = n, t->H = H, t->w = lstmd_cpu_panel_width(), t->groups = H / t->w;
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

/* Groups. Member m owns groups [m·G/n, (m+1)·G/n) of the G = H/w groups of w units, and packs
 * their W_hh panels. In each step it takes its own groups first, in order (their panels are the
 * ones its core's cache still holds), then helps another member with the groups that member has
 * not taken yet: so a member that was held up (another process on its core, a page fault, an
 * interrupt) delays the step by about one group instead of by its whole share, while the others
 * spin at the barrier. No value depends on who computes a group (recur_team.h). */
static int owner_first(const struct lstmd_recur_team *t, int m) { return m * t->groups / t->n; }

/* The next group for member `member` in this step, or -1 when every group is taken. */
static int claim_group(struct lstmd_recur_team *t, int member) {
  for (int i = 0; i < t->n; i++) {
    const int m = (member + i) % t->n;
    if (__atomic_load_n(&t->senses[m].next, __ATOMIC_RELAXED) >= owner_first(t, m + 1)) continue;
    const int g = __atomic_fetch_add(&t->senses[m].next, 1, __ATOMIC_RELAXED);
    if (g < owner_first(t, m + 1)) {
      if (i) __atomic_fetch_add(&t->stolen, 1, __ATOMIC_RELAXED);
      return g;
    }
  }
  return -1;
}

long lstmd_recur_team_stolen(const struct lstmd_recur_team *t) {
  return __atomic_load_n(&t->stolen, __ATOMIC_RELAXED);
}

/* Sense-reversing barrier. Waits are short when every member has a core (the members do equal
 * work between barriers); a member that waits long yields its core, for when threads outnumber
 * cores. The last member resets the claim counters for the next step (nobody claims while the
 * others wait here), and its release store publishes every member's writes before the barrier. */
static void barrier(struct lstmd_recur_team *t, int member) {
  const int sense = t->senses[member].sense ^= 1;
  if (__atomic_add_fetch(&t->count, 1, __ATOMIC_ACQ_REL) == t->n) {
    for (int m = 0; m < t->n; m++)
      __atomic_store_n(&t->senses[m].next, owner_first(t, m), __ATOMIC_RELAXED);
    __atomic_store_n(&t->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->sense, sense, __ATOMIC_RELEASE);
    return;
  }
  for (int i = 1; __atomic_load_n(&t->sense, __ATOMIC_ACQUIRE) != sense; i++) {
    _mm_pause();
    if (i % 128 == 0) sched_yield();
  }
}

/* Panels [*p0, *p1) of gate block q (0..3, i f g o) for member m's own groups, in a [4H]-wide
 * rows-packed W_hh; q = 0 with a column-packed W_hh gives the units' own panels. */
static void member_panels(const struct lstmd_recur_team *t, int m, int q, int *p0, int *p1) {
  *p0 = q * t->groups + owner_first(t, m);
  *p1 = q * t->groups + owner_first(t, m + 1);
}

void lstmd_cpu_lstm_forward_team(struct lstmd_recur_team *t, int member,
                                 const struct lstmd_lstm_dims *d, const float *w_ih,
                                 const float *w_hh, const float *b_ih, const float *b_hh,
                                 const float *x, float *h, float *c, float *gates) {
  const int T = d->steps, B = d->batch, H = d->hidden, G = 4 * H, w = t->w;
  lstmd_cpu_lstm_project_input(d, w_ih, x, gates);
  /* Every member's last read of the packed buffer in its previous pass (whose panels may
   * overlap these: another layout) came before that pass's final barrier, and the barrier
   * below publishes these panels before any member reads them. The same holds in backward. */
  int p0, p1;
  for (int q = 0; q < 4; q++) {
    member_panels(t, member, q, &p0, &p1);
    lstmd_cpu_pack_rows_panels(H, w_hh, t->packed, p0, p1);
  }
  struct member_rows *me = &t->rows[member];
  me->B = B, me->h = h, me->c = c, me->gates = gates;
  barrier(t, member);
  for (int s = 0; s < T; s++) {
    for (int g; (g = claim_group(t, member)) >= 0;) {
      for (int q = 0; q < 4; q++) { /* the group's panel of each gate against every member's rows */
        const int p = q * t->groups + g;
        for (int m = 0; m < t->n; m++) {
          const struct member_rows *r = &t->rows[m];
          lstmd_cpu_gemm_panel(r->B, H, r->h + (size_t)s * r->B * H, H,
                               t->packed + (size_t)p * H * w,
                               r->gates + (size_t)s * r->B * G + (size_t)p * w, G);
        }
      }
      for (int m = 0; m < t->n; m++) { /* its units' gates, while they are in L1 */
        const struct member_rows *r = &t->rows[m];
        const size_t bh = (size_t)r->B * H;
        lstmd_cpu_lstm_gates_step(r->B, H, g * w, (g + 1) * w, r->gates + (size_t)s * r->B * G,
                                  b_ih, b_hh, r->c + s * bh, r->c + (s + 1) * bh,
                                  r->h + (s + 1) * bh);
      }
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
  int p0, p1;
  member_panels(t, member, 0, &p0, &p1);
  lstmd_cpu_pack_cols_panels(G, H, w_hh, t->packed, p0, p1);
  memset(work, 0, 2 * (size_t)B * H * sizeof(float));
  struct member_rows *me = &t->rows[member];
  me->B = B, me->c = (float *)c, me->gates = (float *)gates, me->dh_out = dh_out, me->dgates = dgates;
  me->work = work;
  barrier(t, member);
  /* Step s of group g: the recurrent dh of its units from every unit's gate gradients of step
   * s+1 (none at the last step: work starts at zero), then its units' gate gradients of step s.
   * The barrier after step 0 is dx's: its GEMM reads every unit's gate gradients. */
  for (int s = T - 1; s >= 0; s--) {
    for (int g; (g = claim_group(t, member)) >= 0;) {
      for (int m = 0; m < t->n && s < T - 1; m++) {
        const struct member_rows *r = &t->rows[m];
        for (int b = 0; b < r->B; b++)
          memset(r->work + (size_t)b * H + (size_t)g * w, 0, w * sizeof(float));
        lstmd_cpu_gemm_panel(r->B, G, r->dgates + (size_t)(s + 1) * r->B * G, G,
                             t->packed + (size_t)g * G * w, r->work + (size_t)g * w, H);
      }
      for (int m = 0; m < t->n; m++) {
        const struct member_rows *r = &t->rows[m];
        const size_t bh = (size_t)r->B * H, bg = (size_t)r->B * G;
        lstmd_cpu_lstm_gates_backward_step(r->B, H, g * w, (g + 1) * w, r->gates + s * bg,
                                           r->c + s * bh, r->c + (s + 1) * bh,
                                           r->dh_out + s * bh, r->work, r->work + bh,
                                           r->dgates + s * bg);
      }
    }
    barrier(t, member); /* step s-1 reads every unit's gate gradients of step s */
  }
  lstmd_cpu_lstm_input_grad(d, w_ih, dgates, dx);
}
