"""FP8 (`quant_method: fp8`: DeepSeek-V3/R1, Qwen3-FP8, AutoFP8 exports; vLLM fp8.py
`Fp8Config.from_config`, `get_quant_method`, quant_utils.py `is_layer_skipped`) and MXFP4
(gpt-oss; mxfp4.py `Mxfp4Config`, `GptOssMxfp4Config`) checkpoints."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from selector.checkpoint.arch import Architecture, Module
from selector.checkpoint.quant.common import (
    Quantization,
    Verdict,
    _patterns,
    map_name,
)
from selector.checkpoint.quant.modelopt import _is_layer_skipped
from selector.core.errors import bad_input, bad_value

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


def _fp8_activations(q: Mapping[str, Any], where: str) -> Tuple[str, Optional[Tuple[int, int]]]:
    """(activation_scheme, weight_block_size) as vLLM's Fp8Config takes them."""
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
    return str(act), block


def _fp8(q: Mapping[str, Any], arch: Architecture, source: str, where: str) -> Quantization:
    """vLLM Fp8Config: every LinearBase and every RoutedExperts is FP8 unless `ignored_layers`
    (or, when that is empty, `modules_to_not_convert`) skips it, exact names with fused shards
    (quant_utils.is_layer_skipped, match mode "exact"); the LM head (not a LinearBase) stays
    unquantized. With `weight_block_size` the layers are block-FP8 (dynamic activations only),
    without it per-tensor with static or dynamic activations. `store_dtype: mxfp4` makes the
    experts MXFP4 (Mxfp4MoEMethod)."""
    act, block = _fp8_activations(q, where)
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
        if scheme == "fp8_tensor_dynamic":
            # fp8.py 274-280 (Fp8LinearMethod.__init__): dynamic activations of a per-tensor
            # linear layer are quantized per token where CUTLASS FP8 is built (every CUDA GPU
            # with FP8 tensor cores and CUDA >= 12.0; SM 8.9 from CUDA 12.4)
            return Verdict(scheme, f"FP8 {algo} (per token)", other, act_scale="token")
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
