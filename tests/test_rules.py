"""Unit tests of the 13 rule kinds (selector/core/rules/): each passes and fails where it should,
`when` conditions gate it, versions compare the PEP 440 way, and a malformed rule is a
SelectorError that names the rule's key and file."""
from __future__ import annotations

from typing import Optional

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from selector import SelectorError
from selector.core.layer import make_layer
from selector.core.rules import KINDS, Facts, Reason, compile_rule, reason_rules

KEY = "catalogue.moe.testbackend.rules[3]"
WHERE = "/tmp/user-conf/backend/moe/testbackend.yaml"
SRC = "FlashInfer #0000 (test)"


def facts(cap: Optional[str] = "12.1", cuda: Optional[str] = "13.0", **pkgs) -> Facts:
    """Facts for SM `cap`, CUDA `cuda`, and packages given as name=version (None = absent)."""
    capability = None if cap is None else tuple(int(x) for x in cap.split("."))
    packages = {canonicalize_name(n.replace("_", "-")): (None if v is None else Version(v))
                for n, v in pkgs.items()}
    return Facts(capability, None if cuda is None else Version(cuda), packages)


def layer(**kw):
    return make_layer(kw)


def rule(**conf):
    conf.setdefault("source", SRC)
    return compile_rule(conf, KEY, WHERE)


def check(r, lay=None, f=None) -> Optional[Reason]:
    lay, f = (lay if lay is not None else layer()), (f if f is not None else facts())
    return r.evaluate(lay, f) if r.when.holds(lay, f) else None


def test_the_contract_kinds_are_registered():
    """The reason rules (docs/rules.md): the twelve registered kinds and opt_in (a backend field)."""
    contract = ("device", "cuda", "package", "known_issue", "feature", "quant", "activation",
                "act_and_mul", "parallel", "clamp", "dtype", "shape", "opt_in")
    assert set(contract) <= set(reason_rules())
    assert "opt_in" not in KINDS


# ---------------------------------------------------------------------------------------------
# device

@pytest.mark.parametrize("devices,cap,ok", [
    (["12.x"], "12.0", True),
    (["12.x"], "12.1", True),
    (["12.x"], "10.0", False),
    (["12.0"], "12.1", False),
    (["12.1"], "12.1", True),
    (["10.0", "10.3"], "10.3", True),
    (["10.0", "10.3"], "10.1", False),
    ([">=7.5"], "7.5", True),
    ([">=7.5"], "9.0", True),
    ([">=7.5"], "12.1", True),
    ([">=7.5"], "7.0", False),
    ([">= 10.0"], "9.0", False),
], ids=lambda v: str(v))
def test_device(devices, cap, ok):
    r = rule(kind="device", devices=devices)
    got = check(r, f=facts(cap))
    if ok:
        assert got is None
    else:
        assert got is not None and got.rule == "device"
        assert f"SM {cap}" in got.message
        assert got.source == SRC and got.key == KEY and got.severity == "error"


def test_device_without_gpu_says_so():
    got = check(rule(kind="device", devices=["12.x"]), f=facts(None))
    assert got is not None and "no GPU" in got.message and "SM 12.x" in got.message
    assert got.need == "need SM 12.x"


def test_device_message_is_appended():
    got = check(rule(kind="device", devices=["10.x"], message="no SM12x cubins"), f=facts("12.1"))
    assert got.message.endswith(": no SM12x cubins")


@pytest.mark.parametrize("devices", [[], None, ["12"], ["x.1"], [12.1], [">=12.x"], ["twelve"]],
                         ids=str)
def test_device_malformed(devices):
    with pytest.raises(SelectorError) as e:
        rule(kind="device", devices=devices)
    assert f"{KEY}.devices" in str(e.value)
    assert WHERE in str(e.value)


# ---------------------------------------------------------------------------------------------
# cuda

@pytest.mark.parametrize("spec,cuda,ok", [
    (">=13.0", "13.0", True),
    (">=13.0", "13.1", True),
    (">=13.0", "12.9", False),
    (">=12.8", "12.8", True),
    (">=12.8", "12.6", False),
    (">=13.0", "13.1rc1", True),   # pre-releases count: a 13.1 release candidate is >= 13.0
    (">=13.0", "13.0rc1", False),  # ... but 13.0rc1 comes before 13.0
], ids=str)
def test_cuda(spec, cuda, ok):
    got = check(rule(kind="cuda", specifier=spec), f=facts(cuda=cuda))
    assert (got is None) is ok
    if not ok:
        assert got.rule == "cuda" and f"CUDA {cuda}" in got.message


