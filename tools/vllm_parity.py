"""Write the installed vLLM release's parity report (docs/vllm-parity.md for 0.32.0,
docs/vllm-parity-<release>.md after): vLLM's untouched NVFP4, FP8, MXFP4 and MXFP8 MoE choices and
its NVFP4/FP8/MX linear kernel choice against selector's (engine=vllm) over the simulated sweeps of
tests/vllm/sim.py and a seeded random sample, every difference once per cluster with the rules and
sources that make selector differ and the lines of vLLM that decide it (tests/vllm/parity.py: a
generic rule, or vLLM's file and function names without the installed release's line, explain
nothing: such a cluster is written and counted as unexplained).

Run in the release's vLLM environment (tools/vllm_env.sh VENV VERSION):
    .venv-vllm-034/bin/python tools/vllm_parity.py [--check] [--only nvfp4|fp8|mx|linear|random]
--check exits 1 when a difference has no explanation, without writing the file; --only runs those
sweeps (NVFP4; FP8 MoE, sim.fp8_sweep; MXFP4/MXFP8 MoE, sim.sweep_mx; FP8/MXFP8/MXFP4 linear,
tests/vllm/linear_parity.py; random: SELECTOR_PARITY_SEED, drawn and printed when unset) and
rewrites their sections, keeping the file's others. Two sweeps side by side: each with
`--out FILE`, then `--only A --merge FILE1` and `--only B --merge FILE2` (one section a merge: each
FILE holds every section, the others as they were) write the report.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "vllm")]


def _out() -> Path:
    """The installed release's report: docs/vllm-parity.md (0.32), vllm-parity-<release>.md."""
    import sim
    return ROOT / "docs" / sim.DOC_NAME


MAX_LINES = 6  # the engine lines a cluster lists (its members' own, each once)


def why_lines(text: str, pairs, reasons, members=()) -> list:
    """A cluster's "Why:" line and its rules: every failed rule of selector's answer, then the
    engine-side sources the explanation adds, then the lines of vLLM that decide its members
    (parity.LINE: where vLLM raised, the kernel class it built, the order it tried)."""
    import parity
    lines = [f"Why: {text}.", ""]
    shown = set()
    for x in reasons:
        lines.append(f"- [{x.rule}] {x.message} ({x.source})")
        shown.add((x.rule, x.source))
    lines += [f"- [{rule}] {source}" for rule, source in pairs if (rule, source) not in shown]
    engine = parity.lines_of(list(members))
    lines += [f"- [{parity.LINE}] {src}" for src in engine[:MAX_LINES]]
    if len(engine) > MAX_LINES:
        lines.append(f"- [{parity.LINE}] and {len(engine) - MAX_LINES} more lines of vLLM")
    return lines + [""]


def _reasons(row):
    """The messages behind a cluster, from its first row's decision."""
    d, r = row.decision, row
    name = r.vllm if r.vllm in {c.backend for c in d.candidates} else r.scenario.requested
    if name == "auto" or name not in {c.backend for c in d.candidates}:
        return []
    c = d.candidate(name)
    keep = {rule for rule, _ in (row.why[1] if row.why else ())}
    return [x for x in c.reasons if x.rule in keep]


def _patched_lines() -> list:
    """What the simulation replaces, read from tests/vllm/sim.py itself: the device query, the
    CUDA build's C++ ops, and the probes of libraries vLLM's CPU build does not have."""
    import sim
    probe = sim.Scenario("10.0", "12.8", sim.FLASHINFER, sim.B12X, "moe", "nvfp4", "silu", True)
    ops = ", ".join(f"`{n}`" for n in sim._cuda_ops(probe))
    libs = ", ".join(f"`{n}`" for n in sim._probes(probe))
    return [
        "What the simulation patches, and nothing else (every other support function of vLLM, "
        "its Python guards around these included, runs as shipped):",
        "",
        "- the device: `current_platform` is vLLM's own `Platform` class with the CUDA enum and "
        "the scenario's capability (`get_device_capability`); its `supports_fp8` and "
        "`support_deep_gemm` are `CudaPlatformBase`'s;",
        f"- the CUDA build's C++ ops, which vLLM's CPU build lacks (`torch.ops._C`): {ops}, "
        "answered as the csrc files compile them for the scenario's capability and CUDA;",
        f"- the kernel libraries the CPU build does not ship, present or absent per scenario: "
        f"{libs};",
        "- for no GPU, the host CPU's own answers, pinned so that every host answers alike: "
        "`torch.cpu._is_amx_tile_supported` (AMX tiles: yes), `cpu_has_amx_fp8` (above: no) and "
        "`vllm._custom_ops._supports_cpu_fp8_w8a16` (whether the build of vLLM's CPU extension "
        "that the CPU's instruction set loads has `fp8_scaled_mm_cpu`: yes, as on an AVX-512 "
        "host; an AVX2-only host's build has not).",
        "",
    ]


