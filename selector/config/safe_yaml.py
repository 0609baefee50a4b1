"""Reading config files safely: regular files only, size checked before reading, plain YAML
data only (no python tags, no alias bombs, no ${...}), and values JSON can hold.

Every file selector reads from a config dir is read here, so one set of limits holds for the
catalogue, the presets, the cache fingerprint and `check`.
"""
from __future__ import annotations

import math
import os
import stat
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from selector.core.errors import SelectorError, bad_input

if TYPE_CHECKING:
    import yaml

MAX_CONFIG_BYTES = 256 * 1024  # the largest packaged config file is about 6 KB
MAX_CONFIG_NODES = 50_000  # values after YAML aliases are expanded (an alias bomb is refused)
MAX_CONFIG_DEPTH = 64  # nesting levels (the packaged files use at most 5)
MAX_INT = 2 ** 63 - 1  # integers beyond int64 are refused (no kernel dimension is that large)


def read_config_bytes(path: Path) -> bytes:
    """The bytes of a config file: refused unless a regular file of at most MAX_CONFIG_BYTES.

    Opened non-blocking and checked with fstat before anything is read, so a FIFO, a device
    or a huge sparse file is refused at once instead of hanging or filling memory.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SelectorError(f"{path}: cannot read config file: {exc.strerror}",
                            where=str(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SelectorError(f"{path}: is not a regular file (a FIFO, socket, device or "
                                "directory); config files must be plain files",
                                where=str(path))
        if st.st_size > MAX_CONFIG_BYTES:
            raise _too_large(path, st.st_size)
        chunks, size = [], 0
        while size <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, MAX_CONFIG_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_CONFIG_BYTES:  # grew after fstat
            raise _too_large(path, size)
        return b"".join(chunks)
    except OSError as exc:
        raise SelectorError(f"{path}: cannot read config file: {exc.strerror}",
                            where=str(path)) from None
    finally:
        os.close(fd)


def _too_large(path: Path, size: int) -> SelectorError:
    return SelectorError(f"{path}: config file is too large ({size} bytes; at most "
                         f"{MAX_CONFIG_BYTES})", where=str(path))


def load_yaml(path: Path, node: bool = False, key: str = "") -> Any:
    """A YAML file as plain data (or as its node tree, for line numbers)."""
    root, data = load_document(path, key)
    return root if node else data


#: parsed documents by their text: a process composes many presets from the same files (a
#: `matrix` run reads each backend file hundreds of times); only documents that passed every
#: check are kept, at most this many (each at most MAX_CONFIG_BYTES)
_PARSED_MAX = 1024
_PARSED: OrderedDict[str, Tuple[Any, Any]] = OrderedDict()
_PARSED_LOCK = threading.Lock()


def load_document(path: Path, key: str = "") -> Tuple[Any, Any]:
    """A YAML file as (node tree, plain data), with errors that name the file and line.

    A file whose aliases expand to more than MAX_CONFIG_NODES values ("billion laughs"), one
    with a recursive alias, a non-plain tag or a value JSON cannot hold is refused. The file is
    read every time; its parse is reused when the text is one already accepted (keyed by the
    text itself, so a rewritten file is parsed afresh), and the data returned is a fresh copy
    the caller may change (the node tree is shared: read it only).
    """
    try:
        text = read_config_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SelectorError(f"{path}: cannot read config file: not UTF-8 text ({exc.reason} "
                            f"at byte {exc.start})", where=str(path)) from None
    with _PARSED_LOCK:
        hit = _PARSED.get(text)
        if hit is not None:
            _PARSED.move_to_end(text)
    if hit is None:
        hit = _parse(text, path, key)
        with _PARSED_LOCK:
            _PARSED[text] = hit
            while len(_PARSED) > _PARSED_MAX:
                _PARSED.popitem(last=False)
    return hit[0], plain_copy(hit[1])


def plain_copy(data: Any) -> Any:
    """A copy of plain data (dicts, lists, scalars): what copy.deepcopy gives, several times
    faster for the trees YAML builds (scalars are immutable and shared)."""
    if isinstance(data, dict):
        return {k: plain_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain_copy(v) for v in data]
    return data


def _parse(text: str, path: Path, key: str) -> Tuple[Any, Any]:
    import yaml
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # libyaml: ~15x faster
        try:
            root = loader.get_single_node()
            if root is not None:
                _check_expansion(root, path)
            if root is None:
                return None, None
            data = loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SelectorError(f"{path}{line}: malformed YAML: {problem}", where=str(path)) from None
    except SelectorError:  # _check_expansion's own refusals (a ValueError too): as they are
        raise
    except (ValueError, OverflowError) as exc:  # int('9'*5000) is over Python's digit limit
        raise SelectorError(f"{path}: a value cannot be read: {str(exc).splitlines()[0]}",
                            where=str(path)) from None
    except RecursionError:
        raise SelectorError(f"{path}: config file is nested too deeply", where=str(path)) from None
    check_plain(data, key, str(path))
    return root, data


_PLAIN_TAGS = frozenset("tag:yaml.org,2002:" + t for t in (
    "null", "bool", "int", "float", "str", "seq", "map", "merge", "value"))


def _check_expansion(root: yaml.Node, path: Path) -> None:
    """Refuse recursive aliases, non-plain tags and documents that expand past
    MAX_CONFIG_NODES (iteratively: aliases share nodes, so sizes are memoised and the walk is
    linear in the file)."""
    import yaml
    sizes: Dict[int, int] = {}
    active = set()
    stack = [(root, False, 0)]
    while stack:
        n, done, depth = stack.pop()
        if depth > MAX_CONFIG_DEPTH:  # OmegaConf would recurse past Python's limit
            raise SelectorError(f"{path} line {n.start_mark.line + 1}: config file is nested "
                                f"too deeply (more than {MAX_CONFIG_DEPTH} levels)",
                                where=str(path))
        kids = [x for pair in n.value for x in pair] if isinstance(n, yaml.MappingNode) else \
            list(n.value) if isinstance(n, yaml.SequenceNode) else []
        if done:
            active.discard(id(n))
            sizes[id(n)] = 1 + sum(sizes[id(k)] for k in kids)
            if sizes[id(n)] > MAX_CONFIG_NODES:
                raise SelectorError(f"{path} line {n.start_mark.line + 1}: config file expands "
                                    f"to more than {MAX_CONFIG_NODES} values (YAML aliases?)",
                                    where=str(path))
        elif id(n) in active:
            raise SelectorError(f"{path} line {n.start_mark.line + 1}: a YAML alias refers to a "
                                "node that contains it; config files must be plain trees",
                                where=str(path))
        elif id(n) not in sizes:
            if n.tag not in _PLAIN_TAGS:
                raise SelectorError(f"{path} line {n.start_mark.line + 1}: YAML tag {n.tag!r} "
                                    "is not accepted; config files are plain data (strings, "
                                    "numbers, booleans, null, lists, mappings): quote a date "
                                    "or a version", where=str(path))
            if isinstance(n, yaml.ScalarNode) and "${" in str(n.value):
                raise bad_input("value", n.value, "uses an interpolation (${...}); selector "
                                "configs are data and may not read environment variables, "
                                "files or other keys", where=f"{path} line "
                                f"{n.start_mark.line + 1}")
            active.add(id(n))
            stack.append((n, True, depth))
            stack.extend((k, False, depth + 1) for k in kids)


def check_plain(data: Any, key: str, where: Optional[str] = None) -> None:
    """Refuse what JSON (the cache, the output) cannot hold the same way: non-string keys
    (`on:` is the boolean true), sets, dates, bytes, NaN/infinity, integers beyond int64, and
    ${...} interpolations, which would reach environment variables or files."""
    if _is_plain(data):  # the common case, without building a key for every value
        return
    stack = [(key, data)]
    while stack:
        k, v = stack.pop()
        if isinstance(v, dict):
            for sub, val in v.items():
                if not isinstance(sub, str):
                    raise bad_input(f"{k}.{sub}" if k else str(sub), sub,
                                    f"is a {type(sub).__name__} key; keys are strings (quote "
                                    "it: YAML reads on/off/yes/no as booleans)", where=where)
                stack.append((f"{k}.{sub}" if k else sub, val))
        elif isinstance(v, list):
            stack.extend((f"{k}[{i}]", x) for i, x in enumerate(v))
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            if abs(v) > MAX_INT:
                raise bad_input(k, _short(v), f"is out of range (at most {MAX_INT} in size)",
                                where=where)
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise bad_input(k, v, "is not a finite number", where=where)
        elif isinstance(v, str):
            if "${" in v:
                raise bad_input(k, v, "uses an interpolation (${...}); selector configs are "
                                "data and may not read environment variables, files or other "
                                "keys", where=where)
        else:
            raise bad_input(k, _short(v), f"is a {type(v).__name__}; config values are "
                            "strings, numbers, booleans, null, lists or mappings (quote it)",
                            where=where)


def _is_plain(data: Any) -> bool:
    """Whether check_plain accepts `data`: the same tests, without naming the key (a cached
    composed config has thousands of values; naming each cost more than testing it)."""
    stack = [data]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        v = pop()
        t = type(v)
        if t is str:
            if "${" in v:
                return False
        elif t is dict:
            for sub, val in v.items():
                if type(sub) is not str:
                    return False
                push(val)
        elif t is list:
            extend(v)
        elif t is bool or v is None:
            continue
        elif t is int:
            if abs(v) > MAX_INT:
                return False
        elif t is float:
            if not math.isfinite(v):
                return False
        else:  # a subclass or another type: check_plain's own tests decide
            return False
    return True


def _short(v: Any) -> str:
    text = str(v) if not isinstance(v, int) or abs(v) < 10 ** 30 else f"{str(v)[:12]}... " \
        f"({len(str(abs(v)))} digits)" if abs(v) < 10 ** 4000 else "(a number over 4000 digits)"
    return text if len(text) <= 80 else text[:77] + "..."