def test_cuda_without_runtime():
    got = check(rule(kind="cuda", specifier=">=13.0"), f=facts(cuda=None))
    assert got is not None and "no CUDA runtime" in got.message


def test_cuda_warning_severity():
    got = check(rule(kind="cuda", specifier=">=12.9", severity="warning"), f=facts(cuda="12.8"))
    assert got.severity == "warning"


# ---------------------------------------------------------------------------------------------
# package

@pytest.mark.parametrize("spec,installed,ok", [
    ("", "0.0.1", True),                 # '' = any installed version
    ("", None, False),                   # ... but it must be installed
    (">=0.6.9", "0.6.9", True),
    (">=0.6.9", "0.6.8", False),
    (">=0.6.9", "0.6.9rc1", False),      # a release candidate precedes the release
    (">=0.6.9", "0.7.0rc1", True),       # pre-releases are not excluded
    (">=0.6.9", "0.7.0.dev3", True),
    (">=0.6.18", "0.6.18.post1", True),
    ("==0.6.18", "0.6.18.post1", False),  # PEP 440: == does not match a post-release
    ("==0.6.18.post1", "0.6.18.post1", True),
    ("==0.7.2.*", "0.7.2.post1", True),
    ("==0.7.2.*", "0.7.20", False),
    (">=4.4,<4.5", "4.4.2", True),
    (">=4.4,<4.5", "4.10", False),       # 4.10 is not 4.1
    ("<4.5", "4.10", False),
    (">=4.8", "4.10", True),
], ids=str)
def test_package_versions(spec, installed, ok):
    r = rule(kind="package", package="nvidia-cutlass-dsl", specifier=spec)
    got = check(r, f=facts(nvidia_cutlass_dsl=installed))
    assert (got is None) is ok, got
    if not ok:
        assert got.rule == "package"
        assert ("not installed" if installed is None else f"installed: {installed}") in got.message


@pytest.mark.parametrize("spec,installed,ok", [
    (">=2.11", "2.11.0+cu130", True),
    ("==2.11.0", "2.11.0+cu130", True),    # a local label does not hide the release
    ("<=2.11.0", "2.11.0+cu130", True),
    ("<2.11.0", "2.11.0+cu130", False),
    (">2.11.0", "2.11.0+cu130", False),
    ("!=2.11.0", "2.11.0+cu130", False),
    (">=2.12", "2.11.0+cu130", False),
], ids=str)
def test_package_local_labels(spec, installed, ok):
    got = check(rule(kind="package", package="torch", specifier=spec), f=facts(torch=installed))
    assert (got is None) is ok


def test_package_name_is_canonicalized():
    r = rule(kind="package", package="Flashinfer_Python", specifier=">=0.6.9")
    assert check(r, f=facts(flashinfer_python="0.7.4")) is None
    got = check(r, f=facts())
    assert "flashinfer-python" in got.message and "pip install 'flashinfer-python>=0.6.9'" in \
        got.message


def test_package_any_of():
    r = rule(kind="package", any_of=["vllm", "sgl-kernel"])
    assert check(r, f=facts(sgl_kernel="0.3.0")) is None
    assert check(r, f=facts(vllm="0.32.0")) is None
    got = check(r, f=facts(vllm=None))
    assert got is not None and "vllm" in got.message and "sgl-kernel" in got.message


def test_package_any_of_with_specifier():
    r = rule(kind="package", any_of=["vllm", "sgl-kernel"], specifier=">=1.0")
    assert check(r, f=facts(vllm="0.32.0", sgl_kernel="1.2")) is None
    assert check(r, f=facts(vllm="0.32.0", sgl_kernel="0.9")) is not None


def test_package_without_name_is_an_error():
    with pytest.raises(SelectorError) as e:
        rule(kind="package", specifier=">=1")
    assert f"{KEY}.package" in str(e.value) and WHERE in str(e.value)


@pytest.mark.parametrize("spec", ["banana", ">=0.6.9;", "=>1.0", "~=1", 0.6, ["1.0"]], ids=str)
def test_package_bad_specifier(spec):
    with pytest.raises(SelectorError) as e:
        rule(kind="package", package="vllm", specifier=spec)
    assert f"{KEY}.specifier" in str(e.value) and WHERE in str(e.value)


