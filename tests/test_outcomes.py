"""Issue 23 items 1 and 4, issue 22 item 8: a rule kind owns the status its failure gives;
what the resolver says is structured notes with documented severities; the line format marks
fallback and warning; the decision memo never conflates layers a rule tells apart."""
from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import pytest
from helpers import REPO, load, run_cli_many

import selector
from selector.commands.why import why
from selector.core import notes as notes_mod
from selector.core import rules
from selector.core.decision import OUTCOMES, Candidate, Decision, render_line
from selector.core.engine_view import EngineView
from selector.core.errors import SelectorError
from selector.core.layer import make_layer
from selector.core.notes import note
from selector.core.resolver import Resolver
from selector.core.rules import Reason
from selector.core.schema import Status
from selector.core.schema import Status as S

SPARK = ("platform=dgx_spark", "stack=flashinfer_0_7_4")
DGX_VLLM = ("platform=dgx_spark", "stack=vllm_0_32")


def _backend(tmp: Path, op: str, name: str, body: str) -> Path:
    d = tmp / "conf" / "backend" / op
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.yaml").write_text(body)
    return tmp / "conf"


# --------------------------------------------------------------------------------------------
# rendering: two synthetic decisions (no catalogue), every line of text and line forms pinned

def synthetic():
    R = Reason
    moe = dict(op="moe", quant="nvfp4", activation="relu2", act_and_mul=False, ep_size=2,
               tp_size=4, swiglu_limit=7.0, num_tokens=64, dtype="bfloat16", hidden_size=7168,
               intermediate_size=2048, num_experts=256, top_k=8, all2all="naive")
    plat = {"capability": "12.1", "cuda": "13.0", "source": "dgx_spark",
            "packages": {"flashinfer-python": "0.7.4", "vllm": None}}
    warn = R("known_issue", "reported slow on this GPU", "FlashInfer #1", "hit a known issue",
             "warning")
    cands = (
        Candidate("aa", S.SELECTED, (), "pkg.mod:AA"),
        Candidate("bb_backend", S.ELIGIBLE, ()),
        Candidate("cc", S.OPT_IN, (R("opt_in", "experimental", "PR #2", "are opt-in",
                                     status=S.OPT_IN),)),
        Candidate("dd", S.REJECTED, (
            R("device", "needs SM 10.x; this GPU is SM 12.1", "PR #3", "need SM 10.x"),
            R("package", "needs flashinfer-python >=0.8 (installed: 0.7.4; pip install "
              "'flashinfer-python>=0.8') and this sentence is long enough to wrap the table "
              "line twice over", "release notes 0.8", "need flashinfer-python >=0.8"))),
        Candidate("ee", S.NOT_APPLICABLE, (R("quant", "implements nvfp4_w4a16 layers, not nvfp4",
                                             "vLLM #4", "do not implement nvfp4",
                                             status=S.NOT_APPLICABLE, final=True),)),
        Candidate("ff", S.REJECTED, (R("device", "needs SM 10.x; this GPU is SM 12.1", "PR #3",
                                       "need SM 10.x"),)),
    )
    notes = (note("preference", "aa", rank=1, reason="fastest", source="PR #5",
                  outranks=({"backend": "bb_backend", "rank": 9},)),
             note("rule_warning", "aa", rule="known_issue", message=warn.message,
                  source=warn.source),
             note("platform", detail="capability from a preset"))
    engine = EngineView("vllm", "vLLM 0.32.0", "aa_v", flags=("--moe-backend", "aa_v"),
                        env={"VLLM_X": "1"})
    d1 = Decision(moe, plat, "auto", "aa", cands, notes, "dgx_spark", (("aa", warn),), engine)
    lin = dict(op="linear", quant="nvfp4", activation="silu", act_and_mul=True, ep_size=1,
               tp_size=1, swiglu_limit=None, num_tokens=None, dtype="float16", hidden_size=4096,
               intermediate_size=None, num_experts=None, top_k=None, all2all=None,
               act_scale=None, routing=None, quant_method=None, dp_size=None)
    bare = {"capability": None, "cuda": None, "source": "cpu",
            "packages": {"flashinfer-python": None}}
    lc = (Candidate("dd", S.REJECTED, cands[3].reasons), Candidate("gg", S.ELIGIBLE, ()))
    refused = note("request_refused", "dd", key="policy.linear_backend", requested=("dd",),
                   failing=({"backend": "dd", "failed": 2},), fallback="gg")
    hint = note("no_packages", add=("stack=vllm_0_33",))
    d2 = Decision(lin, bare, "dd", None, lc, (hint, refused), "", ())
    return d1, d2


