"""Resolver scenarios: platform preset x packages x layer x policy -> the selected backend and why
not the others (the catalogue's sources row by row), plus the coverage test that every catalogue rule fires in
at least one scenario.

Each scenario is composed in-process through `selector.load(overrides)` (presets never detect)
and decided with `.default()` or `.select(**layer)`. A scenario asserts the selected backend (or
None), the exact set of rule kinds in the reasons of the backends that matter, statuses where
relevant, and notes; every scenario also checks the resolver's invariants.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Set, Tuple

import pytest
from helpers import load, warm
from note_match import Has, Includes, N, Sub

from selector.core import schema
from selector.core.layer import make_layer
from selector.core.rules import reason_rules

# ---------------------------------------------------------------------------------------------
# Building blocks

DGX = "platform=dgx_spark"        # GB10, SM 12.1
RTX = "platform=rtx_5090"         # SM 12.0
PRO = "platform=rtx_pro_6000"     # SM 12.0
B200 = "platform=b200"            # SM 10.0
B300 = "platform=b300"            # SM 10.3
GB200 = "platform=gb200"          # SM 10.0
H200 = "platform=h200"            # SM 9.0
H100 = "platform=h100"            # SM 9.0
CPU = "platform=cpu"              # no GPU

FI_0610 = "stack=flashinfer_0_6_10"  # flashinfer 0.6.10 + cutlass-dsl 4.4.2, CUDA 13.0
FI_0611 = "stack=flashinfer_0_6_11"  # flashinfer 0.6.11 + cutlass-dsl 4.5.0
FI_0615 = "stack=flashinfer_0_6_15"  # flashinfer 0.6.15 + cutlass-dsl 4.6.0
FI_074 = "stack=flashinfer_0_7_4"    # flashinfer 0.7.4 + cutlass-dsl 4.8.1 + triton + torch
VLLM = "stack=vllm_0_32"             # vllm 0.32.0 + the 0.7.4 stack
TRTLLM = "engine=trtllm"             # TensorRT-LLM: its names and its own rules

REQ_FI_B12X = "policy.moe_backend=flashinfer_b12x"
REQ_B12X = "policy.moe_backend=b12x"
LIN_FI_B12X = "policy.linear_backend=flashinfer_b12x"
NOT_STRICT = "policy.strict=false"

NEMOTRON = "layer=nemotron_moe"
DSV4 = "layer=deepseek_v4_moe"
GPT_OSS = "layer=gpt_oss_moe"
DENSE = "layer=dense_linear"
W4A16_LIN = "layer=w4a16_linear"

W4A16 = {"quant": "nvfp4_w4a16"}
# layer=dense_linear as select() keywords: a linear row can share its platform's composition
DENSE_KW = {"op": "linear", "quant": "nvfp4", "act_and_mul": False, "hidden_size": 4096,
            "intermediate_size": 4096}
GATED_RELU2 = {"activation": "relu2", "act_and_mul": True}

LIBS_BOTH = ("platform.packages.nvidia-cutlass-dsl-libs-base=4.5.0",
             "platform.packages.nvidia-cutlass-dsl-libs-cu13=4.5.0")


def pk(**versions: Optional[str]) -> Tuple[str, ...]:
    """`platform.packages.<dist>=<version>` overrides; a keyword's '_' stands for '-'."""
    return tuple(f"platform.packages.{n.replace('_', '-')}={'null' if v is None else v}"
                 for n, v in versions.items())


# native b12x 1.5.1 as vllm[b12x] installs it: torch >= 2.12 and its nvidia-cutlass-dsl==4.8.0 pin
B12X_151 = pk(b12x="1.5.1", torch="2.13.0", nvidia_cutlass_dsl="4.8.0")


REQUEST_KINDS = ("request_skipped", "request_not_applicable", "request_refused", "fallback")


@dataclass(frozen=True)
class Scenario:
    id: str
    overrides: Tuple[str, ...]
    selected: Optional[str]
    layer: Dict[str, object] = field(default_factory=dict)     # select(**layer); {} = default()
    kinds: Dict[str, Set[str]] = field(default_factory=dict)   # backend -> exact rule kinds
    status: Dict[str, str] = field(default_factory=dict)       # backend -> status
    notes: Tuple[N, ...] = ()          # each matches some structured note
    no_notes: Tuple[N, ...] = ()       # none matches any note
    cites: Dict[str, Tuple[str, ...]] = field(default_factory=dict)  # backend -> in a source
    warned: Tuple[str, ...] = ()         # backends with a warning-level reason (exactly these)

    def decide(self):
        sel = load(*self.overrides)
        return sel.select(**self.layer) if self.layer else sel.default()


# Platform-wide warnings that fire on whole device families (GB10 CUTLASS reports; TRT-LLM cubins
# downloaded at run time on flashinfer >= 0.6.14): tests/test_knowledge.py pins them.
AMBIENT_WARNINGS = ("FlashInfer #3294 #2723", "flashinfer-python 0.7.4 jit/env.py")


def S(id: str, overrides: Sequence[str], selected: Optional[str], **kw) -> Scenario:
    flat = []
    for o in overrides:
        flat.extend(o if isinstance(o, tuple) else (o,))
    return Scenario(id, tuple(flat), selected, **kw)


# ---------------------------------------------------------------------------------------------
# The table

