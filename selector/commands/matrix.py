"""`selector matrix`: every backend on every platform preset, for one layer, as a grid.

People read support matrices, not rule lists. Each cell is the resolver's verdict for that
backend on that preset (with the stack's software): selected, usable, opt-in, or the short
reason it cannot run, with every reason and its source kept for the tooltip (HTML) and JSON.
docs/matrix.md is this command's markdown output; a test fails when it is stale.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from packaging.version import Version

from selector.core.errors import SelectorError, bad_value
from selector.core.text import join_lines, printable

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.decision import Candidate
    from selector.core.schema import Layer

DEFAULT_LAYERS = {"moe": "default", "linear": "dense_linear"}  # layer presets per op
FORMATS = ("text", "markdown", "html", "json")
_LABEL = {"selected": "selected", "eligible": "usable", "opt_in": "opt-in",
          "not_applicable": "n/a"}


@dataclass(frozen=True)
class Cell:
    status: str  # selected | eligible | opt_in | rejected | not_applicable
    short: str  # what the grid shows
    reasons: Tuple[Dict[str, str], ...]  # every reason: rule, message, source

    def tooltip(self) -> str:
        if not self.reasons:
            return "passes every rule" if self.status in ("selected", "eligible") else self.short
        return "\n".join(printable(f"[{r['rule']}] {r['message']} ({r['source']})")
                         for r in self.reasons)  # one line per reason, each escaped


@dataclass(frozen=True)
class Grid:
    op: str
    layer: Layer
    stack: str
    platforms: Tuple[Tuple[str, Optional[str]], ...]  # (preset, capability)
    backends: Tuple[str, ...]
    cells: Dict[Tuple[str, str], Cell]  # (backend, preset) -> cell

    def to_dict(self) -> Dict[str, Any]:
        return {"op": self.op, "layer": self.layer.to_dict(), "stack": self.stack,
                "platforms": [{"preset": p, "capability": c} for p, c in self.platforms],
                "backends": list(self.backends),
                "cells": {b: {p: {"status": self.cells[b, p].status,
                                  "short": self.cells[b, p].short,
                                  "reasons": list(self.cells[b, p].reasons)}
                              for p, _ in self.platforms} for b in self.backends}}


def _cell(c: Candidate) -> Cell:
    reasons = tuple(r.to_dict() for r in c.reasons)
    if c.status == "rejected":
        needs = list(dict.fromkeys(r.need for r in c.reasons if r.severity == "error"))
        short = needs[0].replace(" or SM ", "/") if needs else "rejected"  # SM 10.0/10.3
        if len(needs) > 1:
            short += f" (+{len(needs) - 1})"
        return Cell(c.status, printable(short), reasons)
    return Cell(c.status, _LABEL[c.status], reasons)


def _capability_key(cap: Optional[str]) -> Tuple[bool, Version]:
    return (cap is not None, Version(cap) if cap else Version("0"))


def build(ops: Sequence[str] = (), stack: Optional[str] = None, overrides: Sequence[str] = (),
          config_dirs: Sequence[str] = (), quants: Sequence[str] = ()) -> List[Grid]:
    """One grid per op and quant scheme: every backend of the catalogue that implements the
    scheme, on every platform preset but `auto`, under `stack` (default: the stack preset
    marked `stack: {default: true}`). Schemes: `quants`, else the layer's when a `layer`
    override is given, else every scheme some backend of the op implements (vocabulary order)."""
    from selector.api import load
    stack = stack or default_stack(config_dirs)
    for o in overrides:
        key = o.lstrip("+~").partition("=")[0]
        if key.startswith("platform.packages."):
            continue  # a package version on every preset, as in explain
        if key in ("platform", "stack") or key.startswith(("platform.", "stack.")):
            raise SelectorError(f"override {o!r}: the matrix sets the platform itself (every "
                                "preset) and the stack with --stack NAME", key=key, value=o)
    layer_given = any(o.lstrip("+~").startswith("layer") for o in overrides)
    quant_given = any(o.lstrip("+~").startswith("layer.quant=") for o in overrides)
    from selector.core.schema import QUANTS
    for q in quants:
        if q not in QUANTS:
            raise bad_value("--quant", q, QUANTS, what="quant scheme")
    if quants and quant_given:
        raise SelectorError("--quant and a layer.quant override name the scheme twice: give "
                            "one", key="--quant", value=",".join(quants))
    dirs = [Path(d) for d in config_dirs]
    probe = load([f"stack={stack}", "platform=cpu", *overrides], config_dirs=dirs)
    assert probe.tree is not None  # load() always records the config tree
    presets = [p for p in probe.tree.group_options("platform") if p != "auto"]
    if layer_given:
        op = probe.default().layer.op
        if ops and list(ops) != [op]:
            raise bad_value("--op", ops[0], [op], hint=f"the layer given is a {op} layer")
        ops = [op]
    grids = []
    for op in ops or ("moe", "linear"):
        extra = [] if layer_given else [f"layer={DEFAULT_LAYERS[op]}"]
        schemes: Sequence[Optional[str]] = [None]
        if quants:
            schemes = list(quants)
        elif not layer_given:
            implemented = {q for b in probe.catalogue.backends[op] for q in b.implements}
            schemes = [q for q in QUANTS if q in implemented]
        for want in schemes:
            more = [] if want is None else [f"layer.quant={want}"]
            sels = {p: load([f"platform={p}", f"stack={stack}", *extra, *overrides, *more],
                            config_dirs=dirs) for p in presets}
            decisions = {p: sel.default() for p, sel in sels.items()}
            platforms = sorted(((p, d.platform["capability"]) for p, d in decisions.items()),
                               key=lambda x: (_capability_key(x[1]), x[0]))
            first = decisions[platforms[0][0]]
            cells = {(c.backend, p): _cell(c) for p, d in decisions.items()
                     for c in d.candidates}
            # a backend whose `implements:` leaves out the grid's scheme is left out
            scheme = first.layer.quant
            mine = {b.name for b in sels[platforms[0][0]].catalogue.backends[op]
                    if scheme in b.implements}
            backends = tuple(c.backend for c in first.candidates if c.backend in mine) or \
                tuple(c.backend for c in first.candidates)
            grids.append(Grid(op, first.layer, stack, tuple(platforms), backends, cells))
    return grids


# ---------------------------------------------------------------------------------------------
# Renderings

def _layer_text(layer: Layer) -> str:
    parts = [layer.op, layer.quant]
    if layer.op == "moe":
        parts += [layer.activation, "gated" if layer.act_and_mul else "non-gated"]
    parts.append(layer.dtype)
    dims = [f"{k} {v}" for k, v in (("hidden_size", layer.hidden_size),
                                     ("intermediate_size", layer.intermediate_size),
                                     ("num_experts", layer.num_experts), ("top_k", layer.top_k))
            if v]
    return " ".join(parts) + (f" ({', '.join(dims)})" if dims else "")


def _head(p: str, cap: Optional[str]) -> str:
    return f"{p} (SM {cap})" if cap else f"{p} (no GPU)"


def _title(g: Grid) -> str:
    return f"{g.op} backends: {_layer_text(g.layer)}; stack={g.stack}"


def to_text(grids: Sequence[Grid]) -> str:
    out = []
    for g in grids:
        heads = ["backend"] + [_head(p, c) for p, c in g.platforms]
        rows = [[b] + [g.cells[b, p].short for p, _ in g.platforms] for b in g.backends]
        widths = [max(len(r[i]) for r in [heads] + rows) for i in range(len(heads))]
        out.append(_title(g))
        out.append("  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip())
        out.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
        out.append("")
    out.append("selected: chosen automatically; usable: passes every rule; opt-in: passes "
               "every rule, chosen only when requested; n/a: does not implement the layer; "
               "otherwise what is missing (+N more)")
    return join_lines(out)  # preset, stack and backend names come from files: escaped


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(grids: Sequence[Grid], command: str) -> str:
    out = ["# Support matrix", "",
           (f"Generated by `{command}`; a test fails when this file is stale. Each cell is "
            "selector's verdict for that backend on that platform preset with the stack's "
            "software: **selected** (chosen automatically), usable (passes every rule), opt-in "
            "(passes every rule, chosen only when requested), n/a (does not implement the "
            "layer), or what is missing (+N more reasons; `explain` and the HTML form give "
            "every reason with its source)."), ""]
    for g in grids:
        out += [f"## {_md(_title(g))}", "",
                "| backend | " + " | ".join(_head(p, c) for p, c in g.platforms) + " |",
                "|---" * (len(g.platforms) + 1) + "|"]
        for b in g.backends:
            cells = []
            for p, _ in g.platforms:
                cell = g.cells[b, p]
                cells.append(f"**{cell.short}**" if cell.status == "selected" else _md(cell.short))
            out.append(f"| `{b}` | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


_CSS = """
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#1b1b1b}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:12px}
th,td{border:1px solid #c8c8c8;padding:5px 8px;text-align:center;max-width:150px}
th{background:#f0f0f0}td.b{text-align:left;font-family:DejaVu Sans Mono,monospace}
td.b,th{white-space:nowrap}td[title]{cursor:help}
.selected{background:#1e7b34;color:#fff;font-weight:bold}
.eligible{background:#b9e4c2}.opt_in{background:#fde9a9}
.rejected{background:#f6d3d3;color:#5b1a1a}.not_applicable{background:#e4e4e4;color:#666}
.legend span{display:inline-block;padding:3px 8px;margin-right:6px;border:1px solid #c8c8c8;
font-size:12px}
"""


def to_html(grids: Sequence[Grid], command: str) -> str:
    e = html.escape
    body = [(f"<h1>selector support matrix</h1><p>Generated by <code>{e(command)}</code>. "
             "Hover a cell for every reason and its source.</p>"),
            ('<p class="legend"><span class="selected">selected</span>'
             '<span class="eligible">usable</span><span class="opt_in">opt-in</span>'
             '<span class="rejected">missing: the short reason</span>'
             '<span class="not_applicable">n/a</span></p>')]
    for g in grids:
        body.append(f"<h2>{e(_title(g))}</h2><table><tr><th>backend</th>" +
                    "".join(f"<th>{e(_head(p, c))}</th>" for p, c in g.platforms) + "</tr>")
        for b in g.backends:
            cells = [g.cells[b, p] for p, _ in g.platforms]
            tds = "".join(f'<td class="{c.status}" title="{e(c.tooltip())}">{e(c.short)}</td>'
                          for c in cells)
            body.append(f'<tr><td class="b">{e(b)}</td>{tds}</tr>')
        body.append("</table>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>selector support matrix</title><style>{_CSS}</style></head><body>\n" +
            "\n".join(body) + "\n</body></html>")


def render(grids: Sequence[Grid], fmt: str, command: str) -> str:
    if fmt == "json":
        return json.dumps({"command": command, "grids": [g.to_dict() for g in grids]}, indent=2)
    if fmt == "markdown":
        return to_markdown(grids, command)
    if fmt == "html":
        return to_html(grids, command)
    return to_text(grids)


def default_stack(config_dirs: Sequence[str] = ()) -> str:
    """The matrix's default stack: the packaged preset its file marks `stack: {default: true}`.

    The default is the project's reference (docs/matrix.md is generated with it), so only the
    packaged tree's mark counts: a plugin's or a config dir's `default: true` is ignored here
    (a plugin cannot know what other plugins mark, and one that marked it made `matrix` exit 2
    for every user who installed it). Their stacks stay reachable with --stack."""
    from selector.config.catalogues import discover as discover_tree
    from selector.config.presets import default_stack as marked
    from selector.config.presets import stack_presets
    from selector.core.packaged import packaged_conf_dir
    tree = discover_tree([Path(d) for d in config_dirs])
    home = Path(packaged_conf_dir()).resolve()
    paths = tree.presets.get("stack", {})
    own = [n for n, meta in stack_presets(tree) if meta["default"] and
           Path(paths[n]).resolve().is_relative_to(home)]
    return own[0] if len(own) == 1 else marked(tree)


def command_line(ops: Sequence[str], stack: str, overrides: Sequence[str], fmt: str,
                 default: Optional[str] = None, quants: Sequence[str] = ()) -> str:
    """The command that reproduces a rendering, as written into it."""
    parts = ["python -m selector matrix"]
    parts += [f"--op {o}" for o in ops]
    parts += [f"--quant {q}" for q in quants]
    if stack != (default or default_stack()):
        parts.append(f"--stack {stack}")
    parts += [f"--format {fmt}", *overrides]
    return " ".join(parts)


def run_matrix(ops: Sequence[str], stack: Optional[str], overrides: Sequence[str],
               config_dirs: Sequence[str], fmt: str, quants: Sequence[str] = ()) -> int:
    default = default_stack(config_dirs)
    if stack is not None and not stack.strip():  # `--stack ''` is a mistake, not the default
        from selector.config.catalogues import discover as discover_tree
        raise bad_value("--stack", stack, discover_tree(config_dirs).group_options("stack"),
                        what="stack preset", hint=f"leave --stack out for the default, {default}")
    stack = stack or default
    grids = build(ops, stack, overrides, config_dirs, quants)
    text = render(grids, fmt, command_line(ops, stack, overrides, fmt, default, quants))
    import sys
    sys.stdout.write(text.rstrip("\n") + "\n")
    return 0
