"""Shadow mode of selector's vLLM plugin: `SELECTOR_VLLM=observe`.

vLLM decides every layer itself, exactly as without the plugin: each of its selection functions
that the plugin would route through selector (the NVFP4, FP8, MXFP8 and MXFP4 MoE oracles and
the NVFP4 linear kernel initializer) is wrapped so that it first runs unchanged; its answer (the
backend and the kernel class vLLM built, or the error it raised) is then put beside the decision
selector would have made for the same layer (the plugin's Chooser, with vLLM's own request and
switches as the policy, as with SELECTOR_VLLM=1), and one line per layer goes to vLLM's log:

    selector: observe: moe nvfp4 #1: vLLM EMULATION (Nvfp4QuantizationEmulationTritonExperts);
        selector emulation: agree | selector: moe quant=nvfp4 ... -> emulation [selected] (...)

(one line in the log; wrapped here)

When vLLM's model loader returns (or fails), one summary line follows,

    selector: 4 layers, 2 agree, 2 differ: moe fp8_block x2: vLLM none, selector triton

and, when SELECTOR_VLLM_OBSERVE_JSON names a file, the same as JSON in it (docs/schemas/
observe.schema.json). Nothing selector computes reaches vLLM: a failure of selector's own is
logged and counted, never raised.
"""
from __future__ import annotations

import json
import logging
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from selector.core import env_vars
from selector.engines import vllm as plugin

log = logging.getLogger("vllm.selector")

MODE = "observe"
ENV_JSON = env_vars.VLLM_OBSERVE_JSON
LOADER = "vllm.model_executor.model_loader.base_loader"


def requested() -> bool:
    """SELECTOR_VLLM=observe (any case, surrounding space ignored)."""
    return env_vars.vllm_mode() == MODE


class Observer:
    """Every observed layer, in vLLM's order; thread-safe."""

    def __init__(self, chooser: Optional[plugin.Chooser] = None):
        self.chooser = chooser or QuietChooser()
        self.layers: List[Dict[str, Any]] = []
        self._lock = threading.Lock()
        self._depth = 0

    # -- one layer --------------------------------------------------------------------------------
    def record(self, op: str, what: str, layer: Optional[Dict[str, Any]],
               decide: Callable[[], Any], engine: Dict[str, Any], note: str = ""
               ) -> Dict[str, Any]:
        """Put vLLM's answer `engine` ({backend, kernel, error}) beside selector's decision for
        `layer` (None: selector cannot describe it) and log the line."""
        entry: Dict[str, Any] = {"op": op, "quant": (layer or {}).get("quant"), "what": what,
                                 "vllm": engine}
        if note:
            entry["note"] = note
        try:
            d = decide() if layer is not None else None
        except plugin.NotExpressible as exc:
            d, entry["note"] = None, f"selector cannot describe this layer: {exc}"
        except Exception as exc:  # noqa: BLE001 - observing must never change vLLM's run
            d, entry["note"] = None, f"selector failed: {type(exc).__name__}: {exc}"
        if d is None:
            entry["selector"] = None
            entry["verdict"] = "not_decided"
        else:
            mine = d.engine.backend if d.selected and d.engine else None
            entry["selector"] = {"backend": d.selected, "engine_backend": mine,
                                 "outcome": d.outcome, "reason": d.log_line()}
            theirs = engine.get("backend")
            entry["verdict"] = "agree" if (theirs or None) == (mine or None) else "differ"
        with self._lock:
            entry["index"] = sum(1 for e in self.layers if e["op"] == op
                                 and e["quant"] == entry["quant"]) + 1
            self.layers.append(entry)
        log.info("%s", line(entry))
        return entry

    # -- the summary ------------------------------------------------------------------------------
    def report(self) -> Dict[str, Any]:
        with self._lock:
            layers = list(self.layers)
        counts = {v: sum(e["verdict"] == v for e in layers)
                  for v in ("agree", "differ", "not_decided")}
        groups: Dict[Tuple[Any, ...], int] = {}
        for e in layers:
            if e["verdict"] == "differ":
                key = (e["op"], e["quant"], _theirs(e), _mine(e))
                groups[key] = groups.get(key, 0) + 1
        differ = [{"op": op, "quant": q, "layers": n, "vllm": t, "selector": m}
                  for (op, q, t, m), n in groups.items()]
        return {"mode": MODE, "layers": len(layers), "counts": counts, "differ": differ,
                "entries": layers, "summary": summary_line(len(layers), counts, differ)}

    def finish(self) -> None:
        """The summary line, and the JSON file when SELECTOR_VLLM_OBSERVE_JSON names one."""
        rep = self.report()
        log.info("%s", rep["summary"])
        path = env_vars.observe_json()  # checked when the plugin registered
        if path:
            try:
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(rep, f, indent=2)
                    f.write("\n")
            except OSError as exc:
                log.warning("selector: observe: cannot write %s=%s: %s", ENV_JSON, path,
                            exc.strerror or exc)


