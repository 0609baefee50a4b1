"""Faults: detection steps and probes that raise, hang or find a half-installed package yield a
reason (a note, a finding), never a crash or a hang.

- NVML through pynvml: a fake `pynvml` first on PYTHONPATH that raises, exits, crashes, hangs
  on import or on a call, or answers garbage. Detection runs NVML in a child process bounded by
  SELECTOR_NVML_TIMEOUT, so a hung driver call costs that long and then answers "no GPU", and
  a crash inside NVML ends the child, not selector.
- NVML through ctypes (libnvidia-ml): a fake library object whose calls fail or answer garbage
  (in-process, through the child's query function), and the real machine's library kept out
  with SELECTOR_NVML_LIBRARY / SELECTOR_CUDA_LIBRARY pointing nowhere, so that every test
  fakes every detection layer it depends on (on a GPU machine too).
- torch in its child process (`_torch_child`, used when NVML is unusable but a driver is
  present): a fake `torch` first on PYTHONPATH that raises, hangs, aborts, prints garbage or
  answers a malformed capability; SELECTOR_TORCH_PROBE_TIMEOUT bounds it.
- Package metadata: a dist-info whose RECORD names files that are missing (half-installed)
  counts as not installed, with a note that says so and how to fix it; malformed metadata
  counts as absent.
- Deep probes: a probe that raises or hangs is a failed finding, and a failed finding rejects
  the backends that declare it, with the finding as the reason.
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import io
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict

import pytest
from helpers import child_env

from selector.commands.cli import main
from selector.inspect import environment, nvml_query

pytestmark = pytest.mark.slow  # subprocess / fuzz suite: `pytest -m "not slow"` skips it


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SELECTOR_NO_CACHE", raising=False)


NO_DRIVER = {"SELECTOR_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1",
             "SELECTOR_CUDA_LIBRARY": "/nonexistent/libcuda.so.1"}


def _env(*paths: Path, **extra: str) -> Dict[str, str]:
    """This process's environment and import path (a `--target` install lives there), with
    the fakes first and the machine's own NVML and CUDA driver kept out."""
    return child_env(*paths, **{**NO_DRIVER, **extra})


@pytest.fixture
def no_driver(monkeypatch):
    """In-process detection: the machine's own NVML and CUDA driver kept out."""
    for k, v in NO_DRIVER.items():
        monkeypatch.setenv(k, v)


# ---------------------------------------------------------------------------------------------
# NVML through pynvml (subprocess: a fake module must shadow any real one from the start)

_GOOD = """
class NVMLError(Exception):
    pass
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 1
def nvmlSystemGetDriverVersion(): return b"580.159.04"
def nvmlSystemGetCudaDriverVersion(): return 13000
def nvmlDeviceGetHandleByIndex(i): return object()
def nvmlDeviceGetCudaComputeCapability(h): return (9, 0)
def nvmlDeviceGetName(h): return b"NVIDIA H200"
"""