def _venv() -> str:
    """The environment tools/vllm_env.sh builds for the installed release."""
    import sim
    return ".venv-vllm" if sim.RELEASE == "0.32" else f".venv-vllm-{sim.RELEASE.replace('.', '')}"


def _vllm_version() -> str:
    import sim
    return sim.VLLM


def _stack() -> str:
    import sim
    return sim.STACK_PRESET


def render(report, sweep_text: str) -> str:
    import vllm

    rows = report.rows
    differ = report.differ
    lines = [
        f"# vLLM parity: vLLM {vllm.__version__}'s own NVFP4 choice against selector's",
        "",
        "Generated by `tools/vllm_parity.py` in the vLLM environment (`tools/vllm_env.sh`); "
        "`tests/vllm/test_parity.py` fails on any difference no catalogue rule explains.",
        "vLLM's real selection code (`select_nvfp4_moe_backend`, `init_nvfp4_linear_kernel`) runs "
        "on a simulated GPU (tests/vllm/sim.py: vLLM's own `Platform` with the CUDA enum and the "
        "scenario's capability; its FlashInfer, CUTLASS-FP4, Marlin and b12x probes answered from "
        "the scenario), or, for no GPU, on vLLM's own CPU platform, with the host CPU's answers "
        "pinned (an x86 CPU with AMX tiles and without AMX-FP8, so that every host answers "
        "alike). selector decides the same "
        f"scenario through its vLLM plugin's Chooser with `engine=vllm stack={_stack()}` (what "
        f"installing vLLM {vllm.__version__} brings, cuDNN with its torch included), the capability from "
        "vLLM's platform and the scenario's packages. A scenario agrees when both name the same "
        "backend and the same kernel class (the one vLLM builds; selector's `engine.kernel`), or "
        "both refuse.",
        "",
        *_patched_lines(),
        "A refusal vLLM leaves to run time, which selector states as a rule although no row of "
        "the sweep (bf16 layers) shows it: FlashInfer's TRT-LLM FP4 GEMM writes bf16 only. "
        "vLLM's `FlashInferTrtllmNvFp4LinearKernel.apply_weights` passes `x.dtype` as the output "
        "dtype (vLLM 0.34.0 kernels/linear/nvfp4/flashinfer.py lines 305-330) and FlashInfer's "
        "`_trtllm_gemm_fp4_requirement` raises for any other (flashinfer-python 0.7.4 "
        "gemm/gemm_base.py lines 8459-8482), so an fp16 layer that vLLM builds on it fails at its "
        "first GEMM; selector's `linear/flashinfer_trtllm` dtype rule rejects it up front.",
        "",
        f"Sweep: {sweep_text}",
        "",
        "| | scenarios |",
        "|---|---|",
        f"| total | {len(rows)} |",
        f"| agree (same backend and kernel, or both refuse) | {len(rows) - len(differ)} |",
        f"| differ | {len(differ)} |",
        f"| differ without an explanation | {len(report.unexplained)} |",
        "",
        "## Differences, one entry per cluster",
        "",
        "A cluster is one (vLLM's result, selector's result, explanation) triple. `refusal`: "
        "selector refuses (strict policy), `error`: vLLM raises. Where vLLM would build a kernel "
        "that its library then refuses at run time (a CUDA floor or a device list that vLLM's "
        "Python check does not repeat), selector's rule and its source say so.",
        "",
    ]
    lines.extend(cluster_lines(report, "### {i}. "))
    return "\n".join(lines)


