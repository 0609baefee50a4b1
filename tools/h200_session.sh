#!/usr/bin/env bash
# One device call for issues #34 and #35 on the lent H100/H200 (SM 9.0): the parts named in PARTS,
# in order, each under its own time limit, the summary on stdout and at most 8 files in $OUT
# (what the device tool brings back). From the root of a copy of the repository:
#   WHEELS=.whl OUT=<dir> PARTS="tune emutiles emu fp8 verify tests" bash tools/h200_session.sh
# WHEELS: hydra-core, omegaconf, antlr4-python3-runtime wheels (the machine lacks them).
#   tune      tools/h200_tune.sh (QUANTS, NSHAPES, TOKENS, REPEATS as there) and tools/tune_check.py
#             --resolver: tune_a.json, tune_b.json, tune_check.txt
#   emutiles  benchmarks/emulation_tiles.py --quick: the fused MoE kernels' tile sweep (tiles.txt);
#             its best tiles at the largest token count go to `emu`
#   emu       benchmarks/emulation_bench.py --skip-quantize (emu.txt)
#   fp8       benchmarks/fp8_h200.py --only env,linear,moe (fp8.txt)
#   fp8host   benchmarks/fp8_host.py: an eager FP8 linear call's host cost, piece by piece
#             (fp8host.txt)
#   fp8tiles  benchmarks/fp8_tiles.py --scaled --quick: the per-channel GEMM over split-K counts
#             and its quantizer on Llama-3.1-8B's down_proj (fp8tiles.txt)
#   verify    selector doctor --verify --op linear and --op moe (verify.txt)
#   tests     the GPU tests of the FP8 and tune code (pytest.txt)
set -u
OUT=${OUT:-/tmp/h200_session}
PY=${PYTHON:-python3}
PARTS=${PARTS:-"tune emutiles emu fp8 verify tests"}
SITE=/tmp/site
mkdir -p "$OUT" "$SITE"
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl \
    >/tmp/pip.log 2>&1 || { echo "wheel install failed"; cat /tmp/pip.log; exit 3; }
fi
"$PY" -m pip install -q --no-deps --no-index --no-build-isolation -e . >>/tmp/pip.log 2>&1 \
  || { echo "project install failed"; tail /tmp/pip.log; exit 3; }
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 SELECTOR_CACHE_DIR=/tmp/selector-cache
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if has tune; then
  echo "=== tools/h200_tune.sh (QUANTS=${QUANTS:-fp8_block fp8_channel} NSHAPES=${NSHAPES:-8})"
  QUANTS=${QUANTS:-"fp8_block fp8_channel"} NSHAPES=${NSHAPES:-8} \
    TOKENS=${TOKENS:-1,16,128,1024,4096,16384} REPEATS=${REPEATS:-12} OUT=/tmp/tune \
    timeout "${TUNE_TIMEOUT:-360}" bash tools/h200_tune.sh >/tmp/tune.log 2>&1
  echo "rc $?"; cp /tmp/tune/tune_a.json /tmp/tune/tune_b.json /tmp/tune/tune_check.txt "$OUT"/ 2>/dev/null
  grep -E "^cells|^worst|MISS" /tmp/tune/tune_check.txt 2>/dev/null || tail -5 /tmp/tune.log
fi
tiles=""
if has emutiles; then
  echo "=== benchmarks/emulation_tiles.py --quick --tokens ${TILE_TOKENS:-1,256}"
  timeout "${TILES_TIMEOUT:-150}" "$PY" -P benchmarks/emulation_tiles.py --quick \
    --tokens "${TILE_TOKENS:-1,256}" >"$OUT/tiles.txt" 2>&1
  echo "rc $?"; grep -E "^T=|best" "$OUT/tiles.txt"
  tiles=$(sed -n 's/^BEST //p' "$OUT/tiles.txt" | tail -1)
fi
if has emu; then
  echo "=== benchmarks/emulation_bench.py --skip-quantize --tokens 1,8,64,256 ${tiles:+--tiles $tiles}"
  timeout "${EMU_TIMEOUT:-200}" "$PY" -P benchmarks/emulation_bench.py --skip-quantize \
    --tokens 1,8,64,256 ${tiles:+--tiles "$tiles"} >"$OUT/emu.txt" 2>&1
  echo "rc $?"; grep -E "worst|^ceilings|^tiles|^ +[0-9]+ nvfp4|FAILED" "$OUT/emu.txt"
fi
if has fp8; then
  echo "=== benchmarks/fp8_h200.py --only ${FP8_ONLY:-env,linear,moe}"
  timeout "${FP8_TIMEOUT:-200}" "$PY" -P benchmarks/fp8_h200.py --only "${FP8_ONLY:-env,linear,moe}" ${FP8_ARGS:-} \
    >"$OUT/fp8.txt" 2>&1
  echo "rc $?"; sed -n '/^FP8 linear: the selected/,$p' "$OUT/fp8.txt" | cut -c1-230
fi
if has fp8host; then
  echo "=== benchmarks/fp8_host.py ${HOST_ARGS:-}"
  timeout "${HOST_TIMEOUT:-150}" "$PY" -P benchmarks/fp8_host.py ${HOST_ARGS:-} \
    >"$OUT/fp8host.txt" 2>&1
  echo "rc $?"; cat "$OUT/fp8host.txt" | cut -c1-150
fi
if has fp8tiles; then
  echo "=== benchmarks/fp8_tiles.py ${FP8TILES_ARGS:---scaled --quick}"
  timeout "${FP8TILES_TIMEOUT:-150}" "$PY" -P benchmarks/fp8_tiles.py ${FP8TILES_ARGS:---scaled --quick} \
    >"$OUT/fp8tiles.txt" 2>&1
  echo "rc $?"; grep -v "^  {" "$OUT/fp8tiles.txt" | cut -c1-220
fi
if has verify; then
  for op in ${VERIFY_OPS:-linear moe}; do
    echo "=== python -m selector doctor --verify --op $op"
    timeout "${VERIFY_TIMEOUT:-150}" "$PY" -P -m selector doctor --verify --op $op --timeout 300 \
      2>&1 | grep -E "^    [a-z_0-9]+ +(fp8|nvfp4|-)|^exit" | grep -v SKIPPED
  done >"$OUT/verify.txt"
  grep -c " OK " "$OUT/verify.txt"; grep -E "FAIL|^exit" "$OUT/verify.txt"
fi
if has tests; then
  echo "=== pytest (GPU tests of the FP8 backends and the tune timers)"
  timeout "${TESTS_TIMEOUT:-150}" "$PY" -P -m pytest -q -p no:cacheprovider \
    tests/test_fp8_backends.py tests/test_fp8_act_quant.py tests/test_tune.py \
    -k "gpu or graph or captured or fused or split_k" \
    >"$OUT/pytest.txt" 2>&1
  echo "rc $?"; tail -3 "$OUT/pytest.txt"
fi
