"""`selector check`: validate every file of a config tree, the packaged one and the user's.

Each file is validated on its own against the schema, so one run reports every broken file;
then the whole tree is composed once, as `explain` would, through the same public functions
of `selector.config`, so the two agree.
"""
from __future__ import annotations

import functools
import json
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from selector.config import catalogues, compose, lint_tree, read_backend, validate_preset
from selector.config.catalogues import discover as discover_tree
from selector.core import schema
from selector.core.engines import ENGINES
from selector.core.entry_points import load_entry_point
from selector.core.errors import SelectorError
from selector.core.layer import make_layer
from selector.core.model import (
    BackendSpec,
    engine_name_clashes,
    make_backend,
    make_platform,
    make_run_config,
)
from selector.core.preference import make_preference
from selector.core.rules import compile_rule
from selector.inspect import environment

if TYPE_CHECKING:  # pragma: no cover
    from selector.inspect.environment import Environment

# A MoE backend without these rules claims every activation and both gatings.
_ACTIVATION_KINDS = ("activation", "act_and_mul")


def _never_detect(names: List[str]) -> Environment:
    """Presets other than `auto` name their machine: validating one looks at no machine."""
    raise AssertionError("check validates presets without detecting the platform")


def _check_backends(tree: Any, known: Sequence[str], problems: List[Dict[str, str]],
                    checked: List[str]) -> List[BackendSpec]:
    """Every backend file of the tree read and built (its entry point and probes checked):
    the backends that pass, their files added to `checked`, what fails to `problems`."""
    backends: List[BackendSpec] = []
    for (op, name), path in sorted(tree.backend_files.items()):
        checked.append(str(path))
        try:
            conf = read_backend(path, f"catalogue.{op}.{name}")
        except SelectorError as exc:
            problems.append({"file": str(path), "problem": str(exc)})
            continue
        found = backend_problems(op, name, conf, str(path), known)
        problems.extend({"file": str(path), "problem": p} for p in found)
        if found:
            continue
        try:
            b = make_backend(op, name, conf, str(path), known)
            _check_entry_point(b)
            _check_probes(b)
            backends.append(b)
        except SelectorError as exc:
            problems.append({"file": str(path), "problem": str(exc)})
    return backends


def _check_presets(tree: Any, problems: List[Dict[str, str]], warnings: List[Dict[str, str]],
                   checked: List[str]) -> None:
    """Every preset of every group validated (a platform or stack preset made into a platform
    without looking at the machine, a layer preset into a layer)."""
    for group, options in tree.presets.items():
        for name, path in sorted(options.items()):
            checked.append(str(path))
            try:
                conf = validate_preset(path, group)
                if group == "platform" and name != "auto":
                    make_platform({**conf, "preset": name}, [], detect=_never_detect)
                elif group == "stack":
                    make_platform({**conf, "preset": "check"}, [], detect=_never_detect)
                    if conf.get("stack") is None and conf.get("packages"):
                        warnings.append({"file": str(path), "warning": f"{path}: stack={name} "
                                         "has no `stack: {family: ..., version: ...}`, so the "
                                         "no-packages hint never offers it"})
                elif group == "layer":
                    make_layer(conf, where=str(path))
            except SelectorError as exc:
                problems.append({"file": str(path), "problem": str(exc)})


def _rank_clashes(backends: Sequence[BackendSpec]) -> List[Dict[str, str]]:
    """Two backends of one op with the same rank: the preference order must be explicit."""
    out: List[Dict[str, str]] = []
    for op in schema.OPS:
        ranks: Dict[int, Any] = {}
        for b in (b for b in backends if b.op == op):
            if b.rank in ranks:
                other = ranks[b.rank]
                out.append({"file": b.file, "problem": f"{b.file}: "
                            f"catalogue.{op}.{b.name}.rank: "
                            f"{b.rank} is also the rank of {other.name} ({other.file}); "
                            "ranks must be distinct so the preference order is explicit"})
            ranks[b.rank] = b
    return out