MOE = [
    # --- DGX Spark (SM 12.1), Nemotron, healthy stack -------------------------------------
    S("moe-dgx-074-nemotron-auto", [DGX, FI_074, NEMOTRON], "flashinfer_cutlass",
      kinds={"flashinfer_trtllm": {"device"}, "flashinfer_cutedsl": {"device"},
             "flashinfer_b12x": {"opt_in"}, "b12x": {"package"}, "cutlass": {"package"},
             "marlin": {"package"}, "flashinfer_cutlass": set(), "emulation": set()},
      status={"flashinfer_b12x": "opt_in", "emulation": "eligible"},
      cites={"flashinfer_b12x": ("vLLM #40082",)}, no_notes=(N("fallback"), N("weight_only"))),
    S("moe-dgx-074-nemotron-request-fi-b12x", [DGX, FI_074, NEMOTRON, REQ_FI_B12X],
      "flashinfer_b12x", kinds={"flashinfer_b12x": {"opt_in"}},
      status={"flashinfer_b12x": "selected", "flashinfer_cutlass": "eligible"}),
    S("moe-dgx-074-request-alias-hyphen", [DGX, FI_074, "policy.moe_backend=flashinfer-b12x"],
      "flashinfer_b12x"),
    S("moe-dgx-074-gated-relu2-has-no-backend", [DGX, FI_074], None, layer=GATED_RELU2,
      kinds={"flashinfer_trtllm": {"device", "act_and_mul"},
             "flashinfer_cutedsl": {"device", "act_and_mul"},
             "flashinfer_b12x": {"act_and_mul"}, "b12x": {"package", "act_and_mul"},
             "flashinfer_cutlass": {"act_and_mul"}, "cutlass": {"package", "act_and_mul"},
             "marlin": {"package", "act_and_mul"}, "emulation": {"act_and_mul"}},
      notes=(N("nothing_automatic", opt_in=()),)),
    S("moe-dgx-074-gelu-only-emulation", [DGX, FI_074], "emulation",
      layer={"activation": "gelu"},
      kinds={"flashinfer_cutlass": {"activation"}, "flashinfer_b12x": {"activation"},
             "flashinfer_cutedsl": {"device", "activation"}, "b12x": {"package", "activation"},
             "flashinfer_trtllm": {"device"}},
      notes=(N("reference", "emulation"),)),
    S("moe-dgx-074-situ-nothing", [DGX, FI_074], None, layer={"activation": "situ"},
      kinds={"flashinfer_trtllm": {"device", "activation"}, "flashinfer_cutedsl": {"device"},
             "flashinfer_b12x": {"activation"}, "flashinfer_cutlass": {"activation"},
             "cutlass": {"package"}, "marlin": {"package"},
             "emulation": {"activation"}, "b12x": {"package"}}),
    S("moe-dgx-074-fp8-layer-not-applicable", [DGX, FI_074], None, layer={"quant": "int8"},
      status={b: "not_applicable" for b in ("flashinfer_trtllm", "flashinfer_cutedsl",
                                            "flashinfer_b12x", "b12x", "flashinfer_cutlass",
                                            "cutlass", "marlin", "emulation")},
      kinds={"flashinfer_b12x": {"quant"}, "emulation": {"quant"}},
      notes=(N("unsupported_layer", quant="int8", op="moe"),)),
    S("moe-dgx-074-fp8-layer-explicit-backend-is-not-an-error", [DGX, FI_074, REQ_FI_B12X],
      None, layer={"quant": "int8"},
      status={"flashinfer_b12x": "not_applicable", "flashinfer_cutlass": "not_applicable"},
      kinds={"flashinfer_b12x": {"quant"}},
      notes=(N("request_not_applicable", key="policy.moe_backend", requested=("flashinfer_b12x",),
               chose=None, reason=Sub(rule="quant")),),
      cites={"flashinfer_b12x": ("policy.*_backend (a requested backend",)}),
    # under engine=vllm the same refusal cites vLLM's issues (conf/engine/vllm.yaml cites:)
    S("moe-dgx-074-fp8-layer-explicit-backend-under-vllm",
      [DGX, FI_074, REQ_FI_B12X, VLLM, "engine=vllm"],
      None, layer={"quant": "int8"},
      status={"flashinfer_b12x": "not_applicable", "flashinfer_cutlass": "not_applicable"},
      notes=(N("request_not_applicable", key="policy.moe_backend", requested=("flashinfer_b12x",),
               chose=None, reason=Sub(rule="quant")),),
      cites={"flashinfer_b12x": ("vLLM #49076",)}),
    S("moe-dgx-074-unquantized-explicit-marlin", [DGX, VLLM, "policy.moe_backend=marlin"],
      None, layer={"quant": "unquantized"},
      status={"marlin": "not_applicable", "cutlass": "not_applicable"},
      notes=(N("request_not_applicable", requested=("marlin",), reason=Sub(rule="quant")),)),
    S("moe-request-applies-to-moe-only", [DGX, FI_074, REQ_FI_B12X], "flashinfer_cutlass",
      layer={"op": "linear", "hidden_size": 4096, "intermediate_size": 4096,
             "act_and_mul": False},
      no_notes=tuple(N(k) for k in REQUEST_KINDS)),
    S("moe-dgx-074-float16-dtype-strict", [DGX, FI_074, REQ_FI_B12X], None,
      layer={"dtype": "float16"}, kinds={"flashinfer_b12x": {"dtype"}},
      status={"flashinfer_b12x": "rejected", "flashinfer_cutlass": "eligible"},
      notes=(N("request_refused", "flashinfer_b12x", fallback="flashinfer_cutlass"),)),
    S("moe-dgx-074-dsv4-clamp-strict", [DGX, FI_074, DSV4, REQ_FI_B12X], None,
      kinds={"flashinfer_b12x": {"clamp"}, "flashinfer_cutlass": set()},
      cites={"flashinfer_b12x": ("SwiGLU-clamp",)},
      notes=(N("request_refused", "flashinfer_b12x", requested=("flashinfer_b12x",),
               failing=({"backend": "flashinfer_b12x", "failed": 1},)),)),
    S("moe-dgx-074-dsv4-clamp-not-strict", [DGX, FI_074, DSV4, REQ_FI_B12X, NOT_STRICT],
      "flashinfer_cutlass", kinds={"flashinfer_b12x": {"clamp"}},
      notes=(N("fallback", "flashinfer_b12x", chose="flashinfer_cutlass"),)),
    S("moe-dgx-074-dsv4-auto", [DGX, FI_074, DSV4], "flashinfer_cutlass",
      kinds={"flashinfer_b12x": {"clamp"}}, status={"flashinfer_b12x": "rejected"}),
    S("moe-dgx-074-ep-strict", [DGX, FI_074, REQ_FI_B12X], None, layer={"ep_size": 2},
      kinds={"flashinfer_b12x": {"parallel"}, "b12x": {"package", "parallel"},
             "flashinfer_cutlass": set()},
      cites={"flashinfer_b12x": ("FlashInfer #3302",)}),
    S("moe-dgx-074-ep1-is-not-ep", [DGX, FI_074, REQ_FI_B12X], "flashinfer_b12x",
      layer={"ep_size": 1, "tp_size": 4}),
    # gpt-oss checkpoints interleave gate/up (vLLM swigluoai); FlashInfer's b12x takes the
    # un-interleaved layout only
    S("moe-dgx-074-gpt-oss-swigluoai", [DGX, FI_074, GPT_OSS, REQ_FI_B12X], None,
      kinds={"flashinfer_b12x": {"activation"}}),
    S("moe-dgx-074-swigluoai-uninterleave", [DGX, FI_074, REQ_FI_B12X], "flashinfer_b12x",
      layer={"activation": "swigluoai_uninterleave"}),
    S("moe-dgx-074-decode-hint", [DGX, FI_074], "flashinfer_cutlass", layer={"num_tokens": 8},
      status={"flashinfer_b12x": "opt_in"},
      notes=(N("opt_in_would_win", "flashinfer_b12x", source=Has("vLLM #40082")),)),
    # --- policy.allow_opt_in: the preference step decides (TensorRT-LLM #13773) ------------
    S("moe-rtx-074-allow-b12x-decode", [PRO, FI_074, 'platform.cuda="13.0"',
                                         "policy.allow_opt_in=[flashinfer_b12x]"],
      "flashinfer_b12x", layer={"num_tokens": 16},
      notes=(N("preference", "flashinfer_b12x", rank=5, reason=Has("decode-sized batch"),
               source=Has("TensorRT-LLM #13773"),
               outranks=Includes(({"backend": "flashinfer_cutlass", "rank": 40},
                                  {"backend": "emulation", "rank": 1000}))),
             N("opt_in_admitted", "flashinfer_b12x"))),
    S("moe-rtx-074-allow-b12x-prefill", [PRO, FI_074, 'platform.cuda="13.0"',
                                          "policy.allow_opt_in=[flashinfer_b12x]"],
      "flashinfer_cutlass", layer={"num_tokens": 4096},
      status={"flashinfer_b12x": "eligible"},
      notes=(N("preference", "flashinfer_cutlass", rank=40, reason=None,
               outranks=Includes(({"backend": "flashinfer_b12x", "rank": 45},
                                  {"backend": "emulation", "rank": 1000}))),)),
    S("moe-dgx-074-prefill-no-hint", [DGX, FI_074], "flashinfer_cutlass",
      layer={"num_tokens": 8192}, no_notes=(N("opt_in_would_win"),)),
    S("moe-dgx-074-decode-hint-only-if-runnable", [DGX, FI_074], "flashinfer_cutlass",
      layer={"num_tokens": 8, "swiglu_limit": 10.0}, kinds={"flashinfer_b12x": {"clamp"}},
      no_notes=(N("opt_in_would_win"),)),
    S("moe-dgx-074-w4a16-auto-emulation", [DGX, FI_074], "emulation", layer=W4A16,
      kinds={"flashinfer_b12x": {"opt_in"}, "flashinfer_cutlass": {"quant"},
             "flashinfer_trtllm": {"device", "quant"}, "flashinfer_cutedsl": {"device", "quant"},
             "cutlass": {"package", "quant"}, "marlin": {"package"}},
      status={"flashinfer_b12x": "opt_in"}),
    # --- SM 12.1 vs 12.0: cutlass-dsl 4.4 cannot compile b12x for GB10 -----------------------
    S("moe-dgx-0610-b12x-known-issue-strict", [DGX, FI_0610, NEMOTRON, REQ_FI_B12X], None,
      kinds={"flashinfer_b12x": {"known_issue"}, "flashinfer_trtllm": {"device"}},
      cites={"flashinfer_b12x": ("CUTLASS PR #3082",)},
      notes=(N("request_refused", "flashinfer_b12x", fallback="flashinfer_cutlass"),)),
    S("moe-dgx-0610-b12x-known-issue-fallback", [DGX, FI_0610, NEMOTRON, REQ_FI_B12X,
                                                 NOT_STRICT], "flashinfer_cutlass",
      kinds={"flashinfer_b12x": {"known_issue"}},
      notes=(N("fallback", "flashinfer_b12x", chose="flashinfer_cutlass"),)),
    S("moe-rtx5090-0610-b12x-fine-on-sm120", [RTX, FI_0610, NEMOTRON, REQ_FI_B12X],
      "flashinfer_b12x", kinds={"flashinfer_b12x": {"opt_in"}}),
    S("moe-rtxpro-0610-auto", [PRO, FI_0610, NEMOTRON], "flashinfer_cutlass",
      status={"flashinfer_b12x": "opt_in"}),
    S("moe-rtx5090-0610-cutlass-dsl-4.5-launch-fails", [RTX, FI_0610,
                                                        pk(nvidia_cutlass_dsl="4.5.0"),
                                                        REQ_FI_B12X], None,
      kinds={"flashinfer_b12x": {"known_issue"}},
      cites={"flashinfer_b12x": ("FlashInfer #3246",)}),
    S("moe-rtx5090-0610-gelu-tanh-needs-0615", [RTX, FI_0610, REQ_FI_B12X], None,
      layer={"activation": "gelu_tanh"}, kinds={"flashinfer_b12x": {"feature"}},
      cites={"flashinfer_b12x": ("#3744",)}),
    S("moe-rtx5090-0610-w4a16-needs-0612", [RTX, FI_0610, REQ_FI_B12X], None, layer=W4A16,
      kinds={"flashinfer_b12x": {"feature"}}, cites={"flashinfer_b12x": ("#3271",)},
      notes=(N("request_refused", "flashinfer_b12x", fallback="emulation"),)),
    S("moe-dgx-0611-first-b12x-on-sm121", [DGX, FI_0611, NEMOTRON, REQ_FI_B12X],
      "flashinfer_b12x"),
    S("moe-rtx5090-0611-w4a16-needs-0612", [RTX, FI_0611, REQ_FI_B12X], None, layer=W4A16,
      kinds={"flashinfer_b12x": {"feature"}}),
    S("moe-rtx5090-0612-w4a16-ok", [RTX, FI_0611, pk(flashinfer_python="0.6.12"), REQ_FI_B12X],
      "flashinfer_b12x", layer=W4A16),
    S("moe-rtx5090-0614-gelu-tanh-needs-0615", [RTX, FI_0611, pk(flashinfer_python="0.6.14"),
                                                REQ_FI_B12X], None,
      layer={"activation": "gelu_tanh"}, kinds={"flashinfer_b12x": {"feature"}}),
    S("moe-rtx5090-0615-gelu-tanh-ok", [RTX, FI_0615, REQ_FI_B12X], "flashinfer_b12x",
      layer={"activation": "gelu_tanh"}),
    S("moe-rtx5090-0615-swigluoai-ok", [RTX, FI_0615, REQ_FI_B12X], "flashinfer_b12x",
      layer={"activation": "swigluoai_uninterleave"}),
    # --- known-bad combinations -------------------------------------------------------------
    S("moe-dgx-0611-cutlass-dsl-4.4-two-issues", [DGX, FI_0611, pk(nvidia_cutlass_dsl="4.4.2"),
                                                  REQ_FI_B12X], None,
      kinds={"flashinfer_b12x": {"known_issue"}, "flashinfer_cutedsl": {"device", "known_issue"},
             "flashinfer_cutlass": set()},
      cites={"flashinfer_b12x": ("CUTLASS PR #3082", "FlashInfer #3246")}),
    S("moe-rtx5090-074-cutlass-dsl-4.7-inconsistent", [RTX, FI_074,
                                                       pk(nvidia_cutlass_dsl="4.7.1"),
                                                       REQ_FI_B12X], None,
      kinds={"flashinfer_b12x": {"known_issue"}, "flashinfer_cutedsl": {"device", "known_issue"}},
      cites={"flashinfer_b12x": ("0.7.4 PyPI metadata",)}),
    # the [b12x] extra's 4.7.1 pin is a warning, never a rejection (vLLM 0.33.0 ships 4.8.0)
    S("moe-rtx5090-072post1-extra-pin-warns", [RTX, FI_074,
                                               pk(flashinfer_python="0.7.2.post1"),
                                               REQ_FI_B12X], "flashinfer_b12x",
      kinds={"flashinfer_b12x": {"opt_in"}}, warned=("flashinfer_b12x",)),
    S("moe-rtx5090-072post1-with-4.7.1-ok", [RTX, FI_074,
                                             pk(flashinfer_python="0.7.2.post1",
                                                nvidia_cutlass_dsl="4.7.1"), REQ_FI_B12X],
      "flashinfer_b12x"),
    S("moe-rtx5090-cutlass-dsl-wheel-collision", [RTX, FI_0611, LIBS_BOTH, REQ_FI_B12X], None,
      kinds={"flashinfer_b12x": {"known_issue"}},
      cites={"flashinfer_b12x": ("CUTLASS #3170",)}),
    S("moe-rtx5090-wheel-collision-fixed-in-4.6", [RTX, FI_0611, LIBS_BOTH,
                                                   pk(nvidia_cutlass_dsl="4.6.0"), REQ_FI_B12X],
      "flashinfer_b12x"),
    S("moe-dgx-0618post1-warning", [DGX, FI_074, pk(flashinfer_python="0.6.18.post1",
                                                    nvidia_cutlass_dsl="4.6.0"), REQ_FI_B12X],
      "flashinfer_b12x", warned=("flashinfer_b12x",),
      notes=(N("rule_warning", "flashinfer_b12x", rule="known_issue",
               message=Has("illegal memory access"), source=Has("FlashInfer #3170")),)),
    S("moe-rtx5090-0618post1-no-warning-on-sm120", [RTX, FI_074,
                                                    pk(flashinfer_python="0.6.18.post1",
                                                       nvidia_cutlass_dsl="4.6.0"), REQ_FI_B12X],
      "flashinfer_b12x", warned=()),
    S("moe-rtx5090-070-512-experts-warning", [RTX, FI_074, pk(flashinfer_python="0.7.0"),
                                              REQ_FI_B12X], "flashinfer_b12x",
      layer={"num_experts": 512}, warned=("flashinfer_b12x",),
      notes=(N("rule_warning", "flashinfer_b12x", source=Has("FlashInfer #5446")),)),
    S("moe-rtx5090-070-256-experts-no-warning", [RTX, FI_074, pk(flashinfer_python="0.7.0"),
                                                 REQ_FI_B12X], "flashinfer_b12x",
      layer={"num_experts": 256}, warned=(), no_notes=(N("rule_warning", source=Has("#5446")),)),
    S("moe-rtx5090-flashinfer-0.6.8-no-b12x", [RTX, FI_074, pk(flashinfer_python="0.6.8")],
      "flashinfer_cutlass", kinds={"flashinfer_b12x": {"package"}}),
    S("moe-rtx5090-no-triton", [RTX, FI_074, pk(triton=None), REQ_FI_B12X], None,
      kinds={"flashinfer_b12x": {"package"}}, cites={"flashinfer_b12x": ("triton_compact.py",)}),
    S("moe-rtx5090-cuda-12.8", [RTX, FI_074, "platform.cuda=12.8"], "flashinfer_cutlass",
      kinds={"flashinfer_b12x": {"cuda"}, "flashinfer_cutlass": set()},
      warned=("flashinfer_cutlass",), notes=(N("rule_warning", "flashinfer_cutlass", source=Has("FlashInfer #2725")),)),
    S("moe-rtx5090-cuda-12.9-no-warning", [RTX, FI_074, "platform.cuda=12.9"],
      "flashinfer_cutlass", kinds={"flashinfer_b12x": {"cuda"}}, warned=()),
    # --- the native b12x package -----------------------------------------------------------
    S("moe-rtx5090-b12x-native-opt-in", [RTX, FI_074, B12X_151], "flashinfer_cutlass",
      kinds={"b12x": {"opt_in"}, "flashinfer_b12x": {"opt_in"}},
      status={"b12x": "opt_in", "flashinfer_b12x": "opt_in"},
      notes=()),
    S("moe-rtx5090-b12x-native-requested", [RTX, FI_074, B12X_151, REQ_B12X], "b12x",
      kinds={"b12x": {"opt_in"}}),
    S("moe-rtx5090-b12x-native-gelu", [RTX, FI_074, B12X_151, REQ_B12X], None,
      layer={"activation": "gelu"}, kinds={"b12x": {"activation"}}),
    S("moe-rtx5090-b12x-native-ep", [RTX, FI_074, B12X_151, REQ_B12X], None,
      layer={"ep_size": 4}, kinds={"b12x": {"parallel"}}),
    S("moe-rtx5090-b12x-native-applies-clamp", [RTX, FI_074, B12X_151, REQ_B12X, DSV4],
      "b12x", kinds={"flashinfer_b12x": {"clamp"}}),
    S("moe-rtx5090-b12x-native-w4a16", [RTX, FI_074, B12X_151, REQ_B12X], "b12x",
      layer=W4A16, kinds={"flashinfer_cutlass": {"quant"}}),
    S("moe-rtx5090-b12x-native-gated-relu2", [RTX, FI_074, B12X_151, REQ_B12X], None,
      layer=GATED_RELU2, kinds={"b12x": {"act_and_mul"}}),
    # --- Blackwell datacenter --------------------------------------------------------------
    S("moe-b200-074-trtllm", [B200, FI_074], "flashinfer_trtllm",
      kinds={"flashinfer_b12x": {"device"}, "b12x": {"device", "package"},
             "cutlass": {"package"}, "marlin": {"package"}, "flashinfer_cutedsl": set()},
      status={"flashinfer_b12x": "rejected", "flashinfer_cutedsl": "eligible",
              "flashinfer_cutlass": "eligible", "emulation": "eligible"}),
    # vLLM #52308: non-gated relu2 on SM 10.x with TRT-LLM's MoE, a warning on the choice
    S("moe-b300-074-nemotron-trtllm", [B300, FI_074, NEMOTRON], "flashinfer_trtllm",
      warned=("flashinfer_trtllm",), notes=(N("rule_warning", "flashinfer_trtllm", source=Has("vLLM #52308")),)),
    # TRT-LLM refuses vLLM's interleaved swigluoai: gpt-oss goes to CuTe-DSL (vLLM 0.32.0 oracle)
    S("moe-gb200-074-gpt-oss-cutedsl", [GB200, FI_074, GPT_OSS], "flashinfer_cutedsl",
      kinds={"flashinfer_trtllm": {"activation"}}),
    S("moe-b200-074-ep8-trtllm", [B200, FI_074], "flashinfer_trtllm", layer={"ep_size": 8},
      kinds={"flashinfer_b12x": {"device", "parallel"}}),
    S("moe-b200-074-situ-cutedsl", [B200, FI_074], "flashinfer_cutedsl",
      layer={"activation": "situ"}, kinds={"flashinfer_trtllm": {"activation"}}),
    S("moe-b200-074-gelu-trtllm", [B200, FI_074], "flashinfer_trtllm",
      layer={"activation": "gelu"}, kinds={"flashinfer_cutedsl": {"activation"}}),
    S("moe-b200-074-w4a16-no-native", [B200, FI_074], "emulation", layer=W4A16,
      kinds={"flashinfer_trtllm": {"quant"}, "flashinfer_cutedsl": {"quant"},
             "flashinfer_cutlass": {"quant"}, "flashinfer_b12x": {"device"}}),
    S("moe-b200-old-flashinfer-no-cutedsl", [B200, pk(flashinfer_python="0.6.3",
                                                      nvidia_cutlass_dsl="4.4.2")],
      "flashinfer_trtllm", kinds={"flashinfer_cutedsl": {"package"}},
      cites={"flashinfer_cutedsl": ("FlashInfer #2398",)}),
    S("moe-b200-no-cutlass-dsl", [B200, pk(flashinfer_python="0.7.4")], "flashinfer_trtllm",
      kinds={"flashinfer_cutedsl": {"package"}}),
    S("moe-b200-074-cutlass-dsl-4.7", [B200, FI_074, pk(nvidia_cutlass_dsl="4.7.1")],
      "flashinfer_trtllm", kinds={"flashinfer_cutedsl": {"known_issue"}}),
    S("moe-b200-0611-cutlass-dsl-4.4", [B200, FI_0611, pk(nvidia_cutlass_dsl="4.4.2")],
      "flashinfer_trtllm", kinds={"flashinfer_cutedsl": {"known_issue"}}),
    S("moe-b200-wheel-collision", [B200, FI_0611, LIBS_BOTH], "flashinfer_trtllm",
      kinds={"flashinfer_cutedsl": {"known_issue"}}),
    S("moe-b200-vllm-cuda-12.6-cutlass-strict", [B200, VLLM, "platform.cuda=12.6",
                                                 "policy.moe_backend=cutlass"], None,
      kinds={"cutlass": {"cuda"}}, notes=(N("request_refused", "cutlass", fallback="flashinfer_trtllm"),)),
    S("moe-b200-vllm-cutlass-ep-deepep-ht", [B200, VLLM, "policy.moe_backend=cutlass"], None,
      layer={"ep_size": 4, "all2all": "deepep_high_throughput"},
      kinds={"cutlass": {"parallel"}}),
    S("moe-b200-vllm-cutlass-ep-allgather", [B200, VLLM, "policy.moe_backend=cutlass"],
      "cutlass", layer={"ep_size": 4, "all2all": "allgather_reducescatter"}),
    S("moe-thor-sm110-vllm-cutlass", [B200, "platform.capability=11.0", VLLM], "cutlass",
      kinds={"flashinfer_cutlass": {"device"}, "flashinfer_trtllm": {"device"},
             "flashinfer_cutedsl": {"device"}}),
    # --- Hopper and older: Marlin or emulation ------------------------------------------------
    S("moe-h200-vllm-marlin", [H200, VLLM], "marlin",
      kinds={"flashinfer_trtllm": {"device"}, "flashinfer_cutedsl": {"device"},
             "flashinfer_b12x": {"device"}, "flashinfer_cutlass": {"device"},
             "cutlass": {"device"}, "b12x": {"device", "package"}},
      status={"flashinfer_b12x": "rejected", "emulation": "eligible"},
      notes=(N("weight_only", "marlin", source=Has("execution: weight_only")),)),
    S("moe-h200-engine-vllm-marlin-cites-vllm", [H200, VLLM, "engine=vllm"], "marlin",
      notes=(N("weight_only", "marlin", source=Has("vLLM #55397")),)),
    S("moe-h200-flashinfer-only-emulation", [H200, FI_074], "emulation",
      kinds={"marlin": {"package"}}, notes=(N("reference", "emulation"),)),
    S("moe-h100-sgl-kernel-marlin", [H100, pk(sgl_kernel="0.3.9", torch="2.9.1")], "marlin"),
    S("moe-h200-vllm-w4a16-marlin-no-note", [H200, VLLM], "marlin", layer=W4A16,
      no_notes=(N("weight_only"),)),
    S("moe-sm89-l40-vllm-marlin", [CPU, "platform.capability=8.9", VLLM], "marlin",
      kinds={"cutlass": {"device"}, "flashinfer_cutlass": {"device"}},
      notes=(N("weight_only", "marlin"),)),
    S("moe-sm70-marlin-needs-7.5", [CPU, "platform.capability=7.0", VLLM], "emulation",
      kinds={"marlin": {"device"}}),
    # the reference needs no package: a hardware preset alone still has an answer (issue 17)
    S("moe-cpu-no-packages-emulation", [CPU], "emulation",
      kinds={"marlin": {"device", "package"}, "flashinfer_trtllm": {"device", "package"}},
      notes=(N("no_packages"),)),
    S("moe-cpu-torch-emulation", [CPU, pk(torch="2.11.0+cu130")], "emulation"),
    # --- weight-only on W4A4 vs W4A16 ---------------------------------------------------------
    S("moe-dgx-vllm-w4a4-native-first", [DGX, VLLM], "flashinfer_cutlass",
      status={"cutlass": "eligible", "marlin": "eligible", "flashinfer_b12x": "opt_in"},
      no_notes=(N("weight_only"),)),
    S("moe-dgx-vllm-explicit-marlin-w4a4-note", [DGX, VLLM, "policy.moe_backend=marlin"],
      "marlin", notes=(N("weight_only", "marlin"),)),
    S("moe-dgx-vllm-w4a16-marlin", [DGX, VLLM], "marlin", layer=W4A16,
      kinds={"flashinfer_cutlass": {"quant"}, "cutlass": {"quant"},
             "flashinfer_b12x": {"opt_in"}},
      no_notes=(N("weight_only"),)),
    # --- TensorRT-LLM's own rules (its home, conf/engine/trtllm.yaml, joins every run) --------
    S("moe-b200-trtllm-mxfp8-deepgemm-is-block-fp8-only", [B200, FI_074, TRTLLM,
                                                          "layer.quant=mxfp8"], None,
      status={"deep_gemm": "not_applicable"},
      cites={"deep_gemm": ("fused_moe_deepgemm.py",)}),
    S("moe-h200-trtllm-fp8-block-deepgemm-needs-sm100", [H200, FI_074, TRTLLM,
                                                         "layer.quant=fp8_block"],
      "flashinfer_cutlass", status={"deep_gemm": "rejected"},
      cites={"deep_gemm": ("fused_moe_deepgemm.py",)}),
    S("moe-b200-trtllm-gpt-oss-cutlass-runs-w4a8", [B200, FI_074, TRTLLM, "layer=gpt_oss_moe",
                                                    "layer.quant=mxfp4"], "flashinfer_trtllm",
      status={"triton_kernels": "rejected"}, warned=("flashinfer_cutlass",),
      cites={"triton_kernels": ("resolve_moe_backend",)}),
    S("moe-h100-trtllm-1-3-triton-deprecated", [H100, FI_074, TRTLLM, "layer=gpt_oss_moe",
                                                "layer.quant=mxfp4",
                                                "platform.packages.tensorrt-llm=1.3.0"],
      "triton_kernels", warned=("triton_kernels",)),
    S("moe-h100-trtllm-w4a8-cutlass-needs-sm100", [H100, FI_074, TRTLLM, "layer=gpt_oss_moe",
                                                   "layer.quant=mxfp4_w4a8"], None,
      status={"flashinfer_cutlass": "rejected"},
      cites={"flashinfer_cutlass": ("w4a8_mxfp4_mxfp8.py",)}),
]

