"""Rule kinds about the machine: the GPU (device), the CUDA runtime (cuda), installed
distributions (package, known_issue)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from selector.core.errors import bad_input
from selector.core.rules.base import Rule, register
from selector.core.rules.facts import NVCC, VLLM_MODULES, Facts, Reason
from selector.core.rules.when import PackageSpec, _devices, _installed, describe_devices
from selector.core.schema import Layer
from selector.core.versions import canonicalize_name, contains, format_capability, parse_specifier


@register
class DeviceRule(Rule):
    """The GPU's compute capability must match one of `devices`."""
    kind = "device"

    @dataclass(frozen=True)
    class Params:
        devices: Tuple[str, ...]

    def setup(self, p: Params) -> None:
        if not p.devices:
            raise bad_input(f"{self.key}.devices", list(p.devices), "must list at least one "
                            "device spec such as '12.x'", where=self.where)
        self.devices = _devices(p.devices, f"{self.key}.devices", self.where)

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        want = describe_devices(self.devices)
        if facts.capability is None:
            return self.reason(f"needs a GPU of {want}; this platform has no GPU", f"need {want}")
        if any(d.matches(facts.capability) for d in self.devices):
            return None
        return self.reason(f"needs {want}; this GPU is SM {format_capability(facts.capability)}",
                           f"need {want}")

    def describe(self) -> str:
        return f"device {describe_devices(self.devices)}"


@register
class CudaRule(Rule):
    """The CUDA runtime version must satisfy `specifier`."""
    kind = "cuda"

    @dataclass(frozen=True)
    class Params:
        specifier: str

    def setup(self, p: Params) -> None:
        self.spec = parse_specifier(f"{self.key}.specifier", p.specifier, where=self.where)

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        if facts.cuda is None:
            return self.reason(f"needs CUDA {self.spec}; this platform has no CUDA runtime",
                               f"need CUDA {self.spec}")
        if contains(self.spec, facts.cuda):
            return None
        return self.reason(f"needs CUDA {self.spec}; this platform has CUDA {facts.cuda}",
                           f"need CUDA {self.spec}")

    def describe(self) -> str:
        return f"cuda {self.spec}"


@register
class NvccRule(Rule):
    """The CUDA compiler (nvcc) a kernel JIT-compiles with at run time must satisfy `specifier`.
    Its version is detected (`nvcc --version`, found as vLLM finds it) or given as
    `platform.packages.nvcc` (null: none); unknown (a preset that does not name it, or an nvcc
    that does not report its release), the rule warns instead of failing."""
    kind = "nvcc"

    @dataclass(frozen=True)
    class Params:
        specifier: str

    def setup(self, p: Params) -> None:
        self.spec = parse_specifier(f"{self.key}.specifier", p.specifier, where=self.where)

    @property
    def packages(self) -> Tuple[str, ...]:
        return (NVCC,)

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        need = f"need nvcc {self.spec}"
        if NVCC not in facts.packages:
            r = self.reason(f"needs nvcc {self.spec} at run time; this platform's nvcc version "
                            "is unknown (give platform.packages.nvcc=<version>, or null for none)",
                            need)
            return Reason(r.rule, r.message, r.source, r.need, "warning", r.key, r.status,
                          r.final)
        v = facts.packages[NVCC]
        if v is None:
            return self.reason(f"needs nvcc {self.spec} at run time; this platform has no nvcc "
                               "(CUDA_HOME, CUDA_PATH, PATH or /usr/local/cuda)", need)
        if contains(self.spec, v):
            return None
        return self.reason(f"needs nvcc {self.spec} at run time; this platform has nvcc {v}",
                           need)

    def describe(self) -> str:
        return f"nvcc {self.spec}"


@register
class VllmModuleRule(Rule):
    """An optional kernel module vLLM imports must be there: DeepGEMM or triton_kernels, an
    installed package or the copy vLLM's CUDA wheels bundle (vllm/third_party/...), as vLLM's
    has_deep_gemm / has_triton_kernels find it. Detected from the installed vllm
    (selector.inspect.environment.vllm_module; the vLLM plugin asks vLLM's own functions) or given
    as `platform.packages.<module>` (null: none). Unknown (a preset that does not name it): a
    platform naming a vLLM release is that release's CUDA wheel, which bundles the module; with no
    vLLM named the rule warns."""
    kind = "vllm_module"

    @dataclass(frozen=True)
    class Params:
        module: str

    def setup(self, p: Params) -> None:
        if p.module not in VLLM_MODULES:
            raise bad_input(f"{self.key}.module", p.module, "is not a module vLLM imports "
                            f"(accepted: {', '.join(VLLM_MODULES)})", where=self.where)
        self.module = p.module
        self.top, self.bundled = VLLM_MODULES[p.module]

    @property
    def packages(self) -> Tuple[str, ...]:
        return (self.module, "vllm")

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        need = f"need vLLM's {self.top}"
        if self.module not in facts.packages:
            if facts.version("vllm") is not None:  # the release's CUDA wheel bundles it
                return None
            r = self.reason(f"needs the {self.top} module vLLM imports; whether this platform's "
                            f"vLLM has it is unknown (give platform.packages.{self.module}="
                            "<version>, or null for none)", need)
            return Reason(r.rule, r.message, r.source, r.need, "warning", r.key, r.status,
                          r.final)
        if facts.packages[self.module] is None:
            return self.reason(f"needs the {self.top} module vLLM imports (an installed "
                               f"{self.top}, or vllm/{self.bundled} that vLLM's CUDA wheels "
                               "bundle); this vLLM build has neither", need)
        return None

    def describe(self) -> str:
        return f"vllm_module {self.module}"


