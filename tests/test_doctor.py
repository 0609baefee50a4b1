"""`selector doctor` over the real installed kernel stack and over throwaway broken packages.

- Real stack (skipped with a reason when flashinfer-python is not installed): one deep run per
  test session (module fixture; `import flashinfer` is the slow part), asserting facts of the
  installed versions read through importlib.metadata; and one run with triton made unimportable
  (a sitecustomize meta-path blocker), as on a CPU-only machine without triton.
- Throwaway packages (tests/doctor_fixtures.py) that raise on import, hang, call os._exit(3)
  or die of SIGSEGV, probed by test backends from a --config-dir: finding and exit code each.
- Without --deep: no kernel library imported, and fast.
"""
from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import subprocess
import sys
import time

import pytest
from doctor_fixtures import make_broken_packages, make_config_dir, make_dist, make_hider
from helpers import REPO, assert_clean_error, cli_env, run_cli, run_cli_many

import selector
from selector.commands.doctor import build_report, render_text
from selector.inspect import probing

pytestmark = pytest.mark.slow  # subprocess / fuzz suite: `pytest -m "not slow"` skips it


def _version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


FI = _version("flashinfer-python")
DSL = _version("nvidia-cutlass-dsl")
TRITON = _version("triton")
needs_flashinfer = pytest.mark.skipif(
    FI is None, reason="flashinfer-python is not installed: the real-stack doctor tests need "
    "the kernel stack (pip install -c constraints.txt -e '.[kernels]')")
FAKE_BACKENDS = {f"{n}_be": (n, [f"import:{n}:entry"]) for n in
                 ("fakeraise", "fakehang", "fakeexit", "fakesegv", "fakeok")}


@pytest.fixture(scope="module")
def fakes(tmp_path_factory):
    root = tmp_path_factory.mktemp("doctor")
    site = make_broken_packages(root / "site")
    cfg = make_config_dir(root / "conf", FAKE_BACKENDS)
    return site, cfg


# ---------------------------------------------------------------------------------------------
# The real stack, once

@pytest.fixture(scope="module")
def real():
    """doctor --deep in this process over the installed packages (probe results cached)."""
    if FI is None:
        pytest.skip("flashinfer-python is not installed")
    t0 = time.perf_counter()
    report = build_report([], [], deep=True, timeout=300)
    return report, time.perf_counter() - t0


@needs_flashinfer
def test_real_deep_report_versions_and_entry_points(real):
    report, _ = real
    d = json.loads(json.dumps(report.to_dict()))
    for name in ("flashinfer-python", "nvidia-cutlass-dsl", "torch", "triton"):
        assert d["packages"].get(name) == _version(name), name
    findings = {f["name"]: f for f in d["probes"]["findings"]}
    declared = probing.declared_by(selector.load(["platform=h200"]).catalogue)
    assert set(declared) <= set(findings), "a declared probe was not run"
    for name in declared:
        assert findings[name]["declared_by"] == declared[name]
    fi = tuple(int(x) for x in FI.split(".")[:3])
    for name in declared:
        if name.startswith("flashinfer."):
            assert findings[name]["status"] == "ok", findings[name]
    moe = findings["flashinfer.b12x_moe"]
    assert "b12x_fused_moe and B12xMoEWrapper importable" in moe["message"]
    assert moe["details"]["capabilities"] == [120, 121]
    gemm = findings["flashinfer.b12x_gemm"]["details"]["found"]["kernel"]
    want = "Sm120B12xBlockScaledDenseGemmKernel" if fi >= (0, 6, 10) else \
        "Sm120BlockScaledDenseGemmKernel"
    assert gemm.endswith(want)
    mm = findings["flashinfer.mm_fp4:b12x"]["details"]["backends"]
    assert mm["b12x"] == [120, 121] and {100, 120, 121} <= set(mm["cutlass"])
    assert findings["flashinfer.cute_dsl_sf_layout"]["details"]["shape"] == [32, 4, 1, 4, 1, 1]
    assert "cutlass_fused_moe" in findings["flashinfer.cutlass_moe"]["message"]
    assert "trtllm_fp4_block_scale_moe" in findings["flashinfer.trtllm_moe"]["message"]
    tri = findings["triton.importable"]
    assert tri["status"] == "ok" and tri["details"]["module_version"] == TRITON
    wc = findings["cutlass_dsl.wheel_collision"]
    assert wc["details"]["wheels"]["nvidia-cutlass-dsl"] == DSL
    if tuple(int(x) for x in DSL.split(".")[:2]) >= (4, 6):
        assert wc["status"] == "ok", wc
    if _version("b12x") is None and fi >= (0, 7, 4):
        sh = findings["b12x.module_shadowing"]
        assert sh["status"] == "warning" and sh["details"]["owners"] == {"flashinfer-python": FI}
    assert d["exit_code"] == 0 and d["problems"] == []


