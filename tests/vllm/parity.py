"""vLLM's untouched choice against selector's (engine=vllm), over the simulated sweep.

Every difference is explained by the catalogue or it is not: vLLM picked a backend selector
rejects (its failed rules, with sources), a backend outside selector's catalogue (the engine
config's `outside` list, with sources), one selector ranks below its choice (the weight-only
rule), or an explicit backend that does not implement the layer, which selector hands to
automatic selection (CONTRACT). Anything else is unexplained.
"""
from __future__ import annotations

import contextlib
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterator, List, Optional, Tuple

import sim

from selector.engines import vllm as adapter

WEIGHT_ONLY_SOURCE = "vLLM #55397 (fixed by #55170)"
FALLBACK_SOURCE = ("vLLM 0.32.0 kernels/linear/__init__.py (_resolve_backend_kernels, "
                   "_filter_kernels_by_backend: a --linear-backend with no kernel for the layer "
                   "falls back to the unfiltered kernel list; init_nvfp4_linear_kernel's "
                   "automatic W4A16 path forces Marlin outside SM 10.0/10.3)")
POLICY_SOURCE = "vLLM #49076, #56832 (a global backend flag must not crash other layers)"
MX = "vLLM 0.32.0 fused_moe/oracle/mxfp4.py"
BF16_FALLBACK_SOURCE = (f"{MX} (_filter_by_activation: backends matching the requested "
                        "activation key first, then the BF16 variants 'as a higher-precision "
                        "fallback'; _warn_on_bf16_fallback)")
FP8_ACT_SOURCE = (f"{MX} (_backend_activation_key(DEEPGEMM_MXFP4) = kFp8Dynamic128Sym); "
                  "fused_moe/experts/deep_gemm_moe.py (DeepGemmFP4Experts._supports_quant_scheme)")
NO_MXFP4_NAME_SOURCE = (f"{MX} (map_mxfp4_backend has no --moe-backend value for "
                        "CUTLASS_MXFP4_MXFP4: vLLM runs it only from its automatic list)")
NO_MXFP8_NAME_SOURCE = ("vLLM 0.32.0 fused_moe/oracle/mxfp8.py lines 20-42 (_SUPPORTED_BACKENDS "
                        "ends with EMULATION, which _BACKEND_NAME_MAP does not name: vLLM runs "
                        "Mxfp8EmulationTritonExperts only from its automatic list)")
DSV4_SOURCE = (f"{MX} (select_deepseek_v4_mxfp4_moe_backend walks _get_priority_backends: "
               "FLASHINFER_TRTLLM_MXFP4_MXFP8, DEEPGEMM_MXFP4, MARLIN, BATCHED_MARLIN, HUMMING "
               "only)")
DSV4_LIST = ("flashinfer_trtllm", "deep_gemm", "marlin")
VENDORED_SOURCE = ("vLLM 0.32.0 utils/import_utils.py (has_triton_kernels, has_deep_gemm: the "
                   "module or vLLM's vendored copy, vllm.third_party.*; VLLM_USE_DEEP_GEMM=0 "
                   "turns DeepGEMM off); setup.py copies both into CUDA wheels")
FORCE_A16_SOURCE = (f"{MX} (_get_requested_backends: envs.VLLM_B12X_MOE_FP4_FORCE_A16 keeps "
                    "b12x on B12X_MXFP4_BF16)")
# a vLLM --moe-backend alias that names the activation precision: selector's layer.quant says it
AFP8 = {"flashinfer_trtllm_afp8": "flashinfer_trtllm",
        "flashinfer_cutlass_afp8": "flashinfer_cutlass"}


@dataclass
class Row:
    scenario: sim.Scenario
    vllm: Optional[str]  # vLLM's backend (its name) or None when vLLM raised
    vllm_error: str
    decision: Any
    vllm_kernel: Optional[str] = None  # the kernel class vLLM built
    vllm_auto: Optional[Tuple[Optional[str], Optional[str]]] = None  # vLLM with auto: backend, kernel
    why: Optional[Tuple[str, Tuple[Tuple[str, str], ...]]] = None  # (cluster text, reasons)
    # MXFP4: the activation precision of vLLM's pick as selector's scheme (its backend enum's
    # _BF16/_MXFP8/_MXFP4 suffix; FP8_ACT for DeepGEMM's FP8 1x128 activations); None: not compared
    vllm_quant: Optional[str] = None
    selector_mxfp4: Optional[Tuple[Optional[str], Optional[str]]] = None  # asked about mxfp4
    mxfp4_decision: Any = None  # selector's decision asked about mxfp4
    generic: Optional[str] = None  # an explanation refused: it names generic rules only

    @property
    def selected(self) -> Optional[str]:
        return self.decision.selected

    @property
    def kernel(self) -> Optional[str]:
        """The kernel selector says vLLM runs for its choice."""
        view = self.decision.engine
        return view.kernel if view else None

    @property
    def scheme(self) -> Optional[str]:
        view = self.decision.engine
        return view.scheme if view else None

    @property
    def agrees(self) -> bool:
        """Same backend and the same kernel (and for MXFP4 the same activation precision), or
        both refuse."""
        return self.vllm == self.selected and self.vllm_kernel == self.kernel and \
            (self.vllm_quant is None or self.vllm is None or self.vllm_quant == self.scheme)


