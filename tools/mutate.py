"""A small AST mutation run: how many one-token changes to a module do the tests notice?

    python tools/mutate.py selector/core/rules.py selector/core/resolver.py selector/core/versions.py \
        --tests tests/test_rules.py tests/test_decision_edges.py --budget 900
    python tools/mutate.py --all --per-module 12 --json mutation.json   # every module, sampled
    python tools/mutate.py --group rules --per-module 10 --seed 36 --record docs/mutation.json

--group NAME runs one shard (GROUPS below: together they cover every module with a mutation site):
its modules against its test files. One traced run of those files records, per line of each
module, the tests that execute it; each mutant then runs only those tests (a module-level
line, or one that runs only in a subprocess: every test that runs any line of the module);
--no-targeted runs the whole set each time. Each mutant gets a fresh copy of the composed-
config cache. --record merges the per-module rows into docs/mutation.json, which
docs/guarantees.md renders (tools/regen.py); `--only survivors.txt --record ...` reruns
survivors after new tests and moves those now killed. backends/ (installed as
selector.backends) is sharded by what is on disk (`backends-<floor>`, backends_groups): no list
of its modules to keep up to date when one moves; `--list-groups` prints every shard.

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
import shutil
import sys
import tempfile
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


# Shards: each a few modules and the test files that exercise them (one traced baseline run
# of those files, then each mutant runs only the tests that covered its line). Each finishes
# in under 15 minutes with --per-module 10 on the shared 2-core machine.
_CHECKPOINT_TESTS = ("test_checkpoint_units", "test_checkpoint_schemes", "test_checkpoint",
                     "test_checkpoint_engine", "test_checkpoint_mutants", "test_launch",
                     "test_checkpoint_next", "test_trtllm", "test_mutation_checkpoint")
GROUPS: dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "environment": (("inspect/environment.py", "core/env_vars.py", "inspect/nvml_query.py",
                     "inspect/child_runner.py"),
                    ("test_environment", "test_nvml_query", "test_child_runner", "test_cli_env")),
    "checkpoint": (("checkpoint/arch.py", "checkpoint/arch_moe.py", "checkpoint/hf_defaults.py",
                    "checkpoint/files.py", "checkpoint/modules.py", "checkpoint/beat.py"),
                   _CHECKPOINT_TESTS),
    "launch": (("checkpoint/plan.py", "checkpoint/launch.py", "checkpoint/launch_plan.py",
                "checkpoint/launchers.py", "checkpoint/splits.py"), _CHECKPOINT_TESTS),
    "quant": (("checkpoint/quant/",), _CHECKPOINT_TESTS),
    "rules": (("core/rules/",), ("test_rules", "test_decision_edges", "test_outcomes",
                                 "test_layers")),
    "core": (("core/resolver.py", "core/versions.py", "core/layer.py", "core/notes.py",
              "core/decision.py", "core/engine_view.py", "core/errors.py", "core/parallel.py"),
             ("test_rules", "test_decision_edges", "test_outcomes", "test_layers",
              "test_recipes")),
    "config": (("config/",), ("test_hostile", "test_cache_reads", "test_catalogues",
                              "test_plugins", "test_untrusted", "test_recipes",
                              "test_mutation_config")),
    "api": (("core/locks.py", "core/entry_points.py", "api.py", "__init__.py"),
            ("test_api", "test_plugins", "test_concurrency", "test_catalogues",
             "test_mutation_api")),
    "schema": (("core/schema.py", "core/validation.py", "core/model.py", "core/probe_specs.py",
                "core/text.py"),
               ("test_schema", "test_properties", "test_catalogue", "test_probes",
                "test_mutation_schema")),
    "engines": (("core/engines.py", "engines/"),
                ("test_engines", "test_engine_recipe", "test_trtllm", "test_cli_env",
                 "test_mutation_engines")),
    "commands": (("commands/", "core/packaged.py"),
                 ("test_catalogue", "test_matrix", "test_doctor", "test_outcomes", "test_tune",
                  "test_schema", "test_ux", "test_mutation_commands", "test_doctor_schemes",
                  "test_doctor_timeout")),
    "inspect": (("inspect/verify", "inspect/drift.py"),
                ("test_verify", "test_verify_inputs", "test_cache_reads", "test_knowledge",
                 "test_mutation_inspect")),
    "probes": (("inspect/probing.py", "inspect/probe_child.py", "inspect/tuning.py",
                "core/profile.py"), ("test_probes", "test_doctor", "test_tune")),
    "distributed": (("distributed/",), ("test_agreement", "test_distributed",
                                        "test_agreed_interface")),
}


#: backends/ (installed as selector.backends) is sharded by what is on disk, not by a list: one
#: shard per sub-package (a floor: `backends-prepare`), or `backends-<floor>-<k>` parts of at
#: most BACKENDS_SHARD modules where a floor has more, `backends-package` for the modules at its
#: top; a shard's tests are the files that name any of its modules (tests_for). A module moved
#: into a sub-package of its floor stays in that floor's shard, one moved to a new floor gets a
#: shard of its own; nothing here names a module.
BACKENDS = "backends"
BACKENDS_SHARD = 8


def backends_groups() -> dict[str, List[str]]:
    """{shard name: its modules with a mutation site}, discovered under backends/."""
    floors: dict[str, List[str]] = {}
    for m in all_modules(BACKENDS):
        if has_sites(m):
            parts = Path(m).parts
            floors.setdefault(parts[1] if len(parts) > 2 else "package", []).append(m)
    out: dict[str, List[str]] = {}
    for floor, mods in sorted(floors.items()):
        n = -(-len(mods) // BACKENDS_SHARD)  # parts of at most BACKENDS_SHARD, sizes even
        for k in range(n):
            out[f"{BACKENDS}-{floor}" + (f"-{k + 1}" if n > 1 else "")] = mods[k::n]
    return out


def has_sites(module: str) -> bool:
    """Whether the module has a mutation site."""
    return any(True for _ in sites(ast.parse((ROOT / module).read_text())))


def group_names() -> List[str]:
    """Every shard's name: GROUPS' and backends/' (discovered)."""
    return sorted([*GROUPS, *backends_groups()])


