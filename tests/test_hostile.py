"""Regression tests for the adversarial review (reliability issue): hostile files, environments
and callers. Each test names the point it covers; each failed before its fix.

Most cases run the CLI in-process (`selector.commands.cli.main`); those that could hang, crash the
interpreter or need a real file descriptor run it in a subprocess with a time limit.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Sequence

import pytest
from helpers import child_env, refused, run_main

import selector
from selector.config import normalize_overrides
from selector.config.catalogues import discover as discover_tree
from selector.core.errors import SelectorError
from selector.inspect.environment import Environment, Gpu

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SELECTOR_NO_CACHE", raising=False)


def user_dir(root: Path, files: Dict[str, str]) -> Path:
    d = root / "user"
    for rel, text in files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    d.mkdir(exist_ok=True)
    return d


def subprocess_cli(args: Sequence[str], timeout: float = 300, **env: str):
    return subprocess.run([sys.executable, "-m", "selector", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=str(REPO), env=child_env(**env))


STALL_S = 30.0


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def wait_unless_stuck(pid: int):
    """The child's wait status, or None (it is killed) once it has used no CPU for STALL_S s
    on end: a deadlocked child waits on a lock, a slow one (every core busy) still runs. A
    verdict by progress, not by wall time, so a loaded machine cannot fail the test."""
    last, still = -1, 0.0
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        try:
            ticks = _cpu_ticks(pid)
        except OSError:
            ticks = last
        still = still + 0.1 if ticks == last else 0.0
        last = ticks
        if still >= STALL_S:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.1)


def fake_detect(capability=(12, 0), name="NVIDIA RTX PRO 6000"):
    def detect(names):
        return Environment(capability, name, None, {n: None for n in names},
                           Gpu(name, capability), "fake", ())
    return detect


# -- 1. non-regular files, size checked before reading ----------------------------------------

@pytest.mark.parametrize("command", ["explain", "check"])
def test_1_fifo_is_refused_not_read(tmp_path, command):
    d = user_dir(tmp_path, {})
    (d / "platform").mkdir()
    os.mkfifo(d / "platform" / "pipe.yaml")
    p = subprocess_cli([command, "--config-dir", str(d), "platform=cpu"], timeout=300,
                       SELECTOR_CACHE_DIR=str(tmp_path / "c"))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "pipe.yaml" in p.stderr and "not a regular file" in p.stderr
    assert "Traceback" not in p.stderr


def test_1_sparse_huge_file_is_refused_before_reading(tmp_path, monkeypatch):
    d = user_dir(tmp_path, {})
    (d / "backend" / "moe").mkdir(parents=True)
    with open(d / "backend" / "moe" / "big.yaml", "wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB, sparse
    read = []
    real_read = os.read
    def spy(fd, n):
        if os.fstat(fd).st_size == 1 << 30:
            read.append(n)
        return real_read(fd, n)
    monkeypatch.setattr(os, "read", spy)
    err = refused(["explain", "--config-dir", str(d), "platform=cpu"], "big.yaml", "too large")
    assert not read, "the file was read before its size was checked"
    assert "1073741824 bytes" in err


# -- 2. fork while another thread is inside a cold load ----------------------------------------

def test_2_fork_while_composing_does_not_deadlock(tmp_path, monkeypatch):
    from selector.config import composer as compose_mod
    monkeypatch.setenv("SELECTOR_NO_CACHE", "1")
    inside, release = threading.Event(), threading.Event()

    def holder():
        with compose_mod._HYDRA_LOCK:  # a thread in the middle of a cold load()
            inside.set()
            release.wait(30)
    t = threading.Thread(target=holder)
    t.start()
    inside.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # the child: a cold load must complete
            try:
                selector.load(["platform=cpu", "layer.ep_size=3"])
                os._exit(0)
            except BaseException:  # noqa: BLE001
                os._exit(3)
        status = wait_unless_stuck(pid)
        if status is None:
            pytest.fail("the forked child deadlocked on the composition lock (no CPU used "
                        f"for {STALL_S} s)")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        t.join()


# -- 3. a preset changes only its own group ----------------------------------------------------

@pytest.mark.parametrize("text", [
    "# @package _global_\nplatform:\n  capability: '12.1'\nlayer:\n  op: moe\n",
    "defaults:\n  - /platform@_global_.platform: gb200\n  - _self_\nop: moe\n",
    "defaults:\n  - /stack: vllm_0_32\n  - _self_\nop: moe\n",
])
@pytest.mark.parametrize("command", ["explain", "check"])
def test_3_layer_preset_cannot_rewrite_platform(tmp_path, text, command):
    d = user_dir(tmp_path, {"layer/evil.yaml": text})
    refused([command, "--config-dir", str(d), "platform=b200", "layer=evil"], "evil.yaml")


def test_3_stack_preset_still_writes_platform():
    """Control: the packaged stacks write platform.* through '# @package platform'."""
    d = selector.load(["platform=b200", "stack=vllm_0_32"]).default()
    assert d.platform["packages"]["vllm"] == "0.32.0"


# -- 4. platform.preset is not a key -----------------------------------------------------------

@pytest.mark.parametrize("overrides", [["platform=b200", "platform.preset=cpu"],
                                       ["platform=b200", "platform.preset=auto"],
                                       ["+platform.preset=cpu"]])
def test_4_platform_preset_key_is_refused(overrides):
    refused(["explain", *overrides], "platform.preset", "platform=<name>")


def test_4_preset_name_comes_from_the_file(tmp_path):
    d = user_dir(tmp_path / "a", {"platform/mybox.yaml": "capability: '12.0'\n"})
    sel = selector.load(["platform=mybox"], config_dirs=[d], detect=fake_detect((9, 0)))
    assert sel.platform.source == "mybox" and sel.platform.capability == (12, 0)
    d = user_dir(tmp_path / "b", {"platform/liar.yaml": "preset: auto\ncapability: '12.0'\n"})
    refused(["explain", "--config-dir", str(d), "platform=liar"], "liar.yaml", "preset")


# -- 7. user presets named like packaged ones; reserved names ----------------------------------

@pytest.mark.parametrize("command", ["explain", "check"])
def test_7_shadowing_preset_is_refused(tmp_path, command):
    d = user_dir(tmp_path, {"platform/b200.yaml": "capability: '12.1'\n"})
    refused([command, "--config-dir", str(d), "platform=b200"], "b200.yaml",
            "already defines")


@pytest.mark.parametrize("name", ["selector_schema.yaml", "config.yaml"])
def test_7_reserved_names_are_refused(tmp_path, name):
    d = user_dir(tmp_path, {name: "platform:\n  capability: '12.1'\n"})
    refused(["explain", "--config-dir", str(d), "platform=b200"], name, "reserved")


# -- 8. an explicit null wins over detection, for every key ------------------------------------

def test_8_explicit_null_capability_under_auto():
    det = fake_detect((12, 0))
    assert selector.load(["platform=auto"], detect=det).platform.capability == (12, 0)
    sel = selector.load(["platform=auto", "platform.capability=null"], detect=det)
    assert sel.platform.capability is None
    sel = selector.load(["platform=auto", "platform.packages.torch=null"], detect=det)
    assert dict(sel.platform.packages)["torch"] is None


# -- 9. one spelling per distribution ----------------------------------------------------------

def test_9_package_spellings_merge_and_the_later_wins():
    """The stack names flashinfer-python first: a non-canonical spelling used to be appended
    after it and win whatever the order of the overrides."""
    a = selector.load(["platform=b200", "stack=flashinfer_0_7_4",
                       "platform.packages.Flashinfer_Python=0.6.1",
                       "platform.packages.flashinfer-python=0.7.4"])
    b = selector.load(["platform=b200", "stack=flashinfer_0_7_4",
                       "platform.packages.flashinfer-python=0.7.4",
                       "platform.packages.Flashinfer_Python=0.6.1"])
    assert str(dict(a.platform.packages)["flashinfer-python"]) == "0.7.4"
    assert str(dict(b.platform.packages)["flashinfer-python"]) == "0.6.1"


# -- 10. values JSON cannot hold: the same clean error with and without the cache -------------

BACKEND = "rank: 50\nexecution: reference\nrules: []\n"


@pytest.mark.parametrize("case,text,needle", [
    ("date", BACKEND + "description: 2024-01-01\n", "timestamp"),
    ("set", BACKEND + "description: !!set {a, b}\n", "set"),
    ("bool key", BACKEND + "on: true\n", "key"),
    ("huge rank", "rank: " + "9" * 5000 + "\nexecution: reference\nrules: []\n", "big.yaml"),
    ("big rank", "rank: " + "9" * 40 + "\nexecution: reference\nrules: []\n", "out of range"),
])
@pytest.mark.parametrize("command", ["explain", "list", "doctor"])
def test_10_plain_values_only(tmp_path, monkeypatch, case, text, needle, command):
    d = user_dir(tmp_path, {"backend/moe/big.yaml": text})
    args = [command, "--config-dir", str(d), "platform=cpu"]
    with_cache = refused(args, needle)
    monkeypatch.setenv("SELECTOR_NO_CACHE", "1")
    assert refused(args, needle) == with_cache
    with pytest.raises(SelectorError):
        selector.load(["platform=cpu"], config_dirs=[d])


# -- 11. the cache is untrusted input ----------------------------------------------------------

def _cache_file(tmp_path, overrides):
    from selector.config import cache as cache_mod
    tree = discover_tree([])
    key = cache_mod.fingerprint(tree, normalize_overrides(overrides, tree))
    return tmp_path / "cache" / f"{key}.json", key


@pytest.mark.parametrize("content", ["[]", "null", "{}", '"x"', "1e999",
                                     '{"format": 2, "key": "%s", "data": {}}',
                                     '{"format": 2, "key": "%s", "data": []}',
                                     '{"format": 2, "key": "%s", "data": {"layer": 1}}'])
def test_11_cached_data_of_the_wrong_shape_is_composed_afresh(tmp_path, content):
    overrides = ["platform=b200", "stack=vllm_0_32", "layer.ep_size=2"]
    fresh = selector.load(overrides).default().to_json()
    path, key = _cache_file(tmp_path, overrides)
    assert path.is_file()
    path.write_text(content.replace("%s", key))
    assert selector.load(overrides).default().to_json() == fresh


def test_11_cached_values_are_validated_like_fresh_ones(tmp_path):
    overrides = ["platform=b200", "stack=vllm_0_32", "layer.ep_size=3"]
    fresh = selector.load(overrides).default().to_json()
    path, _ = _cache_file(tmp_path, overrides)
    entry = json.loads(path.read_text())
    entry["data"]["layer"]["ep_size"] = "three"
    path.write_text(json.dumps(entry))
    assert selector.load(overrides).default().to_json() == fresh


def test_11_cache_dir_writable_by_others_is_refused(tmp_path):
    c = tmp_path / "cache"
    c.mkdir()
    c.chmod(0o777)
    err = refused(["explain", "platform=b200"], "can be written by other users", "chmod")
    assert str(c) in err
    c.chmod(0o700)
    assert run_main(["explain", "platform=b200"])[0] in (0, 1)


def test_11_cache_is_bounded_on_disk(tmp_path, monkeypatch):
    from selector.config import cache as cache_mod
    monkeypatch.setattr(cache_mod, "MAX_ENTRIES", 5)
    for i in range(1, 12):
        selector.load(["platform=b200", f"layer.ep_size={i}"])
    files = list((tmp_path / "cache").glob("*.json"))
    assert len(files) == 5
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700


# -- 12. one parser for every timeout ----------------------------------------------------------

@pytest.mark.parametrize("var,value", [
    ("SELECTOR_NVML_TIMEOUT", ""), ("SELECTOR_NVML_TIMEOUT", "abc"),
    ("SELECTOR_NVML_TIMEOUT", "nan"), ("SELECTOR_NVML_TIMEOUT", "inf"),
    ("SELECTOR_NVML_TIMEOUT", "-1"), ("SELECTOR_TORCH_PROBE_TIMEOUT", "nan"),
    ("SELECTOR_TORCH_PROBE_TIMEOUT", "inf"), ("SELECTOR_TORCH_PROBE_TIMEOUT", "1e9"),
])
def test_12_bad_detection_timeouts(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    refused(["explain", "platform=auto"], var, "seconds")


@pytest.mark.parametrize("argv,needle", [
    (["doctor"], "SELECTOR_PROBE_TIMEOUT"),
    (["doctor", "--timeout", "inf"], "--timeout"),
    (["doctor", "--timeout", "3e6"], "--timeout"),
    (["doctor", "--timeout", "-1"], "--timeout"),
    (["doctor", "--timeout", "abc"], "--timeout"),
])
def test_12_bad_probe_timeouts(monkeypatch, argv, needle):
    if argv == ["doctor"]:
        monkeypatch.setenv("SELECTOR_PROBE_TIMEOUT", "abc")
    refused([*argv, "platform=cpu"], needle, "seconds")


def test_12_good_timeouts_parse():
    from selector.core import env_vars
    assert env_vars.parse_timeout("x", "2.5") == 2.5
    assert env_vars.parse_timeout("x", 86400) == 86400.0


# -- 13, 14. numbers and keys too large for Python or the file system -------------------------

def test_13_huge_swiglu_limit():
    refused(["explain", "platform=b200", "layer.swiglu_limit=" + "9" * 401],
            "layer.swiglu_limit")
    with pytest.raises(SelectorError, match="swiglu_limit"):
        selector.load(["platform=b200"]).select(swiglu_limit=10 ** 400)


def test_14_long_override_key():
    refused(["explain", "platform=b200", "layer." + "x" * 300 + "=1"], "override", "at most")
    refused(["explain", "platform=b200", "x" * 250 + "=1"], "override")


# -- 15. output that cannot be written ---------------------------------------------------------

# A disk that fills up, without writing any device or path outside the test's tmp directory
# (issue 48: a test wrote `> /dev/` + `full`, which on a machine without that device created a
# regular file there): stdout is a raw writer that fails with ENOSPC until selector points
# fd 1 at /dev/null, as it does on a write error.
FULL_STDOUT = r"""
import errno, io, os, sys

