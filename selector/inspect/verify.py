"""Verify: run each usable backend on small NVFP4 and FP8 (linear and MoE) problems and compare it with the reference.

Metadata and imports can pass while a kernel returns garbage (FlashInfer #3294, #2723: releases
without SM12x cubins; CUTLASS MoE garbage on GB10). `selector doctor --verify` and `explain
probe=verify` run every backend that passes its rules on this machine, once per case (op, quant
scheme, gated or not), in a child process with a time limit (selector.backends.children.verify_child,
named only by its "module:function"): it prepares the weights with the backend's own `prepare`,
runs its `apply` on the device and compares with selector.backends.reference in float64 on the
CPU. A crash, a hang or a CUDA error is a FAIL naming what happened, never a crash of selector.

Results are cached per platform fingerprint (GPU, driver, CUDA, package versions, Python), so an
engine pays for verification once per machine and stack: see `VerifyCache`.
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from selector.core.errors import SelectorError
from selector.inspect import child_runner
from selector.inspect.child_runner import ChildOutcome
from selector.inspect.probe_child import VERIFY_MARK as MARK
from selector.inspect.verify_cache import (  # noqa: F401 - verify's public names
    MAX_BYTES,
    MAX_ENTRIES,
    MAX_FILES,
    VerifyCache,
    _cache_root,
    code_digest,
    entry_key,
    fingerprint,
)
from selector.inspect.verify_cases import (  # noqa: F401 - verify's public names
    ACTIVATIONS,
    BOUNDS,
    CHILD,
    FINE_MEASURES,
    FP8_LINEAR_BOUND,
    FP8_MOE_BOUNDS,
    LIMIT,
    LIMITED_ACTIVATIONS,
    MARGIN,
    QUANTS,
    SEED,
    SHAPES,
    STATUSES,
    VERSION,
    Bound,
    Case,
    Result,
    _finite,
    _worst,
    cases_for,
)

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.model import BackendSpec
    from selector.core.protocols import SelectorLike as Selector
    from selector.core.rules import VerifyVerdict

ConfigDirs = Sequence[Union[str, "os.PathLike[str]"]]



def default_timeout() -> float:
    """Seconds each verify child may take: SELECTOR_VERIFY_TIMEOUT, else 120 (read when a run
    needs it, through selector.core.env_vars: a bad value is exit 2 naming the variable)."""
    from selector.core.env_vars import timeout
    return timeout("SELECTOR_VERIFY_TIMEOUT")


#: cases one child process runs (the time limit is per child): a backend's 30-odd cases take a few
#: children, so a slow machine does not run out of time on a correct backend
CASES_PER_CHILD = 8
#: a loaded machine (load average over the cores above 1) gets the time budget scaled by the
#: ratio, up to this factor
MAX_LOAD_SCALE = 4.0


def load_scale() -> Tuple[float, str]:
    """(factor, words): how much longer than --timeout a verify process may take on this
    machine now, from the 1-minute load average over the cores (1 when idle or unknown, at
    most MAX_LOAD_SCALE), and the load in words for the messages."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average here
        return 1.0, "load average unknown"
    cores = os.cpu_count() or 1
    factor = min(MAX_LOAD_SCALE, max(1.0, load / cores)) if math.isfinite(load) else 1.0
    return factor, f"load average {load:.1f} on {cores} core(s)"


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

    @property
    def timeouts(self) -> List[Result]:
        """Cases whose verify process ran out of time: unverified, not failed."""
        return [r for r in self.results if r.status == "TIMEOUT"]

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
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return f"import sys; sys.path.insert(0, {root!r}); from {module} import {fn}; {fn}()"


