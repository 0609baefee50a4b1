"""Entry points: they resolve, gate on the selector, reuse ``out``, and never fake a kernel.

The FlashInfer ``apply`` tests run the real FlashInfer kernel against the reference where the
selector (``platform=auto``) says the backend is usable, and skip with the selector's reasons
elsewhere (on a machine without SM100/SM120: every one of them). The gating tests check that a
rejected backend raises BackendUnavailable carrying every reason, and that an eligible one passes
the gate.
"""
import importlib
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from selector.backends.formats import nvfp4 as nv  # noqa: E402
from selector.backends.reference import route  # noqa: E402
from selector.backends.wrappers._base import BackendUnavailable, ExternalKernelMixin, decide  # noqa: E402
from selector.backends.wrappers.emulation import EmulationLinear, EmulationMoE  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _catalogue_entry_points():
    """op -> {backend: entry point} as the packaged catalogue names them (no list written here)."""
    import selector
    cat = selector.load(["platform=cpu"]).catalogue
    return {op: {b.name: b.entry_point for b in backends} for op, backends in cat.backends.items()}


def resolve(entry_point):
    mod, cls = entry_point.split(":")
    return getattr(importlib.import_module(mod), cls)


ENTRY_POINTS = _catalogue_entry_points()
MOE_ENTRY_POINTS, LINEAR_ENTRY_POINTS = ENTRY_POINTS["moe"], ENTRY_POINTS["linear"]
# the NVFP4 FlashInfer wrappers (the FP8 ones, backends/wrappers/flashinfer_fp8.py: tests/test_flashinfer_fp8.py)
FLASHINFER_MOE = [b for b, ep in MOE_ENTRY_POINTS.items()
                  if ".flashinfer_" in ep and ".flashinfer_fp8:" not in ep]
FLASHINFER_LINEAR = [b for b, ep in LINEAR_ENTRY_POINTS.items()
                     if ".flashinfer_" in ep and ".flashinfer_fp8:" not in ep]
EXTERNAL = [(op, b) for op, eps in ENTRY_POINTS.items() for b, ep in eps.items()
            if issubclass(resolve(ep), ExternalKernelMixin)]

E, H, I, T, TOPK = 8, 256, 128, 16, 2


def _selector_or_skip():
    try:
        import selector  # noqa: F401
        selector.load(overrides=["platform=auto"])
    except Exception as exc:  # pragma: no cover - only while selector/ is being written
        pytest.skip(f"selector not usable: {exc}")


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def _moe(device, seed=0, gated=True):
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, (2 if gated else 1) * I, H, generator=g) / math.sqrt(H) * 20
    w2 = torch.randn(E, H, I, generator=g) / math.sqrt(I) * 20
    x = torch.randn(T, H, generator=g).bfloat16()
    W = nv.quantize_moe(w13, w2, nv.activation_scale_from_amax(x.float()), torch.full((E,), 0.05))
    tw, ti = route(torch.randn(T, E, generator=g), TOPK)
    return W.w13.to(device), W, x.to(device), tw.to(device), ti.to(device)


def _moe_to(W, device):
    def f(t):
        return None if t is None else t.to(device)
    return nv.MoEWeights(W.w13.to(device), W.w2.to(device), f(W.a13_scale), f(W.a2_scale))


def _linear(device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).bfloat16()
    lw = nv.quantize_linear(torch.randn(384, H, generator=g), input_scale=nv.activation_scale_from_amax(x.float()))
    return nv.LinearWeights(lw.weight.to(device), lw.input_scale.to(device)), x.to(device)


def _moe_layer(x, activation="silu", gated=True):
    return dict(quant="nvfp4", activation=activation, act_and_mul=gated, ep_size=1,
                dtype="bfloat16", num_tokens=int(x.shape[0]), hidden_size=H,
                intermediate_size=I, num_experts=E, top_k=TOPK, swiglu_limit=None)


def _linear_layer(x):
    return dict(quant="nvfp4", dtype="bfloat16", num_tokens=int(x.shape[0]), hidden_size=H)


def _reasons(cand):
    return "; ".join(f"[{r.rule}] {r.message} ({r.source})" for r in cand.reasons)


def _usable_or_skip(op, backend, layer):
    d = decide(op, layer, ["platform=auto"])
    c = d.candidate(backend)
    if c.status not in ("selected", "eligible", "opt_in"):
        pytest.skip(f"{backend} {c.status} here: {_reasons(c)}")
    return d


# ------------------------------------------------------------------------------------------------
# entry points
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,backend", [(op, b) for op, eps in ENTRY_POINTS.items() for b in eps])
def test_entry_point_resolves_to_a_class_with_prepare_and_apply(op, backend):
    cls = resolve(ENTRY_POINTS[op][backend])
    assert callable(cls.prepare) and callable(cls.apply)
    assert cls.backend == backend and cls.op == op
    assert "out" in __import__("inspect").signature(cls.apply).parameters


