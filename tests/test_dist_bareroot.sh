#!/usr/bin/env bash
# test_dist_bareroot.sh — the release bundle of `make dist` (deploy/make_dist.sh) on a node with
# nothing installed but the C/C++ runtime and a shell:
#  1. make_dist.sh writes the tarball; it is under 60 MB;
#  2. statically: every ELF file in it has an $ORIGIN-relative DT_RPATH (and no DT_RUNPATH), and
#     each library it needs is in the bundle where that run path looks, or is part of glibc,
#     libstdc++, libgcc_s or zlib (the GPU module's CUDA libraries excepted); no base or CUDA
#     library is bundled, no symlink points outside the bundle; then (dist_deploy_checks.sh) env.sh
#     in a POSIX sh, the Slurm scripts run by hand as in a batch job, `systemd-analyze verify`;
#  3. a root file system of only libc6, libgcc-s1, libstdc++6, zlib1g, bash and libtinfo6 (which
#     bash needs) — unpacked .debs, no apt, no coreutils — with the tarball unpacked at an unusual
#     path; entered with chroot in its own mount and PID namespaces (mounts and processes end with
#     it), a clean environment, env.sh sourced from another directory; there, from the bundle
#     alone: `lstmd --version`, `lstmd doctor` (its libraries are the bundle's), `lstmd prepare
#     text` on the bundled corpus, `mpirun -np 2 lstmd train` for a few steps (checkpoint and
#     metrics written, 2 ranks), `lstmd sample` (a one-rank MPI world), `lstmd serve` under
#     mpirun with a job submitted and watched to SUCCEEDED through lstmctl, then shut down; the
#     systemd unit's ExecStart= as systemd runs it (user lstmd, its environment, the bundle at
#     /opt/lstmd) serving the socket with group lstmd, and its KillSignal= draining it (exit 0).
# The .debs are cached in CACHE_DIR; offline, the installed packages' files are copied instead.
# Needs root (chroot, mount, unshare): exit 77 (skipped) where those are refused.
#
#   test_dist_bareroot.sh CACHE_DIR MAKE_DIST [make_dist.sh arguments but --out]
set -euo pipefail
if [[ ${1:-} == --inside ]]; then inside=1; shift; else inside=0; fi

fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }
skip() { echo "SKIP  $*"; exit 77; }
if [[ ${LSTMD_SANITIZED:-0} == 1 ]]; then skip "an ASan build (make test-asan): the bundle has no libasan"; fi

