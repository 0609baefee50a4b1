"""Deep probes: run the catalogue's `probes:` against the installed kernel stack, once.

Deciding is metadata-only; this is where selector looks deeper, on request (`doctor --deep`,
`explain probe=deep`). Probes that import a kernel library run in one child process per library
group (selector.core.probe_specs: "torch" = torch, cutlass-dsl, flashinfer; "triton"; "import:<module>"),
started with this interpreter, the same sys.path and a time limit, because an import can hang or
kill the interpreter. The child reports each step as it starts and ends, so a child that hangs
or dies is a finding naming the step ("timed out after 120 s while importing flashinfer",
"killed by signal SIGSEGV while running probe flashinfer.mm_fp4"), and the probes after a
crashed one run again in a fresh child. Probes that read metadata only run in-process. Nothing
here raises for a broken install; unknown probe names are bad input (SelectorError).

`run_deep_probes(catalogue)` caches per process: the findings of a probe are computed once per
session and shared by every later call (thread-safe).
"""
from __future__ import annotations

import importlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, cast

from selector.core import env_vars
from selector.core.errors import SelectorError, did_you_mean
from selector.inspect.child_runner import MAX_OUTPUT, exit_text, last_line, run_child, truncated
from selector.inspect.probe_child import MARK

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.model import Catalogue
    from selector.core.probe_specs import ProbeSpec


@dataclass(frozen=True)
class Finding:
    """The outcome of one probe. `ok` is False only for status "failed"."""
    name: str
    status: str  # ok | warning | failed | skipped
    message: str
    group: str = ""
    seconds: Optional[float] = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "status": self.status, "message": self.message,
                "group": self.group,
                "seconds": None if self.seconds is None else round(self.seconds, 3),
                "details": _jsonable(self.details)}


@dataclass(frozen=True)
class ImportTiming:
    group: str
    library: str
    seconds: Optional[float]
    ok: bool
    version: Optional[str] = None
    path: Optional[str] = None
    error: Optional[str] = None
    found: bool = True  # False: find_spec found no such module, so it was not imported

    def to_dict(self) -> Dict[str, Any]:
        return {"group": self.group, "library": self.library,
                "seconds": None if self.seconds is None else round(self.seconds, 3),
                "ok": self.ok, "found": self.found, "version": self.version, "path": self.path,
                "error": self.error}

    def describe(self) -> str:
        if not self.found:
            return f"{self.library} not found"
        took = "" if self.seconds is None else f" {self.seconds:.2f} s"
        return f"{self.library}{took}" + ("" if self.ok else f" FAILED ({self.error})")


@dataclass
class GroupRun:
    """One library group: its child processes and how long they took."""
    group: str
    probes: Tuple[str, ...]
    processes: int = 0
    seconds: float = 0.0
    imports: List[ImportTiming] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"group": self.group, "probes": list(self.probes), "processes": self.processes,
                "seconds": round(self.seconds, 3), "imports": [i.to_dict() for i in self.imports],
                "notes": list(self.notes)}


@dataclass
class DeepReport:
    findings: Dict[str, Finding]
    groups: List[GroupRun]
    seconds: float

    @property
    def imports(self) -> List[ImportTiming]:
        return [i for g in self.groups for i in g.imports]


# ---------------------------------------------------------------------------------------------
# Names

def _registry() -> ModuleType:
    from selector.core import probe_specs
    return probe_specs


def catalogue_probe_names(catalogue: Catalogue) -> List[str]:
    """Every probe the catalogue's backends declare, in catalogue order, once each."""
    names: Dict[str, None] = {}
    for backends in catalogue.backends.values():
        for b in backends:
            for n in b.probes:
                names.setdefault(n, None)
    return list(names)


