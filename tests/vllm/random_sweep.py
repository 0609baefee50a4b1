"""Seeded random scenarios drawn from the whole cross-product, beside the fixed grids of sim.py
and linear_parity.py: every dimension of a scenario drawn independently (device, CUDA, FlashInfer,
native b12x, vLLM's vendored triton_kernels and DeepGEMM, dtype, activation and gating, SwiGLU
clamp, EP, DP with each all2all backend, requested backend, VLLM_MOE_USE_DEEP_GEMM,
VLLM_B12X_MOE_FP4_FORCE_A16, the checkpoint's quant method with its weight and activation scheme,
the model type), so a combination no grid lists is reached too.

The seed is SELECTOR_PARITY_SEED (conftest.py sets a fresh one when it is unset and prints it in
pytest's header); SELECTOR_PARITY_SCALE multiplies the counts (CI: 1).
"""
from __future__ import annotations

import os
import random
from typing import Any, Dict, List, Optional, Sequence, Tuple

import linear_parity as lp
import methods
import sim

ENV_SEED = "SELECTOR_PARITY_SEED"
ENV_SCALE = "SELECTOR_PARITY_SCALE"
# scenarios per family in one CI run (FP8/MX: 21,000)
COUNTS = {"fp8": 8000, "mx": 7000, "linear": 6000, "nvfp4": 3000}
CAPABILITIES = (None, "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
CUDAS = ("12.6", "12.8", "12.9", "13.0")
DTYPES = ("bfloat16", "float16")
# vLLM's all2all backends (FusedMoEParallelConfig.all2all_backend); with one the scenario runs DP 2
ALL2ALL = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency",
           "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided", "naive")
EPS = (1, 2, 4, 8)
# the model types vLLM's selection reads (DeepGEMM's linear can_implement: should_auto_disable_
# deep_gemm lists the qwen3_5 text models on Blackwell; quant_method mxfp4: gpt_oss or not)
MODEL_TYPES = ("deepseek_v3", "qwen3_5_text", "qwen3_5_moe_text", "llama", "gpt_oss")
MX_QUESTIONS = (  # (oracle, scheme, quant methods whose checkpoints ask it)
    ("mxfp8", "mxfp8", ("modelopt", "compressed-tensors", "inc", "online")),
    ("mxfp4", "mxfp4", ("mxfp4", "quark")),  # gpt-oss (GptOssMxfp4MoEMethod); Quark w_mxfp4
    ("dsv4", "mxfp4", ("mxfp4",)),  # quant_method mxfp4 outside gpt-oss (Mxfp4MoEMethod)
    ("mxfp4", "mxfp4_w4a8", ("mxfp4",)),  # gpt-oss with --quantization-config moe.activation
    ("mxfp4", "mxfp4_w4a4", ("quark", "online")),
)


def seed(env: str = ENV_SEED) -> int:
    """The run's seed: SELECTOR_PARITY_SEED (or `env`), or a fresh one (kept in the environment
    so every sweep of the run, and a re-run with it, draws the same scenarios)."""
    value = os.environ.get(env)
    if not value:
        value = str(random.SystemRandom().randrange(2 ** 32))
        os.environ[env] = value
    return int(value)


def count(family: str) -> int:
    return int(COUNTS[family] * float(os.environ.get(ENV_SCALE) or 1))


def _machine(rng: random.Random) -> Dict[str, Any]:
    cap = rng.choice(CAPABILITIES)
    vendored = rng.random() < 0.8
    return {"capability": cap, "cuda": rng.choice(CUDAS) if cap else None,
            "flashinfer": rng.choice((sim.FLASHINFER, None)),
            "b12x": rng.choice((sim.B12X, None)),
            "triton_kernels": vendored or rng.random() < 0.5,
            "deep_gemm": vendored or rng.random() < 0.5}


