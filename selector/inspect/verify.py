"""Verify: run each usable backend on small NVFP4 and FP8 (linear) problems and compare it with the reference.

Metadata and imports can pass while a kernel returns garbage (FlashInfer #3294, #2723: releases
without SM12x cubins; CUTLASS MoE garbage on GB10). `selector doctor --verify` and `explain
probe=verify` run every backend that passes its rules on this machine, once per case (op, quant
scheme, gated or not), in a child process with a time limit (selector.backends.verify_child,
named only by its "module:function"): it prepares the weights with the backend's own `prepare`,
runs its `apply` on the device and compares with selector.backends.reference in float64 on the
CPU. A crash, a hang or a CUDA error is a FAIL naming what happened, never a crash of selector.

Results are cached per platform fingerprint (GPU, driver, CUDA, package versions, Python), so an
engine pays for verification once per machine and stack: see `VerifyCache`.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform as _platform
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from selector.core.errors import SelectorError
from selector.inspect import child_runner
from selector.inspect.child_runner import ChildOutcome
from selector.inspect.probe_child import VERIFY_MARK as MARK

if TYPE_CHECKING:  # pragma: no cover
    from selector.api import Selector
    from selector.core.model import BackendSpec, RunConfig
    from selector.core.rules import VerifyVerdict

ConfigDirs = Sequence[Union[str, "os.PathLike[str]"]]

CHILD = "selector.backends.verify_child:main"
VERSION = 3  # of the problems, bounds and cache format: a change invalidates cached results
DEFAULT_TIMEOUT_S = float(os.environ.get("SELECTOR_VERIFY_TIMEOUT", "120"))
#: cases one child process runs (the time limit is per child): a backend's 30-odd cases take a few
#: children, so a slow machine does not run out of time on a correct backend
CASES_PER_CHILD = 8
STATUSES = ("OK", "FAIL", "SKIPPED")

# The problems (backends/verify_child.py builds them; docs/verify.md "Problems"): "aligned" sizes
# every kernel of the catalogue accepts (multiples of 256) and "odd" ones (multiples of 16 only),
# an odd token count, top-4 routing over 16 experts with every expert getting >= 8 tokens.
SHAPES: Mapping[str, Mapping[str, Mapping[str, int]]] = {
    "moe": {"aligned": {"num_tokens": 67, "hidden_size": 256, "intermediate_size": 256,
                        "num_experts": 16, "top_k": 4},
            "odd": {"num_tokens": 37, "hidden_size": 272, "intermediate_size": 144,
                    "num_experts": 16, "top_k": 4}},
    "linear": {"aligned": {"num_tokens": 67, "hidden_size": 256, "out_features": 256},
               "odd": {"num_tokens": 37, "hidden_size": 272, "out_features": 144}}}
SEED = 0
# Every activation the backend's rules accept is run (gated, then non-gated), on the aligned
# problem; the first accepted one per gating also on the odd one.
ACTIVATIONS = {True: ("silu", "gelu_tanh", "gelu", "swigluoai", "swigluoai_uninterleave",
                      "swiglustep", "situ"),
               False: ("relu2", "silu", "gelu_tanh", "gelu", "situ")}
# Activations a SwiGLU limit (layer.swiglu_limit) applies to: each is also run with this limit,
# below the default 7 and below the problems' outlier pre-activations (+-10), when accepted.
LIMITED_ACTIVATIONS = ("silu", "swigluoai", "swigluoai_uninterleave", "swiglustep")
LIMIT = 5.0


@dataclass(frozen=True)
class Bound:
    max_rel_err: float
    rms_rel_err: float
    gain_err: float = math.inf  # max |gain - 1| (per expert; per 32 output columns, linear)
    scale_err: float = math.inf  # |gain - 1| of the whole output
    tile_err: float = math.inf  # max |fitted block-scale error| of one swizzle tile (MoE)
    act_err: float = math.inf  # max |share of another activation's output| (MoE)

    def to_dict(self) -> Dict[str, float]:
        return {"max_rel_err": self.max_rel_err, "rms_rel_err": self.rms_rel_err,
                "gain_err": self.gain_err, "scale_err": self.scale_err,
                "tile_err": self.tile_err, "act_err": self.act_err}


#: the finer measures (selector.backends.verify_child.measure): name, what it is, its unit
FINE_MEASURES = (("scale_err", "scale error"), ("tile_err", "tile scale error"),
                 ("act_err", "activation confusion"))


# Error bounds, measured (docs/verify.md "Bounds"): 2x the worst of two simulated correct kernels
# (bf16 GEMM inputs and intermediates; W4A4 with the exact and with a FlashInfer-style reciprocal
# activation quantizer) over 30 seeds of every case emulation gets (960 MoE and 180 linear runs
# per scheme; on the H200, 2026-12-01; the odd-size MoE cases' tile errors on the CPU), rounded up
# to 2^k or 1.5 * 2^k. Worst measured (max, rms, gain, scale, tile, act): MoE W4A16 0.0278,
# 0.0122, 0.0161, 0.000154, 0.0144, 0.0146; MoE W4A4 0.2255, 0.0411, 0.0642, 0.000152, 0.0233,
# 0.00228; linear W4A16 0.00490, 0.00232, 0.000458, 0.000109; linear W4A4 0.00492, 0.00229,
# 0.000461, 0.0000788. tests/test_verify_zoo.py re-measures.
# FP8 linear, measured on the H200 (docs/h200.md "FP8 on the H200"; 30 seeds of every case): the
# kernels quantize the activation with the reference's quantizer (backends/fp8.py), so a correct
# kernel differs by its accumulation and its bf16 output's rounding only. Worst (max / RMS /
# gain): torch _scaled_mm per-tensor, row-wise, channel-wise 0.00388 / 0.00175 / 0.00044.
FP8_LINEAR_BOUND = Bound(2.0 ** -7, 2.0 ** -8, 2.0 ** -10)
BOUNDS: Mapping[Tuple[str, str], Bound] = {
    ("moe", "nvfp4_w4a16"): Bound(0.0625, 2.0 ** -5, 0.046875, 0.0003662109375, 2.0 ** -5,
                                  2.0 ** -5),
    ("moe", "nvfp4"): Bound(0.5, 0.09375, 0.1875, 0.0003662109375, 0.046875, 0.005859375),
    ("linear", "nvfp4_w4a16"): Bound(0.01171875, 0.005859375, 2.0 ** -10, 2.0 ** -12),
    ("linear", "nvfp4"): Bound(0.01171875, 0.005859375, 2.0 ** -10, 0.00018310546875),
    # FP8 linear (backends/fp8.py; the kernels quantize the activation with the reference's
    # quantizer, so a correct kernel differs by its accumulation and output rounding only):
    # docs/h200.md "FP8 on the H200" for the measurement
    **{("linear", q): FP8_LINEAR_BOUND for q in ("fp8_tensor", "fp8_tensor_dynamic",
                                                  "fp8_channel", "fp8_block")}}
#: what a bound is: the measured worst times this, rounded up to 2^k or 1.5 * 2^k
MARGIN = 2.0
QUANTS = ("nvfp4", "nvfp4_w4a16", "fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")


@dataclass(frozen=True)
class Case:
    """One problem for one backend: the layer the selector judged, and the reference's scheme."""
    op: str
    quant: str
    activation: Optional[str] = None  # moe only
    act_and_mul: Optional[bool] = None
    reference_quant: str = ""  # a weight-only backend serves W4A4 as W4A16 (vLLM #55397)
    swiglu_limit: Optional[float] = None  # moe only
    size: str = "aligned"  # a key of SHAPES[op]
    bias: bool = False  # linear only
    unverified: str = ""  # set: not run, why (the reference cannot compute it)

    @property
    def id(self) -> str:
        extra = "".join([f" swiglu_limit={self.swiglu_limit:g}" if self.swiglu_limit is not None
                         else "", " +bias" if self.bias else "",
                         f" ({self.size} sizes)" if self.size != "aligned" else ""])
        if self.op == "linear":
            return self.quant + extra
        return (f"{self.quant} {'gated' if self.act_and_mul else 'non-gated'} {self.activation}"
                + extra)

    @property
    def key(self) -> Tuple[str, Optional[bool], Optional[str], Optional[bool]]:
        """What a layer must match to be covered by this case (VerifyRule)."""
        if self.op == "linear":
            return (self.quant, None, None, None)
        return (self.quant, self.act_and_mul, self.activation, self.swiglu_limit is not None)

    def layer(self) -> Dict[str, Any]:
        s = SHAPES[self.op][self.size]
        d: Dict[str, Any] = {"quant": self.quant, "dtype": "bfloat16",
                             "num_tokens": s["num_tokens"], "hidden_size": s["hidden_size"]}
        if self.op == "moe":
            d.update(activation=self.activation, act_and_mul=self.act_and_mul,
                     intermediate_size=s["intermediate_size"], num_experts=s["num_experts"],
                     top_k=s["top_k"], ep_size=1)
            if self.swiglu_limit is not None:
                d["swiglu_limit"] = self.swiglu_limit
        return d

    def spec(self, seed: int = SEED) -> Dict[str, Any]:
        layer = dict(self.layer(), quant=self.reference_quant or self.quant)
        return {"id": self.id, "layer": self.layer(), "reference_layer": layer,
                "shape": dict(SHAPES[self.op][self.size]), "seed": seed, "bias": self.bias}


