"""SGLang 0.5.23's own MoE-runner and FP8-GEMM choice on one simulated machine.

Run as a child process (one per machine: SGLang evaluates its platform probes at import time):
    python tests/sglang/sglang_sim.py < machine-and-scenarios.json > answers.json

What is simulated, and nothing else:
- the device query: `torch.cuda.is_available`, `get_device_capability`, `device_count`,
  `get_device_name`, `is_initialized`, `current_device` and `torch.version.cuda` (a CPU torch
  has no GPU); SGLang's own probes (`is_sm100_supported`, `get_platform()`, ...) run on them;
- absent libraries: `flashinfer` and `deep_gemm` (sgl-deep-gemm, a CUDA build that cannot load
  here) are hidden from imports and `importlib.util.find_spec` when the machine lacks them; a
  machine that has deep_gemm gets a stand-in package in which every module and name exists and
  every call raises (SGLang's configurer, `layers/deep_gemm_wrapper/configurer.py`, probes
  names only); flashinfer-python 0.7.2 (SGLang's pin) is
  installed and imported as it is;
- the CUDA build's C++ ops: sglang-kernel 0.4.10's Python package is imported as installed, its
  `_load_architecture_specific_ops` and `_preload_cuda_library` (which load the CUDA .so files)
  do nothing.

SGLang's own code then answers: `ServerArgs` built by its own parser from the argv,
`_moe_runner_backend_quant_constraints` (srt/arg_groups/overrides.py) over it, `publish` (its
resolution pipeline, dummy model), `initialize_moe_config`, `initialize_fp8_gemm_config`, the
quant method's `create_moe_runner` (Fp8MoEMethod, Mxfp4MoEMethod, ModelOptNvFp4FusedMoEMethod),
`dispatch_w8a8_block_fp8_linear`; the compressed-tensors MoE schemes (`get_moe_scheme`), gpt-oss's model
override, and `apply_fp8_linear` for per-tensor / per-channel FP8 linear layers (`fp8_scaled_linear`).
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import types
from typing import Any, Dict, List, Optional

MEMORY = 180 * 2 ** 30  # bytes per GPU (SGLang's memory settings read it: memory_hook.py)


def simulate(capability: str, cuda: str, libs: List[str], kernel: bool = True) -> None:
    """`kernel`: sglang-kernel installed (its CUDA op libraries are not loaded)."""
    import torch

    cap = tuple(int(x) for x in capability.split("."))
    torch.cuda.is_available = lambda: True
    torch.cuda.get_device_capability = lambda device=None: cap
    torch.cuda.device_count = lambda: 8  # one node of 8 GPUs: --tp-size up to 8
    torch.cuda.mem_get_info = lambda device=None: (MEMORY, MEMORY)
    torch.cuda.get_device_name = lambda device=None: f"simulated SM {capability}"
    torch.cuda.is_initialized = lambda: True  # SGLang then skips its NVML query
    torch.cuda.current_device = lambda: 0
    torch.version.cuda = cuda
    hidden = {"flashinfer", "deep_gemm"} - set(libs)
    present = {"flashinfer", "deep_gemm"} & set(libs)
    real_find_spec = importlib.util.find_spec

    class Libraries(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
            if name.split(".")[0] in hidden:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    def find_spec(name: str, package: Optional[str] = None) -> Any:
        top = name.split(".")[0]
        if top in hidden:
            return None
        return real_find_spec(name, package)

    sys.meta_path.insert(0, Libraries())
    importlib.util.find_spec = find_spec
    if "deep_gemm" in present:
        sys.meta_path.insert(0, _DeepGemmStandIn())
    if kernel:
        _sgl_kernel_without_ops(real_find_spec)


class _DeepGemmStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """sgl-deep-gemm (module `deep_gemm`, SM90/SM100/SM120 kernels) as present: every module
    under `deep_gemm` and every name in it exists; calling one raises (no GPU)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".")[0] != "deep_gemm":
            return None
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        mod = types.ModuleType(spec.name)
        mod.__path__ = []

        def __getattr__(attr: str) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _absent_kernel(f"{spec.name}.{attr}")
        mod.__getattr__ = __getattr__  # type: ignore[method-assign]
        return mod

    def exec_module(self, module: Any) -> None:
        return None


def _absent_kernel(name: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name}: a CUDA kernel (simulated machine)")
    kernel.__name__ = name.rsplit(".", 1)[-1]
    return kernel


