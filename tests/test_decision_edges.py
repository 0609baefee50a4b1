"""Edges of the decision that the packaged catalogue hides: user backends from a test config
dir, device specs at their boundary, `when` with several devices, the memo key, immutable
value classes and the closing notes. Each test was written against a surviving mutant of
rules.py / resolver.py (tools/mutate.py)."""
from __future__ import annotations

import dataclasses

import pytest
from packaging.version import Version

import selector
from selector.core import rules
from selector.core.errors import SelectorError
from selector.core.notes import Note
from selector.core.rules import Condition, DeviceSpec, Facts

SPARK = ["platform=dgx_spark", "stack=flashinfer_0_7_4"]


def _backend(root, op, name, body):
    d = root / "backend" / op
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.yaml").write_text(body)
    return root


def _facts(cap):
    return Facts(cap, Version("13.0"), {})


# --------------------------------------------------------------------------------------------
# the verdict memo: every field a `when` reads, and the op, are part of its key

def test_a_when_on_activation_is_not_answered_from_another_activation(tmp_path):
    conf = _backend(tmp_path, "moe", "gelu_broken", (
        'description: "breaks on gelu"\nrank: 1\nrules:\n'
        "  - kind: known_issue\n"
        '    when: {activation: [gelu], devices: ["12.x"]}\n'
        '    message: "gelu layers fail here"\n'
        '    source: "test"\n'))
    sel = selector.load(SPARK, config_dirs=[conf])
    silu = sel.select(activation="silu")
    assert silu.selected == "gelu_broken"
    gelu = sel.select(activation="gelu")
    c = gelu.candidate("gelu_broken")
    assert c.status == "rejected" and any("gelu layers fail here" in r.message for r in c.reasons)
    assert gelu.selected != "gelu_broken"


def test_a_backend_name_in_two_ops_keeps_a_verdict_per_op(tmp_path):
    _backend(tmp_path, "moe", "twin", (
        'description: "moe twin"\nrank: 1\nrules:\n'
        '  - kind: device\n    devices: ["9.0"]\n    source: "test"\n'))
    conf = _backend(tmp_path, "linear", "twin", 'description: "linear twin"\nrank: 1\nrules: []\n')
    sel = selector.load(SPARK, config_dirs=[conf])
    assert sel.select(op="linear").candidate("twin").status == "selected"
    moe = sel.select(op="moe").candidate("twin")
    assert moe.status == "rejected" and [r.rule for r in moe.reasons] == ["device"]


# one rule, a layer it passes, then one differing only in the field the rule reads: the
# second must not be answered from the first's memoized verdict
MEMO_CASES = [
    ("  - kind: act_and_mul\n    gated: [silu]\n    non_gated: [relu2]\n",
     dict(activation="silu", act_and_mul=True), dict(activation="relu2", act_and_mul=True)),
    ("  - kind: act_and_mul\n    gated: [silu]\n    non_gated: [relu2]\n",
     dict(activation="relu2", act_and_mul=False), dict(activation="relu2", act_and_mul=True)),
    ("  - kind: parallel\n    ep: true\n    all2all_exclude: [deepep_low_latency]\n",
     dict(ep_size=4, all2all="naive"), dict(ep_size=4, all2all="deepep_low_latency")),
    ("  - kind: parallel\n    ep: false\n", dict(ep_size=1), dict(ep_size=2)),
    ("  - kind: clamp\n", dict(swiglu_limit=None), dict(swiglu_limit=7.0)),
    ("  - kind: shape\n    dim: hidden_size\n    multiple_of: 128\n",
     dict(hidden_size=4096), dict(hidden_size=4100)),
    ("  - kind: activation\n    values: [silu]\n", dict(activation="silu"), dict(activation="gelu")),
    ("  - kind: dtype\n    values: [bfloat16]\n", dict(dtype="bfloat16"), dict(dtype="float16")),
]


@pytest.mark.parametrize("rule,passing,failing", MEMO_CASES)
def test_a_rules_layer_fields_key_its_memoized_verdict(tmp_path, rule, passing, failing):
    conf = _backend(tmp_path, "moe", "one_rule", (
        'description: "one rule"\nrank: 1\nrules:\n' + rule + '    source: "test"\n'))
    sel = selector.load(SPARK, config_dirs=[conf])
    assert sel.select(**passing).candidate("one_rule").status == "selected"
    got = sel.select(**failing).candidate("one_rule")
    assert got.status == "rejected", (failing, got)


