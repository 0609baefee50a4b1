"""The catalogue against today's releases: every rule pinned on both sides of its boundaries
(tests/knowledge_cases.py), the engine stack presets, public sources only, and the drift report
(`doctor --deep`: what the installed libraries declare against what the catalogue claims)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import knowledge_cases as kc
import pytest
import yaml

from selector.core import schema

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))


@pytest.mark.parametrize("case", kc.CASES, ids=[c.id for c in kc.CASES])
def test_case(case):
    assert kc.problem(case) is None, kc.problem(case)


def test_every_backend_has_device_activation_and_quant_expectations():
    """A new backend without literal expectations would escape the mutation run."""
    cat = kc.base().catalogue
    names = {f"{op}/{b.name}" for op, bs in cat.backends.items() for b in bs}
    nvfp4 = {f"{op}/{b.name}" for op, bs in cat.backends.items() for b in bs
             if set(b.implements) & {"nvfp4", "nvfp4_w4a16"}}
    missing = sorted(nvfp4 - set(kc.EXPECT_DEVICES)) + sorted(
        n for n in nvfp4 if n.startswith("moe/") and n not in kc.EXPECT_ACTIVATIONS)
    assert not missing, ("write the literal expectations of these backends in "
                         f"tests/knowledge_cases.py (EXPECT_DEVICES, EXPECT_ACTIVATIONS, "
                         f"EXPECT_W4A16): {missing}")
    # EXPECT_DEVICES also holds selector's FP8 torch/Triton backends, each at its SCHEME_OF
    # ... and the MXFP4/MXFP8-only ones, each at its HOME_QUANT
    home = nvfp4 | set(kc.SCHEME_OF) | set(kc.HOME_QUANT)
    assert home == set(kc.EXPECT_DEVICES) == set(kc.HOME)
    assert {n for n in home if n.startswith("moe/")} == set(kc.EXPECT_ACTIVATIONS)
    # FP8 MoE: every MoE backend says which FP8 schemes it runs; each that runs one has its
    # devices per scheme, its activations and the kernel vLLM builds
    # selector's own torch/Triton FP8 backends (run on the H200) are pinned case by case in
    # FP8_TORCH, every rule on both sides of its boundary
    torch = {c.backend for c in kc.FP8_TORCH + kc.FI_DIRECT}
    moe = {n for n in names if n.startswith("moe/")} - torch
    assert moe == set(kc.EXPECT_FP8_SCHEMES), sorted(moe ^ set(kc.EXPECT_FP8_SCHEMES))
    fp8 = {(b, q) for b, qs in kc.EXPECT_FP8_SCHEMES.items() for q in qs}
    assert fp8 == set(kc.EXPECT_FP8_DEVICES) == set(kc.VLLM_FP8_KERNELS)
    assert {b for b, _ in fp8} == set(kc.EXPECT_FP8_ACTIVATIONS)
    assert names == nvfp4 | {b for b, _ in fp8} | torch | set(kc.HOME_QUANT) | set(kc.SCHEME_OF)


def test_layout_and_swiglustep_are_vocabulary():
    """vLLM 0.32.0 fused_moe/activation.py: swigluoai (interleaved gate/up, gpt-oss) and
    swigluoai_uninterleave (packed halves) are two activations; swiglustep is a third."""
    assert {"swigluoai", "swigluoai_uninterleave", "swiglustep"} <= set(schema.ACTIVATIONS)
    d = kc.decide(kc.C("x", "12.0", "moe/flashinfer_b12x", layer={"activation": "swiglustep"}))
    assert d.selected == "cutlass"  # vLLM's own CUTLASS MoE runs swiglustep (activation.py)
    assert "activation" in {r.rule for c in d.candidates if c.backend == "flashinfer_b12x"
                            for r in c.reasons}


# ---------------------------------------------------------------------------------------------
# Stack presets: what the engines really install (PyPI metadata of each engine and of torch)

# torch's own Linux requirements come with it: torch 2.13.0 requires nvidia-cudnn-cu13==9.20.0.48
# and triton==3.7.1, torch 2.14.0 and 2.14.1 nvidia-cudnn-cu13==9.24.0.43 and triton~=3.8.0;
# sglang 0.5.23 pins torch==2.14.1 (PyPI metadata)
STACKS = {
    "vllm_0_32": {"vllm": "0.32.0", "flashinfer-python": "0.7.0.post1",
                  "nvidia-cutlass-dsl": "4.8.0", "torch": "2.13.0", "triton": "3.7.1",
                  "nvidia-cudnn-cu13": "9.20.0.48"},
    "vllm_0_33": {"vllm": "0.33.0", "flashinfer-python": "0.7.2.post1",
                  "nvidia-cutlass-dsl": "4.8.0", "torch": "2.14.0", "triton": "3.8.0",
                  "nvidia-cudnn-cu13": "9.24.0.43"},
    # vllm 0.34.0 PyPI metadata: flashinfer-python==0.7.3, which the index does not have
    "vllm_0_34": {"vllm": "0.34.0", "flashinfer-python": "0.7.3",
                  "nvidia-cutlass-dsl": "4.8.0", "torch": "2.14.0", "triton": "3.8.0",
                  "nvidia-cudnn-cu13": "9.24.0.43"},
    "sglang_0_5_23": {"sglang": "0.5.23", "sglang-kernel": "0.4.10",
                      "sgl-deep-gemm": "0.2.3.post2", "flashinfer-python": "0.7.2", "nvidia-cutlass-dsl": "4.8.0",
                      "torch": "2.14.1", "triton": "3.8.0", "nvidia-cudnn-cu13": "9.24.0.43"},
}


@pytest.mark.parametrize("name", sorted(STACKS))
def test_stack_preset_pins_what_the_engine_installs(name):
    path = REPO / "conf" / "stack" / f"{name}.yaml"
    text = path.read_text()
    assert yaml.safe_load(text)["packages"] == STACKS[name]
    assert "PyPI metadata" in text, f"{path.name} must say where its pins come from"


def test_vllm_0_34_stack_says_its_flashinfer_pin_is_not_on_the_index():
    text = (REPO / "conf" / "stack" / "vllm_0_34.yaml").read_text()
    assert "flashinfer-python==0.7.3" in text and "cannot" in text and "resolve" in text


@pytest.mark.parametrize("stack, old, new", [
    # (layer and platform keys, vLLM 0.33.0's pick, vLLM 0.34.0's pick)
    (["platform=b200", "platform.capability=11.0"], "cutlass", "marlin"),
    (["platform=b200", "layer.activation=swiglustep"], "cutlass", "flashinfer_trtllm"),
    (["platform=b200", "platform.capability=11.0", "layer.quant=mxfp4",
      "layer.activation=swigluoai"], "triton_kernels", "marlin"),
    (["platform=h100", "layer.quant=fp8_block", "platform.packages.nvcc=12.8",
      "policy.moe_backend=deep_gemm", "policy.strict=false"], "deep_gemm", "triton"),
])
def test_vllm_0_34_answers_and_0_33_keeps_its_own(stack, old, new):
    """Issue 43: each change of vLLM 0.34.0, with 0.33.0's answer unchanged, under the stack
    preset and with the version given as a platform package."""
    from selector import load
    for preset, want in (("vllm_0_33", old), ("vllm_0_34", new)):
        d = load([f"stack={preset}", "engine=vllm", *stack]).default()
        assert d.selected == want, (preset, d.summary())
    # 0.33.0's stack with vllm 0.34.0 given (as detected): the vLLM version decides
    given = load(["stack=vllm_0_33", "engine=vllm", *stack,
                  "platform.packages.vllm=0.34.0"]).default()
    assert given.selected == new, given.summary()


@pytest.mark.parametrize("stack, engine, label", [
    ("vllm_0_32", "vllm", "vLLM 0.32.0"), ("vllm_0_33", "vllm", "vLLM 0.33.0"),
    ("vllm_0_34", "vllm", "vLLM 0.34.0"),
    ("sglang_0_5_23", "sglang", "SGLang 0.5.23"), ("none", "vllm", "vLLM 0.32.0")])
def test_the_engine_label_names_the_stacks_engine_version(stack, engine, label):
    """Issue 22 item 5: `stack=vllm_0_33` printed "vLLM 0.32.0 flags"."""
    from selector import load
    d = load([f"engine={engine}", f"stack={stack}", "platform=b200"]).default()
    assert d.engine.label == label
    text = str(d)
    assert f"{label} flags:" in text or d.selected is None


def test_cudnn_gemm_is_installed_with_the_engine_stacks():
    """Issue 22 item 4c: vLLM 0.32.0's torch brings nvidia-cudnn-cu13: its cuDNN FP4 GEMM is
    not rejected as 'not installed' under the engine's stack."""
    from selector import load
    for stack in STACKS:
        d = load([f"stack={stack}", "platform=b200", "layer=dense_linear",
                  "policy.linear_backend=flashinfer_cudnn"]).default()
        assert d.selected == "flashinfer_cudnn", (stack, d.summary())


