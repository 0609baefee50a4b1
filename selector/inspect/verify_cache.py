"""verify's cache: results per platform fingerprint (``VerifyCache``), keyed by the backend's
definition and the case (``entry_key``). ``selector.inspect.verify`` reads and writes it.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform as _platform
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

from selector.inspect.verify_cases import (
    CHILD,
    FINE_MEASURES,
    STATUSES,
    VERSION,
    Bound,
    Case,
    Result,
    _finite,
    _worst,
)

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.model import BackendSpec, RunConfig

MAX_FILES = 16  # fingerprints (machines and stacks) kept; the oldest go first
MAX_ENTRIES = 512  # results per fingerprint
MAX_BYTES = 4 << 20  # a larger file is not read


def _cache_root() -> Optional[Path]:
    from selector.config.cache import directory
    base = directory()
    return None if base is None else base / "verify"


def fingerprint(run: RunConfig) -> Tuple[str, Dict[str, Any]]:
    """A key for this machine and stack: what a kernel's behaviour can depend on."""
    import importlib.metadata as md

    from selector.core import env_vars
    from selector.inspect import environment
    from selector.inspect.environment import EXTRA_PACKAGES
    gpu = environment.detect_gpu()
    p = run.platform
    pkgs = {n: None if v is None else str(v) for n, v in p.packages}
    for n, v in environment.installed_versions(EXTRA_PACKAGES).items():
        pkgs.setdefault(n, None if v is None else str(v))
    try:
        own = md.version("selector")
    except md.PackageNotFoundError:
        own = None
    data = {"gpu": gpu.name, "capability": list(gpu.capability) if gpu.capability else None,
            "gpu_count": gpu.count, "driver": gpu.driver,
            "cuda": None if p.cuda is None else str(p.cuda), "packages": dict(sorted(pkgs.items())),
            "python": sys.version.split()[0], "machine": _platform.machine(),
            "visible_devices": env_vars.visible_devices(), "selector": own,
            "version": VERSION}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:24]
    return digest, data


def _file_digest(path: Path) -> bytes:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return b""


def _package_dir(module: str) -> Optional[Path]:
    """Where `module`'s top-level package (selector.backends for selector.backends.*) lives,
    found by file name without importing it: installed under selector/, or beside it in a
    checkout (pyproject maps backends/ onto selector.backends)."""
    parts = module.split(".")
    if parts[0] == "selector" and len(parts) > 1:
        here = Path(__file__).resolve().parent
        for candidate in (here / parts[1], here.parent / parts[1]):
            if (candidate / "__init__.py").is_file():
                return candidate
        return None
    for entry in sys.path:
        base = Path(entry or os.getcwd())
        if (base / parts[0] / "__init__.py").is_file() or (base / f"{parts[0]}.py").is_file():
            return base / parts[0] if (base / parts[0]).is_dir() else base / f"{parts[0]}.py"
    return None


def code_digest(module: str) -> bytes:
    """A digest of the files of `module`'s top-level package: a result is stale once the code
    that produced it changes."""
    h = hashlib.sha256()
    where = _package_dir(module)
    if where is None:
        return h.digest()
    files = sorted(where.rglob("*.py")) if where.is_dir() else [where]
    for f in files:  # name, size and mtime: cheap for a package of thousands of files
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"{f.relative_to(where.parent)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.digest()


def entry_key(b: BackendSpec, case: Case) -> str:
    """A result's key: the backend's definition (its YAML's bytes, entry point, the code of its
    package and of the child) and the case."""
    h = hashlib.sha256()
    h.update(json.dumps({"op": b.op, "backend": b.name, "entry_point": b.entry_point,
                         "execution": b.execution, "case": case.spec(), "child": CHILD},
                        sort_keys=True).encode())
    h.update(_file_digest(Path(b.file)))
    for module in dict.fromkeys((CHILD.partition(":")[0], str(b.entry_point).partition(":")[0])):
        h.update(code_digest(module))
    return h.hexdigest()[:32]


_RESULT_FIELDS: Dict[str, Union[type, Tuple[type, ...]]] = {
    "backend": str, "op": str, "scheme": (str, type(None)), "status": str, "detail": str}


