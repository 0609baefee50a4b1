"""The recipes of docs/architecture.md, tried: a backend, a rule kind, an engine, a stack
preset and a quantization scheme, each with exactly the files its recipe names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pytest
from packaging.utils import canonicalize_name

import selector
from selector.core import rules
from selector.core.errors import SelectorError
from selector.core.rules import KINDS, PackageSpec, Reason, Rule, kinds_markdown, register
from selector.core.versions import parse_specifier

SPARK = ["platform=dgx_spark", "stack=flashinfer_0_7_4"]


def _backend(tmp_path, name, body):
    d = tmp_path / "backend" / "moe"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.yaml").write_text(body)
    return tmp_path


def test_add_a_backend(tmp_path):
    """YAML only: it competes, its preference entry lifts it for small batches on SM 12.x."""
    conf = _backend(tmp_path, "my_kernel", (
        'description: "a test kernel"\n'
        "rank: 900\n"
        "entry_point: selector.backends.wrappers.flashinfer_cutlass:CutlassMoE\n"
        "preference:\n"
        '  - when: {devices: ["12.x"], max_num_tokens: 32}\n'
        "    rank: 1\n"
        '    reason: "fastest for tiny batches here"\n'
        '    source: "test measurement"\n'
        "rules:\n"
        "  - kind: package\n"
        "    package: flashinfer-python\n"
        '    source: "test"\n'))
    sel = selector.load(SPARK, config_dirs=[conf])
    assert "my_kernel" in sel.catalogue.names("moe")
    small = sel.select(num_tokens=8)
    assert small.selected == "my_kernel"
    pref = small.notes_of("preference")
    assert [(n.backend, n.data["rank"], n.data["reason"]) for n in pref] == [
        ("my_kernel", 1, "fastest for tiny batches here")], small.note_data
    assert sel.select(num_tokens=4096).selected == "flashinfer_cutlass"
    assert sel.select(num_tokens=4096).candidate("my_kernel").status == "eligible"


def test_an_opt_in_backend_is_admitted_by_policy(tmp_path):
    conf = _backend(tmp_path, "my_kernel", (
        'description: "a test kernel"\nrank: 1\n'
        'opt_in: {reason: "experimental", source: "test"}\n'
        "rules: []\n"))
    assert selector.load(SPARK, config_dirs=[conf]).default().selected == "flashinfer_cutlass"
    sel = selector.load(SPARK + ["policy.allow_opt_in=[my_kernel]"], config_dirs=[conf])
    d = sel.default()
    assert d.selected == "my_kernel"
    assert [(n.backend, n.data["reason"]) for n in d.notes_of("opt_in_admitted")] == [
        ("my_kernel", "experimental")]


def test_allow_opt_in_names_opt_in_backends_only():
    with pytest.raises(SelectorError) as e:
        selector.load(SPARK + ["policy.allow_opt_in=[flashinfer_cutlass]"])
    assert "policy.allow_opt_in" in str(e.value) and "flashinfer_b12x" in str(e.value)


@pytest.fixture
def toolkit_kind():
    """The recipe's example kind, registered for one test."""

    @register
    class ToolkitRule(Rule):
        """A CUDA toolkit (nvcc) distribution must be installed for JIT-built kernels."""
        kind = "toolkit_test"

        @dataclass(frozen=True)
        class Params:
            package: str
            specifier: str = ""

        def setup(self, p: ToolkitRule.Params) -> None:
            self.req = PackageSpec(canonicalize_name(p.package), parse_specifier(
                f"{self.key}.specifier", p.specifier, where=self.where))

        @property
        def packages(self):
            return (self.req.name,)

        def evaluate(self, layer, facts) -> Optional[Reason]:
            if self.req.holds(facts):
                return None
            return self.reason(f"needs the CUDA toolkit {self.req.describe()}",
                               f"need {self.req.describe()}")

        def describe(self) -> str:
            return f"toolkit {self.req.describe()}"

    yield ToolkitRule
    del KINDS["toolkit_test"]


def test_add_a_rule_kind(tmp_path, toolkit_kind):
    conf = _backend(tmp_path, "jit_kernel", (
        'description: "a JIT-built kernel"\nrank: 1\n'
        "rules:\n"
        "  - kind: toolkit_test\n"
        "    package: nvidia-cuda-nvcc\n"
        '    specifier: ">=12.8"\n'
        '    source: "test"\n'))
    sel = selector.load(SPARK, config_dirs=[conf])
    c = sel.default().candidate("jit_kernel")
    assert c.status == "rejected" and [r.rule for r in c.reasons] == ["toolkit_test"]
    assert "nvidia-cuda-nvcc" in dict(sel.platform.packages)  # its package is watched
    ok = selector.load(SPARK + ['+platform.packages.nvidia-cuda-nvcc="12.9"'], config_dirs=[conf])
    assert ok.default().selected == "jit_kernel"
    assert "`toolkit_test`" in kinds_markdown() and "`package`: a string" in kinds_markdown()


def test_a_rule_kind_checks_its_typed_params(tmp_path, toolkit_kind):
    with pytest.raises(SelectorError) as e:
        rules.compile_rule({"kind": "toolkit_test", "source": "s"}, "k", "f.yaml")
    assert "k.package" in str(e.value) and "required" in str(e.value)
    with pytest.raises(SelectorError) as e:
        rules.compile_rule({"kind": "toolkit_test", "source": "s", "package": 3}, "k", "f.yaml")
    assert "k.package" in str(e.value) and "is not a string" in str(e.value)
    with pytest.raises(SelectorError) as e:
        rules.compile_rule({"kind": "toolkit_test", "source": "s", "package": "x",
                            "values": ["a"]}, "k", "f.yaml")
    assert "k.values" in str(e.value) and "specifier" in str(e.value)