# ---------------------------------------------------------------------------------------------
# known_issue

def _known_issue(**when):
    return rule(kind="known_issue", when=when,
                message="0.6.9-0.6.10 with cutlass-dsl 4.5 fail; use flashinfer-python>=0.6.11")


def test_known_issue_fires_only_when_its_packages_hold():
    r = _known_issue(packages={"flashinfer-python": ">=0.6.9,<0.6.11",
                               "nvidia-cutlass-dsl": ">=4.5"})
    got = check(r, f=facts(flashinfer_python="0.6.10", nvidia_cutlass_dsl="4.5.0"))
    assert got is not None and got.rule == "known_issue"
    assert got.message.startswith("0.6.9-0.6.10 with cutlass-dsl 4.5 fail")
    assert "flashinfer-python 0.6.10" in got.message and "nvidia-cutlass-dsl 4.5.0" in got.message
    assert check(r, f=facts(flashinfer_python="0.6.11", nvidia_cutlass_dsl="4.5.0")) is None
    assert check(r, f=facts(flashinfer_python="0.6.10", nvidia_cutlass_dsl="4.4.2")) is None
    assert check(r, f=facts(flashinfer_python="0.6.10")) is None  # absent package: no issue
    # 4.10 must compare as 4.10 (>= 4.5), not as 4.1
    assert check(r, f=facts(flashinfer_python="0.6.10", nvidia_cutlass_dsl="4.10")) is not None


def test_known_issue_with_devices():
    r = _known_issue(devices=["12.1"], packages={"nvidia-cutlass-dsl": ">=4.4,<4.5"})
    assert check(r, f=facts("12.1", nvidia_cutlass_dsl="4.4.2")) is not None
    assert check(r, f=facts("12.0", nvidia_cutlass_dsl="4.4.2")) is None
    assert check(r, f=facts(None, nvidia_cutlass_dsl="4.4.2")) is None
    assert "SM 12.1" in check(r, f=facts("12.1", nvidia_cutlass_dsl="4.4.2")).message


def test_known_issue_empty_specifier_means_installed():
    r = _known_issue(packages={"nvidia-cutlass-dsl-libs-base": "",
                               "nvidia-cutlass-dsl-libs-cu13": ""})
    both = facts(nvidia_cutlass_dsl_libs_base="4.5.0", nvidia_cutlass_dsl_libs_cu13="4.5.0")
    one = facts(nvidia_cutlass_dsl_libs_base="4.5.0", nvidia_cutlass_dsl_libs_cu13=None)
    assert check(r, f=both) is not None
    assert check(r, f=one) is None


def test_known_issue_needs_a_message():
    with pytest.raises(SelectorError) as e:
        rule(kind="known_issue", when={"packages": {"vllm": ">=1"}})
    assert f"{KEY}.message" in str(e.value)


def test_known_issue_needs_packages_or_devices():
    with pytest.raises(SelectorError) as e:
        rule(kind="known_issue", message="x", when={"activation": ["silu"]})
    assert f"{KEY}.when" in str(e.value)


def test_known_issue_warning():
    r = rule(kind="known_issue", severity="warning", message="one report",
             when={"packages": {"flashinfer-python": "==0.6.18.post1"}})
    got = check(r, f=facts(flashinfer_python="0.6.18.post1"))
    assert got.severity == "warning" and got.key == KEY
    assert check(r, f=facts(flashinfer_python="0.6.18")) is None


# ---------------------------------------------------------------------------------------------
# feature

def test_feature_gated_by_when():
    r = rule(kind="feature", when={"quant": ["nvfp4_w4a16"]}, package="flashinfer-python",
             specifier=">=0.6.12")
    w4a16 = layer(quant="nvfp4_w4a16")
    assert check(r, layer(quant="nvfp4"), facts(flashinfer_python="0.6.11")) is None
    got = check(r, w4a16, facts(flashinfer_python="0.6.11"))
    assert got is not None and got.rule == "feature"
    assert "nvfp4_w4a16" in got.message and "flashinfer-python >=0.6.12" in got.message
    assert "installed: 0.6.11" in got.message
    assert check(r, w4a16, facts(flashinfer_python="0.6.12")) is None
    assert check(r, w4a16, facts(flashinfer_python=None)) is not None


