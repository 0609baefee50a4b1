"""Tests written against the mutation survivors of backends/children/ (issue 48; docs/guarantees.md,
"Every module, sharded"): the verify and tune children's helpers called in this process, so that a
one-token change to them fails here and not only in a child process the mutation tool's trace
does not see (tests/test_verify.py and tests/test_tune.py run the children, slow-marked). On the
CPU, quick."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from selector.backends.children import tune_child, verify_child  # noqa: E402
from selector.backends.children import verify_measures as VM  # noqa: E402
from selector.backends.children import verify_problems as VP  # noqa: E402
from selector.inspect.verify_cases import Case  # noqa: E402

# ---------------------------------------------------------------------------------------------
# tune_child: the bytes of a prepared weight, the memory bound, one case on the CPU

LINEAR = {"op": "linear", "quant": "nvfp4", "dtype": "bfloat16", "num_tokens": 4,
          "hidden_size": 64, "intermediate_size": 32}


def test_tensor_bytes_counts_each_storage_once():
    a = torch.zeros(16, dtype=torch.float32)  # 64 bytes
    b = torch.zeros(8, dtype=torch.uint8)  # 8 bytes
    assert tune_child.tensor_bytes({"a": a, "again": a, "view": a[4:], "list": [b, (b,)]}) == 72
    assert tune_child.tensor_bytes([a, b, None, "x"]) == 72


def test_check_fits_on_the_cpu_takes_the_bound_only():
    cpu = torch.device("cpu")
    tune_child._check_fits("linear", LINEAR, cpu, 0)  # no bound: nothing to refuse on the CPU
    tune_child._check_fits("linear", LINEAR, cpu, 1 << 40)
    with pytest.raises(tune_child.TooLarge, match="--max-memory"):
        tune_child._check_fits("linear", LINEAR, cpu, 1)


def test_run_case_without_a_memory_bound_times_the_case():
    spec = {"op": "linear", "backend": "emulation", "overrides": [], "config_dirs": [],
            "entry_point": "selector.backends.wrappers.emulation:EmulationLinear",
            "warmup": 1, "repeats": 2, "budget_s": 5.0}
    r = tune_child.run_case(spec, {"id": "c", "layer": LINEAR})
    assert r["device"] == "cpu" and r["copies"] == 1 and len(r["samples_ms"]) >= 1
    assert r["weight_bytes"] > 0


# ---------------------------------------------------------------------------------------------
# verify_child: each op's problem, the reference settings per backend


def test_problem_of_a_linear_case_is_a_linear_problem():
    case = Case("linear", "nvfp4", reference_quant="nvfp4")
    inputs, ref, parts, settings, extras = verify_child.problem(
        {"op": "linear", "backend": "emulation"}, case.spec(0))
    x, w = inputs
    assert tuple(x.shape) == (67, 256) and tuple(ref.shape) == (67, 256)
    assert parts is None and extras is None and settings == {}


def test_the_reference_settings_of_each_flashinfer_nvfp4_moe():
    """b12x re-quantizes FC2's input with global scale 1 (vLLM #40082); CUTLASS, CuTe-DSL and
    TRT-LLM take the largest of the checkpoint's FC2 input scales (one for all experts)."""
    got = verify_child.REFERENCE_SETTINGS
    assert got[("moe", "flashinfer_b12x", "nvfp4")] == {"fc2_input_scale": 1.0}
    for name in ("flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_trtllm"):
        assert got[("moe", name, "nvfp4")] == {"fc2_input_scale": "max"}
    assert all(len(k) == 3 for k in got)


# ---------------------------------------------------------------------------------------------
# verify_problems: the FP8 MoE problem, moving weights to a device


def test_the_fp8_moe_problem_is_built_and_moved_whole():
    case = Case("moe", "fp8_tensor", activation="silu", act_and_mul=True,
                reference_quant="fp8_tensor")
    x, w, tw, ti = verify_child.problem({"op": "moe", "backend": "torch_grouped_fp8"},
                                        case.spec(0))[0]
    assert type(w).__name__ == "Fp8MoEWeights"
    assert w.a2_scale is not None and tuple(w.a2_scale.shape) == (16,)
    moved = VP._moe_to(w, "cpu")
    assert type(moved).__name__ == "Fp8MoEWeights" and moved.quant == w.quant
    from selector.backends.formats.nvfp4 import MoEWeights, quantize_moe
    nv = quantize_moe(torch.randn(2, 64, 64), torch.randn(2, 64, 32), torch.tensor(1e-3),
                      torch.tensor([1e-2, 2e-2]))
    moved = VP._moe_to(nv, "cpu")
    assert type(moved) is MoEWeights and torch.equal(moved.a2_scale, nv.a2_scale)


# ---------------------------------------------------------------------------------------------
# verify_measures: the activation's derivative, the whole output's gain


def test_activation_partials_are_the_derivative():
    h = torch.randn(3, 8, dtype=torch.float64)
    a, d = VM._act_partials(h, "relu2", False, None)
    assert torch.allclose(a, torch.relu(h) ** 2)
    assert torch.allclose(d, 2 * torch.relu(h))


def test_global_gain_of_a_small_output():
    ref = torch.full((4,), 0.1, dtype=torch.float64)  # <ref, ref> = 0.04, under 1
    assert VM.global_gain(2 * ref, ref) == pytest.approx(2.0)
    assert VM.global_gain(ref, torch.zeros(4)) == 1.0
