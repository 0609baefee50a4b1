"""A checkpoint's quantization description: which scheme vLLM builds for each module.

Which file: config.json's `quantization_config` first, then `hf_quant_config.json` (vLLM
transformers_utils/config.py get_config: "ModelOpt 0.31.0 and after saves the quantization
config in the model config file"); both present and contradicting gives a warning.

Each scheme is what vLLM 0.32.0's quantization config answers for the module's vLLM prefix,
named by selector's `layer.quant` vocabulary (schema.QUANT_SCHEMES: nvfp4, nvfp4_w4a16,
fp8_tensor, fp8_tensor_dynamic, fp8_channel, fp8_block, mxfp8, mxfp4, mxfp4_w4a4 ...):
ModelOpt (modelopt.py: `ModelOptQuantConfigBase.is_layer_excluded`, `get_quant_method`, the
`apply_vllm_mapper` split of `name*` patterns; `resolve` for each algo's QuantKey pair;
MIXED_PRECISION `_resolve_quant_algo`), compressed-tensors (compressed_tensors.py
`get_scheme_dict`, `_get_scheme_from_parts`, utils.py `should_ignore_layer`,
`find_matched_target`; compressed_tensors_moe.py `get_moe_method` for routed experts), FP8
(fp8.py `Fp8Config.from_config`, `get_quant_method`, quant_utils.py `is_layer_skipped`) and
MXFP4 (mxfp4.py `Mxfp4Config`, `GptOssMxfp4Config`). These are ports of that code, proven module
by module against it by tests/vllm/test_checkpoint_differential.py.
`re:` patterns run under a structural bound (no nested or alternated repetition, few repeats,
bounded length), so that a hostile pattern is refused by name instead of backtracking for ever.
"""
from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.checkpoint.arch import Architecture, Module, read_json
from selector.core.errors import SelectorError, bad_input, bad_value
from selector.core.schema import QUANT_SCHEMES

NVFP4_SCHEMES = ("nvfp4", "nvfp4_w4a16")
MAX_PATTERNS = 100_000  # exclusion/ignore/target entries (real ones: a few hundred)
MAX_PATTERN_CHARS = 1_000
MAX_REGEX_REPEATS = 4  # `*`, `+`, `{m,n}` with n > 1 in one `re:` pattern


@dataclass(frozen=True)
class Verdict:
    """What vLLM builds for one module: `scheme` a `layer.quant` value (None: unquantized, or a
    scheme the vocabulary has no value for, named by `other`)."""
    scheme: Optional[str]  # nvfp4 | nvfp4_w4a16 | fp8_tensor | ... | mxfp4 | None
    why: str
    other: Optional[str] = None  # a scheme vLLM builds that has no layer.quant value, if any
    warning: Optional[str] = None  # said on the layer kind (projections disagree, ...)


@dataclass(frozen=True)
class Quantization:
    format: str  # "ModelOpt" | "compressed-tensors" | "FP8" | "MXFP4"
    source: str  # the file and key it came from
    algo: str  # NVFP4 | FP8_PB_WO | MIXED_PRECISION | compressed-tensors format | block 128x128
    verdict_of: Callable[[Module], Verdict] = field(compare=False)
    excluded: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()
    where: str = ""  # the file it was read from

    def describe(self) -> str:
        return f"{self.format} {self.algo} ({self.source})"


# ---------------------------------------------------------------------------------------------
# Bounded regular expressions

def _check_regex(tree: Any, pattern: str) -> None:
    from re import _constants as C  # type: ignore[attr-defined]
    from re import _parser as P  # type: ignore[attr-defined]
    repeats = 0

    def walk(items: Any, in_repeat: bool) -> None:
        nonlocal repeats
        for op, av in items:
            if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
                lo, hi, body = av
                if hi is C.MAXREPEAT or hi > 1:
                    repeats += 1
                    if in_repeat:
                        raise ValueError("a repetition inside a repetition")
                    walk(body, True)
                else:
                    walk(body, in_repeat)
            elif op is C.BRANCH:
                if in_repeat:
                    raise ValueError("alternatives inside a repetition")
                for b in av[1]:
                    walk(b, in_repeat)
            elif op is C.SUBPATTERN:
                walk(av[-1], in_repeat)
            elif op in (C.ASSERT, C.ASSERT_NOT):
                walk(av[1], in_repeat)
            elif op in (C.GROUPREF, C.GROUPREF_EXISTS):
                raise ValueError("a back-reference")
            elif op is C.ATOMIC_GROUP:
                walk(av, in_repeat)
    del P
    walk(tree, False)
    if repeats > MAX_REGEX_REPEATS:
        raise ValueError(f"{repeats} repetitions (at most {MAX_REGEX_REPEATS})")


_REGEX_CACHE: Dict[str, re.Pattern[str]] = {}