# --- FP8 MoE under vLLM 0.32.0 (fused_moe/oracle/fp8.py _get_priority_backends and the experts
# classes' is_supported_config; tests/vllm/test_parity_fp8.py runs vLLM's own oracle) ----------
FP8_BLOCK, FP8_TENSOR = "layer.quant=fp8_block", "layer.quant=fp8_tensor"
VLLM_ENGINE = "engine=vllm"
NVFP4_ONLY = {"flashinfer_cutedsl": {"quant"}, "b12x": {"quant"}, "flashinfer_b12x": {"quant"},
              "emulation": {"quant"},
              # selector's own FP8 MoE backend: under engine=vllm its engine reason is final
              "torch_grouped_fp8": {"engine"}}
MOE += [
    # Hopper, block FP8 (DeepSeek-V3, Qwen3 FP8): Triton first for TP, FlashInfer CUTLASS for EP
    S("fp8-h200-block-tp-triton", [H200, VLLM, VLLM_ENGINE, FP8_BLOCK], "triton",
      kinds={"flashinfer_trtllm": {"device"}, "cutlass": {"quant"}, "triton": set(),
             "flashinfer_cutlass": set(), "deep_gemm": set(), "marlin": set(), **NVFP4_ONLY},
      status={"flashinfer_cutlass": "eligible", "deep_gemm": "eligible"}),
    S("fp8-h100-block-ep-flashinfer-cutlass", [H100, VLLM, VLLM_ENGINE, FP8_BLOCK,
                                               "layer.ep_size=8"], "flashinfer_cutlass",
      status={"triton": "eligible", "deep_gemm": "eligible"}),
    S("fp8-h200-block-deepep-ll-batched-deep-gemm",
      [H200, VLLM, VLLM_ENGINE, FP8_BLOCK, "layer.ep_size=8",
       "layer.all2all=deepep_low_latency"], "deep_gemm",
      kinds={"flashinfer_cutlass": {"parallel"}, "marlin": {"parallel"}, "triton": set()}),
    S("fp8-h200-tensor-flashinfer-cutlass", [H200, VLLM, VLLM_ENGINE, FP8_TENSOR],
      "flashinfer_cutlass",
      kinds={"flashinfer_trtllm": {"device"}, "deep_gemm": {"quant"}, "cutlass": set()},
      status={"cutlass": "eligible", "triton": "eligible"}),
    S("fp8-h200-block-no-flashinfer-triton", [H200, VLLM, VLLM_ENGINE, FP8_BLOCK,
                                              pk(flashinfer_python=None)], "triton",
      kinds={"flashinfer_cutlass": {"package"}}),
    # Blackwell B200: FlashInfer TRT-LLM for block and per-tensor FP8
    S("fp8-b200-block-trtllm", [B200, VLLM, VLLM_ENGINE, FP8_BLOCK], "flashinfer_trtllm",
      kinds={"flashinfer_cutlass": {"device"}, "cutlass": {"quant"}},
      status={"deep_gemm": "eligible", "triton": "eligible"}),
    S("fp8-b200-tensor-trtllm", [B200, VLLM, VLLM_ENGINE, FP8_TENSOR], "flashinfer_trtllm",
      status={"flashinfer_cutlass": "eligible", "cutlass": "eligible"}),
    S("fp8-b200-tensor-clamp-flashinfer-cutlass", [B200, VLLM, VLLM_ENGINE, FP8_TENSOR,
                                                   "layer.swiglu_limit=7.0"],
      "flashinfer_cutlass", kinds={"flashinfer_trtllm": {"clamp"}}),
    # RTX Pro 6000 (SM 12.0): no TRT-LLM; DeepGEMM for block FP8, FlashInfer CUTLASS per-tensor
    S("fp8-rtx-pro-6000-block-deep-gemm", [PRO, VLLM, VLLM_ENGINE, FP8_BLOCK], "deep_gemm",
      kinds={"flashinfer_trtllm": {"device"}, "flashinfer_cutlass": {"device"}},
      status={"triton": "eligible"}),
    S("fp8-rtx-pro-6000-tensor-flashinfer-cutlass", [PRO, VLLM, VLLM_ENGINE, FP8_TENSOR],
      "flashinfer_cutlass", kinds={"flashinfer_trtllm": {"device"}, "cutlass": {"device"}}),
    S("fp8-rtx-pro-6000-block-relu2-triton", [PRO, VLLM, VLLM_ENGINE, FP8_BLOCK,
                                              "layer.activation=relu2", "layer.act_and_mul=false"],
      "triton", kinds={"deep_gemm": {"activation"}}),
]
# --- TensorRT-LLM's CUTLASS leaves: per-tensor FP8 (QDQ, SM >= 89) and NVFP4 on SM 10.7 (two
# versions of cutlass/nvfp4.py differ there: selector keeps the SMs every version lists) ----------
MOE += [
    S("moe-h100-trtllm-fp8-tensor-cutlass-qdq", [H100, FI_074, TRTLLM, FP8_TENSOR],
      "flashinfer_cutlass"),
    S("moe-sm80-trtllm-fp8-tensor-qdq-needs-sm89", [H100, FI_074, TRTLLM, FP8_TENSOR,
                                                    "platform.capability=8.0"], None,
      status={"flashinfer_cutlass": "rejected"},
      cites={"flashinfer_cutlass": ("cutlass/fp8.py",)}),
    S("moe-sm107-trtllm-nvfp4-cutlass-keeps-shared-sms", [B200, FI_074, TRTLLM,
                                                          "platform.capability=10.7"], None,
      status={"flashinfer_cutlass": "rejected", "flashinfer_trtllm": "rejected"},
      cites={"flashinfer_cutlass": ("also lists SM 107", "cutlass/nvfp4.py")}),
    # gpt-oss MXFP4 on SM 8.0: no CUTLASS leaf (W4A16 is SM 90, W4A8_MXFP4_MXFP8 SM >= 100)
    S("moe-sm80-trtllm-gpt-oss-no-cutlass-leaf", [H100, FI_074, TRTLLM, "layer=gpt_oss_moe",
                                                  "layer.quant=mxfp4", "platform.capability=8.0"],
      None, status={"flashinfer_cutlass": "rejected"},
      cites={"flashinfer_cutlass": ("w4a16_mxfp4.py", "w4a8_mxfp4_mxfp8.py")}),
]

