# dist_deploy_checks.sh — sourced by test_dist_bareroot.sh (which defines ok/bad and fails): the
# bundle's own scripts, run outside the bare root (they need coreutils) by hand as a user would:
#  - env.sh sourced in a POSIX sh (which cannot tell a sourced file its path) from another folder
#    fails, says to set LSTMD_HOME and leaves LSTMD_HOME as it was; with LSTMD_HOME set it works;
#  - share/lstmd/slurm/{train,serve}.sbatch with the SLURM_* variables a batch job has and a stand-in
#    srun that runs its one task here: the default LSTMD is the bundle's when only LSTMD_HOME is
#    set (env.sh sourced before sbatch), the task gets env.sh's Open MPI variables when only LSTMD
#    is set, lstmd trains / serves, and serve.sbatch's "e.g. ssh HOST ..." line works as pasted;
#    an lstmd outside a bundle does not get an env.sh of its folder's parent sourced;
#  - share/lstmd/systemd/lstmd.service passes `systemd-analyze verify` (where it is installed).
# (The unit's ExecStart= itself runs in the bare root: test_dist_bareroot.sh.)
#
#   check_deploy_scripts BUNDLE WORK   (BUNDLE unpacked at a path with a space; WORK a scratch dir)
check_deploy_scripts() {
  local B=$1 W=$2 out rc=0
  mkdir -p "$W/bin"
  out=$(cd / && env -i PATH=/usr/bin:/bin sh -c '. "$1/env.sh"; echo "rc=$? LSTMD_HOME=[${LSTMD_HOME-unset}]"' \
    _ "$B" 2>&1) || true
  if [[ $out == *"set LSTMD_HOME to the bundle's folder first"* && $out == *"rc=1 LSTMD_HOME=[unset]"* ]]; then
    ok "env.sh in sh, sourced from /: refused, names LSTMD_HOME, leaves it unset"
  else bad "env.sh in sh, sourced from /: '$out'"; fi
  out=$(cd / && env -i PATH=/usr/bin:/bin LSTMD_HOME="$B" sh -c '. "$1/env.sh" && command -v lstmd' _ "$B" 2>&1) ||
    true
  [[ $out == "$B/bin/lstmd" ]] && ok "env.sh in sh with LSTMD_HOME set: lstmd is $out" ||
    bad "env.sh in sh with LSTMD_HOME set: '$out'"

  # srun as train.sbatch and serve.sbatch call it, for one task: the options dropped, the task run
  # here with the environment it was given (whose Open MPI variables it records)
  cat >"$W/bin/srun" <<'EOF'
#!/bin/bash
printf 'OPAL_PREFIX=%s OPAL_PKGLIBDIR=%s\n' "${OPAL_PREFIX:-}" "${OPAL_PKGLIBDIR:-}" >"$SRUN_ENV"
while [[ $1 == --* ]]; do shift; done
exec "$@"
EOF
  chmod +x "$W/bin/srun"
  head -c 100000 "$B/share/lstmd/data/fortunes.txt" >"$W/small.txt"
  "$B/bin/lstmd" prepare text --input "$W/small.txt" --out "$W/ds" 2>/dev/null
  printf '[data]\npath = %s\nseq_len = 16\nbatch_size = 4\n[model]\nhidden = 16\nlayers = 1\n[train]\nsteps = 4\nlog_every = 2\neval_every = 0\n' \
    "$W/ds" >"$W/job.ini"
  local want="OPAL_PREFIX=$B OPAL_PKGLIBDIR=$B/lib/openmpi"
  slurm_job() { # slurm_job VAR=VALUE... SCRIPT: the batch script as a 1-task, 1-CPU job 42 runs it
    (cd "$W" && timeout 60 env -i PATH="$W/bin:/usr/bin:/bin" HOME="$W" USER=u SRUN_ENV="$W/srun.env" \
      SLURM_JOB_ID=42 SLURM_JOB_NODELIST=localhost SLURM_NTASKS=1 SLURM_CPUS_PER_TASK=1 "$@")
  }
  rm -f "$W/srun.env"
  slurm_job LSTMD_HOME="$B" CONFIG="$W/job.ini" RUN="$W/run" bash "$B/share/lstmd/slurm/train.sbatch" \
    >"$W/train.sbatch.out" 2>&1 || rc=$?
  if ((rc == 0)) && [[ -s $W/run/step-4.safetensors && $(cat "$W/srun.env" 2>/dev/null) == "$want" ]]; then
    ok "train.sbatch with LSTMD_HOME only: the bundle's lstmd trained, its task had env.sh's variables"
  else bad "train.sbatch with LSTMD_HOME only: exit $rc, task env '$(cat "$W/srun.env" 2>/dev/null)': $(tail -2 "$W/train.sbatch.out")"; fi

  # an lstmd outside a bundle (here ~/bin/lstmd): an env.sh in its folder's parent is not sourced
  mkdir -p "$W/home/bin" && ln -sf "$B/bin/lstmd" "$W/home/bin/lstmd"
  printf 'touch "%s/stray-env-sourced"\n' "$W" >"$W/home/env.sh"
  slurm_job LSTMD="$W/home/bin/lstmd" CONFIG="$W/job.ini" RUN="$W/run-home" \
    bash "$B/share/lstmd/slurm/train.sbatch" >"$W/train-home.out" 2>&1
  [[ ! -e $W/stray-env-sourced ]] && ok "train.sbatch with LSTMD=~/bin/lstmd: ~/env.sh (no bundle's) not sourced" ||
    bad "train.sbatch sourced $W/home/env.sh, which is no bundle's"

  rm -f "$W/srun.env"
  slurm_job LSTMD="$B/bin/lstmd" STATE_DIR="$W/state" DATA_ROOT="$W" SOCKET="$W/s.sock" \
    bash "$B/share/lstmd/slurm/serve.sbatch" >"$W/serve.sbatch.out" 2>&1 &
  local serve=$! line remote
  for _ in $(seq 150); do
    grep -q 'e\.g\. ssh' "$W/serve.sbatch.out" && break
    kill -0 "$serve" 2>/dev/null || break
    sleep 0.2
  done
  # what follows "ssh HOST": split by the shell it is pasted into, joined by ssh, run by the remote one
  line=$(grep -o 'e\.g\. ssh .*' "$W/serve.sbatch.out") || true
  line=${line#e.g. ssh * }
  remote=$(eval "printf '%s ' $line" 2>&1) || true
  if [[ $(cat "$W/srun.env" 2>/dev/null) == "$want" ]] && out=$(bash -c "$remote" 2>&1) && [[ $out == ID* ]]; then
    ok "serve.sbatch with LSTMD only: env.sh's variables in its task; its ssh line, pasted, lists the jobs"
  else bad "serve.sbatch: task env '$(cat "$W/srun.env" 2>/dev/null)', ssh line '$line': $(tail -2 "$W/serve.sbatch.out")"; fi
  "$B/bin/lstmctl" --socket "$W/s.sock" shutdown >/dev/null 2>&1
  for _ in $(seq 100); do kill -0 "$serve" 2>/dev/null || break; sleep 0.2; done
  if kill "$serve" 2>/dev/null; then bad "serve.sbatch did not end after lstmctl shutdown"; fi

  if command -v systemd-analyze >/dev/null; then
    if out=$(systemd-analyze verify "$B/share/lstmd/systemd/lstmd.service" 2>&1); then
      ok "systemd-analyze verify share/lstmd/systemd/lstmd.service"
    else bad "systemd-analyze verify share/lstmd/systemd/lstmd.service: $out"; fi
  fi
}
