"""selector.distributed: every rank of a process group ends with the same decision or the same
error. Spawned gloo groups on CPU simulate a heterogeneous cluster through per-rank overrides;
the agreement itself is also tested in-process (agreement.py needs no torch)."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import child_env, load
from hypothesis import given
from hypothesis import strategies as st

import selector
from selector.distributed import agreement, fingerprint
from selector.distributed.agreement import Group

torch_dist = pytest.importorskip("torch.distributed", reason="torch is not installed")
if not torch_dist.is_available():  # pragma: no cover
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

from dist_worker import run_ranks  # noqa: E402

HOST = socket.gethostname()
MOE = {"op": "moe", "quant": "nvfp4", "activation": "relu2", "act_and_mul": False}
LINEAR = {"op": "linear", "quant": "nvfp4"}
SPARK = ["platform=dgx_spark", "stack=flashinfer_0_7_4"]
OLD = ["platform=dgx_spark", "stack=flashinfer_0_6_10"]
B12X = ["policy.moe_backend=flashinfer_b12x"]
LENIENT = ["policy.strict=false"]

SCENARIOS = [
    {"name": "equal", "default": SPARK, "layers": [MOE, LINEAR, MOE]},
    {"name": "old_flashinfer", "default": SPARK + B12X + LENIENT,
     "overrides": {"2": OLD + B12X + LENIENT}, "layers": [MOE] * 5},
    {"name": "other_gpu", "default": SPARK,
     "overrides": {"3": ["platform=b200", "stack=flashinfer_0_7_4"]}, "layers": [MOE, LINEAR]},
    {"name": "strict", "default": SPARK + B12X, "overrides": {"1": OLD + B12X},
     "layers": [MOE, LINEAR, MOE]},
    {"name": "load_error", "default": SPARK, "overrides": {"2": ["platform=dgx_sparc"]},
     "layers": [MOE]},
    {"name": "other_layers", "default": SPARK, "layers": [MOE],
     "overrides": {"1": SPARK + ["layer.hidden_size=4096"]}},
]


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    """Every scenario, in order, on one spawned group of 4 gloo ranks."""
    results = run_ranks(4, SCENARIOS, tmp_path_factory.mktemp("gloo4"), child_env(), timeout_s=120)
    return {s["name"]: [r[i] for r in results] for i, s in enumerate(SCENARIOS)}


def same_everywhere(outcomes):
    """Every rank ends with the same decisions (to_dict) or the same error."""
    first = {k: v for k, v in outcomes[0].items() if k not in ("local", "seconds")}
    for r, o in enumerate(outcomes[1:], 1):
        assert {k: v for k, v in o.items() if k not in ("local", "seconds")} == first, \
            f"rank {r} differs"
    return first


def test_all_ranks_equal(four_ranks):
    got = same_everywhere(four_ranks["equal"])
    moe, linear, _ = got["agreed"]
    assert moe["selected"] == "flashinfer_cutlass" and linear["selected"] is not None
    assert [g["ranks"] for g in moe["ranks"]] == [[0, 1, 2, 3]]  # one fingerprint, one group
    # nothing differs between ranks: no reason is prefixed with ranks, and the local choice stands
    assert all("rank" not in r["message"] for c in moe["candidates"] for r in c["reasons"])
    assert four_ranks["equal"][0]["local"] == [moe["selected"], linear["selected"],
                                               moe["selected"]]


def test_one_rank_with_old_flashinfer(four_ranks):
    got = same_everywhere(four_ranks["old_flashinfer"])
    for d in got["agreed"]:
        assert d["selected"] == "flashinfer_cutlass"
        b12x = next(c for c in d["candidates"] if c["backend"] == "flashinfer_b12x")
        assert b12x["status"] == "rejected"
        assert [r["ranks"] for r in b12x["reasons"]] == [[2]]
        assert b12x["reasons"][0]["message"].startswith(f"rank 2 (host {HOST}): ")
    assert f"flashinfer_b12x rejected on rank 2 (host {HOST}): nvidia-cutlass-dsl 4.4" \
        in got["text"].replace("\n    ", " ")
    assert "policy.strict=false: every rank fell back to flashinfer_cutlass" in got["text"]
    # rank 0 alone would have run the requested backend; rank 2 could not
    assert four_ranks["old_flashinfer"][0]["local"][0] == "flashinfer_b12x"
    assert four_ranks["old_flashinfer"][2]["local"][0] == "flashinfer_cutlass"


def test_one_rank_with_another_gpu(four_ranks):
    got = same_everywhere(four_ranks["other_gpu"])
    moe = got["agreed"][0]
    assert four_ranks["other_gpu"][3]["local"][0] == "flashinfer_trtllm"  # B200 alone
    assert moe["selected"] == "flashinfer_cutlass"  # the best that runs on every rank
    trtllm = next(c for c in moe["candidates"] if c["backend"] == "flashinfer_trtllm")
    assert trtllm["status"] == "rejected" and trtllm["reasons"][0]["ranks"] == [0, 1, 2]
    assert f"rank 3 (host {HOST}) alone would have chosen flashinfer_trtllm" in \
        " ".join(moe["notes"])
    assert [g["ranks"] for g in moe["ranks"]] == [[0, 1, 2], [3]]
    assert [g["platform"]["capability"] for g in moe["ranks"]] == ["12.1", "10.0"]


def test_strict_refusal_raises_on_every_rank(four_ranks):
    got = same_everywhere(four_ranks["strict"])
    err = got["error"]
    assert err.startswith("selector.distributed: policy.strict=true refuses on every rank")
    assert "layer(s) 0, 2:" in err  # both MoE layers, one table; the linear layer is fine
    assert f"[known_issue] rank 1 (host {HOST}): nvidia-cutlass-dsl 4.4" in err
    assert "selected: none" in err


def test_rank_that_raises_during_load(four_ranks):
    got = same_everywhere(four_ranks["load_error"])
    assert got["error"].startswith("selector.distributed: no agreement, every rank stops: "
                                   f"rank 2 (host {HOST}) could not decide: platform: ")
    assert "dgx_sparc" in got["error"] and "did you mean 'dgx_spark'" in got["error"]


def test_ranks_deciding_different_layers(four_ranks):
    got = same_everywhere(four_ranks["other_layers"])
    assert f"layer 0: ranks 0, 2-3 (host {HOST}) and rank 1 (host {HOST}) decide different " \
        "layers: hidden_size None vs 4096" in got["error"]
    assert "hidden_size None vs 4096" in got["error"]


def test_rank_that_never_calls_in_times_out(tmp_path):
    """Rank 2 never calls agree_all: the others stop after the group's timeout, naming it."""
    scenario = {"name": "absent", "default": SPARK, "layers": [MOE], "absent": [2]}
    results = run_ranks(3, [scenario], tmp_path, child_env(), timeout_s=4, deadline_s=180)
    errors = [r[0].get("error") for r in results[:2]]
    assert errors[0] == errors[1]
    assert errors[0].startswith("selector.distributed: rank(s) 2 did not call agree within "
                                "0:00:04 (the process group's timeout); 2 of 3 ranks did")
    assert results[2][0] == {"absent": True}
    assert all(r[0]["seconds"] > 3.9 for r in results[:2])  # they waited the group's timeout


