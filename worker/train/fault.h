/* fault.h — deliberate faults for tests, from the environment: LSTMD_FAULT="KIND@STEP[:RANK]"
 * makes KIND happen at optimizer step STEP (1-based) on rank RANK (every rank when left out).
 * Kinds:
 *   nan_grad    this rank's gradients are NaN before the sum over the ranks (the step's gradient
 *               scale is NaN there), as a diverged backward on one rank would make them; on a
 *               pipeline stage without the loss, its own range's (engine_pipe.c)
 *   nan_update  a NaN in the host parameters after the update, as an overflowing update would
 *               leave them (CPU engines: the GPU engine's parameters live on the device); on a
 *               pipeline stage, in its own range
 *   stop        a stop request on this rank during step STEP, as SIGTERM would make: every rank
 *               finishes the step, writes a checkpoint and returns 0 (a deterministic interruption
 *               for resume tests)
 *   slow        from step STEP on, this rank's compute takes 9 times as long (a sleep of 8 times
 *               the step's own compute, counted as compute): a straggler, for the straggler report
 *               (metrics.h), by the same factor whatever the model's size. 9, not less: with 2
 *               ranks the median is their mean, so the slowed rank shows 2·9/(1+9) = 1.8 times
 *               it, far enough above the report's 1.3 that the other rank's noise on a shared
 *               2-core host (1.9 times its compute for a logged step, seen) cannot hide it
 *   eval_freeze this rank stops itself (SIGSTOP) as the evaluation after step STEP begins, as a
 *               frozen node would: the others' waits for its share must end the job
 *   ckpt_freeze this rank stops itself (SIGSTOP) as it begins writing the checkpoint of step STEP
 *               (rank 0 writes): the others' wait for the write must end the job
 *   ckpt_slow   the checkpoint write of step STEP takes 2 × train.comm_timeout_s longer (a
 *               sleep before it), as a slow file system would: the others must keep waiting
 * Two kinds happen during set-up, before step 1, and are given as @1 (another STEP never comes):
 *   setup_freeze  this rank stops itself (SIGSTOP) as set-up begins: the others' first
 *               collective of the set-up must end the job at the set-up bound (trainer.c; tests
 *               shorten it with LSTMD_SETUP_WAIT_S), naming the stopped rank
 *   workspace_oom this rank's CPU engine gets LSTMD_ENOMEM for its training workspaces, as a
 *               failed malloc would (engine_cpu.c): the set-up's vote must stop every rank
 * One kind is given as @1 and happens at every checkpoint of a stream-order run:
 *   state_oom   this rank's CPU engine gets no memory for the carried state it gathers for a
 *               checkpoint (engine_cpu.c): the vote must stop every rank, naming this one
 * Three kinds happen outside the run, in `lstmd train` (cli_train.c), given as @1:
 *   init_freeze      this rank (the launcher's rank number) stops itself (SIGSTOP) before
 *               MPI_Init: the others' MPI_Init must end at the set-up bound (comm.h,
 *               lstmd_comm_set_init_limit; LSTMD_SETUP_WAIT_S shortens it)
 *   finalize_freeze  this rank stops itself (SIGSTOP) after the run's last collective, as
 *               `lstmd train` begins MPI_Finalize: the others' MPI_Finalize must not wait for
 *               it forever (comm.h, lstmd_comm_finalize)
 *   finalize_slow    this rank begins MPI_Finalize 2 × train.comm_timeout_s late, as a slow
 *               close of its files (rank 0's train.log on NFS) or a slow device teardown would
 *               make it: the others' MPI_Finalize must wait for it (a healthy run exits 0)
 * With the variable unset nothing happens and the cost is one integer compare per step.
 *
 * LSTMD_VAL_LOSSES="L1,L2,..." scripts the validation losses rank 0 reports (and every rank then
 * decides on: early stopping, best checkpoint, plateau): the evaluation at step s reports entry
 * number ceil(s / train.eval_every) (1-based; with eval_every 0, the only evaluation reports
 * L1), so the same step gets the same loss in a resumed run. Evaluations past the list's end
 * report their real loss. The evaluation itself still runs. For tests of those decisions. */
#ifndef LSTMD_FAULT_H
#define LSTMD_FAULT_H

enum lstmd_fault {
  LSTMD_FAULT_NONE = 0,
  LSTMD_FAULT_NAN_GRAD,
  LSTMD_FAULT_NAN_UPDATE,
  LSTMD_FAULT_STOP,
  LSTMD_FAULT_SLOW,
  LSTMD_FAULT_EVAL_FREEZE,
  LSTMD_FAULT_CKPT_FREEZE,
  LSTMD_FAULT_CKPT_SLOW,
  LSTMD_FAULT_SETUP_FREEZE,
  LSTMD_FAULT_WORKSPACE_OOM,
  LSTMD_FAULT_STATE_OOM,
  LSTMD_FAULT_INIT_FREEZE,
  LSTMD_FAULT_FINALIZE_FREEZE,
  LSTMD_FAULT_FINALIZE_SLOW,
  LSTMD_FAULT_COUNT
};

/* Nonzero when `kind` is configured for `step` on `rank` (slow: for every step from STEP on). A malformed variable is reported once
 * and ignored. */
int lstmd_fault_due(enum lstmd_fault kind, long step, int rank);

/* LSTMD_VAL_LOSSES: when it scripts the evaluation at `step` (eval_every as configured), puts
 * the scripted loss in *loss and returns 1; else returns 0. A malformed variable is reported
 * once and ignored. */
int lstmd_fault_val_loss(long step, long eval_every, double *loss);

#endif