LINEAR = [
    S("lin-dgx-074-dense-auto", [DGX, FI_074, DENSE], "flashinfer_cutlass",
      kinds={"flashinfer_cutedsl": {"opt_in"}, "flashinfer_b12x": set(), "cutlass": {"package"},
             "marlin": {"package"}, "flashinfer_trtllm": {"device"},
             "flashinfer_cudnn": {"package"}, "b12x": {"package"}},
      status={"flashinfer_b12x": "eligible", "flashinfer_trtllm": "rejected",
              "emulation": "eligible"}),
    S("lin-dgx-074-dense-request-b12x", [DGX, FI_074, DENSE, LIN_FI_B12X], "flashinfer_b12x"),
    S("lin-dgx-074-request-cudnn-alias", [DGX, FI_074, DENSE,
                                          "policy.linear_backend=flashinfer-cudnn"], None,
      kinds={"flashinfer_cudnn": {"package"}}),
    S("lin-rtx5090-0611-k-mod-128", [RTX, FI_0611, DENSE, LIN_FI_B12X], None,
      layer={"hidden_size": 4128}, kinds={"flashinfer_b12x": {"shape"}},
      cites={"flashinfer_b12x": ("K % 128",)}),
    S("lin-rtx5090-0611-k-mod-128-ok", [RTX, FI_0611, DENSE, LIN_FI_B12X], "flashinfer_b12x",
      layer={"hidden_size": 4224}),
    S("lin-rtx5090-0614-k-mod-32", [RTX, FI_0611, pk(flashinfer_python="0.6.14"), DENSE,
                                    LIN_FI_B12X], "flashinfer_b12x", layer={"hidden_size": 4128}),
    S("lin-rtx5090-074-k-not-mod-32", [RTX, FI_074, DENSE, LIN_FI_B12X], None,
      layer={"hidden_size": 4100}, kinds={"flashinfer_b12x": {"shape"}}),
    S("lin-rtx5090-0615-make-fragment", [RTX, FI_0615, DENSE], "flashinfer_cutlass",
      kinds={"flashinfer_b12x": {"known_issue"}},
      cites={"flashinfer_b12x": ("FlashInfer #3922",)}),
    S("lin-rtx5090-0614-make-fragment", [RTX, FI_0615, pk(flashinfer_python="0.6.14"), DENSE],
      "flashinfer_cutlass", kinds={"flashinfer_b12x": {"known_issue"}}),
    S("lin-rtx5090-0614-cutlass-dsl-4.5-fine", [RTX, FI_0611, pk(flashinfer_python="0.6.14"),
                                                DENSE, LIN_FI_B12X], "flashinfer_b12x"),
    S("lin-rtx5090-0615post1-make-fragment", [RTX, FI_0615, pk(flashinfer_python="0.6.15.post1"),
                                              DENSE], "flashinfer_cutlass",
      kinds={"flashinfer_b12x": {"known_issue"}}),
    S("lin-rtx5090-0616-fixed", [RTX, FI_0615, pk(flashinfer_python="0.6.16"), DENSE,
                                 LIN_FI_B12X], "flashinfer_b12x"),
    S("lin-dgx-0610-sm121-cutlass-dsl-4.4", [DGX, FI_0610], "flashinfer_cutlass",
      layer=DENSE_KW,
      kinds={"flashinfer_b12x": {"known_issue"}}),
    S("lin-rtx5090-0610-fine-on-sm120", [RTX, FI_0610, DENSE, LIN_FI_B12X], "flashinfer_b12x"),
    S("lin-rtx5090-0611-cutlass-dsl-4.4", [RTX, FI_0611, pk(nvidia_cutlass_dsl="4.4.2"), DENSE],
      "flashinfer_cutlass", kinds={"flashinfer_b12x": {"known_issue"}}),
    S("lin-rtx5090-074-cutlass-dsl-4.7", [RTX, FI_074, pk(nvidia_cutlass_dsl="4.7.1")],
      "flashinfer_cutlass", layer=DENSE_KW, kinds={"flashinfer_b12x": {"known_issue"}}),
    S("lin-rtx5090-0722-cutlass-dsl-4.8", [RTX, FI_074, pk(flashinfer_python="0.7.2"), DENSE],
      "flashinfer_cutlass", warned=("flashinfer_b12x",)),
    S("lin-rtx5090-wheel-collision", [RTX, FI_0611, LIBS_BOTH, DENSE], "flashinfer_cutlass",
      kinds={"flashinfer_b12x": {"known_issue"}}),
    # vLLM 0.32.0's torch brings cuDNN (nvidia-cudnn-cu13): its FP4 GEMM has no CUDA floor
    S("lin-rtx5090-vllm-cuda-12.6", [RTX, VLLM, "platform.cuda=12.6", DENSE],
      "flashinfer_cudnn", kinds={"flashinfer_b12x": {"cuda"}, "cutlass": {"cuda"},
                                 "flashinfer_cutlass": {"cuda"}}),
    S("lin-b200-074-cutedsl", [B200, FI_074], "flashinfer_cutedsl", layer=DENSE_KW,
      kinds={"flashinfer_trtllm": {"opt_in"}, "flashinfer_cudnn": {"package"},
             "flashinfer_b12x": {"device"}},
      status={"flashinfer_trtllm": "opt_in", "flashinfer_cutlass": "eligible"}),
    S("lin-b200-074-n-mod-8", [B200, FI_074], "flashinfer_cutlass",
      layer={**DENSE_KW, "intermediate_size": 4100}, kinds={"flashinfer_cutedsl": {"shape"}}),
    S("lin-b200-074-request-trtllm", [B200, FI_074, DENSE, "policy.linear_backend=flashinfer_trtllm"],
      "flashinfer_trtllm", kinds={"flashinfer_trtllm": {"opt_in"}}),
    S("lin-b200-074-request-trtllm-fp16", [B200, FI_074, DENSE,
                                           "policy.linear_backend=flashinfer_trtllm"], None,
      layer={"dtype": "float16"}, kinds={"flashinfer_trtllm": {"dtype"}}),
    S("lin-b200-074-cudnn-installed", [B200, FI_074, DENSE, pk(nvidia_cudnn_cu13="9.10.2")],
      "flashinfer_cutedsl", status={"flashinfer_cudnn": "eligible"}),
    S("lin-b200-no-cutlass-dsl", [B200, "platform.cuda=13.0", pk(flashinfer_python="0.7.4")],
      "flashinfer_cutlass",
      layer=DENSE_KW, kinds={"flashinfer_cutedsl": {"package"}}),
    S("lin-b200-074-cutlass-dsl-4.7", [B200, FI_074, pk(nvidia_cutlass_dsl="4.7.1")],
      "flashinfer_cutlass", layer=DENSE_KW, kinds={"flashinfer_cutedsl": {"known_issue"}}),
    S("lin-b200-0611-cutlass-dsl-4.4", [B200, FI_0611, pk(nvidia_cutlass_dsl="4.4.2")],
      "flashinfer_cutlass", layer=DENSE_KW, kinds={"flashinfer_cutedsl": {"known_issue"}}),
    S("lin-h200-vllm-marlin", [H200, VLLM], "marlin", layer=DENSE_KW,
      kinds={"flashinfer_cudnn": {"device"}, "flashinfer_cutlass": {"device"},
             "cutlass": {"device"}, "flashinfer_b12x": {"device"}},
      notes=(N("weight_only", "marlin"),)),
    S("lin-h200-074-emulation", [H200, FI_074], "emulation", layer=DENSE_KW,
      notes=(N("reference", "emulation"),)),
    S("lin-dgx-vllm-w4a16-marlin", [DGX, VLLM, W4A16_LIN], "marlin",
      kinds={"flashinfer_cutlass": {"quant"}, "flashinfer_b12x": {"quant"},
             "cutlass": {"quant"}, "flashinfer_trtllm": {"quant"}},
      no_notes=(N("weight_only"),)),
    S("lin-rtx5090-b12x-native-opt-in", [RTX, FI_074, B12X_151],
      "flashinfer_cutlass", layer=DENSE_KW, kinds={"b12x": {"opt_in"}}, status={"b12x": "opt_in"}),
    S("lin-rtx5090-b12x-native-requested", [RTX, FI_074, B12X_151, DENSE,
                                            "policy.linear_backend=b12x"], "b12x"),
    S("lin-rtx5090-b12x-native-explicit-on-w4a16", [RTX, FI_074, B12X_151, DENSE,
                                                    "policy.linear_backend=b12x"], "b12x",
      layer=W4A16, kinds={"b12x": {"opt_in"}}),
    S("lin-rtx5090-b12x-native-w4a16", [RTX, FI_074, B12X_151, W4A16_LIN], "emulation",
      kinds={"b12x": {"opt_in"}, "flashinfer_b12x": {"quant"}}),
    S("lin-b200-sm107-w4a16-marlin", [B200, VLLM, "platform.capability=10.7", W4A16_LIN],
      "marlin", kinds={"flashinfer_cutedsl": {"device"}}),
    # --- TensorRT-LLM's block-FP8 linear: its fp8_block_scaling_gemm off SM 100f (thop's SM switch)
    S("lin-h200-trtllm-fp8-block-scaling-gemm", [H200, TRTLLM, DENSE, FP8_BLOCK],
      "flashinfer_blockscale_sm90", cites={"deep_gemm": ("linear.py",)}),
    S("lin-dgx-trtllm-fp8-block-no-sm121-kernel", [DGX, TRTLLM, DENSE, FP8_BLOCK], None,
      kinds={"flashinfer_blockscale_sm90": {"device"}, "deep_gemm": {"device"}},
      # DeepGEMM's SM 12.1 fault (a vLLM issue) is moot: TensorRT-LLM runs DeepGEMM on SM 100f
      # only (engines.moot_under), so no warning of it in a TensorRT-LLM plan
      cites={"flashinfer_blockscale_sm90": ("fp8BlockScalingGemm.cpp",)}, warned=()),
    S("lin-h200-trtllm-fp8-block-n-mod-16", [H200, TRTLLM, DENSE, FP8_BLOCK,
                                             "layer.intermediate_size=2056"], None,
      kinds={"flashinfer_blockscale_sm90": {"shape"}}),
    S("lin-h200-trtllm-fp8-block-k-mod-16", [H200, TRTLLM, DENSE, FP8_BLOCK,
                                             "layer.hidden_size=4104"], None,
      kinds={"flashinfer_blockscale_sm90": {"shape"}}),
    S("lin-rtx5090-trtllm-fp8-block-k-mod-128", [RTX, TRTLLM, DENSE, FP8_BLOCK,
                                                 "layer.hidden_size=4112"], None,
      kinds={"flashinfer_blockscale_sm90": {"shape"}}),
    S("lin-h200-trtllm-fp8-block-k-mod-16-not-128", [H200, TRTLLM, DENSE, FP8_BLOCK,
                                                     "layer.hidden_size=4112"],
      "flashinfer_blockscale_sm90"),
    S("lin-cpu-torch-emulation", [CPU, pk(torch="2.11.0"), DENSE], "emulation"),
    S("lin-cpu-no-packages-emulation", [CPU], "emulation", layer=DENSE_KW),
    S("lin-unquantized-explicit-backend", [DGX, FI_074, DENSE, LIN_FI_B12X], None,
      layer={"quant": "unquantized"},
      status={"flashinfer_b12x": "not_applicable", "emulation": "not_applicable"},
      notes=(N("request_not_applicable", key="policy.linear_backend",
               requested=("flashinfer_b12x",), reason=Sub(rule="quant")),)),
]

