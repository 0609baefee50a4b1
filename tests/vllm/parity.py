"""vLLM's untouched choice against selector's (engine=vllm), over the simulated sweep.

Every difference is explained by the catalogue or it is not: vLLM picked a backend selector
rejects (its failed rules, with sources), a backend outside selector's catalogue (the engine
config's `outside` list, with sources), one selector ranks below its choice (the weight-only
rule), or an explicit backend that does not implement the layer, which selector hands to
automatic selection (CONTRACT). Anything else is unexplained.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Tuple

import sim

from selector.engines import vllm as adapter

WEIGHT_ONLY_SOURCE = "vLLM #55397 (fixed by #55170)"
FALLBACK_SOURCE = ("vLLM 0.32.0 kernels/linear/__init__.py (_resolve_backend_kernels, "
                   "_filter_kernels_by_backend: a --linear-backend with no kernel for the layer "
                   "falls back to the unfiltered kernel list; init_nvfp4_linear_kernel's "
                   "automatic W4A16 path forces Marlin outside SM 10.0/10.3)")
POLICY_SOURCE = "vLLM #49076, #56832 (a global backend flag must not crash other layers)"


@dataclass
class Row:
    scenario: sim.Scenario
    vllm: Optional[str]  # vLLM's backend (its name) or None when vLLM raised
    vllm_error: str
    decision: Any
    vllm_kernel: Optional[str] = None  # the kernel class vLLM built
    vllm_auto: Optional[Tuple[Optional[str], Optional[str]]] = None  # vLLM with auto: backend, kernel
    # FP8 with allow_vllm_cutlass off: vLLM's (backend, kernel) with it on
    vllm_allowed: Optional[Tuple[Optional[str], Optional[str]]] = None
    why: Optional[Tuple[str, Tuple[Tuple[str, str], ...]]] = None  # (cluster text, reasons)

    @property
    def selected(self) -> Optional[str]:
        return self.decision.selected

    @property
    def kernel(self) -> Optional[str]:
        """The kernel selector says vLLM runs for its choice."""
        view = self.decision.engine
        return view["kernel"] if view else None

    @property
    def agrees(self) -> bool:
        """Same backend and the same kernel, or both refuse."""
        return self.vllm == self.selected and self.vllm_kernel == self.kernel


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
            key = (r.vllm or "error", r.selected or "refusal",
                   r.why if r.why is not None else ("UNEXPLAINED", ()))
            out.setdefault(key, []).append(r)
        return out


# -- vLLM untouched ----------------------------------------------------------------------------
_MOE_NAMES = {"VLLM_CUTLASS": "cutlass", "FLASHINFER_CUTEDSL_BATCHED": "flashinfer_cutedsl",
              "BATCHED_VLLM_CUTLASS": "cutlass", "BATCHED_TRITON": "triton",
              "DEEPGEMM": "deep_gemm", "BATCHED_DEEPGEMM": "deep_gemm"}
FP8_SCHEMES = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
ALLOW_CUTLASS_SOURCE = ("vLLM 0.32.0 quantization/fp8.py (Fp8MoEMethod: select_fp8_moe_backend("
                        "..., allow_vllm_cutlass=False)), quantization/modelopt.py (default False), "
                        "compressed_tensors_moe_w8a8_fp8.py (allow_vllm_cutlass=True); "
                        "fused_moe/oracle/fp8.py (select_fp8_moe_backend: 'vLLM CUTLASS FP8 MoE "
                        "backend is disabled for this configuration', VLLM_CUTLASS removed from "
                        "the automatic list)")
DEEP_GEMM_ENV_SOURCE = ("vLLM 0.32.0 fused_moe/oracle/fp8.py (select_fp8_moe_backend: "
                        "VLLM_MOE_USE_DEEP_GEMM=0 removes DEEPGEMM from the automatic list, =1 "
                        "returns DEEPGEMM or raises); selector: policy.exclude=[deep_gemm], "
                        "policy.moe_backend=deep_gemm")


def vllm_moe(s: sim.Scenario, select: Any) -> Tuple[Optional[str], str, Optional[str]]:
    import os
    kw = {"allow_vllm_cutlass": s.allow_cutlass} if s.quant in FP8_SCHEMES else {}
    env = "VLLM_MOE_USE_DEEP_GEMM"
    saved = os.environ.pop(env, None)
    if s.deep_gemm_env is not None:
        os.environ[env] = s.deep_gemm_env
    try:  # vLLM's MoE config itself refuses some layers on some platforms
        backend, experts = select(sim.moe_config(s, s.requested), *sim.quant_keys(s), **kw)
    except (ValueError, NotImplementedError) as exc:
        return None, str(exc).splitlines()[0], None
    finally:
        os.environ.pop(env, None)
        if saved is not None:
            os.environ[env] = saved
    if experts is None:  # Fp8MoeBackend.NONE: no backend, no error (a platform vLLM leaves open)
        return None, f"vLLM returned {backend.value}", None
    return _MOE_NAMES.get(backend.value, backend.value.lower()), "", experts.__name__


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
        return None, str(exc).splitlines()[0], None
    finally:
        linear._get_linear_backend = saved
    return linear_kernel_name(kernel), "", type(kernel).__name__


def vllm_choice(s: sim.Scenario) -> Tuple[Optional[str], str, Optional[str]]:
    """vLLM's own choice: its backend name, its error's first line, the kernel class it
    built (None, the error, None when vLLM raised)."""
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.layers.fused_moe.oracle import fp8, nvfp4
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


STACK = "stack=vllm_0_32"  # what installing vLLM 0.32.0 brings (cuDNN with its torch, ...)


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
    Hydra overrides (the plugin's own path), else MachineChooser. VLLM_MOE_USE_DEEP_GEMM is
    what selector says with policy.exclude=[deep_gemm] (0) and by requesting deep_gemm (1, on
    automatic selection: vLLM's explicit --moe-backend comes first)."""
    if composed:
        extra = [STACK, *s.selector_overrides()]
        chooser = _CHOOSERS.setdefault(tuple(extra), adapter.Chooser(extra=extra))
    else:
        chooser = _CHOOSERS.setdefault(s.machine, MachineChooser(s))
    requested = s.requested
    if s.deep_gemm_env == "1" and requested == "auto":
        requested = "deep_gemm"
    if s.deep_gemm_env == "0" and requested == "auto":
        return _excluding(chooser, selector_layer(s), requested, ("deep_gemm",))
    return chooser.decide(selector_layer(s), requested)