@needs_flashinfer
def test_real_deep_report_times_each_import(real):
    report, _ = real
    d = report.to_dict()
    imports = {(i["group"], i["library"]): i for i in d["probes"]["imports"]}
    for key in (("torch", "torch"), ("torch", "flashinfer"), ("triton", "triton")):
        assert imports[key]["ok"] and imports[key]["seconds"] > 0, imports.get(key)
    assert imports[("torch", "flashinfer")]["version"] == FI
    text = render_text(report)
    assert "deep probes (" in text and "import torch " in text and " flashinfer " in text
    assert "OK       flashinfer.b12x_moe" in text
    assert "exit status 0: nothing wrong found" in text


@needs_flashinfer
def test_real_deep_verdicts_cover_the_catalogue(real):
    report, _ = real
    cat = selector.load(["platform=h200"]).catalogue
    got = {(b.op, b.backend) for b in report.backends}
    assert got == {(op, b.name) for op, bs in cat.backends.items() for b in bs}
    for b in report.backends:
        assert b.verdict in ("could run", "could run (opt-in only)", "cannot run")
        assert all(status != "not run" for _, status, _ in b.probes)
    emu = [b for b in report.backends if b.backend == "emulation"]
    assert emu and all(b.verdict == "could run" for b in emu)


@needs_flashinfer
@pytest.mark.skipif(TRITON is None, reason="triton is not installed")
def test_without_triton_the_b12x_moe_entry_points_are_absent(tmp_path):
    hider = make_hider(tmp_path / "hide", "triton")
    r = run_cli("doctor", "--format", "json", "--probe", "flashinfer.b12x_moe", "--probe",
                "flashinfer.cute_dsl_moe", "--probe", "flashinfer.cutlass_moe", "--probe",
                "flashinfer.b12x_gemm", "--probe", "triton.importable", env=cli_env(hider),
                timeout=300)
    assert r.returncode == 1, r.stderr
    d = r.json
    f = {x["name"]: x for x in d["probes"]["findings"]}
    for name in ("flashinfer.b12x_moe", "flashinfer.cute_dsl_moe"):
        assert f[name]["status"] == "failed"
        assert "importing flashinfer.fused_moe.cute_dsl fails with ModuleNotFoundError: No " \
               "module named 'triton'" in f[name]["message"]
        assert f"triton {TRITON} is installed but `import triton` fails" in f[name]["message"]
    assert "b12x_fused_moe and B12xMoEWrapper are absent" in f["flashinfer.b12x_moe"]["message"]
    assert f["flashinfer.cutlass_moe"]["status"] == "ok"
    assert f["flashinfer.b12x_gemm"]["status"] == "ok"  # the dense GEMM does not need triton
    assert f["triton.importable"]["status"] == "failed"
    b12x = next(b for b in d["backends"] if (b["op"], b["backend"]) == ("moe", "flashinfer_b12x"))
    features = [x["message"] for x in b12x["reasons"] if x["rule"] == "probe"]
    assert any(m.startswith("deep probe flashinfer.b12x_moe failed: ") for m in features)
    assert any(m.startswith("deep probe triton.importable failed: ") for m in features)
    assert b12x["verdict"] == "cannot run"
    assert any(p.startswith("probe flashinfer.b12x_moe failed") for p in d["problems"])