SCENARIOS = MOE + LINEAR
_IDS = [s.id for s in SCENARIOS]
assert len(set(_IDS)) == len(_IDS), "scenario ids must be unique"


@pytest.fixture(scope="module", autouse=True)
def _warm_cache():
    warm([s.overrides for s in SCENARIOS] + [(CPU,), (DGX, FI_074)])


# ---------------------------------------------------------------------------------------------
# The checks

def _order_key(sel, layer):
    """The preference step: the rank of a backend's first `preference:` entry whose `when`
    holds for the layer and platform, else its base rank; ties by name."""
    lay, facts = make_layer(layer), sel.platform.facts

    def key(b):
        rank = next((p.rank for p in b.preference if p.when.holds(lay, facts)), b.rank)
        return (rank, b.name)
    return key


def check_invariants(s: Scenario, d) -> None:
    sel = load(*s.overrides)
    op = d.layer.op
    backends = sel.catalogue.backends[op]
    expected_order = [b.name for b in sorted(backends, key=_order_key(sel, d.layer))]
    assert [c.backend for c in d.candidates] == expected_order
    selected = [c.backend for c in d.candidates if c.status == "selected"]
    assert selected == ([d.selected] if d.selected else [])
    for c in d.candidates:
        assert c.status in schema.STATUSES
        for r in c.reasons:
            assert r.rule in reason_rules() and r.message and r.source.strip()
            # a rule's reason names its rule (only "does not implement" is the resolver's own)
            assert r.key or c.status == "not_applicable", (c.backend, r)
        errors = [r for r in c.reasons if r.rule != "opt_in"]
        if c.status in ("eligible", "opt_in", "selected"):
            assert not errors, (c.backend, c.status, errors)
        if c.status == "rejected":
            assert errors
        if c.status == "opt_in":
            assert {r.rule for r in c.reasons} == {"opt_in"}
        if c.status == "not_applicable":  # the layer's scheme is not the backend's, or the
            # engine has no such backend (engine=X)
            assert {"quant", "engine"} & {r.rule for r in c.reasons}, (c.backend, c.reasons)
        if c.status == "rejected":
            assert "quant" not in {r.rule for r in c.reasons}, (c.backend, c.reasons)
    if d.requested == "auto":
        first = next((c.backend for c in d.candidates if c.status in ("eligible", "selected")),
                     None)
        assert d.selected == first, "auto selection must take the first eligible candidate"
        if d.selected:
            assert not sel.catalogue.get(op, d.selected).opt_in or \
                d.selected in sel.run_config.policy.allow_opt_in, "opt-in chosen automatically"