GOLDEN_TEXT = ([
    'moe layer: nvfp4, relu2, non-gated, bfloat16, ep 2, tp 4, swiglu_limit 7.0 (hidden_size 7168, '
    'intermediate_size 2048, num_experts 256, top_k 8, num_tokens 64)',
    'platform: dgx_spark (SM 12.1, CUDA 13.0); flashinfer-python 0.7.4',
    'requested: auto',
    'selected: aa  -> pkg.mod:AA',
    'vLLM 0.32.0 flags: VLLM_X=1 --moe-backend aa_v',
    '',
    '  backend     status          why',
    '  aa          selected        passes every rule',
    '  bb_backend  eligible        passes every rule',
    '  cc          opt_in          [opt_in] experimental (PR #2)',
    '  dd          rejected        [device] needs SM 10.x; this GPU is SM 12.1 (PR #3)',
    '                              [package] needs flashinfer-python >=0.8 (installed: 0.7.4; pip install',
    "                                'flashinfer-python>=0.8') and this sentence is long enough to wrap",
    '                                the table line twice over (release notes 0.8)',
    '  ff          rejected        [device] needs SM 10.x; this GPU is SM 12.1 (PR #3)',
    '  ee          not_applicable  [quant] implements nvfp4_w4a16 layers, not nvfp4 (vLLM #4)',
    '',
    'summary: 3/6 backends usable (1 opt-in only): 2 need SM 10.x, 1 do not implement nvfp4, 1 need',
    '  flashinfer-python >=0.8',
    'notes:',
    '  - preference: aa (rank 1: fastest (PR #5)) outranks bb_backend (rank 9)',
    '  - aa: reported slow on this GPU (FlashInfer #1)',
    '  - platform: capability from a preset',
], [
    'linear layer: nvfp4, float16 (hidden_size 4096)',
    'platform: cpu (no GPU, no CUDA); no kernel packages',
    '!! this platform lists no packages, so every backend that needs one is rejected: add stack=vllm_0_33',
    '   or platform.packages.<dist>=VERSION',
    'requested: dd',
    'selected: none',
    '',
    '  backend  status          why',
    '  gg       eligible        passes every rule',
    '  dd       rejected        [device] needs SM 10.x; this GPU is SM 12.1 (PR #3)',
    '                           [package] needs flashinfer-python >=0.8 (installed: 0.7.4; pip install',
    "                             'flashinfer-python>=0.8') and this sentence is long enough to wrap the",
    '                             table line twice over (release notes 0.8)',
    '',
    'summary: 1/2 backends usable: 1 need SM 10.x, 1 need flashinfer-python >=0.8',
    'notes:',
    '  - policy.linear_backend=dd was requested but fails 2 rule(s); policy.strict=true refuses to fall',
    '    back (with policy.strict=false: gg)',
])
GOLDEN_LINE = (
    'selector: moe quant=nvfp4 activation=relu2 act_and_mul=False dtype=bfloat16 hidden_size=7168 in'
    'termediate_size=2048 num_experts=256 top_k=8 ep_size=2 tp_size=4 swiglu_limit=7.0 all2all=naive'
    ' num_tokens=64 -> aa [selected, warning] aa: reported slow on this GPU (FlashInfer #1)',
    'selector: linear quant=nvfp4 dtype=float16 hidden_size=4096 -> none [refused_explicit] req'
    'uested dd: dd [device] needs SM 10.x; this GPU is SM 12.1')


def test_text_and_line_forms_of_synthetic_decisions():
    for d, text, line in zip(synthetic(), GOLDEN_TEXT, GOLDEN_LINE):
        assert str(d).splitlines() == text
        assert d.log_line() == line == render_line(d)


def test_json_of_synthetic_decisions():
    d1, d2 = synthetic()
    out = d1.to_dict()
    assert list(out) == ["layer", "platform", "requested", "selected", "candidates", "notes",
                         "notes_data", "summary", "entry_point", "outcome", "engine"]
    assert out["entry_point"] == "pkg.mod:AA" and out["outcome"] == "selected"
    assert out["summary"] == d1.summary() and out["engine"] == d1.engine.to_dict()
    assert out["candidates"][2] == {"backend": "cc", "status": "opt_in", "reasons": [
        {"rule": "opt_in", "message": "experimental", "source": "PR #2"}]}
    out["engine"]["flags"].append("x")  # a copy
    out["platform"]["packages"]["x"] = "1"
    assert d1.engine.flags == ("--moe-backend", "aa_v") and "x" not in d1.platform["packages"]
    assert d1.to_json() == json.dumps(d1.to_dict(), indent=2)
    two = d2.to_dict()
    assert "engine" not in two and two["entry_point"] is None
    assert two["outcome"] == "refused_explicit" and two["selected"] is None
    assert two["notes"][0] == d2.hint and d2.notes == (two["notes"][1],)
    assert (d1.ok, d2.ok, d1.entry_point, d2.entry_point) == (True, False, "pkg.mod:AA", None)
    assert d1.marks == ("warning",) and d2.marks == ()
    assert d1.summary() == ("3/6 backends usable (1 opt-in only): 2 need SM 10.x, 1 do not "
                            "implement nvfp4, 1 need flashinfer-python >=0.8")
    assert set(OUTCOMES) == {"selected", "refused_explicit", "unsupported_layer", "nothing_fits"}


