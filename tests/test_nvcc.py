"""nvcc, which DeepGEMM's JIT runs from vLLM 0.34.0 on (utils/deep_gemm.py lines 118-177): found
as vLLM finds it (CUDA_HOME, CUDA_PATH, the nvcc on PATH, /usr/local/cuda; DG_JIT_NVCC_COMPILER),
its release read from `nvcc --version`; given as platform.packages.nvcc; unknown, a warning."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from selector.inspect import environment

REPO = Path(__file__).resolve().parents[1]


def _toolkit(root: Path, release: str = "12.8") -> Path:
    """A CUDA toolkit directory whose bin/nvcc prints nvcc's --version banner."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    nvcc = bin_dir / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                    f"echo 'Cuda compilation tools, release {release}, V{release}.41'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    return root


@pytest.fixture
def clean_env(monkeypatch):
    for v in ("CUDA_HOME", "CUDA_PATH", "DG_JIT_NVCC_COMPILER", "DJ_JIT_NVCC_COMPILER"):
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def test_cuda_home_decides_and_its_release_is_read(tmp_path, clean_env):
    clean_env.setenv("CUDA_HOME", str(_toolkit(tmp_path / "cuda", "12.8")))
    v, path, how = environment.nvcc_version()
    assert v == Version("12.8") and how == "CUDA_HOME"
    assert path == str(tmp_path / "cuda" / "bin" / "nvcc")


def test_cuda_path_then_the_compiler_named_by_deepgemm(tmp_path, clean_env):
    clean_env.setenv("CUDA_PATH", str(_toolkit(tmp_path / "a", "12.9")))
    assert environment.nvcc_version()[:1] == (Version("12.9"),)
    other = _toolkit(tmp_path / "b", "13.1")
    clean_env.setenv("DG_JIT_NVCC_COMPILER", str(other / "bin" / "nvcc"))
    assert environment.nvcc_version()[0] == Version("13.1")


def test_a_missing_toolkit_is_none_and_says_where_it_looked(tmp_path, clean_env):
    clean_env.setenv("CUDA_HOME", str(tmp_path / "absent"))
    assert environment.nvcc_version() == (None, None,
                                          f"no CUDA toolkit (CUDA_HOME: {tmp_path / 'absent'} "
                                          "does not exist)")
    (tmp_path / "empty").mkdir()
    clean_env.setenv("CUDA_HOME", str(tmp_path / "empty"))
    v, path, how = environment.nvcc_version()
    assert v is None and path is None and how.startswith("no nvcc in ")


def test_an_unreadable_release_is_unknown(tmp_path, clean_env):
    root = _toolkit(tmp_path / "cuda")
    (root / "bin" / "nvcc").write_text("#!/bin/sh\necho garbage\n")
    clean_env.setenv("CUDA_HOME", str(root))
    v, path, _ = environment.nvcc_version()
    assert v is None and path is not None


def test_detect_asks_nvcc_only_when_a_rule_watches_it(tmp_path, clean_env):
    clean_env.setenv("CUDA_HOME", str(_toolkit(tmp_path / "cuda", "12.8")))
    env = environment.detect(["nvcc", "packaging"])
    assert env.packages["nvcc"] == Version("12.8")
    assert any(n.startswith("nvcc: 12.8 at ") and n.endswith("(CUDA_HOME)") for n in env.notes)
    assert "nvcc" not in environment.detect(["packaging"]).packages


def _explain(*args, env=None):
    return subprocess.run([sys.executable, "-m", "selector", "explain", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env=env)


H100_DG = ["engine=vllm", "platform.capability=9.0", "platform.cuda=13.0",
           "platform.packages.vllm=0.34.0", "layer.quant=fp8_block",
           "policy.moe_backend=deep_gemm", "--format", "line"]


def test_detected_nvcc_decides_deep_gemm_under_vllm_0_34(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_PATH", "DG_JIT_NVCC_COMPILER")}
    env["CUDA_HOME"] = str(_toolkit(tmp_path / "old", "12.8"))
    r = _explain(*H100_DG, env=env)
    assert r.returncode == 1 and "-> none [refused_explicit]" in r.stdout
    assert "needs nvcc >=12.9 at run time; this platform has nvcc 12.8" in r.stdout
    env["CUDA_HOME"] = str(_toolkit(tmp_path / "new", "12.9"))
    r = _explain(*H100_DG, env=env)
    assert r.returncode == 0 and "-> deep_gemm [selected]" in r.stdout
    # the key overrides detection
    r = _explain(*H100_DG, "platform.packages.nvcc=12.4", env=env)
    assert r.returncode == 1 and "this platform has nvcc 12.4" in r.stdout


def test_unknown_nvcc_warns_and_none_refuses():
    preset = ["stack=vllm_0_34", "platform=h100", "engine=vllm", "layer.quant=fp8_block",
              "policy.moe_backend=deep_gemm", "--format", "line"]
    r = _explain(*preset)
    assert r.returncode == 0 and "-> deep_gemm [selected, warning]" in r.stdout
    assert "nvcc version is unknown (give platform.packages.nvcc=<version>" in r.stdout
    r = _explain(*preset, "platform.packages.nvcc=null")
    assert r.returncode == 1 and "this platform has no nvcc" in r.stdout
    # vLLM 0.33.0 checks no nvcc: the same machine keeps deep_gemm
    r = _explain(*[a.replace("vllm_0_34", "vllm_0_33") for a in preset],
                 "platform.packages.nvcc=12.4")
    assert r.returncode == 0 and "-> deep_gemm [selected]" in r.stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine's PATH")
def test_this_machines_nvcc_as_vllm_would_find_it(clean_env):
    v, path, how = environment.nvcc_version()
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    assert v is not None and f"release {v.major}.{v.minor}" in out


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_the_nvcc_rule_and_warning_are_vllms_own(engine):
    """vLLM's DeepGEMM gate (is_deep_gemm_supported, vLLM 0.34.0 utils/deep_gemm.py 118-177) is
    an engines.vllm rule: with vllm 0.34.0 installed beside SGLang or TensorRT-LLM, their answer
    carries neither the nvcc rule nor its unknown-version warning; under engine=vllm it does."""
    args = ["platform=h100", "layer.quant=fp8_block", "platform.packages.vllm=0.34.0"]
    r = _explain(f"engine={engine}", *args)
    assert r.returncode in (0, 1) and "nvcc" not in r.stdout + r.stderr, r.stdout[-2000:]
    r = _explain("engine=vllm", *args)
    assert "needs nvcc >=12.9 at run time; this platform's nvcc version is unknown" in r.stdout