@dataclass(frozen=True)
class Result:
    """One line of the `verify` list (docs/verify.md)."""
    backend: str
    op: str
    scheme: Optional[str]  # the layer's quant; None when the whole backend was skipped
    status: str  # OK | FAIL | SKIPPED
    detail: str
    max_rel_err: Optional[float] = None
    rms_rel_err: Optional[float] = None
    seconds: Optional[float] = None
    activation: Optional[str] = None
    act_and_mul: Optional[bool] = None
    bound: Optional[Bound] = None
    device: Optional[str] = None
    worst: Optional[Dict[str, Any]] = None
    timeout_s: Optional[float] = None  # set when the process ran out of time
    cached: bool = False
    gain_err: Optional[float] = None
    case: str = ""  # the case's id (Case.id); "" for a whole skipped backend
    key: Optional[Tuple[Any, ...]] = None  # Case.key
    unverified: bool = False  # SKIPPED for a reason probe=verify does not accept as verified
    scale_err: Optional[float] = None
    tile_err: Optional[float] = None
    act_err: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        def num(v: Optional[float]) -> Optional[float]:
            return None if v is None else float(f"{v:.4g}")
        return {"backend": self.backend, "op": self.op, "scheme": self.scheme,
                "status": self.status, "max_rel_err": num(self.max_rel_err),
                "rms_rel_err": num(self.rms_rel_err),
                "seconds": None if self.seconds is None else round(self.seconds, 3),
                "detail": self.detail, "activation": self.activation,
                "act_and_mul": self.act_and_mul,
                "bound": None if self.bound is None else self.bound.to_dict(),
                "device": self.device, "worst": self.worst, "cached": self.cached,
                "gain_err": num(self.gain_err), "scale_err": num(self.scale_err),
                "tile_err": num(self.tile_err), "act_err": num(self.act_err),
                "case": self.case or None,
                "key": None if self.key is None else list(self.key),
                "unverified": self.unverified}

    @property
    def case_text(self) -> str:
        if self.scheme is None:
            return "-"
        if self.case:
            return self.case
        if self.op == "linear":
            return self.scheme
        return f"{self.scheme} {'gated' if self.act_and_mul else 'non-gated'} {self.activation}"


