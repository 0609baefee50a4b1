"""Reading a checkpoint's JSON files safely: a regular file, bounded in size before it is read,
bounded in depth after (config.json files are a few KB; weights are never read)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from selector.core.errors import SelectorError

MAX_JSON_BYTES = 4 * 1024 * 1024  # config.json files are a few KB; weights are never read
MAX_JSON_DEPTH = 64


def _depth(data: Any) -> int:
    deepest, stack = 0, [(data, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_JSON_DEPTH:
            break
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def read_json(path: Path) -> Dict[str, Any]:
    """A config file: a regular file of at most MAX_JSON_BYTES holding a JSON object nested at
    most MAX_JSON_DEPTH deep (a FIFO, a device or a huge file is refused before reading)."""
    import os
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SelectorError(f"{path}: not a regular file", where=str(path))
            if st.st_size > MAX_JSON_BYTES:
                raise SelectorError(f"{path}: too large for a config file ({st.st_size} "
                                    f"bytes; at most {MAX_JSON_BYTES})", where=str(path))
            raw = os.read(fd, MAX_JSON_BYTES + 1)
        finally:
            os.close(fd)
        if len(raw) > MAX_JSON_BYTES:
            raise SelectorError(f"{path}: too large for a config file (at most "
                                f"{MAX_JSON_BYTES} bytes)", where=str(path))
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise SelectorError(f"{path}: no such file", where=str(path)) from None
    except RecursionError:
        raise SelectorError(f"{path}: nested too deeply (at most {MAX_JSON_DEPTH} levels)",
                            where=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SelectorError(f"{path}: cannot read: {exc}", where=str(path)) from None
    except ValueError as exc:
        raise SelectorError(f"{path}: malformed JSON: {exc}", where=str(path)) from None
    if not isinstance(data, dict):
        raise SelectorError(f"{path}: must hold a JSON object, not {type(data).__name__}",
                            where=str(path))
    if _depth(data) > MAX_JSON_DEPTH:
        raise SelectorError(f"{path}: nested too deeply (at most {MAX_JSON_DEPTH} levels)",
                            where=str(path))
    return data