def test_opt_in_is_a_backend_field_not_a_rule(tmp_path):
    conf = _backend(tmp_path, "moe", "old_style", (
        'description: "opt-in as a rule"\nrank: 1\nrules:\n'
        '  - kind: opt_in\n    when: {activation: [gelu]}\n    source: "test"\n'))
    with pytest.raises(SelectorError) as exc:
        selector.load(SPARK, config_dirs=[conf])
    assert "opt_in" in str(exc.value) and "backend field" in str(exc.value)
    with pytest.raises(ValueError):
        rules.register(type("OptInRule", (rules.Rule,), {"kind": rules.OPT_IN}))


# --------------------------------------------------------------------------------------------
# device specs and `when` terms

@pytest.mark.parametrize("cap,ok", [((9, 0), False), ((9, 9), False), ((10, 0), True),
                                    ((10, 3), True), ((12, 1), True)])
def test_at_least_spec_holds_from_its_exact_capability(cap, ok):
    spec = DeviceSpec.parse("k", ">=10.0", "w")
    assert spec.at_least and (spec.major, spec.minor) == (10, 0)
    assert spec.matches(cap) is ok
    assert spec.describe() == "SM >= 10.0"


def test_at_least_spec_compares_the_minor_version():
    spec = DeviceSpec.parse("k", ">=7.5", "w")
    assert not spec.matches((7, 0)) and spec.matches((7, 5)) and spec.matches((8, 0))


@pytest.mark.parametrize("text", ["12", ">=12.x", "x.0", "12.y", 12, ""])
def test_bad_device_specs_are_refused(text):
    with pytest.raises(SelectorError):
        DeviceSpec.parse("k", text, "w")


@pytest.mark.parametrize("cap,ok", [((10, 0), True), ((10, 3), True), ((12, 0), True),
                                    ((12, 1), False), ((9, 0), False), (None, False)])
def test_when_with_several_devices_holds_on_any_of_them(cap, ok):
    cond = Condition.parse({"devices": ["10.x", "12.0"]}, "k", "w")
    assert cond.platform_holds(_facts(cap)) is ok
    assert cond.layer_fields == ()


def test_when_reads_the_layer_fields_of_its_terms():
    cond = Condition.parse({"activation": ["gelu"], "max_num_tokens": 63, "ep": True,
                            "devices": ["12.x"]}, "k", "w")
    assert set(cond.layer_fields) == {"activation", "num_tokens", "ep_size"}


def test_when_describes_its_platform_terms_as_written_and_as_found():
    both = Condition.parse({"devices": ["12.x"], "packages": {"flashinfer-python": ">=0.7"}}, "k", "w")
    assert both.describe_platform_spec() == "flashinfer-python >=0.7, SM 12.x"
    facts = Facts((12, 1), Version("13.0"), {"flashinfer-python": Version("0.7.4")})
    assert both.describe_platform(facts) == "flashinfer-python 0.7.4, SM 12.1"
    no_devices = Condition.parse({"packages": {"flashinfer-python": ">=0.7"}}, "k", "w")
    assert no_devices.describe_platform_spec() == "flashinfer-python >=0.7"
    assert no_devices.describe_platform(facts) == "flashinfer-python 0.7.4"
    assert Condition.parse({"devices": ["10.0"]}, "k", "w").describe_platform(
        Facts(None, None, {})) == ""


# --------------------------------------------------------------------------------------------
# value classes are immutable (they key caches and are shared between threads)

@pytest.mark.parametrize("cls", [rules.Reason, rules.Facts, rules.DeviceSpec, rules.PackageSpec,
                                 rules.WhenTerm, rules.Condition, rules.Explained,
                                 rules.VerifyFailure])
def test_value_classes_are_frozen(cls):
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen


def test_every_kinds_params_are_frozen():
    for kind, cls in rules.KINDS.items():
        params = getattr(cls, "Params", None)
        if params is not None and dataclasses.is_dataclass(params):
            assert params.__dataclass_params__.frozen, kind


