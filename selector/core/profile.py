"""A tuning profile: kernel times measured on one machine, and the order they give usable backends.

`selector tune` (selector.commands.tune) times every backend that passes verification on this
machine, per layer shape and token bucket, and writes a profile (JSON, docs/tuning.md). Under
`policy.preference=measured` (or `policy.profile=PATH`) the resolver ranks the usable backends
of a layer by the profile's medians for the layer's cell, and falls back to the static order
(ranks, `preference:` entries) where a cell or a backend was not measured.

This module is the profile's model, without torch: the schema (`parse`), the machine key a
profile is valid for (`Measured.ignored`), the cell a layer falls in (`cell_key`, `bucket`), the
order (`Measured.order`). Reading is bounded (`read_bytes`: regular files only, at most
MAX_BYTES, never blocking on a FIFO); every problem is a SelectorError naming the file and the
key, so that the CLI exits 2 with one message.
"""
from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.core.errors import SelectorError, show
from selector.core.layer import make_layer
from selector.core.notes import Note, note
from selector.core.profile_cells import (
    KEY_FIELDS,
    MAX_BACKENDS,
    MAX_BYTES,
    MAX_CELLS,
    MAX_TOKENS,
    OP_KEYS,
    READ_VERSIONS,
    SCHEMA,
    SHAPE_KEYS,
    STAT_KEYS,
    VERSION,
    Cell,
    CellKey,
    Profile,
    Timing,
    bucket,
    cell_key,
    describe,
    keys_of,
    shape_of,
)
from selector.core.schema import Layer
from selector.core.text import printable

#: auto (the default): a packaged profile measured on this GPU model with these libraries where one
#: matches, else the static order; static: ranks and preference entries; measured: the user's own
#: `selector tune` profile (policy.profile or this machine's cached one)
PREFERENCES = ("auto", "static", "measured")
#: a packaged profile's cell stands for a layer whose op size keys lie within NEAR_SIZE_STEPS
#: powers of two of the cell's (summed: K 5120 for 7168 is 0.49) and whose token bucket lies
#: within NEAR_BUCKET_STEPS powers of two of the cell's (128 stands for 32 to 512). Sizes: 0, the
#: shape it timed only. Measured on an H100 (2026-12-07, docs/performance.md, leave one shape out
#: over 10 held-out FP8 shapes): the nearest other shape's pick was within 5% of the fastest in
#: 88-90% of cells with >= 128 tokens (worst 1.23x) at 2 steps and 92-93% at 0.5, the static
#: order in 97-98% (worst 1.07x): a shape not timed is ranked better by the static order
NEAR_SIZE_STEPS = 0.0
NEAR_BUCKET_STEPS = 2.0

def _error(path: str, key: str, problem: str) -> SelectorError:
    """The one message form, made printable: a key of the file (an unknown one is the file's
    own text) may hold a newline or an escape, and the message is one line wherever it is
    printed."""
    return SelectorError(printable(f"policy.profile: {path}: {key}: {problem}"),
                         key="policy.profile", value=path)