def _cli(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "selector", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env)


def test_stock_vllm_0_33_runs_b12x_when_requested():
    """The 0.7.2 [b12x] extra's 4.7.1 pin must not reject a stock vLLM 0.33.0 install."""
    r = _cli("explain", "stack=vllm_0_33", "platform=rtx_pro_6000", "layer=nemotron_moe",
             "policy.moe_backend=flashinfer_b12x")
    assert r.returncode == 0, r.stderr
    assert "selected: flashinfer_b12x" in r.stdout


@pytest.mark.parametrize("stack", ["vllm_0_32", "sglang_0_5_23"])
def test_engine_stacks_run_b12x_when_requested(stack):
    from selector import load
    d = load([f"stack={stack}", "platform=rtx_pro_6000", "layer=nemotron_moe",
              "policy.moe_backend=flashinfer_b12x"]).default()
    assert d.selected == "flashinfer_b12x"


def test_sglang_stack_marlin_is_the_jit_kernel_with_a_toolkit_warning():
    from selector import load
    d = load(["stack=sglang_0_5_23", "platform=h200", "layer=qwen_moe"]).default()
    assert d.selected == "marlin"
    assert any(b == "marlin" and "nvcc" in w.message for b, w in d.warnings)


# ---------------------------------------------------------------------------------------------
# Public sources only