def _parallel(rng: random.Random, all2all: bool = True) -> Dict[str, Any]:
    """EP and, half the time with EP, DP 2 with an all2all backend (`all2all` False: none).
    DP without EP is not drawn: vLLM keeps dp_size > 1 there (FusedMoEParallelConfig.make) and
    its monolithic MXFP4 experts refuse it, but selector's layer has no DP key yet."""
    ep = rng.choice(EPS)
    return {"ep_size": ep,
            "all2all": rng.choice(ALL2ALL) if all2all and ep > 1 and rng.random() < 0.5
            else None}


def _layer(rng: random.Random, layers: Sequence[Tuple[str, bool]]) -> Dict[str, Any]:
    act, gated = rng.choice(layers)
    return {"activation": act, "act_and_mul": gated, "dtype": rng.choice(DTYPES),
            "swiglu_limit": rng.choice((7.0, 10.0)) if rng.random() < 0.2 else None}


def fp8_moe(rng: random.Random) -> sim.Scenario:
    quant = rng.choice(sim.FP8_QUANTS)
    method = rng.choice(methods.fp8_methods("moe", quant))
    return sim.Scenario(op="moe", quant=quant, method=method,
                        allow_cutlass=methods.ALLOW_VLLM_CUTLASS[method],
                        requested=rng.choice(sim.FP8_NAMES),
                        deep_gemm_env=rng.choice((None, None, "0", "1")),
                        **_machine(rng), **_layer(rng, sim.MOE_LAYERS), **_parallel(rng))


def mx_moe(rng: random.Random) -> sim.Scenario:
    oracle, quant, names = rng.choice(MX_QUESTIONS)
    layers = tuple((a, g) for a, g, _ in sim.MX_LAYERS)
    requested = rng.choice(sim.MXFP8_NAMES if oracle == "mxfp8" else sim.MXFP4_NAMES)
    return sim.Scenario(op="moe", quant=quant, oracle=oracle, method=rng.choice(names),
                        model_type="gpt_oss" if oracle == "mxfp4" and quant != "mxfp4_w4a4"
                        else None, requested=requested,
                        force_a16=oracle != "mxfp8" and rng.random() < 0.2,
                        **_machine(rng), **_layer(rng, layers), **_parallel(rng))


def linear(rng: random.Random) -> sim.Scenario:
    quant = rng.choice(lp.SCHEMES)
    fp8 = methods.fp8_methods("linear", quant)
    return sim.Scenario(op="linear", quant=quant, activation="silu", act_and_mul=True,
                        method=rng.choice(fp8) if fp8 else None,
                        model_type=rng.choice(MODEL_TYPES), requested=rng.choice(lp.NAMES),
                        dtype=rng.choice(DTYPES),
                        shape=rng.choice(lp.SHAPES + lp.SMALL_SHAPES), **_machine(rng))


def nvfp4(rng: random.Random) -> sim.Scenario:
    quant = rng.choice(("nvfp4", "nvfp4_w4a16"))
    if rng.random() < 0.2:
        return sim.Scenario(op="linear", quant=quant, activation="silu", act_and_mul=True,
                            requested=rng.choice(sim.LINEAR_NAMES), **_machine(rng))
    return sim.Scenario(op="moe", quant=quant, requested=rng.choice(sim.MOE_NAMES),
                        **_machine(rng), **_layer(rng, sim.MOE_LAYERS), **_parallel(rng))


DRAW = {"fp8": fp8_moe, "mx": mx_moe, "linear": linear, "nvfp4": nvfp4}


def draw(family: str, seed_: Optional[int] = None, n: Optional[int] = None) -> List[sim.Scenario]:
    """`n` (default: count(family)) scenarios of `family`, from the run's seed (each family its
    own stream, so one family's count does not move another's draws)."""
    rng = random.Random(f"{seed() if seed_ is None else seed_}:{family}")
    return [DRAW[family](rng) for _ in range(count(family) if n is None else n)]
