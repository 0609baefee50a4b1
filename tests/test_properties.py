"""Property tests (hypothesis) over platform x packages x layer x policy x probe findings.

The catalogue is composed once through Hydra; platforms, layers and policies are then built
in-process (selector.core.model objects) so that thousands of combinations run in seconds. Every
decision is checked against the rules themselves (`rule.evaluate(layer, facts)`), computed here
independently of the Resolver's precomputed platform/layer split:

- a selected backend implements the layer, fails none of its error rules and no deep probe
  (an opt-in backend only when it was requested by name);
- every candidate has the status its rules give, and a rejected one lists *every* failed rule;
  every rejected, opt-in and not-applicable candidate carries at least one reason;
- candidates are every backend of the op, in the documented preference order;
- `auto` selects the first eligible candidate; an explicit request is honoured, reported
  `not_applicable` (automatic selection decides, with a note), or refused with reasons: under
  `policy.strict=true` it is never silently replaced;
- the decision does not depend on the order of the catalogue, of the packages, of backend files
  on disk, or of overrides that do not conflict.
"""
from __future__ import annotations

import itertools
import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
import yaml
from fuzz_support import SCALE, SETTINGS, _private_cache, _report  # noqa: F401 (fixtures)
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

import selector
from selector.config import read_catalogue
from selector.config.catalogues import discover as discover_tree
from selector.core import schema
from selector.core.decision import Decision
from selector.core.model import Catalogue, Layer, Platform, Policy, RunConfig, make_catalogue, make_layer, make_platform
from selector.core.resolver import Resolver, Verdict
from selector.core.rules import reason_rules

pytestmark = pytest.mark.slow  # subprocess / fuzz suite: `pytest -m "not slow"` skips it

REPO = Path(__file__).resolve().parent.parent
OUTCOMES: Counter = Counter()  # reported by benchmarks/fuzz.py


# ---------------------------------------------------------------------------------------------
# The catalogue, once, and the values its rules talk about

_STATE: Dict[str, object] = {}


def catalogue() -> Catalogue:
    if "cat" not in _STATE:
        os.environ.setdefault("SELECTOR_CACHE_DIR", "/tmp/selector-props-cache")
        _STATE["cat"] = selector.load(["platform=cpu"]).catalogue
    return _STATE["cat"]  # type: ignore[return-value]


def _neighbours(v: Version) -> List[str]:
    rel = list(v.release) + [0] * (3 - len(v.release))
    out = {str(v), f"{rel[0]}.{rel[1]}.{rel[2] + 1}", f"{rel[0]}.{rel[1] + 1}",
           f"{rel[0]}.{rel[1]}.{rel[2]}.post1", f"{rel[0]}.{rel[1]}.{rel[2]}rc1"}
    if rel[2] > 0:
        out.add(f"{rel[0]}.{rel[1]}.{rel[2] - 1}")
    elif rel[1] > 0:
        out.add(f"{rel[0]}.{rel[1] - 1}.9")
    return sorted(out)


def _spec_versions(spec) -> List[str]:
    out: List[str] = []
    for s in spec:
        text = s.version.replace(".*", "")
        try:
            out.extend(_neighbours(Version(text)))
        except InvalidVersion:
            pass
    return out


def interesting() -> Tuple[Dict[str, List[str]], List[str], List[Tuple[int, int]], List[str]]:
    """(package -> versions, cuda versions, capabilities, probe names) the catalogue mentions."""
    if "interesting" in _STATE:
        return _STATE["interesting"]  # type: ignore[return-value]
    pkgs: Dict[str, set] = {canonicalize_name(n): set() for n in schema.CORE_PACKAGES}
    cuda = {"11.8", "12.4", "12.8", "12.9", "13.0", "13.1"}
    caps = {(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0),
            (12, 1)}
    probes = set()
    for bs in catalogue().backends.values():
        for b in bs:
            probes.update(b.probes)
            conds = [r.when for r in b.rules] + [p.when for p in b.preference]
            for c in conds:
                for p in c.get("packages") or ():
                    pkgs.setdefault(p.name, set()).update(_spec_versions(p.spec))
                for d in c.get("devices") or ():
                    caps.add((d.major, d.minor or 0))
                    caps.add((d.major, (d.minor or 0) + 1))
            for r in b.rules:
                for d in tuple(getattr(r, "devices", ())):
                    caps.add((d.major, d.minor or 0))
                    caps.add((d.major, (d.minor or 0) + 1))
                if r.kind == "cuda":
                    cuda.update(_spec_versions(r.spec))
                for n in getattr(r, "names", ()):
                    pkgs.setdefault(n, set()).update(_spec_versions(r.spec))
                req = getattr(r, "req", None)
                if req is not None:
                    pkgs.setdefault(req.name, set()).update(_spec_versions(req.spec))
    for n in pkgs:
        pkgs[n].update({"0.1", "1.0.0", "2.11.0+cu130"})
    out = ({n: sorted(v) for n, v in sorted(pkgs.items())}, sorted(cuda), sorted(caps),
           sorted(probes))
    _STATE["interesting"] = out
    return out