MISUSES = [{"name": kind, "default": SPARK, "layers": [MOE, LINEAR], "misuse": {str(rank): kind}}
           for rank, kind in ((0, "one_decision"), (1, "raising_iterator"), (2, "strings"))]


def test_a_wrong_argument_on_one_rank_is_the_same_error_everywhere(tmp_path):
    """Regression (issue 25, defect 7): rank 0 calling agree_all(decision) raised a bare
    TypeError there while the other ranks waited the group's whole timeout, then blamed it. The
    arguments are checked before any collective; every rank raises one SelectorError at once."""
    results = run_ranks(3, MISUSES, tmp_path, child_env(), timeout_s=60, deadline_s=240)
    for i, (s, needle) in enumerate(zip(MISUSES, [
            "got one Decision; pass a list of them",
            "iterating the decisions raised RuntimeError: the engine's layer walk failed",
            "item 0 is a str, not a Decision"])):
        outcomes = [r[i] for r in results]
        errors = {o.get("error") for o in outcomes}
        assert len(errors) == 1 and None not in errors, outcomes
        (error,) = errors
        bad = next(iter(s["misuse"]))
        assert error.startswith("selector.distributed: no agreement, every rank stops: "
                                f"rank {bad} (host {HOST}) could not decide: "
                                "selector.distributed.agree_all(decisions): "), error
        assert needle in error  # the misuse named, not the group's timeout


