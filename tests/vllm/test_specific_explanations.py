"""Explanations are specific (issue 43): a difference between vLLM and selector is explained only
by a cluster that names the engine's deciding line for that very scenario (where vLLM raised, the
kernel check that refused, the kernel class it built, the order it tried), and a generic rule (the
weight-only preference, vLLM #55397; the global-flag policy) explains nothing on its own, nor
where vLLM refuses or gates selector's pick on device, version or package.

Each case runs vLLM's own selection code (the installed release) on the simulated GPU."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import parity
import pytest
import sim

FI = sim.FLASHINFER
SM110_MOE = sim.Scenario("11.0", "12.8", FI, None, "moe", "nvfp4", "silu", True)
GATE = "model_executor/layers/fused_moe/experts/cutlass_moe.py lines 724-730"


def _row(s: sim.Scenario) -> parity.Row:
    return parity.run([s]).rows[0]


def _lines(r: parity.Row) -> list:
    return [src for rule, src in (r.why or ("", ()))[1] if rule == parity.LINE]


def test_generic_rules_alone_explain_nothing():
    for pairs in ((("preference", parity.WEIGHT_ONLY_SOURCE),),
                  (("policy", parity.POLICY_SOURCE),),
                  (("quant", parity.POLICY_SOURCE), ("policy", parity.POLICY_SOURCE)), ()):
        assert not parity.specific(("some text", pairs)), pairs
    line = (parity.LINE, "vLLM 0.34.0 some/file.py line 1 (f raises)")
    assert parity.specific(("some text", (("policy", parity.POLICY_SOURCE), line)))
    assert not parity.specific(None)


def test_run_refuses_an_explanation_that_names_generic_rules_only(monkeypatch):
    """run() itself (what tools/vllm_parity.py and every sweep test count) turns an explanation
    without a specific source into an unexplained difference, and says which it refused."""
    s = dataclasses.replace(SM110_MOE, capability="10.0", cuda="12.6", requested="cutlass")
    real = _row(s)
    assert not real.agrees and real.why is not None  # the CUDA 12.8 floor: a catalogue rule
    monkeypatch.setattr(parity, "explain", lambda r, names: (
        "a generic reason", (("preference", parity.WEIGHT_ONLY_SOURCE),)))
    report = parity.run([s])
    assert report.unexplained == report.rows and report.rows[0].generic == "a generic reason"


def test_an_explicit_flag_vllm_refuses_names_the_line_that_refused():
    """--moe-backend flashinfer_cutedsl on an FP8 layer: vLLM's map_fp8_backend raises, selector
    (whose flashinfer_cutedsl implements NVFP4 only) decides the layer automatically; the
    explanation names the line of vLLM's oracle that raised, read from the installed file."""
    s = sim.Scenario("10.0", "12.8", FI, None, "moe", "fp8_tensor_dynamic", "silu", True,
                     requested="flashinfer_cutedsl")
    r = _row(s)
    assert r.vllm is None and r.selected is not None and r.why is not None
    assert r.why[0].startswith("explicit flashinfer_cutedsl does not implement the layer")
    lines = _lines(r)
    assert lines and all("fused_moe/oracle/fp8.py line" in x for x in lines), lines
    assert "map_fp8_backend raises" in lines[0]
    without = (r.why[0], tuple(p for p in r.why[1] if p[0] != parity.LINE))
    assert not parity.specific(without)  # the line is what makes it an explanation


def test_a_weight_only_preference_names_vllms_order_line():
    """SM 11.0, CUDA 12.6: vLLM's automatic NVFP4 linear choice is Marlin (CUTLASS FP4 needs
    12.8), selector's the native cuDNN GEMM, which vLLM runs when asked: the preference explains
    it, with the lines of vLLM's kernel list that put Marlin first (read back from the file)."""
    import inspect

    from vllm.model_executor.kernels import linear
    r = _row(sim.Scenario("11.0", "12.6", FI, None, "linear", "nvfp4", "silu", True))
    assert (r.vllm, r.selected) == ("marlin", "flashinfer_cudnn"), (r.vllm, r.selected)
    assert ("preference", parity.WEIGHT_ONLY_SOURCE) in r.why[1]
    [line] = _lines(r)
    m = re.search(r"kernels/linear/__init__\.py lines (\d+), (\d+) \(_POSSIBLE_NVFP4_KERNELS", line)
    assert m, line
    text = open(inspect.getsourcefile(linear)).read().splitlines()
    a, b = int(m[1]), int(m[2])
    assert a < b and "MarlinNvFp4LinearKernel" in text[a - 1] and \
        "FlashInferCudnnNvFp4LinearKernel" in text[b - 1]


