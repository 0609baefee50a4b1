"""The torch / Triton FP8 backends' rules, pinned on both sides of each boundary (literal facts
with their public sources, decided as tests/knowledge_cases.py decides: no Hydra per case)."""
from __future__ import annotations

import knowledge_cases as kc
import pytest

C = kc.C
LIN = {"op": "linear", "act_and_mul": False, "hidden_size": 4096, "intermediate_size": 4096}
MOE = {"quant": "fp8_channel", "hidden_size": 2048, "intermediate_size": 768}


def L(quant: str, **kw) -> dict:
    return {**LIN, "quant": quant, **kw}


CASES = [
    # torch >= 2.5: _scaled_mm's required scales and single output (vLLM 0.32.0
    # scaled_mm/pytorch.py apply_scaled_mm; pytorch #130059)
    C("per-tensor-torch-2.4", "9.0", "linear/torch_per_tensor", {"package"},
      pk={"torch": "2.4.1"}, layer=L("fp8_tensor")),
    C("per-tensor-torch-2.5", "9.0", "linear/torch_per_tensor", layer=L("fp8_tensor"),
      pk={"torch": "2.5.0"}),
    C("per-tensor-dynamic", "8.9", "linear/torch_per_tensor", layer=L("fp8_tensor_dynamic")),
    C("per-tensor-not-channel", "9.0", "linear/torch_per_tensor", {"quant"},
      layer=L("fp8_channel")),
    C("per-tensor-no-torch", "9.0", "linear/torch_per_tensor", {"package"},
      pk={"torch": None}, layer=L("fp8_tensor")),
    C("channel-wise-torch-2.4", "9.0", "linear/torch_channel_wise", {"package"},
      pk={"torch": "2.4.1"}, layer=L("fp8_channel")),
    C("channel-wise-torch-2.5", "12.0", "linear/torch_channel_wise", pk={"torch": "2.5.0"},
      layer=L("fp8_channel")),
    C("channel-wise-not-tensor", "9.0", "linear/torch_channel_wise", {"quant"},
      layer=L("fp8_tensor")),
    C("channel-wise-fp16", "9.0", "linear/torch_channel_wise", layer=L("fp8_channel",
                                                                         dtype="float16")),
    # row-wise: bfloat16 output only before torch 2.11 (pytorch #125204's SM90 kernel; vLLM
    # RowWise can_implement); torch 2.11 writes float16 and float32 too (measured, docs/h200.md)
    C("row-wise-fp16-torch-2.10", "9.0", "linear/torch_row_wise", {"dtype"},
      pk={"torch": "2.10.0"}, layer=L("fp8_channel", dtype="float16")),
    C("row-wise-fp32-torch-2.10", "9.0", "linear/torch_row_wise", {"dtype"},
      pk={"torch": "2.10.0"}, layer=L("fp8_channel", dtype="float32")),
    C("row-wise-fp16-torch-2.11", "9.0", "linear/torch_row_wise", pk={"torch": "2.11.0"},
      layer=L("fp8_channel", dtype="float16")),
    C("row-wise-bf16", "9.0", "linear/torch_row_wise", layer=L("fp8_channel")),
    C("row-wise-torch-2.4", "9.0", "linear/torch_row_wise", {"package"}, pk={"torch": "2.4.1"},
      layer=L("fp8_channel")),
    C("row-wise-not-block", "9.0", "linear/torch_row_wise", {"quant"}, layer=L("fp8_block")),
    # block-wise: cuBLAS 12.9 block scaling (pytorch #158037), torch 2.10 (#166752)
    C("block-wise-cuda-12.8", "9.0", "linear/torch_block_wise", {"cuda"}, cuda="12.8",
      layer=L("fp8_block")),
    C("block-wise-cuda-12.9", "9.0", "linear/torch_block_wise", cuda="12.9",
      layer=L("fp8_block")),
    C("block-wise-torch-2.9.1", "9.0", "linear/torch_block_wise", {"package"},
      pk={"torch": "2.9.1"}, layer=L("fp8_block")),
    C("block-wise-torch-2.10", "9.0", "linear/torch_block_wise", pk={"torch": "2.10.0"},
      layer=L("fp8_block")),
    # vLLM's kernel does not pad K: K/128 must be a multiple of 4 (pytorch #166752; measured on
    # torch 2.11); selector's own backend pads
    C("block-wise-vllm-k768", "9.0", "linear/torch_block_wise", {"shape"},
      layer=L("fp8_block", hidden_size=768), engine="vllm", name="torch"),
    C("block-wise-vllm-k7168", "9.0", "linear/torch_block_wise",
      layer=L("fp8_block", hidden_size=7168), engine="vllm", name="torch"),
    C("block-wise-k768", "9.0", "linear/torch_block_wise", layer=L("fp8_block", hidden_size=768)),
    # preference: torch block-wise ahead of the Triton kernel from 1024 tokens on SM 9.0 (vLLM
    # #49932: competitive-to-best for M >= 1024)
    C("triton-block-eligible-1024", "9.0", "linear/triton_block_fp8", status="eligible",
      layer=L("fp8_block", num_tokens=1024)),
    C("triton-block-eligible-1024-sm100-no", "10.0", "linear/torch_block_wise", {"device"},
      layer=L("fp8_block", num_tokens=1024)),
    C("block-wise-eligible-1023", "9.0", "linear/torch_block_wise", status="eligible",
      layer=L("fp8_block", num_tokens=1023)),
    C("block-wise-sm100", "10.0", "linear/torch_block_wise", {"device"}, layer=L("fp8_block")),
    C("block-wise-not-tensor", "9.0", "linear/torch_block_wise", {"quant"},
      layer=L("fp8_tensor")),
    # Triton block FP8: triton installed, fp8e4nv from SM 8.9
    C("triton-block-no-triton", "9.0", "linear/triton_block_fp8", {"package"},
      pk={"triton": None}, layer=L("fp8_block")),
    C("triton-block-sm86", "8.6", "linear/triton_block_fp8", {"device"}, layer=L("fp8_block")),
    C("triton-block-sm120", "12.0", "linear/triton_block_fp8", layer=L("fp8_block")),
    C("triton-block-not-channel", "9.0", "linear/triton_block_fp8", {"quant"},
      layer=L("fp8_channel")),
    # grouped FP8 MoE: torch 2.8 (pytorch #148531), dims multiple of 16, SM 9.0, no block scales
    C("grouped-torch-2.7", "9.0", "moe/torch_grouped_fp8", {"package"}, pk={"torch": "2.7.1"},
      layer=MOE),
    C("grouped-torch-2.8", "9.0", "moe/torch_grouped_fp8", pk={"torch": "2.8.0"}, layer=MOE),
    C("grouped-hidden-2056", "9.0", "moe/torch_grouped_fp8", {"shape"},
      layer={**MOE, "hidden_size": 2056}),
    C("grouped-intermediate-760", "9.0", "moe/torch_grouped_fp8", {"shape"},
      layer={**MOE, "intermediate_size": 760}),
    C("grouped-tensor", "9.0", "moe/torch_grouped_fp8", layer={**MOE, "quant": "fp8_tensor"}),
    C("grouped-not-block", "9.0", "moe/torch_grouped_fp8", {"quant"},
      layer={**MOE, "quant": "fp8_block"}),
    C("grouped-not-nvfp4", "9.0", "moe/torch_grouped_fp8", {"quant"},
      layer={**MOE, "quant": "nvfp4"}),
    # the kernel vLLM 0.32.0 builds under each name (kernels/linear/__init__.py
    # _LINEAR_BACKEND_KERNEL_MAP, scaled_mm/pytorch.py, scaled_mm/triton.py)
    C("vllm-kernel-per-tensor", "9.0", "linear/torch_per_tensor", layer=L("fp8_tensor"),
      engine="vllm", kernel="PerTensorTorchFP8ScaledMMLinearKernel", scheme="fp8_tensor",
      status="selected", only="device"),
    C("vllm-kernel-channel-wise", "9.0", "linear/torch_channel_wise", layer=L("fp8_channel"),
      engine="vllm", kernel="ChannelWiseTorchFP8ScaledMMLinearKernel", scheme="fp8_channel",
      status="selected", only="device"),
    C("vllm-kernel-block-wise", "9.0", "linear/torch_block_wise", layer=L("fp8_block"),
      engine="vllm", kernel="BlockWiseTorchFP8ScaledMMLinearKernel", scheme="fp8_block",
      status="selected", only="device"),
    C("vllm-kernel-triton-block", "9.0", "linear/triton_block_fp8", layer=L("fp8_block"),
      engine="vllm", kernel="TritonFp8BlockScaledMMKernel", scheme="fp8_block",
      status="selected", only="device"),
    # vLLM has no row-wise torch kernel on CUDA (RowWise...is_supported: ROCm only)
    C("vllm-no-row-wise", "9.0", "linear/torch_row_wise", {"engine"}, layer=L("fp8_channel"),
      engine="vllm", name=None, only="engine"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case):
    assert kc.problem(case) is None, kc.problem(case)
