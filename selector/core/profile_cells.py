"""A tuning profile's data: its cells, timings and machine key, and the cell a layer falls in
(`cell_key`, `bucket`); below selector.core.profile, which reads profiles and orders by them."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from selector.core.layer import LAYER_KEYS
from selector.core.schema import Layer

SCHEMA = "selector-profile"
#: 2: cells keyed by the op's own keys (OP_KEYS) and timed on weight copies past the L2 (tune
#: since 2026-12-07); 1 (earlier): read, its cells re-keyed the same way (`migrated`)
VERSION = 2
READ_VERSIONS = (1, 2)
MAX_BYTES = 8 << 20  # a profile of a few hundred layer kinds by ten buckets is ~1 MB
MAX_CELLS = 20000
MAX_BACKENDS = 64  # per cell
MAX_TOKENS = 1 << 24
#: what a profile is valid for: a timing measured under other values says nothing here
KEY_FIELDS = ("gpu", "capability", "driver", "cuda", "packages", "selector", "machine")
#: a cell's layer: every layer key but num_tokens (the bucket stands for it); what a cell is
#: looked up by is narrower: OP_KEYS
SHAPE_KEYS = tuple(k for k in LAYER_KEYS if k != "num_tokens")
#: per op, the layer keys a kernel's time depends on, and so a cell's key (num_tokens aside: the
#: bucket stands for it). A linear layer is timed at K = hidden_size, N = intermediate_size in its
#: scheme and dtype; its activation, act_and_mul, experts or parallel sizes change nothing it runs
#: (an embedder's default layer is an MoE one: a plain select(op="linear", ...) inherits its
#: act_and_mul and must still find the linear cell). An MoE layer runs num_experts / ep_size
#: local experts of intermediate_size / tp_size rows, top_k of them per token, with its
#: activation fused; all2all is communication, not the kernel tune times.
OP_KEYS: Dict[str, Tuple[str, ...]] = {
    "linear": ("op", "quant", "dtype", "hidden_size", "intermediate_size"),
    "moe": ("op", "quant", "activation", "act_and_mul", "ep_size", "tp_size", "swiglu_limit",
            "dtype", "hidden_size", "intermediate_size", "num_experts", "top_k"),
}
#: short names of the size keys in a cell's description
_SHORT = {"hidden_size": "K", "intermediate_size": "N", "num_experts": "E", "top_k": "top_k",
          "ep_size": "ep", "tp_size": "tp"}
STAT_KEYS = ("median_ms", "p10_ms", "p90_ms")


def bucket(num_tokens: int) -> int:
    """The token bucket of `num_tokens`: the smallest power of two >= it (1, 2, 4, ..., 128)."""
    return 1 << max(0, int(num_tokens) - 1).bit_length()


def keys_of(op: Any) -> Tuple[str, ...]:
    """The layer keys a cell of `op` is looked up by (OP_KEYS; every shape key for an op a
    plugin adds)."""
    return OP_KEYS.get(str(op), SHAPE_KEYS)


def shape_of(layer: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
    """A layer's shape part of a cell key: the keys its op's kernel time depends on (OP_KEYS),
    with their values; the same for a cell tune wrote and a layer being decided."""
    return tuple((k, layer.get(k)) for k in keys_of(layer.get("op")))


def describe(shape: Mapping[str, Any], bucket_: Optional[int] = None) -> str:
    """A cell in words: `linear fp8_block bfloat16 K=7168 N=4096 at the 128-token bucket`."""
    parts = [str(shape.get("op")), str(shape.get("quant"))]
    for k in keys_of(shape.get("op")):
        if k in ("op", "quant"):
            continue
        v = shape.get(k)
        if k in _SHORT:
            parts.append(f"{_SHORT[k]}={v}")
        elif k == "act_and_mul":
            parts.append("act_and_mul" if v else "no act_and_mul")
        elif v is not None:
            parts.append(f"{k}={v}" if k == "swiglu_limit" else str(v))
    return " ".join(parts) + ("" if bucket_ is None else f" at the {bucket_}-token bucket")


CellKey = Tuple[Tuple[Tuple[str, Any], ...], int]


def cell_key(layer: Layer) -> Optional[CellKey]:
    """The cell a layer falls in; None when it gives no num_tokens (no bucket to look up)."""
    if layer.num_tokens is None:
        return None
    return shape_of(layer.to_dict()), bucket(layer.num_tokens)


@dataclass(frozen=True)
class Timing:
    """One backend's time for one cell: the median and the 10th and 90th percentiles of `n`
    calls (milliseconds)."""
    median_ms: float
    p10_ms: float
    p90_ms: float
    n: int

    def to_dict(self) -> Dict[str, Any]:
        return {"median_ms": self.median_ms, "p10_ms": self.p10_ms, "p90_ms": self.p90_ms,
                "n": self.n}


@dataclass(frozen=True)
class Cell:
    """The times of one layer shape at one token bucket (`tokens`: the count that was run)."""
    layer: Dict[str, Any]  # the layer's keys, num_tokens = tokens
    tokens: int
    times: Dict[str, Timing]
    skipped: Dict[str, str] = field(default_factory=dict)  # backend -> why it was not timed
    #: beside a graph timing, each eager call between CUDA events (what the host adds); never
    #: ranked by: `times` orders the backends
    eager: Dict[str, Timing] = field(default_factory=dict)

    @property
    def key(self) -> CellKey:
        return shape_of(self.layer), bucket(self.tokens)

    def to_dict(self) -> Dict[str, Any]:
        d = {"layer": dict(self.layer), "tokens": self.tokens, "bucket": bucket(self.tokens),
             "times": {b: t.to_dict() for b, t in sorted(self.times.items())},
             "skipped": dict(sorted(self.skipped.items()))}
        if self.eager:
            d["eager"] = {b: t.to_dict() for b, t in sorted(self.eager.items())}
        return d


@dataclass(frozen=True)
class Profile:
    key: Dict[str, Any]
    cells: Tuple[Cell, ...]
    settings: Dict[str, Any] = field(default_factory=dict)
    created: str = ""
    version: int = VERSION  # as read; a profile is written as VERSION (a v1 file is migrated)

    @property
    def migrated(self) -> bool:
        """Read from a version-1 file: its cells were keyed on every layer key and timed on one
        weight that may stay in the L2; they are re-keyed by OP_KEYS (docs/tuning.md)."""
        return self.version < VERSION

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": SCHEMA, "version": VERSION, "created": self.created,
                "key": self.key, "settings": self.settings,
                "cells": [c.to_dict() for c in self.cells]}

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True, allow_nan=False) + "\n"

    def index(self) -> Dict[CellKey, Cell]:
        """Cells by key; a later cell of the same key replaces an earlier one."""
        return {c.key: c for c in self.cells}


# ---------------------------------------------------------------------------------------------
# Reading: bounded, regular files only, every problem named