def test_feature_activation_versions():
    r = rule(kind="feature", when={"activation": ["gelu_tanh", "swigluoai"]},
             package="flashinfer-python", specifier=">=0.6.15")
    for act in ("gelu_tanh", "swigluoai"):
        assert check(r, layer(activation=act), facts(flashinfer_python="0.6.14")) is not None
        assert check(r, layer(activation=act), facts(flashinfer_python="0.6.15")) is None
        assert check(r, layer(activation=act), facts(flashinfer_python="0.6.15.post1")) is None
    assert check(r, layer(activation="silu"), facts(flashinfer_python="0.6.9")) is None


def test_feature_needs_package():
    with pytest.raises(SelectorError) as e:
        rule(kind="feature", specifier=">=1")
    assert f"{KEY}.package" in str(e.value)


# ---------------------------------------------------------------------------------------------
# quant / activation / dtype

@pytest.mark.parametrize("kind,attr,values,good,bad", [
    ("quant", "quant", ["nvfp4"], "nvfp4", "nvfp4_w4a16"),
    ("activation", "activation", ["silu", "relu2"], "relu2", "gelu"),
    ("dtype", "dtype", ["bfloat16"], "bfloat16", "float16"),
])
def test_value_rules(kind, attr, values, good, bad):
    r = rule(kind=kind, values=values)
    extra = {"act_and_mul": False} if attr == "activation" else {}
    assert check(r, layer(**{attr: good}, **extra)) is None
    got = check(r, layer(**{attr: bad}, **extra))
    assert got is not None and got.rule == kind and bad in got.message
    for v in values:
        assert v in got.message


@pytest.mark.parametrize("kind,bad", [("quant", "nvfp5"), ("activation", "swish"),
                                      ("dtype", "fp16")])
def test_value_rules_refuse_unknown_values(kind, bad):
    with pytest.raises(SelectorError) as e:
        rule(kind=kind, values=[bad])
    msg = str(e.value)
    assert f"{KEY}.values" in msg and repr(bad) in msg and "accepted:" in msg and WHERE in msg


@pytest.mark.parametrize("kind", ["quant", "activation", "dtype"])
def test_value_rules_need_values(kind):
    with pytest.raises(SelectorError) as e:
        rule(kind=kind, values=[])
    assert f"{KEY}.values" in str(e.value)


def test_activation_did_you_mean():
    with pytest.raises(SelectorError) as e:
        rule(kind="activation", values=["silu", "gelu_tan"])
    assert "did you mean 'gelu_tanh'" in str(e.value)


# ---------------------------------------------------------------------------------------------
# act_and_mul

def test_act_and_mul():
    r = rule(kind="act_and_mul", gated=["silu", "swigluoai"], non_gated=["relu2", "silu"])
    assert check(r, layer(activation="silu", act_and_mul=True)) is None
    assert check(r, layer(activation="silu", act_and_mul=False)) is None
    assert check(r, layer(activation="relu2", act_and_mul=False)) is None
    got = check(r, layer(activation="relu2", act_and_mul=True))
    assert got is not None and got.rule == "act_and_mul" and "relu2" in got.message
    assert "non-gated" in got.message
    got = check(r, layer(activation="swigluoai", act_and_mul=False))
    assert got is not None and "gated" in got.message
    # an activation in neither list is the activation rule's to report, not this one's
    assert check(r, layer(activation="gelu", act_and_mul=True)) is None


def test_act_and_mul_bad_values():
    with pytest.raises(SelectorError) as e:
        rule(kind="act_and_mul", gated=["silu"], non_gated=["relu3"])
    assert f"{KEY}.non_gated" in str(e.value) and "'relu3'" in str(e.value)
    with pytest.raises(SelectorError) as e:
        rule(kind="act_and_mul", gated="silu")
    assert f"{KEY}.gated" in str(e.value)


# ---------------------------------------------------------------------------------------------
# parallel

def test_parallel_no_ep():
    r = rule(kind="parallel", ep=False, message="no EP, no EPLB")
    assert check(r, layer(ep_size=1, tp_size=8)) is None  # a single GPU with EP is not EP
    got = check(r, layer(ep_size=2))
    assert got is not None and got.rule == "parallel" and "ep_size 2" in got.message
    assert got.message.endswith(": no EP, no EPLB")


