"""Lists that the pages restate by hand, each name with words of its own, so that
tools/regen.py cannot write them: `regen.py` (and `--check`) compares each with the code's list
and names what the page lacks or has too many. A list whose names alone say everything is a
generated block instead (`<!-- regen:NAME -->`, tools/regen.py BLOCKS).

Each entry: the page, what the list is, the text it starts after and the text it ends before
(each found once), the code's names (and where they live, named in the failure), how names are
read from the page (default: every `backticked` word) and the page's other backticked words
inside the list that are no member (`others`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, FrozenSet, List, Sequence, Set

ROOT = Path(__file__).resolve().parent.parent


def backticked(text: str) -> Set[str]:
    return set(re.findall(r"`([^`\s]+)`", text))


@dataclass(frozen=True)
class Restated:
    page: str
    what: str
    start: str
    end: str
    names: Callable[[Path], Sequence[str]]  # the code's names, given the repository's root
    source: str
    read: Callable[[str], Set[str]] = backticked
    others: FrozenSet[str] = frozenset()
    extra: bool = True  # False: the page may name more than the list (only what it lacks counts)


def _outcomes(root: Path = ROOT) -> Sequence[str]:
    from selector.core.decision import OUTCOMES
    return OUTCOMES


def _statuses(root: Path = ROOT) -> Sequence[str]:
    from selector.core.schema import STATUSES
    return STATUSES


def _severities(root: Path = ROOT) -> Sequence[str]:
    from selector.core.notes import SEVERITIES
    return SEVERITIES


def _layer_keys(root: Path = ROOT) -> Sequence[str]:
    from selector.core.layer import LAYER_KEYS
    return LAYER_KEYS


def _executions(root: Path = ROOT) -> Sequence[str]:
    from selector.core.schema import EXECUTIONS
    return EXECUTIONS


def _verify_statuses(root: Path = ROOT) -> Sequence[str]:
    from selector.inspect.verify_cases import STATUSES
    return STATUSES


def _drift_statuses(root: Path = ROOT) -> Sequence[str]:
    from selector.inspect.drift import STATUSES
    return STATUSES


def _engine_keys(root: Path = ROOT) -> Sequence[str]:
    from selector.core.engine_view import EngineView
    return list(EngineView.__dataclass_fields__)


def _conf_fields(cls_name: str) -> Callable[[Path], Sequence[str]]:
    def names(root: Path = ROOT) -> Sequence[str]:
        from selector.core import schema
        return list(getattr(schema, cls_name).__dataclass_fields__)
    return names


def _keys(prefix: str) -> Callable[[str], Set[str]]:
    """The `prefix.NAME` keys of a table's first column (`a`, `b` in one cell count both)."""
    def read(text: str) -> Set[str]:
        cells = re.findall(r"^\| ([^|]+) \|", text, re.M)
        return {k for c in cells for k in re.findall(rf"`{re.escape(prefix)}\.([a-z0-9_]+)`", c)}
    return read


def _modules(package: str) -> Callable[[Path], Sequence[str]]:
    """The modules and sub-packages of selector/<package>/; of selector/engines/, those that are
    not one engine's own module (`<engine>.py` beside conf/engine/<engine>.yaml: the engine
    recipe adds one, and the row says so once)."""
    def names(root: Path = ROOT) -> Sequence[str]:
        engines = {p.stem for p in (root / "conf" / "engine").glob("*.yaml")} \
            if package == "engines" else set()
        return sorted(p.stem for p in (root / "selector" / package).iterdir()
                      if p.stem != "__init__" and p.stem not in engines
                      and (p.suffix == ".py" or (p / "__init__.py").is_file()))
    return names


def _layers(root: Path = ROOT) -> Sequence[str]:
    """tests/test_layers.py's LAYERS: the layers of selector/ the layering test enforces."""
    import ast
    tree = ast.parse((root / "tests" / "test_layers.py").read_text())
    node = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", "") == "LAYERS" for t in n.targets))
    return list(ast.literal_eval(node))


# the packages of selector/ (each a layer of docs/architecture.md's table, its modules in its
# row); not backends/, installed as selector.backends, whose floors docs/backends.md generates
ROOMS = tuple(sorted(p.name for p in (ROOT / "selector").iterdir()
                     if (p / "__init__.py").is_file() and p.name != "backends"))


def _schemas(root: Path = ROOT) -> Sequence[str]:
    return sorted(p.name for p in (root / "docs" / "schemas").glob("*.schema.json"))


def _generated(root: Path = ROOT) -> Sequence[str]:
    import importlib.util
    spec = importlib.util.spec_from_file_location("regen_files", ROOT / "tools" / "regen.py")
    assert spec is not None and spec.loader is not None
    regen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(regen)
    return sorted(regen.GENERATED)


def _schema_links(text: str) -> Set[str]:
    return set(re.findall(r"\]\(schemas/([\w.-]+\.schema\.json)\)", text))


