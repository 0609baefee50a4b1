"""The drift report: what the catalogue claims against what the installed kernel libraries declare.

`doctor --deep` runs the `flashinfer.declarations` and `b12x.declarations` probes (in the
deep-probe child process: backends/children/probes/declarations.py); this module only compares their
plain-data findings with the catalogue's rules, importing nothing. Each comparison is one item
with both values and a status: `agrees`, `explained` (a deliberate difference, declared on the
rule as `explained: [{claim, reason, source}]`) or `drift` (the catalogue is out of date: doctor
exits 1). docs/maintaining.md says how to act on a drift.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from selector.core.rules import KINDS, CudaRule, DeviceRule, Explained, Facts, PackageRule, Rule

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.model import BackendSpec, Catalogue

R = TypeVar("R", bound=Rule)

STATUSES = ("agrees", "explained", "drift")

# Which library declaration a backend is compared with is a field of its file
# (`declarations:`, schema.DeclarationsConf): devices and minimum CUDA name a key of the
# flashinfer.declarations probe's findings (`moe:<entry point>`, `mm_fp4:<backend>`); linear
# backends' devices are also matched through their `flashinfer.mm_fp4:<backend>` probe.
# The flashinfer constants behind the probe's activation keys, for the report's wording.
ACTIVATION_CONSTANTS = {"b12x_moe": "SUPPORTED_MOE_ACTIVATIONS",
                        "b12x_moe_gated": "GATED_MOE_ACTIVATIONS"}
# The layer vocabulary as FlashInfer's TRT-LLM ActivationType (vLLM 0.32.0
# quantization/utils/flashinfer_utils.py ACTIVATION_TO_FI_ACTIVATION, plus the names that
# enum added for swiglustep and situ): (activation, gated) -> member.
ACTIVATION_TYPE = {("silu", True): "Swiglu", ("swigluoai", True): "Swiglu",
                   ("swigluoai_uninterleave", True): "Swiglu", ("gelu", True): "Geglu",
                   ("gelu_tanh", True): "GegluTanh", ("swiglustep", True): "SwigluStep",
                   ("situ", True): "Situ", ("silu", False): "Silu", ("gelu", False): "Gelu",
                   ("relu2", False): "Relu2"}
ENUM_SENTINELS = ("InvalidType",)


@dataclass(frozen=True)
class DriftItem:
    backend: str  # "<op>/<name>"
    claim: str
    installed: str
    status: str
    detail: str
    catalogue: str = ""

    def to_dict(self) -> Dict[str, str]:
        return {"backend": self.backend, "claim": self.claim, "catalogue": self.catalogue,
                "installed": self.installed, "status": self.status, "detail": self.detail}


def _cc(c: int) -> Tuple[int, int]:
    return (c // 10, c % 10)


def _fmt(ccs: Iterable[int]) -> str:
    return ", ".join(f"{c // 10}.{c % 10}" for c in sorted(ccs)) or "none"


def _rules(b: BackendSpec, kind: Type[R]) -> List[R]:
    """b's rules of that kind (the class registered for it)."""
    return [r for r in b.rules if r.kind == kind.kind and isinstance(r, kind)]


def _nvfp4_layers(r: Any) -> bool:
    """Whether r's `when` holds for every NVFP4 layer: its only layer term, if any, is a `quant`
    one naming nvfp4 (the libraries' declarations compared here are their NVFP4 kernels'; rules
    scoped to other schemes, FP8 or MX, are not theirs)."""
    return set(r.when.layer_fields) <= {"quant"} and "nvfp4" in (r.when.get("quant") or
                                                                 ("nvfp4",))


def _unconditional(b: BackendSpec, kind: Type[R]) -> List[R]:
    """b's rules of that kind that hold for NVFP4 layers on every platform: no `when`, or one
    on the quant scheme only, naming nvfp4."""
    return [r for r in _rules(b, kind)
            if all(k == "quant" and "nvfp4" in v for k, v in r.when.terms)]


