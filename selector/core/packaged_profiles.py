"""Packaged measured profiles: `selector tune` profiles taken on the project's lent GPUs and
shipped in selector/profiles/, used under `policy.preference=auto` (the default) when the
detected machine matches one (the GPU model, compute capability, CUDA version, CPU architecture
and the version of every library the measured machine had; `profile.packaged_differences`).

A packaged profile's cell stands for nearby shapes and token buckets (`Measured.near_cell`), so
that a layer the project never timed is ranked by the nearest measured one; a cell that did not
time every backend usable here (a library installed here and not there) is not used, and the
static order decides. The explanation names it: "measured on NVIDIA H100 80GB HBM3, packaged
profile". A user's own profile (`policy.preference=measured`, `policy.profile=PATH`) replaces it.
"""
from __future__ import annotations

import platform as _platform
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

from selector.core import profile as prof

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.model import RunConfig

PROFILE_DIR = Path(__file__).resolve().parent.parent / "profiles"


def here_key(run: RunConfig) -> Dict[str, Any]:
    """The detected platform in a profile key's terms (gpu, capability, cuda, machine,
    packages)."""
    p = run.platform
    return {"gpu": p.gpu_name, "capability": list(p.capability) if p.capability else None,
            "cuda": None if p.cuda is None else str(p.cuda), "machine": _platform.machine(),
            "packages": {n: None if v is None else str(v) for n, v in p.packages}}


def packaged_profile(run: RunConfig, directory: Union[str, Path, None] = None
                     ) -> Optional[prof.Measured]:
    """The first packaged profile (by file name) measured on this machine's GPU model and
    libraries, or None (a platform preset, no GPU, or no profile matches: the static order)."""
    if run.platform.source != "detected" or run.platform.capability is None:
        return None
    base = Path(directory) if directory is not None else PROFILE_DIR
    if not base.is_dir():
        return None
    here = here_key(run)
    for path in sorted(base.glob("*.json")):
        doc = prof.loads(prof.read_bytes(str(path)), str(path))
        key = doc.get("key") if isinstance(doc, dict) else None
        if not isinstance(key, dict) or prof.packaged_differences(key, here, ["torch"]):
            continue  # another GPU model, CUDA or torch: its cells are not even read
        profile = prof.parse(doc, str(path))
        timed = {(c.layer["op"], b) for c in profile.cells for b in c.times}
        libraries = {"torch"} | {n for op, b in timed if b in run.catalogue.names(op)
                                 for n in run.catalogue.get(op, b).packages()}
        if prof.packaged_differences(profile.key, here, sorted(libraries)):
            continue
        prof.check_backends(profile, str(path), {op: run.catalogue.names(op)
                                                 for op in run.catalogue.backends})
        gpu = str(profile.key.get("gpu"))
        return prof.Measured(f"{path.name} (packaged, measured on {gpu})", profile, (),
                             packaged=gpu)
    return None


__all__ = ["packaged_profile", "here_key", "PROFILE_DIR"]