def test_candidate_lookup_names_the_op():
    d1, _ = synthetic()
    assert d1.candidate("dd").status == "rejected"
    with pytest.raises(KeyError) as exc:
        d1.candidate("zz")
    assert "no backend 'zz' for op 'moe'" in str(exc.value)


def test_why_in_process_every_format():
    d1, d2 = synthetic()
    text, ok = why(d1, "dd", "text")
    assert not ok and text.splitlines() == [
        "dd: rejected", "  [device] needs SM 10.x; this GPU is SM 12.1 (PR #3)",
        "  [package] " + d1.candidate("dd").reasons[1].message + " (release notes 0.8)",
        "selected for this layer: aa (selected)"]
    assert why(d1, "AA", "text") == ("aa: selected (passes every rule)\n"
                                     "selected for this layer: aa (selected)", True)
    assert why(d1, "dd", "line") == ("dd: rejected [device] needs SM 10.x; this GPU is SM 12.1",
                                     False)
    assert why(d1, "bb-backend", "line") == ("bb_backend: eligible", True)
    assert why(d1, "cc", "line") == ("cc: opt_in [opt_in] experimental", True)
    js, ok = why(d2, "gg", "json")
    assert ok and json.loads(js) == {"backend": "gg", "status": "eligible", "reasons": [],
                                     "selected": None, "outcome": "refused_explicit"}
    js, ok = why(d2, "dd", "json")
    assert not ok and [r["rule"] for r in json.loads(js)["reasons"]] == ["device", "package"]
    with pytest.raises(SelectorError) as exc:
        why(d1, "zz", "text")
    assert "--why" in str(exc.value) and "aa" in str(exc.value)


# --------------------------------------------------------------------------------------------
# 1. a rule owns its outcome

def test_each_kind_declares_the_status_its_failure_gives():
    assert rules.KINDS["quant"].status is Status.NOT_APPLICABLE
    assert rules.KINDS["explicit_only"].status is Status.OPT_IN
    assert rules.KINDS["engine"].status is Status.NOT_APPLICABLE and rules.KINDS["engine"].final
    for kind in ("device", "cuda", "package", "known_issue", "feature", "activation", "dtype",
                 "act_and_mul", "parallel", "clamp", "shape", "exclude", "probe", "verify"):
        assert rules.KINDS[kind].status is Status.REJECTED and not rules.KINDS[kind].final, kind
    assert rules.ImplementsRule.final and rules.ImplementsRule.kind == "quant"
    assert rules.OptInRule.status is Status.OPT_IN


def test_a_new_kind_declares_its_own_status_and_the_resolver_obeys_it(tmp_path):
    """No status is derived from a reason's name: a kind called 'quantish' that declares
    NOT_APPLICABLE makes its backend not_applicable, and one that declares OPT_IN opt-in."""
    @rules.register
    class NotMine(rules.Rule):
        """Test kind: never applies."""
        kind = "test_not_mine"
        status = Status.NOT_APPLICABLE

        def evaluate(self, layer, facts):
            return self.reason("never mine", "are not mine")

    @rules.register
    class OnlyAsked(rules.Rule):
        """Test kind: only on request."""
        kind = "test_only_asked"
        status = Status.OPT_IN

        def evaluate(self, layer, facts):
            return self.reason("only on request", "are asked for")
    try:
        conf = _backend(tmp_path, "moe", "mine", 'description: "x"\nrank: 1\nrules:\n'
                        '  - {kind: test_not_mine, source: "test"}\n')
        _backend(tmp_path, "moe", "asked", 'description: "x"\nrank: 2\nrules:\n'
                 '  - {kind: test_only_asked, source: "test"}\n')
        d = selector.load(list(SPARK), config_dirs=[conf]).default()
        assert d.candidate("mine").status == "not_applicable"
        assert d.candidate("asked").status == "opt_in"
        assert [r.rule for r in d.candidate("asked").reasons] == ["test_only_asked"]
        sel = selector.load(list(SPARK) + ["policy.moe_backend=mine"], config_dirs=[conf])
        assert sel.default().notes_of("request_not_applicable")  # not a refusal
    finally:
        del rules.KINDS["test_not_mine"], rules.KINDS["test_only_asked"]


def test_a_final_failure_is_the_only_reason_and_rejected_lists_every_failure():
    d = load("platform=b200", "stack=sglang_0_5_23", "engine=sglang").default()
    lacking = [c for c in d.candidates if c.reasons and c.reasons[0].rule == "engine"]
    assert lacking and all(len(c.reasons) == 1 and c.status == "not_applicable" for c in lacking)
    fp8 = load(*SPARK).select(quant="int8")
    for c in fp8.candidates:  # `implements` is final: no package or device reason beside it
        assert [r.rule for r in c.reasons] == ["quant"] and c.reasons[0].final, c