def group_modules(name: str) -> Tuple[List[str], List[str]]:
    """The modules (with a mutation site) and the test files of shard `name`."""
    if name not in GROUPS:  # a backends/ shard: its test files are those naming its modules
        mods = backends_groups()[name]
        return mods, list(dict.fromkeys(t for m in mods for t in tests_for(m)))
    prefixes, tests = GROUPS[name]
    full = ["selector/" + p for p in prefixes]
    mods = [m for m in all_modules() if any(
        m == p if p.endswith(".py") else m.startswith(p) for p in full)]
    return [m for m in mods if has_sites(m)], [f"tests/{t}.py" for t in tests]


FALLBACK_TESTS = ("tests/test_decision_edges.py", "tests/test_api.py", "tests/test_cli.py")


def all_modules(package: str = "selector") -> List[str]:
    """Every module of selector/ (or of `package`: backends/), relative paths, sorted, faces
    with code included."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py"))


def _label(module: str) -> str:
    """A module's name in the table: selector's without the package, backends' whole."""
    return module.removeprefix("selector/")


def tests_for(module: str) -> List[str]:
    """The top-level test files that name `module` (a path such as selector/core/rules.py)."""
    import re
    dotted = module[:-3].replace("/", ".").removesuffix(".__init__")
    names = [dotted]
    if dotted.split(".")[0] == "backends":  # installed as selector.backends; a test may also
        names.insert(0, "selector." + dotted)  # import the checkout's top-level `backends`
        dotted = names[0]
    pkg, _, leaf = dotted.rpartition(".")
    # a package (its __init__) is named by its dotted name alone, not by its submodules' names
    tail = r"(?![\w.])" if module.endswith("__init__.py") else r"(?![\w])"
    pats = []
    for name in names:
        parent, _, last = name.rpartition(".")
        pats.append(re.compile(rf"(?<![\w.]){re.escape(name)}{tail}"))
        if parent:
            pats.append(re.compile(rf"from {re.escape(parent)} import [^\n]*\b{re.escape(last)}\b"))
    stems = {leaf.split("_")[0], pkg.rpartition(".")[2]} - {"", "selector", "__init__"}
    found = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").glob("test_*.py"))
             if any(pat.search(p.read_text()) for pat in pats)
             or any(p.stem[5:].startswith(s) for s in stems)]
    return found or list(FALLBACK_TESTS)