PYNVML = {
    "good": (_GOOD, {"capability": [9, 0], "name": "NVIDIA H200"}),
    "import raises": ("raise RuntimeError('broken binding')\n", {"capability": None}),
    "import exits": ("import sys\nsys.exit(3)\n", {"capability": None}),
    "import hangs": ("import time\ntime.sleep(3600)\n", {"capability": None,
                                                         "note": "did not answer"}),
    "library not found": (_GOOD + "class NVMLError_LibraryNotFound(Exception): pass\n"
                          "def nvmlInit(): raise NVMLError_LibraryNotFound('not found')\n",
                          {"capability": None}),
    "init raises": (_GOOD + "def nvmlInit(): raise NVMLError('Driver/library version "
                    "mismatch')\n", {"capability": None, "note": "version mismatch"}),
    "init hangs": (_GOOD + "import time\ndef nvmlInit(): time.sleep(3600)\n",
                   {"capability": None, "note": "did not answer"}),
    "query raises": (_GOOD + "def nvmlDeviceGetCount(): raise NVMLError('GPU is lost')\n",
                     {"capability": None, "note": "GPU is lost"}),
    "query hangs": (_GOOD + "import time\ndef nvmlDeviceGetHandleByIndex(i): "
                    "time.sleep(3600)\n", {"capability": None, "note": "did not answer"}),
    "garbage": (_GOOD + "def nvmlDeviceGetCudaComputeCapability(h): return ('x', None)\n"
                "def nvmlDeviceGetName(h): return b'\\xff\\xfe'\n",
                {"capability": None, "note": "invalid compute capability"}),
    "negative capability": (_GOOD + "def nvmlDeviceGetCudaComputeCapability(h): "
                            "return (-1, 0)\n", {"capability": None,
                                                 "note": "invalid compute capability"}),
    "huge capability": (_GOOD + "def nvmlDeviceGetCudaComputeCapability(h): "
                        "return (1000, 7)\n", {"capability": None,
                                               "note": "invalid compute capability"}),
    "boolean capability": (_GOOD + "def nvmlDeviceGetCudaComputeCapability(h): "
                           "return (True, False)\n", {"capability": None,
                                                      "note": "invalid compute capability"}),
    "name with a newline": (_GOOD + "def nvmlDeviceGetName(h): return b'H200\\nselected: x'\n",
                            {"capability": [9, 0], "name": None, "note": "invalid GPU name"}),
    "segfault": (_GOOD + "import ctypes\ndef nvmlInit(): ctypes.string_at(0)\n",
                 {"capability": None, "note": "NVML crashed (SIGSEGV)"}),
    "abort": (_GOOD + "import os\ndef nvmlInit(): os.abort()\n",
              {"capability": None, "note": "NVML crashed (SIGABRT)"}),
    "_exit": (_GOOD + "import os\ndef nvmlDeviceGetCount(): os._exit(0)\n",
              {"capability": None, "note": "no answer"}),
    "no gpu": (_GOOD + "def nvmlDeviceGetCount(): return 0\n",
               {"capability": None, "note": "no GPU"}),
    "shutdown raises": (_GOOD + "def nvmlShutdown(): raise NVMLError('shutdown')\n",
                        {"capability": [9, 0]}),
    "base exception": (_GOOD + "def nvmlInit(): raise KeyboardInterrupt\n",
                       {"capability": None}),
}

_DETECT = ("import json, time\n"
           "from selector.inspect.environment import detect\n"
           "t = time.time()\n"
           "e = detect(['torch', 'triton'])\n"
           "print(json.dumps({'capability': e.capability, 'name': e.gpu_name, 'method': "
           "e.gpu.method, 'notes': list(e.notes), 'seconds': time.time() - t}))\n")


def _fake_module(root: Path, name: str, text: str) -> Path:
    d = root / "fake"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.py").write_text(text)
    return d


def test_pynvml_faults(tmp_path):
    """Every fault ends with an answer (capability or None) within the NVML timeout; a crash
    inside NVML (SIGSEGV, abort, _exit) is contained in the child; garbage values never make
    up an SM (point 5 and 6 of the reliability review)."""
    jobs = []
    for case, (text, _) in PYNVML.items():
        d = _fake_module(tmp_path / case.replace(" ", "_"), "pynvml", text)
        jobs.append((case, d))

    def run(job):
        case, d = job
        t = time.time()
        hangs = "did not answer" in PYNVML[case][1].get("note", "")
        p = subprocess.run([sys.executable, "-c", _DETECT], capture_output=True, text=True,
                           env=_env(d, SELECTOR_NVML_TIMEOUT="1" if hangs else "30"),
                           timeout=300)
        return case, p, time.time() - t

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(run, jobs))
    for case, p, _seconds in results:
        want = PYNVML[case][1]
        assert p.returncode == 0, (case, p.stderr)
        got = json.loads(p.stdout.strip().splitlines()[-1])
        assert got["capability"] == want["capability"], (case, got)
        if "name" in want:
            assert got["name"] == want["name"], (case, got)
        if "note" in want:
            assert any(want["note"] in n for n in got["notes"]), (case, got)


def test_cli_answers_with_a_hung_nvml(tmp_path):
    """`explain` on `platform=auto` with a driver call that never returns: an answer, with a
    note saying detection gave up, within the NVML timeout."""
    d = _fake_module(tmp_path, "pynvml", PYNVML["init hangs"][0])
    p = subprocess.run([sys.executable, "-m", "selector", "explain", "--format", "json"],
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                       env=_env(d, SELECTOR_NVML_TIMEOUT="1",
                                SELECTOR_CACHE_DIR=str(tmp_path / "c")))
    assert p.returncode in (0, 1), p.stderr
    out = json.loads(p.stdout)
    assert out["platform"]["capability"] is None
    assert any("did not answer" in n for n in out["notes"]), out["notes"]