def test_planned_kinds_are_refused_in_a_backend_file():
    for kind in ("verify", "engine", "exclude", "probe"):
        with pytest.raises(SelectorError) as exc:
            rules.compile_rule({"kind": kind, "source": "s"}, "catalogue.moe.x.rules[0]", "x.yaml")
        assert "is not declared in a backend file" in str(exc.value), kind
        assert rules.KINDS[kind].added_by in str(exc.value)


def test_verify_rule_is_built_like_any_rule():
    f = rules.VerifyFailure("nvfp4", True, "max rel err 0.9")
    r = rules.VerifyRule.measured("moe", "x", (f,))
    assert isinstance(r.params, rules.VerifyRule.Params) and r.failures == (f,)
    assert r.key == "catalogue.moe.x.verify" and r.source == rules.VerifyRule.SOURCE
    with pytest.raises(SelectorError):  # the typed params check it like a declared rule
        rules.VerifyRule.planned("k", "w", "s", failures=("not a failure",))


def test_a_verify_verdict_trusts_only_the_combinations_that_ran():
    """probe=verify with a verdict: a combination a case verified runs; a failed case rejects
    the layers of its scheme, gating and activation with the measured text; an unverified
    case gives its own why; a combination no case ran (another gating, a clamp) is rejected
    as unverified, naming it."""
    from selector.api import Selector
    base = selector.load(["platform=cpu", "platform.packages.torch=2.13.0"])
    verdict = rules.VerifyVerdict(
        failures=(rules.VerifyFailure("nvfp4", True, "moe nvfp4 gated swiglustep: max relative "
                                      "error 2", "swiglustep", False),),
        verified=frozenset({("nvfp4", True, "silu", False)}),
        unverified=((("nvfp4", True, "gelu", False), "moe nvfp4 gated gelu: the case crashed"),))
    sel = Selector(base.run_config, base.tree, verify={("moe", "emulation"): verdict})

    def emulation(activation, gated=True, **layer):
        d = sel.select(op="moe", quant="nvfp4", activation=activation, act_and_mul=gated, **layer)
        c = d.candidate("emulation")
        return c.status, [r.message for r in c.reasons if r.rule == "verify"]
    assert emulation("silu") == ("selected", [])
    assert emulation("swiglustep") == ("rejected", [
        "failed verification on this machine: moe nvfp4 gated swiglustep: max relative error 2"])
    assert emulation("gelu") == ("rejected", [
        "not verified on this machine (unverified: nvfp4 gated gelu): moe nvfp4 gated gelu: the "
        "case crashed"])
    none_ran = ": no verification case ran this combination"
    assert emulation("silu", swiglu_limit=7.0) == ("rejected", [
        "not verified on this machine (unverified: nvfp4 gated silu with swiglu_limit)"
        + none_ran])
    assert emulation("silu", gated=False) == ("rejected", [
        "not verified on this machine (unverified: nvfp4 non-gated silu)" + none_ran])


def test_excluded_and_opt_in_reasons_come_from_planned_rules():
    d = load(*SPARK, "policy.exclude=[flashinfer_cutlass]").default()
    c = d.candidate("flashinfer_cutlass")
    assert c.status == "rejected" and c.reasons[0].rule == "exclude"
    assert c.reasons[0].key == "policy.exclude"
    b12x = d.candidate("flashinfer_b12x")
    assert b12x.status == "opt_in" and b12x.reasons[0].status is Status.OPT_IN
    assert b12x.reasons[0].key == "catalogue.moe.flashinfer_b12x.opt_in"


def test_docs_rules_md_names_each_kinds_outcome():
    text = (REPO / "docs" / "rules.md").read_text()
    assert "| `quant` | `values`: a list of strings |" in text
    assert re.search(r"\| `engine` \|.*\| `not_applicable` \(ends the evaluation\) \|", text)


# --------------------------------------------------------------------------------------------
# 4. notes are data

def test_every_note_kind_has_a_documented_severity_and_renders():
    doc = (REPO / "docs" / "architecture.md").read_text()
    assert notes_mod.kinds_markdown() in doc, "regenerate the note kinds table"
    for kind, (sev, _render, _doc) in notes_mod.NOTE_KINDS.items():
        assert sev in notes_mod.SEVERITIES, kind


def test_notes_and_notes_data_are_parallel_in_json():
    for over, layer in [(SPARK, {}), (("platform=b200",), {}),
                        ((*SPARK, "policy.moe_backend=flashinfer_trtllm", "policy.strict=false"),
                         {}), ((*SPARK, "policy.moe_backend=flashinfer_b12x"), {"quant": "int8"})]:
        d = load(*over).select(**layer) if layer else load(*over).default()
        out = d.to_dict()
        assert len(out["notes"]) == len(out["notes_data"]) == len(d.note_data)
        for text, data, n in zip(out["notes"], out["notes_data"], d.note_data):
            assert text == str(n) and data == n.to_dict()
            assert data["severity"] == notes_mod.NOTE_KINDS[data["kind"]][0]
        assert out["notes"] == ([d.hint] if d.hint else []) + list(d.notes)
        json.loads(d.to_json())


