"""vLLM's own reading of a checkpoint's quantization description against selector's, module by
module (issue 21).

For one checkpoint directory (config files only, no weights) vLLM does what it does at load
time: `ModelConfig` (transformers' config class, its defaults, config.json's
`quantization_config` or else `hf_quant_config.json`, the quantization-method detection: ModelOpt,
compressed-tensors, fp8, mxfp4, mxfp8),
`get_quant_config` (the quant config class's `from_config`), `configure_quant_config` / the
SupportsQuant mapping (the model's `packed_modules_mapping` and `hf_to_vllm_mapper`), then, for
every module prefix selector plans, `quant_config.get_quant_method(layer, prefix)` with a layer
object of vLLM's class for that module (no weights are created). What vLLM builds is compared
with selector's verdict for the same prefix: the `layer.quant` value of the (weight, activation)
QuantKey pair vLLM's method holds (nvfp4, fp8_block, mxfp8, ... : `scheme_of_keys`, built from
schema.QUANT_SCHEMES' key names), "other" (a scheme without a value), unquantized, or a refusal
of the whole checkpoint. The FP8 MoE methods hand their keys to `select_fp8_moe_backend`, which
is wrapped here to record them (it still runs; when it finds no backend on the simulated GPU,
"No FP8 MoE backend supports the deployment configuration", the method is still classified by
its keys: which kernel runs is the MoE parity's subject, tests/vllm/test_parity.py, not this
reading's).

Runs under sim.Simulation (SM 10.0, CUDA 12.8, flashinfer): the MoE and linear NVFP4 methods
choose a kernel when they are built. The model classes' `__init__` add packed mappings that
depend on the config (DeepSeek `fused_qkv_a_proj`, Qwen3-MoE `gate_up_proj`): those additions are
applied here as the __init__ code applies them (cited), since no model is instantiated.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local checkpoint directory: no network
import sim  # noqa: E402

from selector.checkpoint.arch import read_architecture, read_json  # noqa: E402
from selector.checkpoint.quant import read_quantization  # noqa: E402
from selector.core.errors import SelectorError  # noqa: E402

SCENARIO = sim.Scenario("10.0", "12.8", sim.FLASHINFER, None, "moe", "nvfp4", "silu", True)
UNQUANTIZED = "unquantized"
REFUSED = "refused"


@dataclass
class Case:
    name: str
    vllm: Dict[str, str] = field(default_factory=dict)  # prefix -> verdict
    selector: Dict[str, str] = field(default_factory=dict)
    vllm_error: str = ""
    selector_error: str = ""

    def differences(self) -> List[Tuple[str, str, str]]:
        """(prefix or '*', vLLM's verdict, selector's) for each module that differs."""
        if self.vllm_error or self.selector_error:
            v = REFUSED if self.vllm_error else "loads"
            s = REFUSED if self.selector_error else "loads"
            return [] if v == s else [("*", f"{v}: {self.vllm_error[:200]}",
                                       f"{s}: {self.selector_error[:200]}")]
        return [(p, self.vllm[p], self.selector.get(p, "?")) for p in self.vllm
                if self.vllm[p] != self.selector.get(p)]


def _selector(d: Path) -> Tuple[Dict[str, str], List[Any], str]:
    """Selector's verdict per module, the modules (also when the quantization description is
    refused: vLLM is asked about them all the same), or selector's refusal."""
    try:
        config = read_json(d / "config.json")
        arch = read_architecture(config, d / "config.json")
    except SelectorError as exc:
        return {}, [], str(exc)
    try:
        quant = read_quantization(d, config, arch)
        out = {}
        for m in arch.modules:
            v = quant.verdict_of(m)
            out[m.name] = (f"{v.scheme}/{v.act_scale}" if v.scheme and v.act_scale else
                           v.scheme or ("other" if v.other else UNQUANTIZED))
        return out, list(arch.modules), ""
    except SelectorError as exc:
        return {}, list(arch.modules), str(exc)


