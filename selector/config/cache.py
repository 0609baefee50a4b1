"""The composed-config cache: one JSON file per (config files, schema, loader, overrides).

A repeated run answers without importing Hydra. The cache is untrusted input like any config:
an entry is used only when it has the expected envelope and shape (the caller then validates
its values as it would fresh data, and composes afresh on any mismatch); the directory must
belong to the user and be writable by nobody else (as ssh treats ~/.ssh); it holds at most
MAX_ENTRIES files, the oldest removed first.
"""
from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from selector.config.dirs import ConfigTree
from selector.config.safe_yaml import check_plain, read_config_bytes
from selector.core import env_vars, schema
from selector.core.errors import SelectorError

CACHE_FORMAT = 4  # 3: the tree's engine names (data["engines"]); 4: their homes' entries
MAX_ENTRIES = 256  # about 60 KB each: at most ~15 MB on disk
MAX_ENTRY_BYTES = 8 * 1024 * 1024
_TOP_KEYS = frozenset(f for f in schema.SelectorConf.__dataclass_fields__) | {
    "catalogue", "explicit", "engines", "engine_backends"}


def sha256(data: bytes) -> Any:
    """A SHA-256 hash object from the interpreter's own implementation (`_sha2` from Python
    3.12, `_sha256` before): `hashlib` loads OpenSSL's libcrypto on import, a few milliseconds
    of every cold start for the few hundred kilobytes hashed here. The same digest."""
    import importlib
    for name in ("_sha2", "_sha256"):
        try:
            return importlib.import_module(name).sha256(data)
        except (ImportError, AttributeError):
            continue
    import hashlib  # an interpreter built without them
    return hashlib.sha256(data)


def _code(h: Any) -> None:
    """The code an entry depends on, into the hash `h`: the schema, the validation of plain
    data and this package's modules (a new selector version never reads a stale entry)."""
    h.update(Path(schema.__file__).read_bytes())
    h.update(Path(schema.__file__).with_name("validation.py").read_bytes())
    for module in sorted(Path(__file__).parent.glob("*.py")):
        h.update(module.read_bytes())


def fingerprint(tree: ConfigTree, overrides: Sequence[str]) -> str:
    """The cache key: the content of every config file, the schema, this package's code, and
    the overrides (so a changed file or a new selector version never reads a stale entry)."""
    h = sha256(f"format={CACHE_FORMAT}".encode())
    _code(h)
    for f in tree.files():
        h.update(str(f).encode("utf-8", "surrogateescape") + b"\0" + read_config_bytes(f) + b"\0")
    h.update(json.dumps(list(overrides)).encode())
    return str(h.hexdigest())


def directory() -> Optional[Path]:
    """The cache directory, or None when caching is off; refused if others can write it."""
    d = env_vars.cache_dir()
    if d is None:
        return None
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return d  # created, private, on the first write
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(d)
        except OSError:
            return None
    if not stat.S_ISDIR(st.st_mode):
        raise SelectorError(f"cache directory {d} is not a directory: remove it, set "
                            "SELECTOR_CACHE_DIR elsewhere, or SELECTOR_NO_CACHE=1")
    if (hasattr(os, "getuid") and st.st_uid != os.getuid()) or st.st_mode & 0o022:
        raise SelectorError(f"cache directory {d} can be written by other users (mode "
                            f"{stat.S_IMODE(st.st_mode):o}, owner uid {st.st_uid}): whoever "
                            f"writes it changes selector's answers; run 'chmod go-w {d}' as its "
                            "owner, set SELECTOR_CACHE_DIR to a private directory, or "
                            "SELECTOR_NO_CACHE=1")
    return d