# --------------------------------------------------------------------------------------------
# closing notes

def test_note_opt_in_only_when_nothing_can_be_chosen_automatically(tmp_path):
    conf = _backend(tmp_path, "moe", "situ_kernel", (
        'description: "serves situ"\nrank: 1\n'
        'opt_in: {reason: "experimental", source: "test"}\nrules: []\n'))
    sel = selector.load(SPARK, config_dirs=[conf])
    d = sel.select(activation="situ")
    assert d.selected is None
    assert d.candidate("situ_kernel").status == "opt_in"
    assert d.notes_of("nothing_automatic") == (
        Note("nothing_automatic", "error", None, {"op": "moe", "opt_in": ("situ_kernel",)}),)


def test_note_without_opt_in_backends_names_none(tmp_path):
    d = selector.load(SPARK).select(activation="situ")
    assert d.selected is None
    assert [n.data for n in d.notes_of("nothing_automatic")] == [{"op": "moe", "opt_in": ()}]


def test_note_outside_the_catalogue_for_a_quant_no_backend_implements():
    d = selector.load(SPARK).select(quant="int8")
    assert d.selected is None
    assert all(c.status == "not_applicable" for c in d.candidates)
    assert [(n.severity, n.data) for n in d.notes_of("unsupported_layer")] == [
        ("info", {"quant": "int8", "op": "moe"})], d.note_data


# --------------------------------------------------------------------------------------------
# rule fields: boundaries and the words of a reason

def _rule(**conf):
    conf.setdefault("source", "test")
    return rules.compile_rule(conf, "catalogue.moe.t.rules[0]", "t.yaml")


def test_positive_integers_start_at_one():
    assert _rule(kind="shape", dim="hidden_size", multiple_of=1, min=2).multiple == 1
    assert _rule(kind="shape", dim="hidden_size", multiple_of=2, min=1).min == 1
    assert Condition.parse({"min_num_tokens": 1}, "k", "w").get("min_num_tokens") == 1
    for bad in (0, -1, True, 1.5):
        with pytest.raises(SelectorError):
            Condition.parse({"min_num_tokens": bad}, "k", "w")


def test_a_boolean_is_not_an_integer_parameter():
    with pytest.raises(SelectorError) as exc:  # refused by the type check, before any range check
        _rule(kind="shape", dim="hidden_size", multiple_of=True)
    assert str(exc.value).endswith("multiple_of: True is not an integer")


def test_a_reason_without_message_adds_nothing_and_a_known_issue_says_its_message_once():
    from selector.core.schema import Layer
    plain = _rule(kind="device", devices=["9.0"]).evaluate(Layer(), _facts((12, 1)))
    assert plain is not None and "None" not in plain.message and not plain.message.endswith(":")
    told = _rule(kind="device", devices=["9.0"], message="only Hopper").evaluate(Layer(), _facts((12, 1)))
    assert told.message.endswith(": only Hopper")
    issue = _rule(kind="known_issue", message="breaks", when={"devices": ["12.x"]})
    assert issue.evaluate(Layer(), _facts((12, 1))).message == "breaks (this platform: SM 12.1)"


def test_a_known_issue_names_only_the_platform_terms_it_has():
    from selector.core.schema import Layer
    issue = _rule(kind="known_issue", message="breaks",
                  when={"packages": {"flashinfer-python": "<0.8"}})
    f = Facts((12, 1), Version("13.0"), {"flashinfer-python": Version("0.7.4")})
    assert issue.evaluate(Layer(), f).message == "breaks (this platform: flashinfer-python 0.7.4)"
    on_gpu_less = _rule(kind="known_issue", message="breaks", when={"devices": ["12.x"]})
    assert on_gpu_less.evaluate(Layer(), Facts(None, None, {})).message == "breaks"


def test_a_known_issue_describes_its_devices_and_packages():
    on_devices = _rule(kind="known_issue", message="breaks", when={"devices": ["12.x", ">=10.0"]})
    assert on_devices.describe() == "known_issue when SM 12.x or SM >= 10.0"
    on_packages = _rule(kind="known_issue", message="breaks",
                        when={"packages": {"flashinfer-python": "<0.8"}})
    text = on_packages.describe()
    assert text.startswith("known_issue when ") and "flashinfer-python" in text and "SM" not in text