def validate_names(names: Iterable[str], where: Optional[Mapping[str, str]] = None) -> None:
    """SelectorError for a name no probe answers to (with the backends that declare it)."""
    reg = _registry()
    for n in names:
        if reg.resolve(n) is None:
            key = (where or {}).get(n, "probe")
            text = (f"{key}: unknown probe {n!r}; accepted: {', '.join(reg.known_names())}")
            close = did_you_mean(str(n), list(reg.PROBES))
            if close:
                text += f" (did you mean {close!r}?)"
            raise SelectorError(text, key=key, value=n, accepted=reg.known_names())


def declared_by(catalogue: Catalogue) -> Dict[str, List[str]]:
    """probe name -> ['moe/flashinfer_b12x', ...]."""
    out: Dict[str, List[str]] = {}
    for op, backends in catalogue.backends.items():
        for b in backends:
            for n in b.probes:
                out.setdefault(n, []).append(f"{op}/{b.name}")
    return out


# ---------------------------------------------------------------------------------------------
# Skips decided from metadata (no import)

def _skip_reason(spec: ProbeSpec) -> Optional[str]:
    """Why the probe need not run (its distribution is absent or predates it), else None."""
    try:
        return _skip_reason_unchecked(spec)
    except Exception:  # noqa: BLE001 - odd metadata: run the probe and let it tell
        return None


