"""Concurrency: one Selector shared by many threads, first-time cache fills racing, answers
identical to a serial run; concurrent cold `selector.load` calls (Hydra is process-global) and
concurrent processes sharing one cache directory.
"""
from __future__ import annotations

import random
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

import pytest
from helpers import child_env

import selector
from selector.api import Selector

pytestmark = pytest.mark.slow  # subprocess / fuzz suite: `pytest -m "not slow"` skips it

REPO = Path(__file__).resolve().parent.parent
THREADS = 16
DECISIONS = 10_000


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SELECTOR_NO_CACHE", raising=False)


def layer_mix() -> List[Dict]:
    """About 50 distinct layers (some spelled two ways: kwargs order, defaults given)."""
    out = []
    for act, gated in (("silu", True), ("relu2", False), ("swigluoai", True), ("gelu", True),
                       ("relu2", True)):
        for quant in ("nvfp4", "nvfp4_w4a16", "int8"):
            for ep in (1, 8):
                out.append({"op": "moe", "activation": act, "act_and_mul": gated,
                            "quant": quant, "ep_size": ep})
    for quant in ("nvfp4", "nvfp4_w4a16", "unquantized"):
        for hidden in (4096, 4160, 7168, None):
            out.append({"op": "linear", "quant": quant, "hidden_size": hidden})
    out.append({"swiglu_limit": 7.0, "num_experts": 512})
    out.append({})
    out.append({"ep_size": 8, "op": "moe", "act_and_mul": False, "activation": "relu2",
                "quant": "nvfp4"})  # = an earlier layer, kwargs in another order
    out.append({"num_tokens": 16})
    out.append({"ep_size": 8, "all2all": "deepep_high_throughput"})
    out.append({"dtype": "float16"})
    out.append({"quant": "nvfp4_w4a16", "activation": "swigluoai", "swiglu_limit": 7.0})
    return out


def _worker(sel: Selector, layers: List[Dict], barrier: threading.Barrier, seed: int,
            seen: Dict[int, set], errors: List[BaseException]) -> None:
    rng = random.Random(seed)
    order = [rng.randrange(len(layers)) for _ in range(DECISIONS)]
    local: Dict[int, set] = defaultdict(set)
    try:
        barrier.wait()
        for i in order:
            local[i].add(id(sel.select(**layers[i])))
    except BaseException as exc:  # noqa: BLE001 - reported below
        errors.append(exc)
    for i, ids in local.items():
        seen[i].update(ids)  # set.update of a defaultdict entry: joined after the threads end


@pytest.mark.parametrize("platform", [["platform=dgx_spark", "stack=flashinfer_0_7_4"],
                                      ["platform=b200", "stack=vllm_0_32",
                                       "policy.moe_backend=flashinfer_cutlass",
                                       "policy.strict=false"]])
def test_many_threads_one_selector(platform):
    base = selector.load(platform)
    layers = layer_mix()
    assert len(layers) >= 45
    reference = Selector(base.run_config, base.tree)  # serial answers
    want = [reference.select(**kw).to_json() for kw in layers]
    shared = Selector(base.run_config, base.tree)  # fresh: every first fill races
    barrier = threading.Barrier(THREADS)
    seen: Dict[int, set] = defaultdict(set)
    errors: List[BaseException] = []
    threads = [threading.Thread(target=_worker, args=(shared, layers, barrier, seed, seen,
                                                      errors)) for seed in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not errors, errors[:3]
    for i, kw in enumerate(layers):
        got = shared.select(**kw)
        assert seen[i] == {id(got)}, f"layer {kw}: threads got {len(seen[i])} different objects"
        assert got.to_json() == want[i], kw
    # Two spellings of one layer: one decision object.
    assert shared.select(**layers[-2]) is shared.select(**{k: layers[-2][k] for k in
                                                          sorted(layers[-2])})


def test_cached_answers_do_not_depend_on_what_was_asked_before():
    """A cache hit never turns bad input into an answer (True == 1, 1.0 == 1 in Python)."""
    sel = Selector(selector.load(["platform=cpu"]).run_config)
    sel.select(ep_size=1, act_and_mul=True, num_tokens=1)
    for bad in ({"ep_size": True}, {"act_and_mul": 1}, {"num_tokens": 1.0},
                {"ep_size": 1.0}):
        with pytest.raises(selector.SelectorError):
            sel.select(**{**{"ep_size": 1, "act_and_mul": True, "num_tokens": 1}, **bad})
    with pytest.raises(selector.SelectorError):
        sel.select(tp_size=[1])  # unhashable: validated, never cached


def test_concurrent_cold_loads_in_one_process(tmp_path, monkeypatch):
    """Hydra keeps process-global state: cold composes from many threads must not collide."""
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cold"))
    overrides = [["platform=cpu", f"layer.ep_size={i % 4 + 1}"] for i in range(8)] + \
                [["platform=dgx_spark", "stack=flashinfer_0_7_4"]] * 4
    barrier = threading.Barrier(len(overrides))
    results: Dict[int, str] = {}
    errors: List[BaseException] = []

    def work(i):
        try:
            barrier.wait()
            results[i] = selector.load(overrides[i]).default().to_json()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(overrides))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors[:3]
    monkeypatch.setenv("SELECTOR_NO_CACHE", "1")
    for i, o in enumerate(overrides):
        assert results[i] == selector.load(o).default().to_json()


