#!/usr/bin/env bash
# `selector doctor --verify` on a GPU machine (written for the lent H200, SM 9.0), recorded.
#
# Usage, from the repository root:   bash tools/h200_verify.sh [WHEEL_DIR]
#   WHEEL_DIR: wheels of what the machine lacks (hydra-core, omegaconf, antlr4-python3-runtime),
#   installed with `pip install --no-index`. Needs python3 with torch (CUDA), PyYAML, packaging;
#   nvidia-ml-py for GPU detection. selector is not installed: it runs from links under $OUT/src. Writes the transcript to $OUT/h200_verify.txt (default
#   /tmp/h200_verify) and the JSON reports next to it.
#
# What it runs (each a new process; the verification cache starts empty):
#   1. doctor --verify (text), then again: the second run answers from the cache;
#   2. doctor --verify --format json;
#   3. explain probe=verify for an MoE and a linear layer;
#   4. the same with the deliberately wrong backends of tests/wrong_backends (a sign flip, a
#      dropped scale, a crash, an out-of-bounds device access): on a GPU the last is a CUDA
#      device-side assert, which must come back as a FAIL naming the CUDA error.
# On SM 9.0 only `emulation` (the reference implementation, run on CUDA) passes its rules: every
# SM100/SM120 kernel is SKIPPED with its [device] reason; nothing is faked.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/h200_verify}
TIMEOUT=${VERIFY_TIMEOUT:-300}
mkdir -p "$OUT"
if [ -n "${1:-}" ]; then
  "$PY" -m pip install -q --no-index --find-links "$1" hydra-core omegaconf || exit 3
fi
# No install needed: pyproject maps conf/ and backends/ onto selector.conf and selector.backends;
# a directory of links gives a plain checkout the same layout for PYTHONPATH.
STAGE="$OUT/src"
rm -rf "$STAGE" && mkdir -p "$STAGE/selector"
for f in "$PWD"/selector/*; do ln -s "$f" "$STAGE/selector/"; done
ln -s "$PWD/backends" "$STAGE/selector/backends"
ln -s "$PWD/conf" "$STAGE/selector/conf"
export PYTHONPATH="$STAGE${PYTHONPATH:+:$PYTHONPATH}"
export SELECTOR_CACHE_DIR="$OUT/cache"
rm -rf "$SELECTOR_CACHE_DIR"
WRONG_ENV="PYTHONPATH=$PWD/tests/wrong_backends/site:$PYTHONPATH"  # the wrong backends' plugin
WRONG_CONF="--config-dir $PWD/tests/wrong_backends/conf"
# Run from $OUT: from the checkout, `python -m` would put its plain selector/ (no backends inside)
# first on sys.path, ahead of the link tree.
cd "$OUT" || exit 3

run() {  # print the command, run it (stdout to $JSON when set), print exit status and wall time
  echo "=== $*${JSON:+ > $JSON}"
  local t0 rc
  t0=$(date +%s%N)
  if [ -n "${JSON:-}" ]; then env "$@" > "$JSON"; else env "$@"; fi
  rc=$?
  echo "exit $rc, wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  echo
}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(hostname)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1 | head -2
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
  echo
  run "$PY" -m selector doctor --verify --timeout "$TIMEOUT"
  run "$PY" -m selector doctor --verify --timeout "$TIMEOUT"
  JSON="$OUT/verify.json" run "$PY" -m selector doctor --verify --timeout "$TIMEOUT" --format json
  cat "$OUT/verify.json"
  run "$PY" -m selector explain probe=verify layer.op=moe
  run "$PY" -m selector explain probe=verify layer=dense_linear
  run $WRONG_ENV "$PY" -m selector doctor --verify --timeout "$TIMEOUT" $WRONG_CONF
  JSON="$OUT/verify_wrong.json" run $WRONG_ENV "$PY" -m selector doctor --verify --timeout "$TIMEOUT" $WRONG_CONF --format json
  run $WRONG_ENV "$PY" -m selector explain probe=verify layer.op=moe $WRONG_CONF
  run $WRONG_ENV "$PY" -m selector explain probe=verify layer=dense_linear $WRONG_CONF
} 2>&1 | tee "$OUT/h200_verify.txt"
