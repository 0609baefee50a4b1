#!/usr/bin/env python3
"""One-off move of selector/'s flat modules into subpackages by layer (issue 23, item 5).

    python tools/relayout.py [ROOT]

Steps: (1) every relative import under selector/ becomes absolute; (2) each module moves
(`git mv`) to its layer's package; (3) every dotted name `selector.<old>` and path
`selector/<old>.py` in the tree's text files is rewritten, and `from selector import a, b` lines
that name moved modules are split by package. Refuses to run on a tree with a top-level module
it has no place for. Kept in tools/ as the record of the move (old name -> new name).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

# old module (under selector.) -> new module (under selector.)
MOVES = {
    # core: the vocabulary, the rules, the typed run config, the resolver and the decision
    "errors": "core.errors", "schema": "core.schema", "versions": "core.versions",
    "text": "core.text", "locks": "core.locks", "env_vars": "core.env_vars",
    "entry_points": "core.entry_points", "rules": "core.rules", "layer": "core.layer",
    "engines": "core.engines", "decision": "core.decision", "model": "core.model",
    "resolver": "core.resolver", "notes": "core.notes", "probe_specs": "core.probe_specs",
    "engines.flags": "core.engine_flags",
    # config: finding, reading and composing config trees; installed catalogues
    "catalogues": "config.catalogues",
    # inspect: the machine (environment, NVML), deep probes, verification, drift
    "environment": "inspect.environment", "nvml_query": "inspect.nvml_query",
    "child_runner": "inspect.child_runner", "probe_child": "inspect.probe_child",
    "probing": "inspect.probing",
    "verify": "inspect.verify", "drift": "inspect.drift",
    # checkpoint: reading a model directory
    "checkpoint": "checkpoint.plan", "checkpoint_arch": "checkpoint.arch",
    "checkpoint_quant": "checkpoint.quant", "launch": "checkpoint.launch",
    # distributed: cross-rank agreement (selector.distributed keeps its public name)
    "agreement": "distributed.agreement", "distributed": "distributed",
    # commands: the CLI and what only it uses
    "cli": "commands.cli", "listing": "commands.listing", "presets": "commands.preset_list",
    "check": "commands.check", "matrix": "commands.matrix", "doctor": "commands.doctor",
    "why": "commands.why",
}
# modules that stay where they are
STAY = {"__init__", "__main__", "api"}
# names that keep their dotted spelling although a prefix of them moves
KEEP = {"engines.vllm", "engines.sglang", "engines.vllm_plugin"}

PACKAGES = {
    "core": "The core: layer and platform vocabulary, rule kinds, the typed run config, the resolver "
            "(filter, then order) and the decision with its renderers. Imports nothing else of "
            "selector.",
    "inspect": "Machine inspection: the environment (GPU, CUDA, installed distributions), NVML in a "
               "child process, deep probes, `doctor --verify` and version drift. Imports core and "
               "config only.",
    "checkpoint": "Checkpoint reading: a model directory's config files to the layers an engine "
                  "builds and their quantization schemes. Imports core only.",
    "commands": "The command line (`python -m selector ...`) and what only it uses. The top layer: "
                "nothing imports it.",
}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".txt", ".sh", ".cfg", ".json", ".ini", ""}


def docstring(text: str) -> str:
    return '"""' + "\n".join(textwrap.wrap(text, 96)) + '\n"""\n'


def sh(*args: str, cwd: Path) -> None:
    subprocess.run(args, cwd=cwd, check=True)


def modules(root: Path) -> list[str]:
    return sorted([p.stem for p in (root / "selector").glob("*.py")]
                  + [f"engines.{p.stem}" for p in (root / "selector" / "engines").glob("*.py")
                     if f"engines.{p.stem}" not in KEEP and p.stem != "__init__"])


def absolutize(path: Path, modname: str) -> None:
    """Rewrite relative imports of one module as absolute ones (line-exact, keeps formatting)."""
    src = path.read_text()
    tree = ast.parse(src)
    is_pkg = path.name == "__init__.py"
    parts = modname.split(".")
    base = parts if is_pkg else parts[:-1]
    lines = src.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            pkg = base[: len(base) - (node.level - 1)]
            target = ".".join(pkg + ([node.module] if node.module else []))
            edits.append((node.lineno, node.col_offset, node.level, node.module, target))
    for lineno, col, level, module, target in sorted(edits, reverse=True):
        line = lines[lineno - 1]
        old = "from " + "." * level + (module or "")
        i = line.index(old, col)
        lines[lineno - 1] = line[:i] + "from " + target + line[i + len(old):]
    path.write_text("".join(lines))


def rename_map() -> dict[str, str]:
    m = {f"selector.{k}": f"selector.{v}" for k, v in MOVES.items()}
    m.update({f"selector.{k}": f"selector.{k}" for k in KEEP})
    return m


FROM_ENGINES = re.compile(r"^(?P<ind>[ \t]*)from selector\.engines import (?P<names>[^\n(#]+?)"
                          r"(?P<tail>[ \t]*(#[^\n]*)?)$", re.M)


def split_engines(text: str) -> str:
    """`from selector.engines import x`: adapters (vllm, sglang) stay, registry names move to core."""
    def sub(m: re.Match[str]) -> str:
        items = [x.strip() for x in m.group("names").split(",") if x.strip()]
        adapters = [x for x in items if x.split(" as ")[0].strip() in ("vllm", "sglang")]
        flags = [x for x in items if x.split(" as ")[0].strip() == "flags"]
        rest = [x for x in items if x not in adapters and x not in flags]
        out = []
        for x in flags:  # the flag tables are data: selector.core.engine_flags
            alias = x.partition(" as ")[2].strip() or "flags"
            out.append(f"{m.group('ind')}from selector.core import engine_flags as {alias}")
        if adapters:
            out.append(f"{m.group('ind')}from selector.engines import {', '.join(adapters)}")
        if rest:
            out.append(f"{m.group('ind')}from selector.core.engines import {', '.join(rest)}")
        out[0] += m.group("tail") or ""
        return "\n".join(out)
    return FROM_ENGINES.sub(sub, text)


def rewrite_text(text: str, dotted: dict[str, str]) -> str:
    text = split_engines(text)
    names = sorted(dotted, key=len, reverse=True)
    pat = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in names) + r")(?![\w])")
    def dotted_sub(m: re.Match[str]) -> str:
        if m.group(1) == "selector.engines" and re.match(r" import (vllm|sglang)\b", text[m.end():]):
            return m.group(1)  # the adapters stay in selector.engines
        if m.group(1) == "selector.catalogues":  # also the entry-point group's name: a module only
            before = text[max(0, m.start() - 7):m.start()]
            if not (before.endswith(("from ", "import ")) or re.match(r"\.[A-Za-z_]", text[m.end():])):
                return m.group(1)
        return dotted[m.group(1)]
    text = pat.sub(dotted_sub, text)
    # paths: selector/<old>.py, selector/engines/__init__.py
    def path_sub(m: re.Match[str]) -> str:
        old = m.group(1)
        if old in MOVES:
            new = MOVES[old]
            return "selector/" + (new.replace(".", "/") + ("/__init__.py" if new == "distributed" else ".py"))
        return m.group(0)
    text = re.sub(r"(?<![\w/])selector/(\w+)\.py\b", path_sub, text)
    text = text.replace("selector/engines/__init__.py", "selector/core/engines.py")
    text = re.sub(r"(?<![\w/])selector/engines/flags\.py", "selector/core/engine_flags.py", text)
    text = re.sub(r"(?<![\w/.])engines/flags\.py", "core/engine_flags.py", text)
    return split_from_imports(text)


FROM_SEL = re.compile(r"^(?P<ind>[ \t]*)from selector import (?P<names>\([^)]*\)|[^\n#]+?)(?P<tail>[ \t]*(#[^\n]*)?)$",
                      re.M)


def split_from_imports(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        raw = m.group("names").strip().strip("()")
        items = [x.strip() for x in raw.replace("\n", " ").split(",") if x.strip()]
        groups: dict[str, list[str]] = {}
        for item in items:
            name, _, alias = item.partition(" as ")
            name = name.strip()
            new = MOVES.get(name)
            if new is None or name in ("distributed",):
                pkg, leaf = "selector", name
            else:
                pkg, _, leaf = ("selector." + new).rpartition(".")
            groups.setdefault(pkg, []).append(leaf + (f" as {alias.strip()}" if alias else ""))
        if list(groups) == ["selector"]:
            return m.group(0)
        ind = m.group("ind")
        out = [f"{ind}from {pkg} import {', '.join(v)}" for pkg, v in groups.items()]
        out[0] += m.group("tail") or ""
        return "\n".join(out)
    return FROM_SEL.sub(sub, text)


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    have = modules(root)
    unknown = [m for m in have if m not in MOVES and m not in STAY]
    if unknown:
        print(f"relayout: no place for selector/{', selector/'.join(unknown)}: add them to MOVES", file=sys.stderr)
        return 2
    # 1. relative -> absolute, everywhere under selector/
    for p in sorted((root / "selector").rglob("*.py")):
        rel = p.relative_to(root).with_suffix("")
        mod = ".".join(rel.parts)
        if mod.endswith(".__init__"):
            mod = mod[: -len(".__init__")]
        absolutize(p, mod)
    # 2. move
    for pkg, doc in PACKAGES.items():
        d = root / "selector" / pkg
        d.mkdir(exist_ok=True)
        (d / "__init__.py").write_text(docstring(doc))
        sh("git", "add", str(d / "__init__.py"), cwd=root)
    old_engines = root / "selector" / "engines" / "__init__.py"
    sh("git", "mv", str(old_engines), str(root / "selector" / "core" / "engines.py"), cwd=root)
    old_engines.write_text(docstring("Engine adapters: vLLM (`selector.engines.vllm`, its plugin) and SGLang "
                                     "(`selector.engines.sglang`). The engine registry is "
                                     "`selector.core.engines`."))
    sh("git", "add", str(old_engines), cwd=root)
    (root / "selector" / "distributed").mkdir(exist_ok=True)
    for old, new in MOVES.items():
        if old == "engines":
            continue
        src = root / "selector" / (old.replace(".", "/") + ".py")
        dst = root / "selector" / (new.replace(".", "/") + ("/__init__.py" if new == "distributed" else ".py"))
        dst.parent.mkdir(parents=True, exist_ok=True)
        sh("git", "mv", str(src), str(dst), cwd=root)
    # 3. rewrite names and paths in every tracked text file
    dotted = rename_map()
    files = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True,
                           text=True).stdout.split()
    changed = 0
    for f in files:
        p = root / f
        if p.suffix not in TEXT_SUFFIXES or not p.is_file() or f == "tools/relayout.py":
            continue
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite_text(text, dotted)
        if new != text:
            p.write_text(new)
            changed += 1
    # 4. the package list of pyproject.toml
    pp = root / "pyproject.toml"
    pkgs = ["selector"] + [f"selector.{d.name}" for d in sorted((root / "selector").iterdir())
                           if (d / "__init__.py").is_file()]
    pkgs += ["selector.conf"] + ["selector." + ".".join(i.parent.relative_to(root).parts)
                                 for i in sorted((root / "backends").rglob("__init__.py"))]
    body = "\n" + "".join(f'    "{x}",\n' for x in pkgs)
    pp.write_text(re.sub(r"^packages = \[[^\]]*\]", f"packages = [{body}]", pp.read_text(), flags=re.M))
    print(f"relayout: moved {len(MOVES)} modules, rewrote {changed} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
