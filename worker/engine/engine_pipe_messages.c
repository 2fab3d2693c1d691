/* engine_pipe_messages.c — the CPU pipeline engine's messages (engine_pipe_internal.h): the
 * layout of an item's message, sliced or direct (below), its receives posted at a unit's start,
 * waited for before the item, and its sends. */
#include <string.h>

#include "engine_pipe_internal.h"
#include "kernels/status.h"

/* Floats of one chunk's message on a link whose split moves r rows (0: none). */
static size_t chunk_floats(const struct pipe_engine *p, int r) {
  return (size_t)p->g.Tc * p->g.b * (p->g.H + r);
}

size_t pipe_slot_chunk_floats(const struct pipe_engine *p, int r) {
  return p->direct ? (size_t)p->g.Tc * p->g.b * r : chunk_floats(p, r);
}

/* A chunk's message on a link with split rows r has two parts: part 0, [Tc, b, H] (the
 * activations up, or their gradients down), and part 1, [Tc, b, r] (the split's pre-activations
 * or their gate gradients; none when r = 0). Each part is its own message of the item's tag (p2p
 * matches one direction, peer and tag in posting order, and both ends post part 0 first), the
 * same on the wire however a rank slices its units: two ranks of a job may run different thread
 * counts (train.threads 0 divides each node's cores by its ranks), so a rank's slicing must never
 * change what its neighbours receive.
 *   Sliced (n_slices > 1): both parts out of and into the slot's message buffers, K chunks of
 *   [part 0 | part 1], and each slice copies its columns between those and its workspace
 *   (copy_rows, through pipe_slice_message).
 *   Direct (one slice, whose columns are the unit's): part 0 straight out of or into the
 *   workspace's [T, b, H] buffer at the chunk's rows, part 1 out of or into the slot's buffer,
 *   which the workspace uses in place (lstmd_stage_ws_use_rows). No copy at either end: at the benchmark's shape (H 512, 992
 *   split rows) that is 26 MB each way per step that a rank no longer copies twice. */
struct msg_part {
  float *buf; /* a send's is only read */
  size_t floats;
};

/* Split rows of the link a role's messages use. */
static int role_rows(const struct pipe_engine *p, enum msg_role role) {
  return role == ACT_IN || role == GRAD_OUT ? p->g.st.rows_in : p->g.st.rows_out;
}

/* The slot's message buffer of a role. */
static float *role_message(struct pipe_slot *sl, enum msg_role role) {
  return role == ACT_IN ? sl->act_in : role == ACT_OUT ? sl->act_out
       : role == GRAD_IN ? sl->grad_in : sl->grad_out;
}

/* A workspace's buffers of a role: the [T,b,H] part 0 (*whole) and the one-chunk part 1 (*rows;
 * model_stage.h). Outputs are only read from them. */
static void role_buffers(struct lstmd_stage_ws *ws, enum msg_role role, float **whole,
                         float **rows) {
  switch (role) {
    case ACT_IN: *whole = lstmd_stage_ws_input(ws), *rows = lstmd_stage_ws_input_rows(ws); break;
    case ACT_OUT:
      *whole = (float *)lstmd_stage_ws_output(ws), *rows = (float *)lstmd_stage_ws_output_rows(ws);
      break;
    case GRAD_IN: *whole = lstmd_stage_ws_doutput(ws), *rows = lstmd_stage_ws_doutput_rows(ws); break;
    default:
      *whole = (float *)lstmd_stage_ws_dinput(ws), *rows = (float *)lstmd_stage_ws_dinput_rows(ws);
  }
}

/* Parts of item k's message in this role for the unit in slot sl: 1 or 2 (see above). */
static int message_parts(const struct pipe_engine *p, struct pipe_slot *sl, enum msg_role role,
                         int k, struct msg_part part[2]) {
  const int r = role_rows(p, role);
  float *msg = role_message(sl, role);
  const size_t cells = (size_t)p->g.Tc * p->g.b;
  if (!p->direct) {
    float *at = msg + k * chunk_floats(p, r);
    part[0] = (struct msg_part){at, cells * p->g.H};
    part[1] = (struct msg_part){at + cells * p->g.H, cells * r};
    return r ? 2 : 1;
  }
  float *whole, *rows;
  role_buffers(sl->ws[0], role, &whole, &rows);
  part[0] = (struct msg_part){whole + k * cells * p->g.H, cells * p->g.H};
  if (!r) return 1;
  part[1] = (struct msg_part){msg + k * cells * r, cells * r};
  return 2;
}

/* The item for messages: "activations (F) of unit 0 chunk 3", part 1 with " (split rows)". */
static void describe_part(char *buf, size_t n, int dir, int u, int k, int part) {
  lstmd_pipe_describe_item(buf, n, dir, u, k);
  if (part) strncat(buf, " (split rows)", n - strlen(buf) - 1);
}

/* NULL where the link has none. */
void pipe_use_message_rows(const struct pipe_engine *p, struct pipe_slot *sl, int k) {
  const size_t ri = (size_t)p->g.Tc * p->g.b * p->g.st.rows_in;
  const size_t ro = (size_t)p->g.Tc * p->g.b * p->g.st.rows_out;
  lstmd_stage_ws_use_rows(sl->ws[0], ri ? sl->act_in + k * ri : NULL,
                          ri ? sl->grad_out + k * ri : NULL, ro ? sl->act_out + k * ro : NULL,
                          ro ? sl->grad_in + k * ro : NULL);
}

