"""vLLM's own FP8, MXFP8 and MXFP4 linear kernel choice against selector's (engine=vllm), over the
simulated sweep: the same harness as the NVFP4 one (sim.py's simulated CUDA platform, parity.py's
rows, Chooser and explanations), with vLLM's `init_fp8_linear_kernel`,
`init_mxfp8_linear_kernel` and `init_mxfp4_linear_kernel` as the oracles.

vLLM names its linear backends per kernel family (`--linear-backend torch` holds one kernel per
FP8 scheme); selector has one file per (backend, scheme family), so a vLLM name maps to the
selector backend of that name which implements the layer's scheme (engines/vllm.py
requested_name), and a scenario agrees when both name the same vLLM backend and kernel class.
"""
from __future__ import annotations

import dataclasses
import itertools
import types
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

import parity
import sim

from selector.engines import vllm as adapter
from selector.engines.vllm_flags import VLLM_LINEAR_QUANT

FP8 = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
MX = ("mxfp8", "mxfp4", "mxfp4_w4a8", "mxfp4_w4a4")
SCHEMES = FP8 + MX
# (N, K): DeepSeek-V3's dense MLP gate/up projection (every alignment holds), one with N and K
# multiples of 64 and 32 but not 128 (block kernels' alignments), one with K a multiple of 16 only
SHAPES = ((18432, 7168), (4160, 4160), (4128, 4112))
# MXFP8 only: N below 128 and K below 128 (mm_mxfp8's minimums, _check_mm_mxfp8_shape)
SMALL_SHAPES = ((64, 4096), (4096, 96))
DTYPES = ("bfloat16", "float16")
CAPABILITIES = (None, "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
# every vLLM --linear-backend value with a CUDA kernel for these schemes (humming needs the
# optional humming package, answered absent), and auto
NAMES = ("auto", "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_trtllm",
         "flashinfer_cudnn", "flashinfer_b12x", "cutlass", "b12x", "marlin", "deep_gemm",
         "triton", "torch", "emulation")
MODEL_TYPE = "deepseek_v3"  # the model DeepGEMM's can_implement asks about (not disabled)
# vLLM 0.32.0 utils/deep_gemm.py _DEEPGEMM_BLACKWELL_EXCLUDED_MODEL_TYPES
DEEP_GEMM_EXCLUDED = ("qwen3_5_text", "qwen3_5_moe_text")
DEEP_GEMM_MODEL_SOURCE = ("vLLM 0.32.0 utils/deep_gemm.py (should_auto_disable_deep_gemm: "
                          "_DEEPGEMM_BLACKWELL_EXCLUDED_MODEL_TYPES on the SM 100 and 120 "
                          "families); kernels/linear/scaled_mm/deep_gemm.py "
                          "(DeepGemmFp8BlockScaledMMKernel.can_implement)")
# the kernels that run vLLM's vendored DeepGEMM: its own, and the dynamic FlashInfer/DeepGEMM one
# (M < 32 FlashInfer, else DeepGEMM), which vLLM refuses when either half is unsupported
DEEP_GEMM_KERNEL_SOURCE = (
    "vLLM 0.32.0 kernels/linear/scaled_mm/flashinfer.py:165-170 "
    "(FlashInferFp8DeepGEMMDynamicBlockScaledKernel: base_type FlashInferFp8BlockScaledMMKernel, "
    "fallback_type DeepGemmFp8BlockScaledMMKernel); scaled_mm/BlockScaledMMLinearKernel.py:172-190 "
    "(Fp8BlockScaledDynamicMMLinearKernel.is_supported: base and fallback both supported); "
    "scaled_mm/deep_gemm.py:47-52 (DeepGemmFp8BlockScaledMMKernel.is_supported: "
    "is_deep_gemm_supported); utils/import_utils.py:512-519 (has_deep_gemm: deep_gemm or the "
    "vendored vllm.third_party.deep_gemm)")


def machines() -> List[Tuple[Optional[str], Optional[str], Optional[str], Optional[str]]]:
    out = []
    for cap in CAPABILITIES:
        for cuda in (sim.CUDAS if cap else (None,)):
            for fi in (sim.FLASHINFER, None):
                out.append((cap, cuda, fi, None))
                if fi and cap and cap.startswith("12."):
                    out.append((cap, cuda, fi, sim.B12X))
    return out


def layers(quant: str) -> List[Tuple[str, Tuple[int, int]]]:
    """(dtype, shape) per scheme: every shape in bf16 and the first in fp16 where a kernel checks
    shapes (FP8, MXFP8; MXFP8 also the SMALL_SHAPES); MXFP4's kernels check none, so one shape
    in both dtypes."""
    if quant in FP8 or quant == "mxfp8":
        small = SMALL_SHAPES if quant == "mxfp8" else ()
        return [(d, SHAPES[0]) for d in DTYPES] + [(DTYPES[0], sh)
                                                   for sh in SHAPES[1:] + small]
    return [(d, SHAPES[0]) for d in DTYPES]


# vLLM's MXFP8 and MXFP4 linear kernels check no CUDA version: two of them suffice there
MX_CUDAS = ("12.6", "13.0")


def sweep() -> List[sim.Scenario]:
    """machine x scheme x (dtype, shape) x requested, sorted by machine."""
    out = []
    for (cap, cuda, fi, b), quant in itertools.product(machines(), SCHEMES):
        if quant in MX and cuda not in (None, *MX_CUDAS):
            continue
        for (dtype, shape), name in itertools.product(layers(quant), NAMES):
            out.append(sim.Scenario(cap, cuda, fi, b, "linear", quant, "silu", True,
                                    requested=name, dtype=dtype, shape=shape))
    return out


# -- vLLM untouched --------------------------------------------------------------------------------
_CONFIG: List[Any] = []


def vllm_config(s: sim.Scenario) -> Any:
    """A VllmConfig whose model config names MODEL_TYPE (DeepGEMM's can_implement reads it) and
    whose kernel config requests the scenario's backend for the layer's quantization, as
    `--linear-backend-per-quant` would (selector's VLLM_LINEAR_QUANT names vLLM's key: vLLM's
    own _get_linear_backend reads it)."""
    if not _CONFIG:
        from vllm.config import VllmConfig
        _CONFIG.append(VllmConfig())
    cfg = _CONFIG[0]
    object.__setattr__(cfg, "model_config", types.SimpleNamespace(
        quantization_config=None,  # no --quantization-config (vLLM 0.34.0 reads it)
        hf_text_config=types.SimpleNamespace(model_type=s.model_type or MODEL_TYPE)))
    per = None if s.requested == "auto" else {VLLM_LINEAR_QUANT[s.quant]: s.requested}
    object.__setattr__(cfg.kernel_config, "linear_backend_per_quant", per)
    return cfg


def vllm_choice(s: sim.Scenario) -> Tuple[Optional[str], str, Optional[str]]:
    """vLLM's own kernel for the scenario's layer: its backend name, the error's first line, the
    kernel class (None, the error, None when vLLM raised)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.kernels import linear
    wkey, akey = sim.quant_keys(s)  # the scheme's keys, or those of its quant method
    dtype = getattr(torch, s.dtype)
    try:
        with set_current_vllm_config(vllm_config(s)):
            if s.quant in FP8:
                fn = linear.init_fp8_linear_kernel
                kernel = fn(akey, wkey, dtype, dtype, s.shape)
            elif s.quant == "mxfp8":
                kernel = linear.init_mxfp8_linear_kernel(weight_shape=s.shape)
            else:
                kernel = linear.init_mxfp4_linear_kernel(activation_quant_key=akey)
    except (ValueError, NotImplementedError) as exc:
        return None, parity.refusal(exc), None
    return parity.linear_kernel_name(kernel), "", parity.built(type(kernel))


# -- selector --------------------------------------------------------------------------------------
def selector_layer(s: sim.Scenario) -> Dict[str, Any]:
    """The layer as selector describes it: its scheme from vLLM's keys where a quant method
    derives them (NotExpressible when no scheme names the pair, as in the plugin)."""
    n, k = s.shape
    extra: Dict[str, Any] = {}
    if s.method is None:
        quant = s.quant
    else:  # as the plugin's moe_layer: a per-token or per-group scale is the layer's act_scale
        weight_key, activation_key = sim.quant_keys(s)
        quant = adapter.quant_scheme(weight_key, activation_key)
        if quant == "fp8_tensor_dynamic":
            extra["act_scale"] = adapter.act_scale(activation_key)
    return {"op": "linear", "quant": quant, "dtype": s.dtype, "hidden_size": k,
            "intermediate_size": n, **extra}


def selector_decision(s: sim.Scenario) -> Any:
    chooser = parity._CHOOSERS.setdefault(s.machine, parity.MachineChooser(s))
    try:
        layer = selector_layer(s)
    except adapter.NotExpressible as exc:
        return parity.Undescribed(s, exc)
    return chooser.decide(layer, s.requested)


@dataclasses.dataclass
class Row(parity.Row):
    """A parity row compared by vLLM backend name: selector's choice as the engine names it;
    `vllm_other_model`: vLLM's (backend, kernel) for the same layer of a MODEL_TYPE model."""
    vllm_other_model: Optional[Tuple[Optional[str], Optional[str]]] = None
    # vLLM's (backend, kernel) on the same machine with its vendored DeepGEMM (a build without it)
    vllm_with_deep_gemm: Optional[Tuple[Optional[str], Optional[str]]] = None

    @property
    def engine_name(self) -> Optional[str]:
        view = self.decision.engine
        return view.backend if view and self.selected else None

    @property
    def agrees(self) -> bool:
        return self.vllm == self.engine_name and self.vllm_kernel == self.kernel


def selector_name(vllm_name: Optional[str], quant: str) -> Optional[str]:
    """The selector backend a vLLM linear backend name means for a layer of `quant`."""
    if vllm_name is None:
        return None
    try:
        return adapter.requested_name("linear", vllm_name, parity._base_selector().catalogue,
                                      quant)
    except adapter.NotExpressible:
        return vllm_name


def runs_deep_gemm(kernel: Optional[str]) -> bool:
    """Whether vLLM's linear kernel class `kernel` runs DeepGEMM: DeepGemmFp8BlockScaledMMKernel
    or a dynamic kernel (Fp8BlockScaledDynamicMMLinearKernel) with it as base or fallback, read
    from vLLM's own classes."""
    if kernel is None:
        return False
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.kernels.linear.scaled_mm.deep_gemm import DeepGemmFp8BlockScaledMMKernel
    cls = getattr(linear, kernel, None)
    if not isinstance(cls, type):
        return False
    parts = [cls] + [getattr(cls, a) for a in ("base_type", "fallback_type") if hasattr(cls, a)]
    return any(issubclass(c, DeepGemmFp8BlockScaledMMKernel) for c in parts)


def explain(r: Row, outside: Dict[str, str]) -> Optional[Tuple[str, Tuple]]:
    """parity.explain on the row with vLLM's names translated into selector's."""
    q = r.scenario.quant
    req = r.scenario.requested
    if r.selected == "deep_gemm" and r.scenario.model_type in DEEP_GEMM_EXCLUDED and \
            r.vllm_other_model == (r.engine_name, r.kernel):
        return (f"vLLM never runs DeepGEMM for a {r.scenario.model_type} model on SM 10.x/12.x "
                "(E8M0 scale accuracy); selector's layer has no model-type key yet",
                (("engine", DEEP_GEMM_MODEL_SOURCE),) + parity._at(parity.vllm_def(
                    "vllm.utils.deep_gemm", "should_auto_disable_deep_gemm",
                    "should_auto_disable_deep_gemm: DeepGEMM off for these model types on the SM "
                    "100 and 120 families", needle="EXCLUDED_MODEL_TYPES")) + parity._decided(r))
    t = parity.Row(replace(r.scenario, requested=req if req == "auto" else
                           selector_name(req, q)),
                   selector_name(r.vllm, q), r.vllm_error, r.decision, r.vllm_kernel)
    if r.vllm_auto is not None:
        t.vllm_auto = (selector_name(r.vllm_auto[0], q), r.vllm_auto[1])
    why = parity.explain(t, outside)
    if why is None and not r.scenario.deep_gemm and runs_deep_gemm(r.kernel) and \
            r.vllm_with_deep_gemm == (r.engine_name, r.kernel):
        return (f"this vLLM build lacks its vendored DeepGEMM, which {r.kernel} runs: a Python "
                "module inside vllm, which selector's platform (installed distributions) does not "
                "see; with it vLLM builds the same kernel",
                (("engine", DEEP_GEMM_KERNEL_SOURCE), ("engine", parity.VENDORED_SOURCE)) +
                parity._at(parity.vendored_line(r.scenario, "deep_gemm")) + parity._decided(r))
    return why


def run(scenarios: Optional[List[sim.Scenario]] = None) -> parity.Report:
    report = parity.Report()
    names = parity.outside()
    simulation = sim.Simulation()
    todo = scenarios if scenarios is not None else sweep()
    try:
        for s in sorted(todo, key=lambda s: str(s.machine)):
            with simulation.scenario(s):
                v, err, kern = vllm_choice(s)
                row = Row(s, v, err, selector_decision(s), kern)
                if not row.agrees and s.requested != "auto":
                    auto_v, _, auto_k = vllm_choice(replace(s, requested="auto"))
                    row.vllm_auto = (auto_v, auto_k)
                if not row.agrees and s.model_type in DEEP_GEMM_EXCLUDED:
                    other_v, _, other_k = vllm_choice(replace(s, model_type=None))
                    row.vllm_other_model = (other_v, other_k)
            if not row.agrees and not s.deep_gemm and runs_deep_gemm(row.kernel):
                with_dg = replace(s, deep_gemm=True)
                with simulation.scenario(with_dg):
                    dg_v, _, dg_k = vllm_choice(with_dg)
                row.vllm_with_deep_gemm = (dg_v, dg_k)
            if not row.agrees:
                why = row.decision.why if isinstance(row.decision, parity.Undescribed) \
                    else explain(row, names)
                row.why = why if parity.specific(why) else None  # generic rules explain nothing
                row.generic = None if parity.specific(why) or why is None else why[0]
            report.rows.append(row)
    finally:
        simulation.close()
    return report