# ---------------------------------------------------------------------------------------------
# Strategies

def versions_of(name: str) -> st.SearchStrategy:
    known = interesting()[0][name]
    rand = st.tuples(st.integers(0, 15), st.integers(0, 20), st.integers(0, 20)).map(
        lambda t: ".".join(map(str, t)))
    return st.one_of(st.none(), st.sampled_from(known), rand)


@st.composite
def platforms(draw) -> Platform:
    pkgs_known, cudas, caps, _ = interesting()
    cap = draw(st.one_of(st.none(), st.sampled_from(caps), st.sampled_from(caps),
                         st.tuples(st.integers(0, 15), st.integers(0, 9))))
    cuda = draw(st.one_of(st.none(), st.sampled_from(cudas), st.sampled_from(cudas)))
    # One hypothesis-controlled Random for the package versions: drawing ~20 versions one by
    # one costs hypothesis more than the decision itself.
    rnd = draw(st.randoms(use_true_random=False))
    packages = {}
    for name, known in pkgs_known.items():
        pick = rnd.random()
        if pick < 0.2:
            packages[name] = None
        elif pick < 0.9:
            packages[name] = Version(rnd.choice(known))
        else:
            packages[name] = Version(f"{rnd.randrange(16)}.{rnd.randrange(21)}.{rnd.randrange(21)}")
    return Platform("fuzz", cap, None if cuda is None else Version(cuda),
                    None, tuple(sorted(packages.items())), "fuzz")


LAYERS = st.builds(
    Layer,
    op=st.sampled_from(schema.OPS),
    quant=st.sampled_from(("nvfp4",) * 5 + ("nvfp4_w4a16",) * 3 + schema.QUANTS),
    activation=st.sampled_from(schema.ACTIVATIONS),
    act_and_mul=st.booleans(),
    ep_size=st.sampled_from([1, 1, 2, 8, 64]),
    tp_size=st.sampled_from([1, 2, 8]),
    swiglu_limit=st.one_of(st.none(), st.sampled_from([7.0, 10.0])),
    num_tokens=st.one_of(st.none(), st.integers(1, 1 << 16)),
    dtype=st.sampled_from(schema.DTYPES),
    hidden_size=st.one_of(st.none(), st.sampled_from([2688, 4096, 7168, 100, 2880]),
                          st.integers(1, 1 << 15)),
    intermediate_size=st.one_of(st.none(), st.sampled_from([1856, 2048, 256, 100]),
                                st.integers(1, 1 << 15)),
    num_experts=st.one_of(st.none(), st.sampled_from([8, 128, 256, 512])),
    top_k=st.one_of(st.none(), st.sampled_from([1, 2, 6, 8])),
    all2all=st.one_of(st.none(), st.sampled_from(schema.ALL2ALL)),
)


@st.composite
def policies(draw) -> Policy:
    cat = catalogue()
    auto = ("auto",) * 6
    return Policy(draw(st.sampled_from(auto + cat.names("moe"))),
                  draw(st.sampled_from(auto + cat.names("linear"))),
                  draw(st.booleans()))


@st.composite
def probe_findings(draw) -> Optional[Dict[str, Tuple[bool, str]]]:
    names = interesting()[3]
    if not names or draw(st.booleans()):
        return None
    failed = draw(st.sets(st.sampled_from(names), max_size=3))
    return {n: (n not in failed, "fuzzed failure" if n in failed else "ok") for n in names}


# ---------------------------------------------------------------------------------------------
# The expected outcome, computed from the rules directly

