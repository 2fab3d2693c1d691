#!/usr/bin/env bash
# local-cluster.sh start DIR | stop DIR — a throwaway one-node Slurm cluster on this machine, for
# trying deploy/slurm/train.sbatch on a laptop or workstation, and for tests/test_slurm.sh.
#
# Needs root (a root shell, a container or a VM: slurmd starts job steps as the submitting user)
# and Debian's `slurm-wlm slurmctld slurmd slurm-client munge` (deploy/install-deps.sh). Everything
# lives in DIR: its own munge key and socket, slurm.conf, state, spool and logs (DIR/log). Ports
# are random in 20000-40001, so a real Slurm on the same machine is left alone. No cgroups, no
# accounting (no sacct). One partition, `debug`; the node advertises LOCAL_CLUSTER_CPUS CPUs
# (default 4, more than a 2-core laptop has is fine for trying things out).
#
# LOCAL_CLUSTER_FAKE_GPUS=N (default 0: no GPUs) declares N fake GPUs as GRES (`Gres=gpu:N`), for
# testing how Slurm hands GPUs to the ranks (--gpus-per-task, --gpus) on a machine without any:
# each is a character device DIR/dev/gpuI with /dev/null's numbers (Slurm rejects plain files),
# listed in DIR/gres.conf with AutoDetect=off. Job steps get CUDA_VISIBLE_DEVICES from Slurm as on
# a GPU node, but nothing can run on these devices, and without cgroups nothing keeps a task from
# opening the ones it was not given. `stop` removes the device nodes. Used by test_slurm_gpus.sh.
#
#   conf=$(deploy/slurm/local-cluster.sh start /tmp/lc)   # prints the slurm.conf to use
#   export SLURM_CONF=$conf
#   sinfo; srun -n 2 hostname
#   CONFIG=job.ini sbatch --wait deploy/slurm/train.sbatch
#   deploy/slurm/local-cluster.sh stop /tmp/lc             # stops exactly the daemons it started
#
# `start` waits until the node is idle and exits 0, exits 77 when Slurm or munge is not
# installed (ctest: skipped) and 1 when the node did not come up in 3 tries of 30 s, each on
# fresh ports (logs in DIR/log, a failed try's as *.tryN; run `stop`). It never waits longer.
set -u
cmd=${1:?usage: local-cluster.sh start|stop DIR}
dir=${2:?usage: local-cluster.sh start|stop DIR}
[[ $cmd == start || $cmd == stop ]] || { echo "usage: local-cluster.sh start|stop DIR" >&2; exit 2; }
# Stops the daemons started in $dir: only a PID that is still the daemon its file names (a stale
# file may name a reused PID); TERM, then KILL after 5 s.
stop_daemons() {
  local pids=() f pid
  for f in "$dir"/slurmctld.pid "$dir"/slurmd.pid "$dir"/munge/munged.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f")
    [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat /proc/"$pid"/comm 2>/dev/null) == "$(basename "$f" .pid)" ]] \
      && pids+=("$pid")
  done
  if ((${#pids[@]})); then
    kill "${pids[@]}" 2>/dev/null
    for _ in $(seq 50); do kill -0 "${pids[@]}" 2>/dev/null || break; sleep 0.1; done
    kill -9 "${pids[@]}" 2>/dev/null
  fi
}
if [[ $cmd == stop ]]; then
  stop_daemons
  rm -f "$dir"/dev/gpu[0-9]* # the fake GPUs' device nodes, if any
  [[ -d $dir/dev ]] && rmdir "$dir/dev" 2>/dev/null
  exit 0
fi
gpus=${LOCAL_CLUSTER_FAKE_GPUS:-0}
[[ $gpus =~ ^[0-9]+$ ]] || { echo "local-cluster: LOCAL_CLUSTER_FAKE_GPUS must be a count" >&2; exit 2; }
for b in munged slurmctld slurmd srun sinfo; do
  command -v $b >/dev/null || { echo "local-cluster: $b not installed" >&2; exit 77; }
done
mkdir -p "$dir"/{state,spool,log,munge}
dir=$(cd "$dir" && pwd) # slurm.conf needs absolute paths
cpus=${LOCAL_CLUSTER_CPUS:-4}
host=$(hostname)
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$dir/munge/munge.key"
gres_types='' node_gres=''
rm -f "$dir/gres.conf" "$dir"/dev/gpu[0-9]*
if ((gpus > 0)); then
  mkdir -p "$dir/dev"
  echo "AutoDetect=off" > "$dir/gres.conf"
  for ((i = 0; i < gpus; i++)); do
    mknod -m 666 "$dir/dev/gpu$i" c 1 3 \
      || { echo "local-cluster: cannot create the fake GPU $dir/dev/gpu$i (mknod)" >&2; exit 1; }
    echo "NodeName=$host Name=gpu File=$dir/dev/gpu$i" >> "$dir/gres.conf"
  done
  gres_types=$'GresTypes=gpu\n'
  node_gres=" Gres=gpu:$gpus"
fi
# Ports: random in 20000-40001, out of the way of a real Slurm on the same machine, and both
# free now (another test's cluster may be starting beside this one).
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 20000))
    port_free $p && port_free $((p + 1)) && { echo $p; return; }
  done
  echo $p
}
write_conf() {
  cat > "$dir/slurm.conf" <<CONF
ClusterName=lstmdtest
SlurmctldHost=$host
SlurmUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
SlurmdParameters=config_overrides
MailProg=/bin/true
ReturnToService=2
${gres_types}NodeName=$host CPUs=$cpus$node_gres State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
}
# One try: the daemons on a fresh port, then up to 30 s for the node to be idle. Every sinfo is
# bounded (a controller that accepts and never answers must not hold this for its message
# timeouts, 10 s each), so a try ends in bounded time whatever the daemons do.
try_start() {
  port=$(pick_port)
  write_conf
  munged -F --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munge.log" \
    --seed-file="$dir/munge/seed" >/dev/null 2>&1 &
  echo $! > "$dir/munge/munged.pid"
  sleep 0.5
  slurmctld -D -i >"$dir/log/ctld.out" 2>&1 &
  echo $! > "$dir/slurmctld.pid"
  slurmd -D -N "$host" >"$dir/log/d.out" 2>&1 &
  echo $! > "$dir/slurmd.pid"
  local until=$((SECONDS + 30))
  while ((SECONDS < until)); do
    [[ $(timeout 5 sinfo -h -o %t 2>/dev/null) == idle ]] && return 0
    sleep 0.2
  done
  return 1
}
export SLURM_CONF=$dir/slurm.conf
for attempt in 1 2 3; do
  try_start && { echo "$dir/slurm.conf"; exit 0; }
  echo "local-cluster: try $attempt: the node was not idle within 30 s (ports $port, $((port + 1)))" >&2
  tail -n 3 "$dir/log/ctld.out" "$dir/log/d.out" >&2
  stop_daemons
  for f in "$dir"/log/*; do [[ -f $f && $f != *.try[0-9] ]] && mv "$f" "$f.try$attempt"; done
done
echo "local-cluster: the node did not come up in 3 tries; logs in $dir/log" >&2
exit 1
