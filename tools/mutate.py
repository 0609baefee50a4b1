"""A small AST mutation run: how many one-token changes to a module do the tests notice?

    python tools/mutate.py selector/core/rules.py selector/core/resolver.py selector/core/versions.py \
        --tests tests/test_rules.py tests/test_decision_edges.py --budget 900
    python tools/mutate.py --all --per-module 12 --json mutation.json   # every module, sampled

Without --tests, each module is run against the test files that name it (its dotted name, or
`from <package> import <module>`), falling back to the decision and API suites; --all takes
every module of selector/ (the catalogue has its own run: tools/mutate_catalogue.py).
--per-module N samples N mutants of each module; the summary gives killed/ran per module.

Operators: comparison swaps (< <=, > >=, == !=, in / not in, is / is not), and <-> or,
dropping `not`, True <-> False, an integer constant n -> n + 1, an element dropped from a
tuple of strings (a memo key's fields, a `when` term list), `frozen=True` -> False. Each mutant
is written over the module and the tests run in a forked child (imports of hydra, packaging,
pytest stay warm in the parent; every `selector` module is imported afresh); the first failing
test kills it (`-x`). The module is restored afterwards, also on Ctrl-C. Docstrings are not
mutated. Prints killed/total and the survivors (file:line, the change); `--budget` (seconds)
stops early and reports what was run. One mutant at a time: the machine is shared. Slow-marked
tests are left out unless --slow is given; a module whose tests are all slow-marked is named.
"""
from __future__ import annotations

import argparse
import ast
import copy
import os
import random
import sys
import time
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
        ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot,
        ast.IsNot: ast.Is}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def sites(tree: ast.AST) -> Iterator[Tuple[int, str, object]]:
    """(node index in ast.walk order, description, replacement spec) for every mutant."""
    skip = _docstrings(tree)
    for i, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                if type(op) in SWAP:
                    yield i, f"{type(op).__name__} -> {SWAP[type(op)].__name__}", ("cmp", j)
        elif isinstance(node, ast.BoolOp):
            yield i, f"{type(node.op).__name__} -> {'Or' if isinstance(node.op, ast.And) else 'And'}", ("bool",)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield i, "drop not", ("not",)
        elif isinstance(node, ast.Constant) and id(node) not in skip:
            if node.value is True or node.value is False:
                yield i, f"{node.value} -> {not node.value}", ("const", not node.value)
            elif type(node.value) is int:
                yield i, f"{node.value} -> {node.value + 1}", ("const", node.value + 1)
        elif isinstance(node, ast.Tuple) and len(node.elts) > 1 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            for j, e in enumerate(node.elts):
                yield i, f"drop {e.value!r} from a tuple", ("drop", j)


def mutate(tree: ast.AST, index: int, spec: tuple) -> ast.AST:
    tree = copy.deepcopy(tree)
    node = list(ast.walk(tree))[index]
    kind = spec[0]
    if kind == "cmp":
        node.ops[spec[1]] = SWAP[type(node.ops[spec[1]])]()
    elif kind == "bool":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "not":
        _replace(tree, node, node.operand)
    elif kind == "const":
        node.value = spec[1]
    elif kind == "drop":
        del node.elts[spec[1]]
    return ast.fix_missing_locations(tree)


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for k, item in enumerate(value):
                    if item is old:
                        value[k] = new
                        return


FALLBACK_TESTS = ("tests/test_decision_edges.py", "tests/test_api.py", "tests/test_cli.py")