@pytest.mark.parametrize("term,value,tokens", [
    ("min_num_tokens", 64, {63: False, 64: True, 65: True, None: False}),
    ("max_num_tokens", 63, {62: True, 63: True, 64: False, None: False})])
def test_token_bounds_of_when_include_their_value(term, value, tokens):
    from selector.core.schema import Layer
    cond = Condition.parse({term: value}, "k", "w")
    for n, holds in tokens.items():
        assert cond.layer_holds(Layer(num_tokens=n)) is holds, (term, n)


def test_parameter_type_errors_name_the_type():
    for conf, text in ((dict(kind="activation", values=5), "5 is not a list of strings"),
                       (dict(kind="parallel", ep="x"), "'x' is not a boolean (true or false)")):
        with pytest.raises(SelectorError) as exc:
            _rule(**conf)
        assert str(exc.value).endswith(text)
    # a field with a default, given as null, takes its default
    assert _rule(kind="parallel", ep=True, all2all_exclude=None).exclude == ()


def test_parallel_and_act_and_mul_rules_describe_themselves():
    assert _rule(kind="parallel", ep=False).describe() == "parallel no EP"
    assert _rule(kind="parallel", ep=True).describe() == "parallel ep"
    assert _rule(kind="parallel", all2all_exclude=["naive"]).describe() == "parallel ep, not with naive"
    assert _rule(kind="act_and_mul", gated=["silu"], non_gated=[]).describe() == \
        "act_and_mul gated: silu; non-gated: -"
    assert _rule(kind="act_and_mul", gated=[], non_gated=["relu2"]).describe() == \
        "act_and_mul gated: -; non-gated: relu2"


def test_closing_notes_only_where_they_apply():
    spark = selector.load(SPARK).select()
    assert spark.selected and not spark.notes_of("nothing_automatic") and \
        not spark.notes_of("weight_only"), spark.note_data
    h200 = selector.load(["platform=h200", "stack=vllm_0_32"])
    w4a4 = h200.select(quant="nvfp4")
    assert w4a4.selected == "marlin"
    assert [(n.backend, n.severity) for n in w4a4.notes_of("weight_only")] == [
        ("marlin", "warning")], w4a4.note_data
    assert not h200.select(quant="nvfp4_w4a16").notes_of("weight_only")
    cpu = selector.load(["platform=h200", "stack=flashinfer_0_7_4"]).select()
    assert cpu.selected == "emulation"
    assert [n.backend for n in cpu.notes_of("reference")] == ["emulation"], cpu.note_data


# --------------------------------------------------------------------------------------------
# package requirements: a name with a range only (no extras, markers or URLs)

@pytest.mark.parametrize("text", ["flashinfer-python[b12x]>=0.7", "torch; python_version>'3'",
                                  "torch @ https://example.invalid/torch.whl", "not a name!"])
def test_a_package_requirement_is_a_name_and_a_range_only(text):
    with pytest.raises(SelectorError) as exc:
        rules.compile_rule({"kind": "package", "any_of": [text], "source": "t"},
                           "catalogue.moe.x.rules[0]", "x.yaml")
    assert "catalogue.moe.x.rules[0].any_of" in str(exc.value)
    assert "is not a distribution name with an optional version range" in str(exc.value)


def test_a_package_requirement_keeps_its_own_range():
    rule = rules.compile_rule({"kind": "package", "any_of": ["sgl-kernel<=0.3.21", "torch"],
                               "source": "t"}, "catalogue.moe.x.rules[0]", "x.yaml")
    assert rule.packages == ("sgl-kernel", "torch")
    assert rule.describe() == "package sgl-kernel <=0.3.21 | torch"


# --------------------------------------------------------------------------------------------
# a `verify` rule (probe=verify) reads quant and act_and_mul: both are in the memo key

