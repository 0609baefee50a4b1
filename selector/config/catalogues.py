"""Catalogues from other packages: an installed distribution contributes backend files and presets
through the entry point group `selector.catalogues`.

An entry point's value is the dotted path of a directory inside the distribution laid out like
selector's `conf/` (`backend/<op>/<name>.yaml`, `platform/`, `stack/`, `layer/`, `policy/`):

    [project.entry-points."selector.catalogues"]
    mykernels = "mykernels.selector_conf"

Discovery reads metadata only, and reads it defensively (`scan()`): an `entry_points.txt`,
`METADATA` or `RECORD` is opened only when it is a regular file of at most
`MAX_METADATA_BYTES`, never blocking (a FIFO is never opened), and decoded as strict UTF-8; a
file that fails any of this, or an `entry_points.txt` that is not `[group]` / `name = value`
lines, is reported and its distribution skipped. The contributing package is never imported
here; its kernel classes are imported only where selector imports any entry point (`check`, an
engine building the backend), and only when they are also registered under `selector.backends`.

A contributed catalogue is checked on its own before it joins the search path
(`contributed_dirs`): its files as `check` reads them (kind, size, safe YAML, preset scope, every
backend file validated), no backend or preset name that the packaged catalogue (or an earlier
contribution) already uses, and no engine name that another backend of the op claims. A
catalogue that fails is left out with one problem naming the distribution, the file and the key:
the built-in backends still answer (`explain` warns on stderr) and `check` fails on it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from selector.config.dirs import ConfigTree, user_dir
from selector.core.entry_points import (
    Dist,
    scan,
)
from selector.core.errors import SelectorError
from selector.core.packaged import packaged_conf_dir
from selector.core.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from packaging.version import Version

    from selector.core.decision import Decision
    from selector.core.model import Catalogue

GROUP = "selector.catalogues"
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
# what a contributed directory may hold, as in conf/: backend files and presets
_CONTRIBUTABLE = ("backend/moe", "backend/linear", "platform", "stack", "layer", "policy")




@dataclass(frozen=True)
class Contribution:
    entry_point: str  # the entry point's name
    value: str  # the dotted path of the directory
    distribution: str
    version: str
    path: Path

    @property
    def origin(self) -> str:
        return f"{self.distribution} {self.version} via entry point {GROUP}:{self.entry_point}"
















def _locate(name: str, value: str, dist: Dist, dist_name: str) -> Path:
    where = f"distribution {dist_name!r} ({dist.path}), entry point {GROUP}:{name}"
    if not _DOTTED.match(value):
        raise SelectorError(f"{where}: {value!r} is not a dotted package path such as "
                            "'mykernels.selector_conf' (a directory laid out like conf/)",
                            key=f"{GROUP}:{name}", value=value, where=where)
    parts = value.split(".")
    files = dist.files()
    if files:  # the RECORD: metadata only
        prefix = "/".join(parts) + "/"
        if any(f.replace("\\", "/").startswith(prefix) for f in files):
            path = dist.path.parent.joinpath(*parts)
            if path.is_dir():
                return path.resolve()
    import importlib.util
    try:  # an editable install: where its top-level package lives (nothing is imported)
        spec = importlib.util.find_spec(parts[0])
    except Exception:  # noqa: BLE001 - an installed import hook's failure: not installed
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = Path(loc).joinpath(*parts[1:])
        if path.is_dir():
            return path.resolve()
    raise SelectorError(f"{where}: the directory {value!r} is not installed (neither in the "
                        "distribution's file list nor under its top-level package)",
                        key=f"{GROUP}:{name}", value=value, where=where)


@lru_cache(maxsize=1)
def _contributions() -> Tuple[Tuple[Contribution, ...], Tuple[str, ...]]:
    dists, problems = scan()
    found: List[Contribution] = []
    out_problems = list(problems)
    seen = set()
    for dist in dists:
        mine = [(n, v) for g, n, v in dist.entry_points if g == GROUP]
        if not mine:
            continue
        name, version = dist.name_version()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:  # one distribution visible twice on sys.path: the first wins
            continue
        seen.add(key)
        for ep, value in mine:
            try:
                found.append(Contribution(ep, value, name, version, _locate(ep, value, dist,
                                                                            name)))
            except SelectorError as exc:
                out_problems.append(f"{exc}; its catalogue is left out")
    return (tuple(sorted(found, key=lambda c: (c.distribution.lower(), c.entry_point))),
            tuple(out_problems))


def contributions() -> Tuple[Contribution, ...]:
    """Every installed contribution that could be located, sorted by distribution and entry
    point name; where one distribution is visible twice on sys.path, the first wins (as for
    imports)."""
    return _contributions()[0]


def reset() -> None:
    """Forget what discovery found (tests that install or remove distributions)."""
    scan.cache_clear()
    _contributions.cache_clear()
    _WARNED.clear()
    _CHECKED.clear()
    from selector.core.entry_points import plugin_modules
    plugin_modules.cache_clear()


def _files(root: Path) -> Dict[str, Path]:
    """Contributable files of a conf-like directory, by path relative to it ('backend/moe/x')."""
    out: Dict[str, Path] = {}
    for sub in _CONTRIBUTABLE:
        d = root / sub
        if d.is_dir():
            for f in sorted(d.iterdir()):
                if f.suffix in (".yaml", ".yml") and not f.is_dir():
                    out[f"{sub}/{f.stem}"] = f
    return out


def contributed_dirs(packaged: Path) -> List[Path]:
    """The contributed directories that pass their checks (see the module docstring)."""
    return scan_catalogues(packaged)[0]


def scan_catalogues(packaged: Path) -> Tuple[List[Path], Tuple[str, ...]]:
    """(the contributed directories that pass their checks, in order; a problem per
    distribution or catalogue left out, naming it, the file and the key)."""
    owners: Dict[str, Tuple[str, Path]] = {k: (packaged_origin(), f)
                                           for k, f in _files(packaged).items()}
    dirs: List[Path] = []
    problems = list(_contributions()[1])
    for c in contributions():
        if c.path == packaged or c.path in dirs:
            continue
        try:
            mine = _checked(c, packaged, dirs, owners)
        except SelectorError as exc:
            problems.append(f"{c.origin} ({c.path}): {exc}; this catalogue is left out "
                            "(`selector check` lists it)")
            continue
        owners.update(mine)
        dirs.append(c.path)
    _warn(problems)
    return dirs, tuple(problems)


_WARNED: set[str] = set()
# where a left-out catalogue is reported: the CLI prints to stderr; else the `selector` logger
# (the engine's log inside vLLM)
WARN: Optional[Callable[[str], None]] = None


def _warn(problems: Iterable[str]) -> None:
    """Each problem once per process."""
    from selector.core.text import printable
    for p in problems:
        if p not in _WARNED:
            _WARNED.add(p)
            if WARN is not None:
                WARN(printable(p))
            else:
                import logging
                logging.getLogger("selector").warning("selector: warning: %s", printable(p))


# contributions already checked, by everything the check reads (bounded: cleared when full)
_CHECKED: Dict[Tuple[Any, ...], Any] = {}


def _signature(root: Path) -> Tuple[Tuple[str, int, int, int], ...]:
    """Every file under root with its inode, size and modification time: a checked catalogue
    is checked again only when one of them changes."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames + dirnames):
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            out.append((os.path.join(dirpath, name), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _checked(c: Contribution, packaged: Path, accepted: List[Path],
             owners: Dict[str, Tuple[str, Path]]) -> Dict[str, Tuple[str, Path]]:
    """_check_contribution, remembered while none of the files it reads changes."""
    key = (c, packaged, tuple(accepted), _signature(c.path), _signature(packaged),
           tuple(_signature(a) for a in accepted))
    got = _CHECKED.get(key)
    if got is None:
        try:
            got = _check_contribution(c, packaged, accepted, owners)
        except SelectorError as exc:
            got = exc
        if len(_CHECKED) >= 64:
            _CHECKED.clear()
        _CHECKED[key] = got
    if isinstance(got, SelectorError):
        raise got
    return dict(got)


def _check_contribution(c: Contribution, packaged: Path, accepted: List[Path],
                        owners: Dict[str, Tuple[str, Path]]) -> Dict[str, Tuple[str, Path]]:
    """A contributed catalogue checked as `check` checks a config dir (raises SelectorError)."""
    from selector.config.presets import lint_tree
    mine: Dict[str, Tuple[str, Path]] = {}
    for key, f in _files(c.path).items():
        if key in owners:
            origin, other = owners[key]
            what = "backend" if key.startswith("backend/") else "preset"
            group, _, name = key.rpartition("/")
            raise SelectorError(
                f"{f}: {c.origin} contributes the {group.replace('/', ' ')} {what} "
                f"{name!r}, which {origin} already defines ({other}); a contributed "
                f"{what} needs a name of its own", key=key, value=str(f), where=str(f))
        mine[key] = (c.origin, f)
    tree = ConfigTree.from_dirs([packaged, *accepted, c.path])
    lint_tree(tree, only=c.path)
    from selector.config.composer import read_backend, read_engine_backends
    from selector.core.engines import join_homes
    from selector.core.model import engine_name_clashes, make_backend
    backends: Dict[str, List[Any]] = {}
    for (op, name), path in sorted(tree.backend_files.items()):
        backends.setdefault(op, []).append(make_backend(
            op, name, read_backend(path, f"catalogue.{op}.{name}"), str(path)))
    joined = join_homes(backends, read_engine_backends(tree))  # with the engines' own names
    clash = engine_name_clashes([b for bs in joined.values() for b in bs], c.path)
    if clash:
        raise SelectorError(clash[0])
    return mine


def packaged_origin() -> str:
    return f"packaged selector {__version__}"


def origin_of(file: str) -> str:
    """Where a config file came from: packaged, a distribution's catalogue, or a config dir."""
    from selector.core.packaged import packaged_conf_dir
    p = Path(file).resolve()
    if packaged_conf_dir().resolve() in p.parents:
        return packaged_origin()
    for c in contributions():
        if c.path in p.parents:
            return c.origin
    root = p.parents[2] if p.parent.parent.name == "backend" else p.parent.parent
    return f"config dir {root}"


def origins(files: Iterable[Tuple[str, str]]) -> Dict[str, str]:
    """{backend: origin} for (backend, file) pairs."""
    return {name: origin_of(f) for name, f in files}


def present(files: Iterable[Any]) -> Dict[str, Version]:
    """{canonical distribution name: version} of each distribution whose contributed catalogue
    holds one of `files`: a catalogue that is loaded comes from an installed distribution, so
    that distribution is present whatever platform preset is chosen."""
    if not contributions():
        return {}
    from packaging.version import InvalidVersion, Version

    from selector.core.versions import canonicalize_name
    paths = [Path(str(f)).resolve() for f in files]
    out: Dict[str, Version] = {}
    for c in contributions():
        if any(c.path in p.parents for p in paths):
            try:
                out[canonicalize_name(c.distribution)] = Version(c.version)
            except InvalidVersion:
                continue
    return out


def plugin_origin(catalogue: Catalogue, decision: Decision) -> Optional[str]:
    """Where the selected backend comes from when it is not packaged, else None."""
    if decision.selected is None:
        return None
    try:
        b = catalogue.get(decision.layer.op, decision.selected)
    except KeyError:
        return None
    origin = origin_of(b.file)
    return None if origin == packaged_origin() else origin


def marked_line(catalogue: Catalogue, decision: Decision, line: str) -> str:
    """A log line, with `[from <origin>]` when the selected backend is not packaged."""
    origin = plugin_origin(catalogue, decision)
    return line if origin is None else f"{line} [{decision.selected} from {origin}]"


def explained(catalogue: Catalogue, decision: Decision, fmt: str) -> Any:
    """`explain` output with each backend's origin, added when not every backend of the op is
    packaged (the packaged-only output stays as it was)."""
    op = decision.layer.op
    found = origins((b.name, b.file) for b in catalogue.backends[op])
    foreign = {n: o for n, o in found.items() if o != packaged_origin()}
    if fmt == "json":
        obj = decision.to_dict()
        if foreign:
            obj["origins"] = found
        return obj
    text = str(decision)
    if foreign:
        text += "\norigins: " + "; ".join(f"{n} from {o}" for n, o in foreign.items()) + \
            f"; every other {op} backend from {packaged_origin()}"
    return text


def search_path(user_dirs: Sequence[object]) -> List[Path]:
    """The config dirs in lookup order: packaged, then those installed distributions contribute
    (entry-point group `selector.catalogues`), then each user dir (resolved, once)."""
    return _search_path(user_dirs)[0]


def _search_path(user_dirs: Sequence[object]) -> Tuple[List[Path], Tuple[str, ...]]:
    """search_path() and the problems of the contributed catalogues it left out."""
    dirs = [packaged_conf_dir()]
    contributed, left_out = scan_catalogues(dirs[0])
    dirs.extend(d for d in contributed if d not in dirs)
    for d in user_dirs:
        p = user_dir(d)
        if p not in dirs:
            dirs.append(p)
    return dirs, left_out


def discover(user_dirs: Sequence[object] = ()) -> ConfigTree:
    """The config tree of a run: the packaged conf/, the installed distributions' catalogues
    (each checked, a broken one left out with its problem), then the user's dirs."""
    dirs, left_out = _search_path(user_dirs)
    return ConfigTree.from_dirs(dirs, left_out)
