"""A family of NVFP4 backends as a third party would ship them, registered under the
`selector.backends` entry-point group by the dist-info beside this package: two simulated correct
kernels and mutants of them with the layout, scale and activation bugs real kernel integrations
have had (selector issue 24). `tests/test_verify_zoo.py` runs `doctor --verify`'s measurement and
verdict on each; docs/verify.md's detection table is generated from that run.

The simulated correct kernels compute as a kernel does (`selector.backends.reference.emulate_moe`
/ `emulate_linear`): bf16 GEMM inputs (codes times block scales, exact), bf16 FC1 output, float32
scales, and either the exact NVFP4 activation quantizer or a FlashInfer-style one that multiplies
by reciprocals (`cvt_warp_fp16_to_fp4`: SF = e4m3(global * amax / 6), element * 1 / (SF / global)).
"""
import torch

from selector.backends.formats import nvfp4 as nv
from selector.backends.formats.fp8 import Fp8MoEWeights, make_moe_weights
from selector.backends.formats.nvfp4 import LinearWeights, MoEWeights, NVFP4Tensor
from selector.backends.reference import (
    emulate_linear,
    emulate_moe,
    exact_quantizer,
    reference_fp8_moe,
)
from selector.backends.wrappers._base import MoEBackend
from selector.backends.wrappers.emulation import EmulationLinear, EmulationMoE