def expected_order(cat: Catalogue, layer: Layer, facts) -> List[str]:
    def key(b):
        rank = next((p.rank for p in b.preference if p.when.holds(layer, facts)), b.rank)
        return (rank, b.name)
    return [b.name for b in sorted(cat.backends[layer.op], key=key)]


def expected_status(b, layer: Layer, facts, probes) -> Tuple[str, List[dict]]:
    """(status, reasons) from the rules; `implements` or a failed quant rule means the backend
    does not implement the layer (not_applicable, automatic selection decides)."""
    if layer.quant not in b.implements:
        return "not_applicable", [{"rule": "quant", "implements": True}]
    failures = []
    opt_in = [{"rule": "opt_in", "message": b.opt_in.reason, "source": b.opt_in.source}] \
        if b.opt_in else []
    for rule in b.rules:
        r = rule.evaluate(layer, facts) if rule.when.holds(layer, facts) else None
        if r is None or r.severity == "warning":
            continue
        if r.rule == "opt_in":  # an explicit_only rule: opt-in where its `when` holds
            opt_in.append(r.to_dict())
            continue
        failures.append(r.to_dict())
    for name in b.probes:
        if probes and name in probes and not probes[name][0]:
            failures.append({"rule": "probe", "probe": name})
    if failures:
        if any(r["rule"] == "quant" for r in failures):
            return "not_applicable", failures
        return "rejected", failures
    if opt_in:
        return "opt_in", opt_in
    return "eligible", []


def _check_candidates(d: Decision, expected: dict) -> None:
    """Each candidate's status and reasons are the expected ones (every failed rule, not the
    first), each reason names a known rule, a message and a source."""
    for c in d.candidates:
        status, reasons = expected[c.backend]
        got = [r.to_dict() for r in c.reasons]
        if c.status == "selected":
            assert status in ("eligible", "opt_in"), (c.backend, status, reasons)
            continue
        assert c.status == status, (c.backend, c.status, status, got, reasons)
        if status in ("rejected", "opt_in", "not_applicable"):
            assert c.reasons, f"{c.backend} is {status} without a reason"
        if reasons and not reasons[0].get("implements"):  # every failed rule, not the first
            want = Counter(json.dumps(r, sort_keys=True) for r in reasons if "probe" not in r)
            have = Counter(json.dumps(r, sort_keys=True) for r in got
                           if not r["message"].startswith("deep probe "))
            assert have == want, (c.backend, got, reasons)
            probes_failed = sum(1 for r in reasons if "probe" in r)
            assert len(got) == sum(want.values()) + probes_failed
        for r in got:
            assert r["rule"] in reason_rules() and r["message"] and r["source"]


def _check_selected(model: RunConfig, layer: Layer, probes, d: Decision, requested: str) -> None:
    """The selected backend breaks none of its own rules, is no opt-in chosen automatically,
    and failed no probe."""
    cat, facts, policy = model.catalogue, model.platform.facts, model.policy
    b = cat.get(layer.op, d.selected)
    assert layer.quant in b.implements
    for rule in b.rules:
        r = rule.evaluate(layer, facts) if rule.when.holds(layer, facts) else None
        assert r is None or r.severity == "warning" or (
            r.rule == "opt_in" and requested == d.selected), \
            f"{d.selected} selected although rule {rule.key} fails: {r.message}"
    assert b.opt_in is None or requested == d.selected or \
        d.selected in policy.allow_opt_in, f"opt-in {d.selected} chosen automatically"
    for name in b.probes:
        assert not (probes and name in probes and not probes[name][0])


def _check_request(d: Decision, expected: dict, auto, requested: str, strict: bool) -> None:
    """What was requested is what was selected, or the first eligible backend with the note
    that says why (never silently replaced under a strict policy)."""
    if requested == "auto":
        assert d.selected == auto
        return
    status = expected[requested][0]
    if status == "not_applicable":
        assert d.selected == auto
        assert [n.data["requested"] for n in d.notes_of("request_not_applicable")] == [
            (requested,)]
    elif status in ("eligible", "opt_in"):
        assert d.selected == requested
    elif strict:  # never silently replaced
        assert d.selected is None
        assert d.candidate(requested).status == "rejected" and d.candidate(requested).reasons
        assert [(n.backend, n.severity) for n in d.notes_of("request_refused")] == [
            (requested, "error")]
    else:
        assert d.selected == auto
        assert [(n.backend, n.data["chose"]) for n in d.notes_of("fallback")] == [
            (requested, auto)]
        assert "fallback" in d.marks


