"""Every module of a checkpoint as vLLM's own model class builds it on one rank (issue 32).

For a checkpoint directory (config files only) and parallel sizes (tp, dp, ep), vLLM 0.32.0 does
what it does at start-up: `ModelConfig` and `ParallelConfig` make a `VllmConfig` (its checks:
heads divisible by TP, ...; the quantization config), then `initialize_model` builds the model
class the registry names for the checkpoint's `architectures`, on the meta device (no memory, no
weights). Simulated is only what a CPU cannot answer:

- the process groups: vLLM's parallel_state globals (_TP, _DP, _EP, _PP, _PCP, _DCP) hold a group
  of the requested size seen from rank 0 (vLLM's FusedMoEParallelConfig.make and every parallel
  layer read `world_size` / `rank_in_group` from them); rank 0 is the rank shown;
- the GPU: sim.Simulation (SM 10.0, CUDA 12.8, flashinfer; the NVFP4 and FP8 methods choose a
  kernel when they create their weights), with the attention backends answered by the host
  platform (attention kernels are not this comparison's subject) and vLLM's compilation module
  imported before the simulation (it registers CUDA custom ops at import);
- the FP8 MoE backend choice keeps running vLLM's own oracle (ckpt_diff._record_fp8_moe_keys).

Read per module: vLLM's class, the per-rank K and N a linear layer holds (input_size_per_partition,
output_size_per_partition), the TP it runs (1: ReplicatedLinear or disable_tp), for the routed
experts the global and local expert counts and the per-rank intermediate size, and the
`layer.quant` value of the quant method the quantization config gives it (ckpt_diff._classify).
A refusal (an exception while vLLM builds the config or the model) is kept with vLLM's message
and the innermost vLLM source line that raised it.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import ckpt_diff  # noqa: E402
import sim  # noqa: E402

UNQUANTIZED = ckpt_diff.UNQUANTIZED
NO_GPU = sim.Scenario(None, None, None, None, "moe", "nvfp4", "silu", True)
GROUPS = ("_TP", "_DP", "_EP", "_PP", "_PCP", "_DCP")


@dataclass(frozen=True)
class Built:
    """One module on rank 0."""
    cls: str
    k: int  # linear: input features on this rank; experts: hidden size
    n: int  # linear: output features on this rank; experts: intermediate size on this rank
    tp: int  # the tensor-parallel size the module runs (1: replicated)
    scheme: str  # layer.quant value of vLLM's quant method | unquantized | other
    experts: Optional[Tuple[int, int]] = None  # (global, local) for routed experts
    routing: Optional[str] = None  # routed experts: the router's RoutingMethodType, snake case


@dataclass
class Model:
    modules: Dict[str, Built] = field(default_factory=dict)
    refused: str = ""  # vLLM's refusal: message (file:line function)


class _Group:
    """A process group of `n` ranks seen from rank 0: what vLLM's layers read of it."""

    def __init__(self, n: int):
        self.world_size, self.rank_in_group, self.rank, self.local_rank = n, 0, 0, 0
        self.ranks = list(range(n))
        self.is_first_rank = self.is_last_rank = True
        self.device_group = self.cpu_group = types.SimpleNamespace(size=lambda: n,
                                                                   rank=lambda: 0)


