"""The launch plan's flags against vLLM's own argument parser and config validation: for the
repository's example checkpoints (and the mixed ones of tests/launch_fixtures.py) under several
platforms and parallel sizes, `EngineArgs.add_cli_args` parses the flags `explain --model ...
engine=vllm` prints, and `EngineArgs.create_engine_config()` builds a VllmConfig from them (no
weights are loaded) holding exactly the backends and sizes the plan asked for. Also: the tables
of selector/core/engine_flags.py equal what vLLM's own functions answer."""
from __future__ import annotations

import json
import sys
import typing
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from launch_fixtures import mixed_linear, mixed_moe  # noqa: E402

import selector  # noqa: E402
from selector.core import engine_flags as tables  # noqa: E402

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
    return [*EXAMPLES, mixed_moe(root), mixed_linear(root)]


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
        if "parallel.ep=8" in parallel and model.name == "mixed_linear":
            continue  # no experts: the plan refuses parallel.ep (tests/test_launch.py)
        lp = sel.launch_plan(model)
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
        # every NVFP4 MoE group's backend is one vLLM's NVFP4 oracle maps
        for g in lp.groups:
            if g.decision is not None and g.op == "moe" and g.engine_backend:
                from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import (
                    map_nvfp4_backend,
                )
                map_nvfp4_backend(g.engine_backend)


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
