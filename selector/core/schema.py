"""Structured-config schema (Hydra/OmegaConf dataclasses) and the vocabularies of accepted values.

The dataclasses are the schema Hydra composes against, so a misspelt key in an override or a
config file is an error rather than a silent new key. Imports nothing heavy: OmegaConf only
reads these classes when a config is composed.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass
from enum import Enum
from typing import Any, Dict, List, Optional, Tuple, Union

OPS = ("moe", "linear")
NVFP4_QUANTS = ("nvfp4", "nvfp4_w4a16")
# FP8 (E4M3) weights, named by (weight scales, activation scales) as vLLM's QuantKey pairs are:
# vLLM 0.32.0 model_executor/layers/quantization/utils/quant_utils.py (kFp8*).
FP8_QUANTS = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
# OCP microscaling: E8M0 scales per 32 elements; mxfp4 is weight-only (bf16 activations).
MX_QUANTS = ("mxfp8", "mxfp4", "mxfp4_w4a8", "mxfp4_w4a4")
OTHER_QUANTS = ("int8", "int4", "unquantized")
QUANTS = NVFP4_QUANTS + FP8_QUANTS + MX_QUANTS + OTHER_QUANTS


@dataclass(frozen=True)
class QuantScheme:
    """What a `layer.quant` value means: weight and activation formats and their scales, and
    the (weight, activation) QuantKey names vLLM's oracles take for it (None: no such key)."""
    name: str
    family: str  # nvfp4 | fp8 | mxfp8 | mxfp4 | int | unquantized
    weights: str
    activations: str
    vllm_keys: Tuple[Optional[str], Optional[str]] = (None, None)


_KEYS = "vLLM 0.32.0 model_executor/layers/quantization/utils/quant_utils.py"
QUANT_SCHEMES: Dict[str, QuantScheme] = {q.name: q for q in (
    QuantScheme("nvfp4", "nvfp4", "FP4 E2M1, E4M3 scale per 16 + fp32 global",
                "FP4 E2M1, dynamic E4M3 scale per 16", ("kNvfp4Static", "kNvfp4Dynamic")),
    QuantScheme("nvfp4_w4a16", "nvfp4", "FP4 E2M1, E4M3 scale per 16 + fp32 global",
                "bf16/fp16", ("kNvfp4Static", None)),
    QuantScheme("fp8_tensor", "fp8", "FP8 E4M3, fp32 scale per tensor",
                "FP8 E4M3, static fp32 scale per tensor",
                ("kFp8StaticTensorSym", "kFp8StaticTensorSym")),
    QuantScheme("fp8_tensor_dynamic", "fp8", "FP8 E4M3, fp32 scale per tensor",
                "FP8 E4M3, dynamic fp32 scale per tensor",
                ("kFp8StaticTensorSym", "kFp8DynamicTensorSym")),
    QuantScheme("fp8_channel", "fp8", "FP8 E4M3, fp32 scale per output channel",
                "FP8 E4M3, dynamic fp32 scale per token",
                ("kFp8StaticChannelSym", "kFp8DynamicTokenSym")),
    QuantScheme("fp8_block", "fp8", "FP8 E4M3, fp32 scale per 128x128 block",
                "FP8 E4M3, dynamic fp32 scale per 1x128 group",
                ("kFp8Static128BlockSym", "kFp8Dynamic128Sym")),
    QuantScheme("mxfp8", "mxfp8", "MXFP8 E4M3, E8M0 scale per 32",
                "MXFP8 E4M3, dynamic E8M0 scale per 32", ("kMxfp8Static", "kMxfp8Dynamic")),
    QuantScheme("mxfp4", "mxfp4", "MXFP4 E2M1, E8M0 scale per 32", "bf16/fp16",
                ("kMxfp4Static", None)),
    QuantScheme("mxfp4_w4a8", "mxfp4", "MXFP4 E2M1, E8M0 scale per 32",
                "MXFP8 E4M3, dynamic E8M0 scale per 32", ("kMxfp4Static", "kMxfp8Dynamic")),
    QuantScheme("mxfp4_w4a4", "mxfp4", "MXFP4 E2M1, E8M0 scale per 32",
                "MXFP4 E2M1, dynamic E8M0 scale per 32", ("kMxfp4Static", "kMxfp4Dynamic")),
    QuantScheme("int8", "int", "int8", "int8 or bf16"),
    QuantScheme("int4", "int", "int4", "bf16"),
    QuantScheme("unquantized", "unquantized", "bf16/fp16", "bf16/fp16"),
)}
QUANT_KEYS_SOURCE = _KEYS
# swigluoai reads gate/up interleaved (gpt-oss checkpoints); swigluoai_uninterleave is the same
# function on packed [gate; up] halves: vLLM 0.32.0 fused_moe/activation.py MoEActivation.
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu2", "swigluoai", "situ",
               "swigluoai_uninterleave", "swiglustep")