_EXCLUDING: Dict[Any, Any] = {}


def _excluding(chooser: adapter.Chooser, layer: Dict[str, Any], requested: str,
               exclude: Tuple[str, ...]) -> Any:
    """The Chooser's decision with policy.exclude set (vLLM's env var that drops a backend)."""
    import dataclasses

    from selector.api import Selector
    key = (id(chooser), requested, exclude)
    sel = _EXCLUDING.get(key)
    if sel is None:
        base = chooser._with_policy(chooser._base(tuple(chooser.overrides())), "moe", requested)
        run = base.run_config
        policy = dataclasses.replace(run.policy, exclude=list(exclude))
        sel = _EXCLUDING[key] = Selector(dataclasses.replace(run, policy=policy), base.tree,
                                         base.probes)
    return sel.select(**layer)


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
                _why(d.candidate(req)) + (("engine", FALLBACK_SOURCE),))
    s = r.scenario
    if not s.allow_cutlass and r.selected == "cutlass" and \
            r.vllm_allowed == (r.selected, r.kernel):
        # the checkpoint's quant method keeps vLLM's CUTLASS FP8 MoE out (a fact of the
        # checkpoint format, which a selector layer does not carry)
        return ("this checkpoint's quant method passes allow_vllm_cutlass=False: vLLM keeps its "
                "CUTLASS FP8 MoE for compressed-tensors checkpoints",
                (("engine", ALLOW_CUTLASS_SOURCE),))
    if r.vllm is not None and r.vllm not in names:
        src = outside_names.get(r.vllm)
        return None if src is None else \
            (f"vLLM's {r.vllm} is outside selector's catalogue", (("engine", src),))
    if r.vllm is not None:
        c = d.candidate(r.vllm)
        if c.status in ("rejected", "not_applicable", "opt_in"):
            return (f"selector: {r.vllm} {c.status}", _why(c))
        if r.selected is not None and c.status == "eligible" and \
                r.scenario.quant == "nvfp4" and _execution(d, r.vllm) == "weight_only" and \
                _execution(d, r.selected) == "native":
            return (f"selector ranks native {r.selected} above weight-only {r.vllm} for a W4A4 "
                    "layer", (("preference", WEIGHT_ONLY_SOURCE),))
        return None
    # vLLM raised and selector chose a backend
    if r.scenario.requested != "auto" and \
            d.candidate(r.scenario.requested).status == "not_applicable":
        c = d.candidate(r.scenario.requested)
        return (f"explicit {r.scenario.requested} does not implement the layer: selector "
                "decides it automatically", _why(c) + (("policy", POLICY_SOURCE),))
    if r.scenario.requested == "auto" and r.scenario.deep_gemm_env == "1" and \
            d.candidate("deep_gemm").status == "not_applicable":
        c = d.candidate("deep_gemm")
        return ("VLLM_MOE_USE_DEEP_GEMM=1 forces deep_gemm, which does not implement the layer: "
                "selector decides it automatically", _why(c) + (
                    ("engine", DEEP_GEMM_ENV_SOURCE), ("policy", POLICY_SOURCE)))
    return None


def _why(c: Any) -> Tuple[Tuple[str, str], ...]:
    """The (rule, source) pairs that make a candidate what it is: for not_applicable only the
    rules that make it so (quant, engine), the others say nothing more."""
    reasons = [x for x in c.reasons if c.status != "not_applicable" or
               x.rule in ("quant", "engine")]
    return tuple(dict.fromkeys((x.rule, x.source) for x in reasons))


def _execution(d: Any, name: str) -> str:
    return _base_selector().catalogue.get(d.layer["op"], name).execution


def run(scenarios: Optional[List[sim.Scenario]] = None) -> Report:
    report = Report()
    names = outside()
    simulation = sim.Simulation()
    todo = scenarios if scenarios is not None else sim.sweep()
    try:
        for s in sorted(todo, key=lambda s: str(s.machine)):  # one probe patch per machine
            with simulation.scenario(s):
                v, err, kern = vllm_choice(s)
                d = selector_decision(s)
                row = Row(s, v, err, d, kern)
                if not row.agrees and s.requested != "auto":  # vLLM's automatic answer too
                    auto_v, _, auto_k = vllm_choice(replace(s, requested="auto"))
                    row.vllm_auto = (auto_v, auto_k)
                if not row.agrees and not s.allow_cutlass:  # vLLM with its CUTLASS allowed
                    allowed_v, _, allowed_k = vllm_choice(replace(s, allow_cutlass=True))
                    row.vllm_allowed = (allowed_v, allowed_k)
            if not row.agrees:
                row.why = explain(row, names)
            report.rows.append(row)
    finally:
        simulation.close()
    return report