def cluster_lines(report, heading: str) -> list:
    """One entry per cluster: why, the rules and sources, the kernels, examples."""
    lines = []
    for i, ((v, s, why), members) in enumerate(report.clusters().items(), 1):
        text, pairs = why
        lines.append(heading.format(i=i) + f"vLLM: {v}; selector: {s} ({len(members)} scenarios)")
        lines.append("")
        lines += why_lines(text, pairs, _reasons(members[0]), members)
        kern = members[0]
        lines.append(f"Kernels: vLLM {kern.vllm_kernel or '-'}; selector {kern.kernel or '-'}.")
        lines.append("")
        lines.append("Examples: " + "; ".join(f"`{m.scenario.label()}`" for m in members[:3])
                     + ("" if members[0].vllm_error == "" else
                        f". vLLM says: \"{members[0].vllm_error[:200]}\""))
        lines.append("")
    return lines


FP8_MARK = "\n# FP8 MoE: "


def render_fp8(report) -> str:
    import sim
    import vllm
    rows, differ = report.rows, report.differ
    caps = ", ".join(c for c in sim.FP8_CAPABILITIES if c)
    lines = [
        f"# FP8 MoE: vLLM {vllm.__version__}'s `select_fp8_moe_backend` against selector's",
        "",
        "Generated by `tools/vllm_parity.py --fp8`; `tests/vllm/test_parity_fp8.py` fails on any "
        "difference no catalogue rule explains. vLLM's own FP8 oracle "
        "(`fused_moe/oracle/fp8.py`: `_get_priority_backends`, the explicit `--moe-backend` "
        "path with its batched variants, `VLLM_MOE_USE_DEEP_GEMM`, `allow_vllm_cutlass`, each "
        "experts class's `is_supported_config`) runs on the same simulated GPU as above: "
        "vLLM's Python support functions run as shipped (`_custom_ops.cutlass_group_gemm_supported` "
        "refuses SM < 9.0 and SM >= 11.0 itself, then asks the CUDA build's op, answered as "
        "`scaled_mm_entry.cu` compiles it: SM 9.x with CUDA >= 12.3, SM 10.x with CUDA >= 12.8; "
        "`is_deep_gemm_supported` reads the platform's `support_deep_gemm`, `VLLM_USE_DEEP_GEMM` "
        "and whether the DeepGEMM module is there, bundled in vLLM's CUDA wheel). selector "
        f"decides through the plugin's Chooser with `engine=vllm stack={_stack()}` and the "
        "plugin's `fp8_moe_switches`: `allow_vllm_cutlass=False` is `policy.exclude=[cutlass]`, "
        "`VLLM_MOE_USE_DEEP_GEMM=0` is `policy.exclude=[deep_gemm]`, `=1` requests `deep_gemm`.",
        "",
        f"Sweep: {len(rows)} scenarios: no GPU (vLLM's CPU platform) and SM {caps}; CUDA "
        f"{' and '.join(sim.FP8_CUDAS)} on SM >= 10.0 (the CUTLASS grouped GEMM's floor), "
        f"{sim.FP8_CUDAS[-1]} below; flashinfer-python {sim.FLASHINFER} present or absent on "
        "SM 9.0, 10.x and 12.x; " + ", ".join(sim.FP8_QUANTS) + "; every MoE activation gated "
        "and non-gated with EP 1 and 2, and silu, swiglustep, non-gated relu2 with data "
        "parallelism 2 over each all2all exchange (" + ", ".join(sim.FP8_ALL2ALL) + "; DeepEP "
        "low-latency is vLLM's batched activation format); a SwiGLU clamp on gated silu; "
        "requested auto and " + ", ".join(n for n in sim.FP8_NAMES if n != "auto") +
        " (flashinfer_cutedsl: an NVFP4-only name vLLM's FP8 oracle refuses); "
        "allow_vllm_cutlass off (the fp8 and modelopt quant methods) on auto and cutlass; "
        "VLLM_MOE_USE_DEEP_GEMM=0 and =1 on auto.",
        "",
        "Out of scope (the engine config's `outside` list): vLLM's AITER (ROCm), XPU, CPU and "
        "CPU_W8A8, HPC and the optional humming backends. The DeepEP v2 rule of "
        "`_get_priority_backends` (block FP8 on SM 10.x moves FLASHINFER_TRTLLM to the front) "
        "changes nothing on CUDA, where FLASHINFER_TRTLLM is already the first backend after "
        "AITER (ROCm only) unless humming is preferred; selector's `all2all` vocabulary has no "
        "deepep_v2. FlashInfer's NVLink exchanges are two values of it, as in vLLM "
        "(`flashinfer_nvlink_one_sided`, `flashinfer_nvlink_two_sided`; Marlin takes the "
        "one-sided one only); the FP8 sweep uses the two-sided one, the random sweeps both. "
        "Not in the sweep: the TP block refinement vLLM's FP8 quant methods apply before the "
        "oracle (`refine_fp8_moe_block_shape`, `pad_tp_shard_to_weight_blocks`: an "
        "intermediate size per rank that is not a multiple of 128 turns the weight key into a "
        "finer block only Triton takes, or pads the shard); selector's `fp8_block` is the "
        "128x128 key, and routing methods and hash routing (TRT-LLM's monolithic kernel) are "
        "not layer keys.",
        "",
        "| | scenarios |",
        "|---|---|",
        f"| FP8 total | {len(rows)} |",
        f"| FP8 agree (same backend and kernel, or both refuse) | {len(rows) - len(differ)} |",
        f"| FP8 differ | {len(differ)} |",
        f"| FP8 differ without an explanation | {len(report.unexplained)} |",
        "",
        "## FP8 differences, one entry per cluster",
        "",
    ]
    lines.extend(cluster_lines(report, "### FP8-{i}. "))
    return "\n".join(lines)


