"""Why a scenario of the command sweep (sglang_command.py) differs: an entry names SGLang
0.5.23's source that makes the difference. A printed command SGLang does not honor is never
explained here: it is fixed in selector. Every entry below needs the printed command honored
(SGLang, started from it, runs what selector names); a difference where selector prints no
command and SGLang runs the request has no entry: it is a rule of selector's to fix."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

S = "SGLang 0.5.23 python/sglang/srt/"
OPS = ("moe", "linear")


def asked_fails(row: Any) -> str:
    """Where SGLang, started from the user's request, stops: its parser, its resolution
    (model overrides, handle_moe_kernel_config asserts), the loader, or the quant method
    (get_quant_method, create_moe_runner, create_weights ... apply); '' when it runs."""
    a = row.asked
    if a.get("start"):
        return a["start"]
    for op in OPS:
        err = (a.get(op) or {}).get("error") or ""
        if err and not err.startswith(("unquantized", "get_quant_method: no quant method")):
            return err
    return ""


def _ran(answer: Optional[Dict[str, Any]], op: str) -> Optional[str]:
    return (answer or {}).get(op, {}).get("runner") if answer else None


def _differing_ops(row: Any) -> Tuple[str, ...]:
    return tuple(op for op in OPS if _ran(row.asked, op) != _ran(row.follow, op))


def _asked_for(row: Any, op: str) -> str:
    s = row.scenario
    if op == "moe":
        return s.moe if s.has_moe else "auto"
    return s.gemm if s.linear[1] else "auto"


def _op_class(row: Any, op: str) -> Optional[str]:
    asked = _asked_for(row, op)
    if asked == "auto":
        return "auto-differs"
    if f"{op}:{asked}" in row.planned.unmodelled:
        return "name-not-in-catalogue"
    return None


def _substituted(row: Any) -> bool:
    """SGLang, started from the user's request, runs another runner / GEMM than the one asked
    for at every differing layer (its constraints replace the request), and selector's printed
    plan, honored, names neither the request nor a flag for it."""
    ops = _differing_ops(row)
    return bool(ops) and all(
        _asked_for(row, op) != "auto" and _ran(row.asked, op) != _asked_for(row, op)
        and _asked_for(row, op) not in (row.planned.argv or []) for op in ops)


def _library_absent(row: Any) -> bool:
    """selector prints no command; SGLang, started from the request, builds a runner or GEMM
    whose kernel library the machine lacks (FlashInfer's, imported at the first forward, which
    raises; AMD's aiter, never on a CUDA machine)."""
    ran = [_ran(row.asked, op) or "" for op in OPS]
    return (row.planned.argv is None and not asked_fails(row) and any(
        (n.startswith("flashinfer") and not row.scenario.flashinfer) or n == "aiter"
        for n in ran))


def _request_built(row: Any) -> bool:
    """At every differing layer SGLang built exactly the request, and selector's honored plan
    names another backend (it refuses the request with its rule)."""
    ops = _differing_ops(row)
    names = {"moe": row.planned.moe, "linear": row.planned.linear}
    return bool(ops) and all(
        _asked_for(row, op) != "auto" and _ran(row.asked, op) == _asked_for(row, op)
        and names[op] != _asked_for(row, op) for op in ops)


_NEEDS = ("need SM", "need flashinfer", "need deep-gemm", "need nvidia-", "need sglang",
          "cannot run it here", ": 0/", "need CUDA")


def _built_unchecked(row: Any) -> bool:
    """selector prints no command, refusing with a device, package or CUDA rule of the backend
    the request names; SGLang, started from the request, builds every layer (its start-up
    checks neither: the kernel fails later)."""
    return (row.planned.argv is None and not asked_fails(row)
            and any(n in row.planned.refusal for n in _NEEDS))


def _op_reason(row: Any, op: str) -> Optional[str]:
    """The entry below that explains one differing layer on its own (None: none does)."""
    cls = _op_class(row, op)
    if cls is not None:
        return cls
    asked = _asked_for(row, op)
    ran = _ran(row.asked, op)
    named = {"moe": row.planned.moe, "linear": row.planned.linear}[op]
    if ran == asked and named != asked:
        return "request-built-selector-refuses"
    if ran != asked and asked not in (row.planned.argv or []):
        return "request-substituted"
    return None


def _each_layer(row: Any) -> bool:
    """The MoE and the linear layer differ for different reasons, each one of them an entry
    above on its own (e.g. the MoE request built and refused by selector, the linear GEMM
    SGLang's automatic one where the plan prints another)."""
    ops = _differing_ops(row)
    return bool(ops) and all(_op_reason(row, op) for op in ops)


EXPLAINED: Dict[str, Tuple[str, str, Callable[[Any], bool]]] = {
    "request-refused": (
        S + "server_args.py (the parser's choices), arg_groups/ (resolution asserts, e.g. "
        "moe_hook.py:81, 98 handle_moe_kernel_config), model_loader/loader.py:260 (minimum "
        "capability), layers/quantization/* (get_quant_method, create_moe_runner): the stage "
        "and SGLang's own message are in the row's `asked` answer",
        "SGLang does not start or does not build the layer from the user's request; selector's "
        "printed command starts and SGLang runs what it names",
        lambda r: r.honored and bool(asked_fails(r))),
    "auto-differs": (
        S + "layers/moe/utils.py and arg_groups/model_overrides/ (the MoE runner at auto), "
        "layers/quantization/fp8_utils.py:1170-1217 and fp4_utils.py:149-161 (the FP8 / FP4 "
        "GEMM at auto)",
        "the user passed no flag for the layer; selector's choice differs from SGLang's automatic "
        "one and the plan prints the flag that changes it (the plan shows SGLang's choice "
        "beside it); SGLang honors the flag",
        lambda r: r.honored and not asked_fails(r) and bool(_differing_ops(r)) and all(
            _op_class(r, op) == "auto-differs" for op in _differing_ops(r))),
    "name-not-in-catalogue": (
        S + "layers/moe/utils.py (MoeRunnerBackend), layers/quantization/fp8_utils.py "
        "(Fp8GemmRunnerBackend), fp4_utils.py (Fp4GemmRunnerBackend): names selector's catalogue "
        "has no backend for at the layer's scheme",
        "the user asked for a name no catalogue backend carries for the scheme; selector plans "
        "its own choice (auto for the rest) and SGLang honors it",
        lambda r: r.honored and not asked_fails(r) and bool(_differing_ops(r)) and all(
            _op_class(r, op) in ("auto-differs", "name-not-in-catalogue")
            for op in _differing_ops(r))),
    "request-substituted": (
        S + "arg_groups/overrides.py (_moe_runner_backend_quant_constraints: --quantization "
        "mxfp8 replaces any runner outside MXFP8_MOE_RUNNER_BACKEND_CHOICES by "
        "flashinfer_trtllm), layers/quantization/fp8.py (Fp8MoEMethod.create_moe_runner: 'has "
        "no %s path; using triton'): the runner SGLang runs is in the row's `asked` answer",
        "SGLang runs something else than the user asked for (its own constraints replace the "
        "request); selector refuses the request with its rule and prints its choice, which "
        "SGLang honors",
        lambda r: r.honored and not asked_fails(r) and _substituted(r)),
    "kernel-library-absent": (
        S + "layers/moe/moe_runner/flashinfer_cutlass.py:157-162 "
        "(_flashinfer_cutlass_fused_moe: RuntimeError 'requires flashinfer to be installed', "
        "called at the first forward, 187 and 305); layers/quantization/modelopt_quant.py:"
        "107-108, 173 (FlashInfer's FP4 GEMMs imported only where FlashInfer is); "
        "layers/moe/moe_runner/aiter.py:135-156 (imports aiter, ROCm's library, at run time)",
        "SGLang builds a FlashInfer runner or GEMM on a machine without FlashInfer, or AMD's "
        "aiter runner on a CUDA machine: it loads and fails at the first forward; selector "
        "refuses the layer there and prints no command",
        _library_absent),
    "request-built-selector-refuses": (
        S + "layers/moe/moe_runner/runner.py (MoeRunner.__init__ builds the runner core named, "
        "with no device, scheme, activation or library check), layers/quantization/"
        "modelopt_quant.py, fp8.py, compressed_tensors/ (create_moe_runner builds "
        "MoeRunner(requested)), fp4_utils.py (initialize_fp4_gemm_config takes the named FP4 "
        "GEMM without a device check)",
        "SGLang builds the runner / GEMM the user asked for, which selector refuses with its "
        "failed rule (the scheme it does not implement, the device or library it needs); "
        "selector prints its own choice, which SGLang honors",
        lambda r: r.honored and not asked_fails(r) and _request_built(r)),
    "built-unchecked": (
        S + "layers/moe/moe_runner/runner.py (MoeRunner.__init__: no device or library "
        "check), layers/quantization/fp4_utils.py (initialize_fp4_gemm_config: the named FP4 "
        "GEMM without a device check), compressed_tensors/compressed_tensors.py:959-975 (the "
        "NVFP4 MoE builds FlashInfer's CUTLASS runner on any SM)",
        "SGLang starts from the request and builds its layers without checking the device, "
        "library or CUDA the runner needs (the kernel fails later); selector refuses with the "
        "failed rule and prints no command",
        _built_unchecked),
    "each-layer-explained": (
        S + "the sources of the entries above, one per differing layer (the row's `asked` "
        "answer names what SGLang built for each)",
        "the MoE and the linear layer differ for different reasons, each one explained by an "
        "entry above on its own; selector's printed command starts and SGLang runs what it names",
        lambda r: r.honored and not asked_fails(r) and _each_layer(r)),
}


def explain(row: Any) -> Optional[str]:
    for key, (_src, _why, match) in EXPLAINED.items():
        if match(row):
            return key
    return None