# ---- inside the namespaces: mounts, then every step in the chroot -------------------------------
# Runs as PID 1 of a new PID namespace in a new mount namespace (unshare, below): what it mounts is
# invisible outside and gone when it exits, and so is every process it started.
if ((inside)); then
  root=${1:?} bundle=${2:?} version=${3:?} cuda_libs=${4:-}
  unmount_all() {
    umount -R -l "$root/proc" "$root/sys" "$root/dev" "$root/opt/cuda-libs" 2>/dev/null || true
  }
  trap unmount_all EXIT
  chroot=$(command -v chroot) || skip "no chroot"
  W=$root/work
  share=$bundle/share/lstmd
  mount -t proc proc "$root/proc" || skip "cannot mount proc in the bare root"
  mount -t sysfs sysfs "$root/sys" || skip "cannot mount sysfs in the bare root"
  mount --rbind /dev "$root/dev" || skip "cannot bind /dev into the bare root"
  "$chroot" "$root" /bin/bash -c true || skip "cannot chroot into the bare root"
  why() { # why FILE: what to show of a failed step's output: Open MPI's first message, else the end
    local block
    block=$(awk '/^--------------------+$/ {n++; if (n == 2) exit; next} n == 1 && NF' "$1" | head -12)
    if [[ -n $block ]]; then echo "$block"; else tail -5 "$1"; fi
  }
  # in_root CMD: CMD in the bare root, in /work, with only what env.sh sets (and, as every test
  # here runs as root, Open MPI's consent to that; and more ranks than cores allowed); 90 s at
  # most (what a timeout leaves running ends with the namespace)
  in_root() {
    timeout 90 env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 OMPI_ALLOW_RUN_AS_ROOT=1 \
      OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
      "$chroot" "$root" /bin/bash -c "cd /work && . '$bundle/env.sh' && $1"
  }
  if in_root 'type -P mpirun' >"$W/env.out" 2>&1 && [[ $(<"$W/env.out") == "$bundle/bin/mpirun" ]]; then
    ok "env.sh sourced from /work: mpirun is $(<"$W/env.out")"
  else bad "env.sh: $(<"$W/env.out")"; fi

  if in_root "lstmd --version" >"$W/version.out" 2>&1 && grep -qx "lstmd $version" "$W/version.out" &&
    grep -q '^MPI: .*Open MPI v4' "$W/version.out" && grep -q '^BLAS: .*OpenBLAS' "$W/version.out"; then
    ok "lstmd --version: $(head -1 "$W/version.out"), $(grep -o 'Open MPI v[0-9.]*' "$W/version.out")"
  else bad "lstmd --version: $(why "$W/version.out")"; fi

  # doctor names the libraries by the files this process loaded: they must be the bundle's
  in_root "lstmd doctor" >"$W/doctor.out" 2>&1 || true
  if grep '^blas ' "$W/doctor.out" | grep -qF "$bundle/bin/../lib/libopenblas.so.0" &&
    grep '^mpi ' "$W/doctor.out" | grep -qF "$bundle/bin/../lib/libmpi.so.40" &&
    grep -q '^verdict .*can train' "$W/doctor.out"; then
    ok "lstmd doctor: OpenBLAS and libmpi loaded from the bundle, this node can train"
  else bad "lstmd doctor: $(why "$W/doctor.out")"; fi
  grep -E '^(gpu|cuda|train.device) ' "$W/doctor.out" | sed 's/^/      /' || true

  # The GPU module of the bundle, once the node's CUDA libraries are there (the build machine's,
  # bound read-only at /opt/cuda-libs and named by LSTMD_CUDA_LIBS): it loads from lib/lstmd/,
  # its own needs met by the bundle and lstmd's functions by the executable.
  if [[ -n $cuda_libs ]]; then
    mkdir -p "$root/opt/cuda-libs"
    mount --bind -o ro "$cuda_libs" "$root/opt/cuda-libs"
    in_root "LSTMD_CUDA_LIBS=/opt/cuda-libs lstmd --version" >"$W/gpu.out" 2>&1 || true
    if grep -qF "GPU library: module   $bundle/bin/../lib/lstmd/liblstmd_gpu.so" "$W/gpu.out" &&
      grep -q "^GPU library: cudnn *\/opt\/cuda-libs\/" "$W/gpu.out" &&
      grep -q "^GPU runtime: CUDA runtime" "$W/gpu.out"; then
      ok "with the node's CUDA libraries (LSTMD_CUDA_LIBS=/opt/cuda-libs) the bundle's GPU module loads: $(grep '^GPU runtime' "$W/gpu.out")"
    else bad "the bundle's GPU module with /opt/cuda-libs: $(grep '^GPU' "$W/gpu.out" || tail -3 "$W/gpu.out")"; fi
    umount -l "$root/opt/cuda-libs"
  else
    echo "note  no GPU module built, or no CUDA libraries on this machine: module load not tested"
  fi

  # Open MPI's help texts are found: without ssh or rsh, the rsh launcher's refusal is one of them
  in_root "OMPI_MCA_plm=rsh mpirun -np 1 lstmd --version" >"$W/help.out" 2>&1 || true
  if grep -q 'plm_rsh_agent' "$W/help.out" && ! grep -q 'You were supposed to get help' "$W/help.out"; then
    ok "Open MPI's help texts are found (mpirun with the rsh launcher and no ssh explains itself)"
  else bad "Open MPI's help text for a missing rsh agent: $(why "$W/help.out")"; fi

  if in_root "lstmd prepare text --input '$share/data/fortunes.txt' --out ds" >"$W/prepare.out" 2>&1 &&
    [[ -s $W/ds/train.bin && -s $W/ds/val.bin ]]; then
    ok "lstmd prepare text on the bundled corpus: $(du -b "$W/ds/train.bin" | cut -f1) training bytes"
  else bad "lstmd prepare: $(why "$W/prepare.out")"; fi

  tiny=(--set data.path=ds --set data.seq_len=16 --set data.batch_size=4 --set model.embed=8
    --set model.hidden=16 --set model.layers=1 --set model.dropout=0 --set train.threads=1
    --set train.log_every=2 --set train.eval_every=0 --set train.checkpoint_every=0)
  if in_root "mpirun -np 2 lstmd train --config '$share/examples/char_lm.ini' ${tiny[*]} \
      --set train.steps=6 --set train.run_dir=run" >"$W/train.out" 2>&1 &&
    [[ -s $W/run/latest.safetensors && -s $W/run/step-6.safetensors ]] &&
    grep -q '"step":6,.*"world":2' "$W/run/metrics.jsonl"; then
    ok "mpirun -np 2 lstmd train: 6 steps on 2 ranks, step-6.safetensors and metrics.jsonl written"
  else bad "mpirun -np 2 lstmd train: $(why "$W/train.out")"; fi
  # no CUDA libraries here: the CPU backend, and one line saying why
  cpu_line=$(grep 'using the CPU backend' "$W/train.out" || true)
  if [[ -n $cpu_line && $(wc -l <<<"$cpu_line") == 1 ]]; then ok "one line says why the CPU: $cpu_line"
  else bad "lines saying why the CPU backend: '$cpu_line'"; fi

  if in_root "lstmd sample --checkpoint run/latest.safetensors --prime 'The ' --length 40 --seed 3" \
    >"$W/sample.out" 2>"$W/sample.err" && [[ $(head -c 4 "$W/sample.out") == "The " ]] &&
    (($(wc -c <"$W/sample.out") >= 44)); then
    ok "lstmd sample (a one-rank MPI world): $(wc -c <"$W/sample.out") bytes"
  else bad "lstmd sample: $(why "$W/sample.err")"; fi

  # the daemon under mpirun, a job through lstmctl
  cat >"$W/job.ini" <<EOF