# Key pairs vLLM labels differently from selector's vocabulary, each for the reason given
# (docs/checkpoints.md "Quant keys"): name of the weight key, name of the activation key -> scheme
# (a scheme "/granularity": the layer.quant value with layer.act_scale, which the reader gives)
KEY_ALIASES = {
    # Fp8LinearMethod / CompressedTensorsW8A8Fp8 with dynamic activations on a GPU with CUTLASS
    # FP8 quantize the activations per token (fp8.py Fp8LinearMethod.__init__ 274-280)
    ("kFp8StaticTensorSym", "kFp8DynamicTokenSym"): "fp8_tensor_dynamic/token",
    # ModelOpt FP8_PER_CHANNEL_PER_TOKEN names its per-row weight scale a token scale
    # (modelopt.py resolve)
    ("kFp8StaticTokenSym", "kFp8DynamicTokenSym"): "fp8_channel",
    # CompressedTensorsW8A8Fp8MoEMethod: per-tensor weights, dynamic activations per 1x128
    # group (compressed_tensors_moe_w8a8_fp8.py 94-105)
    ("kFp8StaticTensorSym", "kFp8Dynamic128Sym"): "fp8_tensor_dynamic/group_128",
}
_FP8_MOE_KEYS: List[Any] = []  # (weight key, activation key) of the last FP8 MoE method built


def scheme_of_keys(weight: Any, activation: Any) -> str:
    """selector's layer.quant value for vLLM's (weight, activation) QuantKey pair, else
    "other": schema.QUANT_SCHEMES names each scheme's pair, resolved here in vLLM's quant_utils."""
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    from selector.core.schema import QUANT_SCHEMES

    def key(name: Any) -> Any:
        return None if name is None else getattr(q, name)
    for s in QUANT_SCHEMES.values():
        w, a = s.vllm_keys
        if w is not None and (weight, activation) == (key(w), key(a)):
            return s.name
    for (w, a), name in KEY_ALIASES.items():
        if (weight, activation) == (key(w), key(a)):
            return name
    return "other"


def _classify(method: Any, layer: Any) -> str:
    name = type(method).__name__ if method is not None else "None"
    if method is None or name.startswith("Unquantized"):
        return UNQUANTIZED
    if name == "ModelOptLinearMethod":
        return scheme_of_keys(method.spec.weight, method.spec.activation)
    if name == "Fp8LinearMethod":
        return scheme_of_keys(method.weight_quant_key, method.activation_quant_key)
    if name == "ModelOptNvFp4FusedMoE":
        return "nvfp4_w4a16" if method.use_a16 else "nvfp4"
    if name == "CompressedTensorsLinearMethod":
        scheme = layer.scheme
        cls = type(scheme).__name__
        if cls == "CompressedTensorsW4A4Fp4":
            return "nvfp4_w4a16" if scheme.use_a16 else "nvfp4"
        if cls == "CompressedTensorsW8A8Fp8":
            return scheme_of_keys(scheme.weight_quant_key, scheme.activation_quant_key)
        if cls == "CompressedTensorsW4A4Mxfp4":  # kMxfp4Static weights, kMxfp4Dynamic acts
            return "mxfp4_w4a4"
        if cls == "CompressedTensorsW8A8Mxfp8":
            return "mxfp8"
        return "other"
    if name == "CompressedTensorsW4A4Nvfp4MoEMethod":
        return "nvfp4_w4a16" if method.use_a16 else "nvfp4"
    if name in ("Fp8MoEMethod", "ModelOptFp8MoEMethod", "CompressedTensorsW8A8Fp8MoEMethod"):
        return scheme_of_keys(*_FP8_MOE_KEYS[-1])
    if name in ("Mxfp4MoEMethod", "GptOssMxfp4MoEMethod"):  # bf16 activations (W4A16)
        return "mxfp4"
    if name == "CompressedTensorsW4A4Mxfp4MoEMethod":
        return "mxfp4_w4a4"
    if name in ("ModelOptMxFp8FusedMoE", "CompressedTensorsW8A8Mxfp8MoEMethod"):
        return "mxfp8"
    return "other"