@dataclass
class Report:
    results: List[Result]
    fingerprint: str
    cache_path: Optional[str]
    seconds: float
    notes: List[str] = field(default_factory=list)

    @property
    def failures(self) -> List[Result]:
        return [r for r in self.results if r.status == "FAIL"]

    def rejections(self) -> Dict[Tuple[str, str], VerifyVerdict]:
        """(op, backend) -> its verdict, for the `verify` rule (probe=verify): the failed cases,
        the cases verified OK, and why the rest is unverified. A backend its platform rules
        reject, or a run on a preset platform, gets none (nothing to add)."""
        from selector.core.rules import VerifyFailure, VerifyVerdict
        out: Dict[Tuple[str, str], VerifyVerdict] = {}
        for r in self.results:
            if r.status == "SKIPPED" and not r.unverified:
                continue
            v = out.get((r.op, r.backend)) or VerifyVerdict()
            key = r.key or (r.scheme, None, None, None)
            if r.status == "FAIL":
                v = replace(v, failures=v.failures + (VerifyFailure(
                    r.scheme or "", r.act_and_mul if r.op == "moe" else None,
                    f"{r.op} {r.case_text}: {r.detail}",
                    r.activation if r.op == "moe" else None,
                    key[3] if r.op == "moe" else None),))
            elif r.status == "OK":
                v = replace(v, verified=v.verified | {key})
            else:
                v = replace(v, unverified=v.unverified + (
                    (r.key, f"{r.op} {r.case_text}: {r.detail}" if r.key else r.detail),))
            out[r.op, r.backend] = v
        return out

    def info(self) -> Dict[str, Any]:
        return {"fingerprint": self.fingerprint, "cache": self.cache_path,
                "seconds": round(self.seconds, 3), "notes": list(self.notes),
                "bounds": {f"{op} {q}": b.to_dict() for (op, q), b in BOUNDS.items()},
                "reference": "selector.backends.reference in float64 on the CPU"}


# ---------------------------------------------------------------------------------------------
# Which cases each backend gets

def _usable(sel: Selector, op: str, name: str, layer: Dict[str, Any]) -> bool:
    return sel.decide(sel.layer(op=op, **layer)).candidate(name).status in (
        "selected", "eligible", "opt_in")


def _reference_activations(gated: bool) -> Tuple[str, ...]:
    """The activations selector.backends.reference implements (without importing torch)."""
    if gated:
        return ("silu", "gelu", "gelu_tanh", "swigluoai", "swigluoai_uninterleave", "swiglustep")
    return ("relu2", "silu", "gelu", "gelu_tanh")


