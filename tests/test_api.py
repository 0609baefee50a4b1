"""The embedding API (docs/interface.md "Python"): load once, select per layer from a cache, the
same JSON and text as the command line, cheap import, thread safety."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import pytest
from helpers import REPO, cli_env, load, run_cli_many

import selector
from selector.core.decision import Decision
from selector.core.errors import SelectorError

DGX = ("platform=dgx_spark", "stack=flashinfer_0_7_4")
DGX_NEMOTRON = DGX + ("layer=nemotron_moe",)
HEAVY = ("torch", "hydra", "omegaconf", "flashinfer", "cutlass", "triton", "vllm", "sgl_kernel",
         "b12x")


@pytest.fixture(scope="module")
def cli_runs():
    argvs = {"json": ("explain", "--format", "json", *DGX_NEMOTRON),
             "text": ("explain", *DGX_NEMOTRON),
             "json-req": ("explain", "--format", "json", *DGX_NEMOTRON,
                          "policy.moe_backend=flashinfer_b12x", "layer.ep_size=2"),
             "text-lin": ("explain", *DGX, "layer=w4a16_linear")}
    keys = list(argvs)
    return dict(zip(keys, run_cli_many([argvs[k] for k in keys])))


def test_load_once_select_per_layer():
    sel = load(*DGX)
    moe = sel.select(op="moe", quant="nvfp4", activation="relu2", act_and_mul=False, ep_size=1)
    lin = sel.select(op="linear", quant="nvfp4", hidden_size=4096, intermediate_size=4096)
    fp8 = sel.select(op="linear", quant="int8")
    assert isinstance(moe, Decision)
    assert moe.selected == "flashinfer_cutlass" and moe.layer.op == "moe"
    assert lin.selected == "flashinfer_cutlass" and lin.layer.op == "linear"
    assert lin.entry_point != moe.entry_point
    assert fp8.selected is None and fp8.entry_point is None
    assert {c.status for c in fp8.candidates} == {"not_applicable"}


def test_unset_keys_come_from_config():
    sel = load(*DGX_NEMOTRON)
    d = sel.select(ep_size=2)
    assert d.layer.activation == "relu2" and d.layer.act_and_mul is False
    assert d.layer.num_experts == 128 and d.layer.ep_size == 2
    assert sel.default().layer.ep_size == 1


def test_cache_returns_the_same_object():
    sel = selector.load(list(DGX_NEMOTRON))  # a fresh Selector: empty caches
    a = sel.select(ep_size=2, activation="relu2")
    assert sel.select(ep_size=2, activation="relu2") is a
    assert sel.select(activation="relu2", ep_size=2) is a  # same layer, other keyword order
    assert sel.select() is sel.default()
    assert sel.select(activation="relu2") is sel.default()  # same layer as the configured one
    assert sel.select(ep_size=4) is not a


def test_load_twice_same_answer():
    a = selector.load(list(DGX_NEMOTRON)).default()
    b = selector.load(list(DGX_NEMOTRON)).default()
    assert a == b and a.to_dict() == b.to_dict()


@pytest.mark.parametrize("kw", [{"actvation": "relu2"}, {"backend": "marlin"},
                                {"layer": "nemotron_moe"}], ids=str)
def test_unknown_keyword(kw):
    with pytest.raises(selector.SelectorError) as e:
        load(*DGX).select(**kw)
    assert repr(next(iter(kw))) in str(e.value) and "accepted:" in str(e.value)


def test_selector_error_is_a_value_error_with_exit_code_2():
    assert issubclass(selector.SelectorError, ValueError)
    assert selector.SelectorError("x").exit_code == 2


def test_to_dict_equals_cli_json(cli_runs):
    r = cli_runs["json"]
    assert r.returncode == 0, r.stderr
    d = load(*DGX_NEMOTRON).default()
    assert d.to_dict() == json.loads(r.stdout)
    assert json.loads(json.dumps(d.to_dict())) == d.to_dict()


def test_to_dict_equals_cli_json_with_policy_and_layer_override(cli_runs):
    r = cli_runs["json-req"]
    assert r.returncode == 1  # flashinfer_b12x refuses EP; strict
    via_overrides = load(*DGX_NEMOTRON, "policy.moe_backend=flashinfer_b12x",
                         "layer.ep_size=2").default()
    via_select = load(*DGX_NEMOTRON, "policy.moe_backend=flashinfer_b12x").select(ep_size=2)
    assert via_overrides.to_dict() == json.loads(r.stdout) == via_select.to_dict()


def test_str_is_the_text_form(cli_runs):
    r = cli_runs["text"]
    assert r.returncode == 0
    d = load(*DGX_NEMOTRON).default()
    assert str(d) + "\n" == r.stdout
    r = cli_runs["text-lin"]
    assert str(load(*DGX, "layer=w4a16_linear").default()) + "\n" == r.stdout


def test_entry_point_is_module_colon_class():
    for overrides in (DGX_NEMOTRON, DGX + ("layer=dense_linear",)):
        d = load(*overrides).default()
        assert re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", d.entry_point), d.entry_point
        assert d.entry_point == d.to_dict()["entry_point"]
    assert load("platform=cpu", "layer.activation=relu2").default().entry_point is None


def test_decision_fields():
    d = load(*DGX_NEMOTRON).default()
    assert d.requested == "auto" and d.ok
    assert d.candidate("flashinfer_b12x").status == "opt_in"
    with pytest.raises(KeyError):
        d.candidate("flashinfer_cudnn")  # a linear backend: not a candidate for moe
    assert d.platform["capability"] == "12.1"
    assert isinstance(d.notes, tuple) and isinstance(d.candidates, tuple)


def test_user_config_dir_presets(tmp_path):
    (tmp_path / "layer").mkdir()
    (tmp_path / "layer" / "my_moe.yaml").write_text(
        "op: moe\nquant: nvfp4\nactivation: relu2\nact_and_mul: false\nnum_experts: 64\n")
    (tmp_path / "platform").mkdir()
    (tmp_path / "platform" / "my_rig.yaml").write_text(
        'preset: my_rig\ncapability: "12.0"\ncuda: "13.0"\n'
        'packages:\n  flashinfer-python: "0.7.4"\n  nvidia-cutlass-dsl: "4.10"\n')
    sel = selector.load(["platform=my_rig", "layer=my_moe"], config_dirs=[tmp_path])
    d = sel.default()
    assert d.layer.num_experts == 64 and d.layer.activation == "relu2"
    assert d.platform["source"] == "my_rig" and d.platform["capability"] == "12.0"
    assert d.platform["packages"]["nvidia-cutlass-dsl"] == "4.10"
    assert d.selected == "flashinfer_cutlass"


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=str(REPO), env=cli_env(),
                          capture_output=True, text=True, timeout=120)


_LOADED = ("import json, sys\n"
           "def heavy():\n"
           f"    names = {HEAVY!r}\n"
           "    return sorted(m for m in sys.modules\n"
           "                  if any(m == n or m.startswith(n + '.') for n in names))\n")


def test_import_selector_is_light():
    r = _fresh_python(_LOADED + "import selector\n"
                      "from selector import SelectorError\n"
                      "print(json.dumps(heavy()))\n")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == []


def test_cached_load_and_select_stay_light():
    """With the composed config cached, a second process decides without Hydra or torch."""
    selector.load(["platform=b200", "stack=flashinfer_0_7_4"])  # composed and cached to disk
    r = _fresh_python(_LOADED + "import selector\n"
                      "sel = selector.load(['platform=b200', 'stack=flashinfer_0_7_4'])\n"
                      "d = sel.select(activation='relu2', act_and_mul=False)\n"
                      "assert d.selected == 'flashinfer_trtllm', d.selected\n"
                      "str(d); d.to_dict()\n"
                      "print(json.dumps(heavy()))\n")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == []


def test_a_repeated_explain_on_this_machine_reads_no_yaml():
    """`explain` under platform=auto reads the stack presets (the version guard); a second run
    finds them in the cache beside the composed config: no YAML parser, no `tune` module, and
    NVML's child started before packaging and importlib.metadata are imported (issue #46: the
    cold start)."""
    code = ("import contextlib, io, json, sys\n"
            "from selector.commands.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['explain'])\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'yaml' or\n"
            "                        m == 'selector.commands.tune')))\n")
    assert _fresh_python(code).returncode == 0
    r = _fresh_python(code)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == []
    early = _fresh_python("import json, sys\n"
                          "from selector.inspect.gpu_probe import start_gpu_probe\n"
                          "start_gpu_probe()\n"
                          "print(json.dumps(sorted(m for m in ('packaging', 'importlib.metadata',"
                          " 'selector.core.rules') if m in sys.modules)))\n")
    assert early.returncode == 0, early.stderr
    assert json.loads(early.stdout.splitlines()[-1]) == []


def test_lazy_attributes():
    assert selector.Decision is Decision
    assert callable(selector.load) and selector.Selector.__name__ == "Selector"
    with pytest.raises(AttributeError):
        selector.no_such_thing  # noqa: B018


LAYERS = [
    {}, {"activation": "relu2", "act_and_mul": False}, {"ep_size": 2}, {"quant": "nvfp4_w4a16"},
    {"op": "linear", "hidden_size": 4096, "intermediate_size": 4096}, {"quant": "int8"},
    {"swiglu_limit": 10.0}, {"activation": "gelu_tanh"}, {"dtype": "float16"},
    {"op": "linear", "hidden_size": 4100}, {"activation": "relu2", "act_and_mul": True},
    {"num_tokens": 8}, {"num_tokens": 8192}, {"ep_size": 4, "all2all": "flashinfer_nvlink_two_sided"},
]


def test_thread_safety_smoke():
    base = load("platform=rtx_5090", "stack=vllm_0_32", "policy.moe_backend=flashinfer_b12x",
                "policy.strict=false")
    expected = [base.select(**kw).to_dict() for kw in LAYERS]
    sel = selector.load(["platform=rtx_5090", "stack=vllm_0_32",
                         "policy.moe_backend=flashinfer_b12x", "policy.strict=false"])
    barrier = threading.Barrier(8)
    seen = [None] * 8
    errors = []

    def work(t):
        try:
            barrier.wait()
            got = []
            for i in range(1000):
                k = (i * 7 + t) % len(LAYERS)
                got.append((k, sel.select(**LAYERS[k])))
            seen[t] = got
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    canonical = {}
    for got in seen:
        assert len(got) == 1000
        for k, d in got:
            first = canonical.setdefault(k, d)
            assert d is first, "every thread must get the one cached decision per layer"
    assert len(canonical) == len(LAYERS)
    for k, d in canonical.items():
        assert d.to_dict() == expected[k]


@pytest.mark.parametrize("bad, what", [
    ("platform=b200", "str"), (b"platform=b200", "bytes"), (3, "int"), (None, "NoneType")])
def test_load_refuses_overrides_and_config_dirs_that_are_not_lists(bad, what):
    with pytest.raises(SelectorError) as e:
        selector.load(bad)
    assert str(e.value) == ("overrides must be a list of strings such as ['platform=auto'], "
                            f"not {what}")
    with pytest.raises(SelectorError) as e:
        selector.load(["platform=b200"], config_dirs=bad)
    assert str(e.value) == f"config_dirs must be a list of directories, not {what}"


def test_probes_run_only_when_asked():
    """probe=deep imports kernel libraries in children: never on a plain load."""
    sel = selector.load(["platform=b200"])
    assert sel.probes == {} and sel.run_config.probe != "deep"


def test_a_fork_inside_an_import_keeps_the_module_being_imported(tmp_path, monkeypatch):
    """The at-fork repair (core/locks.py) drops only import locks that another thread held:
    a module this thread is importing when it forks stays in the child's sys.modules."""
    import sys

    import selector.core.locks  # noqa: F401 - registers the repair
    (tmp_path / "forks_on_import.py").write_text(
        "import os, sys\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if sys.modules.get(__name__) is not None else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "CHILD = os.waitstatus_to_exitcode(status)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import forks_on_import
        assert forks_on_import.CHILD == 0
    finally:
        sys.modules.pop("forks_on_import", None)


def test_a_fork_while_another_thread_imports_leaves_the_child_able_to_import(tmp_path,
                                                                             monkeypatch):
    """The lock of a module another thread was importing at the fork is dropped in the child,
    and so is the half-made module: the child imports it afresh instead of waiting forever on
    a lock whose owner does not exist there."""
    import builtins
    import os
    import sys
    import threading
    import time

    import selector.core.locks  # noqa: F401 - registers the repair
    gate = threading.Event()
    monkeypatch.setattr(builtins, "_selector_test_gate", gate, raising=False)
    (tmp_path / "slow_to_import.py").write_text(
        "import builtins\nbuiltins._selector_test_gate.wait(60)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    t = threading.Thread(target=__import__, args=("slow_to_import",))
    t.start()
    try:
        for _ in range(600):  # until the thread is inside the module's body
            mod = sys.modules.get("slow_to_import")
            if getattr(getattr(mod, "__spec__", None), "_initializing", False):
                break
            time.sleep(0.01)
        pid = os.fork()
        if pid == 0:
            try:
                gate.set()
                import slow_to_import
                os._exit(0 if slow_to_import.DONE else 3)
            finally:
                os._exit(4)
        for _ in range(3000):  # a child stuck on the dead thread's lock never exits
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the child hung on the import lock of a thread it does not have")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        gate.set()
        t.join()
        sys.modules.pop("slow_to_import", None)