@pytest.mark.parametrize("s", SCENARIOS, ids=_IDS)
def test_scenario(s: Scenario):
    d = s.decide()
    assert d.selected == s.selected, (d.selected, str(d))
    by_name = {c.backend: c for c in d.candidates}
    for backend, kinds in s.kinds.items():
        c = by_name[backend]
        assert {r.rule for r in c.reasons} == kinds, (backend, c.status, c.reasons)
        if backend not in s.status and kinds and c.status != "selected":
            want = ("opt_in" if kinds == {"opt_in"} else
                    "not_applicable" if kinds & {"quant", "engine"} else "rejected")
            assert c.status == want, (backend, c.status)
    for backend, status in s.status.items():
        assert by_name[backend].status == status, (backend, by_name[backend])
    for backend, needles in s.cites.items():
        text = " ".join(f"{r.message} {r.source}" for r in by_name[backend].reasons)
        for n in needles:
            assert n in text, (backend, n, text)
    for n in s.notes:
        assert any(n.matches(got) for got in d.note_data), (n, d.note_data)
    for n in s.no_notes:
        assert not any(n.matches(got) for got in d.note_data), (n, d.note_data)
    if s.warned is not None:
        warned = {b for b, r in d.warnings if not r.source.startswith(AMBIENT_WARNINGS)}
        assert sorted(warned) == sorted(s.warned), d.warnings
    for b, w in d.warnings:  # each warning-level rule is a warning note about its backend
        assert w.severity == "warning" and any(
            N("rule_warning", b, rule=w.rule, message=w.message, source=w.source).matches(n)
            and n.severity == "warning" for n in d.note_data), (b, w, d.note_data)
    check_invariants(s, d)


