#!/usr/bin/env bash
# onnx_venv.sh VENV — makes sure VENV is a Python virtual environment with the pinned onnx,
# onnxruntime and numpy from PyPI (tests/test_onnx_export.sh, bench/bench_onnx.sh), creating
# it on first use (~25 s on 2 cores), and prints its python's path.
# Exit 0: ready; 77: PyPI cannot be reached (the reason on stderr); 1: any other failure.
set -u
VENV=${1:?usage: onnx_venv.sh VENV}
PINS=(onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6)
ready() {
  "$VENV/bin/python" - 2>/dev/null <<'PY'
import onnx, onnxruntime, numpy
assert (onnx.__version__, onnxruntime.__version__, numpy.__version__) == ("1.23.2", "1.31.1", "2.4.6")
PY
}
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock" # one installer at a time (ctest -j, a benchmark beside the tests)
flock 9
if ! ready; then
  # Debian's python3 (3.11): the wheels pinned here exist for it.
  PY=/usr/bin/python3
  [ -x "$PY" ] || PY=$(command -v python3)
  rm -rf "$VENV"
  if ! "$PY" -m venv "$VENV" >"$VENV.log" 2>&1; then
    echo "onnx_venv.sh: cannot create a venv with $PY: $(tail -1 "$VENV.log")" >&2
    exit 1
  fi
  if ! timeout 600 "$VENV/bin/pip" install -q "${PINS[@]}" >>"$VENV.log" 2>&1; then
    # Unreachable index, or something else? Ask it for one small wheel.
    TMP=$(mktemp -d)
    if ! timeout 120 "$VENV/bin/pip" download -q --no-deps --no-cache-dir -d "$TMP" packaging \
        >/dev/null 2>&1; then
      rm -rf "$TMP" "$VENV"
      echo "skipped: PyPI cannot be reached to install ${PINS[*]}: $(tail -1 "$VENV.log")" >&2
      exit 77
    fi
    rm -rf "$TMP"
    echo "onnx_venv.sh: pip install ${PINS[*]} failed (PyPI is reachable):" >&2
    tail -5 "$VENV.log" >&2
    exit 1
  fi
  ready || { echo "onnx_venv.sh: $VENV still lacks ${PINS[*]} after pip install" >&2; exit 1; }
fi
echo "$VENV/bin/python"
