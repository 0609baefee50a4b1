"""selector's model of SGLang's own choice (selector/engines/sglang.py `auto_moe`, `auto_linear`:
what a launch plan shows beside selector's and what decides whether a flag is passed) against
SGLang 0.5.23's own code with the flag at `auto`: its model override (gpt-oss), its quantization
constraints, the quant method's `create_moe_runner` and the block-FP8 GEMM dispatch, on every
simulated machine of the sweep (sglang_sim.py)."""
from __future__ import annotations

import itertools

import sglang_sweep as sweep

from selector.engines.sglang import auto_linear, auto_moe

QUANTIZATION = {"fp8_block": "fp8", "fp8_tensor": "fp8", "mxfp4": "mxfp4",
                "nvfp4": "modelopt_fp4"}


def _rows():
    rows = []
    for cap, fi, dg in itertools.product(("9.0", "10.0", "10.3", "11.0", "12.0", "12.1"),
                                         (True, False), (True, False)):
        for quant, fmt, model in (("fp8_block", None, None), ("fp8_tensor", None, None),
                                  ("mxfp4", None, None), ("mxfp4", None, "gpt_oss"),
                                  ("nvfp4", None, None), ("nvfp4", "compressed-tensors", None)):
            for ep in (1, 2):
                act = "swigluoai" if quant == "mxfp4" else "silu"
                rows.append(sweep.Scenario(cap, fi, dg, "moe", quant, act, True, ep, "auto",
                                           fmt, model))
        rows.append(sweep.Scenario(cap, fi, dg, "linear", "fp8_block", "silu", True, 1, "auto"))
    return rows


def test_selectors_model_of_sglangs_automatic_choice_is_sglangs():
    rows = _rows()
    answers = sweep.sglang_answers(rows)
    wrong = []
    for s in rows:
        got = answers[s]
        if not got.get("runner"):
            continue  # SGLang refuses the layer: no automatic choice to compare
        sm = int(s.capability.replace(".", ""))
        if s.op == "linear":
            packages = {"sgl-deep-gemm": "x" if s.deep_gemm else None,
                        "flashinfer-python": "x" if s.flashinfer else None}
            want = auto_linear(sm, s.quant, {k: v for k, v in packages.items() if v})
        else:
            q = "compressed-tensors" if s.format else QUANTIZATION[s.quant]
            arch = "GptOssForCausalLM" if s.model == "gpt_oss" else "LlamaForCausalLM"
            want = auto_moe(sm, arch, q, s.quant, s.ep_size)
        if want is None or want[0] != got["runner"]:
            wrong.append(f"{s.label()}: SGLang {got['runner']}, selector's model "
                         f"{want and want[0]}")
    assert not wrong, "\n".join(wrong[:40])