def test_there_are_enough_scenarios():
    assert len(MOE) >= 30 and len(LINEAR) >= 20


# ---------------------------------------------------------------------------------------------
# Coverage: every rule of the catalogue fires in at least one scenario

# Rules that no valid layer can trip, each for a reason the test below re-checks:
# - a `quant` rule whose values include everything the backend `implements` (a layer of another
#   quant scheme is `not_applicable` before any rule is evaluated);
# - an `activation` rule that lists the whole activation vocabulary (it guards against
#   activations added to the vocabulary later).
UNREACHABLE: set = set()  # a rule no valid layer can trip is dead data: keep the catalogue free of it


def _unreachable(sel):
    out = set()
    for _op, backends in sel.catalogue.backends.items():
        for b in backends:
            for r in b.rules:
                if r.kind == "quant" and set(b.implements) <= set(r.values):
                    out.add(r.key)
                if r.kind == "activation" and set(schema.ACTIVATIONS) <= set(r.values):
                    out.add(r.key)
    return out


def test_every_rule_fires_somewhere():
    sel = load(CPU)
    every = {r.key for bs in sel.catalogue.backends.values() for b in bs for r in b.rules} | \
        {r.key for bs in sel.catalogue.backends.values() for b in bs for _, e in b.engines
         for r in e.rules} | \
        {k.key for bs in sel.catalogue.backends.values() for b in bs for _, e in b.engines
         for k in e.kernels if k.scheme} | \
        {f"catalogue.{b.op}.{b.name}.opt_in" for bs in sel.catalogue.backends.values()
         for b in bs if b.opt_in}
    # the rules the resolver plans from a backend's fields and the run (rules.py)
    planned = {f"catalogue.{b.op}.{b.name}.{f}" for bs in sel.catalogue.backends.values()
               for b in bs for f in ("implements", "engines", "probes", "verify")} | \
        {"policy.exclude"}
    assert len(every) > 95
    assert _unreachable(sel) == UNREACHABLE
    fired: Dict[str, str] = {}
    import knowledge_cases  # the boundary cases that pin each rule (tests/test_knowledge.py)
    decided = [(s.id, s.decide()) for s in SCENARIOS] + \
        [(c.id, knowledge_cases.decide(c)) for c in knowledge_cases.CASES]
    for sid, d in decided:
        for c in d.candidates:
            for r in c.reasons:
                if r.key:
                    fired.setdefault(r.key, sid)
        for _, w in d.warnings:
            fired.setdefault(w.key, sid)
    assert not (set(fired) - every - planned), "reasons carry keys of rules that do not exist"
    missing = sorted(every - set(fired) - UNREACHABLE)
    assert not missing, f"rules that no scenario shows firing: {missing}"
    assert not (UNREACHABLE & set(fired))


