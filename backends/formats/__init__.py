"""The number formats and their checkpoint tensors: `nvfp4` (E2M1 codes, E4M3 block scales, the
scale layouts kernels use, the ModelOpt containers) and `fp8` (the weights and activations of the
four FP8 schemes), with their quantizers and dequantizers.

Torch only; on CUDA the quantizers call ``backends.kernels``.
"""
