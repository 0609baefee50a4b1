"""`selector tune` and `policy.preference=measured` (docs/tuning.md).

End to end on the CPU: tune a small NVFP4 linear layer with two correct backends (selector's
emulation, and tests/tune_backends' slow_emulation: emulation plus a sleep, ranked first), write
the profile, then `explain policy.profile=...` picks the measured fastest and names the
measurement; a profile of another machine changes nothing; corrupt or hostile profile files exit
2 naming the file and the key. In-process: the profile model (schema, buckets, order), the
resolver's ranking and its memo, the statistics; and two gloo ranks sharing one profile."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import REPO, assert_clean_error, child_env, cli_env, run_cli, run_cli_many
from helpers import load as cached_load
from hypothesis import given, settings
from hypothesis import strategies as st
from json_schema import validate

import selector
from selector.core import profile as prof
from selector.core.errors import SelectorError
from selector.inspect import tuning

pytestmark = pytest.mark.slow  # child processes run every backend: CI's `-m slow` step

TUNE = Path(__file__).resolve().parent / "tune_backends"
CONF, SITE = TUNE / "conf", TUNE / "site"
SHAPE = ["layer=dense_linear", "layer.hidden_size=256", "layer.intermediate_size=256"]
LAYER = dict(op="linear", quant="nvfp4", activation="silu", act_and_mul=False, ep_size=1,
             tp_size=1, dtype="bfloat16", hidden_size=256, intermediate_size=256,
             swiglu_limit=None, num_experts=None, top_k=None, all2all=None,
             act_scale=None, routing=None, quant_method=None, dp_size=None)


# ---------------------------------------------------------------------------------------------
# The profile model

@given(st.integers(1, prof.MAX_TOKENS))
def test_a_bucket_is_the_smallest_power_of_two_at_or_above(n):
    b = prof.bucket(n)
    assert b >= n and b & (b - 1) == 0 and (b == 1 or b // 2 < n)


def _timing(med, lo=None, hi=None, n=8):
    return prof.Timing(med, lo if lo is not None else med * 0.9, hi if hi is not None else med * 1.1, n)


def _profile(key, cells):
    return prof.Profile(key, tuple(prof.Cell(dict(LAYER, num_tokens=t), t, times, {})
                                   for t, times in cells), {"warmup": 1}, "now")


KEY = {"gpu": None, "capability": None, "driver": None, "cuda": None,
       "packages": {"torch": "2.13.0"}, "selector": "0.1.0", "machine": "x86_64"}


def test_a_profile_round_trips_through_its_file(tmp_path):
    p = _profile(KEY, [(128, {"emulation": _timing(1.5)})])
    f = tmp_path / "p.json"
    f.write_text(p.dumps())
    back = prof.load(str(f))
    assert back == p
    assert back.cells[0].key == (prof.shape_of(LAYER), 128)


def test_the_order_puts_the_measured_usable_backends_first_fastest_first():
    m = prof.Measured("P", _profile(KEY, [(128, {"a": _timing(3.0), "b": _timing(1.0),
                                                 "c": _timing(0.5)})]))
    layer = selector.load(SHAPE + ["layer.num_tokens=100"]).run_config.layer
    order, n = m.order(layer, ["x", "a", "b", "c"], ["x", "a", "b"])  # c: not usable now
    assert order == ["b", "a", "x", "c"]
    assert n.kind == "measured" and n.backend == "b" and n.data["unmeasured"] == ("x",)
    assert [t["backend"] for t in n.data["times"]] == ["b", "a"] and n.data["tokens"] == 128
    assert "b 1 ms vs a 3 ms at 128 tokens, profile P" in str(n)
    other = selector.load(SHAPE + ["layer.num_tokens=129"]).run_config.layer  # bucket 256
    order, n = m.order(other, ["x", "a"], ["x", "a"])
    assert order == ["x", "a"] and n.kind == "profile_unmeasured" and n.data["bucket"] == 256
    ignored = prof.Measured("P", m.profile, ("measured on another machine",))
    assert ignored.order(layer, ["a", "b"], ["a", "b"]) is None
    assert [x.kind for x in ignored.notes()] == ["profile_ignored"]


NAMES = ("a", "b", "c", "d", "e")


@settings(deadline=None)
@given(st.permutations(NAMES), st.sets(st.sampled_from(NAMES)),
       st.dictionaries(st.sampled_from(NAMES), st.floats(0.001, 1000.0)))
def test_the_measured_order_is_a_permutation_led_by_the_fastest_usable(names, usable, times):
    names, usable = list(names), [n for n in names if n in usable]
    m = prof.Measured("P", _profile(KEY, [(128, {n: _timing(t) for n, t in times.items()})]))
    layer = cached_load(*SHAPE, "layer.num_tokens=128").run_config.layer
    got = m.order(layer, names, usable)
    if not usable:
        assert got is None
        return
    order, n = got
    assert sorted(order) == sorted(names)
    timed = [u for u in usable if u in times]
    if not timed:
        assert order == names and n.kind == "profile_unmeasured"
        return
    assert n.kind == "measured" and n.backend == order[0]
    assert times[order[0]] == min(times[u] for u in timed)
    assert order[:len(timed)] == sorted(timed, key=lambda u: (times[u], names.index(u)))
    rest = order[len(timed):]
    assert rest == [x for x in names if x not in timed]  # the static order, unchanged


def test_statistics_are_the_median_and_the_10th_and_90th_percentiles():
    xs = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 7.0, 8.0, 6.0, 9.0, 11.0]
    t = tuning.timing(xs)
    assert t.median_ms == statistics.median(xs) and t.n == len(xs)
    q = statistics.quantiles(xs, n=10, method="inclusive")
    assert math.isclose(t.p10_ms, q[0]) and math.isclose(t.p90_ms, q[-1])
    for bad in ([], [1.0, float("nan")], [1.0, -2.0], [0.0], [True], "1.0", [1.0] * 10001):
        assert tuning.timing(bad) is None, bad


# ---------------------------------------------------------------------------------------------
# Corrupt and hostile files: SelectorError naming the file and the key

def _valid_doc():
    return json.loads(_profile(KEY, [(128, {"emulation": _timing(1.5)})]).dumps())


def _mut(f):
    d = _valid_doc()
    f(d)
    return json.dumps(d)


HOSTILE = {
    "not_json": ("{not json", "file", "is not JSON"),
    "nan": (re.sub(r'"median_ms": [0-9.e+-]+', '"median_ms": NaN', json.dumps(_valid_doc())),
            "file", "NaN"),
    "infinity": (re.sub(r'"p90_ms": [0-9.e+-]+', '"p90_ms": Infinity', json.dumps(_valid_doc())),
                 "file", "Infinity"),
    "negative": (_mut(lambda d: d["cells"][0]["times"]["emulation"].update(median_ms=-1.0,
                                                                            p10_ms=-2.0)),
                 "cells[0].times.emulation.median_ms", "finite time > 0"),
    "disordered": (_mut(lambda d: d["cells"][0]["times"]["emulation"].update(p10_ms=9.0)),
                   "cells[0].times.emulation", "p10_ms 9 <= median_ms"),
    "string_time": (_mut(lambda d: d["cells"][0]["times"]["emulation"].update(median_ms="1.5")),
                    "cells[0].times.emulation.median_ms", "is not a number"),
    "bool_median": (_mut(lambda d: d["cells"][0]["times"]["emulation"].update(median_ms=True)),
                    "cells[0].times.emulation.median_ms", "is not a number"),
    "bool_time": (_mut(lambda d: d["cells"][0]["times"]["emulation"].update(n=True)),
                  "cells[0].times.emulation.n", "integer"),
    "huge_int": (_mut(lambda d: d["cells"][0]["times"]["emulation"].update(p90_ms=10 ** 400)),
                 "cells[0].times.emulation.p90_ms", "finite"),
    "schema": (_mut(lambda d: d.update(schema="other")), "schema", "not a selector profile"),
    "version": (_mut(lambda d: d.update(version=99)), "version", "run `selector tune` again"),
    "key_missing": (_mut(lambda d: d["key"].pop("driver")), "key.driver", "is missing"),
    "cells_type": (_mut(lambda d: d.update(cells={})), "cells", "not a list"),
    "bad_layer": (_mut(lambda d: d["cells"][0]["layer"].update(quant="int3")),
                  "cells[0].layer", "layer.quant"),
    "bad_bucket": (_mut(lambda d: d["cells"][0].update(bucket=100)), "cells[0].bucket",
                   "not the bucket of 128"),
    "unknown_key": (_mut(lambda d: d.update(extra=1)), "extra", "unknown key"),
    "duplicate": ('{"schema": "selector-profile", "schema": "x"}', "file", "appears twice"),
    "deep": ("[" * 100000 + "]" * 100000, "file", ""),
    "top_list": ("[]", "(top level)", "not an object"),
    "binary": (b"\xff\xfe\x00garbage", "file", "not UTF-8"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_malformed_profile_names_the_file_and_the_key(tmp_path, name):
    text, key, needle = HOSTILE[name]
    f = tmp_path / f"{name}.json"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SelectorError) as e:
        prof.load(str(f))
    msg = str(e.value)
    assert msg.startswith(f"policy.profile: {f}: {key}:"), msg
    assert needle in msg, msg


def test_a_profile_over_one_read_chunk_is_read_whole(tmp_path):
    p = prof.Profile(KEY, _profile(KEY, [(128, {"emulation": _timing(1.5)})]).cells,
                     {"comment": "x" * (3 << 20)}, "now")
    f = tmp_path / "big.json"
    f.write_text(p.dumps())
    assert f.stat().st_size > 3 << 20
    assert prof.load(str(f)) == p


def test_a_timing_cannot_be_changed_after_it_is_read():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _timing(1.0).median_ms = 0.5


def test_the_timing_children_get_the_overrides_without_probe_and_profile():
    assert tuning.child_overrides(["probe=verify", "policy.preference=measured",
                                   "+policy.profile=/p.json", "layer.num_tokens=8",
                                   "layer.hidden_size=256"]) == [
        "layer.num_tokens=8", "layer.hidden_size=256"]


def test_the_memory_estimate_and_the_sizes_a_timing_needs():
    moe = dict(op="moe", num_tokens=4, hidden_size=256, intermediate_size=512, num_experts=8,
               top_k=2, ep_size=1, tp_size=1, act_and_mul=True)
    assert tuning.estimate_bytes("moe", moe) == 37847040
    assert tuning.estimate_bytes("moe", dict(moe, tp_size=None, ep_size=None)) == 37847040
    assert tuning.estimate_bytes("moe", dict(moe, intermediate_size=None)) == 106624
    assert tuning.estimate_bytes("linear", dict(op="linear", num_tokens=4, hidden_size=256,
                                                intermediate_size=512)) == 1597440
    assert tuning.missing_sizes({"op": "moe"}) == ["hidden_size", "intermediate_size",
                                                   "num_experts", "top_k"]
    assert tuning.missing_sizes({"op": "linear", "hidden_size": 8}) == ["intermediate_size"]


def test_a_measured_case_keeps_the_device_and_the_timer_the_child_named():
    ev = {"outcome": "measured", "samples_ms": [1.0, 2.0, 3.0], "device": "cpu",
          "timer": "graph"}
    r = tuning._judge("emulation", "c1", ev)
    assert (r.timing.median_ms, r.device, r.timer, r.why) == (2.0, "cpu", "graph", "")
    bare = tuning._judge("emulation", "c1", {"outcome": "measured", "samples_ms": [1.0]})
    assert (bare.device, bare.timer) == ("", "")


def test_a_profile_is_written_into_a_new_directory_and_over_an_old_file(tmp_path):
    p = _profile(KEY, [(128, {"emulation": _timing(1.5)})])
    f = tmp_path / "a" / "b" / "p.json"
    assert tuning.write_profile(p, f) == str(f)
    assert tuning.write_profile(p, f) == str(f)
    assert prof.load(str(f)) == p and os.listdir(f.parent) == ["p.json"]


def _in_time(fn, seconds=20.0):
    """fn() in a thread; fails (instead of hanging the suite) when it does not return."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "reading the profile hangs"
    return out