def check_invariants(model: RunConfig, layer: Layer, probes, render: bool = True) -> dict:
    cat, facts, policy = model.catalogue, model.platform.facts, model.policy
    d = Resolver(model, probes).decide(layer)
    out = d.to_dict()
    json.dumps(out)  # serialisable
    if render:
        str(d)

    names = [c.backend for c in d.candidates]
    assert names == expected_order(cat, layer, facts), "candidates: every backend, in order"

    expected = {b.name: expected_status(b, layer, facts, probes) for b in cat.backends[layer.op]}
    auto = next((n for n in names if expected[n][0] == "eligible"), None)
    requested = ",".join(policy.requested(layer.op))  # a list is joined by ","
    assert d.requested == requested
    _check_candidates(d, expected)

    selected = [c.backend for c in d.candidates if c.status == "selected"]
    assert selected == ([d.selected] if d.selected else [])
    if d.selected is not None:
        _check_selected(model, layer, probes, d, requested)

    OUTCOMES["properties (decisions checked)",
             ("requested " if requested != "auto" else "auto, ") +
             ("selected" if d.selected else "nothing selected")] += 1
    _check_request(d, expected, auto, requested, policy.strict)
    return out


# ---------------------------------------------------------------------------------------------
# Properties

@settings(max_examples=400 * SCALE, **SETTINGS)
@given(platform=platforms(), layer=LAYERS, policy=policies(), probes=probe_findings())
def test_decision_invariants(platform, layer, policy, probes):
    cat = catalogue()
    model = RunConfig(cat, platform, layer, policy, "none")
    out = check_invariants(model, layer, probes)
    # Deterministic within a process: a second Resolver gives the same JSON.
    assert Resolver(model, probes).decide(layer).to_dict() == out


@settings(max_examples=100 * SCALE, **SETTINGS)
@given(platform=platforms(), layers=st.lists(LAYERS, min_size=1, max_size=6),
       policy=policies())
def test_layers_do_not_influence_each_other(platform, layers, policy):
    """A Resolver keeps per-platform state: deciding other layers first changes nothing."""
    model = RunConfig(catalogue(), platform, layers[0], policy, "none")
    shared = Resolver(model)
    for layer in layers:
        assert shared.decide(layer).to_dict() == Resolver(model).decide(layer).to_dict()


@settings(max_examples=100 * SCALE, **SETTINGS)
@given(platform=platforms(), layer=LAYERS, policy=policies(), seed=st.integers(0, 2 ** 32))
def test_independent_of_catalogue_and_package_order(platform, layer, policy, seed):
    """Backends read in any order, and packages given in any order, decide the same."""
    catalogue()  # warms the shared state
    rng = random.Random(seed)
    raw = _STATE.get("raw")
    if raw is None:
        tree = discover_tree()
        raw = _STATE["raw"] = (read_catalogue(tree), dict(tree.backend_files))
    data, files = raw
    shuffled = {}
    for op in rng.sample(list(data), len(data)):
        names = list(data[op])
        rng.shuffle(names)
        shuffled[op] = {n: data[op][n] for n in names}
    files = dict(rng.sample(list(files.items()), len(files)))
    cat2 = make_catalogue(shuffled, files)
    assert [b.name for b in cat2.backends["moe"]] == [b.name for b in
                                                        make_catalogue(data, files).backends["moe"]]
    pk = list(platform.packages)
    rng.shuffle(pk)
    conf = {"preset": "fuzz",
            "capability": None if platform.capability is None else
            "{}.{}".format(*platform.capability),
            "cuda": None if platform.cuda is None else str(platform.cuda),
            "packages": {n: (None if v is None else str(v)) for n, v in pk}}
    plat2 = make_platform(conf, [])
    a = Resolver(RunConfig(make_catalogue(data, dict(sorted(files.items()))), platform, layer,
                       policy, "none")).decide(layer).to_json()
    b = Resolver(RunConfig(cat2, plat2, layer, policy, "none")).decide(layer).to_json()
    # make_platform keeps the preset name as source; the packaged Platform says "fuzz" too
    assert a == b


