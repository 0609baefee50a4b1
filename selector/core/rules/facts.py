"""What rules evaluate against and what a failure says: Facts (what a platform offers) and
Reason (a failed rule, with the outcome its kind gives)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Tuple

from packaging.version import Version

from selector.core.schema import Status
from selector.core.versions import canonicalize_name

#: the `rule` of the reason an opt-in backend gives (opt-in is a backend field, not a kind)
OPT_IN = "opt_in"
#: the CUDA compiler: a `platform.packages` key that is not a distribution (kind: nvcc). Absent
#: from a platform's packages: its version is unknown; None: there is none.
NVCC = "nvcc"
#: the optional kernel modules vLLM imports, as `platform.packages` keys that are not
#: distributions (kind: vllm_module): key -> (the top-level module an installed package gives, the
#: copy vLLM's CUDA wheels bundle under vllm/). vLLM 0.32.0 utils/import_utils.py has_deep_gemm
#: (deep_gemm or vllm.third_party.deep_gemm), has_triton_kernels (triton_kernels or
#: vllm.third_party.triton_kernels). The value is the version of the distribution that ships the
#: module; None: the installed vLLM imports none (a CPU, ROCm or source build); absent: unknown.
VLLM_MODULES = {"vllm-deep-gemm": ("deep_gemm", "third_party/deep_gemm"),
                "vllm-triton-kernels": ("triton_kernels", "third_party/triton_kernels")}
#: the platform.packages keys that are no distribution: a preset that does not name one leaves it
#: unknown (not absent)
NOT_DISTRIBUTIONS = (NVCC, *VLLM_MODULES)


@dataclass(frozen=True)
class Reason:
    """A failed rule: what it says, and the outcome its kind gives (Rule.status, Rule.final).

    status: the candidate status this failure gives its backend (REJECTED, NOT_APPLICABLE,
    OPT_IN), declared by the rule kind; the resolver never reads it from `rule`'s name.
    final: the failure ends the evaluation of the backend and is its only reason (the backend
    does not serve the layer at all: the engine lacks it, or it does not implement the layer).
    """
    rule: str
    message: str
    source: str
    need: str  # short phrase for the one-line summary ("need SM 10.x")
    severity: str = "error"
    key: str = ""  # the rule that produced it, e.g. catalogue.moe.marlin.rules[1]
    status: Status = Status.REJECTED
    final: bool = False

    def to_dict(self) -> Dict[str, str]:
        return {"rule": self.rule, "message": self.message, "source": self.source}


@dataclass(frozen=True)
class Facts:
    """What a platform offers: compute capability, CUDA runtime, installed distributions."""
    capability: Optional[Tuple[int, int]]
    cuda: Optional[Version]
    packages: Mapping[str, Optional[Version]]  # canonical name -> version, None = absent

    def version(self, package: str) -> Optional[Version]:
        return self.packages.get(canonicalize_name(package))