def test_note_data_is_json_and_a_copy():
    d = load(*SPARK, "policy.moe_backend=flashinfer_trtllm", "policy.strict=false").default()
    fb = d.notes_of("fallback")[0].to_dict()
    assert fb["data"]["failing"] == [{"backend": "flashinfer_trtllm", "failed": 1}]
    fb["data"]["failing"].clear()
    assert d.notes_of("fallback")[0].to_dict()["data"]["failing"]


RENDERED = {
    "rule_warning": (notes_mod.note("rule_warning", "b", rule="known_issue", message="m",
                                    source="s"), "b: m (s)"),
    "request_skipped": (notes_mod.note("request_skipped", "b", key="policy.moe_backend",
                                       reason={"rule": "engine", "message": "no b"}),
                        "policy.moe_backend: b does not apply to this layer ([engine] no b); "
                        "skipped"),
    "fallback": (notes_mod.note("fallback", "b", key="policy.moe_backend", requested=("b",),
                                failing=({"backend": "b", "failed": 2},), chose="c"),
                 "policy.moe_backend=b was requested but fails 2 rule(s); policy.strict=false: "
                 "fell back to c"),
    "request_refused": (notes_mod.note("request_refused", "b", key="k", requested=("b", "c"),
                                       failing=({"backend": "b", "failed": 1},
                                                {"backend": "c", "failed": 3}), fallback=None),
                        "k=b,c was requested but each fails: b 1 rule(s), c 3 rule(s); "
                        "policy.strict=true refuses to fall back"),
    "no_packages": (notes_mod.note("no_packages", add=("stack=a", "stack=b")),
                    "this platform lists no packages, so every backend that needs one is "
                    "rejected: add stack=a, stack=b or platform.packages.<dist>=VERSION"),
}


@pytest.mark.parametrize("kind", sorted(RENDERED))
def test_the_text_of_a_note_is_rendered_in_one_place(kind):
    n, want = RENDERED[kind]
    assert notes_mod.text(n) == str(n) == want


# --------------------------------------------------------------------------------------------
# issue 22 item 8: the line format marks fallback and warning; outcome is structural

def test_line_marks_a_fallback_with_the_refused_request():
    d = load(*SPARK, "policy.moe_backend=flashinfer_trtllm", "policy.strict=false").default()
    assert d.selected == "flashinfer_cutlass" and d.outcome == "selected"
    assert d.marks == ("fallback", "warning")
    line = d.log_line()
    assert "-> flashinfer_cutlass [selected, fallback, warning] requested flashinfer_trtllm: " \
           "flashinfer_trtllm [device]" in line


def test_line_marks_a_selected_backend_with_a_warning_note_about_it():
    d = load("platform=rtx_5090", "stack=flashinfer_0_7_4", "platform.cuda=12.8").default()
    assert d.selected == "flashinfer_cutlass" and d.marks == ("warning",)
    w = next(n for n in d.note_data if n.severity == "warning" and n.backend == d.selected)
    assert d.log_line().endswith(f"[selected, warning] {w}")
    plain = load("platform=rtx_5090", "stack=flashinfer_0_7_4").select(num_tokens=8192)
    assert not any(n.severity == "warning" and n.backend == plain.selected
                   for n in plain.note_data)
    assert plain.marks == () and "[selected] (" in plain.log_line()


def test_a_warning_about_another_backend_does_not_mark_the_line():
    d = load(*SPARK).select(activation="relu2", act_and_mul=False, num_tokens=8192)
    others = [n for n in d.note_data if n.severity == "warning" and n.backend != d.selected]
    mine = [n for n in d.note_data if n.severity == "warning" and n.backend == d.selected]
    assert ("warning" in d.marks) == bool(mine)
    assert others or mine


def test_nothing_fits_after_a_fallback_is_not_a_refusal():
    """policy.strict=false and nothing automatic: the outcome is nothing_fits, not
    refused_explicit (a mutant of Decision.outcome survived without this)."""
    d = load(*SPARK, "policy.moe_backend=flashinfer_trtllm", "policy.strict=false").select(
        activation="situ")
    assert d.selected is None and d.outcome == "nothing_fits"
    assert d.notes_of("fallback") and not d.notes_of("request_refused")
    assert "[nothing_fits, fallback]" in d.log_line()
    strict = load(*SPARK, "policy.moe_backend=flashinfer_trtllm").select(activation="situ")
    assert strict.outcome == "refused_explicit" and strict.notes_of("request_refused")
    assert "[refused_explicit] requested flashinfer_trtllm: flashinfer_trtllm [" in \
        strict.log_line()
    auto = load(*SPARK).select(activation="situ")
    assert auto.outcome == "nothing_fits" and auto.notes_of("nothing_automatic")
    assert load(*SPARK).select(quant="int8").outcome == "unsupported_layer"


def test_to_json_is_the_dict_as_json():
    d = load(*SPARK).default()
    assert json.loads(d.to_json()) == d.to_dict()
    assert d.to_json().startswith("{\n  \"layer\": {")  # indented, in contract order


