#!/usr/bin/env bash
# test_nvtx.sh — lstmd's NVTX ranges, seen through NVTX's injection interface (what Nsight Systems
# attaches by) with tests/nvtx_recorder.c in the profiler's place; the CPU path, no GPU needed:
#  1. mpirun -np 2, 5 steps, a checkpoint every 2: both ranks record ranges; on every thread each
#     pop closes a push and none stays open; each rank's ranges are, step after step, exactly
#     "data wait", "forward+backward", "all-reduce wait", "optimizer", none inside another, with
#     "checkpoint" after steps 2, 4 and 5 on rank 0 alone, and no other names;
#  2. the same on one rank without mpirun;
#  3. without NVTX_INJECTION64_PATH nothing is recorded (NVTX stays a no-op): the one-rank run
#     again with the variable removed but the recorder in the process (LD_PRELOAD; it notes that
#     it was loaded, and answers NVTX's lookup of an already-loaded tool too) and its log created
#     empty beforehand: the log must stay empty, so any way lstmd's NVTX could still attach the
#     recorder shows up as recorded lines.
# Registered only where lstmd is built with NVTX (the CUDA toolkit's nvtx3 headers).
set -u
LSTMD=$(realpath "${1:?usage: test_nvtx.sh LSTMD_BINARY SOURCE_DIR NVTX_RECORDER [MPIEXEC]}")
SRC=$(realpath "${2:?}")
RECORDER=$(realpath "${3:?}")
MPIEXEC=${4:-mpirun}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
unset NVTX_INJECTION64_PATH LSTMD_NVTX_LOG # e.g. when run under nsys
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

# check LOG RANKS STEPS EVERY WORLD: the recorder's lines against the expected ranges. RANKS holds
# "pid rank" lines (or is "-": one process, rank 0).
check() {
  python3 - "$@" <<'PY'
import collections, sys
log, ranks_file, steps, every, world = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
STEP = ["data wait", "forward+backward", "all-reduce wait", "optimizer"]
def expected(rank):
    seq = []
    for s in range(1, steps + 1):
        seq += STEP
        if rank == 0 and (s % every == 0 or s == steps): seq.append("checkpoint")
    return seq
errors, stacks, pushes = [], collections.defaultdict(list), collections.defaultdict(list)
for n, line in enumerate(open(log), 1):
    f = line.rstrip("\n").split(" ", 3)
    if len(f) == 4 and f[2] == "push":
        open_ = stacks[f[0], f[1]]  # the phases are siblings: one inside another is wrong too
        pushes[f[0]].append(f[3] + (f" (inside {open_[-1]})" if open_ else ""))
        open_.append(f[3])
    elif len(f) == 3 and f[2] == "pop":
        if stacks[f[0], f[1]]: stacks[f[0], f[1]].pop()
        else: errors.append(f"line {n}: pop without a push (pid {f[0]} tid {f[1]})")
    else: errors.append(f"line {n}: malformed: {line!r}")
errors += [f"pid {p} tid {t}: never popped: {s}" for (p, t), s in stacks.items() if s]
rank = {p: 0 for p in pushes}
if ranks_file != "-":
    rank = dict(l.split() for l in open(ranks_file))
    rank = {p: int(r) if r.isdigit() else -1 for p, r in rank.items()}
if sorted(rank.values()) != list(range(world)) or set(pushes) != set(rank):
    errors.append(f"processes with ranges {sorted(pushes)}, ranks {rank} (want {world})")
for pid, names in pushes.items():
    want = expected(rank.get(pid, -1))
    if names != want:
        at = next((i for i, (a, b) in enumerate(zip(names, want)) if a != b),
                  min(len(names), len(want)))
        errors.append(f"rank {rank.get(pid)}: range {at}: {names[at:at + 2]} where "
                      f"{want[at:at + 2]} expected; counts {dict(collections.Counter(names))}")
if errors: print("; ".join(errors[:5])); sys.exit(1)
print(", ".join(f"rank {rank[p]}: {len(pushes[p])} ranges" for p in sorted(pushes, key=rank.get)) +
      f" = {steps} steps × {len(STEP)} phases + {len(expected(0)) - steps * len(STEP)} "
      "checkpoints on rank 0")
PY
}

head -c 100000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null || bad "prepare text"
common=(--set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=4
        --set model.embed=8 --set model.hidden=16 --set train.steps=5 --set train.checkpoint_every=2
        --set train.log_every=0 --set train.eval_every=0 --set train.threads=1 --set train.device=cpu)

# 1. two ranks; the wrapper notes each rank's pid (exec keeps it) to tell rank 0 from rank 1
NVTX_INJECTION64_PATH=$RECORDER LSTMD_NVTX_LOG=$TMP/mpi.log timeout 120 "$MPIEXEC" -np 2 \
  sh -c 'echo "$$ ${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" >> "$0"; exec "$@"' "$TMP/ranks" \
  "$LSTMD" train "${common[@]}" --set train.run_dir="$TMP/mpi" >/dev/null 2>"$TMP/mpi.err" \
  || bad "mpirun -np 2 lstmd train: $(tail -3 "$TMP/mpi.err")"
[[ -f $TMP/mpi/step-5.safetensors ]] || bad "mpirun -np 2: no final checkpoint"
if [[ ! -s $TMP/mpi.log ]]; then bad "mpirun -np 2: no NVTX ranges recorded (built without NVTX?)"
elif msg=$(check "$TMP/mpi.log" "$TMP/ranks" 5 2 2); then ok "mpirun -np 2: $msg"
else bad "mpirun -np 2: $msg"; fi

# 2. one rank, no mpirun
NVTX_INJECTION64_PATH=$RECORDER LSTMD_NVTX_LOG=$TMP/one.log timeout 60 "$LSTMD" train \
  "${common[@]}" --set train.run_dir="$TMP/one" >/dev/null 2>"$TMP/one.err" \
  || bad "lstmd train: $(tail -3 "$TMP/one.err")"
if [[ ! -s $TMP/one.log ]]; then bad "one rank: no NVTX ranges recorded"
elif msg=$(check "$TMP/one.log" - 5 2 1); then ok "one rank: $msg"
else bad "one rank: $msg"; fi

# 3. no injection library named, the recorder preloaded: NVTX must not attach it
: > "$TMP/none.log"
env -u NVTX_INJECTION64_PATH LD_PRELOAD="$RECORDER" LSTMD_NVTX_LOG="$TMP/none.log" \
  LSTMD_NVTX_LOADED="$TMP/none.loaded" timeout 60 "$LSTMD" train "${common[@]}" \
  --set train.run_dir="$TMP/none" >/dev/null 2>"$TMP/none.err" \
  || bad "lstmd train without NVTX_INJECTION64_PATH: $(tail -3 "$TMP/none.err")"
none="without NVTX_INJECTION64_PATH"
if [[ ! -s $TMP/none.loaded ]]; then bad "$none: the recorder was not loaded (LD_PRELOAD), so this proves nothing"
elif [[ ! -f $TMP/none.log || -s $TMP/none.log ]]; then
  bad "$none: $(wc -l < "$TMP/none.log" 2>/dev/null || echo '?') lines recorded: $(head -c 200 "$TMP/none.log" 2>/dev/null)"
elif [[ -f $TMP/none/step-5.safetensors ]]; then ok "$none: trained with the recorder loaded, nothing recorded"
else bad "$none: no final checkpoint"; fi

[[ $fails -eq 0 ]] && echo "test_nvtx: passed" || echo "test_nvtx: $fails FAILED"
exit $((fails > 0))
