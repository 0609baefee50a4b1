"""The QuantKeys each vLLM quant method passes to its FP8 oracles, derived as that method's code
derives them (vLLM 0.32.0), for a checkpoint whose scheme selector's checkpoint reader names
`quant`. The MX methods pass their scheme's own keys (or none: the oracle's default), so only FP8
needs a table; `vllm_keys` reads vLLM's own key objects and, where the method asks the platform
(`fp8` linear with dynamic activations), vLLM's own `cutlass_fp8_supported`.

A pair selector's vocabulary does not name (schema.QUANT_SCHEMES) is NotExpressible to the plugin
(engines/vllm.py quant_scheme): vLLM decides such a layer alone, and the sweep says so.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

Q = "vllm.model_executor.layers.quantization"
SOURCES: Dict[Tuple[str, str], str] = {
    ("moe", "fp8"): f"vLLM 0.32.0 {Q}/fp8.py (Fp8MoEMethod.__init__: block 128x128 x "
                    "kFp8Dynamic128Sym, else kFp8StaticTensorSym x static or dynamic per-tensor; "
                    "allow_vllm_cutlass=False)",
    ("moe", "modelopt"): f"vLLM 0.32.0 {Q}/modelopt.py (ModelOptFp8MoEMethod.__init__: "
                         "kFp8StaticTensorSym x kFp8StaticTensorSym, allow_vllm_cutlass default "
                         "False)",
    ("moe", "compressed-tensors"): (
        f"vLLM 0.32.0 {Q}/compressed_tensors/compressed_tensors_moe/"
        "compressed_tensors_moe_w8a8_fp8.py (CompressedTensorsW8A8Fp8MoEMethod.__init__: "
        "ct2vllm_act maps TENSOR dynamic activations to kFp8Dynamic128Sym; "
        "allow_vllm_cutlass=True)"),
    ("linear", "fp8"): f"vLLM 0.32.0 {Q}/fp8.py (Fp8LinearMethod.__init__: dynamic per-tensor "
                       "activations become kFp8DynamicTokenSym when cutlass_fp8_supported(), "
                       "'per-token quantization for better perf')",
    ("linear", "modelopt"): f"vLLM 0.32.0 {Q}/modelopt.py (resolve: FP8 kFp8StaticTensorSym x "
                            "kFp8StaticTensorSym, FP8_PER_CHANNEL_PER_TOKEN kFp8StaticTokenSym x "
                            "kFp8DynamicTokenSym, FP8_PB_WO kFp8Static128BlockSym x "
                            "kFp8Dynamic128Sym)",
    ("linear", "compressed-tensors"): (
        f"vLLM 0.32.0 {Q}/compressed_tensors/schemes/compressed_tensors_w8a8_fp8.py "
        "(CompressedTensorsW8A8Fp8.__init__: activation_quant_key_mapping STATIC "
        "kFp8StaticTensorSym, DYNAMIC kFp8DynamicTokenSym; weight TENSOR/CHANNEL; block 1x128 x "
        "128x128)"),
}
# (op, quant method) -> where the installed vLLM's quant method derives the layer's QuantKeys:
# (module, function, the line's text), its line read at run time (parity.vllm_def)
_QM = "vllm.model_executor.layers.quantization"
DEFS: Dict[Tuple[str, str], Tuple[str, str, str]] = {
    ("moe", "fp8"): (f"{_QM}.fp8", "Fp8MoEMethod.__init__",
                     "activation_key = kFp8DynamicTokenSym"),
    ("moe", "modelopt"): (f"{_QM}.modelopt", "ModelOptFp8MoEMethod.__init__",
                          "activation_key=kFp8StaticTensorSym"),
    ("moe", "compressed-tensors"): (
        f"{_QM}.compressed_tensors.compressed_tensors_moe.compressed_tensors_moe_w8a8_fp8",
        "CompressedTensorsW8A8Fp8MoEMethod.__init__", "activation_key = ct2vllm_act"),
    ("linear", "fp8"): (f"{_QM}.fp8", "Fp8LinearMethod.__init__",
                        "self.activation_quant_key = kFp8DynamicTokenSym"),
    ("linear", "modelopt"): (f"{_QM}.modelopt", "resolve", "FP8_PER_CHANNEL_PER_TOKEN"),
    ("linear", "compressed-tensors"): (
        f"{_QM}.compressed_tensors.schemes.compressed_tensors_w8a8_fp8",
        "CompressedTensorsW8A8Fp8.__init__", "activation_quant_key_mapping["),
}


def line(s: Any) -> str:
    """The installed vLLM's line where scenario `s`'s quant method derives its keys ('' none)."""
    import parity
    at = DEFS.get((s.op, s.method))
    return "" if at is None else parity.vllm_def(
        at[0], at[1], f"{at[1]} derives the layer's QuantKeys", needle=at[2])


# (op, quant method) -> {selector scheme of the checkpoint: (weight key, activation key)}; a
# callable key is asked inside the simulation
_ST, _SC, _STOK = "kFp8StaticTensorSym", "kFp8StaticChannelSym", "kFp8StaticTokenSym"
_DT, _DTOK, _D128 = "kFp8DynamicTensorSym", "kFp8DynamicTokenSym", "kFp8Dynamic128Sym"
_B128 = "kFp8Static128BlockSym"
TABLE: Dict[Tuple[str, str], Dict[str, Tuple[str, str]]] = {
    ("moe", "fp8"): {"fp8_tensor": (_ST, _ST), "fp8_tensor_dynamic": (_ST, _DT),
                     "fp8_block": (_B128, _D128)},
    ("moe", "modelopt"): {"fp8_tensor": (_ST, _ST)},
    ("moe", "compressed-tensors"): {"fp8_tensor": (_ST, _ST), "fp8_tensor_dynamic": (_ST, _D128),
                                    "fp8_channel": (_SC, _DTOK), "fp8_block": (_B128, _D128)},
    ("linear", "fp8"): {"fp8_tensor": (_ST, _ST), "fp8_tensor_dynamic": (_ST, "cutlass_token"),
                        "fp8_block": (_B128, _D128)},
    ("linear", "modelopt"): {"fp8_tensor": (_ST, _ST), "fp8_channel": (_STOK, _DTOK),
                             "fp8_block": (_B128, _D128)},
    ("linear", "compressed-tensors"): {"fp8_tensor": (_ST, _ST),
                                       "fp8_tensor_dynamic": (_ST, _DTOK),
                                       "fp8_channel": (_SC, _DTOK), "fp8_block": (_B128, _D128)},
}
ALLOW_VLLM_CUTLASS = {"fp8": False, "modelopt": False, "compressed-tensors": True}


def fp8_methods(op: str, quant: str) -> Tuple[str, ...]:
    """The FP8 quant methods whose checkpoints carry `quant` for `op`."""
    return tuple(m for (o, m), t in TABLE.items() if o == op and quant in t)


def vllm_keys(s: Any) -> Tuple[Any, Optional[Any]]:
    """vLLM's (weight, activation) QuantKeys for scenario `s` (its method and scheme)."""
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    from selector.core.schema import QUANT_SCHEMES
    table = TABLE.get((s.op, s.method), {})
    if s.quant not in table:  # an MX scheme: its own keys, whichever method
        w, a = QUANT_SCHEMES[s.quant].vllm_keys
        return getattr(q, str(w)), (None if a is None else getattr(q, a))
    w, a = table[s.quant]
    if a == "cutlass_token":
        from vllm.model_executor.layers.quantization.utils import w8a8_utils
        a = _DTOK if w8a8_utils.cutlass_fp8_supported() else _DT
    return getattr(q, w), getattr(q, a)


def source(s: Any) -> str:
    return SOURCES.get((s.op, s.method), "")
