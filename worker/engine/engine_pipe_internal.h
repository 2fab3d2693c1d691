/* engine_pipe_internal.h — what the CPU pipeline engine's two files share: engine_pipe.c (set-up,
 * the step's items, the update) and engine_pipe_messages.c (how an item's messages are laid
 * out, posted, waited for and sent). The rationale of both is at the top of engine_pipe.c. */
#ifndef LSTMD_ENGINE_PIPE_INTERNAL_H
#define LSTMD_ENGINE_PIPE_INTERNAL_H

#include <stddef.h>

#include "comm/p2p.h"
#include "engine.h"
#include "pipe_grid.h"
#include "worker/model/model_stage.h"

struct lstmd_pool;
struct lstmd_reducer;

enum { kMaxSlices = 64 };

struct pipe_slot {
  struct lstmd_stage_ws *ws[kMaxSlices];
  /* K chunks of messages (engine_pipe_messages.c): sliced, [Tc,b,H] then [Tc,b,r] each; direct,
   * [Tc,b,r] each (NULL where none) */
  float *act_in, *act_out;   /* activations from below / to above */
  float *grad_in, *grad_out; /* gradients from above / to below */
  lstmd_p2p_req *sends;      /* [4K] the sends of the slot's current unit */
  int n_sends;
};

struct pipe_engine {
  struct lstmd_engine base;
  struct lstmd_pipe_grid g; /* the layout and the op list (pipe_grid.h) */
  struct lstmd_comm *pp, *dp; /* start(): the replica's stages / the stage's replicas */
  struct lstmd_p2p *p2p;
  struct lstmd_reducer *reducer; /* D > 1 */
  struct lstmd_pool *pool;
  int n_slices, threads, blas_threads, c0[kMaxSlices], cb[kMaxSlices];
  int direct; /* one slice: messages go straight to and from the workspaces */
  float *grads[kMaxSlices]; /* slice 0: model->grads */
  double loss[kMaxSlices];
  struct pipe_slot *slots;
  lstmd_p2p_req *recv_act, *recv_grad; /* [U·K·2]: item (u, k)'s parts at 2·(u·K + k) */
  struct lstmd_batch *win;             /* [A] the step's windows, columns [0, B) */
  int *reset;                          /* [A] */
  float *state_h, *state_c;            /* [layers, B, H] the carried state (see 4.) */
  float *packed[2 * LSTMD_MAX_LAYERS];
  struct lstmd_stage_packed pk;
  size_t bucket_floats;
  /* the item in flight, for the pool's threads */
  const struct lstmd_step_input *in;
  int item_kind, item_unit, item_chunk;
};

/* The messages of an item (engine_pipe_messages.c): from below and to above (activations), from
 * above and to below (gradients). */
enum msg_role { ACT_IN, ACT_OUT, GRAD_IN, GRAD_OUT };

/* Floats of one chunk in a slot's message buffer on a link with split rows r: the whole
 * message when units are sliced, its part 1 (the split's rows) when direct. */
size_t pipe_slot_chunk_floats(const struct pipe_engine *p, int r);
/* Direct: the slice's split-row buffers for chunk k are the slot's message chunks. */
void pipe_use_message_rows(const struct pipe_engine *p, struct pipe_slot *sl, int k);
/* Sliced units: slice c's columns of item k's message in this role, copied into the slice's
 * workspace (ACT_IN, GRAD_IN: before the item) or out of it (ACT_OUT, GRAD_OUT: after it). Does
 * nothing when direct (the message is the workspace's) or where the stage has no such link. */
void pipe_slice_message(const struct pipe_engine *p, struct pipe_slot *sl, enum msg_role role,
                        int c, int k);
/* Posts unit u's receives into its slot; waits for item (u, k)'s receives in a role, adding the
 * time to out->p2p_wait_s; sends item (u, k)'s message in a role. 0 or p2p's error. */
int pipe_post_receives(struct pipe_engine *p, int u);
int pipe_wait_receives(struct pipe_engine *p, enum msg_role role, int u, int k,
                       struct lstmd_step_result *out);
int pipe_send_item(struct pipe_engine *p, struct pipe_slot *sl, enum msg_role role, int u, int k);

#endif