def reciprocal_quantizer(x, scale):
    """FlashInfer-style NVFP4 activation quantization, float32: multiplications by reciprocals
    where the exact quantizer divides. Returns (codes * block scales, scale_2)."""
    xf = x.float()
    if scale is None:
        scale = nv.scale_2_from_amax(nv.amax_checked(xf))
    s = torch.as_tensor(scale, dtype=torch.float32, device=x.device)
    g = torch.reciprocal(s)  # FlashInfer's global scale, 1 / scale_2
    K = xf.shape[-1]
    blocks = xf.reshape(-1, K // 16, 16)
    vmax = blocks.abs().amax(-1)
    sf = nv.to_e4m3(g * (vmax * torch.reciprocal(torch.tensor(6.0))))
    sff = sf.float()
    osc = torch.where(sff > 0, torch.reciprocal(sff * torch.reciprocal(g)), torch.zeros_like(sff))
    codes = nv.encode_e2m1(blocks * osc.unsqueeze(-1))
    unit = nv.decode_e2m1(codes) * sff.unsqueeze(-1)
    return unit.reshape(xf.shape), torch.reciprocal(g)


# ---------------------------------------------------------------------------------------------
# The simulated correct kernels

class SimMoE(EmulationMoE):
    """A correct kernel: bf16 GEMMs and intermediates, the exact activation quantizer."""
    quantizer = staticmethod(exact_quantizer)

    def mutate(self, w):
        """The checkpoint as this kernel's (wrong) preparation leaves it."""
        return w

    def prepare(self, weights):
        return super().prepare(self.mutate(weights))

    def run(self, x, w, tw, ti, **kw):
        args = dict(activation=self.activation, quant=self.quant, swiglu_limit=self.swiglu_limit,
                    quantizer=self.quantizer, dtype=torch.bfloat16)
        args.update(self.scale_overrides)
        args.update(kw)
        return emulate_moe(x, w, tw, ti, **args)

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        y = self.run(x, prepared.weights, topk_weights, topk_ids)
        return y if out is None else out.copy_(y)


class SimReciprocalMoE(SimMoE):
    """A correct kernel with FlashInfer's reciprocal activation quantizer."""
    quantizer = staticmethod(reciprocal_quantizer)


class SimLinear(EmulationLinear):
    quantizer = staticmethod(exact_quantizer)

    def mutate(self, w):
        return w

    def prepare(self, weights):
        return super().prepare(self.mutate(weights))

    def run(self, x, w, **kw):
        args = dict(quant=self.quant, quantizer=self.quantizer, dtype=torch.bfloat16)
        args.update(kw)
        return emulate_linear(x, w, **args)

    def apply(self, x, prepared, *, out=None):
        y = self.run(x, prepared.weights)
        return y if out is None else out.copy_(y)


class SimReciprocalLinear(SimLinear):
    quantizer = staticmethod(reciprocal_quantizer)


# ---------------------------------------------------------------------------------------------
# Checkpoint surgery

def _t(t, packed=None, bs=None, s2=None):
    return NVFP4Tensor(t.packed if packed is None else packed,
                       t.block_scale if bs is None else bs, t.scale_2 if s2 is None else s2)


def _moe(w, w13=None, w2=None, a13=None, a2=None):
    return MoEWeights(w13 or w.w13, w2 or w.w2, w.a13_scale if a13 is None else a13,
                      w.a2_scale if a2 is None else a2)


def _per_expert(s2, E):
    return s2.expand(E).clone() if s2.dim() == 0 else s2.clone()


def transpose_tiles(bs, tiles=None):
    """Block scales ``[rows, cols]`` with 128x4 swizzle tiles transposed (the [4 x 4] of rows
    r // 32 % 4 and columns c % 4 read the wrong way round): all tiles, or ``tiles`` [(i, j)]."""
    rows, cols = bs.shape
    sw = nv.swizzle_128x4(bs).view(torch.uint8).clone()
    rp, cp = sw.shape
    t = sw.reshape(rp // 128, cp // 4, 32, 4, 4)  # tile-major, as swizzle_128x4 lays it out
    for i, j in tiles if tiles is not None else [(i, j) for i in range(rp // 128)
                                                   for j in range(cp // 4)]:
        t[i, j] = t[i, j].transpose(-1, -2).clone()
    return nv.unswizzle_128x4(t.reshape(rp, cp).view(torch.float8_e4m3fn), rows, cols)


def tile_off_by_one(bs, i, j):
    """Block scales of swizzle tile (i, j) one E4M3 code up (non-zero, below 448)."""
    raw = bs.view(torch.uint8).clone()
    sub = raw[i * 128:(i + 1) * 128, j * 4:(j + 1) * 4]
    sub += ((sub > 0) & (sub < 0x7E)).to(torch.uint8)
    return raw.view(torch.float8_e4m3fn)


def _expert_bs(t, e, fn):
    bs = t.block_scale.clone()
    bs[e] = fn(bs[e])
    return _t(t, bs=bs)


SUBTLE_EXPERT = 1
SUBTLE_TILE = (1, 1)


# ---------------------------------------------------------------------------------------------
# Mutants: (name, class, what it does, the cases it changes)

class GateUpSwapped(SimMoE):
    """w13's [gate; up] halves read the wrong way round."""
    def mutate(self, w):
        if not w.act_and_mul:
            return w
        half = w.w13.packed.shape[1] // 2

        def sw(t):
            return torch.cat([t[:, half:], t[:, :half]], dim=1)
        return _moe(w, w13=_t(w.w13, sw(w.w13.packed), sw(w.w13.block_scale)))


class SwizzleTransposed(SimMoE):
    """Every w13 block-scale swizzle tile transposed, every expert."""
    def mutate(self, w):
        bs = torch.stack([transpose_tiles(b) for b in w.w13.block_scale])
        return _moe(w, w13=_t(w.w13, bs=bs))


class ExpertsSwapped(SimMoE):
    """Experts 0 and 1 exchanged (w13, w2 and their scales)."""
    def mutate(self, w):
        def sw(t):
            t = t.clone()
            t[[0, 1]] = t[[1, 0]]
            return t

        def swt(x):
            return _t(x, sw(x.packed), sw(x.block_scale.view(torch.uint8)).view(torch.float8_e4m3fn),
                      sw(_per_expert(x.scale_2, x.packed.shape[0])))
        return _moe(w, w13=swt(w.w13), w2=swt(w.w2))


class NibbleSwap(SimMoE):
    """w13's FP4 nibbles in the wrong order (odd element first)."""
    def mutate(self, w):
        p = w.w13.packed
        return _moe(w, w13=_t(w.w13, (p >> 4) | (p << 4)))


class RouterWeightsIgnored(SimMoE):
    """Every routed expert weighted 1 / top_k."""
    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        tw = torch.full_like(topk_weights, 1.0 / topk_weights.shape[1])
        return super().apply(x, prepared, tw, topk_ids, out=out)


class GlobalScaleX2(SimMoE):
    """w13's global scales doubled."""
    def mutate(self, w):
        return _moe(w, w13=_t(w.w13, s2=w.w13.scale_2 * 2))


class FlipSign(SimMoE):
    """A sign error in the epilogue."""
    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        return -super().apply(x, prepared, topk_weights, topk_ids, out=out)


class OneTileTransposed(SimMoE):
    """One w13 block-scale swizzle tile transposed, in one expert."""
    def mutate(self, w):
        return _moe(w, w13=_expert_bs(w.w13, SUBTLE_EXPERT,
                                      lambda b: transpose_tiles(b, [SUBTLE_TILE])))


class OneTileOffByOneCode(SimMoE):
    """The block scales of one w13 swizzle tile of one expert one E4M3 code too high."""
    def mutate(self, w):
        return _moe(w, w13=_expert_bs(w.w13, SUBTLE_EXPERT,
                                      lambda b: tile_off_by_one(b, *SUBTLE_TILE)))


class W13ScaleX105(SimMoE):
    """w13's global scales x1.05 (a scale rounded through the wrong type, a stale calibration)."""
    def mutate(self, w):
        return _moe(w, w13=_t(w.w13, s2=w.w13.scale_2 * 1.05))


class W2ScaleX11(SimMoE):
    """w2's global scales x1.1."""
    def mutate(self, w):
        return _moe(w, w2=_t(w.w2, s2=w.w2.scale_2 * 1.1))


class Expert0ScaleForAll(SimMoE):
    """Expert 0's weight global scales used for every expert (w13 and w2)."""
    def mutate(self, w):
        def one(t):
            s = t.scale_2
            return _t(t, s2=(s if s.dim() == 0 else s[0].expand(s.shape[0]).clone()))
        return _moe(w, w13=one(w.w13), w2=one(w.w2))


class A2Expert0ForAll(SimMoE):
    """FC2's activation scale of expert 0 used for every expert (W4A4)."""
    def mutate(self, w):
        a2 = w.a2_scale
        if a2 is None or a2.dim() == 0:
            return w
        return _moe(w, a2=a2[0].expand(a2.shape[0]).clone())


class SiluAsGeluTanh(SimMoE):
    """Computes gelu_tanh where silu is asked for."""
    def run(self, x, w, tw, ti, **kw):
        act = "gelu_tanh" if self.activation == "silu" else self.activation
        return super().run(x, w, tw, ti, activation=act, **kw)


class GeluAsGeluTanh(SimMoE):
    """Computes gelu_tanh where gelu (erf) is asked for."""
    def run(self, x, w, tw, ti, **kw):
        act = "gelu_tanh" if self.activation == "gelu" else self.activation
        return super().run(x, w, tw, ti, activation=act, **kw)


class SwigluLimitIgnored(SimMoE):
    """Ignores layer.swiglu_limit (uses the activation's default: none for silu, 7 for the
    SwiGLU-OAI pair and swiglustep)."""
    def run(self, x, w, tw, ti, **kw):
        return super().run(x, w, tw, ti, swiglu_limit=None, **kw)


class LinearSkipsActQuant(SimLinear):
    """A W4A4 linear kernel that multiplies the bf16 activation, never quantized."""
    def run(self, x, w, **kw):
        return super().run(x, w, quant="nvfp4_w4a16", **kw)


class LinearBiasIgnored(SimLinear):
    """Drops the bias."""
    def run(self, x, w, **kw):
        return super().run(x, LinearWeights(w.weight, w.input_scale, None), **kw)


class LinearScaleX105(SimLinear):
    """The weight's global scale x1.05."""
    def mutate(self, w):
        return LinearWeights(_t(w.weight, s2=w.weight.scale_2 * 1.05), w.input_scale, w.bias)


class LinearOneTileTransposed(SimLinear):
    """One block-scale swizzle tile of the weight transposed."""
    def mutate(self, w):
        bs = transpose_tiles(w.weight.block_scale, [(0, 1)])
        return LinearWeights(_t(w.weight, bs=bs), w.input_scale, w.bias)


class LinearNibbleSwap(SimLinear):
    def mutate(self, w):
        p = w.weight.packed
        return LinearWeights(_t(w.weight, (p >> 4) | (p << 4)), w.input_scale, w.bias)


# ---------------------------------------------------------------------------------------------
# FP8 MoE (issue 35): a simulated correct kernel and its mutants

class SimFp8MoE(MoEBackend):
    """A correct FP8 MoE kernel: both GEMM inputs quantized with the reference's quantizer,
    float32 accumulation, FC1's output rounded to bf16 (as the grouped GEMM writes it), bf16
    output (``backends.reference.reference_fp8_moe`` in float32)."""
    computes = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
    backend = "sim_fp8"  # its file: conf/backend/moe/sim_fp8.yaml (the zoo runs it without one)

    def gate(self, geometry=None, *, layer=None):
        """No gate: a simulated kernel computes every FP8 MoE layer the reference does."""
        return None

    def mutate(self, w):
        return w

    def prepare(self, weights):
        return self.mutate(weights)

    def run(self, x, w, tw, ti, **kw):
        args = dict(activation=self.activation, swiglu_limit=self.swiglu_limit,
                    compute_dtype=torch.float32, fc1_output_dtype=torch.bfloat16)
        args.update(kw)
        return reference_fp8_moe(x, w, tw, ti, **args)

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        y = self.run(x, prepared, topk_weights, topk_ids)
        return y if out is None else out.copy_(y)


def _fp8(w, **kw):
    d = dict(w13=w.w13, w13_scale=w.w13_scale, w2=w.w2, w2_scale=w.w2_scale, quant=w.quant,
             a13_scale=w.a13_scale, a2_scale=w.a2_scale)
    d.update(kw)
    return Fp8MoEWeights(**d)


class Fp8ScaleTransposed(SimFp8MoE):
    """w13's [rows/128, K/128] block scales stored K-major read as N-major (each expert's scale
    matrix transposed, then read in the original shape)."""
    def mutate(self, w):
        s = w.w13_scale
        t = s.transpose(-1, -2).contiguous().reshape(s.shape)
        return _fp8(w, w13_scale=t)


class Fp8BlockScaleWrongBlock(SimFp8MoE):
    """Each w13 block's scale read from the next block along K (an off-by-one block index)."""
    def mutate(self, w):
        return _fp8(w, w13_scale=torch.roll(w.w13_scale, -1, dims=-1).contiguous())


class Fp8A2ReusedAcrossExperts(SimFp8MoE):
    """FC2's static activation scale of expert 0 used for every expert (fp8_tensor)."""
    def mutate(self, w):
        a2 = w.a2_scale
        if a2 is None or a2.dim() == 0:
            return w
        return _fp8(w, a2_scale=a2[0].expand(a2.shape[0]).clone())


class Fp8GateUpSwapped(SimFp8MoE):
    """w13's [gate; up] halves read the wrong way round (requantized: the halves need not
    align with 128-row scale blocks)."""
    def mutate(self, w):
        if not w.act_and_mul:
            return w
        deq = torch.stack([w.expert("w13", e) for e in range(w.num_experts)])
        half = deq.shape[1] // 2
        deq = torch.cat([deq[:, half:], deq[:, :half]], dim=1)
        w2 = torch.stack([w.expert("w2", e) for e in range(w.num_experts)])
        return make_moe_weights(deq, w2, w.quant, a13_scale=w.a13_scale, a2_scale=w.a2_scale)


CORRECT = {"moe": {"sim_exact": SimMoE, "sim_reciprocal": SimReciprocalMoE},
           "linear": {"sim_exact": SimLinear, "sim_reciprocal": SimReciprocalLinear},
           "moe_fp8": {"sim_fp8": SimFp8MoE}}
if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
    # the real kernel beside the simulated one (on the CPU torch has no _scaled_grouped_mm)
    from selector.backends.wrappers.torch_grouped_fp8 import TorchGroupedFp8MoE
    CORRECT["moe_fp8"]["torch_grouped_fp8"] = TorchGroupedFp8MoE

#: name -> (op, class, which cases it changes: a predicate on verify.Case, "gross" or "subtle")
MUTANTS = {
    "gate_up_swapped": ("moe", GateUpSwapped, lambda c: c.act_and_mul, "gross"),
    "swizzle_transposed": ("moe", SwizzleTransposed, lambda c: True, "gross"),
    "experts_swapped": ("moe", ExpertsSwapped, lambda c: True, "gross"),
    "nibble_swap": ("moe", NibbleSwap, lambda c: True, "gross"),
    "router_weights_ignored": ("moe", RouterWeightsIgnored, lambda c: True, "gross"),
    "w13_global_scale_x2": ("moe", GlobalScaleX2, lambda c: True, "gross"),
    "flip_sign": ("moe", FlipSign, lambda c: True, "gross"),
    "one_tile_transposed_one_expert": ("moe", OneTileTransposed, lambda c: True, "subtle"),
    "one_tile_off_by_one_e4m3_code": ("moe", OneTileOffByOneCode, lambda c: True, "subtle"),
    "w13_global_scale_x1.05": ("moe", W13ScaleX105, lambda c: True, "subtle"),
    "w2_global_scale_x1.1": ("moe", W2ScaleX11, lambda c: True, "subtle"),
    "expert0_global_scale_for_all": ("moe", Expert0ScaleForAll, lambda c: True, "subtle"),
    "expert0_a2_for_all": ("moe", A2Expert0ForAll, lambda c: c.quant == "nvfp4", "subtle"),
    "silu_as_gelu_tanh": ("moe", SiluAsGeluTanh, lambda c: c.activation == "silu", "subtle"),
    "gelu_as_gelu_tanh": ("moe", GeluAsGeluTanh, lambda c: c.activation == "gelu", "subtle"),
    "swiglu_limit_ignored": ("moe", SwigluLimitIgnored, lambda c: c.swiglu_limit is not None,
                             "subtle"),
    "linear_skips_activation_quant": ("linear", LinearSkipsActQuant,
                                      lambda c: c.quant == "nvfp4", "subtle"),
    "linear_bias_ignored": ("linear", LinearBiasIgnored, lambda c: c.bias, "subtle"),
    "linear_global_scale_x1.05": ("linear", LinearScaleX105, lambda c: True, "subtle"),
    "linear_one_tile_transposed": ("linear", LinearOneTileTransposed, lambda c: True, "subtle"),
    "linear_nibble_swap": ("linear", LinearNibbleSwap, lambda c: True, "gross"),
    # FP8 MoE: the zoo's "moe_fp8" cases (tests/verify_zoo.py fp8_cases)
    "fp8_scale_transposed": ("moe_fp8", Fp8ScaleTransposed,
                             lambda c: c.quant == "fp8_block", "gross"),
    "fp8_block_scale_wrong_block": ("moe_fp8", Fp8BlockScaleWrongBlock,
                                    lambda c: c.quant == "fp8_block", "subtle"),
    "fp8_a2_reused_across_experts": ("moe_fp8", Fp8A2ReusedAcrossExperts,
                                     lambda c: c.quant == "fp8_tensor", "subtle"),
    "fp8_gate_up_swapped": ("moe_fp8", Fp8GateUpSwapped, lambda c: c.act_and_mul, "gross"),
}