# ---------------------------------------------------------------------------------------------
# Preference order details

def test_weight_only_ranks_below_every_native_backend_for_w4a4(tmp_path):
    """vLLM #55397: a native W4A4 kernel ranked (by number) after Marlin still comes first for an
    nvfp4 layer; for an nvfp4_w4a16 layer Marlin keeps its rank."""
    d = tmp_path / "backend" / "linear"
    d.mkdir(parents=True)
    (d / "slow_native.yaml").write_text(
        'description: "a native FP4 GEMM ranked after marlin"\n'
        "rank: 55\n"
        "execution: native\n"
        "implements: [nvfp4, nvfp4_w4a16]\n"
        "rules:\n"
        "  - kind: package\n"
        "    package: vllm\n"
        '    source: "test"\n')
    sel = load(H200, VLLM, DENSE, config_dirs=[tmp_path])
    d4 = sel.default()
    names = [c.backend for c in d4.candidates]
    assert names.index("slow_native") < names.index("marlin")
    assert d4.selected == "slow_native"
    d16 = sel.select(quant="nvfp4_w4a16")
    names16 = [c.backend for c in d16.candidates]
    assert names16.index("marlin") < names16.index("slow_native")
    assert d16.selected == "marlin"


def test_linear_candidate_order():
    sel = load(DGX, FI_074, DENSE)
    # these NVFP4 backends' order (a new backend, or one of other schemes only, leaves it alone)
    known = {"flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_b12x", "cutlass", "marlin",
             "flashinfer_trtllm", "flashinfer_cudnn", "b12x", "emulation"}
    w4a4 = [c.backend for c in sel.default().candidates if c.backend in known]
    assert w4a4 == ["flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_b12x", "cutlass",
                    "flashinfer_trtllm", "flashinfer_cudnn", "b12x", "marlin", "emulation"]
    w4a16 = [c.backend for c in sel.select(quant="nvfp4_w4a16").candidates
             if c.backend in known]
    assert w4a16 == ["flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_b12x", "cutlass",
                     "marlin", "flashinfer_trtllm", "flashinfer_cudnn", "b12x", "emulation"]
    assert sorted(c.backend for c in sel.default().candidates) == sorted(sel.catalogue.names("linear"))


def test_moe_candidate_order():
    sel = load(DGX, FI_074)
    names = [c.backend for c in sel.default().candidates]
    known = ["flashinfer_trtllm", "flashinfer_cutedsl", "b12x", "flashinfer_cutlass",
             "flashinfer_b12x", "cutlass", "marlin", "emulation"]
    assert [n for n in names if n in known] == known  # a new backend leaves this order alone
    assert sorted(names) == sorted(sel.catalogue.names("moe"))  # every backend, once


def test_rejected_lists_every_failed_rule_not_the_first():
    d = load(CPU).select(activation="relu2", act_and_mul=True, ep_size=2, dtype="float16",
                         swiglu_limit=5.0)
    fb = d.candidate("flashinfer_b12x")
    kinds = [r.rule for r in fb.reasons]
    for k in ("device", "package", "cuda", "dtype", "act_and_mul", "parallel", "clamp"):
        assert k in kinds, kinds
    assert kinds.count("package") == 3  # flashinfer-python, nvidia-cutlass-dsl, triton


def test_explicit_nvfp4_only_backend_on_w4a16_layer_is_not_applicable():
    """docs/keys.md: an explicit backend applies only to layers it implements (op and quant
    scheme); a backend that serves nvfp4 only does not implement a W4A16 layer, so a global
    flag falls back to automatic selection there instead of refusing it (vLLM #49076), even
    under policy.strict=true."""
    d = load(DGX, VLLM, "policy.moe_backend=flashinfer_cutlass").select(quant="nvfp4_w4a16")
    assert d.candidate("flashinfer_cutlass").status == "not_applicable"
    assert d.selected == "marlin"
    assert any(N("request_not_applicable", requested=("flashinfer_cutlass",), chose="marlin",
                 reason=Sub(rule="quant")).matches(n) for n in d.note_data), d.note_data
    lin = load(DGX, VLLM, W4A16_LIN, "policy.linear_backend=flashinfer_cutlass").default()
    assert lin.candidate("flashinfer_cutlass").status == "not_applicable"
    assert lin.selected == "marlin"