def test_parallel_all2all_exclude():
    r = rule(kind="parallel", ep=True, all2all_exclude=["deepep_high_throughput",
                                                        "flashinfer_nvlink_two_sided"])
    assert check(r, layer(ep_size=4)) is None
    assert check(r, layer(ep_size=4, all2all="allgather_reducescatter")) is None
    assert check(r, layer(ep_size=1, all2all="deepep_high_throughput")) is None
    # FlashInfer's two NVLink exchanges are two values (vLLM's MarlinExperts takes the one-sided)
    assert check(r, layer(ep_size=4, all2all="flashinfer_nvlink_one_sided")) is None
    assert check(r, layer(ep_size=4, all2all="flashinfer_nvlink_two_sided")) is not None
    got = check(r, layer(ep_size=4, all2all="deepep_high_throughput"))
    assert got is not None and "deepep_high_throughput" in got.message


def test_parallel_malformed():
    with pytest.raises(SelectorError) as e:
        rule(kind="parallel")
    assert f"{KEY}.ep" in str(e.value)
    with pytest.raises(SelectorError) as e:
        rule(kind="parallel", ep=True, all2all_exclude=["nccl"])
    assert f"{KEY}.all2all_exclude" in str(e.value) and "'nccl'" in str(e.value)


# ---------------------------------------------------------------------------------------------
# clamp

def test_clamp():
    r = rule(kind="clamp")
    assert check(r, layer(swiglu_limit=None)) is None
    got = check(r, layer(swiglu_limit=10.0))
    assert got is not None and got.rule == "clamp" and "swiglu_limit=10.0" in got.message


# ---------------------------------------------------------------------------------------------
# shape

def test_shape():
    r = rule(kind="shape", dim="hidden_size", multiple_of=128)
    assert check(r, layer(op="linear", hidden_size=4096)) is None
    assert check(r, layer(op="linear")) is None  # unknown size: nothing to check
    got = check(r, layer(op="linear", hidden_size=4128))
    assert got is not None and got.rule == "shape"
    assert "hidden_size % 128 == 0" in got.message and "4128" in got.message


def test_shape_minimum_alone_and_with_a_multiple():
    """mm_mxfp8 (vLLM 0.32.0 kernels/linear/mxfp8/flashinfer.py): K >= 128 and K % 32, N >= 128."""
    n = rule(kind="shape", dim="intermediate_size", min=128)
    assert check(n, layer(op="linear", intermediate_size=128)) is None
    assert check(n, layer(op="linear", intermediate_size=129)) is None  # no multiple asked
    assert check(n, layer(op="linear")) is None
    got = check(n, layer(op="linear", intermediate_size=127))
    assert got.message == "needs intermediate_size >= 128; this layer has intermediate_size 127"
    assert got.need == "need intermediate_size >= 128"
    assert n.describe() == "shape intermediate_size >= 128"
    k = rule(kind="shape", dim="hidden_size", multiple_of=32, min=128)
    assert check(k, layer(op="linear", hidden_size=128)) is None
    for bad in (96, 4112, 127, 32):
        got = check(k, layer(op="linear", hidden_size=bad))
        assert got.need == "need hidden_size % 32 == 0 and hidden_size >= 128", bad
    assert k.describe() == "shape hidden_size % 32 == 0 and hidden_size >= 128"
    assert rule(kind="shape", dim="hidden_size", multiple_of=32).describe() == \
        "shape hidden_size % 32 == 0"


def test_shape_with_version_condition():
    """b12x linear: K % 128 before flashinfer 0.6.14, K % 32 from it on."""
    r128 = rule(kind="shape", dim="hidden_size", multiple_of=128,
                when={"packages": {"flashinfer-python": "<0.6.14"}})
    r32 = rule(kind="shape", dim="hidden_size", multiple_of=32)
    k = layer(op="linear", hidden_size=4128)  # % 32 == 0, % 128 != 0
    assert check(r128, k, facts(flashinfer_python="0.6.13")) is not None
    assert check(r128, k, facts(flashinfer_python="0.6.14")) is None
    assert check(r32, k, facts(flashinfer_python="0.6.14")) is None
    assert check(r32, layer(op="linear", hidden_size=4100), facts()) is not None


