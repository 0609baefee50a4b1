"""The same decision on every rank of a torch.distributed process group.

An engine that shards a model must run one backend per layer on every rank (weight layouts and
collective kernels assume it); a node with another flashinfer or GPU would otherwise choose
differently or fail late. One call per model, whatever the number of layers:

1. arrival, through the group's store: a rank that never calls in is named after the group's
   timeout instead of hanging a collective;
2. one all_gather of a fixed 88-byte record per rank (digest and size of its fingerprint, rank,
   host);
3. one broadcast per distinct fingerprint, from its lowest rank (identical ranks send nothing);
4. every rank computes the same agreement from the same bytes (`selector/distributed/agreement.py`).

torch is imported on first call, never by `import selector`. A rank whose load() or select()
raised passes the exception instead of decisions: it still takes part, and every rank raises
the same SelectorError naming it.
"""
from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import zlib
from datetime import timedelta
from typing import Any, Dict, List, Optional, Sequence, Union, cast

from selector.core.errors import SelectorError
from selector.distributed import agreement, fingerprint
from selector.distributed.agreement import AgreedDecision, Group

__all__ = ["agree", "agree_all", "maybe_agree", "maybe_agree_all", "AgreedDecision"]

_RECORD = struct.Struct(">16sIi64s")  # digest, compressed size, global rank, host
_calls: Dict[str, int] = {}  # per process group: how many agreements so far (store keys)
_lock = threading.Lock()

Decisions = Union[Sequence[Any], BaseException]


def agree(decision: Any, group: Any = None) -> AgreedDecision:
    """The decision every rank of `group` (default: the default group) takes for one layer."""
    local = decision if isinstance(decision, BaseException) else [decision]
    return agree_all(local, group)[0]


def agree_all(decisions: Decisions, group: Any = None) -> List[AgreedDecision]:
    """One agreed decision per layer, for a whole model in one exchange.

    Every rank passes its decisions for the same layers in the same order (or the exception it
    hit). Raises SelectorError, the same on every rank, when a rank could not decide, when
    ranks disagree on the layers or the policy, when policy.strict=true refuses an explicit
    backend that fails on some rank, or when a rank does not call in within the group's timeout.
    """
    dist = _distributed()
    if not (dist.is_available() and dist.is_initialized()):
        raise SelectorError("selector.distributed: torch.distributed is not initialized; call "
                            "torch.distributed.init_process_group first, or use maybe_agree_all")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise SelectorError(f"selector.distributed: group is a {type(group).__name__}, not a "
                            "torch.distributed ProcessGroup (or None for the default group)",
                            key="group", value=type(group).__name__)
    # Checked before any collective: a wrong argument on one rank becomes that rank's error,
    # which every rank then raises as one SelectorError (no rank waits for a missing peer).
    decisions = validated(decisions)
    try:
        raw = fingerprint.encode(decisions)
    except Exception as e:  # noqa: BLE001 - a decision this rank cannot read is its error
        decisions = e
        raw = fingerprint.encode(e)
    groups = _exchange(dist, group, raw)
    return agreement.agree(groups, decisions)


def validated(decisions: Any) -> Decisions:
    """The decisions as a list of Decision objects, or the SelectorError saying what is wrong
    with the argument (returned, not raised: it is this rank's contribution)."""
    from selector.core.decision import Decision
    if isinstance(decisions, BaseException):
        return decisions
    what = "selector.distributed.agree_all(decisions)"
    if isinstance(decisions, Decision):
        return SelectorError(f"{what}: got one Decision; pass a list of them, one per layer "
                             "(or use agree(decision) for one layer)", key="decisions",
                             value="Decision")
    if isinstance(decisions, (str, bytes, dict)) or not hasattr(decisions, "__iter__"):
        return SelectorError(f"{what}: got a {type(decisions).__name__}; pass a list of "
                             "Decision objects, one per layer (or the exception this rank hit)",
                             key="decisions", value=type(decisions).__name__)
    try:
        got = list(decisions)
    except Exception as e:  # noqa: BLE001 - the caller's iterator: its failure is this rank's
        return SelectorError(f"{what}: iterating the decisions raised {type(e).__name__}: {e}",
                             key="decisions", value=type(e).__name__)
    for i, d in enumerate(got):
        if not isinstance(d, Decision):
            return SelectorError(f"{what}: item {i} is a {type(d).__name__}, not a Decision "
                                 "(Selector.select's answer)", key=f"decisions[{i}]",
                                 value=type(d).__name__)
    return got


def maybe_agree_all(decisions: Decisions, group: Any = None) -> List[Any]:
    """agree_all when torch.distributed is initialized with more than one rank in `group`;
    otherwise the decisions unchanged (the exception raised). Never imports torch itself."""
    if _active(group):
        return agree_all(decisions, group)
    if isinstance(decisions, BaseException):
        raise decisions
    return list(decisions)


def maybe_agree(decision: Any, group: Any = None) -> Any:
    """maybe_agree_all for one layer."""
    local = decision if isinstance(decision, BaseException) else [decision]
    return maybe_agree_all(local, group)[0]


def _active(group: Any) -> bool:
    dist = sys.modules.get("torch.distributed")  # not imported: cannot be initialized
    return bool(dist is not None and dist.is_available() and dist.is_initialized()
                and dist.get_world_size(group) > 1)


def _distributed() -> Any:
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise SelectorError(f"selector.distributed needs torch ({e})") from e
    return dist