@contextlib.contextmanager
def _record_fp8_moe_keys(refusals: bool = False) -> Any:
    """Wrap select_fp8_moe_backend where the FP8 MoE methods import it: the keys are recorded,
    then vLLM's own function runs (the name as those modules hold it: selector's plugin where
    it is installed). `refusals`: its NotImplementedError (no backend) propagates, as at
    start-up (a load sweep), instead of reading the layer without a backend."""
    import importlib

    from vllm.model_executor.layers.fused_moe.oracle import fp8 as oracle
    real = oracle.select_fp8_moe_backend

    def spy(config: Any, weight_key: Any, activation_key: Any, *a: Any, **k: Any) -> Any:
        _FP8_MOE_KEYS.append((weight_key, activation_key))
        try:
            return real(config, weight_key, activation_key, *a, **k)
        except NotImplementedError:  # no FP8 MoE backend on the simulated GPU: a kernel
            if refusals:
                raise
            return None, None  # choice (the MoE parity's), not the reading compared here
    mods = [importlib.import_module(m) for m in (
        "vllm.model_executor.layers.quantization.fp8",
        "vllm.model_executor.layers.quantization.modelopt",
        "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe."
        "compressed_tensors_moe_w8a8_fp8")]
    for m in mods:
        m.select_fp8_moe_backend = spy  # type: ignore[attr-defined]
    # Fp8LinearMethod asks the CUDA build whether CUTLASS runs FP8 (a custom op the CPU build
    # lacks): the answer of vLLM's CUDA build for SCENARIO's SM 10.0 and CUDA 12.8 is yes
    # (csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu cutlass_scaled_mm_supports_fp8: SM >= 9.0
    # with CUDA >= 12.0)
    fp8_mod = mods[0]
    real_cutlass = fp8_mod.cutlass_fp8_supported
    fp8_mod.cutlass_fp8_supported = lambda: True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        fp8_mod.cutlass_fp8_supported = real_cutlass  # type: ignore[attr-defined]
        for m in mods:
            m.select_fp8_moe_backend = real  # type: ignore[attr-defined]


def _layer(cls_name: str, module: Any, moe_cfg: Any) -> Any:
    import torch
    from vllm.model_executor.layers import linear
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    from vllm.model_executor.models import deepseek_v2
    classes = {"RoutedExperts": RoutedExperts, "ParallelLMHead": ParallelLMHead,
               "DeepSeekV2FusedQkvAProjLinear": deepseek_v2.DeepSeekV2FusedQkvAProjLinear}
    cls = classes.get(cls_name) or getattr(linear, cls_name)
    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)  # the type is what get_quant_method reads; no weights
    if cls_name == "RoutedExperts":
        obj.moe_config = moe_cfg
        gate, up, down = module.expert_projs
        obj.ckpt_gate_proj_name, obj.ckpt_up_proj_name = gate, None if up == "None" else up
        obj.ckpt_down_proj_name = down
    return obj


def _moe_config(fields: Dict[str, Any]) -> Any:
    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )
    act = fields["activation"] if fields["act_and_mul"] else f"{fields['activation']}_no_mul"
    par = FusedMoEParallelConfig(tp_size=1, pcp_size=1, dp_size=1, ep_size=1, tp_rank=0,
                                 pcp_rank=0, dp_rank=0, ep_rank=0, sp_size=1, use_ep=False,
                                 all2all_backend="allgather_reducescatter", enable_eplb=False)
    n = fields["num_experts"]
    return FusedMoEConfig(num_experts=n, experts_per_token=fields["top_k"],
                          hidden_dim=fields["hidden_size"],
                          intermediate_size=fields["intermediate_size"], num_local_experts=n,
                          num_logical_experts=n, activation=MoEActivation(act), device="cuda",
                          routing_method=RoutingMethodType.Renormalize, moe_parallel_config=par,
                          in_dtype=torch.bfloat16, moe_backend="auto")