def render_mx(report) -> str:
    """The MXFP4/MXFP8 section: vLLM's select_mxfp4_moe_backend, its DeepSeek V4 path and
    select_mxfp8_moe_backend against selector, with the differences one entry per cluster."""
    import sim
    import vllm
    rows, differ = report.rows, report.differ
    caps = ", ".join(c for c in sim.MX_CAPABILITIES if c)
    # vLLM 0.34.0 fused_moe/oracle/mxfp4.py 445-457 orders Triton after Marlin on SM 11.x too
    triton = "SM 9.0 and 11.0, Marlin on SM 12.x" if sim.RELEASE in ("0.32", "0.33") else \
        "SM 9.0, Marlin on SM 11.0 and 12.x"
    lines = [
        "## MXFP4 and MXFP8 MoE",
        "",
        f"vLLM {vllm.__version__} has three MX oracles, all run untouched here: `select_mxfp4_moe_backend` "
        "(gpt-oss, and every MXFP4 checkpoint that declares its activation key: "
        "compressed-tensors, Quark, INC), `select_deepseek_v4_mxfp4_moe_backend` (the "
        "`quant_method: mxfp4` checkpoints that are not gpt-oss: DeepSeek V4 and others) and "
        "`select_mxfp8_moe_backend` (ModelOpt, compressed-tensors, INC and online MXFP8). "
        "vLLM's MXFP4 backend enum names the activation precision (`..._MXFP4_BF16`, "
        "`..._MXFP4_MXFP8`, `CUTLASS_MXFP4_MXFP4`); in selector that precision is the layer's "
        "quant: `mxfp4` (W4A16, bf16 activations), `mxfp4_w4a8` (MXFP8 activations), "
        "`mxfp4_w4a4` (MXFP4 activations). A scenario agrees when both name the same backend, "
        "the same kernel class and the same scheme (selector's `engine.scheme`, vLLM's "
        "`_backend_activation_key` of its pick), or both refuse.",
        "",
        f"How a gpt-oss user sees both: vLLM {vllm.__version__} builds gpt-oss' MoE with no "
        "activation key, so it runs the `_BF16` variants (`layer.quant=mxfp4`): FlashInfer "
        f"TRT-LLM on SM 10.x, OpenAI's Triton kernels on {triton} (vLLM orders Triton after "
        "Marlin there). Asking vLLM for MXFP8 activations, `--quantization-config "
        "'{\"moe\": {\"activation\": \"mxfp8\"}}'` (or `--moe-backend "
        "flashinfer_trtllm_afp8` / `flashinfer_cutlass_afp8`), is `layer.quant=mxfp4_w4a8` in "
        "selector: TRT-LLM MXFP4 x MXFP8 on SM 10.x, FlashInfer CUTLASS MXFP4 x MXFP8 on SM 10.x "
        "and 12.x; where no kernel quantizes activations vLLM falls back to a `_BF16` variant and "
        "says so, and selector answers the layer as asked (Marlin, weight-only) and, asked about "
        "`mxfp4`, vLLM's fallback. `--moe-backend b12x` (native b12x, SM 12.x) on a layer without "
        "an activation key runs W4A8 where it can (SiLU, SiTU): selector's b12x kernel entry says "
        "so (`scheme: mxfp4_w4a8`); `VLLM_B12X_MOE_FP4_FORCE_A16=1` keeps bf16. The DeepSeek V4 "
        "path picks the precision itself (TRT-LLM MXFP8, DeepGEMM FP8, Marlin); selector is "
        "asked about the scheme of vLLM's pick.",
        "",
        "Out of scope (not NVIDIA, or not a kernel choice): ROCm AITER and CK (`aiter*`), XPU, "
        "vLLM's CPU MXFP4 experts (the `cpu` entry of conf/engine/vllm.yaml `outside`), Humming "
        "(optional package; vLLM's probe answers absent here), the FlashInfer MoE-EP megakernels "
        "(`flashinfer_moe_ep_*`, explicit only), vLLM's OCP-MX emulation (needs amd-quark; absent "
        "here, so an explicit `emulation` raises), ROCm-only `TRITON_MXFP8`, Qwen3.8's gfx950 "
        "emulation guard.",
        "",
        f"Sweep: {len(sim.sweep_mx())} scenarios: no GPU and SM {caps}; CUDA 13.0, and 12.8 on "
        f"SM 10.0 and 11.0 (vLLM's MXFP4 W4A4 kernels need 12.9); flashinfer-python "
        f"{sim.FLASHINFER} present (with and without vLLM's vendored triton_kernels and DeepGEMM) "
        f"or absent; native b12x {sim.B12X} on 12.x; select_mxfp4_moe_backend with each of "
        "mxfp4, mxfp4_w4a8, mxfp4_w4a4, the DeepSeek V4 path and select_mxfp8_moe_backend; "
        "activations " + ", ".join(f"{a}{'' if g else ' non-gated'}{' clamp' if c else ''}"
                                   for a, g, c in sim.MX_LAYERS)
        + "; EP 1 and 2; every --moe-backend value of vLLM's MXFP4 map ("
        + ", ".join(sim.MXFP4_NAMES) + ") and MXFP8 map (" + ", ".join(sim.MXFP8_NAMES)
        + "); VLLM_B12X_MOE_FP4_FORCE_A16 on b12x requests.",
        "",
        "| | scenarios |",
        "|---|---|",
        f"| MXFP4/MXFP8 total | {len(rows)} |",
        f"| MXFP4/MXFP8 agree (same backend, kernel and scheme, or both refuse) | "
        f"{len(rows) - len(differ)} |",
        f"| MXFP4/MXFP8 differ | {len(differ)} |",
        f"| MXFP4/MXFP8 differ without an explanation | {len(report.unexplained)} |",
        "",
        "### Differences, one entry per cluster",
        "",
    ]
    for i, ((v, s, why), members) in enumerate(report.clusters().items(), 1):
        text, pairs = why
        m = members[0]
        lines.append(f"### MX-{i}. vLLM: {v}; selector: {s} ({len(members)} scenarios)")
        lines.append("")
        lines += why_lines(text, pairs, _reasons(m), members)
        lines.append(f"Kernels: vLLM {m.vllm_kernel or '-'} ({m.vllm_quant or '-'}); selector "
                     f"{m.kernel or '-'} ({m.scheme or '-'}).")
        lines.append("")
        lines.append("Examples: " + "; ".join(f"`{x.scenario.label()}`" for x in members[:3])
                     + ("" if m.vllm_error == "" else f". vLLM says: \"{m.vllm_error[:200]}\""))
        lines.append("")
    return "\n".join(lines)


