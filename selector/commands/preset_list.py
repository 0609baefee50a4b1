"""`list --presets`: every preset of every config group, what each describes (for a stack, the
versions it holds), so an operator can pick `platform=`, `stack=`, `layer=`, `policy=`."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from selector.config import ConfigTree, load_yaml

GROUPS = ("platform", "stack", "layer", "policy")
_LAYER_SHOWN = ("op", "quant", "activation", "act_and_mul", "hidden_size", "intermediate_size",
                "num_experts", "top_k")


def _file(tree: ConfigTree, group: str, name: str) -> Optional[Path]:
    found = None
    for d in tree.dirs:  # a later directory overrides an earlier one (as in composition)
        for suffix in (".yaml", ".yml"):
            if (d / group / f"{name}{suffix}").is_file():
                found = d / group / f"{name}{suffix}"
    return found


def _describe(group: str, data: Dict[str, Any]) -> str:
    if group == "platform":
        if data.get("preset") == "auto":
            return "detect this machine (GPU, CUDA, installed packages)"
        cap = data.get("capability")
        return f"{data.get('gpu_name') or 'no GPU'} (SM {cap})" if cap else "no GPU"
    if group == "stack":
        pk = data.get("packages") or {}
        held = ", ".join(f"{n} {v}" for n, v in pk.items())
        cuda = f"CUDA {data['cuda']}" if data.get("cuda") else ""
        return "; ".join(x for x in (cuda, held) if x) or "no packages"
    if group == "layer":
        return ", ".join(f"{k} {data[k]}" for k in _LAYER_SHOWN if data.get(k) is not None)
    return ", ".join(f"{k}={v}" for k, v in data.items())


def presets_dict(tree: ConfigTree) -> Dict[str, Dict[str, Dict[str, Any]]]:
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for group in GROUPS:
        out[group] = {}
        for name in tree.group_options(group):
            path = _file(tree, group, name)
            data = (load_yaml(path) if path else None) or {}
            data = {k: v for k, v in data.items() if k != "defaults"}
            out[group][name] = {"describes": _describe(group, data), "values": data}
    return out


def presets_text(tree: ConfigTree) -> str:
    lines: List[str] = []
    for group, presets in presets_dict(tree).items():
        lines.append(f"{group}= (use {group}=NAME)")
        width = max([len(n) for n in presets] + [4])
        lines += [f"  {n.ljust(width)}  {p['describes']}" for n, p in presets.items()]
    return "\n".join(lines)