class Full(io.RawIOBase):
    def writable(self):
        return True

    def write(self, b):
        st, null = os.fstat(1), os.stat(os.devnull)
        if (st.st_dev, st.st_ino) == (null.st_dev, null.st_ino):
            return len(b)  # selector gave up on the output: the final flush goes nowhere
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

sys.stdout = io.TextIOWrapper(io.BufferedWriter(Full()), encoding="utf-8")
from selector.commands.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _one_error_line(p, what):
    assert p.returncode == 2, (what, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write the output" in lines[0], (what, p.stderr)


def test_15_full_disk_and_closed_stdout(tmp_path):
    argv = ["explain", "platform=b200"]
    env = child_env(SELECTOR_NO_CACHE="1")
    p = subprocess.run([sys.executable, "-c", FULL_STDOUT, *argv], capture_output=True,
                       text=True, cwd=str(tmp_path), env=env, timeout=300)
    _one_error_line(p, "ENOSPC")
    assert p.stdout == ""
    assert "No space left on device" in p.stderr

    def no_room():  # a real write error from the kernel, on a file in tmp_path: EFBIG
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    with open(tmp_path / "out.txt", "wb") as out:
        p = subprocess.run([sys.executable, "-m", "selector", *argv], stdout=out,
                           stderr=subprocess.PIPE, text=True, cwd=str(tmp_path), env=env,
                           preexec_fn=no_room, timeout=300)
    _one_error_line(p, "EFBIG")
    assert (tmp_path / "out.txt").stat().st_size == 0

    p = subprocess.run(f"{sys.executable} -m selector {' '.join(argv)} >&-", shell=True,
                       stderr=subprocess.PIPE, text=True, cwd=str(tmp_path), env=env,
                       timeout=300)
    _one_error_line(p, "closed")


def test_15_no_test_writes_a_device_or_a_path_outside_its_tmp_dir():
    """The suite itself: no test names the full device (on a machine without it, a write there
    creates a regular file that breaks the next run)."""
    device = "/dev/" + "full"
    named = [p.name for p in (REPO / "tests").rglob("*.py") if device in p.read_text()]
    assert not named, named


# -- 16. API arguments of the wrong type -------------------------------------------------------

class Ambiguous:
    """Behaves like a numpy array: comparing it gives something with no truth value."""

    def __eq__(self, other):
        return self

    def __bool__(self):
        raise ValueError("The truth value of an array with more than one element is ambiguous")

    __hash__ = None


@pytest.mark.parametrize("dirs", [[None], [b"/tmp"], ["\x00"], [""], [3]])
def test_16_bad_config_dirs(dirs):
    with pytest.raises(SelectorError, match="config"):
        selector.load(["platform=b200"], config_dirs=dirs)


@pytest.mark.parametrize("key", ["op", "quant", "activation", "dtype", "all2all"])
def test_16_bad_layer_values(key):
    with pytest.raises(SelectorError, match=key):
        selector.load(["platform=b200"]).select(**{key: Ambiguous()})


# -- 17. bounded caches ------------------------------------------------------------------------

def test_17_api_caches_are_bounded(monkeypatch):
    import selector.api
    sel = selector.load(["platform=b200", "stack=vllm_0_32"])
    monkeypatch.setattr(selector.api, "CACHE_SIZE", 100)
    for i in range(1, 1001):
        sel.select(num_tokens=i)
    assert len(sel._by_kwargs) <= 100 and len(sel._by_layer) <= 100
    assert len(sel._layers) <= 100
    assert sel.select(num_tokens=7).to_dict()["layer"]["num_tokens"] == 7


# -- 18. detected and user strings cannot forge output lines -----------------------------------

def test_18_gpu_name_cannot_forge_a_line(tmp_path):
    forged = "NVIDIA\nselected: evil\x1b[2J"
    d = user_dir(tmp_path, {"platform/mybox.yaml":
                            f"capability: '12.0'\ngpu_name: {json.dumps(forged)}\n"})
    for sel in (selector.load(["platform=auto"], detect=fake_detect((12, 0), forged)),
                selector.load(["platform=mybox"], config_dirs=[d])):
        text = str(sel.default())
        assert [ln for ln in text.splitlines() if ln.startswith("selected:")] == \
            [ln for ln in text.splitlines() if ln.startswith("selected:")][:1]
        assert "\x1b" not in text
    from selector.core.text import printable
    assert printable("a\nb\x1b") == "a\\nb\\x1b"


# -- 19. smaller ones ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["back\\slash", "new\nline", "quote'dir", "trail\\"])
def test_19_config_dir_path_with_odd_characters(tmp_path, name):
    d = tmp_path / name
    (d / "platform").mkdir(parents=True)
    (d / "platform" / "mybox.yaml").write_text("capability: '12.0'\n")
    sel = selector.load(["platform=mybox"], config_dirs=[d])
    assert sel.platform.source == "mybox" and sel.platform.capability == (12, 0)


def test_19_yml_preset_is_refused(tmp_path):
    d = user_dir(tmp_path, {"platform/px.yml": "capability: '12.0'\n"})
    refused(["explain", "--config-dir", str(d), "platform=px"], "px.yml", "rename it")


@pytest.mark.parametrize("name", ["none", "auto"])
def test_19_reserved_backend_names(tmp_path, name):
    d = user_dir(tmp_path, {f"backend/moe/{name}.yaml": BACKEND})
    refused(["explain", "--config-dir", str(d), "platform=cpu"], f"{name}.yaml", "reserved")


def test_19_cache_environment_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("SELECTOR_NO_CACHE", "0")
    selector.load(["platform=b200", "layer.ep_size=5"])
    assert list((tmp_path / "cache").glob("*.json")), "SELECTOR_NO_CACHE=0 turned the cache off"
    monkeypatch.setenv("SELECTOR_NO_CACHE", "maybe")
    refused(["explain", "platform=b200"], "SELECTOR_NO_CACHE")
    monkeypatch.delenv("SELECTOR_NO_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SELECTOR_CACHE_DIR", "~/x")
    selector.load(["platform=b200", "layer.ep_size=6"])
    assert list((tmp_path / "home" / "x").glob("*.json"))
    monkeypatch.delenv("SELECTOR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    selector.load(["platform=b200", "layer.ep_size=7"])
    assert list((tmp_path / "xdg" / "selector").glob("*.json"))


@pytest.mark.parametrize("value", ["\u0661\u0662.\u0660", "１２.０", "12.\u0660"])
def test_19_capability_takes_ascii_digits_only(value):
    refused(["explain", f"platform.capability={value}"], "platform.capability")


def test_19_self_including_preset(tmp_path):
    d = user_dir(tmp_path, {"layer/me.yaml": "defaults:\n  - me\n  - _self_\nop: moe\n",
                            "layer/a.yaml": "defaults:\n  - b\n  - _self_\n",
                            "layer/b.yaml": "defaults:\n  - a\n  - _self_\n"})
    refused(["explain", "--config-dir", str(d), "platform=cpu", "layer=me"], "loop")


# -- issue 9 item 7: errors translated from attributes, not message text ----------------------

def test_errors_come_from_attributes_not_message_text():
    from omegaconf.errors import ValidationError

    from selector.config.hydra_errors import translate_omegaconf
    exc = ValidationError("Could not override 'policy.strict'. full_key: layer.op")
    exc.full_key, exc.value = "layer.ep_size", "abc"
    msg = str(translate_omegaconf(exc))
    assert msg.startswith("layer.ep_size: 'abc'") and "integer" in msg, msg


def test_version_keys_and_package_versions_stay_strings():
    """`platform.cuda=13.0` would otherwise reach the config as the float 13.0."""
    from selector.config.composer import normalize_overrides
    assert normalize_overrides(["platform.cuda=13.0", "platform.capability=9.0",
                                "platform.packages.torch=2.11", 'platform.cuda="13.0"',
                                "platform.cuda=null", "layer.top_k=8"]) == [
        "platform.cuda='13.0'", "platform.capability='9.0'", "++platform.packages.torch='2.11'",
        'platform.cuda="13.0"', "platform.cuda=null", "layer.top_k=8"]


@pytest.mark.parametrize("content", ["null", "[]", '"x"'])
def test_11_a_null_cache_entry_is_warned_about_like_the_others(tmp_path, monkeypatch, content):
    """issue 48: `null` was taken for "no entry" and recomputed without the warning the
    others get."""
    from selector.config import catalogues as cat
    overrides = ["platform=b200", "stack=vllm_0_32", "layer.ep_size=4"]
    selector.load(overrides)
    path, _ = _cache_file(tmp_path, overrides)
    path.write_text(content)
    said: list = []
    monkeypatch.setattr(cat, "WARN", said.append)
    selector.load(overrides)
    assert [w for w in said if str(path) in w and "composed-config cache entry" in w], said