def test_a_verify_failure_is_not_reused_for_another_quant_or_gating():
    from selector.api import Selector
    from selector.core.rules import VerifyFailure
    base = selector.load(["platform=cpu", "platform.packages.torch=2.13.0"])
    failed = {("moe", "emulation"): (VerifyFailure("nvfp4", True, "moe nvfp4 gated: boom"),)}
    sel = Selector(base.run_config, base.tree, verify=failed)
    gated = sel.select(op="moe", quant="nvfp4", activation="silu", act_and_mul=True)
    assert gated.selected is None
    assert [r.rule for r in gated.candidate("emulation").reasons] == ["verify"]
    # same activation and quant, other gating: the failed case does not apply
    assert sel.select(op="moe", quant="nvfp4", activation="silu",
                      act_and_mul=False).selected == "emulation"
    # same gating, other quant scheme
    assert sel.select(op="moe", quant="nvfp4_w4a16", activation="silu",
                      act_and_mul=True).selected == "emulation"


# --------------------------------------------------------------------------------------------
# explicit_only: a platform condition and a message, nothing else

@pytest.mark.parametrize("when,text", [
    (None, "must name devices or packages only"),
    ({"activation": ["gelu"]}, "must name devices or packages only"),
    ({"devices": ["12.x"], "activation": ["gelu"]}, "must name devices or packages only")])
def test_explicit_only_needs_a_platform_only_when(when, text):
    conf = {"kind": "explicit_only", "message": "ask for it", "source": "t"}
    if when is not None:
        conf["when"] = when
    with pytest.raises(SelectorError) as exc:
        rules.compile_rule(conf, "catalogue.linear.x.rules[0]", "x.yaml")
    assert "catalogue.linear.x.rules[0].when" in str(exc.value) and text in str(exc.value)


def test_explicit_only_needs_a_message_and_describes_its_platform():
    with pytest.raises(SelectorError) as exc:
        rules.compile_rule({"kind": "explicit_only", "when": {"devices": ["12.x"]},
                            "source": "t"}, "catalogue.linear.x.rules[0]", "x.yaml")
    assert "catalogue.linear.x.rules[0].message" in str(exc.value)
    rule = rules.compile_rule({"kind": "explicit_only", "when": {"devices": ["12.x"]},
                               "message": "ask for it", "source": "t"},
                              "catalogue.linear.x.rules[0]", "x.yaml")
    assert rule.describe() == "explicit_only where SM 12.x"
    r = rule.evaluate(None, _facts((12, 0)))
    assert (r.rule, r.message, r.severity) == ("opt_in", "ask for it", "error")


def test_explicit_only_does_not_hide_another_failure(tmp_path):
    """explicit_only's opt-in does not end the evaluation: a backend that also fails another
    rule here is rejected for that rule (a request by name would not run it either), not
    offered as an opt-in."""
    asked = ('description: "asked for"\nrank: 1\nrules:\n'
             '  - kind: explicit_only\n    when: {devices: ["12.x"]}\n'
             '    message: "ask for it by name"\n    source: "t"\n')
    conf = _backend(tmp_path / "a", "linear", "asked", asked)
    c = selector.load(SPARK, config_dirs=[conf]).select(op="linear").candidate("asked")
    assert c.status == "opt_in" and [r.message for r in c.reasons] == ["ask for it by name"]
    conf = _backend(tmp_path / "b", "linear", "asked",
                    asked + '  - kind: cuda\n    specifier: ">=99"\n    source: "t"\n')
    c = selector.load(SPARK, config_dirs=[conf]).select(op="linear").candidate("asked")
    assert c.status == "rejected"
    assert [(r.rule, r.final) for r in c.reasons] == [("cuda", False)], c.reasons


# --------------------------------------------------------------------------------------------
# the no-packages hint: presets only, the newest stack of each family, engines first