def test_cli_uses_a_good_fake_nvml(tmp_path):
    """Positive control: the fake module is what detection used (SM 9.0 -> Marlin or nothing)."""
    d = _fake_module(tmp_path, "pynvml", PYNVML["good"][0])
    p = subprocess.run([sys.executable, "-m", "selector", "explain", "--format", "json"],
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                       env=_env(d, SELECTOR_CACHE_DIR=str(tmp_path / "c")))
    assert p.returncode in (0, 1), p.stderr
    assert json.loads(p.stdout)["platform"]["capability"] == "9.0"


# ---------------------------------------------------------------------------------------------
# NVML through ctypes (in-process: a fake CDLL)

class FakeNvml:
    def __init__(self, **overrides):
        self.overrides = overrides

    def __getattr__(self, name):
        if name in self.overrides:
            return self.overrides[name]
        if name.startswith("nvml"):
            return lambda *a: 0
        raise AttributeError(name)


def _count(n):
    def f(ref):
        ref._obj.value = n  # ctypes.byref(x)._obj is x
        return 0
    return f


def _raise(exc):
    def f(*a):
        raise exc
    return f


@pytest.mark.parametrize("case,lib,note", [
    ("argument error", FakeNvml(nvmlDeviceGetCount_v2=_raise(ctypes.ArgumentError("bad"))),
     "NVML query failed"),
    ("runtime error", FakeNvml(nvmlSystemGetDriverVersion=_raise(RuntimeError("boom"))),
     "NVML query failed"),
    ("init fails", FakeNvml(nvmlInit_v2=lambda: 999), "failed to initialise"),
    ("missing symbol", FakeNvml(nvmlDeviceGetCount_v2=_raise(
        AttributeError("undefined symbol"))), "NVML query failed"),
    ("capability call fails", FakeNvml(nvmlDeviceGetCount_v2=_count(1),
                                       nvmlDeviceGetCudaComputeCapability=lambda *a: 999),
     "returned 999"),
    ("capability left at zero", FakeNvml(nvmlDeviceGetCount_v2=_count(1)),
     "invalid compute capability"),
])
def test_ctypes_nvml_faults(case, lib, note):
    """libnvidia-ml's answers are checked call by call: a failed call never leaves a zeroed
    capability (SM 0.0) or the driver version standing in for the GPU name."""
    gpu = environment.gpu_from_answer(nvml_query.query_ctypes(lib))
    assert gpu.capability is None
    assert gpu.name is None
    assert any(note in n for n in gpu.notes) or note in gpu.method, (gpu.method, gpu.notes)


def test_ctypes_nvml_good_answer():
    """Positive control: a library that answers well gives the GPU."""
    def cap(h, major, minor):
        major._obj.value, minor._obj.value = 12, 1
        return 0

    def name(h, buf, n):
        buf.value = b"NVIDIA GB10"
        return 0
    lib = FakeNvml(nvmlDeviceGetCount_v2=_count(1), nvmlDeviceGetCudaComputeCapability=cap,
                   nvmlDeviceGetName=name)
    gpu = environment.gpu_from_answer(nvml_query.query_ctypes(lib))
    assert gpu.capability == (12, 1) and gpu.name == "NVIDIA GB10", gpu


def test_no_driver_at_all(tmp_path, monkeypatch, no_driver):
    d = _fake_module(tmp_path, "pynvml", PYNVML["library not found"][0])
    monkeypatch.setenv("PYTHONPATH", str(d))
    gpu = environment.detect_gpu()
    assert gpu.capability is None and "no NVIDIA driver" in gpu.method, gpu


# ---------------------------------------------------------------------------------------------
# torch in a child process

_TORCH_OK = """
class _Cuda:
    def is_available(self): return True
    def device_count(self): return 1
    def get_device_capability(self, i): return (12, 1)
    def get_device_name(self, i): return "NVIDIA GB10"
cuda = _Cuda()
class version:
    cuda = "13.0"
"""

