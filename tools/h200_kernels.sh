#!/usr/bin/env bash
# selector's own kernels on the lent H200 (issue 35), in one call: the fused FP8 activation
# quantizer's tests, the FP8 MoE zoo's measurement (the bounds' basis), doctor --verify, and the
# benchmarks against their fair baselines. From the root of a copy of the repository:
#   WHEELS=.whl OUT=/tmp/out PARTS="tests zoo verify linear moe emulation" bash tools/h200_kernels.sh
# WHEELS: hydra-core, omegaconf and antlr4-python3-runtime wheels (the machine lacks them).
# Each part has its own time limit and log under $OUT; the last lines printed are the tables.
set -u
OUT=${OUT:-/tmp/h200_kernels}
PY=${PYTHON:-python3}
PARTS=${PARTS:-"tests zoo bounds verify linear moe tiles emulation"}
SITE=/tmp/site
mkdir -p "$OUT" "$SITE"
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl \
    >"$OUT/pip.log" 2>&1 || { echo "wheel install failed"; cat "$OUT/pip.log"; exit 3; }
fi
# the project editable into the machine's python (tests/conftest.py puts the checkout first on
# sys.path: only the editable finder maps selector.backends onto backends/ then)
"$PY" -m pip install -q --no-deps --no-index --no-build-isolation -e . \
  >>"$OUT/pip.log" 2>&1 || { echo "project install failed"; tail "$OUT/pip.log"; exit 3; }
export PYTHONPATH="$SITE" PYTHONSAFEPATH=1 SELECTOR_CACHE_DIR="$OUT/cache" PYTHONUNBUFFERED=1
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm,clocks.mem --format=csv,noheader
"$PY" -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
if has tests; then
  echo "=== pytest tests/test_fp8_act_quant.py tests/test_fp8_backends.py tests/test_layers.py"
  timeout "${TESTS_TIMEOUT:-120}" "$PY" -P -m pytest -q -x -p no:cacheprovider tests/test_fp8_act_quant.py \
    tests/test_fp8_backends.py tests/test_layers.py ${PYTEST_EXTRA:-} ${PYTEST_MARK:+-m "$PYTEST_MARK"} \
    >"$OUT/pytest.txt" 2>&1
  echo "rc $?"; tail -5 "$OUT/pytest.txt"
fi
if has zoo; then
  echo "=== python tests/verify_zoo.py --ops moe_fp8 --seeds ${ZOO_SEEDS:-6} --mutant-seeds 3 --jobs 15"
  timeout "${ZOO_TIMEOUT:-240}" "$PY" tests/verify_zoo.py --ops moe_fp8 --seeds "${ZOO_SEEDS:-6}" \
    --mutant-seeds "${ZOO_MUTANT_SEEDS:-3}" --jobs 15 --json "$OUT/zoo_fp8.json" >"$OUT/zoo.txt" 2>&1
  echo "rc $?"; grep -v "^MISSED" "$OUT/zoo.txt" | tail -30
fi
if has bounds && [ -f "$OUT/zoo_fp8.json" ]; then
  echo "=== python tools/fp8_moe_bounds.py zoo_fp8.json --write (then judged with them)"
  "$PY" -P tools/fp8_moe_bounds.py "$OUT/zoo_fp8.json" --write
  grep -A5 "^FP8_MOE_MEASURED" selector/inspect/verify_cases.py
  "$PY" -P tools/fp8_moe_bounds.py "$OUT/zoo_fp8.json" >"$OUT/zoo_judged.txt" 2>&1
  grep -v "^MISSED" "$OUT/zoo_judged.txt" | tail -14; grep -c "^MISSED" "$OUT/zoo_judged.txt"
fi
if has verify; then
  for op in moe linear; do  # the two ops at once (one child process each)
    timeout "${VERIFY_TIMEOUT:-240}" "$PY" -P -m selector doctor --verify --op $op --timeout 300 \
      --format json >"$OUT/verify_$op.json" 2>"$OUT/verify_$op.err" &
  done
  wait
  for op in moe linear; do
    echo "=== python -m selector doctor --verify --op $op"
    "$PY" - "$OUT/verify_$op.json" <<'PY'
import json, sys, collections
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    print("no json:", exc); sys.exit(0)
rows = d.get("verify", d) if isinstance(d, dict) else d
rows = rows.get("results", rows) if isinstance(rows, dict) else rows
c = collections.Counter()
for r in rows if isinstance(rows, list) else []:
    if isinstance(r, dict) and r.get("scheme"):
        c[(r["backend"], r["scheme"], r["status"])] += 1
        if r["status"] == "FAIL":
            print("FAIL", r["backend"], r.get("case"), r.get("detail", "")[:200])
for k, v in sorted(c.items()):
    print(*k, v)
PY
  done
fi
if has linear || has moe; then
  only=""; has linear && only="linear"; has moe && only="${only:+$only,}moe"
  echo "=== python benchmarks/fp8_h200.py --only env,$only"
  timeout "${FP8_TIMEOUT:-240}" "$PY" benchmarks/fp8_h200.py --only "env,$only" \
    --json "$OUT/fp8_h200.json" >"$OUT/fp8_h200.txt" 2>&1
  echo "rc $?"; grep -E "^ceilings|grouped bf16|^  T=" "$OUT/fp8_h200.txt" | grep -v "TFLOP/s)" | tail -20
  sed -n '/^FP8 linear: the selected/,$p' "$OUT/fp8_h200.txt"
fi
if has tiles; then
  echo "=== python benchmarks/fp8_tiles.py"
  timeout "${TILES_TIMEOUT:-120}" "$PY" -P benchmarks/fp8_tiles.py >"$OUT/fp8_tiles.txt" 2>&1
  echo "rc $?"; cat "$OUT/fp8_tiles.txt"
fi
if has emulation; then
  echo "=== python benchmarks/emulation_bench.py --skip-quantize --tokens 1,8,64,256"
  timeout "${EMU_TIMEOUT:-200}" "$PY" benchmarks/emulation_bench.py --skip-quantize \
    --tokens 1,8,64,256 >"$OUT/emulation.txt" 2>&1
  echo "rc $?"; tail -14 "$OUT/emulation.txt"
fi
