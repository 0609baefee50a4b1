"""The layout shows the layers (docs/architecture.md): every module of selector/ belongs to one layer
and every module of backends/ to one floor (``backends.FLOORS``), imports only go down (or stay
inside the module's own package), no two modules import each other through any path, and selector
never imports backends (it names them by entry-point strings only). Imports inside functions count:
a lazy import hides a dependency, it does not remove it. Imports only for type checkers (`if
TYPE_CHECKING:`) count too: a type is a dependency (what drives a Selector from below takes
core.protocols.SelectorLike). Only a package face's lazy re-export of its own modules
(`selector.__getattr__`) does not count."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from selector.backends import FLOORS

ROOT = Path(__file__).resolve().parent.parent / "selector"
BACKENDS_ROOT = ROOT.parent / "backends"

# bottom to top; a module may import its own package and the layers below it
LAYERS = ("core", "config", "inspect", "checkpoint", "api", "distributed", "engines", "commands",
          "main")


def layer_of(module: str) -> str:
    parts = module.split(".")
    if module in ("selector", "selector.api"):
        return "api"  # the package face and the Python API
    if module == "selector.__main__":
        return "main"
    if parts[1] in LAYERS:
        return parts[1]
    raise AssertionError(f"{module}: in no layer (add its package to LAYERS and docs/architecture.md)")


def floor_of(module: str) -> str:
    """A backends module's floor: its sub-package (``selector.backends`` itself, the face, is below
    them all: it holds FLOORS and imports nothing)."""
    parts = module.split(".")
    if module == "selector.backends":
        return "face"
    if parts[2] in FLOORS:
        return parts[2]
    raise AssertionError(f"{module}: on no floor (add its sub-package to backends.FLOORS)")


def modules(root: Path = ROOT, package: str = "selector") -> dict[str, Path]:
    out = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).with_suffix("")
        name = ".".join((package,) + rel.parts)
        out[name.removesuffix(".__init__")] = p
    return out


MODULES = modules()
BACKEND_MODULES = modules(BACKENDS_ROOT, "selector.backends")


def _targets(cur: str, node: ast.Import | ast.ImportFrom, mods: dict[str, Path] = MODULES) -> set[str]:
    """The modules of ``mods`` that ``node`` (in module ``cur``) imports."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = cur.split(".") if mods[cur].name == "__init__.py" else cur.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [f"{target}.{a.name}" for a in node.names]
        found = {n for n in names if n in mods}
        if len(found) < len(names):
            found.add(target)
    else:
        found = {a.name for a in node.names}
    out = set()
    for t in found:
        while t and t not in mods:
            t = t.rpartition(".")[0]
        if t and t != cur:
            out.add(t)
    return out


def graph(mods: dict[str, Path] = MODULES) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(name, node, mods)
        if name == "selector":  # the face's __getattr__ re-exports lazily; its top level counts
            edges = set()
            for node in tree.body:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    edges |= _targets(name, node, mods)
        g[name] = edges
    return g


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        layer_of(name)


def test_imports_only_go_down() -> None:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    bad = []
    for name, edges in graph().items():
        for dep in sorted(edges):
            a, b = layer_of(name), layer_of(dep)
            if rank[b] > rank[a] or (rank[b] == rank[a] and a != "api" and
                                     name.split(".")[1] != dep.split(".")[1]):
                bad.append(f"{name} ({a}) imports {dep} ({b})")
    assert not bad, "imports that go up a layer:\n" + "\n".join(bad)


def test_every_backends_module_has_a_floor() -> None:
    for name in BACKEND_MODULES:
        floor_of(name)


def test_backends_imports_only_go_down() -> None:
    rank = {floor: i for i, floor in enumerate(("face",) + FLOORS)}
    bad = []
    for name, edges in graph(BACKEND_MODULES).items():
        for dep in sorted(edges):
            a, b = floor_of(name), floor_of(dep)
            if rank[b] > rank[a]:
                bad.append(f"{name} ({a}) imports {dep} ({b})")
    assert not bad, "imports that go up a floor:\n" + "\n".join(bad)


def test_selector_never_imports_backends() -> None:
    """selector names a backend by its entry-point string only (resolved on request)."""
    bad = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if isinstance(node, ast.ImportFrom) and node.module == "selector":
                    names = [f"selector.{a.name}" for a in node.names]
                bad += [f"{name} imports {n}" for n in names if n.split(".")[:2] == ["selector", "backends"]]
    assert not bad, "\n".join(bad)


def test_no_import_cycle() -> None:
    _no_cycle(graph())


def test_backends_no_import_cycle() -> None:
    _no_cycle(graph(BACKEND_MODULES))


def _no_cycle(g: dict[str, set[str]]) -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    assert not cycles, "import cycles:\n" + "\n".join(" ".join(c) for c in cycles)