[data]
path = ds
seq_len = 16
batch_size = 4
[model]
embed = 8
hidden = 16
layers = 1
[train]
steps = 8
log_every = 4
eval_every = 0
checkpoint_every = 0
threads = 1
EOF
  in_root "exec mpirun -np 2 lstmd serve --socket /work/lstmd.sock --state-dir /work/state --data-root /work" \
    >"$W/serve.out" 2>&1 &
  serve=$!
  ctl() { in_root "lstmctl --socket /work/lstmd.sock $*"; }
  up=0
  for _ in $(seq 150); do
    if [[ -S $W/lstmd.sock ]] && ctl list >/dev/null 2>&1; then up=1; break; fi
    kill -0 "$serve" 2>/dev/null || break
    sleep 0.2
  done
  if ((up)); then
    ok "mpirun -np 2 lstmd serve answers lstmctl"
    id=$(ctl "submit --config /work/job.ini --name bundle" 2>&1 | tail -1) || true
    if ctl "watch $id" >"$W/watch.out" 2>&1 && tail -1 "$W/watch.out" | grep -q SUCCEEDED &&
      ctl "--json status $id" | grep -q '"state": *"SUCCEEDED"' &&
      [[ -s $W/state/runs/job-$id/latest.safetensors ]]; then
      ok "job $id through lstmctl: watched to SUCCEEDED, state/runs/job-$id/latest.safetensors written"
    else bad "job '$id': $(tail -3 "$W/watch.out"); daemon: $(why "$W/serve.out")"; fi
    ctl shutdown >/dev/null 2>&1 || bad "lstmctl shutdown"
    for _ in $(seq 150); do kill -0 "$serve" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$serve" 2>/dev/null; then
      bad "the daemon did not stop within 30 s of lstmctl shutdown"
    elif wait "$serve"; then ok "the daemon exited 0 after lstmctl shutdown"
    else bad "the daemon exited $? after lstmctl shutdown: $(why "$W/serve.out")"; fi
  elif kill -0 "$serve" 2>/dev/null; then bad "lstmd serve did not answer lstmctl within 30 s: $(why "$W/serve.out")"
  else bad "lstmd serve exited before answering: $(why "$W/serve.out")"; fi

  # The bundle's systemd unit as systemd runs it: ExecStart= (its lines joined) with Environment=
  # and systemd's PATH only, as User=/Group= lstmd, in WorkingDirectory=; the bundle at /opt/lstmd,
  # the link its install lines make. KillSignal= (SIGUSR1), which `systemctl stop` sends to that
  # process alone (KillMode=mixed), must drain the daemon: exit 0.
  unit=$root$bundle/share/lstmd/systemd/lstmd.service
  mkdir -p "$root/opt" "$root"/{run/lstmd,var/lib/lstmd,srv/lstmd}
  ln -sfn "$bundle" "$root/opt/lstmd"
  echo 'lstmd:x:990:990::/var/lib/lstmd:/bin/bash' >>"$root/etc/passwd"
  echo 'lstmd:x:990:' >>"$root/etc/group"
  chown 990:990 "$root"/{run/lstmd,var/lib/lstmd,srv/lstmd}
  exec_start=$(sed -n '/^ExecStart=/,/[^\\]$/p' "$unit" | sed 's/^ExecStart=//; s/\\$//' | tr '\n' ' ')
  mapfile -t unit_env < <(sed -n 's/^Environment=//p' "$unit")
  workdir=$(sed -n 's/^WorkingDirectory=//p' "$unit")
  timeout 90 env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    HOME=/var/lib/lstmd USER=lstmd LOGNAME=lstmd OMPI_MCA_rmaps_base_oversubscribe=1 "${unit_env[@]}" \
    "$chroot" --userspec=990:990 "$root" /bin/bash -c "cd '$workdir' && echo \$\$ >/tmp/unit.pid && exec $exec_start" \
    >"$W/unit.out" 2>&1 &
  unit_pid=$!
  up=0
  for _ in $(seq 150); do
    if [[ -S $root/run/lstmd/lstmd.sock ]] && in_root "lstmctl --socket /run/lstmd/lstmd.sock list" >/dev/null 2>&1; then
      up=1; break
    fi
    kill -0 "$unit_pid" 2>/dev/null || break
    sleep 0.2
  done
  if ((up)) && [[ $(stat -c '%g %a' "$root/run/lstmd/lstmd.sock") == '990 660' ]]; then
    ok "the systemd unit's ExecStart= (as lstmd, systemd's environment) serves /run/lstmd/lstmd.sock, group lstmd"
    kill -USR1 "$(cat "$root/tmp/unit.pid")"
    for _ in $(seq 150); do kill -0 "$unit_pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$unit_pid" 2>/dev/null; then bad "the unit's daemon did not stop within 30 s of SIGUSR1"
    elif wait "$unit_pid"; then ok "SIGUSR1 (the unit's KillSignal=) to its main process: the daemon drained, exit 0"
    else bad "the unit's daemon exited $? after SIGUSR1: $(why "$W/unit.out")"; fi
  else
    bad "the systemd unit's ExecStart= '$exec_start': no daemon on /run/lstmd/lstmd.sock: $(why "$W/unit.out")"
  fi
  exit $((fails > 0))
