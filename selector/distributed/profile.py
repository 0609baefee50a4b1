"""One tuning profile for every rank of a torch.distributed process group (docs/tuning.md).

Rank `src` (0) measures (`python -m selector tune --out P`) and calls `share_profile(P)`; every
other rank calls `share_profile()` too. The profile's bytes go from `src` to every rank in one
broadcast (after the arrival check that `selector.distributed.agree_all` uses, so a rank that
never calls in is named instead of hanging); every rank validates the same bytes the same way and
writes them to its own cache, and gets back the path to load with (`policy.profile=PATH`). Each
rank still compares the profile's machine key with its own machine when it loads: a rank with
another GPU or stack ignores it with a note, and `agree_all` then names the ranks that differ.

A problem on `src` (no file, a corrupt one) is sent instead of the bytes: every rank raises the
same SelectorError. torch is imported on the first call, never by `import selector`.
"""
from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any, Optional, Union

from selector.core import profile as prof
from selector.core.errors import SelectorError

_HEAD = struct.Struct(">BQ")  # status (0 the profile, 1 an error text), payload size


def share_profile(path: Optional[Union[str, Path]] = None, group: Any = None, *, src: int = 0,
                  dest: Optional[Union[str, Path]] = None) -> str:
    """The path of the profile rank `src` read from `path`, written on this rank (`dest`, default
    `<cache dir>/profiles/shared-<digest>.json`); the same content on every rank.

    Raises SelectorError, the same on every rank, when `src`'s profile cannot be read or is
    malformed, when torch.distributed is not initialized, or when a rank does not call in within
    the group's timeout."""
    from selector.distributed import _arrive, _distributed, _timeout
    dist = _distributed()
    if not (dist.is_available() and dist.is_initialized()):
        raise SelectorError("selector.distributed.share_profile: torch.distributed is not "
                            "initialized; call torch.distributed.init_process_group first")
    import torch
    from torch.distributed import distributed_c10d as c10d
    pg = group if group is not None else c10d._get_default_group()
    rank, world = dist.get_rank(pg), dist.get_world_size(pg)
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend(pg) == "nccl" else torch.device("cpu"))
    _arrive(c10d._get_process_group_store(pg), pg, rank, world, _timeout(pg, device))
    src_global = dist.get_global_rank(pg, src) if group is not None else src
    payload, status = b"", 0
    if rank == src:
        try:
            if path is None:
                raise SelectorError("share_profile: rank 0 must name the profile it measured "
                                    "(path=...)", key="path")
            payload = prof.read_bytes(str(path))
            prof.parse(prof.loads(payload, str(path)), str(path))
        except SelectorError as e:
            payload, status = f"rank {src}: {e}".encode(), 1
    head = torch.frombuffer(bytearray(_HEAD.pack(status, len(payload))), dtype=torch.uint8)
    head = head.to(device)
    dist.broadcast(head, src=src_global, group=pg)
    status, size = _HEAD.unpack(_host_bytes(head))
    if size > prof.MAX_BYTES + 4096:
        raise SelectorError(f"share_profile: rank {src} announced {size} bytes, over a "
                            "profile's bound")
    buf = (torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)
           if rank == src else torch.empty(size, dtype=torch.uint8, device=device))
    if size:
        dist.broadcast(buf, src=src_global, group=pg)
    data = _host_bytes(buf) if size else b""
    if status:
        raise SelectorError(f"selector.distributed.share_profile: {data.decode(errors='replace')}")
    label = f"rank {src}'s profile {path}" if rank == src else f"rank {src}'s profile"
    prof.parse(prof.loads(data, label), label)  # the same check, the same answer everywhere
    return _write(data, dest)


def _host_bytes(t: Any) -> bytes:
    from selector.distributed import _bytes
    return _bytes(t)


def _write(data: bytes, dest: Optional[Union[str, Path]]) -> str:
    from selector.inspect.tuning import default_dir, write_bytes
    digest = hashlib.sha256(data).hexdigest()[:24]
    if dest is None:
        base = default_dir()
        if base is None:
            raise SelectorError("share_profile: the cache directory is off "
                                "(SELECTOR_CACHE_DIR): pass dest=PATH", key="dest")
        dest = base / f"shared-{digest}.json"
    try:
        return write_bytes(data, dest)
    except OSError as e:
        raise SelectorError(f"share_profile: cannot write {dest}: {e.strerror or e}",
                            key="dest", value=str(dest)) from None


__all__ = ["share_profile"]