# --------------------------------------------------------------------------------------------
# The recipes of docs/architecture.md, each performed in a temporary copy of the catalogue with
# exactly the files the recipe names; then `check` and a decision. Each missing step fails with
# a message that names it.

import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import selector.engines  # noqa: E402
from selector.backends import wrappers  # noqa: E402
from selector.backends.wrappers import _base  # noqa: E402
from selector.commands.check import check_tree  # noqa: E402
from selector.config import dirs  # noqa: E402, F401
from selector.core import packaged  # noqa: E402
from selector.engines.vllm_flags import VLLM_MOE_ACCEPTS  # noqa: E402

REPO_CONF = packaged.packaged_conf_dir()
REPO_ROOT = Path(__file__).resolve().parent.parent
_PACKAGED = packaged.packaged_conf_dir


@pytest.fixture
def copy(tmp_path, monkeypatch):
    """A copy of the packaged catalogue used as the packaged one, plus a folder whose modules
    import as selector.backends.wrappers.* and selector.engines.* (where a recipe's code goes)."""
    conf = tmp_path / "conf"
    shutil.copytree(REPO_CONF, conf, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    for mod in [m for n, m in list(sys.modules.items()) if n.startswith("selector.")
                and getattr(m, "packaged_conf_dir", None) is _PACKAGED]:
        monkeypatch.setattr(mod, "packaged_conf_dir", lambda: conf)
    code = tmp_path / "code"
    (code / "backends").mkdir(parents=True)
    (code / "engines").mkdir()
    monkeypatch.setattr(wrappers, "__path__", list(wrappers.__path__) + [str(code / "backends")])
    monkeypatch.setattr(selector.engines, "__path__",
                        list(selector.engines.__path__) + [str(code / "engines")])
    _base._catalogue_entries.cache_clear()
    yield conf, code
    _base._catalogue_entries.cache_clear()
    for m in [m for m in sys.modules if m.startswith(("selector.backends.wrappers.my_", "selector.engines.my"))]:
        del sys.modules[m]


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def _ok(report):
    assert report["ok"], report["problems"]
    return report


def _problems(report):
    return " | ".join(p["problem"] for p in report["problems"])


def _warnings(report):
    return " | ".join(w["warning"] for w in report["warnings"])


# -- recipe: add a backend -------------------------------------------------------------------

# step 1: an opt-in NVFP4 MoE backend with device, package, activation, parallel and known-issue
# rules (its class stands in with the reference path, so it runs on any machine)
BACKEND_YAML = """
    description: "my kernel: an NVFP4 MoE for SM 10.0 and 12.0, opt-in while it is new (test recipe)"
    rank: 85
    execution: native
    implements: [nvfp4]
    entry_point: selector.backends.wrappers.my_kernel:MyKernelMoE
    opt_in:
      reason: "new: vLLM and SGLang run it only when asked (test recipe)"
      source: "my-kernels 1.0 release notes (test recipe)"
    rules:
      - kind: device
        devices: ["10.0", "12.0"]
        source: "my-kernels 1.0 release notes (test recipe)"
      - kind: package
        package: flashinfer-python
        specifier: ">=0.7.4"
        message: "my kernel is built on FlashInfer 0.7.4's MoE launcher (test recipe)"
        source: "my-kernels 1.0 release notes (test recipe)"
      - kind: activation
        values: [silu]
        source: "my-kernels 1.0 release notes (test recipe)"
      - kind: parallel
        ep: true
        all2all_exclude: [deepep_low_latency]
        message: "my kernel takes the standard activation format only (test recipe)"
        source: "my-kernels 1.0 release notes (test recipe)"
      - kind: known_issue
        severity: warning
        when: {devices: ["12.0"], min_num_experts: 1025}
        message: "my kernel is slow with more than 1,024 experts on SM 12.0 (test recipe)"
        source: "my-kernels issue #1 (test recipe)"
    """
BACKEND_PY = """
    from .emulation import EmulationMoE


    class MyKernelMoE(EmulationMoE):
        '''The recipe's backend: its name and op come from its file.'''
    """
# step 3: the name, kernel and own rules of each engine that offers it, in that engine's home
OFFERS = {
    "vllm": """
        my_kernel:
          name: my_kernel
          source: "vLLM 9.9 fused_moe/oracle/nvfp4.py (map_nvfp4_backend: my_kernel; test recipe)"
          kernels:
            - kernel: MyKernelExperts
              source: "vLLM 9.9 fused_moe/experts/my_kernel_moe.py (test recipe)"
          rules:  # vLLM's own integration of this backend
            - kind: parallel
              ep: false
              message: "vLLM's integration of my kernel refuses expert parallelism (test recipe)"
              source: "vLLM 9.9 fused_moe/experts/my_kernel_moe.py (_supports_parallel_config; test recipe)"
    """,
    "sglang": """
        my_kernel:
          name: my_kernel
          source: "SGLang 9.9 srt/layers/moe/utils.py (MoeRunnerBackend.MY_KERNEL; test recipe)"
    """,
}
B200 = ["platform=b200", "stack=flashinfer_0_7_4"]


def _offer(root, engine):
    """Step 3 in one engine's home (`root`: a conf dir): its entry under backends.moe."""
    path = root / "engine" / f"{engine}.yaml"
    text = path.read_text()
    anchor = "\nbackends:\n  moe:\n"
    assert text.count(anchor) == 1, path
    entry = textwrap.indent(textwrap.dedent(OFFERS[engine]).lstrip(), "    ")
    path.write_text(text.replace(anchor, anchor + entry))


def _add_backend(conf, code, *, yaml=True, implementation=True, engines=True):
    if yaml:
        _write(conf / "backend" / "moe" / "my_kernel.yaml", BACKEND_YAML)
    if implementation:
        _write(code / "backends" / "my_kernel.py", BACKEND_PY)
    if engines:
        for engine in OFFERS:
            _offer(conf, engine)


def test_recipe_backend(copy, monkeypatch):
    conf, code = copy
    _add_backend(conf, code)
    report = _ok(check_tree([], []))
    assert "my_kernel" in report["backends"]["moe"] and "my_kernel" not in _warnings(report)
    assert selector.load(B200).default().candidate("my_kernel").status == "opt_in"
    d = selector.load(B200 + ["policy.moe_backend=my_kernel"]).default()
    assert d.selected == "my_kernel"
    impl = d.instantiate()
    assert type(impl).__name__ == "MyKernelMoE" and impl.backend == "my_kernel"
    assert type(impl).backend == "my_kernel"  # derived from the file naming the class
    # each engine that offers it names it, with the kernel and the flag; its own rules apply
    v = selector.load(B200 + ["engine=vllm", "policy.moe_backend=my_kernel"]).default()
    # ... but no flag the modeled release refuses: vLLM 0.32's NVFP4 oracle has no my_kernel
    # value (selector/engines/vllm_flags.py VLLM_MOE_ACCEPTS, compared with vLLM's own
    # map_nvfp4_backend by tests/vllm/test_launch_flags.py), so `no_flag` says why
    assert (v.selected, list(v.engine.flags), v.engine.kernel) == (
        "my_kernel", [], "MyKernelExperts")
    assert "MoE oracle does not take moe_backend='my_kernel'" in v.engine.no_flag, v.engine.no_flag
    # a release whose oracle takes the value (its table lists it) gets the flag printed
    monkeypatch.setitem(VLLM_MOE_ACCEPTS, "nvfp4", VLLM_MOE_ACCEPTS["nvfp4"] + ("my_kernel",))
    v = selector.load(B200 + ["engine=vllm", "policy.moe_backend=my_kernel"]).default()
    assert (v.selected, list(v.engine.flags), v.engine.no_flag) == (
        "my_kernel", ["--moe-backend", "my_kernel"], "")
    ep = selector.load(B200 + ["engine=vllm", "policy.moe_backend=my_kernel",
                               "layer.ep_size=2"]).default().candidate("my_kernel")
    assert ep.status == "rejected" and "vLLM's integration" in ep.reasons[0].message
    s = selector.load(B200 + ["engine=sglang", "policy.moe_backend=my_kernel"]).default()
    assert list(s.engine.flags) == ["--moe-runner-backend", "my_kernel"]
    # an engine whose home does not name it (TensorRT-LLM) does not offer it
    c = selector.load(B200 + ["engine=trtllm"]).default().candidate("my_kernel")
    assert c.status == "not_applicable" and "names no my_kernel backend" in c.reasons[0].message


def test_recipe_backend_missing_steps(copy):
    conf, code = copy
    _add_backend(conf, code, yaml=False, engines=False)  # step 1 missing: the backend file
    with pytest.raises(SelectorError, match="policy.moe_backend: unknown backend 'my_kernel'"):
        selector.load(["platform=cpu", "policy.moe_backend=my_kernel"])
    _offer(conf, "vllm")  # ... while an engine's home names it: refused, naming the file
    problems = _problems(check_tree([], []))
    assert "vllm.yaml: engine.backends.moe.my_kernel: names no backend of the catalogue" \
        in problems, problems
    shutil.copy2(REPO_CONF / "engine" / "vllm.yaml", conf / "engine" / "vllm.yaml")
    shutil.rmtree(code / "backends")
    (code / "backends").mkdir()
    _add_backend(conf, code, implementation=False)  # step 2 missing: the implementation
    assert "selector.backends.wrappers.my_kernel:MyKernelMoE" in _problems(check_tree([], []))
    for engine in OFFERS:
        shutil.copy2(REPO_CONF / "engine" / f"{engine}.yaml", conf / "engine" / f"{engine}.yaml")
    _add_backend(conf, code, engines=False)  # step 3 missing: no engine names it
    report = _ok(check_tree([], []))
    assert "catalogue.moe.my_kernel is named by no engine" in _warnings(report)
    assert "conf/engine/<engine>.yaml backends.moe.my_kernel" in _warnings(report)
    c = selector.load(B200 + ["engine=vllm"]).default().candidate("my_kernel")
    assert c.status == "not_applicable" and "names no my_kernel backend: its engine file " \
        "lists the backends it has" in c.reasons[0].message


def test_recipe_backend_outside_name(copy):
    """Step 3 where the engine already offered the kernel: its `outside:` list named it, and
    `check` refuses the name until the step removes it there (exit 2, naming the key)."""
    conf, code = copy
    _add_backend(conf, code)
    path = conf / "engine" / "vllm.yaml"
    text = path.read_text()
    path.write_text(text.replace("\noutside:\n", '\noutside:\n  my_kernel: "vLLM 9.9 '
                                 'fused_moe/experts/my_kernel_moe.py (test recipe)"\n', 1))
    problems = _problems(check_tree([], []))
    assert "engine.outside.my_kernel: 'my_kernel' is the catalogue's moe/my_kernel" in problems
    path.write_text(text)
    _ok(check_tree([], []))


# -- recipe: add a rule kind -----------------------------------------------------------------

def test_recipe_rule_kind(copy, toolkit_kind):
    conf, _ = copy
    path = conf / "backend" / "moe" / "flashinfer_cutlass.yaml"
    path.write_text(path.read_text().replace("rules:\n", (
        "rules:\n  - kind: toolkit_test\n    package: nvidia-cuda-nvcc\n"
        '    specifier: ">=12.8"\n    source: "test recipe"\n'), 1))
    _ok(check_tree([], []))
    d = selector.load(["platform=b200", "stack=flashinfer_0_7_4"]).default()
    c = d.candidate("flashinfer_cutlass")
    assert c.status == "rejected" and "toolkit_test" in [r.rule for r in c.reasons]


def test_recipe_rule_kind_missing_step(copy):
    """Without the registered class, check names the unknown kind and the registered ones."""
    conf, _ = copy
    path = conf / "backend" / "moe" / "flashinfer_cutlass.yaml"
    path.write_text(path.read_text().replace("rules:\n", (
        "rules:\n  - kind: toolkit_test\n    package: nvidia-cuda-nvcc\n"
        '    source: "test recipe"\n'), 1))
    assert "unknown rule kind 'toolkit_test'" in _problems(check_tree([], []))


# -- recipe: add an engine -------------------------------------------------------------------

ENGINE_YAML = """
    # myengine: the engine's own file (name, label, flags, source)
    name: myengine
    label: "MyEngine 1.0"
    moe_flag: "--moe-kernel"
    linear_flag: "--gemm-kernel"
    source: "MyEngine 1.0 cli.py (test recipe)"
    """
ADAPTER_PY = """
    '''MyEngine's adapter: a decision made with engine=myengine as its command line.'''
    from selector.core.errors import SelectorError


    def server_args(*decisions):
        out = []
        for d in decisions:
            if d.engine is None or d.engine.name != "myengine":
                raise SelectorError("the decision was not made for MyEngine: engine=myengine")
            out.extend(d.engine.flags)
        return out
    """


def _name_in_backend_files(conf, skip=()):
    """Step 3: a name (or null) per backend file, with its source."""
    for f in sorted((conf / "backend").glob("*/*.yaml")):
        if f.stem in skip:
            continue
        name = f.stem if f.stem in ("flashinfer_cutlass", "emulation") else "null"
        text = f.read_text()  # the packaged files name no engine: their engines live at home
        head = "" if "\nengines:\n" in text else "engines:\n"
        f.write_text(text + head + f"  myengine:\n    name: {name}\n"
                     f'    source: "MyEngine 1.0 kernels.py (test recipe)"\n')


def test_recipe_engine(copy):
    conf, code = copy
    _write(conf / "engine" / "myengine.yaml", ENGINE_YAML)
    _write(code / "engines" / "my_engine.py", ADAPTER_PY)
    _name_in_backend_files(conf)
    report = _ok(check_tree([], []))
    assert not report["warnings"] or "myengine" not in _warnings(report)
    sel = selector.load(["platform=b200", "stack=flashinfer_0_7_4", "engine=myengine"])
    d = sel.default()
    assert d.selected == "flashinfer_cutlass"
    assert d.candidate("flashinfer_trtllm").status == "not_applicable"
    from selector.engines import my_engine
    assert my_engine.server_args(d) == ["--moe-kernel", "flashinfer_cutlass"]


def test_recipe_engine_missing_steps(copy):
    conf, code = copy
    _name_in_backend_files(conf)  # step 1 missing: the engine file
    assert "catalogue.linear.b12x.engines: unknown engine 'myengine'" in \
        _problems(check_tree([], []))
    _write(conf / "engine" / "myengine.yaml", ENGINE_YAML)
    _ok(check_tree([], []))
    with pytest.raises(ImportError):  # step 2 missing: the adapter
        __import__("selector.engines.my_engine")
    shutil.rmtree(conf / "backend")
    shutil.copytree(REPO_CONF / "backend", conf / "backend")
    _name_in_backend_files(conf, skip=("marlin",))  # step 3 missing in one file
    assert "catalogue.moe.marlin has no engines.myengine entry" in _warnings(check_tree([], []))


# -- recipe: add a stack preset --------------------------------------------------------------

STACK_YAML = """
    # What `pip install myengine==1.0` installs (test recipe).
    stack: {family: myengine, version: "1.0"}
    cuda: "13.0"
    packages:
      flashinfer-python: "0.7.4"
      nvidia-cutlass-dsl: "4.8.1"
    """


def test_recipe_stack_preset(copy):
    conf, _ = copy
    _write(conf / "stack" / "myengine_1_0.yaml", STACK_YAML)
    report = _ok(check_tree([], []))
    assert "myengine_1_0" not in _warnings(report)
    d = selector.load(["platform=b200", "stack=myengine_1_0"]).default()
    assert d.platform["packages"]["flashinfer-python"] == "0.7.4"
    assert d.selected == "flashinfer_trtllm"
    bare = selector.load(["platform=b200"]).default()  # offered by the no-packages hint
    assert "stack=myengine_1_0" in bare.hint


def test_recipe_stack_preset_missing_steps(copy):
    conf, _ = copy
    # no header is needed (conf/config.yaml: `- stack@platform: none`); '# @package platform'
    # is accepted too, any other is refused with the accepted ones, none among them
    _write(conf / "stack" / "myengine_1_0.yaml", "# @package platform\n" + STACK_YAML)
    _ok(check_tree([], []))
    _write(conf / "stack" / "myengine_1_0.yaml", "# @package layer\n" + STACK_YAML)
    problems = _problems(check_tree([], []))
    assert "stack=myengine_1_0: '@package layer' writes outside its own group" in problems
    assert "accepted header: none or '# @package platform'" in problems
    _write(conf / "stack" / "myengine_1_0.yaml",  # its `stack:` data missing
           STACK_YAML.replace('    stack: {family: myengine, version: "1.0"}\n', ""))
    assert "stack=myengine_1_0 has no `stack: {family: ..., version: ...}`" in \
        _warnings(_ok(check_tree([], [])))
    _write(conf / "stack" / "myengine_1_0.yaml",  # its version missing
           STACK_YAML.replace(', version: "1.0"', ""))
    assert "stack.version" in _problems(check_tree([], []))


# -- recipe: add a quantization scheme -------------------------------------------------------

def _implement(conf, scheme):
    """Step 2: the scheme in `implements:` of a backend file that runs it (Marlin's MoE runs int4
    weights too: vLLM 0.32.0 fused_moe/experts/marlin_moe.py _supports_quant_scheme, kInt4Static)."""
    path = conf / "backend" / "moe" / "marlin.yaml"
    text = path.read_text()
    assert text.count("implements: [") == 1
    path.write_text(text.replace("implements: [", f"implements: [{scheme}, ", 1))


def test_recipe_quantization_scheme(copy):
    conf, _ = copy
    _implement(conf, "int4")
    _ok(check_tree([], []))
    d = selector.load(["platform=h100", "stack=vllm_0_32", "layer.quant=int4"]).default()
    assert d.selected == "marlin"
    assert d.candidate("flashinfer_cutlass").status == "not_applicable"


def test_recipe_quantization_scheme_missing_steps(copy):
    conf, _ = copy
    # step 2 missing: no backend implements it, and each says so
    d = selector.load(["platform=h100", "stack=vllm_0_32", "layer.quant=int4"]).default()
    assert d.selected is None and d.outcome == "unsupported_layer"
    msg = d.candidate("marlin").reasons[0].message
    assert msg.startswith("implements nvfp4, nvfp4_w4a16") and "layers, not int4" in msg
    # step 1 missing: a scheme outside the vocabulary is refused, naming where it is added
    _implement(conf, "nvfp4_w4a8")
    problems = _problems(check_tree([], []))
    assert "catalogue.moe.marlin.implements: unknown value 'nvfp4_w4a8'" in problems
    assert "selector/core/schema.py (QUANTS)" in problems


def test_each_documented_recipe_is_tried_here():
    """docs/architecture.md's recipes are these five, and each names a test of this file."""
    import re

    from helpers import REPO
    doc = (REPO / "docs" / "architecture.md").read_text()
    assert re.findall(r"^### Add (?:a|an) (.+)$", doc, re.M) == [
        "backend", "rule kind", "engine", "stack preset", "quantization scheme"]
    tried = re.findall(r"Tried in `(test_\w+)`", doc)
    assert len(tried) >= 5 and all(callable(globals().get(t)) for t in tried), tried


def test_a_backend_file_declares_its_own_probes(copy):
    """Step 1 of the backend recipe may declare the backend's deep probes in the file itself
    (no edit of probe_specs.py): one runs in-process, one in a child process."""
    from selector.core import probe_specs
    from selector.inspect import probing
    conf, code = copy
    _add_backend(conf, code)
    path = conf / "backend" / "moe" / "my_kernel.yaml"
    path.write_text(path.read_text().replace("rules:\n", textwrap.dedent('''\
        probes:
          - name: my_kernel.module_shadowing
            func: selector.backends.children.probes.metadata_probes:module_shadowing
            description: "a top-level b12x module belongs to the b12x distribution"
            source: "test recipe"
          - name: my_kernel.triton
            func: selector.backends.children.probes.import_probes:triton_importable
            imports: [json]
            description: "import triton works"
            source: "test recipe"
        rules:
        '''), 1))
    try:
        _ok(check_tree([], []))
        sel = selector.load(["platform=cpu", "policy.moe_backend=my_kernel"])
        assert sel.catalogue.get("moe", "my_kernel").probes == (
            "my_kernel.module_shadowing", "my_kernel.triton")
        found = probing.run_probes(["my_kernel.module_shadowing", "my_kernel.triton"]).findings
        assert found["my_kernel.module_shadowing"].group == "metadata"
        child = found["my_kernel.triton"]
        assert child.group == "import:json" and "unknown probe" not in child.message
        assert "triton" in child.message  # the declared function ran in the child
    finally:
        probe_specs.DECLARED.pop("my_kernel.module_shadowing", None)
        probe_specs.DECLARED.pop("my_kernel.triton", None)
    # a declaration without its function is refused, naming the key
    path.write_text(path.read_text().replace(
        "    func: selector.backends.children.probes.metadata_probes:module_shadowing\n", ""))
    assert "catalogue.moe.my_kernel.probes[0].func" in _problems(check_tree([], []))
    probe_specs.DECLARED.pop("my_kernel.triton", None)


# -- the backend recipe in a copy of the whole repository: no other test breaks ---------------

# step 4: its literal expectations (devices; gated, non-gated activations; SGLang's name, where
# ENGINE_NAMES has none; a case on each side of its package, parallel and known-issue
# boundaries and of vLLM's own rule), each inserted at a line of tests/knowledge_cases.py
RECIPE_EXPECTATIONS = (
    ("EXPECT_DEVICES = {\n", '    "moe/my_kernel": {"10.0", "12.0"},  # test recipe\n'),
    ("EXPECT_ACTIVATIONS = {\n", '    "moe/my_kernel": ({"silu"}, {"silu"}),  # test recipe\n'),
    ("\n\ndef _engine_names() -> List[Case]:\n",
     '\nENGINE_NAMES["sglang"]["moe/my_kernel"] = "my_kernel"  # test recipe\n'),
    ("\n\n# " + "-" * 93 + "\n# Deciding a case\n", """
# test recipe: my_kernel's package, parallel and known-issue rules and vLLM's own rule
MY = "moe/my_kernel"
CASES += [
    C("my-kernel-fi-0.7.3", "10.0", MY, {"package"}, pk={FI: "0.7.3"}),
    C("my-kernel-fi-0.7.4", "10.0", MY, status="opt_in"),
    C("my-kernel-ep", "10.0", MY, layer={"ep_size": 2}, status="opt_in"),
    C("my-kernel-ep-deepep-ll", "10.0", MY, {"parallel"},
      layer={"ep_size": 2, "all2all": "deepep_low_latency"}),
    C("my-kernel-experts-1025", "12.0", MY, warns={"known_issue"}, layer={"num_experts": 1025}),
    C("my-kernel-experts-1024", "12.0", MY, layer={"num_experts": 1024}),
    C("my-kernel-experts-1025-sm100", "10.0", MY, layer={"num_experts": 1025}),
    C("vllm-my-kernel-ep", "10.0", MY, {"parallel"}, layer={"ep_size": 2}, engine="vllm"),
    C("vllm-my-kernel", "10.0", MY, engine="vllm", name="my_kernel", kernel="MyKernelExperts",
      scheme="nvfp4"),
]
"""),
)
# -- the engine recipe (docs/engines.md, "The recipe: add an engine") for a packaged engine ----
# Its three files: the engine's home (names for five catalogue backends, a rule of its own, two
# choice flags, its launch command), its module (a Launcher naming its automatic MoE kernel) and
# the test named in its `proof:`. Nothing else changes by hand; tools/regen.py rewrites the
# engine table of docs/engines.md, README.md's engine list and docs/keys.md's presets.
MYENGINE_YAML = """
    # MyEngine 9.9 (the engine recipe of docs/engines.md, performed by tests/test_recipes.py): a flag
    # engine with its own launch command, names for five catalogue backends and a rule of its own.
    name: myengine
    label: "MyEngine 9.9"
    package: myengine
    source: "MyEngine 9.9 myengine/args.py (--moe-kernel, --fp4-gemm; test recipe)"
    proof: "tests/test_myengine.py (the mapping against MyEngine 9.9's cited files; test recipe)"
    choices:
      - op: moe
        flag: "--moe-kernel"
        source: "MyEngine 9.9 myengine/args.py (--moe-kernel; test recipe)"
      - op: linear
        schemes: [nvfp4]
        flag: "--fp4-gemm"
        source: "MyEngine 9.9 myengine/args.py (--fp4-gemm; test recipe)"
    outside:
      naive: "MyEngine 9.9 myengine/moe/naive.py (a per-expert loop, its reference; test recipe)"
    launch:
      command: [myengine, serve, "{model}"]
      parallel:
        rule: ep_divides_tp
        tp: "--tensor-parallel"
        ep: "--expert-parallel"
        source: "MyEngine 9.9 myengine/args.py (--tensor-parallel, --expert-parallel; test recipe)"
      hooks: "selector.engines.myengine:MyEngineLauncher"  # its automatic MoE kernel
    backends:
      moe:
        flashinfer_cutlass:
          name: cutlass
          source: "MyEngine 9.9 myengine/moe/kernels.py (KERNELS['cutlass']: FlashInfer's CUTLASS MoE; test recipe)"
          rules:  # MyEngine's own integration
            - kind: device
              devices: ["10.0", "10.3"]
              message: "MyEngine 9.9 builds its CUTLASS MoE for SM 10.x only (test recipe)"
              source: "MyEngine 9.9 setup.py (CUTLASS_MOE_ARCHS = 100a, 103a; test recipe)"
        flashinfer_trtllm:
          name: trtllm-gen
          source: "MyEngine 9.9 myengine/moe/kernels.py (KERNELS['trtllm-gen']; test recipe)"
        marlin:
          name: marlin
          source: "MyEngine 9.9 myengine/moe/kernels.py (KERNELS['marlin']; test recipe)"
      linear:
        flashinfer_cutlass:
          name: cutlass
          source: "MyEngine 9.9 myengine/linear/fp4.py (FP4_GEMMS['cutlass']; test recipe)"
        flashinfer_cudnn:
          name: cudnn
          source: "MyEngine 9.9 myengine/linear/fp4.py (FP4_GEMMS['cudnn']; test recipe)"
    """
MYENGINE_PY = """
    '''selector for MyEngine 9.9 (the engine recipe's example, tests/test_recipes.py): its automatic
    MoE kernel, what it runs when `--moe-kernel` is not passed (MyEngine 9.9 myengine/moe/kernels.py
    `auto_kernel`: trtllm-gen on SM 10.x without expert parallelism, else cutlass).'''
    from __future__ import annotations

    from typing import Any, Optional

    from selector.checkpoint.launchers import Auto, Launcher

    AUTO_SOURCE = "MyEngine 9.9 myengine/moe/kernels.py (auto_kernel; test recipe)"


    def auto_kernel(sm: int, ep: int) -> str:
        '''MyEngine's automatic MoE kernel for a device (SM as 100 for 10.0) and EP size.'''
        return "trtllm-gen" if 100 <= sm < 110 and ep == 1 else "cutlass"


    class MyEngineLauncher(Launcher):
        '''MyEngine's launch plan: the base's flags, and its automatic MoE kernel.'''

        def automatic(self, sel: Any, plan: Any, group: Any) -> Optional[Auto]:
            cap = sel.run_config.platform.capability
            if group.op != "moe" or cap is None:
                return None
            sm = cap[0] * 10 + cap[1]
            return Auto((auto_kernel(sm, sel.run_config.parallel.ep),), f"auto_kernel on SM {sm}",
                        AUTO_SOURCE)


    __all__ = ["auto_kernel", "MyEngineLauncher"]
    """
MYENGINE_TEST = """
    '''MyEngine 9.9's proof (its file's `proof:`): the automatic kernel and the names held to
    the files they cite (test recipe); a launch plan is its own command.'''
    from helpers import REPO, run_main

    from selector.engines.myengine import auto_kernel

    MODEL = REPO / "tests" / "checkpoint_corpus" / "qwen3-30b-a3b-fp4"
    B200 = ("platform=b200", "stack=flashinfer_0_7_4")


    def test_auto_kernel_as_kernels_py_has_it():
        assert [auto_kernel(sm, ep) for sm, ep in ((100, 1), (103, 1), (100, 2), (120, 1), (90, 1))] \\
            == ["trtllm-gen", "trtllm-gen", "cutlass", "cutlass", "cutlass"]


    def test_a_plan_prints_its_own_command():
        rc, out, err = run_main(["explain", "--model", str(MODEL), "engine=myengine", *B200,
                                 "parallel.tp=2"])
        assert rc == 0, err
        assert f"command: myengine serve {MODEL} --tensor-parallel 2 --fp4-gemm cutlass" in out
        assert "MyEngine 9.9 alone runs trtllm-gen" in out  # its automatic kernel: no flag
        rc, out, err = run_main(["explain", "--model", str(MODEL), "engine=myengine", *B200,
                                 "parallel.tp=2", "parallel.ep=2"])
        assert rc == 0, err
        assert "--expert-parallel 2" in out and "(myengine: cutlass)" in out


    def test_its_own_rule_applies_under_it_only():
        argv = ["explain", "platform=rtx_5090", "stack=flashinfer_0_7_4", "layer=qwen_moe"]
        rc, out, _ = run_main(argv + ["engine=myengine"])
        assert "MyEngine 9.9 builds its CUTLASS MoE for SM 10.x only" in out
        rc, out, _ = run_main(argv)
        assert rc == 0 and "MyEngine" not in out
    """
ENGINE_RECIPE_FILES = {"conf/engine/myengine.yaml": MYENGINE_YAML,
                       "selector/engines/myengine.py": MYENGINE_PY,
                       "tests/test_myengine.py": MYENGINE_TEST}



def test_recipe_engine_packaged(copy):
    """The engine recipe's first two files as a packaged engine (its home in conf/engine/, its
    module among selector.engines): `check` passes, its names, its own rule and its command."""
    conf, code = copy
    _write(conf / "engine" / "myengine.yaml", MYENGINE_YAML)
    _write(code / "engines" / "myengine.py", MYENGINE_PY)
    report = _ok(check_tree([], []))
    assert "myengine" not in _warnings(report)
    sel = selector.load(B200 + ["engine=myengine", "parallel.tp=2"])
    assert sel.select(op="moe").engine.flags == ("--moe-kernel", "trtllm-gen")
    model = REPO_ROOT / "tests" / "checkpoint_corpus" / "qwen3-30b-a3b-fp4"
    lp = sel.launch_plan(model)
    assert lp.command() == f"myengine serve {model} --tensor-parallel 2 --fp4-gemm cutlass"
    c = selector.load(["platform=rtx_5090", "stack=flashinfer_0_7_4", "engine=myengine"]) \
        .default().candidate("flashinfer_cutlass")
    assert c.status == "rejected" and "MyEngine 9.9 builds its CUTLASS MoE" in c.reasons[0].message
    assert selector.load(["platform=rtx_5090", "stack=flashinfer_0_7_4"]).default().candidate(
        "flashinfer_cutlass").status != "rejected"  # its rule applies under it only

# what the recipe touches by hand (docs/architecture.md, "Add a backend"); the rest regenerated
RECIPE_FILES = ["backends/wrappers/my_kernel.py", "conf/backend/moe/my_kernel.yaml",
                "conf/engine/sglang.yaml", "conf/engine/vllm.yaml", "tests/knowledge_cases.py"]
# left out on the copy: the tests that add my_kernel or myengine themselves (each is there
# already), and the tests that check each engine home's names against the released engine's
# own (the recipe's engine names are made up: "vLLM 9.9")
SELF = ("not (test_recipe_backend or test_recipe_engine or "
        "test_a_backend_file_declares_its_own_probes or "
        "test_add_a_backend or test_an_opt_in_backend_is_admitted_by_policy or "
        "test_sglang_names_match_its_released_source or "
        "test_the_catalogues_vllm_moe_names_are_ones_vllms_oracles_take)")


def _tracked_copy(dest):
    """The repository's tracked files (as `git ls-files` lists them, with this checkout's
    changes), laid out as a wheel would: selector/backends and selector/conf are the top-level
    folders, so the copy imports its own kernel modules."""
    import subprocess

    from helpers import REPO
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for f in filter(None, (f.decode() for f in files)):
        src = REPO / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    (dest / "selector" / "backends").symlink_to("../backends")


def _perform_backend_recipe(repo):
    """docs/architecture.md's backend recipe, steps 1-4, in the copy `repo`."""
    _write(repo / "conf" / "backend" / "moe" / "my_kernel.yaml", BACKEND_YAML)
    _write(repo / "backends" / "wrappers" / "my_kernel.py", BACKEND_PY)
    for engine in OFFERS:
        _offer(repo / "conf", engine)
    kc = repo / "tests" / "knowledge_cases.py"
    text = kc.read_text()
    for anchor, line in RECIPE_EXPECTATIONS:
        assert text.count(anchor) == 1, anchor
        text = text.replace(anchor, line + anchor if anchor.startswith("\n") else anchor + line)
    kc.write_text(text)


def _perform_engine_recipe(repo):
    """docs/engines.md's engine recipe, its three files, in the copy `repo`."""
    assert len(ENGINE_RECIPE_FILES) <= 3  # the recipe's bound (issue 49)
    for path, text in ENGINE_RECIPE_FILES.items():
        assert not (repo / path).exists(), path
        _write(repo / path, text)


def _run(py, args, repo, env, timeout=3600):
    import subprocess
    return subprocess.run(py + args, cwd=repo, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_recipe_backends_own_mutations_are_all_killed(tmp_path):
    """CI's recipe step (below) runs the fast suite on a copy that has the recipe's backend, so
    test_a_sample_of_catalogue_mutations_is_all_killed draws from that copy's catalogue. Every
    mutation of the recipe's backend (its YAML, its entries in vLLM's and SGLang's homes) is
    killed by the expectations the recipe adds; any other mutation the copy's draw takes, the
    same draw took on this catalogue (tools/mutate_catalogue.py _sample)."""
    import json

    from helpers import child_env
    repo = tmp_path / "repo"
    _tracked_copy(repo)
    _perform_backend_recipe(repo)
    env = child_env(repo)
    env["SELECTOR_CACHE_DIR"] = str(tmp_path / "cache")  # the new catalogue composes afresh
    r = _run([sys.executable], ["tools/mutate_catalogue.py", "--only", "moe/my_kernel ",
                                "--json"], repo, env, timeout=1800)
    res = json.loads(r.stdout)
    assert res["run"] >= 15 and not res["survived"], res["survived"]
    assert not res["equivalent"] and r.returncode == 0, r.stderr


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SELECTOR_RECIPE_TEST"), reason=(
    "composes the changed catalogue afresh and runs the whole fast suite in a copy (CPU-hours "
    "on one core): .ci/run runs it with SELECTOR_RECIPE_TEST=1"))
