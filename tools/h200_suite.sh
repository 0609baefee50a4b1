#!/usr/bin/env bash
# Run selector's whole test suite on a GPU machine where the project cannot be pip-installed
# normally (the lent H200: python3 with torch, triton, nvidia-ml-py, PyYAML and packaging;
# no hydra/omegaconf/pytest/hypothesis). Installs the carried wheels with `pip install
# --target`, puts them and the checkout on PYTHONPATH, records the machine, a warm
# `explain platform=auto` timing, and the pytest result.
#
#   WHEELS=/path/to/wheels OUT=/tmp/h200-suite tools/h200_suite.sh
#
# WHEELS: a directory of .whl files holding hydra-core, omegaconf, antlr4-python3-runtime,
#         pytest, hypothesis and their dependencies (pip resolves within it, offline).
# SITE:   where they are installed (default /tmp/site).
# OUT:    where the logs go (default /tmp/h200-suite): summary.txt, pytest.log, junit.xml,
#         doctor.json, explain_auto_seconds.txt.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SITE="${SITE:-/tmp/site}"
OUT="${OUT:-/tmp/h200-suite}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT" "$SITE"

if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" --target "$SITE" \
    hydra-core omegaconf pytest hypothesis >"$OUT/pip.log" 2>&1 || {
      echo "pip install --target failed; see $OUT/pip.log" >&2; exit 3; }
fi
# The project itself, installed the same way (conf/ and backends/ become selector.conf and
# selector.backends only in an installed copy); -P below keeps the checkout's own selector/
# from shadowing it through the current directory.
"$PY" -m pip install --quiet --no-deps --no-index --no-build-isolation --upgrade \
  --target "$SITE" "$REPO" >>"$OUT/pip.log" 2>&1 || {
    echo "pip install --target of the project failed; see $OUT/pip.log" >&2; exit 3; }
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONSAFEPATH=1  # every child too: the checkout in the cwd must not shadow the install
export SELECTOR_CACHE_DIR="$OUT/cache"
unset SELECTOR_NO_CACHE
cd "$REPO"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1 | head -1 \
    | sed 's/^/gpu: /'
  "$PY" -P - <<'PY'
import importlib, sys
print("python:", sys.version.split()[0])
for m in ("selector", "selector.backends", "torch", "triton", "pynvml", "yaml", "packaging",
          "hydra", "omegaconf", "pytest", "hypothesis"):
    try:
        mod = importlib.import_module(m)
        print(f"{m}: {getattr(mod, '__version__', 'present')} ({getattr(mod, '__file__', '')})")
    except Exception as exc:  # noqa: BLE001
        print(f"{m}: MISSING ({exc})")
PY
} >"$OUT/summary.txt" 2>&1

"$PY" -P -m selector doctor --format json >"$OUT/doctor.json" 2>"$OUT/doctor.err"
echo "doctor exit: $?" >>"$OUT/summary.txt"

# `explain platform=auto`, warm (the composed-config cache filled by the first run): the
# reliability guarantee is under 0.5 s with NVML asked in a child process.
"$PY" -P -m selector explain platform=auto >/dev/null 2>&1
"$PY" - >"$OUT/explain_auto_seconds.txt" <<'PY'
import statistics, subprocess, sys, time
runs = []
for _ in range(10):
    t = time.perf_counter()
    subprocess.run([sys.executable, "-P", "-m", "selector", "explain", "platform=auto"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs.append(time.perf_counter() - t)
print(f"explain platform=auto warm: median {statistics.median(runs):.3f} s, "
      f"min {min(runs):.3f} s, max {max(runs):.3f} s over {len(runs)} runs")
PY
cat "$OUT/explain_auto_seconds.txt" >>"$OUT/summary.txt"
"$PY" -P -m selector explain --format json platform=auto 2>&1 | "$PY" -c \
  'import json,sys; d=json.load(sys.stdin); print("detected:", d["platform"]["capability"], d["platform"]["cuda"])' \
  >>"$OUT/summary.txt" 2>&1

"$PY" -P -m pytest -q -p no:cacheprovider -rfEs --junitxml="$OUT/junit.xml" >"$OUT/pytest.log" 2>&1
rc=$?
echo "pytest exit: $rc" >>"$OUT/summary.txt"
tail -n 1 "$OUT/pytest.log" | sed 's/^/pytest: /' >>"$OUT/summary.txt"
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $rc
