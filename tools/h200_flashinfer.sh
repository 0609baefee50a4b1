#!/usr/bin/env bash
# FlashInfer on a GPU machine that cannot reach a package index and takes at most ~60 MB per
# transfer (the lent H200: docs/records/h200.md "FlashInfer on the H200"). flashinfer-python 0.7.4 is a
# 101 MB wheel, so it travels in two parts, in two runs of one warm machine; then it is joined,
# checked against the wheel's sha256, installed with pip --target beside the machine's torch, and
# selector's doctor looks at it.
#
#   here:   tools/h200_flashinfer.sh split WHEELS_DIR CARRY_DIR
#           WHEELS_DIR holds flashinfer_python-*.whl and any other wheels to carry (its pure-Python
#           dependencies the machine lacks: apache-tvm-ffi, cuda-tile, nvidia-cudnn-frontend;
#           hydra-core, omegaconf, antlr4-python3-runtime for selector). Writes CARRY_DIR/p1 (the
#           wheel's first part, the other wheels, MANIFEST) and CARRY_DIR/p2, p3, ... (the rest),
#           each under about PART_MB (default 58; the device takes 64 MiB a run, the checkout
#           included: PART_MB=40 gives three parts beside an 18 MB checkout).
#   run k:  tools/h200_flashinfer.sh stash CARRY_DIR/pk       keeps part k in $STASH (/tmp/fi-stash)
#   last:   tools/h200_flashinfer.sh install CARRY_DIR/pN     joins the N parts, checks, installs into $SITE
#           (/tmp/site), installs this checkout (pip -e, no deps), and prints
#           `doctor --deep` with the times of each step. Then: export PYTHONPATH=$SITE.
#   then:   tools/h200_flashinfer.sh warm       builds (and times) the JIT modules the direct
#           FlashInfer backends call (tools/fi_warm.py); FlashInfer's CUTLASS MoE module (the
#           largest build) in the background, in a session of its own, logging to $STASH/moe_jit.log
#           (it goes on between runs while the machine stays warm)
#           tools/h200_flashinfer.sh verify     `doctor --verify` of the linear backends, and of
#           the MoE backends once that build is done
# Exit status: 0 done; 3 a part is missing or the sha256 differs (say which); 4 pip failed.
set -uo pipefail
PY=${PYTHON:-python3}
STASH=${STASH:-/tmp/fi-stash}
SITE=${SITE:-/tmp/site}
PART_MB=${PART_MB:-58}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f s", b-a}'; }

case "${1:-}" in
split)
  src=${2:?WHEELS_DIR}; dst=${3:?CARRY_DIR}
  whl=$(ls "$src"/flashinfer_python-*.whl 2>/dev/null | head -1)
  [ -n "$whl" ] || { echo "split: no flashinfer_python-*.whl in $src" >&2; exit 3; }
  rm -rf "$dst"/p[0-9]*; mkdir -p "$dst/p1"
  name=$(basename "$whl")
  size=$(stat -c %s "$whl")
  chunk=$((PART_MB * 1000000))
  # part 1 carries the other wheels too: its share of the wheel is what is left under PART_MB;
  # the rest goes in parts of PART_MB each, as many as it takes
  others=0
  for f in "$src"/*.whl; do [ "$f" = "$whl" ] || { cp "$f" "$dst/p1/"; others=$((others + $(stat -c %s "$f"))); }; done
  first=$((chunk - others))
  [ "$first" -gt 0 ] || { echo "split: the other wheels alone exceed PART_MB=$PART_MB" >&2; exit 3; }
  n=$(( 1 + (size - first + chunk - 1) / chunk ))
  sum=$(sha256sum "$whl" | cut -d' ' -f1)
  head -c "$first" "$whl" >"$dst/p1/$name.part1"
  for k in $(seq 2 "$n"); do
    mkdir -p "$dst/p$k"
    tail -c +"$((first + (k - 2) * chunk + 1))" "$whl" | head -c "$chunk" >"$dst/p$k/$name.part$k"
  done
  for k in $(seq 1 "$n"); do printf '%s %s %s %s\n' "$name" "$size" "$sum" "$n" >"$dst/p$k/MANIFEST"; done
  du -sb "$dst"/p[0-9]*
  ;;
stash)
  part=${2:?PART_DIR}
  [ -f "$part/MANIFEST" ] || { echo "stash: no MANIFEST in $part" >&2; exit 3; }
  mkdir -p "$STASH"
  cp "$part"/* "$STASH/"
  echo "stashed in $STASH:"; ls -la "$STASH"
  ;;
install)
  part=${2:?PART_DIR}
  t0=$(now)
  [ -f "$part/MANIFEST" ] || { echo "install: no MANIFEST in $part" >&2; exit 3; }
  mkdir -p "$STASH"; cp "$part"/* "$STASH/"
  read -r name size sum n <"$part/MANIFEST"
  n=${n:-2}
  for k in $(seq 1 "$n"); do
    [ -f "$STASH/$name.part$k" ] || { echo "install: part $k of $name is not in $STASH (stash it first, on this same warm machine)" >&2; exit 3; }
  done
  for k in $(seq 1 "$n"); do cat "$STASH/$name.part$k"; done >"$STASH/$name"
  got=$(sha256sum "$STASH/$name" | cut -d' ' -f1)
  [ "$got" = "$sum" ] || { echo "install: $name sha256 $got, expected $sum" >&2; exit 3; }
  echo "joined $name ($size bytes, $n parts, sha256 ok) in $(since "$t0")"
  t1=$(now)
  mkdir -p "$SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$STASH"/*.whl || exit 4
  echo "pip install --target $SITE: $(ls "$STASH"/*.whl | xargs -n1 basename | tr '\n' ' ')in $(since "$t1")"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  "$PY" -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || exit 4
  t2=$(now)
  "$PY" -c "import flashinfer; print('import flashinfer', flashinfer.__version__)" || exit 4
  echo "import flashinfer: $(since "$t2")"
  "$PY" -m selector doctor --deep
  echo "doctor --deep exit $?"
  ;;
warm)
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  if [ "${MOE:-1}" = 1 ]; then
    setsid nohup nice -n 10 env MAX_JOBS="${MOE_JOBS:-8}" "$PY" tools/fi_warm.py moe \
      >"$STASH/moe_jit.log" 2>&1 </dev/null &
    echo "FlashInfer CUTLASS MoE module: building in the background ($STASH/moe_jit.log)"
  fi
  "$PY" tools/fi_warm.py bmm_fp8 bmm_fp8_cudnn blockscale
  ;;
verify)
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  ops="--op linear"
  if grep -q "^moe: built" "$STASH/moe_jit.log" 2>/dev/null; then ops="$ops --op moe"
  else echo "MoE module: $(tail -c 300 "$STASH/moe_jit.log" 2>/dev/null || echo 'not built')"; fi
  "$PY" -m selector doctor --verify $ops --timeout "${TIMEOUT:-300}"
  echo "doctor --verify $ops exit $?"
  ;;
*)
  sed -n '2,27p' "$0"; exit 2 ;;
esac
