"""The deep probes (backends/children/probes) and their runner (selector/inspect/probing.py), without the CLI.

Fast: the metadata probes run on throwaway dist-info dirs, and the child-process runner on
throwaway packages (a child that imports a small module takes a fraction of a second). The
real flashinfer import is exercised once, in test_doctor.py.
"""
from __future__ import annotations

import importlib
import importlib.metadata as md
import sys
from types import SimpleNamespace

import pytest
from doctor_fixtures import make_broken_packages, make_dist
from helpers import REPO, cli_env, load

from selector import SelectorError
from selector.backends.children.probes import _util, metadata_probes
from selector.core import probe_specs as registry
from selector.inspect import probing


@pytest.fixture(autouse=True)
def _fresh_cache():
    probing.clear_cache()
    yield
    probing.clear_cache()


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """The throwaway packages, first on this process's sys.path (the child gets the same)."""
    site = make_broken_packages(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return site


# ---------------------------------------------------------------------------------------------
# The registry

def test_every_probe_the_catalogue_declares_is_implemented():
    cat = load("platform=h200").catalogue
    declared = probing.declared_by(cat)
    assert declared, "the packaged catalogue declares no probes"
    for name, users in declared.items():
        spec = registry.resolve(name)
        assert spec is not None, f"{name} (declared by {users}) has no probe"
        mod, _, fn = spec.func.partition(":")
        assert callable(getattr(importlib.import_module(mod), fn)), spec.func


def test_issue_probe_names_exist():
    for name in ("flashinfer.b12x_moe", "flashinfer.b12x_gemm", "flashinfer.cutlass_moe",
                 "flashinfer.trtllm_moe", "flashinfer.cute_dsl_moe", "flashinfer.mm_fp4",
                 "flashinfer.cute_dsl_sf_layout", "cutlass_dsl.wheel_collision",
                 "b12x.module_shadowing", "triton.importable"):
        assert name in registry.PROBES


def test_resolve_generic_and_parameterised_names():
    s = registry.resolve("import:pkg.sub:Thing.attr")
    assert (s.group, s.module, s.arg, s.imports) == ("import:pkg", "pkg", "pkg.sub:Thing.attr",
                                                      ("pkg.sub",))
    assert registry.resolve("import:json").arg == "json"
    m = registry.resolve("flashinfer.mm_fp4:b12x")
    assert (m.arg, m.group) == ("b12x", "torch")
    for bad in ("import:", "import:1abc", "import:a b", "flashinfer.b12x_moe:x", "nope", None):
        assert registry.resolve(bad) is None, bad


def test_unknown_probe_name_is_bad_input_with_a_suggestion():
    with pytest.raises(SelectorError) as e:
        probing.validate_names(["flashinfer.b12x_mo"])
    assert "unknown probe 'flashinfer.b12x_mo'" in str(e.value)
    assert "did you mean 'flashinfer.b12x_moe'" in str(e.value)
    cat = SimpleNamespace(backends={"moe": (SimpleNamespace(name="x", probes=("bogus",)),)})
    with pytest.raises(SelectorError, match=r"catalogue\.moe\.x\.probes: unknown probe 'bogus'"):
        probing.run_deep_probes(cat)


@pytest.mark.slow
def test_importing_the_registry_imports_no_kernel_library():
    code = ("import sys, selector.core.probe_specs, selector.inspect.probing, selector.commands.doctor; "
            "print(sorted(m for m in ('torch', 'flashinfer', 'triton', 'cutlass') "
            "if m in sys.modules))")
    import subprocess
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=str(REPO), env=cli_env()).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# cutlass_dsl.wheel_collision (RECORD hashes, no import)

def _dsl(site, version, base: bytes, cu13: bytes, on_disk: bytes, cu13_version=None):
    rel = "nvidia_cutlass_dsl/python_packages/cutlass/cute/nvgpu/warp/mma.py"
    make_dist(site, "nvidia-cutlass-dsl", version, {})
    make_dist(site, "nvidia-cutlass-dsl-libs-base", version, {rel: on_disk}, {rel: base})
    make_dist(site, "nvidia-cutlass-dsl-libs-cu13", cu13_version or version, {rel: on_disk},
              {rel: cu13, "nvidia_cutlass_dsl/cu13/lib/x.so": b"x"})
    return rel


