"""`doctor --verify` and `explain probe=verify` (selector.inspect.verify, selector.backends.children.verify_child).

On this CPU machine only `emulation` passes its rules: it verifies OK with its (small, non-zero)
errors shown. Deliberately wrong backends, supplied the way a user would (a --config-dir backend
whose entry point is a module registered under the `selector.backends` entry-point group), are
FAILed with the measured error and rejected under probe=verify (rule kind `verify`); one that
crashes and one that hangs are contained (FAIL saying what happened; selector carries on).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import cli_env, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from selector.core.errors import SelectorError
from selector.core.rules import VerifyFailure, VerifyRule, compile_rule
from selector.inspect import verify, verify_cache

pytestmark = pytest.mark.slow  # child processes run every backend: CI's `-m slow` step

WRONG = Path(__file__).resolve().parent / "wrong_backends"  # site/ (the plugin) and conf/


def _backend_file(conf: Path, op: str, name: str, entry: str) -> None:
    (conf / "backend" / op).mkdir(parents=True, exist_ok=True)
    (conf / "backend" / op / f"{name}.yaml").write_text(
        f"rank: 1\nentry_point: {entry}\nimplements: [nvfp4]\nrules:\n  - kind: package\n"
        "    package: torch\n    source: tests/test_verify.py\n")


@pytest.fixture(scope="module")
def wrong():
    """(config dir, environment with the plugin registered, plugin site dir)."""
    site = WRONG / "site"
    env = cli_env(site)
    return WRONG / "conf", env, site


@pytest.fixture(scope="module")
def doctor_wrong(wrong):
    """One `doctor --verify` over the packaged catalogue plus the wrong backends (the slow part:
    later runs read this machine's cache)."""
    pytest.importorskip("torch")
    conf, env, _ = wrong
    # a generous per-child limit: a loaded CI machine runs a child's 8 cases slowly
    r = run_cli("doctor", "--verify", "--format", "json", "--timeout", "600", "--config-dir",
                str(conf), env=env, timeout=1800)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def _rows(doc, backend, op=None):
    return [v for v in doc["verify"] if v["backend"] == backend and (op is None or v["op"] == op)]


# ---------------------------------------------------------------------------------------------
# The command line

def test_emulation_verifies_ok_with_errors(doctor_wrong):
    doc = doctor_wrong.json
    rows = _rows(doc, "emulation")
    cases = {(v["op"], v["scheme"], v["act_and_mul"]) for v in rows}
    assert cases == {("moe", q, g) for q in ("nvfp4", "nvfp4_w4a16") for g in (True, False)} | {
        ("linear", "nvfp4", None), ("linear", "nvfp4_w4a16", None)}
    for v in rows:
        assert v["status"] == "OK", v
        b = verify.BOUNDS[v["op"], v["scheme"]]
        # bf16 output rounding against a float64 reference: small, never zero
        assert 0 < v["max_rel_err"] <= b.max_rel_err and 0 < v["rms_rel_err"] <= b.rms_rel_err
        # "cpu" here; "cuda:0 (<GPU name>)" where a CUDA device is visible (the H200 run)
        assert v["seconds"] > 0 and "relative error" in v["detail"]
        assert v["device"] == "cpu" or v["device"].startswith("cuda:"), v["device"]
        assert set(v) >= {"backend", "op", "scheme", "status", "max_rel_err", "rms_rel_err",
                          "seconds", "detail"}


def test_backends_that_cannot_run_here_are_skipped_with_why(doctor_wrong):
    doc = doctor_wrong.json
    for v in _rows(doc, "flashinfer_cutlass"):
        assert v["status"] == "SKIPPED" and v["scheme"] is None
        # no GPU here; on a GPU without FP4 tensor cores (SM 9.0) the device rule names it
        # (on the H200, SM 9.0, its package rule fails first: flashinfer is not installed there)
        assert "[device]" in v["detail"] or "[package]" in v["detail"]
        assert "no GPU" in v["detail"] or "this GPU is SM" in v["detail"], v["detail"]


def test_doctor_verify_exits_0_on_this_machine(doctor_wrong):
    """Without the wrong backends: emulation OK, exit 0 (answered from this machine's cache)."""
    r = run_cli("doctor", "--verify", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = r.json
    assert doc["problems"] == [] and doc["verify_info"]["fingerprint"]
    assert {v["status"] for v in doc["verify"]} <= {"OK", "SKIPPED"}
    assert all(v["cached"] for v in _rows(doc, "emulation"))
    text = run_cli("doctor", "--verify", "--op", "linear")
    assert text.returncode == 0 and "emulation" in text.stdout and "OK" in text.stdout
    assert "  moe\n" not in text.stdout.split("verify (")[1]


def test_wrong_sign_and_dropped_scale_fail(doctor_wrong):
    assert doctor_wrong.returncode == 1
    doc = doctor_wrong.json
    rows = _rows(doc, "flip_sign")
    flip = [v for v in rows if not v["unverified"]]
    # every activation, clamp and size, gated and non-gated; situ (its rules accept it, the
    # reference cannot compute it) is unverified, not run
    assert len(flip) == 16 and all(v["status"] == "FAIL" for v in flip)
    assert {v["activation"] for v in rows if v["unverified"]} == {"situ"}
    assert all(v["status"] == "SKIPPED" for v in rows if v["unverified"])
    for v in flip:  # -y against y: relative error 2
        assert v["max_rel_err"] == pytest.approx(2, rel=0.05)
        assert v["rms_rel_err"] == pytest.approx(2, rel=0.05)
        w = v["worst"]
        # -y at the element where y + ref peaks: y errs there by a correct kernel's own error
        # (W4A4: FC2's re-quantization, a few % of that element)
        assert w["got"] == pytest.approx(-w["expected"], rel=0.05)
        assert "worst element" in v["detail"]
    drop = _rows(doc, "drop_scale")
    assert len(drop) == 3 and all(v["status"] == "FAIL" for v in drop)  # aligned, odd, bias
    assert all(v["max_rel_err"] > 100 for v in drop)  # 1 / weight_scale_2
    assert any("verify linear/drop_scale" in p for p in doc["problems"])


def test_device_error_fails_with_the_error(doctor_wrong):
    """Out-of-bounds indexing: IndexError here, a CUDA device-side assert on a GPU."""
    v = _rows(doctor_wrong.json, "device_assert")[0]
    assert v["status"] == "FAIL" and v["detail"].startswith("raised ")
    assert "IndexError" in v["detail"] or "CUDA error" in v["detail"]


def test_crash_is_contained(doctor_wrong):
    v, *rest = _rows(doctor_wrong.json, "crash")
    # the rest is not run after a crash (a fresh process each would cost a start per case)
    assert rest and all(r["status"] == "SKIPPED" and r["unverified"] and "not run" in r["detail"]
                        for r in rest)
    assert v["status"] == "FAIL" and v["max_rel_err"] is None
    assert "killed by SIGSEGV" in v["detail"]
    assert "while running moe nvfp4 gated silu" in v["detail"]
    assert "Segmentation fault" in v["detail"]


def test_probe_verify_rejects_the_wrong_backends(doctor_wrong, wrong):
    conf, env, _ = wrong
    plain = run_cli("explain", "--format", "json", "--config-dir", str(conf), "layer.op=moe",
                    env=env)
    assert plain.json["selected"] == "flip_sign"  # metadata alone cannot tell
    r = run_cli("explain", "--format", "json", "--config-dir", str(conf), "layer.op=moe",
                "probe=verify", env=env)
    assert r.returncode == 0, r.stderr
    d = r.json
    assert d["selected"] == "emulation"
    cand = {c["backend"]: c for c in d["candidates"]}
    assert cand["flip_sign"]["status"] == "rejected"
    (reason,) = [x for x in cand["flip_sign"]["reasons"] if x["rule"] == "verify"]
    bound = verify.BOUNDS["moe", "nvfp4"].max_rel_err
    assert "max relative error 2" in reason["message"] and f"bound {bound:.3g}" in reason["message"]
    assert "doctor --verify" in reason["source"]
    assert [x["rule"] for x in cand["crash"]["reasons"]] == ["verify"]
    assert "SIGSEGV" in cand["crash"]["reasons"][0]["message"]
    # requested by name under strict: refused with the measured error, exit 1
    r = run_cli("explain", "--config-dir", str(conf), "layer.op=linear", "probe=verify",
                "policy.linear_backend=drop_scale", env=env)
    assert r.returncode == 1 and "[verify]" in r.stdout and "failed verification" in r.stdout


def test_hang_is_contained_and_its_helpers_killed(wrong, tmp_path):
    """A backend that never returns: TIMEOUT (unverified, not FAIL) after the time limit; its
    process group is killed."""
    pytest.importorskip("torch")
    conf, env, site = wrong
    _backend_file(tmp_path, "linear", "hang", "wrongkernels:HangLinear")
    pid_file = tmp_path / "helper.pid"
    code = textwrap.dedent(f"""
        import json, sys, time
        import selector
        from selector.inspect import verify
        sel = selector.load([], config_dirs=[{str(tmp_path)!r}])
        b = sel.catalogue.get("linear", "hang")
        cases, _ = verify.cases_for(sel, "linear", b)
        t = time.perf_counter()
        r, *rest = verify.run_backend(b, cases, [], [{str(tmp_path)!r}], timeout=30)
        assert all(x.status == "SKIPPED" for x in rest)
        print(json.dumps([r.status, r.detail, time.perf_counter() - t]))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(env, WRONG_HELPER_PID=str(pid_file)))
    assert p.returncode == 0, p.stderr
    status, detail, took = json.loads(p.stdout.splitlines()[-1])
    assert status == "TIMEOUT" and "timed out after " in detail and "--timeout 30 s" in detail
    assert "while running linear nvfp4" in detail and took >= 30  # waited its timeout
    helper = int(pid_file.read_text())
    for _ in range(50):
        if not _alive(helper):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"helper process {helper} of the hung backend is still running")


def _alive(pid: int) -> bool:
    """Running (a killed process left as a zombie for its new parent to reap is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def test_bad_op_is_bad_input():
    r = run_cli("doctor", "--op", "attention")
    assert r.returncode == 2 and "invalid choice" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------------------------------------
# The bounds: what a correct kernel may differ by, what a wrong one does

def test_bounds_admit_kernel_roundings_and_refuse_garbage():
    """A correct W4A4 MoE kernel that keeps its intermediate in bf16 re-quantizes some FC2 input
    elements to the neighbouring FP4 code: inside the bound. A flipped sign is far outside."""
    torch = pytest.importorskip("torch")
    from selector.backends.children.verify_child import build_moe, compare
    from selector.backends.reference import activation_fn, reference_moe
    from selector.backends.reference.nvfp4 import _act_input
    case = verify.Case("moe", "nvfp4", "silu", True, "nvfp4")
    x, w, tw, ti = build_moe(dict(verify.SHAPES["moe"]["aligned"]), "nvfp4", True, "silu", 0)
    ref = reference_moe(x.to(torch.float64), w, tw, ti, activation="silu", quant="nvfp4",
                        compute_dtype=torch.float64)
    w13, w2 = w.w13.dequantize(), w.w2.dequantize()
    y = torch.zeros(x.shape)
    for e in range(w13.shape[0]):
        tok, slot = torch.nonzero(ti.long() == e, as_tuple=True)
        h = (_act_input(x[tok], "nvfp4", w.a13_scale, torch.float32) @ w13[e].T).bfloat16()
        a = activation_fn(h.float(), "silu", True).bfloat16().float()
        y.index_add_(0, tok, (_act_input(a, "nvfp4", w.a2_scale[e], torch.float32) @ w2[e].T)
                     * tw[tok, slot].unsqueeze(-1))
    measured = dict(compare(y.bfloat16(), ref), outcome="measured", device="cpu")
    ok = verify.judge("k", case, measured)
    assert ok.status == "OK" and ok.rms_rel_err > 0.005, ok  # codes did flip
    bad = verify.judge("k", case, dict(compare(-y, ref), outcome="measured", device="cpu"))
    assert bad.status == "FAIL" and bad.max_rel_err > 1.9


def test_bounds_are_ordered():
    """(The bounds' values are checked against their measurement in test_verify_zoo.py.)"""
    for (op, q), b in verify.BOUNDS.items():
        assert b.rms_rel_err <= b.max_rel_err < 1 and 0 < b.gain_err < 1
        if q == "nvfp4":  # W4A4 at least as loose as W4A16
            w16 = verify.BOUNDS[op, "nvfp4_w4a16"]
            assert b.max_rel_err >= w16.max_rel_err and b.rms_rel_err >= w16.rms_rel_err


@pytest.mark.parametrize("event,status,needle", [
    ({"outcome": "measured", "max_rel_err": 0.01, "rms_rel_err": 0.005}, "OK", "bound"),
    ({"outcome": "measured", "max_rel_err": 0.9, "rms_rel_err": 0.005}, "FAIL", "0.9"),
    ({"outcome": "measured", "max_rel_err": 0.01, "rms_rel_err": 0.005, "gain_err": 0.5,
      "gain_worst": [3, 1.5]}, "FAIL", "at expert 3 (gain 1.5)"),
    ({"outcome": "measured", "max_rel_err": 0.01, "rms_rel_err": 0.2}, "FAIL", "RMS 0.2"),
    ({"outcome": "measured", "max_rel_err": None, "rms_rel_err": None, "nonfinite": 3}, "FAIL",
     "3 output values are not finite"),
    ({"outcome": "measured", "max_rel_err": math.inf, "rms_rel_err": 1.0}, "FAIL",
     "no error could be measured"),
    ({"outcome": "error", "error": "RuntimeError: CUDA error: no kernel image is available"},
     "FAIL", "CUDA error"),
    ({"outcome": "unavailable", "error": "BackendUnavailable: needs vllm"}, "SKIPPED",
     "cannot run this kernel here"),
], ids=["ok", "max", "gain", "rms", "nonfinite", "inf", "cuda-error", "unavailable"])
def test_judge(event, status, needle):
    r = verify.judge("b", verify.Case("moe", "nvfp4", "silu", True, "nvfp4"), event)
    assert r.status == status and needle in r.detail


# ---------------------------------------------------------------------------------------------
# The rule kind

def test_verify_rule_fires_for_the_failed_case_only():
    rule = VerifyRule.measured("moe", "k", (VerifyFailure("nvfp4", True, "moe nvfp4 gated "
                                                          "silu: max relative error 2"),))

    class L:
        def __init__(self, quant, act_and_mul):
            self.quant, self.act_and_mul = quant, act_and_mul
    reason = rule.evaluate(L("nvfp4", True), None)
    assert reason.rule == "verify" and "max relative error 2" in reason.message
    assert rule.evaluate(L("nvfp4", False), None) is None
    assert rule.evaluate(L("nvfp4_w4a16", True), None) is None


def test_verify_rule_rejects_through_the_resolver():
    import selector
    from selector.api import Selector
    sel = selector.load(["platform=cpu", "platform.packages.torch=2.13.0"])
    assert sel.select(op="linear").selected == "emulation"
    failed = {("linear", "emulation"): (VerifyFailure("nvfp4", None, "linear nvfp4: boom"),)}
    d = Selector(sel.run_config, sel.tree, verify=failed).select(op="linear")
    assert d.selected is None
    (r,) = d.candidate("emulation").reasons
    assert r.rule == "verify" and "linear nvfp4: boom" in r.message
    assert Selector(sel.run_config, sel.tree, verify=failed).select(
        op="linear", quant="nvfp4_w4a16").selected == "emulation"


def test_verify_rule_cannot_be_declared_in_a_backend_file():
    with pytest.raises(SelectorError) as e:
        compile_rule({"kind": "verify", "source": "x"}, "catalogue.moe.x.rules[0]", "x.yaml")
    assert "catalogue.moe.x.rules[0].kind" in str(e.value) and "probe=verify" in str(e.value)


def test_child_never_inherits_probe_verify():
    assert verify.child_overrides(["probe=verify", "+probe=deep", "layer.op=moe", "~probe"]) == [
        "layer.op=moe"]


def test_platform_preset_is_not_verified():
    import selector
    sel = selector.load(["platform=b200"])
    rep = verify.run_verify(sel, ["platform=b200"], use_cache=False)
    assert {r.status for r in rep.results} == {"SKIPPED"}
    assert "describes other hardware" in rep.notes[0]
    with pytest.raises(SelectorError, match="--op"):
        verify.run_verify(sel, ops=["attention"])
    with pytest.raises(SelectorError, match="--timeout"):
        verify.run_verify(sel, timeout=0)


# ---------------------------------------------------------------------------------------------
# The cache

def _result(status="OK", **kw):
    return verify.Result("b", "moe", "nvfp4", status, "d", max_rel_err=0.01, rms_rel_err=0.005,
                         seconds=1.0, activation="silu", act_and_mul=True,
                         bound=verify.BOUNDS["moe", "nvfp4"], **kw)


def test_cache_roundtrip_and_private_files(tmp_path):
    root = tmp_path / "verify"
    c = verify.VerifyCache("f" * 24, {"gpu": None}, root)
    c.put("k", _result())
    path = Path(c.save())
    assert path.stat().st_mode & 0o777 == 0o600 and root.stat().st_mode & 0o777 == 0o700
    got = verify.VerifyCache("f" * 24, {}, root).get("k", 120)
    assert got.cached and got.status == "OK" and got.max_rel_err == 0.01
    assert not list(root.glob(".*.tmp"))
    assert verify.VerifyCache("f" * 24, {}, None).get("k", 120) is None  # cache off


def test_cache_reruns_a_timeout_given_more_time(tmp_path):
    c = verify.VerifyCache("a" * 24, {}, tmp_path)
    c.put("k", _result("FAIL", timeout_s=10.0))
    c.save()
    c = verify.VerifyCache("a" * 24, {}, tmp_path)
    assert c.get("k", 10) is not None and c.get("k", 5) is not None
    assert c.get("k", 60) is None


def test_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(verify_cache, "MAX_ENTRIES", 3)
    monkeypatch.setattr(verify_cache, "MAX_FILES", 2)
    c = verify.VerifyCache("b" * 24, {}, tmp_path)
    for i in range(5):
        c.put(f"k{i}", _result())
        time.sleep(0.01)
    c.save()
    assert sorted(verify.VerifyCache("b" * 24, {}, tmp_path).entries) == ["k2", "k3", "k4"]
    for name in ("c", "d"):
        time.sleep(0.02)
        verify.VerifyCache(name * 24, {}, tmp_path).save()
    assert sorted(p.name[0] for p in tmp_path.glob("*.json")) == ["c", "d"]


def test_cache_ignores_symlinks_and_oversized_files(tmp_path):
    good = verify.VerifyCache("e" * 24, {}, tmp_path / "real")
    good.put("k", _result())
    target = Path(good.save())
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / target.name).symlink_to(target)
    assert verify.VerifyCache("e" * 24, {}, tmp_path / "link").entries == {}
    big = tmp_path / "big"
    big.mkdir()
    (big / target.name).write_text(" " * (verify.MAX_BYTES + 1))
    assert verify.VerifyCache("e" * 24, {}, big).entries == {}


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=6),
    max_leaves=30)


@settings(max_examples=100, deadline=None)
@given(doc=json_like, entry=st.dictionaries(st.sampled_from(
    ["backend", "op", "scheme", "status", "detail", "max_rel_err", "rms_rel_err", "seconds",
     "bound", "worst", "timeout_s", "activation", "act_and_mul"]), json_like, max_size=13))
def test_cache_survives_any_content(tmp_path_factory, doc, entry):
    """A corrupted or foreign cache file is ignored entry by entry, never raised."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / f"{'9' * 24}.json").write_text(json.dumps(doc))
    assert verify.VerifyCache("9" * 24, {}, root).get("k", 1) is None
    (root / f"{'9' * 24}.json").write_text(json.dumps(
        {"version": verify.VERSION, "entries": {"k": {"result": entry}}}))
    r = verify.VerifyCache("9" * 24, {}, root).get("k", 1)
    assert r is None or (r.status in verify.STATUSES and r.cached)
    if r is not None:
        json.dumps(r.to_dict(), allow_nan=False)


def test_a_fine_measure_over_its_bound_names_where_it_is_worst():
    case = verify.Case("moe", "nvfp4", activation="silu", act_and_mul=True)
    ev = {"outcome": "measured", "max_rel_err": 0.001, "rms_rel_err": 0.001, "tile_err": 1.0,
          "tile_worst": [3, 1.0], "act_err": 1.0, "act_worst": ["gelu", 1.0],
          "scale_err": 1e-9, "scale_worst": [7, 1e-9], "device": "cpu"}
    r = verify.judge("emulation", case, ev)
    assert r.status == "FAIL"
    assert "tile scale error 1 (bound" in r.detail and ") at tile 3," in r.detail
    assert "activation confusion 1 (bound" in r.detail and ") toward gelu;" in r.detail
    assert "toward 7" not in r.detail  # under its bound: no place is named


def test_a_time_out_is_timeout_not_fail_and_states_its_budget_and_the_load():
    """issue 48 (7): a verify process that runs out of time (here a real child that waits for
    ever, `signal.pause`) is TIMEOUT: unverified, not a failure (doctor's exit is as for
    SKIPPED, with a warning line), and the message states the time budget and that the
    machine may be loaded; it is not cached (it says nothing of the kernel)."""
    import selector
    sel = selector.load(["platform=cpu"])
    b = sel.catalogue.get("linear", "emulation")
    cases, _ = verify.cases_for(sel, "linear", b)
    first, *rest = verify.run_backend(b, cases, [], [], timeout=1, function="signal:pause")
    assert first.status == "TIMEOUT" and first.unverified, first
    assert "timed out after" in first.detail and "time budget was" in first.detail
    assert "--timeout 1 s" in first.detail and "may be loaded" in first.detail
    assert "load average" in first.detail and "not a wrong answer" in first.detail
    assert rest and all(r.status == "SKIPPED" and r.unverified for r in rest)
    rep = verify.Report([first, *rest], "f" * 24, None, 1.0)
    assert rep.failures == [] and rep.timeouts == [first]
    v = rep.rejections()["linear", "emulation"]
    assert not v.failures and v.unverified
    text = "\n".join(verify.render_text(rep))
    assert "TIMEOUT" in text and "FAIL" not in text
    assert "warning: 1 case(s) TIMEOUT" in text
    # the cache reads a TIMEOUT back (an older run may have stored one) as what it is
    r = verify_cache._result_from(dict(first.to_dict(), timeout_s=1.0))
    assert r is not None and r.status == "TIMEOUT"


def test_the_time_budget_scales_with_the_load(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 0.0, 0.0))
    assert verify.load_scale() == (3.0, "load average 6.0 on 2 core(s)")
    monkeypatch.setattr(os, "getloadavg", lambda: (100.0, 0.0, 0.0))
    assert verify.load_scale()[0] == verify.MAX_LOAD_SCALE
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.0, 0.0))
    assert verify.load_scale()[0] == 1.0