@pytest.mark.slow
def test_importing_every_backend_module_imports_neither_torch_nor_flashinfer():
    mods = sorted({ep.split(":")[0] for eps in ENTRY_POINTS.values() for ep in eps.values()})
    code = ("import sys, importlib\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "import selector.backends\n"
            "print(sorted(k for k in ('torch', 'flashinfer', 'triton', 'cutlass') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------------
# FlashInfer apply paths: real kernels where the selector allows them, skipped elsewhere
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", FLASHINFER_MOE)
def test_flashinfer_moe_apply_matches_the_reference(backend):
    _selector_or_skip()
    dev = _device()
    _, W, x, tw, ti = _moe(dev)
    d = _usable_or_skip("moe", backend, _moe_layer(x))
    impl = resolve(MOE_ENTRY_POINTS[backend])(activation="silu", decision=d)
    p = impl.prepare(_moe_to(W, dev))
    out = torch.empty_like(x)
    y = impl.apply(x, p, tw, ti, out=out)
    assert y.data_ptr() == out.data_ptr()
    emu = EmulationMoE(activation="silu", fc2_input_scale=1.0 if backend == "flashinfer_b12x" else None)
    ref = emu.apply(x, emu.prepare(_moe_to(W, dev)), tw, ti).float()
    err = float((y.float() - ref).norm() / ref.norm())
    assert err < 0.05, err


@pytest.mark.parametrize("backend", FLASHINFER_LINEAR)
def test_flashinfer_linear_apply_matches_the_reference(backend):
    _selector_or_skip()
    dev = _device()
    lw, x = _linear(dev)
    d = _usable_or_skip("linear", backend, _linear_layer(x))
    impl = resolve(LINEAR_ENTRY_POINTS[backend])(decision=d)
    out = torch.empty(T, 384, dtype=torch.bfloat16, device=dev)
    y = impl.apply(x, impl.prepare(lw), out=out)
    assert y.data_ptr() == out.data_ptr()
    emu = EmulationLinear()
    ref = emu.apply(x, emu.prepare(lw)).float()
    assert float((y.float() - ref).norm() / ref.norm()) < 0.02


# ------------------------------------------------------------------------------------------------
# the gate
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,backend", [("moe", b) for b in FLASHINFER_MOE]
                         + [("linear", b) for b in FLASHINFER_LINEAR])
def test_rejected_flashinfer_backend_raises_at_prepare_with_every_selector_reason(op, backend):
    _selector_or_skip()
    if op == "moe":
        _, payload, x, tw, ti = _moe("cpu")
        layer = _moe_layer(x)
        impl = resolve(ENTRY_POINTS[op][backend])(activation="silu", top_k=TOPK, num_tokens=T)
    else:
        payload, x = _linear("cpu")
        layer = _linear_layer(x)
        impl = resolve(ENTRY_POINTS[op][backend])(num_tokens=T)
    cand = decide(op, layer, ["platform=auto"]).candidate(backend)
    if cand.status in ("selected", "eligible", "opt_in"):
        pytest.skip(f"{backend} is usable here; the rejection path is not reachable")
    if backend == "flashinfer_trtllm":
        pytest.importorskip("flashinfer")          # its prepare uses FlashInfer's index helpers
    with pytest.raises(BackendUnavailable) as exc:
        impl.prepare(payload)
    assert cand.reasons, "a rejected candidate must carry reasons"
    msg = str(exc.value)
    for r in cand.reasons:
        assert r.rule in msg and r.message in msg and r.source in msg
    assert exc.value.reasons == [(r.rule, r.message, r.source) for r in cand.reasons]
    assert exc.value.status == cand.status


RTX_5090 = ["platform=rtx_5090", "stack=flashinfer_0_7_4"]


def test_gate_lets_an_eligible_or_opt_in_backend_through():
    _selector_or_skip()
    from selector.backends.wrappers.flashinfer_b12x import B12xMoE
    from selector.backends.wrappers.flashinfer_cutlass import CutlassLinear
    _, W, x, tw, ti = _moe("cpu")
    moe = B12xMoE(activation="silu", top_k=TOPK, selector_overrides=RTX_5090)
    p = moe.prepare(W)
    c = moe.gate(p.geometry)
    assert c.backend == "flashinfer_b12x" and c.status == "opt_in"
    lw, xl = _linear("cpu")
    lin = CutlassLinear(selector_overrides=RTX_5090)
    assert lin.gate(lin.prepare(lw).geometry).status in ("selected", "eligible")
    # the same layer on a platform without SM 12.x is refused when the weights are prepared,
    # with the device rule among the reasons
    with pytest.raises(BackendUnavailable) as exc:
        B12xMoE(activation="silu", selector_overrides=["platform=h200", "stack=flashinfer_0_7_4"]
                ).prepare(W)
    assert any(rule == "device" for rule, _, _ in exc.value.reasons)


