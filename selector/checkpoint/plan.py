"""Explain a whole checkpoint: read its config.json and quantization description (never the
weights), derive every distinct quantized layer kind (NVFP4, FP8, MXFP8, MXFP4: any
`layer.quant` value), and decide each one.

Users think in checkpoints, not in `layer.*` keys. checkpoint/arch.py turns config.json into
projections with their layer fields, checkpoint/quant/ gives each one's scheme; here modules
are grouped into kinds (routed experts, shared experts, dense MLP, attention, Mamba, LM head),
each distinct set of fields is decided once, and the plan renders as text and JSON.
"""
from __future__ import annotations

import re
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from selector.checkpoint.arch import (
    Architecture,
    checkpoint_dtype,
    read_architecture,
    read_json,
)
from selector.checkpoint.plan_text import (
    _fields_text,
    _layers_text,
    _verdict,
    planned,
)
from selector.checkpoint.quant import Quantization, read_quantization
from selector.checkpoint.sglang_words import sglang_wording
from selector.checkpoint.trtllm_words import READ_ORDER as _TRTLLM_READ_ORDER
from selector.core.errors import SelectorError, bad_input
from selector.core.text import join_lines

if TYPE_CHECKING:  # pragma: no cover
    import os

    from selector.core.protocols import SelectorLike


@dataclass(frozen=True)
class Shape:
    """One distinct set of layer fields within a kind, and the decision for it."""
    projections: Tuple[str, ...]
    fields: Dict[str, Any]
    modules: int
    decision: Any  # selector.Decision
    problems: Tuple[str, ...] = ()  # what vLLM refuses of these modules' per-GPU split


@dataclass(frozen=True)
class Kind:
    component: str
    quant: Optional[str]  # a layer.quant value | None (unquantized, or no layer.quant value)
    why: str  # the rule of the quantization config that decided the scheme
    layers: Tuple[int, ...]
    modules: int
    shapes: Tuple[Shape, ...]
    warnings: Tuple[str, ...] = ()

    @property
    def op(self) -> str:
        return self.shapes[0].fields["op"] if self.shapes else "linear"

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.component, "op": self.op, "quant": self.quant, "why": self.why,
                "layers": list(self.layers), "modules": self.modules,
                "warnings": list(self.warnings),
                "shapes": [{"projections": list(s.projections), "modules": s.modules,
                            "fields": dict(s.fields), "problems": list(s.problems),
                            "decision": s.decision.to_dict() if s.decision else None}
                           for s in self.shapes]}