@pytest.mark.skipif(sim.RELEASE != "0.34", reason=f"vLLM {sim.VLLM} keeps SM 11.0 in its CUTLASS "
                    "NVFP4 MoE (the exclusion is 0.34.0's: experts/cutlass_moe.py 724-730)")
def test_sm110_explicit_cutlass_is_the_gate_not_the_preference(monkeypatch):
    """vLLM 0.34.0 drops SM 11.x from its CUTLASS NVFP4 MoE. With the catalogue's 0.34 rule,
    selector agrees (Marlin automatically; explicit cutlass refused) and both sides name
    cutlass_moe.py 724-730. Told the 0.33 release instead (the rule's `when` does not hold),
    selector picks cutlass: the difference must stay unexplained; the weight-only preference may
    not explain it, since vLLM asked for cutlass refuses it on this device."""
    auto, explicit = SM110_MOE, dataclasses.replace(SM110_MOE, requested="cutlass")
    rows = parity.run([auto, explicit]).rows
    by = {r.scenario.requested: r for r in rows}
    assert by["auto"].agrees and by["auto"].vllm == "marlin"
    e = by["cutlass"]
    assert e.agrees and e.vllm is None and e.selected is None
    assert GATE in e.vllm_error.site, e.vllm_error.site  # vLLM's own refusing check
    assert "_supports_current_device" in e.vllm_error.site
    assert any(GATE in x.source for x in e.decision.candidate("cutlass").reasons)

    real = sim.machine_packages
    monkeypatch.setattr(sim, "machine_packages", lambda s: {**real(s), "vllm": "0.33.0"})
    monkeypatch.setattr(parity, "_CHOOSERS", {})
    report = parity.run([auto, explicit])
    by = {r.scenario.requested: r for r in report.rows}
    assert by["auto"].selected == "cutlass" and by["auto"].vllm == "marlin"
    assert by["cutlass"].selected == "cutlass" and by["cutlass"].vllm is None
    assert report.unexplained == report.rows, [r.why for r in report.rows]
    # the generic rule would have fit (native above weight-only) but is not allowed to explain
    assert parity._execution(by["auto"].decision, "marlin") == "weight_only"
    simulation = sim.Simulation()
    try:
        with simulation.scenario(auto):
            assert not parity._vllm_runs(auto, "cutlass")
    finally:
        simulation.close()


def test_a_vllm_pick_selector_rejects_names_the_kernel_class_vllm_built():
    """vLLM builds its CUTLASS NVFP4 MoE on CUDA 12.6, where the kernel is not compiled (selector's
    CUDA 12.8 floor rejects it): the explanation names the class vLLM built, read from the file."""
    r = _row(dataclasses.replace(SM110_MOE, capability="10.0", cuda="12.6", requested="cutlass"))
    assert r.vllm == "cutlass" and r.selected is None and r.why is not None
    assert any(f"class {r.vllm_kernel}," in x and re.search(r" lines? \d+", x)
               for x in _lines(r)), _lines(r)


def test_vllm_moe_use_deep_gemm_names_the_line_that_raised():
    """VLLM_MOE_USE_DEEP_GEMM=1 on a per-tensor FP8 layer: vLLM's oracle raises (DeepGEMM takes
    block FP8 only), selector decides the layer automatically; the global-flag policy alone would
    be generic, the line of vLLM that raised is the specific part."""
    r = _row(sim.Scenario("10.0", "12.6", FI, None, "moe", "fp8_tensor", "gelu", True,
                          deep_gemm_env="1"))
    assert r.vllm is None and r.selected is not None and r.why is not None
    assert r.why[0].startswith("VLLM_MOE_USE_DEEP_GEMM=1 forces deep_gemm")
    assert any(re.search(r"\.py lines? \d+", x) for x in _lines(r)), _lines(r)


# -- the MX explanations name the installed release's line (issue 43) --------------------------
def _mx(caps: str, cuda: str, quant: str, act: str, oracle: str, requested: str, fi: bool = True,
        vendored: bool = False, b12x: bool = False, force_a16: bool = False) -> sim.Scenario:
    return sim.Scenario(caps, cuda, FI if fi else None, sim.B12X if b12x else None, "moe", quant,
                        act, True, requested=requested, oracle=oracle, triton_kernels=vendored,
                        deep_gemm=vendored, force_a16=force_a16)


