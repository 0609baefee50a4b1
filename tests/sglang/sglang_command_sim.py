"""SGLang 0.5.23 started from a command line, on one simulated machine: what it runs for a
checkpoint's MoE and linear layers.

Run as a child process (one per machine: SGLang evaluates its platform probes at import time):
    python tests/sglang/sglang_command_sim.py < job.json > answers.json

job: {"machine": {"capability", "cuda", "libs"}, "questions": [{"argv", "moe", "linear"}]}.
For each question SGLang's own code runs, in the order its server does:
- `ServerArgs` from exactly `argv` (its parser: an argv it refuses is an answer, not an error);
- `publish`: its whole resolution pipeline on the checkpoint directory `--model-path` names
  (model overrides such as arg_groups/model_overrides/qwen3_moe.py, gpt_oss.py, the DeepSeek
  family's in overrides.py; `handle_moe_kernel_config`'s asserts; model_hook.py's
  `triton_kernel` EP check), then the MoE / FP8 / FP4 GEMM configs the scheduler initialises
  (managers/scheduler.py: initialize_moe_config, initialize_fp8_gemm_config,
  initialize_fp4_gemm_config);
- the loader's quantization config (model_loader/loader.py `_get_quantization_config`: the
  checkpoint's quant config class, its minimum capability and dtypes);
- for the MoE layer, the quant method the config gives a FusedMoE (`get_quant_method`) and its
  `create_moe_runner`; for a linear layer, the method for a QKV/gate-up linear and the GEMM it
  dispatches (block FP8: `dispatch_w8a8_block_fp8_linear`, MXFP8:
  `dispatch_w8a8_mxfp8_linear`, NVFP4: the FP4 GEMM backend, per-tensor / per-channel FP8:
  its apply path up to the GEMM it calls, as sglang_sim.fp8_scaled_linear).

What is simulated is sglang_sim.simulate's (the device query, absent libraries) and, for a
machine without sglang-kernel, its absence (SGLang then does not import).
"""
from __future__ import annotations

import importlib.abc
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).parent))

import sglang_sim  # noqa: E402


class _Hidden(importlib.abc.MetaPathFinder):
    def __init__(self, names: List[str]):
        self.names = set(names)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _fake(cls: Any) -> Any:
    """An instance of SGLang's layer class for its quant config's isinstance checks (the class's
    __init__ needs the distributed groups a server starts; the quant method reads none)."""
    import torch
    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    return obj


def _err(stage: str, e: BaseException) -> str:
    return f"{stage}: {type(e).__name__}: {e}"[:300]


def _start(argv: List[str]) -> Any:
    """(server args, quant config) as SGLang's server reaches them from `argv`."""
    from sglang.srt.arg_groups.model_override_base import model_config_of
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.layers.moe.utils import initialize_moe_config
    from sglang.srt.layers.quantization import fp4_utils, fp8_utils
    from sglang.srt.model_loader.loader import _get_quantization_config
    from sglang.srt.runtime_context import publish
    stage = "server args"
    try:
        args = sglang_sim.server_args(argv)
        stage = "resolution"
        publish(args, role="test")
        initialize_moe_config()
        fp8_utils.initialize_fp8_gemm_config()
        fp4_utils.initialize_fp4_gemm_config()
        stage = "loader"
        qc = _get_quantization_config(model_config_of(args), LoadConfig())
    except SystemExit as e:  # the parser refuses the argv
        raise RuntimeError(f"server args: argparse exit {e.code}") from e
    except Exception as e:
        raise RuntimeError(_err(stage, e)) from e
    return args, qc


