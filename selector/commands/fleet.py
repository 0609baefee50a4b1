"""`selector fleet FLEET.yaml`: the plan of every model on every machine under every engine.

A fleet file names machines (a platform preset with a stack, or `auto:` a capture of
`selector doctor --format json` taken on the machine), models (checkpoint directories, relative
to the file) and engines; each cell (machine x model x engine) is that checkpoint's plan there,
`explain --model DIR platform=... stack=... engine=...`. One table (text, markdown, JSON, HTML)
shows each cell's backends per op, its refusals and its warnings. `--what-if OVERRIDE ...`
plans every cell again with the overrides added (`stack=vllm_0_33`) and lists the cells whose
backend changes or that start (or stop) failing.

    machines:
      - {name: h100-a, platform: h100, stack: vllm_0_32}
      - {name: lab-1, auto: captures/lab-1.json}      # python -m selector doctor --format json
    models: [deepseek-r1-nvfp4, {name: llama, path: ckpts/llama-3.1-8b-fp4}]
    engines: [vllm, sglang, trtllm]
    overrides: [policy.strict=false]                  # optional, for every cell
    fail_on: error                                    # error (default) | warning

Exit codes: 0 every cell plans (and, with `--fail-on warning`, none warns); 1 some cell
refuses (or warns), now or, with --what-if, after the overrides; 2 bad input (the file, a key, a
machine's preset or capture, a model directory), one line naming it.
"""
from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from selector.core.errors import SelectorError, bad_value

FORMATS = ("text", "markdown", "html", "json")
SEVERITIES = ("error", "warning")
ENGINES = ("vllm", "sglang", "trtllm", "none")
_KEYS = ("machines", "models", "engines", "overrides", "fail_on")
_MACHINE_KEYS = ("name", "platform", "stack", "auto", "overrides")


@dataclass
class Machine:
    name: str
    overrides: List[str]
    label: str  # what the table shows under the name


@dataclass
class Model:
    name: str
    path: str


@dataclass
class Fleet:
    file: str
    machines: List[Machine]
    models: List[Model]
    engines: List[str]
    overrides: List[str]
    fail_on: str


@dataclass
class Cell:
    machine: str
    model: str
    engine: str
    ok: bool
    backends: Dict[str, List[str]] = field(default_factory=dict)  # op -> selected (in order)
    refusals: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    error: Optional[str] = None  # bad input for this cell (a checkpoint selector cannot read)

    @property
    def short(self) -> str:
        if self.error:
            return "error"
        parts = [f"{op}: {', '.join(names) or 'none'}" for op, names in self.backends.items()]
        text = "; ".join(parts) or "nothing quantized"
        if self.refusals:
            text = f"REFUSED ({len(self.refusals)}) " + text
        elif self.warnings:
            text += f" [{len(self.warnings)} warning{'s' if len(self.warnings) > 1 else ''}]"
        return text

    def to_dict(self) -> Dict[str, Any]:
        return {"machine": self.machine, "model": self.model, "engine": self.engine,
                "ok": self.ok, "backends": self.backends, "refusals": self.refusals,
                "warnings": self.warnings, "error": self.error}


# -- reading the fleet file ----------------------------------------------------------------------
def _where(file: str, key: str) -> str:
    return f"{file}: {key}"