def test_wheel_collision_found_from_record_hashes(tmp_path):
    rel = _dsl(tmp_path, "4.5.0", b"base variant", b"cu13 variant", on_disk=b"base variant")
    r = metadata_probes.wheel_collision(None, {"path": [str(tmp_path)]})
    assert r["status"] == "failed", r
    msg = r["message"]
    assert "nvidia-cutlass-dsl-libs-base 4.5.0 and nvidia-cutlass-dsl-libs-cu13 4.5.0" in msg
    assert "1 same-path files with different content" in msg and rel in msg
    assert "1 match nvidia-cutlass-dsl-libs-base" in msg  # the base wheel won on disk
    assert "CUTLASS #3170" in msg and "4.6.0" in msg
    assert r["details"]["on_disk"] == {"nvidia-cutlass-dsl-libs-base": 1}


def test_wheel_collision_identical_files_and_version_mismatch(tmp_path):
    _dsl(tmp_path / "same", "4.6.0", b"one", b"one", on_disk=b"one")
    r = metadata_probes.wheel_collision(None, {"path": [str(tmp_path / "same")]})
    assert r["status"] == "ok" and "1 same-path files are identical" in r["message"], r
    _dsl(tmp_path / "mixed", "4.6.0", b"one", b"one", b"one", cu13_version="4.5.1")
    r = metadata_probes.wheel_collision(None, {"path": [str(tmp_path / "mixed")]})
    assert r["status"] == "failed"
    assert "nvidia-cutlass-dsl 4.6.0 is installed with nvidia-cutlass-dsl-libs-cu13 4.5.1" in \
        r["message"]
    r = metadata_probes.wheel_collision(None, {"path": [str(tmp_path / "empty")]})
    assert r["status"] == "skipped"


def test_wheel_collision_on_this_install():
    dsl = _util.dist_version("nvidia-cutlass-dsl")
    if dsl is None:
        pytest.skip("nvidia-cutlass-dsl is not installed")
    r = metadata_probes.wheel_collision(None, {})
    libs = [n for n in r["details"]["wheels"] if n.startswith("nvidia-cutlass-dsl-libs-")]
    assert r["details"]["wheels"]["nvidia-cutlass-dsl"] == dsl
    for n in libs:
        assert md.version(n) == r["details"]["wheels"][n]
    if tuple(int(x) for x in dsl.split(".")[:2]) >= (4, 6):  # fixed there (CUTLASS #3259)
        assert r["status"] == "ok", r


# ---------------------------------------------------------------------------------------------
# b12x.module_shadowing (find_spec and RECORD, no import)

def test_module_shadowing_on_this_install():
    r = metadata_probes.module_shadowing(None, {})
    fi, b12x = _util.dist_version("flashinfer-python"), _util.dist_version("b12x")
    if b12x is None and fi is not None and r["details"].get("owners"):
        # flashinfer-python 0.7.4 installs a top-level b12x shim (its wheel's b12x/__init__.py)
        assert r["status"] == "warning"
        assert r["details"]["owners"] == {"flashinfer-python": fi}
        assert f"flashinfer-python {fi} installs" in r["message"]
        assert "proves nothing" in r["message"]
    elif b12x is None and r["details"] == {}:
        assert r["status"] == "ok"


@pytest.mark.parametrize("case", ["owned", "unowned", "overwritten", "kept"])
def test_module_shadowing_cases(tmp_path, monkeypatch, case):
    real = b"# the b12x distribution\n"
    shim = b"# flashinfer's compatibility shim\n"
    rel = "b12x/__init__.py"
    if case == "owned":
        make_dist(tmp_path, "b12x", "9.9", {rel: real})
    elif case == "unowned":  # b12x installed, but a stray b12x/ dir comes first
        make_dist(tmp_path, "b12x", "9.9", {rel: real}, record={})
    else:  # both b12x and (a fake) flashinfer-python list the same file
        make_dist(tmp_path, "b12x", "9.9", {rel: shim if case == "overwritten" else real},
                  record={rel: real})
        make_dist(tmp_path, "flashinfer-python", "0.7.4", {}, record={rel: shim})
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.delitem(sys.modules, "b12x", raising=False)
    r = metadata_probes.module_shadowing(None, {})
    want = {"owned": "ok", "unowned": "failed", "overwritten": "failed", "kept": "warning"}[case]
    assert r["status"] == want, r
    if case == "overwritten":
        assert "the copy on disk is flashinfer-python 0.7.4's" in r["message"]
        assert "pip install --force-reinstall b12x==9.9" in r["message"]
    if case == "unowned":
        assert "shadows the real b12x" in r["message"]


# ---------------------------------------------------------------------------------------------
# The child-process runner