def test_concurrent_processes_share_a_cold_cache(tmp_path):
    """Several processes starting at once on one empty cache dir: identical output, a usable
    cache afterwards, no stray temporary files."""
    cache = tmp_path / "shared-cache"
    env = child_env(SELECTOR_CACHE_DIR=str(cache))
    env.pop("SELECTOR_NO_CACHE", None)
    argv = [sys.executable, "-m", "selector", "explain", "--format", "json",
            "platform=rtx_5090", "stack=flashinfer_0_6_15", "layer=qwen_moe"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              cwd=str(tmp_path)) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode in (0, 1) for p in procs), [o[1] for o in outs]
    assert len({o[0] for o in outs}) == 1
    files = sorted(cache.iterdir())
    # the composed config and the stack presets' data (presets.stack_data), nothing else
    assert sorted(f.name.startswith("stacks-") for f in files) == [False, True], files
    assert all(f.suffix == ".json" for f in files), files
    again = subprocess.run(argv, capture_output=True, env=env, cwd=str(tmp_path), timeout=120)
    assert again.stdout == outs[0][0]


# -- fork during a cold first load (issue 25, defect 8) --------------------------------------------

FORK_TRIAL = r"""
import faulthandler, os, random, signal, sys, threading, time
import selector
if sys.argv[4] == "api-first":  # the main thread imports the API, as an engine does
    load = selector.load
else:  # only `import selector`: the thread's first `selector.load` imports the API itself
    def load(overrides):
        return selector.load(overrides)
random.seed(int(sys.argv[1]))
t = threading.Thread(target=load, args=(["platform=cpu", "layer.ep_size=3"],), daemon=True)
t.start()
time.sleep(random.uniform(0.0, float(sys.argv[2])))
pid = os.fork()
forked = time.monotonic()
if pid == 0:  # the child: a cold load of its own must finish
    faulthandler.enable(all_threads=True)  # SIGABRT from the watcher: every stack on stderr
    try:
        selector.load(["platform=b200", "stack=flashinfer_0_7_4"]).default()
        os._exit(0)
    except BaseException as exc:
        import traceback
        traceback.print_exc()
        print(f"child: {type(exc).__name__}: {exc}", file=sys.stderr)
        os._exit(3)


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


# A stuck child waits on a lock and uses no CPU; a slow one (every core busy) still makes
# progress. So the verdict is by CPU progress, never by wall time: "hang" only when the child
# has used no CPU at all for STALL_S seconds of waiting.
STALL_S = float(sys.argv[3])
last, still = -1, 0.0
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        code = os.waitstatus_to_exitcode(status)
        print(f"exit {code}")
        print(f"child ended {time.monotonic() - forked:.1f} s after the fork", file=sys.stderr)
        break
    try:
        ticks = cpu_ticks(pid)
    except OSError:
        ticks = last
    still = still + 0.25 if ticks == last else 0.0
    last = ticks
    if still >= STALL_S:
        os.kill(pid, signal.SIGABRT)  # faulthandler prints where it is stuck
        os.waitpid(pid, 0)
        print(f"hang (no CPU used for {STALL_S:.0f} s)")
        break
    time.sleep(0.25)
t.join()
"""


