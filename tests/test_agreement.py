"""selector.distributed.agreement in-process, on fingerprints the ranks would exchange: what the agreed
decision says and how it reads (notes, text, canonical bytes, immutability). Written so that a
mutation run over agreement.py (tools/mutate.py) finds what a one-token change breaks."""
from __future__ import annotations

import dataclasses
import json

import pytest
from helpers import load

import selector
from selector.distributed import agreement, fingerprint
from selector.distributed.agreement import Group

MOE = {"op": "moe", "quant": "nvfp4", "activation": "relu2", "act_and_mul": False,
       "hidden_size": 256, "intermediate_size": 128, "num_experts": 8, "top_k": 2}
LINEAR = {"op": "linear", "quant": "nvfp4", "hidden_size": 256, "intermediate_size": 128}
SPARK = ("platform=dgx_spark", "stack=flashinfer_0_7_4")
B200 = ("platform=b200", "stack=flashinfer_0_7_4")


def groups_of(per_rank, hosts=None):
    by = {}
    for r, decisions in enumerate(per_rank):
        raw = fingerprint.encode(decisions)
        by.setdefault(fingerprint.digest(raw), (raw, []))[1].append(r)
    return [Group(tuple(ranks), tuple((hosts or {}).get(r, "h") for r in ranks), json.loads(raw))
            for raw, ranks in by.values()]


def body(candidates, requested="auto", strict=True, notes=(), layer=MOE, selected=None):
    return {"v": 1, "error": None, "platform": {"capability": "12.1", "cuda": "13.0",
                                                "packages": {"a": "1"}},
            "layers": [layer], "per_layer": [[0, 0]],
            "verdicts": [{"requested": requested, "selected": selected, "strict": strict,
                          "candidates": [[n, s, [] if s in agreement.USABLE else
                                          [["device", f"{n} fails", "src", f"need {n}",
                                            "error"]]] for n, s in candidates],
                          "notes": list(notes), "warnings": []}]}


def test_fingerprint_is_canonical_json():
    """Byte-identical fingerprints group ranks: keys sorted, no spaces."""
    raw = fingerprint.encode([load(*SPARK).select(**MOE), load(*SPARK).select(**LINEAR)])
    assert raw == json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()


def test_agreed_decision_is_immutable_and_equal_on_every_rank():
    """Ranks hold equal agreed decisions (and reprs) whatever their own local decision."""
    spark, b200 = load(*SPARK).select(**MOE), load(*B200).select(**MOE)
    groups = groups_of([[spark], [b200]])
    a0 = agreement.agree(groups, [spark])[0]
    a1 = agreement.agree(groups, [b200])[0]
    assert a0 == a1 and repr(a0) == repr(a1) and a0.local is spark and a1.local is b200
    with pytest.raises(dataclasses.FrozenInstanceError):
        a0.selected = "x"  # type: ignore[misc]


def test_platform_label_is_the_local_one():
    d = load(*SPARK).select(**MOE)
    a = agreement.agree(groups_of([[d], [d]]), [d])[0]
    assert d.platform_label and a.platform_label == d.platform_label
    assert agreement.agree(groups_of([[d], [d]]))[0].platform_label == ""


def test_notes_name_ranks_only_where_some_ranks_fail():
    """A backend failing on some ranks gets a note naming them; one failing on every rank, or
    usable everywhere, gets none."""
    g = [Group((0,), ("a",), body([("x", "eligible"), ("y", "rejected"), ("z", "eligible")])),
         Group((1,), ("b",), body([("x", "rejected"), ("y", "rejected"), ("z", "eligible")]))]
    d = agreement.agree(g)[0]
    assert d.selected == "z"
    assert any(n.startswith("x rejected on rank 1 (host b): x fails") for n in d.notes)
    assert not any(n.startswith(("y ", "z ")) for n in d.notes), d.notes


def test_shared_notes_kept_only_when_every_rank_chose_the_agreed_backend():
    same = [Group((0,), ("a",), body([("x", "eligible")], notes=["shared", "only a"],
                                     selected="x")),
            Group((1,), ("b",), body([("x", "eligible")], notes=["shared"], selected="x"))]
    assert agreement.agree(same)[0].notes == ("shared",)
    differ = [Group((0,), ("a",), body([("x", "eligible"), ("z", "eligible")],
                                       notes=["shared"], selected="x")),
              Group((1,), ("b",), body([("x", "rejected"), ("z", "eligible")],
                                       notes=["shared"], selected="z"))]
    d = agreement.agree(differ)[0]
    assert d.selected == "z" and "shared" not in d.notes
    assert "rank 0 (host a) alone would have chosen x; every rank runs z" in d.notes