LINEAR_HEADING = "## FP8, MXFP8 and MXFP4 linear layers"


def render_linear(report) -> str:
    """The section for vLLM's FP8/MXFP8/MXFP4 linear kernel choice (tests/vllm/linear_parity.py):
    its own table keys and `#### L<n>.` cluster headings, so the NVFP4 report's stay its own."""
    import linear_parity as lp
    import sim
    rows, differ = report.rows, report.differ
    caps = ", ".join(c for c in lp.CAPABILITIES if c)
    lines = [
        LINEAR_HEADING,
        "",
        "vLLM's `init_fp8_linear_kernel` (its `_POSSIBLE_FP8_KERNELS` and "
        "`_POSSIBLE_FP8_BLOCK_KERNELS` lists with each kernel's `is_supported`/`can_implement`), "
        "`init_mxfp8_linear_kernel` and `init_mxfp4_linear_kernel`, run untouched on the same "
        "simulated GPU (tests/vllm/linear_parity.py; the CUTLASS FP8 build checks of "
        "`scaled_mm_entry.cu`, FlashInfer's block-scale GEMM, DeepGEMM (vendored in vLLM's CUDA "
        "wheel) and b12x answered from the scenario, amd-quark absent; the requested backend "
        "set as vLLM's `KernelConfig.linear_backend_per_quant` under the quantization key "
        "selector's `VLLM_LINEAR_QUANT` names, which vLLM's own `_get_linear_backend` reads), "
        "against selector's plugin Chooser with "
        f"`engine=vllm stack={_stack()}`. vLLM names its linear backends per kernel family "
        "(`torch` holds one kernel per FP8 scheme): a scenario agrees when both name the same vLLM "
        "backend and the same kernel class, or both refuse; vLLM's name maps to the selector "
        "backend of that name that implements the layer's scheme. selector's `emulation` is its "
        "NVFP4 reference: vLLM's MXFP8 emulation (`EmulationMxfp8LinearKernel`, vLLM's last "
        "resort for MXFP8 layers no other kernel takes) has no selector counterpart, and vLLM's "
        "MXFP4 emulation needs amd-quark, absent from vLLM's CUDA install.",
        "",
        f"Sweep: {len(rows)} scenarios: no GPU and SM {caps}; CUDA {', '.join(sim.CUDAS)} "
        f"(MXFP8/MXFP4: {', '.join(lp.MX_CUDAS)}, their kernels check none); flashinfer-python "
        f"{sim.FLASHINFER} present or absent; native b12x {sim.B12X} on 12.x; schemes "
        f"{', '.join(lp.SCHEMES)}; weights (N, K) "
        f"{', '.join(f'{n}x{k}' for n, k in lp.SHAPES)} in bfloat16 and "
        f"{lp.SHAPES[0][0]}x{lp.SHAPES[0][1]} in float16 (MXFP4: the first shape); requested "
        f"{', '.join(lp.NAMES)}; DeepGEMM asked for a `{lp.MODEL_TYPE}` model.",
        "",
        "| FP8/MX linear | scenarios |",
        "|---|---|",
        f"| linear total | {len(rows)} |",
        f"| linear agree (same backend and kernel, or both refuse) | {len(rows) - len(differ)} |",
        f"| linear differ | {len(differ)} |",
        f"| linear differ without an explanation | {len(report.unexplained)} |",
        "",
    ]
    for i, ((v, s, why), members) in enumerate(report.clusters().items(), 1):
        text, pairs = why
        first = members[0]
        lines.append(f"#### L{i}. vLLM: {v}; selector: {first.engine_name or s} "
                     f"({len(members)} scenarios)")
        lines.append("")
        lines += why_lines(text, pairs, _reasons_linear(first), members)
        lines.append(f"Kernels: vLLM {first.vllm_kernel or '-'}; selector {first.kernel or '-'}.")
        lines.append("")
        lines.append("Examples: " + "; ".join(f"`{m.scenario.label()}`" for m in members[:3])
                     + ("" if first.vllm_error == "" else
                        f". vLLM says: \"{first.vllm_error[:200]}\""))
        lines.append("")
    return "\n".join(lines)