DTYPES = ("bfloat16", "float16", "float32")
# vLLM 0.32.0's all2all backends (config/parallel.py All2AllBackend; flashinfer_all2allv is its
# alias of flashinfer_nvlink_two_sided): the experts classes tell FlashInfer's one-sided and
# two-sided NVLink exchanges apart (fused_moe/config.py use_fi_nvl_one_sided_kernels,
# use_fi_nvl_two_sided_kernels; MarlinExpertsBase refuses only the two-sided one)
ALL2ALL = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency",
           "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "naive")
# The granularity of an FP8 layer's activation scales where it is not the quant scheme's own
# (layer.act_scale; null: the scheme's, QUANT_SCHEMES' activation key): vLLM 0.32.0 quantizes
# the dynamic activations of a per-tensor FP8 linear layer per token (quantization/fp8.py
# Fp8LinearMethod.__init__ 274-280 on a GPU with CUTLASS FP8; compressed_tensors/schemes/
# compressed_tensors_w8a8_fp8.py activation_quant_key_mapping) and those of a compressed-tensors
# per-tensor FP8 MoE per 1x128 group (compressed_tensors_moe_w8a8_fp8.py 94-105:
# kFp8Dynamic128Sym). tensor: one scale; token: one per row; group_128: one per 1x128 group.
ACT_SCALES = ("tensor", "token", "group_128")
# The router's routing method (layer.routing; null: not known), vLLM 0.32.0's RoutingMethodType
# (fused_moe/config.py) in snake case: which experts kernels take the layer depends on it
# (experts/trtllm_fp8_moe.py TrtLlmFp8ExpertsMonolithic._supports_routing_method).
ROUTINGS = ("default", "renormalize", "deepseek_v3", "llama4", "renormalize_naive", "topk",
            "sigmoid_renorm", "minimax2", "sigmoid", "unspecified", "deepseek_v4", "custom",
            "simulated")
# The vLLM quantization method that built the layer (layer.quant_method; null: not known): the
# FP8 MoE oracle runs vLLM's CUTLASS FP8 experts for compressed-tensors only (fused_moe/oracle/
# fp8.py select_fp8_moe_backend allow_vllm_cutlass: CompressedTensorsW8A8Fp8MoEMethod passes
# True; Fp8MoEMethod, quantization/fp8.py:522, and ModelOpt's FP8 MoE leave it False).
QUANT_METHODS = ("fp8", "modelopt", "compressed-tensors", "mxfp4", "mxfp8")
# each scheme's own activation-scale granularity (QUANT_SCHEMES' activation keys)
SCHEME_ACT_SCALE = {"fp8_tensor": "tensor", "fp8_tensor_dynamic": "tensor",
                    "fp8_channel": "token", "fp8_block": "group_128"}


class Status(str, Enum):
    """A candidate's status (docs/interface.md); a str, so JSON and comparisons see the name."""
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

# Distributions every platform reports (docs/interface.md), beside those the catalogue names.
CORE_PACKAGES = ("flashinfer-python", "flashinfer-cubin", "nvidia-cutlass-dsl", "vllm",
                 "sgl-kernel", "b12x", "torch", "triton")


_PARSED = {"parsed": True}  # checked by its own parser (versions.py), not by its type here


@dataclass
class StackConf:
    """`stack:` of a stack preset (conf/stack/<name>.yaml, `# @package platform`): what the
    preset describes, as data. The no-packages hint offers the newest `version` of each
    `family`; `matrix` uses the preset marked `default: true` when --stack is not given."""
    family: str = field(default="???", metadata={
        "required": "is required: the software the preset describes (vllm, sglang, ...)"})
    version: str = field(default="???", metadata={
        "required": "is required: the family's version the preset describes, e.g. '0.32'"})
    default: bool = False


@dataclass
class PlatformConf:
    preset: str = "auto"
    capability: Optional[str] = field(default=None, metadata=_PARSED)
    cuda: Optional[str] = field(default=None, metadata=_PARSED)
    gpu_name: Optional[str] = None
    packages: Dict[str, Optional[str]] = field(default_factory=dict, metadata=_PARSED)
    stack: Optional[StackConf] = None  # set by a stack preset: what it describes


def _choice(default: Optional[str], choices: Tuple[str, ...], optional: bool = False) -> Any:
    return field(default=default, metadata={"choices": choices, "optional": optional})


def _int(default: Optional[int], minimum: int = 1) -> Any:
    return field(default=default, metadata={"min": minimum})