@dataclass(frozen=True)
class Plan:
    model_dir: str
    architecture: Architecture
    quantization: Quantization
    kinds: Tuple[Kind, ...]
    requested: Dict[str, str]  # op -> policy (auto or a backend)
    engine: str = ""  # the engine the plan is read for (its order of config files)

    @property
    def ok(self) -> bool:
        """Every layer a backend of the catalogue implements has a backend (a scheme no backend
        implements is left to the engine, as an unquantized layer is)."""
        return all(s.decision.selected or not planned(s.decision)
                   for k in self.kinds if k.quant for s in k.shapes) and not self.problems()

    def problems(self) -> List[str]:
        """'kind projections: problem' for every module split vLLM refuses."""
        return list(dict.fromkeys(f"{k.component} {'/'.join(s.projections)}: {p}"
                                  for k in self.kinds for s in k.shapes for p in s.problems))

    def decisions(self) -> List[Any]:
        return [s.decision for k in self.kinds if k.quant for s in k.shapes]

    def platform_json(self) -> Optional[Dict[str, Any]]:
        """The platform the plan's layers were decided on (JSON), None without a decision."""
        ds = self.decisions()
        return ds[0].platform_json() if ds else None

    def summary(self) -> str:
        """'61 layers: 58 MoE -> flashinfer_cutlass, 3 dense; 189 linear -> ...; ...'."""
        arch = self.architecture
        counts = Counter(arch.layer_types)
        moe = [k for k in self.kinds if k.op == "moe"]
        moe_sel = _selected_counts([(s, len(k.layers)) for k in moe if k.quant
                                    for s in k.shapes])
        parts = []
        for t in ("MoE", "dense", "Mamba", "attention"):
            if not counts[t]:
                continue
            text = f"{counts[t]} {t}"
            if t == "MoE" and moe_sel:
                text += " -> " + ", ".join(f"{sel}" if n == counts[t] else f"{n} {sel}"
                                           for sel, n in moe_sel.items())
            parts.append(text)
        head = f"{arch.num_layers} layers: {', '.join(parts)}"
        lin = _selected_counts([(s, s.modules) for k in self.kinds if k.quant and
                                k.op == "linear" for s in k.shapes])
        total = sum(lin.values())
        if total:
            head += f"; {total} linear -> " + ", ".join(
                sel if n == total else f"{n} {sel}" for sel, n in lin.items())
        off: Counter[str] = Counter()
        for k in self.kinds:
            if not k.quant:
                off[k.component] += k.modules
        if off:
            head += "; not planned: " + ", ".join(f"{n} {c}" for c, n in off.items())
        extra = []
        for op in ("moe", "linear"):
            opt = OrderedDict()
            for d in self.decisions():
                if d.layer.op == op:
                    for c in d.candidates:
                        if c.status == "opt_in":
                            opt[c.backend] = True
            extra += [f"{b} available with policy.{op}_backend={b}" for b in opt]
        return head + (f"; {'; '.join(extra)}" if extra else "")

    def to_dict(self) -> Dict[str, Any]:
        arch, q = self.architecture, self.quantization
        ds = self.decisions()
        return {"checkpoint": {"path": self.model_dir, "architecture": arch.name,
                               "model_type": arch.model_type, "num_layers": arch.num_layers,
                               "layer_types": dict(Counter(arch.layer_types)),
                               "quantization": {"format": q.format, "algo": q.algo,
                                                "source": q.source, "file": q.where,
                                                "excluded": list(q.excluded),
                                                "warnings": [_trtllm_warning(self.engine, w)
                                                             for w in q.warnings]},
                               "notes": [_engine_words(self.engine, n) for n in arch.notes]},
                "platform": ds[0].platform_json() if ds else None,
                "kinds": [k.to_dict() for k in self.kinds],
                "problems": self.problems(), "ok": self.ok, "summary": self.summary()}

    def __str__(self) -> str:
        return render_plan(self)


def _join_whys(whys: List[str]) -> str:
    """"excluded by exclude_modules 'a', 'b' and 59 more" from the reasons of each module."""
    head = re.match(r"^(.*?)'", whys[0])
    if head and all(w.startswith(head.group(1) + "'") for w in whys):
        items = [w[len(head.group(1)):] for w in whys]
        prefix = head.group(1)
    else:
        items, prefix = whys, ""
    return prefix + ", ".join(items[:2]) + (f" and {len(items) - 2} more" if len(items) > 2
                                            else "")


def _selected_counts(items: Sequence[Tuple[Shape, int]]) -> OrderedDict[str, int]:
    out: OrderedDict[str, int] = OrderedDict()
    for s, n in items:
        sel = s.decision.selected or ("none" if planned(s.decision) else
                                      f"{s.fields['quant']}: the engine decides")
        out[sel] = out.get(sel, 0) + n
    return out


# layer.* keys a checkpoint fixes for each of its layers, and their unset values: under --model a
# different value is refused (the checkpoint decides them; an ignored override would be silent)
CHECKPOINT_KEYS = {"op": "moe", "quant": "nvfp4", "activation": "silu", "act_and_mul": True,
                   "hidden_size": None, "intermediate_size": None, "num_experts": None,
                   "top_k": None, "swiglu_limit": None, "act_scale": None, "routing": None,
                   "quant_method": None, "dp_size": None}
# Quantization.format -> the vLLM quantization method (layer.quant_method) of its MoE layers
_METHODS = {"FP8": "fp8", "ModelOpt": "modelopt", "compressed-tensors": "compressed-tensors",
            "MXFP4": "mxfp4"}
# layer field -> the config.json key it comes from (for errors at select time)
_FIELD_KEYS = {"hidden_size": "hidden_size", "intermediate_size": "intermediate_size",
               "num_experts": "num_experts", "top_k": "num_experts_per_tok",
               "swiglu_limit": "swiglu_limit", "activation": "hidden_act", "dtype": "torch_dtype"}


def checkpoint_root(model_dir: Any) -> Path:
    """The checkpoint directory, or a SelectorError naming what is wrong with `model_dir`."""
    import os
    if isinstance(model_dir, bytes) or not isinstance(model_dir, (str, os.PathLike)):
        raise SelectorError(f"--model: a checkpoint directory must be a path (str or "
                            f"os.PathLike), not {type(model_dir).__name__}", key="--model")
    text = os.fspath(model_dir)
    if not isinstance(text, str):
        raise SelectorError("--model: a checkpoint directory must be a text path, not bytes",
                            key="--model")
    if not text.strip():
        raise bad_input("--model", text, "is empty: give a checkpoint directory (it holds "
                        "config.json)")
    if len(text) > 4096 or "\0" in text:
        raise bad_input("--model", text, "is not a usable path (too long, or a NUL byte)")
    try:
        root = Path(text).expanduser()
    except RuntimeError as exc:  # ~nosuchuser
        raise bad_input("--model", text, f"cannot be expanded: {exc}") from None
    try:
        is_dir = root.is_dir()
        has_config = is_dir and (root / "config.json").exists()
    except OSError as exc:
        raise bad_input("--model", text, f"cannot be read: {exc.strerror or exc}") from None
    if not is_dir:
        raise bad_input("--model", text, "is not a directory (a checkpoint directory holds "
                        "config.json)")
    if not has_config:
        raise bad_input("--model", text, "has no config.json")
    return root


def stack_vllm(selector: SelectorLike) -> Optional[Any]:
    """The stack's vLLM version (the platform's `vllm` package: a stack preset's pin, a
    platform.packages override or the installed one), or None."""
    return dict(selector.run_config.platform.packages).get("vllm")


def plan(selector: SelectorLike, model_dir: os.PathLike[str] | str,
         topology: Optional[Any] = None) -> Plan:
    """Every distinct quantized layer kind of a checkpoint, decided by `selector` (a Selector).

    Layer fields the checkpoint does not fix (ep_size, tp_size, num_tokens, all2all) come from
    the selector's config and overrides; the sizes are per GPU under its tp_size and ep_size.
    A `layer.*` key the checkpoint fixes (CHECKPOINT_KEYS) set to another value is refused.
    With `topology` (the launch plan's Topology) the sizes are those of one GPU under it: the
    dense layers' TP, the MoE layers' TP and EP.
    """
    root = checkpoint_root(model_dir)
    defaults = selector.run_config.layer
    for key, unset in CHECKPOINT_KEYS.items():
        if getattr(defaults, key) != unset:
            raise bad_input(f"layer.{key}", getattr(defaults, key), "cannot be combined with --model: "
                            "the checkpoint fixes each layer's "
                            f"{key}; drop the override (or the layer= preset that sets it)")
    config_path = root / "config.json"
    config = read_json(config_path)
    if topology is not None:
        arch = read_architecture(config, config_path, topology.linear_tp, topology.ep,
                                 topology.moe_tp)
    else:
        arch = read_architecture(config, config_path, defaults.tp_size, defaults.ep_size)
    quant = read_quantization(root, config, arch, stack_vllm(selector))
    dtype = checkpoint_dtype(config, config_path)
    if dtype and defaults.dtype not in (dtype, "bfloat16"):
        raise bad_input("layer.dtype", defaults.dtype, f"contradicts the checkpoint's "
                        f"dtype {dtype} ({config_path}); drop the override")
    groups = _group_modules(arch, quant, topology.linear_tp if topology is not None
                            else defaults.tp_size,
                            topology.dp if topology is not None else defaults.dp_size or 1,
                            selector.run_config.engine.name)
    kinds = []
    for (component, scheme), g in groups.items():
        shapes = []
        for fields, s in g["shapes"].items():
            f = dict(fields)
            f["dtype"] = dtype or defaults.dtype
            d = _select(selector, scheme, f, config_path) if scheme else None
            shapes.append(Shape(tuple(s["projections"]), {"quant": scheme, **f}, s["modules"],
                                d, tuple(s["problems"])))
        why = _join_whys(list(g["why"]))
        kinds.append(Kind(component, scheme, why, tuple(g["layers"]), g["modules"],
                          tuple(shapes), tuple(g["warnings"])))
    if not any(k.quant for k in kinds):
        whys = "; ".join(f"{k.component}: {k.why}" for k in kinds)
        raise SelectorError(f"{root}: no module of this {arch.name} checkpoint has a scheme "
                            f"selector plans (a layer.quant value) under {quant.describe()}: "
                            f"{whys}", where=str(root))
    requested = {}
    for d in (s.decision for k in kinds for s in k.shapes if s.decision):
        requested[d.layer.op] = d.requested
    return Plan(str(root), arch, quant, tuple(kinds), requested,
                selector.run_config.engine.name)


def _group_modules(arch: Architecture, quant: Quantization, tp: int = 1, dp: int = 1,
                   engine: str = ""
                   ) -> OrderedDict[Tuple[str, Optional[str]], Dict[str, Any]]:
    """The modules grouped by (component, scheme): layers, module counts, distinct field sets,
    and what the engine refuses of them (`tp`: the engine's tensor-parallel size; SGLang's own
    block-FP8 checks under engine=sglang, vLLM's otherwise)."""
    from selector.checkpoint.splits import REFINED, refined_block, scheme_problems, sglang_problems
    groups: OrderedDict[Tuple[str, Optional[str]], Dict[str, Any]] = OrderedDict()
    sglang = engine == "sglang"
    trtllm = engine == "trtllm"  # TensorRT-LLM's own block-FP8 MoE check, its words (issue 45)
    refines = quant.format != "compressed-tensors" and not sglang and not trtllm
    if trtllm:
        from selector.checkpoint.trtllm_words import trtllm_verdict
    for m in arch.modules:
        v = quant.verdict_of(m)
        if trtllm:  # where TensorRT-LLM reads the checkpoint otherwise than vLLM
            v = trtllm_verdict(m, v, quant)
        scheme = v.scheme
        why = v.why if v.other is None or v.other in v.why else f"{v.why}: {v.other}"
        why = sglang_wording(why) if sglang else _engine_words(engine, why)
        r = refined_block(m, scheme, refines)
        if r:
            scheme, why = None, REFINED.format(r=r, i=dict(m.fields)["intermediate_size"])
        g = groups.setdefault((m.component, scheme), {"layers": [], "modules": 0, "why": {},
                                                      "shapes": OrderedDict(), "warnings": {}})
        g["why"][why] = True
        if v.warning:
            g["warnings"][v.warning] = True
        if m.layer is not None and m.layer not in g["layers"]:
            g["layers"].append(m.layer)
        g["modules"] += 1
        fields = m.fields + ((("act_scale", v.act_scale),) if v.act_scale and scheme else ())
        if scheme and quant.format in _METHODS and (m.cls == "RoutedExperts" or (
                sglang and scheme in ("fp8_tensor", "fp8_tensor_dynamic"))):
            # SGLang's per-tensor FP8 linear GEMM is its quant method's (conf/engine/sglang.yaml)
            fields += (("quant_method", _METHODS[quant.format]),)
        if scheme and m.cls == "RoutedExperts" and dp > 1:
            fields += (("dp_size", dp),)
        shape = g["shapes"].setdefault(fields, {"projections": [], "modules": 0,
                                                  "problems": {}})
        if m.projection not in shape["projections"]:
            shape["projections"].append(m.projection)
        shape["modules"] += 1
        shape["problems"].update(dict.fromkeys(tuple(
            sglang_wording(x) if sglang else _engine_words(engine, x) for x in m.problems) + (
            sglang_problems(m, v.scheme, quant.format) if sglang else
            _trtllm_problems(m, v.scheme, tp, quant.format) if trtllm else
            scheme_problems(m, v.scheme, tp, r, quant.format))))
    return groups


def _engine_words(engine: str, text: str) -> str:
    """The reader's words as the plan's engine says them (SGLang's, TensorRT-LLM's; vLLM's
    otherwise)."""
    if engine == "sglang":
        return sglang_wording(text)
    if engine == "trtllm":
        from selector.checkpoint.trtllm_words import trtllm_wording
        return trtllm_wording(text)
    return text


def _trtllm_warning(engine: str, text: str) -> str:
    """A reader's warning in a TensorRT-LLM plan's words (its read order differs from vLLM's)."""
    return _engine_words(engine, text) if engine == "trtllm" else text


def _trtllm_problems(m: Any, scheme: Optional[str], tp: int, fmt: str) -> Tuple[str, ...]:
    """TensorRT-LLM's block-FP8 MoE check; the reader's other split rules in its words."""
    from selector.checkpoint.splits import scheme_problems
    from selector.checkpoint.trtllm_words import trtllm_problems, trtllm_wording
    if dict(m.fields)["op"] == "moe" and scheme == "fp8_block":
        return trtllm_problems(m, scheme)
    return tuple(trtllm_wording(x) for x in scheme_problems(m, scheme, tp, 0, fmt))


def _select(selector: SelectorLike, scheme: str, f: Dict[str, Any], config_path: Path) -> Any:
    try:
        return selector.select(quant=scheme, **f)
    except SelectorError as exc:
        key = str(exc.key or "").removeprefix("layer.")
        ckpt_key = _FIELD_KEYS.get(key)
        if ckpt_key is None:
            raise
        raise SelectorError(f"{config_path}: {ckpt_key}: the checkpoint's value gives "
                            f"layer.{key}={f.get(key)!r}, which is refused: {exc}",
                            key=ckpt_key, value=f.get(key), where=str(config_path)) from None


# ---------------------------------------------------------------------------------------------
# Text

READ_ORDER = {
    "": "vLLM's order: config.json quantization_config, then hf_quant_config.json",
    "sglang": "SGLang's order: config.json quantization_config (or compression_config), then "
              "hf_quant_config.json: SGLang 0.5.23 srt/configs/model_config.py:1727-1817 "
              "(ModelConfig._parse_quant_hf_config)",
    "trtllm": _TRTLLM_READ_ORDER}

def render_plan(p: Plan) -> str:
    import textwrap
    arch, q = p.architecture, p.quantization
    ds = p.decisions()
    lines = [f"checkpoint: {p.model_dir}",
             (f"model: {arch.name} ({arch.model_type}), {arch.num_layers} layers; "
              f"quantization: {q.describe()}"),
             (f"read: {q.where} ({READ_ORDER.get(p.engine, READ_ORDER[''])})"
              if p.engine in ("sglang", "trtllm")
              else f"read: {q.where} as vLLM {q.release} reads it ({READ_ORDER['']})")]
    for w in q.warnings:
        lines.append(f"warning: {_trtllm_warning(p.engine, w)}")
    if ds:
        first = str(ds[0]).splitlines()
        lines.append(next(ln for ln in first if ln.startswith("platform: ")))
    for n in arch.notes:
        lines.append(f"note: {_engine_words(p.engine, n)}")
    lines.append("")
    for k in p.kinds:
        where = _layers_text(k.layers)
        count = (f"{len(k.layers)} layer{'s' if len(k.layers) > 1 else ''} ({where})"
                 if k.layers else "1 module")
        mods = f", {k.modules} modules" if k.op == "linear" and k.layers else ""
        if not k.quant:
            lines.append(f"{k.component}: {count}{mods}: not planned, {k.why}")
            continue
        lines.append(f"{k.component}: {count}{mods}: {k.op} {k.quant} ({k.why})")
        for w in k.warnings:
            lines.extend(textwrap.wrap(f"warning: {w}", width=100, initial_indent="    ",
                                       subsequent_indent="      ", break_on_hyphens=False))
        # shapes with the same verdict are shown together
        by_verdict: OrderedDict[Tuple[str, ...], List[Shape]] = OrderedDict()
        for s in k.shapes:
            by_verdict.setdefault(tuple(_verdict(s.decision)), []).append(s)
        for verdict, shapes in by_verdict.items():
            shown = "; ".join(f"{'/'.join(s.projections)} {_fields_text(s.fields)}"
                              if s.fields["op"] == "linear" else _fields_text(s.fields)
                              for s in shapes)
            lines.extend(textwrap.wrap(shown, width=100, initial_indent="    ",
                                       subsequent_indent="      "))
            for v in verdict:
                lines.extend(textwrap.wrap(v, width=100, initial_indent="      ",
                                           subsequent_indent="        ",
                                           break_on_hyphens=False))
    lines.append("")
    lines.extend(textwrap.wrap(f"summary: {p.summary()}", width=100, subsequent_indent="  ",
                               break_on_hyphens=False))
    for problem in p.problems():
        lines.extend(textwrap.wrap(f"!! {problem}", width=100, subsequent_indent="   ",
                                   break_on_hyphens=False))
    if not p.ok and not p.problems():
        lines.append("some quantized layers have no usable backend: --format json lists every "
                     "reason")
    return join_lines(lines)  # every checkpoint-derived string escaped: one line stays one line
