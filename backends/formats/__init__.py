"""The number formats and their checkpoint tensors: ``nvfp4`` (E2M1 codes, E4M3 block scales, the
scale layouts kernels use, the ModelOpt containers) and ``fp8`` (E4M3 weights and activations of
the four FP8 schemes). Quantizers and dequantizers in torch; on CUDA they call ``backends.kernels``."""
