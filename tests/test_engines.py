"""engine=none|vllm|sglang: backends an engine lacks are not_applicable with the reason, the
decision names the engine's flags, the engine's own rules fire only under it, and the adapters
import no engine. SGLang's released source, when installed, is checked against the names."""
from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, load, run_cli_many, warm

from selector import SelectorError
from selector.engines import sglang

RTX = ("platform=rtx_pro_6000", "platform.cuda=13.0", "platform.packages.flashinfer-python=0.7.2",
       "platform.packages.nvidia-cutlass-dsl=4.8.0", "layer=nemotron_moe")
CASES = {
    "sglang-text": ("explain", "engine=sglang", *RTX),
    "sglang-json": ("explain", "--format", "json", "engine=sglang", *RTX),
    "vllm-json": ("explain", "--format", "json", "engine=vllm", *RTX),
    "none-json": ("explain", "--format", "json", *RTX),
    "bad-engine": ("explain", "engine=tensorrt", *RTX),
}


@pytest.fixture(scope="module")
def runs():
    warm([[a for a in argv[1:] if "=" in a and a != "engine=tensorrt"]
          for argv in CASES.values()], helpers=0)
    keys = list(CASES)
    return dict(zip(keys, run_cli_many([CASES[k] for k in keys])))


def test_sglang_marks_b12x_not_applicable_and_prints_its_flags(runs):
    r = runs["sglang-text"]
    assert r.returncode == 0, r.stderr
    assert "SGLang 0.5.23 flags: --moe-runner-backend flashinfer_cutlass" in r.stdout
    b12x = [line for line in r.stdout.splitlines() if line.strip().startswith("b12x ")]
    assert b12x and "not_applicable" in b12x[0] and "[engine] SGLang 0.5.23 has no b12x " \
        "backend" in b12x[0]
    data = json.loads(runs["sglang-json"].stdout)
    assert data["engine"] == {"name": "sglang", "label": "SGLang 0.5.23",
                              "backend": "flashinfer_cutlass", "kernel": None, "scheme": None,
                              "flags": ["--moe-runner-backend", "flashinfer_cutlass"], "env": {}}
    by_name = {c["backend"]: c for c in data["candidates"]}
    for name in ("b12x", "flashinfer_b12x", "cutlass", "emulation"):
        assert by_name[name]["status"] == "not_applicable"
        reason = by_name[name]["reasons"][0]
        assert reason["rule"] == "engine" and "SGLang 0.5.23" in reason["source"]


def test_vllm_flags_and_no_engine_key_without_an_engine(runs):
    data = json.loads(runs["vllm-json"].stdout)
    assert data["engine"]["flags"] == ["--moe-backend", data["engine"]["backend"]]
    assert data["selected"] == "flashinfer_cutlass"
    assert "engine" not in json.loads(runs["none-json"].stdout)


def test_unknown_engine_is_bad_input(runs):
    r = runs["bad-engine"]
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "engine" in r.stderr and "tensorrt" in r.stderr and "sglang" in r.stderr


def test_engine_rule_fires_only_under_its_engine():
    """vLLM wires FlashInfer's b12x MoE for silu, gelu_tanh and relu2 only: a rule of
    engines.vllm, while FlashInfer itself runs swigluoai_uninterleave from 0.6.15."""
    over = ("platform=rtx_pro_6000", "stack=flashinfer_0_7_4", "layer=gpt_oss_moe",
            "layer.activation=swigluoai_uninterleave")
    b12x = load("engine=vllm", *over).default().candidate("flashinfer_b12x")
    assert b12x.status == "rejected"
    assert [r.source for r in b12x.reasons if r.rule == "activation"] == \
        ["vLLM 0.32.0 fused_moe/experts/flashinfer_b12x_moe.py (_supports_activation)"]
    plain = load(*over).default().candidate("flashinfer_b12x")
    assert plain.status != "rejected", plain.reasons


def test_explicit_backend_the_engine_lacks_falls_to_automatic_selection():
    d = load("engine=sglang", *RTX, "policy.moe_backend=flashinfer_b12x").default()
    assert d.selected == "flashinfer_cutlass"
    assert any("SGLang 0.5.23 has no flashinfer_b12x backend" in n for n in d.notes)


def test_every_backend_names_itself_in_every_engine():
    sel = load("engine=none", "platform=cpu")
    for _op, backends in sel.catalogue.backends.items():
        for b in backends:
            entries = dict(b.engines)
            assert set(entries) == {"vllm", "sglang"}, b.file
            assert all(e.source for e in entries.values())
            assert entries["vllm"].name is not None  # vLLM offers every catalogue backend


def test_sglang_server_args():
    sel = load("engine=sglang", *RTX)
    moe = sel.default()
    linear = sel.select(op="linear", quant="nvfp4")
    args = sglang.server_args(moe, linear)
    assert args[:2] == ["--moe-runner-backend", "flashinfer_cutlass"]
    assert args[2] == "--fp4-gemm-backend" and args[3] == linear.engine["backend"]
    assert sglang.server_kwargs(moe)["moe_runner_backend"] == "flashinfer_cutlass"
    with pytest.raises(SelectorError, match="engine=sglang"):
        sglang.server_args(load(*RTX).default())
    refused = load("engine=sglang", "platform=cpu").default()
    with pytest.raises(SelectorError, match="refuses"):
        sglang.server_args(refused)


def test_adapters_import_no_engine_and_no_torch():
    code = ("import sys, selector.engines.vllm, selector.engines.sglang; "
            "print(sorted(m for m in ('vllm', 'sglang', 'torch', 'hydra') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


def _enum_values(path: Path, cls: str) -> set:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.value.value for n in node.body if isinstance(n, ast.Assign)
                    and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
    raise AssertionError(f"{cls} not found in {path}")


@pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                    reason="sglang is not installed: its released choice lists cannot be read")
def test_sglang_names_match_its_released_source():
    root = Path(importlib.util.find_spec("sglang").origin).parent / "srt" / "layers"
    values = {"moe": _enum_values(root / "moe" / "utils.py", "MoeRunnerBackend"),
              "linear": _enum_values(root / "quantization" / "fp4_utils.py",
                                     "Fp4GemmRunnerBackend")}
    sel = load("engine=none", "platform=cpu")
    for op, backends in sel.catalogue.backends.items():
        for b in backends:
            name = dict(b.engines)["sglang"].name
            assert name is None or name in values[op], (op, b.name, name, sorted(values[op]))
            if name is None:
                assert b.name not in values[op], (op, b.name)