def cases_for(sel: Selector, op: str, b: BackendSpec) -> Tuple[List[Case], str]:
    """The cases a backend supports (per its rules), or ([], why none).

    MoE: every accepted activation of each gating, each also with `swiglu_limit` where that
    applies and is accepted, and the first accepted one of each gating on the odd sizes too; an
    activation the reference does not implement is a case marked unverified (not run). Linear:
    the aligned sizes, the odd sizes, and a bias."""
    quants = [q for q in QUANTS if q in b.implements and (op, q) in BOUNDS]
    if not quants:
        return [], (f"implements {', '.join(b.implements) or 'nothing'}, no scheme verify has "
                    f"{op} problems for ({', '.join(q for o, q in BOUNDS if o == op)})")
    out: List[Case] = []
    refused: List[str] = []  # why the first layer was refused (a layer-scoped device rule)

    def add(c: Case) -> bool:
        if _usable(sel, op, b.name, c.layer()):
            out.append(c)
            return True
        if not refused:
            cand = sel.decide(sel.layer(op=op, **c.layer())).candidate(b.name)
            refused.extend(f"[{r.rule}] {r.message}" for r in cand.reasons
                           if r.severity != "warning")
        return False

    for quant in quants:
        ref = "nvfp4_w4a16" if b.execution == "weight_only" and quant == "nvfp4" else quant
        if op == "linear":
            for c in (Case(op, quant, reference_quant=ref),
                      Case(op, quant, reference_quant=ref, size="odd"),
                      Case(op, quant, reference_quant=ref, bias=True)):
                add(c)
            continue
        for gated in (True, False):
            first = True
            for act in ACTIVATIONS[gated]:
                c = Case(op, quant, act, gated, ref)
                if act not in _reference_activations(gated):
                    c = replace(c, unverified=f"selector.backends.reference does not implement "
                                f"{'gated' if gated else 'non-gated'} {act!r}")
                if not add(c) or c.unverified:
                    continue
                if gated and act in LIMITED_ACTIVATIONS:
                    add(replace(c, swiglu_limit=LIMIT))
                if first:
                    first = not add(replace(c, size="odd"))
    if not out:  # why: the first verification layer's failed rules (a rule scoped to a scheme
        # is no platform rule, so `cannot run on this machine` did not name it)
        probe = (Case(op, quants[0], reference_quant=quants[0]) if op == "linear" else
                 Case(op, quants[0], ACTIVATIONS[True][0], True, quants[0]))
        cand = sel.decide(sel.layer(op=op, **probe.layer())).candidate(b.name)
        why = "; ".join(f"[{r.rule}] {r.message}" for r in cand.reasons
                        if r.severity != "warning")
        return [], "its rules reject every verification layer (" + ", ".join(quants) + ")" + \
            (f": {why}" if why else "")
    return out, ""


# ---------------------------------------------------------------------------------------------
# The child process

def child_overrides(overrides: Sequence[str]) -> List[str]:
    """The overrides without `probe=...`: the child must not start a verification of its own."""
    out = []
    for o in overrides:
        key = str(o).lstrip("+~").partition("=")[0].strip()
        if key != "probe":
            out.append(str(o))
    return out


def _boot(function: str) -> str:
    """The child's `-c` program: the directory holding this `selector` package first (as
    selector.inspect.probing does), then the function."""
    module, _, fn = function.partition(":")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return f"import sys; sys.path.insert(0, {root!r}); from {module} import {fn}; {fn}()"


def run_child(payload: Dict[str, Any], timeout: float, function: str = CHILD) -> ChildOutcome:
    """(events, exit status, timed out, stderr) of one child running `function` on `payload`."""
    return child_runner.run_child(_boot(function), payload, timeout, MARK)


