"""ModelOpt checkpoints as vLLM 0.32.0 reads them (modelopt.py: `ModelOptQuantConfigBase
.is_layer_excluded`, `get_quant_method`, the `apply_vllm_mapper` split of `name*` patterns;
`resolve` for each algo's QuantKey pair; MIXED_PRECISION `_resolve_quant_algo`)."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.checkpoint.arch import Architecture, Module
from selector.checkpoint.quant.common import (
    MAX_PATTERNS,
    Quantization,
    Verdict,
    _patterns,
    _star_split,
    map_name,
)
from selector.checkpoint.quant.releases import READINGS, Reading
from selector.core.errors import SelectorError, bad_input, bad_value

# ModelOpt algo -> the layer.quant value of the QuantKey pair vLLM builds for a linear layer
# (modelopt.py `resolve`: FP8 kFp8StaticTensorSym x2; FP8_PER_CHANNEL_PER_TOKEN kFp8StaticTokenSym
# (one scale per weight row = per output channel) + kFp8DynamicTokenSym; FP8_PB_WO
# kFp8Static128BlockSym + kFp8Dynamic128Sym; MXFP8 kMxfp8Static + kMxfp8Dynamic; NVFP4 kNvfp4Static
# + kNvfp4Dynamic; W4A16_NVFP4 kNvfp4Static + none)
_MODELOPT_LINEAR_SCHEME = {"FP8": "fp8_tensor", "FP8_PER_CHANNEL_PER_TOKEN": "fp8_channel",
                           "FP8_PB_WO": "fp8_block", "NVFP4": "nvfp4",
                           "W4A16_NVFP4": "nvfp4_w4a16", "MXFP8": "mxfp8"}
# MIXED_PRECISION routed experts (ModelOptMixedPrecisionConfig.get_quant_method): FP8_PB_WO and
# its alias FP8_BLOCK_SCALES -> Fp8MoEMethod with [group_size]*2 blocks, FP8 ->
# ModelOptFp8MoEMethod (kFp8StaticTensorSym x2), NVFP4/W4A16_NVFP4 -> ModelOptNvFp4FusedMoE,
# MXFP8 -> ModelOptMxFp8FusedMoE; FP8_PER_CHANNEL_PER_TOKEN has no MoE method (None)
_MODELOPT_MOE_SCHEME = {"FP8": "fp8_tensor", "FP8_PB_WO": "fp8_block",
                        "FP8_BLOCK_SCALES": "fp8_block", "NVFP4": "nvfp4",
                        "W4A16_NVFP4": "nvfp4_w4a16", "MXFP8": "mxfp8"}
_MODELOPT_LINEAR = tuple(_MODELOPT_LINEAR_SCHEME)
_MODELOPT_MOE = tuple(_MODELOPT_MOE_SCHEME)
_BLOCK_FP8_MOE_ALGOS = ("FP8_PB_WO", "FP8_BLOCK_SCALES")
# a uniform ModelOpt config's algos (modelopt.py QUANT_ALGOS, less MIXED_PRECISION)
_MODELOPT_SCHEMES = dict(_MODELOPT_LINEAR_SCHEME)
MODELOPT_SOURCE = "vLLM 0.32.0 model_executor/layers/quantization/modelopt.py"


def _is_layer_skipped(prefix: str, ignored: Sequence[str], packed: Mapping[str, Sequence[str]],
                      where: str) -> bool:
    """vLLM quant_utils.is_layer_skipped, exact mode."""
    proj = prefix.split(".")[-1]
    if proj in packed and prefix in ignored:
        return True
    if proj in packed:
        shards = [prefix.replace(proj, s) for s in packed[proj]]
        skipped = [s in ignored for s in shards]
        if any(skipped) and not all(skipped):
            raise SelectorError(f"{where}: some but not all shards of {prefix} are excluded "
                                f"({', '.join(s for s, k in zip(shards, skipped) if k)}); vLLM "
                                "refuses this checkpoint: all shards of a fused layer need the "
                                "same precision (vLLM quant_utils.is_layer_skipped)", where=where)
        return all(skipped)
    if "experts" in prefix:
        return any(prefix in x for x in ignored if "experts" in x)
    return prefix in ignored


def _modelopt_excluded(prefix: str, patterns: Sequence[str], packed: Mapping[str, Sequence[str]],
                       where: str) -> Optional[str]:
    """vLLM ModelOptQuantConfigBase.is_layer_excluded: the pattern that excludes `prefix`."""
    if not patterns:
        return None
    if _is_layer_skipped(prefix, patterns, packed, where):
        proj = prefix.split(".")[-1]
        names = [prefix] + [prefix.replace(proj, s) for s in packed.get(proj, ())]
        return next((p for p in patterns for n in names if n == p or
                     ("experts" in p and prefix in p)), prefix)
    for p in patterns:
        if p != prefix and (p in prefix or (prefix.startswith("language_model.") and
                                            p in prefix.removeprefix("language_model."))):
            return p
    for p in patterns:
        if fnmatch.fnmatchcase(prefix, p):
            return p
    return None


def _vision(prefix: str) -> bool:
    return "vision_tower" in prefix or "vision_model" in prefix or \
        "vit_large_projector" in prefix


def _algo(value: Any) -> str:
    return str(value).upper() if value is not None else ""


@dataclass(frozen=True)
class _Exclusions:
    """A ModelOpt config's exclusion patterns in vLLM's form, and how to name a hit."""
    patterns: Tuple[str, ...]
    shown_as: Mapping[str, str]  # vLLM's form of a pattern -> the checkpoint's
    short_key: str
    packed: Mapping[str, Sequence[str]]
    where: str

    def verdict(self, m: Module) -> Optional[Verdict]:
        """The verdict of an excluded module, or None."""
        hit = _modelopt_excluded(m.name, self.patterns, self.packed, self.where)
        if hit is None:
            return None
        return Verdict(None, f"excluded by {self.short_key} {self.shown_as.get(hit, hit)!r}")


def _modelopt_fields(q: Mapping[str, Any], where: str, reading: Reading = READINGS[0]
                     ) -> Tuple[str, Any, Any, Any]:
    """(exclusion key, quant_algo, exclusions, quantized_layers) of the legacy
    hf_quant_config.json form (`quantization: {...}`) or the config.json one (whose
    `exclude_modules` vLLM reads from 0.33 on: releases.Reading)."""
    if "quantization" in q:
        inner = q["quantization"]
        if not isinstance(inner, dict):
            raise bad_input("quantization", inner, "must be a mapping {\"quant_algo\": ...}",
                            where=where)
        return ("quantization.exclude_modules", inner.get("quant_algo"),
                inner.get("exclude_modules"), inner.get("quantized_layers"))
    if "ignore" not in q and "exclude_modules" in q and reading.modelopt_flat_exclude_modules:
        return "quantization_config.exclude_modules", q.get("quant_algo"), \
            q.get("exclude_modules"), q.get("quantized_layers")
    return "quantization_config.ignore", q.get("quant_algo"), q.get("ignore"), \
        q.get("quantized_layers")


def _modelopt(q: Mapping[str, Any], arch: Architecture, source: str, where: str,
              reading: Reading = READINGS[0]) -> Quantization:
    exclude_key, algo_raw, excluded_raw, layers_raw = _modelopt_fields(q, where, reading)
    algo = _algo(algo_raw)
    excluded = _patterns(excluded_raw, exclude_key, where, "module name patterns")
    shown_as: Dict[str, str] = {}  # vLLM's form of a pattern -> the checkpoint's
    for p in excluded:
        for x in (_star_split([p]) if arch.maps_names else [p]):
            shown_as.setdefault(map_name(arch, x) if arch.maps_names else x, p)
    excl = _Exclusions(tuple(shown_as), shown_as, exclude_key.rsplit(".", 1)[1], arch.packed,
                       where)
    if algo == "MIXED_PRECISION":
        return _modelopt_mixed(layers_raw, arch, excl, source, algo, tuple(excluded))
    if algo not in _MODELOPT_SCHEMES:
        accepted = sorted([*_MODELOPT_SCHEMES, "MIXED_PRECISION"])  # modelopt.py QUANT_ALGOS
        raise bad_value("quant_algo", algo_raw, accepted, where=where,
                        hint="vLLM 0.32.0's ModelOpt configs read these (modelopt.py "
                        "QUANT_ALGOS)")
    return _modelopt_uniform(q, algo, excl, source, tuple(excluded))


def _mixed_recipes(layers_raw: Any, arch: Architecture, where: str) -> Tuple[Dict[str, str], int]:
    """MIXED_PRECISION's `quantized_layers` in vLLM's names -> algo, and the block-FP8 edge."""
    if not isinstance(layers_raw, dict) or not layers_raw:
        raise bad_input("quantized_layers", layers_raw, "must map module names to "
                        "{quant_algo: ...} for MIXED_PRECISION (a non-empty mapping)",
                        where=where)
    if len(layers_raw) > MAX_PATTERNS:
        raise bad_input("quantized_layers", f"{len(layers_raw)} entries", "has more than "
                        f"{MAX_PATTERNS} entries", where=where)
    recipes: Dict[str, str] = {}
    block_sizes: Dict[int, str] = {}
    for prefix, recipe in layers_raw.items():
        a = _algo(recipe.get("quant_algo")) if isinstance(recipe, dict) else ""
        if a not in _MODELOPT_LINEAR and a not in _MODELOPT_MOE:
            raise bad_value(f"quantized_layers.{prefix}.quant_algo", a or None,
                            sorted(set(_MODELOPT_LINEAR + _MODELOPT_MOE)), where=where)
        if a in _BLOCK_FP8_MOE_ALGOS:
            assert isinstance(recipe, dict)
            g = recipe.get("group_size", 128)
            if isinstance(g, bool) or not isinstance(g, int) or g <= 0:
                raise bad_input(f"quantized_layers.{prefix}.group_size", g, "must be a "
                                "positive integer (the FP8 block edge; vLLM builds "
                                "[group_size, group_size] blocks)", where=where)
            block_sizes.setdefault(g, prefix)
        recipes[map_name(arch, prefix) if arch.maps_names else prefix] = a
    if len(block_sizes) > 1:
        raise bad_input("quantized_layers", sorted(block_sizes), "gives the block-FP8 "
                        "layers different group_size values; vLLM 0.32.0 refuses this "
                        "checkpoint: \"MIXED_PRECISION currently requires all block-FP8 MoE "
                        "layers to use one group_size\" (modelopt.py "
                        "ModelOptMixedPrecisionConfig.__init__)", where=where)
    return recipes, next(iter(block_sizes), 128)


def _modelopt_mixed(layers_raw: Any, arch: Architecture, excl: _Exclusions, source: str,
                    algo: str, excluded: Tuple[str, ...]) -> Quantization:
    """MIXED_PRECISION: each module's algo from `quantized_layers`
    (ModelOptMixedPrecisionConfig.get_quant_method)."""
    where = excl.where
    recipes, moe_block = _mixed_recipes(layers_raw, arch, where)

    def mixed(m: Module) -> Verdict:
        hit = excl.verdict(m)
        if hit is not None:
            return hit
        a, key, warning = _resolve_quant_algo(m.name, recipes, excl.packed, where)
        if a is None:
            return Verdict(None, "not in quantized_layers (left unquantized)")
        moe = m.cls == "RoutedExperts"
        if moe and a not in _MODELOPT_MOE or not moe and a not in _MODELOPT_LINEAR:
            return Verdict(None, f"quantized_layers: {a} (no such {m.cls} method: left "
                           "unquantized)")
        why = f"quantized_layers: {a}"
        if moe and a in _BLOCK_FP8_MOE_ALGOS and moe_block != 128:
            return Verdict(None, why, f"FP8 {moe_block}x{moe_block} blocks (group_size "
                           f"{moe_block}: no layer.quant value; fp8_block is 128x128)",
                           warning)
        scheme = (_MODELOPT_MOE_SCHEME if moe else _MODELOPT_LINEAR_SCHEME)[a]
        return Verdict(scheme, why, None, warning)
    return Quantization("ModelOpt", source, algo, mixed, excluded, where=where)


def _modelopt_uniform(q: Mapping[str, Any], algo: str, excl: _Exclusions, source: str,
                      excluded: Tuple[str, ...]) -> Quantization:
    """One algo for every module (ModelOptFp8Config, ModelOptNvFp4Config, ...)."""
    scheme = _MODELOPT_SCHEMES[algo]
    groups = q.get("config_groups")  # vLLM reads them from the top level (original_config)
    shown = algo
    if algo == "NVFP4" and isinstance(groups, dict) and groups and all(
            isinstance(g, dict) and g.get("input_activations") is None for g in groups.values()):
        # NVFP4 declared, yet no group quantizes activations: vLLM serves it as W4A16
        # (vLLM modelopt.py ModelOptNvFp4Config._from_config, 0.32.0)
        scheme, shown = "nvfp4_w4a16", "NVFP4 (no input activations in config_groups: W4A16)"
    moe_scheme, moe_warning = scheme, None
    if algo in ("FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO"):
        # ModelOptFp8Config.FusedMoEMethodCls is ModelOptFp8MoEMethod whatever the FP8 algo:
        # per-tensor static keys (kFp8StaticTensorSym x2) for the experts
        moe_scheme = "fp8_tensor"
        moe_warning = (f"vLLM 0.32.0 builds the experts of a uniform {algo} checkpoint with "
                       "ModelOptFp8MoEMethod, per-tensor static FP8 (fp8_tensor), not the "
                       f"linear layers' {scheme}: the checkpoint's expert scales will not load "
                       "into it (modelopt.py ModelOptFp8Config.FusedMoEMethodCls, "
                       "ModelOptFp8MoEMethod.__init__)")

    def uniform(m: Module) -> Verdict:
        hit = excl.verdict(m)
        if hit is not None:
            return hit
        if _vision(m.name):
            return Verdict(None, "a vision module (vLLM leaves them unquantized)")
        if m.cls == "RoutedExperts":
            return Verdict(moe_scheme, shown, None, moe_warning)
        return Verdict(scheme, shown)
    return Quantization("ModelOpt", source, shown, uniform, excluded, where=excl.where)


def _resolve_quant_algo(prefix: str, layers: Mapping[str, str], packed: Mapping[str,
                        Sequence[str]], where: str) -> Tuple[Optional[str], str, Optional[str]]:
    """vLLM ModelOptMixedPrecisionConfig._resolve_quant_algo: (algo, the key that decided, a
    warning when a fused module's entries disagree and vLLM still builds one method)."""
    candidates = [prefix] + (["lm_head"] if prefix.endswith(".lm_head") else [])
    for c in candidates:
        if c in layers:
            return layers[c], c, None
    proj = prefix.rsplit(".", 1)[-1]
    base = prefix.rsplit(".", 1)[0]
    if proj in packed:
        found = {f"{base}.{s}": layers[f"{base}.{s}"] for s in packed[proj]
                 if f"{base}.{s}" in layers}
        if len(set(found.values())) == 1:
            k, a = next(iter(found.items()))
            return a, k, None
        if len(set(found.values())) > 1:
            raise _mixed_fused(prefix, found, where)
    for c in candidates:
        hits = [(k, a) for k, a in layers.items() if k.startswith(c + ".")]
        if hits:
            return hits[0][1], hits[0][0], _disagree(prefix, hits)
    if prefix.endswith(".experts"):
        parent = prefix.rsplit(".experts", 1)[0] + "."
        hits = [(k, a) for k, a in layers.items() if k.startswith(parent)]
        if hits:
            return hits[0][1], hits[0][0], _disagree(prefix, hits)
    shards = {"qkv_proj": ("q_proj", "k_proj", "v_proj"),
              "gate_up_proj": ("gate_proj", "up_proj")}.get(proj)
    if shards is not None:
        parent = prefix.rsplit(".", 1)[0] + "."
        found = {f"{parent}{s}": layers[f"{parent}{s}"] for s in shards
                 if f"{parent}{s}" in layers}
        if len(set(found.values())) == 1:
            k, a = next(iter(found.items()))
            return a, k, None
        if len(set(found.values())) > 1:
            raise _mixed_fused(prefix, found, where)
    return None, "", None


def _mixed_fused(prefix: str, found: Mapping[str, str], where: str) -> SelectorError:
    shown = ", ".join(f"{k}: {a}" for k, a in found.items())
    return SelectorError(f"{where}: quantized_layers give the shards of the fused layer {prefix} "
                         f"different algorithms ({shown}); vLLM refuses this checkpoint: \"Mixed "
                         "quant_algo within fused layer\" (vLLM modelopt.py "
                         "ModelOptMixedPrecisionConfig._resolve_quant_algo)", where=where)


def _disagree(prefix: str, hits: Sequence[Tuple[str, str]]) -> Optional[str]:
    algos: Dict[str, List[str]] = {}
    for k, a in hits:
        algos.setdefault(a, []).append(k.rsplit(".", 1)[-1])
    if len(algos) < 2:
        return None
    parts = "; ".join(f"{'/'.join(dict.fromkeys(p))} {a}" for a, p in algos.items())
    return (f"quantized_layers disagree within {prefix} ({parts}): vLLM builds one method from "
            f"the first entry, {hits[0][0]!r} ({hits[0][1]}), and the other projections' weights "
            "will not load into it (vLLM modelopt.py ModelOptMixedPrecisionConfig"
            "._resolve_quant_algo)")