def test_ranks_deciding_different_layers_stop(tmp_path):
    """Layer maps that differ between ranks are compared pairwise, not the lead's alone."""
    a = body([("x", "eligible")])
    b = body([("x", "eligible")])
    a["layers"] = [MOE, LINEAR]
    b["layers"] = [MOE, dict(LINEAR, hidden_size=512)]
    a["per_layer"] = [[0, 0], [1, 0]]
    b["per_layer"] = [[0, 0], [1, 0]]
    with pytest.raises(selector.SelectorError, match="layer 1: .* decide different layers: "
                       "hidden_size 256 vs 512"):
        agreement.agree([Group((0,), ("h",), a), Group((1,), ("h",), b)])
    b["layers"] = [dict(LINEAR, hidden_size=512), MOE]
    b["per_layer"] = [[1, 0], [0, 0]]  # the same layers, numbered in another order
    with pytest.raises(selector.SelectorError, match="layer 1"):
        agreement.agree([Group((0,), ("h",), a), Group((1,), ("h",), b)])


def test_text_of_moe_and_linear_layers():
    moe = agreement.agree([Group((0,), ("h",), body([("x", "eligible")]))])[0]
    lin = agreement.agree([Group((0,), ("h",), body([("x", "eligible")], layer=LINEAR))])[0]
    assert str(moe).splitlines()[0] == "moe layer: nvfp4, relu2, non-gated"
    assert str(lin).splitlines()[0] == "linear layer: nvfp4"


def test_text_wraps_notes_at_100_columns():
    note = "x" * 93 + " yyy zz"  # "  - " + 93 + " yyy" is 101 columns: wraps before yyy
    d = agreement.agree([Group((0,), ("h",), body([("x", "eligible")], notes=[note],
                                                  selected="x"))])[0]
    lines = str(d).splitlines()
    assert max(len(ln) for ln in lines) <= 100
    assert "  - " + "x" * 93 in lines and "    yyy zz" in lines


def test_ranks_with_another_fingerprint_version_stop():
    other = body([("x", "eligible")])
    other["v"] = fingerprint.VERSION + 1
    with pytest.raises(selector.SelectorError, match=r"rank 1 \(host b\) sent fingerprint "
                       r"version 2, this selector reads version 1"):
        agreement.agree([Group((0,), ("a",), body([("x", "eligible")])),
                         Group((1,), ("b",), other)])


def test_spans():
    assert agreement.spans([0, 1, 2, 3, 8]) == "0-3, 8"
    assert agreement.spans([1, 3]) == "1, 3"
    assert agreement.spans([7]) == "7" and agreement.spans([]) == ""


def test_digest_fills_the_exchange_record():
    from selector import distributed
    d = fingerprint.digest(b"fingerprint")
    assert len(d) == 16
    assert distributed._RECORD.unpack(distributed._RECORD.pack(d, 1, 0, b"h"))[0] == d


def test_to_json_is_to_dict_in_order():
    d = load(*SPARK).select(**MOE)
    a = agreement.agree(groups_of([[d]]), [d])[0]
    assert a.to_json() == json.dumps(a.to_dict(), indent=2)


def test_every_layer_keeps_its_own_fields():
    """Two MoE layers of different sizes share one verdict: layer and verdict numbers differ."""
    spark = load(*SPARK)
    ds = [spark.select(**MOE), spark.select(**dict(MOE, hidden_size=512)),
          spark.select(**LINEAR)]
    out = agreement.agree(groups_of([ds, ds]), ds)
    assert groups_of([ds])[0].body["per_layer"] == [[0, 0], [1, 0], [2, 1]]
    assert [a.layer for a in out] == [d.layer.to_dict() for d in ds]  # the JSON object
    assert [a.local for a in out] == ds


def test_platform_without_a_local_decision_is_the_lowest_ranks():
    g = groups_of([[load(*SPARK).select(**MOE)], [load(*B200).select(**MOE)]])
    a = agreement.agree(g)[0]
    assert a.platform["capability"] == "12.1" == g[0].body["platform"]["capability"]


def test_opt_in_on_some_ranks_keeps_their_reason():
    """Usable everywhere, opt-in on rank 0: agreed opt_in, with rank 0's opt-in reason."""
    a = body([("x", "opt_in"), ("z", "eligible")])
    a["verdicts"][0]["candidates"][0][2] = [["opt_in", "never automatic", "src", "opt in",
                                              "error"]]
    b = body([("x", "eligible"), ("z", "eligible")])
    d = agreement.agree([Group((0,), ("a",), a), Group((1,), ("b",), b)])[0]
    x = d.candidate("x")
    assert x.status == "opt_in" and d.selected == "z"
    assert [r.message for r in x.reasons] == ["rank 0 (host a): never automatic"]
    assert x.reasons[0].ranks == (0,)