NOT_EXPRESSIBLE_SOURCE = ("selector engines/vllm.py (quant_scheme, moe_layer: a layer no "
                          "selector scheme describes is NotExpressible and vLLM decides it alone)")


class Undescribed:
    """selector's answer for a layer its vocabulary does not describe (vLLM's QuantKeys of the
    scenario's quant method name no scheme): none; the plugin leaves the layer to vLLM."""
    selected = None
    engine = None
    candidates = ()
    warnings = ()

    def __init__(self, s: sim.Scenario, exc: Exception):
        import methods
        src = methods.source(s) if s.method else ""
        at = methods.line(s) if s.method else ""  # the installed vLLM's line that derives them
        self.why = (f"selector's vocabulary does not describe this layer ({exc}): the plugin "
                    "leaves it to vLLM", tuple(("engine", x) for x in (src, NOT_EXPRESSIBLE_SOURCE)
                                               if x) + (((LINE, at),) if at else ()))


@dataclass
class Report:
    rows: List[Row] = field(default_factory=list)

    @property
    def differ(self) -> List[Row]:
        return [r for r in self.rows if not r.agrees]

    @property
    def unexplained(self) -> List[Row]:
        return [r for r in self.differ if r.why is None]

    def clusters(self) -> OrderedDict[Tuple, List[Row]]:
        out: OrderedDict[Tuple, List[Row]] = OrderedDict()
        for r in self.differ:
            mine = "not described" if isinstance(r.decision, Undescribed) else "refusal"
            key = (r.vllm or "error", r.selected or mine,
                   keyed(r.why) if r.why is not None else ("UNEXPLAINED", ()))
            out.setdefault(key, []).append(r)
        return out


def keyed(why: Tuple[str, Tuple]) -> Tuple[str, Tuple]:
    """An explanation without its LINE pairs: the cluster's key (each member names its line)."""
    return why[0], tuple(p for p in why[1] if p[0] != LINE)


def lines_of(members: List[Row]) -> List[str]:
    """The engine lines a cluster's members name, each once, in order."""
    return list(dict.fromkeys(src for m in members for rule, src in (m.why or ("", ()))[1]
                              if rule == LINE))


# -- vLLM untouched ----------------------------------------------------------------------------
_MOE_NAMES = {"VLLM_CUTLASS": "cutlass", "FLASHINFER_CUTEDSL_BATCHED": "flashinfer_cutedsl",
              "BATCHED_VLLM_CUTLASS": "cutlass", "BATCHED_TRITON": "triton",
              "DEEPGEMM": "deep_gemm", "BATCHED_DEEPGEMM": "deep_gemm"}
FP8_SCHEMES = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
DEEP_GEMM_ENV_SOURCE = ("vLLM 0.32.0 fused_moe/oracle/fp8.py (select_fp8_moe_backend: "
                        "VLLM_MOE_USE_DEEP_GEMM=0 removes DEEPGEMM from the automatic list, =1 "
                        "returns DEEPGEMM or raises); selector: policy.exclude=[deep_gemm], "
                        "policy.moe_backend=deep_gemm")


# -- the engine's deciding line ------------------------------------------------------------------
#: an explanation's pair that names a line of the installed vLLM (its rule is LINE): where vLLM
#: raised, the kernel class it built, the order it tried; a cluster lists every such line of its
#: members (they are not part of its key: one explanation, each scenario's own line)
LINE = "line"


def _vllm_file(path: str) -> str:
    return path.replace("\\", "/").split("site-packages/vllm/", 1)[-1]


def vllm_line(path: Optional[str], line: int, what: str, last: int = 0) -> str:
    """A line (or lines line-last) of the installed vLLM's file `path`, and what it does."""
    import vllm
    at = f"lines {line}-{last}" if last > line else f"line {line}"
    return f"vLLM {vllm.__version__} {_vllm_file(path or '?')} {at} ({what})"


def vllm_def(module: str, qualname: str, what: str, needle: str = "", span: bool = False) -> str:
    """The line of the installed vLLM's `module` that decides: the first line of `qualname`'s
    body (a function, or Class.method) holding `needle`, else the line that defines it (with
    `span`, through its last line); read from the module's file, not from the object, since the
    simulation patches some of vLLM's functions. '' where the module or the name is absent (an
    explanation without its line then explains nothing: specific())."""
    import importlib.util
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return ""
    lines = open(spec.origin).read().splitlines()
    start, indent = 0, -1
    for part in qualname.split("."):
        pat = re.compile(rf"^(\s*)(?:async\s+)?(?:def|class)\s+{re.escape(part)}\b")
        for i in range(start, len(lines)):
            m = pat.match(lines[i])
            if m and len(m[1]) > indent:
                start, indent = i, len(m[1])
                break
        else:
            return ""

    def _indent(x: str) -> int:
        return len(x) - len(x.lstrip())

    end = next((j for j in range(start + 1, len(lines)) if lines[j].strip() and
                _indent(lines[j]) <= indent and not lines[j].lstrip().startswith(")")),
               len(lines))
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    at = next((i for i in range(start, end) if needle and needle in lines[i]), None)
    if at is not None:
        return vllm_line(spec.origin, at + 1, what)
    return vllm_line(spec.origin, start + 1, what, last=end if span else 0)