def _reasons_linear(row):
    import linear_parity as lp
    d = row.decision
    q = row.scenario.quant
    names = {c.backend for c in d.candidates}
    name = lp.selector_name(row.vllm, q)
    if name not in names:
        name = lp.selector_name(row.scenario.requested, q)
    if name not in names:
        return []
    keep = {rule for rule, _ in (row.why[1] if row.why else ())}
    return [x for x in d.candidate(name).reasons if x.rule in keep]


def sweep_description() -> str:
    import sim
    caps = ", ".join(c for c in sim.CAPABILITIES if c)
    return (f"{len(sim.sweep())} scenarios: no GPU (vLLM's CPU platform) and SM {caps}; CUDA "
            f"{', '.join(sim.CUDAS)}; flashinfer-python {sim.FLASHINFER} present or absent; "
            f"native b12x {sim.B12X} on 12.x; MoE and linear; nvfp4 and nvfp4_w4a16; MoE "
            "activations " + ", ".join(f"{a}{'' if g else ' non-gated'}"
                                       for a, g in sim.MOE_LAYERS)
            + f"; EP {', '.join(map(str, sim.EPS))}; a SwiGLU clamp on gated silu; requested "
            "auto and every backend by name.")


RANDOM_HEADING = "## Seeded random sweeps of the whole space"