def _sgl_kernel_without_ops(real_find_spec: Any) -> None:
    spec = real_find_spec("sgl_kernel")
    path = os.path.join(os.path.dirname(spec.origin), "load_utils.py")
    lspec = importlib.util.spec_from_file_location("sgl_kernel.load_utils", path)
    mod = importlib.util.module_from_spec(lspec)
    sys.modules["sgl_kernel.load_utils"] = mod
    lspec.loader.exec_module(mod)
    mod._load_architecture_specific_ops = lambda: None
    mod._preload_cuda_library = lambda: None


# the quantization SGLang is started with, per selector scheme (--quantization)
QUANTIZATION = {"fp8_block": "fp8", "fp8_tensor": "fp8", "mxfp8": "mxfp8", "mxfp4": "mxfp4",
                "nvfp4": "modelopt_fp4", "fp8_channel": "compressed-tensors"}


def server_args(argv: List[str]) -> Any:
    import argparse

    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))


_LAST: Dict[str, Any] = {}


# the architecture and `quantization_config` of a model whose SGLang model override is swept
MODELS = {"gpt_oss": ("GptOssForCausalLM", {"quant_method": "mxfp4"})}


def _model_overrides(argv: List[str], model: Optional[str]) -> Dict[str, Any]:
    """The MoE runner a model's SGLang override declares (srt/arg_groups/model_hook.py:
    `collect_model_override_declarations` on the pristine server args), or none."""
    if model is None:
        return {}
    from sglang.srt.arg_groups.overrides import collect_model_override_declarations
    arch, quant_config = MODELS[model]
    hf_config = types.SimpleNamespace(architectures=[arch], quantization_config=quant_config)
    declared: Dict[str, Any] = {}
    for _source, d in collect_model_override_declarations(arch, server_args(argv), hf_config):
        declared.update(d)
    return {k: v for k, v in declared.items() if k == "moe_runner_backend"}


def _publish(argv: List[str], quant: Optional[str], model: Optional[str] = None) -> Any:
    """SGLang's server args from `argv`, the model's override of the MoE runner and its
    quantization's (srt/arg_groups/overrides.py), then published (its resolution pipeline for a
    dummy model) and its MoE/FP8 flags initialised. The same argv and overrides as the previous
    call: the published state stands."""
    from sglang.srt.arg_groups.overrides import _moe_runner_backend_quant_constraints
    from sglang.srt.layers.moe.utils import initialize_moe_config
    from sglang.srt.layers.quantization import fp8_utils
    from sglang.srt.runtime_context import publish

    overrides: Dict[str, Any] = _model_overrides(argv, model)
    if quant is not None:
        args = server_args(argv)
        for k, v in overrides.items():
            setattr(args, k, v)
        args.quantization = quant
        overrides.update(_moe_runner_backend_quant_constraints(args))
    key = (tuple(argv), tuple(sorted(overrides.items())))
    if _LAST.get("key") == key:
        return _LAST["args"]
    args = server_args(argv)
    for k, v in overrides.items():
        setattr(args, k, v)
    publish(args, role="test")  # quantization unset: the dummy model has no checkpoint
    initialize_moe_config()
    fp8_utils.initialize_fp8_gemm_config()
    _LAST.update(key=key, args=args)
    return args


def ct_config(quant: str) -> Dict[str, Any]:
    """A compressed-tensors checkpoint's `quantization_config` (llm-compressor's schemes FP8,
    FP8_DYNAMIC, FP8_BLOCK, NVFP4, NVFP4A16) for every layer, as SGLang reads it."""
    fp8 = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False}
    fp4 = {"num_bits": 4, "type": "float", "symmetric": True, "dynamic": False,
           "strategy": "tensor_group", "group_size": 16}
    weights, inputs, fmt = {
        "fp8_tensor": ({**fp8, "strategy": "tensor"}, {**fp8, "strategy": "tensor"},
                       "float-quantized"),
        "fp8_channel": ({**fp8, "strategy": "channel"},
                        {**fp8, "strategy": "token", "dynamic": True}, "float-quantized"),
        "fp8_block": ({**fp8, "strategy": "block", "block_structure": [128, 128]},
                      {**fp8, "strategy": "group", "group_size": 128, "dynamic": True},
                      "float-quantized"),
        "nvfp4": (fp4, {**fp4, "dynamic": "local"}, "nvfp4-pack-quantized"),
        "nvfp4_w4a16": (fp4, None, "nvfp4-pack-quantized"),
    }[quant]
    group: Dict[str, Any] = {"targets": ["re:.*"], "weights": weights}
    if inputs is not None:
        group["input_activations"] = inputs
    return {"quant_method": "compressed-tensors", "format": fmt,
            "config_groups": {"group_0": group}, "ignore": []}