def test_a_fifo_a_directory_a_huge_file_are_refused_without_reading_them(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(prof.MAX_BYTES + 1)  # sparse: nothing is written
    for path, needle in ((fifo, "not a regular file"), (tmp_path, "not a regular file"),
                         (huge, f"over the {prof.MAX_BYTES} bytes"),
                         (tmp_path / "absent.json", "cannot be opened")):
        out = _in_time(lambda p=path: prof.load(str(p)))
        assert isinstance(out.get("error"), SelectorError), out
        assert f"{path}: file: " in str(out["error"]) and needle in str(out["error"])


def test_an_unknown_backend_in_a_profile_is_bad_input(tmp_path):
    sel = selector.load(SHAPE)
    d = _valid_doc()
    d["key"] = tuning.machine_key(sel.run_config)
    d["cells"][0]["times"]["no_such_kernel"] = d["cells"][0]["times"].pop("emulation")
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    with pytest.raises(SelectorError) as e:
        selector.load(SHAPE + [f"policy.profile={f}"])
    assert f"{f}: cells[0].times.no_such_kernel: unknown linear backend" in str(e.value)


# ---------------------------------------------------------------------------------------------
# The resolver ranks by the profile (in-process; a twin of emulation ranked first)

@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    conf = tmp_path_factory.mktemp("twin")
    (conf / "backend" / "linear").mkdir(parents=True)
    (conf / "backend" / "linear" / "emulation_twin.yaml").write_text(
        'description: "emulation again, ranked first"\nrank: 1\n'
        "entry_point: selector.backends.wrappers.emulation:EmulationLinear\nimplements: [nvfp4]\n"
        "rules: []\n")
    return conf


def _write(tmp_path, key, cells, name="p.json"):
    f = tmp_path / name
    f.write_text(_profile(key, cells).dumps())
    return f


def test_the_measured_fastest_wins_and_the_static_order_decides_elsewhere(tmp_path, twin):
    static = selector.load(SHAPE, config_dirs=[twin])
    assert static.select(num_tokens=128).selected == "emulation_twin"
    key = tuning.machine_key(static.run_config)
    f = _write(tmp_path, key, [(128, {"emulation": _timing(0.278), "emulation_twin":
                                      _timing(0.363)}),
                               (1, {"emulation": _timing(0.5), "emulation_twin": _timing(0.2)})])
    sel = selector.load(SHAPE + [f"policy.profile={f}"], config_dirs=[twin])
    assert sel.run_config.policy.preference == "measured"
    d = sel.select(num_tokens=100)  # bucket 128
    assert d.selected == "emulation"
    (n,) = d.notes_of("measured")
    assert f"emulation 0.278 ms vs emulation_twin 0.363 ms at 128 tokens, profile {f}" in str(n)
    assert not d.notes_of("preference")  # the static ranks did not decide
    assert [c.backend for c in d.candidates][:2] == ["emulation", "emulation_twin"]
    # the same Selector, another bucket: the memo does not carry the 128-token answer over
    assert sel.select(num_tokens=1).selected == "emulation_twin"
    d = sel.select(num_tokens=3000)  # not measured: the static order
    assert d.selected == "emulation_twin" and d.notes_of("profile_unmeasured")
    assert "4096-token bucket" in str(d.notes_of("profile_unmeasured")[0])
    d = sel.select(num_tokens=5)  # another unmeasured bucket: its own note, not the memo's
    assert "8-token bucket" in str(d.notes_of("profile_unmeasured")[0])
    # another shape: not measured either
    assert sel.select(num_tokens=128, hidden_size=512).selected == "emulation_twin"
    # a backend excluded by policy is not picked however fast it measured
    ex = selector.load(SHAPE + [f"policy.profile={f}", "policy.exclude=[emulation]"],
                       config_dirs=[twin])
    assert ex.select(num_tokens=128).selected == "emulation_twin"


def test_a_linear_cell_is_found_whatever_the_moe_keys_of_the_default_layer(tmp_path, twin):
    """An embedder's plain select(op="linear", ...) inherits the default (MoE) layer's
    act_and_mul=True, top_k, num_experts: the linear cell, keyed on what a linear kernel's time
    depends on, is found all the same (issue #46: 140 of 140 cells were missed)."""
    static = selector.load([], config_dirs=[twin])
    assert static.run_config.layer.op == "moe" and static.run_config.layer.act_and_mul is True
    f = _write(tmp_path, tuning.machine_key(static.run_config),
               [(128, {"emulation": _timing(0.278), "emulation_twin": _timing(0.363)})])
    sel = selector.load([f"policy.profile={f}"], config_dirs=[twin])
    d = sel.select(op="linear", quant="nvfp4", hidden_size=256, intermediate_size=256,
                   num_tokens=100)
    assert d.selected == "emulation" and d.notes_of("measured"), d
    assert not d.notes_of("profile_unmeasured")
    assert sel.select(op="linear", quant="nvfp4", hidden_size=256, intermediate_size=256,
                      num_tokens=100, activation="gelu", tp_size=4).selected == "emulation"
    # no cell: a warning naming the nearest one, and the static order
    d = sel.select(op="linear", quant="nvfp4", hidden_size=512, intermediate_size=256,
                   num_tokens=1000)
    assert d.selected == "emulation_twin"
    (n,) = d.notes_of("profile_unmeasured")
    assert n.severity == "warning"
    assert n.data["nearest"] == "linear nvfp4 bfloat16 K=256 N=256 at the 128-token bucket"
    assert "no cell for linear nvfp4 bfloat16 K=512 N=256 at the 1024-token bucket" in str(n)
    assert "nearest measured cell: linear nvfp4 bfloat16 K=256 N=256" in str(n)
    # an op the profile has no cell of says so
    m = sel.select(num_tokens=16, hidden_size=2048, intermediate_size=768, num_experts=128,
                   top_k=8)
    (n,) = m.notes_of("profile_unmeasured")
    assert n.data["nearest"] is None and "the profile has no cell of this op" in str(n)


def test_explain_model_reports_the_measurement_for_each_measured_shape(tmp_path, twin):
    """explain --model (Selector.plan) decides each checkpoint layer through the same lookup: the
    measured shape by the profile, the others with the warning."""
    static = selector.load([], config_dirs=[twin])
    cell = dict(LAYER, hidden_size=4096, intermediate_size=6144, num_tokens=64)
    f = tmp_path / "p.json"
    f.write_text(prof.Profile(tuning.machine_key(static.run_config), (prof.Cell(
        cell, 64, {"emulation": _timing(1.0), "emulation_twin": _timing(2.0)}, {}),),
        {}, "now").dumps())
    sel = selector.load([f"policy.profile={f}", "layer.num_tokens=60"], config_dirs=[twin])
    plan = sel.plan(REPO / "tests" / "checkpoint_corpus" / "llama-3.1-8b-fp4")
    shapes = [s for k in plan.kinds if k.quant for s in k.shapes]
    measured = [s for s in shapes if s.decision.notes_of("measured")]
    assert [(s.fields["hidden_size"], s.fields["intermediate_size"]) for s in measured] == \
        [(4096, 6144)]
    assert measured[0].decision.selected == "emulation"
    rest = [s for s in shapes if s not in measured]
    assert rest and all(s.decision.notes_of("profile_unmeasured")[0].data["nearest"] ==
                        "linear nvfp4 bfloat16 K=4096 N=6144 at the 64-token bucket"
                        for s in rest)
    # the plan's text says both, per layer group: never silently unmeasured
    from selector.core.notes import text
    flat = "".join(str(plan).split())  # wrapped at 100 columns

    def shown(words: str) -> bool:
        return "".join(words.split()) in flat
    assert shown(f"measured: emulation 1 ms vs emulation_twin 2 ms at 64 tokens, profile {f}")
    for s in rest:
        assert shown("warning: " + text(s.decision.notes_of("profile_unmeasured")[0])), s.fields


def test_a_version_1_profile_is_read_and_its_cells_re_keyed(tmp_path, twin):
    """A profile written before the op's own keys (version 1, a linear cell keyed with the MoE
    layer's act_and_mul) still loads: its cells are found by the op's keys, and a decision it
    cannot serve says the file is of the old version."""
    static = selector.load([], config_dirs=[twin])
    doc = _profile(tuning.machine_key(static.run_config),
                   [(128, {"emulation": _timing(0.2), "emulation_twin": _timing(0.3)})]).to_dict()
    doc["version"] = 1
    doc["cells"][0]["layer"].update(act_and_mul=True, top_k=8)
    f = tmp_path / "v1.json"
    f.write_text(json.dumps(doc))
    assert prof.load(str(f)).migrated
    sel = selector.load([f"policy.profile={f}"], config_dirs=[twin])
    kw = dict(op="linear", quant="nvfp4", hidden_size=256, intermediate_size=256)
    assert sel.select(**kw, num_tokens=128).notes_of("measured")
    n = sel.select(**kw, num_tokens=4).notes_of("profile_unmeasured")[0]
    assert "a version-1 profile" in str(n)


def _another(key: dict, field: str, value: str) -> str:
    """``value``, or a second one where this machine has ``value`` (the H200 that ran these
    tests on 2026-12-06 has the first GPU name)."""
    return value if key.get(field) != value else value + "-other"


@pytest.mark.parametrize("field,value", [("gpu", "NVIDIA H200"), ("driver", "570.124.06"),
                                         ("cuda", "12.8"), ("selector", "0.0.1")])
def test_a_profile_of_another_machine_or_stack_changes_no_decision(tmp_path, twin, field, value):
    static = selector.load(SHAPE, config_dirs=[twin])
    key = tuning.machine_key(static.run_config)
    key = dict(key, **{field: _another(key, field, value)})
    f = _write(tmp_path, key, [(128, {"emulation": _timing(0.1), "emulation_twin": _timing(9.0)})])
    sel = selector.load(SHAPE + [f"policy.profile={f}"], config_dirs=[twin])
    for t in (1, 128, 4096):
        d, s = sel.select(num_tokens=t), static.select(num_tokens=t)
        assert d.selected == s.selected == "emulation_twin"
        assert [c.backend for c in d.candidates] == [c.backend for c in s.candidates]
        (n,) = d.notes_of("profile_ignored")
        assert n.severity == "warning" and f"{field} " in str(n) and str(f) in str(n)


def test_other_package_versions_and_a_preset_platform_ignore_the_profile(tmp_path, twin):
    static = selector.load(SHAPE, config_dirs=[twin])
    key = tuning.machine_key(static.run_config)
    key = dict(key, packages=dict(key["packages"], torch="1.0"))
    f = _write(tmp_path, key, [(128, {"emulation": _timing(0.1)})])
    d = selector.load(SHAPE + [f"policy.profile={f}"], config_dirs=[twin]).select(num_tokens=128)
    assert d.selected == "emulation_twin" and "torch 1.0 (here " in str(d.notes_of(
        "profile_ignored")[0])
    good = _write(tmp_path, tuning.machine_key(static.run_config),
                  [(128, {"emulation": _timing(0.1)})], "good.json")
    d = selector.load(SHAPE + [f"policy.profile={good}", "platform=b200",
                               "stack=flashinfer_0_7_4"], config_dirs=[twin]).select(num_tokens=128)
    assert "platform=b200 is a preset" in str(d.notes_of("profile_ignored")[0])


def test_measured_without_a_profile_of_this_machine_says_so(tmp_path, monkeypatch, twin):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    d = selector.load(SHAPE + ["policy.preference=measured"], config_dirs=[twin]).select(
        num_tokens=128)
    assert d.selected == "emulation_twin"
    assert "has no profile yet: run `python -m selector tune`" in str(d.notes_of(
        "profile_ignored")[0])
    # this machine's default profile is read when it is there
    static = selector.load(SHAPE, config_dirs=[twin])
    path = tuning.default_path(tuning.machine_key(static.run_config))
    tuning.write_profile(_profile(tuning.machine_key(static.run_config),
                                  [(128, {"emulation": _timing(0.1),
                                          "emulation_twin": _timing(0.2)})]), path)
    d = selector.load(SHAPE + ["policy.preference=measured"], config_dirs=[twin]).select(
        num_tokens=128)
    assert d.selected == "emulation" and d.notes_of("measured")


def test_the_preference_value_is_checked():
    with pytest.raises(SelectorError) as e:
        selector.load(["policy.preference=fastest"])
    assert "policy.preference" in str(e.value) and "measured" in str(e.value)


# ---------------------------------------------------------------------------------------------
# The command line, end to end on the CPU

@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One `selector tune` of the small layer at 4 and 64 tokens, with slow_emulation."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("tuned") / "profile.json"
    env = cli_env(SITE)
    r = run_cli("tune", "--config-dir", str(CONF), *SHAPE, "--tokens", "4,64", "--warmup", "1",
                "--repeats", "5", "--out", str(out), "--format", "json", env=env, timeout=900)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    return r, out, env


def test_tune_times_each_verified_backend_and_writes_a_profile(tuned):
    r, out, _ = tuned
    doc = r.json
    validate(doc, "tune")  # docs/schemas/tune.schema.json
    assert doc["profile"] == str(out)
    assert [c["tokens"] for c in doc["cells"]] == [4, 64]
    for c in doc["cells"]:
        assert set(c["times"]) == {"emulation", "slow_emulation"}, c
        slow, fast = c["times"]["slow_emulation"], c["times"]["emulation"]
        assert slow["median_ms"] >= 250  # its sleep: perf_counter measured it
        assert fast["p10_ms"] <= fast["median_ms"] <= fast["p90_ms"] and fast["n"] == 5
        assert c["fastest"] == "emulation" and c["static"] == "slow_emulation"
        assert c["static_over_fastest"] > 1
    p = prof.load(str(out))
    assert p.settings["warmup"] == 1 and p.settings["repeats"] == 5
    assert p.settings["timer"] == "graph"  # the default; the CPU times with perf_counter
    assert any("perf_counter" in d for d in p.settings["devices"])
    assert set(p.key) == set(prof.KEY_FIELDS)


def test_explain_with_the_profile_picks_the_measured_fastest_and_names_it(tuned):
    _, out, env = tuned
    args = ["explain", "--config-dir", str(CONF), *SHAPE, "layer.num_tokens=60", "--format",
            "json"]
    static, measured, text = run_cli_many(
        [args, args + ["policy.preference=measured", f"policy.profile={out}"],
         args[:-2] + [f"policy.profile={out}"]], env=env)
    assert static.json["selected"] == "slow_emulation"
    assert measured.returncode == 0 and measured.json["selected"] == "emulation"
    (n,) = [n for n in measured.json["notes_data"] if n["kind"] == "measured"]
    assert [t["backend"] for t in n["data"]["times"]] == ["emulation", "slow_emulation"]
    assert n["data"]["tokens"] == 64 and n["data"]["profile"] == str(out)
    words = " ".join(text.stdout.split())  # the text form wraps at 100 columns
    assert f"at 64 tokens, profile {out}" in words and "measured: emulation " in words


def test_a_profile_of_another_gpu_changes_nothing_on_the_command_line(tuned, tmp_path):
    _, out, env = tuned
    doc = json.loads(Path(out).read_text())
    doc["key"]["gpu"] = _another(doc["key"], "gpu", "NVIDIA H200")
    other = tmp_path / "other_gpu.json"
    other.write_text(json.dumps(doc))
    base = ["explain", "--config-dir", str(CONF), *SHAPE, "layer.num_tokens=64", "--format", "json"]
    plain, foreign = run_cli_many([base, base + [f"policy.profile={other}"]], env=env)
    assert plain.json["selected"] == foreign.json["selected"] == "slow_emulation"
    assert foreign.returncode == 0
    assert [c["backend"] for c in plain.json["candidates"]] == \
        [c["backend"] for c in foreign.json["candidates"]]
    assert any(n["kind"] == "profile_ignored" for n in foreign.json["notes_data"])


def test_corrupt_profiles_exit_2_naming_the_file_and_the_key(tmp_path):
    files = {}
    for name in ("not_json", "nan", "negative", "schema", "binary"):
        text = HOSTILE[name][0]
        files[name] = tmp_path / f"{name}.json"
        files[name].write_bytes(text if isinstance(text, bytes) else text.encode())
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    files["fifo"] = fifo
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(prof.MAX_BYTES + 1)
    files["huge"] = huge
    runs = run_cli_many([["explain", *SHAPE, f"policy.profile={f}"] for f in files.values()])
    for (name, f), r in zip(files.items(), runs):
        key = HOSTILE[name][1] if name in HOSTILE else "file"
        assert_clean_error(r, f"policy.profile: {f}: {key}:")


def test_tune_refuses_bad_input_before_timing_anything():
    runs = run_cli_many([
        ["tune", *SHAPE, "--tokens", "0"],
        ["tune", *SHAPE, "--tokens", "1,x"],
        ["tune", *SHAPE, "--repeats", "-3"],
        ["tune", *SHAPE, "--budget", "nan"],
        ["tune", *SHAPE, "--layer", "hidden_size"],
        ["tune", *SHAPE, "--layer", "no_such_key=3"],
        ["tune", "platform=b200", "stack=flashinfer_0_7_4", *SHAPE],
        ["tune", "layer=default"],  # an MoE layer without sizes
        ["tune", *SHAPE, "--model", "/nonexistent", "--layer", "hidden_size=512"],
        ["tune", *SHAPE, "--timer", "wallclock"]])
    needles = ["--tokens", "--tokens", "--repeats", "--budget", "--layer", "layer",
               "platform=b200", "layer.hidden_size", "--layer cannot be combined",
               "--timer: 'wallclock' is not one of graph, events"]
    for r, needle in zip(runs, needles):
        assert_clean_error(r, needle)


def test_tune_is_registered_and_import_selector_stays_free_of_torch():
    r = run_cli("tune", "--help")
    assert r.returncode == 0 and "--tokens" in r.stdout and "--max-memory" in r.stdout
    code = ("import sys, selector, selector.core.profile, selector.inspect.tuning, "
            "selector.commands.tune, selector.distributed.profile; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    p = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                       text=True, timeout=120, cwd=str(REPO))
    assert p.returncode == 0, p.stderr


# ---------------------------------------------------------------------------------------------
# Across ranks: one profile

WORKER = r"""
import json, os, sys, datetime
import torch.distributed as dist
rank, world, src_file, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60))
import selector
from selector.distributed.profile import share_profile
res = {}
try:
    path = share_profile(src_file if rank == 0 else None,
                         dest=os.path.join(os.path.dirname(out), f"shared{rank}.json"))
    res["path"] = path
    res["bytes"] = open(path, "rb").read().decode()
    sel = selector.load(sys.argv[5:] + [f"policy.profile={path}"], config_dirs=[os.environ["TWIN"]])
    res["selected"] = sel.select(num_tokens=128).selected
except Exception as e:
    res["error"] = f"{type(e).__name__}: {e}"
json.dump(res, open(out, "w"))
dist.destroy_process_group()
"""


def _ranks(tmp_path, src_file, twin, world=2):
    pytest.importorskip("torch.distributed")
    from dist_worker import free_port
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = child_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                    GLOO_SOCKET_IFNAME="lo", TWIN=str(twin))
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world), str(src_file),
                               str(tmp_path / f"out{r}.json"), *SHAPE], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(world)]
    logs = [p.communicate(timeout=300)[0].decode() for p in procs]
    return [json.loads((tmp_path / f"out{r}.json").read_text()) for r in range(world)], logs