TORCH = {
    "good": (_TORCH_OK, None, (12, 1)),
    "import raises": ("raise ImportError('libcudart.so.13: cannot open shared object file')\n",
                      "torch failed", None),
    "import hangs": ("import time\ntime.sleep(3600)\n", "did not answer", None),
    "aborts": ("import os\nos.abort()\n", "torch failed", None),
    "segfaults": ("import ctypes\nctypes.string_at(0)\n", "torch failed", None),
    "garbage": ("print('hello')\nimport sys\nsys.exit(0)\n", "no answer", None),
    "is_available raises": (_TORCH_OK + "def _r(): raise RuntimeError('CUDA driver error')\n"
                            "cuda.is_available = _r\n", "torch failed", None),
    "string capability": (_TORCH_OK + "cuda.get_device_capability = lambda i: ('12', '1')\n",
                          "malformed", None),
    "three numbers": (_TORCH_OK + "cuda.get_device_capability = lambda i: (12, 1, 0)\n",
                      "malformed", None),
    "no gpu": (_TORCH_OK + "cuda.is_available = lambda: False\n", None, None),
}


@pytest.mark.parametrize("case", sorted(TORCH))
def test_torch_child_faults(tmp_path, monkeypatch, case):
    text, note, cap = TORCH[case]
    d = tmp_path / "faketorch" / "torch"
    d.mkdir(parents=True)
    (d / "__init__.py").write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(d.parent))
    monkeypatch.setenv("SELECTOR_TORCH_PROBE_TIMEOUT", "2")
    gpu = environment._torch_child()
    assert gpu.capability == cap, (case, gpu)
    if note:
        assert any(note in n for n in gpu.notes), (case, gpu.notes)
    else:
        assert not gpu.notes, gpu.notes


def test_torch_fallback_chain(tmp_path, monkeypatch):
    """NVML unusable, a driver present, torch broken: detect() still answers, with a note."""
    d = tmp_path / "faketorch" / "torch"
    d.mkdir(parents=True)
    (d / "__init__.py").write_text(TORCH["import raises"][0])
    monkeypatch.setenv("PYTHONPATH", str(d.parent))
    monkeypatch.setattr(environment, "_nvml_child",
                        lambda limit: ({"via": None, "driver_present": True}, None))
    env = environment.detect(["torch"])
    assert env.capability is None
    assert any("torch failed" in n for n in env.notes), env.notes