class RandomReport:
    """The four random families of one seed (tests/vllm/random_sweep.py), as one report."""

    def __init__(self) -> None:
        import linear_parity as lp
        import parity
        import random_sweep as rs
        self.seed = rs.seed()
        self.parts = {f: (lp.run if f == "linear" else parity.run)(rs.draw(f))
                      for f in rs.COUNTS}
        self.rows = [r for p in self.parts.values() for r in p.rows]
        self.differ = [r for p in self.parts.values() for r in p.differ]
        self.unexplained = [r for p in self.parts.values() for r in p.unexplained]

    def clusters(self):
        out = {}
        for family, rep in self.parts.items():
            for key, members in rep.clusters().items():
                out[(family,) + key] = members
        return out


def render_random(report) -> str:
    import parity
    import random_sweep as rs
    lines = [
        RANDOM_HEADING,
        "",
        "Beside the fixed grids above, `tests/vllm/test_parity_random.py` draws scenarios at "
        "random from the whole cross-product (tests/vllm/random_sweep.py: device, CUDA, "
        "FlashInfer, native b12x, vLLM's vendored triton_kernels and DeepGEMM, dtype, activation "
        "and gating, SwiGLU clamp, EP, DP x EP with each all2all backend, requested backend, "
        "VLLM_MOE_USE_DEEP_GEMM, VLLM_B12X_MOE_FP4_FORCE_A16, the checkpoint's quant method with "
        "its weight and activation scheme, the model type). FP8 layers get the QuantKeys their "
        "quant method's own code derives (tests/vllm/methods.py: compressed-tensors FP8 MoE "
        "passes a 1x128 activation key for per-tensor dynamic activations, `fp8` linear layers "
        "quantize dynamic activations per token where CUTLASS runs); a pair no selector scheme "
        "names is `not described`: the plugin leaves that layer to vLLM. CI draws a new seed "
        "each run (pytest's header names it; `SELECTOR_PARITY_SEED=<seed>` replays it). Not "
        "drawn yet: DP without EP (vLLM keeps dp_size > 1 there and its monolithic MXFP4 "
        "experts refuse it; selector's layer has no DP key)."
        " A class that only some seeds draw is explained in tests/vllm/linear_parity.py"
        " and pinned by a test of its own: block-FP8 linear on a vLLM build without its"
        " vendored DeepGEMM (seed 4242: SM 9.0 with FlashInfer, N 64 K 4096), where vLLM"
        " builds CutlassFp8BlockScaledMMKernel because"
        " FlashInferFp8DeepGEMMDynamicBlockScaledKernel needs its DeepGEMM fallback"
        " supported too (vLLM 0.32.0"
        " kernels/linear/scaled_mm/BlockScaledMMLinearKernel.py:172-190,"
        " scaled_mm/flashinfer.py:165-170, scaled_mm/deep_gemm.py:47-52) and with DeepGEMM"
        " builds the dynamic kernel selector names.",
        "",
        f"This report: `SELECTOR_PARITY_SEED={report.seed} {_venv()}/bin/python "
        "tools/vllm_parity.py --only random`.",
        "",
        "| random family | total | agree | differ | not described | differ without an "
        "explanation |",
        "|---|---|---|---|---|---|",
    ]
    for family, rep in report.parts.items():
        und = sum(isinstance(r.decision, parity.Undescribed) for r in rep.differ)
        lines.append(f"| random {family} | {len(rep.rows)} | {len(rep.rows) - len(rep.differ)} "
                     f"| {len(rep.differ)} | {und} | {len(rep.unexplained)} |")
    lines += ["", f"Counts per CI run: {', '.join(f'{f} {n}' for f, n in rs.COUNTS.items())}.",
              ""]
    for i, ((family, v, s, why), members) in enumerate(report.clusters().items(), 1):
        text = why[0] if why else "UNEXPLAINED"
        # vLLM's deciding line first (an explanation without one is refused: parity.specific)
        srcs = "; ".join(dict.fromkeys(parity.lines_of(members[:1]) +
                                       [src for _, src in (why[1] if why else ())]))
        lines.append(f"- R{i} ({family}, {len(members)}): vLLM {v}; selector {s}: {text}"
                     + (f" ({srcs[:300]})" if srcs else "") + f". Example: "
                     f"`{members[0].scenario.label()}`")
    return "\n".join(lines + [""])


