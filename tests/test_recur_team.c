/* test_recur_team.c — the unit-split recurrence (kernels/cpu/recur_team.h): n threads, each with
 * its own rows (row counts that differ, and row-block tails), run a layer's forward and
 * backward_input together; every output must equal, bit for bit, what each thread's rows give
 * through lstmd_cpu_lstm_forward / lstmd_cpu_lstm_backward_input alone with packed W_hh (whose
 * values test_kernels_cpu checks against float64). Several passes in a row over one team, as a
 * model's layers run, so that a missing barrier shows as a race; with more members than cores,
 * groups of units are taken over by another member mid-step. Exit 77 where the ISA in use
 * has no packed kernels (generic). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/lstm_cpu.h"
#include "kernels/cpu/recur_gemm.h"
#include "kernels/cpu/recur_team.h"
#include "check.h"

enum { kMaxMembers = 4, kPasses = 3 };

static unsigned long long g_seed = 777;

/* One member's rows: inputs, and its outputs from the team (t_) and alone (a_). */
struct rows {
  int B;
  float *x, *h0, *c0, *dh_out;
  float *t_h, *t_c, *t_gates, *t_dgates, *t_work, *t_dx;
  float *a_h, *a_c, *a_gates, *a_dgates, *a_work, *a_dx;
};

struct job {
  struct lstmd_recur_team *team;
  int member, T, In, H;
  const float *wih, *whh, *bih, *bhh;
  struct rows *r;
};

static float *rnd(size_t n, double scale) { return test_rand_floats(&g_seed, n, scale, NULL); }
static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

/* A member's passes: forward then backward_input, kPasses times (the state of one pass is the
 * next pass's start, so a wrong value anywhere spreads). */
static void *member_main(void *arg) {
  struct job *j = arg;
  struct rows *r = j->r;
  const struct lstmd_lstm_dims d = {j->T, r->B, j->In, j->H};
  const size_t bh = (size_t)r->B * j->H;
  for (int p = 0; p < kPasses; p++) {
    memcpy(r->t_h, p ? r->t_h + (size_t)j->T * bh : r->h0, bh * sizeof(float));
    memcpy(r->t_c, p ? r->t_c + (size_t)j->T * bh : r->c0, bh * sizeof(float));
    lstmd_cpu_lstm_forward_team(j->team, j->member, &d, j->wih, j->whh, j->bih, j->bhh, r->x,
                                r->t_h, r->t_c, r->t_gates);
    lstmd_cpu_lstm_backward_input_team(j->team, j->member, &d, j->wih, j->whh, r->t_c,
                                       r->t_gates, r->dh_out, r->t_dgates, r->t_work, r->t_dx);
  }
  return NULL;
}

/* The same passes through the single-thread kernels. */
static void alone(const struct job *j, struct rows *r) {
  const struct lstmd_lstm_dims d = {j->T, r->B, j->In, j->H};
  const size_t bh = (size_t)r->B * j->H;
  float *rows_pack = zeros(lstmd_cpu_pack_floats(4 * j->H, j->H));
  float *cols_pack = zeros(lstmd_cpu_pack_floats(4 * j->H, j->H));
  lstmd_cpu_pack_rows(4 * j->H, j->H, j->whh, rows_pack);
  lstmd_cpu_pack_cols(4 * j->H, j->H, j->whh, cols_pack);
  for (int p = 0; p < kPasses; p++) {
    memcpy(r->a_h, p ? r->a_h + (size_t)j->T * bh : r->h0, bh * sizeof(float));
    memcpy(r->a_c, p ? r->a_c + (size_t)j->T * bh : r->c0, bh * sizeof(float));
    lstmd_cpu_lstm_forward(&d, j->wih, j->whh, j->bih, j->bhh, r->x, r->a_h, r->a_c, r->a_gates,
                           rows_pack);
    lstmd_cpu_lstm_backward_input(&d, j->wih, j->whh, r->a_c, r->a_gates, r->dh_out, r->a_dgates,
                                  r->a_work, 0, 0, r->a_dx, cols_pack);
  }
  free(rows_pack);
  free(cols_pack);
}

static void same_bits(const char *what, const float *got, const float *want, size_t n, int *bad) {
  if (memcmp(got, want, n * sizeof(float)) == 0) return;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof(float))) {
      fprintf(stderr, "  %s[%zu]: team %.9g, alone %.9g\n", what, i, got[i], want[i]);
      break;
    }
  (*bad)++;
}

/* Returns how many groups a member computed for another (lstmd_recur_team_stolen), -1 when
 * skipped. */