@dataclass(frozen=True)
class Layer:
    """One layer to decide for: the `layer.*` keys. Frozen, so it keys the decision cache.

    Validation (layer.make_layer) is driven by these field types and their `choices`. The one
    layer type from `make_layer` down to rules, the resolver, decisions and plans: they read its
    attributes (never string keys). `to_dict()` is its JSON object (the `layer` of a decision's
    JSON, keys in field order), the one place its keys are spelled as strings.
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
    act_scale: Optional[str] = _choice(None, ACT_SCALES, optional=True)
    routing: Optional[str] = _choice(None, ROUTINGS, optional=True)
    quant_method: Optional[str] = _choice(None, QUANT_METHODS, optional=True)
    # the data-parallel size the engine runs the layer under (vLLM: with expert parallelism and
    # TP > 1, DP > 1 makes the MoE sequence parallel: fused_moe/config.py
    # FusedMoEParallelConfig.is_sequence_parallel; without EP, DP > 1 still changes the
    # experts class, e.g. experts/trtllm_mxfp4_moe.py 173-180 dp_size <= 1)
    dp_size: Optional[int] = _int(None)  # null: 1 (no data parallelism)

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
        return {k: getattr(self, k) for k in _LAYER_KEYS}


_LAYER_KEYS = tuple(f.name for f in fields(Layer))


# The Hydra node of `layer:`: Layer's fields, mutable (Hydra applies overrides to it).
LayerConf = make_dataclass("LayerConf", [(f.name, f.type, field(default=f.default))
                                         for f in fields(Layer)],
                           namespace={"__module__": __name__})


_NAMES = {"problem": "is not a list of backend names"}


@dataclass
class PolicyConf:
    moe_backend: Any = "auto"  # a name, or an ordered list of names (first usable wins)
    linear_backend: Any = "auto"
    strict: bool = field(default=True, metadata={
        "problem": "is not a boolean; accepted: true, false"})
    allow_opt_in: List[str] = field(default_factory=list, metadata=_NAMES)  # auto may choose
    exclude: List[str] = field(default_factory=list, metadata=_NAMES)  # never chosen
    # usable backends ranked by a `selector tune` profile (selector.core.profile)
    preference: str = field(default="auto", metadata={"choices": ("auto", "static", "measured")})
    profile: Optional[str] = None  # the profile file (implies preference=measured)
    # a launch plan passes no backend choice: the engine's own automatic choice runs
    engine_default: bool = field(default=False, metadata={
        "problem": "is not a boolean; accepted: true, false"})


def _required(problem: str = "is required") -> Any:
    """A field every file must give (a non-blank value; "???" is Hydra's missing value)."""
    return field(default="???", metadata={"required": problem})


_RANK = "must be an integer (lower is preferred)"


def _rank() -> Any:
    return field(default="???", metadata={"required": _RANK, "problem": _RANK})


@dataclass
class OptInConf:
    """`opt_in:` of a backend: never chosen automatically (unless policy.allow_opt_in names
    it), with why and the public source."""
    reason: str = _required()
    source: str = _required()


@dataclass
class PreferenceConf:
    """One `preference:` entry: when `when` holds (layer and platform terms, as a rule's
    `when`), the backend ranks at `rank` instead of its base rank; `reason` is shown."""
    rank: int = _rank()
    reason: str = _required()
    source: str = _required()
    when: Dict[str, Any] = field(default_factory=dict, metadata={
        "problem": "is not a mapping of conditions"})


@dataclass
class ProbeConf:
    """A deep probe declared in a backend file's `probes:` list (beside registered names):
    `func` runs in a child process after `imports` (in-process, importing nothing, when there
    are none), and is skipped unless each `requires` distribution is installed in range."""
    name: str = _required()
    func: str = _required("is required: selector.backends.children.probes.<module>:<function>")
    description: str = _required()
    source: str = _required()
    imports: List[str] = field(default_factory=list)
    requires: Dict[str, str] = field(default_factory=dict, metadata={
        "problem": "is not a mapping of distribution to specifier"})


@dataclass
class DeclarationsConf:
    """`declarations:` of a backend file: where the installed kernel library declares what
    this backend claims, for the drift report of `doctor --deep` (keys of the
    flashinfer.declarations probe: `moe:<entry point>`, `mm_fp4:<backend>`)."""
    devices: Optional[str] = None  # its capability list (@supported_compute_capability)
    min_cuda: Optional[str] = None  # its minimum CUDA (backend_requirement)
    activations: Optional[str] = None  # its activation set, compared with `activation` rules
    gated_activations: Optional[str] = None  # its gated set, with `act_and_mul` rules
    activation_enum: bool = False  # compare the layer vocabulary with TRT-LLM ActivationType


@dataclass
class BackendConf:
    """One backend of one op: one YAML file under conf/backend/<op>/<name>.yaml.

    Validated field by field in model.py/rules/ against these dataclasses (merging a list
    of structured rules through OmegaConf costs about 70 ms a file).
    """
    description: str = ""
    rank: int = _rank()
    execution: str = _choice("native", EXECUTIONS)
    implements: List[str] = field(default_factory=lambda: list(NVFP4_QUANTS), metadata={
        "choices": QUANTS, "hint": "a new quantization scheme is first named in "
        "selector/core/schema.py (QUANTS): docs/architecture.md, recipe: add a quantization scheme"})
    entry_point: Optional[str] = None
    # probe names (probe_specs.py), or probes declared here (ProbeConf): must pass to run
    probes: List[Any] = field(default_factory=list, metadata={
        "problem": "is not a list of probe names or probe declarations"})
    opt_in: Optional[OptInConf] = None
    preference: List[PreferenceConf] = field(default_factory=list, metadata={
        "problem": "is not a list of preference entries"})
    rules: List[Any] = field(default_factory=list, metadata={  # each checked by its kind
        "problem": "is not a list of rules"})
    engines: Dict[str, Any] = field(default_factory=dict, metadata={  # per engine: engines/
        "problem": "is not a mapping of engine name to entry"})
    # What `doctor --deep` compares with what the installed library declares about itself
    # (selector/inspect/drift.py): declaration keys of the flashinfer.declarations probe's findings.
    declarations: Optional[DeclarationsConf] = None


@dataclass
class EngineEntryConf:
    """One backend as one engine offers it: `backends.<op>.<backend>` of the engine's home
    (conf/engine/<engine>.yaml), or `engines.<engine>` of a config dir's backend file. The
    engine's name for the backend (null: the engine has none), the public source, environment
    variables, engine-only rules and the kernels it runs."""
    name: Optional[str] = field(default=None, metadata={
        "problem": "is not a backend name (or null: the engine has no such backend)"})
    source: str = _required("is required: cite the engine file or release that names this "
                            "backend")
    env: Dict[str, Union[str, int]] = field(default_factory=dict, metadata={
        "problem": "is not a mapping of variable to value"})
    rules: List[Any] = field(default_factory=list, metadata={"problem": "is not a list of rules"})
    kernels: Optional[List[Any]] = field(default=None, metadata={
        "problem": "is not a list of {kernel, source, scheme, when}"})
    replaces: List[str] = field(default_factory=list, metadata={
        "problem": "is not a list of rule kinds"})
    names: Dict[str, str] = field(default_factory=dict, metadata={  # scheme -> its own name
        "problem": "is not a mapping of quant scheme to the engine's name for it"})
    # the engine reaches the backend on its automatic path although the backend file marks it
    # opt-in: the public source that says so (under this engine the opt-in does not hold)
    automatic: Optional[str] = field(default=None, metadata={
        "problem": "is not a source (the engine file whose automatic path reaches the backend)"})
    # the engine's own order for the backend (the backend file's `preference:` entries, first)
    preference: List[Any] = field(default_factory=list, metadata={
        "problem": "is not a list of {when, rank, reason, source}"})
    implements: List[str] = field(default_factory=list, metadata={
        "problem": "is not a list of quant schemes (those the engine's kernel under this name "
                   "runs beyond the backend's own implements)"})


@dataclass
class EngineConf:
    """The inference engine selector answers for (`engine=NAME`, conf/engine/NAME.yaml; the
    fields: selector/core/engines.py, docs/engines.md)."""
    name: str = "none"
    label: str = ""
    moe_flag: Optional[str] = None  # shorthand for choices: [{op: moe, flag: ...}]
    linear_flag: Optional[str] = None
    source: str = ""
    outside: Dict[str, str] = field(default_factory=dict, metadata={  # not modelled: source
        "problem": "is not a mapping of the engine's backend name to why it is not modelled"})
    package: str = ""  # the distribution whose installed version the label names
    distributions: List[str] = field(default_factory=list)
    proof: str = ""
    choices: List[Any] = field(default_factory=list, metadata={
        "problem": "is not a list of {op, flag|env|config, schemes, source}"})
    backends: Dict[str, Any] = field(default_factory=dict, metadata={
        "problem": "is not a mapping of op to {catalogue backend: engine entry}"})
    launch: Dict[str, Any] = field(default_factory=dict, metadata={
        "problem": "is not a mapping (command, parallel, hooks, config_file)"})
    cites: Dict[str, str] = field(default_factory=dict, metadata={  # engines.CITE_KEYS
        "problem": "is not a mapping of a selector behaviour (implements, weight_only) to the "
                   "engine's source for it"})
    # false: the catalogue's preference reasons (vLLM's order) are not said in this engine's
    # plans; a rank is said by its number, or by the engine entry's own `preference`
    rank_reasons: bool = True


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
