"""The NVFP4 element formats: FP4 E2M1 codes (encode, decode, pack two per byte) and FP8 E4M3
block scales, with the constants of both."""
from __future__ import annotations

from ...common.constants import E2M1_MAX as E2M1_MAX  # re-exported: the format's largest code
from ...common.constants import E4M3_MAX

BLOCK_SIZE = 16
E4M3_MIN_NORMAL = 2.0 ** -6
E4M3_MIN_SUBNORMAL = 2.0 ** -9
E4M3_REL_HALF_ULP = 2.0 ** -4   # largest relative round-to-nearest error of an E4M3 normal number
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
SF_TILE_ROWS = 128
SF_TILE_COLS = 4


def _torch():
    """torch, imported on first use (the one helper ``backends`` uses for that)."""
    import torch
    return torch


def ceil_to(n: int, m: int) -> int:
    """``n`` rounded up to a multiple of ``m``."""
    return (n + m - 1) // m * m


#: elements processed per step by quantize / dequantize: bounds their temporaries (a few bytes per


# ----------------------------------------------------------------------------------------------
# element formats
# ----------------------------------------------------------------------------------------------

def e2m1_values(device=None, dtype=None):
    """The 16 E2M1 code values (index = 4-bit code)."""
    torch = _torch()
    pos = list(E2M1_GRID)
    return torch.tensor(pos + [-v for v in pos], dtype=dtype or torch.float32, device=device)


def encode_e2m1(v):
    """float tensor -> uint8 E2M1 codes, round-to-nearest-even, saturating at +-6 (NaN -> 0)."""
    torch = _torch()
    a = v.abs()
    # Midpoints between neighbours; a tie goes to the even code (0, 1.0, 2.0, 4.0).
    mag = ((a > 0.25).to(torch.uint8) + (a >= 0.75).to(torch.uint8) + (a > 1.25).to(torch.uint8)
           + (a >= 1.75).to(torch.uint8) + (a > 2.5).to(torch.uint8) + (a >= 3.5).to(torch.uint8)
           + (a > 5.0).to(torch.uint8))
    sign = (v < 0).to(torch.uint8) << 3
    return mag | sign


def decode_e2m1(codes, dtype=None):
    """uint8 E2M1 codes -> float values."""
    torch = _torch()
    return e2m1_values(codes.device, dtype or torch.float32)[codes.long()]


def pack_e2m1(codes):
    """``[..., K]`` codes -> ``[..., K // 2]`` bytes, element 2i in the low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"K must be even to pack FP4, got {codes.shape[-1]}")
    return (codes[..., 0::2] & 0x0F) | ((codes[..., 1::2] & 0x0F) << 4)


def unpack_e2m1(packed):
    """``[..., K // 2]`` bytes -> ``[..., K]`` codes."""
    torch = _torch()
    out = torch.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=torch.uint8,
                      device=packed.device)
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = (packed >> 4) & 0x0F
    return out


def to_e4m3(x):
    """float tensor -> float8_e4m3fn, round-to-nearest-even, saturating at +-448 (satfinite)."""
    torch = _torch()
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def e4m3_round(x):
    """``x`` rounded to the nearest E4M3 value, returned in x's dtype (for error analysis)."""
    return to_e4m3(x).to(x.dtype)