def _explanation(backends: Sequence[BackendSpec], claim: str
                 ) -> Tuple[Optional[BackendSpec], Optional[Explained]]:
    for b in backends:
        for r in b.rules:
            for e in getattr(r, "explained", ()):
                if e.claim == claim:
                    return b, e
    return None, None


class _Report:
    def __init__(self, catalogue: Catalogue, facts: Facts):
        self.catalogue, self.facts = catalogue, facts
        self.items: List[DriftItem] = []

    def add(self, op: str, b: Optional[BackendSpec], claim: str, catalogue: str, installed: str, same: bool,
            detail: str) -> None:
        backends = [b] if b is not None else list(self.catalogue.backends.get(op, ()))
        who, e = (None, None) if same else _explanation(backends, claim)
        owner = who or b
        name = f"{op}/{owner.name}" if owner is not None else f"{op}/-"
        if same:
            status = "agrees"
        elif e is not None:
            status, detail = "explained", f"{detail}; {e.reason} ({e.source})"
        else:
            status = "drift"
        self.items.append(DriftItem(name, claim, installed, status, detail, catalogue))

    # -- devices --------------------------------------------------------------------------

    def devices(self, op: str, b: Optional[BackendSpec], declared: Optional[List[int]], where: str,
                universe: Sequence[int]) -> None:
        rules = _unconditional(b, DeviceRule) if b is not None else []
        if declared is None or not rules:
            return
        claimed = {c for c in universe if all(any(d.matches(_cc(c)) for d in r.devices)
                                               for r in rules)}
        have = {c for c in declared if c in universe}
        only_c, only_i = sorted(claimed - have), sorted(have - claimed)
        detail = f"{where} declares SM {_fmt(have)}"
        if only_c or only_i:
            detail += (f"; only in the catalogue: {_fmt(only_c)}" if only_c else "") + \
                (f"; only in the library: {_fmt(only_i)}" if only_i else "")
        self.add(op, b, "devices", _fmt(claimed), _fmt(have), claimed == have, detail)

    # -- minimum CUDA ---------------------------------------------------------------------

    def min_cuda(self, op: str, b: Optional[BackendSpec], declared: Optional[str], where: str) -> None:
        if declared is None or b is None:
            return
        floors = [f for f in (_floor(r.spec) for r in _rules(b, CudaRule) if
                              _nvfp4_layers(r) and r.when.get("devices") is None and
                              all(p.holds(self.facts) for p in r.when.get("packages") or ()))
                  if f is not None]
        claimed = max(floors) if floors else None
        try:
            have = Version(declared)
        except InvalidVersion:
            return
        self.add(op, b, "minimum CUDA", str(claimed) if claimed else "none", str(have),
                 claimed == have, f"{where} requires CUDA >= {have}")

    # -- activations ----------------------------------------------------------------------

    def activation_set(self, op: str, b: Optional[BackendSpec], kind: str, claim: str, declared: Optional[List[str]],
                       where: str) -> None:
        rules = _unconditional(b, KINDS[kind]) if b is not None else []
        if declared is None or not rules:
            return
        claimed = set(getattr(rules[0], "values" if kind == "activation" else "gated"))
        have = set(declared)
        detail = f"{where}: {', '.join(sorted(have))}"
        if claimed != have:
            detail += f"; the catalogue lists {', '.join(sorted(claimed))}"
        self.add(op, b, claim, ", ".join(sorted(claimed)), ", ".join(sorted(have)),
                 claimed == have, detail)

    def activation_enum(self, op: str, b: Optional[BackendSpec], members: Optional[List[str]]) -> None:
        if members is None or b is None:
            return
        for m in members:
            if m in ENUM_SENTINELS:
                continue
            ours = sorted(f"{a}{'' if g else ' (non-gated)'}"
                          for (a, g), v in ACTIVATION_TYPE.items() if v == m)
            self.add(op, b, f"ActivationType.{m}", ", ".join(ours) or "no vocabulary value",
                     "in flashinfer tllm_enums.ActivationType", bool(ours),
                     f"vocabulary value(s): {', '.join(ours)}" if ours else
                     "a TRT-LLM activation the layer vocabulary cannot name")
        for (a, _g), v in sorted(ACTIVATION_TYPE.items()):
            if v not in members:
                self.add(op, b, f"ActivationType.{v}", a, "absent", False,
                         f"the vocabulary maps {a} to ActivationType.{v}, which the installed "
                         "flashinfer lacks")

    # -- mm_fp4 backends ------------------------------------------------------------------

    def mm_fp4_backends(self, installed: Optional[List[str]], experimental: List[str]) -> None:
        if installed is None:
            return
        named = _mm_fp4_probes(self.catalogue)
        for name in sorted(set(installed) | set(named)):
            b = named.get(name)
            tag = " (experimental)" if name in experimental else ""
            if name not in installed:
                assert b is not None  # a name from neither list is not in the union
                self.add("linear", b, f"mm_fp4 backend {name}", b.name, "absent", False,
                         f"the catalogue's {b.name} probes mm_fp4 backend {name!r}, which the "
                         "installed flashinfer does not register")
            else:
                self.add("linear", b, f"mm_fp4 backend {name}",
                         b.name if b else "no catalogue backend", f"registered{tag}",
                         b is not None, f"mm_fp4 backend {name!r}{tag}" +
                         (f" is the catalogue's {b.name}" if b else " has no catalogue backend"))

    def requirements(self, nb: Mapping[str, Any]) -> None:
        _b12x_requirements(self, nb)
        for op, backends in self.catalogue.backends.items():
            for b in backends:
                if any("b12x" in r.names for r in _unconditional(b, PackageRule)):
                    self.devices(op, b, nb.get("devices"), "b12x gating.is_b12x",
                                 nb.get("universe", ()))
                    self.gate_floor(op, b, nb)

    def gate_floor(self, op: str, b: BackendSpec, nb: Mapping[str, Any]) -> None:
        """b12x's run-time nvidia-cutlass-dsl minimum (MIN_CUTLASS_DSL) against the catalogue."""
        gate = (nb.get("constants") or {}).get("MIN_CUTLASS_DSL")
        floors = [_floor(q.spec) for r in _unconditional(b, PackageRule)
                  for q in r.reqs if q.name == "nvidia-cutlass-dsl"]
        if gate is None or not floors or floors[0] is None:
            return
        self.add(op, b, "nvidia-cutlass-dsl run-time minimum", f">={floors[0]}", f">={gate}",
                 floors[0] == Version(gate), f"b12x _lib/gating.py MIN_CUTLASS_DSL = {gate!r}")

    # -- the nvidia-cutlass-dsl floor of the installed flashinfer --------------------------

    def dsl_floor(self, version: Optional[str], requires: Mapping[str, str]) -> None:
        spec = requires.get("nvidia-cutlass-dsl")
        if version is None or spec is None:
            return
        have = _floor(_spec(spec))
        fi = Version(version)
        for op, backends in self.catalogue.backends.items():
            for b in backends:
                floors: List[Version] = []
                for r in b.rules:
                    if r.kind != "known_issue" or r.severity != "error":
                        continue
                    pk = {p.name: p.spec for p in r.when.get("packages") or ()}
                    if set(pk) != {"flashinfer-python", "nvidia-cutlass-dsl"} or \
                            not pk["flashinfer-python"].contains(fi, prereleases=True):
                        continue
                    ceiling = [s.version for s in pk["nvidia-cutlass-dsl"] if s.operator == "<"]
                    floors.extend(Version(c) for c in ceiling)
                if floors:
                    claimed = max(floors)
                    self.add(op, b, "nvidia-cutlass-dsl floor", f">={claimed}", spec,
                             claimed == have, f"flashinfer-python {version} requires "
                             f"nvidia-cutlass-dsl{spec} (distribution metadata)")