def _ct(quant: str) -> Any:
    from sglang.srt.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig,
    )
    return CompressedTensorsConfig.from_config(ct_config(quant))


def _moe_method(s: Dict[str, Any]) -> Any:
    q = s["quant"]
    if s.get("format") == "compressed-tensors":
        import torch
        from sglang.srt.layers.quantization.compressed_tensors.compressed_tensors import (
            CompressedTensorsFusedMoEMethod,
        )
        cfg = _ct(q)
        holder = torch.nn.Module()
        holder.scheme = cfg.get_moe_scheme(layer=holder, layer_name="model.layers.0.mlp.experts")
        method = CompressedTensorsFusedMoEMethod(cfg)
        method._layer = holder
        return method
    if q in ("fp8_block", "fp8_tensor", "mxfp8"):
        from sglang.srt.layers.quantization.fp8 import Fp8Config, Fp8MoEMethod
        cfg = Fp8Config(is_checkpoint_fp8_serialized=True, use_mxfp8=q == "mxfp8",
                        weight_block_size=[128, 128] if q == "fp8_block" else
                        ([1, 32] if q == "mxfp8" else None))
        return Fp8MoEMethod(cfg)
    if q == "mxfp4":
        from sglang.srt.layers.quantization.mxfp4 import Mxfp4MoEMethod
        return Mxfp4MoEMethod(prefix="model.layers.0.mlp.experts")
    if q == "nvfp4":
        from sglang.srt.layers.quantization.modelopt_quant import (
            ModelOptFp4Config,
            ModelOptNvFp4FusedMoEMethod,
        )
        cfg = ModelOptFp4Config(is_checkpoint_nvfp4_serialized=True, group_size=16,
                                exclude_modules=[])
        return ModelOptNvFp4FusedMoEMethod(cfg)
    raise ValueError(q)


def _quantization(s: Dict[str, Any]) -> str:
    return "compressed-tensors" if s.get("format") == "compressed-tensors" else \
        QUANTIZATION[s["quant"]]


def moe_runner(s: Dict[str, Any]) -> Dict[str, Any]:
    """The runner SGLang builds for the layer (`create_moe_runner`), or its error."""
    import torch
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    argv = ["--model-path", "dummy", "--moe-runner-backend", s["requested"],
            "--tp-size", str(s.get("ep_size", 1)), "--ep-size", str(s.get("ep_size", 1))]
    try:
        args = _publish(argv, _quantization(s), s.get("model"))
    except (ValueError, AssertionError, RuntimeError, NotImplementedError) as e:
        _LAST.clear()
        return {"runner": None, "error": f"server args: {type(e).__name__}: {e}"[:300]}
    resolved = args.moe_runner_backend
    try:
        method = _moe_method(s)
        layer = getattr(method, "_layer", None) or torch.nn.Module()
        cfg = MoeRunnerConfig(num_experts=8, num_local_experts=8 // s["ep_size"] or 1,
                              hidden_size=1024, intermediate_size_per_partition=512, top_k=2,
                              params_dtype=torch.bfloat16, activation=s["activation"],
                              is_gated=s["act_and_mul"])
        method.create_moe_runner(layer, cfg)
    except (ValueError, AssertionError, RuntimeError, NotImplementedError, ImportError) as e:
        return {"runner": None, "resolved": resolved,
                "error": f"create_moe_runner: {type(e).__name__}: {e}"[:300]}
    scheme = getattr(layer, "scheme", None)
    if scheme is not None:  # compressed-tensors: the scheme builds the runner
        runner = getattr(scheme, "runner", None)
        if runner is None:
            return {"runner": None, "resolved": resolved, "error": (
                f"create_moe_runner: {type(scheme).__name__} builds no MoeRunner for "
                f"{resolved} (apply_weights reads self.runner)")}
        return {"runner": runner.runner_backend.value, "resolved": resolved, "error": "",
                "method": type(scheme).__name__}
    runner = getattr(method, "runner", None)
    owned = getattr(method, "_owns_moe_runner", True)
    if runner is not None and owned:
        name = runner.runner_backend.value
    else:
        name = method._moe_runner_backend.value
    return {"runner": name, "resolved": resolved, "error": "", "method": type(method).__name__}