# -- transport ---------------------------------------------------------------------------------
def _exchange(dist: Any, group: Any, raw: bytes) -> List[Group]:
    """Every rank's fingerprint, grouped by content, the same list on every rank."""
    import torch
    from torch.distributed import distributed_c10d as c10d

    pg = group if group is not None else c10d._get_default_group()
    rank, world = dist.get_rank(pg), dist.get_world_size(pg)
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend(pg) == "nccl" else torch.device("cpu"))
    _arrive(c10d._get_process_group_store(pg), pg, rank, world, _timeout(pg, device))

    wire = zlib.compress(raw)
    host = socket.gethostname().encode()[:64]
    mine = _RECORD.pack(fingerprint.digest(raw), len(wire), dist.get_rank(), host)
    try:
        records = [torch.empty(_RECORD.size, dtype=torch.uint8, device=device)
                   for _ in range(world)]
        dist.all_gather(records, _tensor(mine, device), group=pg)
        parsed = [_RECORD.unpack(_bytes(t)) for t in records]
        leaders: Dict[bytes, int] = {}
        for i, (dig, _, _, _) in enumerate(parsed):
            leaders.setdefault(dig, i)
        bufs, works = {}, []
        for dig, lead in leaders.items():
            size, src = parsed[lead][1], parsed[lead][2]
            buf = _tensor(wire, device) if lead == rank else \
                torch.empty(size, dtype=torch.uint8, device=device)
            works.append(dist.broadcast(buf, src=src, group=pg, async_op=True))
            bufs[dig] = buf
        for w in works:
            w.wait()
    except RuntimeError as e:  # a rank died or left after arriving: the collective's timeout
        raise SelectorError(f"selector.distributed: the exchange failed after every rank "
                            f"arrived: a rank died or left ({e})") from e
    members: Dict[bytes, List[Any]] = {dig: [] for dig in leaders}
    for dig, _, grank, h in parsed:
        members[dig].append((grank, h.rstrip(b"\0").decode(errors="replace")))
    groups = []
    for dig, ms in members.items():
        body = _decode(_bytes(bufs[dig]), ms[0][0])
        groups.append(Group(tuple(r for r, _ in ms), tuple(h for _, h in ms), body))
    return groups


def _decode(wire: bytes, rank: int) -> Dict[str, Any]:
    """A peer's fingerprint: JSON (never pickle), from a compatible selector."""
    try:
        body = json.loads(zlib.decompress(wire))
    except (zlib.error, ValueError) as e:
        return {"error": f"unreadable fingerprint from rank {rank} ({e})"}
    if not isinstance(body, dict) or body.get("v") != fingerprint.VERSION:
        return {"error": f"rank {rank} runs a selector with another fingerprint format "
                         f"({body.get('v') if isinstance(body, dict) else '?'}, this rank "
                         f"{fingerprint.VERSION})"}
    return body


def _arrive(store: Any, pg: Any, rank: int, world: int, timeout: timedelta) -> None:
    """Wait until every rank of the group called in, or name the ones that did not."""
    import time

    from torch.distributed import get_global_rank
    with _lock:
        seq = _calls[pg.group_name] = _calls.get(pg.group_name, 0) + 1
    base = f"selector/agree/{seq}"
    t0 = time.monotonic()
    try:
        store.set(f"{base}/rank/{rank}", "1")
        if store.add(f"{base}/count", 1) == world:
            store.set(f"{base}/all", "1")
        store.wait([f"{base}/all"], timeout)
        return
    except RuntimeError as e:  # DistStoreError: timed out; DistNetworkError: the store is gone
        error: RuntimeError = e
    waited = time.monotonic() - t0
    present = [_has(store, f"{base}/rank/{r}") for r in range(world)]
    if present[rank] is not True or waited < 0.9 * timeout.total_seconds():
        # this rank's own key cannot be read back, or the wait ended long before the timeout:
        # not a late rank but a store that went away with the rank that hosts it
        raise SelectorError(
            f"selector.distributed: the process group's store stopped answering after "
            f"{waited:.1f} s ({type(error).__name__}: {_first_line(error)}); the rank that "
            f"hosts it (the process group's master, MASTER_ADDR) has most likely died or left "
            f"the group, so no rank can agree: every rank stops") from error
    missing = [r for r in range(world) if present[r] is False]
    named = agreement.spans([get_global_rank(pg, r) for r in missing]) or "?"
    raise SelectorError(
        f"selector.distributed: rank(s) {named} did not call agree within {timeout} "
        f"(the process group's timeout); {world - len(missing)} of {world} ranks did. "
        "Every rank must call agree/agree_all for the same layers, even one whose load() "
        "or select() failed (pass the exception)") from error


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


def _has(store: Any, key: str) -> Optional[bool]:
    """Whether the store holds `key`; None when the store cannot be asked."""
    try:
        return bool(store.check([key]))
    except RuntimeError:
        return None


def _timeout(pg: Any, device: Any) -> timedelta:
    """The group's own timeout (init_process_group(timeout=...)), else its store's."""
    try:
        return cast(timedelta, pg._get_backend(device).options._timeout)
    except (AttributeError, RuntimeError):
        from torch.distributed import distributed_c10d as c10d
        return cast(timedelta, c10d._get_process_group_store(pg).timeout)  # type: ignore[attr-defined]


def _tensor(data: bytes, device: Any) -> Any:
    import torch
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)


def _bytes(t: Any) -> bytes:
    """A uint8 tensor's bytes without numpy (not every torch install has it)."""
    import ctypes
    t = t.cpu().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel())
