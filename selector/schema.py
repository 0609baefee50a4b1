"""Structured-config schema (Hydra/OmegaConf dataclasses) and the vocabularies of accepted values.

The dataclasses are the schema Hydra composes against, so a misspelt key in an override or a
config file is an error rather than a silent new key. Imports nothing heavy: OmegaConf only
reads these classes when a config is composed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

OPS = ("moe", "linear")
NVFP4_QUANTS = ("nvfp4", "nvfp4_w4a16")
OTHER_QUANTS = ("fp8", "mxfp4", "mxfp8", "int8", "int4", "unquantized")
QUANTS = NVFP4_QUANTS + OTHER_QUANTS
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu2", "swigluoai", "situ")
DTYPES = ("bfloat16", "float16", "float32")
ALL2ALL = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency",
           "flashinfer_nvlink", "naive")
STATUSES = ("selected", "eligible", "opt_in", "rejected", "not_applicable")
RULE_KINDS = ("device", "cuda", "package", "known_issue", "feature", "quant", "activation",
              "act_and_mul", "parallel", "clamp", "dtype", "shape", "opt_in")
SHAPE_DIMS = ("hidden_size", "intermediate_size", "num_experts", "top_k")
SEVERITIES = ("error", "warning")
PROBE_MODES = ("none", "deep")
EXECUTIONS = ("native", "weight_only", "reference")

# Distributions every platform reports (CONTRACT.md), beside those the catalogue names.
CORE_PACKAGES = ("flashinfer-python", "flashinfer-cubin", "nvidia-cutlass-dsl", "vllm",
                 "sgl-kernel", "b12x", "torch", "triton")


@dataclass
class PlatformConf:
    preset: str = "auto"
    capability: Optional[str] = None
    cuda: Optional[str] = None
    gpu_name: Optional[str] = None
    packages: Dict[str, Optional[str]] = field(default_factory=dict)


@dataclass
class LayerConf:
    op: str = "moe"
    quant: str = "nvfp4"
    activation: str = "silu"
    act_and_mul: bool = True
    ep_size: int = 1
    tp_size: int = 1
    swiglu_limit: Optional[float] = None
    num_tokens: Optional[int] = None
    dtype: str = "bfloat16"
    hidden_size: Optional[int] = None
    intermediate_size: Optional[int] = None
    num_experts: Optional[int] = None
    top_k: Optional[int] = None
    all2all: Optional[str] = None


@dataclass
class PolicyConf:
    moe_backend: str = "auto"
    linear_backend: str = "auto"
    strict: bool = True


@dataclass
class WhenConf:
    """Conditions under which a rule applies; all given ones must hold. Unset = no condition."""
    activation: Optional[List[str]] = None
    act_and_mul: Optional[bool] = None
    quant: Optional[List[str]] = None
    devices: Optional[List[str]] = None
    packages: Dict[str, str] = field(default_factory=dict)
    ep: Optional[bool] = None
    min_num_experts: Optional[int] = None


@dataclass
class RuleConf:
    """One capability rule. `kind` says which of the optional fields it reads (see rules.py)."""
    kind: str = "???"
    source: str = "???"
    message: Optional[str] = None
    severity: str = "error"
    when: WhenConf = field(default_factory=WhenConf)
    devices: List[str] = field(default_factory=list)
    package: Optional[str] = None
    any_of: List[str] = field(default_factory=list)
    specifier: Optional[str] = None
    values: List[str] = field(default_factory=list)
    gated: List[str] = field(default_factory=list)
    non_gated: List[str] = field(default_factory=list)
    ep: Optional[bool] = None
    all2all_exclude: List[str] = field(default_factory=list)
    dim: Optional[str] = None
    multiple_of: Optional[int] = None


@dataclass
class HintConf:
    """A note shown when the backend could run the layer but was not selected, and the layer's
    num_tokens is in range: a measured speed-up the automatic order does not capture."""
    message: str = "???"
    source: str = "???"
    max_num_tokens: Optional[int] = None
    min_num_tokens: Optional[int] = None


@dataclass
class BackendConf:
    """One backend of one op: one YAML file under conf/backend/<op>/<name>.yaml.

    Validated field by field in model.py/rules.py against these dataclasses (merging a list
    of structured rules through OmegaConf costs about 70 ms a file).
    """
    description: str = ""
    rank: int = "???"  # type: ignore[assignment]
    execution: str = "native"  # native | weight_only | reference
    implements: List[str] = field(default_factory=lambda: list(NVFP4_QUANTS))
    entry_point: Optional[str] = None
    probes: List[str] = field(default_factory=list)
    rules: List[RuleConf] = field(default_factory=list)
    hints: List[HintConf] = field(default_factory=list)
    engines: Dict[str, Any] = field(default_factory=dict)  # per engine: selector/engines


@dataclass
class EngineConf:
    """The inference engine selector answers for (`engine=none|vllm|sglang`): its name, the
    label its messages use, and the command-line flag that requests a backend per op."""
    name: str = "none"
    label: str = ""
    moe_flag: Optional[str] = None
    linear_flag: Optional[str] = None
    source: str = ""
    outside: Dict[str, str] = field(default_factory=dict)  # engine backends not modelled: source


@dataclass
class SelectorConf:
    """The run config Hydra composes (the catalogue is read file by file: see config.py)."""
    platform: PlatformConf = field(default_factory=PlatformConf)
    layer: LayerConf = field(default_factory=LayerConf)
    policy: PolicyConf = field(default_factory=PolicyConf)
    engine: EngineConf = field(default_factory=EngineConf)
    probe: str = "none"