def test_explicit_request_matrix():
    """Every backend requested by name, strict and not, on every preset platform (bare, and
    with a full kernel stack): the request is honoured, not applicable, or refused with
    reasons; never silently replaced under strict."""
    cat = catalogue()
    layers = [Layer(), Layer(activation="relu2", act_and_mul=False),
              Layer(op="linear", hidden_size=4160), Layer(op="linear", quant="nvfp4_w4a16"),
              Layer(quant="int8"),
              Layer(quant="nvfp4_w4a16", activation="swigluoai", swiglu_limit=7.0, ep_size=8)]
    pkgs = {"flashinfer-python": "0.7.4", "nvidia-cutlass-dsl": "4.8.1", "triton": "3.6.0",
            "vllm": "0.32.0", "torch": "2.11.0+cu130"}
    n = 0
    presets = sorted((REPO / "conf" / "platform").glob("*.yaml"))
    assert len(presets) >= 9
    for path in presets:
        conf = yaml.safe_load(path.read_text()) or {}
        if conf.get("preset") == "auto":
            continue
        for extra in ({}, {"cuda": "13.0", "packages": pkgs}):
            platform = make_platform({**conf, **extra}, list(interesting()[0]))
            for op in schema.OPS:
                for name in ("auto",) + cat.names(op):
                    for strict in (True, False):
                        pol = Policy(name if op == "moe" else "auto",
                                     name if op == "linear" else "auto", strict)
                        model = RunConfig(cat, platform, Layer(), pol, "none")
                        for layer in layers:
                            check_invariants(model, layer, None, render=False)
                            n += 1
    assert n > 1000


def _presets(group: str) -> List[dict]:
    key = f"presets:{group}"
    if key not in _STATE:
        _STATE[key] = [yaml.safe_load(p.read_text()) or {}
                       for p in sorted((REPO / "conf" / group).glob("*.yaml"))]
    return _STATE[key]  # type: ignore[return-value]


@settings(max_examples=250 * SCALE, **SETTINGS)
@given(data=st.data(), policy=policies(), probes=probe_findings())
def test_preset_combinations(data, policy, probes):
    """Realistic inputs: a platform preset, a stack preset (or none) with one package version
    nudged, and a layer preset with one field changed."""
    plat = data.draw(st.sampled_from([p for p in _presets("platform")
                                      if p.get("preset") != "auto"]))
    stack = data.draw(st.sampled_from(_presets("stack")))
    conf = {**plat, **{k: v for k, v in stack.items() if k != "packages"},
            "packages": dict(stack.get("packages") or {})}
    pkgs_known = interesting()[0]
    name = data.draw(st.sampled_from(sorted(pkgs_known)))
    conf["packages"][name] = data.draw(st.one_of(st.none(), st.sampled_from(pkgs_known[name])))
    platform = make_platform(conf, list(pkgs_known))
    layer_conf = dict(data.draw(st.sampled_from(_presets("layer"))))
    field = data.draw(st.sampled_from(["ep_size", "swiglu_limit", "quant", "activation",
                                       "hidden_size", "num_experts", "all2all", "none"]))
    tweak = {"ep_size": st.sampled_from([1, 2, 8]), "swiglu_limit": st.sampled_from([None, 7.0]),
             "quant": st.sampled_from(schema.NVFP4_QUANTS + ("int8",)),
             "activation": st.sampled_from(schema.ACTIVATIONS),
             "hidden_size": st.sampled_from([4096, 4160, 100]),
             "num_experts": st.sampled_from([None, 128, 512]),
             "all2all": st.sampled_from((None,) + schema.ALL2ALL), "none": st.none()}[field]
    if field != "none":
        layer_conf[field] = data.draw(tweak)
    layer = make_layer(layer_conf)
    check_invariants(RunConfig(catalogue(), platform, layer, policy, "none"), layer, probes)