@needs_flashinfer
def test_explain_probe_deep_turns_a_failed_probe_into_a_feature_rejection(real, fakes,
                                                                          monkeypatch, tmp_path):
    site, _ = fakes
    cfg = make_config_dir(tmp_path / "conf", {"fakeraise_be": FAKE_BACKENDS["fakeraise_be"]})
    monkeypatch.syspath_prepend(str(site))  # the probe child gets this process's sys.path
    importlib.invalidate_caches()
    sel = selector.load(["probe=deep", "platform=dgx_spark", "stack=flashinfer_0_7_4",
                         "layer=nemotron_moe", "platform.packages.fakeraise=1.0",
                         "policy.moe_backend=fakeraise_be"], config_dirs=[cfg])
    d = sel.default()
    c = d.candidate("fakeraise_be")
    assert c.status == "rejected" and d.selected is None
    assert [(r.rule, r.message) for r in c.reasons] == [
        ("probe", "deep probe import:fakeraise:entry failed: import fakeraise failed: "
                    "RuntimeError: fakeraise is broken on purpose (raised at "
                    "fakeraise/__init__.py:1)")]
    # the real probes passed (the session cache of the deep run above): b12x is opt-in, not
    # rejected, on this SM 12.1 preset
    assert d.candidate("flashinfer_b12x").status == "opt_in"
    assert d.candidate("flashinfer_cutlass").status == "eligible"


# ---------------------------------------------------------------------------------------------
# Throwaway broken packages: finding and exit code for each

CASES = {  # probe -> (exit code, status, message start)
    "import:fakeraise:entry": (1, "failed", "import fakeraise failed: RuntimeError: fakeraise "
                               "is broken on purpose (raised at fakeraise/__init__.py:1)"),
    "import:fakehang:entry": (1, "failed", "timed out after 2 s (the probe process was killed) "
                              "while importing fakehang"),
    "import:fakeexit:entry": (1, "failed", "the probe process exited with status 3 while "
                              "importing fakeexit"),
    "import:fakesegv:entry": (1, "failed", "the probe process was killed by SIGSEGV (exit "
                              "status -11) while importing fakesegv"),
    "import:fakeok:entry": (0, "ok", "fakeok.entry present (function)"),
    "import:fakemissing": (0, "skipped", "skipped: fakemissing not installed"),
}


@pytest.fixture(scope="module")
def broken_runs(fakes):
    site, cfg = fakes
    argvs = [("doctor", "--format", "json", "--config-dir", str(cfg), "--timeout", "2",
              "--probe", probe) for probe in CASES]
    argvs.append(("doctor", "--config-dir", str(cfg), "--timeout", "2",
                  "--probe", "import:fakeraise:entry"))  # the text form
    runs = run_cli_many(argvs, env=cli_env(site))
    return dict(zip(list(CASES) + ["text"], runs))


@pytest.mark.parametrize("probe", list(CASES))
def test_broken_package_finding_and_exit_code(broken_runs, probe):
    r = broken_runs[probe]
    code, status, message = CASES[probe]
    assert r.returncode == code, (r.stdout[-2000:], r.stderr)
    assert "Traceback" not in r.stderr
    d = r.json
    (f,) = d["probes"]["findings"]
    assert (f["name"], f["status"], f["message"][:len(message)]) == (probe, status, message)
    if probe == "import:fakemissing":
        return
    name = probe.split(":")[1] + "_be"
    be = next(b for b in d["backends"] if b["backend"] == name)
    assert be["probes"] == [{"name": probe, "status": status, "message": f["message"]}]
    if code:
        assert be["verdict"] == "cannot run"
        assert be["reasons"][-1] == {"rule": "probe", "message": f"deep probe {probe} failed: "
                                     f"{f['message']}", "source": f"selector doctor --deep "
                                     f"(probe {probe})"}
        assert d["problems"] == [f"probe {probe} failed: {f['message']}"]
    else:
        assert be["verdict"] == "could run" and d["problems"] == []