class Refusal(str):
    """vLLM's error's first line, with `site`: the line of vLLM that raised it."""
    site: str = ""

    @classmethod
    def at(cls, text: str, fn: Any, what: str) -> Refusal:
        import inspect
        r = cls(text)
        r.site = vllm_line(inspect.getsourcefile(fn), inspect.getsourcelines(fn)[1], what)
        return r


def refusal(exc: BaseException) -> Refusal:
    """vLLM's error as a Refusal: the innermost frame of vLLM's own code that raised it."""
    r = Refusal(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    tb, frame = exc.__traceback__, None
    while tb is not None:
        if "site-packages/vllm/" in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            frame = tb
        tb = tb.tb_next
    if frame is not None:
        r.site = _rejecting_check(frame.tb_frame.f_locals.get("rejected")) or \
            vllm_line(frame.tb_frame.f_code.co_filename, frame.tb_lineno,
                      f"{frame.tb_frame.f_code.co_name} raises")
    return r


# vLLM's FusedMoEExperts.is_supported_config: the reason it words -> the check that refused
_CHECKS = (("current device", "_supports_current_device"),
           ("no act_and_mul", "_supports_no_act_and_mul"),
           ("activation format", "activation_format"),
           ("quantization scheme", "_supports_quant_scheme"),
           ("parallel", "_supports_parallel_config"),
           ("hash routing", "_supports_hash_routing"),
           ("routing method", "_supports_routing_method"),
           ("router logits", "_supports_router_logits_dtype"),
           ("shape", "_supports_shape"), ("hidden", "_supports_shape"),
           ("batch invariance", "_supports_batch_invariance"),
           ("activation", "_supports_activation"))


def _rejecting_check(rejected: Any) -> str:
    """Where an oracle's return_or_raise raised (vLLM's fused_moe/oracle/base.py): the line of the
    kernel class's own check that refused (`rejected`: its (kernel class, reason) list, the last
    the one it reports), e.g. CutlassExpertsFp4._supports_current_device for SM 11.0 on 0.34."""
    import inspect
    if not rejected:
        return ""
    cls, reason = rejected[-1]
    name = next((m for words, m in _CHECKS if words in (reason or "")), None)
    fn = getattr(cls, name, None) if name else None
    if fn is None or not callable(fn):
        return ""
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    try:
        path, (src, start) = inspect.getsourcefile(fn), inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return ""
    first = start + next((i for i, x in enumerate(src) if x.lstrip().startswith("def ")), 0)
    return vllm_line(path, first, f"{fn.__qualname__} refuses {cls.__name__}: {reason}",
                     last=start + len(src) - 1)


#: kernel class name -> the line of vLLM that defines it (filled as vLLM builds them)
KERNELS: Dict[str, str] = {}


def built(cls: Any) -> str:
    """The name of a kernel class vLLM built, its defining line recorded in KERNELS."""
    import inspect
    if cls.__name__ not in KERNELS:
        try:
            path, line = inspect.getsourcefile(cls), inspect.getsourcelines(cls)[1]
        except (OSError, TypeError):
            path, line = None, 0
        if path is not None:
            KERNELS[cls.__name__] = vllm_line(path, line, f"class {cls.__name__}, which vLLM "
                                              "builds for this layer")
    return cls.__name__


def vllm_moe(s: sim.Scenario, select: Any) -> Tuple[Optional[str], str, Optional[str]]:
    from vllm.config import set_current_vllm_config
    kw = {"allow_vllm_cutlass": s.allow_cutlass} if s.quant in FP8_SCHEMES else {}
    try:  # vLLM's MoE config itself refuses some layers on some platforms
        with _deep_gemm_env(s), set_current_vllm_config(sim.vllm_config(s.model_type)):
            backend, experts = select(sim.moe_config(s, s.requested), *sim.quant_keys(s), **kw)
    except (ValueError, NotImplementedError) as exc:
        return None, refusal(exc), None
    if experts is None:  # Fp8MoeBackend.NONE: no backend, no error (a platform vLLM leaves open)
        return None, Refusal.at(f"vLLM returned {backend.value}", select,
                                f"{select.__name__} returns {backend.value}"), None
    return _MOE_NAMES.get(backend.value, backend.value.lower()), "", built(experts)


def linear_kernel_name(kernel: Any) -> str:
    from vllm.model_executor.kernels import linear
    for name, classes in linear._LINEAR_BACKEND_KERNEL_MAP.items():
        if type(kernel) in classes:
            return name
    return type(kernel).__name__


def vllm_linear(s: sim.Scenario, init: Any) -> Tuple[Optional[str], str, Optional[str]]:
    from vllm.model_executor.kernels import linear
    saved = linear._get_linear_backend
    linear._get_linear_backend = lambda *, quantization: s.requested
    try:
        kernel = init(use_a16=s.quant == "nvfp4_w4a16")
    except ValueError as exc:
        return None, refusal(exc), None
    finally:
        linear._get_linear_backend = saved
    return linear_kernel_name(kernel), "", built(type(kernel))


FP8_ACT = "mxfp4 x fp8 1x128"
_MX_NAMES = {"B12X": "b12x", "DEEPGEMM": "deep_gemm", "FLASHINFER_TRTLLM": "flashinfer_trtllm",
             "FLASHINFER_CUTLASS": "flashinfer_cutlass", "CUTLASS": "cutlass",
             "BATCHED_MARLIN": "marlin", "MARLIN": "marlin", "TRITON": "triton_kernels",
             "TRITON_UNFUSED": "triton_unfused", "EMULATION": "emulation", "CPU": "cpu",
             "HUMMING": "humming", "TRITON_MXFP8": "triton"}


def mx_pick(backend: Any) -> Tuple[str, Optional[str]]:
    """vLLM's Mxfp4MoeBackend / Fp8MoeBackend -> (its --moe-backend family name, the scheme its
    activation key makes of the layer: vLLM's own _backend_activation_key)."""
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4
    from vllm.model_executor.layers.quantization.utils import quant_utils as q
    name = backend.name
    for suffix in ("_MXFP4_MXFP8", "_MXFP4_BF16", "_MXFP4_MXFP4", "_MXFP4"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
            break
    if not isinstance(backend, mxfp4.Mxfp4MoeBackend):
        return _MX_NAMES.get(name, name.lower()), None
    key = mxfp4._backend_activation_key(backend)
    quant = {None: "mxfp4", q.kMxfp8Dynamic: "mxfp4_w4a8", q.kMxfp4Dynamic: "mxfp4_w4a4",
             q.kFp8Dynamic128Sym: FP8_ACT}.get(key, str(key))
    return _MX_NAMES.get(name, name.lower()), quant


def vllm_mx(s: sim.Scenario) -> Tuple[Optional[str], str, Optional[str], Optional[str]]:
    """vLLM's MXFP4/MXFP8 oracle for scenario `s`: (backend, error, kernel, scheme)."""
    import os

    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4, mxfp8
    vc = sim.vllm_config(s.model_type)  # no --quantization-config: the checkpoint's key decides
    env = "VLLM_B12X_MOE_FP4_FORCE_A16"
    saved = os.environ.pop(env, None)
    if s.force_a16:
        os.environ[env] = "1"
    try:
        with set_current_vllm_config(vc):
            config = sim.moe_config(s, s.requested)  # vLLM's config refuses some layers too
            if s.oracle == "mxfp4":
                backend, experts = mxfp4.select_mxfp4_moe_backend(config, sim.quant_keys(s)[1])
            elif s.oracle == "dsv4":
                backend, experts = mxfp4.select_deepseek_v4_mxfp4_moe_backend(config)
            else:
                backend, experts = mxfp8.select_mxfp8_moe_backend(config)
    except (ValueError, NotImplementedError) as exc:
        return None, refusal(exc), None, None
    finally:
        os.environ.pop(env, None)
        if saved is not None:
            os.environ[env] = saved
    name, quant = mx_pick(backend)
    return name, "", built(experts) if experts else None, quant


def vllm_choice(s: sim.Scenario) -> Tuple[Optional[str], str, Optional[str]]:
    """vLLM's own choice: its backend name, its error's first line, the kernel class it
    built (None, the error, None when vLLM raised)."""
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.layers.fused_moe.oracle import fp8, nvfp4
    if s.oracle != "nvfp4":
        return vllm_mx(s)[:3]
    if s.op == "moe" and s.quant in FP8_SCHEMES:
        return vllm_moe(s, fp8.select_fp8_moe_backend)
    if s.op == "moe":
        fn = nvfp4.select_nvfp4_moe_backend
        return vllm_moe(s, getattr(fn, "__selector_original__", fn))
    fn = linear.init_nvfp4_linear_kernel
    return vllm_linear(s, getattr(fn, "__selector_original__", fn))


# -- selector ---------------------------------------------------------------------------------
def selector_layer(s: sim.Scenario) -> Dict[str, Any]:
    if s.op == "linear":
        return adapter.linear_layer(s.quant == "nvfp4_w4a16")
    try:
        return adapter.moe_layer(sim.moe_config(s), *sim.quant_keys(s))
    except NotImplementedError:  # vLLM's CPU platform refuses the config: the same layer
        layer = adapter.moe_layer(sim.moe_config(replace(s, act_and_mul=True)),
                                  *sim.quant_keys(s))
        return {**layer, "act_and_mul": s.act_and_mul}


STACK = f"stack={sim.STACK_PRESET}"  # what installing the release brings (cuDNN with its torch)


class MachineChooser(adapter.Chooser):
    """The plugin's Chooser on one scenario machine, with the Selector built from one composed
    base config and the machine's platform (a Hydra composition per machine costs a second;
    test_parity checks both ways decide alike)."""

    def __init__(self, s: sim.Scenario):
        super().__init__(extra=[])
        self.scenario = s
        self._sel: Any = None

    def overrides(self) -> List[str]:
        return ["machine", str(self.scenario.machine)]

    def _base(self, overrides: Tuple[str, ...]) -> Any:
        if self._sel is None:
            import dataclasses

            from packaging.utils import canonicalize_name
            from packaging.version import Version

            from selector.api import Selector
            base = _base_selector()
            s = self.scenario
            cap = adapter.capability()  # what vLLM's platform reports
            assert cap == s.capability, (cap, s.capability)
            pk = dict(base.platform.packages)
            for n, v in sim.machine_packages(s).items():
                pk[canonicalize_name(n)] = None if v is None else Version(v)
            platform = dataclasses.replace(
                base.platform, preset="sweep", source="sweep",
                capability=None if cap is None else tuple(int(x) for x in cap.split(".")),
                cuda=None if s.cuda is None else Version(s.cuda),
                packages=tuple(sorted(pk.items())))
            self._sel = Selector(dataclasses.replace(base.run_config, platform=platform))
        return self._sel


_BASE: List[Any] = []


def _base_selector() -> Any:
    if not _BASE:
        import selector
        _BASE.append(selector.load(overrides=["engine=vllm", "platform=cpu", STACK]))
    return _BASE[0]


_CHOOSERS: Dict[Any, adapter.Chooser] = {}


def selector_decision(s: sim.Scenario, composed: bool = False) -> Any:
    """selector's decision through the plugin's Chooser; `composed`: with the machine as
    Hydra overrides (the plugin's own path), else MachineChooser. An FP8 layer goes through the
    plugin's own fp8_moe_switches: allow_vllm_cutlass=False is policy.exclude=[cutlass];
    VLLM_MOE_USE_DEEP_GEMM=0 is policy.exclude=[deep_gemm], =1 requests deep_gemm (on
    automatic selection: vLLM's explicit --moe-backend comes first)."""
    if composed:
        extra = [STACK, *s.selector_overrides()]
        chooser = _CHOOSERS.setdefault(tuple(extra), adapter.Chooser(extra=extra))
    else:
        chooser = _CHOOSERS.setdefault(s.machine, MachineChooser(s))
    requested, exclude = s.requested, ()
    if s.op == "moe" and s.quant in FP8_SCHEMES:
        with _deep_gemm_env(s):
            requested, exclude = adapter.fp8_moe_switches(s.requested, s.allow_cutlass)
    try:
        layer = selector_layer(s)
    except adapter.NotExpressible as exc:
        return Undescribed(s, exc)
    return chooser.decide(layer, requested, exclude)


@contextlib.contextmanager
def _deep_gemm_env(s: sim.Scenario) -> Iterator[None]:
    """VLLM_MOE_USE_DEEP_GEMM as the scenario sets it (unset: None), for vLLM's envs module."""
    env = "VLLM_MOE_USE_DEEP_GEMM"
    saved = os.environ.pop(env, None)
    if s.deep_gemm_env is not None:
        os.environ[env] = s.deep_gemm_env
    try:
        yield
    finally:
        os.environ.pop(env, None)
        if saved is not None:
            os.environ[env] = saved


def asked(s: sim.Scenario, vllm_quant: Optional[str]) -> sim.Scenario:
    """The question selector answers for an MXFP4 scenario: an `_afp8` alias is its family's
    backend on an mxfp4_w4a8 layer; on the DeepSeek V4 path, where vLLM picks the activation
    precision itself, the layer's scheme is the one vLLM's pick runs (mxfp4 when it raised)."""
    if s.oracle == "dsv4":
        quant = vllm_quant if vllm_quant in sim.MXFP4_QUANTS else "mxfp4"
        s = replace(s, quant=quant)
    if s.requested in AFP8:  # unless the layer asks for other quantized activations
        s = replace(s, quant="mxfp4_w4a8" if s.quant in ("mxfp4", "mxfp4_w4a8") else s.quant,
                    requested=AFP8[s.requested])
    return s


def outside(decision_or_none: Any = None) -> Dict[str, str]:
    """vLLM backends outside selector's catalogue, with the source that says why."""
    return dict(_base_selector().run_config.engine.outside)


# -- explaining a difference ------------------------------------------------------------------
def explain(r: Row, outside_names: Dict[str, str]) -> Optional[Tuple[str, Tuple]]:
    d = r.decision
    names = {c.backend for c in d.candidates}
    req = r.scenario.requested
    if req != "auto" and r.vllm is not None and r.vllm != req and \
            d.candidate(req).status == "not_applicable" and \
            r.vllm_auto == (r.selected, r.kernel):
        # vLLM ran another backend than the one asked for: its fallback for a backend that has
        # no kernel for the layer, which differs from its own automatic path
        return (f"--linear-backend={req} has no kernel for this layer: vLLM's fallback walks its "
                f"unfiltered kernel list and lands on {r.vllm_kernel}, where its automatic path "
                f"picks {r.kernel}; selector decides the layer as vLLM's automatic path does",
                _why(d.candidate(req)) + (("engine", FALLBACK_SOURCE),) + _built(r))
    if r.vllm is not None and r.vllm not in names:
        src = outside_names.get(r.vllm)
        return None if src is None else \
            (f"vLLM's {r.vllm} is outside selector's catalogue", (("engine", src),) +
             _decided(r))
    if _vendored_missing(r):
        return (f"this vLLM build lacks its vendored {_VENDORED[r.selected]}: a Python module "
                "inside vllm, which selector's platform (installed distributions) does not see",
                (("engine", VENDORED_SOURCE),) +
                _at(vendored_line(r.scenario, r.selected)) + _decided(r))
    if r.vllm is not None:
        c = d.candidate(r.vllm)
        if c.status in ("rejected", "not_applicable", "opt_in"):
            # the line of vLLM that decides: the kernel class it built, which selector's rule
            # (its source: the library's own check vLLM does not repeat) refuses
            return (f"selector: {r.vllm} {c.status}", _why(c) + _built(r))
        if r.selected is not None and c.status == "eligible" and \
                r.scenario.quant == "nvfp4" and _execution(d, r.vllm) == "weight_only" and \
                _execution(d, r.selected) == "native" and _vllm_runs(r.scenario, r.selected):
            # a preference explains the difference only where vLLM itself, asked for selector's
            # pick, runs it: where vLLM refuses it (a device, version or package gate, as 0.34.0's
            # SM 11.x exclusion from its CUTLASS NVFP4 MoE), the gate is the difference; and only
            # with the line of vLLM's automatic order that puts its weight-only pick first
            line = order_line(r)
            return None if line is None else \
                (f"selector ranks native {r.selected} above weight-only {r.vllm} for a W4A4 "
                 "layer", (("preference", WEIGHT_ONLY_SOURCE), (LINE, line)))
        return None
    # vLLM raised and selector chose a backend
    if r.scenario.requested != "auto" and \
            d.candidate(r.scenario.requested).status == "not_applicable":
        c = d.candidate(r.scenario.requested)
        site = getattr(r.vllm_error, "site", "")  # where vLLM refused the flag
        return (f"explicit {r.scenario.requested} does not implement the layer: selector "
                "decides it automatically", _why(c) + (("policy", POLICY_SOURCE),) +
                (((LINE, site),) if site else ()))
    if r.scenario.requested == "auto" and r.scenario.deep_gemm_env == "1" and \
            d.candidate("deep_gemm").status == "not_applicable":
        c = d.candidate("deep_gemm")
        return ("VLLM_MOE_USE_DEEP_GEMM=1 forces deep_gemm, which does not implement the layer: "
                "selector decides it automatically", _why(c) + (
                    ("engine", DEEP_GEMM_ENV_SOURCE), ("policy", POLICY_SOURCE)) + (
                    ((LINE, r.vllm_error.site),) if getattr(r.vllm_error, "site", "") else ()))
    return None


def _built(r: Row) -> Tuple[Tuple[str, str], ...]:
    """The LINE pair of the kernel class vLLM built for the row (none where it built none)."""
    site = KERNELS.get(r.vllm_kernel or "")
    return ((LINE, site),) if site else ()


def _at(*sites: str) -> Tuple[Tuple[str, str], ...]:
    """LINE pairs of the installed vLLM's lines (each once; '' where not found: left out)."""
    return tuple((LINE, x) for x in dict.fromkeys(sites) if x)


def _decided(r: Row) -> Tuple[Tuple[str, str], ...]:
    """vLLM's own line for the row: where it raised, else the kernel class it built."""
    site = getattr(r.vllm_error, "site", "")
    return _at(site) if site else _built(r)


MX_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"
MX8_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp8"


def vendored_line(s: sim.Scenario, backend: Optional[str]) -> str:
    """The line of vLLM's utils/import_utils.py that finds the module the scenario's build lacks
    (its vendored triton_kernels or DeepGEMM, vllm.third_party.*)."""
    name = "has_triton_kernels" if (backend or "").startswith("triton") and \
        not s.triton_kernels or s.deep_gemm else "has_deep_gemm"
    return vllm_def("vllm.utils.import_utils", name, f"{name}: the module, or vLLM's vendored "
                    "copy in vllm.third_party", needle="vllm.third_party")


#: explanations that name no line of the engine: a preference of selector's (the weight-only
#: rule) and the policy for a global flag. A difference is explained only by a cluster that also
#: names the engine's deciding line (run() refuses the others), and never by the preference where
#: vLLM, asked for selector's pick, refuses it (a device, version or package gate: explain())
GENERIC_SOURCES = frozenset({WEIGHT_ONLY_SOURCE, POLICY_SOURCE})


def specific(why: Optional[Tuple[str, Tuple]]) -> bool:
    """Whether an explanation names the installed vLLM's deciding line for its scenario (a LINE
    pair, read from the release's own file at run time: where vLLM raised, the check that
    refused, the kernel class it built, the order or the function that decided). Generic rules
    alone, or a file or function name without the release's line, explain nothing (issue 43):
    run() counts such a difference as unexplained, and the report says so."""
    return why is not None and any(rule == LINE and src for rule, src in why[1])


def _ordered(path: str, anchor: str, names: Tuple[str, ...]) -> Optional[List[int]]:
    """The line numbers in `path` of `names`, each the first line after `anchor` (the opening of
    an ordered list) up to the list's closing bracket that holds it; None for a name not listed."""
    lines = open(path).read().splitlines()
    start = next((i for i, x in enumerate(lines) if anchor in x), None)
    if start is None:
        return None
    out = []
    for name in names:
        at = None
        for i in range(start + 1, len(lines)):
            if lines[i].strip() in ("]", "],", "}"):
                break
            if re.search(rf"\b{re.escape(name)}\b", lines[i].split("#")[0]):
                at = i + 1
                break
        if at is None:
            return None
        out.append(at)
    return out


def order_line(r: Row) -> Optional[str]:
    """The line of vLLM's automatic order that decides a weight-only pick over selector's native
    one: where vLLM lists its pick before selector's (read from the installed vLLM's own file),
    with both lines; None where vLLM lists selector's pick first (vLLM then skipped it: a gate,
    not an order) or does not list it."""
    import inspect

    import vllm
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.layers.fused_moe.oracle import nvfp4
    if r.scenario.op == "linear":
        path, anchor = inspect.getsourcefile(linear), "_POSSIBLE_NVFP4_KERNELS: dict"
        names = (r.vllm_kernel or "", r.kernel or "")
        what = "_POSSIBLE_NVFP4_KERNELS"
    else:
        path = inspect.getsourcefile(nvfp4)
        anchor, what = "AVAILABLE_BACKENDS = [", "select_nvfp4_moe_backend's AVAILABLE_BACKENDS"
        try:
            names = tuple(f"NvFp4MoeBackend.{nvfp4.map_nvfp4_backend(n).name}"
                          for n in (r.vllm or "", r.selected or ""))
        except ValueError:
            return None
    if path is None or not all(names):
        return None
    at = _ordered(path, anchor, names)
    if at is None or at[0] > at[1]:
        return None
    return (f"vLLM {vllm.__version__} {_vllm_file(path)} lines {at[0]}, {at[1]} ({what}: "
            f"{names[0]} is tried before {names[1]})")


def _vllm_runs(s: sim.Scenario, backend: str) -> bool:
    """Whether vLLM, asked for `backend` explicitly on `s` (the simulation still on s's
    machine), runs it rather than refusing."""
    ran, _, _ = vllm_choice(replace(s, requested=backend))
    return ran == backend


_VENDORED = {"deep_gemm": "DeepGEMM", "triton_kernels": "triton_kernels",
             "triton_unfused": "triton_kernels"}


def _vendored_missing(r: Row) -> bool:
    """selector picked a backend whose module this scenario's vLLM build lacks (its vendored
    DeepGEMM or triton_kernels)."""
    s = r.scenario
    return (r.selected == "deep_gemm" and not s.deep_gemm) or \
        (r.selected in ("triton_kernels", "triton_unfused") and not s.triton_kernels)


def _why(c: Any) -> Tuple[Tuple[str, str], ...]:
    """The (rule, source) pairs that make a candidate what it is: for not_applicable only the
    rules that make it so (quant, engine), the others say nothing more."""
    reasons = [x for x in c.reasons if c.status != "not_applicable" or
               x.rule in ("quant", "engine")]
    return tuple(dict.fromkeys((x.rule, x.source) for x in reasons))


def _execution(d: Any, name: str) -> str:
    return _base_selector().catalogue.get(d.layer.op, name).execution


def run(scenarios: Optional[List[sim.Scenario]] = None) -> Report:
    report = Report()
    names = outside()
    simulation = sim.Simulation()
    todo = scenarios if scenarios is not None else sim.sweep()
    try:
        for s in sorted(todo, key=lambda s: str(s.machine)):  # one probe patch per machine
            with simulation.scenario(s):
                if s.oracle == "nvfp4":
                    v, err, kern = vllm_choice(s)
                    d = selector_decision(s)
                    row = Row(s, v, err, d, kern)
                    if not row.agrees and s.requested != "auto":  # vLLM's automatic answer too
                        auto_v, _, auto_k = vllm_choice(replace(s, requested="auto"))
                        row.vllm_auto = (auto_v, auto_k)
                else:
                    v, err, kern, vq = vllm_mx(s)
                    row = Row(s, v, err, selector_decision(asked(s, vq)), kern, vllm_quant=vq)
                    if not row.agrees and v is not None and vq == "mxfp4" and \
                            asked(s, vq).quant != "mxfp4":  # vLLM's BF16 fallback
                        row.mxfp4_decision = selector_decision(
                            replace(asked(s, vq), quant="mxfp4"))
                        row.selector_mxfp4 = _selected(row.mxfp4_decision)
            if not row.agrees:
                why = row.decision.why if isinstance(row.decision, Undescribed) else \
                    explain_mx(row, names) if s.oracle != "nvfp4" else explain(row, names)
                # an explanation without vLLM's deciding line, or with generic rules only,
                # explains nothing: the difference counts as unexplained
                row.why = why if specific(why) else None
                row.generic = None if specific(why) or why is None else why[0]
            report.rows.append(row)
    finally:
        simulation.close()
    return report


def _selected(d: Any) -> Tuple[Optional[str], Optional[str]]:
    return d.selected, (d.engine.kernel if d.engine else None)


def _explain_bf16_fallback(r: Row) -> Optional[Tuple[str, Tuple]]:
    """vLLM ran other activations than the layer asked for: only its BF16 fallback explains it."""
    s = r.scenario
    if r.vllm_quant != "mxfp4" or r.selector_mxfp4 is None:
        return None
    fallback = _at(vllm_def(MX_ORACLE, "_filter_by_activation", "_filter_by_activation: "
                            "the BF16 variants follow the requested activation's as a "
                            "fallback", needle="matching + ")) + _built(r)
    if r.selector_mxfp4 == (r.vllm, r.vllm_kernel):
        return (f"no backend runs {asked(s, r.vllm_quant).quant} here and vLLM falls back to "
                f"{r.vllm} with bf16 activations; selector decides the layer as asked, and "
                "asked about mxfp4 it picks the same", (("engine", BF16_FALLBACK_SOURCE),) +
                fallback)
    if r.selector_mxfp4[0] in ("triton_kernels", "triton_unfused", "deep_gemm") and \
            not (s.triton_kernels and s.deep_gemm):
        return (f"vLLM falls back to {r.vllm} with bf16 activations; asked about mxfp4, "
                f"selector picks {r.selector_mxfp4[0]}, whose module this vLLM build lacks",
                (("engine", BF16_FALLBACK_SOURCE), ("engine", VENDORED_SOURCE)) + fallback +
                _at(vendored_line(s, r.selector_mxfp4[0])))
    m = r.mxfp4_decision
    c = m.candidate(r.vllm) if r.vllm in {x.backend for x in m.candidates} else None
    if c is not None and c.status == "rejected":  # selector's rule rejects vLLM's pick
        return (f"vLLM falls back to {r.vllm} with bf16 activations; asked about mxfp4, "
                f"selector: {r.vllm} rejected", _why(c) + (("engine", BF16_FALLBACK_SOURCE),) +
                fallback)
    return None


def explain_mx(r: Row, outside_names: Dict[str, str]) -> Optional[Tuple[str, Tuple]]:
    """An MXFP4/MXFP8 difference, explained by vLLM's source or by selector's rules."""
    s, d = r.scenario, r.decision
    if r.vllm_quant == FP8_ACT:
        return ("vLLM's DEEPGEMM_MXFP4 quantizes activations to FP8 with 1x128 scales, a scheme "
                "selector's quant vocabulary does not name (mxfp4_w4a8 is MXFP8 activations)",
                (("engine", FP8_ACT_SOURCE),) + _at(vllm_def(
                    MX_ORACLE, "_backend_activation_key", "_backend_activation_key: "
                    "DEEPGEMM_MXFP4 takes FP8 activations with 1x128 scales",
                    needle="kFp8Dynamic128Sym")) + _built(r))
    if s.force_a16 and r.vllm == "b12x" and r.vllm_quant == "mxfp4" and r.selected == "b12x":
        return ("VLLM_B12X_MOE_FP4_FORCE_A16=1 keeps --moe-backend b12x on bf16 activations; "
                "selector names the W4A8 kernel vLLM runs without it",
                (("engine", FORCE_A16_SOURCE),) + _at(vllm_def(
                    MX_ORACLE, "_get_requested_backends", "_get_requested_backends: "
                    "VLLM_B12X_MOE_FP4_FORCE_A16 keeps b12x on B12X_MXFP4_BF16",
                    needle="VLLM_B12X_MOE_FP4_FORCE_A16")) + _built(r))
    if r.vllm is not None and r.vllm not in {c.backend for c in d.candidates}:
        return explain(r, outside_names)  # a vLLM backend outside selector's catalogue
    if r.vllm is not None and r.vllm_quant is not None and \
            r.vllm_quant != asked(s, r.vllm_quant).quant:
        return _explain_bf16_fallback(r)
    if s.requested == "cutlass" and r.vllm is None and s.oracle != "mxfp8" and \
            "is not supported for MXFP4" in r.vllm_error:
        return ("vLLM has no --moe-backend value for its CUTLASS MXFP4 x MXFP4 MoE: selector "
                "decides the layer with cutlass requested", (("engine", NO_MXFP4_NAME_SOURCE),) +
                _decided(r) + _at(vllm_def(MX_ORACLE, "map_mxfp4_backend", "map_mxfp4_backend: "
                                           "no --moe-backend value maps to CUTLASS_MXFP4_MXFP4",
                                           span=True)))
    if s.requested == "emulation" and r.vllm is None and s.oracle == "mxfp8" and \
            r.selected == "emulation" and "is not supported for MXFP8" in r.vllm_error:
        return ("vLLM has no --moe-backend value for its MXFP8 emulation: selector decides the "
                "layer with emulation requested (selector's plugin builds it through the "
                "oracle's gate)", (("engine", NO_MXFP8_NAME_SOURCE),) +
                _decided(r) + _at(vllm_def(MX8_ORACLE, "select_mxfp8_moe_backend",
                                           "select_mxfp8_moe_backend: _BACKEND_NAME_MAP names no "
                                           "emulation backend", needle="_BACKEND_NAME_MAP.get")))
    if r.selected in ("triton_kernels", "triton_unfused", "deep_gemm") and \
            not (s.triton_kernels and s.deep_gemm):
        return ("this vLLM build lacks its vendored triton_kernels / DeepGEMM (or "
                "VLLM_USE_DEEP_GEMM=0): a Python module inside vllm, which selector's platform "
                "(installed distributions) does not see", (("engine", VENDORED_SOURCE),) +
                _at(vendored_line(s, r.selected)) + _decided(r))
    if s.oracle == "dsv4" and s.requested == "auto" and r.selected is not None and \
            r.selected not in DSV4_LIST:
        return (f"vLLM's DeepSeek V4 MXFP4 path never tries {r.selected}; selector's MXFP4 order "
                "is select_mxfp4_moe_backend's (policy.exclude reproduces the DeepSeek V4 list)",
                (("engine", DSV4_SOURCE),) + _at(vllm_def(
                    MX_ORACLE, "_get_priority_backends", "_get_priority_backends: the list "
                    "select_deepseek_v4_mxfp4_moe_backend walks", span=True)) + _decided(r))
    return explain(replace(r, scenario=asked(s, r.vllm_quant)), outside_names)