def _where(exc: BaseException) -> str:
    """The innermost frame of vLLM's code in the traceback: 'vllm/x.py:123 (func)'."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/vllm/" in f.filename
              and "/tests/" not in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"vllm/{f.filename.split('/vllm/', 1)[1]}:{f.lineno} ({f.name})"


def refusal(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text} [{_where(exc)}]"


@contextlib.contextmanager
def _groups(tp: int, dp: int, ep: bool) -> Iterator[None]:
    from vllm.distributed import parallel_state as ps
    sizes = {"_TP": tp, "_DP": dp, "_EP": tp * dp if ep else 1, "_PP": 1, "_PCP": 1, "_DCP": 1}
    old = {g: getattr(ps, g) for g in GROUPS}
    for g, n in sizes.items():
        setattr(ps, g, _Group(n))
    try:
        yield
    finally:
        for g, v in old.items():
            setattr(ps, g, v)


@contextlib.contextmanager
def _expert_maps_on_cpu() -> Iterator[None]:
    """vLLM's ExpertMapManager (fused_moe/expert_map_manager.py) builds the small integer map of
    which experts a rank holds and reads it back (.item()): built on the CPU, as on a GPU it is
    a real tensor, while the weights stay on the meta device."""
    import torch
    from vllm.model_executor.layers.fused_moe import expert_map_manager as emm
    real = emm.ExpertMapManager.__init__

    def on_cpu(self: Any, *a: Any, **k: Any) -> None:
        with torch.device("cpu"):
            real(self, *a, **k)
    emm.ExpertMapManager.__init__ = on_cpu  # type: ignore[method-assign]
    try:
        yield
    finally:
        emm.ExpertMapManager.__init__ = real  # type: ignore[method-assign]


class _GpuMemoryIsMeta:
    """A tensor vLLM allocates on the GPU by name (`device="cuda"`, e.g. deepseek_v32/nvidia/
    model.py DeepseekV32Model's topk_indices_buffer on current_platform.device_type; or by
    index, current_platform.current_device(), e.g. qwen_gdn_linear_attn.py's RMSNormGated) is
    placed on the meta device, as every weight is: the simulated GPU's memory (a CPU build of
    torch has no CUDA allocator to answer it)."""

    @staticmethod
    def mode() -> Any:
        import torch
        from torch.overrides import TorchFunctionMode

        def on_gpu(d: Any) -> bool:  # a bare index is the accelerator's (current_device())
            return (isinstance(d, int) and not isinstance(d, bool)) or \
                (isinstance(d, (str, torch.device)) and torch.device(d).type == "cuda")

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func: Any, types_: Any, args: Any = (),
                                   kwargs: Any = None) -> Any:
                kwargs = dict(kwargs or {})
                if on_gpu(kwargs.get("device")):
                    kwargs["device"] = "meta"
                return func(*args, **kwargs)
        return Mode()


@contextlib.contextmanager
def _worker_workspace() -> Iterator[None]:
    """vLLM's GPU worker sets up its workspace manager before it builds the model (vLLM 0.32.0
    v1/worker/gpu_worker.py Worker._init_workspace_and_model_runner: init_workspace_manager(
    self.device, ...)); the sparse MLA backends take their workspaces while the model is built
    (flashmla_sparse.py FlashMLASparseImpl.__init__). The same call, on the meta device.

    The workspace grows by freeing the GPU allocator's cache first (workspace.py
    WorkspaceManager._ensure_workspace_size: torch.accelerator.empty_cache()), a device call a
    CPU build of torch refuses ("Cannot access accelerator device"): the simulated GPU's cache
    is empty, so there it does nothing."""
    import torch
    from vllm.v1.worker import workspace
    fresh = not workspace.is_workspace_manager_initialized()
    if fresh:
        workspace.init_workspace_manager(torch.device("meta"))
    real = torch.accelerator.empty_cache
    torch.accelerator.empty_cache = lambda: None
    try:
        yield
    finally:
        torch.accelerator.empty_cache = real
        if fresh:
            workspace._manager = None


@contextlib.contextmanager
def _cuda_activations() -> Iterator[None]:
    """The CUDA activation kernels vLLM's activation layers take a handle of when built on a CUDA
    platform (activation.py ReLUSquaredActivation: torch.ops._C.relu_squared): the CPU build
    lacks them; a stand-in that is never run (the model is only built)."""
    import torch

    def never(*a: Any, **k: Any) -> None:
        raise RuntimeError("a CUDA kernel stand-in: the model is built, never run")
    added = [n for n in ("relu_squared",) if not hasattr(torch.ops._C, n)]
    for n in added:
        setattr(torch.ops._C, n, never)
    try:
        yield
    finally:
        for n in added:
            delattr(torch.ops._C, n)


# vLLM 0.32.0 platforms/cuda.py _get_backend_priorities: on SM 10.x with a BF16 KV cache and
# more than 16 heads, the sparse MLA backends in order FLASHMLA_SPARSE, FLASHINFER_MLA_SPARSE
SPARSE_MLA_ON_SM100 = "FLASHMLA_SPARSE"


def _sparse_mla_on_cuda(host_answer: Any) -> Any:
    """The attention backend the simulated GPU answers: the host platform's (attention kernels
    are not this comparison's subject), except sparse MLA (DeepSeek-V3.2's DSA), which the host
    refuses (vLLM 0.32.0 platforms/cpu.py CpuPlatform.get_attn_backend_cls: "Sparse Attention
    is not supported on CPU."): there the CUDA platform's SM 10.x choice, SPARSE_MLA_ON_SM100
    (vLLM's CudaPlatform cannot be asked on a CPU build: platforms/cuda.py imports
    vllm._C_stable_libtorch)."""
    def answer(selected_backend: Any, attn_selector_config: Any, num_heads: Any = None) -> str:
        if attn_selector_config.use_sparse:
            from vllm.v1.attention.backends.registry import AttentionBackendEnum
            return AttentionBackendEnum[SPARSE_MLA_ON_SM100].get_path()
        return host_answer(selected_backend, attn_selector_config, num_heads)
    return answer


class Builder:
    """Builds models under one simulated GPU; close() restores vLLM."""

    def __init__(self) -> None:
        logging.getLogger("vllm").setLevel(logging.ERROR)
        import vllm.compilation.backends  # noqa: F401  (registers CUDA ops at import)

        # the Mamba-2 kernels filter their Triton autotune configs at import on a CUDA SM 9.0
        # platform (vLLM 0.32.0 layers/mamba/ops/ssd_chunk_scan.py 18-35,
        # _drop_racy_wgmma_configs: c.num_stages), which the CPU build's Triton placeholder
        # (triton_utils/importing.py: Config a dummy decorator) has not: imported on the host
        # platform, as a GPU machine's real Triton would import them. Imported first under a
        # simulated SM 9.0, Nemotron-H's class failed to load for the rest of the process
        # (registry.py _try_load_model_cls is cached), reported as "failed to be inspected".
        import vllm.model_executor.layers.mamba.mamba_mixer2  # noqa: F401
        self.simulation = sim.Simulation()
        host = sim.SimulatedCuda.host
        for name in dir(host):  # the host platform's attention backends
            if name.startswith("get_") and "backend_cls" in name:
                setattr(self.simulation.platform, name, getattr(host, name))
        self.simulation.platform.get_attn_backend_cls = _sparse_mla_on_cuda(  # type: ignore
            host.get_attn_backend_cls)
        # the device query (Platform.__getattr__ answers torch.cuda.current_device, which a CPU
        # build of torch refuses: "Torch not compiled with CUDA enabled"): rank 0's GPU, 0
        self.simulation.platform.current_device = lambda: 0  # type: ignore[attr-defined]
        self._cuda_model_packages()

    def _cuda_model_packages(self) -> None:
        """vLLM's platform-dispatching model packages bind their class at import from
        current_platform (vllm/models/deepseek_v32/__init__.py: the NVIDIA class on CUDA,
        DeepSeek-V3's elsewhere): imported, or re-imported when an earlier import ran on the
        CPU platform (a config check of another test), under the simulated GPU, as a GPU
        machine imports them."""
        import importlib
        import sys
        with self.simulation.scenario(ckpt_diff.SCENARIO):
            for name in ("vllm.models.deepseek_v32",):
                mod = sys.modules.get(name)
                mod = importlib.reload(mod) if mod is not None else importlib.import_module(name)
                cls = mod.DeepseekV32ForCausalLM
                assert ".nvidia." in cls.__module__, (name, cls.__module__)

    def close(self) -> None:
        self.simulation.close()

    def config(self, d: Path, tp: int, dp: int, ep: bool) -> Any:
        """vLLM's VllmConfig for the checkpoint and sizes (on vLLM's own platform: ModelConfig's
        checks call CUDA ops under the simulated one)."""
        from vllm.config import LoadConfig, ModelConfig, ParallelConfig, VllmConfig
        mc = ModelConfig(model=str(d), skip_tokenizer_init=True, trust_remote_code=False)
        pc = ParallelConfig(tensor_parallel_size=tp, data_parallel_size=dp,
                            enable_expert_parallel=ep)
        return VllmConfig(model_config=mc, parallel_config=pc,
                          load_config=LoadConfig(load_format="dummy"))

    def build(self, d: Path, tp: int = 1, dp: int = 1, ep: bool = False) -> Model:
        return self.build_many([(d, tp, dp, ep)])[0]

    def build_many(self, cases: List[Tuple[Path, int, int, bool]]) -> List[Model]:
        """Every case's config on vLLM's own platform first, then every model under the
        simulated GPU (one switch each way)."""
        configs: List[Any] = []
        with self.simulation.scenario(NO_GPU):
            for d, tp, dp, ep in cases:
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        configs.append(self.config(d, tp, dp, ep))
                except Exception as exc:  # noqa: BLE001 - vLLM's refusal is an answer
                    configs.append(refusal(exc))
        out = []
        with self.simulation.scenario(ckpt_diff.SCENARIO), ckpt_diff._record_fp8_moe_keys():
            for (_d, tp, dp, ep), vc in zip(cases, configs):
                out.append(Model(refused=vc) if isinstance(vc, str) else
                           self._model(vc, tp, dp, ep))
        return out

    def _model(self, vc: Any, tp: int, dp: int, ep: bool) -> Model:
        import torch
        from vllm.model_executor.model_loader.utils import initialize_model
        out = Model()
        seen: Dict[int, Tuple[str, Any]] = {}
        qc = vc.quant_config
        if qc is not None:
            real = qc.get_quant_method

            def spy(layer: Any, prefix: str) -> Any:
                before = len(ckpt_diff._FP8_MOE_KEYS)
                method = real(layer, prefix)
                keys = ckpt_diff._FP8_MOE_KEYS[-1] if len(ckpt_diff._FP8_MOE_KEYS) > before \
                    else None
                seen[id(layer)] = (prefix, keys)
                return method
            qc.get_quant_method = spy
        # the expert map's log string calls torch.nonzero, which a meta tensor answers only
        # with this flag (a harness artifact: the map is real, its log text is not read)
        import torch.fx.experimental._config as fx_config
        try:
            with _groups(tp, dp, ep), _cuda_activations(), _expert_maps_on_cpu(), \
                    _worker_workspace(), \
                    torch.device("meta"), _GpuMemoryIsMeta.mode(), \
                    fx_config.patch(meta_nonzero_assume_all_nonzero=True), \
                    contextlib.redirect_stdout(io.StringIO()):
                model = initialize_model(vllm_config=vc)
        except Exception as exc:  # noqa: BLE001
            out.refused = refusal(exc)
            return out
        finally:
            if qc is not None:
                del qc.get_quant_method
        out.modules = _read(model, seen)
        return out


def routing_name(method: Any) -> Optional[str]:
    """vLLM's RoutingMethodType as layer.routing spells it (DeepSeekV3 -> deepseek_v3)."""
    import re
    if method is None:
        return None
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", method.name).lower()
    return {"deep_seek_v3": "deepseek_v3", "mini_max2": "minimax2", "top_k": "topk",
            "deepseek_v4": "deepseek_v4"}.get(name, name)


def _read(model: Any, seen: Dict[int, Tuple[str, Any]]) -> Dict[str, Built]:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.layers.linear import LinearBase, ReplicatedLinear
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    out: Dict[str, Built] = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, (LinearBase, RoutedExperts, ParallelLMHead)):
            continue
        prefix, keys = seen.get(id(mod), (name, None))
        if keys is not None:
            ckpt_diff._FP8_MOE_KEYS.append(keys)
        method = getattr(mod, "quant_method", None)
        scheme = ckpt_diff._classify(method, mod)
        cls = type(mod).__name__
        if isinstance(mod, RoutedExperts):
            mc = mod.moe_config
            out[prefix] = Built(cls, mc.hidden_dim, mod.intermediate_size_per_partition,
                                mc.moe_parallel_config.tp_size, scheme,
                                (mod.global_num_experts, mod.local_num_experts),
                                routing_name(mc.routing_method))
        elif isinstance(mod, ParallelLMHead):
            out[prefix] = Built(cls, mod.embedding_dim, mod.num_embeddings_per_partition,
                                mod.tp_size, scheme)
        else:
            k = getattr(mod, "input_size_per_partition", mod.input_size)
            n = getattr(mod, "output_size_per_partition", mod.output_size)
            # a ReplicatedLinear (GateLinear too) holds the whole weight on every GPU; its
            # tp_size attribute is the group's size, not a split
            tp = 1 if isinstance(mod, ReplicatedLinear) else mod.tp_size
            out[prefix] = Built(cls, k, n, tp, scheme)
    return out
