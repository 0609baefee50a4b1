"""Probes that read distribution metadata only (RECORD files, find_spec): no import, so they
run in-process.

- cutlass_dsl.wheel_collision: nvidia-cutlass-dsl 4.4.x-4.5.x split into -libs-base and
  -libs-cu13 wheels that ship the same paths with different content; whichever installs last
  wins, and the DSL then emits malformed `_mma` PTX or fails to compile (CUTLASS #3170 #3227
  #3259, fixed in 4.6.0 with the -libs-core split). Compared here from the wheels' RECORD
  hashes, and the files on disk say which wheel won. Also: libs wheels whose version differs
  from nvidia-cutlass-dsl's.
- b12x.module_shadowing: flashinfer-python 0.7.4 installs a top-level `b12x` package (a shim
  over its embedded copy), so `import b12x` proves nothing about the `b12x` distribution.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import importlib.util
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._util import failed, ok, skipped, warning

DSL = "nvidia-cutlass-dsl"
_DIST_DIR = re.compile(r"^(nvidia_cutlass_dsl[A-Za-z0-9_]*)-([^-]+)\.dist-info$", re.I)
_HASH_LIMIT_BYTES = 16 << 20  # hash on-disk copies up to this size to tell which wheel won
_HASH_LIMIT_FILES = 64
FIX = ("upgrade to nvidia-cutlass-dsl>=4.6.0 (fixed there with the -libs-core split), or "
       "reinstall cleanly: pip install --force-reinstall 'nvidia-cutlass-dsl[cu13]'")


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _search_path(ctx: Dict[str, Any]) -> List[str]:
    path = ctx.get("path")
    return [p or os.getcwd() for p in (path if path is not None else __import__("sys").path)]


def cutlass_dists(path: Sequence[str]) -> Dict[str, md.Distribution]:
    """Installed nvidia-cutlass-dsl* distributions, first on the path winning (as import does)."""
    found: Dict[str, md.Distribution] = {}
    for entry in path:
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            continue
        for n in names:
            m = _DIST_DIR.match(n)
            if m:
                found.setdefault(_canon(m.group(1)), md.PathDistribution(Path(entry) / n))
    return found


def _file_hash(path: Path) -> Optional[str]:
    try:
        if path.stat().st_size > _HASH_LIMIT_BYTES:
            return None
        h = hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None
    return base64.urlsafe_b64encode(h).rstrip(b"=").decode()


def wheel_collision(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    dists = cutlass_dists(_search_path(ctx))
    libs = {n: d for n, d in dists.items() if n.startswith(f"{DSL}-libs-")}
    if not dists:
        return skipped(f"{DSL} not installed")
    versions = {n: d.version for n, d in sorted(dists.items())}
    details: Dict[str, Any] = {"wheels": versions}
    problems: List[str] = []
    top = versions.get(DSL)
    odd = {n: v for n, v in versions.items() if n != DSL and top and v != top}
    if odd:
        problems.append(f"{DSL} {top} is installed with " + ", ".join(
            f"{n} {v}" for n, v in sorted(odd.items())) + ": the DSL wheels must all be the same "
            f"version; pip install --force-reinstall '{DSL}[cu13]=={top}'")
    owners: Dict[str, Dict[str, str]] = {}
    for name, d in sorted(libs.items()):
        for f in d.files or ():
            if f.hash is not None and f.hash.mode == "sha256":
                owners.setdefault(str(f), {})[name] = f.hash.value
    shared = {p: o for p, o in owners.items() if len(o) > 1}
    differing = sorted(p for p, o in shared.items() if len(set(o.values())) > 1)
    details.update(shared_files=len(shared), differing_files=len(differing),
                   examples=differing[:5])
    if differing:
        winners: Dict[str, int] = {}
        for p in differing[:_HASH_LIMIT_FILES]:
            wheel_hashes = shared[p]
            first = next(iter(wheel_hashes))
            on_disk = _file_hash(Path(str(libs[first].locate_file(p))))
            who = [n for n, h in wheel_hashes.items() if h == on_disk] or ["neither wheel"]
            for n in who:
                winners[n] = winners.get(n, 0) + 1
        details["on_disk"] = winners
        pair = " and ".join(f"{n} {versions[n]}" for n in sorted({n for p in differing
                                                                  for n in shared[p]}))
        won = ", ".join(f"{c} match {n}" for n, c in sorted(winners.items()))
        problems.append(
            f"{pair} ship {len(differing)} same-path files with different content (e.g. "
            f"{differing[0]}); of the {min(len(differing), _HASH_LIMIT_FILES)} checked on disk, "
            f"{won}: the installed DSL depends on install order and can emit malformed _mma PTX "
            f"(CUTLASS #3170 #3227 #3259); {FIX}")
    if problems:
        return failed("; ".join(problems), **details)
    if not libs:
        return ok(f"{DSL} {top} installed without -libs-* wheels: nothing can collide", **details)
    same = f"; {len(shared)} same-path files are identical" if shared else ""
    return ok(f"{len(libs)} {DSL}-libs wheels ({', '.join(n.rsplit('-', 1)[-1] for n in libs)}, "
              f"{top or '?'}) ship no same-path files with different content{same}", **details)


# ---------------------------------------------------------------------------------------------

def _record_entry(d: md.Distribution, rel: str) -> Optional[str]:
    """The sha256 (or '') RECORD lists for `rel`; None when RECORD does not list it. Reads
    RECORD as text: flashinfer-python's has 18,000 lines, too many for Distribution.files."""
    try:
        text = d.read_text("RECORD") or ""
    except OSError:
        return None
    m = re.search(r'^"?' + re.escape(rel) + r'"?,([^,\n]*)', text, re.M)
    if m is None:
        return None
    digest = m.group(1)
    return digest.split("=", 1)[1] if digest.startswith("sha256=") else ""