def test_runner_findings_for_broken_packages(fakes):
    names = ["import:fakeraise:entry", "import:fakehang:entry", "import:fakeexit:entry",
             "import:fakesegv:entry", "import:fakeok:entry", "import:fakemissing:entry",
             "import:fakeok:nope"]
    rep = probing.run_probes(names, timeout=3)
    f = rep.findings
    assert list(f) == names
    assert f["import:fakeraise:entry"].status == "failed"
    assert f["import:fakeraise:entry"].message == (
        "import fakeraise failed: RuntimeError: fakeraise is broken on purpose (raised at "
        "fakeraise/__init__.py:1)")
    assert f["import:fakehang:entry"].message == (
        "timed out after 3 s (the probe process was killed) while importing fakehang")
    assert f["import:fakeexit:entry"].message == (
        "the probe process exited with status 3 while importing fakeexit")
    assert f["import:fakesegv:entry"].message.startswith(
        "the probe process was killed by SIGSEGV (exit status -11) while importing fakesegv")
    assert (f["import:fakeok:entry"].status, f["import:fakeok:entry"].ok) == ("ok", True)
    assert f["import:fakemissing:entry"].status == "skipped"
    assert f["import:fakemissing:entry"].ok
    assert f["import:fakeok:nope"].message == "fakeok has no attribute 'nope'"
    assert not any(f[n].ok for n in names[:4])
    # import timings: measured where the import returned, None where it never did
    timing = {i.library: i for i in rep.imports}
    assert timing["fakeok"].ok and timing["fakeok"].seconds is not None
    assert not timing["fakehang"].ok and timing["fakehang"].seconds is None
    assert not timing["fakeexit"].ok and "status 3" in timing["fakeexit"].error


def test_a_probe_that_kills_its_process_does_not_take_the_others_with_it(fakes):
    rep = probing.run_probes(["import:fakeattr:crash", "import:fakeattr:fine"], timeout=20)
    crash, fine = rep.findings["import:fakeattr:crash"], rep.findings["import:fakeattr:fine"]
    assert crash.status == "failed"
    assert crash.message == ("the probe process exited with status 4 while running probe "
                             "import:fakeattr:crash")
    assert fine.status == "ok", fine
    group = next(g for g in rep.groups if g.group == "import:fakeattr")
    assert group.processes == 2  # the probes after the crash ran in a fresh child
    assert group.seconds > 0  # the children's time is reported, not left at 0


def test_run_deep_probes_runs_each_probe_once_per_session(fakes, monkeypatch):
    calls = []
    real = probing._run_child

    def counting(*a, **kw):
        calls.append(a[1])
        return real(*a, **kw)

    monkeypatch.setattr(probing, "_run_child", counting)
    cat = SimpleNamespace(backends={
        "moe": (SimpleNamespace(name="a", probes=("import:fakeok:entry",)),),
        "linear": (SimpleNamespace(name="b", probes=("import:fakeok:entry",
                                                     "import:fakeraise:entry")),)})
    first = probing.run_deep_probes(cat)
    assert set(first) == {"import:fakeok:entry", "import:fakeraise:entry"}
    assert (first["import:fakeok:entry"].ok, first["import:fakeraise:entry"].ok) == (True, False)
    n = len(calls)
    again = probing.run_deep_probes(cat)
    assert len(calls) == n, "the second call started child processes"
    assert all(again[k] is first[k] for k in first)


def test_describe_exc_says_whether_the_missing_module_is_installed():
    try:
        importlib.import_module("surely_not_installed_xyz")
    except ImportError as exc:
        text = _util.describe_exc(exc)
    assert text.startswith("ModuleNotFoundError: No module named 'surely_not_installed_xyz'")
    assert "no installed distribution provides `surely_not_installed_xyz`" in text


