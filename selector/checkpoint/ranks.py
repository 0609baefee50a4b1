"""Per-rank sizes of a layer group under an engine's topology (tensor, expert and data
parallelism), and the scheme of a group selector does not plan."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Sequence, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from selector.checkpoint.launchers import Topology
    from selector.checkpoint.plan import Kind

# Projections whose input features are split by tensor parallelism (row-parallel in vLLM,
# SGLang and TensorRT-LLM: the second GEMM of an MLP, the attention output); every other one
# splits its output.
ROW_PARALLEL = ("down_proj", "o_proj", "out_proj", "dense_4h_to_h", "fc2", "w2", "wo")


def other_scheme(k: Kind) -> str:
    """The scheme of a group selector does not plan (no layer.quant value: unquantized, or a
    scheme the vocabulary lacks), from the rule of the quantization config that decided it
    (checkpoint/quant.py's words)."""
    why = k.why
    if re.search(r"excluded|ignored|skipped|unquantized|not in quantized_layers|LM head", why):
        return "unquantized"
    if re.search(r"\bint\d", why):
        return "int"
    return "unknown"


def _row_parallel(projection: str) -> bool:
    return projection.rsplit(".", 1)[-1] in ROW_PARALLEL


def _split(fields: Dict[str, Any], key: str, by: int, what: str, problems: List[str]) -> None:
    v = fields.get(key)
    if by == 1 or v is None:
        return
    if v % by:
        problems.append(f"{what} {v} is not divisible by {by}: the engine cannot split it")
        return
    fields[key] = v // by


def per_rank_fields(fields: Mapping[str, Any], projections: Sequence[str], topo: Topology
                    ) -> List[Tuple[Tuple[str, ...], Dict[str, Any], Tuple[str, ...]]]:
    """[(projections, per-rank fields, problems)]: MoE experts split by EP (count) and MoE TP
    (intermediate size); a linear projection splits its output (column-parallel) or its input
    (row-parallel) by TP."""
    base = {k: v for k, v in fields.items() if k != "quant"}
    if fields["op"] == "moe":
        f = dict(base)
        problems: List[str] = []
        _split(f, "intermediate_size", topo.moe_tp, "intermediate_size", problems)
        if topo.ep > 1 and f.get("num_experts") is not None and f["num_experts"] % topo.ep:
            problems.append(f"num_experts {f['num_experts']} is not divisible by the "
                            f"expert-parallel size {topo.ep}")
        f["ep_size"], f["tp_size"] = topo.ep, topo.moe_tp
        return [(tuple(projections), f, tuple(problems))]
    out = []
    for row in (False, True):
        projs = tuple(p for p in projections if _row_parallel(p) == row)
        if not projs:
            continue
        f = dict(base)
        problems = []
        _split(f, "hidden_size" if row else "intermediate_size", topo.linear_tp,
               "K" if row else "N", problems)
        f["tp_size"] = topo.linear_tp
        f.pop("ep_size", None)
        out.append((projs, f, tuple(problems)))
    return out
