"""Packaged measured profiles (selector/profiles/, `policy.preference=auto`, docs/tuning.md).

On the CPU, with the device simulated (a stand-in detector): a platform that matches a packaged
profile's machine key (GPU model, capability, CUDA, the measured machine's library versions)
ranks the usable backends by the nearest measured cell and names it ("measured on NVIDIA H100
80GB HBM3, packaged profile"); another GPU model, another library version, a platform preset or
`policy.preference=static` keep the static order; a cell that did not time a backend usable here
is not used."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

import selector
from selector.core import packaged_profiles as pp
from selector.core import profile as prof
from selector.inspect.environment import Environment, Gpu

GPU = "NVIDIA H100 80GB HBM3"
PKGS = {"torch": "2.11.0+cu130", "triton": "3.6.0"}
SHAPE = ["platform=auto", "layer=dense_linear", "layer.quant=fp8_block",
         "layer.hidden_size=5120", "layer.intermediate_size=10240"]


def detector(gpu=GPU, capability=(9, 0), cuda="13.0", packages=PKGS):
    def detect(names):
        got = {n: None for n in names}
        got.update({n: Version(v) for n, v in packages.items() if n in names})
        return Environment(capability, gpu, Version(cuda), got, Gpu(gpu, capability), "fake", ())
    return detect


def usable(sel, **layer):
    d = sel.select(**layer)
    return [c.backend for c in d.candidates if str(c.status) in ("selected", "eligible")], d


def write_profile(directory: Path, sel, cells, gpu=GPU):
    """A profile whose key is the simulated machine's (as `selector tune` writes one there)."""
    here = pp.here_key(sel.run_config)
    key = dict(here, gpu=gpu, driver="580.159.04", selector="0", packages=dict(
        here["packages"], **{"nvidia-ml-py": "13.580.82"}))
    layer = dict(sel.select(num_tokens=1).layer.to_dict())
    out = prof.Profile(key, tuple(prof.Cell(dict(layer, num_tokens=t, **shape), t, {
        b: prof.Timing(ms, ms * 0.95, ms * 1.05, 12) for b, ms in times.items()}, {})
        for shape, t, times in cells), {}, "2026-12-07T00:00:00Z")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "h100.json").write_text(out.dumps())


@pytest.fixture
def packaged(tmp_path, monkeypatch):
    monkeypatch.setattr(pp, "PROFILE_DIR", tmp_path / "profiles")
    return tmp_path / "profiles"


def test_a_matching_machine_ranks_by_the_nearest_packaged_cell_and_names_it(packaged):
    sel = selector.load(SHAPE, detect=detector())
    names, static = usable(sel, num_tokens=256)
    assert len(names) >= 2, names  # the simulated H100 with torch and triton: two FP8 kernels
    slow_first = {n: 0.1 * (i + 1) for i, n in enumerate(names)}  # the static order's times
    fast_last = {n: 0.1 * (len(names) - i) for i, n in enumerate(names)}
    K, N = {"hidden_size": 5120, "intermediate_size": 10240}, {"hidden_size": 8192,
                                                               "intermediate_size": 5120}
    write_profile(packaged, sel, [(K, 128, fast_last), (K, 4096, slow_first), (N, 128, slow_first)])
    auto = selector.load(SHAPE, detect=detector())
    assert auto.run_config.policy.preference == "auto"
    d = auto.select(num_tokens=256)  # bucket 256: the 128-token cell of the same shape stands
    assert d.selected == names[-1] != static.selected
    (n,) = d.notes_of("measured")
    assert str(n).startswith(f"measured on {GPU}, packaged profile: {names[-1]} ")
    assert "K=5120 N=10240 at the 128-token bucket" in str(n)
    assert n.data["packaged"] == GPU and not d.notes_of("preference")
    # 4,096 tokens: the cell there puts the static first first
    assert auto.select(num_tokens=3000).selected == names[0]
    # a shape never timed (K 6144 N 12288, 0.53 powers of two from the measured one: the nearest
    # shape's pick lost to the static order on the H100's held-out shapes, profile.NEAR_SIZE_STEPS)
    # and a bucket too far (8 tokens: 4 powers of two from 128): the static order
    plain = selector.load(SHAPE + ["policy.preference=static"], detect=detector())
    for layer in ({"num_tokens": 8}, {"num_tokens": 128, "hidden_size": 6144,
                                       "intermediate_size": 12288}):
        d = auto.select(**layer)
        assert d.selected == plain.select(**layer).selected and not d.notes_of("measured"), layer
    # the user's `static` preference, a platform preset: the static order
    assert plain.select(num_tokens=256).selected == static.selected
    preset = selector.load(["platform=h100"] + SHAPE[1:]).select(num_tokens=256)
    assert not preset.notes_of("measured")


@pytest.mark.parametrize("change", [dict(gpu="NVIDIA H200"), dict(capability=(9, 0), cuda="12.9"),
                                    dict(packages=dict(PKGS, torch="2.12.0+cu130")),
                                    dict(packages={"torch": PKGS["torch"]})])
def test_another_gpu_model_cuda_or_library_version_keeps_the_static_order(packaged, change):
    sel = selector.load(SHAPE, detect=detector())
    names, _ = usable(sel, num_tokens=128)
    write_profile(packaged, sel, [({}, 128, {n: 0.1 * (len(names) - i)
                                             for i, n in enumerate(names)})])
    assert selector.load(SHAPE, detect=detector()).select(num_tokens=128).notes_of("measured")
    other = selector.load(SHAPE, detect=detector(**change)).select(num_tokens=128)
    alone = selector.load(SHAPE + ["policy.preference=static"], detect=detector(**change))
    assert other.selected == alone.select(num_tokens=128).selected
    assert not other.notes_of("measured")


def test_a_cell_that_did_not_time_a_backend_usable_here_is_not_used(packaged):
    sel = selector.load(SHAPE, detect=detector())
    names, static = usable(sel, num_tokens=128)
    write_profile(packaged, sel, [({}, 128, {names[-1]: 0.01})])  # the others not timed
    d = selector.load(SHAPE, detect=detector()).select(num_tokens=128)
    assert d.selected == static.selected and not d.notes_of("measured")


def test_every_shipped_profile_is_used_on_its_own_machine_and_only_there():
    files = sorted(pp.PROFILE_DIR.glob("*.json"))
    assert files, "selector/profiles/ ships no profile"
    for f in files:
        p = prof.load(str(f))
        key = p.key
        pkgs = {n: v for n, v in key["packages"].items() if v is not None}
        cap = tuple(key["capability"])
        det = detector(key["gpu"], cap, key["cuda"], pkgs)
        cell = next(c for c in p.cells if len(c.times) >= 2)
        layer = {k: cell.layer[k] for k in ("quant", "hidden_size", "intermediate_size")}
        over = ["platform=auto", "layer=dense_linear", f"layer.quant={layer['quant']}"]
        d = selector.load(over, detect=det).select(op="linear", num_tokens=cell.tokens, **layer)
        (n,) = d.notes_of("measured")
        fastest = min(cell.times, key=lambda b: cell.times[b].median_ms)
        assert d.selected == fastest and f"measured on {key['gpu']}, packaged profile" in str(n)
        assert json.loads(f.read_text())["key"]["gpu"] == key["gpu"]
        other = selector.load(over, detect=detector("NVIDIA A100-SXM4-80GB", cap, key["cuda"],
                                                    pkgs)).select(op="linear",
                                                                  num_tokens=cell.tokens, **layer)
        assert not other.notes_of("measured")
