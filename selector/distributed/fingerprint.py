"""A rank's fingerprint (`encode`): what it contributes to the agreement, as canonical JSON.

Its platform and, per layer, every candidate's status and reasons, read from its decisions
(`read_decision`, the only code that reads a Decision for the agreement); distinct layers and
verdicts listed once. Ranks whose fingerprints are byte-identical (`digest`) are compared once
(selector/distributed/agreement.py).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, Sequence, Tuple, Union

from selector.core.errors import SelectorError

VERSION = 1  # the fingerprint format: a peer of another version is refused, not misread


def read_decision(d: Any) -> Dict[str, Any]:
    """What a rank contributes for one layer: the only code that reads a Decision.

    Statuses are taken before selection: a selected candidate is `opt_in` when its reasons say
    so, else `eligible`. `strict` matters only where the requested backend fails, and there the
    resolver's note says whether policy.strict=true refused to fall back. Each reason is
    [rule, message, source, need, severity] (need and severity feed the agreed summary and
    log line); `warnings` are the warning-level reasons, [backend, rule, message, source, need,
    severity].
    """
    data = d.to_dict()
    candidates = []
    for c, own in zip(data["candidates"], d.candidates):
        reasons = [[r["rule"], r["message"], r["source"], str(o.need), str(o.severity)]
                   for r, o in zip(c["reasons"], own.reasons)]
        status = str(c["status"])
        if status == "selected":
            status = "opt_in" if any(r[0] == "opt_in" for r in reasons) else "eligible"
        candidates.append([c["backend"], status, reasons])
    notes = [str(n) for n in data["notes"]]
    warnings = [[str(b), w.rule, w.message, w.source, str(w.need), str(w.severity)]
                for b, w in d.warnings]
    return {"layer": data["layer"], "platform": data["platform"],
            "verdict": {"requested": data["requested"], "selected": data["selected"],
                        "strict": any("policy.strict=true refuses" in n for n in notes),
                        "candidates": candidates, "notes": notes, "warnings": warnings}}


def encode(decisions: Union[Sequence[Any], BaseException]) -> bytes:
    """This rank's fingerprint as canonical JSON: distinct layers and verdicts listed once."""
    if isinstance(decisions, BaseException):
        body: Dict[str, Any] = {"v": VERSION, "error": _error_text(decisions)}
    else:
        layers: Dict[str, int] = {}
        verdicts: Dict[str, int] = {}
        read: Dict[int, Tuple[int, int]] = {}  # id(decision) -> indices; decisions are shared
        per_layer, platform = [], None
        for d in decisions:
            got = read.get(id(d))
            if got is None:
                facts = read_decision(d)
                platform = facts["platform"] if platform is None else platform
                lk = _canon(facts["layer"])
                vk = _canon(facts["verdict"])
                got = read[id(d)] = (layers.setdefault(lk, len(layers)),
                                     verdicts.setdefault(vk, len(verdicts)))
            per_layer.append(got)
        body = {"v": VERSION, "error": None, "platform": platform,
                "layers": [json.loads(k) for k in layers],
                "verdicts": [json.loads(k) for k in verdicts], "per_layer": per_layer}
    return _canon(body).encode()


def digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _error_text(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if isinstance(e, SelectorError) else f"{type(e).__name__}: {text}"
