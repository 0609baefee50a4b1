#!/usr/bin/env bash
# Issue #46 on the lent H100 (SM 9.0): the parts named in PARTS, in order, the summary on stdout
# and the logs in $OUT. From the root of a copy of the repository:
#   WHEELS=.whl OUT=<dir> PARTS="cold emu tune" bash tools/h100_issue46.sh      (call 1)
#   WHEELS=.whl OUT=<dir> PARTS="agree select" PROFILE=<tune.json> bash ...      (call 2)
# WHEELS: hydra-core, omegaconf, antlr4-python3-runtime wheels (the machine lacks them).
#   cold    benchmarks/cold_start.py on this tree and on BASE (a tar of an older tree's
#           selector/, default .carry/base.tar) in the same call (cold.txt)
#   emu     benchmarks/emulation_shapes.py: the fused emulation MoE at Qwen3-30B-A3B and
#           Mixtral-8x7B shapes, compiled or fallen back per shape (emu.txt)
#   tune    selector tune (fp8_block, fp8_channel) on held-out FP8 linear shapes (Qwen3-32B,
#           Mistral-Large-2 at TP4, Gemma-3-27B, Phi-4), weight copies past the L2, graph timer
#           and the eager spread (tune.json, tune.txt)
#   agree   benchmarks/tune_agree.py PROFILE: tune's median per cell against an independent
#           CUDA-graph timer over weight copies (agree.txt)
#   select  a plain selector.load(["policy.profile=P"]).select(op="linear", ...) per cell of
#           PROFILE: the measurement found (note `measured`) or the warning (select.txt)
#   check   tools/packaged_check.py PROFILE: leave one shape out, the packaged profile's picks
#           and the static order's on the shape it did not time (check.txt)
#   fp8mid  benchmarks/fp8_h200.py --only linear --every at FP8MID_TOKENS (default 1,64,128,256,
#           512,8192) on the issue's Mistral-Large-2 TP4 qkv and Qwen3-32B o / down rows (fp8mid.txt)
#   emubench benchmarks/emulation_bench.py --model M for M in EMU_MODELS (default qwen3 gptoss
#           mixtral) at EMU_TOKENS (default 1,64,256,1024): fused / apply graph / grouped bf16
#           eager and graph, limits, peak memory over the checkpoint (emubench.txt)
#   capture benchmarks/emulation_capture.py: EmulationMoE.apply with no host sync, captured in a
#           CUDA graph and replayed on new inputs (capture.txt)
#   tiles   benchmarks/emulation_tiles.py --graph per TILE_SHAPES (model:tokens, default
#           mixtral:256,1024 qwen3:1024 gptoss:1024), BLOCK_M in TILE_BM (default 64,128),
#           compiled in 8 processes first (tiles.txt; BEST lines on stdout)
#   clock   benchmarks/tune_clock.py: tune's graph timer against the independent one, idle and
#           after sustained load, with the SM clock (clock.txt)
set -u
OUT=${OUT:-/tmp/issue46}
PY=${PYTHON:-python3}
PARTS=${PARTS:-"cold emu tune"}
SITE=/tmp/site
mkdir -p "$OUT" "$SITE"
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl \
    >/tmp/pip.log 2>&1 || { echo "wheel install failed"; cat /tmp/pip.log; exit 3; }