def test_recipe_backend_and_engine_breaks_no_other_test(tmp_path):
    """Two recipes on one copy of the repository, so the whole fast suite runs once for both.
    docs/architecture.md's backend recipe, with the realistic backend above: its YAML, its
    class, its entries in the homes of the two engines that offer it (vLLM, SGLang), its
    expectations. docs/engines.md's engine recipe, with MyEngine above: its home, its module and
    its proof test (at most 3 files). Then `tools/regen.py`; git sees only the recipes' files and
    regenerated ones; `check` passes; the new engine plans a checkpoint and prints its own
    command; and the whole fast suite passes on the copy (MyEngine's own test among it). The
    suite runs on SELECTOR_RECIPE_WORKERS pytest-xdist workers (default auto, as README command
    2); SELECTOR_RECIPE_TESTS narrows it (default `tests`: every file)."""
    import subprocess

    from helpers import child_env
    repo = tmp_path / "repo"
    _tracked_copy(repo)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=recipe", "-c", "user.email=recipe@example.invalid",
                    "commit", "-q", "--no-verify", "-m", "the tree before the recipes"],
                   cwd=repo, check=True)
    _perform_backend_recipe(repo)
    _perform_engine_recipe(repo)
    env = child_env(repo)
    env["SELECTOR_CACHE_DIR"] = str(tmp_path / "cache")  # the new catalogue composes afresh
    env["SELECTOR_TEST_CACHE_DIR"] = env["SELECTOR_CACHE_DIR"]  # and once for all below
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("SELECTOR_RECIPE_TEST", None)  # the copy does not run this test again
    py = [os.environ.get("SELECTOR_TEST_PYTHON", sys.executable)]
    r = _run(py, ["tools/regen.py"], repo, env)
    assert r.returncode == 0, r.stdout + r.stderr
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                             cwd=repo, capture_output=True, text=True, check=True).stdout
    changed = sorted(ln[3:] for ln in changed.splitlines())
    import importlib.util
    spec = importlib.util.spec_from_file_location("regen", repo / "tools" / "regen.py")
    regen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(regen)
    by_hand = set(RECIPE_FILES) | set(ENGINE_RECIPE_FILES)
    assert set(changed) - by_hand <= set(regen.GENERATED), changed  # regenerated only
    assert by_hand <= set(changed)
    for generated in ("docs/engines.md", "README.md"):  # the engine table and list name it
        assert "MyEngine 9.9" in (repo / generated).read_text(), generated
    r = _run(py, ["-m", "selector", "check"], repo, env)
    assert r.returncode == 0 and "myengine" not in r.stderr, r.stdout + r.stderr
    model = repo / "tests" / "checkpoint_corpus" / "qwen3-30b-a3b-fp4"
    r = _run(py, ["-m", "selector", "explain", "--model", str(model), "engine=myengine",
                  "platform=b200", "stack=flashinfer_0_7_4", "parallel.tp=2"], repo, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "launch plan for MyEngine 9.9: tp 2" in r.stdout
    assert f"command: myengine serve {model} --tensor-parallel 2 --fp4-gemm cutlass" in r.stdout
    workers = os.environ.get("SELECTOR_RECIPE_WORKERS", "auto")
    tests = os.environ.get("SELECTOR_RECIPE_TESTS", "tests").split()
    r = _run(py, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", "-k", SELF,
                  "-n", workers, "--dist", "loadfile", *tests], repo, env, timeout=4 * 3600)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-2000:]
    assert "passed" in r.stdout and "my_kernel" in (repo / "docs" / "rules.md").read_text()