def check_tree(overrides: Sequence[str], config_dirs: Sequence[str]) -> Dict[str, Any]:
    problems: List[Dict[str, str]] = []
    checked: List[str] = []
    tree = discover_tree(config_dirs)
    # installed distributions' catalogues that discovery left out: explain runs without them
    problems.extend({"file": "", "problem": p} for p in tree.left_out)
    try:
        lint_tree(tree)
    except SelectorError as exc:
        problems.append({"file": exc.where or "", "problem": str(exc)})
    known = tree.group_options("engine")  # the engines a backend file may (and should) name
    backends = _check_backends(tree, known, problems, checked)
    warnings = [{"file": b.file, "warning": f"{b.file}: catalogue.{b.op}.{b.name} declares no "
                 "activation or act_and_mul rule, so it claims to support every activation, "
                 "gated and non-gated"}
                for b in backends if b.op == "moe"
                and not any(r.kind in _ACTIVATION_KINDS for r in b.rules)]
    own: Dict[str, Set[Tuple[str, str]]] = {}
    for name, path in sorted(tree.presets.get("engine", {}).items()):
        found, own[name] = engine_problems(path, backends, known)
        said = {q["problem"].split(" is ", 1)[0] for q in problems}  # the lint found it first
        problems.extend({"file": str(path), "problem": p} for p in found
                        if p.split(" is ", 1)[0] not in said)
    warnings += unnamed_by_engines(backends, known, own)
    _check_presets(tree, problems, warnings, checked)
    problems.extend({"file": p.partition(":")[0], "problem": p}
                    for p in engine_name_clashes(backends))
    problems.extend(_rank_clashes(backends))
    # the YAML lint and the per-file pass can find the same problem: keep its first report
    first: Dict[str, Dict[str, str]] = {}
    for p in problems:
        first.setdefault(p["problem"], p)
    problems = list(first.values())
    if not problems:
        try:
            compose(tree, list(overrides), build=lambda data: make_run_config(
                data, tree.backend_files, environment.detect, catalogues.present))
        except SelectorError as exc:
            problems.append({"file": exc.where or "", "problem": str(exc)})
    return {"ok": not problems, "dirs": [str(d) for d in tree.dirs], "files": len(checked),
            "backends": {op: sorted(n for (o, n) in tree.backend_files if o == op)
                         for op in schema.OPS},
            "problems": problems, "warnings": warnings}


def unnamed_by_engines(backends: Sequence[BackendSpec], known: Sequence[str],
                       own: Optional[Dict[str, Set[Tuple[str, str]]]] = None
                       ) -> List[Dict[str, str]]:
    """An engine has the backends it names. One whose file lists its names (`backends:`, its
    home) has said which it has: the rest are not_applicable under it, said by its file once;
    a backend that no engine names at all is named here (the backend recipe's engine step left
    out, most likely). For an engine the backend files name, a backend without its entry is
    named here (an oversight of the backend's author, most likely)."""
    listed = {e for e, named in (own or {}).items() if named}
    out = []
    for b in backends:
        missing = [e for e in known if e != "none" and e not in listed
                   and e not in dict(b.engines)]
        if missing:
            out.append({"file": b.file, "warning": f"{b.file}: catalogue.{b.op}.{b.name} has no "
                        + ", ".join(f"engines.{e}" for e in missing) + " entry, so under "
                        + " or ".join(f"engine={e}" for e in missing) + " it is not_applicable; "
                        "write engines.<engine>.name (null: the engine has no such backend) "
                        "and its source"})
        elif listed and not dict(b.engines) and not any(
                (b.op, b.name) in named for named in (own or {}).values()):
            homes = sorted(listed)
            out.append({"file": b.file, "warning": f"{b.file}: catalogue.{b.op}.{b.name} is "
                        "named by no engine, so under " + " or ".join(
                            f"engine={e}" for e in homes) + " it is not_applicable; an engine "
                        "that offers it names it in its file, conf/engine/<engine>.yaml "
                        f"backends.{b.op}.{b.name} (name: null, with the source, where the "
                        "engine has none)"})
    return out


def _outside_clash(engine: str, key: str, why: str, backends: Sequence[BackendSpec],
                   entries: Sequence[Tuple[str, str, Any]]) -> str:
    """What of the catalogue an `outside:` key names ('' : nothing). The engine's name for a
    backend may stand outside for a scheme that backend does not implement, when the reason
    says which (vLLM's `torch` is its FP8 torch._scaled_mm linear backends, and an NVFP4 GEMM
    the catalogue lacks)."""
    import re

    from selector.core.schema import QUANTS
    mine = [b for b in backends if b.name == key]
    if mine:
        return f"the catalogue's {mine[0].op}/{key} ({mine[0].file})"
    own = {(op, n) for op, n, e in entries if e.name == key}
    claiming = [b for b in backends if (b.op, b.name) in own or any(
        n == engine and e.name == key for n, e in b.engines)]
    if not claiming:
        return ""
    said = {q for q in QUANTS if re.search(rf"\b{q}\b", why.lower())}
    if said and not said & {q for b in claiming for q in b.implements}:
        return ""
    return (f"{engine}'s name for {claiming[0].op}/{claiming[0].name} (say in the reason which "
            "scheme stands outside, one that backend does not implement)")