def _b12x_requirements(rep: _Report, nb: Mapping[str, Any]) -> None:
    """Native b12x: its Requires-Dist floors against the catalogue's package rules."""
    requires = nb.get("requires", {})
    for op, backends in rep.catalogue.backends.items():
        for b in backends:
            if not any("b12x" in getattr(r, "names", ()) for r in b.rules):
                continue
            for r in _unconditional(b, PackageRule):
                for req in r.reqs:
                    if req.name in ("b12x", "nvidia-cutlass-dsl") or req.name not in requires:
                        continue
                    claimed, have = _floor(req.spec), _floor(_spec(requires[req.name]))
                    if claimed is None or have is None:
                        continue
                    rep.add(op, b, f"{req.name} floor", f">={claimed}", requires[req.name],
                            claimed == have, f"b12x {nb['version']} requires "
                            f"{req.name}{requires[req.name]} (distribution metadata)")


def _spec(text: str) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return SpecifierSet()


def _floor(spec: SpecifierSet) -> Optional[Version]:
    lows = [Version(s.version) for s in spec if s.operator in (">=", "==", "~=")
            and "*" not in s.version]
    return max(lows) if lows else None


def _mm_fp4_probes(catalogue: Catalogue) -> Dict[str, BackendSpec]:
    out: Dict[str, BackendSpec] = {}
    for b in catalogue.backends.get("linear", ()):
        for p in b.probes:
            base, _, arg = p.partition(":")
            if base == "flashinfer.mm_fp4" and arg:
                out[arg] = b
    return out