# Files a user cannot open, and measurements nobody can repeat, are not sources.
PRIVATE = re.compile(r"FACTS\.md|CONTRACT\.md|FLASHINFER\.md|shared/knowledge|CI machine|"
                     r"this project's|/work/|/home/|/root/")
# In prose (docs, README) and code comments: the team's own files must not be cited.
PRIVATE_FILES = re.compile(r"FACTS\.md|FLASHINFER\.md|shared/knowledge")


def _sources():
    """What a user reads as a citation: every rule's source, message and explanations, backend
    descriptions, config comments, probe sources."""
    for path in sorted((REPO / "conf").rglob("*.yaml")):
        yield str(path.relative_to(REPO)), path.read_text()
    from selector.core.probe_specs import PROBES
    for p in PROBES.values():
        yield f"probe {p.name}", f"{p.source} {p.description}"
    for _op, bs in kc.base().catalogue.backends.items():
        for b in bs:
            for r in b.rules:
                text = " ".join([r.source, r.message or ""] +
                                [f"{e.reason} {e.source}" for e in r.explained])
                yield r.key, text


def _prose():
    for path in sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]:
        yield str(path.relative_to(REPO)), path.read_text()
    for path in sorted((REPO / "selector").glob("*.py")) + sorted((REPO / "backends").rglob("*.py")):
        yield str(path.relative_to(REPO)), path.read_text()