def _pages(text: str) -> Set[str]:
    return {w for w in backticked(text) if w.endswith(".md")}


def _first_column(text: str) -> Set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", text, re.M))


RESTATED: List[Restated] = [
    Restated("docs/interface.md", "the outcomes of `explain --format json`", "- `outcome`: ",
             "\n- `candidates`", _outcomes, "selector/core/decision.py OUTCOMES",
             others=frozenset({"policy.strict"})),
    Restated("docs/interface.md", "the outcomes of exit code 1", "| `1` | nothing selected (outcome ",
             "; the explanation", lambda root: [o for o in _outcomes() if o != "selected"],
             "selector/core/decision.py OUTCOMES, less `selected`"),
    Restated("docs/interface.md", "a candidate's statuses", "`status` is ", ";\n  each reason",
             _statuses, "selector/core/schema.py Status"),
    Restated("docs/interface.md", "the note severities", "severities ", " (kinds:", _severities,
             "selector/core/notes.py SEVERITIES"),
    Restated("docs/interface.md", "the `layer` keys of the JSON", "- `layer`: the `layer.*` keys (",
             ");\n- `platform`", _layer_keys, "selector/core/layer.py LAYER_KEYS"),
    Restated("docs/interface.md", "the `engine` keys of the JSON",
             "- `engine` (only with an `engine=` other than `none`): ", ";\n", _engine_keys,
             "selector/core/engine_view.py EngineView", others=frozenset({"engine=", "none"})),
    Restated("docs/interface.md", "a backend's executions in `list --format json`", "`execution` (",
             ")", _executions, "selector/core/schema.py EXECUTIONS"),
    Restated("docs/interface.md", "the JSON Schemas", "| output | schema |", "\nA schema lists",
             _schemas, "docs/schemas/*.schema.json", read=_schema_links),
    Restated("docs/embedding.md", "the outcomes", "The four outcomes: ", " The JSON of", _outcomes,
             "selector/core/decision.py OUTCOMES", others=frozenset({"policy.strict=true", "reasons"})),
    Restated("docs/keys.md", "the `layer.*` keys", "| key | meaning |", "\n\n",
             _layer_keys, "selector/core/layer.py LAYER_KEYS", read=_keys("layer")),
    Restated("docs/keys.md", "the `policy.*` keys", "| key | meaning |", "\n\n",
             _conf_fields("PolicyConf"), "selector/core/schema.py PolicyConf", read=_keys("policy")),
    Restated("docs/keys.md", "the `parallel.*` keys", "| key | meaning |", "\n\n",
             _conf_fields("ParallelConf"), "selector/core/schema.py ParallelConf",
             read=_keys("parallel")),
    Restated("docs/architecture.md", "the layers of selector/", "| layer | package | what it holds |",
             "\n\n", _layers, "tests/test_layers.py LAYERS",
             read=lambda t: set(re.findall(r"^\| (\w+) \| `", t, re.M))),
    *[Restated("docs/architecture.md", f"the modules of selector/{room}/",
                f"| `selector/{room}/` | ", " |\n", _modules(room), f"selector/{room}/", extra=False)
      for room in ROOMS],
    Restated("docs/verify.md", "verify's statuses", "| status | meaning |", "\n\n", _verify_statuses,
             "selector/inspect/verify_cases.py STATUSES", read=_first_column),
    Restated("docs/maintaining.md", "the drift report's statuses", "is a top-level JSON `drift` list",
             "\n\n", _drift_statuses, "selector/inspect/drift.py STATUSES",
             read=lambda t: set(re.findall(r"^   - `(\w+)`:", t, re.M))),
    Restated("docs/maintaining.md", "the generated files", "| file | what writes it |",
             "\n\n", _generated, "tools/regen.py GENERATED", read=_pages),
]


def problems(root: Path = ROOT) -> List[str]:
    """One line per restated list that differs from the code's: the page, the list, what the
    page lacks and what it has that the code does not."""
    out = []
    for r in RESTATED:
        text = (root / r.page).read_text()
        if text.count(r.start) != 1:
            out.append(f"{r.page}: {r.what}: its start {r.start!r} is not in the page once "
                       "(tools/restated.py RESTATED)")
            continue
        rest = text[text.index(r.start) + len(r.start):]
        if r.end not in rest:
            out.append(f"{r.page}: {r.what}: its end {r.end!r} does not follow its start")
            continue
        found = r.read(rest[:rest.index(r.end)]) - r.others
        want = set(r.names(root))
        lacks, extra = sorted(want - found), sorted(found - want) if r.extra else []
        if lacks or extra:
            out.append(f"{r.page}: {r.what} differ from {r.source}: "
                       + "; ".join(([f"the page lacks {', '.join(lacks)}"] if lacks else [])
                                   + ([f"the code has no {', '.join(extra)}"] if extra else [])))
    return out
