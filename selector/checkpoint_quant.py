"""A checkpoint's quantization description: which scheme each module has, and what is excluded.

ModelOpt (`hf_quant_config.json`, or `quantization_config` with quant_method modelopt: quant_algo
NVFP4, W4A16_NVFP4 or MIXED_PRECISION with quantized_layers; exclude_modules/ignore wildcards) and
compressed-tensors (`quantization_config` config groups, W4A16 groups without input activations,
`ignore` names and `re:` patterns), read the way vLLM's modelopt.py and compressed_tensors.py
read them.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

from .checkpoint_arch import read_json
from .errors import bad_input, bad_value

Scheme = Tuple[Optional[str], str]  # (nvfp4 | nvfp4_w4a16 | None, why)


@dataclass(frozen=True)
class Quantization:
    format: str  # "ModelOpt" | "compressed-tensors"
    source: str  # the file and key it came from
    algo: str  # NVFP4 | W4A16_NVFP4 | MIXED_PRECISION | compressed-tensors format
    scheme_of: Callable[[Tuple[str, ...], bool], Tuple[Optional[str], str]] = field(compare=False)
    excluded: Tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.format} {self.algo} ({self.source})"


_MODELOPT_ALGOS = {"NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4_w4a16"}
_MODELOPT_OTHER = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "MXFP8")


def _modelopt_excluded(names: Sequence[str], patterns: Sequence[str]) -> Optional[str]:
    for n in names:
        for p in patterns:
            if n == p or n.startswith(p + ".") or fnmatch.fnmatchcase(n, p):
                return p
    return None


def _modelopt(q: Mapping[str, Any], source: str, where: str, exclude_key: str) -> Quantization:
    algo = str(q.get("quant_algo") or "").upper()
    excluded = q.get(exclude_key) or []
    if not isinstance(excluded, list) or not all(isinstance(x, str) for x in excluded):
        raise bad_input(exclude_key, excluded, "must be a list of module name patterns",
                        where=where)
    accepted = sorted([*_MODELOPT_ALGOS, "MIXED_PRECISION"])
    if algo == "MIXED_PRECISION":
        layers = q.get("quantized_layers")
        if not isinstance(layers, dict) or not layers:
            raise bad_input("quantized_layers", layers, "must map module names to "
                            "{quant_algo: ...} for MIXED_PRECISION", where=where)
        recipes = {}
        for prefix, recipe in layers.items():
            a = str((recipe or {}).get("quant_algo") or "").upper() \
                if isinstance(recipe, dict) else ""
            if a not in _MODELOPT_ALGOS and a not in _MODELOPT_OTHER:
                raise bad_value(f"quantized_layers.{prefix}.quant_algo", a or None,
                                [*_MODELOPT_ALGOS, *_MODELOPT_OTHER], where=where)
            recipes[prefix] = a

        def mixed(names: Tuple[str, ...], linear_class: bool) -> Scheme:
            hit = _modelopt_excluded(names, excluded)
            if hit:
                return None, f"excluded by {exclude_key} {hit!r}"
            for n in names:
                for prefix, a in recipes.items():
                    if n == prefix or n.startswith(prefix + "."):
                        return _MODELOPT_ALGOS.get(a), f"quantized_layers: {a}"
            return None, "not in quantized_layers (left unquantized)"
        return Quantization("ModelOpt", source, algo, mixed, tuple(excluded))
    if algo not in _MODELOPT_ALGOS:
        raise bad_value("quant_algo", q.get("quant_algo"), accepted, where=where,
                        hint="only NVFP4 checkpoints are explained")
    scheme = _MODELOPT_ALGOS[algo]
    groups = q.get("config_groups")
    if algo == "NVFP4" and isinstance(groups, dict) and groups and all(
            isinstance(g, dict) and g.get("input_activations") is None for g in groups.values()):
        # NVFP4 declared, yet no group quantizes activations: vLLM serves it as W4A16
        # (vLLM modelopt.py ModelOptNvFp4Config._from_config, 0.32.0)
        scheme, algo = "nvfp4_w4a16", "NVFP4 (no input activations in config_groups: W4A16)"

    def scheme_of(names: Tuple[str, ...], linear_class: bool) -> Scheme:
        hit = _modelopt_excluded(names, excluded)
        return (None, f"excluded by {exclude_key} {hit!r}") if hit else (scheme, algo)
    return Quantization("ModelOpt", source, algo, scheme_of, tuple(excluded))


def _ct_is_nvfp4(args: Any) -> bool:
    """vLLM's `_is_nvfp4_format`: 4-bit float, tensor_group strategy, group size 16, symmetric."""
    return isinstance(args, dict) and args.get("num_bits") == 4 and \
        args.get("type") == "float" and args.get("strategy") == "tensor_group" and \
        args.get("group_size") == 16 and args.get("symmetric", True) is True