def test_instantiate_refusal_names_the_outcome_and_first_note():
    d = load(*SPARK, "policy.moe_backend=flashinfer_trtllm").default()
    with pytest.raises(SelectorError) as exc:
        d.instantiate()
    assert "outcome refused_explicit" in str(exc.value)
    assert d.notes[0] in str(exc.value)


# --------------------------------------------------------------------------------------------
# --why in every format (mutation survivors)

def test_why_in_json_and_line_formats():
    base = ("explain", *SPARK, "layer=nemotron_moe", "--why", "flashinfer_trtllm")
    js, line, text, ok = run_cli_many([base + ("--format", "json"), base + ("--format", "line"),
                                       base, ("explain", *SPARK, "layer=nemotron_moe", "--why",
                                              "flashinfer_cutlass", "--format", "line")])
    got = json.loads(js.stdout)
    assert js.returncode == 1
    assert got["backend"] == "flashinfer_trtllm" and got["status"] == "rejected"
    assert got["selected"] == "flashinfer_cutlass" and got["outcome"] == "selected"
    assert [r["rule"] for r in got["reasons"]] == ["device"]
    assert line.returncode == 1 and line.stdout.count("\n") == 1
    assert line.stdout.startswith("flashinfer_trtllm: rejected [device] needs ")
    assert text.stdout.splitlines()[-1] == "selected for this layer: flashinfer_cutlass (selected)"
    assert text.stdout.startswith("flashinfer_trtllm: rejected\n  [device] ")
    assert ok.returncode == 0 and ok.stdout == "flashinfer_cutlass: selected\n"


def test_why_text_of_a_usable_backend_says_it_passes():
    from selector.commands.why import why
    d = load(*SPARK).default()
    out, usable = why(d, "flashinfer-cutlass", "text")
    assert usable and out.startswith("flashinfer_cutlass: selected (passes every rule)\n")
    out, usable = why(d, "FLASHINFER_B12X", "text")
    assert usable and out.startswith("flashinfer_b12x: opt_in\n  [opt_in] ")  # opt-in can run


# --------------------------------------------------------------------------------------------
# the decision memo: one resolver deciding many layers answers as a fresh one per layer

def _layers(seed: int, n: int):
    rnd = random.Random(seed)
    for _ in range(n):
        op = rnd.choice(("moe", "linear"))
        kw = dict(op=op, quant=rnd.choice(("nvfp4", "nvfp4_w4a16", "int8")),
                  tp_size=rnd.randint(1, 15),
                  num_tokens=rnd.choice((None, 1, 62, 63, 64, 65, 8192)))
        if op == "moe":
            act = rnd.choice(("silu", "relu2", "gelu_tanh", "swigluoai"))
            kw.update(activation=act, act_and_mul=rnd.random() < 0.5,
                      ep_size=rnd.choice((1, 2)), num_experts=rnd.choice((None, 256, 511, 512)),
                      swiglu_limit=rnd.choice((None, 7.0)))
        else:
            kw.update(hidden_size=rnd.choice((4096, 7168, 100)))
        yield make_layer(kw)


@pytest.mark.parametrize("over", [SPARK, DGX_VLLM, ("platform=rtx_pro_6000", "stack=flashinfer_0_7_4",
                                                    'platform.cuda="13.0"',
                                                    "policy.allow_opt_in=[flashinfer_b12x]"),
                                  ("platform=rtx_5090", "stack=flashinfer_0_7_4",
                                   "platform.packages.flashinfer-python=0.7.0",
                                   "policy.moe_backend=flashinfer_b12x", "policy.strict=false")])
def test_the_decision_memo_answers_as_a_fresh_resolver(over):
    run = load(*over).run_config
    shared = Resolver(run)
    for layer in itertools.islice(_layers(len(over), 400), 400):
        assert shared.decide(layer).to_dict() == Resolver(run).decide(layer).to_dict(), layer


def test_threshold_terms_key_the_memo_by_interval():
    """num_tokens 62 and 63 share flashinfer_b12x's decode preference (max_num_tokens: 63),
    64 does not: the memo keys on the interval, not the value."""
    run = load("platform=rtx_pro_6000", "stack=flashinfer_0_7_4", 'platform.cuda="13.0"',
               "policy.allow_opt_in=[flashinfer_b12x]").run_config
    r = Resolver(run)
    got = {n: r.decide(make_layer(dict(op="moe", num_tokens=n))).selected
           for n in (1, 62, 63, 64, 65, None)}
    assert got == {1: "flashinfer_b12x", 62: "flashinfer_b12x", 63: "flashinfer_b12x",
                   64: "flashinfer_cutlass", 65: "flashinfer_cutlass", None: "flashinfer_cutlass"}
    b12x = run.catalogue.get("moe", "flashinfer_b12x")
    project = r._plans["moe", b12x.name].project
    assert project(make_layer(dict(op="moe", num_tokens=5))) == \
        project(make_layer(dict(op="moe", num_tokens=63)))
    assert project(make_layer(dict(op="moe", num_tokens=63))) != \
        project(make_layer(dict(op="moe", num_tokens=64)))
    c = rules.Condition.parse({"max_num_tokens": 63, "min_num_tokens": 8, "min_num_experts": 4},
                              "k", "w")
    assert c.cuts == (("num_experts", 4), ("num_tokens", 8), ("num_tokens", 64))
    assert c.plain_fields == ()