def test_every_source_is_public():
    bad = [f"{where}: {m.group(0)!r}" for where, text in _sources()
           for m in PRIVATE.finditer(text)]
    bad += [f"{where}: {m.group(0)!r}" for where, text in _prose()
            for m in PRIVATE_FILES.finditer(text)]
    assert not bad, "cite the upstream PR, issue, release or file instead: " + "; ".join(bad)


def test_the_public_source_check_fails_on_a_private_citation():
    assert PRIVATE.search("source: measured on this project's CI machine (FACTS" + ".md)")
    assert not PRIVATE.search("source: FlashInfer #3246; vLLM 0.32.0 fused_moe/b12x.py")


# ---------------------------------------------------------------------------------------------
# The drift report

def _declared(**over):
    """flashinfer 0.7.4's declarations as its own decorators, constants and enums state them."""
    d = {"version": "0.7.4", "universe": [75, 80, 86, 87, 89, 90, 100, 103, 107, 110, 120, 121],
         "capabilities": {"moe:b12x_fused_moe": [120, 121],
                          "moe:cute_dsl_fused_moe_nvfp4": [100, 103, 107],
                          "mm_fp4:cudnn": [100, 103, 107, 110, 120, 121],
                          "mm_fp4:trtllm": [100, 103, 107],
                          "mm_fp4:cutlass": [100, 103, 107, 110, 120, 121],
                          "mm_fp4:cute-dsl": [100, 103, 107, 120, 121],
                          "mm_fp4:cutedsl_low_latency": [100, 103, 107],
                          "mm_fp4:b12x": [120, 121], "mm_fp4:cake": [100, 103]},
         "mm_fp4_backends": ["b12x", "cake", "cudnn", "cute-dsl", "cutedsl_low_latency",
                             "cutlass", "trtllm"], "mm_fp4_experimental": ["cake"],
         "min_cuda": {"mm_fp4:b12x": "12.9", "moe:b12x_fused_moe": "13.0"},
         "activations": {"b12x_moe": ["gelu_tanh", "relu2", "silu", "swigluoai_uninterleave"],
                         "b12x_moe_gated": ["gelu_tanh", "silu", "swigluoai_uninterleave"],
                         "ActivationType": ["Gelu", "Relu", "Silu", "Swiglu", "Geglu",
                                            "SwigluBias", "Relu2", "SwigluStep", "GegluTanh",
                                            "Identity", "Situ", "InvalidType", "ClampedRelu2",
                                            "PowLU"]},
         "requires": {"nvidia-cutlass-dsl": ">=4.8.0"}}
    d.update(over)
    return d


def _drift(fi=None, b12x=None):
    from selector.inspect.drift import compare
    sel = kc.base()
    findings = {"flashinfer.declarations": fi or _declared()}
    if b12x:
        findings["b12x.declarations"] = b12x
    return compare(sel.catalogue, sel.run_config.platform.facts, findings)


def test_drift_flashinfer_0_7_4_agrees_or_is_explained():
    items = _drift()
    from selector.inspect.drift import counts
    c = counts(items)
    assert c["drift"] == 0, [i.to_dict() for i in items if i.status == "drift"]
    assert c["agrees"] >= 25 and c["explained"] == 7
    explained = {i.claim: i for i in items if i.status == "explained"}
    assert set(explained) == {"mm_fp4 backend cake", "mm_fp4 backend cutedsl_low_latency",
                              "ActivationType.Relu", "ActivationType.SwigluBias",
                              "ActivationType.Identity", "ActivationType.ClampedRelu2",
                              "ActivationType.PowLU"}
    assert "experimental" in explained["mm_fp4 backend cake"].detail
    for i in items:
        assert set(i.to_dict()) >= {"backend", "claim", "installed", "status", "detail"}