def moe(qc: Any, q: Dict[str, Any]) -> Dict[str, Any]:
    import torch
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.utils import RoutingMethodType
    layer = _fake(FusedMoE)
    try:
        method = qc.get_quant_method(layer, q["prefix"]) if qc is not None else None
    except Exception as e:
        return {"runner": None, "error": _err("get_quant_method", e)}
    if method is None:
        return {"runner": None, "error": "get_quant_method: no quant method (unquantized)"}
    try:
        cfg = MoeRunnerConfig(num_experts=q["experts"], num_local_experts=q["local_experts"],
                              hidden_size=q["hidden"], intermediate_size_per_partition=q["inter"],
                              top_k=q["top_k"], params_dtype=torch.bfloat16,
                              activation=q["activation"], is_gated=True,
                              routing_method_type=(RoutingMethodType[q["routing"]]
                                                   if q.get("routing") else None))
        refused = _load_check(method, layer, cfg, q)
        if refused:
            return {"runner": None, "error": refused, "method": type(method).__name__}
        method.create_moe_runner(layer, cfg)
    except Exception as e:
        return {"runner": None, "error": _err("create_moe_runner", e),
                "method": type(method).__name__}
    scheme = getattr(layer, "scheme", None)
    if scheme is not None:  # compressed-tensors: the scheme builds the runner
        runner = getattr(scheme, "runner", None)
        if runner is None:
            return {"runner": None, "method": type(scheme).__name__, "error": (
                f"create_moe_runner: {type(scheme).__name__} builds no MoeRunner "
                "(apply_weights reads self.runner)")}
        return {"runner": runner.runner_backend.value, "error": "",
                "method": type(scheme).__name__}
    runner = getattr(method, "runner", None)
    # what FusedMoE takes as its runner backend and apply dispatches on
    # (fused_moe_triton/layer.py:576-577 get_moe_runner_backend): ModelOptFp8MoEMethod keeps a
    # Triton runner and runs FlashInfer's TRT-LLM per-tensor MoE for flashinfer_trtllm with a
    # declared routing method (modelopt_quant.py:1357-1367)
    try:
        contract = method.get_moe_runner_backend(layer)
    except AttributeError:  # a method that set no runner attribute
        contract = None
    if contract is not None:
        name = contract.value
    elif runner is not None and getattr(method, "_owns_moe_runner", True):
        name = runner.runner_backend.value
    elif getattr(method, "_moe_runner_backend", None) is not None:
        name = method._moe_runner_backend.value
    else:
        return {"runner": None, "method": type(method).__name__,
                "error": f"create_moe_runner: {type(method).__name__} builds no MoeRunner"}
    return {"runner": name, "error": "", "method": type(method).__name__}


def _load_check(method: Any, layer: Any, cfg: Any, q: Dict[str, Any]) -> str:
    """The quant method's `create_weights` on the MoE layer's per-rank sizes, its tensors on
    the meta device: the ValueError SGLang raises at load for sizes it refuses (Fp8MoEMethod's
    block_n / block_k divisibility, fp8.py:1579-1601, per MoE-TP rank), else ''. What else
    create_weights needs of a real server's layer is not judged here ('')."""
    import torch
    layer.moe_tp_size = q.get("moe_tp", 1)
    layer.moe_runner_config = cfg
    try:
        with torch.device("meta"):
            method.create_weights(layer, num_experts=q["local_experts"],
                                  hidden_size=q["hidden"],
                                  intermediate_size_per_partition=q["inter"],
                                  params_dtype=torch.bfloat16,
                                  weight_loader=lambda *a, **kw: None)
    except ValueError as e:
        if "divisible" in str(e):
            return _err("create_weights", e)
    except Exception:  # noqa: BLE001 - a server's layer holds more than this stand-in
        pass
    return ""


def _block_checks(qc: Any, owner: Any, q: Dict[str, Any]) -> str:
    """SGLang's block-FP8 shape check (Fp8LinearMethod.validate_block_quant_shapes,
    fp8.py:570-609, called by create_weights) on the dense MLP's per-rank sizes: its
    ValueError, else ''."""
    import types

    from sglang.srt.layers.quantization.fp8 import Fp8LinearMethod
    block = getattr(qc, "weight_block_size", None) or getattr(owner, "weight_block_size", None)
    if not block:
        return ""
    cfg = types.SimpleNamespace(weight_block_size=list(block))
    layer = types.SimpleNamespace(tp_group=types.SimpleNamespace(world_size=q.get("tp", 1)))
    for name, k, k_rank, n, n_rank, parts in q.get("checks", ()):
        try:
            Fp8LinearMethod.validate_block_quant_shapes(layer, cfg, k, k_rank, n, n_rank, parts)
        except ValueError as e:
            return _err(f"create_weights ({name})", e)
    return ""


def _gemm_name(fn: Any) -> str:
    from sglang.srt.layers.quantization import fp8_utils
    fn_ = getattr(fn, "func", fn)
    name = sglang_sim.FP8_LINEAR.get(fn_.__name__, fn_.__name__)
    if name == "flashinfer":  # one wrapper: FlashInfer's TRT-LLM or CUTLASS groupwise GEMM
        pick = fp8_utils._get_flashinfer_groupwise_backend
        pick.cache_clear()
        name += "_" + pick()
    if fn_.__name__ == "flashinfer_mxfp8_blockscaled_linear":
        name = "flashinfer_" + getattr(fn, "keywords", {}).get("backend", "?")
    return MXFP8_LINEAR.get(name, name)