def test_rank_0s_profile_is_shared_and_every_rank_decides_by_it(tmp_path, twin):
    key = tuning.machine_key(selector.load(SHAPE, config_dirs=[twin]).run_config)
    f = _write(tmp_path, key, [(128, {"emulation": _timing(0.1), "emulation_twin": _timing(0.2)})],
               "rank0.json")
    outs, logs = _ranks(tmp_path, f, twin)
    for o, log in zip(outs, logs):
        assert "error" not in o, (o, log)
        assert o["bytes"] == f.read_text() and o["selected"] == "emulation"
    assert outs[1]["path"] == str(tmp_path / "shared1.json")


def test_a_corrupt_profile_on_rank_0_is_the_same_error_on_every_rank(tmp_path, twin):
    f = tmp_path / "bad.json"
    f.write_text("{oops")
    outs, logs = _ranks(tmp_path, f, twin)
    errors = [o.get("error") for o in outs]
    assert errors[0] == errors[1] and errors[0] is not None, logs
    assert f"rank 0: policy.profile: {f}: file: is not JSON" in errors[0]


# ---------------------------------------------------------------------------------------------
# Containment: a hang, an exception, the memory bound

WRONG = Path(__file__).resolve().parent / "wrong_backends"


def test_a_hang_and_an_exception_are_a_cells_reason_not_a_crash(tmp_path):
    """time_backend on wrongkernels' HangLinear (killed at the time limit, with the helper it
    started) and DeviceAssertLinear (IndexError on the CPU)."""
    pytest.importorskip("torch")
    for name, entry in (("hang", "wrongkernels:HangLinear"),
                        ("device_assert", "wrongkernels:DeviceAssertLinear")):
        (tmp_path / "backend" / "linear").mkdir(parents=True, exist_ok=True)
        (tmp_path / "backend" / "linear" / f"{name}.yaml").write_text(
            f"rank: 1\nentry_point: {entry}\nimplements: [nvfp4]\nrules: []\n")
    pid_file = tmp_path / "helper.pid"
    code = f"""
import json, time
import selector
from selector.inspect import tuning
sel = selector.load({SHAPE!r}, config_dirs=[{str(tmp_path)!r}])
layer = sel.layer(num_tokens=4).to_dict()
out = {{}}
for name in ("hang", "device_assert"):
    t = time.perf_counter()
    r, r2 = tuning.time_backend(sel.catalogue.get("linear", name), [("c0", layer), ("c1", layer)],
                                {SHAPE!r}, [{str(tmp_path)!r}], warmup=1, repeats=3, budget_s=5,
                                memory_bytes=1 << 30, timeout=20)
    out[name] = [r.timing is None, r.why, r2.timing is None, r2.why, time.perf_counter() - t]
print(json.dumps(out))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=400,
                       env=cli_env(WRONG / "site", WRONG_HELPER_PID=str(pid_file)))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    none, why, none2, why2, took = out["hang"]
    assert none and "timed out after 20 s (the tune process was killed) while timing c0" in why
    assert none2 and why2.startswith("not timed: the tune process timed out") and took < 120
    helper = int(pid_file.read_text())
    for _ in range(50):
        if not Path(f"/proc/{helper}").exists() or \
                Path(f"/proc/{helper}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the hung backend's helper {helper} is still running")
    none, why, none2, why2, _ = out["device_assert"]
    assert none and why.startswith("raised: IndexError"), why
    assert none2 and why2.startswith("raised: IndexError"), why2  # a fresh child ran c1


def test_a_cell_over_the_memory_bound_is_not_timed(tuned, tmp_path):
    _, _, env = tuned
    r = run_cli("tune", "--config-dir", str(CONF), *SHAPE, "--tokens", "4", "--max-memory",
                "0.000001", "--out", str(tmp_path / "p.json"), env=env, timeout=600)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "not timed: too large here: needs about" in r.stdout and "--max-memory" in r.stdout


# ---------------------------------------------------------------------------------------------
# tools/tune_check.py: a profile's picks against a second measurement

def test_tune_check_takes_the_pick_from_the_resolver(tuned):
    """--resolver: the pick is what selector selects with policy.profile (measured), here the
    measured fastest, emulation, where the static order puts slow_emulation first."""
    _, out, env = tuned
    p = subprocess.run([sys.executable, str(REPO / "tools" / "tune_check.py"), str(out), str(out),
                        "--resolver", "--config-dir", str(CONF), "--override", "platform=auto",
                        "--format", "json"], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, (p.stdout, p.stderr)
    cells = json.loads(p.stdout)["cells"]
    assert [c["tokens"] for c in cells] == [4, 64]
    assert all(c["pick"] == "emulation" == c["fastest"] and c["ok"] for c in cells), cells


def test_tune_check_scores_the_picks_against_another_run(tmp_path):
    a = _write(tmp_path, KEY, [(128, {"x": _timing(1.0), "y": _timing(1.2)}),
                               (1024, {"x": _timing(2.0), "y": _timing(2.1)}),
                               (4, {"x": _timing(1.0), "y": _timing(1.01)})], "a.json")
    # the second run: at 1024 tokens y is 10% faster (a miss); at 4 tokens within the spread
    b = _write(tmp_path, KEY, [(128, {"x": _timing(1.01), "y": _timing(1.2)}),
                               (1024, {"x": _timing(2.2), "y": _timing(2.0)}),
                               (4, {"x": _timing(1.02, 0.9, 1.1), "y": _timing(1.0, 0.95, 1.05)})],
               "b.json")
    tool = [sys.executable, str(REPO / "tools" / "tune_check.py")]
    p = subprocess.run(tool + [str(a), str(b), "--format", "json"], capture_output=True,
                       text=True, env=child_env(), timeout=120)
    assert p.returncode == 1, p.stderr  # 1 of 2 large cells within 5%: under 95%
    doc = json.loads(p.stdout)
    assert doc["share_large_ok"] == 0.5 and doc["worst"]["tokens"] == 1024
    assert doc["worst"]["pick"] == "x" and doc["worst"]["cost"] == 1.1
    small = [c for c in doc["cells"] if c["tokens"] == 4][0]
    assert small["ok"] and small["pick"] == "x" and small["fastest"] == "y"
    p = subprocess.run(tool + [str(a), str(a)], capture_output=True, text=True, env=child_env(),
                       timeout=120)
    assert p.returncode == 0 and "3/3" not in p.stdout and "2/2 (100.0%)" in p.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    p = subprocess.run(tool + [str(a), str(bad)], capture_output=True, text=True,
                       env=child_env(), timeout=120)
    assert p.returncode == 2 and f"{bad}: (top level)" in p.stderr



# ---------------------------------------------------------------------------------------------
# The CUDA timers (run on a GPU: tools/h200_tune.sh's machine; skipped on the CPU)

def _cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the graph timer runs on a GPU only")
    return torch


def test_graph_replays_time_the_gpu_not_the_host():
    """A tiny matmul: eager events measure the launch (several us); graph replays of many calls
    give the GPU's per-call time, smaller, and the timer says which ran."""
    torch = _cuda()
    from selector.backends.children import tune_child
    dev = torch.device("cuda")
    a = torch.randn(16, 256, device=dev, dtype=torch.bfloat16)
    b = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)

    def fn():
        return a @ b
    graph, name = tune_child.timed(fn, dev, {"warmup": 3, "repeats": 12, "budget_s": 5})
    eager, ename = tune_child.timed(fn, dev, {"warmup": 3, "repeats": 12, "budget_s": 5,
                                              "timer": "events"})
    assert (name, ename) == ("cuda_graph", "cuda_events")
    assert len(graph) == 12 and len(eager) == 12
    assert sorted(graph)[6] < sorted(eager)[6], (graph, eager)


def test_a_call_that_cannot_be_captured_is_timed_eagerly_and_says_why():
    torch = _cuda()
    from selector.backends.children import tune_child
    dev = torch.device("cuda")
    x = torch.randn(64, device=dev)

    def fn():
        return x[x > 0].sum().item()  # a host synchronisation: capture refuses it
    samples, name = tune_child.timed(fn, dev, {"warmup": 1, "repeats": 4, "budget_s": 5})
    assert name.startswith("cuda_events (graph capture failed: ") and len(samples) == 4
