"""Resolve a backend's `entry_point` ('module:Class') without letting a config reach any code.

Only the project's own `selector.backends` namespace and modules that an installed distribution
registers under the `selector.backends` entry-point group may be named; anything else is
refused before it is imported (a config file is data, not a way to run code).
"""
from __future__ import annotations

import csv
import importlib
import os
import stat
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from selector.core.errors import SelectorError

GROUP = "selector.backends"


@lru_cache(maxsize=1)
def plugin_modules() -> FrozenSet[str]:
    """Modules registered by installed distributions under the `selector.backends` group (read
    by selector.config.catalogues.scan: regular metadata files only, bounded, malformed ones skipped)."""
    return frozenset(value.partition(":")[0].strip() for _, value, _ in entry_points(GROUP))


def contained(exc: BaseException) -> bool:
    """Whether third-party code's exception is reported as a problem rather than propagated:
    everything, SystemExit and GeneratorExit included, except KeyboardInterrupt in the main
    thread (the operator's Ctrl-C still stops selector)."""
    return not (isinstance(exc, KeyboardInterrupt)
                and threading.current_thread() is threading.main_thread())


def allowed(path: str) -> bool:
    module = path.partition(":")[0]
    if module == "selector.backends" or module.startswith("selector.backends."):
        return True
    return any(module == m or module.startswith(m + ".") for m in plugin_modules())


def load_entry_point(path: str, key: str = "entry_point") -> Any:
    """The class an entry point names, imported only if its module is allowed."""
    if not allowed(path):
        raise SelectorError(f"{key}: {path!r} is outside the backends namespace; a backend's "
                            "implementation must live in `selector.backends.*` or in a module registered "
                            f"under the {GROUP!r} entry-point group of an installed package",
                            key=key, value=path)
    module, _, attr = path.partition(":")
    try:  # third-party code runs here: whatever it raises (SystemExit too) is reported
        mod = importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001
        if not contained(exc):
            raise
        raise SelectorError(f"{key}: {path!r} cannot be imported ({type(exc).__name__}: "
                            f"{exc})", key=key, value=path) from None
    try:
        return getattr(mod, attr)
    except BaseException as exc:  # noqa: BLE001 - a module __getattr__ is third-party code
        if not contained(exc):
            raise
        if isinstance(exc, AttributeError):
            raise SelectorError(f"{key}: module {module!r} has no attribute {attr!r}",
                                key=key, value=path) from None
        raise SelectorError(f"{key}: {path!r} cannot be looked up ({type(exc).__name__}: "
                            f"{exc})", key=key, value=path) from None


# -- reading installed distributions' metadata (regular files, bounded) --------------------

CATALOGUES_GROUP = "selector.catalogues"  # selector.config.catalogues.GROUP

BACKENDS_GROUP = "selector.backends"


MAX_METADATA_BYTES = 1 << 20  # an entry_points.txt or METADATA larger than this is refused


MAX_RECORD_BYTES = 64 << 20  # a RECORD (a large wheel lists thousands of files)


class _Malformed(Exception):
    """A metadata file selector will not read (the message says which and why)."""


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
                if raw is None or CATALOGUES_GROUP.encode() in raw or BACKENDS_GROUP.encode() in raw:
                    problems.append(f"{exc}; the distribution's selector entry points are "
                                    "skipped")
                continue
            if text is None or "selector." not in text:
                continue
            try:
                eps = parse_entry_points(text, where)
            except _Malformed as exc:
                if CATALOGUES_GROUP in text or BACKENDS_GROUP in text:
                    problems.append(f"{exc}; the distribution's selector entry points are "
                                    "skipped")
                continue
            if any(g in (CATALOGUES_GROUP, BACKENDS_GROUP) for g, _, _ in eps):
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