# The report's sections, in file order: each its sweep, its rendering and its first line
SECTIONS = ("nvfp4", "fp8", "mx", "linear", "random")
RENDER = {"nvfp4": lambda report: render(report, sweep_description()),
          "fp8": lambda report: render_fp8(report), "mx": lambda report: render_mx(report),
          "linear": lambda report: render_linear(report), "random": render_random}
HEADS = {"fp8": FP8_MARK.strip("\n"), "mx": "## MXFP4 and MXFP8 MoE", "linear": LINEAR_HEADING,
         "random": RANDOM_HEADING}


def run_sweep(name: str):
    import parity
    import sim
    if name == "linear":
        import linear_parity
        return linear_parity.run()
    if name == "random":
        return RandomReport()
    if name == "fp8":
        return parity.run(sim.fp8_sweep())
    if name == "mx":
        return parity.run(sim.sweep_mx())
    return parity.run()  # the NVFP4 sweep


def split(text: str) -> dict:
    """The file's sections by name ('' where absent): each starts at its heading line."""
    padded = "\n" + text  # a file written by --out for a new report starts at its heading
    heads = [(at, n) for n, h in HEADS.items() for at in (padded.find("\n" + h),) if at >= 0]
    starts = sorted(heads + ([(0, "nvfp4")] if all(at > 0 for at, _ in heads) else []))
    out = {n: "" for n in SECTIONS}
    for k, (i, n) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(text)
        body = text[i:end].strip("\n")
        out[n] = body + "\n" if body else ""
    return out


def _summary(name: str, rep) -> None:
    for r in rep.unexplained:
        generic = (f" [refused: names no line of the installed vLLM, or generic rules only: "
                   f"{r.generic}]") if r.generic else ""
        print(f"UNEXPLAINED: {r.scenario.label()}: vLLM {r.vllm or 'error'} "
              f"({r.vllm_error[:120]}), selector {r.selected or 'refusal'}{generic}",
              file=sys.stderr)
    print(f"{name}: {len(rep.rows)} scenarios: {len(rep.rows) - len(rep.differ)} agree, "
          f"{len(rep.differ)} differ in {len(rep.clusters())} clusters, "
          f"{len(rep.unexplained)} unexplained")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report unexplained differences")
    ap.add_argument("--only", action="append", choices=SECTIONS,
                    help="run this sweep only (repeatable); keep the file's other sections")
    ap.add_argument("--out", type=Path, default=None,
                    help="write here instead of the release's report (its other sections are "
                    "the report's): two sweeps run side by side, then merged with --merge")
    ap.add_argument("--merge", type=Path, action="append", default=[],
                    help="take the --only sections from this file (written by --out) instead of "
                    "running their sweeps")
    args = ap.parse_args(argv)
    import logging
    logging.disable(logging.WARNING)
    report_path = _out()
    out = args.out or report_path
    old = report_path.read_text() if report_path.exists() else ""
    parts = split(old)
    bad = 0
    for path in args.merge:
        done = split(path.read_text())
        for name in args.only or SECTIONS:
            if done.get(name):
                parts[name] = done[name]
    for name in SECTIONS:
        if args.only and name not in args.only or args.merge:
            continue
        if name == "random":  # drawn when unset: printed before the sweep, so that the run
            import random_sweep as rs  # can be replayed (even one cut short)
            print(f"random: SELECTOR_PARITY_SEED={rs.seed()} (vLLM {_vllm_version()})",
                  flush=True)
        report = run_sweep(name)
        _summary(name, report)
        parts[name] = RENDER[name](report).strip("\n") + "\n"
        bad += len(report.unexplained)
    if not args.check:
        out.write_text("\n".join(parts[n] for n in SECTIONS if parts.get(n)))
        print(f"wrote {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