def test_the_rank_hosting_the_store_dies(tmp_path):
    """Regression (issue 25, defect 7): with rank 0 (the store's host) dead, rank 1 said
    "rank(s) 0-1 did not call agree ... 0 of 2 ranks did" after 0.6 s."""
    scenario = {"name": "dead", "default": SPARK, "layers": [MOE], "dead": [0], "die_after": 2}
    results = run_ranks(2, [scenario], tmp_path, child_env(), timeout_s=60, deadline_s=180)
    assert results[0] == [{"dead": True}]
    error = results[1][0]["error"]
    assert "did not call agree" not in error, error
    assert "the process group's store stopped answering" in error
    assert "has most likely died or left the group" in error


def test_agree_all_arguments_are_checked_before_any_collective():
    from selector.distributed import validated
    d = load(*SPARK).select(**MOE)
    assert validated([d, d]) == [d, d] and validated((d,)) == [d]
    for bad, needle in ((d, "got one Decision"), ("abc", "got a str"), (42, "got a int"),
                        ({"a": d}, "got a dict"), ([d, None], "item 1 is a NoneType"),
                        (iter([d, 1]), "item 1 is a int")):
        got = validated(bad)
        assert isinstance(got, selector.SelectorError) and needle in str(got), (bad, got)
    boom = ValueError("x")
    assert validated(boom) is boom


# -- the agreement, in-process ---------------------------------------------------------------
def groups_of(per_rank, hosts=None):
    """Groups as _exchange builds them, from each rank's decisions (or exception)."""
    by_digest = {}
    for r, decisions in enumerate(per_rank):
        raw = fingerprint.encode(decisions)
        by_digest.setdefault(fingerprint.digest(raw), (raw, []))[1].append(r)
    import json
    return [Group(tuple(ranks), tuple((hosts or {}).get(r, "h") for r in ranks),
                  json.loads(raw)) for raw, ranks in by_digest.values()]


def test_identical_fingerprints_are_compared_once(monkeypatch):
    """1,024 ranks on 2 platforms, 100 layers of 2 kinds: 2 groups, 2 merges."""
    spark = load(*SPARK)
    b200 = load("platform=b200", "stack=flashinfer_0_7_4")
    layers = [MOE, LINEAR] * 50
    a = [spark.select(**x) for x in layers]
    b = [b200.select(**x) for x in layers]
    calls = []
    real = agreement._merge
    monkeypatch.setattr(agreement, "_merge", lambda *args: calls.append(1) or real(*args))
    groups = groups_of([a] * 1000 + [b] * 24)
    assert [len(g.ranks) for g in groups] == [1000, 24]
    out = agreement.agree(groups, a)
    assert len(out) == 100 and len(calls) == 2
    assert out[0].selected == "flashinfer_cutlass" and out[0].local is a[0]
    assert out[0].entry_point == a[0].candidate("flashinfer_cutlass").entry_point is not None
    assert "ranks 1000-1023 (host h) alone would have chosen flashinfer_trtllm" in out[0].notes[-1]


def test_where_names_ranks_and_hosts():
    hosts = {r: f"n{r // 8}" for r in range(64)}
    assert agreement.where([5], {5: "b"}) == "rank 5 (host b)"
    assert agreement.where([0, 1, 2, 3, 8], hosts) == "ranks 0-3 (host n0), rank 8 (host n1)"
    assert agreement.where(range(64), hosts) == \
        "ranks 0-7 (host n0), ranks 8-15 (host n1), ranks 16-23 (host n2), " \
        "ranks 24-31 (host n3), 32 more ranks on 4 more hosts"


def test_local_exception_names_the_rank():
    spark = load(*SPARK)
    try:
        selector.load(overrides=["platform=nope"])
    except selector.SelectorError as e:
        err = e
    groups = groups_of([[spark.select(**MOE)], err], {0: "a", 1: "b"})
    with pytest.raises(selector.SelectorError, match=r"rank 1 \(host b\) could not decide: "
                                                     r"platform: unknown"):
        agreement.agree(groups, [spark.select(**MOE)])
    groups = groups_of([[spark.select(**MOE)], RuntimeError("CUDA error")], {0: "a", 1: "b"})
    with pytest.raises(selector.SelectorError, match="RuntimeError: CUDA error"):
        agreement.agree(groups)


