"""`selector doctor [--deep] [--probe NAME]... [--timeout S] [--format text|json] [OVERRIDE ...]`

What this machine is and what could run on it:
- the platform: GPU name, compute capability, driver, the driver's CUDA version and the CUDA
  runtime, and how each was found (NVML, torch's build label, a runtime wheel; environment.py);
- every relevant distribution and its version (importlib.metadata, no import);
- for each catalogue backend, whether this machine could run it: the backend's rules that do not
  depend on the layer (device, CUDA, packages, known issues; opt-in noted), evaluated by the
  same Resolver that `explain` uses.

Without --deep nothing is imported (well under a second). --deep runs the probes the catalogue
declares (backends.children.probes, through selector.inspect.probing: one child process per library group, with
a time limit, import times reported), plus torch's own view of CUDA; a failed probe turns into
a `feature` rejection of the backends that declare it, exactly as `explain probe=deep` does.

Exit codes: 0 nothing wrong found; 1 a problem was found: a probe found a broken install (a
package that is installed but whose entry points fail), or a known-bad combination of the
catalogue is installed; 2 bad input (SelectorError). A probe whose package is not installed is
"skipped", not a problem; doctor itself never crashes on a broken install.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

from selector.core.text import join_lines

if TYPE_CHECKING:  # pragma: no cover
    from selector.inspect.drift import DriftItem

VERDICTS = {"eligible": "could run", "opt_in": "could run (opt-in only)",
            "rejected": "cannot run"}


@dataclass
class BackendVerdict:
    op: str
    backend: str
    verdict: str  # could run | could run (opt-in only) | cannot run
    reasons: List[Any]  # rules.Reason
    warnings: List[Any]
    probes: List[Tuple[str, str, str]]  # (name, status, message)

    def to_dict(self) -> Dict[str, Any]:
        return {"op": self.op, "backend": self.backend, "verdict": self.verdict,
                "reasons": [r.to_dict() for r in self.reasons],
                "warnings": [r.to_dict() for r in self.warnings],
                "probes": [{"name": n, "status": s, "message": m} for n, s, m in self.probes]}


@dataclass
class Report:
    deep: bool
    platform: Dict[str, Any]
    packages: Dict[str, Optional[str]]
    verdicts_for: str
    backends: List[BackendVerdict]
    deep_report: Any = None  # probing.DeepReport
    declared: Dict[str, List[str]] = field(default_factory=dict)
    problems: List[str] = field(default_factory=list)
    seconds: float = 0.0
    drift: Optional[List[DriftItem]] = None  # with --deep
    verify_report: Any = None  # verify.Report (--verify)
    guard: str = ""  # the version guard: an engine or library newer than selector has proven
    engine: Any = None  # vllm_drift.EngineDrift (with --deep): how the vLLM comparison ran

    @property
    def drifted(self) -> bool:
        return any(i.status == "drift" for i in self.drift or ())

    @property
    def exit_code(self) -> int:
        return 1 if self.problems or self.drifted else 0

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {
            "command": "doctor", "deep": self.deep, "seconds": round(self.seconds, 3),
            "platform": self.platform, "packages": self.packages,
            "verdicts_for": self.verdicts_for,
            "backends": [b.to_dict() for b in self.backends], "probes": None,
            "problems": list(self.problems), "exit_code": self.exit_code,
            "drift": None if self.drift is None else [i.to_dict() for i in self.drift],
            "engine_drift": None if self.engine is None else self.engine.to_dict()}
        if self.guard:
            d["guard"] = self.guard
        if self.deep_report is not None:
            rep = self.deep_report
            d["probes"] = {
                "seconds": round(rep.seconds, 3),
                "findings": [dict(f.to_dict(), declared_by=self.declared.get(n, []))
                             for n, f in rep.findings.items()],
                "groups": [g.to_dict() for g in rep.groups],
                "imports": [i.to_dict() for i in rep.imports]}
        v = self.verify_report
        d["verify"] = None if v is None else [r.to_dict() for r in v.results]
        if v is not None:
            d["verify_info"] = v.info()
        return d


# ---------------------------------------------------------------------------------------------

def run_doctor(overrides: Sequence[str] = (), config_dirs: Sequence[Any] = (), *,
               deep: bool = False, timeout: Optional[float] = None, fmt: str = "text",
               probes: Optional[Sequence[str]] = None, stream: Optional[TextIO] = None,
               verify: bool = False, verify_ops: Optional[Sequence[str]] = None,
               verify_cache: bool = True) -> int:
    """Print the doctor report; return the exit code (0 fine, 1 a problem found).
    Bad input raises SelectorError (the CLI prints it and exits 2)."""
    report = build_report(overrides, config_dirs, deep=deep, timeout=timeout, probes=probes,
                          verify=verify, verify_ops=verify_ops, verify_cache=verify_cache)
    out = stream or sys.stdout
    if fmt == "json":
        out.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        out.write(render_text(report).rstrip("\n") + "\n")
    return report.exit_code


def build_report(overrides: Sequence[str] = (), config_dirs: Sequence[Any] = (), *,
                 deep: bool = False, timeout: Optional[float] = None,
                 probes: Optional[Sequence[str]] = None, verify: bool = False,
                 verify_ops: Optional[Sequence[str]] = None, verify_cache: bool = True) -> Report:
    t0 = time.perf_counter()
    from selector.core.env_vars import parse_timeout
    from selector.core.env_vars import timeout as env_timeout
    timeout = env_timeout("SELECTOR_PROBE_TIMEOUT") if timeout is None else \
        parse_timeout("--timeout", timeout)
    from selector.api import load
    from selector.core.resolver import Resolver
    from selector.inspect import environment
    from selector.inspect.probing import declared_by, validate_names

    seen: Dict[str, Any] = {}

    def detect(names: Sequence[str]) -> Any:
        seen["env"] = environment.detect(names)
        return seen["env"]

    sel = load(list(overrides), config_dirs=list(config_dirs), detect=detect)
    model = sel.run_config
    catalogue = model.catalogue
    declared = declared_by(catalogue)
    validate_names(declared, {n: f"catalogue.{bs[0].replace('/', '.')}.probes"
                              for n, bs in declared.items()})
    names = [n for n, _ in model.platform.packages]
    env = seen.get("env") or environment.detect(names)
    packages = _installed(env)

    deep = deep or bool(probes) or model.probe == "deep"
    rep = _deep_probes(catalogue, env, probes, timeout) if deep else None
    findings: Dict[str, Any] = rep.findings if rep is not None else {}

    resolver = Resolver(model, {n: (f.ok, f.message) for n, f in findings.items()})
    problems: List[str] = []
    verdicts = _backend_verdicts(resolver, catalogue, findings, problems)
    drift, engine = _drift(overrides, config_dirs, timeout, model, findings, rep, probes)
    vrep = None
    if verify or verify_ops or model.probe == "verify":  # selector.inspect.verify: kernels vs reference
        from selector.inspect.verify import default_timeout, run_verify, verify_once
        run = verify_once if verify_cache else run_verify
        vrep = run(sel, overrides, config_dirs, ops=verify_ops,
                   timeout=default_timeout() if timeout is None else timeout,
                   use_cache=verify_cache)
        problems.extend(f"verify {r.op}/{r.backend} {r.case_text} FAIL: {r.detail}"
                        for r in vrep.failures)
    p = model.platform
    platform = _platform_dict(env, rep)
    verdicts_for = "this machine (detected)" if p.source == "detected" else (
        f"platform={p.preset} from the overrides (hardware preset), not this machine")
    from selector.config.presets import proven_releases
    from selector.core.notes import text as note_text
    from selector.core.resolver import unproven_note
    tree = sel.tree
    guard = unproven_note(p, (lambda: proven_releases(tree)) if tree is not None else ())
    return Report(deep, platform, packages, verdicts_for, verdicts, rep, declared, problems,
                  time.perf_counter() - t0, drift, vrep,
                  note_text(guard) if guard is not None else "", engine)


def _deep_probes(catalogue: Any, env: Any, probes: Optional[Sequence[str]],
                 timeout: Optional[float]) -> Any:
    """The deep probes' report: `probes`, else doctor's own and every one the catalogue
    declares, each in a child process (NVML's answer handed in)."""
    from selector.core.probe_specs import DOCTOR_PROBES
    from selector.inspect.probing import catalogue_probe_names, probe_once, validate_names
    wanted = list(probes) if probes else list(DOCTOR_PROBES) + catalogue_probe_names(catalogue)
    validate_names(wanted, {n: "--probe" for n in wanted})
    nvml = {"capability": list(env.gpu.capability) if env.gpu.capability else None,
            "name": env.gpu.name, "method": env.gpu.method}
    return probe_once(wanted, timeout=timeout, ctx={"nvml": nvml})


def _backend_verdicts(resolver: Any, catalogue: Any, findings: Dict[str, Any],
                      problems: List[str]) -> List[BackendVerdict]:
    """Each backend's verdict from the rules that read nothing of the layer (and the deep
    probes' findings); a known issue or a failed probe is added to `problems`."""
    verdicts: List[BackendVerdict] = []
    for op, backends in catalogue.backends.items():
        for b in backends:
            failures, opt_in, warnings = resolver.platform_reasons(op, b.name)
            if not failures:
                failures = _every_scheme_fails(resolver, op, b)
            status = "rejected" if failures else "opt_in" if opt_in else "eligible"
            plist = [(n, findings[n].status, findings[n].message) if n in findings else
                     (n, "not run", "") for n in b.probes]
            verdicts.append(BackendVerdict(op, b.name, VERDICTS[status], list(failures),
                                           list(warnings), plist))
            for r in failures:
                if r.rule == "known_issue":
                    text = f"known issue: {r.message} ({r.source})"
                    if text not in problems:
                        problems.append(text)
    for n, f in findings.items():
        if f.status == "failed":
            problems.append(f"probe {n} failed: {f.message}")
    return verdicts


def _installed(env: Any) -> Dict[str, Optional[str]]:
    """The platform's distributions and doctor's extra ones, by name: their versions."""
    from selector.inspect import environment
    packages = {n: (None if v is None else str(v)) for n, v in sorted(env.packages.items())}
    for n, v in environment.installed_versions(environment.EXTRA_PACKAGES).items():
        if v is not None:
            packages.setdefault(n, str(v))
    return dict(sorted(packages.items()))


def _drift(overrides: Sequence[str], config_dirs: Sequence[Any], timeout: Optional[float],
           model: Any, findings: Dict[str, Any], rep: Any, probes: Optional[Sequence[str]]
           ) -> Tuple[Optional[List[Any]], Any]:
    """With deep probes: the catalogue against what the installed libraries declare, and
    (every probe run) the installed engine's own oracles; (None, None) without."""
    catalogue = model.catalogue
    drift = None
    if rep is not None:
        from selector.inspect.drift import compare
        drift = compare(catalogue, model.platform.facts,
                        {n: dict(f.details) for n, f in findings.items() if f.status != "skipped"})
    engine = None
    if rep is not None and not probes:  # the installed engine's own oracles (selector/engines/vllm_drift.py)
        from selector.engines.vllm_drift import EngineDrift, check
        engine = check(overrides, config_dirs, timeout) if model.platform.source == "detected" \
            else EngineDrift("skipped", "the platform is a preset, not this machine: vLLM's "
                             "oracles answer for this machine only")
        drift = (drift or []) + engine.items
    return drift, engine


def _every_scheme_fails(resolver: Any, op: str, b: Any) -> Tuple[Any, ...]:
    """The rules that read nothing of the layer but its scheme (``when: {quant: [...]}``: a
    device, CUDA or package rule per scheme, as flashinfer_trtllm's per-scheme SM lists, or a
    `quant` rule refusing a scheme): when they fail for every scheme the backend implements,
    no layer can run it here, which is what `explain` says for each layer; their failures,
    else () (some scheme passes them all: the backend could run)."""
    from types import SimpleNamespace
    steps = resolver._plans[op, b.name].steps
    facts = resolver._facts
    scoped = [r for r in steps if hasattr(r, "when") and r.all_layer_fields and
              set(r.all_layer_fields) <= {"quant"} and r.severity != "warning" and
              r.when.platform_holds(facts)]
    if not scoped or not b.implements:
        return ()
    found: List[Any] = []
    for q in b.implements:
        stub = SimpleNamespace(quant=q)
        fails = [got for r in scoped if r.when.layer_holds(stub)
                 for got in [r.evaluate(stub if r.layer_fields else None, facts)]
                 if got is not None]
        if not fails:
            return ()  # this scheme passes every platform rule: the backend could run
        found += [f for f in fails if f not in found]
    return tuple(found)


def _platform_dict(env: Any, rep: Any) -> Dict[str, Any]:
    g = env.gpu
    d: Dict[str, Any] = {
        "gpu": g.name, "capability": None if g.capability is None else
        f"{g.capability[0]}.{g.capability[1]}", "gpu_count": g.count, "driver": g.driver,
        "driver_cuda": None if g.driver_cuda is None else str(g.driver_cuda),
        "cuda": None if env.cuda is None else str(env.cuda),
        "how": {"gpu": g.method, "cuda": env.cuda_method, "packages": "importlib.metadata"},
        "notes": [n for n in env.notes if not n.startswith("GPU: ")]}
    if rep is not None and "torch.cuda" in rep.findings:
        f = rep.findings["torch.cuda"]
        d["torch"] = dict(f.details, status=f.status, message=f.message)
    return d


# ---------------------------------------------------------------------------------------------
# Text

def _fmt_s(s: Optional[float]) -> str:
    return "?" if s is None else f"{s:.2f} s"


def render_text(r: Report) -> str:
    lines: List[str] = []
    add = lines.append
    mode = ("deep: kernel libraries imported in child processes" if r.deep else
            "metadata only; --deep imports the kernel libraries and probes them")
    add(f"selector doctor ({mode}; {r.seconds:.2f} s)")
    if r.guard:
        add(f"!! {r.guard}")
    add("")
    _render_platform(r.platform, add)
    add("packages (importlib.metadata; nothing imported)")
    width = max([len(n) for n in r.packages] + [10])
    for n, v in r.packages.items():
        add(f"  {n:<{width}}  {v or 'not installed'}")
    add("")
    _render_backends(r, add)
    if r.deep_report is not None:
        _render_deep(r, r.deep_report, add)
    if r.drift is not None:
        _render_drift(r.drift, add)
    if r.engine is not None:
        add(f"  engine drift: {r.engine.message}")
    if r.verify_report is not None:
        from selector.inspect.verify import render_text as verify_text
        add("")
        lines.extend(verify_text(r.verify_report))
    add("")
    if r.problems:
        add(f"problems ({len(r.problems)}):")
        for pr in r.problems:
            add(f"  - {pr}")
        add("exit status 1: a problem was found")
    elif r.drifted:
        add("exit status 1: the catalogue drifted from the installed libraries")
    else:
        add("exit status 0: nothing wrong found" + ("" if r.deep else
                                                    " (metadata only: --deep looks further)"))
    return join_lines(lines)


def _render_platform(p: Dict[str, Any], add: Callable[[str], None]) -> None:
    """The detected platform: GPU, capability, driver, CUDA runtime, torch (deep), notes."""
    how = p["how"]
    add("platform (detected)")
    gpu = p["gpu"] or "none"
    if p["gpu_count"] and p["gpu_count"] > 1:
        gpu += f" (GPU 0 of {p['gpu_count']})"
    add(f"  GPU            {gpu}    [detection: {how['gpu']}]")
    add(f"  capability     {p['capability'] or 'none'}")
    add(f"  driver         {p['driver'] or 'none'}"
        + (f" (supports CUDA {p['driver_cuda']})" if p["driver_cuda"] else ""))
    add(f"  CUDA runtime   {p['cuda'] or 'none'}    [detection: {how['cuda']}]")
    t = p.get("torch")
    if t:
        add(f"  torch (deep)   {t['message']}")
    for n in p["notes"]:
        add(f"  note           {n}")
    add("")


def _render_backends(r: Report, add: Callable[[str], None]) -> None:
    """Each backend's verdict from the rules that read nothing of the layer, with its reasons,
    warnings and (deep) probes."""
    add(f"backends: could this machine run them? (rules that do not depend on the layer: device, "
        f"CUDA, packages, known issues{', deep probes' if r.deep else ''}; layer rules are "
        f"explain's)")
    if not r.verdicts_for.startswith("this machine"):
        add(f"  verdicts for {r.verdicts_for}")
    for op in dict.fromkeys(b.op for b in r.backends):
        add(f"  {op}")
        bw = max(len(b.backend) for b in r.backends if b.op == op)
        for b in (x for x in r.backends if x.op == op):
            add(f"    {b.backend:<{bw}}  {b.verdict}")
            for reason in b.reasons:
                add(f"      [{reason.rule}] {reason.message} ({reason.source})")
            for w in b.warnings:
                add(f"      [warning] {w.message} ({w.source})")
            if r.deep:
                for name, status, msg in b.probes:  # a failed one is a [feature] reason above
                    if status in ("warning", "skipped"):
                        text = msg if msg.startswith(f"{status}:") else f"{status}: {msg}"
                        add(f"      probe {name}: {text}" if msg else f"      probe {name}: {status}")


def _render_deep(r: Report, rep: Any, add: Callable[[str], None]) -> None:
    """The deep probes: each group's child processes and imports, each probe's finding."""
    add("")
    procs = sum(g.processes for g in rep.groups)
    add(f"deep probes ({len(rep.findings)} probes, {procs} child process"
        f"{'es' if procs != 1 else ''}, {rep.seconds:.2f} s wall; cached for this process)")
    from selector.core.probe_specs import group_label
    for g in rep.groups:
        imports = ", ".join(i.describe() for i in g.imports)
        if g.group == "metadata":
            add(f"  {group_label(g.group)}: no import, {_fmt_s(g.seconds)}")
        else:
            add(f"  {group_label(g.group)}: {g.processes} process"
                f"{'es' if g.processes != 1 else ''}, {_fmt_s(g.seconds)}; import "
                f"{imports or 'nothing'}")
    nw = max([len(n) for n in rep.findings] + [10])
    for n, f in rep.findings.items():
        users = r.declared.get(n)
        add(f"  {f.status.upper():<8} {n:<{nw}}  {f.message}")
        if users:
            add(f"  {'':<8} {'':<{nw}}  (declared by {', '.join(users)})")


def _render_drift(items: Sequence[DriftItem], add: Callable[[str], None]) -> None:
    from selector.inspect.drift import counts
    c = counts(items)
    add("")
    add(f"drift: the catalogue against what the installed libraries declare ({c['agrees']} "
        f"agree, {c['explained']} explained, {c['drift']} drift)")
    for i in items:
        if i.status != "agrees":
            add(f"  {i.status.upper():<9} {i.backend}  {i.claim}: catalogue {i.catalogue}; "
                f"installed {i.installed}")
            add(f"  {'':<9} {i.detail}")


__all__ = ["run_doctor", "build_report", "render_text", "Report", "BackendVerdict"]