FP8_LINEAR = {"deepgemm_w8a8_block_fp8_linear_with_fallback": "deep_gemm",
              "flashinfer_gemm_w8a8_block_fp8_linear_with_fallback": "flashinfer",
              "flashinfer_deepgemm_w8a8_block_fp8_linear_with_fallback": "flashinfer_deepgemm",
              "cutlass_w8a8_block_fp8_linear_with_fallback": "cutlass",
              "triton_w8a8_block_fp8_linear": "triton",
              "aiter_w8a8_block_fp8_linear": "aiter"}


def fp8_linear(s: Dict[str, Any]) -> Dict[str, Any]:
    """The block-FP8 GEMM SGLang dispatches (`dispatch_w8a8_block_fp8_linear`), or its error."""
    from sglang.srt.layers.quantization import fp8_utils
    argv = ["--model-path", "dummy", "--fp8-gemm-backend", s["requested"]]
    try:
        _publish(argv, None)
        fn = fp8_utils.dispatch_w8a8_block_fp8_linear([128, 128])
    except (ValueError, AssertionError, RuntimeError) as e:
        return {"runner": None, "error": f"{type(e).__name__}: {e}"[:300]}
    fn = getattr(fn, "func", fn)
    name = FP8_LINEAR.get(fn.__name__, fn.__name__)
    if name == "flashinfer":  # one wrapper, FlashInfer's TRT-LLM or CUTLASS groupwise GEMM
        pick = fp8_utils._get_flashinfer_groupwise_backend
        pick.cache_clear()  # lru_cache: one server asks once, this process asks per scenario
        name += "_" + pick()
    return {"runner": name, "error": "",
            "resolved": fp8_utils.get_fp8_gemm_runner_backend().value}


def _exec_graph() -> Any:
    from sglang.srt.runtime_context import get_exec
    return get_exec().graph


class _Ran(Exception):
    """A GEMM stand-in was reached: the kernel SGLang's apply path runs for the layer."""


# apply_fp8_linear's GEMMs (fp8_utils.py): sgl-kernel's CUTLASS fp8_scaled_mm, SGLang's Triton
# triton_scaled_mm, torch._scaled_mm (cuBLASLt), FlashInfer's bmm_fp8 (ModelOpt per-tensor)
FP8_SCALED_GEMMS = {"fp8_scaled_mm": "cutlass", "triton_scaled_mm": "triton",
                    "flashinfer_bmm_fp8": "flashinfer_bmm_fp8"}


def _fp8_quant_stand_ins() -> Dict[str, Any]:
    """CPU stand-ins for SGLang's CUDA activation-quant kernels, with their output shapes
    (the shapes decide apply_fp8_linear's branch): per tensor one scale, per token one a row."""
    import torch
    fp8 = torch.float8_e4m3fn

    def per_tensor(x: Any, scale: Any = None, **kw: Any) -> Any:
        s = scale.reshape(1) if scale is not None else torch.ones(1)
        if kw.get("repeat_scale"):
            s = s.repeat(x.shape[0]).view(-1, 1)
        return x.to(fp8), s

    def scaled(x: Any, scale: Any = None, num_token_padding: Any = None,
               use_per_token_if_dynamic: bool = False, **kw: Any) -> Any:
        if scale is None and use_per_token_if_dynamic:
            return x.to(fp8), torch.ones(x.shape[0], 1)
        return per_tensor(x, scale)

    def per_token(x: Any, *a: Any, **kw: Any) -> Any:
        return x.to(fp8), torch.ones(x.shape[0], 1)
    return {"static_quant_fp8": per_tensor, "scaled_fp8_quant": scaled,
            "sglang_per_token_quant_fp8": per_token, "per_token_group_quant_fp8": per_token}


def _linear_method(s: Dict[str, Any]) -> Any:
    import torch
    if s.get("format") == "compressed-tensors":
        scheme = _ct(s["quant"]).get_linear_scheme(layer=torch.nn.Linear(1, 1),
                                                    layer_name="model.layers.0.mlp.down_proj")
        return scheme, scheme.apply_weights
    from sglang.srt.layers.quantization.fp8 import Fp8Config, Fp8LinearMethod
    method = Fp8LinearMethod(Fp8Config(is_checkpoint_fp8_serialized=True,
                                       activation_scheme="dynamic"))
    return method, method.apply