def _finite(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _worst(w: Any) -> Optional[Dict[str, Any]]:
    """The worst element as the child (or a cache file) gave it, kept only if well-formed."""
    if not isinstance(w, dict) or not isinstance(w.get("index"), list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in w["index"][:8]):
        return None
    got = w.get("got")
    got = got[:40] if isinstance(got, str) else _finite(got)
    return {"index": w["index"][:8], "got": got, "expected": _finite(w.get("expected"))}


def _case_result(b_name: str, case: Case, status: str, detail: str, **kw: Any) -> Result:
    return Result(b_name, case.op, case.quant, status, detail, activation=case.activation,
                  act_and_mul=case.act_and_mul, case=case.id, key=case.key, **kw)


def judge(b_name: str, case: Case, ev: Mapping[str, Any]) -> Result:
    """A case's Result from its child "end" event: the bounds decide OK or FAIL."""
    bound = BOUNDS[case.op, case.quant]
    base = _case_result(b_name, case, "FAIL", "", bound=bound, seconds=_finite(ev.get("seconds")))
    outcome = ev.get("outcome")
    if outcome == "unavailable":
        return replace(base, status="SKIPPED", bound=None, unverified=True,
                       detail=f"the entry point cannot run this kernel here: {ev.get('error')}")
    if outcome != "measured":
        return replace(base, detail=f"raised {ev.get('error')}")
    mx, rms = _finite(ev.get("max_rel_err")), _finite(ev.get("rms_rel_err"))
    gain = _finite(ev.get("gain_err"))
    worst = _worst(ev.get("worst"))
    ref = str(ev.get("reference") or "")
    base = replace(base, max_rel_err=mx, rms_rel_err=rms, gain_err=gain,
                   device=str(ev.get("device") or ""), worst=worst)
    where = ""
    if worst:
        def g(v: object) -> str:
            return f"{v:.6g}" if isinstance(v, float) else str(v)
        where = (f"; worst element {worst['index']}: {g(worst['got'])}, reference "
                 f"{g(worst['expected'])}")
    if ev.get("nonfinite"):
        return replace(base, detail=f"{ev.get('nonfinite')} output values are not finite"
                       f"{where}")
    if mx is None or rms is None:
        return replace(base, detail=f"no error could be measured (max {ev.get('max_rel_err')}, "
                       f"rms {ev.get('rms_rel_err')}){where}")
    gw = ev.get("gain_worst")
    unit = "expert" if case.op == "moe" else "32-column group"
    gain_text = ""
    if gain is not None:
        gain_text = f", gain error {gain:.3g} (bound {bound.gain_err:.3g})"
        if isinstance(gw, list) and len(gw) == 2 and gain > bound.gain_err:
            gain_text += f" at {unit} {gw[0]} (gain {_finite(gw[1]) or 0:.4g})"
    fine = {name: _finite(ev.get(name)) for name, _ in FINE_MEASURES}
    base = replace(base, scale_err=fine["scale_err"], tile_err=fine["tile_err"],
                   act_err=fine["act_err"])
    fine_text = ""
    for name, label in FINE_MEASURES:
        v = fine[name]
        if v is None:
            continue
        lim = getattr(bound, name)
        fine_text += f", {label} {v:.3g} (bound {lim:.3g})"
        w = ev.get(name.replace("_err", "_worst"))
        if v > lim and isinstance(w, list) and len(w) == 2:
            fine_text += (f" at tile {w[0]}" if name == "tile_err" else f" toward {w[0]}")
    text = (f"max relative error {mx:.3g} (bound {bound.max_rel_err:.3g}), RMS {rms:.3g} "
            f"(bound {bound.rms_rel_err:.3g}){gain_text}{fine_text}; ran on {base.device}"
            + (f"; reference {ref}" if ref else ""))
    if mx <= bound.max_rel_err and rms <= bound.rms_rel_err and (
            gain is None or gain <= bound.gain_err) and all(
            v is None or v <= getattr(bound, n) for n, v in fine.items()):
        return replace(base, status="OK", detail=text)
    return replace(base, detail=text + where)


def run_backend(b: BackendSpec, cases: Sequence[Case], overrides: Sequence[str],
                config_dirs: ConfigDirs,
                timeout: float, function: str = CHILD) -> List[Result]:
    """Every case of one backend, in as few child processes as the outcomes allow."""
    results: Dict[str, Result] = {
        c.id: _case_result(b.name, c, "SKIPPED", f"unverified: {c.unverified}", unverified=True)
        for c in cases if c.unverified}
    pending = [c for c in cases if not c.unverified]
    while pending:
        payload = {"overrides": child_overrides(overrides),
                   "config_dirs": [str(d) for d in config_dirs], "backend": b.name, "op": b.op,
                   "entry_point": b.entry_point,
                   "cases": [c.spec() for c in pending[:CASES_PER_CHILD]]}
        events, rc, timed_out, err = run_child(payload, timeout, function)
        by_id = {c.id: c for c in pending}
        current: Optional[Case] = None
        for ev in events:
            if ev.get("event") != "case" or ev.get("id") not in by_id:
                continue
            case = by_id[ev["id"]]
            if ev.get("phase") == "start":
                current = case
            else:
                current = None
                results[case.id] = judge(b.name, case, ev)
        before = len(pending)
        pending = [c for c in pending if c.id not in results]
        if not pending:
            break
        if current is None and len(pending) < before:
            continue  # the child stopped after an error: a fresh one runs the rest
        why = child_runner.exit_text(rc, timed_out, timeout, "verify")
        tail = child_runner.last_line(err)
        stuck = current or pending[0]
        where = f"while running {b.op} {stuck.id}" if current else "before it ran a case"
        detail = f"{why} {where}" + (f": {tail}" if tail and not timed_out else "")
        results[stuck.id] = _case_result(b.name, stuck, "FAIL", detail,
                                         bound=BOUNDS[stuck.op, stuck.quant],
                                         seconds=timeout if timed_out else None,
                                         timeout_s=timeout if timed_out else None)
        # A crash or a hang is the backend's, not one case's: the rest is not run (a fresh
        # child each would cost a start, or a whole time limit, per case) and stays unverified.
        for c in pending:
            if c.id not in results:
                results[c.id] = _case_result(
                    b.name, c, "SKIPPED", f"unverified: not run, the verify process {why} "
                    f"{where}", unverified=True)
        pending = []
    return [results[c.id] for c in cases]


# ---------------------------------------------------------------------------------------------
# The cache

MAX_FILES = 16  # fingerprints (machines and stacks) kept; the oldest go first
MAX_ENTRIES = 512  # results per fingerprint
MAX_BYTES = 4 << 20  # a larger file is not read


def _cache_root() -> Optional[Path]:
    from selector.config.cache import directory
    base = directory()
    return None if base is None else base / "verify"


def fingerprint(run: RunConfig) -> Tuple[str, Dict[str, Any]]:
    """A key for this machine and stack: what a kernel's behaviour can depend on."""
    import importlib.metadata as md

    from selector.inspect import environment
    from selector.inspect.environment import EXTRA_PACKAGES
    gpu = environment.detect_gpu()
    p = run.platform
    pkgs = {n: None if v is None else str(v) for n, v in p.packages}
    for n, v in environment.installed_versions(EXTRA_PACKAGES).items():
        pkgs.setdefault(n, None if v is None else str(v))
    try:
        own = md.version("selector")
    except md.PackageNotFoundError:
        own = None
    data = {"gpu": gpu.name, "capability": list(gpu.capability) if gpu.capability else None,
            "gpu_count": gpu.count, "driver": gpu.driver,
            "cuda": None if p.cuda is None else str(p.cuda), "packages": dict(sorted(pkgs.items())),
            "python": sys.version.split()[0], "machine": _platform.machine(),
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "selector": own,
            "version": VERSION}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:24]
    return digest, data