def _init_packed(arch_name: str, hf_config: Any, qc: Any) -> None:
    """The packed mappings the model class's __init__ adds for this config."""
    mapping = dict(getattr(qc, "packed_modules_mapping", {}) or {})
    if arch_name in ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"):
        # deepseek_v2.py DeepseekV2ForCausalLM.__init__: fused_qkv_a_proj when q_lora_rank,
        # qkv_proj when MHA (model_type deepseek or no rope/nope head dims)
        if getattr(hf_config, "q_lora_rank", None) is not None:
            mapping["fused_qkv_a_proj"] = ["q_a_proj", "kv_a_proj_with_mqa"]
    if arch_name == "Qwen3MoeForCausalLM" and getattr(hf_config, "mlp_only_layers", []):
        # qwen3_moe.py Qwen3MoeForCausalLM.__init__: gate_up_proj only with mlp_only_layers
        mapping["gate_up_proj"] = ["gate_proj", "up_proj"]
    qc.packed_modules_mapping = mapping


def _vllm_config(d: Path) -> Tuple[Any, str]:
    """vLLM's quantization config for the checkpoint (on vLLM's own platform: ModelConfig's
    checks would call CUDA ops under the simulated one), or its refusal."""
    from vllm.config import LoadConfig, ModelConfig
    from vllm.model_executor.model_loader.utils import (
        configure_quant_config,
        get_model_architecture,
    )
    from vllm.model_executor.model_loader.weight_utils import get_quant_config
    from vllm.model_executor.models.interfaces import SupportsQuant
    try:
        mc = ModelConfig(model=str(d), skip_tokenizer_init=True, trust_remote_code=False)
        if mc.quantization is None:
            return None, "vLLM reads no quantization method: it loads the model unquantized"
        qc = get_quant_config(mc, LoadConfig())
        model_cls, arch_name = get_model_architecture(mc)
        if issubclass(model_cls, SupportsQuant):
            model_cls.__new__(model_cls, qc)  # SupportsQuant.__new__ applies the mappings
        else:
            configure_quant_config(qc, model_cls)
        _init_packed(arch_name, mc.hf_config, qc)
        qc._selector_model_config = mc  # FP8 and MXFP4 methods read the current model config
        return qc, ""
    except Exception as exc:  # noqa: BLE001 - vLLM's refusal is an answer
        return None, f"{type(exc).__name__}: {exc}"


def _vllm_modules(qc: Any, modules: List[Any]) -> Tuple[Dict[str, str], str]:
    from vllm.config import VllmConfig, set_current_vllm_config
    out: Dict[str, str] = {}
    try:
        for m in modules:
            if m.unquantized:
                # the model class builds it with quant_config=None (Module.unquantized names
                # the vLLM line): the quantization config is never asked; model_shapes.py's
                # build of the class checks it (tests/vllm/test_launch_shapes.py)
                out[m.name] = UNQUANTIZED
                continue
            fields = dict(m.fields)
            layer = _layer(m.cls, m, _moe_config(fields) if m.cls == "RoutedExperts" else None)
            vc = VllmConfig()  # an unquantized MoE reads it, FP8 and MXFP4 its model config
            vc.model_config = getattr(qc, "_selector_model_config", None)
            with set_current_vllm_config(vc):
                method = qc.get_quant_method(layer, m.name)
            out[m.name] = _classify(method, layer)
    except Exception as exc:  # noqa: BLE001
        return {}, f"{type(exc).__name__}: {exc}"
    return out, ""


def run(checkpoints: List[Tuple[str, Path]]) -> List[Case]:
    """Every checkpoint: vLLM's quantization configs first, on vLLM's own platform (ModelConfig's
    checks would call CUDA ops under the simulated one), then every module's method under the
    simulated GPU."""
    logging.getLogger("vllm").setLevel(logging.ERROR)
    cases, configs = [], []
    for name, d in checkpoints:
        sel, modules, sel_err = _selector(d)
        case = Case(name, selector=sel, selector_error=sel_err)
        with contextlib.redirect_stdout(io.StringIO()):
            qc, case.vllm_error = _vllm_config(d)
        cases.append(case)
        configs.append((qc, modules))
    simulation = sim.Simulation()
    try:
        with simulation.scenario(SCENARIO), contextlib.redirect_stdout(io.StringIO()), \
                _record_fp8_moe_keys():
            for case, (qc, modules) in zip(cases, configs):
                if qc is not None and modules:
                    case.vllm, case.vllm_error = _vllm_modules(qc, modules)
    finally:
        simulation.close()
    return cases