@pytest.mark.parametrize("source, expect", [
    ("from selector.commands import cli\n", "imports selector.commands.cli"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from selector.api import Selector\n",
     "imports selector.api"),
    ("def f():\n    from selector.api import load\n", "imports selector.api"),
])
def test_an_upward_import_is_found(tmp_path: Path, source: str, expect: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The check sees module-level and function-level imports alike."""
    path = ROOT / "core" / "rules" / "base.py"
    fake = tmp_path / "base.py"
    fake.write_text(path.read_text() + "\n" + source)
    monkeypatch.setitem(MODULES, "selector.core.rules.base", fake)
    with pytest.raises(AssertionError, match=expect):
        test_imports_only_go_down()


def test_a_lazy_cycle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "errors.py"
    fake.write_text((ROOT / "core" / "errors.py").read_text()
                    + "\ndef _f():\n    from selector.core import rules\n")
    monkeypatch.setitem(MODULES, "selector.core.errors", fake)
    with pytest.raises(AssertionError, match="import cycles"):
        test_no_import_cycle()


def test_an_upward_backends_import_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A floor that imports one above it (here the input check importing a wrapper, lazily) fails,
    and so does the cycle it closes."""
    fake = tmp_path / "validate.py"
    fake.write_text((BACKENDS_ROOT / "common" / "validate.py").read_text()
                    + "\ndef _f():\n    from ..wrappers._base import KernelBackend\n")
    monkeypatch.setitem(BACKEND_MODULES, "selector.backends.common.validate", fake)
    with pytest.raises(AssertionError, match="common.validate \\(common\\) imports "
                                             "selector.backends.wrappers._base \\(wrappers\\)"):
        test_backends_imports_only_go_down()
    with pytest.raises(AssertionError, match="import cycles"):
        test_backends_no_import_cycle()


def test_a_backends_module_off_the_floors_is_found() -> None:
    with pytest.raises(AssertionError, match="on no floor"):
        floor_of("selector.backends.misc.helpers")


MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def too_big(mods: dict[str, Path], modules_too: bool = True) -> list[str]:
    """Each module of `mods` over MAX_MODULE_LINES lines (unless not `modules_too`) and each
    function (a method, a nested function, a Triton kernel included) over MAX_FUNCTION_LINES."""
    bad = []
    for name, path in mods.items():
        text = path.read_text()
        if modules_too and len(text.splitlines()) > MAX_MODULE_LINES:
            bad.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    bad.append(f"{name}.{node.name} (line {node.lineno}): {n} lines")
    return bad


@pytest.mark.parametrize("mods", [MODULES, BACKEND_MODULES], ids=["selector", "backends"])
def test_modules_and_functions_stay_small(mods: dict[str, Path]) -> None:
    """No module of selector/ or backends/ over 500 lines and no function over 60: a longer one
    is split by responsibility, where its steps part (tools/ and benchmarks/ are exempt)."""
    bad = too_big(mods)
    assert not bad, "\n".join(bad)


#: the top-level folders whose functions may be longer (maintainers' tools, benchmarks); selector/
#: and backends/ are checked above, modules and functions alike
EXEMPT = ("tools", "benchmarks", "selector", "backends")


def test_functions_elsewhere_stay_small() -> None:
    """No function of tests/ or conf/ (any Python file outside tools/ and benchmarks/) over 60
    lines; their modules may be longer."""
    top = ROOT.parent
    files = {str(p.relative_to(top)): p for p in sorted(top.rglob("*.py"))
             if not p.relative_to(top).parts[0].startswith((".", "build", "dist") + EXEMPT)
             and "site-packages" not in p.parts}
    assert any(name.startswith("tests/") for name in files)
    bad = too_big(files, modules_too=False)
    assert not bad, "\n".join(bad)


def test_an_oversized_module_and_function_are_found(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    fake = tmp_path / "big.py"
    fake.write_text(f"def long():\n{body}\n" + "\n" * MAX_MODULE_LINES)
    assert too_big({"selector.big": fake}) == [
        f"selector.big: {MAX_FUNCTION_LINES + 1 + MAX_MODULE_LINES} lines",
        f"selector.big.long (line 1): {MAX_FUNCTION_LINES + 1} lines"]
    assert too_big({"tests.big": fake}, modules_too=False) == [
        f"tests.big.long (line 1): {MAX_FUNCTION_LINES + 1} lines"]
    fake.write_text(f"def short():\n{body[:body.rindex(chr(10))]}\n")
    assert too_big({"selector.big": fake}) == []


def json_read_backs(mods: dict[str, Path]) -> list[str]:
    """Each place in `mods` that reads a typed object back through its own JSON
    (``x.to_dict()["key"]``, ``x.to_dict().get("key")``): the object's attribute is the read, its
    to_dict() (the serializer) the one place its keys are spelled as strings."""
    bad = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            target = None
            if isinstance(node, ast.Subscript):
                target = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "get":
                target = node.func.value
            if isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute) \
                    and target.func.attr == "to_dict":
                bad.append(f"{name} line {node.lineno}: {ast.unparse(node)}")
    return bad


@pytest.mark.parametrize("mods", [MODULES, BACKEND_MODULES], ids=["selector", "backends"])
def test_typed_objects_are_read_by_attribute(mods: dict[str, Path]) -> None:
    """selector's typed objects (Decision, its EngineView and Layer, a Plan) are read by
    attribute; string keys appear only where their JSON is written (docs/architecture.md)."""
    bad = json_read_backs(mods)
    assert not bad, "\n".join(bad)


def test_a_json_read_back_is_found(tmp_path: Path) -> None:
    fake = tmp_path / "plan.py"
    fake.write_text("def f(plan, d):\n    return plan.to_dict()['platform'], "
                    "d.engine.to_dict().get('backend'), d.to_dict\n")
    assert json_read_backs({"selector.plan": fake}) == [
        "selector.plan line 2: plan.to_dict()['platform']",
        "selector.plan line 2: d.engine.to_dict().get('backend')"]