# dispatch_w8a8_mxfp8_linear's functions (fp8_utils.py) by SGLang's --fp8-gemm-backend name
MXFP8_LINEAR = {"deepgemm_w8a8_mxfp8_linear_with_fallback": "deep_gemm",
                "flashinfer_cute-dsl": "flashinfer_cutedsl"}


def linear(qc: Any, q: Dict[str, Any]) -> Dict[str, Any]:
    from sglang.srt.layers.linear import QKVParallelLinear
    from sglang.srt.layers.quantization import fp4_utils
    layer = _fake(QKVParallelLinear)
    try:
        method = qc.get_quant_method(layer, q["prefix"]) if qc is not None else None
    except Exception as e:
        return {"runner": None, "error": _err("get_quant_method", e)}
    if method is None:
        return {"runner": None, "error": "get_quant_method: no quant method (unquantized)"}
    scheme = getattr(layer, "scheme", None)
    owner = scheme if scheme is not None else method
    kind = type(owner).__name__
    if getattr(owner, "use_marlin", False):  # fp8.py Fp8LinearMethod.apply: FP8 Marlin first
        return {"runner": "marlin", "error": "", "method": kind}
    # Fp8LinearMethod.__init__ (fp8.py:534-563) dispatches a block GEMM for every layer, also a
    # per-tensor one; apply runs the MXFP8 GEMM for an MXFP8 layer, the block GEMM for a block
    # layer, else apply_fp8_linear (below)
    if getattr(owner, "use_mxfp8", False) and getattr(owner, "w8a8_mxfp8_linear", None):
        return {"runner": _gemm_name(owner.w8a8_mxfp8_linear), "error": "", "method": kind}
    if getattr(owner, "block_quant", None) or getattr(owner, "weight_block_size", None):
        refused = _block_checks(qc, owner, q)
        if refused:
            return {"runner": None, "error": refused, "method": kind}
        fn = getattr(owner, "w8a8_block_fp8_linear", None)
        if fn is not None:
            return {"runner": _gemm_name(fn), "error": "", "method": kind}
    if "Fp4" in kind or "Nvfp4" in kind or "NvFp4" in kind:
        if "W4A16" in kind:  # FlashInfer's bf16 x fp4 GEMM where --fp4-gemm-backend names
            # one that has it (cute-dsl, cudnn) on Blackwell, else FP4 Marlin
            # (compressed_tensors_w4a16_nvfp4.py _use_flashinfer_bf16_fp4)
            import sys as _sys

            import torch
            mod = _sys.modules[type(owner).__module__]
            pick = getattr(mod, "_use_flashinfer_bf16_fp4", None)
            try:
                fi = bool(pick and pick(torch.bfloat16))
            except (ValueError, RuntimeError) as e:
                return {"runner": None, "error": _err("create_weights", e), "method": kind}
            return {"runner": fp4_utils.get_fp4_gemm_runner_backend().value if fi else "marlin",
                    "error": "", "method": kind}
        return {"runner": fp4_utils.get_fp4_gemm_runner_backend().value, "error": "",
                "method": kind}
    if "Unquantized" in kind:
        return {"runner": None, "error": "unquantized", "method": kind}
    ans = sglang_sim.fp8_scaled_apply(method, layer, scheme)
    ans.setdefault("method", kind)
    return ans


def answer(q: Dict[str, Any]) -> Dict[str, Any]:
    try:
        _args, qc = _start(q["argv"])
    except RuntimeError as e:
        return {"start": str(e)}
    except ImportError as e:
        return {"start": _err("import", e)}
    out: Dict[str, Any] = {"start": ""}
    if q.get("moe"):
        out["moe"] = moe(qc, q["moe"])
    if q.get("linear"):
        out["linear"] = linear(qc, q["linear"])
    return out


def main() -> None:
    job = json.load(sys.stdin)
    m = job["machine"]
    libs = list(m["libs"])
    if "sglang-kernel" not in libs:
        sys.meta_path.insert(0, _Hidden(["sgl_kernel"]))
    sglang_sim.simulate(m["capability"], m["cuda"], [x for x in libs if x != "sglang-kernel"]
                        if "sglang-kernel" in libs else [x for x in libs], kernel=(
                            "sglang-kernel" in libs))
    import logging
    logging.disable(logging.WARNING)
    import warnings
    warnings.simplefilter("ignore")
    out: List[Optional[Dict[str, Any]]] = []
    for q in job["questions"]:
        try:
            out.append(answer(q))
        except ImportError as e:
            out.append({"start": _err("import", e)})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
