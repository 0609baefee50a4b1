"""Engine drift: the installed vLLM's own selection functions against selector, on this machine.

`doctor --deep` runs this when `vllm` is importable (importlib.util.find_spec). A child process
(selector.inspect.child_runner: third-party code contained, time-limited) imports vLLM, builds
vLLM's inputs for a few standard layers with the plugin's own code (selector.engines.vllm:
moe_config, quant_keys, moe_layer, linear_layer) and asks vLLM's oracles, unpatched, on the
machine's real device: select_nvfp4_moe_backend, select_fp8_moe_backend, init_nvfp4_linear_kernel.
The parent asks selector about the same layers (engine=vllm, the detected platform) and
`compare` makes one drift item per layer: `agrees` when both pick the same kernel class (or
both refuse), else `drift` naming the layer, vLLM's answer and selector's.

vLLM's oracles read the CUDA platform: on a machine without one (vLLM's CPU build, or a CUDA
build with no GPU) they are still asked, and the report says their answers are the CPU
platform's, which selector does not model: those differences are `explained`, not drift.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.inspect.drift import DriftItem

MARK = "@@selector-engine@@ "
CHILD = "selector.engines.vllm_drift:child"
TIMEOUT = 120.0  # importing vLLM takes 10-30 s on a loaded machine

# name -> (oracle, selector layer keys). MoE layers are turned into vLLM's FusedMoEConfig.
LAYERS: Tuple[Tuple[str, str, Dict[str, Any]], ...] = (
    ("NVFP4 MoE, SiLU, bf16", "nvfp4_moe",
     {"op": "moe", "quant": "nvfp4", "activation": "silu", "act_and_mul": True}),
    ("FP8 block MoE, SiLU, bf16", "fp8_moe",
     {"op": "moe", "quant": "fp8_block", "activation": "silu", "act_and_mul": True}),
    ("NVFP4 linear (W4A4)", "nvfp4_linear", {"op": "linear", "quant": "nvfp4"}),
    ("NVFP4 linear (W4A16)", "nvfp4_linear", {"op": "linear", "quant": "nvfp4_w4a16"}),
)
NO_GPU_SOURCE = ("vLLM's oracles read current_platform; on a CPU platform they answer for "
                 "vLLM's CPU kernels, which selector's catalogue (NVIDIA GPUs) does not describe")


@dataclass
class EngineDrift:
    """What the check found: its items, and one line saying how it ran (or why it did not)."""
    status: str  # "compared", "skipped", "failed"
    message: str
    items: List[DriftItem] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"status": self.status, "message": self.message,
                "items": [i.to_dict() for i in self.items]}


def vllm_importable() -> bool:
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None


# -- the child -----------------------------------------------------------------------------------
def _vllm_answer(oracle: str, layer: Dict[str, Any]) -> Dict[str, Any]:
    """vLLM's own answer for one standard layer: {layer (selector's keys as the plugin describes
    vLLM's inputs), requested, exclude, backend, kernel, error}."""
    from selector.engines import vllm as adapter
    out: Dict[str, Any] = {"layer": dict(layer), "requested": "auto", "exclude": []}
    try:
        if oracle == "nvfp4_linear":
            from vllm.model_executor.kernels import linear
            use_a16 = layer["quant"] == "nvfp4_w4a16"
            out["layer"] = adapter.linear_layer(use_a16)
            kernel = linear.init_nvfp4_linear_kernel(use_a16=use_a16)
            out["backend"] = next((n for n, cs in linear._LINEAR_BACKEND_KERNEL_MAP.items()
                                   if type(kernel) in cs), type(kernel).__name__)
            out["kernel"] = type(kernel).__name__
            return out
        from vllm.model_executor.layers.fused_moe.oracle import fp8, nvfp4
        config = adapter.moe_config(layer)
        keys = adapter.quant_keys(layer["quant"])
        out["layer"] = adapter.moe_layer(config, *keys)
        if oracle == "fp8_moe":  # as the fp8 and modelopt quant methods call it
            requested, exclude = adapter.fp8_moe_switches("auto", False)
            out.update(requested=requested, exclude=list(exclude))
            backend, experts = fp8.select_fp8_moe_backend(config, *keys, allow_vllm_cutlass=False)
        else:
            backend, experts = nvfp4.select_nvfp4_moe_backend(config, *keys)
        out["backend"] = str(getattr(backend, "value", backend))
        out["kernel"] = None if experts is None else getattr(experts, "__name__", str(experts))
    except Exception as exc:  # noqa: BLE001 - vLLM's refusal (or failure) is its answer
        from selector.inspect.probe_child import describe_exc
        out["error"] = describe_exc(exc, hint=False)
    return out


def child() -> None:
    """The child's body: the platform vLLM sees, then one event per standard layer."""
    from selector.inspect.probe_child import close_channel, describe_exc, emit, open_channel
    out, spec = open_channel(MARK)
    try:
        import vllm
        from vllm.platforms import current_platform
        cap = current_platform.get_device_capability() if current_platform.is_cuda() else None
        emit(out, MARK, event="platform", version=getattr(vllm, "__version__", None),
             platform=type(current_platform).__name__, cuda=bool(current_platform.is_cuda()),
             capability=None if cap is None else f"{cap.major}.{cap.minor}")
    except BaseException as exc:  # noqa: BLE001 - reported, never raised into the parent
        emit(out, MARK, event="error", message=describe_exc(exc))
        close_channel(out, MARK)
    for name, oracle, layer in spec.get("layers", ()):
        emit(out, MARK, event="answer", name=name, oracle=oracle, **_vllm_answer(oracle, layer))
    close_channel(out, MARK)


