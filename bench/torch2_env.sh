#!/usr/bin/env bash
# torch2_env.sh — a PyTorch 2.x (pinned 2.15.0) CPU peer for bench/bench_cpu.sh, from PyPI.
#
#   bench/torch2_env.sh           make the virtual environment if it is missing, then print the
#                                 path of a python to run the peer with (one line on stdout)
#   bench/torch2_env.sh --env     print instead the LD_LIBRARY_PATH=... that VENV/bin/python needs
#   bench/torch2_env.sh --check   make nothing: exit 0 when the environment is ready, else 1
#
# PyPI's default torch wheel is a CUDA build whose dependency tree is several GB. It is installed
# without its dependencies (--no-deps) plus the pure-Python packages it imports and the NVIDIA
# wheels its libtorch_cuda.so links (the recipe of /work/shared/PLATFORM.md, checked on CPU):
#
#   python3 -m venv VENV
#   VENV/bin/python -m pip install --no-cache-dir --no-deps torch==2.15.0 typing-extensions \
#     filelock sympy mpmath networkx jinja2 markupsafe fsspec numpy nvidia-cusparselt-cu13==0.8.1 \
#     nvidia-nvshmem-cu13==3.7.2 nvidia-cufile==1.17.0.44 nvidia-nccl-cu13==2.30.7 \
#     nvidia-cudnn-cu13==9.26.0.51
#
# (~1.3 GB downloaded, ~2.9 GB on disk, about 1-2 minutes with a good network). The CUDA 13
# runtime libraries (cudart, cublas, cufft, cusparse, nvrtc, nvJitLink, cupti) are not installed:
# they come from the CUDA toolkit (/usr/local/cuda/lib64, or the ld.so.conf of the machine).
# Nothing here needs a GPU: on CPU torch uses its own MKL and oneDNN on OpenMP threads.
# VENV/bin/python-torch2 is a wrapper that sets LD_LIBRARY_PATH (the wheels' lib folders and
# /usr/local/cuda/lib64) and runs VENV/bin/python; bench_cpu.sh uses it.
#
# Idempotent: a stamp file (VENV/.torch2-ready, holding the pinned list) marks a finished
# install; a missing or different stamp (re)makes the environment, a failed install removes it.
# Without network (PyPI unreachable) or disk space (< 4 GB free) it says so on stderr and exits 1:
# bench_cpu.sh then skips the torch 2 peer. pip's output goes to VENV.log.
#
# Environment:
#   TORCH2_VENV         where the environment lives (default: bench/.venv-torch2, git-ignored)
#   TORCH2_BASE_PYTHON  python3 to make it with (default /usr/bin/python3, else python3 on PATH)
#   PIP_INDEX_URL, proxies, ...: pip's own
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${TORCH2_VENV:-$HERE/.venv-torch2}
PKGS=(torch==2.15.0 typing-extensions filelock sympy mpmath networkx jinja2 markupsafe fsspec numpy
      nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.7.2 nvidia-cufile==1.17.0.44
      nvidia-nccl-cu13==2.30.7 nvidia-cudnn-cu13==9.26.0.51)
STAMP=$VENV/.torch2-ready
WRAPPER=$VENV/bin/python-torch2

say() { echo "torch2_env.sh: $*" >&2; }

mode=python
case "${1:-}" in
  "") ;;
  --env) mode="env" ;;
  --check) mode=check ;;
  -h | --help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) say "unknown argument $1 (--env, --check, --help)"; exit 2 ;;
esac

ready() { [[ -f $STAMP && $(cat "$STAMP") == "${PKGS[*]}" && -x $WRAPPER && -x $VENV/bin/python ]]; }

# LD_LIBRARY_PATH for the environment: the NVIDIA wheels' lib folders and the CUDA toolkit's.
libpath() {
  local site d p=""
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for d in nccl cudnn cu13 cusparselt nvshmem; do
    [[ -d $site/nvidia/$d/lib ]] && p+=${p:+:}$site/nvidia/$d/lib
  done
  [[ -d /usr/local/cuda/lib64 ]] && p+=${p:+:}/usr/local/cuda/lib64
  echo "$p"
}

install() {
  local base=${TORCH2_BASE_PYTHON:-}
  if [[ -z $base ]]; then
    base=python3
    /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null && base=/usr/bin/python3
  fi
  "$base" -c 'import venv, ensurepip' 2>/dev/null ||
    { say "$base cannot make a virtual environment (apt-get install python3-venv)"; return 1; }
  # Network: ask the index pip will use, quickly, before making anything.
  local index=${PIP_INDEX_URL:-https://pypi.org/simple}
  if ! "$base" - "${index%/}/torch/" <<'EOF' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=15).read(1)
EOF
    say "cannot reach $index (no network?): the torch 2 peer is not available"; return 1
  fi
  local parent free
  parent=$(dirname "$VENV")
  mkdir -p "$parent"
  free=$(df -Pk "$parent" | awk 'NR == 2 { print $4 }')
  if ((free < 4 * 1024 * 1024)); then
    say "$((free / 1024)) MiB free in $parent, the environment needs ~3 GB: not made"; return 1
  fi
  say "making $VENV (torch 2.15.0 from PyPI, ~1.3 GB download, ~2.9 GB on disk; log: $VENV.log)"
  rm -rf "$VENV"
  local t0=$SECONDS
  if ! { "$base" -m venv "$VENV" &&
         "$VENV/bin/python" -m pip install --no-cache-dir --disable-pip-version-check \
           --progress-bar off --timeout 60 --no-deps "${PKGS[@]}"; } >"$VENV.log" 2>&1; then
    say "install failed (tail of $VENV.log):"; tail -5 "$VENV.log" >&2
    rm -rf "$VENV"; return 1
  fi
  cat >"$WRAPPER" <<EOF
#!/bin/sh
# Made by bench/torch2_env.sh: torch 2.15.0 (PyPI) with the libraries it needs to import.
LD_LIBRARY_PATH='$(libpath)'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec '$VENV/bin/python' "\$@"
EOF
  chmod +x "$WRAPPER"
  local v
  if ! v=$("$WRAPPER" -c 'import torch; print(torch.__version__)' 2>>"$VENV.log"); then
    say "torch does not import (missing CUDA 13 runtime libraries? tail of $VENV.log):"
    tail -3 "$VENV.log" >&2
    return 1   # kept, not stamped: the next run installs again
  fi
  echo "${PKGS[*]}" >"$STAMP"
  say "torch $v ready in $((SECONDS - t0)) s, $(du -sh "$VENV" | cut -f1) on disk"
}

if ! ready; then
  [[ $mode == check ]] && exit 1
  # One maker at a time (two benchmarks started together).
  mkdir -p "$(dirname "$VENV")"
  exec 9>"$VENV.lock"
  command -v flock >/dev/null && flock 9
  ready || install || exit 1
fi
case $mode in
  python) echo "$WRAPPER" ;;
  env) echo "LD_LIBRARY_PATH=$(libpath)" ;;
  check) exit 0 ;;
esac
