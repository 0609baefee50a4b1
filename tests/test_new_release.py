"""tools/new_release.py replays vLLM 0.33.0 -> 0.34.0 from the released wheels and finds the
changes issue 43 lists, each at its 0.34.0 file and line, and the pin the index lacks."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "new_release.py"


def _run(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          timeout=900, cwd=REPO)


def _hunks(out: str):
    """(file, first, last, body) of each printed hunk."""
    found = []
    for m in re.finditer(r"^(\S+\.py) lines (\d+)-(\d+)\n((?:    .*\n)*)", out, re.M):
        found.append((m[1], int(m[2]), int(m[3]), m[4]))
    return found


def _clusters(out: str):
    """Each printed changed answer: {family, old, new, example, engine: [(file, first, last,
    executed lines)], raised: (file, line) or None}."""
    found = []
    for m in re.finditer(r"^\[\d+\] (\w+): vLLM 0\.33\.0: (.*) -> vLLM 0\.34\.0: (.*) \((\d+) "
                         r"scenarios\)\n    e\.g\. (.*)\n((?:    .*\n)*)", out, re.M):
        engine = [(f, int(a), int(b), {int(x) for x in ls.split(", ")}) for f, a, b, ls in
                  re.findall(r"engine: (\S+) lines (\d+)-(\d+) \(executed ([\d, ]+);", m[6])]
        raised = re.search(r"engine: raised at (\S+) line (\d+)", m[6])
        found.append({"family": m[1], "old": m[2], "new": m[3], "n": int(m[4]), "example": m[5],
                      "engine": engine, "raised": raised and (raised[1], int(raised[2])),
                      "body": m[6]})
    return found


def _ran(cluster, file: str, lo: int, hi: int) -> bool:
    """Whether the example's decision executed a changed line of `file` within lo..hi."""
    return any(f.endswith(file) and any(lo <= x <= hi for x in ls)
               for f, _, _, ls in cluster["engine"])


VENVS = {v: REPO / f".venv-vllm-0{v.split('.')[1]}" for v in ("0.33.0", "0.34.0")}


@pytest.mark.slow
@pytest.mark.skipif(not all((p / "bin" / "python").exists() for p in VENVS.values()),
                    reason="needs both releases' environments: tools/vllm_env.sh "
                    ".venv-vllm-033 0.33.0 and tools/vllm_env.sh .venv-vllm-034 0.34.0")
def test_replays_0_33_to_0_34_and_finds_each_change(tmp_path):
    # both releases' own code on SM 10.0 and 11.0 (the devices of issue 43's changes)
    r = _run("vllm", "0.34.0", "--previous", "0.33.0", "--no-build", "--capabilities",
             "10.0,11.0", "--max-lines", "400", "--work", str(tmp_path))
    assert r.returncode == 0, r.stderr
    hunks = _hunks(r.stdout)

    def where(file: str, text: str):
        return [(a, b) for f, a, b, body in hunks if f.endswith(file) and text in body]

    # -- the changed selection code, at 0.34.0's lines -----------------------------------------
    # SM 11.x out of vLLM's CUTLASS NVFP4 MoE (experts/cutlass_moe.py 724-730)
    assert any(a <= 728 <= b for a, b in where("experts/cutlass_moe.py", "SM110 excluded"))
    # TRT-LLM NVFP4 MoE takes swiglustep (253-265) with per-tensor scales (56-70)
    assert any(a <= 258 <= b for a, b in where("experts/trtllm_nvfp4_moe.py",
                                               "has_flashinfer_swiglustep_activation()"))
    assert where("experts/trtllm_nvfp4_moe.py", "SWIGLUSTEP requires per-tensor NVFP4")
    assert where("quantization/utils/flashinfer_utils.py",
                 "def has_flashinfer_swiglustep_activation")
    # gpt-oss MXFP4 on SM 11.x: Marlin before Triton (oracle/mxfp4.py 445-457)
    assert any(a <= 446 <= b for a, b in where("oracle/mxfp4.py",
                                               "is_device_capability_family(110)"))
    # DeepGEMM needs nvcc >= 12.9 (utils/deep_gemm.py 118-177)
    assert any(a <= 168 <= b for a, b in where("utils/deep_gemm.py", "version < (12, 9)"))
    # VLLM_MARLIN_INPUT_DTYPE removed (envs.py)
    assert where("envs.py", "VLLM_MARLIN_INPUT_DTYPE")

    _the_changed_answers(r.stdout)