def read_bytes(path: str, *, private: bool = False) -> bytes:
    """The file's bytes: a regular file of at most MAX_BYTES, opened without blocking (a FIFO
    or a device is refused, never waited on); `private`: not through a symlink, and owned by
    this user (the cache's default profile)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (getattr(os, "O_NOFOLLOW", 0)
                                                          if private else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise _error(path, "file", f"cannot be opened ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _error(path, "file", "is not a regular file (a FIFO, device or directory is "
                         "not read)")
        if private and hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise _error(path, "file", "belongs to another user")
        if st.st_size > MAX_BYTES:
            raise _error(path, "file", f"is {st.st_size} bytes, over the {MAX_BYTES} bytes a profile "
                         "may have")
        chunks, got = [], 0
        while got <= MAX_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_BYTES + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > MAX_BYTES:  # it grew while being read
            raise _error(path, "file", f"is over the {MAX_BYTES} bytes a profile may have")
        return b"".join(chunks)
    except OSError as e:
        raise _error(path, "file", f"cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a profile may hold")


def _pairs(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {k!r} appears twice in one object")
        out[k] = v
    return out


def loads(data: bytes, path: str) -> Any:
    """JSON without NaN, Infinity or repeated keys."""
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_no_constant,
                          object_pairs_hook=_pairs)
    except UnicodeDecodeError as e:
        raise _error(path, "file", f"is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise _error(path, "file", "nests too deeply to be a profile") from None
    except ValueError as e:
        raise _error(path, "file", f"is not JSON ({e})") from None


def _number(path: str, key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _error(path, key, f"{show(v)} is not a number")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not f > 0 or not math.isfinite(f):
        raise _error(path, key, f"{show(v)} must be a finite time > 0 (milliseconds)")
    return f


def _count(path: str, key: str, v: Any, top: int = MAX_TOKENS) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
        raise _error(path, key, f"{show(v)} must be an integer from 1 to {top}")
    return v


def _mapping(path: str, key: str, v: Any) -> Dict[str, Any]:
    if not isinstance(v, dict):
        raise _error(path, key, f"is a {type(v).__name__}, not an object")
    return v


def _timing(path: str, key: str, v: Any) -> Timing:
    d = _mapping(path, key, v)
    for k in d:
        if k not in STAT_KEYS + ("n",):
            raise _error(path, f"{key}.{k}", f"unknown key; accepted: {', '.join(STAT_KEYS)}, n")
    for k in STAT_KEYS + ("n",):
        if k not in d:
            raise _error(path, f"{key}.{k}", "is missing")
    med, lo, hi = (_number(path, f"{key}.{k}", d[k]) for k in STAT_KEYS)
    if not lo <= med <= hi:
        raise _error(path, key, f"p10_ms {lo:g} <= median_ms {med:g} <= p90_ms {hi:g} does not "
                     "hold")
    return Timing(med, lo, hi, _count(path, f"{key}.n", d["n"], 1 << 20))


def _cell(path: str, key: str, v: Any) -> Cell:
    d = _mapping(path, key, v)
    known = ("layer", "tokens", "bucket", "times", "skipped", "eager")
    for k in d:
        if k not in known:
            raise _error(path, f"{key}.{k}", f"unknown key; accepted: {', '.join(known)}")
    for k in ("layer", "tokens", "times"):
        if k not in d:
            raise _error(path, f"{key}.{k}", "is missing")
    tokens = _count(path, f"{key}.tokens", d["tokens"])
    if "bucket" in d and (type(d["bucket"]) is not int or d["bucket"] != bucket(tokens)):
        raise _error(path, f"{key}.bucket", f"{show(d['bucket'])} is not the bucket of "
                     f"{tokens} tokens ({bucket(tokens)})")
    raw = _mapping(path, f"{key}.layer", d["layer"])
    try:
        layer = make_layer(dict(raw, num_tokens=tokens))
    except SelectorError as e:
        raise _error(path, f"{key}.layer", str(e)) from None
    times_raw = _mapping(path, f"{key}.times", d["times"])
    if len(times_raw) > MAX_BACKENDS:
        raise _error(path, f"{key}.times", f"names {len(times_raw)} backends, over "
                     f"{MAX_BACKENDS}")
    times = {str(b): _timing(path, f"{key}.times.{b}", t) for b, t in times_raw.items()}
    eager_raw = _mapping(path, f"{key}.eager", d.get("eager", {}))
    if len(eager_raw) > MAX_BACKENDS or not set(eager_raw) <= set(times_raw):
        raise _error(path, f"{key}.eager", "must give an eager time only to backends of "
                     f"`times` (at most {MAX_BACKENDS})")
    eager = {str(b): _timing(path, f"{key}.eager.{b}", t) for b, t in eager_raw.items()}
    skipped = _mapping(path, f"{key}.skipped", d.get("skipped", {}))
    if len(skipped) > MAX_BACKENDS or not all(isinstance(s, str) and len(s) <= 2000
                                              for s in skipped.values()):
        raise _error(path, f"{key}.skipped", "must map at most 64 backends to a short reason")
    return Cell(layer.to_dict(), tokens, times, dict(skipped), eager)


def parse(doc: Any, path: str) -> Profile:
    """A Profile from a profile file's JSON; SelectorError naming the file and key."""
    d = _mapping(path, "(top level)", doc)
    known = ("schema", "version", "created", "key", "settings", "cells")
    for k in d:
        if k not in known:
            raise _error(path, k, f"unknown key; accepted: {', '.join(known)}")
    if d.get("schema") != SCHEMA:
        raise _error(path, "schema", f"{show(d.get('schema'))} is not {SCHEMA!r}: not a "
                     "selector profile (written by `selector tune`)")
    if type(d.get("version")) is not int or d.get("version") not in READ_VERSIONS:  # not true, not 1.0
        raise _error(path, "version", f"{show(d.get('version'))} is not a version this "
                     f"selector reads ({', '.join(map(str, READ_VERSIONS))}); run `selector "
                     "tune` again")
    key = _mapping(path, "key", d.get("key"))
    for k in key:
        if k not in KEY_FIELDS:
            raise _error(path, f"key.{k}", f"unknown key; accepted: {', '.join(KEY_FIELDS)}")
    for k in KEY_FIELDS:
        if k not in key:
            raise _error(path, f"key.{k}", "is missing")
    if not isinstance(key["packages"], dict) or not all(
            isinstance(v, (str, type(None))) for v in key["packages"].values()):
        raise _error(path, "key.packages", "must map distribution names to versions (or null)")
    settings = _mapping(path, "settings", d.get("settings", {}))
    cells = d.get("cells")
    if not isinstance(cells, list):
        raise _error(path, "cells", f"is a {type(cells).__name__}, not a list")
    if len(cells) > MAX_CELLS:
        raise _error(path, "cells", f"holds {len(cells)} cells, over {MAX_CELLS}")
    created = d.get("created", "")
    return Profile(dict(key), tuple(_cell(path, f"cells[{i}]", c) for i, c in enumerate(cells)),
                   dict(settings), created if isinstance(created, str) else "",
                   int(d["version"]))


