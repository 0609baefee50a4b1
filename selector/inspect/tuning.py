"""Tune: time every verified backend of a layer on this machine, and the profile that records it.

The parent side of `selector tune` (selector.commands.tune): which machine a profile belongs to
(`machine_key`, verify's fingerprint without what a timing does not depend on), where this
machine's profile lives by default, the profile a run ranks by (`active_profile`, for
`policy.preference=measured`), and the timing children (`time_backend`): one backend's cells in a
child process running selector.backends.children.tune_child, with a time limit per child and a memory
bound, started and read as verify's are (selector.inspect.child_runner). A crash, a hang or an
error is that cell's `skipped` reason, never a crash of selector.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from selector.core import profile as prof
from selector.core.errors import SelectorError
from selector.inspect import child_runner

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.model import BackendSpec, RunConfig

TUNE_MARK = "@@selector-tune@@ "  # selector.backends.children.tune_child's reports
CHILD = "selector.backends.children.tune_child:main"
CASES_PER_CHILD = 16
MAX_SAMPLES = 10000
#: `selector tune --timer`: CUDA-graph replays (the default) or each eager call between events
TIMERS = ("graph", "events")
ConfigDirs = Sequence[Union[str, "os.PathLike[str]"]]


# ---------------------------------------------------------------------------------------------
# Which machine

def machine_key(run: RunConfig) -> Dict[str, Any]:
    """What a profile is valid for: GPU, capability, driver, CUDA, every watched package's
    version, selector's own and the CPU architecture (selector.inspect.verify.fingerprint's
    fields that a kernel's speed depends on)."""
    from selector.inspect.verify import fingerprint
    _, data = fingerprint(run)
    return {k: data.get(k) for k in prof.KEY_FIELDS}


