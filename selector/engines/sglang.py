"""selector for SGLang: a decision (made with `engine=sglang`) as SGLang server arguments.

SGLang picks one MoE runner, one FP4 GEMM and one FP8 GEMM backend per server, so the arguments
come from the decisions for the model's MoE and linear layers (`explain --model DIR
engine=sglang` checks them across a whole checkpoint):

    sel = selector.load(overrides=["engine=sglang", "platform=auto"])
    args = server_args(sel.select(op="moe", ...), sel.select(op="linear", ...))
    # ['--moe-runner-backend', 'flashinfer_cutlass', '--fp4-gemm-backend', 'flashinfer_cutlass']

Importing this module imports nothing of SGLang.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List

from selector.core.errors import SelectorError

if TYPE_CHECKING:
    from selector.core.decision import Decision

# The server_args fields the flags set (SGLang 0.5.23 srt/arg_groups/fields/exec_.py cli_name)
FIELDS = {"--moe-runner-backend": "moe_runner_backend",
          "--fp4-gemm-backend": "fp4_gemm_runner_backend",
          "--fp8-gemm-backend": "fp8_gemm_runner_backend"}


def _checked(decision: Decision) -> Dict[str, Any]:
    view = decision.engine
    if view is None or view["name"] != "sglang":
        raise SelectorError("the decision was not made for SGLang: load selector with "
                            "overrides=['engine=sglang', ...]")
    if decision.selected is None:
        raise SelectorError(f"selector refuses this {decision.layer['op']} layer: "
                            f"{decision.summary()}\n{decision}")
    return view


def server_args(*decisions: Decision) -> List[str]:
    """The command-line arguments that make SGLang run each decision's backend."""
    out: List[str] = []
    for d in decisions:
        out.extend(_checked(d)["flags"])
    return out


def server_kwargs(*decisions: Decision) -> Dict[str, str]:
    """The same as `ServerArgs(**kwargs)` keyword arguments."""
    args = server_args(*decisions)
    return {FIELDS[flag]: value for flag, value in zip(args[::2], args[1::2])}


def environment(*decisions: Decision) -> Dict[str, str]:
    """Environment variables the selected backends need (none for SGLang 0.5.23's names)."""
    env: Dict[str, str] = {}
    for d in decisions:
        env.update(_checked(d)["env"])
    return env