@pytest.mark.parametrize("change, claim", [
    ({"capabilities": {"moe:b12x_fused_moe": [110, 120, 121]}}, "devices"),
    ({"capabilities": {"mm_fp4:cute-dsl": [100, 103]}}, "devices"),
    ({"min_cuda": {"mm_fp4:b12x": "13.0"}}, "minimum CUDA"),
    ({"min_cuda": {"moe:b12x_fused_moe": "12.9"}}, "minimum CUDA"),
    ({"mm_fp4_backends": ["b12x", "cake", "cudnn", "cute-dsl", "cutedsl_low_latency", "cutlass",
                          "trtllm", "cutile"]}, "mm_fp4 backend cutile"),
    ({"mm_fp4_backends": ["b12x", "cake", "cudnn", "cute-dsl", "cutedsl_low_latency",
                          "cutlass"]}, "mm_fp4 backend trtllm"),
    ({"requires": {"nvidia-cutlass-dsl": ">=4.8.1"}}, "nvidia-cutlass-dsl floor"),
])
def test_drift_is_reported_when_the_library_changes(change, claim):
    fi = _declared()
    for k, v in change.items():
        fi[k] = {**fi[k], **v} if isinstance(v, dict) else v
    drifted = [i for i in _drift(fi) if i.status == "drift"]
    assert drifted and all(i.claim == claim for i in drifted), [i.to_dict() for i in drifted]


def test_drift_on_new_activation_enum_member_and_changed_b12x_activations():
    acts = dict(_declared()["activations"])
    acts["ActivationType"] = acts["ActivationType"] + ["Swish"]
    acts["b12x_moe"] = acts["b12x_moe"] + ["swiglustep"]
    drifted = {i.claim for i in _drift(_declared(activations=acts)) if i.status == "drift"}
    assert drifted == {"ActivationType.Swish", "activations"}


def test_drift_native_b12x_gating():
    """b12x 1.5.1's wheel: is_b12x accepts (12, 0) and (12, 1); MIN_CUTLASS_DSL = "4.6.0";
    Requires-Dist torch>=2.12.0, nvidia-cutlass-dsl==4.8.0."""
    nb = {"version": "1.5.1", "universe": _declared()["universe"], "devices": [120, 121],
          "constants": {"MIN_CUTLASS_DSL": "4.6.0"},
          "requires": {"torch": ">=2.12.0", "nvidia-cutlass-dsl": "==4.8.0"}}
    items = [i for i in _drift(b12x=nb) if i.backend.endswith("/b12x")]
    assert len(items) == 6 and all(i.status == "agrees" for i in items), items
    nb["devices"], nb["constants"] = [120], {"MIN_CUTLASS_DSL": "4.7.0"}
    drifted = {(i.backend, i.claim) for i in _drift(b12x=nb) if i.status == "drift"}
    assert drifted == {(f"{op}/b12x", c) for op in ("moe", "linear")
                       for c in ("devices", "nvidia-cutlass-dsl run-time minimum")}


def test_explained_needs_claim_reason_and_source(tmp_path):
    from selector.core.errors import SelectorError
    from selector.core.rules import compile_rule
    rule = {"kind": "device", "devices": ["12.x"], "source": "x",
            "explained": [{"claim": "devices", "reason": "because"}]}
    with pytest.raises(SelectorError, match="claim, reason and source"):
        compile_rule(rule, "catalogue.moe.x.rules[0]", "x.yaml")


def _flashinfer_installed():
    import importlib.metadata as md
    try:
        return md.version("flashinfer-python")
    except md.PackageNotFoundError:
        return None


@pytest.mark.skipif(_flashinfer_installed() is None, reason="flashinfer-python is not installed")
def test_doctor_deep_has_zero_drift_against_the_installed_flashinfer():
    """doctor --deep asks the installed flashinfer (in a child process) and lists the drift."""
    r = _cli("doctor", "--deep", "--probe", "flashinfer.declarations", "--format", "json")
    out = json.loads(r.stdout)
    assert isinstance(out["drift"], list) and out["drift"], out.get("probes")
    drifted = [i for i in out["drift"] if i["status"] == "drift"]
    assert not drifted, drifted
    statuses = {i["status"] for i in out["drift"]}
    assert statuses <= {"agrees", "explained"}
    assert sum(i["status"] == "agrees" for i in out["drift"]) >= 20
    assert r.returncode == (1 if out["problems"] else 0)