@pytest.mark.parametrize("conf,field", [
    ({"dim": "K", "multiple_of": 32}, "dim"),
    ({"multiple_of": 32}, "dim"),
    ({"dim": "hidden_size", "multiple_of": 0}, "multiple_of"),
    ({"dim": "hidden_size", "multiple_of": True}, "multiple_of"),
    ({"dim": "hidden_size", "multiple_of": "32"}, "multiple_of"),
    ({"dim": "hidden_size"}, "multiple_of"),
    ({"dim": "hidden_size", "multiple_of": 1, "min": 1}, "multiple_of"),
    ({"dim": "hidden_size", "min": 0}, "min"),
    ({"dim": "hidden_size", "min": 128.0}, "min"),
    ({"dim": "hidden_size", "min": False}, "min"),
], ids=str)
def test_shape_malformed(conf, field):
    with pytest.raises(SelectorError) as e:
        rule(kind="shape", **conf)
    assert f"{KEY}.{field}" in str(e.value)


# ---------------------------------------------------------------------------------------------
# opt_in

def test_opt_in_is_a_backend_field_not_a_rule():
    with pytest.raises(SelectorError) as e:
        rule(kind="opt_in", message="request it with policy.moe_backend=x")
    assert f"{KEY}.kind" in str(e.value) and "opt_in: {reason" in str(e.value)


# ---------------------------------------------------------------------------------------------
# when conditions

@pytest.mark.parametrize("when,holds,fails", [
    ({"activation": ["relu2"]}, {"activation": "relu2", "act_and_mul": False},
     {"activation": "silu"}),
    ({"act_and_mul": False}, {"act_and_mul": False}, {"act_and_mul": True}),
    ({"quant": ["nvfp4_w4a16"]}, {"quant": "nvfp4_w4a16"}, {"quant": "nvfp4"}),
    ({"ep": True}, {"ep_size": 2}, {"ep_size": 1}),
    ({"ep": False}, {"ep_size": 1}, {"ep_size": 8}),
    ({"min_num_experts": 512}, {"num_experts": 512}, {"num_experts": 256}),
    ({"min_num_experts": 512}, {"num_experts": 1024}, {}),
    ({"all2all": ["deepep_low_latency"]}, {"ep_size": 2, "all2all": "deepep_low_latency"},
     {"ep_size": 2, "all2all": "deepep_high_throughput"}),
    ({"all2all": ["deepep_low_latency"]}, {"ep_size": 2, "all2all": "deepep_low_latency"},
     {"ep_size": 2}),
], ids=str)
def test_when_layer_conditions(when, holds, fails):
    r = rule(kind="clamp", when=when)
    assert check(r, layer(swiglu_limit=1.0, **holds)) is not None
    assert check(r, layer(swiglu_limit=1.0, **fails)) is None


def test_when_devices_and_packages_all_must_hold():
    r = rule(kind="clamp", when={"devices": ["12.0"],
                                 "packages": {"flashinfer-python": "==0.7.0.*"}})
    lay = layer(swiglu_limit=1.0)
    assert check(r, lay, facts("12.0", flashinfer_python="0.7.0")) is not None
    assert check(r, lay, facts("12.0", flashinfer_python="0.7.0.post2")) is not None
    assert check(r, lay, facts("12.1", flashinfer_python="0.7.0")) is None
    assert check(r, lay, facts("12.0", flashinfer_python="0.7.1")) is None
    assert check(r, lay, facts(None, flashinfer_python="0.7.0")) is None


@pytest.mark.parametrize("when,field", [
    ({"activations": ["silu"]}, "when"),
    ({"activation": ["swish"]}, "when.activation"),
    ({"activation": "silu"}, "when.activation"),
    ({"quant": ["nvfp5"]}, "when.quant"),
    ({"all2all": ["deepep"]}, "when.all2all"),
    ({"devices": ["12"]}, "when.devices"),
    ({"packages": {"vllm": ">>1"}}, "when.packages.vllm"),
    ({"packages": ["vllm"]}, "when.packages"),
], ids=str)
def test_when_malformed(when, field):
    with pytest.raises(SelectorError) as e:
        rule(kind="clamp", when=when)
    assert f"{KEY}.{field}" in str(e.value) and WHERE in str(e.value)


def test_when_unknown_key_suggests():
    with pytest.raises(SelectorError) as e:
        rule(kind="clamp", when={"activations": ["silu"]})
    assert "did you mean 'activation'" in str(e.value)


# ---------------------------------------------------------------------------------------------
# malformed rules in general

def test_rule_not_a_mapping():
    with pytest.raises(SelectorError) as e:
        compile_rule(["device"], KEY, WHERE)
    assert KEY in str(e.value)