def _ct_match(name: str, target: str, linear_class: bool) -> bool:
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return name == target or (target == "Linear" and linear_class)


def _compressed_tensors(q: Mapping[str, Any], source: str, where: str) -> Quantization:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise bad_input("quantization_config.config_groups", groups, "must map group names to "
                        "{targets, weights, input_activations}", where=where)
    ignore = q.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(x, str) for x in ignore):
        raise bad_input("quantization_config.ignore", ignore, "must be a list of module names "
                        "or 're:' patterns", where=where)
    parsed = []
    for gname, g in groups.items():
        key = f"quantization_config.config_groups.{gname}"
        if not isinstance(g, dict) or not isinstance(g.get("targets"), list) or \
                not isinstance(g.get("weights"), dict):
            raise bad_input(key, g, "must hold targets (a list) and weights (a mapping)",
                            where=where)
        w, a = g["weights"], g.get("input_activations")
        if _ct_is_nvfp4(w):
            if a is None:
                scheme = "nvfp4_w4a16"
            elif _ct_is_nvfp4(a):
                scheme = "nvfp4"
            else:
                raise bad_input(f"{key}.input_activations", a, "is neither NVFP4 nor null: "
                                "NVFP4 weights need NVFP4 activations (W4A4) or none (W4A16)",
                                where=where)
        else:
            scheme = f"{w.get('type', '?')}{w.get('num_bits', '?')}"
            if a is None:
                scheme += " weight-only"
        parsed.append((gname, [str(t) for t in g["targets"]], scheme))
    if not any(s in ("nvfp4", "nvfp4_w4a16") for _, _, s in parsed):
        raise bad_input("quantization_config.config_groups", sorted(groups), "has no NVFP4 "
                        "group (weights: num_bits 4, type float, strategy tensor_group, "
                        "group_size 16)", where=where)

    def scheme_of(names: Tuple[str, ...], linear_class: bool) -> Scheme:
        for n in names:
            for t in ignore:
                if _ct_match(n, t, False):
                    return None, f"ignored by {t!r}"
        for n in names:
            for gname, targets, scheme in parsed:
                if any(_ct_match(n, t, linear_class) for t in targets):
                    if scheme in ("nvfp4", "nvfp4_w4a16"):
                        return scheme, f"config group {gname}"
                    return None, f"config group {gname} ({scheme})"
        return None, "matched by no config group (left unquantized)"
    fmt = str(q.get("format") or "compressed-tensors")
    return Quantization("compressed-tensors", source, fmt, scheme_of, tuple(ignore))


def read_quantization(model_dir: Path, config: Mapping[str, Any]) -> Quantization:
    """ModelOpt's hf_quant_config.json first (as vLLM reads it), else quantization_config."""
    hf = model_dir / "hf_quant_config.json"
    if hf.is_file():
        data = read_json(hf)
        q = data.get("quantization")
        if not isinstance(q, dict):
            raise bad_input("quantization", q, "is missing: hf_quant_config.json holds "
                            "{\"quantization\": {\"quant_algo\": ...}}", where=str(hf))
        return _modelopt(q, "hf_quant_config.json", str(hf), "exclude_modules")
    where = str(model_dir / "config.json")
    q = config.get("quantization_config")
    if q is None:
        raise bad_input("quantization_config", None, "is missing, and there is no "
                        "hf_quant_config.json: this is not a quantized checkpoint (NVFP4 "
                        "checkpoints come from ModelOpt or compressed-tensors)", where=where)
    if not isinstance(q, dict):
        raise bad_input("quantization_config", q, "must be a mapping", where=where)
    method = q.get("quant_method")
    if method == "modelopt":
        return _modelopt(q, "config.json quantization_config", where, "ignore")
    if method == "compressed-tensors":
        return _compressed_tensors(q, "config.json quantization_config", where)
    raise bad_value("quantization_config.quant_method", method, ("modelopt",
                    "compressed-tensors"), where=where,
                    hint="only NVFP4 checkpoints (ModelOpt or compressed-tensors) are explained")


# ---------------------------------------------------------------------------------------------