/* Sliced: rows [t0, t1) (within one chunk) of columns [c0, c0 + cb) between a unit's message
 * buffer on a link with split rows r and a slice's workspace buffer (to_slice: message → slice).
 * Chunk k of the message is Tc·b·(H + r) floats: part 0, [Tc, b, H] (w = H; the slice's buffer
 * is [T, cb, H]), then part 1, [Tc, b, r] (w = r; the slice's buffer holds the one chunk,
 * [Tc, cb, r], model_stage.h). */
static void copy_rows(const struct pipe_engine *p, float *msg, int r, int part, float *slice,
                      int c, int t0, int t1, int to_slice) {
  const size_t w = part ? (size_t)r : (size_t)p->g.H, row = (size_t)p->cb[c] * w;
  const size_t Tc = (size_t)p->g.Tc, b = (size_t)p->g.b;
  float *at = msg + t0 / p->g.Tc * chunk_floats(p, r) + (part ? Tc * b * p->g.H : 0);
  const int first = part ? t0 : 0; /* the slice buffer's first row */
  for (int t = t0; t < t1; t++) {
    float *u = at + ((t % Tc) * b + p->c0[c]) * w, *sl = slice + (size_t)(t - first) * row;
    if (to_slice) memcpy(sl, u, row * sizeof(float));
    else memcpy(u, sl, row * sizeof(float));
  }
}

void pipe_slice_message(const struct pipe_engine *p, struct pipe_slot *sl, enum msg_role role,
                        int c, int k) {
  const int below = role == ACT_IN || role == GRAD_OUT;
  if (p->direct || (below ? p->g.st.first : p->g.st.last)) return; /* direct: nothing to copy */
  const int r = role_rows(p, role), to_slice = role == ACT_IN || role == GRAD_IN;
  const int t0 = k * p->g.Tc, t1 = t0 + p->g.Tc;
  float *whole, *rows;
  role_buffers(sl->ws[c], role, &whole, &rows);
  copy_rows(p, role_message(sl, role), r, 0, whole, c, t0, t1, to_slice);
  if (r) copy_rows(p, role_message(sl, role), r, 1, rows, c, t0, t1, to_slice);
}

/* Posts item (u, k)'s message in this role, its receives (ACT_IN, GRAD_IN) or its sends, into
 * reqs[0 .. parts); returns 0 and the number of parts in *posted, or p2p's error. */
static int post_item(struct pipe_engine *p, struct pipe_slot *sl, enum msg_role role, int u,
                     int k, lstmd_p2p_req *reqs, int *posted) {
  const int dir = role == ACT_IN || role == ACT_OUT ? LSTMD_P2P_UP : LSTMD_P2P_DOWN;
  const int peer = role == ACT_IN || role == GRAD_OUT ? p->g.s - 1 : p->g.s + 1;
  const int recv = role == ACT_IN || role == GRAD_IN, tag = lstmd_pipe_tag(u, k, p->g.K);
  struct msg_part part[2];
  const int n = message_parts(p, sl, role, k, part);
  char what[128];
  *posted = 0;
  for (int i = 0; i < n; i++) {
    describe_part(what, sizeof what, dir, u, k, i);
    const size_t bytes = part[i].floats * sizeof(float);
    LSTMD_TRY(recv ? lstmd_p2p_irecv(p->p2p, dir, peer, tag, part[i].buf, bytes, what, &reqs[i])
                   : lstmd_p2p_isend(p->p2p, dir, peer, tag, part[i].buf, bytes, what, &reqs[i]));
    ++*posted;
  }
  return LSTMD_OK;
}

/* engine_pipe.c's 3. */
int pipe_post_receives(struct pipe_engine *p, int u) {
  struct pipe_slot *sl = &p->slots[u % p->g.P];
  for (int k = 0; k < p->g.K; k++) {
    const size_t at = 2 * ((size_t)u * p->g.K + k);
    int posted;
    if (!p->g.st.first) LSTMD_TRY(post_item(p, sl, ACT_IN, u, k, &p->recv_act[at], &posted));
    if (!p->g.st.last) LSTMD_TRY(post_item(p, sl, GRAD_IN, u, k, &p->recv_grad[at], &posted));
  }
  return LSTMD_OK;
}

/* Waits for the receives of item (u, k) in this role (lstmd_pipe_wait_recv). */
int pipe_wait_receives(struct pipe_engine *p, enum msg_role role, int u, int k,
                       struct lstmd_step_result *out) {
  const lstmd_p2p_req *reqs = (role == ACT_IN ? p->recv_act : p->recv_grad) +
                              2 * ((size_t)u * p->g.K + k);
  const int n = role_rows(p, role) ? 2 : 1; /* message_parts' count */
  for (int i = 0; i < n; i++)
    LSTMD_TRY(lstmd_pipe_wait_recv(p->p2p, reqs[i], p->base.trace, u, k, &out->p2p_wait_s));
  return LSTMD_OK;
}

int pipe_send_item(struct pipe_engine *p, struct pipe_slot *sl, enum msg_role role, int u, int k) {
  int posted = 0;
  const int rc = post_item(p, sl, role, u, k, &sl->sends[sl->n_sends], &posted);
  sl->n_sends += posted; /* each one posted is waited for, even after a failure */
  return rc;
}
