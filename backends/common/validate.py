"""The one input check of every backend's prepare/apply and of the references.

Each check raises ``ValueError`` naming the tensor, the value it got and what is accepted, so a
careless input is a clear error, never a traceback from inside a kernel, a CUDA device-side
assert (which poisons the process's CUDA context) or a silent wrong answer:

- :func:`float_input`: an activation's dtype (bfloat16, float16, float32; float64 where a
  reference allows it), its rank and last dimension, and the device it must share with the weights;
- :func:`routing`: ``topk_ids`` / ``topk_weights`` as ``[T, top_k]`` for the T tokens of ``x``
  (routing for fewer tokens than ``x`` is refused, not zero-filled), ``topk_ids`` of an integer
  dtype (float ids would be truncated) with every id in ``[-1, E)`` (negative = unrouted);
- :func:`scale`: a scale's type, dtype, shape, and (at prepare time, where the weights are
  built: never per apply call) that every value is finite and > 0;
- :func:`int32_indexing`: sizes whose flat offsets overflow a kernel's 32-bit indexing;
- :func:`options`: a backend constructor's keywords against the ones it takes.

Cheap by design: shapes, dtypes and devices are metadata; the only value checks per apply call
are the routing ids' range (``[T, top_k]`` integers, one reduction) and none on activations;
while a CUDA graph is being captured (:func:`capturing`) that one is skipped too (no host sync).
Imports torch only inside functions.
"""
from __future__ import annotations

import inspect
import weakref
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

#: the largest flat element offset a kernel with 32-bit indexing addresses
INT32_MAX = 2 ** 31 - 1
FLOAT_INPUTS = ("bfloat16", "float16", "float32")


def _torch():
    import torch
    return torch


def _desc(t: Any) -> str:
    """A value as an error shows it: a tensor's dtype, shape and device, else its type."""
    torch = _torch()
    if isinstance(t, torch.Tensor):
        return f"{str(t.dtype).replace('torch.', '')} {list(t.shape)} on {t.device}"
    return type(t).__name__