def run_child(payload: Dict[str, Any], timeout: float, function: str = CHILD) -> ChildOutcome:
    """(events, exit status, timed out, stderr) of one child running `function` on `payload`."""
    return child_runner.run_child(_boot(function), payload, timeout, MARK)


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
    scale, load = load_scale()
    budget = timeout * scale
    while pending:
        payload = {"overrides": child_overrides(overrides),
                   "config_dirs": [str(d) for d in config_dirs], "backend": b.name, "op": b.op,
                   "entry_point": b.entry_point,
                   "cases": [c.spec() for c in pending[:CASES_PER_CHILD]]}
        events, rc, timed_out, err = run_child(payload, budget, function)
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
        why = child_runner.exit_text(rc, timed_out, budget, "verify")
        tail = child_runner.last_line(err)
        stuck = current or pending[0]
        where = f"while running {b.op} {stuck.id}" if current else "before it ran a case"
        if timed_out:  # not a wrong answer: TIMEOUT, unverified, with the budget and the load
            given = (f"--timeout {timeout:g} s scaled x{scale:.2g} by the {load}"
                     if scale > 1 else f"--timeout {timeout:g} s; {load}")
            detail = (f"{why} {where}: the time budget was {budget:g} s per verify process of "
                      f"up to {CASES_PER_CHILD} cases ({given}); the machine may be loaded. A "
                      "time-out is not a wrong answer: unverified, not failed; rerun with a "
                      "longer --timeout (SELECTOR_VERIFY_TIMEOUT for explain probe=verify)")
            results[stuck.id] = _case_result(b.name, stuck, "TIMEOUT", detail,
                                             seconds=budget, timeout_s=timeout,
                                             unverified=True)
        else:
            detail = f"{why} {where}" + (f": {tail}" if tail else "")
            results[stuck.id] = _case_result(b.name, stuck, "FAIL", detail,
                                             bound=BOUNDS[stuck.op, stuck.quant])
        # A crash or a hang is the backend's, not one case's: the rest is not run (a fresh
        # child each would cost a start, or a whole time limit, per case) and stays unverified.
        for c in pending:
            if c.id not in results:
                results[c.id] = _case_result(
                    b.name, c, "SKIPPED", f"unverified: not run, the verify process {why} "
                    f"{where}", unverified=True, timeout_s=timeout if timed_out else None)
        pending = []
    return [results[c.id] for c in cases]


# ---------------------------------------------------------------------------------------------
# Running everything

_MEMO: Dict[Tuple[Any, ...], Report] = {}
_MEMO_LOCK = threading.Lock()


def run_verify(sel: Selector, overrides: Sequence[str] = (), config_dirs: ConfigDirs = (), *,
               ops: Optional[Sequence[str]] = None, timeout: Optional[float] = None,
               use_cache: bool = True, function: str = CHILD) -> Report:
    """Verify every backend of `ops` (default all) that passes its rules on this machine.

    `sel` is the Selector built from `overrides` and `config_dirs` (the child builds the same one
    for the backend's own selector gate). Bad input raises SelectorError.
    """
    from selector.core import schema
    if timeout is None:
        timeout = default_timeout()
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not (
            0 < timeout < math.inf):
        raise SelectorError(f"--timeout: {timeout!r} must be a finite number of seconds > 0",
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
            if r.timeout_s is None:  # a time-out says nothing of the kernel: run it again
                cache.put(keys[c.id], r)
    return [found[c.id] for c in cases]


def verify_once(sel: Selector, overrides: Sequence[str] = (), config_dirs: ConfigDirs = (),
                **kw: Any) -> Report:
    """run_verify, memoized per process for the same inputs (explain probe=verify, doctor)."""
    key = (tuple(child_overrides(overrides)), tuple(str(d) for d in config_dirs),
           tuple(kw.get("ops") or ()), kw.get("timeout") or default_timeout())
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
    if rep.timeouts:
        lines.append(f"  warning: {len(rep.timeouts)} case(s) TIMEOUT: the verify process ran "
                     "out of its time budget (the machine may be loaded); not a wrong answer, "
                     "unverified: rerun with a longer --timeout")
    lines.append(f"  cache: {rep.cache_path or 'off'} (fingerprint {rep.fingerprint})")
    return lines


__all__ = ["run_verify", "verify_once", "Report", "Result", "Case", "Bound", "BOUNDS",
           "VerifyCache", "fingerprint", "render_text", "child_overrides"]
