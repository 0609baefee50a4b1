"""The catalogue as data and as text (`selector list`, docs/rules.md)."""
from __future__ import annotations

from typing import Any, Dict, List

from selector.core.model import Catalogue
from selector.core.text import join_lines


def catalogue_dict(cat: Catalogue) -> Dict[str, Any]:
    from selector.config.catalogues import origin_of
    out: Dict[str, Any] = {}
    for op, backends in cat.backends.items():
        out[op] = [{
            "backend": b.name, "rank": b.rank, "execution": b.execution,
            "opt_in": {"reason": b.opt_in.reason, "source": b.opt_in.source} if b.opt_in else None,
            "preference": [{"rank": p.rank, "reason": p.reason, "source": p.source}
                           for p in b.preference],
            "implements": list(b.implements), "entry_point": b.entry_point,
            "probes": list(b.probes), "description": b.description,
            "origin": origin_of(b.file),
            "rules": [{"kind": r.kind, "rule": r.describe(), "severity": r.severity,
                       "source": r.source, **({"message": r.message} if r.message else {})}
                      for r in b.rules]} for b in backends]
    return out


def catalogue_text(cat: Catalogue) -> str:
    from selector.config.catalogues import origin_of
    lines: List[str] = []
    for op, backends in cat.backends.items():
        lines.append(f"{op} backends, in preference order:")
        for b in backends:
            flags = [b.execution] + (["opt-in"] if b.opt_in else [])
            lines.append(f"  {b.name} (rank {b.rank}; {', '.join(flags)}; from "
                         f"{origin_of(b.file)}): {b.description}")
            if b.opt_in:
                lines.append(f"      opt-in: {b.opt_in.reason}  -- {b.opt_in.source}")
            for p in b.preference:
                lines.append(f"      preference rank {p.rank}: {p.reason}  -- {p.source}")
            for r in b.rules:
                sev = " [warning]" if r.severity == "warning" else ""
                lines.append(f"      {r.describe()}{sev}  -- {r.source}")
        lines.append("")
    return join_lines(lines)


def catalogue_markdown(cat: Catalogue) -> str:
    """docs/rules.md: generated from the catalogue, and tested against it."""
    lines = ["# Rule reference", "",
             "Generated from `conf/backend/` by `python -m selector.commands.listing > docs/rules.md`; "
             "a test fails when it drifts from the catalogue.", ""]
    for op, backends in cat.backends.items():
        lines += [f"## {op}", ""]
        for b in backends:
            flags = [b.execution] + (["opt-in"] if b.opt_in else [])
            lines += [f"### `{b.name}` (rank {b.rank}; {', '.join(flags)})", "",
                      f"{b.description}. Implements: {', '.join(b.implements)}. "
                      f"Entry point: `{b.entry_point}`.", "",
                      *([f"Opt-in: {b.opt_in.reason} ({b.opt_in.source}).", ""]
                        if b.opt_in else []),
                      *([f"Preference: rank {p.rank} {p.reason} ({p.source})."
                         for p in b.preference] + [""] if b.preference else []),
                      "| rule | kind | severity | message | source |",
                      "|---|---|---|---|---|"]
            for r in b.rules:
                msg = (r.message or "").replace("|", "\\|")
                lines.append(f"| {r.describe().replace('|', '/')} | {r.kind} | {r.severity} | "
                             f"{msg} | {r.source} |")
            lines.append("")
            lines += _engines_markdown(b)
    from selector.core.rules import kinds_markdown
    return "\n".join(lines) + "\n" + kinds_markdown()


def _engines_markdown(b: Any) -> List[str]:
    """Each engine's name for the backend, the kernel it runs, its own rules (engine=...)."""
    out: List[str] = []
    for engine, e in sorted(b.engines, key=lambda x: x[0]):
        if e.name is None:
            out.append(f"- `engine={engine}`: none ({e.source})")
            continue
        parts = [f"- `engine={engine}`: `{e.name}` ({e.source})"]
        for k in e.kernels:
            when = ", ".join(w for w in (k.when.describe_layer(),
                                          k.when.describe_platform_spec()) if w)
            parts.append(f"  - kernel `{k.kernel}`" + (f" where {when}" if when else "") +
                         (f", run as {k.scheme}" if k.scheme else "") + f" ({k.source})")
        if e.implements:
            parts.append(f"  - {engine} also runs {', '.join(e.implements)} layers under this "
                         "name (its own kernel, not this backend's entry_point)")
        if e.replaces:
            parts.append(f"  - replaces the backend's own {', '.join(e.replaces)} rule(s)")
        for r in e.rules:
            when = ", ".join(w for w in (r.when.describe_layer(),
                                          r.when.describe_platform_spec()) if w)
            parts.append(f"  - rule {r.describe()}" + (f" where {when}" if when else "") +
                         f": {r.message or ''} ({r.source})")
        out += parts
    return out + ([""] if out else [])


if __name__ == "__main__":
    from selector.api import load
    print(catalogue_markdown(load(["platform=cpu"]).catalogue), end="")