def _skip_reason_unchecked(spec: ProbeSpec) -> Optional[str]:
    import importlib.metadata as md
    import importlib.util

    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version
    for dist, spec_text in spec.requires:
        try:
            v = md.version(dist)
        except md.PackageNotFoundError:
            return f"{dist} not installed"
        if spec_text:
            try:
                ver = Version(v)
                if not SpecifierSet(spec_text, prereleases=True).contains(
                        Version(ver.public), prereleases=True):
                    return (f"{dist} {v} does not ship this entry point (it needs "
                            f"{dist}{spec_text})")
            except (InvalidVersion, InvalidSpecifier):
                pass
    if spec.module:
        try:
            found = importlib.util.find_spec(spec.module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            return f"{spec.module} not installed (no module named {spec.module!r})"
    return None


# ---------------------------------------------------------------------------------------------
# Running

def _backends_root() -> str:
    """The directory that holds the `selector` package, so the child can import it."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_BOOT = ("import sys; sys.path.insert(0, {root!r}); "
         "from selector.inspect.probe_child import main; main()")


def _run_child(group: str, steps: List[Tuple[str, str]], ctx: Dict[str, Any], timeout: float,
               root: str) -> Tuple[List[Dict[str, Any]], Optional[int], bool, str, float]:
    """(events, exit status, timed out, stderr, seconds) of one child process."""
    t0 = time.perf_counter()
    events, rc, timed_out, err = run_child(_BOOT.format(root=root), {"steps": steps, "ctx": ctx},
                                           timeout, MARK)
    started = rc is not None or timed_out
    return events, rc, timed_out, err, (time.perf_counter() - t0) if started else 0.0


def _steps_for(specs: Sequence[ProbeSpec]) -> List[Tuple[str, str]]:
    """Imports then probes, each probe after the imports it needs (torch.cuda before flashinfer)."""
    steps: List[Tuple[str, str]] = []
    done: List[str] = []
    for spec in sorted(specs, key=lambda s: len(s.imports)):
        for m in spec.imports:
            if m not in done:
                if _findable(m):
                    steps.append(("import", m))
                done.append(m)
        steps.append(("probe", spec.name))
    return steps


def _findable(module: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def _read_events(events: List[Dict[str, Any]], group: str, run: GroupRun,
                 findings: Dict[str, Finding]) -> Tuple[Optional[Tuple[str, str]], bool, List[str]]:
    """One child's events read into `run` (import timings, first process's only) and
    `findings`: (the step it was in when it stopped, or None; whether it finished; the probes
    it ran)."""
    current: Optional[Tuple[str, str]] = None
    finished = False
    ran_here: List[str] = []
    for ev in events:
        kind, phase = ev.get("event"), ev.get("phase")
        if kind == "import":
            library = cast(str, ev.get("library"))  # probe_child sends it with each import
            if phase == "start":
                current = ("import", library)
            else:
                current = None
                if all(i.library != library for i in run.imports):  # 1st process
                    run.imports.append(ImportTiming(
                        group, library, ev.get("seconds"), bool(ev.get("ok")),
                        ev.get("version"), ev.get("path"), ev.get("error")))
        elif kind == "probe":
            name = cast(str, ev.get("name"))  # probe_child sends it with each probe event
            if phase == "start":
                current = ("probe", name)
            else:
                current = None
                ran_here.append(name)
                findings[name] = Finding(name, ev.get("status", "failed"),
                                         str(ev.get("message", "")), group,
                                         ev.get("seconds"), ev.get("details") or {})
        elif kind == "done":
            finished = True
    return current, finished, ran_here


def _run_group(group: str, specs: List[ProbeSpec], ctx: Dict[str, Any], timeout: float
               ) -> Tuple[Dict[str, Finding], GroupRun]:
    run = GroupRun(group, tuple(s.name for s in specs))
    for m in dict.fromkeys(m for s in specs for m in s.imports):
        if not _findable(m):
            run.imports.append(ImportTiming(group, m, None, False, found=False,
                                            error=f"no module named {m!r}"))
    findings: Dict[str, Finding] = {}
    root = _backends_root()
    pending = list(specs)
    declared = {s.name: s.func for s in specs if s.name in _registry().DECLARED}
    if declared:  # the child knows registered probes; a backend file's own ones travel along
        ctx = {**ctx, "declared_probes": declared}
    while pending:
        steps = _steps_for(pending)
        events, rc, timed_out, err, seconds = _run_child(group, steps, ctx, timeout, root)
        run.processes += 1
        run.seconds += seconds
        current, finished, ran_here = _read_events(events, group, run, findings)
        flooded = truncated(err)  # stopped for its output: no verdict of this child stands
        pending = [s for s in pending if s.name not in findings]
        if finished and not pending and not flooded:
            break
        why = exit_text(rc, timed_out, timeout, "probe")
        tail = last_line(err)
        if flooded:
            why = (f"the probe process wrote more than {MAX_OUTPUT >> 20} MiB of output "
                   "(it was stopped and the output truncated)")
            tail = ""
        if flooded and current is None:
            where = "after its steps" if finished else "between steps"
            stuck = ran_here + [s.name for s in pending]
        elif current is None and not events:
            where, stuck = "before it reported anything", [s.name for s in pending]
        elif current is None:
            where, stuck = "between steps", [s.name for s in pending]
        elif current[0] == "import":
            where = f"while importing {current[1]}"
            if timed_out:
                run.imports.append(ImportTiming(group, current[1], None, False,
                                                error=f"timed out after {timeout:g} s"))
            else:
                run.imports.append(ImportTiming(group, current[1], None, False, error=why))
            stuck = [s.name for s in pending if current[1] in s.imports]
            if not stuck:
                stuck = [s.name for s in pending]
        else:
            where, stuck = f"while running probe {current[1]}", [current[1]]
        message = f"{why} {where}" + (f"; last output: {tail}" if tail and not timed_out
                                      else "")
        run.notes.append(message)
        for name in stuck:
            findings[name] = Finding(name, "failed", message, group, None,
                                     {"exit_status": rc, "timed_out": timed_out,
                                      **({"truncated": True} if flooded else {})})
        pending = [s for s in pending if s.name not in findings]
    return findings, run


def _run_in_process(spec: ProbeSpec, ctx: Dict[str, Any]) -> Finding:
    t0 = time.perf_counter()
    try:
        mod_name, _, fn_name = spec.func.partition(":")
        res = getattr(importlib.import_module(mod_name), fn_name)(spec.arg, ctx)
        status = res.get("status") if isinstance(res, dict) else None
        if status not in ("ok", "warning", "failed", "skipped"):
            raise TypeError(f"probe {spec.name} returned {res!r}, not a result dict")
        return Finding(spec.name, status, str(res.get("message", "")), spec.group,
                       time.perf_counter() - t0, res.get("details") or {})
    except BaseException as exc:  # noqa: BLE001 - a probe that raises (or exits) is a finding
        from selector.core.entry_points import contained
        if not contained(exc):
            raise
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Finding(spec.name, "failed", f"the probe raised {type(exc).__name__}: {text}",
                       spec.group, time.perf_counter() - t0, {"exception": type(exc).__name__})


def run_probes(names: Sequence[str], *, timeout: Optional[float] = None,
               ctx: Optional[Dict[str, Any]] = None) -> DeepReport:
    """Run the named probes now (no cache): skips from metadata, in-process metadata probes,
    then one child per library group, the groups in parallel. The time limit per child is
    `timeout`, else SELECTOR_PROBE_TIMEOUT, else 120 s."""
    timeout = env_vars.timeout("SELECTOR_PROBE_TIMEOUT") if timeout is None else \
        env_vars.parse_timeout("timeout", timeout)
    t0 = time.perf_counter()
    validate_names(names)
    reg = _registry()
    ctx = dict(ctx or {})
    findings: Dict[str, Finding] = {}
    groups: Dict[str, List[ProbeSpec]] = {}
    meta = GroupRun("metadata", ())
    for name in dict.fromkeys(names):
        spec = reg.resolve(name)
        why = _skip_reason(spec)
        if why is not None:
            findings[name] = Finding(name, "skipped", f"skipped: {why}", spec.group, None,
                                     {"reason": why})
        elif spec.in_process:
            f = _run_in_process(spec, ctx)
            findings[name] = f
            meta.probes += (name,)
            meta.seconds += f.seconds or 0.0
        else:
            groups.setdefault(spec.group, []).append(spec)
    runs: List[GroupRun] = [meta] if meta.probes else []
    if groups:
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            results = list(pool.map(lambda g: _run_group(g, groups[g], ctx, timeout),
                                    list(groups)))
        for found, run in results:
            findings.update(found)
            runs.append(run)
    ordered = {n: findings[n] for n in dict.fromkeys(names)}
    return DeepReport(ordered, runs, time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------------
# The session cache

_LOCK = threading.Lock()
_CACHE: Dict[str, Finding] = {}
_RUNS: List[GroupRun] = []


def probe_once(names: Sequence[str], *, timeout: Optional[float] = None,
               ctx: Optional[Dict[str, Any]] = None) -> DeepReport:
    """Like run_probes, but each probe runs at most once per process; later calls reuse it."""
    names = list(dict.fromkeys(names))
    validate_names(names)
    with _LOCK:
        missing = [n for n in names if n not in _CACHE]
        if missing:
            rep = run_probes(missing, timeout=timeout,
                             ctx=ctx)
            _CACHE.update(rep.findings)
            _RUNS.extend(rep.groups)
        seconds = 0.0 if not missing else rep.seconds
        wanted = set(names)
        groups = [g for g in _RUNS if wanted.intersection(g.probes)]
        return DeepReport({n: _CACHE[n] for n in names}, groups, seconds)


def run_deep_probes(catalogue: Catalogue, *, timeout: Optional[float] = None) -> Dict[str, Finding]:
    """Findings (name -> Finding with .ok and .message) for every probe the catalogue declares,
    computed once per session."""
    names = catalogue_probe_names(catalogue)
    where = {n: f"catalogue.{b.replace('/', '.')}.probes" for n, bs in
             declared_by(catalogue).items() for b in bs[:1]}
    validate_names(names, where)
    return probe_once(names, timeout=timeout).findings


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()
        _RUNS.clear()


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


__all__ = ["Finding", "ImportTiming", "GroupRun", "DeepReport", "run_probes", "probe_once",
           "run_deep_probes", "clear_cache", "catalogue_probe_names", "validate_names",
           "declared_by"]
