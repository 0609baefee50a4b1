"""The two recipes of docs/architecture.md, tried: a new backend is its YAML (and its
implementation) only; a new rule kind is one class."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pytest
from packaging.utils import canonicalize_name

import selector
from selector import rules
from selector.errors import SelectorError
from selector.rules import KINDS, PackageSpec, Reason, Rule, kinds_markdown, register
from selector.versions import parse_specifier

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
        "entry_point: selector.backends.flashinfer_cutlass:CutlassMoE\n"
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
