"""Issue 48: every environment variable selector and backends/ read is parsed in one place
(selector/core/env_vars.py), validated, and a bad value is exit 2 (or a SelectorError in a
library call) with one line naming the variable; Triton's and CUDA's own variables are read
as those programs read them."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_main

import selector
from selector.core import env_vars
from selector.engines import vllm as adapter
from selector.engines import vllm_observe
from selector.inspect import environment

ROOT = Path(__file__).resolve().parents[1]


def _reads(tree: ast.AST) -> list[int]:
    """Lines reading one environment variable: os.environ.get / [...] / os.getenv / environ.get,
    os.environ.setdefault/pop (copying the whole mapping, dict(os.environ), is not a read)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            if node.func.attr in ("get", "setdefault", "pop") and (
                    isinstance(base, ast.Attribute) and base.attr == "environ"
                    or isinstance(base, ast.Name) and base.id == "environ"):
                lines.append(node.lineno)
            elif node.func.attr in ("getenv", "getenvb"):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getenv", "getenvb"):
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and (
                isinstance(node.value, ast.Attribute) and node.value.attr == "environ"
                or isinstance(node.value, ast.Name) and node.value.id == "environ"):
            if isinstance(node.ctx, ast.Load):
                lines.append(node.lineno)
    return lines


def test_every_variable_is_read_in_env_vars_only():
    """No module of selector/ or backends/ but env_vars.py reads an environment variable."""
    found = []
    for pkg in ("selector", "backends"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path == ROOT / "selector" / "core" / "env_vars.py":
                continue
            for line in _reads(ast.parse(path.read_text())):
                found.append(f"{path.relative_to(ROOT)}:{line}")
    assert found == []


def test_the_check_finds_a_read():
    """The scan above can fail: each form of a read is found."""
    src = ("import os\nfrom os import environ, getenv\nos.environ.get('A')\nos.environ['B']\n"
           "getenv('C')\nenviron.get('D')\nos.environ.pop('E', None)\nx = dict(os.environ)\n")
    assert sorted(_reads(ast.parse(src))) == [3, 4, 5, 6, 7]


# SELECTOR_EMULATION_FUSED ------------------------------------------------------------------

@pytest.mark.parametrize("value, want", [(None, True), ("", True), ("1", True), ("on", True),
                                         ("0", False), ("off", False), (" FALSE ", False)])
def test_emulation_fused_spellings(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv("SELECTOR_EMULATION_FUSED", raising=False)
    else:
        monkeypatch.setenv("SELECTOR_EMULATION_FUSED", value)
    assert env_vars.emulation_fused() is want


@pytest.mark.parametrize("value", ["2", "abc", "fused", "nan"])
def test_emulation_fused_bad_value_is_named_by_the_emulation(monkeypatch, value):
    """Before: anything but "0" silently meant on. Now the emulation's default check (run by
    every emulate_moe call without fused=) refuses it naming the variable."""
    import torch

    from selector.backends.reference import emulate
    monkeypatch.setenv("SELECTOR_EMULATION_FUSED", value)
    x = torch.zeros(2, 16, dtype=torch.bfloat16)
    with pytest.raises(selector.SelectorError) as e:
        emulate._fused_default(x, torch.bfloat16, emulate.exact_quantizer)
    assert str(e.value).startswith("SELECTOR_EMULATION_FUSED: ") and repr(value) in str(e.value)
    monkeypatch.setenv("SELECTOR_EMULATION_FUSED", "0")
    assert emulate._fused_default(x, torch.bfloat16, emulate.exact_quantizer) is False


# SELECTOR_FP8_ACT_QUANT -------------------------------------------------------------------

@pytest.mark.parametrize("value, want", [(None, "triton"), ("", "triton"), ("torch", "torch"),
                                         (" Torch ", "torch"), ("triton", "triton")])
def test_fp8_act_quant_spellings(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv("SELECTOR_FP8_ACT_QUANT", raising=False)
    else:
        monkeypatch.setenv("SELECTOR_FP8_ACT_QUANT", value)
    assert env_vars.fp8_act_quant() == want


@pytest.mark.parametrize("value", ["abc", "1", "torc"])
def test_fp8_act_quant_bad_value_is_named(monkeypatch, value):
    """Before: anything but "torch" silently took the kernel."""
    import torch

    from selector.backends.formats import fp8
    monkeypatch.setenv("SELECTOR_FP8_ACT_QUANT", value)
    with pytest.raises(selector.SelectorError) as e:
        fp8.fused_act_quant(torch.zeros(2, 16))
    msg = str(e.value)
    assert msg.startswith("SELECTOR_FP8_ACT_QUANT: ") and "triton, torch" in msg
    assert "\n" not in msg
    monkeypatch.setenv("SELECTOR_FP8_ACT_QUANT", "torch")
    assert fp8.fused_act_quant(torch.zeros(2, 16)) is False


# TRITON_INTERPRET: Triton's variable, read as Triton reads it --------------------------------

@pytest.mark.parametrize("value", [None, "", "1", "0", "true", "TRUE", "on", "yes", "Yes", "no",
                                   "abc", " 1", "1 ", "2"])
def test_triton_interpret_as_triton_reads_it(monkeypatch, value):
    """Triton's own parser (the C++ getenv_bool behind knobs.env_bool) and env_vars agree on
    every spelling (before: `== "1"`, so TRITON_INTERPRET=true had Triton interpret the kernels
    while backends/ took a CPU tensor for one they cannot run)."""
    libtriton = pytest.importorskip("triton._C.libtriton")
    if value is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", value)
    assert env_vars.triton_interpret() is bool(libtriton.getenv_bool("TRITON_INTERPRET", False))


def test_the_kernels_read_triton_interpret_through_env_vars(monkeypatch):
    from selector.backends.kernels import fp8_act_quant
    monkeypatch.setenv("TRITON_INTERPRET", "true")
    assert fp8_act_quant._interpreted() is True
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert fp8_act_quant._interpreted() is False


# The NVML child's libraries ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(env_vars.LIBRARIES))
@pytest.mark.parametrize("value", ["lib\nnvml.so", "/x/\x1b]0;t\x07.so", "x" * 5000])
def test_library_bad_value_exits_2_naming_it(monkeypatch, name, value):
    """Before: passed to dlopen as given (a 5,000-character name fails there: "no driver", a
    silent wrong answer)."""
    monkeypatch.setenv(name, value)
    rc, out, err = run_main(["explain", "platform=auto", "--format", "line"])
    assert rc == 2, (out, err)
    assert err.startswith(f"selector: {name}: ") or f"{name}: " in err.splitlines()[0]
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_library_values_reach_the_child_as_arguments(monkeypatch, tmp_path):
    """The child script reads no environment variable: the parsed names are its arguments;
    with neither library loadable (and no pynvml) it says there is no driver."""
    monkeypatch.setenv("SELECTOR_NVML_LIBRARY", str(tmp_path / "none-nvml.so"))
    monkeypatch.delenv("SELECTOR_CUDA_LIBRARY", raising=False)
    cmd = environment._nvml_command()
    assert cmd[-2:] == [str(tmp_path / "none-nvml.so"), "libcuda.so.1"]
    monkeypatch.setenv("SELECTOR_CUDA_LIBRARY", str(tmp_path / "none-cuda.so"))
    cmd = environment._nvml_command()
    # -I: isolated, so that no pynvml on the path answers first; the script is stdlib-only
    r = subprocess.run([sys.executable, "-I", *cmd[2:]], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"via": None,
                                                            "driver_present": False}


@pytest.mark.parametrize("value, want", [(None, "libnvidia-ml.so.1"), ("", "libnvidia-ml.so.1"),
                                         ("/opt/lib/libnvidia-ml.so.550", None)])
def test_library_default_and_given(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv("SELECTOR_NVML_LIBRARY", raising=False)
    else:
        monkeypatch.setenv("SELECTOR_NVML_LIBRARY", value)
    assert env_vars.library("SELECTOR_NVML_LIBRARY") == (want or value)


# CUDA's and DeepGEMM's variables, as vLLM reads them --------------------------------------

def test_cuda_home_and_nvcc_compiler(monkeypatch):
    for k in ("CUDA_HOME", "CUDA_PATH", "DG_JIT_NVCC_COMPILER", "DJ_JIT_NVCC_COMPILER"):
        monkeypatch.delenv(k, raising=False)
    assert env_vars.cuda_home() == (None, "CUDA_PATH") and env_vars.nvcc_compiler() is None
    monkeypatch.setenv("CUDA_PATH", "/p")
    assert env_vars.cuda_home() == ("/p", "CUDA_PATH")
    monkeypatch.setenv("CUDA_HOME", "")  # empty counts as unset, as vLLM's `or` reads it
    assert env_vars.cuda_home() == ("/p", "CUDA_PATH")
    monkeypatch.setenv("CUDA_HOME", "/h")
    assert env_vars.cuda_home() == ("/h", "CUDA_HOME")
    monkeypatch.setenv("DJ_JIT_NVCC_COMPILER", "/old/nvcc")
    assert env_vars.nvcc_compiler() == "/old/nvcc"
    monkeypatch.setenv("DG_JIT_NVCC_COMPILER", "/new/nvcc")
    assert env_vars.nvcc_compiler() == "/new/nvcc"


def test_nvcc_path_reads_them(monkeypatch, tmp_path):
    (tmp_path / "bin").mkdir()
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    for k in ("CUDA_PATH", "DG_JIT_NVCC_COMPILER", "DJ_JIT_NVCC_COMPILER"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert environment.nvcc_path() == (str(nvcc), "CUDA_HOME")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "missing"))
    assert environment.nvcc_path()[0] is None


# The vLLM plugin's SELECTOR_VLLM and SELECTOR_VLLM_OBSERVE_JSON ----------------------------

@pytest.mark.parametrize("value, want", [(None, "off"), ("", "off"), ("0", "off"), ("1", "on"),
                                         ("Yes", "on"), (" OBSERVE ", "observe")])
def test_vllm_mode(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv(env_vars.VLLM, raising=False)
    else:
        monkeypatch.setenv(env_vars.VLLM, value)
    assert env_vars.vllm_mode() == want
    assert vllm_observe.requested() is (want == "observe")


def test_vllm_mode_bad_value_names_observe_too(monkeypatch):
    monkeypatch.setenv(env_vars.VLLM, "observer")
    with pytest.raises(selector.SelectorError) as e:
        vllm_observe.requested()
    assert str(e.value).startswith("SELECTOR_VLLM: ") and "observe" in str(e.value)


def test_observe_json_is_checked_when_the_plugin_registers(monkeypatch):
    """Before: read only when vLLM's run ended, and a control character reached the log line."""
    calls = []
    monkeypatch.setattr(vllm_observe, "install", lambda: calls.append(1))
    monkeypatch.setenv(env_vars.VLLM, "observe")
    monkeypatch.delenv(adapter.ENV_OVERRIDES, raising=False)
    monkeypatch.setenv(env_vars.VLLM_OBSERVE_JSON, "/tmp/a\nselector: forged.json")
    with pytest.raises(selector.SelectorError) as e:
        vllm_observe.register()
    assert str(e.value).startswith("SELECTOR_VLLM_OBSERVE_JSON: ") and not calls
    monkeypatch.setenv(env_vars.VLLM_OBSERVE_JSON, "  ")
    assert env_vars.observe_json() is None
    monkeypatch.setenv(env_vars.VLLM_OBSERVE_JSON, " out.json ")
    assert env_vars.observe_json() == Path("out.json")


@pytest.mark.parametrize("value", ["~> PWNED", "~no-such-user-selector-test/cache"])
def test_cache_dir_of_an_unknown_user_is_refused_naming_the_variable(monkeypatch, value):
    """Found by tests/test_adversarial.py: `Path.expanduser` raised RuntimeError (a traceback
    from every command) for a `~user` with no home directory."""
    from selector.core.errors import SelectorError
    monkeypatch.setenv("SELECTOR_CACHE_DIR", value)
    monkeypatch.delenv("SELECTOR_NO_CACHE", raising=False)
    with pytest.raises(SelectorError, match="SELECTOR_CACHE_DIR"):
        env_vars.cache_dir()