def fp8_scaled_linear(s: Dict[str, Any]) -> Dict[str, Any]:
    """The GEMM SGLang runs for a per-tensor or per-channel FP8 linear layer: the quant method
    is built (Fp8LinearMethod, or the compressed-tensors scheme), its weights created and
    processed after loading, and its apply path run on a CPU tensor until it reaches a GEMM
    (the CUDA activation-quant kernels on the way are CPU stand-ins of the same output shapes).
    --fp8-gemm-backend does not choose it: no argument of apply_fp8_linear reads it."""
    argv = ["--model-path", "dummy", "--fp8-gemm-backend", s["requested"]]
    try:
        _publish(argv, None)
        method, _apply = _linear_method(s)
    except (ValueError, AssertionError, RuntimeError, NotImplementedError, TypeError) as e:
        return {"runner": None, "error": f"quant method: {type(e).__name__}: {e}"[:300]}
    import torch
    ct = s.get("format") == "compressed-tensors"  # the scheme is the method
    return fp8_scaled_apply(method, torch.nn.Module(), method if ct else None)


def fp8_scaled_apply(method: Any, layer: Any, scheme: Any) -> Dict[str, Any]:
    """`method` (a linear quant method; `scheme` its compressed-tensors scheme, held by `layer`)
    creates its weights on `layer`, processes them and applies itself to a CPU tensor until it
    reaches an FP8 GEMM: that GEMM's name, or the error on the way."""
    import torch
    from sglang.srt.layers.quantization import fp8_utils
    from sglang.srt.layers.quantization import utils as quant_utils
    owner = scheme if scheme is not None else method
    apply = owner.apply_weights if scheme is not None else method.apply
    n = k = 256

    def ran(name: str) -> Any:
        def gemm(*a: Any, **kw: Any) -> Any:
            raise _Ran(name)
        return gemm
    patches = [(fp8_utils, name, ran(label)) for name, label in FP8_SCALED_GEMMS.items()]
    patches += [(mod, name, fn) for name, fn in _fp8_quant_stand_ins().items()
                for mod in (fp8_utils, quant_utils) if hasattr(mod, name)]
    patches.append((torch, "_scaled_mm", ran("torch_scaled_mm")))  # the catalogue name
    saved = [(mod, name, getattr(mod, name, None)) for mod, name, _ in patches]
    stage = "server args"
    try:
        graph = _exec_graph()
        if graph.cuda_graph_config is None:  # resolved at model-runner start; its default
            from sglang.srt.model_executor.cuda_graph_config import CudaGraphConfig
            object.__setattr__(graph, "cuda_graph_config", CudaGraphConfig())
        for mod, name, fn in patches:
            setattr(mod, name, fn)
        stage = "create_weights"
        owner.create_weights(layer, input_size_per_partition=k, output_partition_sizes=[n],
                             input_size=k, output_size=n, params_dtype=torch.bfloat16,
                             weight_loader=lambda *a, **kw: None)
        with torch.no_grad():
            layer.weight.data = torch.zeros(n, k).to(torch.float8_e4m3fn)
            for name in ("weight_scale", "input_scale"):
                if getattr(layer, name, None) is not None:
                    getattr(layer, name).data.fill_(1.0)
        stage = "process_weights_after_loading"
        owner.process_weights_after_loading(layer)
        stage = "apply"
        apply(layer, torch.zeros(4, k, dtype=torch.bfloat16))
        return {"runner": None, "error": "apply reached no FP8 GEMM"}
    except _Ran as r:
        return {"runner": str(r), "error": "", "method": type(owner).__name__,
                "channelwise": int(layer.weight_scale.numel()) == n}
    except (ValueError, AssertionError, RuntimeError, NotImplementedError, TypeError,
            AttributeError) as e:
        return {"runner": None, "error": f"{stage}: {type(e).__name__}: {e}"[:300]}
    finally:
        for mod, name, fn in saved:
            if fn is not None:
                setattr(mod, name, fn)


def main() -> None:
    job = json.load(sys.stdin)
    m = job["machine"]
    simulate(m["capability"], m["cuda"], m["libs"])
    import logging
    logging.disable(logging.WARNING)
    # questions with the same server arguments one after another: each publish once
    todo = sorted(range(len(job["scenarios"])), key=lambda i: json.dumps(
        [job["scenarios"][i].get(k) for k in ("op", "quant", "requested", "ep_size", "model", "format")]))
    out: List[Any] = [None] * len(todo)
    for i in todo:
        s = job["scenarios"][i]
        out[i] = moe_runner(s) if s["op"] == "moe" else \
            fp8_linear(s) if s["quant"] == "fp8_block" else fp8_scaled_linear(s)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