def _file_digest(path: Path) -> bytes:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return b""


def _package_dir(module: str) -> Optional[Path]:
    """Where `module`'s top-level package (selector.backends for selector.backends.*) lives,
    found by file name without importing it: installed under selector/, or beside it in a
    checkout (pyproject maps backends/ onto selector.backends)."""
    parts = module.split(".")
    if parts[0] == "selector" and len(parts) > 1:
        here = Path(__file__).resolve().parent
        for candidate in (here / parts[1], here.parent / parts[1]):
            if (candidate / "__init__.py").is_file():
                return candidate
        return None
    for entry in sys.path:
        base = Path(entry or os.getcwd())
        if (base / parts[0] / "__init__.py").is_file() or (base / f"{parts[0]}.py").is_file():
            return base / parts[0] if (base / parts[0]).is_dir() else base / f"{parts[0]}.py"
    return None


def code_digest(module: str) -> bytes:
    """A digest of the files of `module`'s top-level package: a result is stale once the code
    that produced it changes."""
    h = hashlib.sha256()
    where = _package_dir(module)
    if where is None:
        return h.digest()
    files = sorted(where.rglob("*.py")) if where.is_dir() else [where]
    for f in files:  # name, size and mtime: cheap for a package of thousands of files
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"{f.relative_to(where.parent)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.digest()


def entry_key(b: BackendSpec, case: Case) -> str:
    """A result's key: the backend's definition (its YAML's bytes, entry point, the code of its
    package and of the child) and the case."""
    h = hashlib.sha256()
    h.update(json.dumps({"op": b.op, "backend": b.name, "entry_point": b.entry_point,
                         "execution": b.execution, "case": case.spec(), "child": CHILD},
                        sort_keys=True).encode())
    h.update(_file_digest(Path(b.file)))
    for module in dict.fromkeys((CHILD.partition(":")[0], str(b.entry_point).partition(":")[0])):
        h.update(code_digest(module))
    return h.hexdigest()[:32]


_RESULT_FIELDS: Dict[str, Union[type, Tuple[type, ...]]] = {
    "backend": str, "op": str, "scheme": (str, type(None)), "status": str, "detail": str}


def _result_from(d: Any) -> Optional[Result]:
    """A cached Result, or None when the entry is not one this version wrote."""
    if not isinstance(d, dict) or d.get("status") not in STATUSES:
        return None
    if any(not isinstance(d.get(k), t) for k, t in _RESULT_FIELDS.items()):
        return None
    if len(d["detail"]) > 4000:
        return None
    nums = {k: d.get(k) for k in ("max_rel_err", "rms_rel_err", "seconds", "timeout_s")}
    if any(v is not None and _finite(v) is None for v in nums.values()):
        return None
    b = d.get("bound")
    bound = None
    if isinstance(b, dict) and _finite(b.get("max_rel_err")) and _finite(b.get("rms_rel_err")):
        bound = Bound(float(b["max_rel_err"]), float(b["rms_rel_err"]),
                      _finite(b.get("gain_err")) or math.inf,
                      *(_finite(b.get(n)) or math.inf for n, _ in FINE_MEASURES))
    worst = _worst(d.get("worst"))
    act = d.get("activation") if isinstance(d.get("activation"), str) else None
    gated = d.get("act_and_mul") if isinstance(d.get("act_and_mul"), bool) else None
    key = d.get("key")
    key_t = tuple(key) if isinstance(key, list) and len(key) == 4 and all(
        v is None or isinstance(v, (str, bool)) for v in key) else None
    gain = d.get("gain_err")
    return Result(d["backend"], d["op"], d["scheme"], d["status"], d["detail"],
                  nums["max_rel_err"], nums["rms_rel_err"], nums["seconds"], act, gated, bound,
                  d.get("device") if isinstance(d.get("device"), str) else None, worst,
                  nums["timeout_s"], cached=True,
                  gain_err=None if gain is None else _finite(gain),
                  case=d["case"] if isinstance(d.get("case"), str) else "", key=key_t,
                  unverified=d.get("unverified") is True,
                  **{n: _finite(d.get(n)) for n, _ in FINE_MEASURES})