NO_TESTS = 5  # pytest's exit code when the selection collects nothing
EMPTY_SELECTION = 6  # the chosen test ids collected nothing (the caller falls back)
IMPORT = "<import>"  # the coverage context of lines run while collecting (module level)


class _Plugin:
    """In the child: keep only `select` (test ids), record the first failing test id, and
    (with a tracer) which test is running."""

    def __init__(self, select: Optional[dict], tracer: Optional[_Tracer]) -> None:
        self.select, self.tracer, self.failed = select, tracer, ""
        self.seconds: dict[str, float] = {}

    def pytest_collection_modifyitems(self, items: list, config: object) -> None:
        if self.select is not None:  # the quickest first: a mutant is killed sooner
            keep = [i for i in items if i.nodeid in self.select]
            items[:] = sorted(keep, key=lambda i: self.select[i.nodeid])  # type: ignore[index]

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        if self.tracer:
            self.tracer.current = nodeid

    def pytest_runtest_logreport(self, report: object) -> None:
        node = str(getattr(report, "nodeid", "?"))
        self.seconds[node] = self.seconds.get(node, 0.0) + float(getattr(report, "duration", 0))
        if getattr(report, "failed", False) and not self.failed:
            self.failed = node


class _Tracer:
    """Line coverage of a few files, per test (sys.settrace; frames of other files cost one
    call event each)."""

    def __init__(self, files: List[str]) -> None:
        self.targets = {os.path.realpath(f) for f in files}
        self.memo: dict[str, bool] = {}
        self.current = IMPORT
        self.hits: dict[tuple, set] = {}

    def _local(self, frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "line":
            key = (frame.f_code.co_filename, frame.f_lineno)
            got = self.hits.get(key)
            if got is None:
                got = self.hits[key] = set()
            got.add(self.current)
        return self._local

    def _global(self, frame, event, arg):  # type: ignore[no-untyped-def]
        name = frame.f_code.co_filename
        mine = self.memo.get(name)
        if mine is None:
            mine = self.memo[name] = os.path.realpath(name) in self.targets
        return self._local if mine else None

    def start(self) -> None:
        import threading
        sys.settrace(self._global)
        threading.settrace(self._global)

    def dump(self) -> dict:
        out: dict[str, dict[str, list]] = {}
        for (name, line), ctx in self.hits.items():
            rel = os.path.relpath(os.path.realpath(name), ROOT)
            out.setdefault(rel, {}).setdefault(str(line), []).extend(sorted(ctx))
        return out


MARKER = "SELECTOR_MUTANT_RUN"  # in the environment of whatever one mutant's tests start


def _reap(pgid: int, token: str) -> None:
    """Kill what a mutant's tests left running: its process group (forks) and every process
    whose environment carries its token (children in sessions of their own, such as the verify
    and probe children, and theirs). A mutant can make them multiply: api.py's
    `run.probe == "verify"` -> `!=` has every verify child verify again."""
    import signal
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    mark = f"{MARKER}={token}".encode()
    for _ in range(20):  # until none is left (one may start another while we look)
        found = []
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if mark in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
        if not found:
            return
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


def run_tests(tests: List[str], timeout: float, marks: str = "not slow",
              select: Optional[dict] = None, trace: Optional[List[str]] = None,
              cache: Optional[str] = None) -> Tuple[int, str, dict]:
    """(pytest's exit code, the first failing test id, the coverage) from a forked child with
    fresh `selector` imports: 0 when the tests pass (the mutant survives), NO_TESTS when `marks`
    selects none of them, EMPTY_SELECTION when `select` (test ids) matches none, 1 otherwise (a
    failure, an error or a hang past `timeout`). With `trace` (module paths), the coverage is
    {module: {line: [test ids]}}; `cache` is the composed-config cache directory to use."""
    import json
    import tempfile
    fd, out = tempfile.mkstemp(prefix="mutate-", suffix=".json")
    os.close(fd)
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.setpgid(0, 0)  # its forks share its group: killed with it
            os.environ[MARKER] = token  # what it starts carries this: killed after it
            if cache:
                os.environ["SELECTOR_TEST_CACHE_DIR"] = cache
            for name in [m for m in sys.modules if m.split(".")[0] in ("selector", "backends")]:
                del sys.modules[name]
            sys.dont_write_bytecode = True
            import pytest
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            tracer = _Tracer(trace) if trace else None
            plugin = _Plugin(select, tracer)
            if tracer:
                tracer.start()
            rc = int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                                  *(["-m", marks] if marks else []), *tests], plugins=[plugin]))
            sys.settrace(None)
            Path(out).write_text(json.dumps({"failed": plugin.failed,
                                             "lines": tracer.dump() if tracer else {},
                                             "seconds": plugin.seconds}))
            if rc == NO_TESTS and select is not None:
                rc = EMPTY_SELECTION
            os._exit(rc if rc in (0, NO_TESTS, EMPTY_SELECTION) else 1)
        except BaseException:  # noqa: B036 - any failure of the child is a killed mutant
            os._exit(1)
    deadline = time.monotonic() + timeout
    rc = None
    while rc is None:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
        elif time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            rc = 1  # a hang is noticed too
        else:
            time.sleep(0.05)
    _reap(pid, token)
    try:
        got = json.loads(Path(out).read_text() or "{}")
    except ValueError:
        got = {}
    os.unlink(out)
    if trace:
        got.setdefault("lines", {})["<seconds>"] = got.get("seconds", {})
    return rc, got.get("failed", "timeout" if rc == 1 and not got else ""), got.get("lines", {})


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
    ap.add_argument("--record", help="merge the per-module rows into this results file "
                    "(docs/mutation.json: docs/guarantees.md renders it)")
    ap.add_argument("--test-seconds", type=float, default=20.0,
                    help="per mutant, run the quickest covering tests that fit in this many "
                    "seconds of their baseline time (0: every covering test)")
    ap.add_argument("--trace-file", help="keep the traced baseline here, and reuse it if present")
    ap.add_argument("--no-targeted", dest="targeted", action="store_false",
                    help="run each mutant against its module's whole test set, not just the "
                    "tests whose run covered the mutated line")
    ap.add_argument("--group", choices=group_names(),
                    help="one shard: its modules against its test files (see GROUPS, and "
                    "backends_groups for backends/)")
    ap.add_argument("--list-groups", action="store_true",
                    help="print each shard, its modules and its test files, and exit")
    args = ap.parse_args(argv)
    if args.list_groups:
        for name in group_names():
            mods, tests = group_modules(name)
            print(f"{name}: {' '.join(mods)}\n    tests: {' '.join(tests)}")
        return 0
    if args.group:
        args.modules, args.tests = group_modules(args.group)
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
    if any(m.startswith("backends/") for m in args.modules):
        import torch  # noqa: F401 - backends/' tests import it: warm too (no CUDA is started)
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
    baseline: dict[tuple, int] = {}
    coverage: dict[str, dict[int, set]] = {m: {} for m in args.modules}
    files = [str(ROOT / m) for m in args.modules] if args.targeted else None
    sets = sorted({tuple(t) for t in tests_of.values()})
    if args.targeted:  # one traced run of every file: a module's tests may live anywhere
        sets = [tuple(dict.fromkeys(f for t in sets for f in t))]
    seconds: dict[str, float] = {}
    for tests in sets:
        saved = Path(args.trace_file) if args.trace_file else None
        if saved and saved.is_file():  # a traced baseline kept from an earlier run
            import json
            rc, lines = 0, json.loads(saved.read_text())
        else:
            rc, _, lines = run_tests(list(tests), args.timeout * 4, marks, trace=files)
            if saved and rc == 0:
                import json
                saved.write_text(json.dumps(lines))
        baseline[tests] = rc
        seconds.update(lines.pop("<seconds>", {}))
        for mod, hits in lines.items():
            for line, ids in hits.items():
                coverage.setdefault(mod, {}).setdefault(int(line), set()).update(ids)
    if args.targeted:
        baseline = {tuple(t): baseline[sets[0]] for t in tests_of.values()}
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
    snapshot = os.environ["SELECTOR_TEST_CACHE_DIR"]
    start, killed, survivors, ran, targeted = time.monotonic(), 0, [], 0, 0
    per: dict[str, dict[str, object]] = {m: {"killed": 0, "ran": 0, "total": total[m], "survivors": []}
                                         for m in args.modules}
    originals = {m: Path(m).read_text() for m in args.modules}
    import signal  # a SIGTERM restores the modules too (the finally below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    trees = {m: ast.parse(s) for m, s in originals.items()}
    headers = {m: _statement_lines(t) for m, t in trees.items()}
    try:
        for mod, line, desc, index, spec in mutants:
            if time.monotonic() - start > args.budget:
                break
            try:
                mutated = mutate(trees[mod], index, spec)
                code = ast.unparse(mutated)
                compile(code, mod, "exec")
            except (SyntaxError, ValueError, TypeError):
                continue  # not a valid program: not a mutant
            select = _covering(coverage.get(mod, {}), trees[mod], index, headers[mod]) \
                if args.targeted else None
            if select:
                select = _quickest(select, seconds, args.test_seconds)
            Path(mod).write_text(code)
            ran += 1
            row = per[mod]
            row["ran"] = int(str(row["ran"])) + 1
            with tempfile.TemporaryDirectory(prefix="mutate-cache-") as tmp:
                cache = str(Path(tmp) / "c")
                shutil.copytree(snapshot, cache, symlinks=True) if Path(snapshot).is_dir() else None
                rc = EMPTY_SELECTION
                if select:
                    order = list(dict.fromkeys([*tests_of[mod], *sorted(i.split("::")[0] for i in select)]))
                    picked = [f for f in order if any(i.startswith(f + "::") for i in select)]
                    rc, failed, _ = run_tests(picked, args.timeout, marks, select=select, cache=cache)
                    targeted += rc != EMPTY_SELECTION
                if rc == EMPTY_SELECTION:  # module-level code, or not run in this process:
                    # the tests that run any of the module's lines, else the whole set
                    users = set().union(*coverage.get(mod, {}).values()) - {IMPORT}
                    files = [f for f in tests_of[mod] if any(i.startswith(f + "::") for i in users)]
                    rc, failed, _ = run_tests(files or tests_of[mod], args.timeout, marks,
                                              select=_quickest(users, seconds, args.test_seconds)
                                              if users else None, cache=cache)
            if rc == 0:
                survivors.append(f"{mod}:{line}: {desc}")
                row["survivors"].append(f"{line}: {desc}")  # type: ignore[attr-defined]
                print(f"survived {mod}:{line}: {desc}", flush=True)
            else:
                killed += 1
                row["killed"] = int(str(row["killed"])) + 1
                row.setdefault("killed_now", []).append(f"{line}: {desc}")  # type: ignore[union-attr]
                print(f"killed {mod}:{line}: {desc} by {failed}", flush=True)
            Path(mod).write_text(originals[mod])
    finally:
        for m, s in originals.items():
            Path(m).write_text(s)
    print(f"\nkilled {killed}/{ran} ({100.0 * killed / max(ran, 1):.1f}%) of {len(mutants)} "
          f"mutants in {time.monotonic() - start:.0f} s ({targeted} ran only the tests that "
          "cover the mutated line)"
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
    if args.record:
        record(Path(args.record), per, args)
    return 0


def _statement_lines(tree: ast.AST) -> dict[int, Tuple[int, int]]:
    """id(node) -> the line range of the innermost statement holding it (a compound
    statement's header only: `if x:`, not its body), for nodes inside a function body; a
    node outside every function body (module and class level, defaults, decorators) runs at
    import, whichever test imported the module first, so it is left out."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside.update(id(n) for stmt in fn.body for n in ast.walk(stmt))
        elif isinstance(fn, ast.Lambda):
            inside.update(id(n) for n in ast.walk(fn.body))
    out: dict[int, Tuple[int, int]] = {}
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.stmt):
            body = getattr(stmt, "body", None)
            end = (body[0].lineno - 1 if body and isinstance(body, list) else stmt.end_lineno) \
                or stmt.lineno
            for sub in ast.walk(stmt):
                if id(sub) in inside:
                    out[id(sub)] = (stmt.lineno, max(stmt.lineno, end))
    return out


def _covering(cov: dict[int, set], tree: ast.AST, index: int,
              headers: dict[int, Tuple[int, int]]) -> Optional[set]:
    """The test ids that ran the mutated node's lines (else its statement's), or None when
    they also ran at import time (module-level code: every test may read it) or never ran in
    the test process (a subprocess, or no test): then the module's whole test set runs."""
    node = list(ast.walk(tree))[index]
    if id(node) not in headers:  # import-time code
        return None
    lo = getattr(node, "lineno", None)
    ranges = [(lo, getattr(node, "end_lineno", lo) or lo)] if lo else []
    ranges.append(headers[id(node)])
    for a, b in ranges:
        ids = set().union(*(cov.get(n, set()) for n in range(a, b + 1)))
        if IMPORT in ids:
            return None
        if ids:
            return ids
    return None


