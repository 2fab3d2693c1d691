#!/usr/bin/env bash
# slurm_cluster.sh start DIR | stop DIR — a one-node Slurm cluster for tests, as root, in DIR:
# its own munge key and socket, slurmctld and slurmd in the foreground (backgrounded here), no
# cgroups, no accounting. `start` prints the SLURM_CONF to export and waits until the node is
# idle; exit 77 when Slurm or munge is not installed (ctest: skipped); `stop` stops exactly the
# daemons it started.
set -u
cmd=${1:?usage: slurm_cluster.sh start|stop DIR}
dir=${2:?}
if [[ $cmd == stop ]]; then
  pids=()
  for f in "$dir"/*.pid "$dir"/munge/munged.pid; do [[ -f $f ]] && pids+=("$(cat "$f")"); done
  ((${#pids[@]})) || exit 0
  kill "${pids[@]}" 2>/dev/null
  for _ in $(seq 50); do kill -0 "${pids[@]}" 2>/dev/null || exit 0; sleep 0.1; done
  kill -9 "${pids[@]}" 2>/dev/null
  exit 0
fi
for b in munged slurmctld slurmd srun; do
  command -v $b >/dev/null || { echo "slurm_cluster: $b not installed" >&2; exit 77; }
done
mkdir -p "$dir"/{state,spool,log,munge}
host=$(hostname)
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$dir/munge/munge.key"
# Ports out of the way of a real Slurm on the same machine.
port=$((20000 + RANDOM % 20000))
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
NodeName=$host CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
munged -F --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munge.log" --seed-file="$dir/munge/seed" \
  >/dev/null 2>&1 &
echo $! > "$dir/munge/munged.pid"
export SLURM_CONF=$dir/slurm.conf
sleep 0.5
slurmctld -D -i >"$dir/log/ctld.out" 2>&1 &
echo $! > "$dir/slurmctld.pid"
slurmd -D -N "$host" >"$dir/log/d.out" 2>&1 &
echo $! > "$dir/slurmd.pid"
for _ in $(seq 100); do
  [[ $(sinfo -h -o %t 2>/dev/null) == idle ]] && { echo "$dir/slurm.conf"; exit 0; }
  sleep 0.2
done
echo "slurm_cluster: the node did not come up; logs in $dir/log" >&2
tail -5 "$dir/log/ctld.out" "$dir/log/d.out" >&2
exit 1