def _result_from(d: Any) -> Optional[Result]:
    """A cached Result, or None when the entry is not one this version wrote."""
    if not isinstance(d, dict) or d.get("status") not in STATUSES:
        return None
    if any(not isinstance(d.get(k), t) for k, t in _RESULT_FIELDS.items()):
        return None
    if len(d["detail"]) > 4000:
        return None
    nums = {k: d.get(k) for k in ("max_rel_err", "rms_rel_err", "seconds", "timeout_s")}
    if any(v is not None and _finite(v) is None for v in nums.values()):
        return None
    b = d.get("bound")
    bound = None
    if isinstance(b, dict) and _finite(b.get("max_rel_err")) and _finite(b.get("rms_rel_err")):
        bound = Bound(float(b["max_rel_err"]), float(b["rms_rel_err"]),
                      _finite(b.get("gain_err")) or math.inf,
                      *(_finite(b.get(n)) or math.inf for n, _ in FINE_MEASURES))
    worst = _worst(d.get("worst"))
    act = d.get("activation") if isinstance(d.get("activation"), str) else None
    gated = d.get("act_and_mul") if isinstance(d.get("act_and_mul"), bool) else None
    key = d.get("key")
    key_t = tuple(key) if isinstance(key, list) and len(key) == 4 and all(
        v is None or isinstance(v, (str, bool)) for v in key) else None
    gain = d.get("gain_err")
    return Result(d["backend"], d["op"], d["scheme"], d["status"], d["detail"],
                  nums["max_rel_err"], nums["rms_rel_err"], nums["seconds"], act, gated, bound,
                  d.get("device") if isinstance(d.get("device"), str) else None, worst,
                  nums["timeout_s"], cached=True,
                  gain_err=None if gain is None else _finite(gain),
                  case=d["case"] if isinstance(d.get("case"), str) else "", key=key_t,
                  unverified=d.get("unverified") is True,
                  **{n: _finite(d.get(n)) for n, _ in FINE_MEASURES})


class VerifyCache:
    """Results per platform fingerprint, in `<cache dir>/verify/<fingerprint>.json`.

    Bounded: MAX_FILES fingerprints (least recently written dropped), MAX_ENTRIES results each,
    files over MAX_BYTES ignored. Safe: the directory is private (0700), files are written to a
    temporary file and renamed (a reader never sees half a file), merged under an advisory lock,
    read without following symlinks and only when owned by this user; every entry is validated
    and a malformed one is recomputed. Any OS error only disables the cache.
    """

    def __init__(self, digest: str, data: Dict[str, Any], root: Optional[Path]):
        """root None: no cache (nothing read or written)."""
        self.digest, self.data, self.root = digest, data, root
        self.path = None if root is None else root / f"{digest}.json"
        self.entries: Dict[str, Dict[str, Any]] = self._read()

    def _read(self) -> Dict[str, Dict[str, Any]]:
        if self.path is None:
            return {}
        from selector.config.cache import bad_entry, read_json  # the one cache read
        doc = read_json(self.path, MAX_BYTES, "verify cache file")
        if doc is None:
            return {}
        if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(
                doc.get("entries"), dict):
            return {}
        good = {k: v for k, v in doc["entries"].items() if isinstance(k, str) and isinstance(
            v, dict) and _finite(v.get("stored")) is not None and _result_from(v.get("result"))}
        if len(good) < len(doc["entries"]):
            bad_entry(self.path, f"has {len(doc['entries']) - len(good)} malformed entries")
        return good

    def get(self, key: str, timeout: float) -> Optional[Result]:
        e = self.entries.get(key)
        r = None if e is None else _result_from(e.get("result"))
        if r is not None and r.timeout_s is not None and r.timeout_s < timeout:
            return None  # it ran out of a shorter time than this run allows: try again
        return r

    def put(self, key: str, result: Result) -> None:
        d = result.to_dict()
        d.update(max_rel_err=result.max_rel_err, rms_rel_err=result.rms_rel_err,
                 gain_err=result.gain_err, scale_err=result.scale_err,
                 tile_err=result.tile_err, act_err=result.act_err,
                 seconds=result.seconds, timeout_s=result.timeout_s)
        self.entries[key] = {"stored": time.time(), "result": d}

    def save(self) -> Optional[str]:
        """Merge this run's entries into the file; the path, or None (cache off, or failed)."""
        if self.path is None or self.root is None:  # both None or neither
            return None
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            with FileLock(self.root / ".lock"):
                merged = self._read()
                merged.update(self.entries)
                keep = sorted(merged.items(), key=lambda kv: -float(kv[1].get("stored") or 0))
                doc = {"version": VERSION, "fingerprint": self.data,
                       "entries": dict(keep[:MAX_ENTRIES])}
                tmp = self.root / f".{self.digest}.{os.getpid()}.{threading.get_ident()}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    json.dump(doc, fh, sort_keys=True)
                os.replace(tmp, self.path)
                self._evict(self.root)
        except OSError:
            return None
        return str(self.path)

    @staticmethod
    def _evict(root: Path) -> None:
        files = sorted(root.glob("*.json"), key=lambda f: f.stat().st_mtime, reverse=True)
        for f in files[MAX_FILES:]:
            f.unlink(missing_ok=True)


class FileLock:
    """An advisory file lock (fcntl) for a read-merge-write (this cache's, and a tuning
    profile's: selector.inspect.tuning.save_profile); none where fcntl is absent. The lock
    file is opened without following a symlink."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: Optional[int] = None

    def __enter__(self) -> FileLock:
        try:
            import fcntl
        except ImportError:
            return self
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock
