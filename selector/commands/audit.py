"""`selector audit LOG --model DIR [OVERRIDE ...]`: what a running engine chose, beside the plan.

An engine names its choice in its start-up log: vLLM once per quant scheme at its default level
(the MoE oracles' "Using 'X' NvFp4 MoE backend out of potential backends: [...]", the linear
kernels' "Using <Kernel> for NVFP4 GEMM" and "Selected <Kernel> for <module>") and, at debug
level, every backend its oracle passed over and why; SGLang in its resolved server arguments
(`server_args={...}`) and in its model overrides ("Use X as MoE runner backend ..."); TensorRT-LLM
where its MoE factory falls back ("... Using CutlassFusedMoE instead."). Each line is read into a
`Seen` (op, the quant schemes it covers, the engine's backend name and kernel class), and every
layer kind of the plan for the same checkpoint and platform (the overrides of `explain --model`)
is judged: agree, differ (both answers), or not in the log.

Exit codes: 0 no layer kind differs and some agree (a kind the log does not name, as
TensorRT-LLM's linear layers, is reported, not failed); 1 some differ, or none is in the log; 2
bad input (an unreadable log, a log naming no engine's choice without `engine=`, a bad model).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from selector.core.engine_view import EngineView
from selector.core.errors import SelectorError
from selector.engines.vllm_flags import vllm_name

ENGINES = ("vllm", "sglang", "trtllm")
NVFP4 = ("nvfp4", "nvfp4_w4a16")
FP8 = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
MXFP4 = ("mxfp4", "mxfp4_w4a8", "mxfp4_w4a4")

# Where each line comes from: the released file and line that prints it.
VLLM_SOURCES = {
    "nvfp4_moe": "vLLM 0.32.0 model_executor/layers/fused_moe/oracle/nvfp4.py lines 240-243, "
                 "270, 314 (_make_log_backend, logger.info_once)",
    "nvfp4_moe_unsupported": "vLLM 0.32.0 model_executor/layers/fused_moe/oracle/nvfp4.py "
                             "lines 246-256, 317 (_make_log_unsupported, logger.debug_once)",
    "nvfp4_moe_none": "vLLM 0.32.0 model_executor/layers/fused_moe/oracle/nvfp4.py line 321 "
                      "(NotImplementedError: No NvFp4 MoE backend supports the deployment "
                      "configuration.)",
    "fp8_moe": "vLLM 0.32.0 model_executor/layers/fused_moe/oracle/fp8.py lines 415-420, 446, "
               "525 (_make_log_backend, logger.info_once)",
    "fp8_moe_none": "vLLM 0.32.0 model_executor/layers/fused_moe/oracle/fp8.py lines 535-539 "
                    "(select_fp8_moe_backend returns Fp8MoeBackend.NONE off CUDA and ROCm, "
                    "logging nothing at info), line 706 (ValueError: Unsupported FP8 MoE "
                    "backend: NONE, when the weights are converted)",
    "fp8_moe_unsupported": "vLLM 0.32.0 model_executor/layers/fused_moe/oracle/fp8.py lines "
                           "422-432, 528 (_make_log_unsupported, logger.debug_once)",
    "mxfp8_moe": "vLLM 0.32.0 model_executor/layers/fused_moe/oracle/mxfp8.py lines 126-129, "
                 "139 (logger.info_once)",
    "mxfp4_moe": "vLLM 0.32.0 model_executor/layers/fused_moe/oracle/mxfp4.py lines 540, 709, "
                 "718, 806 (_make_log_backend, logger.info_once)",
    "nvfp4_linear": "vLLM 0.32.0 model_executor/kernels/linear/__init__.py lines 1196, 1240 "
                    "(logger.info_once(\"Using %s for NVFP4 GEMM\"))",
    "linear_none": "vLLM 0.32.0 model_executor/kernels/linear/__init__.py lines 721, 986, 1032, "
                   "1244 (ValueError: Failed to find a kernel that can implement the "
                   "ScaledMM / MXFP8 / MXFP4 / NVFP4 linear layer)",
    "fp8_linear": "vLLM 0.32.0 model_executor/kernels/linear/__init__.py lines 758, 797 "
                  "(logger.info_once(\"Selected %s for %s\"))",
    "mx_linear": "vLLM 0.32.0 model_executor/kernels/linear/__init__.py lines 982, 1028 "
                 "(\"Using %s for MXFP8 GEMM\", \"Using %s for MXFP4 GEMM\")",
}
SGLANG_SOURCES = {
    "server_args": "SGLang 0.5.23 srt/entrypoints/engine.py lines 311, 1185 "
                   "(logger.info(f\"server_args={_server_args_for_logging(server_args)}\"): the "
                   "resolved values, srt/server_args.py resolved_dict)",
    "override": "SGLang 0.5.23 srt/arg_groups/overrides.py lines 826, 830, 1520 and "
                "srt/arg_groups/model_overrides/*.py (\"Use X as MoE runner backend ...\")",
}
TRTLLM_SOURCES = {
    "fallback": "TensorRT-LLM tensorrt_llm/_torch/modules/fused_moe/create_moe.py lines 42-78 "
                "(get_moe_cls: \"... Using CutlassFusedMoE instead.\"; main at 01f8de5)",
    "legacy": "TensorRT-LLM tensorrt_llm/_torch/modules/fused_moe/create_moe.py (create_moe: "
              "\"... Continuing with legacy MoE backend <class>.\"; main at 01f8de5)",
    "args": "TensorRT-LLM tensorrt_llm/llmapi/llm_args.py (MoeConfig.backend, printed in the "
            "LLM arguments as moe_config=MoeConfig(backend='X', ...))",
}
# TensorRT-LLM's MoE classes -> its moe_config.backend values (create_moe.py, get_moe_cls)
TRTLLM_CLASSES = {"CutlassFusedMoE": "CUTLASS", "TRTLLMGenFusedMoE": "TRTLLM",
                  "CuteDslFusedMoE": "CUTEDSL", "DeepGemmFusedMoE": "DEEPGEMM",
                  "TritonFusedMoE": "TRITON", "VanillaMoE": "VANILLA", "WideEPMoE": "WIDEEP",
                  "DenseGEMMFusedMoE": "DENSEGEMM"}
@dataclass
class Seen:
    """One choice an engine's log names."""
    engine: str
    op: str
    schemes: Tuple[str, ...]  # the quant schemes the line covers
    backend: Optional[str]  # the engine's name for it ('' : none runs the layer); None: unknown
    kernel: Optional[str]  # the kernel class, where the line names one
    line: int  # 1-based line number in the log
    text: str
    source: str
    module: Optional[str] = None  # vLLM's FP8 linear lines name the module

    def to_dict(self) -> Dict[str, Any]:
        return {"op": self.op, "schemes": list(self.schemes), "backend": self.backend,
                "kernel": self.kernel, "line": self.line, "text": self.text,
                "source": self.source, "module": self.module}


@dataclass
class Passed:
    """A backend the engine's oracle passed over (vLLM at debug level), and why."""
    op: str
    schemes: Tuple[str, ...]
    backend: str
    reason: str
    line: int


@dataclass
class EngineLog:
    engine: Optional[str]
    seen: List[Seen] = field(default_factory=list)
    passed: List[Passed] = field(default_factory=list)
    debug: bool = False  # the log holds vLLM's debug-level lines


# -- reading a log -------------------------------------------------------------------------------
_V_NVFP4_MOE = re.compile(r"Using '([A-Z0-9_]+)' NvFp4 MoE backend out of potential backends")
_V_FP8_MOE = re.compile(r"Using '?([A-Z0-9_]+)'? Fp8 MoE backend out of potential backends")
_V_MXFP8_MOE = re.compile(r"Using '([A-Z0-9_]+)' MxFp8 MoE backend")
_V_MXFP4_MOE = re.compile(r"Using '?([A-Z0-9_]+)'? Mxfp4 MoE backend out of potential backends",
                          re.I)
_V_UNSUPPORTED = re.compile(r"(NvFp4|FP8|Mxfp4) MoE backend '?([A-Z0-9_]+)'? does not support "
                            r"the deployment configuration(?: since (.*?))?\.?$", re.I)
_V_NONE = re.compile(r"No (NvFp4|FP8|Fp8|Mxfp4) MoE backend supports the deployment", re.I)
_V_FP8_NONE = re.compile(r"Unsupported FP8 MoE backend: ([A-Z0-9_]+)")
_V_LINEAR_NONE = re.compile(r"Failed to find a kernel that can implement the "
                            r"(NVFP4|MXFP8|MXFP4|ScaledMM) linear layer")
_V_LINEAR = re.compile(r"Using (\w+) for (NVFP4|MXFP8|MXFP4) GEMM")
_V_SELECTED = re.compile(r"Selected (\w+) for ([\w.]+)")
_V_DEBUG = re.compile(r"\bDEBUG\b")
_V_MARK = re.compile(r"(INFO|DEBUG|WARNING) \d\d-\d\d [\d:]+ \[[\w./]+:\d+\]")
_S_ARGS = re.compile(r"server_args=")
_S_FIELD = {"moe": re.compile(r"['\"]?\bmoe_runner_backend['\"]?\s*[:=]\s*['\"]([\w.-]+)['\"]"),
            "fp4": re.compile(r"['\"]?\bfp4_gemm_runner_backend['\"]?\s*[:=]\s*['\"]([\w.-]+)['\"]"),
            "fp8": re.compile(r"['\"]?\bfp8_gemm_runner_backend['\"]?\s*[:=]\s*['\"]([\w.-]+)['\"]")}
_S_OVERRIDE = re.compile(r"Use (\w+) as (MoE runner|FP4 GEMM runner|FP8 GEMM) backend")
_T_FALLBACK = re.compile(r"Using (\w+FusedMoE|VanillaMoE|WideEPMoE) instead")
_T_LEGACY = re.compile(r"Continuing with legacy MoE backend (\w+)")
_T_ARGS = re.compile(r"MoeConfig\(backend=['\"](\w+)['\"]")
_T_MARK = re.compile(r"\[TRT-LLM\]|tensorrt_llm|TensorRT-LLM", re.I)


def _is_selector(text: str) -> bool:
    """selector's own lines (the plugin's decisions and its observe lines) are not the engine's."""
    return "selector:" in text or "selector refuses" in text


def _moe_family(word: str) -> Tuple[str, ...]:
    return {"nvfp4": NVFP4, "fp8": FP8, "mxfp4": MXFP4}[word.lower()]


def read_log(text: str) -> EngineLog:
    """Every engine choice the log names, with its line; the engine is the one whose lines it
    holds (None when it holds none)."""
    log = EngineLog(engine=None)
    found: Dict[str, int] = {e: 0 for e in ENGINES}
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line or _is_selector(line):
            continue
        if _V_DEBUG.search(line) and _V_MARK.search(line):
            log.debug = True
        s = _vllm_line(line, i, log)
        if s is not None:
            found["vllm"] += 1
            log.seen.append(s)
            continue
        got = _sglang_line(line, i)
        if got:
            found["sglang"] += 1
            log.seen.extend(got)
            continue
        t = _trtllm_line(line, i)
        if t is not None:
            found["trtllm"] += 1
            log.seen.append(t)
    best = max(ENGINES, key=lambda e: found[e])
    if found[best]:
        log.engine = best
        log.seen = [s for s in log.seen if s.engine == best]
    return log


def _vllm_line(line: str, i: int, log: EngineLog) -> Optional[Seen]:
    def seen(op: str, schemes: Tuple[str, ...], backend: Optional[str], kernel: Optional[str],
             source: str, module: Optional[str] = None) -> Seen:
        return Seen("vllm", op, schemes, backend, kernel, i, line.strip(), VLLM_SOURCES[source],
                    module)
    if m := _V_NVFP4_MOE.search(line):
        return seen("moe", NVFP4, vllm_name(m.group(1)), None, "nvfp4_moe")
    if m := _V_FP8_MOE.search(line):
        return seen("moe", FP8, vllm_name(m.group(1)), None, "fp8_moe")
    if m := _V_MXFP8_MOE.search(line):
        return seen("moe", ("mxfp8",), vllm_name(m.group(1)), None, "mxfp8_moe")
    if m := _V_MXFP4_MOE.search(line):
        return seen("moe", MXFP4, vllm_name(m.group(1)), None, "mxfp4_moe")
    if m := _V_UNSUPPORTED.search(line):
        log.passed.append(Passed("moe", _moe_family(m.group(1)), vllm_name(m.group(2)),
                                 (m.group(3) or "").strip(), i))
        return None
    if m := _V_NONE.search(line):
        return seen("moe", _moe_family(m.group(1)), "", None,
                    "nvfp4_moe_none" if m.group(1).lower() == "nvfp4" else "fp8_moe_none")
    if m := _V_FP8_NONE.search(line):
        return seen("moe", FP8, vllm_name(m.group(1)), None, "fp8_moe_none")
    if m := _V_LINEAR_NONE.search(line):
        failed = {"NVFP4": NVFP4, "MXFP8": ("mxfp8",), "MXFP4": MXFP4, "ScaledMM": FP8}
        return seen("linear", failed[m.group(1)], "", None, "linear_none")
    if m := _V_LINEAR.search(line):
        schemes = {"NVFP4": NVFP4, "MXFP8": ("mxfp8",), "MXFP4": MXFP4}[m.group(2)]
        return seen("linear", schemes, None, m.group(1),
                    "nvfp4_linear" if m.group(2) == "NVFP4" else "mx_linear")
    if (m := _V_SELECTED.search(line)) and m.group(1).endswith("Kernel"):
        return seen("linear", FP8, None, m.group(1), "fp8_linear", m.group(2))
    return None