def test_torch_timeout_from_the_environment(tmp_path):
    d = tmp_path / "faketorch" / "torch"
    d.mkdir(parents=True)
    (d / "__init__.py").write_text(TORCH["import hangs"][0])
    code = ("import json; from selector.inspect.environment import _torch_child; g = _torch_child(); "
            "print(json.dumps(g.notes))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=_env(d.parent, SELECTOR_TORCH_PROBE_TIMEOUT="1"))
    assert p.returncode == 0, p.stderr
    assert "did not answer within 1 s" in p.stdout


# ---------------------------------------------------------------------------------------------
# Package metadata

def _dist(site: Path, name: str, version: str, files: Dict[str, str], create=True,
          metadata: str = None) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(metadata if metadata is not None else
                                   f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    for rel, text in files.items():
        record.append(f"{rel},sha256=x,{len(text)}")
        if create:
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(text)
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    s = tmp_path / "site"
    s.mkdir()
    monkeypatch.syspath_prepend(str(s))
    importlib.invalidate_caches()
    return s


def test_half_installed_package_counts_as_absent_with_a_note(site):
    _dist(site, "vllm", "0.32.0", {"vllm/__init__.py": "", "vllm/_C.py": ""}, create=False)
    env = environment.detect(["vllm"])
    assert env.packages["vllm"] is None
    note = next(n for n in env.notes if "half-installed" in n)
    assert "vllm 0.32.0" in note and "vllm/__init__.py" in note and "--force-reinstall" in note


def test_whole_package_counts_as_installed(site):
    _dist(site, "vllm", "0.32.0", {"vllm/__init__.py": "", "vllm/sub/__init__.py": ""})
    env = environment.detect(["vllm"])
    assert str(env.packages["vllm"]) == "0.32.0"
    assert not any("half-installed" in n for n in env.notes)


def test_half_installed_package_through_the_cli(site):
    _dist(site, "vllm", "0.32.0", {"vllm/__init__.py": ""}, create=False)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["explain", "--format", "json", "layer=dense_linear"])
    assert rc in (0, 1), err.getvalue()
    d = json.loads(out.getvalue())
    assert d["platform"]["packages"]["vllm"] is None
    assert any("half-installed" in n for n in d["notes"]), d["notes"]


@pytest.mark.parametrize("case", ["no version", "bad version", "empty", "bad utf-8", "no record",
                                  "record garbage"])
def test_malformed_metadata_counts_as_absent_or_installed_never_a_crash(site, case):
    if case == "no record":
        _dist(site, "vllm", "0.32.0", {})
        (site / "vllm-0.32.0.dist-info" / "RECORD").unlink()
        want = "0.32.0"
    elif case == "record garbage":
        _dist(site, "vllm", "0.32.0", {})
        (site / "vllm-0.32.0.dist-info" / "RECORD").write_bytes(b"\xff\x00,,,\n/__init__.py,\n")
        want = "0.32.0"
    else:
        meta = {"no version": "Metadata-Version: 2.1\nName: vllm\n",
                "bad version": "Metadata-Version: 2.1\nName: vllm\nVersion: not a version\n",
                "empty": "", "bad utf-8": None}[case]
        _dist(site, "vllm", "0.32.0", {}, metadata=meta if meta is not None else "")
        if meta is None:
            (site / "vllm-0.32.0.dist-info" / "METADATA").write_bytes(
                b"Metadata-Version: 2.1\nName: vllm\nVersion: \xff\xfe\n")
        want = None
    env = environment.detect(["vllm", "torch"])
    assert (None if env.packages["vllm"] is None else str(env.packages["vllm"])) == want


# ---------------------------------------------------------------------------------------------
# Deep probes (selector/inspect/probing.py): a probe that raises or hangs is a finding

def test_in_process_probe_that_raises_is_a_failed_finding(monkeypatch, tmp_path):
    probing = pytest.importorskip("selector.inspect.probing")
    registry = importlib.import_module("selector.core.probe_specs")
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "faulty_probe_mod.py").write_text("def boom(arg, ctx):\n    raise OSError('disk')\n"
                                             "def weird(arg, ctx):\n    return 42\n")
    monkeypatch.syspath_prepend(str(mod))
    for name, func in (("fault.raises", "boom"), ("fault.weird", "weird")):
        monkeypatch.setitem(registry.PROBES, name, registry.ProbeSpec(
            name, f"faulty_probe_mod:{func}", "metadata", "test"))
    rep = probing.run_probes(["fault.raises", "fault.weird"], timeout=5)
    raised, weird = rep.findings["fault.raises"], rep.findings["fault.weird"]
    assert not raised.ok and "OSError: disk" in raised.message
    assert not weird.ok and "not a result dict" in weird.message


def test_hanging_probe_is_a_failed_finding(tmp_path, monkeypatch):
    probing = pytest.importorskip("selector.inspect.probing")
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "hangs_on_import_xyz.py").write_text("import time\ntime.sleep(3600)\nx = 1\n")
    monkeypatch.syspath_prepend(str(mod))
    importlib.invalidate_caches()
    rep = probing.run_probes(["import:hangs_on_import_xyz:x"], timeout=2)
    f = rep.findings["import:hangs_on_import_xyz:x"]
    assert not f.ok and "timed out after 2 s" in f.message


def test_failed_finding_rejects_the_backend_with_the_finding_as_reason():
    import selector
    from selector.api import Selector
    sel = selector.load(["platform=dgx_spark", "stack=flashinfer_0_7_4"])
    chosen = sel.default().selected
    declared = sel.catalogue.get("moe", chosen).probes if chosen else ()
    if not declared:
        pytest.skip(f"the backend selected here ({chosen}) declares no deep probe")
    probes = {n: (True, "ok") for bs in sel.catalogue.backends.values() for b in bs
              for n in b.probes}
    for i, n in enumerate(declared):
        probes[n] = (False, "the probe process was killed by SIGSEGV" if i % 2 == 0 else
                     "timed out after 120 s")
    d = Selector(sel.run_config, sel.tree, probes).default()
    assert d.selected != chosen
    c = d.candidate(chosen)
    assert c.status == "rejected"
    assert any("SIGSEGV" in r.message or "timed out" in r.message for r in c.reasons)


