"""compressed-tensors checkpoints as vLLM 0.32.0 reads them (compressed_tensors.py
`get_scheme_dict`, `_get_scheme_from_parts`, utils.py `should_ignore_layer`,
`find_matched_target`; compressed_tensors_moe.py `get_moe_method` for routed experts)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.checkpoint.arch import Architecture, Module
from selector.checkpoint.quant.common import (
    MAX_PATTERNS,
    Quantization,
    Verdict,
    _patterns,
    bounded_regex,
    map_name,
)
from selector.checkpoint.quant.fp8 import _block_scheme
from selector.core.errors import SelectorError, bad_input, bad_value
from selector.core.schema import QUANT_SCHEMES


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
    strategy = _ct_strategy(strategy, gs, key, where)
    dynamic = _ct_dynamic(args.get("dynamic", False), key, where)
    block = _ct_block(args.get("block_structure"), key, where)
    problem = _ct_problem(strategy, gs, block, dynamic)
    if problem is not None:
        raise bad_input(key, args, f"is malformed: {problem}; vLLM 0.32.0 refuses the "
                        "checkpoint (compressed_tensors 0.17.0 QuantizationArgs validation)",
                        where=where)
    sd = args.get("scale_dtype")
    return CtArgs(args.get("num_bits"), args.get("type"), strategy, gs, block, dynamic,
                  args.get("symmetric", True) is True,
                  sd.removeprefix("torch.") if isinstance(sd, str) else None)


def _ct_strategy(strategy: Any, gs: Optional[int], key: str, where: str) -> str:
    """QuantizationArgs' strategy, lower case; without one, what the group size implies."""
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
    return str(strategy).lower()


def _ct_dynamic(dynamic: Any, key: str, where: str) -> Any:
    """False, True or "local"."""
    if isinstance(dynamic, str):
        if dynamic.lower() != "local":
            raise bad_value(f"{key}.dynamic", dynamic, ("true", "false", "local"), where=where)
        dynamic = "local"
    elif not isinstance(dynamic, bool):
        raise bad_input(f"{key}.dynamic", dynamic, "must be true, false or \"local\"",
                        where=where)
    return dynamic


def _ct_block(raw_block: Any, key: str, where: str) -> Optional[Tuple[int, int]]:
    """A `block_structure` ([rows, cols] or "RxC") as two positive integers, or None."""
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
    return block


def _ct_problem(strategy: str, gs: Optional[int], block: Optional[Tuple[int, int]],
                dynamic: Any) -> Optional[str]:
    """What QuantizationArgs.validate_model_after refuses in these arguments, or None."""
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
    return problem


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
    return _ct_fp8_w8a8(w, a)


def _ct_fp8_w8a8(w: CtArgs, a: CtArgs) -> CtScheme:
    """The FP8 W8A8 schemes (CompressedTensorsW8A8Fp8, CompressedTensorsW8A8Fp8MoEMethod) by
    the weights' strategy."""
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


def _ct_targets(groups: Mapping[str, Any], fmt: Optional[str], where: str
                ) -> Dict[str, Tuple[str, CtScheme, str]]:
    """target -> (group, scheme, the scheme's arguments as vLLM compares them); a later group's
    target replaces an earlier one's in place (vLLM _quantization_scheme_map_from_config builds
    a dict by target)."""
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
    return targets


_Target = Tuple[str, CtScheme, str]  # (group, scheme, the scheme's arguments as compared)


@dataclass(frozen=True)
class _CtMatcher:
    """Which config group a module falls in, in vLLM's names (ignore first, then targets)."""
    targets: Mapping[str, _Target]
    moe_targets: Mapping[str, _Target]  # a `Linear` target covers routed experts too
    ignore: Sequence[str]
    packed: Mapping[str, Sequence[str]]
    where: str

    @classmethod
    def build(cls, targets: Dict[str, _Target], ignore: Sequence[str], arch: Architecture,
              where: str) -> _CtMatcher:
        def layer_path(t: str) -> bool:
            return "." in t and not t.startswith("re:")
        if arch.maps_names:
            targets = {(map_name(arch, t) if layer_path(t) else t): v for t, v in targets.items()}
            ignore = [map_name(arch, t) if layer_path(t) else t for t in ignore]
        moe_targets = dict(targets)
        if "Linear" in targets and "RoutedExperts" not in targets:
            moe_targets["RoutedExperts"] = targets["Linear"]
        return cls(targets, moe_targets, list(ignore), arch.packed, where)

    def one(self, name: str, cls: str, tmap: Mapping[str, _Target]
            ) -> Tuple[Optional[_Target], str]:
        hit = _ct_ignored(name, self.ignore, self.packed, self.where)
        if hit is not None:
            return None, f"ignored by {hit!r}"
        t = _ct_target(name, cls, list(tmap), self.packed)
        if t is None:
            return None, "matched by no config group (left unquantized)"
        return tmap[t], f"config group {tmap[t][0]} (target {t!r})"

    def verdict(self, m: Module) -> Verdict:
        where = self.where
        if m.cls == "RoutedExperts":
            answers = [self.one(f"{m.name}.0.{p}", m.cls, self.moe_targets)
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
            got, why = self.one(m.name, m.cls, self.targets)
        if got is None:
            return Verdict(None, why)
        scheme = got[1].moe if m.cls == "RoutedExperts" else got[1].linear
        if scheme.startswith("!"):
            raise SelectorError(f"{where}: {m.name}: {why}: {scheme[1:]}", where=where)
        if scheme == "fp8_tensor_dynamic":
            # vLLM 0.32.0 quantizes these activations per token in a linear layer
            # (compressed_tensors_w8a8_fp8.py activation_quant_key_mapping: dynamic ->
            # kFp8DynamicTokenSym) and per 1x128 group in the experts
            # (compressed_tensors_moe_w8a8_fp8.py 94-105: kFp8Dynamic128Sym)
            moe = m.cls == "RoutedExperts"
            return Verdict(scheme, why + (", dynamic activations per 1x128 group" if moe else
                                          ", dynamic activations per token"),
                           act_scale="group_128" if moe else "token")
        if scheme in QUANT_SCHEMES:
            return Verdict(scheme, why)
        return Verdict(None, why, scheme)


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
    matcher = _CtMatcher.build(_ct_targets(groups, fmt, where), ignore, arch, where)
    return Quantization("compressed-tensors", source, str(fmt or "compressed-tensors"),
                        matcher.verdict, tuple(ignore), where=where)