def _sglang_line(line: str, i: int) -> List[Seen]:
    out: List[Seen] = []
    if _S_ARGS.search(line):
        for key, schemes, op in (("moe", NVFP4 + FP8 + MXFP4 + ("mxfp8",), "moe"),
                                 ("fp4", NVFP4, "linear"), ("fp8", ("fp8_block", "mxfp8"),
                                                            "linear")):
            m = _S_FIELD[key].search(line)
            if m and m.group(1) != "auto":
                out.append(Seen("sglang", op, schemes, m.group(1), None, i, _clip(line),
                                SGLANG_SOURCES["server_args"]))
        return out
    if m := _S_OVERRIDE.search(line):
        kind = m.group(2)
        op, schemes = (("moe", NVFP4 + FP8 + MXFP4 + ("mxfp8",)) if kind == "MoE runner" else
                       ("linear", NVFP4) if kind == "FP4 GEMM runner" else
                       ("linear", ("fp8_block", "mxfp8")))
        out.append(Seen("sglang", op, schemes, m.group(1), None, i, line.strip(),
                        SGLANG_SOURCES["override"]))
    return out


def _trtllm_line(line: str, i: int) -> Optional[Seen]:
    every = NVFP4 + FP8 + MXFP4 + ("mxfp8",)
    if m := _T_FALLBACK.search(line) or _T_LEGACY.search(line):
        cls = m.group(1)
        src = "legacy" if "legacy" in line else "fallback"
        return Seen("trtllm", "moe", every, TRTLLM_CLASSES.get(cls, cls), cls, i, line.strip(),
                    TRTLLM_SOURCES[src])
    if (m := _T_ARGS.search(line)) and m.group(1).upper() != "AUTO":
        return Seen("trtllm", "moe", every, m.group(1).upper(), None, i, _clip(line),
                    TRTLLM_SOURCES["args"])
    return None


def _clip(line: str, limit: int = 240) -> str:
    line = line.strip()
    return line if len(line) <= limit else line[:limit - 3] + "..."


# -- judging the plan ----------------------------------------------------------------------------
def _expected_kernels(engine: Optional[EngineView], op: str, quant: str) -> Tuple[str, ...]:
    from selector.engines.vllm_flags import vllm_kernels
    kernels = vllm_kernels(op, quant, engine.backend if engine is not None else None)
    own = engine.kernel if engine is not None else None
    return tuple(dict.fromkeys(([own] if own else []) + list(kernels)))


def _matches(s: Seen, expected: Optional[str], kernels: Sequence[str]) -> bool:
    if s.backend is not None:
        return (s.backend or None) == (expected or None) or \
            (s.backend or "").upper() == (expected or "").upper() != ""
    return s.kernel is not None and s.kernel in kernels


def _answer(s: Seen) -> str:
    if s.backend == "":
        return "none (the engine found no backend)"
    parts = [p for p in (s.backend, s.kernel) if p]
    return " / ".join(parts)


def judge(plan: Any, log: EngineLog, catalogue: Any) -> List[Dict[str, Any]]:
    """One row per planned layer kind (and per distinct shape in it): the verdict."""
    from selector.checkpoint.plan_text import planned
    rows: List[Dict[str, Any]] = []
    for k in plan.kinds:
        if not k.quant:
            continue
        for shape in k.shapes:
            d = shape.decision
            if not planned(d):
                continue
            eng = d.engine
            expected = (eng.backend if eng is not None else None) if d.selected else ""
            kernels = _expected_kernels(eng, k.op, k.quant) if d.selected else ()
            seen = [s for s in log.seen if s.op == k.op and k.quant in s.schemes]
            mods = [s for s in seen if s.module]
            mine = [s for s in mods if s.module and s.module.rsplit(".", 1)[-1]
                    in shape.projections]
            if mods and mine:
                seen = [s for s in seen if not s.module] + mine
            passed = [p for p in log.passed if p.op == k.op and k.quant in p.schemes]
            if not seen:
                verdict = "not_in_log"
            elif any(_matches(s, expected, kernels) for s in seen):
                verdict = "agree"
            else:
                verdict = "differ"
            rows.append({
                "kind": k.component, "projections": list(shape.projections), "op": k.op,
                "quant": k.quant, "verdict": verdict,
                "selector": {"backend": d.selected, "engine_backend": expected or None,
                             "kernels": list(kernels), "outcome": d.outcome,
                             "reason": d.summary()},
                "engine": [_answer(s) for s in seen],
                "lines": [s.to_dict() for s in seen],
                "engine_passed_over": [{"backend": p.backend, "reason": p.reason,
                                        "line": p.line,
                                        "selector_status": _status(catalogue, k.op, p.backend, d)}
                                       for p in passed],
            })
    return rows