def compare(catalogue: Catalogue, facts: Facts, findings: Mapping[str, Mapping[str, Any]]) -> List[DriftItem]:
    """Drift items from the details of the declaration probes (probe name -> details)."""
    rep = _Report(catalogue, facts)
    fi = findings.get("flashinfer.declarations") or {}
    if fi.get("version"):
        caps, universe = fi.get("capabilities", {}), fi.get("universe", ())
        declaring = [b for bs in catalogue.backends.values() for b in bs if b.declarations]
        for b in declaring:
            key = b.declared("devices")
            if key:
                rep.devices(b.op, b, caps.get(key), f"flashinfer {key.partition(':')[2]}",
                            universe)
        for backend, lb in sorted(_mm_fp4_probes(catalogue).items()):
            rep.devices("linear", lb, caps.get(f"mm_fp4:{backend}"),
                        f"flashinfer mm_fp4 backend {backend!r}", universe)
        rep.mm_fp4_backends(fi.get("mm_fp4_backends"), fi.get("mm_fp4_experimental", []))
        for b in declaring:
            key = b.declared("min_cuda")
            if key:
                rep.min_cuda(b.op, b, fi.get("min_cuda", {}).get(key), f"flashinfer {key}")
        acts = fi.get("activations", {})
        for b in declaring:
            for field, kind, claim in (("activations", "activation", "activations"),
                                       ("gated_activations", "act_and_mul",
                                        "gated activations")):
                key = b.declared(field)
                if key:
                    rep.activation_set(b.op, b, kind, claim, acts.get(key),
                                       f"flashinfer {ACTIVATION_CONSTANTS.get(key, key)}")
        for b in declaring:
            if b.declared("activation_enum"):
                rep.activation_enum(b.op, b, acts.get("ActivationType"))
        rep.dsl_floor(fi.get("version"), fi.get("requires", {}))
    nb = findings.get("b12x.declarations") or {}
    if nb.get("version"):
        rep.requirements(nb)
    return rep.items


def counts(items: Sequence[DriftItem]) -> Dict[str, int]:
    return {s: sum(1 for i in items if i.status == s) for s in STATUSES}