def _str_list(value: Any, file: str, key: str) -> List[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SelectorError(f"{_where(file, key)}: {value!r} is not a list of strings",
                            key=key, where=file)
    return list(value)


def capture_overrides(path: Path, key: str) -> Tuple[List[str], str]:
    """The overrides that describe the machine of a `doctor --format json` capture: its
    capability, CUDA and every package version it lists (on the `cpu` preset: the capture,
    not this machine, is the hardware)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SelectorError(f"{key}: cannot read {str(path)!r}: {exc.strerror or exc}",
                            key=key) from None
    except ValueError as exc:
        raise SelectorError(f"{key}: {str(path)!r} is not JSON ({exc}); write it with "
                            "`python -m selector doctor --format json > FILE`", key=key) from None
    plat = data.get("platform") if isinstance(data, dict) else None
    pkgs = data.get("packages") if isinstance(data, dict) else None
    if not isinstance(plat, dict) or not isinstance(pkgs, dict):
        raise SelectorError(f"{key}: {str(path)!r} is not a `selector doctor --format json` "
                            "capture (it needs its `platform` and `packages` objects)", key=key)
    cap, cuda = plat.get("capability"), plat.get("cuda")
    out = ["platform=cpu", f"platform.capability={json.dumps(cap)}" if cap else
           "platform.capability=null", f"platform.cuda={cuda}" if cuda else "platform.cuda=null"]
    for name, version in sorted(pkgs.items()):
        if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
            raise SelectorError(f"{key}: {str(path)!r} lists a package named {name!r}", key=key)
        out.append(f"platform.packages.{name}={version}" if version else
                   f"platform.packages.{name}=null")
    gpu = plat.get("gpu") or "no GPU"
    return out, f"{gpu}{f' (SM {cap})' if cap else ''}, captured"


def _machines(raw: Any, path: str, root: Path) -> List[Machine]:
    """The fleet's `machines:`: each a preset (`platform:`, a name alone) or a capture
    (`auto: CAPTURE.json`, relative to the fleet file), with its stack and overrides."""
    machines: List[Machine] = []
    if not isinstance(raw, list) or not raw:
        raise SelectorError(f"{_where(path, 'machines')}: a non-empty list of machines "
                            "({name, platform, stack} or {name, auto: CAPTURE.json})",
                            key="machines", where=path)
    for i, m in enumerate(raw):
        key = f"machines[{i}]"
        if isinstance(m, str):
            m = {"name": m, "platform": m}
        if not isinstance(m, dict):
            raise SelectorError(f"{_where(path, key)}: {m!r} is not a mapping", where=path)
        for k in m:
            if k not in _MACHINE_KEYS:
                raise bad_value(f"{key}.{k}", k, _MACHINE_KEYS, what="machine key", where=path)
        if ("platform" in m) == ("auto" in m):
            raise SelectorError(f"{_where(path, key)}: give one of platform: PRESET or auto: "
                                "CAPTURE.json (a `selector doctor --format json` file)",
                                key=key, where=path)
        extra = _str_list(m.get("overrides", []), path, f"{key}.overrides")
        if "auto" in m:
            ov, label = capture_overrides(root / str(m["auto"]), f"{path}: {key}.auto")
        else:
            ov, label = [f"platform={m['platform']}"], str(m["platform"])
        if m.get("stack"):
            ov.append(f"stack={m['stack']}")
            label += f", stack {m['stack']}"
        name = str(m.get("name") or label)
        if any(x.name == name for x in machines):
            raise SelectorError(f"{_where(path, key)}.name: {name!r} names two machines",
                                where=path)
        machines.append(Machine(name, ov + extra, label))
    return machines


def _models(raw: Any, path: str, root: Path) -> List[Model]:
    """The fleet's `models:`: checkpoint directories (relative to the fleet file), named."""
    models: List[Model] = []
    if not isinstance(raw, list) or not raw:
        raise SelectorError(f"{_where(path, 'models')}: a non-empty list of checkpoint "
                            "directories (relative to the fleet file)", key="models", where=path)
    for i, m in enumerate(raw):
        if isinstance(m, str):
            m = {"path": m}
        if not isinstance(m, dict) or not isinstance(m.get("path"), str):
            raise SelectorError(f"{_where(path, f'models[{i}]')}: {m!r}: give a directory, or "
                                "{name, path}", where=path)
        d = (root / m["path"]).resolve()
        if not d.is_dir():
            raise SelectorError(f"{_where(path, f'models[{i}]')}: {m['path']!r} is not a "
                                f"directory (resolved: {d})", where=path)
        models.append(Model(str(m.get("name") or Path(m["path"]).name), str(d)))
    return models


def read_fleet(path: str) -> Fleet:
    from selector.config.safe_yaml import load_yaml
    p = Path(path)
    if not p.is_file():
        raise SelectorError(f"FLEET: {path!r} is not a file (a fleet YAML: machines, models, "
                            "engines)", key="FLEET", value=path)
    data = load_yaml(p)
    if not isinstance(data, dict):
        raise SelectorError(f"{path}: a fleet file is a mapping with machines, models and "
                            "engines", where=path)
    for k in data:
        if k not in _KEYS:
            raise bad_value(str(k), k, _KEYS, what="fleet key", where=path)
    root = p.parent
    machines = _machines(data.get("machines"), path, root)
    models = _models(data.get("models"), path, root)
    engines = _str_list(data.get("engines", ["vllm"]), path, "engines")
    for e in engines:
        if e not in ENGINES:
            raise bad_value(f"{path}: engines", e, ENGINES, what="engine")
    fail_on = data.get("fail_on", "error")
    if fail_on not in SEVERITIES:
        raise bad_value(f"{path}: fail_on", fail_on, SEVERITIES, what="severity")
    return Fleet(path, machines, models, engines,
                 _str_list(data.get("overrides", []), path, "overrides"), str(fail_on))


# -- planning ------------------------------------------------------------------------------------
def plan_cell(machine: Machine, model: Model, engine: str, extra: Sequence[str],
              config_dirs: Sequence[str]) -> Cell:
    from selector.api import load
    from selector.checkpoint.plan_text import planned, selected_warnings
    sel = load(list(machine.overrides) + [f"engine={engine}"] + list(extra),
               config_dirs=list(config_dirs))
    try:
        p = sel.plan(model.path)
    except SelectorError as exc:  # the checkpoint itself: bad input, whatever the machine
        raise SelectorError(f"models: {model.name}: {exc}", key="models") from None
    cell = Cell(machine.name, model.name, engine, p.ok)
    for k in p.kinds:
        if not k.quant:
            continue
        for s in k.shapes:
            d = s.decision
            if not planned(d):
                continue
            names = cell.backends.setdefault(k.op, [])
            if d.selected and d.selected not in names:
                names.append(d.selected)
            where = f"{k.component} {'/'.join(s.projections)} ({k.quant})"
            if not d.selected:
                cell.refusals.append(f"{where}: {d.outcome}: {d.summary()}")
            cell.warnings.extend(f"{where}: {w}" for w in selected_warnings(d))
    cell.refusals.extend(p.problems())
    cell.warnings = list(dict.fromkeys(cell.warnings))
    return cell


def plan_fleet(fleet: Fleet, extra: Sequence[str] = (), config_dirs: Sequence[str] = ()
               ) -> List[Cell]:
    return [plan_cell(m, mo, e, list(fleet.overrides) + list(extra), config_dirs)
            for m in fleet.machines for mo in fleet.models for e in fleet.engines]


def changes(before: Sequence[Cell], after: Sequence[Cell]) -> List[Dict[str, Any]]:
    """The cells whose backends, refusal or failure differ between two runs."""
    out = []
    for a, b in zip(before, after):
        kinds = []
        if a.backends != b.backends:
            kinds.append("backend")
        if a.ok and not b.ok:
            kinds.append("starts failing")
        elif b.ok and not a.ok:
            kinds.append("stops failing")
        if len(b.warnings) > len(a.warnings):
            kinds.append("new warnings")
        if kinds:
            out.append({"machine": a.machine, "model": a.model, "engine": a.engine,
                        "change": kinds, "before": a.short, "after": b.short,
                        "new_refusals": [r for r in b.refusals if r not in a.refusals],
                        "new_warnings": [w for w in b.warnings if w not in a.warnings]})
    return out


# -- rendering -----------------------------------------------------------------------------------
def _columns(fleet: Fleet) -> List[Tuple[str, str]]:
    return [(m.name, e) for m in fleet.machines for e in fleet.engines]


def _grid(fleet: Fleet, cells: Sequence[Cell]) -> Dict[Tuple[str, str, str], Cell]:
    return {(c.model, c.machine, c.engine): c for c in cells}


def to_text(fleet: Fleet, cells: Sequence[Cell], what_if: Optional[Dict[str, Any]] = None) -> str:
    grid = _grid(fleet, cells)
    out = [f"fleet {fleet.file}: {len(fleet.machines)} machines x {len(fleet.models)} models x "
           f"{len(fleet.engines)} engines = {len(cells)} plans; "
           f"{sum(c.ok for c in cells)} plan, {sum(not c.ok for c in cells)} refuse, "
           f"{sum(bool(c.warnings) for c in cells)} warn"]
    for m in fleet.machines:
        out.append(f"\n{m.name} ({m.label})")
        width = max(len(mo.name) for mo in fleet.models)
        for mo in fleet.models:
            for e in fleet.engines:
                c = grid[mo.name, m.name, e]
                out.append(f"  {mo.name:<{width}}  {e:<7} {c.short}")
    problems = [c for c in cells if c.refusals or c.warnings or c.error]
    if problems:
        out.append("\nrefusals and warnings:")
        for c in problems:
            for r in ([c.error] if c.error else []) + c.refusals:
                out.append(f"  {c.machine} / {c.model} / {c.engine}: refused: {r}")
            for w in c.warnings:
                out.append(f"  {c.machine} / {c.model} / {c.engine}: {w}")
    if what_if is not None:
        out.append(_what_if_text(what_if))
    return "\n".join(out)


def _what_if_text(w: Dict[str, Any]) -> str:
    head = f"\nwhat if {' '.join(w['overrides'])}: {len(w['changes'])} cells change"
    lines = [head]
    for ch in w["changes"]:
        lines.append(f"  {ch['machine']} / {ch['model']} / {ch['engine']}: "
                     f"{', '.join(ch['change'])}: {ch['before']} -> {ch['after']}")
        for r in ch["new_refusals"]:
            lines.append(f"      refused: {r}")
        for x in ch["new_warnings"]:
            lines.append(f"      {x}")
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(fleet: Fleet, cells: Sequence[Cell],
                what_if: Optional[Dict[str, Any]] = None) -> str:
    grid = _grid(fleet, cells)
    cols = _columns(fleet)
    out = ["| model | " + " | ".join(f"{_md(m)} / {e}" for m, e in cols) + " |",
           "|---|" + "---|" * len(cols)]
    for mo in fleet.models:
        out.append(f"| {_md(mo.name)} | " + " | ".join(_md(grid[mo.name, m, e].short)
                                                       for m, e in cols) + " |")
    notes = [f"- **{_md(c.machine)} / {_md(c.model)} / {c.engine}**: {_md(x)}"
             for c in cells for x in ([c.error] if c.error else []) + c.refusals + c.warnings]
    if notes:
        out += ["", "Refusals and warnings:", ""] + notes
    if what_if is not None:
        out += ["", f"What if `{' '.join(what_if['overrides'])}`: "
                f"{len(what_if['changes'])} cells change", ""]
        out += [f"- **{_md(ch['machine'])} / {_md(ch['model'])} / {ch['engine']}** "
                f"({', '.join(ch['change'])}): {_md(ch['before'])} -> {_md(ch['after'])}"
                for ch in what_if["changes"]]
    return "\n".join(out)


_CSS = ("body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}"
        "td,th{border:1px solid #999;padding:4px 6px;font-size:13px;vertical-align:top}"
        "td.ok{background:#d7f5d7}td.warn{background:#fff2c2}td.refused{background:#f8d0d0}"
        "td.changed{outline:3px solid #36c}")


def to_html(fleet: Fleet, cells: Sequence[Cell], what_if: Optional[Dict[str, Any]] = None
            ) -> str:
    e = html.escape
    grid = _grid(fleet, cells)
    cols = _columns(fleet)
    changed = {(c["model"], c["machine"], c["engine"]) for c in (what_if or {}).get("changes",
                                                                                    [])}
    rows = ["<tr><th>model</th>" + "".join(f"<th>{e(m)}<br>{e(en)}</th>" for m, en in cols)
            + "</tr>"]
    for mo in fleet.models:
        tds = []
        for m, en in cols:
            c = grid[mo.name, m, en]
            cls = "refused" if not c.ok else "warn" if c.warnings else "ok"
            if (mo.name, m, en) in changed:
                cls += " changed"
            tip = "\n".join(([c.error] if c.error else []) + c.refusals + c.warnings) or \
                "plans every layer kind"
            tds.append(f'<td class="{cls}" title="{e(tip)}">{e(c.short)}</td>')
        rows.append(f"<tr><th>{e(mo.name)}</th>{''.join(tds)}</tr>")
    body = [f"<h1>selector fleet report</h1><p>{e(fleet.file)}: {len(cells)} plans. Hover a "
            "cell for its refusals and warnings.</p>", "<table>" + "\n".join(rows) + "</table>"]
    if what_if is not None:
        body.append(f"<h2>What if {e(' '.join(what_if['overrides']))}</h2><ul>" + "".join(
            f"<li>{e(ch['machine'])} / {e(ch['model'])} / {e(ch['engine'])} "
            f"({e(', '.join(ch['change']))}): {e(ch['before'])} &rarr; {e(ch['after'])}</li>"
            for ch in what_if["changes"]) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>selector fleet report</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>")


def report(fleet: Fleet, cells: Sequence[Cell], what_if: Optional[Dict[str, Any]],
           seconds: float) -> Dict[str, Any]:
    return {"file": fleet.file, "machines": [{"name": m.name, "label": m.label,
                                              "overrides": m.overrides} for m in fleet.machines],
            "models": [{"name": m.name, "path": m.path} for m in fleet.models],
            "engines": fleet.engines, "overrides": fleet.overrides, "fail_on": fleet.fail_on,
            "cells": [c.to_dict() for c in cells],
            "counts": {"plans": len(cells), "ok": sum(c.ok for c in cells),
                       "refused": sum(not c.ok for c in cells),
                       "warned": sum(bool(c.warnings) for c in cells)},
            "what_if": what_if, "seconds": round(seconds, 2)}


def failing(cells: Sequence[Cell], fail_on: str) -> bool:
    return any(not c.ok or (fail_on == "warning" and c.warnings) for c in cells)


def run_fleet(path: str, fmt: str, what_if: Sequence[str], fail_on: Optional[str],
              config_dirs: Sequence[str], out: Optional[str] = None) -> int:
    import sys
    if fmt not in FORMATS:
        raise bad_value("--format", fmt, FORMATS)
    t = time.perf_counter()
    fleet = read_fleet(path)
    if fail_on is not None:
        fleet.fail_on = fail_on
    cells = plan_fleet(fleet, config_dirs=config_dirs)
    w: Optional[Dict[str, Any]] = None
    after: List[Cell] = []
    if what_if:
        after = plan_fleet(fleet, what_if, config_dirs)
        w = {"overrides": list(what_if), "changes": changes(cells, after),
             "cells": [c.to_dict() for c in after]}
    seconds = time.perf_counter() - t
    if fmt == "json":
        text = json.dumps(report(fleet, cells, w, seconds), indent=2)
    elif fmt == "markdown":
        text = to_markdown(fleet, cells, w)
    elif fmt == "html":
        text = to_html(fleet, cells, w)
    else:
        text = to_text(fleet, cells, w)
    sys.stdout.write(text.rstrip("\n") + "\n")
    bad = failing(cells, fleet.fail_on) or (bool(what_if) and failing(after, fleet.fail_on))
    return 1 if bad else 0