def test_agreed_text_and_json_are_identical_for_identical_inputs():
    spark, old = load(*SPARK, *B12X, *LENIENT), load(*OLD, *B12X, *LENIENT)
    per_rank = [[spark.select(**MOE)], [old.select(**MOE)]]
    one = agreement.agree(groups_of(per_rank))[0]
    two = agreement.agree(groups_of(per_rank))[0]
    assert str(one) == str(two) and one.to_dict() == two.to_dict()
    assert one.candidate("flashinfer_b12x").status == "rejected"
    assert one.entry_point is None  # no local decision given
    with pytest.raises(KeyError):
        one.candidate("nope")


STATUSES = st.sampled_from(["eligible", "opt_in", "rejected", "not_applicable"])
NAMES = ["a", "b", "c", "d"]


def synthetic(statuses, requested="auto", strict=True):
    """A fingerprint body with the given candidate statuses (one layer)."""
    return {"v": 1, "error": None, "platform": {}, "layers": [MOE], "per_layer": [[0, 0]],
            "verdicts": [{"requested": requested, "selected": None, "strict": strict,
                          "candidates": [[n, s, [] if s in agreement.USABLE else
                                          [["device", f"{n} fails", "src"]]]
                                         for n, s in zip(NAMES, statuses)], "notes": []}]}


@pytest.mark.slow
@given(st.lists(st.lists(STATUSES, min_size=4, max_size=4), min_size=1, max_size=6))
def test_selected_is_the_first_backend_eligible_on_every_rank(per_group):
    groups = [Group((i,), ("h",), synthetic(s)) for i, s in enumerate(per_group)]
    d = agreement.agree(groups)[0]
    everywhere = [n for j, n in enumerate(NAMES)
                  if all(s[j] == "eligible" or s[j] == "opt_in" for s in per_group)]
    auto = next((n for n in everywhere if all(s[NAMES.index(n)] == "eligible"
                                              for s in per_group)), None)
    assert d.selected == auto
    for c in d.candidates:
        usable = c.backend in everywhere
        assert (c.status in ("selected", "eligible", "opt_in")) == usable
        if not usable:  # every failing rank is named, and only those
            bad = {i for i, s in enumerate(per_group) if s[NAMES.index(c.backend)]
                   not in agreement.USABLE}
            assert {r for reason in c.reasons for r in reason.ranks} == bad


@pytest.mark.slow
@given(st.lists(st.sampled_from(["eligible", "rejected"]), min_size=1, max_size=5),
       st.booleans())
def test_explicit_backend_failing_on_some_rank(statuses, strict):
    groups = [Group((i,), ("h",), synthetic([s, "eligible", "eligible", "eligible"], "a",
                                            strict)) for i, s in enumerate(statuses)]
    if all(s == "eligible" for s in statuses):
        assert agreement.agree(groups)[0].selected == "a"
    elif strict:
        with pytest.raises(selector.SelectorError, match="policy.strict=true refuses"):
            agreement.agree(groups)
    else:
        d = agreement.agree(groups)[0]
        assert d.selected == "b" and "every rank fell back to b" in " ".join(d.notes)


def test_ranks_under_other_policies_or_catalogues_stop():
    lead = synthetic(["eligible"] * 4, "a")
    other = synthetic(["eligible"] * 4, "b")
    with pytest.raises(selector.SelectorError, match="different policies: requested a vs b"):
        agreement.agree([Group((0,), ("h",), lead), Group((1,), ("h",), other)])
    other = synthetic(["eligible"] * 4, "a")
    other["verdicts"][0]["candidates"][3][0] = "e"
    with pytest.raises(selector.SelectorError, match="different catalogues: d, e"):
        agreement.agree([Group((0,), ("h",), lead), Group((1,), ("h",), other)])
    other = synthetic(["eligible"] * 4, "a")
    other["per_layer"] = [[0, 0], [0, 0]]
    with pytest.raises(selector.SelectorError, match="rank 0 .host h. decided 1 layers, rank 1"):
        agreement.agree([Group((0,), ("h",), lead), Group((1,), ("h",), other)])


def test_maybe_agree_without_torch_distributed_changes_nothing():
    from selector.distributed import maybe_agree, maybe_agree_all
    d = load(*SPARK).select(**MOE)
    assert maybe_agree(d) is d and maybe_agree_all([d, d]) == [d, d]
    with pytest.raises(selector.SelectorError, match="platform"):
        maybe_agree_all(selector.SelectorError("platform: bad"))


def test_agree_needs_an_initialized_group():
    from selector.distributed import agree
    with pytest.raises(selector.SelectorError, match="not initialized"):
        agree(load(*SPARK).select(**MOE))