def _quickest(ids: set, seconds: dict[str, float], budget: float) -> dict[str, float]:
    """The covering tests, quickest first, as many as fit in `budget` seconds of their
    baseline time (at least one): {test id: its rank}. A survivor is then a mutant that none
    of those tests notices (a slower test might)."""
    out: dict[str, float] = {}
    spent = 0.0 if budget > 0 else -float("inf")
    for i in sorted(ids, key=lambda i: (seconds.get(i, 0.0), i)):
        t = seconds.get(i, 0.0)
        if out and spent + t > budget:
            break
        out[i], spent = len(out), spent + t
    return out


def record(path: Path, per: dict, args: argparse.Namespace) -> None:
    """Merge this run's rows into the results file: a module's row is replaced as a whole,
    except after `--only` (a rerun of earlier survivors), which moves the ones now killed
    from its survivors to its killed count."""
    import json
    import subprocess
    data = json.loads(path.read_text()) if path.is_file() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    rows = data.setdefault("modules", {})
    for mod, row in per.items():
        now = row.pop("killed_now", [])
        if not int(str(row["ran"])):
            continue
        old = rows.get(mod)
        if args.only and old:
            left, gone = list(old["survivors"]), 0
            for s in now:  # one each: two mutants of a line can share a description
                if s in left:
                    left.remove(s)
                    gone += 1
            old["survivors"] = left
            old["killed"] += gone
            old["rerun"] = f"{gone} survivors killed by new tests ({commit})"
        else:
            rows[mod] = {**row, "commit": commit, "seed": args.seed,
                         "per_module": args.per_module, "date": time.strftime("%Y-%m-%d")}
    data.setdefault("equivalent", {})
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def render(path: Path) -> str:
    """docs/guarantees.md's table of the recorded scores (tools/regen.py writes it)."""
    import json
    data = json.loads(path.read_text()) if path.is_file() else {"modules": {}, "equivalent": {}}
    rows, equivalent = data["modules"], data["equivalent"]
    lines = ["| module | killed / run | non-equivalent killed | sites when run | survivors: why "
             "each is equivalent or acceptable |", "|---|---|---|---|---|"]
    k = r = e = 0
    sub = {"backends": [0, 0, 0, 0, 0]}  # killed, run, equivalent, modules run, modules
    for mod in all_modules() + all_modules("backends"):  # the counts are the record's
        if not any(True for _ in sites(ast.parse((ROOT / mod).read_text()))):
            continue
        row = rows.get(mod)
        part = sub.get(mod.split("/")[0])
        if part:
            part[4] += 1
        if not row:
            lines.append(f"| `{_label(mod)}` | not run yet | | | |")
            continue
        n = row["total"]
        why = [(s, equivalent.get(f"{mod}:{s}")) for s in row["survivors"]]
        eq = sum(1 for _, w in why if w)
        k, r, e = k + row["killed"], r + row["ran"], e + eq
        if part:
            part[:4] = [part[0] + row["killed"], part[1] + row["ran"], part[2] + eq, part[3] + 1]
        rate = f"{100.0 * row['killed'] / max(row['ran'] - eq, 1):.0f}%"
        text = "; ".join(f"{s}: {w or 'not explained yet'}" for s, w in why) or "-"
        lines.append(f"| `{_label(mod)}` | {row['killed']} / {row['ran']} | {rate} | {n} | {text} |")
    head = (f"Recorded: **{k} of {r} killed; {k} of {r - e} non-equivalent "
            f"({100.0 * k / max(r - e, 1):.1f}%)** ({e} equivalent). Every figure is the "
            "record's (docs/mutation.json, `sites when run`: the module's mutation sites at the "
            "run's commit): editing a module leaves its row as it is until the module is run "
            "again.\n\n")
    bk, br, be, bm, bn = sub["backends"]
    if br:
        head += (f"Of these, `backends/`: **{bk} of {br} killed; {bk} of {br - be} "
                 f"non-equivalent ({100.0 * bk / max(br - be, 1):.1f}%)** ({be} equivalent), "
                 f"{bm} of its {bn} modules with a mutation site run.\n\n")
    return head + "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
