"""Every `--format json` output validates against its published schema (docs/schemas/), run for
real here; the schemas are no looser than they claim (a broken document fails)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, run_main
from json_schema import SCHEMAS, errors, load, validate

MODEL = str(REPO / "examples" / "deepseek-r1-nvfp4")
FIXTURES = Path(__file__).parent / "fixtures" / "logs"
B200 = ["platform=b200", "stack=vllm_0_32"]

RUNS = {
    "explain": ["explain", "--format", "json", *B200, "engine=vllm"],
    "explain-plain": ["explain", "--format", "json", "platform=h100", "stack=vllm_0_33",
                      "layer=nemotron_moe"],
    "explain-refused": ["explain", "--format", "json", "platform=h100", "stack=vllm_0_33",
                        "policy.moe_backend=flashinfer_trtllm"],
    "explain-why": ["explain", "--format", "json", *B200, "--why", "marlin"],
    "plan": ["explain", "--model", MODEL, "--format", "json", *B200],
    "plan-launch": ["explain", "--model", MODEL, "--format", "json", *B200, "engine=vllm"],
    "plan-sglang": ["explain", "--model", MODEL, "--format", "json", "platform=b200",
                    "stack=sglang_0_5_23", "engine=sglang"],
    "plan-trtllm": ["explain", "--model", MODEL, "--format", "json", *B200, "engine=trtllm"],
    "plan-why": ["explain", "--model", MODEL, "--format", "json", *B200, "--why", "marlin"],
    "list": ["list", "--format", "json"],
    "presets": ["list", "--presets", "--format", "json"],
    "check": ["check", "--format", "json"],
    "matrix": ["matrix", "--op", "linear", "--quant", "nvfp4_w4a16", "--format", "json"],
    "doctor": ["doctor", "--format", "json"],
}
SCHEMA_OF = {"explain-plain": "explain", "explain-refused": "explain", "plan-launch": "plan",
             "plan-sglang": "plan", "plan-trtllm": "plan"}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_output_validates(name):
    rc, out, err = run_main(RUNS[name])
    assert rc in (0, 1), err
    validate(json.loads(out), SCHEMA_OF.get(name, name))


def test_audit_validates(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("INFO 05-01 18:55:06 [nvfp4.py:314] Using 'FLASHINFER_CUTLASS' NvFp4 MoE "
                   "backend out of potential backends: ['FLASHINFER_TRTLLM'].\n"
                   "DEBUG 05-01 18:55:06 [nvfp4.py:317] NvFp4 MoE backend 'MARLIN' does not "
                   "support the deployment configuration since no.\n")
    rc, out, err = run_main(["audit", str(log), "--model", MODEL, *B200, "--format", "json"])
    assert rc == 1, err
    validate(json.loads(out), "audit")


def test_fleet_validates(tmp_path):
    f = tmp_path / "fleet.yaml"
    f.write_text(f"machines: [{{name: a, platform: h100, stack: vllm_0_32}}]\n"
                 f"models: [{MODEL}]\nengines: [vllm, trtllm]\n")
    rc, out, err = run_main(["fleet", str(f), "--format", "json", "--what-if", "platform=b200"])
    assert rc in (0, 1), err
    doc = json.loads(out)
    assert doc["what_if"]["changes"]
    validate(doc, "fleet")


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.observe.json")) if FIXTURES.is_dir()
                         else [], ids=lambda p: p.name)
def test_observe_file_validates(path):
    """The files SELECTOR_VLLM_OBSERVE_JSON named in vLLM's CPU build (tests/vllm/
    test_observe.py validates the live ones too)."""
    validate(json.loads(path.read_text()), "observe")


def test_every_json_output_has_a_schema():
    """One schema per JSON output named in docs/interface.md's list."""
    names = {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")}
    assert names == {"explain", "explain-why", "plan", "plan-why", "list", "presets", "check",
                     "doctor", "matrix", "tune", "audit", "fleet", "observe"}
    for n in names:
        s = load(n)
        assert s["$id"] == f"{n}.schema.json" and s["title"] and s["description"]


@pytest.mark.parametrize("name,broken", [
    ("explain", lambda d: d.pop("outcome")),
    ("explain", lambda d: d.update(outcome="maybe")),
    ("explain", lambda d: d["candidates"][0].update(status="fine")),
    ("explain", lambda d: d["candidates"][0]["reasons"].append({"rule": "x"})),
    ("explain", lambda d: d.update(selected=3)),
    ("explain", lambda d: d.update(surprise=True)),
])
def test_a_broken_document_fails(name, broken):
    """The validator and the schema catch a missing key, a value outside an enum, a nested
    object missing keys, a wrong type and an unknown top-level key."""
    rc, out, _ = run_main(RUNS[name])
    doc = json.loads(out)
    validate(doc, name)
    broken(doc)
    assert errors(doc, load(name), load(name))


def test_validator_refuses_unknown_keywords():
    with pytest.raises(ValueError, match="outside the subset"):
        errors(1, {"minimum": 0}, {})
