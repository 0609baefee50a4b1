"""Folding a float32 global scale into the E4M3 block scales (:func:`fold_global_scale`), with
the report of what it changed and the refusal of a fold that loses precision."""
from __future__ import annotations

from dataclasses import dataclass

from ..formats.nvfp4 import (
    E4M3_MAX,
    E4M3_MIN_NORMAL,
    _bcast,
    _torch,
    flashinfer_mma_layout,
    to_e4m3,
    to_mma_layout,
)
from .common import (
    FOLD_MAX_REL_ERROR,
    FOLD_MODES,
    live_blocks,
)

# ================================================================================================
# folding a float32 global scale into the E4M3 block scales
# ================================================================================================

@dataclass(frozen=True)
class FoldReport:
    """What folding ``scale_2`` into a tensor's E4M3 block scales did to them (live blocks only:
    a block whose codes are all zero is ignored, whatever its scale)."""

    name: str
    mode: str
    blocks: int
    nonzero: int
    overflow: int            # folded value > 448 (E4M3 max)
    flushed: int             # a non-zero scale that became 0
    subnormal: int           # a non-zero folded scale below 2^-6 (E4M3 subnormal: few bits left)
    max_folded: float        # largest exact folded value
    min_nonzero_folded: float
    max_rel_error: float     # max |e4m3(folded) - folded| / folded over non-zero scales
    mean_rel_error: float
    bound: float

    @property
    def ok(self) -> bool:
        return self.overflow == 0 and self.flushed == 0 and self.max_rel_error <= self.bound

    def describe(self) -> str:
        return (f"{self.name}: fold mode {self.mode!r}, {self.blocks} block scales "
                f"({self.nonzero} non-zero): {self.overflow} overflow E4M3 max {E4M3_MAX:g} "
                f"(largest folded {self.max_folded:.6g}), {self.flushed} flushed to 0, "
                f"{self.subnormal} subnormal (< 2^-6, smallest {self.min_nonzero_folded:.3g}); "
                f"relative error max {self.max_rel_error:.3g} mean {self.mean_rel_error:.3g} "
                f"(bound {self.bound:.3g})")


class ScaleFoldError(ValueError):
    """Folding the global scale into the block scales would overflow E4M3 or lose precision."""

    def __init__(self, report: FoldReport):
        self.report = report
        what = []
        if report.overflow:
            what.append("overflow")
        if report.flushed or report.max_rel_error > report.bound:
            what.append("precision loss above the bound")
        hint = ("; fold_mode='none' keeps the block scales and passes the global scale as alpha "
                "(exact; needs FlashInfer >= 0.6.17 input_global_scale, #3932)"
                if report.mode == "full" else "")
        super().__init__(f"refusing to fold ({', '.join(what)}): {report.describe()}{hint}")


def fold_global_scale(block_scale, scale_2, *, mode: str = "full",
                      max_rel_error: float = FOLD_MAX_REL_ERROR, name: str = "weight",
                      strict: bool = True, packed=None):
    """Fold ``scale_2`` (0-d or per leading index, e.g. per expert) into E4M3 ``block_scale``.

    mode "full" (vLLM's b12x integration, #40082): folded = e4m3(float32(block_scale * scale_2)),
    vLLM's arithmetic, alpha = 1. The product is re-rounded to E4M3: up to 2^-4 relative in the
    normal range, more once it falls below 2^-6 (subnormal), and a flush to 0 below 2^-10.
    ModelOpt's scale_2 = amax / 2688 makes the folded scale about amax_block / 6, so weights with
    block amax under ~0.09 (typical LLM weights) land in the subnormal range.
    mode "none": folded = block_scale (unchanged values, new tensor), alpha = scale_2: exact.
    ``packed`` (the weight's codes): blocks whose codes are all zero are left out of the report
    (ModelOpt stores scale 1.0 for an all-zero block; whatever the fold does to it changes nothing).

    Returns ``(folded float8_e4m3fn, alpha float32 with scale_2's shape, FoldReport)``; raises
    :class:`ScaleFoldError` on overflow, on a flush to 0 or on a relative error above
    ``max_rel_error`` unless ``strict`` is False. Inputs are not modified.
    """
    torch = _torch()
    if mode not in FOLD_MODES:
        raise ValueError(f"fold mode {mode!r}: accepted: {', '.join(FOLD_MODES)}")
    s2 = torch.as_tensor(scale_2, device=block_scale.device).to(torch.float32)
    if not bool(torch.all(torch.isfinite(s2) & (s2 > 0))):
        raise ValueError(f"{name}: global scale must be finite and positive, got {s2.tolist()}")
    bs64 = block_scale.to(torch.float64).abs()
    if mode == "full":
        folded = to_e4m3(block_scale.to(torch.float32) * _bcast(s2, block_scale.dim()))
        exact = bs64 * _bcast(s2.to(torch.float64), bs64.dim())
        alpha = torch.ones_like(s2)
    else:
        folded = block_scale.clone()
        exact = bs64
        alpha = s2.clone()
    rounded = folded.to(torch.float64).abs()
    nz = exact > 0
    if packed is not None:
        nz &= live_blocks(packed)
    n_nz = int(nz.sum())
    rel = torch.where(nz, (rounded - exact).abs() / torch.where(nz, exact, 1.0), 0.0)
    report = FoldReport(
        name=name, mode=mode, blocks=int(exact.numel()), nonzero=n_nz,
        overflow=int((nz & (exact > E4M3_MAX)).sum()), flushed=int((nz & (rounded == 0)).sum()),
        subnormal=int((nz & (exact < E4M3_MIN_NORMAL)).sum()),
        max_folded=float(exact[nz].max()) if n_nz else 0.0,
        min_nonzero_folded=float(exact[nz].min()) if n_nz else 0.0,
        max_rel_error=float(rel.max()) if n_nz else 0.0,
        mean_rel_error=float(rel[nz].mean()) if n_nz else 0.0,
        bound=float(max_rel_error))
    if strict and not report.ok:
        raise ScaleFoldError(report)
    return folded, alpha, report


def _mma(sf, k: int, E: int, use_flashinfer: bool):
    """The MMA view of swizzled ``[E, rows_pad, cols_pad]`` scales, and who computed it."""
    if use_flashinfer:
        return flashinfer_mma_layout(sf.reshape(E * sf.shape[1], sf.shape[2]), sf.shape[1], k, E)
    return to_mma_layout(sf, sf.shape[1], k, E), "backends.formats.nvfp4.to_mma_layout"