def test_text_wraps_at_100_columns_and_the_linear_line_names_its_fields():
    d1, _ = synthetic()
    msg = "m" * (97 - len("aa:  (s)"))  # the note is 97 characters, 101 with its "  - "
    n = note("rule_warning", "aa", rule="known_issue", message=msg, source="s")
    assert len(str(n)) == 97
    d = Decision(d1.layer, d1.platform, "auto", "aa", d1.candidates, (n,), "x")
    assert str(d).splitlines()[-2:] == [f"  - aa: {msg}", "    (s)"]
    lin = dict(d1.layer.to_dict(), op="linear", intermediate_size=512, tp_size=3, num_tokens=5)
    line = Decision(lin, d1.platform, "auto", "aa", d1.candidates, (), "x").log_line()
    assert line.startswith("selector: linear quant=nvfp4 dtype=bfloat16 hidden_size=7168 "
                           "intermediate_size=512 tp_size=3 num_tokens=5 -> aa [selected] (")


def test_tensor_parallel_alone_is_shown_in_the_text():
    d1, _ = synthetic()
    for ep, tp in ((1, 2), (2, 1)):
        lay = dict(d1.layer.to_dict(), ep_size=ep, tp_size=tp, swiglu_limit=None)
        first = str(Decision(lay, d1.platform, "auto", "aa", d1.candidates, (), "x")
                    ).splitlines()[0]
        assert first.startswith(f"moe layer: nvfp4, relu2, non-gated, bfloat16, ep {ep}, tp {tp} "
                                "(hidden")
    lay = dict(lay, ep_size=1, tp_size=1)
    first = str(Decision(lay, d1.platform, "auto", "aa", d1.candidates, (), "x")).splitlines()[0]
    assert first.startswith("moe layer: nvfp4, relu2, non-gated, bfloat16 (hidden")


def test_instantiate_builds_the_entry_point_or_says_there_is_none():
    d = load("platform=cpu").select(activation="relu2", act_and_mul=False)
    built = d.instantiate(compute_dtype="float32")
    assert type(built).__name__ == "EmulationMoE" and built.decision is d
    assert (built.activation, built.act_and_mul, built.compute_dtype) == ("relu2", False,
                                                                          "float32")
    lin = load("platform=cpu").select(op="linear").instantiate()
    assert type(lin).__name__ == "EmulationLinear" and lin.act_and_mul is None  # no MoE keys
    d1, _ = synthetic()
    bare = Decision(d1.layer, d1.platform, "auto", "bb_backend", d1.candidates, (), "x")
    with pytest.raises(SelectorError) as exc:
        bare.instantiate()
    assert str(exc.value) == "backend bb_backend declares no entry_point"


def test_a_decision_is_immutable_and_its_notes_are_computed_once():
    import dataclasses
    d1, _ = synthetic()
    with pytest.raises(dataclasses.FrozenInstanceError):
        d1.selected = "dd"  # type: ignore[misc]
    assert d1.notes is d1.notes  # rendered once
    assert d1.notes_of("preference")[0].data["rank"] == 1 and d1.notes_of("nope") == ()


def test_wrapping_keeps_hyphenated_and_long_words_whole():
    d1, _ = synthetic()
    pre = "x" * (100 - len("  - ") - len("flashinfer-") - 1)  # "flashinfer-" ends at column 100
    n = note("platform", detail=pre[len("platform: "):] + " flashinfer-python")
    d = Decision(d1.layer, d1.platform, "auto", "aa", d1.candidates, (n,), "x")
    assert str(d).splitlines()[-1] == "    flashinfer-python"  # not split at the hyphen
    # the table: a long backend name widens it (pad + 60 columns); hyphens and long words stay
    name = "b" * 30
    head = 2 + 30 + 2 + 14 + 2  # where a reason starts
    width = (30 + 20) + 60
    exact = "w" * (width + 1 - head - len("[device] ") - len(" (s)"))  # one column too many
    hyphen = "y" * (width - head - len("[device] ") - len(" flashinfer-")) + " flashinfer-python"
    long = "z" * 150
    cands = (Candidate(name, S.REJECTED, tuple(Reason("device", m, "s", "need x")
                                                for m in (exact, hyphen, long))),)
    table = str(Decision(d1.layer, d1.platform, "auto", None, cands, (), "x")).splitlines()
    row = table.index(next(x for x in table if x.startswith(f"  {name}")))
    pad = " " * (head + 2)
    assert table[row:row + 6] == [
        f"  {name}  rejected        [device] {exact}", pad + "(s)",
        " " * head + f"[device] {hyphen[:-len(' flashinfer-python')]}",
        pad + "flashinfer-python (s)",
        " " * head + "[device]", pad + long]  # a long word is never broken
    assert table[row + 6] == pad + "(s)"