def test_broken_package_text_report(broken_runs):
    r = broken_runs["text"]
    assert r.returncode == 1
    assert "FAILED   import:fakeraise:entry  import fakeraise failed: RuntimeError" in r.stdout
    assert "(declared by moe/fakeraise_be)" in r.stdout
    assert "import fakeraise 0." in r.stdout and "FAILED (RuntimeError" in r.stdout
    assert r.stdout.rstrip().endswith("exit status 1: a problem was found")


def test_cutlass_dsl_wheel_collision_is_found(tmp_path):
    site = tmp_path / "site"
    rel = "nvidia_cutlass_dsl/python_packages/cutlass/cute/nvgpu/warp/mma.py"
    make_dist(site, "nvidia-cutlass-dsl", "4.5.0", {})
    make_dist(site, "nvidia-cutlass-dsl-libs-base", "4.5.0", {rel: b"cu13"}, {rel: b"base"})
    make_dist(site, "nvidia-cutlass-dsl-libs-cu13", "4.5.0", {rel: b"cu13"}, {rel: b"cu13"})
    deep, plain = run_cli_many([("doctor", "--format", "json", "--probe",
                                 "cutlass_dsl.wheel_collision"),
                                ("doctor", "--format", "json")], env=cli_env(site))
    assert deep.returncode == 1, deep.stderr
    (f,) = deep.json["probes"]["findings"]
    assert f["status"] == "failed" and "1 match nvidia-cutlass-dsl-libs-cu13" in f["message"]
    # metadata alone already sees the known-bad combination through the catalogue
    assert plain.returncode == 1, plain.stderr
    assert plain.json["probes"] is None
    assert any(p.startswith("known issue: nvidia-cutlass-dsl 4.4.x-4.5.x with both -libs-base "
                            "and -libs-cu13") for p in plain.json["problems"])


# ---------------------------------------------------------------------------------------------
# Without --deep; bad input

def test_doctor_without_deep_imports_nothing():
    """Metadata only: no kernel library, torch or Hydra (its speed is benchmarks' to show)."""
    code = ("import io, json, sys; from selector.commands.doctor import run_doctor\n"
            "buf = io.StringIO()\n"
            "rc = run_doctor([], [], fmt='json', stream=buf)\n"
            "run_doctor([], [], fmt='text', stream=io.StringIO())\n"
            "bad = sorted(m for m in ('torch', 'flashinfer', 'triton', 'cutlass', 'hydra') "
            "if m in sys.modules)\n"
            "print(json.dumps({'rc': rc, 'bad': bad, 'report': json.loads(buf.getvalue())}))\n")
    env = cli_env()
    subprocess.run([sys.executable, "-c", "from selector.commands.doctor import run_doctor; "
                    "import io; run_doctor([], [], stream=io.StringIO())"], cwd=str(REPO),
                   env=env, check=True, timeout=120)  # warm the composed-config cache
    out = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bad"] == [], "doctor without --deep imported " + ", ".join(res["bad"])
    d = res["report"]
    assert d["deep"] is False and d["probes"] is None
    assert d["packages"].get("flashinfer-python") == FI
    assert d["packages"].get("nvidia-cutlass-dsl") == DSL
    assert set(d["platform"]["how"]) == {"gpu", "cuda", "packages"}
    assert all(p["status"] == "not run" for b in d["backends"] for p in b["probes"])
    assert res["rc"] == d["exit_code"]


@pytest.mark.parametrize("argv, needle", [
    (("--probe", "flashinfer.b12x_mo"), "did you mean 'flashinfer.b12x_moe'"),
    (("--timeout", "0"), "--timeout: '0' is not accepted: a timeout is a number of seconds"),
])
def test_doctor_bad_input(argv, needle):
    assert_clean_error(run_cli("doctor", *argv), needle)


def test_doctor_unknown_probe_in_a_backend_file(tmp_path):
    cfg = make_config_dir(tmp_path / "conf", {"odd_be": ("fakeok", ["flashinfer.b12x_moee"])})
    assert_clean_error(run_cli("doctor", "--config-dir", str(cfg)),
                       "catalogue.moe.odd_be.probes: unknown probe 'flashinfer.b12x_moee'")
