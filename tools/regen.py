"""Rewrite every generated file of the repository from the catalogue and the code.

    python tools/regen.py            # rewrite what is stale, print each file written
    python tools/regen.py --check    # write nothing; exit 1 listing each stale file with a diff excerpt
    python tools/regen.py --png      # also the screenshot docs/matrix.png (needs chromium)

The generated files:
- docs/rules.md: every backend's rules with sources (`selector.commands.listing`);
- docs/matrix.md: `python -m selector matrix --format markdown`;
- docs/interface.md, its "Backend names" block: the catalogue's backends in preference order;
- docs/keys.md, its "Values of this tree" block: the presets of conf/ and the layer vocabularies;
- docs/guarantees.md, its mutation-scores block: docs/mutation.json (`tools/mutate.py --record`);
- docs/architecture.md, its blocks: the quant schemes (`schema.QUANTS`), the `when:` keys
  (`rules.WHEN`) and the floors of backends/ (`backends.FLOORS`);
- docs/backends.md, its floors table (each floor's package docstring); docs/engines.md, its
  engine table, and README.md, its engine list (conf/engine/, as `engine=NAME` loads it);
- README.md, docs/examples.md and docs/integration.md, each ```console block: the output of
  its `$ python -m selector ...` command (tests/readme_examples.py).
- docs/architecture.md's note kinds (`notes.NOTE_KINDS`) and docs/interface.md's command
  synopsis (the parser's usage line of each command).
A generated block in a page is `<!-- regen:NAME -->` ... `<!-- /regen:NAME -->`.
Lists a page restates by hand, each name with its own words (outcomes, statuses, the JSON keys,
the schemas, the generated files, ...), are compared with the code's (tools/restated.py): a
difference is named, and regen and --check exit 1 until the page is edited.
docs/matrix.png (a headless-Chromium screenshot of `matrix --format html`) is written with
--png only: a screenshot is not byte-reproducible, so --check does not compare it.
docs/vllm-parity.md is not written here: every section of it is vLLM's own choice beside
selector's, so it needs vLLM's environment (`.venv-vllm/bin/python tools/vllm_parity.py`;
tests/vllm/test_parity.py fails when it is stale).

tests/test_regen.py fails when the tree differs from this script's output; .ci/run runs
--check.
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

BLOCK = re.compile(r"(<!-- regen:(?P<name>[a-z-]+) -->\n).*?(<!-- /regen:(?P=name) -->)", re.S)


def _cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "selector", *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=1800)  # a cold `matrix` composes every preset
    if r.returncode not in (0, 1):
        raise SystemExit(f"regen: `python -m selector {' '.join(args)}` exited {r.returncode}:\n"
                         f"{r.stderr}")
    return r.stdout


def _catalogue():  # type: ignore[no-untyped-def]
    from selector.api import load
    return load(["platform=cpu"]).catalogue


def rules_md() -> str:
    from selector.commands.listing import catalogue_markdown
    return catalogue_markdown(_catalogue())


def matrix_md() -> str:
    return _cli("matrix", "--format", "markdown")


def backend_names() -> str:
    """The interface's backend names: each op's backends in preference order."""
    cat = _catalogue()
    lines = []
    for op, backends in cat.backends.items():
        names = ", ".join(f"`{b.name}`" + (" (opt-in)" if b.opt_in else "") for b in backends)
        lines.append(f"- {op} ({len(backends)}): {names}.")
    return "\n".join(lines) + "\n"


def key_values() -> str:
    """docs/keys.md's values: each preset group's options (conf/), the layer vocabularies."""
    from selector.core import schema
    from selector.core.packaged import packaged_conf_dir
    conf = packaged_conf_dir()
    lines = []
    for group in ("platform", "stack", "engine", "layer", "policy"):
        names = sorted(p.stem for p in (conf / group).glob("*.yaml"))
        lines.append(f"- `{group}`: {', '.join(f'`{n}`' for n in names)}")
    for key, values in (("layer.quant", schema.QUANTS), ("layer.activation", schema.ACTIVATIONS),
                        ("layer.dtype", schema.DTYPES), ("layer.all2all", schema.ALL2ALL)):
        lines.append(f"- `{key}`: {', '.join(f'`{v}`' for v in values)}")
    return "\n".join(lines) + "\n"


def scheme_names() -> str:
    """The quant schemes a layer may name (`schema.QUANTS`)."""
    from selector.core import schema
    return ", ".join(f"`{q}`" for q in schema.QUANTS) + ".\n"


def when_keys() -> str:
    """The keys of a `when:` (`rules.WHEN`): layer terms, then platform terms."""
    from selector.core.rules.when import WHEN
    layer = [k for k, term in WHEN.items() if term.layer_field is not None]
    platform = [k for k, term in WHEN.items() if term.layer_field is None]
    return (", ".join(f"`{k}`" for k in layer) + " (layer terms) and "
            + ", ".join(f"`{k}`" for k in platform) + " (platform terms).\n")


def _floors() -> List[tuple]:  # type: ignore[type-arg]
    """(floor, its package docstring's first paragraph) for each floor of backends/, bottom up."""
    import ast

    from selector.backends import FLOORS
    out = []
    for floor in FLOORS:
        doc = ast.get_docstring(ast.parse((ROOT / "backends" / floor / "__init__.py").read_text())) or ""
        out.append((floor, " ".join(doc.split("\n\n")[0].split()).replace("``", "`")))
    return out


def backend_floors() -> str:
    """docs/architecture.md's list of backends/'s floors."""
    return ", ".join(f"`{f}`" for f, _ in _floors()) + ".\n"


def backend_floors_table() -> str:
    """docs/backends.md's table of backends/'s floors."""
    rows = [f"| {f} | `backends/{f}/` | {doc} |" for f, doc in _floors()]
    return "| floor | package | what it holds |\n|---|---|---|\n" + "\n".join(rows) + "\n"


def _engines() -> List:  # type: ignore[type-arg]
    from selector.api import load
    from selector.core.engines import ENGINES
    return [load(["platform=cpu", f"engine={name}"]).run_config.engine for name in ENGINES
            if name != "none"]


def engine_table() -> str:
    """docs/engines.md's table: each engine of conf/engine/, as `engine=NAME` loads it."""
    kinds = {"flag": "flag", "env": "variable", "config": "config key"}
    rows = []
    for e in _engines():
        how = "; ".join(f"{kinds[c.kind]} `{c.key}` ({c.op}{': ' + ', '.join(c.schemes) if c.schemes else ''})"
                        for c in e.choices)
        command = dict(e.launch).get("command")
        if isinstance(command, str):  # the launch table keeps JSON text
            command = json.loads(command)
        launch = f"`{' '.join(command)}`" if command else "-"
        rows.append(f"| `{e.name}` | {e.label} | {how} | {launch} | {e.proof} |")
    return ("| engine | models | how a choice is passed | launch command | proof |\n"
            "|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


def engine_names() -> str:
    """README.md's engine list."""
    return ", ".join(f"`{e.name}` ({e.label})" for e in _engines()) + ".\n"


def note_kinds() -> str:
    """docs/architecture.md's table of note kinds (`notes.NOTE_KINDS`)."""
    from selector.core.notes import kinds_markdown
    return kinds_markdown() + "\n"


def cli_synopsis() -> str:
    """docs/interface.md's synopsis: each command of the parser, as its usage line."""
    import argparse

    from selector.commands.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    lines = []
    for name, parser in sub.choices.items():
        parser.prog = f"python -m selector {name}"
        usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
        lines.append(usage.replace(" [-h]", "", 1))
    return "```\n" + "\n".join(lines) + "\n```\n"


BLOCKS: Dict[str, Callable[[], str]] = {
    "backend-names": backend_names, "key-values": key_values, "scheme-names": scheme_names,
    "when-keys": when_keys, "backend-floors": backend_floors,
    "backend-floors-table": backend_floors_table, "engine-table": engine_table,
    "engine-names": engine_names, "note-kinds": note_kinds, "cli-synopsis": cli_synopsis,
}


def fill_blocks(text: str, blocks: Dict[str, Callable[[], str]], pattern: re.Pattern = BLOCK  # type: ignore[type-arg]
                ) -> str:
    def sub(m: re.Match) -> str:  # type: ignore[type-arg]
        name = m.group("name")
        if name not in blocks:
            raise SystemExit(f"regen: unknown generated block 'regen:{name}'; known: "
                             f"{', '.join(sorted(blocks))}")
        return m.group(1) + blocks[name]() + m.group(3)
    return pattern.sub(sub, text)


def mutation_scores() -> str:
    """docs/guarantees.md's per-module mutation scores, from docs/mutation.json."""
    sys.path.insert(0, str(ROOT / "tools"))
    import mutate
    return mutate.render(ROOT / "docs" / "mutation.json")


def _blocks(path: Path) -> Callable[[], str]:
    def render() -> str:
        return fill_blocks(path.read_text(), {**BLOCKS, "mutation-scores": mutation_scores})
    return render


def _examples(path: Path) -> Callable[[], str]:
    def render() -> str:
        import readme_examples
        return fill_blocks(readme_examples.render(path.read_text()), BLOCKS)
    return render


GENERATED: Dict[str, Callable[[], str]] = {
    "docs/rules.md": rules_md,
    "docs/matrix.md": matrix_md,
    "docs/interface.md": _blocks(ROOT / "docs" / "interface.md"),
    "docs/keys.md": _blocks(ROOT / "docs" / "keys.md"),
    "docs/guarantees.md": _blocks(ROOT / "docs" / "guarantees.md"),
    "docs/architecture.md": _blocks(ROOT / "docs" / "architecture.md"),
    "docs/backends.md": _blocks(ROOT / "docs" / "backends.md"),
    "docs/engines.md": _blocks(ROOT / "docs" / "engines.md"),
    "README.md": _examples(ROOT / "README.md"),
    "docs/examples.md": _examples(ROOT / "docs" / "examples.md"),
    "docs/integration.md": _examples(ROOT / "docs" / "integration.md"),
}


def generate() -> Dict[str, str]:
    """Every generated file's text as the code produces it now (nothing is written)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(fn) for name, fn in GENERATED.items()}
        return {name: f.result() for name, f in futures.items()}


def stale(outputs: Dict[str, str]) -> List[str]:
    return [n for n, text in outputs.items()
            if not (ROOT / n).is_file() or (ROOT / n).read_text() != text]


def excerpt(name: str, new: str, lines: int = 30) -> str:
    old = (ROOT / name).read_text() if (ROOT / name).is_file() else ""
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), f"{name} (in the tree)",
                                     f"{name} (generated)", n=1, lineterm=""))
    more = f"\n  ... {len(diff) - lines} more diff lines" if len(diff) > lines else ""
    return "\n".join("  " + d for d in diff[:lines]) + more


def matrix_png() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("regen: --png needs chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "matrix.html"
        page.write_text(_cli("matrix", "--format", "html"))
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--window-size=1500,900", f"--screenshot={ROOT / 'docs' / 'matrix.png'}",
                        page.as_uri()], check=True, capture_output=True, timeout=120)
    print("wrote docs/matrix.png")


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 listing every stale file with a diff excerpt")
    ap.add_argument("--png", action="store_true", help="also write docs/matrix.png (chromium)")
    args = ap.parse_args(argv)
    outputs = generate()
    todo = stale(outputs)
    import restated
    by_hand = restated.problems(ROOT)
    if by_hand:  # prose regen cannot write: the page must be edited
        print(f"regen: {len(by_hand)} list(s) restated by hand differ from the code "
              "(tools/restated.py); edit the page:\n" + "\n".join(f"- {p}" for p in by_hand))
    if args.check:
        if not todo and not by_hand:
            print(f"regen: {len(outputs)} generated files are current")
            return 0
        if todo:
            print(f"regen: {len(todo)} stale file(s); run `python tools/regen.py`:")
        for name in todo:
            print(f"- {name}\n{excerpt(name, outputs[name])}")
        return 1
    for name in todo:
        (ROOT / name).write_text(outputs[name])
        print(f"wrote {name}")
    if args.png:
        matrix_png()
    if not todo:
        print(f"regen: {len(outputs)} generated files were current")
    return 1 if by_hand else 0


if __name__ == "__main__":
    sys.exit(main())