def all_modules() -> List[str]:
    """Every module of selector/ (relative paths, sorted), faces with code included."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "selector").rglob("*.py"))


def tests_for(module: str) -> List[str]:
    """The top-level test files that name `module` (a path such as selector/core/rules.py)."""
    import re
    dotted = module[:-3].replace("/", ".").removesuffix(".__init__")
    pkg, _, leaf = dotted.rpartition(".")
    pats = [re.compile(rf"(?<![\w.]){re.escape(dotted)}(?![\w])")]
    if pkg:
        pats.append(re.compile(rf"from {re.escape(pkg)} import [^\n]*\b{re.escape(leaf)}\b"))
    stems = {leaf.split("_")[0], pkg.rpartition(".")[2]} - {"", "selector", "__init__"}
    found = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").glob("test_*.py"))
             if any(pat.search(p.read_text()) for pat in pats)
             or any(p.stem[5:].startswith(s) for s in stems)]
    return found or list(FALLBACK_TESTS)


NO_TESTS = 5  # pytest's exit code when the selection collects nothing


def run_tests(tests: List[str], timeout: float, marks: str = "not slow") -> int:
    """pytest's exit code in a forked child with fresh `selector` imports: 0 when the tests
    pass (the mutant survives), NO_TESTS when `marks` selects none of them, 1 otherwise (a
    failure, an error or a hang past `timeout`)."""
    pid = os.fork()
    if pid == 0:  # child
        try:
            for name in [m for m in sys.modules if m == "selector" or m.startswith("selector.")]:
                del sys.modules[name]
            sys.dont_write_bytecode = True
            import pytest
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            rc = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                              *(["-m", marks] if marks else []), *tests])
            os._exit(int(rc) if int(rc) in (0, NO_TESTS) else 1)
        except BaseException:  # noqa: B036 - any failure of the child is a killed mutant
            os._exit(1)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return 1  # a hang is noticed too
        time.sleep(0.05)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modules", nargs="*")
    ap.add_argument("--all", action="store_true", help="every module of selector/")
    ap.add_argument("--tests", nargs="+", help="default: per module, the test files that name it")
    ap.add_argument("--per-module", type=int, default=0,
                    help="a random sample of this many mutants of each module")
    ap.add_argument("--json", help="write {module: {killed, ran, total, survivors}} here")
    ap.add_argument("--shard", help="K/N: with --all, only the K-th of N shares of the modules "
                    "(run N copies of the tree side by side)")
    ap.add_argument("--budget", type=float, default=900.0, help="stop after this many seconds")
    ap.add_argument("--sample", type=int, default=0,
                    help="run a random sample of this many, in random order (a budget then cuts fairly)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0,
                    help="skip the first N mutants of the (sampled) order: continue a budgeted run")
    ap.add_argument("--only", help="a file of 'module:line: change' lines (an earlier run's "
                    "survivors): run just those; adding tests never revives a killed mutant")
    ap.add_argument("--timeout", type=float, default=300.0, help="per mutant, seconds")
    ap.add_argument("--slow", action="store_true",
                    help="run the slow-marked tests too (subprocess suites such as test_cli.py "
                    "and test_faults.py: the only tests of commands/cli.py and the child runners)")
    args = ap.parse_args(argv)
    if args.all:
        args.modules = all_modules()
        if args.shard:
            k, n = (int(x) for x in args.shard.split("/"))
            args.modules = args.modules[k::n]
    if not args.modules:
        ap.error("name modules or pass --all")
    os.chdir(ROOT)
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    # one composed-config cache for every child (tests/conftest.py honours it)
    os.environ.setdefault("SELECTOR_TEST_CACHE_DIR", str(ROOT / ".mutate-cache"))
    import hydra  # noqa: F401 - warm in the parent, shared by every child
    import packaging.specifiers  # noqa: F401
    import pytest  # noqa: F401

    mutants = []
    total: dict[str, int] = {}
    for mod in args.modules:
        src = Path(mod).read_text()
        tree = ast.parse(src)
        mine = []
        for index, desc, spec in sites(tree):
            node = list(ast.walk(tree))[index]
            mine.append((mod, getattr(node, "lineno", 0), desc, index, spec))
        total[mod] = len(mine)
        if args.per_module and args.per_module < len(mine):
            mine = random.Random(f"{args.seed}:{mod}").sample(mine, args.per_module)
        mutants += mine
    if args.per_module and not args.sample:  # round-robin over modules: a budget cuts fairly
        queues = [[m for m in mutants if m[0] == mod] for mod in args.modules]
        mutants = [q[i] for i in range(max(map(len, queues), default=0)) for q in queues
                   if i < len(q)]
    tests_of = {m: (list(args.tests) if args.tests else tests_for(m)) for m in args.modules}
    if args.only:
        wanted = {ln.split("survivor:")[-1].split("survived")[-1].strip()
                  for ln in Path(args.only).read_text().splitlines() if ln.strip()}
        mutants = [m for m in mutants if f"{m[0]}:{m[1]}: {m[2]}" in wanted]
    if args.sample and args.sample < len(mutants):
        mutants = random.Random(args.seed).sample(mutants, args.sample)  # random order too
    mutants = mutants[args.start:]
    marks = "" if args.slow else "not slow"
    baseline = {tests: run_tests(list(tests), args.timeout, marks)
                for tests in sorted({tuple(t) for t in tests_of.values()})}
    broken = [tests for tests, rc in baseline.items() if rc != 0]
    for tests in broken:
        why = ("select no test without --slow (every one is slow-marked)"
               if baseline[tests] == NO_TESTS else "fail on the unmutated code; fix that first")
        print(f"the tests ({' '.join(tests)}) {why}", file=sys.stderr)
    if broken and (args.tests or len(args.modules) == 1):
        return 2
    if broken:  # several modules: leave out those whose tests fail here, and say which
        left = [m for m in args.modules if tuple(tests_of[m]) in broken]
        print("left out (their tests fail here): " + ", ".join(left), file=sys.stderr)
        mutants = [m for m in mutants if m[0] not in left]
        args.modules = [m for m in args.modules if m not in left]
    start, killed, survivors, ran = time.monotonic(), 0, [], 0
    per: dict[str, dict[str, object]] = {m: {"killed": 0, "ran": 0, "total": total[m], "survivors": []}
                                         for m in args.modules}
    originals = {m: Path(m).read_text() for m in args.modules}
    trees = {m: ast.parse(s) for m, s in originals.items()}
    try:
        for mod, line, desc, index, spec in mutants:
            if time.monotonic() - start > args.budget:
                break
            try:
                code = ast.unparse(mutate(trees[mod], index, spec))
                compile(code, mod, "exec")
            except (SyntaxError, ValueError, TypeError):
                continue  # not a valid program: not a mutant
            Path(mod).write_text(code)
            ran += 1
            row = per[mod]
            row["ran"] = int(str(row["ran"])) + 1
            if run_tests(tests_of[mod], args.timeout, marks) == 0:
                survivors.append(f"{mod}:{line}: {desc}")
                row["survivors"].append(f"{line}: {desc}")  # type: ignore[attr-defined]
                print(f"survived {mod}:{line}: {desc}", flush=True)
            else:
                killed += 1
                row["killed"] = int(str(row["killed"])) + 1
            Path(mod).write_text(originals[mod])
    finally:
        for m, s in originals.items():
            Path(m).write_text(s)
    print(f"\nkilled {killed}/{ran} ({100.0 * killed / max(ran, 1):.1f}%) of {len(mutants)} "
          f"mutants in {time.monotonic() - start:.0f} s"
          + (" (budget reached)" if ran < len(mutants) else ""))
    for s in survivors:
        print("  survivor:", s)
    if len(args.modules) > 1:
        print("\nper module (killed/ran of all sites):")
        for m, row in per.items():
            r = int(str(row["ran"]))
            pct = f"{100.0 * int(str(row['killed'])) / r:.0f}%" if r else "-"
            print(f"  {m}: {row['killed']}/{r} ({pct}) of {row['total']}")
    if args.json:
        import json
        Path(args.json).write_text(json.dumps(per, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