@register
class PackageRule(Rule):
    """A distribution must be installed in a version range; `any_of` accepts any of several,
    each a name or a requirement with its own range ("sgl-kernel<=0.3.21")."""
    kind = "package"

    @dataclass(frozen=True)
    class Params:
        package: Optional[str] = None
        any_of: Tuple[str, ...] = ()
        specifier: str = ""

    def setup(self, p: Params) -> None:
        self.spec = parse_specifier(f"{self.key}.specifier", p.specifier, where=self.where)
        reqs = [_requirement(f"{self.key}.any_of", e, self.spec, self.where) for e in p.any_of]
        if p.package:
            reqs.append(PackageSpec(canonicalize_name(p.package), self.spec))
        if not reqs:
            raise bad_input(f"{self.key}.package", None, "is required (or any_of: [...])",
                            where=self.where)
        self.reqs = tuple(reqs)
        self.names = tuple(r.name for r in reqs)

    @property
    def packages(self) -> Tuple[str, ...]:
        return self.names

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        if any(r.holds(facts) for r in self.reqs):
            return None
        if len(self.reqs) == 1:
            r = self.reqs[0]
            spec = f" {r.spec}" if str(r.spec) else ""
            hint = f"pip install '{r.name}{r.spec}'" if str(r.spec) else f"pip install {r.name}"
            return self.reason(f"needs {r.name}{spec} ({_installed(facts, r.name)}; {hint})",
                               f"need {r.name}{spec}")
        want = " or ".join(r.describe() for r in self.reqs)
        found = ", ".join(f"{r.name} {_installed(facts, r.name)}" for r in self.reqs)
        return self.reason(f"needs one of {want} ({found})", f"need {want}")

    def describe(self) -> str:
        return f"package {' | '.join(r.describe() for r in self.reqs)}"


#: 'name' or 'name<spec>': a PEP 508 name (letters, digits, '-', '_', '.'; alphanumeric at both
#: ends) and the rest, a specifier set. Parsed without packaging.requirements (its grammar costs
#: about 25 ms of every start); anything else (extras, markers, a URL) is refused as before.
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*([^\[;@]*)$")


def _requirement(key: str, text: str, spec: SpecifierSet, where: str) -> PackageSpec:
    """'name' or 'name<spec>' (PEP 508 without extras or markers), and the rule's own range."""
    m = _REQUIREMENT.match(text)
    req: Optional[SpecifierSet] = None
    if m is not None and (not m.group(2).strip() or m.group(2).lstrip()[0] in "<>=!~"):
        try:
            req = SpecifierSet(m.group(2).strip())
        except InvalidSpecifier:
            req = None
    if m is None or req is None:
        raise bad_input(key, text, "is not a distribution name with an optional version range "
                        "such as 'sgl-kernel<=0.3.21'", where=where)
    return PackageSpec(canonicalize_name(m.group(1)), req & spec)


@register
class KnownIssueRule(Rule):
    """A combination known to break: fails whenever its `when` holds (`message` required)."""
    kind = "known_issue"
    appends_message = False  # the message is the whole reason

    def setup(self, p: Any) -> None:
        if not self.message:
            raise bad_input(f"{self.key}.message", None, "is required for a known_issue rule: "
                            "say what breaks and how to avoid it", where=self.where)
        if self.when.get("packages") is None and self.when.get("devices") is None:
            raise bad_input(f"{self.key}.when", {}, "must name packages or devices for a "
                            "known_issue rule", where=self.where)

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        seen = self.when.describe_platform(facts)
        assert self.message is not None
        return self.reason(f"{self.message} (this platform: {seen})" if seen else self.message,
                           "hit a known issue")

    def describe(self) -> str:
        parts = [p.describe() for p in self.when.get("packages") or ()]
        if self.when.get("devices") is not None:
            parts.append(describe_devices(self.when.get("devices")))
        return f"known_issue when {', '.join(parts)}"
