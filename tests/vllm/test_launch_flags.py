"""The launch plan's flags against vLLM's own argument parser and config validation: for the
repository's example checkpoints (and the mixed ones of tests/launch_fixtures.py) under several
platforms and parallel sizes, `EngineArgs.add_cli_args` parses the flags `explain --model ...
engine=vllm` prints, and `EngineArgs.create_engine_config()` builds a VllmConfig from them (no
weights are loaded) holding exactly the backends and sizes the plan asked for. Also: the tables
of selector/engines/vllm_flags.py equal what vLLM's own functions answer."""
from __future__ import annotations

import json
import sys
import typing
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from launch_fixtures import (  # noqa: E402
    fp8_block_dense,
    mixed_block_moe,
    mixed_linear,
    mixed_moe,
)

import selector  # noqa: E402
from selector.core.errors import SelectorError  # noqa: E402
from selector.engines import vllm_flags as tables  # noqa: E402

EXAMPLES = sorted(p for p in (REPO / "examples").iterdir() if (p / "config.json").is_file())
CASES = [  # (platform overrides, parallel overrides)
    (("platform=b200", "stack=vllm_0_32"), ("parallel.tp=4", "parallel.dp=2", "parallel.ep=8")),
    (("platform=dgx_spark", "stack=vllm_0_33"), ()),
    (("platform=rtx_pro_6000", "stack=vllm_0_33", "policy.moe_backend=flashinfer_b12x"),
     ("parallel.tp=2",)),
    (("platform=h200", "stack=vllm_0_32"), ("parallel.tp=8",)),
]


@pytest.fixture(scope="module")
def parser():
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    return EngineArgs.add_cli_args(FlexibleArgumentParser())


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return [*EXAMPLES, mixed_moe(root), mixed_linear(root), mixed_block_moe(root),
            fp8_block_dense(root)]


def vllm_config(parser, model, flags):
    from vllm.engine.arg_utils import EngineArgs
    args = parser.parse_args(["--model", str(model), "--skip-tokenizer-init", *flags])
    return EngineArgs.from_cli_args(args).create_engine_config()


def test_examples_exist():
    assert EXAMPLES, "the repository ships example checkpoints under examples/"


@pytest.mark.parametrize("case", range(len(CASES)))
def test_printed_flags_build_a_vllm_config(parser, checkpoints, case):
    platform, parallel = CASES[case]
    sel = selector.load(["engine=vllm", *platform, *parallel])
    for model in checkpoints:
        try:
            lp = sel.launch_plan(model)
        except SelectorError as exc:
            if "parallel.ep=8" in parallel and "has no MoE layer to split by experts" in str(exc):
                continue  # a dense model (mixed_linear, fp8_block_dense, the Llama examples):
                # the plan refuses parallel.ep as vLLM does (tests/test_launch.py)
            raise
        cfg = vllm_config(parser, model, list(lp.flags))
        kc, pc = cfg.kernel_config, cfg.parallel_config
        f = list(lp.flags)
        want_moe = f[f.index("--moe-backend") + 1] if "--moe-backend" in f else "auto"
        assert kc.moe_backend == want_moe, (model, f)
        if "--linear-backend" in f:
            assert kc.linear_backend == f[f.index("--linear-backend") + 1]
        if "--kernel-config" in f:
            per = json.loads(f[f.index("--kernel-config") + 1])["linear_backend_per_quant"]
            assert kc.linear_backend_per_quant == per
        assert pc.tensor_parallel_size == lp.parallel.tp
        assert pc.data_parallel_size == lp.parallel.dp
        assert pc.enable_expert_parallel == (lp.parallel.ep > 1)
        # every MoE group's backend is one vLLM's oracle for its scheme maps, and the flag
        # printed is one the oracle of every MoE group's scheme maps
        for g in lp.groups:
            if g.op != "moe":
                continue
            if g.planned and g.engine_backend:
                _map(g.scheme, g.engine_backend)
            if want_moe != "auto" and g.scheme in tables.VLLM_MOE_ACCEPTS:
                _map(g.scheme, want_moe)


def _map(scheme, name):
    """vLLM's own mapper of --moe-backend for a scheme (raises ValueError when it refuses)."""
    from vllm.model_executor.layers.fused_moe.oracle import fp8, mxfp4, mxfp8, nvfp4, unquantized
    if scheme.startswith("nvfp4"):
        return nvfp4.map_nvfp4_backend(name)
    if scheme.startswith("fp8"):
        return fp8.map_fp8_backend(name)
    if scheme.startswith("mxfp4"):
        return mxfp4.map_mxfp4_backend(name)
    if scheme == "mxfp8":
        return mxfp8._BACKEND_NAME_MAP[name]
    assert scheme == "unquantized", scheme
    return None if name == "humming" else unquantized.map_unquantized_backend(name)