def _theirs(e: Dict[str, Any]) -> str:
    v = e["vllm"]
    if v.get("error"):
        return f"none ({v['error']})"
    return v.get("backend") or v.get("kernel") or "none"


def _mine(e: Dict[str, Any]) -> str:
    s = e["selector"]
    if s is None:
        return "not decided"
    return s["engine_backend"] or f"none ({s['outcome']})"


def line(e: Dict[str, Any]) -> str:
    v = e["vllm"]
    kernel = f" ({v['kernel']})" if v.get("kernel") else ""
    error = f" ({v['error']})" if v.get("error") else ""
    theirs = (v.get("value") or v.get("backend") or "none") + kernel + error
    head = f"selector: observe: {e['op']} {e['quant'] or e['what']} #{e['index']}: vLLM {theirs}"
    if e["selector"] is None:
        return f"{head}; selector: {e.get('note', 'not decided')}"
    return f"{head}; selector {_mine(e)}: {e['verdict']} | {e['selector']['reason']}"


def summary_line(n: int, counts: Dict[str, int], differ: List[Dict[str, Any]]) -> str:
    text = f"selector: {n} layers, {counts['agree']} agree, {counts['differ']} differ"
    if counts["not_decided"]:
        text += f", {counts['not_decided']} not decided by selector"
    if differ:
        text += ": " + "; ".join(f"{g['op']} {g['quant']} x{g['layers']}: vLLM {g['vllm']}, "
                                 f"selector {g['selector']}" for g in differ)
    return text


class QuietChooser(plugin.Chooser):
    """The plugin's Chooser without its per-decision log line (the observe line says it)."""

    def decide(self, layer: Dict[str, Any], requested: str,
               exclude: Tuple[str, ...] = ()) -> Any:
        return self.selector_for(layer, requested, exclude)[1].select(**layer)


OBSERVER = Observer()


# -- the wrapped vLLM functions -------------------------------------------------------------------
def _run(original: Callable[..., Any], *args: Any, **kwargs: Any
         ) -> Tuple[Any, Optional[BaseException]]:
    try:
        return original(*args, **kwargs), None
    except Exception as exc:  # noqa: BLE001 - re-raised by the caller, after recording
        return None, exc