def tensor(name: str, t: Any) -> Any:
    """``t`` if it is a torch tensor, else a ValueError naming ``name``."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    return t


def float_input(name: str, x: Any, *, last: Optional[int] = None, dim: Optional[int] = None,
                device: Any = None, allowed: Sequence[str] = FLOAT_INPUTS,
                shape_hint: str = "") -> Any:
    """An activation: a tensor of a dtype in ``allowed``, rank ``dim`` (any >= 1 when None),
    last dimension ``last``, on ``device`` (the weights' device) when given."""
    tensor(name, x)
    want = shape_hint or (f"[..., {last}]" if dim is None else
                          "[" + ", ".join(["num_tokens"] * (dim - 1) + [str(last)]) + "]")
    if x.dim() == 0 or (dim is not None and x.dim() != dim) or (
            last is not None and x.shape[-1] != last):
        raise ValueError(f"{name} has shape {list(x.shape)}; expected {want}")
    dt = str(x.dtype).replace("torch.", "")
    if dt not in allowed:
        raise ValueError(f"{name} is {dt}; accepted: {', '.join(allowed)}")
    same_device(name, x, device)
    return x


def same_device(name: str, t: Any, device: Any) -> None:
    """``t`` on ``device`` (None: no check); the error names both."""
    torch = _torch()
    if device is not None and t.device != torch.device(device):
        raise ValueError(f"{name} is on {t.device}; the layer's weights are on "
                         f"{torch.device(device)}: move it there (or the weights with .to())")


def routing(topk_weights: Any, topk_ids: Any, num_tokens: int, num_experts: int,
            device: Any = None) -> None:
    """``topk_ids`` and ``topk_weights`` route the ``num_tokens`` tokens of x to experts
    ``0..num_experts-1`` (negative ids: unrouted slots)."""
    torch = _torch()
    tensor("topk_ids", topk_ids)
    tensor("topk_weights", topk_weights)
    if topk_ids.dim() != 2 or topk_ids.shape[0] != num_tokens:
        raise ValueError(f"topk_ids has shape {list(topk_ids.shape)}; expected "
                         f"[{num_tokens}, top_k] (one row per token of x: x has {num_tokens})")
    if tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise ValueError(f"topk_weights has shape {list(topk_weights.shape)}; expected "
                         f"{list(topk_ids.shape)} ([T, top_k], the shape of topk_ids)")
    if topk_ids.dtype.is_floating_point or topk_ids.dtype.is_complex or \
            topk_ids.dtype == torch.bool:
        raise ValueError(f"topk_ids is {str(topk_ids.dtype).replace('torch.', '')}; accepted: "
                         "an integer dtype (int32, int64): float ids would be truncated")
    if not topk_weights.dtype.is_floating_point:
        raise ValueError(f"topk_weights is {str(topk_weights.dtype).replace('torch.', '')}; "
                         "accepted: a floating dtype")
    same_device("topk_ids", topk_ids, device)
    same_device("topk_weights", topk_weights, device)
    if topk_ids.numel() and not capturing(topk_ids):
        hi = int(topk_ids.max())
        if hi >= num_experts:
            raise ValueError(f"topk_ids holds expert {hi}; accepted: 0..{num_experts - 1} "
                             f"(this layer has {num_experts} experts; negative = unrouted)")


def capturing(t: Any) -> bool:
    """Whether ``t`` is a CUDA tensor and its device's current stream is capturing a CUDA graph:
    then no check may read a value back (a host sync ends the capture with an error), so the
    per-call value checks (:func:`routing`'s id range) are skipped; shape, dtype and device
    checks still run. A graph's ids are only known at replay, where no host code runs, so their
    range is the caller's to keep there (as in an engine's graph); the fused emulation ignores an
    id outside ``[0, E)`` (it routes the row nowhere)."""
    torch = _torch()
    return bool(t.is_cuda and torch.cuda.is_current_stream_capturing())


def scale(name: str, s: Any, shapes: Iterable[Tuple[int, ...]], *, values: bool = True,
          dtype: Optional[str] = "float32", context: str = "") -> Any:
    """A scale tensor of ``dtype`` whose shape is one of ``shapes``; with ``values`` (prepare
    time only) every element finite and > 0 (a dequantization multiplier)."""
    torch = _torch()
    shapes = [tuple(x) for x in shapes]
    shown = " or ".join(str(list(x)) if x else "[] (a scalar)" for x in shapes) + (
        f" {context}" if context else "")
    if not isinstance(s, torch.Tensor):
        raise ValueError(f"{name}: expected a {dtype or 'float'} tensor {shown}, got "
                         f"{type(s).__name__}")
    if tuple(s.shape) not in shapes or (dtype is not None and
                                        str(s.dtype).replace("torch.", "") != dtype) or \
            not s.dtype.is_floating_point:
        raise ValueError(f"{name}: expected {dtype or 'float'} {shown}, got {_desc(s)}")
    if values and s.numel():
        sf = s.float()
        bad = ~torch.isfinite(sf) | (sf <= 0)
        if bool(bad.any()):
            first = float(sf.reshape(-1)[bad.reshape(-1)][0])
            raise ValueError(f"{name}: every scale must be finite and > 0; got {first}")
    return s


def to_scale(name: str, v: Any, device: Any, shapes: Iterable[Tuple[int, ...]] = ((),)) -> Any:
    """A user-given scale (number, list or tensor) as a checked float32 tensor on ``device``."""
    torch = _torch()
    try:
        t = torch.as_tensor(v, dtype=torch.float32, device=device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{name}: expected a number or a float tensor, got "
                         f"{type(v).__name__} ({exc})") from None
    shapes = [tuple(x) for x in shapes]
    if t.numel() == 1 and () in shapes:
        t = t.reshape(())
    return scale(name, t, shapes)


def bias(b: Any, n: int, device: Any = None) -> None:
    """A bias: None or a floating tensor ``[n]`` (on the weights' device)."""
    if b is None:
        return
    if tensor("bias", b).shape != (n,) or not b.dtype.is_floating_point:
        raise ValueError(f"bias: expected a float tensor [{n}], got {_desc(b)}")
    same_device("bias", b, device)


#: id(tensor) -> (a weak reference to it, {key: (its version, value)}); weakref.ref equality
#: compares the referents, which for tensors is elementwise, so entries are keyed by identity
_ONCE: Dict[int, Tuple[Any, Dict[Any, Tuple[Any, Any]]]] = {}


def once(t: Any, key: Any, fn: Any) -> Any:
    """``fn()``, computed once per (tensor ``t``, ``key``) while ``t`` is unchanged: cached on the
    tensor's identity and its version counter (``t._version``, which every in-place write bumps),
    dropped with the tensor. For checks and derived forms of a layer's persistent tensors (its
    checkpoint scales) that a per-call path would otherwise recompute, with a host sync each."""
    entry = _ONCE.get(id(t))
    if entry is None or entry[0]() is not t:
        tid = id(t)

        def drop(ref: Any) -> None:
            if _ONCE.get(tid, (None,))[0] is ref:
                del _ONCE[tid]
        try:
            entry = (weakref.ref(t, drop), {})
        except TypeError:  # not weak-referenceable: no cache
            return fn()
        _ONCE[tid] = entry
    version = getattr(t, "_version", None)
    hit = entry[1].get(key)
    if hit is not None and hit[0] == version:
        return hit[1]
    value = fn()
    entry[1][key] = (version, value)
    return value


def int32_indexing(backend: str, **sizes: int) -> None:
    """Every product named in ``sizes`` (``"x [M, K]": M * K`` ...) within 32-bit indexing."""
    for what, n in sizes.items():
        if n > INT32_MAX:
            raise ValueError(f"{backend}: {what.replace('_', ' ')} has {n} elements, past "
                             f"the kernel's 32-bit indexing (at most {INT32_MAX}); split the "
                             "batch (fewer tokens per call)")


def options(cls: type, given: Iterable[str]) -> None:
    """The constructor keywords ``given`` against those ``cls`` (and the bases its ``**kw``
    reaches) accepts: an unknown one is a ValueError naming it and the accepted ones."""
    accepted = accepted_options(cls)
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        name = getattr(cls, "__name__", str(cls))
        raise ValueError(f"{name} takes no option {', '.join(repr(u) for u in unknown)}; "
                         f"accepted: {', '.join(sorted(accepted))}")


def accepted_options(cls: type) -> Tuple[str, ...]:
    """The keyword names ``cls(...)`` accepts, following ``**kw`` up the MRO."""
    names: list = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            break
        more = False
        for p in params:
            if p.kind == p.VAR_KEYWORD:
                more = True
            elif p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self":
                names.append(p.name)
        if not more:
            break
    return tuple(dict.fromkeys(names))


def output_buffer(out, shape, dtype, device):
    """Validate and return the caller's ``out`` (reused as is), or allocate one of ``shape``."""
    import torch
    if out is None:
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device != torch.device(device):
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype} on {out.device}; expected "
                         f"{tuple(shape)} {dtype} on {device}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    return out


def empty_output(shape: Tuple[int, ...], x: Any, out: Any = None) -> Any:
    """The output of a call with zero tokens: ``[0, ...]`` in x's dtype, or ``out`` checked."""
    torch = _torch()
    if out is None:
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    return output_buffer(out, shape, x.dtype, x.device)


__all__ = ["INT32_MAX", "once", "tensor", "float_input", "same_device", "routing", "scale", "to_scale",
           "bias", "int32_indexing", "options", "accepted_options", "output_buffer", "empty_output"]
