"""The scale-factor layouts kernels use: 128x4 swizzled and the CuTe-DSL MMA view."""
from __future__ import annotations

from .formats import (
    BLOCK_SIZE,
    SF_TILE_COLS,
    SF_TILE_ROWS,
    _torch,
    ceil_to,
)

# ----------------------------------------------------------------------------------------------
# scale layouts
# ----------------------------------------------------------------------------------------------

def swizzle_128x4(sf):
    """Linear scales ``[rows, cols]`` or ``[E, rows, cols]`` -> the 128x4 swizzled layout.

    Rows are padded to a multiple of 128 and columns to a multiple of 4 with zeros; the result has
    the padded shape ``[(E,) rows_pad, cols_pad]`` and holds the swizzled byte order (the layout
    of ``fp4_quantize(..., is_sf_swizzled_layout=True)`` and vLLM's ``swizzle_blockscale``).
    A new tensor; the input is not modified.
    """
    torch = _torch()
    squeeze = sf.dim() == 2
    s = sf.unsqueeze(0) if squeeze else sf
    if s.dim() != 3:
        raise ValueError(f"expected a 2-D or 3-D scale tensor, got shape {tuple(sf.shape)}")
    E, rows, cols = s.shape
    rp, cp = ceil_to(rows, SF_TILE_ROWS), ceil_to(cols, SF_TILE_COLS)
    raw = s.view(torch.uint8) if s.element_size() == 1 else s
    padded = torch.zeros((E, rp, cp), dtype=raw.dtype, device=s.device)
    padded[:, :rows, :cols] = raw
    out = (padded.reshape(E, rp // 128, 4, 32, cp // 4, 4)
           .permute(0, 1, 4, 3, 2, 5).contiguous().reshape(E, rp, cp))
    if s.element_size() == 1:
        out = out.view(s.dtype)
    return out[0] if squeeze else out


def unswizzle_128x4(sf_swizzled, rows: int, cols: int):
    """Inverse of :func:`swizzle_128x4`: ``[(E,) rows_pad, cols_pad]`` (or flat) -> ``[(E,) rows, cols]``."""
    torch = _torch()
    rp, cp = ceil_to(rows, SF_TILE_ROWS), ceil_to(cols, SF_TILE_COLS)
    n = sf_swizzled.numel()
    if n % (rp * cp):
        raise ValueError(f"{n} scale bytes do not hold a whole number of {rp}x{cp} padded matrices")
    E = n // (rp * cp)
    raw = sf_swizzled.view(torch.uint8) if sf_swizzled.element_size() == 1 else sf_swizzled
    out = (raw.reshape(E, rp // 128, cp // 4, 32, 4, 4).permute(0, 1, 4, 3, 2, 5)
           .reshape(E, rp, cp)[:, :rows, :cols].contiguous())
    if sf_swizzled.element_size() == 1:
        out = out.view(sf_swizzled.dtype)
    return out[0] if sf_swizzled.dim() <= 2 and E == 1 else out


def to_mma_layout(sf_swizzled, m: int, k: int, num_groups: int = 1, sf_vec_size: int = BLOCK_SIZE):
    """Swizzled scales -> the 6-D MMA view ``(32, 4, m_tiles, 4, k_tiles, num_groups)``.

    Same arithmetic as FlashInfer's ``flashinfer.cute_dsl.convert_sf_to_mma_layout`` (a strided
    view of the swizzled bytes, physical order ``(groups, m_tiles, k_tiles, 32, 4, 4)``); used
    where FlashInfer is not importable. ``m`` and ``k`` are the matrix rows and the unpacked K.
    """
    sf_k = -(-k // sf_vec_size)
    m_tiles, k_tiles = -(-m // SF_TILE_ROWS), -(-sf_k // SF_TILE_COLS)
    expected = num_groups * m_tiles * k_tiles * 32 * 4 * 4
    if sf_swizzled.numel() != expected:
        raise ValueError(f"scale tensor has {sf_swizzled.numel()} elements, expected {expected} "
                         f"for m={m}, k={k}, num_groups={num_groups}")
    return sf_swizzled.view(num_groups, m_tiles, k_tiles, 32, 4, 4).permute(3, 4, 1, 5, 2, 0)


def from_mma_layout(sf_mma):
    """Inverse of :func:`to_mma_layout`: 6-D MMA view -> ``[num_groups, m_pad, cols_pad]`` swizzled."""
    g = sf_mma.permute(5, 2, 4, 0, 1, 3).contiguous()  # (groups, m_tiles, k_tiles, 32, 4, 4)
    G, mt, kt = g.shape[:3]
    return g.reshape(G, mt * 128, kt * 4)


def flashinfer_mma_layout(sf_swizzled, m: int, k: int, num_groups: int = 1):
    """``(view, source)``: FlashInfer's ``convert_sf_to_mma_layout`` when importable, else ours."""
    try:
        from flashinfer.cute_dsl import convert_sf_to_mma_layout  # type: ignore
    except Exception:  # flashinfer or cutlass-dsl absent, or broken
        return to_mma_layout(sf_swizzled, m, k, num_groups), "backends.formats.nvfp4.to_mma_layout"
    return (convert_sf_to_mma_layout(sf_swizzled, m=m, k=k, num_groups=num_groups),
            "flashinfer.cute_dsl.convert_sf_to_mma_layout")


def swizzled_index_128x4(row: int, col: int, padded_cols: int) -> int:
    """Flat byte offset of scale ``(row, col)`` in the 128x4 layout (FlashInfer's formula)."""
    return ((col % 4) + (col // 4) * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4
            + (row // 128) * 128 * padded_cols)