def test_no_packages_hint_names_the_newest_stack_of_each_family():
    from types import SimpleNamespace

    from selector.core.resolver import no_packages_hint
    # the presets' own `stack:` data, not their file names (which need not follow a pattern)
    stacks = [(n, {"family": f, "version": v}) for n, f, v in (
        ("mine", "mine", "x"), ("flashinfer_0_6_10", "flashinfer", "0.6.10"),
        ("vllm_0_32", "vllm", "0.32"), ("flashinfer_0_7_4", "flashinfer", "0.7.4"),
        ("vllm_0_33", "vllm", "0.33"), ("flashinfer_0_6_15", "flashinfer", "0.6.15"),
        ("sglang_0_5_23", "sglang", "0.5.23"), ("aaa_1_y", "aaa", "1"), ("aaa_1_x", "aaa", "1"),
        ("latest_vllm", "vllm", "0.40"))]
    hint = no_packages_hint(SimpleNamespace(source="preset", packages=()), stacks)
    assert hint is not None and (hint.kind, hint.severity) == ("no_packages", "warning")
    assert hint.data == {"add": ("stack=sglang_0_5_23", "stack=latest_vllm", "stack=aaa_1_y",
                                 "stack=flashinfer_0_7_4", "stack=mine")}
    # a detected machine lists what it has, even nothing: no hint; nor once a package is given
    assert no_packages_hint(SimpleNamespace(source="detected", packages=()), stacks) is None
    assert no_packages_hint(SimpleNamespace(source="preset", packages=(("torch", None),
                                                                        ("vllm", "0.33.0"))),
                            stacks) is None


def test_act_and_mul_reason_phrase_names_the_mode():
    rule = _rule(kind="act_and_mul", gated=["silu"], non_gated=["relu2"])

    class L:
        def __init__(self, activation, act_and_mul):
            self.activation, self.act_and_mul = activation, act_and_mul
    gated = rule.evaluate(L("relu2", True), None)
    assert gated.message == "runs relu2 only non-gated; this layer is gated (act_and_mul=true)"
    assert gated.need == "do not run relu2 gated"
    assert rule.evaluate(L("silu", False), None).need == "do not run silu non-gated"
    assert rule.evaluate(L("gelu", True), None) is None  # the activation rule's to report


@pytest.mark.parametrize("entry", [
    {"claim": "c", "reason": "  ", "source": "s"}, {"claim": "c", "reason": 5, "source": "s"},
    {"claim": "c", "reason": "r"}, {"claim": "c", "reason": "r", "source": "s", "x": "y"}, "c"])
def test_an_explained_drift_entry_has_three_non_empty_strings(entry):
    with pytest.raises(SelectorError) as exc:
        rules._explained([entry], "catalogue.moe.x.rules[0].explained", "x.yaml")
    assert "catalogue.moe.x.rules[0].explained[0]" in str(exc.value)
    assert "each a non-empty string" in str(exc.value)


def test_the_kinds_table_names_parameter_types_and_optional_fields():
    from selector.core.rules import kinds_markdown
    table = kinds_markdown()
    assert "| `activation` | `values`: a list of strings |" in table
    assert "`specifier`: a string (optional)" in table
    # each row says what its kind checks: the first paragraph of the class's docstring, on one
    # line (a declared kind and one the resolver adds)
    assert ("| `dim`: a string, `multiple_of`: an integer (optional), `min`: an integer "
            "(optional) | A layer dimension must be a multiple of `multiple_of` and at least "
            "`min` (either or both; a dimension the layer does not give passes). | `rejected` |"
            ) in table
    assert ("| The chosen engine (`engine=`) does not offer the backend: not applicable, nothing "
            "else is checked. | `not_applicable` (ends the evaluation) |") in table


# --------------------------------------------------------------------------------------------
# "would rank first": the ranking's own order, names breaking a tie of ranks

@pytest.mark.parametrize("name,noted", [("aaa_opt", True), ("zzz_opt", False)])
def test_an_opt_in_preference_tied_with_the_winner_follows_the_name_order(tmp_path, name, noted):
    _backend(tmp_path, "linear", "mmm_auto", 'description: "auto"\nrank: 7\nrules: []\n')
    conf = _backend(tmp_path, "linear", name, (
        'description: "opt-in"\nrank: 900\n'
        'opt_in: {reason: "only on request", source: "test"}\n'
        "preference:\n  - when: {max_num_tokens: 63}\n    rank: 7\n"
        '    reason: "small batches"\n    source: "test"\nrules: []\n'))
    sel = selector.load(SPARK + ["policy.exclude=[flashinfer_cutlass,flashinfer_b12x,"
                                 "flashinfer_cutedsl,flashinfer_trtllm,flashinfer_cudnn,cutlass,"
                                 "marlin,b12x,emulation]"], config_dirs=[conf])
    d = sel.select(op="linear", num_tokens=16)
    assert d.selected == "mmm_auto"
    assert [n.backend for n in d.notes_of("opt_in_would_win")] == ([name] if noted else []), \
        d.note_data


