"""The project's own Triton kernels: NVFP4 dequantization (`nvfp4_triton`), the emulation's fused
NVFP4 MoE (`nvfp4_moe_triton`) and the FP8 activation quantizer (`fp8_act_quant`).

Each module imports triton and torch only inside functions and offers ``available()``; they read
``backends.common`` only, and the floors above call them.
"""
