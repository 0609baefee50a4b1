"""`selector check`: validate every file of a config tree, the packaged one and the user's.

Each file is validated on its own against the schema, so one run reports every broken file;
then the whole tree is composed once, as `explain` would.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence, Set, Union, cast

from . import schema
from .config import ConfigTree, _lint_yaml, compose, load_yaml, read_catalogue, translate
from .entry_points import load_entry_point
from .errors import SelectorError
from .layer import make_layer
from .model import BackendSpec, make_backend, make_platform, make_run_config


def _load_typed(path: Path, node_cls: type) -> Dict[str, Any]:
    """One YAML file merged onto its schema node: unknown keys and wrong types are errors."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    raw = load_yaml(path)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SelectorError(f"{path}: the file must hold a mapping of keys, not "
                            f"{type(raw).__name__}")
    raw.pop("defaults", None)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(node_cls), raw)
        return cast(Dict[str, Any], OmegaConf.to_container(merged, resolve=False))
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        err = translate(exc, ConfigTree((path.parent,)), [])
        raise SelectorError(f"{path}: {err}") from None


def check_tree(overrides: Sequence[str],
               config_dirs: Sequence[Union[str, os.PathLike[str]]]) -> Dict[str, Any]:
    problems: List[Dict[str, str]] = []
    checked: List[str] = []
    tree = ConfigTree.discover(config_dirs)
    try:
        _lint_yaml(tree)
    except SelectorError as exc:
        problems.append({"file": exc.where or "", "problem": str(exc)})
    backends = []
    for (op, name), path in sorted(tree.backend_files.items()):
        checked.append(str(path))
        try:
            conf = read_catalogue(ConfigTree(tree.dirs, {(op, name): path}))[op][name]
            b = make_backend(op, name, conf, str(path))
            _check_entry_point(b)
            _check_probes(b)
            backends.append(b)
        except SelectorError as exc:
            problems.append({"file": str(path), "problem": str(exc)})
    for group, node in (("platform", schema.PlatformConf), ("stack", schema.PlatformConf),
                        ("layer", schema.LayerConf), ("policy", schema.PolicyConf)):
        for d in tree.dirs:
            for path in sorted((d / group).glob("*.yaml")) if (d / group).is_dir() else []:
                checked.append(str(path))
                try:
                    conf = _load_typed(path, node)
                    if group in ("platform", "stack"):
                        make_platform({**conf, "preset": conf.get("preset") or "check"}, [],
                                      detect=lambda names: None) \
                            if conf.get("preset") != "auto" else None
                    elif group == "layer":
                        make_layer(conf, where=str(path))
                except SelectorError as exc:
                    problems.append({"file": str(path), "problem": str(exc)})
    for op in schema.OPS:
        ranks: Dict[int, Any] = {}
        for b in (b for b in backends if b.op == op):
            if b.rank in ranks:
                other = ranks[b.rank]
                problems.append({"file": b.file, "problem": f"{b.file}: "
                                 f"catalogue.{op}.{b.name}.rank: "
                                 f"{b.rank} is also the rank of {other.name} ({other.file}); "
                                 "ranks must be distinct so the preference order is explicit"})
            ranks[b.rank] = b
    # the YAML lint and the per-file pass can find the same problem: keep the first
    seen: Set[str] = set()
    unique = []
    for p in problems:
        if p["problem"] not in seen:
            seen.add(p["problem"])
            unique.append(p)
    problems = unique
    if not problems:
        try:
            data = compose(tree, list(overrides))
            make_run_config(data, tree.backend_files)
        except SelectorError as exc:
            problems.append({"file": exc.where or "", "problem": str(exc)})
    return {"ok": not problems, "dirs": [str(d) for d in tree.dirs], "files": len(checked),
            "backends": {op: sorted(n for (o, n) in tree.backend_files if o == op)
                         for op in schema.OPS},
            "problems": problems}


def _check_probes(b: BackendSpec) -> None:
    """Every declared probe must be one doctor knows (cheap: nothing is imported)."""
    if b.probes:
        from .probing import validate_names
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