def test_b12x_gemm_source_check_finds_calls_to_removed_dsl_apis(tmp_path, monkeypatch):
    """flashinfer 0.6.14-0.6.15.post1's b12x GEMM calls cute.make_fragment, which
    nvidia-cutlass-dsl 4.6.0 removed (FlashInfer #3922): found from the source, no GPU needed."""
    dsl = _util.dist_version("nvidia-cutlass-dsl")
    if dsl is None:
        pytest.skip("nvidia-cutlass-dsl is not installed")
    from selector.backends.children.probes import flashinfer_probes
    cute = importlib.import_module("cutlass.cute")
    (tmp_path / "old_b12x_kernel.py").write_text(
        "class Sm120B12xBlockScaledDenseGemmKernel:\n"
        "    def f(self, cute, x):\n"
        "        return cute.make_fragment(x, 1), cute.make_fragment_like(x)\n")
    (tmp_path / "new_b12x_kernel.py").write_text(
        "class Sm120B12xBlockScaledDenseGemmKernel:\n"
        "    def f(self, cute, x):\n"
        "        return cute.make_rmem_tensor(x, 1), cute.make_fragment_like(x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    old = importlib.import_module("old_b12x_kernel").Sm120B12xBlockScaledDenseGemmKernel
    new = importlib.import_module("new_b12x_kernel").Sm120B12xBlockScaledDenseGemmKernel
    found = flashinfer_probes._removed_api_calls(old)
    if hasattr(cute, "make_fragment"):  # a DSL before 4.6.0 still has it: nothing to report
        assert found == []
    else:
        assert len(found) == 1
        assert f"nvidia-cutlass-dsl {dsl} has no cute.make_fragment" in found[0]
        assert "FlashInfer #3922" in found[0]
    assert flashinfer_probes._removed_api_calls(new) == []


def test_a_missing_kernel_module_names_the_distribution_to_install():
    """`No module named 'cutlass'` says `pip install nvidia-cutlass-dsl` (issue #34: doctor --deep
    printed `pip install cutlass`, another PyPI project), and so for each import name whose
    distribution is named otherwise; an unknown module keeps its own name."""
    from selector.inspect.probe_child import INSTALL_NAMES, missing_module_hint
    for module, dist in INSTALL_NAMES.items():
        hint = missing_module_hint(ModuleNotFoundError(f"No module named {module!r}", name=module))
        if "is installed" not in hint:  # where the distribution is present here, it says so
            assert hint.endswith(f"pip install {dist}"), (module, hint)
    assert missing_module_hint(ModuleNotFoundError("x", name="zz_no_such_mod.sub")).endswith(
        "pip install zz_no_such_mod")
    assert INSTALL_NAMES["cutlass"] == "nvidia-cutlass-dsl"


def _scripted_group(fakes, monkeypatch, events, rc, err=""):
    """_run_group over fakeattr's two probes, its child replaced by a script of events."""
    monkeypatch.setattr(probing, "_run_child",
                        lambda *a, **kw: (list(events), rc, False, err, 0.5))
    specs = [registry.resolve("import:fakeattr:fine"), registry.resolve("import:fakeattr:crash")]
    return probing._run_group("import:fakeattr", specs, {}, 20.0)


IMPORTED = [{"event": "start"}, {"event": "import", "phase": "start", "library": "fakeattr"},
            {"event": "import", "phase": "end", "library": "fakeattr", "ok": True,
             "seconds": 0.1}]
FINE = [{"event": "probe", "phase": "start", "name": "import:fakeattr:fine"},
        {"event": "probe", "phase": "end", "name": "import:fakeattr:fine", "status": "ok",
         "message": "fine", "seconds": 0.1}]


def test_a_child_that_dies_between_steps_fails_only_the_probes_it_did_not_run(fakes, monkeypatch):
    findings, run = _scripted_group(fakes, monkeypatch, IMPORTED + FINE, 5)
    assert findings["import:fakeattr:fine"].status == "ok"
    assert findings["import:fakeattr:crash"].message == (
        "the probe process exited with status 5 between steps")


def test_a_child_that_dies_while_importing_records_the_failed_import(fakes, monkeypatch):
    findings, run = _scripted_group(fakes, monkeypatch, IMPORTED[:2], 3)
    assert [(i.library, i.ok, i.error) for i in run.imports] == [
        ("fakeattr", False, "the probe process exited with status 3")]
    assert "FAILED" in run.imports[0].describe()
    assert {f.message for f in findings.values()} == {
        "the probe process exited with status 3 while importing fakeattr"}


def test_a_flooding_child_leaves_no_verdict_and_says_its_output_was_cut(fakes, monkeypatch):
    from selector.inspect.child_runner import TRUNCATED
    findings, run = _scripted_group(fakes, monkeypatch, IMPORTED + FINE + [{"event": "done"}], 0,
                                    err=f"{TRUNCATED} more than 16 MiB\n")
    for f in findings.values():
        assert f.status == "failed" and f.details["truncated"] is True, f
        assert "wrote more than" in f.message
    assert findings["import:fakeattr:fine"].message.endswith("after its steps")


def test_a_module_name_find_spec_refuses_is_not_findable():
    assert probing._findable("os") is True
    assert probing._findable(".relative") is False  # find_spec('') raises ValueError


def test_an_import_that_fails_is_placed_outside_importlibs_own_frames():
    from selector.inspect import probe_child
    try:
        importlib.import_module("surely_not_installed_xyz")
    except ImportError as exc:
        where = probe_child.raised_at(exc)
    assert where is not None and "importlib" not in where and "<frozen" not in where, where
    assert where.split(":")[0].endswith("test_probes.py"), where