class VerifyCache:
    """Results per platform fingerprint, in `<cache dir>/verify/<fingerprint>.json`.

    Bounded: MAX_FILES fingerprints (least recently written dropped), MAX_ENTRIES results each,
    files over MAX_BYTES ignored. Safe: the directory is private (0700), files are written to a
    temporary file and renamed (a reader never sees half a file), merged under an advisory lock,
    read without following symlinks and only when owned by this user; every entry is validated
    and a malformed one is recomputed. Any OS error only disables the cache.
    """

    def __init__(self, digest: str, data: Dict[str, Any], root: Optional[Path]):
        """root None: no cache (nothing read or written)."""
        self.digest, self.data, self.root = digest, data, root
        self.path = None if root is None else root / f"{digest}.json"
        self.entries: Dict[str, Dict[str, Any]] = self._read()

    def _read(self) -> Dict[str, Dict[str, Any]]:
        if self.path is None:
            return {}
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return {}
        try:
            st = os.fstat(fd)
            import stat
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES or (
                    hasattr(os, "getuid") and st.st_uid != os.getuid()):
                return {}
            with os.fdopen(fd, "rb", closefd=False) as fh:
                doc = json.loads(fh.read(MAX_BYTES + 1))
        except (OSError, ValueError, RecursionError):
            return {}
        finally:
            os.close(fd)
        if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(
                doc.get("entries"), dict):
            return {}
        return {k: v for k, v in doc["entries"].items()
                if isinstance(k, str) and isinstance(v, dict) and _result_from(v.get("result"))}

    def get(self, key: str, timeout: float) -> Optional[Result]:
        e = self.entries.get(key)
        r = None if e is None else _result_from(e.get("result"))
        if r is not None and r.timeout_s is not None and r.timeout_s < timeout:
            return None  # it ran out of a shorter time than this run allows: try again
        return r

    def put(self, key: str, result: Result) -> None:
        d = result.to_dict()
        d.update(max_rel_err=result.max_rel_err, rms_rel_err=result.rms_rel_err,
                 gain_err=result.gain_err, scale_err=result.scale_err,
                 tile_err=result.tile_err, act_err=result.act_err,
                 seconds=result.seconds, timeout_s=result.timeout_s)
        self.entries[key] = {"stored": time.time(), "result": d}

    def save(self) -> Optional[str]:
        """Merge this run's entries into the file; the path, or None (cache off, or failed)."""
        if self.path is None or self.root is None:  # both None or neither
            return None
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            with _Lock(self.root / ".lock"):
                merged = self._read()
                merged.update(self.entries)
                keep = sorted(merged.items(), key=lambda kv: -float(kv[1].get("stored") or 0))
                doc = {"version": VERSION, "fingerprint": self.data,
                       "entries": dict(keep[:MAX_ENTRIES])}
                tmp = self.root / f".{self.digest}.{os.getpid()}.{threading.get_ident()}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    json.dump(doc, fh, sort_keys=True)
                os.replace(tmp, self.path)
                self._evict(self.root)
        except OSError:
            return None
        return str(self.path)

    @staticmethod
    def _evict(root: Path) -> None:
        files = sorted(root.glob("*.json"), key=lambda f: f.stat().st_mtime, reverse=True)
        for f in files[MAX_FILES:]:
            f.unlink(missing_ok=True)


