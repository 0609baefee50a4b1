"""The vLLM release whose reading of a checkpoint the plan follows: the rules that changed
between releases apply by the stack's vLLM version (the platform's `vllm` package, a stack
preset's pin or the installed one). The reader models vLLM 0.32.0; each later change is one
entry here, with the release that made it and its source (issue 44)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from packaging.version import Version

BASE = "0.32.0"  # the release the reader models throughout


@dataclass(frozen=True)
class Reading:
    """How one vLLM release reads a quantization description."""
    release: str  # the release whose reading this is, e.g. "0.33.0"
    # ModelOpt's flat config.json form takes `exclude_modules` when there is no `ignore`
    # (vLLM 0.33.0 model_executor/layers/quantization/modelopt.py:358-359
    # ModelOptQuantConfigBase.from_config: config.get("ignore", config.get("exclude_modules",
    # [])); 0.32.0 reads `ignore` only, modelopt.py:355)
    modelopt_flat_exclude_modules: bool = False


READINGS = (Reading(BASE), Reading("0.33.0", modelopt_flat_exclude_modules=True))


def reading_for(vllm: Optional[Any]) -> Reading:
    """The reading of the newest release in READINGS not newer than `vllm` (a Version or a
    version string); no vLLM version known (or one older than the base): the base's."""
    if vllm is None:
        return READINGS[0]
    v = Version(str(vllm)) if not isinstance(vllm, Version) else vllm
    v = Version(v.base_version)  # 0.33.0rc1, 0.33.0+cu130: the release they belong to
    out = READINGS[0]
    for r in READINGS:
        if v >= Version(r.release):
            out = r
    return out
