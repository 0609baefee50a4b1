"""``flashinfer_cudnn``: NVFP4 dense GEMM through cuDNN, ``flashinfer.mm_fp4(..., backend="cudnn")``
(FlashInfer ``gemm/gemm_base.py``: ``_cudnn_gemm_fp4_requirement``, SM 10.0/10.3/11.0/12.0/12.1).
Same operands as the CUTLASS path (swizzled 128x4 scales)."""
from __future__ import annotations

from .flashinfer_cutlass import CutlassLinear


class CudnnLinear(CutlassLinear):
    fi_backend = "cudnn"