def bounded_regex(pattern: str, key: str, where: str) -> re.Pattern[str]:
    """`pattern` compiled, or a SelectorError naming it: malformed, or shaped so that Python's
    backtracking matcher could run for ever (`(.|.)*!`)."""
    got = _REGEX_CACHE.get(pattern)
    if got is not None:
        return got
    if len(pattern) > MAX_PATTERN_CHARS:
        raise bad_input(key, pattern[:60] + "...", f"is {len(pattern)} characters long (at most "
                        f"{MAX_PATTERN_CHARS})", where=where)
    from re import _parser as P  # type: ignore[attr-defined]
    try:
        tree = P.parse(pattern)
        compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        raise bad_input(key, "re:" + pattern, f"is not a regular expression: {exc}",
                        where=where) from None
    try:
        _check_regex(tree, pattern)
    except ValueError as exc:
        raise bad_input(key, "re:" + pattern, f"is refused: {exc} can make matching take "
                        "exponential time; write the pattern without it", where=where) from None
    if len(_REGEX_CACHE) > 4096:
        _REGEX_CACHE.clear()
    _REGEX_CACHE[pattern] = compiled
    return compiled


def _patterns(value: Any, key: str, where: str, what: str) -> List[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise bad_input(key, value, f"must be a list of {what}", where=where)
    if len(value) > MAX_PATTERNS:
        raise bad_input(key, f"{len(value)} entries", f"has more than {MAX_PATTERNS} entries",
                        where=where)
    for x in value:
        if len(x) > MAX_PATTERN_CHARS:
            raise bad_input(key, x[:60] + "...", f"is {len(x)} characters long (at most "
                            f"{MAX_PATTERN_CHARS})", where=where)
        if x.startswith("re:"):
            bounded_regex(x[3:], key, where)
    return list(value)


# ---------------------------------------------------------------------------------------------
# vLLM's name mapping (models/utils.py WeightsMapper.get_rename_mapper: renames, no stacking)

def map_name(arch: Architecture, name: str) -> str:
    for substr, new in arch.rename_substr:
        if substr in name:
            name = name.replace(substr, new, 1)
    for prefix, new in arch.rename_prefix:
        if name.startswith(prefix):
            name = name.replace(prefix, new, 1)
    for suffix, new in arch.rename_suffix:
        if name.endswith(suffix):
            name = new.join(name.rsplit(suffix, 1))
    return name


def _star_split(patterns: Sequence[str]) -> List[str]:
    """ModelOpt's apply_vllm_mapper: `path*` becomes `path` and `path.*` (vLLM #28072)."""
    out: List[str] = []
    for p in patterns:
        if len(p) >= 2 and p[-1] == "*" and p[-2] != ".":
            out += [p[:-1], p[:-1] + ".*"]
        else:
            out.append(p)
    return out


# ---------------------------------------------------------------------------------------------
# ModelOpt

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


def _modelopt(q: Mapping[str, Any], arch: Architecture, source: str, where: str) -> Quantization:
    if "quantization" in q:
        inner = q["quantization"]
        if not isinstance(inner, dict):
            raise bad_input("quantization", inner, "must be a mapping {\"quant_algo\": ...}",
                            where=where)
        exclude_key = "quantization.exclude_modules"
        algo_raw, excluded_raw = inner.get("quant_algo"), inner.get("exclude_modules")
        layers_raw = inner.get("quantized_layers")
    else:
        exclude_key = "quantization_config.ignore"
        algo_raw, excluded_raw = q.get("quant_algo"), q.get("ignore")
        layers_raw = q.get("quantized_layers")
    algo = _algo(algo_raw)
    short_key = exclude_key.rsplit(".", 1)[1]
    excluded = _patterns(excluded_raw, exclude_key, where, "module name patterns")
    shown_as: Dict[str, str] = {}  # vLLM's form of a pattern -> the checkpoint's
    for p in excluded:
        for x in (_star_split([p]) if arch.maps_names else [p]):
            shown_as.setdefault(map_name(arch, x) if arch.maps_names else x, p)
    patterns = list(shown_as)
    packed = arch.packed
    accepted = sorted([*_MODELOPT_SCHEMES, "MIXED_PRECISION"])  # modelopt.py QUANT_ALGOS
    if algo == "MIXED_PRECISION":
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
        moe_block = next(iter(block_sizes), 128)

        def mixed(m: Module) -> Verdict:
            hit = _modelopt_excluded(m.name, patterns, packed, where)
            if hit is not None:
                return Verdict(None, f"excluded by {short_key} {shown_as.get(hit, hit)!r}")
            a, key, warning = _resolve_quant_algo(m.name, recipes, packed, where)
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
        return Quantization("ModelOpt", source, algo, mixed, tuple(excluded), where=where)
    if algo not in _MODELOPT_SCHEMES:
        raise bad_value("quant_algo", algo_raw, accepted, where=where,
                        hint="vLLM 0.32.0's ModelOpt configs read these (modelopt.py "
                        "QUANT_ALGOS)")
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
        hit = _modelopt_excluded(m.name, patterns, packed, where)
        if hit is not None:
            return Verdict(None, f"excluded by {short_key} {shown_as.get(hit, hit)!r}")
        if _vision(m.name):
            return Verdict(None, "a vision module (vLLM leaves them unquantized)")
        if m.cls == "RoutedExperts":
            return Verdict(moe_scheme, shown, None, moe_warning)
        return Verdict(scheme, shown)
    return Quantization("ModelOpt", source, shown, uniform, tuple(excluded), where=where)


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


# ---------------------------------------------------------------------------------------------
# FP8 (`quant_method: fp8`: DeepSeek-V3/R1, Qwen3-FP8, AutoFP8 exports) and MXFP4 (gpt-oss)

FP8_SOURCE = "vLLM 0.32.0 model_executor/layers/quantization/fp8.py"
MXFP4_SOURCE = "vLLM 0.32.0 model_executor/layers/quantization/mxfp4.py"
FP8_ACTIVATION_SCHEMES = ("dynamic", "static")  # fp8.py ACTIVATION_SCHEMES


def fp8_block_size(value: Any, key: str, where: str) -> Optional[Tuple[int, int]]:
    """A `weight_block_size` as vLLM takes it: None, or two positive integers [N, K]
    (fp8.py Fp8Config.__init__ refuses any other length)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise bad_input(key, value, "must be a list of two integers [block_n, block_k], "
                        "e.g. [128, 128] (fp8_block): vLLM 0.32.0 refuses it (\"The "
                        "quantization block size of weight must have 2 dimensions\", fp8.py "
                        "Fp8Config.__init__)", where=where,
                        accepted=("[128, 128]",))
    if not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 1 << 20
               for x in value):
        raise bad_input(key, value, "must hold two positive integers [block_n, block_k], e.g. "
                        "[128, 128] (fp8_block)",
                        where=where, accepted=("[128, 128]",))
    return int(value[0]), int(value[1])


def _block_scheme(block: Tuple[int, int]) -> Tuple[Optional[str], Optional[str]]:
    """(layer.quant value, or the name of a scheme without one) for an FP8 block shape."""
    if block == (128, 128):
        return "fp8_block", None
    return None, (f"FP8 {block[0]}x{block[1]} blocks (no layer.quant value: fp8_block is "
                  "128x128; vLLM 0.32.0 builds a kFp8Static QuantKey of that group shape, "
                  "fp8.py Fp8LinearMethod.__init__)")


def _fp8(q: Mapping[str, Any], arch: Architecture, source: str, where: str) -> Quantization:
    """vLLM Fp8Config: every LinearBase and every RoutedExperts is FP8 unless `ignored_layers`
    (or, when that is empty, `modules_to_not_convert`) skips it, exact names with fused shards
    (quant_utils.is_layer_skipped, match mode "exact"); the LM head (not a LinearBase) stays
    unquantized. With `weight_block_size` the layers are block-FP8 (dynamic activations only),
    without it per-tensor with static or dynamic activations. `store_dtype: mxfp4` makes the
    experts MXFP4 (Mxfp4MoEMethod)."""
    if "activation_scheme" not in q:
        raise bad_input("quantization_config.activation_scheme", None, "is missing (accepted: "
                        "dynamic, static): vLLM 0.32.0 refuses an FP8 config without it (fp8.py "
                        "Fp8Config.from_config)", where=where, accepted=FP8_ACTIVATION_SCHEMES)
    act = q["activation_scheme"]
    if act not in FP8_ACTIVATION_SCHEMES:
        raise bad_value("quantization_config.activation_scheme", act, FP8_ACTIVATION_SCHEMES,
                        where=where, hint="vLLM 0.32.0 refuses it: \"Unsupported activation "
                        "scheme\" (fp8.py Fp8Config.__init__)")
    block = fp8_block_size(q.get("weight_block_size"), "quantization_config.weight_block_size",
                           where)
    if block is not None and act != "dynamic":
        raise bad_input("quantization_config.activation_scheme", act, "is refused with "
                        "weight_block_size: vLLM 0.32.0's block-wise FP8 takes dynamic "
                        "activations only (fp8.py Fp8Config.__init__)", where=where,
                        accepted=("dynamic",))
    key = "quantization_config.ignored_layers"
    ignored = _patterns(q.get("ignored_layers"), key, where, "module names")
    if not ignored:
        key = "quantization_config.modules_to_not_convert"
        ignored = _patterns(q.get("modules_to_not_convert"), key, where, "module names")
    store = q.get("store_dtype")
    if store is not None and not isinstance(store, str):
        raise bad_input("quantization_config.store_dtype", store, "must be a string",
                        where=where)
    shown_as = {(map_name(arch, p) if arch.maps_names else p): p for p in ignored}
    names = list(shown_as)
    packed = arch.packed
    short = key.rsplit(".", 1)[1]
    if block is not None:
        scheme, other = _block_scheme(block)
        algo = f"block {block[0]}x{block[1]}, dynamic activations"
        moe_scheme, moe_other = scheme, other
    else:
        scheme = moe_scheme = "fp8_tensor" if act == "static" else "fp8_tensor_dynamic"
        other = moe_other = None
        algo = f"per-tensor, {act} activations"
    if store == "mxfp4":
        moe_scheme, moe_other = "mxfp4", None
        algo += ", MXFP4 experts (store_dtype)"

    def verdict(m: Module) -> Verdict:
        if m.cls == "ParallelLMHead":
            return Verdict(None, "the LM head (vLLM's Fp8Config quantizes LinearBase and "
                           "RoutedExperts layers only)")
        if _is_layer_skipped(m.name, names, packed, where):
            proj = m.name.split(".")[-1]
            hit = next((p for p in names for n in [m.name] + [m.name.replace(proj, x) for x in
                                                               packed.get(proj, ())]
                        if n == p or ("experts" in p and m.name in p)), m.name)
            return Verdict(None, f"skipped by {short} {shown_as.get(hit, hit)!r}")
        if m.cls == "RoutedExperts":
            return Verdict(moe_scheme, f"FP8 {algo}", moe_other)
        return Verdict(scheme, f"FP8 {algo}", other)
    return Quantization("FP8", source, algo, verdict, tuple(ignored), where=where)


def _mxfp4(q: Mapping[str, Any], arch: Architecture, source: str, where: str) -> Quantization:
    """vLLM Mxfp4Config (GptOssMxfp4Config for model_type gpt_oss): routed experts MXFP4 with
    bf16 activations (the checkpoint's W4A16; the MoE oracle may still run them with MXFP8
    activations), every linear layer unquantized ("MXFP4 linear layer is not implemented"),
    whatever the config lists (from_config reads no key)."""
    del q, arch

    def verdict(m: Module) -> Verdict:
        if m.cls == "RoutedExperts":
            return Verdict("mxfp4", "MXFP4 experts (Mxfp4Config)")
        return Verdict(None, "vLLM's MXFP4 config leaves linear layers unquantized "
                       "(mxfp4.py Mxfp4Config.get_quant_method)")
    return Quantization("MXFP4", source, "MXFP4 experts", verdict, (), where=where)


# ---------------------------------------------------------------------------------------------
# compressed-tensors

def _ct_is_nvfp4(args: Any) -> bool:
    """vLLM's `_is_nvfp4_format`: 4-bit float, tensor_group strategy, group size 16, symmetric."""
    return isinstance(args, dict) and args.get("num_bits") == 4 and \
        args.get("type") == "float" and args.get("strategy") == "tensor_group" and \
        args.get("group_size") == 16 and args.get("symmetric", True) is True


def _ct_match(value: str, target: str, contains: bool = False) -> bool:
    """vLLM config_utils.is_equal_or_regex_match."""
    if target.startswith("re:"):
        return bounded_regex(target[3:], "re:", "").match(value) is not None
    if contains:
        return target.lower() in value.lower()
    return target == value


def _ct_ignored(name: str, ignore: Sequence[str], packed: Mapping[str, Sequence[str]],
                where: str) -> Optional[str]:
    """vLLM utils.should_ignore_layer (find_matching_patterns): the pattern, or None."""
    hits = [p for p in ignore if _ct_match(name, p)]
    if hits:
        return hits[0]
    proj = name.split(".")[-1]
    if proj not in packed:
        return None
    per_shard = [[p for p in ignore if _ct_match(name.replace(proj, s), p)] for s in packed[proj]]
    if any(per_shard) and not all(per_shard):
        raise SelectorError(f"{where}: quantization_config.ignore ignores some but not all "
                            f"shards of {name}; vLLM refuses this checkpoint: \"Found different "
                            "quantization schemes for the shards\" (vLLM compressed_tensors/"
                            "utils.py should_ignore_layer)", where=where)
    return per_shard[0][0] if all(per_shard) else None


def _ct_target(name: str, cls: str, targets: Sequence[str], packed: Mapping[str, Sequence[str]]
               ) -> Optional[str]:
    """vLLM utils.find_matched_target: the name (exact or `re:`), then a fused layer's shards
    (all must match; the first shard's target), then the module's class name (contains)."""
    for t in targets:
        if _ct_match(name, t):
            return t
    fused = next((k for k in packed if name.endswith(k)), None)
    if fused is not None:
        matches: List[Optional[str]] = []
        for unfused in (name.replace(fused, u) for u in packed[fused]):
            matches.append(next((t for t in targets if _ct_match(unfused, t)), None))
        if all(matches):
            return matches[0]
    for t in targets:
        if _ct_match(cls, t, contains=True):
            return t
    return None


_CT_STRATEGIES = ("tensor", "channel", "group", "block", "token", "tensor_group", "attn_head")
_CT_ACT_FORMATS = ("naive-quantized", "int-quantized", "float-quantized", "nvfp4-pack-quantized")
CT_SOURCE = ("vLLM 0.32.0 model_executor/layers/quantization/compressed_tensors/"
             "compressed_tensors.py")


@dataclass(frozen=True)
class CtArgs:
    """One compressed-tensors QuantizationArgs, validated as its pydantic model validates it
    (compressed_tensors 0.17.0 quant_args.py QuantizationArgs.validate_model_after)."""
    num_bits: Any
    type: Any
    strategy: str
    group_size: Any
    block: Optional[Tuple[int, int]]
    dynamic: Any  # False | True | "local"
    symmetric: bool
    scale_dtype: Optional[str]


@dataclass(frozen=True)
class CtScheme:
    """A group's scheme for linear layers and for routed experts: a layer.quant value, the name
    of a scheme without one, or "!" and the reason vLLM refuses to build the layer."""
    linear: str
    moe: str


def _ct_args(args: Any, key: str, where: str) -> CtArgs:
    if not isinstance(args, dict):
        raise bad_input(key, args, "must be a mapping of quantization arguments (num_bits, type, "
                        "strategy, ...)", where=where)
    strategy, gs = args.get("strategy"), args.get("group_size")
    if gs is not None and (isinstance(gs, bool) or not isinstance(gs, int)):
        raise bad_input(f"{key}.group_size", gs, "must be an integer", where=where)
    if strategy is None:
        if gs is None:
            strategy = "tensor"
        elif gs > 0:
            strategy = "group"
        elif gs == -1:
            strategy = "channel"
        else:
            raise bad_input(f"{key}.group_size", gs, "is not a group size: use > 0 for strategy "
                            "group, -1 for channel (compressed_tensors QuantizationArgs)",
                            where=where)
    elif not isinstance(strategy, str) or strategy.lower() not in _CT_STRATEGIES:
        raise bad_value(f"{key}.strategy", strategy, _CT_STRATEGIES, where=where,
                        hint="compressed_tensors' QuantizationStrategy refuses it, and vLLM "
                        "with it")
    strategy = strategy.lower()
    dynamic = args.get("dynamic", False)
    if isinstance(dynamic, str):
        if dynamic.lower() != "local":
            raise bad_value(f"{key}.dynamic", dynamic, ("true", "false", "local"), where=where)
        dynamic = "local"
    elif not isinstance(dynamic, bool):
        raise bad_input(f"{key}.dynamic", dynamic, "must be true, false or \"local\"",
                        where=where)
    raw_block = args.get("block_structure")
    block: Optional[Tuple[int, int]] = None
    if raw_block is not None:
        parts: Any = raw_block.split("x") if isinstance(raw_block, str) else raw_block
        try:
            ok = isinstance(parts, list) and len(parts) == 2 and all(
                not isinstance(x, bool) and (isinstance(x, int) or isinstance(raw_block, str))
                and 0 < int(x) <= 1 << 20 for x in parts)
        except ValueError:
            ok = False
        if not ok:
            raise bad_input(f"{key}.block_structure", raw_block, "must be a list of two "
                            "positive integers [rows, cols] (or \"RxC\")", where=where,
                            accepted=("[128, 128]",))
        block = (int(parts[0]), int(parts[1]))
    problem = None
    if strategy == "token" and not dynamic:
        problem = "strategy token needs dynamic: true (static token quantization does not exist)"
    elif strategy in ("group", "tensor_group") and (gs is None or gs <= 0):
        problem = f"strategy {strategy} needs a positive group_size"
    elif gs is not None and gs > 0 and strategy not in ("group", "tensor_group"):
        problem = f"group_size {gs} needs strategy group or tensor_group, not {strategy}"
    elif strategy == "block" and block is None:
        problem = "strategy block needs block_structure [rows, cols]"
    elif block is not None and strategy != "block":
        problem = f"block_structure needs strategy block, not {strategy}"
    elif dynamic and strategy not in ("token", "tensor", "tensor_group", "group"):
        problem = (f"dynamic quantization takes strategy token, tensor, tensor_group or group, "
                   f"not {strategy}")
    elif dynamic == "local" and strategy != "tensor_group":
        problem = "dynamic \"local\" is only for strategy tensor_group"
    if problem is not None:
        raise bad_input(key, args, f"is malformed: {problem}; vLLM 0.32.0 refuses the "
                        "checkpoint (compressed_tensors 0.17.0 QuantizationArgs validation)",
                        where=where)
    sd = args.get("scale_dtype")
    return CtArgs(args.get("num_bits"), args.get("type"), strategy, gs, block, dynamic,
                  args.get("symmetric", True) is True,
                  sd.removeprefix("torch.") if isinstance(sd, str) else None)


def _ct_scheme(w_raw: Any, a_raw: Any, fmt: Optional[str], key: str, where: str) -> CtScheme:
    """vLLM's scheme for a group's arguments: CompressedTensorsConfig._get_scheme_from_parts for
    linear layers, compressed_tensors_moe.py get_moe_method for routed experts (on a GPU of
    SM 8.9 or newer, where FP8 W8A8 is native)."""
    if a_raw == {}:
        a_raw = None
    w = _ct_args(w_raw, f"{key}.weights", where)
    a = None if a_raw is None else _ct_args(a_raw, f"{key}.input_activations", where)
    if _ct_is_nvfp4(w_raw):
        if a is None:
            return CtScheme("nvfp4_w4a16", "nvfp4_w4a16")
        if _ct_is_nvfp4(a_raw):
            return CtScheme("nvfp4", "nvfp4")
        raise bad_input(f"{key}.input_activations", a_raw, "is neither NVFP4 nor null: NVFP4 "
                        "weights need NVFP4 activations (W4A4) or none (W4A16)", where=where)
    mx = w.strategy == "group" and w.type == "float" and w.symmetric
    if mx and w.num_bits == 4 and w.group_size == 32:  # _is_mxfp4
        if a is not None and a.type == "float" and a.num_bits == 8 and a.dynamic and \
                not w.dynamic and a.strategy in ("token", "group") and a.symmetric:
            name = ("MXFP4 weights, dynamic FP8 activations (CompressedTensorsW4A8Mxfp4: no "
                    "layer.quant value; mxfp4_w4a8 takes MXFP8 activations)")
            return CtScheme(name, name)  # _is_mxfp4_w4a8_fp8
        return CtScheme("mxfp4_w4a4", "mxfp4_w4a4")  # CompressedTensorsW4A4Mxfp4: kMxfp4Dynamic
    if mx and w.num_bits == 8 and w.group_size == 32 and w.scale_dtype == "uint8":  # _is_mxfp8
        return CtScheme("mxfp8", "mxfp8")
    if w.type != "float" or w.num_bits != 8:  # int W8A8/W4A16/...: not read into a value
        name = f"{w.type}{w.num_bits}" + (" with quantized activations" if a else
                                          " weight-only")
        return CtScheme(name, name)
    fp8_weights = w.symmetric and not w.dynamic and w.strategy in ("tensor", "channel", "block")
    w8a8 = fp8_weights and a is not None and a.type == "float" and (
        bool(a.dynamic) or (a.symmetric and a.strategy == "tensor"))  # _is_fp8_w8a8
    if not w8a8:
        if fp8_weights:  # _is_fp8_w8a16
            name = "FP8 weight-only (CompressedTensorsW8A16Fp8: no layer.quant value)"
            return CtScheme(name, name)
        why = (f"!vLLM 0.32.0 refuses the layer: no compressed-tensors scheme takes FP8 weights "
               f"with strategy {w.strategy}{', dynamic' if w.dynamic else ''}"
               f"{'' if w.symmetric else ', asymmetric'} (compressed_tensors.py "
               "_get_scheme_from_parts: NotImplementedError)")
        return CtScheme(why, why)
    if fmt is not None and fmt not in _CT_ACT_FORMATS:
        why = (f"!vLLM 0.32.0 refuses the layer: format {fmt!r} is not an activation "
               f"quantization format ({', '.join(_CT_ACT_FORMATS)}; compressed_tensors/utils.py "
               "is_activation_quantization_format)")
        return CtScheme(why, why)
    assert a is not None
    if w.strategy == "block":
        assert w.block is not None
        scheme, other = _block_scheme(w.block)
        linear = moe = scheme or str(other)
    elif w.strategy == "tensor":
        linear = "fp8_tensor_dynamic" if a.dynamic else "fp8_tensor"
        moe = linear if a.strategy == "tensor" else (
            f"!vLLM 0.32.0 refuses the experts: per-tensor FP8 weights take per-tensor "
            f"activations in an MoE, not {a.strategy} (compressed_tensors_moe_w8a8_fp8.py "
            "CompressedTensorsW8A8Fp8MoEMethod.__init__ asserts block weights)")
    else:  # channel
        linear = "fp8_channel" if a.dynamic else (
            "FP8 per-channel weights, static per-tensor activations (no layer.quant value)")
        moe = "fp8_channel" if a.strategy == "token" else (
            f"!vLLM 0.32.0 refuses the experts: per-channel FP8 weights take dynamic per-token "
            f"activations in an MoE, not {a.strategy} (compressed_tensors_moe_w8a8_fp8.py "
            "CompressedTensorsW8A8Fp8MoEMethod.__init__)")
    return CtScheme(linear, moe)


def _compressed_tensors(q: Mapping[str, Any], arch: Architecture, source: str, where: str
                        ) -> Quantization:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise bad_input("quantization_config.config_groups", groups, "must map group names to "
                        "{targets, weights, input_activations}", where=where)
    if len(groups) > MAX_PATTERNS:
        raise bad_input("quantization_config.config_groups", f"{len(groups)} groups",
                        f"has more than {MAX_PATTERNS} groups", where=where)
    ignore = _patterns(q.get("ignore"), "quantization_config.ignore", where,
                       "module names or 're:' patterns")
    fmt = q.get("format")
    if fmt is not None and not isinstance(fmt, str):
        raise bad_input("quantization_config.format", fmt, "must be a string", where=where)
    # target -> (group, scheme); a later group's target replaces an earlier one's in place
    # (vLLM _quantization_scheme_map_from_config builds a dict by target)
    targets: Dict[str, Tuple[str, CtScheme, str]] = {}
    for gname, g in groups.items():
        key = f"quantization_config.config_groups.{gname}"
        if not isinstance(g, dict) or not isinstance(g.get("targets"), list) or \
                not isinstance(g.get("weights"), dict):
            raise bad_input(key, g, "must hold targets (a list) and weights (a mapping)",
                            where=where)
        tl = _patterns(g["targets"], f"{key}.targets", where, "module names, 're:' patterns "
                       "or class names")
        if len(tl) == 1 and tl[0].endswith("Attention"):
            continue  # vLLM from_config skips attention-only groups (KV-cache quantization)
        w, a = g["weights"], g.get("input_activations")
        gfmt = g.get("format") or fmt
        if gfmt is not None and not isinstance(gfmt, str):
            raise bad_input(f"{key}.format", gfmt, "must be a string", where=where)
        scheme = _ct_scheme(w, a, gfmt, key, where)
        # what vLLM compares across an MoE's projections: the scheme's arguments, not the group
        same = json.dumps([w, a or None, g.get("format") or fmt], sort_keys=True, default=str)
        for t in tl:
            targets[t] = (gname, scheme, same)

    def layer_path(t: str) -> bool:
        return "." in t and not t.startswith("re:")
    if arch.maps_names:
        targets = {(map_name(arch, t) if layer_path(t) else t): v for t, v in targets.items()}
        ignore_m = [map_name(arch, t) if layer_path(t) else t for t in ignore]
    else:
        ignore_m = list(ignore)
    packed = arch.packed
    names = list(targets)
    moe_names = names + (["RoutedExperts"] if "Linear" in targets and
                         "RoutedExperts" not in targets else [])
    moe_targets = dict(targets)
    if "Linear" in targets and "RoutedExperts" not in targets:
        moe_targets["RoutedExperts"] = targets["Linear"]

    def one(name: str, cls: str, tnames: Sequence[str],
            tmap: Mapping[str, Tuple[str, CtScheme, str]]
            ) -> Tuple[Optional[Tuple[str, CtScheme, str]], str]:
        hit = _ct_ignored(name, ignore_m, packed, where)
        if hit is not None:
            return None, f"ignored by {hit!r}"
        t = _ct_target(name, cls, tnames, packed)
        if t is None:
            return None, "matched by no config group (left unquantized)"
        return tmap[t], f"config group {tmap[t][0]} (target {t!r})"

    def verdict(m: Module) -> Verdict:
        if m.cls == "RoutedExperts":
            answers = [one(f"{m.name}.0.{p}", m.cls, moe_names, moe_targets)
                       for p in m.expert_projs]
            got = answers[-1][0]
            if any((a[0] and a[0][2]) != (got and got[2]) for a in answers):
                shown = "; ".join(f"{p}: {why}" for p, (_, why) in zip(m.expert_projs, answers))
                raise SelectorError(f"{where}: the projections of {m.name} get different "
                                    f"schemes ({shown}); vLLM refuses this checkpoint: \"All MoE "
                                    "projections need to have same quantization scheme but found "
                                    "multiple\" (vLLM compressed_tensors_moe.py get_moe_method)",
                                    where=where)
            why = answers[-1][1]
        else:
            got, why = one(m.name, m.cls, names, targets)
        if got is None:
            return Verdict(None, why)
        scheme = got[1].moe if m.cls == "RoutedExperts" else got[1].linear
        if scheme.startswith("!"):
            raise SelectorError(f"{where}: {m.name}: {why}: {scheme[1:]}", where=where)
        if scheme in QUANT_SCHEMES:
            return Verdict(scheme, why)
        return Verdict(None, why, scheme)
    return Quantization("compressed-tensors", source, str(fmt or "compressed-tensors"), verdict,
                        tuple(ignore), where=where)


# ---------------------------------------------------------------------------------------------
# Which file

def _summary(q: Mapping[str, Any]) -> str:
    inner = q.get("quantization") if isinstance(q.get("quantization"), dict) else q
    assert isinstance(inner, dict)
    return " ".join(str(x) for x in (q.get("quant_method") or "modelopt",
                                     inner.get("quant_algo") or q.get("format")) if x)


_MODELOPT_NORMALIZED = {"FP8": "modelopt", "FP8_PER_CHANNEL_PER_TOKEN": "modelopt",
                        "FP8_PB_WO": "modelopt", "NVFP4": "modelopt_fp4"}


def _method(q: Dict[str, Any], where: str) -> str:
    """vLLM's quantization method for a quantization description: model_arch_config_convertor
    _normalize_quantization_config (a ModelOpt producer sets quant_method from quant_algo),
    then ModelConfig._verify_quantization's overrides (modelopt*: the quant_algo decides)."""
    producer = q.get("producer")
    inner = q.get("quantization", {})
    legacy = isinstance(inner, dict) and "modelopt_quant_config" in inner
    if (isinstance(producer, dict) and producer.get("name") == "modelopt") or legacy:
        if not isinstance(inner, dict):
            raise bad_input("quantization", inner, "must be a mapping {\"quant_algo\": ...}",
                            where=where)
        algo = inner.get("quant_algo")
        if algo is not None:
            if _algo(algo) not in _MODELOPT_NORMALIZED:
                raise bad_value("quantization.quant_algo", algo, _MODELOPT_NORMALIZED,
                                where=where, hint="vLLM 0.32.0 refuses this file: \"Unknown "
                                "ModelOpt quant algo\" (transformers_utils/"
                                "model_arch_config_convertor.py _normalize_quantization_config); "
                                "newer ModelOpt exports put MIXED_PRECISION and W4A16_NVFP4 in "
                                "config.json's quantization_config")
            q["quant_method"] = _MODELOPT_NORMALIZED[_algo(algo)]
    method = q.get("quant_method", "")
    if not isinstance(method, str):
        raise bad_input("quant_method", method, "must be a string", where=where)
    method = method.lower().replace("compressed_tensors", "compressed-tensors")
    if method.startswith("modelopt"):
        algo = _algo(inner.get("quant_algo", "") if isinstance(inner, dict) and "quantization"
                     in q else q.get("quant_algo", ""))
        if algo == "FP8":
            method = "modelopt"
        elif "NVFP4" in algo or "FP4" in algo:
            method = "modelopt_fp4"
        elif "MXFP8" in algo:
            method = "modelopt_mxfp8"
        elif algo == "MIXED_PRECISION":
            method = "modelopt_mixed"
    return method


def read_quantization(model_dir: Path, config: Mapping[str, Any], arch: Architecture
                      ) -> Quantization:
    """config.json's quantization_config first, as vLLM reads it; hf_quant_config.json when
    config.json has none (ModelOpt 0.29 and older). Both: a warning when they contradict."""
    where = str(model_dir / "config.json")
    hf = model_dir / "hf_quant_config.json"
    q = config.get("quantization_config")
    source = "config.json quantization_config"
    if q is None and not hf.is_file():
        # vLLM: config.quantization_config (or hf_quant_config.json in its place), then the
        # older compressed-tensors key (model_arch_config_convertor.py)
        q = config.get("compression_config")
        source = "config.json compression_config"
    warnings: List[str] = []
    if q is not None:
        if not isinstance(q, dict):
            raise bad_input("quantization_config", q, "must be a mapping", where=where)
        if hf.is_file():
            other = read_json(hf)
            if _summary(other) != _summary(q) or (
                    isinstance(other.get("quantization"), dict) and
                    other["quantization"].get("exclude_modules") != q.get("ignore")):
                warnings.append(f"hf_quant_config.json ({_summary(other)}) contradicts "
                                f"config.json's quantization_config ({_summary(q)}); "
                                "vLLM reads config.json's, and so does this plan")
    elif hf.is_file():
        q, where, source = read_json(hf), str(hf), "hf_quant_config.json"
    else:
        raise bad_input("quantization_config", None, "is missing, and there is no "
                        "hf_quant_config.json: this is not a quantized checkpoint (NVFP4 "
                        "checkpoints come from ModelOpt or compressed-tensors)", where=where)
    q = dict(q)
    method = _method(q, where)
    if method.startswith("modelopt"):
        if method == "modelopt_mixed" and "quantized_layers" not in q and not (
                isinstance(q.get("quantization"), dict) and "quantized_layers" in
                q["quantization"]):
            raise bad_input("quantized_layers", None, "is missing: vLLM reads MIXED_PRECISION's "
                            "per-layer algorithms from quantization_config.quantized_layers "
                            "(or a legacy hf_quant_config.json)", where=where)
        if "quantization" in q and method == "modelopt_fp4":
            missing = [k for k in ("group_size", "kv_cache_quant_algo", "exclude_modules")
                       if k not in q["quantization"]]
            if missing:
                raise bad_input("quantization", sorted(q["quantization"]), f"lacks "
                                f"{', '.join(missing)}: vLLM 0.32.0 refuses an NVFP4 "
                                "hf_quant_config.json without them (modelopt.py "
                                "ModelOptNvFp4Config._from_config)", where=where)
        out = _modelopt(q, arch, source, where)
    elif method == "compressed-tensors":
        out = _compressed_tensors(q, arch, source, where)
    elif method == "fp8":
        out = _fp8(q, arch, source, where)
    elif method in ("mxfp4", "gpt_oss_mxfp4"):
        out = _mxfp4(q, arch, source, where)
    elif method == "mxfp8":
        # MiniMax-style `quant_method: mxfp8` + `ignored_layers`: vLLM loads it with
        # ModelOptMxFp8Config, normalized to the ModelOpt schema (modelopt.py
        # ModelOptMxFp8Config.from_config)
        if "quantization" not in q and not q.get("quant_algo"):
            ign = q.get("ignored_layers") or []
            q = {"quant_method": "modelopt", "quantization": {
                "quant_algo": "MXFP8", "kv_cache_quant_algo": q.get("kv_cache_quant_algo"),
                "exclude_modules": ign}}
        out = _modelopt(q, arch, source, where)
    elif method == "":
        raise bad_input("quantization_config.quant_method", q.get("quant_method"), "is missing "
                        "(and no ModelOpt producer is named): vLLM loads this checkpoint "
                        "unquantized", where=where)
    else:
        raise bad_value("quantization_config.quant_method", q.get("quant_method"),
                        ("modelopt", "compressed-tensors", "fp8", "mxfp4", "mxfp8"),
                        where=where, hint=f"vLLM reads it as {method}; selector explains "
                        "ModelOpt (FP8, NVFP4, MXFP8, MIXED_PRECISION), compressed-tensors, "
                        "FP8 and MXFP4 checkpoints")
    if warnings:
        out = Quantization(out.format, out.source, out.algo, out.verdict_of, out.excluded,
                           tuple(warnings), out.where)
    return out