def test_gate_describes_the_layer_from_the_constructor_and_the_weights():
    from selector.backends.wrappers.flashinfer_b12x import B12xMoE
    _, W, x, tw, ti = _moe("cpu")
    moe = B12xMoE(activation="silu", top_k=TOPK, num_tokens=T, dtype="float16")
    assert moe.layer_spec({"num_experts": E, "hidden_size": H, "intermediate_size": I,
                           "act_and_mul": True}) == _moe_layer(x) | {"dtype": "float16"}
    # bf16 only: a float16 layer is refused by the dtype rule
    with pytest.raises(BackendUnavailable) as exc:
        B12xMoE(activation="silu", dtype="float16", selector_overrides=RTX_5090).prepare(W)
    assert [rule for rule, _, _ in exc.value.reasons] == ["dtype"]


def test_gate_runs_once_at_prepare_and_not_on_apply(monkeypatch):
    """Load time decides; apply never asks the selector again (docs/architecture.md)."""
    _selector_or_skip()
    import selector.backends.wrappers._base as base
    from selector.backends.wrappers.flashinfer_cutlass import CutlassLinear
    asked = []
    real = base.decide
    monkeypatch.setattr(base, "decide", lambda *a: asked.append(a) or real(*a))
    lw, x = _linear("cpu")
    lin = CutlassLinear(selector_overrides=RTX_5090)
    p = lin.prepare(lw)
    assert len(asked) == 1
    with pytest.raises(Exception) as exc:  # no FlashInfer kernel on this CPU: it fails in the kernel
        lin.apply(x, p, out=torch.empty(T, 384, dtype=torch.bfloat16))
    assert not isinstance(exc.value, BackendUnavailable)
    assert len(asked) == 1


def test_gate_uses_the_decision_it_is_given_when_built():
    _selector_or_skip()
    from selector.backends.wrappers.flashinfer_b12x import B12xMoE
    _, W, x, tw, ti = _moe("cpu", gated=False)
    # a gated relu2 layer: b12x serves relu2 only non-gated, so the act_and_mul rule fires
    moe = B12xMoE(activation="relu2", act_and_mul=True, selector_overrides=RTX_5090)
    with pytest.raises(BackendUnavailable) as exc:
        moe.gate(layer=_moe_layer(x, "relu2", gated=True))
    assert any(rule == "act_and_mul" for rule, _, _ in exc.value.reasons)
    d = decide("moe", _moe_layer(x, "relu2", gated=False), RTX_5090)
    assert B12xMoE(activation="relu2", decision=d).gate().status == "opt_in"
    # a decision that rejects the backend refuses it when the object is built
    rejected = decide("moe", _moe_layer(x, "relu2", gated=True), RTX_5090)
    with pytest.raises(BackendUnavailable) as exc:
        B12xMoE(activation="relu2", decision=rejected)
    assert any(rule == "act_and_mul" for rule, _, _ in exc.value.reasons)


@pytest.mark.parametrize("op,backend", EXTERNAL)
def test_external_kernel_backends_name_the_missing_distribution(op, backend):
    _selector_or_skip()
    from selector.backends.wrappers._base import missing_distributions
    cls = resolve(ENTRY_POINTS[op][backend])
    if len(missing_distributions(cls.needs_any)) < len(cls.needs_any):
        pytest.skip(f"one of {cls.needs_any} is installed here")
    payload = _moe("cpu")[1] if op == "moe" else _linear("cpu")[0]
    # a platform where the selector itself would allow the backend (vLLM stack on B200 / RTX 5090)
    plat = "platform=rtx_5090" if backend == "b12x" else "platform=b200"
    for over in (["platform=auto"], [plat, "stack=vllm_0_32"]):
        with pytest.raises(BackendUnavailable) as exc:
            cls(activation="silu", selector_overrides=over).prepare(payload)
        msg = str(exc.value)
        for dist in cls.needs_any:
            assert repr(dist) in msg and "not installed" in msg


def test_emulation_entry_points_accept_out_and_never_reallocate():
    _, W, x, tw, ti = _moe("cpu")
    moe = resolve(MOE_ENTRY_POINTS["emulation"])(activation="silu")
    p = moe.prepare(W)
    out = torch.empty_like(x)
    ptrs = {moe.apply(x, p, tw, ti, out=out).data_ptr() for _ in range(3)}
    assert ptrs == {out.data_ptr()}
    lw, xl = _linear("cpu")
    lin = resolve(LINEAR_ENTRY_POINTS["emulation"])()
    o = torch.empty(T, 384, dtype=torch.bfloat16)
    assert lin.apply(xl, lin.prepare(lw), out=o) is o