def test_the_checker_catches_a_broken_resolver(monkeypatch):
    """The invariants are not vacuous: a Resolver that reports only the first failed rule, or
    that ignores opt-in, is caught."""
    cat = catalogue()
    platform = make_platform({"preset": "dgx_spark", "capability": "12.1"},
                             list(interesting()[0]))
    model = RunConfig(cat, platform, Layer(), Policy("auto", "auto", True), "none")
    check_invariants(model, Layer(), None)
    real = Resolver.evaluate

    def first_only(self, b, layer):
        status, reasons, warnings = real(self, b, layer)
        return Verdict(status, reasons[:1], warnings)
    monkeypatch.setattr(Resolver, "evaluate", first_only)
    with pytest.raises(AssertionError):
        check_invariants(model, Layer(), None)

    def opt_in_ignored(self, b, layer):
        status, reasons, warnings = real(self, b, layer)
        return Verdict("eligible", (), warnings) if status == "opt_in" else \
            Verdict(status, reasons, warnings)
    monkeypatch.setattr(Resolver, "evaluate", opt_in_ignored)
    full = make_platform({"preset": "dgx_spark", "capability": "12.1", "cuda": "13.0",
                          "packages": {"flashinfer-python": "0.7.4",
                                       "nvidia-cutlass-dsl": "4.8.1", "triton": "3.6.0"}},
                         list(interesting()[0]))
    layer = Layer(op="linear")
    with pytest.raises(AssertionError):
        for lay in (Layer(activation="relu2", act_and_mul=False), Layer(), layer):
            check_invariants(RunConfig(cat, full, lay, Policy("auto", "auto", True), "none"),
                             lay, None)


# ---------------------------------------------------------------------------------------------
# Through Hydra: override order and file listing order

BASE_OVERRIDES = ["platform=dgx_spark", "stack=flashinfer_0_7_4", "layer=nemotron_moe",
                  "layer.ep_size=2", "policy.moe_backend=flashinfer_b12x", "policy.strict=false",
                  "platform.packages.vllm=0.32.0", "layer.num_tokens=64"]


def _explain(overrides, config_dirs=()) -> str:
    sel = selector.load(list(overrides), config_dirs=list(config_dirs))
    return sel.default().to_json()


@settings(max_examples=6 * SCALE, **SETTINGS)
@given(perm=st.permutations(BASE_OVERRIDES))
def test_override_order_does_not_matter(perm):
    """Non-conflicting overrides in any order (group and key overrides mixed) compose alike;
    every permutation is a cold Hydra compose (the cache is keyed by the override list)."""
    want = _STATE.get("base")
    if want is None:
        want = _STATE["base"] = _explain(BASE_OVERRIDES)
    assert _explain(perm) == want


def test_override_order_linear_and_policy():
    base = ["platform=rtx_5090", "stack=flashinfer_0_6_11", "layer=dense_linear",
            "policy.linear_backend=flashinfer-b12x", "layer.hidden_size=4096"]
    want = _explain(base)
    for perm in itertools.islice(itertools.permutations(base), 1, None, 37):
        assert _explain(perm) == want


def _user_tree(root: Path, order: List[Path]) -> Path:
    """A user config dir whose backend files are created in the given order, with ranks that
    tie with packaged backends (the tie is broken by name, never by listing order)."""
    d = root / "conf"
    for src in order:
        rel = src.relative_to(REPO / "conf" / "backend")
        dst = d / "backend" / rel.parent / f"x_{rel.stem}.yaml"
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = yaml.safe_load(src.read_text())
        data.pop("entry_point", None)
        data.pop("probes", None)
        data.pop("engines", None)  # two backends of an op may not claim one engine name
        dst.write_text(yaml.safe_dump(data, sort_keys=False))
    return d


def test_independent_of_file_listing_order(tmp_path, monkeypatch):
    files = sorted((REPO / "conf" / "backend").rglob("*.yaml"))
    a = _user_tree(tmp_path / "a", files)
    b = _user_tree(tmp_path / "b", list(reversed(files)))
    overrides_list = [["platform=dgx_spark", "stack=flashinfer_0_7_4", "layer=nemotron_moe"],
                      ["platform=b200", "stack=vllm_0_32", "layer=dense_linear"],
                      ["platform=rtx_5090", "stack=flashinfer_0_6_15", "layer=qwen_moe"]]
    outs_a = [_explain(o, [a]) for o in overrides_list]
    outs_b = [_explain(o, [b]) for o in overrides_list]
    assert outs_a == outs_b
    # Directory iteration reversed (as another file system might list it): same decisions.
    real_iterdir, real_rglob = Path.iterdir, Path.rglob
    monkeypatch.setattr(Path, "iterdir", lambda self: iter(sorted(real_iterdir(self),
                                                                  reverse=True)))
    monkeypatch.setattr(Path, "rglob", lambda self, pat: iter(sorted(real_rglob(self, pat),
                                                                     reverse=True)))
    monkeypatch.setenv("SELECTOR_NO_CACHE", "1")
    assert [_explain(o, [a]) for o in overrides_list] == outs_a
    tree = discover_tree([a])
    assert len(tree.backend_files) == 2 * len(files)