def read_json(path: Path, max_bytes: int, what: str = "cache entry") -> Optional[Any]:
    """The one read of every cache file (the composed configs here, verify's results): the
    parsed JSON of ``path``, or None. Only a regular file owned by this user, at most
    ``max_bytes``, is read: the file is opened without following a symlink and without
    blocking (a FIFO or a device there is refused by ``fstat`` before any read, never waited
    on), then parsed. A missing file is None silently; anything else that is not a readable
    JSON file is None with a note (the caller recomputes and rewrites the entry). The caller
    checks the document's schema and calls :func:`bad_entry` when it does not fit."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | \
        getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        bad_entry(path, f"cannot be opened ({exc.strerror or exc})", what)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            bad_entry(path, "is not a regular file", what)
            return None
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            bad_entry(path, f"belongs to uid {st.st_uid}, not this user", what)
            return None
        if st.st_size > max_bytes:
            bad_entry(path, f"has {st.st_size} bytes (at most {max_bytes})", what)
            return None
        chunks, left = [], max_bytes + 1
        while left > 0:
            try:
                b = os.read(fd, min(left, 1 << 20))
            except BlockingIOError:
                break
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        text = b"".join(chunks)
        if len(text) > max_bytes:
            bad_entry(path, f"grew past {max_bytes} bytes while read", what)
            return None
        doc = json.loads(text)
        if doc is None:  # `null`: not "no file", a file that holds no entry
            bad_entry(path, "holds JSON null, not an entry", what)
        return doc
    except (OSError, ValueError, RecursionError) as exc:
        bad_entry(path, f"is not JSON ({type(exc).__name__})", what)
        return None
    finally:
        os.close(fd)


def bad_entry(path: Path, why: str, what: str = "cache entry") -> None:
    """The note for a cache file ignored (once per process and file): recomputed, rewritten.
    Through the warning channel of catalogues.py when it is loaded (the CLI prints it to
    stderr), else the `selector` logger (catalogues.py imports the composer, which imports
    this module: looked up, not imported)."""
    import sys
    note = (f"{what} {path} {why}: ignored (recomputed, and rewritten where the cache is "
            "writable)")
    cat = sys.modules.get("selector.config.catalogues")
    if cat is not None:
        cat._warn([note])
        return
    import logging

    from selector.core.text import printable
    logging.getLogger("selector").warning("selector: warning: %s", printable(note))


def get(d: Path, key: str) -> Optional[Dict[str, Any]]:
    """The cached data for key, if it is there and has the shape of composed data."""
    data = get_side(d, key, "composed-config cache entry")
    if data is None:
        return None
    try:
        check_shape(data)
    except SelectorError as exc:
        bad_entry(d / f"{key}.json", f"does not fit the schema ({exc})", "composed-config cache entry")
        return None
    return data


def side_key(kind: str, files: Sequence[Tuple[Path, bytes]]) -> str:
    """The key of an entry other than a composed config (`kind`: what it holds, e.g. the
    stack presets' data): the content of the files it is read from, and selector's code."""
    h = sha256(f"format={CACHE_FORMAT};{kind}".encode())
    _code(h)
    for path, data in files:
        h.update(str(path).encode("utf-8", "surrogateescape") + b"\0" + data + b"\0")
    return f"{kind}-{str(h.hexdigest())}"


def get_side(d: Path, key: str, what: str = "cache entry") -> Optional[Dict[str, Any]]:
    """The data of an entry (a composed config's or a side_key one), if it has the envelope
    put() writes; `what` names it in a warning. The caller checks the data itself, as it would
    fresh data."""
    path = d / f"{key}.json"
    entry = read_json(path, MAX_ENTRY_BYTES, what)
    if entry is None:
        return None
    if not (isinstance(entry, dict) and entry.get("format") == CACHE_FORMAT and
            entry.get("key") == key and isinstance(entry.get("data"), dict)):
        bad_entry(path, "has not the envelope this version writes", what)
        return None
    data: Dict[str, Any] = entry["data"]
    return data


def check_shape(data: Dict[str, Any]) -> None:
    """What composition always gives: the schema's top-level keys, mappings where the schema
    has mappings, a catalogue of {op: {name: mapping}}, and only JSON-plain values."""
    if set(data) != _TOP_KEYS:
        raise SelectorError(f"composed config has keys {sorted(data)}")
    for k in ("platform", "layer", "policy", "engine"):
        if not isinstance(data[k], dict):
            raise SelectorError(f"composed config: {k} is not a mapping")
    cat = data["catalogue"]
    if not (isinstance(cat, dict) and set(cat) == set(schema.OPS) and
            all(isinstance(v, dict) and all(isinstance(c, dict) for c in v.values())
                for v in cat.values())):
        raise SelectorError("composed config: the catalogue is not {op: {name: mapping}}")
    for k in ("explicit", "engines"):
        if not (isinstance(data[k], list) and all(isinstance(x, str) for x in data[k])):
            raise SelectorError(f"composed config: {k} is not a list of names")
    check_plain(data, "")


def put(d: Path, key: str, data: Dict[str, Any]) -> None:
    """Write atomically (a private temporary file, then rename), then prune to MAX_ENTRIES."""
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = d / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"format": CACHE_FORMAT, "key": key, "data": data}, fh, sort_keys=True)
        os.replace(tmp, d / f"{key}.json")
        _prune(d)
    except (OSError, ValueError):
        pass  # a cache that cannot be written only costs time


def _prune(d: Path) -> None:
    entries = []
    for p in d.glob("*.json"):
        try:
            entries.append((p.stat().st_mtime, p.name, p))
        except OSError:
            continue
    for _, _, p in sorted(entries)[:max(0, len(entries) - MAX_ENTRIES)]:
        try:
            p.unlink()
        except OSError:
            pass