# -- the parent ----------------------------------------------------------------------------------
def ask_vllm(timeout: float = TIMEOUT) -> Tuple[Dict[str, Any], List[Dict[str, Any]], str]:
    """(platform event, answer events, why it failed or "") from one child."""
    import os

    from selector.inspect import child_runner
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    module, _, fn = CHILD.partition(":")
    boot = f"import sys; sys.path.insert(0, {root!r}); from {module} import {fn}; {fn}()"
    events, rc, timed_out, err = child_runner.run_child(
        boot, {"layers": [list(x) for x in LAYERS]}, timeout, MARK)
    platform = next((e for e in events if e.get("event") == "platform"), {})
    answers = [e for e in events if e.get("event") == "answer"]
    error = next((e.get("message", "") for e in events if e.get("event") == "error"), "")
    done = any(e.get("event") == "done" for e in events)
    if not error and not done:
        error = child_runner.exit_text(rc, timed_out, timeout, "vLLM oracle")
        tail = child_runner.last_line(err)
        error += f": {tail}" if tail else ""
    return platform, answers, error


def _selector_answer(sel: Any, answer: Mapping[str, Any]) -> Tuple[Optional[str], Optional[str], str]:
    """selector's (backend, kernel class vLLM runs for it, refusal summary) for the answer's
    layer, with vLLM's automatic request and its switches as policy (the plugin's way)."""
    from selector.engines.vllm import Chooser
    layer = dict(answer["layer"])
    s = Chooser._with_policy(sel, layer["op"], str(answer.get("requested") or "auto"),
                             layer.get("quant"), tuple(answer.get("exclude") or ()))
    d = s.select(**layer)
    kernel = d.engine.kernel if d.selected is not None and d.engine else None
    return d.selected, kernel, "" if d.selected is not None else d.summary()


def _describe(backend: Optional[str], kernel: Optional[str], error: str, refused: bool) -> str:
    if refused:
        return f"refuses ({error})" if error else "refuses"
    return f"{backend} ({kernel})" if kernel and kernel != backend else str(backend)


def compare(platform: Mapping[str, Any], answers: Sequence[Mapping[str, Any]],
            ours: Mapping[str, Tuple[Optional[str], Optional[str], str]]) -> List[DriftItem]:
    """One item per standard layer: vLLM's answer against selector's (`ours`: layer name ->
    (backend, kernel, refusal)). Same kernel class, or both refusing, agrees."""
    items = []
    version = platform.get("version") or "?"
    gpu = bool(platform.get("cuda"))
    for a in answers:
        name = str(a.get("name"))
        sb, sk, swhy = ours.get(name, (None, None, "not asked"))
        vk, vb = a.get("kernel"), a.get("backend")
        verror = str(a.get("error") or "") or (f"vLLM returned {vb}" if vb else "")
        same = vk == sk if vk is not None and sb is not None else vk is None and sb is None
        status = "agrees" if same else "drift" if gpu else "explained"
        detail = (f"vLLM {version}'s own oracle ({a.get('oracle')}) on "
                  f"{platform.get('platform') or 'its platform'}"
                  + ("" if gpu else f"; {NO_GPU_SOURCE}"))
        items.append(DriftItem(f"vllm/{name}", "automatic choice",
                               _describe(vb, vk, verror, vk is None), status, detail,
                               _describe(sb, sk, swhy, sb is None)))
    return items


def check(overrides: Sequence[str] = (), config_dirs: Sequence[Any] = (),
          timeout: Optional[float] = None) -> EngineDrift:
    """The whole check, for doctor --deep. Never raises: a failure is the result's message."""
    if not vllm_importable():
        return EngineDrift("skipped", "vllm is not importable: no engine to compare with")
    try:
        platform, answers, error = ask_vllm(TIMEOUT if timeout is None else max(timeout, TIMEOUT))
        if error:
            return EngineDrift("failed", f"asking vLLM's oracles failed: {error}")
        import selector
        sel = selector.load(list(overrides) + ["engine=vllm"], config_dirs=list(config_dirs))
        ours = {str(a.get("name")): _selector_answer(sel, a) for a in answers}
    except Exception as exc:  # noqa: BLE001 - no traceback reaches the user
        from selector.inspect.probe_child import describe_exc
        return EngineDrift("failed", f"engine drift check failed: {describe_exc(exc)}")
    items = compare(platform, answers, ours)
    where = (f"SM {platform.get('capability')}" if platform.get("cuda") else
             f"{platform.get('platform')}: no CUDA platform, so vLLM's oracles answered for "
             "its CPU kernels (differences are not drift)")
    return EngineDrift("compared", f"vLLM {platform.get('version')}'s own oracles asked about "
                       f"{len(items)} standard layers on {where}", items)