class _Lock:
    """An advisory file lock (fcntl) for the read-merge-write; none where fcntl is absent."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: Optional[int] = None

    def __enter__(self) -> _Lock:
        try:
            import fcntl
        except ImportError:
            return self
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock


# ---------------------------------------------------------------------------------------------
# Running everything

_MEMO: Dict[Tuple[Any, ...], Report] = {}
_MEMO_LOCK = threading.Lock()


def run_verify(sel: Selector, overrides: Sequence[str] = (), config_dirs: ConfigDirs = (), *,
               ops: Optional[Sequence[str]] = None, timeout: float = DEFAULT_TIMEOUT_S,
               use_cache: bool = True, function: str = CHILD) -> Report:
    """Verify every backend of `ops` (default all) that passes its rules on this machine.

    `sel` is the Selector built from `overrides` and `config_dirs` (the child builds the same one
    for the backend's own selector gate). Bad input raises SelectorError.
    """
    from selector.core import schema
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise SelectorError(f"--timeout: {timeout!r} must be a number of seconds > 0",
                            key="--timeout", value=timeout)
    ops = list(ops) if ops else list(schema.OPS)
    for op in ops:
        if op not in schema.OPS:
            raise SelectorError(f"--op: unknown op {op!r}; accepted: {', '.join(schema.OPS)}",
                                key="--op", value=op, accepted=list(schema.OPS))
    t0 = time.perf_counter()
    run = sel.run_config
    digest, data = fingerprint(run)
    cache = VerifyCache(digest, data, _cache_root() if use_cache else None)
    results: List[Result] = []
    notes: List[str] = []
    here = run.platform.source == "detected"
    if not here:
        notes.append(f"platform={run.platform.preset} describes other hardware: verification "
                     "runs kernels on this machine (use platform=auto)")
    for op in ops:
        for b in run.catalogue.backends[op]:
            results.extend(_verify_backend(sel, b, here, cache, overrides, config_dirs,
                                           timeout, function))
    path = cache.save() if any(not r.cached for r in results) else (
        str(cache.path) if cache.path is not None and cache.path.exists() else None)
    return Report(results, digest, path, time.perf_counter() - t0, notes)


def _verify_backend(sel: Selector, b: BackendSpec, here: bool, cache: VerifyCache,
                    overrides: Sequence[str], config_dirs: ConfigDirs,
                    timeout: float, function: str) -> List[Result]:
    def skipped(why: str, unverified: bool = False) -> List[Result]:
        return [Result(b.name, b.op, None, "SKIPPED", why, unverified=unverified)]
    if not here:
        return skipped("not run: the platform is a preset, not this machine")
    failures, _, _ = sel.resolver.platform_reasons(b.op, b.name)
    if failures:
        return skipped("cannot run on this machine: " + "; ".join(
            f"[{r.rule}] {r.message}" for r in failures))
    if not b.entry_point:
        return skipped("unverified: the catalogue names no entry point to run", True)
    cases, why = cases_for(sel, b.op, b)
    if not cases:
        return skipped(f"unverified: {why}", True)
    keys = {c.id: entry_key(b, c) for c in cases}
    found: Dict[str, Result] = {}
    for c in cases:
        r = cache.get(keys[c.id], timeout)
        if r is not None:
            found[c.id] = r
    todo = [c for c in cases if c.id not in found]
    if todo:
        for c, r in zip(todo, run_backend(b, todo, overrides, config_dirs, timeout, function)):
            found[c.id] = r
            cache.put(keys[c.id], r)
    return [found[c.id] for c in cases]


def verify_once(sel: Selector, overrides: Sequence[str] = (), config_dirs: ConfigDirs = (),
                **kw: Any) -> Report:
    """run_verify, memoized per process for the same inputs (explain probe=verify, doctor)."""
    key = (tuple(child_overrides(overrides)), tuple(str(d) for d in config_dirs),
           tuple(kw.get("ops") or ()), kw.get("timeout", DEFAULT_TIMEOUT_S))
    with _MEMO_LOCK:
        rep = _MEMO.get(key)
        if rep is None:
            rep = _MEMO[key] = run_verify(sel, overrides, config_dirs, **kw)
        return rep


# ---------------------------------------------------------------------------------------------
# Text

def render_text(rep: Report) -> List[str]:
    lines = [f"verify (each usable backend on small NVFP4 and FP8 problems, one child process per "
             f"backend, compared with selector.backends.reference in float64 on the CPU; "
             f"{rep.seconds:.2f} s)"]
    bounds = ", ".join(f"{op} {q} max {b.max_rel_err:g} rms {b.rms_rel_err:g} gain "
                       f"{b.gain_err:g} scale {b.scale_err:g}"
                       + (f" tile {b.tile_err:g} act {b.act_err:g}" if op == "moe" else "")
                       for (op, q), b in BOUNDS.items())
    lines.append(f"  bounds (relative to the reference): {bounds}")
    for n in rep.notes:
        lines.append(f"  note: {n}")
    for op in dict.fromkeys(r.op for r in rep.results):
        lines.append(f"  {op}")
        rows = [r for r in rep.results if r.op == op]
        bw = max(len(r.backend) for r in rows)
        cw = max(len(r.case_text) for r in rows)
        for r in rows:
            nums = ""
            if r.max_rel_err is not None and r.rms_rel_err is not None:
                nums = f"  max {r.max_rel_err:.2e}  rms {r.rms_rel_err:.2e}"
            took = "" if r.seconds is None else f"  {r.seconds:.2f} s"
            lines.append(f"    {r.backend:<{bw}}  {r.case_text:<{cw}}  {r.status:<7}{nums}"
                         f"{took}{' (cached)' if r.cached else ''}")
            if r.status != "OK":
                lines.append(f"      {r.detail}")
    lines.append(f"  cache: {rep.cache_path or 'off'} (fingerprint {rep.fingerprint})")
    return lines


__all__ = ["run_verify", "verify_once", "Report", "Result", "Case", "Bound", "BOUNDS",
           "VerifyCache", "fingerprint", "render_text", "child_overrides"]
