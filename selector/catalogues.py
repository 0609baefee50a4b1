"""Catalogues from other packages: an installed distribution contributes backend files and presets
through the entry point group `selector.catalogues`.

An entry point's value is the dotted path of a directory inside the distribution laid out like
selector's `conf/` (`backend/<op>/<name>.yaml`, `platform/`, `stack/`, `layer/`, `policy/`):

    [project.entry-points."selector.catalogues"]
    mykernels = "mykernels.selector_conf"

Discovery reads metadata only: the distribution's file list (RECORD), or for an editable install
the location of its top-level package (`find_spec` of a top-level name imports nothing). The
contributing package is never imported here; its kernel classes are imported only where
selector imports any entry point (`check`, an engine building the backend), and only when they
are also registered under `selector.backends`. A contributed file may not reuse a packaged (or
an earlier contribution's) backend or preset name: it would silently replace it.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Tuple

from . import __version__
from .errors import SelectorError

if TYPE_CHECKING:  # pragma: no cover
    import importlib.metadata as md

    from .decision import Decision
    from .model import Catalogue

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


def _locate(ep: md.EntryPoint, dist: md.Distribution, dist_name: str) -> Path:
    value = ep.value.strip()
    where = f"distribution {dist_name!r}, entry point {GROUP}:{ep.name}"
    if not _DOTTED.match(value):
        raise SelectorError(f"{where}: {value!r} is not a dotted package path such as "
                            "'mykernels.selector_conf' (a directory laid out like conf/)",
                            key=f"{GROUP}:{ep.name}", value=value, where=where)
    parts = value.split(".")
    if dist.files:  # the RECORD: metadata only
        prefix = "/".join(parts) + "/"
        if any(str(f).replace("\\", "/").startswith(prefix) for f in dist.files):
            path = Path(str(dist.locate_file("/".join(parts))))
            if path.is_dir():
                return path.resolve()
    try:  # an editable install: where its top-level package lives (nothing is imported)
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = Path(loc).joinpath(*parts[1:])
        if path.is_dir():
            return path.resolve()
    raise SelectorError(f"{where}: the directory {value!r} is not installed (neither in the "
                        "distribution's file list nor under its top-level package)",
                        key=f"{GROUP}:{ep.name}", value=value, where=where)


def _declaring() -> List[Path]:
    """The metadata directories on sys.path whose entry_points.txt names the group.

    A plain text scan (about a millisecond for a few hundred distributions), so that a
    process with no contribution never imports importlib.metadata (tens of milliseconds).
    """
    found = []
    for entry in sys.path:
        try:
            listing = os.scandir(entry or ".")
        except OSError:
            continue
        with listing:
            for d in listing:
                if d.name.endswith((".dist-info", ".egg-info")):
                    try:
                        text = Path(d.path, "entry_points.txt").read_text(errors="replace")
                    except OSError:
                        continue
                    if f"[{GROUP}]" in text:
                        found.append(Path(d.path))
    return found


@lru_cache(maxsize=1)
def contributions() -> Tuple[Contribution, ...]:
    """Every installed contribution, sorted by distribution and entry point name; where one
    distribution is visible twice on sys.path, the first wins (as for imports)."""
    declaring = _declaring()
    if not declaring:
        return ()
    import importlib.metadata as md
    found: List[Contribution] = []
    seen = set()
    for path in declaring:
        dist = md.PathDistribution(path)
        name = dist.metadata["Name"] or path.name.partition("-")[0]
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        for ep in dist.entry_points:
            if ep.group == GROUP:
                found.append(Contribution(ep.name, ep.value.strip(), name, dist.version,
                                          _locate(ep, dist, name)))
    return tuple(sorted(found, key=lambda c: (c.distribution.lower(), c.entry_point)))


def _files(root: Path) -> Dict[str, Path]:
    """Contributable files of a conf-like directory, by path relative to it ('backend/moe/x')."""
    out: Dict[str, Path] = {}
    for sub in _CONTRIBUTABLE:
        d = root / sub
        if d.is_dir():
            for f in sorted(d.iterdir()):
                if f.suffix in (".yaml", ".yml") and f.is_file():
                    out[f"{sub}/{f.stem}"] = f
    return out


def contributed_dirs(packaged: Path) -> List[Path]:
    """The contributed directories, after refusing any file that reuses a packaged or an
    earlier contribution's backend or preset name (naming both origins)."""
    owners: Dict[str, Tuple[str, Path]] = {k: (packaged_origin(), f)
                                           for k, f in _files(packaged).items()}
    dirs = []
    for c in contributions():
        if c.path == packaged or c.path in dirs:
            continue
        for key, f in _files(c.path).items():
            if key in owners:
                origin, other = owners[key]
                what = "backend" if key.startswith("backend/") else "preset"
                group, _, name = key.rpartition("/")
                raise SelectorError(
                    f"{f}: {c.origin} contributes the {group.replace('/', ' ')} {what} "
                    f"{name!r}, which {origin} already defines ({other}); a contributed "
                    f"{what} needs a name of its own", key=key, value=str(f), where=str(f))
            owners[key] = (c.origin, f)
        dirs.append(c.path)
    return dirs


def packaged_origin() -> str:
    return f"packaged selector {__version__}"


def origin_of(file: str) -> str:
    """Where a config file came from: packaged, a distribution's catalogue, or a config dir."""
    from .config import packaged_conf_dir
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


def explained(catalogue: Catalogue, decision: Decision, fmt: str) -> Any:
    """`explain` output with each backend's origin, added when not every backend of the op is
    packaged (the packaged-only output stays as it was)."""
    op = decision.layer["op"]
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