@pytest.mark.slow
def test_importing_selector_distributed_imports_no_torch():
    code = ("import sys, selector, selector.distributed, selector.distributed.agreement; "
            "print([m for m in ('torch', 'hydra', 'omegaconf') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- a one-rank gloo group in this process: the transport and share_profile, traced ----------
@pytest.fixture
def one_rank(monkeypatch):
    """torch.distributed initialized here with a group of one rank (an in-memory store, a 20 s
    timeout), destroyed afterwards."""
    from datetime import timedelta
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    torch_dist.init_process_group("gloo", store=torch_dist.HashStore(), rank=0, world_size=1,
                                  timeout=timedelta(seconds=20))
    yield torch_dist
    torch_dist.destroy_process_group()


def test_a_one_rank_group_agrees_with_itself(one_rank):
    """One rank: maybe_agree_all leaves the decisions as they are (nothing to agree on);
    agree_all runs the whole exchange (arrival, all_gather, broadcast) and agrees with the
    local decisions, in the default group or a group passed in; a group that is not a
    ProcessGroup is refused by name."""
    from selector.distributed import agree, agree_all, maybe_agree, maybe_agree_all
    sel = load(*SPARK)
    moe, linear = sel.select(**MOE), sel.select(**LINEAR)
    assert maybe_agree_all([moe, linear]) == [moe, linear] and maybe_agree(moe) is moe
    agreed = agree_all([moe, linear])
    assert [a.selected for a in agreed] == [moe.selected, linear.selected]
    assert agreed[0].local is moe and agreed[1].local is linear
    assert [g.ranks for g in agreed[0].ranks] == [(0,)] and agreed[0].ranks[0].hosts == (HOST,)
    assert agree(moe, group=one_rank.new_group([0])).selected == moe.selected
    with pytest.raises(selector.SelectorError, match="group is a str, not a torch.distributed "
                                                     "ProcessGroup"):
        agree_all([moe], group="world")


def _profile_file(tmp_path):
    from selector.core import profile as prof
    layer = dict(op="linear", quant="nvfp4", activation="silu", act_and_mul=False, ep_size=1,
                 tp_size=1, dtype="bfloat16", hidden_size=256, intermediate_size=256,
                 swiglu_limit=None, num_experts=None, top_k=None, all2all=None, num_tokens=128)
    key = {"gpu": None, "capability": None, "driver": None, "cuda": None,
           "packages": {"torch": "2.13.0"}, "selector": "0.1.0", "machine": "x86_64"}
    p = prof.Profile(key, (prof.Cell(layer, 128, {"emulation": prof.Timing(0.1, 0.09, 0.11, 8)},
                                     {}),), {"warmup": 1}, "now")
    f = tmp_path / "measured.json"
    f.write_text(p.dumps())
    return f


def test_share_profile_on_a_one_rank_group(one_rank, tmp_path, monkeypatch):
    """share_profile writes rank 0's bytes where `dest` says (else into the cache directory,
    named by their digest) and returns that path; the problems are SelectorErrors that say
    what to do."""
    import hashlib

    from selector.distributed.profile import share_profile
    f = _profile_file(tmp_path)
    out = share_profile(f, dest=tmp_path / "shared.json")
    assert out == str(tmp_path / "shared.json") and Path(out).read_bytes() == f.read_bytes()
    assert share_profile(str(f), one_rank.new_group([0]), dest=tmp_path / "g.json") == \
        str(tmp_path / "g.json")
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    digest = hashlib.sha256(f.read_bytes()).hexdigest()[:24]
    assert share_profile(f) == str(tmp_path / "cache" / "profiles" / f"shared-{digest}.json")
    with pytest.raises(selector.SelectorError) as exc:
        share_profile()
    assert str(exc.value) == ("selector.distributed.share_profile: rank 0: share_profile: rank 0 "
                              "must name the profile it measured (path=...)")
    with pytest.raises(selector.SelectorError) as exc:
        share_profile(f, dest=tmp_path)
    assert str(exc.value) == f"share_profile: cannot write {tmp_path}: Is a directory"
    monkeypatch.setenv("SELECTOR_NO_CACHE", "1")
    with pytest.raises(selector.SelectorError, match=r"the cache directory is off "
                                                     r"\(SELECTOR_CACHE_DIR\): pass dest=PATH"):
        share_profile(f)