def _moe_answer(result: Any, error: Optional[BaseException]) -> Dict[str, Any]:
    from selector.engines.vllm_flags import vllm_name
    if error is not None:
        return {"backend": None, "value": None, "kernel": None,
                "error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    backend, experts = result
    value = getattr(backend, "value", str(backend))
    return {"backend": vllm_name(str(value)) or None, "value": str(value),
            "kernel": getattr(experts, "__name__", None), "error": None}


def _observe_moe(what: str, original: Callable[..., Any], config: Any,
                 keys: Callable[[], Tuple[Any, Any]], call: Tuple[Any, ...],
                 kwargs: Dict[str, Any], switches: Optional[Callable[[str], Any]] = None,
                 observer: Optional[Observer] = None) -> Any:
    obs = observer or OBSERVER
    result, error = _run(original, config, *call, **kwargs)
    try:
        layer: Optional[Dict[str, Any]] = plugin.moe_layer(config, *keys())
    except plugin.NotExpressible as exc:
        layer, note = None, f"selector cannot describe this layer: {exc}"
    except Exception as exc:  # noqa: BLE001 - vLLM's objects: whatever they lack, vLLM goes on
        layer, note = None, f"selector cannot read this layer: {type(exc).__name__}: {exc}"
    else:
        note = ""

    def decide() -> Any:
        assert layer is not None
        requested, exclude = (switches(config.moe_backend) if switches else
                              (config.moe_backend, ()))
        return obs.chooser.decide(layer, requested, exclude)
    obs.record("moe", what, layer, decide, _moe_answer(result, error), note)
    if error is not None:
        raise error
    return result


def observe_nvfp4(original: Callable[..., Any], config: Any, weight_key: Any,
                  activation_key: Any, *args: Any, **kwargs: Any) -> Any:
    return _observe_moe("nvfp4", original, config, lambda: (weight_key, activation_key),
                        (weight_key, activation_key) + args, kwargs)


def observe_fp8(original: Callable[..., Any], config: Any, weight_key: Any, activation_key: Any,
                *args: Any, **kwargs: Any) -> Any:
    allow = bool(kwargs.get("allow_vllm_cutlass", args[0] if args else False))
    return _observe_moe("fp8", original, config, lambda: (weight_key, activation_key),
                        (weight_key, activation_key) + args, kwargs,
                        lambda req: plugin.fp8_moe_switches(req, allow))


def observe_mxfp8(original: Callable[..., Any], config: Any, *args: Any, **kwargs: Any) -> Any:
    from vllm.model_executor.layers.quantization.utils import quant_utils as q
    return _observe_moe("mxfp8", original, config, lambda: (q.kMxfp8Static, q.kMxfp8Dynamic),
                        args, kwargs)


def observe_mxfp4(original: Callable[..., Any], config: Any, activation_key: Any = None,
                  *args: Any, **kwargs: Any) -> Any:
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    def keys() -> Tuple[Any, Any]:
        return q.kMxfp4Static, mxfp4._resolve_activation_key(activation_key)
    return _observe_moe("mxfp4", original, config, keys, (activation_key,) + args, kwargs)


def observe_linear(original: Callable[..., Any], use_a16: bool = False, *args: Any,
                   observer: Optional[Observer] = None, **kwargs: Any) -> Any:
    obs = observer or OBSERVER
    mod: Any = sys.modules[plugin.LINEAR_KERNELS]  # vLLM's private names: untyped
    kernel, error = _run(original, use_a16, *args, **kwargs)
    if error is not None:
        answer: Dict[str, Any] = {"backend": None, "value": None, "kernel": None,
                                  "error": f"{type(error).__name__}: "
                                           f"{str(error).splitlines()[0][:200]}"}
    else:
        cls = type(kernel)
        names = [n for n, classes in mod._LINEAR_BACKEND_KERNEL_MAP.items() if cls in classes]
        answer = {"backend": names[0] if names else None, "value": None,
                  "kernel": cls.__name__, "error": None}
    layer = plugin.linear_layer(use_a16)

    def decide() -> Any:
        requested = mod._get_linear_backend(quantization="nvfp4_w4a16" if use_a16
                                            else "nvfp4_w4a4")
        return obs.chooser.decide(layer, requested)
    obs.record("linear", layer["quant"], layer, decide, answer)
    if error is not None:
        raise error
    return kernel


def loader_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    """BaseModelLoader.load_model, followed (also when it fails) by the summary."""
    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        OBSERVER._depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            OBSERVER._depth -= 1
            if OBSERVER._depth == 0:
                OBSERVER.finish()
    setattr(load_model, "__selector_original__", original)  # noqa: B010 - uninstall reads it
    load_model.__name__ = original.__name__
    load_model.__doc__ = original.__doc__
    return load_model


def installed() -> bool:
    mod = sys.modules.get(plugin.MOE_ORACLE)
    return mod is not None and getattr(mod.select_nvfp4_moe_backend, "__selector_observe__",
                                       False)


def install() -> None:
    """Wrap vLLM's selection functions to observe them (idempotent)."""
    import importlib
    if installed():
        return
    targets = ((plugin.MOE_ORACLE, "select_nvfp4_moe_backend", observe_nvfp4),
               (plugin.FP8_MOE_ORACLE, "select_fp8_moe_backend", observe_fp8),
               (plugin.MXFP8_MOE_ORACLE, "select_mxfp8_moe_backend", observe_mxfp8),
               (plugin.MXFP4_MOE_ORACLE, "select_mxfp4_moe_backend", observe_mxfp4),
               (plugin.LINEAR_KERNELS, "init_nvfp4_linear_kernel", observe_linear))
    for module, name, body in targets:
        mod: Any = importlib.import_module(module)
        original = getattr(mod, name)
        wrapped: Any = plugin._wrap(original, body)
        wrapped.__selector_observe__ = True
        plugin._rebind(original, wrapped)
    loader: Any = importlib.import_module(LOADER)
    base = loader.BaseModelLoader
    base.load_model = loader_hook(base.load_model)


def uninstall() -> None:
    """Undo install() (tests)."""
    if not installed():
        return
    for module, name in ((plugin.MOE_ORACLE, "select_nvfp4_moe_backend"),
                         (plugin.FP8_MOE_ORACLE, "select_fp8_moe_backend"),
                         (plugin.MXFP8_MOE_ORACLE, "select_mxfp8_moe_backend"),
                         (plugin.MXFP4_MOE_ORACLE, "select_mxfp4_moe_backend"),
                         (plugin.LINEAR_KERNELS, "init_nvfp4_linear_kernel")):
        fn = getattr(sys.modules[module], name)
        plugin._rebind(fn, fn.__selector_original__)
    base = sys.modules[LOADER].BaseModelLoader
    base.load_model = base.load_model.__selector_original__


def register() -> None:
    """Called by the plugin's register() when SELECTOR_VLLM=observe."""
    from selector.core.env_vars import observe_json, words
    words(plugin.ENV_OVERRIDES)  # an unbalanced quote is refused before vLLM loads a layer
    observe_json()  # so is a report path with a control character
    install()
    log.info("selector: observing vLLM's NVFP4 MoE and linear, FP8, MXFP8 and MXFP4 MoE "
             "choices (%s=%s): vLLM decides; selector's choice is logged beside it",
             plugin.ENV_ENABLE, MODE)