# -- unbounded child output (issue 25, defect 6) ---------------------------------------------------

FLOOD = """\
import os
chunk = b"x" * (1 << 20)
for _ in range({mib}):
    os.write(1, chunk)
    os.write(2, chunk)
entry = 1
"""


def test_a_probe_that_floods_its_output_fails_and_memory_stays_bounded(tmp_path):
    """`doctor --probe import:X` where X writes 256 MiB to each of stdout and stderr: selector
    held every byte (1.8 GB for 300 MB each) and answered "nothing wrong found". Now at most
    child_runner.MAX_OUTPUT bytes of each stream are read, the child is stopped, and the probe
    fails saying so; the selector process stays small."""
    site = tmp_path / "site"
    (site / "fakeflood").mkdir(parents=True)
    (site / "fakeflood" / "__init__.py").write_text(FLOOD.format(mib=256))
    measure = ("import resource, subprocess, sys; "
               "p = subprocess.run([sys.executable, '-m', 'selector', 'doctor', '--format', "
               "'json', '--timeout', '120', '--probe', 'import:fakeflood:entry'], "
               "capture_output=True, text=True); "
               "print(p.returncode); print(resource.getrusage(resource.RUSAGE_CHILDREN)"
               ".ru_maxrss); sys.stdout.write(p.stdout); sys.stderr.write(p.stderr)")
    p = subprocess.run([sys.executable, "-c", measure], capture_output=True, text=True,
                       env=_env(site, SELECTOR_NO_CACHE="1"), timeout=300)
    rc, maxrss_kib, out = p.stdout.split("\n", 2)
    assert int(rc) == 1, (p.stdout[-2000:], p.stderr[-2000:])
    (f,) = json.loads(out)["probes"]["findings"]
    assert f["status"] == "failed", f
    assert "wrote more than 8 MiB of output" in f["message"] and "truncated" in f["message"]
    assert f["details"].get("truncated") is True
    assert int(maxrss_kib) < 400 * 1024, f"selector grew to {int(maxrss_kib) >> 10} MiB"


def test_child_runner_keeps_at_most_max_output_per_stream():
    from selector.inspect import child_runner
    boot = ("import os, sys; sys.stdin.read(); os.write(1, b'M{\"a\": 1}\\n');"
            "[os.write(2, b'e' * 65536) for _ in range(400)]")
    events, rc, timed_out, err = child_runner.run_child(boot, {"x": 1}, 60, "M")
    assert events == [{"a": 1}] and not timed_out and rc is not None and rc < 0
    assert child_runner.truncated(err)
    assert len(err) < child_runner.MAX_OUTPUT + 1000
    # a child within the limit is read whole and not marked
    events, rc, timed_out, err = child_runner.run_child(
        "import os, sys; sys.stdin.read(); os.write(2, b'e' * 100000)", {}, 60, "M")
    assert rc == 0 and len(err) == 100000 and not child_runner.truncated(err)


@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_a_fifo_or_huge_metadata_file_of_a_watched_package_never_hangs(tmp_path, kind):
    """A `METADATA` that is a FIFO (or over 16 MiB) in a dist-info named like a package the
    catalogue watches blocked `explain platform=auto` for ever (importlib.metadata opens it).
    Now it is malformed metadata: not installed, and the command answers."""
    import os
    info = tmp_path / "site" / "flashinfer_python-9.9.dist-info"
    info.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(info / "METADATA")
    else:
        with open(info / "METADATA", "wb") as f:
            f.write(b"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 9.9\n")
            f.truncate(100 << 20)  # sparse: over the 16 MiB bound, costs no disk
    p = subprocess.run([sys.executable, "-m", "selector", "explain", "--format", "json",
                        "platform=auto"], capture_output=True, text=True, timeout=120,
                       env=_env(tmp_path / "site", SELECTOR_NO_CACHE="1"))
    assert p.returncode in (0, 1), p.stderr[-2000:]
    assert json.loads(p.stdout)["platform"]["packages"]["flashinfer-python"] is None