def test_a_note_is_immutable():
    import dataclasses
    n = note("platform", detail="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        n.kind = "y"  # type: ignore[misc]


def test_request_not_applicable_words_for_one_and_several_backends():
    one = note("request_not_applicable", key="policy.moe_backend", requested=("b",), chose="c",
               reason={"rule": "quant", "message": "implements nvfp4 layers, not int8"},
               quant="int8", op="moe")
    assert str(one) == ("policy.moe_backend=b: b does not apply to this layer ([quant] "
                        "implements nvfp4 layers, not int8); automatic selection chose c for this "
                        "layer")
    two = note("request_not_applicable", key="policy.moe_backend", requested=("b", "d"),
               chose=None, reason=None, quant="int8", op="moe")
    assert str(two) == ("policy.moe_backend=b,d: none of them implements int8 moe layers; "
                        "automatic selection chose nothing for this layer")
    fb = note("fallback", "b", key="k", requested=("b",), failing=({"backend": "b",
                                                                     "failed": 1},), chose=None)
    assert str(fb) == "k=b was requested but fails 1 rule(s); policy.strict=false: fell back to " \
                      "nothing"


def test_why_json_is_indented_like_explain():
    d1, _ = synthetic()
    js, _ = why(d1, "cc", "json")
    assert js.startswith('{\n  "backend": "cc",\n  "status": "opt_in",')


def test_the_hint_counts_only_installed_packages():
    from types import SimpleNamespace

    from selector.core.resolver import no_packages_hint
    bare = SimpleNamespace(source="preset", packages=(("torch", None), ("vllm", None)))
    stacks = [("vllm_0_33", {"family": "vllm", "version": "0.33"})]
    got = no_packages_hint(bare, stacks)
    assert got is not None and got.data == {"add": ("stack=vllm_0_33",)}
    some = SimpleNamespace(source="preset", packages=(("torch", None), ("vllm", "0.33.0")))
    assert no_packages_hint(some, stacks) is None


def test_backends_of_other_schemes_share_one_row_of_the_text():
    """Two or more backends that do not implement the layer's scheme at all are one row of the
    text (an NVFP4 layer is not helped by an FP8/MX row each); JSON keeps every candidate."""
    d1, _ = synthetic()
    na = Reason("quant", "implements fp8_block layers, not nvfp4", "vLLM #4",
                "do not implement nvfp4", status=S.NOT_APPLICABLE, final=True)
    mixed = Reason("quant", "implements mxfp4 layers, not nvfp4", "vLLM #5",
                   "do not implement nvfp4", status=S.NOT_APPLICABLE, final=True)
    cands = d1.candidates + (Candidate("fp8_one", S.NOT_APPLICABLE, (na,)),
                             Candidate("fp8_two_longer", S.NOT_APPLICABLE, (na,)))
    d = Decision(d1.layer.to_dict(), d1.platform, "auto", "aa", cands, (), "dgx_spark", ())
    lines = str(d).splitlines()
    at = next(i for i, ln in enumerate(lines) if "not_applicable" in ln)
    assert lines[at:at + 3] == [
        '  (3 others)  not_applicable  [quant] do not implement nvfp4: ee, fp8_one, fp8_two_longer '
        '(vLLM #4);', '                                --why NAME shows one', '']
    assert [c["backend"] for c in d.to_dict()["candidates"]] == [
        "aa", "bb_backend", "cc", "dd", "ee", "ff", "fp8_one", "fp8_two_longer"]
    # sources differ: none is shown on the shared row; the column widens for the row's label
    cands = cands[:-1] + (Candidate("mx", S.NOT_APPLICABLE, (mixed,)),)
    d = Decision(d1.layer.to_dict(), d1.platform, "auto", "aa", cands, (), "dgx_spark", ())
    rows = [ln for ln in str(d).splitlines() if "not_applicable" in ln]
    assert rows == ['  (3 others)  not_applicable  [quant] do not implement nvfp4: ee, fp8_one, mx; '
                    '--why NAME shows one']
    # a not-applicable backend with another reason beside the scheme keeps its own row
    other = Reason("device", "needs SM 10.x", "PR #3", "need SM 10.x", status=S.NOT_APPLICABLE)
    cands = cands[:-1] + (Candidate("both", S.NOT_APPLICABLE, (na, other)),)
    d = Decision(d1.layer.to_dict(), d1.platform, "auto", "aa", cands, (), "dgx_spark", ())
    text = str(d)
    assert "(2 others)  not_applicable  [quant] do not implement nvfp4: ee, fp8_one (vLLM #4)" \
        in text.replace("\n" + " " * 32, " ")
    assert "  both        not_applicable  [quant] implements fp8_block" in text
