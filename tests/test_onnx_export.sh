#!/usr/bin/env bash
# test_onnx_export.sh LSTMD DUMP_LOGITS SOURCE_DIR VENV — `lstmd export onnx` checked by
# test_onnx_export.py with onnx and onnxruntime from PyPI, installed into VENV (under the build
# tree) on first use by onnx_venv.sh. 77 (skipped, with the reason) only when PyPI cannot be
# reached to make the venv.
set -u
LSTMD=${1:?usage: test_onnx_export.sh LSTMD DUMP_LOGITS SOURCE_DIR VENV}
DUMP=${2:?}
SRC=${3:?}
VENV=${4:?}
PY=$(bash "$SRC/tests/onnx_venv.sh" "$VENV")
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 77 ] && echo "test_onnx_export: skipped: the venv could not be made (above)"
  exit $rc
fi
exec "$PY" "$SRC/tests/test_onnx_export.py" --lstmd "$LSTMD" --dump-logits "$DUMP" --source-dir "$SRC"
