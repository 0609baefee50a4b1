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
What selector chooses for a layer (vLLM's objects as selector's layer, the Chooser) is
selector/engines/vllm_choice.py; this module hooks it into vLLM's oracles and holds the launch
plan's vLLM rules.
"""
from __future__ import annotations

import copy
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
    Tuple,
)

from selector.checkpoint.launchers import Launcher
from selector.engines.vllm_choice import (
    CHOOSER,
    ENV_ENABLE,
    ENV_OVERRIDES,
    OUTSIDE_PICK_LOG,
    Chooser,
    NotExpressible,
    act_scale,
    capability,
    linear_layer,
    linear_sizes,
    moe_activation,
    moe_config,
    moe_layer,
    moe_quant,
    outside_pick,
    over_range,
    quant_keys,
    quant_scheme,
    refusal,
    requested_name,
    requested_names,
    routing,
    token_buckets,
    vllm_modules,
)

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.protocols import SelectorLike as Selector

log = logging.getLogger("vllm.selector")  # vLLM's handlers print it beside vLLM's own lines

MOE_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.nvfp4"
FP8_MOE_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.fp8"
MXFP8_MOE_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp8"
MXFP4_MOE_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"
LINEAR_KERNELS = "vllm.model_executor.kernels.linear"


def _moe_choice(original: Callable[..., Any], config: Any, keys: Tuple[Any, Any], what: str,
                call: Callable[[Callable[..., Any], Any], Any], chooser: Optional[Chooser],
                switches: Optional[Callable[[str], Tuple[str, Tuple[str, ...]]]] = None,
                fallback: Optional[Tuple[Any, Any]] = None) -> Any:
    """One MoE oracle of vLLM, decided by selector and built by vLLM's explicit path: the layer
    from `config` and the (weight, activation) QuantKeys `keys`; `switches` turns vLLM's
    requested backend into (requested, excluded) where vLLM has switches of its own (FP8);
    `call(fn, config)` calls vLLM's oracle `fn` as its caller did; `fallback`: the keys of the
    layer to decide when selector refuses this one (MXFP4's BF16 fallback). A layer selector
    cannot describe is vLLM's alone; so is one whose every catalogued backend selector refuses
    on automatic selection while vLLM's own automatic choice is a backend outside the catalogue
    (outside_pick: vLLM's CPU experts with no GPU); any other refusal raises vLLM's error type
    with the explanation."""
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
        if requested == "auto" == config.moe_backend:
            built = outside_pick(original, config, what, call,
                                  chooser.selector_for(layer, requested, exclude)[1], d)
            if built is not None:
                return built
        raise error(why)
    assert d.engine is not None  # every Chooser decision is made with engine=vllm
    forced = copy.copy(config)
    forced.moe_backend = d.engine.backend
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


MXFP8_UNNAMED_SOURCE = ("vLLM 0.32.0 fused_moe/oracle/mxfp8.py lines 20-42 (_SUPPORTED_BACKENDS "
                        "ends with EMULATION, which _BACKEND_NAME_MAP does not name: vLLM runs "
                        "its MXFP8 emulation from the automatic list only); lines 81-105 "
                        "(_select_kernel_cls: the gate either path applies to a backend)")


def select_mxfp8_moe(original: Callable[..., Any], config: Any,
                     chooser: Optional[Chooser] = None) -> Any:
    """select_mxfp8_moe_backend (its keys are MXFP8's own), decided by selector and built by
    vLLM's explicit path; a backend vLLM has no --moe-backend value for (its MXFP8 emulation)
    through the gate vLLM's automatic list applies to it (MXFP8_UNNAMED_SOURCE)."""
    from vllm.model_executor.layers.fused_moe.oracle import mxfp8
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    from selector.engines.vllm_flags import vllm_name

    def call(fn: Callable[..., Any], c: Any) -> Any:
        if c.moe_backend == "auto" or c.moe_backend in mxfp8._BACKEND_NAME_MAP:
            return fn(c)
        backend = next((b for b in mxfp8._SUPPORTED_BACKENDS
                        if vllm_name(b.value) == c.moe_backend), None)
        if backend is None:
            return fn(c)  # vLLM's own refusal of a name it does not know
        return backend, mxfp8._select_kernel_cls(backend, c)
    return _moe_choice(original, config, (q.kMxfp8Static, q.kMxfp8Dynamic), "MXFP8", call,
                       chooser)


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
    name = d.engine.backend
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
    from selector.core.env_vars import vllm_mode, words
    if vllm_mode() != "on":  # "observe" is dispatched before this (vllm_entry.register)
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
# engines/vllm_flags.py, each compared with vLLM's own functions by tests/vllm/.

class VllmLauncher(Launcher):
    """vLLM's per-scheme MoE oracles, its kernel classes, `linear_backend_per_quant` and
    selector's own plugin as an answer to a flag conflict."""

    def refuses(self, op: str, scheme: str, value: str) -> Optional[Tuple[str, str]]:
        from selector.engines.vllm_flags import VLLM_MOE_ACCEPTS, VLLM_MOE_SOURCES
        accepted = VLLM_MOE_ACCEPTS.get(scheme) if op == "moe" else None
        if accepted is None or value in accepted:
            return None
        return (f"vLLM's {scheme} MoE oracle does not take moe_backend={value!r} "
                f"(accepted: {', '.join(accepted)}): the layer raises ValueError when it is "
                "built", VLLM_MOE_SOURCES[scheme])

    def unchecked(self, op: str, schemes: Sequence[str]) -> List[str]:
        from selector.engines.vllm_flags import VLLM_MOE_ACCEPTS
        return [f"{s}: selector has no table of what vLLM's {s} MoE oracle accepts; check "
                "--moe-backend against it yourself" for s in dict.fromkeys(schemes)
                if op == "moe" and s not in VLLM_MOE_ACCEPTS]

    def kernels(self, op: str, scheme: str, name: Optional[str]) -> Tuple[str, ...]:
        from selector.engines.vllm_flags import vllm_kernels
        return vllm_kernels(op, scheme, name)

    def linear(self, names: Mapping[str, str], others: Sequence[str], notes: List[str]
               ) -> Optional[Tuple[List[str], str]]:
        """Several linear schemes, or quantized layers selector does not plan: vLLM's
        `--kernel-config {"linear_backend_per_quant": ...}` scopes each backend to its key."""
        import json

        from selector.engines.vllm_flags import VLLM_LINEAR_QUANT
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
        from selector.checkpoint.launch import _schemes_text, _with_policy
        from selector.checkpoint.launch_plan import Option
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
        name = d.engine.backend if d.engine is not None else None
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


# the adapter's face: what vLLM's side of selector offers (the choice's parts live in
# selector/engines/vllm_choice.py)
__all__ = ["register", "install", "uninstall", "installed", "iter_rebound", "VllmLauncher",
           "select_moe", "select_fp8_moe", "select_mxfp8_moe", "select_mxfp4_moe", "select_linear",
           "fp8_moe_switches", "linear_backend_hook", "ENV_ENABLE", "ENV_OVERRIDES", "MOE_ORACLE",
           "FP8_MOE_ORACLE", "MXFP8_MOE_ORACLE", "MXFP4_MOE_ORACLE", "LINEAR_KERNELS", "CHOOSER",
           "Chooser", "NotExpressible", "refusal", "act_scale", "capability", "linear_layer",
           "linear_sizes", "moe_activation", "moe_config", "moe_layer", "moe_quant", "over_range",
           "quant_keys", "quant_scheme", "requested_name", "requested_names", "routing",
           "token_buckets", "vllm_modules", "OUTSIDE_PICK_LOG"]