def key_digest(key: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


def default_dir() -> Optional[Path]:
    """Where profiles live in the cache directory (None when caching is off)."""
    from selector.config.cache import directory
    base = directory()
    return None if base is None else base / "profiles"


def default_path(key: Mapping[str, Any]) -> Optional[Path]:
    """This machine's profile in the cache directory (None when caching is off)."""
    base = default_dir()
    return None if base is None else base / f"{key_digest(key)}.json"


def active_profile(run: RunConfig) -> Optional[prof.Measured]:
    """The profile `policy.preference=measured` ranks by, or None under the static preference.

    An explicit `policy.profile=PATH` that cannot be read or is malformed is bad input
    (SelectorError naming the file and key); a profile of another machine or stack, a missing
    default profile, or a platform preset (not this machine) is ignored with a note."""
    policy = run.policy
    if policy.preference != "measured":
        return None
    key = machine_key(run)
    explicit = policy.profile is not None
    path = str(policy.profile) if explicit else str(default_path(key) or "")
    if not explicit and (not path or not os.path.lexists(path)):
        return prof.Measured(path or "(no cache directory)", None, (
            "this machine has no profile yet: run `python -m selector tune` (or give "
            "policy.profile=PATH)",))
    profile = prof.load(os.path.expanduser(path), private=not explicit)
    prof.check_backends(profile, path, {op: run.catalogue.names(op)
                                        for op in run.catalogue.backends})
    if run.platform.source != "detected":
        return prof.Measured(path, profile, (f"platform={run.platform.preset} is a preset, not "
                                             "this machine: measurements apply to platform=auto",))
    diff = prof.key_difference(profile.key, key)
    if diff:
        return prof.Measured(path, profile, tuple(
            f"measured on another machine or stack: {d}" for d in diff))
    return prof.Measured(path, profile)


def save_profile(new: prof.Profile, path: Union[str, Path],
                 merge: Callable[[prof.Profile, str], Tuple[prof.Profile, int]]
                 ) -> Tuple[str, int]:
    """Write `new` to `path` merged with what is there, under an advisory lock on
    `.<name>.lock` beside it (the verify cache's pattern, selector.inspect.verify_cache): the
    file is read, merged (`merge(new, path)`: (profile, cells kept)) and renamed over while
    the lock is held, so that runs ending together keep every cell. (path, cells kept);
    OSError: the caller's."""
    from selector.inspect.verify_cache import FileLock
    target = Path(path).expanduser()
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with FileLock(target.parent / f".{target.name}.lock"):
        merged, kept = merge(new, str(target))
        return write_profile(merged, target), kept


def write_profile(profile: prof.Profile, path: Union[str, Path]) -> str:
    """Write atomically; the path. OSError: the caller's."""
    return write_bytes(profile.dumps().encode(), path)


def write_bytes(data: bytes, path: Union[str, Path]) -> str:
    """Write atomically (a private temporary file renamed over `path`); the path."""
    path = Path(path).expanduser()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return str(path)


# ---------------------------------------------------------------------------------------------
# Bounds

def estimate_bytes(op: str, layer: Mapping[str, Any]) -> int:
    """About the peak bytes of one timing case (selector.backends.children.tune_child): float32 master
    weights and their quantized copy, the bf16 activation and output, twice for the backend's
    own copies (a prepared layout, a dequantized weight)."""
    T = int(layer.get("num_tokens") or 1)
    H = int(layer.get("hidden_size") or 0)
    if op == "linear":
        N = int(layer.get("intermediate_size") or 0)
        return 2 * (6 * N * H + 4 * T * (H + N))
    E = max(1, int(layer.get("num_experts") or 1) // max(1, int(layer.get("ep_size") or 1)))
    Ie = max(1, int(layer.get("intermediate_size") or 1) // max(1, int(layer.get("tp_size") or 1)))
    rows = (2 if layer.get("act_and_mul", True) else 1) * Ie
    K = int(layer.get("top_k") or 1)
    return 2 * (6 * E * (rows * H + H * Ie) + 4 * T * H * (2 + K) + 4 * T * K * rows)


def missing_sizes(layer: Mapping[str, Any]) -> List[str]:
    """The layer.* sizes a timing needs that the layer does not give."""
    need = ["hidden_size", "intermediate_size"] + (
        ["num_experts", "top_k"] if layer.get("op") == "moe" else [])
    return [k for k in need if not layer.get(k)]


# ---------------------------------------------------------------------------------------------
# Statistics

def percentile(xs: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of `xs`, linear between the order statistics (numpy's default)."""
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def timing(samples: Any) -> Optional[prof.Timing]:
    """The median and the p10-p90 spread of a child's samples; None unless every one is a
    finite time > 0 (a kernel that reports nonsense is not ranked)."""
    if not isinstance(samples, list) or not 1 <= len(samples) <= MAX_SAMPLES:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               and v > 0 for v in samples):
        return None
    xs = [float(v) for v in samples]
    return prof.Timing(_r(percentile(xs, 0.5)), _r(percentile(xs, 0.1)), _r(percentile(xs, 0.9)),
                       len(xs))


def _r(v: float) -> float:
    return float(f"{v:.5g}")


# ---------------------------------------------------------------------------------------------
# The children

@dataclass(frozen=True)
class CaseResult:
    """One backend at one cell: its timing, or why it has none."""
    backend: str
    case: str
    timing: Optional[prof.Timing]
    why: str = ""
    device: str = ""
    timer: str = ""
    eager: Optional[prof.Timing] = None  # each eager call between CUDA events, beside a graph's
    copies: int = 1  # weight copies the calls cycled through (copies_past_l2)


def _boot(function: str) -> str:
    """The child's `-c` program: the directory holding this `selector` package first, then the
    function."""
    module, _, fn = function.partition(":")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return f"import sys; sys.path.insert(0, {root!r}); from {module} import {fn}; {fn}()"


def default_timeout() -> float:
    """Seconds each timing child may take: SELECTOR_TUNE_TIMEOUT, else 300 (read when tune
    runs, through selector.core.env_vars: a bad value is exit 2 naming the variable)."""
    from selector.core.env_vars import timeout
    return timeout("SELECTOR_TUNE_TIMEOUT")


def child_overrides(overrides: Sequence[str]) -> List[str]:
    """The overrides without `probe=` and `policy.preference`/`policy.profile`: the child's own
    selector gates the backend, it neither verifies nor reads a profile."""
    from selector.inspect.verify import child_overrides as without_probe
    return [o for o in without_probe(overrides) if o.lstrip("+~").partition("=")[0].strip()
            not in ("policy.preference", "policy.profile")]


def time_backend(b: BackendSpec, cases: Sequence[Tuple[str, Dict[str, Any]]],
                 overrides: Sequence[str], config_dirs: ConfigDirs, *, warmup: int,
                 repeats: int, budget_s: float, memory_bytes: int, timeout: float,
                 function: str = CHILD, timer: str = "graph") -> List[CaseResult]:
    """Every case (id, layer dict with num_tokens) of one backend, in as few children as the
    outcomes allow: a child that raises stops after its report and a fresh one runs the rest; a
    crash or a hang ends the backend's timing (its other cases say why)."""
    results: Dict[str, CaseResult] = {}
    pending = list(cases)
    while pending:
        batch = pending[:CASES_PER_CHILD]
        payload = {"overrides": child_overrides(overrides),
                   "config_dirs": [str(d) for d in config_dirs], "backend": b.name, "op": b.op,
                   "entry_point": b.entry_point, "warmup": warmup, "repeats": repeats,
                   "budget_s": budget_s, "memory_bytes": memory_bytes, "timer": timer,
                   "cases": [{"id": cid, "layer": layer} for cid, layer in batch]}
        events, rc, timed_out, err = child_runner.run_child(_boot(function), payload, timeout,
                                                            TUNE_MARK)
        ids = {cid for cid, _ in batch}
        current: Optional[str] = None
        for ev in events:
            cid = ev.get("id")
            if ev.get("event") != "case" or cid not in ids or cid in results:
                continue
            if ev.get("phase") == "start":
                current = cid
                continue
            current = None
            results[cid] = _judge(b.name, cid, ev)
        before = len(pending)
        pending = [c for c in pending if c[0] not in results]
        if not pending or (current is None and len(pending) < before):
            continue
        why = child_runner.exit_text(rc, timed_out, timeout, "tune")
        tail = child_runner.last_line(err)
        stuck = current or pending[0][0]
        where = f"while timing {stuck}" if current else "before it timed a case"
        detail = f"{why} {where}" + (f": {tail}" if tail and not timed_out else "")
        results[stuck] = CaseResult(b.name, stuck, None, detail)
        for cid, _ in pending:
            results.setdefault(cid, CaseResult(b.name, cid, None, f"not timed: the tune "
                                               f"process {why} {where}"))
        pending = []
    return [results[cid] for cid, _ in cases]


def _judge(backend: str, cid: str, ev: Mapping[str, Any]) -> CaseResult:
    outcome = ev.get("outcome")
    if outcome != "measured":
        what = {"too_large": "too large here", "unavailable": "the entry point cannot run it "
                "here"}.get(str(outcome), "raised")
        return CaseResult(backend, cid, None, f"{what}: {str(ev.get('error'))[:500]}")
    t = timing(ev.get("samples_ms"))
    if t is None:
        return CaseResult(backend, cid, None, "the child reported no valid times (each must be "
                          "a finite number of milliseconds > 0)")
    copies = ev.get("copies")
    return CaseResult(backend, cid, t, device=str(ev.get("device") or "")[:200],
                      timer=str(ev.get("timer") or "")[:160],
                      eager=timing(ev.get("eager_samples_ms")) if "eager_samples_ms" in ev
                      else None,
                      copies=copies if isinstance(copies, int) and not isinstance(copies, bool)
                      and 1 <= copies <= 64 else 1)


def check_positive(name: str, value: Any, kind: type = int) -> Any:
    """A --option's value: a number > 0 (an int for counts)."""
    try:
        v = kind(value)
    except (TypeError, ValueError, OverflowError):
        raise SelectorError(f"{name}: {value!r} is not a{'n integer' if kind is int else ' number'}",
                            key=name, value=value) from None
    if not (v > 0) or (kind is float and not math.isfinite(v)):
        raise SelectorError(f"{name}: {value!r} must be > 0", key=name, value=value)
    return v


__all__ = ["machine_key", "active_profile", "default_path", "write_profile", "save_profile", "time_backend",
           "timing", "percentile", "estimate_bytes", "CaseResult", "TUNE_MARK"]
