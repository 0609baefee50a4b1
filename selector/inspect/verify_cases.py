"""Verify's problems and cases: the sizes, the error bounds (measured), which cases each
backend gets (``cases_for``), and a case's ``Result``. ``selector.inspect.verify`` runs them (docs/verify.md).

Imports no torch: the problems themselves are built in the child (selector.backends.children.verify_problems).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.model import BackendSpec
    from selector.core.protocols import SelectorLike as Selector

CHILD = "selector.backends.children.verify_child:main"
VERSION = 4  # of the problems, bounds and cache format: a change invalidates cached results
#: TIMEOUT: the verify process ran out of its time budget: no verdict on the kernel (unverified,
#: exit as for SKIPPED, with a warning line), never FAIL
STATUSES = ("OK", "FAIL", "SKIPPED", "TIMEOUT")

# The problems (backends/children/verify_child.py builds them; docs/verify.md "Problems"): "aligned" sizes
# every kernel of the catalogue accepts (multiples of 256) and "odd" ones (multiples of 16 only),
# an odd token count, top-4 routing over 16 experts with every expert getting >= 8 tokens.
SHAPES: Mapping[str, Mapping[str, Mapping[str, int]]] = {
    "moe": {"aligned": {"num_tokens": 67, "hidden_size": 256, "intermediate_size": 256,
                        "num_experts": 16, "top_k": 4},
            "odd": {"num_tokens": 37, "hidden_size": 272, "intermediate_size": 144,
                    "num_experts": 16, "top_k": 4}},
    "linear": {"aligned": {"num_tokens": 67, "hidden_size": 256, "out_features": 256},
               "odd": {"num_tokens": 37, "hidden_size": 272, "out_features": 144}}}
SEED = 0
# Every activation the backend's rules accept is run (gated, then non-gated), on the aligned
# problem; the first accepted one per gating also on the odd one.
ACTIVATIONS = {True: ("silu", "gelu_tanh", "gelu", "swigluoai", "swigluoai_uninterleave",
                      "swiglustep", "situ"),
               False: ("relu2", "silu", "gelu_tanh", "gelu", "situ")}
# Activations a SwiGLU limit (layer.swiglu_limit) applies to: each is also run with this limit,
# below the default 7 and below the problems' outlier pre-activations (+-10), when accepted.
LIMITED_ACTIVATIONS = ("silu", "swigluoai", "swigluoai_uninterleave", "swiglustep")
LIMIT = 5.0


@dataclass(frozen=True)
class Bound:
    max_rel_err: float
    rms_rel_err: float
    gain_err: float = math.inf  # max |gain - 1| (per expert; per 32 output columns, linear)
    scale_err: float = math.inf  # |gain - 1| of the whole output
    tile_err: float = math.inf  # max |fitted block-scale error| of one swizzle tile (MoE)
    act_err: float = math.inf  # max |share of another activation's output| (MoE)

    def to_dict(self) -> Dict[str, float]:
        return {"max_rel_err": self.max_rel_err, "rms_rel_err": self.rms_rel_err,
                "gain_err": self.gain_err, "scale_err": self.scale_err,
                "tile_err": self.tile_err, "act_err": self.act_err}


#: the finer measures (selector.backends.children.verify_child.measure): name, what it is, its unit
FINE_MEASURES = (("scale_err", "scale error"), ("tile_err", "tile scale error"),
                 ("act_err", "activation confusion"))


# Error bounds, measured (docs/verify.md "Bounds"): 2x the worst of two simulated correct kernels
# (bf16 GEMM inputs and intermediates; W4A4 with the exact and with a FlashInfer-style reciprocal
# activation quantizer) over 30 seeds of every case emulation gets (960 MoE and 180 linear runs
# per scheme; on the H200, 2026-12-01; the odd-size MoE cases' tile errors on the CPU), rounded up
# to 2^k or 1.5 * 2^k. Worst measured (max, rms, gain, scale, tile, act): MoE W4A16 0.0278,
# 0.0122, 0.0161, 0.000154, 0.0144, 0.0146; MoE W4A4 0.2255, 0.0411, 0.0642, 0.000152, 0.0233,
# 0.00228; linear W4A16 0.00490, 0.00232, 0.000458, 0.000109; linear W4A4 0.00492, 0.00229,
# 0.000461, 0.0000788. tests/test_verify_zoo.py re-measures.
# FP8 linear, measured on the H200 (docs/records/h200.md "FP8 on the H200"; 30 seeds of every case): the
# kernels quantize the activation with the reference's quantizer (backends/formats/fp8.py), so a correct
# kernel differs by its accumulation and its bf16 output's rounding only. Worst (max / RMS /
# gain): torch _scaled_mm per-tensor, row-wise, channel-wise 0.00388 / 0.00175 / 0.00044.
#: what a bound is: the measured worst times this, rounded up to 2^k or 1.5 * 2^k
MARGIN = 2.0
FP8_LINEAR_BOUND = Bound(2.0 ** -7, 2.0 ** -8, 2.0 ** -10)
BOUNDS: Mapping[Tuple[str, str], Bound] = {
    ("moe", "nvfp4_w4a16"): Bound(0.0625, 2.0 ** -5, 0.046875, 0.0003662109375, 2.0 ** -5,
                                  2.0 ** -5),
    ("moe", "nvfp4"): Bound(0.5, 0.09375, 0.1875, 0.0003662109375, 0.046875, 0.005859375),
    ("linear", "nvfp4_w4a16"): Bound(0.01171875, 0.005859375, 2.0 ** -10, 2.0 ** -12),
    ("linear", "nvfp4"): Bound(0.01171875, 0.005859375, 2.0 ** -10, 0.00018310546875),
    # FP8 linear (backends/formats/fp8.py; the kernels quantize the activation with the reference's
    # quantizer, so a correct kernel differs by its accumulation and output rounding only):
    # docs/records/h200.md "FP8 on the H200" for the measurement
    **{("linear", q): FP8_LINEAR_BOUND for q in ("fp8_tensor", "fp8_tensor_dynamic",
                                                  "fp8_channel", "fp8_block")}}
# FP8 MoE (backends/formats/fp8.py Fp8MoEWeights; backends/children/verify_problems.py build_fp8_moe): the kernels
# quantize both GEMM inputs with the reference's quantizer, so a correct kernel differs by its
# accumulation, its bf16 FC1 output (which can move an FC2 input to the neighbouring E4M3 code)
# and its output rounding. Measured on the H200 (python tests/verify_zoo.py --ops moe_fp8 --seeds 4
# --jobs 15, then tools/fp8_moe_bounds.py; docs/records/h200.md): the simulated correct kernel of
# tests/mutant_backends and torch_grouped_fp8 (not fp8_block: its file does not implement it),
# 4 seeds of each of the 16 cases per scheme (128 runs, fp8_block 64): the worst max, rms, gain,
# scale and activation errors per scheme, rounded up to 3 digits; the bounds are MARGIN x those.
# (The activation fit is weak for FP8: a correct kernel's E4M3 rounding alone fits up to 0.15.)
# The same run on a 2-core AVX-512 CPU without BF16/AMX units (the simulated kernel alone, 4
# seeds, 2026-12-03) found fp8_block's scale error 0.00095 and activation fit 0.0509 (a float32
# accumulation order that moves bf16 FC1 outputs to neighbouring E4M3 codes), over the H200's
# 0.000181 and 0.00488: those two are the CPU's figures, the rest the H200's (each the worst of
# the two machines).
FP8_MOE_MEASURED: Mapping[str, Tuple[float, float, float, float, float]] = {
    "fp8_tensor": (0.0753, 0.0336, 0.0319, 0.00179, 0.152),
    "fp8_tensor_dynamic": (0.0787, 0.0409, 0.0431, 0.00237, 0.0773),
    "fp8_channel": (0.0741, 0.0259, 0.0236, 0.00155, 0.105),
    "fp8_block": (0.0593, 0.0195, 0.0231, 0.00095, 0.0509)}


def nice_bound(v: float) -> float:
    """``MARGIN * v`` rounded up to 2^k or 1.5 * 2^k (a bound's form)."""
    v = MARGIN * v
    if v <= 0:
        return 2.0 ** -20
    k = math.floor(math.log2(v))
    return next(c for c in (2.0 ** k, 1.5 * 2.0 ** k, 2.0 ** (k + 1)) if c >= v)


FP8_MOE_BOUNDS: Mapping[str, Bound] = {
    q: Bound(nice_bound(m[0]), nice_bound(m[1]), nice_bound(m[2]), nice_bound(m[3]), math.inf,
             nice_bound(m[4]))
    for q, m in FP8_MOE_MEASURED.items()}
BOUNDS = {**BOUNDS, **{("moe", q): b for q, b in FP8_MOE_BOUNDS.items()}}
QUANTS = ("nvfp4", "nvfp4_w4a16", "fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")


@dataclass(frozen=True)
class Case:
    """One problem for one backend: the layer the selector judged, and the reference's scheme."""
    op: str
    quant: str
    activation: Optional[str] = None  # moe only
    act_and_mul: Optional[bool] = None
    reference_quant: str = ""  # a weight-only backend serves W4A4 as W4A16 (vLLM #55397)
    swiglu_limit: Optional[float] = None  # moe only
    size: str = "aligned"  # a key of SHAPES[op]
    bias: bool = False  # linear only
    unverified: str = ""  # set: not run, why (the reference cannot compute it)

    @property
    def id(self) -> str:
        extra = "".join([f" swiglu_limit={self.swiglu_limit:g}" if self.swiglu_limit is not None
                         else "", " +bias" if self.bias else "",
                         f" ({self.size} sizes)" if self.size != "aligned" else ""])
        if self.op == "linear":
            return self.quant + extra
        return (f"{self.quant} {'gated' if self.act_and_mul else 'non-gated'} {self.activation}"
                + extra)

    @property
    def key(self) -> Tuple[str, Optional[bool], Optional[str], Optional[bool]]:
        """What a layer must match to be covered by this case (VerifyRule)."""
        if self.op == "linear":
            return (self.quant, None, None, None)
        return (self.quant, self.act_and_mul, self.activation, self.swiglu_limit is not None)

    def layer(self) -> Dict[str, Any]:
        s = SHAPES[self.op][self.size]
        d: Dict[str, Any] = {"quant": self.quant, "dtype": "bfloat16",
                             "num_tokens": s["num_tokens"], "hidden_size": s["hidden_size"]}
        if self.op == "moe":
            d.update(activation=self.activation, act_and_mul=self.act_and_mul,
                     intermediate_size=s["intermediate_size"], num_experts=s["num_experts"],
                     top_k=s["top_k"], ep_size=1)
            if self.swiglu_limit is not None:
                d["swiglu_limit"] = self.swiglu_limit
        return d

    def spec(self, seed: int = SEED) -> Dict[str, Any]:
        layer = dict(self.layer(), quant=self.reference_quant or self.quant)
        return {"id": self.id, "layer": self.layer(), "reference_layer": layer,
                "shape": dict(SHAPES[self.op][self.size]), "seed": seed, "bias": self.bias}



# ---------------------------------------------------------------------------------------------
# Which cases each backend gets

def _usable(sel: Selector, op: str, name: str, layer: Dict[str, Any]) -> bool:
    return sel.decide(sel.layer(op=op, **layer)).candidate(name).status in (
        "selected", "eligible", "opt_in")


def _reference_activations(gated: bool) -> Tuple[str, ...]:
    """The activations selector.backends.reference implements (without importing torch)."""
    if gated:
        return ("silu", "gelu", "gelu_tanh", "swigluoai", "swigluoai_uninterleave", "swiglustep")
    return ("relu2", "silu", "gelu", "gelu_tanh")


def cases_for(sel: Selector, op: str, b: BackendSpec) -> Tuple[List[Case], str]:
    """The cases a backend supports (per its rules), or ([], why none).

    MoE: every accepted activation of each gating, each also with `swiglu_limit` where that
    applies and is accepted, and the first accepted one of each gating on the odd sizes too; an
    activation the reference does not implement is a case marked unverified (not run). Linear:
    the aligned sizes, the odd sizes, and a bias."""
    quants = [q for q in QUANTS if q in b.implements and (op, q) in BOUNDS]
    if not quants:
        return [], (f"implements {', '.join(b.implements) or 'nothing'}, no scheme verify has "
                    f"{op} problems for ({', '.join(q for o, q in BOUNDS if o == op)})")
    out: List[Case] = []
    refused: List[str] = []  # why the first layer was refused (a layer-scoped device rule)

    def add(c: Case) -> bool:
        if _usable(sel, op, b.name, c.layer()):
            out.append(c)
            return True
        if not refused:
            cand = sel.decide(sel.layer(op=op, **c.layer())).candidate(b.name)
            refused.extend(f"[{r.rule}] {r.message}" for r in cand.reasons
                           if r.severity != "warning")
        return False

    for quant in quants:
        ref = "nvfp4_w4a16" if b.execution == "weight_only" and quant == "nvfp4" else quant
        if op == "linear":
            for c in (Case(op, quant, reference_quant=ref),
                      Case(op, quant, reference_quant=ref, size="odd"),
                      Case(op, quant, reference_quant=ref, bias=True)):
                add(c)
            continue
        for gated in (True, False):
            first = True
            for act in ACTIVATIONS[gated]:
                c = Case(op, quant, act, gated, ref)
                if act not in _reference_activations(gated):
                    c = replace(c, unverified=f"selector.backends.reference does not implement "
                                f"{'gated' if gated else 'non-gated'} {act!r}")
                if not add(c) or c.unverified:
                    continue
                if gated and act in LIMITED_ACTIVATIONS:
                    add(replace(c, swiglu_limit=LIMIT))
                if first:
                    first = not add(replace(c, size="odd"))
    if not out:  # why: the first verification layer's failed rules (a rule scoped to a scheme
        # is no platform rule, so `cannot run on this machine` did not name it)
        probe = (Case(op, quants[0], reference_quant=quants[0]) if op == "linear" else
                 Case(op, quants[0], ACTIVATIONS[True][0], True, quants[0]))
        cand = sel.decide(sel.layer(op=op, **probe.layer())).candidate(b.name)
        why = "; ".join(f"[{r.rule}] {r.message}" for r in cand.reasons
                        if r.severity != "warning")
        return [], "its rules reject every verification layer (" + ", ".join(quants) + ")" + \
            (f": {why}" if why else "")
    return out, ""


@dataclass(frozen=True)
class Result:
    """One line of the `verify` list (docs/verify.md)."""
    backend: str
    op: str
    scheme: Optional[str]  # the layer's quant; None when the whole backend was skipped
    status: str  # OK | FAIL | SKIPPED | TIMEOUT
    detail: str
    max_rel_err: Optional[float] = None
    rms_rel_err: Optional[float] = None
    seconds: Optional[float] = None
    activation: Optional[str] = None
    act_and_mul: Optional[bool] = None
    bound: Optional[Bound] = None
    device: Optional[str] = None
    worst: Optional[Dict[str, Any]] = None
    timeout_s: Optional[float] = None  # set when the process ran out of time
    cached: bool = False
    gain_err: Optional[float] = None
    case: str = ""  # the case's id (Case.id); "" for a whole skipped backend
    key: Optional[Tuple[Any, ...]] = None  # Case.key
    unverified: bool = False  # SKIPPED for a reason probe=verify does not accept as verified
    scale_err: Optional[float] = None
    tile_err: Optional[float] = None
    act_err: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        def num(v: Optional[float]) -> Optional[float]:
            return None if v is None else float(f"{v:.4g}")
        return {"backend": self.backend, "op": self.op, "scheme": self.scheme,
                "status": self.status, "max_rel_err": num(self.max_rel_err),
                "rms_rel_err": num(self.rms_rel_err),
                "seconds": None if self.seconds is None else round(self.seconds, 3),
                "detail": self.detail, "activation": self.activation,
                "act_and_mul": self.act_and_mul,
                "bound": None if self.bound is None else self.bound.to_dict(),
                "device": self.device, "worst": self.worst, "cached": self.cached,
                "gain_err": num(self.gain_err), "scale_err": num(self.scale_err),
                "tile_err": num(self.tile_err), "act_err": num(self.act_err),
                "case": self.case or None,
                "key": None if self.key is None else list(self.key),
                "unverified": self.unverified}

    @property
    def case_text(self) -> str:
        if self.scheme is None:
            return "-"
        if self.case:
            return self.case
        if self.op == "linear":
            return self.scheme
        return f"{self.scheme} {'gated' if self.act_and_mul else 'non-gated'} {self.activation}"


def _finite(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _worst(w: Any) -> Optional[Dict[str, Any]]:
    """The worst element as the child (or a cache file) gave it, kept only if well-formed."""
    if not isinstance(w, dict) or not isinstance(w.get("index"), list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in w["index"][:8]):
        return None
    got = w.get("got")
    got = got[:40] if isinstance(got, str) else _finite(got)
    return {"index": w["index"][:8], "got": got, "expected": _finite(w.get("expected"))}
