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

import csv
import os
import re
import stat
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple

from . import __version__
from .errors import SelectorError

if TYPE_CHECKING:  # pragma: no cover
    from packaging.version import Version

    from .decision import Decision
    from .model import Catalogue

GROUP = "selector.catalogues"
BACKENDS_GROUP = "selector.backends"
MAX_METADATA_BYTES = 1 << 20  # an entry_points.txt or METADATA larger than this is refused
MAX_RECORD_BYTES = 64 << 20  # a RECORD (a large wheel lists thousands of files)
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
# what a contributed directory may hold, as in conf/: backend files and presets
_CONTRIBUTABLE = ("backend/moe", "backend/linear", "platform", "stack", "layer", "policy")


class _Malformed(Exception):
    """A metadata file selector will not read (the message says which and why)."""


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


@dataclass(frozen=True)
class Dist:
    """One installed distribution's metadata directory, as far as selector reads it."""
    path: Path  # the *.dist-info / *.egg-info directory
    entry_points: Tuple[Tuple[str, str, str], ...]  # (group, name, value)

    def name_version(self) -> Tuple[str, str]:
        """Name and Version from METADATA (PKG-INFO), else from the directory's name."""
        stem = self.path.name.rsplit(".", 1)[0]
        name, _, version = stem.partition("-")
        for meta in ("METADATA", "PKG-INFO"):
            try:
                text = read_metadata(self.path, meta)
            except _Malformed:
                continue
            if text is None:
                continue
            got = _headers(text)
            return got.get("name") or name, got.get("version") or version or "unknown"
        return name, version or "unknown"

    def files(self) -> Optional[List[str]]:
        """The RECORD's paths (installed-files.txt for an egg), or None when unreadable."""
        try:
            text = read_metadata(self.path, "RECORD", MAX_RECORD_BYTES)
        except _Malformed:
            return None
        if text is None:
            return None
        try:
            return [row[0] for row in csv.reader(text.splitlines()) if row]
        except csv.Error:
            return None


def read_metadata(dist_dir: Path, name: str, limit: int = MAX_METADATA_BYTES) -> Optional[str]:
    """One metadata file's text, or None when it does not exist. Only a regular file of at most
    `limit` bytes is opened (non-blocking, checked again once open), and it must be UTF-8;
    anything else raises _Malformed naming the file."""
    p = dist_dir / name
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:
        raise _Malformed(f"{p}: cannot be read ({exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _Malformed(f"{p}: is not a regular file (a FIFO, socket, device or directory)")
    if st.st_size > limit:
        raise _Malformed(f"{p}: is {st.st_size} bytes, over the {limit} byte limit "
                         "for a metadata file")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise _Malformed(f"{p}: cannot be read ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between stat and open
            raise _Malformed(f"{p}: is not a regular file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _Malformed(f"{p}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise _Malformed(f"{p}: grew over the {limit} byte limit while read")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Malformed(f"{p}: is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _headers(text: str) -> Dict[str, str]:
    """The first Name and Version headers of a METADATA file (RFC 822 style)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        k = key.strip().lower()
        if sep and k in ("name", "version") and k not in out and value.strip():
            out[k] = value.strip()
    return out


def parse_entry_points(text: str, where: Path) -> Tuple[Tuple[str, str, str], ...]:
    """`[group]` and `name = value` lines (comments and blank lines skipped) as
    (group, name, value); anything else raises _Malformed naming the line."""
    out: List[Tuple[str, str, str]] = []
    group: Optional[str] = None
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        if s.startswith("["):
            if not s.endswith("]") or not s[1:-1].strip():
                raise _Malformed(f"{where} line {i}: {line[:80]!r} is not a [group] header")
            group = s[1:-1].strip()
            continue
        name, eq, value = s.partition("=")
        if group is None or not eq or not name.strip() or not value.strip():
            raise _Malformed(f"{where} line {i}: {line[:80]!r} is not 'name = value' under a "
                             "[group] header")
        out.append((group, name.strip(), value.strip()))
    return tuple(out)


@lru_cache(maxsize=1)
def scan() -> Tuple[Tuple[Dist, ...], Tuple[str, ...]]:
    """Every metadata directory on sys.path that declares entry points, and the problems of
    those selector skipped (only the ones that concern selector: a file it cannot read safely,
    or an unparsable one that names one of selector's groups). A plain scan, about a
    millisecond for a few hundred distributions: importlib.metadata is never imported."""
    found: List[Dist] = []
    problems: List[str] = []
    for entry in sys.path:
        try:
            listing = os.scandir(entry or ".")
        except (OSError, ValueError, TypeError):
            continue
        with listing:
            names = sorted((d.name, d.path) for d in listing
                           if d.name.endswith((".dist-info", ".egg-info")))
        for _name, path in names:
            where = Path(path) / "entry_points.txt"
            try:
                text = read_metadata(Path(path), "entry_points.txt")
            except _Malformed as exc:
                raw = _peek(where)
                if raw is None or GROUP.encode() in raw or BACKENDS_GROUP.encode() in raw:
                    problems.append(f"{exc}; the distribution's selector entry points are "
                                    "skipped")
                continue
            if text is None or "selector." not in text:
                continue
            try:
                eps = parse_entry_points(text, where)
            except _Malformed as exc:
                if GROUP in text or BACKENDS_GROUP in text:
                    problems.append(f"{exc}; the distribution's selector entry points are "
                                    "skipped")
                continue
            if any(g in (GROUP, BACKENDS_GROUP) for g, _, _ in eps):
                found.append(Dist(Path(path), eps))
    return tuple(found), tuple(problems)


def _peek(p: Path) -> Optional[bytes]:
    """The bytes of a regular file that is too large or not UTF-8 (bounded), else None."""
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            return None
        with open(p, "rb") as f:
            return f.read(MAX_METADATA_BYTES)
    except OSError:
        return None


def entry_points(group: str) -> List[Tuple[str, str, Dist]]:
    """(name, value, distribution) of every entry point of `group` that scan() accepted."""
    return [(n, v, d) for d in scan()[0] for g, n, v in d.entry_points if g == group]


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
    from .entry_points import plugin_modules
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
    from .text import printable
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
    from .config.dirs import ConfigTree
    from .config.presets import lint_tree
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
    from .config.composer import read_backend
    from .model import engine_name_clashes, make_backend
    backends = []
    for (op, name), path in sorted(tree.backend_files.items()):
        backends.append(make_backend(op, name, read_backend(path, f"catalogue.{op}.{name}"),
                                     str(path)))
    clash = engine_name_clashes(backends, c.path)
    if clash:
        raise SelectorError(clash[0])
    return mine


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


def present(files: Iterable[Any]) -> Dict[str, Version]:
    """{canonical distribution name: version} of each distribution whose contributed catalogue
    holds one of `files`: a catalogue that is loaded comes from an installed distribution, so
    that distribution is present whatever platform preset is chosen."""
    if not contributions():
        return {}
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version
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
        b = catalogue.get(decision.layer["op"], decision.selected)
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
