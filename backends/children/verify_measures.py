"""verify's measures (selector.inspect.verify; docs/verify.md): a kernel's output against the
float64 reference of a problem ``verify_problems`` built: relative errors, per-expert and
per-column gains, the block-scale tile fit and the activation fit.
Imports torch only inside functions.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List

# ---------------------------------------------------------------------------------------------
# Comparison

def compare(y, ref) -> Dict[str, Any]:
    """Errors of ``y`` against ``ref``, relative to the reference's scale (both moved to float64).

    max_rel_err = max |y - ref| / max |ref|; rms_rel_err = ||y - ref|| / ||ref||; worst = the
    element with the largest |y - ref|. Non-finite outputs are counted, not compared.
    """
    import torch
    y = y.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    if tuple(y.shape) != tuple(ref.shape):
        raise ValueError(f"output has shape {tuple(y.shape)}, expected {tuple(ref.shape)}")
    bad = ~torch.isfinite(y)
    if bool(bad.any()):
        first = [int(i) for i in torch.nonzero(bad)[0]]
        return {"max_rel_err": None, "rms_rel_err": None, "nonfinite": int(bad.sum()),
                "worst": {"index": first, "got": str(float(y[tuple(first)])),
                          "expected": float(ref[tuple(first)])}}
    err = (y - ref).abs()
    scale = float(ref.abs().max())
    norm = float(ref.norm())
    flat = int(torch.argmax(err))
    index: List[int] = []
    for n in reversed(err.shape):
        flat, i = divmod(flat, int(n))
        index.insert(0, i)
    return {"max_rel_err": float(err.max()) / scale if scale > 0 else math.inf,
            "rms_rel_err": float((y - ref).norm()) / norm if norm > 0 else math.inf,
            "nonfinite": 0,
            "worst": {"index": index, "got": float(y[tuple(index)]),
                      "expected": float(ref[tuple(index)])}}



# ---------------------------------------------------------------------------------------------
# Gains, tiles, activations

def _z(g, se):
    import torch
    return (g - 1) / torch.clamp(se, min=1e-300)


def moe_gains(y, ref_parts):
    """Per-expert gains and their z-scores: the least-squares ``g`` of
    ``y ~ sum_e g_e * ref_parts[e]`` (float64), and ``(g_e - 1) / standard error``, the error
    estimated from the fit's residual.

    ``ref_parts[e]`` is the reference's output with only expert ``e`` routed. A correct kernel's
    rounding differences do not correlate with any expert's output: every z-score is a few units
    at most. A wrong scale, activation or weight of one expert moves that expert's gain by many
    standard errors.
    """
    import torch
    P = torch.stack([p.reshape(-1) for p in ref_parts]).to(torch.float64)  # [E, n]
    yv = y.reshape(-1).to(torch.float64)
    G = P @ P.T
    b = P @ yv
    live = torch.nonzero(torch.diagonal(G) > 0).flatten()
    g = torch.ones(P.shape[0], dtype=torch.float64)
    se = torch.full((P.shape[0],), math.inf, dtype=torch.float64)
    if len(live):
        Gl = G[live][:, live]
        g[live] = torch.linalg.solve(Gl, b[live])
        resid = yv - g[live] @ P[live]
        dof = max(1, yv.numel() - len(live))
        sigma2 = float(resid @ resid) / dof + (1e-12 * float(yv.abs().max())) ** 2
        se[live] = torch.sqrt(sigma2 * torch.diagonal(torch.linalg.inv(Gl)))
    return g, _z(g, se)


def column_gains(y, ref, group: int = 32):
    """Gains per group of ``group`` output columns, ``<y_J, ref_J> / <ref_J, ref_J>``, and their
    z-scores (the standard error from each group's residual)."""
    import torch
    y, ref = y.to(torch.float64), ref.to(torch.float64)
    n = ref.shape[-1]
    gs, ses = [], []
    for c in range(0, n, group):
        r, v = ref[..., c:c + group].reshape(-1), y[..., c:c + group].reshape(-1)
        d = float(r @ r)
        if d <= 0:
            gs.append(1.0)
            ses.append(math.inf)
            continue
        gj = float(v @ r) / d
        e = v - gj * r
        sigma2 = float(e @ e) / max(1, r.numel() - 1) + (1e-12 * float(v.abs().max())) ** 2
        gs.append(gj)
        ses.append(math.sqrt(sigma2 / d))
    g = torch.tensor(gs, dtype=torch.float64)
    return g, _z(g, torch.tensor(ses, dtype=torch.float64))


def _gain_fields(gz) -> Dict[str, Any]:
    """gain_err: the largest |gain - 1|; gain_worst: [where, its gain]. (The z-scores are not
    used: a kernel's rounding errors of one token's intermediate are shared by all its outputs,
    so the fit's residual is not white and its standard errors are too small.)"""
    import torch
    g, _ = gz
    dev = (g - 1).abs()
    i = int(torch.argmax(dev))
    return {"gain_err": float(dev[i]), "gain_worst": [i, float(g[i])]}


def dense_parts(parts, E: int, shape):
    """``reference_moe(..., parts=...)``'s contributions as ``E`` dense ``[T, H]`` tensors."""
    import torch
    out = []
    for e in range(E):
        d = torch.zeros(shape, dtype=torch.float64)
        if e in parts:
            tok, ye = parts[e]
            d.index_add_(0, tok, ye.to(torch.float64))
        out.append(d)
    return out


#: a block-scale swizzle tile (``nvfp4.swizzle_128x4``): 128 rows by 4 blocks of 16 columns
TILE_ROWS, TILE_COLS = 128, 64


def _act_partials(h, activation: str, act_and_mul: bool, swiglu_limit):
    """``(a, partials)``: the activation of ``h`` (float64) and, for each element of ``h``, the
    derivative of the one output element it feeds (the activation is elementwise in (gate, up)
    pairs), by autograd."""
    import torch

    from ..reference import activation_fn
    h = h.detach().clone().requires_grad_(True)
    a = activation_fn(h, activation, act_and_mul, swiglu_limit=swiglu_limit)
    (d,) = torch.autograd.grad(a.sum(), h)
    return a.detach(), d


def _fold(v, activation: str, act_and_mul: bool):
    """``[n, 2I] -> [n, I]``: sum each (gate, up) pair's terms (interleaved for swigluoai)."""
    from ..reference import INTERLEAVED_ACTIVATIONS
    if not act_and_mul:
        return v
    if activation in INTERLEAVED_ACTIVATIONS:
        return v[..., 0::2] + v[..., 1::2]
    half = v.shape[-1] // 2
    return v[..., :half] + v[..., half:]


def tile_regressors(x, w, tw, ti, *, activation: str, quant: str, swiglu_limit=None,
                    fc2_input_scale=None, **_: Any):
    """The first-order change of the float64 reference's MoE output when the block scales of one
    swizzle tile (``TILE_ROWS`` rows by ``TILE_COLS`` columns) of one expert's w13 or w2 are
    multiplied by ``1 + delta``: per routed expert ``e``, ``(e, token indices, D [m, n, H],
    labels [m])``, one regressor per tile of its w13 and w2, on the rows of its tokens; a label is
    ``(e, "w13"|"w2", tile row, tile column, full)``, full False for a partial tile at the edge of
    an odd-sized weight.

    A tile whose scales are wrong (one code off, transposed, read from the neighbouring tile)
    moves the output along its regressor; a correct kernel's rounding does not. FC2's input
    quantization (W4A4) is taken as the identity for the derivative (it is flat almost
    everywhere, and on average the identity)."""
    import torch

    from ..formats.nvfp4 import quantize_dequantize
    from ..reference.nvfp4 import _expert_scale, _expert_weight
    f64 = torch.float64
    H = x.shape[1]
    E = w.num_experts
    xd = x.to(f64)
    if quant == "nvfp4":
        xd = quantize_dequantize(xd, w.a13_scale, dtype=f64)
    a2 = w.a2_scale if fc2_input_scale is None else torch.as_tensor(fc2_input_scale)
    act_and_mul = w.act_and_mul
    ids = ti.long()
    out = []
    for e in range(E):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if not len(tok):
            continue
        wt = tw[tok, slot].to(f64).unsqueeze(-1)
        w13 = _expert_weight(w.w13, e, f64)
        w2 = _expert_weight(w.w2, e, f64)
        xe = xd[tok]
        h = xe @ w13.T
        a, d = _act_partials(h, activation, act_and_mul, swiglu_limit)
        aq = a if quant != "nvfp4" else quantize_dequantize(a, _expert_scale(a2, e), dtype=f64)
        D, labels = [], []
        R13, K13 = w13.shape
        for r0 in range(0, R13, TILE_ROWS):
            for c0 in range(0, K13, TILE_COLS):
                dh = torch.zeros_like(h)
                dh[:, r0:r0 + TILE_ROWS] = xe[:, c0:c0 + TILE_COLS] @ w13[
                    r0:r0 + TILE_ROWS, c0:c0 + TILE_COLS].T
                D.append((_fold(d * dh, activation, act_and_mul) @ w2.T) * wt)
                labels.append((e, "w13", r0 // TILE_ROWS, c0 // TILE_COLS,
                               r0 + TILE_ROWS <= R13 and c0 + TILE_COLS <= K13))
        R2, K2 = w2.shape
        for r0 in range(0, R2, TILE_ROWS):
            for c0 in range(0, K2, TILE_COLS):
                dy = torch.zeros((len(tok), H), dtype=f64)
                dy[:, r0:r0 + TILE_ROWS] = (aq[:, c0:c0 + TILE_COLS] @ w2[
                    r0:r0 + TILE_ROWS, c0:c0 + TILE_COLS].T) * wt
                D.append(dy)
                labels.append((e, "w2", r0 // TILE_ROWS, c0 // TILE_COLS,
                               r0 + TILE_ROWS <= R2 and c0 + TILE_COLS <= K2))
        out.append((e, tok, torch.stack(D), labels))
    return out


#: a tile is judged when its regressor carries at least this share of its expert's output energy
#: (below that its fitted scale error is mostly noise, and a wrong scale there moves the output
#: less than a correct kernel's rounding)
TILE_MIN_SHARE = 2.0 ** -8
#: ridge (relative to each regressor's own energy) of the per-expert fit: some combinations of
#: tiles change nothing (a gated expert's up rows times 1 + t and the FC2 input columns they feed
#: times 1 / (1 + t); relu2's rows likewise), so the plain least squares is singular along them
#: and a correct kernel's rounding can fit large opposite errors there; the ridge keeps the
#: smallest solution, which spreads such a family's error over it
TILE_RIDGE = 2.0 ** -5


def tile_fit(y, ref, tiles, parts):
    """Per expert, the least-squares ``delta`` of ``(y - ref)[its tokens] ~ sum_k delta_k D_k``
    over its tiles at once: ``(tile_err, [label, delta])``, the largest ``|delta|`` over the full
    tiles that carry at least ``TILE_MIN_SHARE`` of their expert's output energy (a partial tile,
    16 to 32 rows or columns at the edge of an odd-sized weight, is fitted but not judged: its
    fitted error is as noisy as a wrong code's, 0.046 against 0.09 on the odd W4A16 problem)."""
    import torch
    r = y.to(torch.float64) - ref.to(torch.float64)
    worst, where = 0.0, None
    for e, tok, D, labels in tiles:
        M = D.reshape(D.shape[0], -1)
        G = M @ M.T
        b = M @ r[tok].reshape(-1)
        diag = torch.diagonal(G).clone()
        energy = float(parts[e].pow(2).sum())
        live = diag > 0
        judged = live & (diag >= TILE_MIN_SHARE * energy) & torch.tensor(
            [bool(lab[4]) for lab in labels])
        if not bool(judged.any()):
            continue
        idx = torch.nonzero(live).flatten()
        Gl = G[idx][:, idx] + torch.diag(diag[idx] * TILE_RIDGE)
        delta = torch.zeros(len(labels), dtype=torch.float64)
        delta[idx] = torch.linalg.solve(Gl, b[idx])
        delta = torch.where(judged, delta, torch.zeros_like(delta))
        k = int(delta.abs().argmax())
        if abs(float(delta[k])) > worst:
            worst, where = abs(float(delta[k])), [list(labels[k][:4]), float(delta[k])]
    return worst, where


def activation_alternatives(activation: str, act_and_mul: bool):
    from ..reference import GATED_ACTIVATIONS, NON_GATED_ACTIVATIONS
    acts = GATED_ACTIVATIONS if act_and_mul else NON_GATED_ACTIVATIONS
    return [a for a in acts if a != activation]


def activation_fit(y, ref, alternatives):
    """For each other activation, the least-squares ``beta`` of ``y - ref ~ beta (ref_alt -
    ref)``: about 0 for a correct kernel, about 1 for one that computes ``alt`` instead.
    ``(act_err, [alt, beta])``: the largest ``|beta|``."""
    import torch
    r = (y.to(torch.float64) - ref.to(torch.float64)).reshape(-1)
    worst, where = 0.0, None
    for alt, ra in alternatives.items():
        d = (ra.to(torch.float64) - ref.to(torch.float64)).reshape(-1)
        dd = float(d @ d)
        if dd <= 0:
            continue
        beta = float(r @ d) / dd
        if abs(beta) > worst:
            worst, where = abs(beta), [alt, beta]
    return worst, where


def global_gain(y, ref) -> float:
    """``<y, ref> / <ref, ref>``: the least-squares gain of the whole output."""
    import torch
    y, ref = y.to(torch.float64).reshape(-1), ref.to(torch.float64).reshape(-1)
    d = float(ref @ ref)
    return float(y @ ref) / d if d > 0 else 1.0