static long test_team(int n, int T, int In, int H, const int *B) {
  char name[96];
  snprintf(name, sizeof name, "%d members H%d T%d rows %d", n, H, T, B[0]);
  for (int m = 1; m < n; m++)
    snprintf(name + strlen(name), sizeof name - strlen(name), ",%d", B[m]);
  if (!lstmd_recur_team_fits(n, H)) {
    printf("%-34s (H not split this way on this ISA: skipped)\n", name);
    return -1;
  }
  const size_t G = 4 * (size_t)H;
  float *wih = rnd(G * In, 0.3), *whh = rnd(G * H, 0.3), *bih = rnd(G, 0.2), *bhh = rnd(G, 0.2);
  struct rows r[kMaxMembers];
  struct job jobs[kMaxMembers];
  struct lstmd_recur_team *team = NULL;
  check_true("team created", lstmd_recur_team_create(n, H, &team) == 0);
  for (int m = 0; m < n; m++) {
    const size_t bh = (size_t)B[m] * H, nb = (size_t)T * B[m];
    r[m] = (struct rows){.B = B[m], .x = rnd(nb * In, 1.0), .h0 = rnd(bh, 0.8),
                         .c0 = rnd(bh, 1.5), .dh_out = rnd(nb * H, 1.0)};
    r[m].t_h = zeros(bh * (T + 1)), r[m].a_h = zeros(bh * (T + 1));
    r[m].t_c = zeros(bh * (T + 1)), r[m].a_c = zeros(bh * (T + 1));
    r[m].t_gates = zeros(nb * G), r[m].a_gates = zeros(nb * G);
    r[m].t_dgates = zeros(nb * G), r[m].a_dgates = zeros(nb * G);
    r[m].t_work = zeros(2 * bh), r[m].a_work = zeros(2 * bh);
    r[m].t_dx = zeros(nb * In), r[m].a_dx = zeros(nb * In);
    jobs[m] = (struct job){team, m, T, In, H, wih, whh, bih, bhh, &r[m]};
  }
  pthread_t th[kMaxMembers];
  for (int m = 1; m < n; m++) pthread_create(&th[m], NULL, member_main, &jobs[m]);
  member_main(&jobs[0]);
  for (int m = 1; m < n; m++) pthread_join(th[m], NULL);
  int bad = 0;
  for (int m = 0; m < n; m++) {
    alone(&jobs[m], &r[m]);
    const size_t bh = (size_t)B[m] * H, nb = (size_t)T * B[m];
    same_bits("h", r[m].t_h, r[m].a_h, bh * (T + 1), &bad);
    same_bits("c", r[m].t_c, r[m].a_c, bh * (T + 1), &bad);
    same_bits("gates", r[m].t_gates, r[m].a_gates, nb * G, &bad);
    same_bits("dgates", r[m].t_dgates, r[m].a_dgates, nb * G, &bad);
    same_bits("work (dh, dc)", r[m].t_work, r[m].a_work, 2 * bh, &bad);
    same_bits("dx", r[m].t_dx, r[m].a_dx, nb * In, &bad);
  }
  const long stolen = lstmd_recur_team_stolen(team);
  snprintf(name + strlen(name), sizeof name - strlen(name), " (%ld groups taken over)", stolen);
  check_true(name, bad == 0);
  lstmd_recur_team_destroy(team);
  for (int m = 0; m < n; m++) {
    float *all[] = {r[m].x, r[m].h0, r[m].c0, r[m].dh_out, r[m].t_h, r[m].t_c, r[m].t_gates,
                    r[m].t_dgates, r[m].t_work, r[m].t_dx, r[m].a_h, r[m].a_c, r[m].a_gates,
                    r[m].a_dgates, r[m].a_work, r[m].a_dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  }
  free(wih), free(whh), free(bih), free(bhh);
  return stolen;
}

int main(void) {
  if (check_forced_isa() == 77 || lstmd_cpu_panel_width() == 0) {
    printf("test_recur_team: no packed kernels on this ISA: skipped\n");
    return 77;
  }
  /* which H a team takes: whole panels per member only */
  const int w = lstmd_cpu_panel_width();
  check_true("2 members take H = 2w", lstmd_recur_team_fits(2, 2 * w));
  check_true("2 members refuse H = 3w", !lstmd_recur_team_fits(2, 3 * w));
  check_true("1 member is no team", !lstmd_recur_team_fits(1, 2 * w));
  /* row counts with every tail of the 8- and 6-row blocks, and a member of one row */
  test_team(2, 5, 13, 64, (const int[]){16, 16});
  test_team(2, 6, 9, 128, (const int[]){13, 5});
  test_team(3, 4, 24, 192, (const int[]){7, 1, 9});
  test_team(4, 3, 16, 256, (const int[]){8, 8, 8, 8});
  test_team(2, 9, 64, 512, (const int[]){16, 16});
  /* More members than cores: the ones descheduled mid-step leave their groups to the others,
   * so the taking over of groups is exercised (and checked bitwise above) on every run here. */
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const long stolen = test_team(4, 48, 16, 8 * w, (const int[]){5, 8, 3, 8});
  if (cores < 4 && stolen >= 0)
    check_true("4 members on fewer cores: some groups taken over by another member", stolen > 0);
  return check_summary("test_recur_team");
}