def engine_problems(path: Any, backends: Sequence[BackendSpec], known: Sequence[str]
                    ) -> Tuple[List[str], Set[Tuple[str, str]]]:
    """One engine file against the catalogue: it validates (its `launch:` and hooks too), the
    backends it names exist and are not named twice, and its `outside:` names no backend the
    catalogue has."""
    from selector.checkpoint.launchers import check_launch
    from selector.config.safe_yaml import load_yaml
    from selector.core.engines import make_engine
    file = str(path)
    try:
        conf = load_yaml(path) or {}
        conf = {k: v for k, v in conf.items() if k != "defaults"}
        engine = make_engine(conf, known, file)
    except SelectorError as exc:
        return [str(exc)], set()
    out = []
    try:
        check_launch(engine, file)
    except SelectorError as exc:
        out.append(str(exc))
    names = {(b.op, b.name): b for b in backends}
    for op, name, _ in engine.entries:
        b = names.get((op, name))
        key = f"engine.backends.{op}.{name}"
        if b is None:
            out.append(f"{file}: {key}: names no backend of the catalogue (accepted: "
                       f"{', '.join(sorted(n for o, n in names if o == op))})")
        elif engine.name in dict(b.engines):
            out.append(f"{file}: {key}: is also named in {b.file} (engines.{engine.name}): "
                       "name a backend in one place")
    for key, why in engine.outside:
        clash = _outside_clash(engine.name, key, why, backends, engine.entries)
        if clash:
            out.append(f"{file}: engine.outside.{key}: {key!r} is {clash}: outside lists only "
                       "the engine's backends the catalogue does not model")
    return out, {(op, name) for op, name, _ in engine.entries}


def backend_problems(op: str, name: str, conf: Any, file: str,
                     known: Sequence[str] = ENGINES) -> List[str]:
    """Every problem of one backend file, not only the first: each top-level key, each rule
    and each preference entry is validated on its own."""
    try:
        make_backend(op, name, conf, file, known)
        return []
    except SelectorError as exc:
        if not isinstance(conf, dict):
            return [str(exc)]
        first = str(exc)
    key = f"catalogue.{op}.{name}"
    out: List[str] = []
    build = functools.partial(make_backend, known_engines=known)

    def attempt(fn: Callable[..., object], *args: Any) -> None:
        try:
            fn(*args)
        except SelectorError as e:
            if str(e) not in out:
                out.append(str(e))

    parts = [k for k in conf if k not in ("rules", "preference")]
    if "rank" not in conf:
        attempt(build, op, name, {}, file)
    for k in parts:
        attempt(build, op, name, {"rank": 0, k: conf[k]} if k != "rank" else
                {k: conf[k]}, file)
    for field, compile_one in (("rules", compile_rule), ("preference", make_preference)):
        items = conf.get(field)
        if isinstance(items, list):  # each entry on its own, so every bad one is reported
            for i, item in enumerate(items):
                attempt(compile_one, item, f"{key}.{field}[{i}]", file)
        elif items is not None:
            attempt(build, op, name, {"rank": 0, field: items}, file)
    return out or [first]


def _check_probes(b: BackendSpec) -> None:
    """Every declared probe must be one doctor knows (cheap: nothing is imported)."""
    if b.probes:
        from selector.inspect.probing import validate_names
        try:
            validate_names(b.probes, {n: f"catalogue.{b.op}.{b.name}.probes" for n in b.probes})
        except SelectorError as exc:
            raise SelectorError(f"{b.file}: {exc}") from None


def _check_entry_point(b: BackendSpec) -> None:
    """The entry point must name an allowed, importable class (backends/ imports cheaply)."""
    if b.entry_point:
        try:
            load_entry_point(b.entry_point, f"catalogue.{b.op}.{b.name}.entry_point")
        except SelectorError as exc:
            raise SelectorError(f"{b.file}: {exc}") from None


def run_check(overrides: Sequence[str], config_dirs: Sequence[str], fmt: str = "text") -> int:
    report = check_tree(overrides, config_dirs)
    if fmt == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        n = sum(len(v) for v in report["backends"].values())
        for w in report["warnings"]:
            print(f"warning: {w['warning']}", file=sys.stderr)
        if report["ok"]:
            print(f"ok: {report['files']} config files, {n} backends "
                  f"({', '.join(f'{len(v)} {k}' for k, v in report['backends'].items())}) in "
                  f"{', '.join(report['dirs'])}")
        else:
            print(f"{len(report['problems'])} problem(s) in {report['files']} config files:",
                  file=sys.stderr)
            for p in report["problems"]:
                print(f"  - {p['problem']}", file=sys.stderr)
    return 0 if report["ok"] else 2