def _accepted(fn):
    from vllm.config.kernel import MoEBackend
    out = []
    for name in typing.get_args(MoEBackend):
        try:
            fn(name)
            out.append(name)
        except ValueError:
            pass
    return out


def test_moe_accept_tables_equal_vllms_oracles():
    from vllm.model_executor.layers.fused_moe.oracle import fp8, mxfp8, nvfp4, unquantized
    assert sorted(tables.VLLM_MOE_ACCEPTS["nvfp4"]) == sorted(_accepted(nvfp4.map_nvfp4_backend))
    assert sorted(tables.VLLM_MOE_ACCEPTS["fp8"]) == sorted(_accepted(fp8.map_fp8_backend))
    assert sorted(tables.VLLM_MOE_ACCEPTS["mxfp8"]) == sorted(mxfp8._BACKEND_NAME_MAP)
    # unquantized: the mapped names, and humming, which select_unquantized_moe_backend lets
    # through to automatic selection
    assert sorted(tables.VLLM_MOE_ACCEPTS["unquantized"]) == sorted(
        _accepted(unquantized.map_unquantized_backend) + ["humming"])


def test_kernel_tables_equal_vllms_maps():
    import vllm.model_executor.kernels.linear as lin
    from vllm.model_executor.layers.fused_moe.oracle import nvfp4
    from vllm.platforms import PlatformEnum
    possible = lin._POSSIBLE_NVFP4_KERNELS[PlatformEnum.CUDA]
    a16 = {"B12xNvFp4W4A16LinearKernel", "FlashInferCuteDslNvFp4W4A16LinearKernel",
           "MarlinNvFp4LinearKernel", "HummingNvFp4LinearKernel"}  # init_nvfp4_linear_kernel
    for (op, quant, name), kernels in tables.VLLM_KERNELS.items():
        if op == "linear":
            mapped = [k.__name__ for k in possible if k in lin._LINEAR_BACKEND_KERNEL_MAP[name]
                      and (quant == "nvfp4" or k.__name__ in a16)]
        else:
            mapped = [k.__name__ for k in nvfp4.backend_to_kernel_cls(
                nvfp4.map_nvfp4_backend(name))]
        assert list(kernels) == mapped, (op, quant, name)


def test_moe_accept_tables_of_the_fp8_and_mxfp4_schemes_equal_vllms_mappers():
    """Issue 26: every FP8 MoE method maps --moe-backend with map_fp8_backend, every MXFP4 one
    with map_mxfp4_backend (Mxfp4MoEMethod through select_deepseek_v4_mxfp4_moe_backend,
    GptOssMxfp4MoEMethod and CompressedTensorsW4A4Mxfp4MoEMethod through
    select_mxfp4_moe_backend without an activation key, whose _get_requested_backends keeps
    every mapped backend); the tables hold exactly the names they take."""
    import inspect

    from vllm.model_executor.layers.fused_moe.oracle import fp8, mxfp4
    from vllm.model_executor.layers.quantization import mxfp4 as qmx
    fp8_names = sorted(_accepted(fp8.map_fp8_backend))
    for s in ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block"):
        assert sorted(tables.VLLM_MOE_ACCEPTS[s]) == fp8_names, s
        assert "map_fp8_backend" in tables.VLLM_MOE_SOURCES[s]
    mx_names = sorted(_accepted(mxfp4.map_mxfp4_backend))
    assert mx_names == sorted(_accepted(lambda n: mxfp4._get_requested_backends(n, None)))
    for s in ("mxfp4", "mxfp4_w4a8", "mxfp4_w4a4"):
        assert sorted(tables.VLLM_MOE_ACCEPTS[s]) == mx_names, s
    # the PR #40082 review: the b12x label of FlashInfer is refused by both oracles
    assert "flashinfer_b12x" not in fp8_names and "flashinfer_b12x" not in mx_names
    # the MXFP4 methods ask without an activation key, as the table assumes
    assert "select_mxfp4_moe_backend(moe)" in inspect.getsource(qmx.GptOssMxfp4MoEMethod)
    assert "select_deepseek_v4_mxfp4_moe_backend(" in inspect.getsource(qmx.Mxfp4MoEMethod)