def load(path: str, *, private: bool = False) -> Profile:
    return parse(loads(read_bytes(path, private=private), path), path)


def check_backends(profile: Profile, path: str, names: Mapping[str, Sequence[str]]) -> None:
    """Every backend a cell names is one of the catalogue's for the cell's op (`names`: op ->
    backend names)."""
    for i, c in enumerate(profile.cells):
        op = c.layer["op"]
        accepted = names.get(op, ())
        for b in list(c.times) + list(c.skipped):
            if b not in accepted:
                where = "times" if b in c.times else "skipped"
                raise _error(path, f"cells[{i}].{where}.{b}", f"unknown {op} backend; accepted: "
                             f"{', '.join(sorted(accepted))}")


def key_difference(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> List[str]:
    """What differs between two machine keys, in words ("gpu 'NVIDIA H200' here 'cpu'")."""
    out = []
    for k in KEY_FIELDS:
        a, b = theirs.get(k), ours.get(k)
        if k == "packages" and isinstance(a, dict) and isinstance(b, dict):
            for n in sorted(set(a) | set(b)):
                if a.get(n) != b.get(n):
                    out.append(f"{n} {a.get(n) or 'absent'} (here {b.get(n) or 'absent'})")
        elif a != b:
            out.append(f"{k} {show(a, 60)} (here {show(b, 60)})")
    return out


def packaged_differences(key: Mapping[str, Any], here: Mapping[str, Any],
                         libraries: Sequence[str]) -> List[str]:
    """Why a packaged profile's machine key does not describe this machine (empty: it does).
    `here`: gpu, capability, cuda, machine and packages (name -> version or None) of the detected
    platform; `libraries`: the distributions the timed backends run on (torch, and what their
    rules read). Compared: the GPU model, the compute capability, the CUDA version, the CPU
    architecture, and the version of each of `libraries` the measured machine had installed (a
    library absent there and present here is allowed: its backends were not timed, and a cell
    that did not time a backend usable here is not used)."""
    out = []
    for k in ("gpu", "capability", "cuda", "machine"):
        if key.get(k) != here.get(k):
            out.append(f"{k} {show(key.get(k), 60)} (here {show(here.get(k), 60)})")
    mine = here.get("packages") or {}
    for n, v in sorted((key.get("packages") or {}).items()):
        if v is not None and n in libraries and mine.get(n) != v:
            out.append(f"{n} {v} (here {mine[n] or 'absent'})")
    return out


# ---------------------------------------------------------------------------------------------
# The order a profile gives

@dataclass(frozen=True)
class Measured:
    """The profile a run ranks by (`policy.preference=measured`): the profile and its path, or
    why it is ignored (another machine or stack: `ignored` holds the differences, and no
    decision changes)."""
    path: str
    profile: Optional[Profile] = None
    ignored: Tuple[str, ...] = ()
    #: a packaged profile (selector/profiles/): the GPU model it was measured on. Its cells stand
    #: for nearby shapes and buckets too (`near_cell`); a cell is used only where it timed every
    #: backend usable here (a library installed here and not there leaves the static order)
    packaged: Optional[str] = None
    _cells: Dict[CellKey, Cell] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.profile is not None and not self.ignored:
            object.__setattr__(self, "_cells", self.profile.index())

    @property
    def active(self) -> bool:
        return self.profile is not None and not self.ignored

    def notes(self) -> Tuple[Note, ...]:
        """The note every decision carries when the profile is ignored."""
        if not self.ignored:
            return ()
        return (note("profile_ignored", None, profile=self.path, differences=self.ignored),)

    def nearest(self, layer: Layer, usable: Sequence[str] = ()) -> Optional[str]:
        """The profile's cell nearest to `layer`'s, in words (None when it has no cell of the
        layer's op): same op first, then the same quant scheme and dtype, then the fewest other
        keys that differ, then the sizes' and the bucket's distance in powers of two; a cell
        that timed one of the `usable` backends before one that did not."""
        mine = dict(shape_of(layer.to_dict()))
        want = bucket(layer.num_tokens) if layer.num_tokens is not None else None
        best: Optional[Tuple[Any, ...]] = None
        for (shape, b), c in self._cells.items():
            theirs = dict(shape)
            if theirs.get("op") != layer.op:
                continue
            far = 0.0
            other = 0
            for k in keys_of(layer.op):
                a, x = mine.get(k), theirs.get(k)
                if isinstance(a, int) and isinstance(x, int) and not isinstance(a, bool) \
                        and a > 0 and x > 0:
                    far += abs(math.log2(a / x))
                elif a != x and k not in ("quant", "dtype"):
                    other += 1
            far += 0.0 if want is None else abs(math.log2(want / b))
            rank = (theirs.get("quant") != layer.quant, theirs.get("dtype") != layer.dtype,
                    not any(n in c.times for n in usable), other, far, describe(theirs, b))
            if best is None or rank < best:
                best = rank
        return None if best is None else str(best[-1])

    def near_cell(self, layer: Layer, usable: Sequence[str]) -> Optional[Cell]:
        """A packaged profile's cell for `layer`: its own cell, else the nearest one of the same
        op, scheme, dtype and other non-size keys within NEAR_SIZE_STEPS (the op's size keys,
        powers of two summed) and NEAR_BUCKET_STEPS (the bucket) that timed every backend in
        `usable`; None when no cell qualifies (the static order stands)."""
        if layer.num_tokens is None or not usable:
            return None
        mine = dict(shape_of(layer.__dict__))
        want = bucket(layer.num_tokens)
        best: Optional[Tuple[float, float, str, Cell]] = None
        for (shape, b), c in self._cells.items():
            if not all(n in c.times for n in usable):
                continue
            theirs = dict(shape)
            size = 0.0
            for k in keys_of(layer.op):
                a, x = mine.get(k), theirs.get(k)
                if type(a) is int and type(x) is int and a > 0 and x > 0:
                    size += abs(math.log2(a / x))
                elif a != x:
                    size = math.inf
                    break
            tok = abs(math.log2(want / b))
            if size > NEAR_SIZE_STEPS or tok > NEAR_BUCKET_STEPS:
                continue
            rank = (size + tok, tok, describe(theirs, b), c)
            if best is None or rank[:3] < best[:3]:
                best = rank
        return None if best is None else best[3]

    def _packaged_order(self, layer: Layer, names: Sequence[str], usable: Sequence[str]
                        ) -> Optional[Tuple[List[str], Note]]:
        cell = self.near_cell(layer, usable)
        if cell is None:
            return None
        times = {n: cell.times[n] for n in usable}
        fast = sorted(times, key=lambda n: (times[n].median_ms, names.index(n)))
        return fast + [n for n in names if n not in times], note(
            "measured", fast[0], profile=self.path, tokens=cell.tokens,
            bucket=bucket(cell.tokens), packaged=self.packaged,
            cell=describe(dict(cell.key[0]), cell.key[1]),
            times=tuple(dict(backend=n, **times[n].to_dict()) for n in fast), unmeasured=())

    def memo_key(self, layer: Layer) -> Optional[CellKey]:
        """What a decision depends on besides the rules: the layer's cell (its order, or the
        note saying which bucket was not measured)."""
        return cell_key(layer)

    def order(self, layer: Layer, names: Sequence[str], usable: Sequence[str]
              ) -> Optional[Tuple[List[str], Note]]:
        """The candidates `names` (in static order) reordered: the measured usable ones first,
        fastest median first, then the rest in static order; with the note that says so. None
        when the profile is ignored or measured none of the usable ones for this layer's cell
        (the static order stands; the note then says the cell was not measured)."""
        if not self.active or not usable:
            return None
        if self.packaged is not None:
            return self._packaged_order(layer, names, usable)
        k = cell_key(layer)
        cell = None if k is None else self._cells.get(k)
        times = {} if cell is None else {n: cell.times[n] for n in usable if n in cell.times}
        if not times:
            near = self.nearest(layer, usable)
            return list(names), note(
                "profile_unmeasured", None, profile=self.path, tokens=layer.num_tokens,
                bucket=None if k is None else k[1],
                why="the layer gives no layer.num_tokens" if k is None else
                f"no cell for {describe(dict(k[0]), k[1])}" if cell is None else
                "none of the usable backends was timed there",
                nearest=near, migrated=self.profile is not None and self.profile.migrated,
                skipped=dict(cell.skipped) if cell is not None else {})
        fast = sorted(times, key=lambda n: (times[n].median_ms, names.index(n)))
        order = fast + [n for n in names if n not in times]
        assert cell is not None
        return order, note(
            "measured", fast[0], profile=self.path, tokens=cell.tokens, bucket=bucket(cell.tokens),
            times=tuple(dict(backend=n, **times[n].to_dict()) for n in fast),
            unmeasured=tuple(n for n in names if n in usable and n not in times))


__all__ = ["Profile", "Cell", "Timing", "Measured", "parse", "load", "read_bytes", "bucket",
           "cell_key", "shape_of", "describe", "keys_of", "OP_KEYS", "READ_VERSIONS",
           "check_backends", "key_difference", "SCHEMA", "VERSION", "KEY_FIELDS", "PREFERENCES",
           "packaged_differences", "MAX_BYTES", "MAX_CELLS", "MAX_BACKENDS", "MAX_TOKENS",
           "SHAPE_KEYS", "STAT_KEYS", "CellKey"]