def test_unknown_kind_lists_kinds_and_suggests():
    with pytest.raises(SelectorError) as e:
        rule(kind="devise", devices=["12.x"])
    msg = str(e.value)
    assert f"{KEY}.kind" in msg and "'devise'" in msg and "did you mean 'device'" in msg
    for k in KINDS:
        assert k in msg
    assert WHERE in msg


@pytest.mark.parametrize("source", [None, "", "   ", "???", 3], ids=str)
def test_rule_without_source(source):
    conf = {"kind": "clamp"}
    if source is not None:
        conf["source"] = source
    with pytest.raises(SelectorError) as e:
        compile_rule(conf, KEY, WHERE)
    assert f"{KEY}.source" in str(e.value) and WHERE in str(e.value)


def test_bad_severity():
    with pytest.raises(SelectorError) as e:
        rule(kind="clamp", severity="fatal")
    assert f"{KEY}.severity" in str(e.value) and "warning" in str(e.value)


def test_field_of_another_kind_is_refused():
    with pytest.raises(SelectorError) as e:
        rule(kind="device", devices=["12.x"], specifier=">=1")
    msg = str(e.value)
    assert f"{KEY}.specifier" in msg and "'device'" in msg and "devices" in msg


def test_unknown_field_is_refused():
    with pytest.raises(SelectorError) as e:
        rule(kind="device", devices=["12.x"], device=["12.x"])
    assert f"{KEY}.device" in str(e.value) and "did you mean 'devices'" in str(e.value)


def test_reason_to_dict_is_the_contract_shape():
    got = check(rule(kind="clamp"), layer(swiglu_limit=7.0))
    assert got.to_dict() == {"rule": "clamp", "message": got.message, "source": SRC}


@pytest.mark.parametrize("conf,field", [
    ({"kind": "clamp", "when": {"act_and_mul": "yes"}}, "when.act_and_mul"),
    ({"kind": "clamp", "when": {"ep": 1}}, "when.ep"),
    ({"kind": "clamp", "when": {"min_num_experts": 0}}, "when.min_num_experts"),
    ({"kind": "clamp", "when": ["silu"]}, "when"),
    ({"kind": "parallel", "ep": "no"}, "ep"),
    ({"kind": "package", "any_of": "vllm"}, "any_of"),
    ({"kind": "package", "package": ["vllm"]}, "package"),
    ({"kind": ["device"]}, "kind"),
], ids=str)
def test_wrongly_typed_fields(conf, field):
    """A typo such as `ep: no` or `act_and_mul: "yes"` must not silently never hold."""
    with pytest.raises(SelectorError) as e:
        rule(**conf)
    assert f"{KEY}.{field}" in str(e.value) and WHERE in str(e.value)


# ---------------------------------------------------------------------------------------------
# act_scale / routing (issue 44)

def test_act_scale_reads_the_layer_or_its_schemes_own_granularity():
    r = rule(kind="act_scale", values=["tensor"])
    assert check(r, layer(quant="fp8_tensor_dynamic")) is None  # the scheme's own: tensor
    got = check(r, layer(quant="fp8_tensor_dynamic", act_scale="token"))
    assert got is not None and got.rule == "act_scale" and "per token" in got.message
    assert check(r, layer(quant="fp8_channel")) is not None  # fp8_channel's own: token
    assert check(r, layer(quant="nvfp4")) is None  # no granularity of its own: passes


def test_act_scale_when_term_scopes_a_rule():
    r = rule(kind="quant", values=["fp8_block"], when={"act_scale": ["group_128"]})
    assert check(r, layer(quant="fp8_tensor_dynamic")) is None
    assert check(r, layer(quant="fp8_tensor_dynamic", act_scale="group_128")) is not None


def test_routing_rule_refuses_a_routing_method_outside_its_list_only():
    r = rule(kind="routing", values=["deepseek_v3", "renormalize"])
    assert check(r, layer(routing="deepseek_v3")) is None
    assert check(r, layer()) is None  # routing not known: passes
    got = check(r, layer(routing="default"))
    assert got is not None and got.rule == "routing" and "default" in got.message


@pytest.mark.parametrize("kind,bad", [("act_scale", "row"), ("routing", "softmax")])
def test_act_scale_and_routing_refuse_unknown_values(kind, bad):
    with pytest.raises(SelectorError, match="accepted:"):
        rule(kind=kind, values=[bad])