def _fork_trials(seeds, mode: str, *, batch: int = 12, spread_s: float = 1.2,
                 stall_s: float = 30.0, guard_s: float = 900.0):
    """FORK_TRIAL for each seed, `batch` at a time, with every core kept busy; the failing
    outcomes (seed, rc, verdict, stderr). Two hang guards, both generous: the trial's own
    watcher (the child used no CPU for `stall_s` seconds), and `guard_s` seconds of wall time
    for a whole trial (a trial stuck outside its child is killed and reported, never waited on
    for ever)."""
    import os
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(max(2, os.cpu_count() or 2))]
    failed = []
    try:
        env = child_env(SELECTOR_NO_CACHE="1")
        seeds = list(seeds)
        for i in range(0, len(seeds), batch):
            trials = [(seed, subprocess.Popen(
                [sys.executable, "-c", FORK_TRIAL, str(seed), str(spread_s), str(stall_s), mode],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                for seed in seeds[i:i + batch]]
            for seed, p in trials:
                try:
                    out, err = p.communicate(timeout=guard_s)
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, err = p.communicate()
                    failed.append((seed, p.returncode, f"trial killed after {guard_s:.0f} s",
                                   err))
                    continue
                if (p.returncode, out.strip()) != (0, "exit 0"):
                    failed.append((seed, p.returncode, out.strip(), err))
    finally:
        for b in burners:
            b.kill()
            b.wait()
    return failed


def _report(failed) -> str:
    """The whole failing outcome: seed, exit status, verdict, the child's full stderr (stacks)."""
    return "\n\n".join(f"seed {seed}: trial rc {rc}, {verdict!r}\n{err}"
                       for seed, rc, verdict, err in failed)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["api-first", "thread"])
def test_fork_during_a_cold_first_load_under_cpu_load(tmp_path, mode):
    """A process forks at a random moment while another of its threads is inside its first,
    cold `selector.load()` (Hydra not yet imported), with every core busy: the child's own load
    must finish. Before the fix a fork that landed while that thread was importing Hydra's
    modules gave a child stuck forever on the import lock the thread held. `thread`: the main
    thread only ran `import selector`, so the thread's load imports selector.api too (issue 48:
    the at-fork repair was registered by selector.core.locks, which selector.api imports after
    selector.config; 4 of 4 such trials hung, now `import selector` registers it)."""
    failed = _fork_trials(range(12), mode, spread_s=1.2 if mode == "api-first" else 0.4)
    assert not failed, _report(failed)


@pytest.mark.slow
def test_fifty_fork_trials_under_load_do_not_hang(tmp_path):
    """The fork trial many times (SELECTOR_FORK_TRIALS, 50 unless set; CI's slow suite runs 50),
    both ways of reaching the first load, fork moments spread over the whole cold load: no
    hang, no failed child load."""
    import os
    n = int(os.environ.get("SELECTOR_FORK_TRIALS", "50"))
    seeds = list(range(100, 100 + n))
    failed = (_fork_trials(seeds[::2], "thread", batch=8, spread_s=0.8) +
              _fork_trials(seeds[1::2], "api-first", batch=8, spread_s=1.5))
    assert not failed, f"{len(failed)} of {n} trials failed\n" + _report(failed)


# A fork while another thread is inside a compiled extension's import (issue 48: 1 of 50 trials
# of the test above failed with "NameError: name 'MappingNode' is not defined" from PyYAML's
# CParser in the child): the moment made deterministic by pausing the loading thread while
# `yaml._yaml` (Cython) is half executed, at its `import yaml`.
EXTENSION_FORK = r"""
import importlib._bootstrap as b, os, sys, threading, traceback
import selector
orig = b._lock_unlock_module
inside, go = threading.Event(), threading.Event()


def hook(name):
    m = sys.modules.get("yaml._yaml")
    if threading.current_thread() is not threading.main_thread() and m is not None \
            and getattr(m.__spec__, "_initializing", False) and "MappingNode" not in vars(m):
        inside.set()
        go.wait()
    return orig(name)


b._lock_unlock_module = hook
t = threading.Thread(target=selector.load, args=(["platform=cpu"],), daemon=True)
t.start()
if not inside.wait(300):
    print("never paused")
    sys.exit(0)
b._lock_unlock_module = orig
pid = os.fork()
if pid == 0:
    try:
        got = selector.load(["platform=b200", "stack=flashinfer_0_7_4"]).default()
        assert got.selected, got
        os._exit(0)
    except BaseException:
        traceback.print_exc()
        os._exit(3)
go.set()
print("exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_fork_inside_a_compiled_extensions_import():
    """The child's own first load answers: the half-imported extension is not imported again
    (a Cython module cannot be: its second import gives back a module that never finishes),
    so PyYAML falls back to its pure-Python loader in that child."""
    if "yaml" in sys.modules and "yaml._yaml" not in sys.modules:
        pytest.skip("PyYAML without libyaml: no compiled extension to cut short")
    r = subprocess.run([sys.executable, "-c", EXTENSION_FORK],
                       env=child_env(SELECTOR_NO_CACHE="1"), capture_output=True, text=True,
                       timeout=600)
    if r.stdout.strip() == "never paused":
        pytest.skip("this PyYAML has no yaml._yaml that imports yaml")
    assert r.stdout.strip() == "exit 0", r.stdout + r.stderr
