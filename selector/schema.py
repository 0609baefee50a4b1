"""Structured-config schema (Hydra/OmegaConf dataclasses) and the vocabularies of accepted values.

The dataclasses are the schema Hydra composes against, so a misspelt key in an override or a
config file is an error rather than a silent new key. Imports nothing heavy: OmegaConf only
reads these classes when a config is composed.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass
from enum import Enum
from typing import Any, Dict, List, Optional, Tuple

OPS = ("moe", "linear")
NVFP4_QUANTS = ("nvfp4", "nvfp4_w4a16")
OTHER_QUANTS = ("fp8", "mxfp4", "mxfp8", "int8", "int4", "unquantized")
QUANTS = NVFP4_QUANTS + OTHER_QUANTS
# swigluoai reads gate/up interleaved (gpt-oss checkpoints); swigluoai_uninterleave is the same
# function on packed [gate; up] halves: vLLM 0.32.0 fused_moe/activation.py MoEActivation.
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu2", "swigluoai", "situ",
               "swigluoai_uninterleave", "swiglustep")
DTYPES = ("bfloat16", "float16", "float32")
ALL2ALL = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency",
           "flashinfer_nvlink", "naive")


class Status(str, Enum):
    """A candidate's status (CONTRACT.md); a str, so JSON and comparisons see the name."""
    SELECTED = "selected"
    ELIGIBLE = "eligible"  # passes every rule, lower in preference
    OPT_IN = "opt_in"  # passes every rule, never chosen automatically (backend `opt_in:`)
    REJECTED = "rejected"  # fails at least one rule: every failed rule is listed
    NOT_APPLICABLE = "not_applicable"  # does not implement the layer's quant scheme

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__  # a Status and its name are one dict key


STATUSES = tuple(s.value for s in Status)
USABLE = (Status.SELECTED, Status.ELIGIBLE, Status.OPT_IN)
SHAPE_DIMS = ("hidden_size", "intermediate_size", "num_experts", "top_k")
SEVERITIES = ("error", "warning")
PROBE_MODES = ("none", "deep", "verify")
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


def _choice(default: Optional[str], choices: Tuple[str, ...], optional: bool = False) -> Any:
    return field(default=default, metadata={"choices": choices, "optional": optional})


def _int(default: Optional[int], minimum: int = 1) -> Any:
    return field(default=default, metadata={"min": minimum})


@dataclass(frozen=True)
class Layer:
    """One layer to decide for: the `layer.*` keys. Frozen, so it keys the decision cache.

    Validation (layer.make_layer) is driven by these field types and their `choices`.
    """
    op: str = _choice("moe", OPS)
    quant: str = _choice("nvfp4", QUANTS)
    activation: str = _choice("silu", ACTIVATIONS)
    act_and_mul: bool = True
    ep_size: int = _int(1)
    tp_size: int = _int(1)
    swiglu_limit: Optional[float] = None
    num_tokens: Optional[int] = _int(None)
    dtype: str = _choice("bfloat16", DTYPES)
    hidden_size: Optional[int] = _int(None)
    intermediate_size: Optional[int] = _int(None)
    num_experts: Optional[int] = _int(None)
    top_k: Optional[int] = _int(None)
    all2all: Optional[str] = _choice(None, ALL2ALL, optional=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(tuple(self.__dict__.values())))

    def __hash__(self) -> int:
        """Computed once: a kept Layer costs one dict lookup a decision (the cache key)."""
        return self._hash  # type: ignore[attr-defined, no-any-return]

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._hash == other._hash and self.__dict__ == other.__dict__  # type: ignore

    def to_dict(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# The Hydra node of `layer:`: Layer's fields, mutable (Hydra applies overrides to it).
LayerConf = make_dataclass("LayerConf", [(f.name, f.type, field(default=f.default))
                                         for f in fields(Layer)],
                           namespace={"__module__": __name__})


@dataclass
class PolicyConf:
    moe_backend: Any = "auto"  # a name, or an ordered list of names (first usable wins)
    linear_backend: Any = "auto"
    strict: bool = True
    allow_opt_in: List[str] = field(default_factory=list)  # opt-in backends auto may choose
    exclude: List[str] = field(default_factory=list)  # backends never chosen


@dataclass
class OptInConf:
    """`opt_in:` of a backend: never chosen automatically (unless policy.allow_opt_in names
    it), with why and the public source."""
    reason: str = "???"
    source: str = "???"


@dataclass
class PreferenceConf:
    """One `preference:` entry: when `when` holds (layer and platform terms, as a rule's
    `when`), the backend ranks at `rank` instead of its base rank; `reason` is shown."""
    rank: int = "???"  # type: ignore[assignment]
    reason: str = "???"
    source: str = "???"
    when: Dict[str, Any] = field(default_factory=dict)


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
    opt_in: Optional[OptInConf] = None
    preference: List[PreferenceConf] = field(default_factory=list)
    rules: List[Any] = field(default_factory=list)  # each checked by its kind (rules.KINDS)
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
class ParallelConf:
    """`parallel.*`: the engine's parallel sizes, read by the launch plan (`explain --model DIR
    engine=vllm|sglang`), which derives each layer's per-rank sizes, `layer.ep_size` and
    `layer.tp_size` from them."""
    tp: int = 1  # tensor-parallel size
    dp: int = 1  # data-parallel size
    ep: int = 1  # expert-parallel size of the MoE layers (1: off)


@dataclass
class SelectorConf:
    """The run config Hydra composes (the catalogue is read file by file: see config.py)."""
    platform: PlatformConf = field(default_factory=PlatformConf)
    layer: LayerConf = field(default_factory=LayerConf)  # type: ignore[valid-type]  # made at run time
    policy: PolicyConf = field(default_factory=PolicyConf)
    engine: EngineConf = field(default_factory=EngineConf)
    parallel: ParallelConf = field(default_factory=ParallelConf)
    probe: str = "none"