# --------------------------------------------------------------------------------------------
# a requested backend the engine does not offer: the engine's reason, not "does not implement"

def test_a_requested_backend_the_engine_lacks_is_explained_by_the_engine():
    base = ["platform=b200", "stack=sglang_0_5_23", "engine=sglang", "policy.strict=false"]
    one = selector.load(base + ["policy.moe_backend=emulation"]).select(op="moe")
    got = one.note_data[0]
    assert (got.kind, got.data["requested"], got.data["chose"]) == (
        "request_not_applicable", ("emulation",), one.selected)
    assert got.data["reason"] == {"rule": "engine", "message": "SGLang 0.5.23 has no emulation "
                                  "backend", "source": got.data["reason"]["source"]}
    # several requested: the layer, not the first one's engine reason
    two = selector.load(base + ["policy.moe_backend=[emulation,flashinfer_cutlass]"]).select(
        op="moe", quant="unquantized")
    got = two.note_data[0]
    assert (got.kind, got.data["requested"], got.data["chose"], got.data["reason"]) == (
        "request_not_applicable", ("emulation", "flashinfer_cutlass"), None, None)
    assert (got.data["quant"], got.data["op"]) == ("unquantized", "moe")


def test_a_verify_failure_keys_the_memo_by_itself(tmp_path):
    """A user backend with no layer rules: only the verify rule puts quant and act_and_mul in
    the memo key."""
    from selector.api import Selector
    from selector.core.rules import VerifyFailure
    conf = _backend(tmp_path, "moe", "plain", 'description: "no rules"\nrank: 1\nrules: []\n')
    base = selector.load(SPARK, config_dirs=[conf])
    failed = {("moe", "plain"): (VerifyFailure("nvfp4", True, "moe nvfp4 gated: boom"),)}
    sel = Selector(base.run_config, base.tree, verify=failed)
    first = sel.select(quant="nvfp4", activation="silu", act_and_mul=True)
    assert first.candidate("plain").status == "rejected" and first.selected != "plain"
    assert sel.select(quant="nvfp4", activation="silu", act_and_mul=False).selected == "plain"
    assert sel.select(quant="nvfp4_w4a16", activation="silu",
                      act_and_mul=True).selected == "plain"


# --------------------------------------------------------------------------------------------
# the platform line: a preset by name, a detected machine by its GPU

def test_the_platform_line_names_a_preset_or_the_detected_gpu():
    from selector.inspect.environment import Environment, Gpu

    def detect(names, gpu="NVIDIA RTX PRO 6000"):
        return Environment((12, 0), gpu, None, {n: None for n in names}, Gpu(gpu, (12, 0)),
                           "fake", ())
    found = str(selector.load(["platform=auto"], detect=detect).select()).splitlines()[1]
    assert found.startswith("platform: detected NVIDIA RTX PRO 6000 (SM 12.0, no CUDA)"), found
    preset = str(selector.load(["platform=b200"]).select()).splitlines()[1]
    assert preset.startswith("platform: b200 (SM 10.0, no CUDA)"), preset


def test_type_names_of_rule_parameters():
    from typing import Optional, Tuple
    assert rules._type_name(Tuple[str, ...]) == "a list of strings"
    assert rules._type_name(Tuple[float, ...]) == "a list of float values"
    assert rules._type_name(Optional[int]) == "an integer"
    assert rules._type_name(bool) == "a boolean (true or false)"


# --------------------------------------------------------------------------------------------
# deep probe results (probe=deep): a failed probe rejects with its finding; a passed one does not