def test_a_selected_opt_in_backend_reads_as_opt_in():
    """A rank that selected an opt-in backend (asked for it) contributes it as opt_in."""
    d = load(*SPARK, "policy.moe_backend=flashinfer_b12x").select(**MOE)
    assert d.selected == "flashinfer_b12x"
    got = {c[0]: c[1] for c in fingerprint.read_decision(d)["verdict"]["candidates"]}
    assert got["flashinfer_b12x"] == "opt_in" and got["emulation"] == "eligible"
    e = load(*SPARK).select(**MOE)
    got = {c[0]: c[1] for c in fingerprint.read_decision(e)["verdict"]["candidates"]}
    assert got[e.selected] == "eligible"


def test_explicit_backend_not_applicable_falls_to_automatic_selection():
    g = [Group((0,), ("a",), body([("x", "not_applicable"), ("z", "eligible")], "x")),
         Group((1,), ("b",), body([("x", "not_applicable"), ("z", "eligible")], "x"))]
    d = agreement.agree(g)[0]
    assert d.selected == "z"
    assert any(n.startswith("policy.moe_backend=x does not implement this layer on ") and
               n.endswith("automatic selection chose z for every rank") for n in d.notes)
    g = [Group((0,), ("a",), body([("x", "not_applicable"), ("z", "rejected")], "x"))]
    d = agreement.agree(g)[0]
    assert d.selected is None
    assert any(n.endswith("automatic selection chose nothing for every rank") for n in d.notes)


def test_strict_refusal_comes_from_a_rank_where_the_request_fails():
    """Rank 1 rejects the requested x under policy.strict=false; rank 0, where x runs, says
    strict: every rank falls back (only the failing rank's policy decides)."""
    g = [Group((0,), ("a",), body([("x", "eligible"), ("z", "eligible")], "x", strict=True)),
         Group((1,), ("b",), body([("x", "rejected"), ("z", "eligible")], "x", strict=False))]
    d = agreement.agree(g)[0]
    assert d.selected == "z"
    assert any("policy.strict=false: every rank fell back to z" in n for n in d.notes)
    g[1] = Group((1,), ("b",), body([("x", "rejected"), ("z", "eligible")], "x", strict=True))
    with pytest.raises(selector.SelectorError, match="policy.strict=true refuses on every rank"):
        agreement.agree(g)
    g = [Group((0,), ("a",), body([("x", "rejected"), ("z", "rejected")], "x", strict=False))]
    d = agreement.agree(g)[0]
    assert any(n.endswith("every rank fell back to nothing") for n in d.notes)


def test_nothing_everywhere_reads_nothing():
    g = [Group((0,), ("a",), body([("x", "eligible"), ("z", "rejected")], selected="x")),
         Group((1,), ("b",), body([("x", "rejected"), ("z", "rejected")]))]
    d = agreement.agree(g)[0]
    assert d.selected is None
    assert "rank 0 (host a) alone would have chosen x; every rank runs nothing" in d.notes
    assert "selected: none" in str(d).splitlines()


def test_platform_text_lists_installed_packages_only():
    a = body([("x", "eligible")])
    a["platform"] = {"capability": None, "cuda": None, "packages": {"p": "1.0", "q": None}}
    b = body([("x", "eligible")])
    b["platform"] = {"capability": "12.1", "cuda": "13.0", "packages": {"q": None}}
    c = body([("x", "eligible")])
    c["platform"] = {"capability": "12.1", "cuda": "13.0"}
    text = str(agreement.agree([Group((0,), ("a",), a), Group((1,), ("b",), b),
                                Group((2,), ("c",), c)])[0])
    assert "rank 0 (host a): no GPU, no CUDA; p 1.0\n" in text
    assert "rank 1 (host b): SM 12.1, CUDA 13.0; no kernel packages\n" in text
    assert "rank 2 (host c): SM 12.1, CUDA 13.0; no kernel packages\n" in text


def test_notes_do_not_break_at_hyphens():
    note = "a" * 80 + " flashinfer-python-cutlass-dsl-name"  # "flashinfer-" would fit
    d = agreement.agree([Group((0,), ("h",), body([("x", "eligible")], notes=[note],
                                                  selected="x"))])[0]
    assert "    flashinfer-python-cutlass-dsl-name" in str(d).splitlines()


def test_reasons_of_older_fingerprints_have_three_fields():
    """[rule, message, source] without need and severity: the message is the need."""
    a = body([("x", "rejected"), ("z", "eligible")])
    a["verdicts"][0]["candidates"][0][2] = [["device", "x fails", "src"]]
    d = agreement.agree([Group((0,), ("a",), a)])[0]
    (r,) = d.candidate("x").reasons
    assert (r.need, r.severity) == ("x fails", "error")
    assert "1 x fails" in d.summary()
