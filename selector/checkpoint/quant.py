"""A checkpoint's quantization description: which scheme vLLM builds for each module.

Which file: config.json's `quantization_config` first, then `hf_quant_config.json` (vLLM
transformers_utils/config.py get_config: "ModelOpt 0.31.0 and after saves the quantization
config in the model config file"); both present and contradicting gives a warning.

Each scheme is what vLLM 0.32.0's quantization config answers for the module's vLLM prefix:
ModelOpt (modelopt.py: `ModelOptQuantConfigBase.is_layer_excluded`, `get_quant_method`, the
`apply_vllm_mapper` split of `name*` patterns; MIXED_PRECISION `_resolve_quant_algo`) and
compressed-tensors (compressed_tensors.py `get_scheme_dict`, utils.py `should_ignore_layer`,
`find_matched_target`; compressed_tensors_moe.py `get_moe_method` for routed experts). These are
ports of that code, proven module by module against it by tests/vllm/test_checkpoint_differential.py.
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

NVFP4_SCHEMES = ("nvfp4", "nvfp4_w4a16")
MAX_PATTERNS = 100_000  # exclusion/ignore/target entries (real ones: a few hundred)
MAX_PATTERN_CHARS = 1_000
MAX_REGEX_REPEATS = 4  # `*`, `+`, `{m,n}` with n > 1 in one `re:` pattern


@dataclass(frozen=True)
class Verdict:
    """What vLLM builds for one module: scheme None = unquantized, `other` = not NVFP4."""
    scheme: Optional[str]  # nvfp4 | nvfp4_w4a16 | None
    why: str
    other: Optional[str] = None  # the non-NVFP4 scheme vLLM builds (FP8, int4 ...), if any
    warning: Optional[str] = None  # said on the layer kind (projections disagree, ...)


@dataclass(frozen=True)
class Quantization:
    format: str  # "ModelOpt" | "compressed-tensors"
    source: str  # the file and key it came from
    algo: str  # NVFP4 | W4A16_NVFP4 | MIXED_PRECISION | compressed-tensors format
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

_MODELOPT_SCHEMES = {"NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4_w4a16"}
_MODELOPT_LINEAR = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "W4A16_NVFP4",
                    "MXFP8")
_MODELOPT_MOE = ("FP8", "FP8_PB_WO", "FP8_BLOCK_SCALES", "NVFP4", "W4A16_NVFP4", "MXFP8")


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
    accepted = sorted([*_MODELOPT_SCHEMES, "MIXED_PRECISION"])
    if algo == "MIXED_PRECISION":
        if not isinstance(layers_raw, dict) or not layers_raw:
            raise bad_input("quantized_layers", layers_raw, "must map module names to "
                            "{quant_algo: ...} for MIXED_PRECISION (a non-empty mapping)",
                            where=where)
        if len(layers_raw) > MAX_PATTERNS:
            raise bad_input("quantized_layers", f"{len(layers_raw)} entries", "has more than "
                            f"{MAX_PATTERNS} entries", where=where)
        recipes: Dict[str, str] = {}
        for prefix, recipe in layers_raw.items():
            a = _algo(recipe.get("quant_algo")) if isinstance(recipe, dict) else ""
            if a not in _MODELOPT_LINEAR and a not in _MODELOPT_MOE:
                raise bad_value(f"quantized_layers.{prefix}.quant_algo", a or None,
                                sorted(set(_MODELOPT_LINEAR + _MODELOPT_MOE)), where=where)
            recipes[map_name(arch, prefix) if arch.maps_names else prefix] = a

        def mixed(m: Module) -> Verdict:
            hit = _modelopt_excluded(m.name, patterns, packed, where)
            if hit is not None:
                return Verdict(None, f"excluded by {short_key} {shown_as.get(hit, hit)!r}")
            a, key, warning = _resolve_quant_algo(m.name, recipes, packed, where)
            if a is None:
                return Verdict(None, "not in quantized_layers (left unquantized)")
            if m.cls == "RoutedExperts" and a not in _MODELOPT_MOE or \
                    m.cls != "RoutedExperts" and a not in _MODELOPT_LINEAR:
                return Verdict(None, f"quantized_layers: {a} (no such {m.cls} method: left "
                               "unquantized)")
            scheme = _MODELOPT_SCHEMES.get(a)
            why = f"quantized_layers: {a}"
            return Verdict(scheme, why, None if scheme else a, warning)
        return Quantization("ModelOpt", source, algo, mixed, tuple(excluded), where=where)
    if algo not in _MODELOPT_SCHEMES:
        raise bad_value("quant_algo", algo_raw, accepted, where=where,
                        hint="only NVFP4 checkpoints are explained")
    scheme = _MODELOPT_SCHEMES[algo]
    groups = q.get("config_groups")  # vLLM reads them from the top level (original_config)
    shown = algo
    if algo == "NVFP4" and isinstance(groups, dict) and groups and all(
            isinstance(g, dict) and g.get("input_activations") is None for g in groups.values()):
        # NVFP4 declared, yet no group quantizes activations: vLLM serves it as W4A16
        # (vLLM modelopt.py ModelOptNvFp4Config._from_config, 0.32.0)
        scheme, shown = "nvfp4_w4a16", "NVFP4 (no input activations in config_groups: W4A16)"

    def uniform(m: Module) -> Verdict:
        hit = _modelopt_excluded(m.name, patterns, packed, where)
        if hit is not None:
            return Verdict(None, f"excluded by {short_key} {shown_as.get(hit, hit)!r}")
        if _vision(m.name):
            return Verdict(None, "a vision module (vLLM leaves them unquantized)")
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
    targets: Dict[str, Tuple[str, str, str]] = {}
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
        if _ct_is_nvfp4(w):
            if a is None or a == {}:
                scheme = "nvfp4_w4a16"
            elif _ct_is_nvfp4(a):
                scheme = "nvfp4"
            else:
                raise bad_input(f"{key}.input_activations", a, "is neither NVFP4 nor null: "
                                "NVFP4 weights need NVFP4 activations (W4A4) or none (W4A16)",
                                where=where)
        else:
            scheme = f"{w.get('type', '?')}{w.get('num_bits', '?')}"
            if not a:
                scheme += " weight-only"
        # what vLLM compares across an MoE's projections: the scheme's arguments, not the group
        same = json.dumps([w, a or None, g.get("format") or fmt], sort_keys=True, default=str)
        for t in tl:
            targets[t] = (gname, scheme, same)
    if not any(t[1] in NVFP4_SCHEMES for t in targets.values()):
        raise bad_input("quantization_config.config_groups", sorted(groups), "has no NVFP4 "
                        "group (weights: num_bits 4, type float, strategy tensor_group, "
                        "group_size 16)", where=where)

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
            tmap: Mapping[str, Tuple[str, str, str]]) -> Tuple[Optional[Tuple[str, str, str]],
                                                               str]:
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
        if got[1] in NVFP4_SCHEMES:
            return Verdict(got[1], why)
        return Verdict(None, why, got[1])
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
    elif method == "":
        raise bad_input("quantization_config.quant_method", q.get("quant_method"), "is missing "
                        "(and no ModelOpt producer is named): vLLM loads this checkpoint "
                        "unquantized", where=where)
    else:
        raise bad_value("quantization_config.quant_method", q.get("quant_method"),
                        ("modelopt", "compressed-tensors"), where=where,
                        hint=f"vLLM reads it as {method}; only NVFP4 checkpoints (ModelOpt "
                        "NVFP4, W4A16_NVFP4, MIXED_PRECISION or compressed-tensors) are "
                        "explained")
    if warnings:
        out = Quantization(out.format, out.source, out.algo, out.verdict_of, out.excluded,
                           tuple(warnings), out.where)
    return out