_STATUS_ORDER = ("selected", "eligible", "opt_in", "rejected", "not_applicable")


def _status(catalogue: Any, op: str, engine_name: str, d: Any) -> Optional[str]:
    """selector's verdict on the backend vLLM calls `engine_name` (None: not modelled); where
    vLLM's name covers several of selector's backends, the most usable one's."""
    names = [b.name for b in catalogue.backends.get(op, ())
             if (e := dict(b.engines).get("vllm")) is not None and e.name == engine_name]
    found = [str(c.status) for c in d.candidates if c.backend in names]
    return min(found, key=_STATUS_ORDER.index) if found else None


def audit(log_path: str, model: str, overrides: Sequence[str],
          config_dirs: Sequence[str] = ()) -> Dict[str, Any]:
    """The audit report (the JSON of --format json)."""
    from selector.api import load
    path = Path(log_path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SelectorError(f"LOG: cannot read {log_path!r}: {exc.strerror or exc}",
                            key="LOG") from None
    log = read_log(text)
    asked = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == "engine"]
    engine = asked[-1] if asked else log.engine
    if engine is None:
        raise SelectorError(f"LOG: {log_path!r} names no backend choice of vLLM, SGLang or "
                            "TensorRT-LLM (vLLM: its start-up log, at its default level or "
                            "debug; SGLang: the server_args= line; TensorRT-LLM: its MoE "
                            "backend lines); pass engine=vllm|sglang|trtllm to audit it anyway",
                            key="LOG", value=log_path)
    if engine not in ENGINES:
        from selector.core.errors import bad_value
        raise bad_value("engine", engine, ENGINES, what="engine to audit")
    if log.engine not in (None, engine):
        log.seen = []  # the log is another engine's: nothing of `engine` is in it
    extra = [] if asked else [f"engine={engine}"]
    sel = load(list(overrides) + extra, config_dirs=list(config_dirs))
    plan = sel.plan(model)
    rows = judge(plan, log, sel.catalogue)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("agree", "differ", "not_in_log")}
    return {"log": str(path), "engine": engine, "log_engine": log.engine, "debug": log.debug,
            "model": str(model), "platform": plan.platform_json(), "kinds": rows,
            "counts": counts, "ok": counts["differ"] == 0 and counts["agree"] > 0}


def render(report: Dict[str, Any]) -> str:
    c = report["counts"]
    out = [f"audit: {report['log']} ({report['engine']}"
           f"{', debug level' if report['debug'] else ''}) against the plan for "
           f"{report['model']}: {len(report['kinds'])} layer kinds, {c['agree']} agree, "
           f"{c['differ']} differ, {c['not_in_log']} not in the log"]
    for r in report["kinds"]:
        s = r["selector"]
        mine = s["engine_backend"] or (s["backend"] or "none")
        head = f"  {r['kind']} {'/'.join(r['projections'])} ({r['op']} {r['quant']}): "
        if r["verdict"] == "agree":
            out.append(head + f"agree: {mine} ({'; '.join(r['engine'])})")
        elif r["verdict"] == "differ":
            out.append(head + f"differ: the engine ran {'; '.join(r['engine'])}, selector "
                       f"plans {mine} ({s['backend'] or s['outcome']})")
            for ln in r["lines"]:
                out.append(f"      log line {ln['line']}: {ln['text']}")
            out.append(f"      selector: {s['reason']}")
        else:
            out.append(head + f"not in the log (selector plans {mine})")
        for p in r["engine_passed_over"]:
            why = f" since {p['reason']}" if p["reason"] else ""
            out.append(f"      the engine passed over {p['backend']}{why} (line {p['line']}; "
                       f"selector: {p['selector_status'] or 'not modelled'})")
    return "\n".join(out)


def run_audit(log_path: str, model: Optional[str], overrides: Sequence[str],
              config_dirs: Sequence[str], fmt: str) -> int:
    import json
    import sys
    if model is None:
        raise SelectorError("--model: audit needs the checkpoint directory the engine ran "
                            "(selector plans the same checkpoint and compares)", key="--model")
    report = audit(log_path, model, overrides, config_dirs)
    if fmt == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(render(report) + "\n")
    return 0 if report["ok"] else 1