fi
"$PY" -m pip install -q --no-deps --no-index --no-build-isolation -e . >>/tmp/pip.log 2>&1 \
  || { echo "project install failed"; tail /tmp/pip.log; exit 3; }
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 SELECTOR_CACHE_DIR=/tmp/selector-cache
# DEADLINE (seconds from the start, default 570): the last parts get what is left of it
left() { local l=$(( ${DEADLINE:-570} - SECONDS )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm,clocks.mem --format=csv,noheader
"$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
if has cold; then
  echo "=== python benchmarks/cold_start.py --runs 5 (this tree, then ${BASE:-.carry/base.tar})"
  rm -rf /tmp/base && mkdir -p /tmp/base && tar -xf "${BASE:-.carry/base.tar}" -C /tmp/base
  { "$PY" benchmarks/cold_start.py --runs 5 --importtime
    "$PY" benchmarks/cold_start.py --runs 5 --repo /tmp/base
    "$PY" benchmarks/cold_start.py --runs 5
    "$PY" benchmarks/cold_start.py --runs 5 --repo /tmp/base; } 2>&1 | tee "$OUT/cold.txt"
fi
if has emu; then
  echo "=== python benchmarks/emulation_shapes.py"
  timeout "$(left "${EMU_TIMEOUT:-240}")" "$PY" benchmarks/emulation_shapes.py 2>&1 | tee "$OUT/emu.txt"
  echo "rc ${PIPESTATUS[0]}"
fi
if has tune; then
  # K=hidden_size, N=intermediate_size per GPU: Qwen3-32B qkv, o, gate_up, down; Mistral-Large-2
  # TP4 qkv, o; Gemma-3-27B gate_up; Phi-4 qkv; Llama-3.1-405B TP8 gate_up, down
  SHAPES=(hidden_size=5120,intermediate_size=10240 hidden_size=8192,intermediate_size=5120
          hidden_size=5120,intermediate_size=51200 hidden_size=25600,intermediate_size=5120
          hidden_size=12288,intermediate_size=3584 hidden_size=3072,intermediate_size=12288
          hidden_size=5376,intermediate_size=43008 hidden_size=5120,intermediate_size=7680
          hidden_size=16384,intermediate_size=13312 hidden_size=6656,intermediate_size=16384)
  [ -n "${NSHAPES:-}" ] && SHAPES=("${SHAPES[@]:0:$NSHAPES}")
  LAYERS=()
  for s in "${SHAPES[@]}"; do LAYERS+=(--layer "$s"); done
  for q in ${QUANTS:-fp8_block fp8_channel}; do
    echo "=== python -m selector tune layer=dense_linear layer.quant=$q --tokens ${TOKENS:-1,16,128,1024,4096} (${#SHAPES[@]} shapes)"
    timeout "${TUNE_TIMEOUT:-200}" "$PY" -m selector tune layer=dense_linear layer.quant=$q \
      "${LAYERS[@]}" --tokens "${TOKENS:-1,16,128,1024,4096}" --max-memory 60 \
      --repeats "${REPEATS:-12}" --out "$OUT/tune.json" >>"$OUT/tune.txt" 2>&1
    echo "rc $?"; tail -3 "$OUT/tune.txt"
  done
fi
if has agree; then
  echo "=== python benchmarks/tune_agree.py ${PROFILE:-$OUT/tune.json}"
  timeout "$(left "${AGREE_TIMEOUT:-300}")" "$PY" benchmarks/tune_agree.py "${PROFILE:-$OUT/tune.json}" \
    2>&1 | tee "$OUT/agree.txt" | tail -4
fi
if has check; then
  echo "=== python tools/packaged_check.py ${PROFILE:-$OUT/tune.json}"
  "$PY" tools/packaged_check.py "${PROFILE:-$OUT/tune.json}" 2>&1 | tee "$OUT/check.txt" | tail -2
fi
if has select; then
  echo "=== a plain select(op=\"linear\", ...) per cell of ${PROFILE:-$OUT/tune.json}"
  "$PY" - "${PROFILE:-$OUT/tune.json}" <<'PY' 2>&1 | tee "$OUT/select.txt"
import sys, collections
import selector
from selector.core import profile as prof
p = sys.argv[1]
sel = selector.load([f"policy.profile={p}"])
seen = collections.Counter()
for c in prof.load(p).cells:
    d = sel.select(op="linear", quant=c.layer["quant"], hidden_size=c.layer["hidden_size"],
                   intermediate_size=c.layer["intermediate_size"], num_tokens=c.tokens)
    kind = "measured" if d.notes_of("measured") else "profile_unmeasured" if \
        d.notes_of("profile_unmeasured") else "no profile note"
    seen[kind] += 1
    fastest = min(c.times, key=lambda b: c.times[b].median_ms) if c.times else None
    seen["picked the fastest" if d.selected == fastest else "other pick"] += 1
print(dict(seen))
PY
fi
if has fp8mid; then
  echo "=== python benchmarks/fp8_h200.py --only linear --every --tokens ${FP8MID_TOKENS:-1,64,128,256,512,8192} --layers Mistral-Large-2,Qwen3-32B"
  timeout "$(left "${FP8MID_TIMEOUT:-240}")" "$PY" benchmarks/fp8_h200.py --only linear --every \
    --tokens "${FP8MID_TOKENS:-1,64,128,256,512,8192}" --layers Mistral-Large-2,Qwen3-32B \
    --json "$OUT/fp8mid.json" > "$OUT/fp8mid.txt" 2>&1
  echo "rc $?"; grep -A40 "^FP8 linear: the selected" "$OUT/fp8mid.txt" || tail -30 "$OUT/fp8mid.txt"
fi
if has capture; then
  echo "=== python benchmarks/emulation_capture.py --models qwen3,mixtral --tokens 1,64,1024"
  timeout "$(left 150)" "$PY" benchmarks/emulation_capture.py --models qwen3,mixtral \
    --tokens 1,64,1024 2>&1 | tee "$OUT/capture.txt" | grep -v "^  *File\|^    "
  echo "rc ${PIPESTATUS[0]}"
fi
if has tiles; then
  for mt in ${TILE_SHAPES:-mixtral:256,1024 qwen3:1024 gptoss:1024}; do
    echo "=== python benchmarks/emulation_tiles.py --model ${mt%%:*} --tokens ${mt#*:} --block-m ${TILE_BM:-64,128} --jobs 8 --graph ${TILE_FLAGS:-}"
    timeout "$(left 200)" "$PY" benchmarks/emulation_tiles.py --model "${mt%%:*}" --tokens "${mt#*:}" \
      --block-m "${TILE_BM:-64,128}" --jobs 8 --graph ${TILE_FLAGS:-} 2>&1 | tee -a "$OUT/tiles.txt" \
      | grep "BEST\|best\|default"
  done
fi
if has clock; then
  echo "=== python benchmarks/tune_clock.py"
  timeout "$(left 120)" "$PY" benchmarks/tune_clock.py 2>&1 | tee "$OUT/clock.txt" | tail -30
fi
if has emubench; then
  for m in ${EMU_MODELS:-qwen3 gptoss mixtral}; do
    echo "=== python benchmarks/emulation_bench.py --model $m --skip-quantize --no-check --tokens ${EMU_TOKENS:-1,64,256,1024}"
    timeout "$(left "${EMUB_TIMEOUT:-150}")" "$PY" benchmarks/emulation_bench.py --model "$m" --skip-quantize \
      --no-check --tokens "${EMU_TOKENS:-1,64,256,1024}" 2>&1 | tee -a "$OUT/emubench.txt" \
      | grep -v "^  *File\|^    " | tail -14
    echo "rc ${PIPESTATUS[0]}"
  done
fi
echo "done: $(date -u '+%H:%M:%S UTC')"
