"""Deep probes of the installed kernel stack: the registry (probe name -> ProbeSpec).

The specs are data: each names its function as "module:function" in selector.backends.children.probes,
imported only in the child process that runs it (selector.inspect.probe_child).

A backend's config lists the probes that must pass for it to run here (`probes:` in
conf/backend/<op>/<name>.yaml): by name, or declared in the file itself (schema.ProbeConf:
name, func, description, source, imports, requires; added to DECLARED when the file is read,
and handed to the child process with the run). `selector doctor --deep` and `explain probe=deep` run them:
probes that import a kernel library run in a child process per library group (an import can
hang or kill the interpreter); metadata-only probes run in-process. Importing this module
imports no kernel library, and neither does resolving a name.

Probe names:
  flashinfer.b12x_moe            b12x_fused_moe / B12xMoEWrapper importable (and why not)
  flashinfer.b12x_gemm           the SM120 b12x dense GEMM kernel class; mm_fp4 has backend b12x;
                                 its source does not call DSL APIs the installed DSL removed
  flashinfer.cutlass_moe         cutlass_fused_moe
  flashinfer.trtllm_moe          trtllm_fp4_block_scale_moe
  flashinfer.cute_dsl_moe        cute_dsl_fused_moe_nvfp4 / CuteDslMoEWrapper
  flashinfer.mm_fp4[:<backend>]  mm_fp4 and its backends (with an argument: that one backend)
  flashinfer.cute_dsl_sf_layout  cute_dsl.convert_sf_to_mma_layout, called once on a CPU tensor
  cutlass_dsl.wheel_collision    same-path files of the nvidia-cutlass-dsl-libs-* wheels differ
  b12x.module_shadowing          a top-level `b12x` module that the b12x distribution lacks
  triton.importable              `import triton` works for an installed triton
  flashinfer.declarations        flashinfer's own capability lists, CUDA floors, activation
                                 sets and requirements (doctor --deep's drift report)
  b12x.declarations              the native b12x distribution's gating constants (drift report)
  torch.cuda                     torch's own view of CUDA and the GPU (doctor --deep runs it)
  import:<module>[:<attr>]       generic: the module imports and has the (dotted) attribute

Each probe function takes the probe's argument (or None) and a context dict, and returns a
dict {"status": ok|warning|failed|skipped, "message": str, "details": {...}} (see _util.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["ProbeSpec", "PROBES", "resolve", "known_names", "STATUSES"]

STATUSES = ("ok", "warning", "failed", "skipped")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_TORCH_STACK = ("torch", "cutlass", "flashinfer")


@dataclass(frozen=True)
class ProbeSpec:
    """What a probe needs and where it runs.

    name      the name backends list under `probes:`
    func      "module:function" of the probe, imported in the process that runs it
    group     child processes are per group ("torch": torch, then cutlass-dsl and flashinfer;
              "triton"; "import:<top-level module>"); "metadata" runs in-process, no import
    imports   modules the child imports first, in order, each timed (an import that hangs or
              crashes is reported as such, for every probe of the group)
    requires  (distribution, PEP 440 specifier): the probe is skipped unless each holds
    module    for generic probes: the top-level module that must be findable, else skipped
    arg       the probe's argument (import:<module>[:<attr>], flashinfer.mm_fp4:<backend>)
    """
    name: str
    func: str
    group: str
    description: str
    imports: Tuple[str, ...] = ()
    requires: Tuple[Tuple[str, str], ...] = ()
    module: Optional[str] = None
    arg: Optional[str] = None
    source: str = ""

    @property
    def in_process(self) -> bool:
        return self.group == "metadata"


def _fi(name: str, func: str, description: str, since: str = "", source: str = "") -> ProbeSpec:
    req = (("flashinfer-python", f">={since}" if since else ""),)
    return ProbeSpec(name, f"selector.backends.children.probes.flashinfer_probes:{func}", "torch", description,
                     _TORCH_STACK, req, source=source)


PROBES: Dict[str, ProbeSpec] = {p.name: p for p in (
    _fi("flashinfer.b12x_moe", "b12x_moe",
        "flashinfer.b12x_fused_moe and B12xMoEWrapper importable", "0.6.9",
        "FlashInfer #3080 (v0.6.9)"),
    _fi("flashinfer.b12x_gemm", "b12x_gemm",
        "the SM120 b12x dense GEMM kernel (Sm120B12xBlockScaledDenseGemmKernel; "
        "Sm120BlockScaledDenseGemmKernel in 0.6.9) and mm_fp4 backend b12x", "0.6.9",
        "FlashInfer #3051 #3128 #3922"),
    _fi("flashinfer.cutlass_moe", "cutlass_moe", "flashinfer.fused_moe.cutlass_fused_moe",
        source="FlashInfer fused_moe"),
    _fi("flashinfer.trtllm_moe", "trtllm_moe",
        "flashinfer.fused_moe.trtllm_fp4_block_scale_moe", source="FlashInfer fused_moe"),
    _fi("flashinfer.cute_dsl_moe", "cute_dsl_moe",
        "flashinfer cute_dsl_fused_moe_nvfp4 and CuteDslMoEWrapper", "0.6.4",
        "FlashInfer #2398 (v0.6.4)"),
    _fi("flashinfer.mm_fp4", "mm_fp4", "flashinfer.mm_fp4 and its registered backends",
        source="FlashInfer gemm_base.py (backend_requirement)"),
    _fi("flashinfer.cute_dsl_sf_layout", "cute_dsl_sf_layout",
        "flashinfer.cute_dsl.convert_sf_to_mma_layout (called once on a CPU tensor)", "0.6.4",
        "FlashInfer #2398; vLLM FlashInferB12xExperts"),
    ProbeSpec("torch.cuda", "selector.backends.children.probes.import_probes:torch_cuda", "torch",
              "torch's CUDA build, and the GPU it sees compared with NVML's", ("torch",),
              (("torch", ""),)),
    ProbeSpec("triton.importable", "selector.backends.children.probes.import_probes:triton_importable", "triton",
              "import triton works (flashinfer's b12x MoE imports it)", ("triton",),
              (("triton", ""),), source="flashinfer-python 0.7.4 fused_moe/cute_dsl/"
              "blackwell_sm12x (triton_compact.py imports triton)"),
    ProbeSpec("cutlass_dsl.wheel_collision", "selector.backends.children.probes.metadata_probes:wheel_collision",
              "metadata", "the nvidia-cutlass-dsl-libs-* wheels ship no same-path files with "
              "different content (RECORD hashes; no import)",
              requires=(("nvidia-cutlass-dsl", ""),),
              source="CUTLASS #3170 #3227 #3259 (fixed in 4.6.0); sglang #25958"),
    ProbeSpec("b12x.module_shadowing", "selector.backends.children.probes.metadata_probes:module_shadowing",
              "metadata", "a top-level `b12x` module belongs to the b12x distribution, not to "
              "flashinfer-python's compatibility shim (find_spec; no import)",
              source="flashinfer-python 0.7.4 wheel (installs a top-level b12x module)"),
    ProbeSpec("flashinfer.declarations",
              "selector.backends.children.probes.declarations:flashinfer_declarations", "torch",
              "what flashinfer declares about itself: capability lists, mm_fp4 backends, "
              "minimum CUDA, activation sets, required nvidia-cutlass-dsl (the drift report "
              "compares them with the catalogue)", _TORCH_STACK, (("flashinfer-python", ""),),
              source="flashinfer utils.py supported_compute_capability / backend_requirement"),
    ProbeSpec("b12x.declarations", "selector.backends.children.probes.declarations:b12x_declarations",
              "torch", "what the native b12x distribution declares: its gating constants and "
              "requirements (the drift report compares them with the catalogue)", ("torch",),
              (("b12x", ""),), source="b12x 1.5.1 wheel _lib/gating.py"),
)}

# Probes a backend file declares itself (`probes: [{name, func, ...}]`, schema.ProbeConf),
# added when the file is read (model.make_backend): a new backend's probe needs no edit here.
DECLARED: Dict[str, ProbeSpec] = {}
_FUNC = re.compile(r"^selector\.backends\.children\.probes\.[A-Za-z_]\w*:[A-Za-z_]\w*$")


def declare(conf: Dict[str, Any], key: str, where: str) -> ProbeSpec:
    """The ProbeSpec of a probe declaration (validation.validate'd), registered under its name."""
    from selector.core.errors import bad_input
    name, func, imports = conf["name"], conf["func"], tuple(conf["imports"])
    if name in PROBES or name.startswith("import:") or ":" in name:
        raise bad_input(f"{key}.name", name, "is a registered probe's name (or has a ':'): "
                        "list it by name instead, or choose another", where=where)
    if not _FUNC.match(func):
        raise bad_input(f"{key}.func", func, "is not selector.backends.children.probes.<module>:"
                        "<function>", where=where)
    for m in imports:
        if not _MODULE.match(m):
            raise bad_input(f"{key}.imports", m, "is not a module name", where=where)
    group = "metadata" if not imports else ("torch" if imports[0] == "torch" else
                                            f"import:{imports[0].split('.')[0]}")
    spec = ProbeSpec(name, func, group, conf["description"], imports,
                     tuple(sorted(conf["requires"].items())), source=conf["source"])
    if DECLARED.get(name, spec) != spec:
        raise bad_input(f"{key}.name", name, "is declared differently by another backend "
                        "file: declare it once and list it by name elsewhere", where=where)
    DECLARED[name] = spec
    return spec


# Probes doctor --deep runs besides those the catalogue declares.
DOCTOR_PROBES = ("torch.cuda", "flashinfer.declarations", "b12x.declarations")

# Probes that take an argument after ':' (flashinfer.mm_fp4:b12x).
_WITH_ARG = {"flashinfer.mm_fp4"}


def known_names() -> List[str]:
    return sorted(set(PROBES) | set(DECLARED)) + ["flashinfer.mm_fp4:<backend>",
                                                  "import:<module>[:<attr>]"]


def resolve(name: str) -> Optional[ProbeSpec]:
    """The spec for a probe name, or None if the name is not a probe."""
    if not isinstance(name, str):
        return None
    spec = PROBES.get(name) or DECLARED.get(name)
    if spec is not None:
        return spec
    if name.startswith("import:"):
        module, _, attr = name[len("import:"):].partition(":")
        if not _MODULE.match(module) or (attr and not _MODULE.match(attr)):
            return None
        top = module.split(".")[0]
        return ProbeSpec(name, "selector.backends.children.probes.import_probes:import_attr", f"import:{top}",
                         f"import {module}" + (f" and get {attr}" if attr else ""),
                         (module,), (), top, name[len("import:"):])
    base, sep, arg = name.partition(":")
    if sep and base in _WITH_ARG and re.match(r"^[A-Za-z0-9_-]+$", arg):
        spec = PROBES[base]
        return replace(spec, name=name, arg=arg,
                       description=f"{spec.description}: backend {arg!r} registered")
    return None


def group_label(group: str) -> str:
    return {"torch": "torch, cutlass-dsl, flashinfer", "metadata": "metadata (in-process)"}.get(
        group, group.replace("import:", ""))
