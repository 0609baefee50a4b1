"""Determinism: the same inputs give byte-identical output, across processes with different
hash seeds (PYTHONHASHSEED 0, 1, 12345, random), with a cold cache, a warm cache written by
another process, and no cache at all; and the cache itself is byte-identical across seeds.

Each child process runs every command through `selector.commands.cli.main` three times: cold (an empty
cache directory of its own), warm (a cache directory another process with another seed filled)
and uncached (SELECTOR_NO_CACHE=1), and prints what each printed.
"""
from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

import pytest
from helpers import child_env

import selector

pytestmark = pytest.mark.slow  # subprocess / fuzz suite: `pytest -m "not slow"` skips it

REPO = Path(__file__).resolve().parent.parent

COMMANDS: List[List[str]] = [
    ["explain", "--format", "json", "platform=dgx_spark", "stack=flashinfer_0_7_4",
     "layer=nemotron_moe", "policy.moe_backend=flashinfer_b12x"],
    ["explain", "platform=b200", "stack=vllm_0_32", "layer=dense_linear", "layer.num_tokens=8"],
    ["explain", "--format", "json", "platform=rtx_5090", "stack=flashinfer_0_6_10",
     "layer=gpt_oss_moe", "policy.moe_backend=cutlass", "policy.strict=false"],
    ["explain", "--format", "json", "platform=h100", "layer=deepseek_v4_moe",
     "platform.packages.vllm=0.32.0", "platform.cuda=12.9", "layer.quant=int8"],
    ["list", "--format", "json"],
    ["list"],
    ["explain", "platform=cpu", "layer.activation=silux"],  # bad input: exit 2, same message
    ["explain", "--format", "json"],  # platform=auto: this machine, detected
]

_CHILD = r"""
import contextlib, io, json, os, sys
from selector.commands.cli import main
commands = json.loads(sys.argv[1])
def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    return {"rc": rc, "out": out.getvalue(), "err": err.getvalue()}
result = {}
for mode in sys.argv[4].split(","):
    if mode == "none":
        os.environ["SELECTOR_NO_CACHE"] = "1"
    else:
        os.environ.pop("SELECTOR_NO_CACHE", None)
        os.environ["SELECTOR_CACHE_DIR"] = sys.argv[2 if mode == "cold" else 3]
    result[mode] = [run(c) for c in commands]
print(json.dumps(result))
"""


def _child(seed: str, cold: Path, warm: Path, modes: str = "cold,warm"
           ) -> Dict[str, List[dict]]:
    env = child_env(PYTHONHASHSEED=seed)
    env.pop("SELECTOR_NO_CACHE", None)
    p = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(COMMANDS), str(cold),
                        str(warm), modes], capture_output=True, text=True, env=env, timeout=300,
                       cwd=str(REPO))
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_byte_identical_across_hash_seeds_and_cache_states(tmp_path):
    warm = tmp_path / "warm"
    first = _child("0", warm, warm, "cold,none")  # seed 0 fills the shared cache
    seeds = ["1", "12345", "random"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        others = list(pool.map(lambda s: _child(s[1], tmp_path / f"cold{s[0]}", warm,
                                                "cold,warm,none" if s[0] == 2 else "cold,warm"),
                               enumerate(seeds)))
    want = first["cold"]
    for i, c in enumerate(COMMANDS):
        assert want[i]["rc"] in ((2,) if "silux" in c[-1] else (0, 1)), (c, want[i])
        assert "Traceback" not in want[i]["err"]
    for seed, run in zip(["0"] + seeds, [first] + others):
        for mode in run:
            for i, c in enumerate(COMMANDS):
                assert run[mode][i] == want[i], f"seed {seed}, {mode} cache: {c} differs"
    # The cache itself: the same file names (content keys) and the same bytes for every seed.
    ref = {f.name: f.read_bytes() for f in sorted(warm.iterdir())}
    assert ref and all(name.endswith(".json") for name in ref)
    for i in range(len(seeds)):
        got = {f.name: f.read_bytes() for f in sorted((tmp_path / f"cold{i}").iterdir())}
        assert got == ref, f"cache written with seed {seeds[i]} differs"


def test_in_process_cold_then_warm(tmp_path, monkeypatch):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("SELECTOR_NO_CACHE", raising=False)
    overrides = ["platform=gb200", "stack=flashinfer_0_7_4", "layer=deepseek_moe",
                 "layer.ep_size=8", "layer.all2all=deepep_low_latency"]
    cold = selector.load(overrides)
    warm = selector.load(overrides)
    assert cold.default().to_json() == warm.default().to_json()
    assert str(cold.default()) == str(warm.default())
    layers = [dict(op="linear", quant="nvfp4_w4a16"), dict(activation="relu2", act_and_mul=False),
              dict(quant="int8")]
    for kw in layers:
        assert cold.select(**kw).to_json() == warm.select(**kw).to_json()
    # Asking again, in any order, changes nothing.
    for kw in reversed(layers):
        assert cold.select(**kw).to_json() == warm.select(**kw).to_json()