def _the_changed_answers(stdout: str) -> None:
    """The changed answers of the 0.33.0 -> 0.34.0 replay, each with the 0.34.0 lines its
    decision ran, then the draft preset and the pin the index lacks."""
    clusters = _clusters(stdout)
    m = re.search(r"^vLLM 0\.33\.0 -> 0\.34\.0: (\d+) of (\d+) answers changed", stdout, re.M)
    assert m and int(m[1]) == sum(c["n"] for c in clusters) > 0, stdout[-3000:]

    def one(family, old, new, example):
        """The largest printed cluster of that change whose example matches."""
        found = [c for c in clusters if c["family"] == family and c["old"].startswith(old)
                 and c["new"].startswith(new) and example in c["example"]]
        assert found, (family, old, new, [(c["old"], c["new"]) for c in clusters])
        return found[0]

    # SM 11.0 NVFP4 MoE: automatic cutlass -> Marlin; an explicit cutlass now raises
    auto = one("nvfp4", "cutlass", "marlin", "SM 11.0")
    assert _ran(auto, "experts/cutlass_moe.py", 726, 730)
    explicit = one("nvfp4", "cutlass", "error", "requested cutlass")
    assert "SM 11.0" in explicit["example"] and explicit["raised"]
    assert _ran(explicit, "experts/cutlass_moe.py", 726, 730)
    # SM 10.0 swiglustep: the TRT-LLM NVFP4 MoE, automatic and explicit
    for old in ("cutlass", "error"):
        c = one("nvfp4", old, "flashinfer_trtllm", "nvfp4 swiglustep")
        assert "SM 10.0" in c["example"] and _ran(c, "experts/trtllm_nvfp4_moe.py", 253, 265)
    # gpt-oss MXFP4 on SM 11.0: Triton -> Marlin
    gpt = one("mx", "triton_kernels", "marlin", "SM 11.0")
    assert "mxfp4 swigluoai [mxfp4 oracle]" in gpt["example"]
    assert _ran(gpt, "oracle/mxfp4.py", 445, 457)
    # DeepGEMM off below nvcc 12.9: FP8 MoE (automatic and explicit) and FP8 block linear
    deep = [c for c in clusters if c["old"].startswith("deep_gemm")]
    assert {c["family"] for c in deep} >= {"fp8", "linear", "mx"}
    for c in deep:
        assert re.search(r"CUDA 12\.[0-8]\b", c["example"]), c["example"]  # a toolkit < 12.9
        assert _ran(c, "utils/deep_gemm.py", 118, 177), c["body"]
    one("fp8", "deep_gemm", "error", "requested deep_gemm")
    one("linear", "deep_gemm", "cutlass", "fp8_block")
    # selector's answer under the previous release's stack is printed for each
    assert stdout.count("selector (stack=vllm_0_33): ") == len(clusters)

    # -- the draft preset and the pin the index lacks ------------------------------------------
    assert 'stack: {family: vllm, version: "0.34"}' in stdout
    assert 'flashinfer-python: "0.7.3"' in stdout
    assert "the index lacks flashinfer-python==0.7.3" in stdout


def test_statements_widen_a_removed_clause_to_its_return():
    """A removed `or` clause leaves a comment inside the `return` that now decides otherwise:
    the lines traced are that statement's (0.34.0 experts/cutlass_moe.py 726-730)."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import new_release
    finally:
        sys.path.remove(str(REPO / "tools"))
    old = ["def f(p):", "    return p.is_cuda() and (", "        p.family(100)",
           "        or p.family(110)", "        or p.family(120)", "    )", "", "TABLE = {"] + \
        [f"    'k{i}': {i}," for i in range(30)] + ["}"]
    new = old[:3] + ["        # 110 excluded"] + old[4:8] + old[8:20] + ["    'new': 1,"] + \
        old[20:]
    found = list(new_release.hunks({"f.py": old}, {"f.py": new}))
    assert [h[4] for h in found][0] == [2, 3, 4, 5, 6]  # the whole `return`
    assert found[-1][4] == [21]  # a line of a 30-line table: its own line only


@pytest.mark.parametrize("args, line", [
    (("sglang", "0.6.0"), "new_release.py: engine: sglang: only vllm has released wheels to "
                          "read; accepted: vllm"),
    (("vllm", "latest"), "new_release.py: version: latest: is not a release version such as "
                         "0.35.0"),
])
def test_bad_input_is_one_line_and_exit_2(args, line):
    r = _run(*args)
    assert r.returncode == 2 and r.stderr.strip() == line


def test_an_unpublished_release_is_one_line_before_any_building(tmp_path):
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import new_release
    finally:
        sys.path.remove(str(REPO / "tools"))
    published = new_release.index_versions("vllm")
    if published is None:
        pytest.skip("the package index did not answer `pip index versions vllm`")
    assert "0.34.0" in published
    venv = tmp_path / "venv-99"
    r = _run("vllm", "99.0.0", "--previous", "0.34.0", "--venv", str(venv))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (f"new_release.py: version: 99.0.0: the package index has no vllm "
                                f"99.0.0 (newest: {published[0]}); run the recipe once it is "
                                "published")
    assert not venv.exists()  # nothing was built