def _owners(origin: Path, names: Sequence[str]) -> Dict[str, Tuple[str, Optional[str]]]:
    """Which of the named distributions list `origin` in their RECORD: name -> (version, hash)."""
    out: Dict[str, Tuple[str, Optional[str]]] = {}
    try:
        target = origin.resolve()
    except OSError:
        return out
    for name in names:
        try:
            d = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        except Exception:  # noqa: BLE001
            continue
        try:
            rel = target.relative_to(Path(str(d.locate_file(""))).resolve()).as_posix()
        except (ValueError, OSError):
            continue  # installed in another directory: cannot own this file
        entry = _record_entry(d, rel)
        if entry is not None:
            out[_canon(d.metadata["Name"] or name)] = (d.version, entry)
    return out


def _module_owners(module: str, origin: Path) -> Dict[str, Tuple[str, Optional[str]]]:
    """The installed distributions whose RECORD lists ``origin``: ``module``'s own and
    flashinfer-python's first, else any distribution declaring the top-level name (slower:
    packages_distributions reads every RECORD)."""
    owners = _owners(origin, [module, "flashinfer-python"])
    if owners:
        return owners
    try:
        declared = md.packages_distributions().get(module) or []
    except Exception:  # noqa: BLE001
        declared = []
    return _owners(origin, [d for d in dict.fromkeys(declared) if d not in (module, "flashinfer-python")])


def module_shadowing(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    module = arg or "b12x"
    try:
        dist_version: Optional[str] = md.version(module)
    except md.PackageNotFoundError:
        dist_version = None
    try:
        spec = importlib.util.find_spec(module)  # a top-level name: finds, does not import
    except (ImportError, ValueError) as exc:
        return failed(f"looking up the top-level module {module!r} raised "
                      f"{type(exc).__name__}: {exc}")
    if spec is None:
        if dist_version:
            return failed(f"the {module} distribution {dist_version} is installed but no "
                          f"top-level module {module!r} can be found: reinstall {module}")
        return ok(f"no top-level module {module!r} and no {module} distribution")
    origin = Path(spec.origin) if spec.origin and spec.origin not in ("built-in", "frozen") \
        else None
    if origin is None:
        locs = list(spec.submodule_search_locations or [])
        where = locs[0] if locs else "?"
        return warning(f"the top-level module {module!r} is a namespace package ({where}) "
                       "that no distribution owns", path=where)
    owners = _module_owners(module, origin)
    details: Dict[str, Any] = {"path": str(origin), "distribution": dist_version,
                               "owners": {n: v for n, (v, _) in owners.items()}}
    others = {n: v for n, v in owners.items() if n != module}
    desc = ", ".join(f"{n} {v}" for n, (v, _) in sorted(others.items()))
    if dist_version is None:
        if others:
            return warning(
                f"`import {module}` finds {origin}, which {desc} installs (a compatibility shim "
                f"over its embedded copy), while the {module} distribution is not installed: an "
                f"import of {module} proves nothing; only the distribution metadata says whether "
                f"the native {module} backend is installed", **details)
        return warning(f"`import {module}` finds {origin}, which no installed distribution owns, "
                       f"while the {module} distribution is not installed", **details)
    if module not in owners:
        owner = f"{desc}'s" if others else "no installed distribution's"
        return failed(f"{module} {dist_version} is installed but `import {module}` finds "
                      f"{origin}, {owner} file, not the {module} distribution's: it shadows the "
                      f"real {module}; remove it or put {module} first on sys.path", **details)
    if others:
        on_disk = _file_hash(origin)
        mine = owners[module][1]
        theirs = {n: h for n, (_, h) in others.items()}
        if on_disk is not None and on_disk != mine and on_disk in theirs.values():
            return failed(f"{module} {dist_version} and {desc} both install {origin}, and the copy "
                          f"on disk is {desc}'s (installed after {module}): `import {module}` "
                          f"loads the other package's module; pip install --force-reinstall "
                          f"{module}=={dist_version}", **details)
        return warning(f"{origin} belongs to {module} {dist_version} (on disk), and {desc} "
                       f"installs the same path: reinstalling it would replace {module}'s "
                       "module", **details)
    return ok(f"the top-level module {module!r} ({origin}) belongs to the {module} "
              f"distribution {dist_version}", **details)