def test_linear_quant_keys_are_the_keys_vllms_kernel_initializers_ask_for():
    """VLLM_LINEAR_QUANT: the `quantization=` each vLLM linear kernel initializer passes to
    _get_linear_backend (which reads linear_backend_per_quant) for the scheme's QuantKey pair
    (schema.QUANT_SCHEMES): recorded by wrapping _get_linear_backend, then vLLM's own runs."""
    import torch
    import vllm.model_executor.kernels.linear as lin
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    from selector.core.schema import QUANT_SCHEMES
    asked = []
    real = lin._get_linear_backend

    def spy(*, quantization):
        asked.append(quantization)
        return real(quantization=quantization)
    lin._get_linear_backend = spy
    try:
        for scheme, want in tables.VLLM_LINEAR_QUANT.items():
            w, a = QUANT_SCHEMES[scheme].vllm_keys
            asked.clear()
            try:
                if scheme.startswith("fp8"):
                    lin.init_fp8_linear_kernel(getattr(q, a), getattr(q, w), torch.bfloat16,
                                               torch.bfloat16, (256, 256))
                elif scheme == "mxfp8":
                    lin.init_mxfp8_linear_kernel(weight_shape=(256, 256))
                elif scheme.startswith("mxfp4"):
                    lin.init_mxfp4_linear_kernel(activation_quant_key=a and getattr(q, a))
                else:
                    lin.init_nvfp4_linear_kernel(use_a16=a is None)
            except Exception:  # noqa: BLE001 - no kernel on this CPU: the key was asked first
                pass
            assert asked and asked[0] == want, (scheme, asked)
    finally:
        lin._get_linear_backend = real


def test_a_moe_flag_for_nvfp4_that_breaks_fp8_block_experts(parser, tmp_path):
    """The #40082 review, with block FP8: a MIXED_PRECISION checkpoint whose experts are NVFP4
    in two layers and FP8_PB_WO in the others. --moe-backend flashinfer_b12x suits the NVFP4
    experts; the plan says it breaks the fp8_block ones, and vLLM's own map_fp8_backend refuses
    it; the flag printed instead is one vLLM's NVFP4 and FP8 mappers both take, and it builds a
    VllmConfig."""
    from launch_fixtures import mixed_block_moe
    from vllm.model_executor.layers.fused_moe.oracle import fp8, nvfp4
    model = mixed_block_moe(tmp_path)
    sel = selector.load(["engine=vllm", "platform=rtx_pro_6000", "stack=vllm_0_33",
                         "policy.moe_backend=flashinfer_b12x"])
    lp = sel.launch_plan(model)
    (c,) = lp.conflicts
    assert c.flag == ("--moe-backend", "flashinfer_b12x")
    assert {b.group.scheme for b in c.breaks} == {"fp8_block"}
    assert all("map_fp8_backend" in b.source for b in c.breaks)
    with pytest.raises(ValueError):
        fp8.map_fp8_backend("flashinfer_b12x")
    nvfp4.map_nvfp4_backend("flashinfer_b12x")
    value = vllm_config(parser, model, list(lp.flags)).kernel_config.moe_backend
    assert value != "flashinfer_b12x"
    fp8.map_fp8_backend(value)
    nvfp4.map_nvfp4_backend(value)


@pytest.mark.parametrize("platform", ["b200", "h200"])
def test_one_layer_explain_prints_only_a_moe_backend_vllms_oracle_maps(platform):
    """Issue 44: every MoE backend a one-layer `explain engine=vllm` selects, over the schemes
    vLLM's oracles key and every catalogue backend requested by name: the `--moe-backend` value
    it prints is one vLLM 0.32.0's own mapper for the scheme takes (map_nvfp4_backend,
    map_fp8_backend, map_mxfp4_backend, mxfp8._BACKEND_NAME_MAP); where that mapper refuses the
    engine's name (its MXFP8 emulation, CUTLASS MXFP4 W4A4) no flag is printed and `no_flag`
    says why."""
    from selector.checkpoint.launch import _with_policy
    sel = selector.load(["engine=vllm", f"platform={platform}", "stack=vllm_0_32",
                         "layer=deepseek_moe", "policy.strict=false"])
    names = sel.catalogue.names("moe")
    printed, withheld = set(), set()
    for scheme in tables.VLLM_MOE_ACCEPTS:
        if scheme in ("unquantized", "fp8"):  # "fp8": the oracle's key, four layer schemes
            continue
        for name in names:
            d = _with_policy(sel, "moe", [name]).select(quant=scheme)
            e = d.engine
            if d.selected is None or e is None or e.backend is None:
                continue
            if e.flags:
                assert e.flags[0] == "--moe-backend" and not e.no_flag, e
                _map(scheme, e.flags[1])  # raises ValueError / KeyError if vLLM refuses it
                printed.add((scheme, e.flags[1]))
            else:
                with pytest.raises((ValueError, KeyError)):
                    _map(scheme, e.backend)
                assert f"--moe-backend {e.backend}" in e.no_flag, e
                withheld.add((scheme, e.backend))
    assert printed and len({s for s, _ in printed}) >= 6, printed
    if platform == "b200":  # selected there when requested; vLLM has no value for them
        assert {("mxfp8", "emulation"), ("mxfp4_w4a4", "cutlass")} <= withheld, withheld