fi

# ---- outside: build the tarball, check it, build the bare root, go in ---------------------------
cache=${1:?usage: test_dist_bareroot.sh CACHE_DIR MAKE_DIST [make_dist.sh arguments]}
make_dist=${2:?}
shift 2
[[ $(id -u) == 0 ]] || skip "needs root (chroot, mount, unshare)"
command -v unshare >/dev/null || skip "no unshare"
unshare --mount --pid --fork --kill-child true 2>/dev/null || skip "cannot make mount and PID namespaces (unshare)"
version=''
with_module=0
for ((i = 1; i <= $#; i++)); do
  [[ ${!i} == --version ]] && { j=$((i + 1)); version=${!j}; }
  [[ ${!i} == --gpu-module ]] && with_module=1
done
[[ -n $version ]] || { echo "test_dist_bareroot.sh: no --version among the make_dist.sh arguments" >&2; exit 2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-dist.XXXXXX")
cleanup() {
  # every mount was made in the inner mount namespace; should one be visible here, unmount it
  # rather than delete through it
  local m
  for m in $(awk -v t="$TMP" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount -l "$m" || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
t0=$SECONDS

# 1. the tarball
"$make_dist" "$@" --out "$TMP/dist" >"$TMP/make_dist.out" 2>&1 ||
  { cat "$TMP/make_dist.out"; bad "make_dist.sh failed"; exit 1; }
tarball=$TMP/dist/lstmd-$version-linux-x86_64.tar.gz
[[ -f $tarball ]] || { bad "make_dist.sh wrote no $tarball"; exit 1; }
size=$(stat -c %s "$tarball")
if ((size < 60 * 1024 * 1024)); then ok "tarball $(basename "$tarball"): $((size / 1024 / 1024)) MB (< 60 MB)"
else bad "tarball is $((size / 1024 / 1024)) MB, over 60 MB"; fi

# 2. static checks on the unpacked bundle
base_re='^(libc|libm|libmvec|libdl|libpthread|librt|libutil|libresolv|libanl|ld-linux-x86-64|libgcc_s|libstdc\+\+|libz)\.so\.[0-9]+$'
cuda_re='^lib(cuda|cudart|cublas|cublasLt|cudnn[A-Za-z_]*|nccl|nvrtc|nvJitLink)\.so(\.[0-9]+)*$'
mkdir "$TMP/un packed"
tar -C "$TMP/un packed" -xzf "$tarball"
B="$TMP/un packed/lstmd-$version-linux-x86_64"
elfs=0 before=$fails
while IFS= read -r -d '' f; do
  [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]] || continue
  elfs=$((elfs + 1))
  rel=${f#"$B"/}
  dyn=$(readelf -d "$f")
  if grep -q '(RUNPATH)' <<<"$dyn"; then bad "$rel has a DT_RUNPATH (LD_LIBRARY_PATH would win over it)"; fi
  rpath=$(sed -n 's/.*(RPATH).*\[\(.*\)\]$/\1/p' <<<"$dyn")
  dirs=()
  IFS=: read -ra entries <<<"$rpath"
  for e in "${entries[@]}"; do
    # shellcheck disable=SC2016 # the loader's $ORIGIN, literally
    if [[ $e == '$ORIGIN'* ]]; then dirs+=("$(dirname "$f")${e#'$ORIGIN'}")
    else bad "$rel: run path entry '$e' is not \$ORIGIN-relative"; fi
  done
  ((${#dirs[@]})) || bad "$rel has no run path"
  while read -r so; do
    [[ $so =~ $base_re ]] && continue
    [[ $rel == lib/lstmd/* && $so =~ $cuda_re ]] && continue
    found=0
    for d in "${dirs[@]}"; do [[ -e $d/$so ]] && found=1; done
    ((found)) || bad "$rel needs $so, which the bundle lacks"
  done < <(sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p' <<<"$dyn")
done < <(find "$B" -type f -print0)
while IFS= read -r -d '' f; do
  so=${f##*/}
  if [[ $so =~ $base_re || $so =~ $cuda_re ]]; then bad "${f#"$B"/} is bundled, but must come from the node"; fi
done < <(find "$B" -name '*.so*' -print0)
while IFS= read -r -d '' l; do
  t=$(readlink "$l")
  if [[ $t == /* ]]; then bad "${l#"$B"/} points outside the bundle ($t)"
  elif [[ ! -e $l ]]; then bad "${l#"$B"/} is a dangling link"; fi
done < <(find "$B" -type l -print0)
((fails == before)) && ok "$elfs ELF files: \$ORIGIN run paths, every needed library in the bundle or the base"
# The example configs' headers name the scripts that make and run them (deploy/examples/*.sh,
# *.py): each must be in the bundle beside its config (share/lstmd/examples).
before=$fails
for ini in "$B"/share/lstmd/examples/*.ini; do
  for script in $(grep -o 'deploy/examples/[A-Za-z0-9_.-]*\.\(sh\|py\)' "$ini" | sort -u); do
    [[ -f $B/share/lstmd/examples/${script##*/} ]] \
      || bad "share/lstmd/examples/${ini##*/} names $script, which the bundle lacks"
  done
done
((fails == before)) && ok "every script an example config names is in share/lstmd/examples"
# env.sh in sh, the Slurm scripts run by hand as in a batch job, the systemd unit verified
source "$(dirname "$0")/dist_deploy_checks.sh"
check_deploy_scripts "$B" "$TMP/scripts"

# 3. the bare root: .debs unpacked (the installed version, else apt's candidate when the archive
#    no longer has it); offline, the installed packages' files are copied instead
root_pkgs=(libc6 libgcc-s1 libstdc++6 zlib1g bash libtinfo6)
root=$TMP/root
mkdir -p "$cache/debs" "$root"
cached_deb() { # cached_deb PACKAGE [VERSION]: the newest cached .deb of it (of that version)
  local v=${2:+_${2//:/%3a}} f
  f=$(ls -t "$cache/debs/$1$v"_*.deb 2>/dev/null | head -1) || true
  [[ -n $f ]] && echo "$f"
}
for p in "${root_pkgs[@]}"; do
  v=$(dpkg-query -W -f='${Version}' "$p")
  deb=$(cached_deb "$p" "$v") ||
    { (cd "$cache/debs" && apt-get download "$p=$v") >>"$TMP/apt.out" 2>&1 && deb=$(cached_deb "$p" "$v"); } ||
    { (cd "$cache/debs" && apt-get download "$p") >>"$TMP/apt.out" 2>&1 && deb=$(cached_deb "$p"); } || deb=''
  if [[ -n $deb ]]; then
    dpkg-deb -x "$deb" "$root"
  else
    echo "note  apt-get download $p failed (offline?): copying the installed files of $p (dpkg -L) instead"
    while read -r f; do
      if [[ ! -d $f && ( -f $f || -L $f ) ]]; then mkdir -p "$root${f%/*}" && cp -a "$f" "$root$f"; fi
    done < <(dpkg-query -L "$p")
  fi
done
mkdir -p "$root"/{proc,sys,dev,tmp,root,work,home/u-1/opt.d}
chmod 1777 "$root/tmp"
bundle="/home/u-1/opt.d/lstmd $version.rel"
mkdir "$root$bundle"
tar -C "$root$bundle" --strip-components=1 -xzf "$tarball"
for cmd in ls cat env sleep grep python3 ldd; do
  if [[ -e $root/bin/$cmd || -e $root/usr/bin/$cmd ]]; then bad "the bare root has $cmd, which it should not"; fi
done
ok "bare root: ${root_pkgs[*]} ($(du -sm "$root" | cut -f1) MB with the bundle at '$bundle')"

# 4. inside (with the folder of this machine's CUDA runtime, if it has one, for the module check)
cuda_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  ((with_module)) && [[ -e $d/libcudnn.so.9 && -e $d/libcudart.so.13 ]] && { cuda_libs=$d; break; }
done
rc=0
unshare --mount --pid --fork --kill-child bash "$0" --inside "$root" "$bundle" "$version" "$cuda_libs" || rc=$?
case $rc in
  0) ;;
  77) exit 77 ;;
  *) fails=$((fails + 1)) ;;
esac
echo "$((SECONDS - t0)) s"
if ((fails)); then echo "FAILED"; exit 1; fi
echo "PASSED"