def test_a_failed_deep_probe_rejects_its_backend_with_the_finding():
    from selector.core.resolver import Resolver
    sel = selector.load(SPARK + ["policy.moe_backend=flashinfer_b12x"])
    layer = sel.layer(activation="silu", act_and_mul=True)
    assert "flashinfer.b12x_moe" in sel.run_config.catalogue.get("moe", "flashinfer_b12x").probes
    ok = Resolver(sel.run_config, probes={"flashinfer.b12x_moe": (True, "imported")})
    assert ok.decide(layer).selected == "flashinfer_b12x"
    bad = Resolver(sel.run_config, probes={"flashinfer.b12x_moe": (False, "ImportError: no triton"),
                                           "unrelated.probe": (False, "not this backend's")})
    d = bad.decide(layer)
    c = d.candidate("flashinfer_b12x")
    assert d.selected is None and c.status == "rejected"
    assert [(r.rule, r.message) for r in c.reasons] == [
        ("probe", "deep probe flashinfer.b12x_moe failed: ImportError: no triton")]


def test_show_bounds_a_value_at_its_limit():
    from selector.core.errors import show
    assert show("a" * 198) == repr("a" * 198)  # 200 characters: whole
    assert show("a" * 199) == repr("a" * 199)[:197] + "..."
    assert len(show("a" * 199)) == 200
    assert show(12, limit=2) == "12"


def test_a_decision_holds_the_typed_layer_and_its_json_object_is_unchanged():
    """Decision.layer is the schema.Layer that was decided (read by attribute); the JSON's
    `layer` is its to_dict(), every key in Layer's field order; a Layer has no mapping view (its
    keys are read as attributes, spelled as strings only by to_dict); a mapping handed to Decision
    is validated into a Layer."""
    from selector.core.decision import Decision
    from selector.core.layer import LAYER_KEYS
    from selector.core.schema import Layer
    sel = selector.load(SPARK)
    layer = sel.layer(op="moe", activation="relu2", act_and_mul=False, num_experts=128)
    d = sel.decide(layer)
    assert d.layer is layer and isinstance(d.layer, Layer)
    assert d.layer.activation == "relu2" and d.layer.num_experts == 128
    js = d.to_dict()["layer"]
    assert list(js) == list(LAYER_KEYS) and js == dataclasses.asdict(layer)
    assert d.layer.to_dict() == js and d.layer != js  # equal to its JSON object only as JSON
    with pytest.raises(TypeError):
        d.layer["op"]  # type: ignore[index]
    assert not hasattr(d.layer, "get") and not hasattr(d.layer, "keys")
    again = Decision(dict(js), d.platform, d.requested, d.selected, d.candidates, d.note_data)
    assert isinstance(again.layer, Layer) and again.layer == layer
    assert again.to_dict()["layer"] == js and str(again).splitlines()[0] == str(d).splitlines()[0]
    with pytest.raises(SelectorError, match="layer.activation"):
        Decision(dict(js, activation="swish"), d.platform, d.requested, d.selected,
                 d.candidates, d.note_data)


def test_parallel_sizes_default_to_one_and_are_bounded():
    from selector.core.parallel import MAX_PARALLEL, Parallel, make_parallel
    assert Parallel().to_dict() == {"tp": 1, "dp": 1, "ep": 1} == make_parallel({}).to_dict()
    assert make_parallel({"tp": 2, "dp": 3, "ep": 4}) == Parallel(tp=2, dp=3, ep=4)
    assert MAX_PARALLEL == 65536
    assert make_parallel({k: 65536 for k in ("tp", "dp", "ep")}).to_dict() == {
        "tp": 65536, "dp": 65536, "ep": 65536}
    for key in ("tp", "dp", "ep"):
        for bad in (0, 65537, True, 2.0, "2"):
            with pytest.raises(SelectorError, match=rf"parallel\.{key}.*from 1 to 65536"):
                make_parallel({key: bad})


def test_bad_input_exits_2_naming_the_key(capsys):
    from selector.commands.cli import main
    assert main(["explain", "platform=cpu", "layer.top_kk=8"]) == 2
    err = capsys.readouterr().err
    assert "top_kk" in err and "did you mean 'top_k'" in err and "Traceback" not in err


def test_the_fp8_hint_is_for_layer_quant_fp8_only():
    sel = selector.load(["platform=cpu"])
    hint = "`fp8` names four schemes"
    with pytest.raises(SelectorError, match=hint):
        sel.select(op="moe", quant="fp8")
    for bad in (dict(quant="fp9"), dict(activation="fp8")):
        with pytest.raises(SelectorError) as exc:
            sel.select(op="moe", **bad)
        assert hint not in str(exc.value)