def test_doctor_without_deep_has_no_drift_list():
    r = _cli("doctor", "--format", "json", "platform=cpu")
    assert json.loads(r.stdout)["drift"] is None


# ---------------------------------------------------------------------------------------------
# The mutation tool's generator

def test_a_sample_of_catalogue_mutations_is_all_killed():
    """tools/mutate_catalogue.py: deleting a rule, moving a boundary by one release or dropping
    a listed value, or an engine's rule, name or kernel, fails a case of tests/knowledge_cases.py
    (the full run, `python tools/mutate_catalogue.py --show-survivors`: killed 1443/1443; 67
    refused by validation; 3 equivalent, each with its reason). The sample is a stable draw
    (tools/mutate_catalogue.py _sample), so CI's recipe copy draws no other old mutation."""
    import mutate_catalogue as mc
    res = mc.run(sample=40, seed=1)
    assert res["run"] >= 35 and not res["survived"], res["survived"]


def test_the_sample_is_a_stable_draw():
    """A catalogue with more mutations (the recipe copy's extra backend) draws, of the others,
    only mutations the same seed drew without them."""
    import mutate_catalogue as mc
    old = [("moe", f"b{i}", f"delete rules[{j}] (device)", None) for i in range(30)
           for j in range(5)]
    new = [("moe", "my_kernel", f"delete rules[{j}] (device)", None) for j in range(20)]
    before, after = mc._sample(old, 40, 1), mc._sample(old + new, 40, 1)
    assert len(before) == len(after) == 40 and mc._sample(old, 40, 2) != before
    assert {t[:3] for t in after if t[1] != "my_kernel"} <= {t[:3] for t in before}


def test_each_equivalent_mutation_is_one_the_tool_makes():
    """tools/mutate_catalogue.py EQUIVALENT names mutations of today's catalogue, each with a
    reason (the full run reports an entry a case kills as stale)."""
    import mutate_catalogue as mc
    _, _, todo = mc.population()
    labels = {f"{op}/{name} {desc}" for op, name, desc, _ in todo}
    assert set(mc.EQUIVALENT) <= labels, sorted(set(mc.EQUIVALENT) - labels)
    assert all(len(reason) > 40 for reason in mc.EQUIVALENT.values())


def test_mutations_delete_move_and_drop():
    import mutate_catalogue as mc
    conf = {"rules": [{"kind": "package", "package": "x", "specifier": ">=0.6.9"},
                      {"kind": "device", "devices": ["10.0", "10.3"]},
                      {"kind": "known_issue", "message": "m",
                       "when": {"packages": {"y": "<4.8.0"}}}]}
    names = [d for d, _ in mc.mutations(conf)]
    assert "delete rules[0] (package)" in names
    assert "rules[0] (package) specifier >=0.6.9 -> >=0.6.8" in names
    assert "rules[0] (package) specifier >=0.6.9 -> >=0.6.10" in names
    assert "rules[1] (device) drop devices 10.3" in names
    assert "rules[2] (known_issue) when.packages.y <4.8.0 -> <4.8.1" in names
    conf["engines"] = {"vllm": {"name": "x", "source": "s", "rules": [
        {"kind": "activation", "values": ["silu", "relu2"], "source": "s"}],
        "kernels": [{"kernel": "K", "scheme": "nvfp4_w4a16", "when": {"quant": ["nvfp4"]},
                     "source": "s"}]},
        "sglang": {"name": None, "source": "s"}}
    names = [d for d, _ in mc.mutations(conf, "x")]
    assert "delete engines.vllm.rules[0] (activation)" in names
    assert "engines.vllm.rules[0] (activation) drop values relu2" in names
    assert "engines.vllm.name x -> None" in names and "engines.sglang.name None -> x" in names
    assert "delete engines.vllm.kernels[0] (K)" in names
    assert "engines.vllm.kernels[0] (K) drop scheme" in names