#: one scenario per explanation of explain_mx that names vLLM's own files, with the start of its
#: text and what the line it names holds in the installed vLLM's file
MX_CASES = (
    (_mx("10.0", "13.0", "mxfp4", "silu", "mxfp4", "deep_gemm", vendored=True),
     "vLLM's DEEPGEMM_MXFP4 quantizes activations", "kFp8Dynamic128Sym"),
    (_mx("12.0", "13.0", "mxfp4", "silu", "mxfp4", "b12x", b12x=True, force_a16=True),
     "VLLM_B12X_MOE_FP4_FORCE_A16=1 keeps", "VLLM_B12X_MOE_FP4_FORCE_A16"),
    (_mx("10.0", "12.8", "mxfp4_w4a4", "swigluoai", "mxfp4", "auto"),
     "no backend runs mxfp4_w4a4 here and vLLM falls back", "matching + "),
    (_mx("10.0", "12.8", "mxfp4", "swigluoai", "mxfp4", "cutlass"),
     "vLLM has no --moe-backend value for its CUTLASS MXFP4", "def map_mxfp4_backend"),
    (_mx("10.0", "12.8", "mxfp4", "swigluoai", "mxfp4", "triton"),
     "this vLLM build lacks its vendored triton_kernels", "vllm.third_party"),
    (_mx("10.0", "12.8", "mxfp4", "swigluoai", "dsv4", "auto", fi=False, vendored=True),
     "vLLM's DeepSeek V4 MXFP4 path never tries", "def _get_priority_backends"),
)
LINE_AT = re.compile(r"^vLLM (\S+) (\S+\.py) lines? (\d+)(?:-(\d+))? \(")


def _file_line(line: str) -> str:
    """The text of the installed vLLM's file at the (first) line a LINE pair names."""
    import vllm
    m = LINE_AT.match(line)
    assert m and m[1] == vllm.__version__, line
    path = Path(vllm.__file__).parent / m[2]
    return path.read_text().splitlines()[int(m[3]) - 1]


def test_every_mx_explanation_names_the_installed_releases_line():
    """Each path of explain_mx names a line of the installed vLLM, found in its own file at run
    time (no release's line numbers written down): the line holds what decides the scenario."""
    rows = parity.run([s for s, _, _ in MX_CASES]).rows
    by = {r.scenario: r for r in rows}
    for s, text, holds in MX_CASES:
        r = by[s]
        assert not r.agrees and r.why is not None, (s.label(), r.generic)
        assert r.why[0].startswith(text), (s.label(), r.why[0])
        lines = _lines(r)
        assert lines, s.label()
        assert any(holds in _file_line(x) for x in lines), (s.label(), lines)
        without = (r.why[0], tuple(p for p in r.why[1] if p[0] != parity.LINE))
        assert not parity.specific(without), s.label()  # the line is what makes it explained


def test_an_explanation_without_vllms_line_is_refused(monkeypatch):
    """run() (what tools/vllm_parity.py writes and --check counts, and every sweep test) refuses
    an explanation that names vLLM's files and functions but no line of the installed release:
    the difference counts as unexplained, the report's cluster is UNEXPLAINED and --check fails."""
    import vllm_parity
    s = MX_CASES[0][0]
    real = parity.explain_mx

    def no_line(r, names):
        why = real(r, names)
        return why and (why[0], tuple(p for p in why[1] if p[0] != parity.LINE))

    monkeypatch.setattr(parity, "explain_mx", no_line)
    report = parity.run([s])
    assert report.unexplained == report.rows and report.rows[0].generic, report.rows[0].why
    assert report.rows[0].generic.startswith(MX_CASES[0][1])
    text = vllm_parity.render_mx(report)
    assert "| MXFP4/MXFP8 differ without an explanation | 1 |" in text
    assert "Why: UNEXPLAINED." in text
    # the same explanation with its line is accepted
    monkeypatch.setattr(parity, "explain_mx", real)
    assert parity.run([s]).unexplained == []


def test_vllm_def_reads_the_installed_file():
    """vllm_def finds a function's line, a line in its body, its span; '' for what is absent."""
    mod = parity.MX_ORACLE
    at = parity.vllm_def(mod, "_filter_by_activation", "x")
    assert "def _filter_by_activation" in _file_line(at)
    m = LINE_AT.match(parity.vllm_def(mod, "_get_priority_backends", "x", span=True))
    assert m and m[4] and int(m[4]) > int(m[3])
    assert parity.vllm_def(mod, "no_such_function", "x") == ""
    assert parity.vllm_def("vllm.no_such_module", "f", "x") == ""
    assert not parity.specific(("t", (("engine", parity.FP8_ACT_SOURCE),)))
