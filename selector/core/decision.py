"""A decision for one layer: the JSON object of docs/interface.md and its text rendering."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple, TypeVar

from selector.core.engine_view import EngineView
from selector.core.layer import make_layer
from selector.core.notes import Note, text
from selector.core.rules import Reason
from selector.core.schema import USABLE, Layer, Status
from selector.core.text import join_lines, printable, wrap

WRAP = 100  # text width of the rendered explanation
# The text table reads at a glance: the selected backend first, then what else could run, then
# the rejected ones with their reasons (the JSON keeps the preference order).
_TEXT_ORDER = {s: i for i, s in enumerate(Status)}


class Candidate(NamedTuple):
    backend: str
    status: Status
    reasons: Tuple[Reason, ...]
    entry_point: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"backend": self.backend, "status": str(self.status),
                "reasons": [r.to_dict() for r in self.reasons]}


OUTCOMES = ("selected", "refused_explicit", "unsupported_layer", "nothing_fits")


class _Named(Protocol):
    @property
    def backend(self) -> str: ...


NamedT = TypeVar("NamedT", bound=_Named)


def find_candidate(candidates: Iterable[NamedT], backend: str,
                   layer: Layer | Mapping[str, Any]) -> NamedT:
    """The candidate named `backend` (of a Decision or an AgreedDecision); KeyError naming the
    layer's op when the op has no such backend."""
    for c in candidates:
        if c.backend == backend:
            return c
    op = layer.op if isinstance(layer, Layer) else layer.get("op")
    raise KeyError(f"no backend {backend!r} for op {op!r}")


@dataclass(frozen=True)
class Decision:
    """The decision for one layer.

    layer: what was decided for (a schema.Layer; given as a mapping, it is validated into one);
    platform: what it was decided on (the JSON object). requested: the policy's request
    for this op: "auto", a backend name, or an ordered list joined by ",". selected: the chosen
    backend, or None; `outcome` says why None. candidates: every backend of the op with status
    and every failed rule, in preference order; `candidate(name)` finds one (KeyError if the op
    has no such backend). note_data: how the choice was made, as structured notes
    (selector.core.notes: kind, severity, backend, data); `notes` is their text, `hint` the text of
    a `no_packages` note (a platform that describes no software).
    """
    layer: Layer
    platform: Dict[str, Any]
    requested: str
    selected: Optional[str]
    candidates: Tuple[Candidate, ...]
    note_data: Tuple[Note, ...]
    platform_label: str = ""
    warnings: Tuple[Tuple[str, Reason], ...] = ()  # (backend, reason) of warning-level rules
    engine: Optional[EngineView] = None  # engine=vllm|sglang: its name, kernel and flags

    def __post_init__(self) -> None:
        if not isinstance(self.layer, Layer):  # a mapping (a test's, a JSON object's)
            object.__setattr__(self, "layer", make_layer(self.layer))

    # -- notes -------------------------------------------------------------------------------
    @cached_property
    def notes(self) -> Tuple[str, ...]:
        """The notes in words (the hint and the guard apart): sentences on how the choice was
        made."""
        return tuple(text(n) for n in self.note_data
                     if n.kind not in ("no_packages", "unproven_release"))

    @property
    def hint(self) -> str:
        """One line when the platform describes no software, else ''."""
        return next((text(n) for n in self.note_data if n.kind == "no_packages"), "")

    @property
    def guard(self) -> str:
        """One line when the platform's engine or library is newer than the newest release
        selector has proven ("answers proven up to vLLM 0.34.0; vllm 0.35.0 is installed"),
        else ''."""
        return next((text(n) for n in self.note_data if n.kind == "unproven_release"), "")

    def notes_of(self, kind: str) -> Tuple[Note, ...]:
        """The structured notes of one kind (selector.core.notes.NOTE_KINDS)."""
        return tuple(n for n in self.note_data if n.kind == kind)

    @property
    def marks(self) -> Tuple[str, ...]:
        """What the one-line form flags beside the outcome: 'fallback' (policy.strict=false
        replaced a refused explicit backend) and 'warning' (a warning-severity note about the
        selected backend)."""
        out = []
        if self.notes_of("fallback"):
            out.append("fallback")
        if self.selected is not None and any(n.severity == "warning" and
                                             n.backend == self.selected for n in self.note_data):
            out.append("warning")
        return tuple(out)

    # -- lookups -------------------------------------------------------------------------------
    def candidate(self, backend: str) -> Candidate:
        """The candidate named `backend` (its status, failed rules, entry point)."""
        return find_candidate(self.candidates, backend, self.layer)

    @property
    def entry_point(self) -> Optional[str]:
        """The selected backend's implementation ('module:Class'), or None."""
        return self.candidate(self.selected).entry_point if self.selected else None

    @property
    def ok(self) -> bool:
        """True when a backend was selected (the CLI's exit code 0)."""
        return self.selected is not None

    @property
    def outcome(self) -> str:
        """Why `selected` is what it is, machine-readable: 'selected'; 'refused_explicit' (a
        requested backend fails its rules and policy.strict refuses a fallback);
        'unsupported_layer' (no backend implements the layer's quant scheme, e.g. an
        unquantized layer); 'nothing_fits' (automatic selection found no usable backend,
        also after a fallback under policy.strict=false)."""
        if self.selected is not None:
            return "selected"
        if self.notes_of("request_refused"):
            return "refused_explicit"
        if all(c.status == Status.NOT_APPLICABLE for c in self.candidates):
            return "unsupported_layer"
        return "nothing_fits"

    def instantiate(self, **options: Any) -> Any:
        """The selected backend's object: its entry-point class built with this decision (so
        its gate does not decide again; the class learns its backend name from it) and the
        whole layer, plus `options` (the class's constructor keywords, e.g. compute_dtype,
        fold_mode; a layer key among them overrides the layer's). Raises SelectorError when
        nothing was selected, naming the outcome."""
        from selector.core.errors import SelectorError
        if self.selected is None:
            raise SelectorError(f"nothing to instantiate: outcome {self.outcome} "
                                f"({self.notes[0] if self.notes else self.summary()})")
        ep = self.entry_point
        if not ep:
            raise SelectorError(f"backend {self.selected} declares no entry_point")
        from selector.core.entry_points import load_entry_point  # only modules selector allows
        cls = load_entry_point(ep, f"catalogue.{self.layer.op}.{self.selected}.entry_point")
        given = self.layer.to_dict()  # the backends take the layer as its JSON object
        layer = {**given, **{k: v for k, v in options.items() if k in given}}
        rest = {k: v for k, v in options.items() if k not in given}
        return cls(decision=self, layer=layer, **rest)

    # -- JSON ------------------------------------------------------------------------------------
    def platform_json(self) -> Dict[str, Any]:
        """The `platform` object of the decision's JSON (a copy)."""
        out: Dict[str, Any] = json.loads(json.dumps(self.platform))
        return out

    def to_dict(self) -> Dict[str, Any]:
        out = {"layer": self.layer.to_dict(), "platform": self.platform_json(),
               "requested": self.requested, "selected": self.selected,
               "candidates": [c.to_dict() for c in self.candidates],
               "notes": [text(n) for n in self.note_data],
               "notes_data": [n.to_dict() for n in self.note_data],
               "summary": self.summary(), "entry_point": self.entry_point,
               "outcome": self.outcome}
        if self.guard:
            out["guard"] = self.guard
        if self.engine is not None:
            out["engine"] = self.engine.to_dict()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    # -- text ------------------------------------------------------------------------------------
    def summary(self) -> str:
        """Kubernetes-style: '1/8 backends usable: 3 need SM 10.x, 2 need flashinfer ...'."""
        total = len(self.candidates)
        usable = [c for c in self.candidates if c.status in USABLE]
        opt = sum(1 for c in usable if c.status == Status.OPT_IN)
        needs: Counter[str] = Counter()
        for c in self.candidates:
            if c.status == Status.OPT_IN:
                continue
            for need in dict.fromkeys(r.need for r in c.reasons if r.severity == "error"):
                needs[need] += 1
        head = f"{len(usable)}/{total} backends usable"
        if opt:
            head += f" ({opt} opt-in only)"
        if not needs:
            return head
        parts = [f"{n} {need}" for need, n in sorted(needs.items(), key=lambda x: (-x[1], x[0]))]
        return f"{head}: {', '.join(parts)}"

    def log_line(self) -> str:
        """One line an engine can keep per decision: the layer's distinguishing fields (no
        MoE-only field on a linear layer), the outcome and its marks (`fallback`, `warning`:
        Decision.marks), and for a refusal or a fallback what was requested and its first
        failing rule, for a warning the first warning about the selected backend."""
        lay = self.layer
        shown = [(k, getattr(lay, k)) for k in _LOG_KEYS[lay.op]]
        fields = " ".join(f"{k}={v}" for k, v in shown
                          if v is not None and not (k in _LOG_DEFAULTS and v == _LOG_DEFAULTS[k]))
        marks = self.marks
        head = (f"selector: {lay.op} {fields} -> {self.selected or 'none'} "
                f"[{', '.join((self.outcome,) + marks)}]")
        refused = self.notes_of("request_refused") or self.notes_of("fallback")
        if refused:
            first = self.candidate(str(refused[0].backend))
            r = first.reasons[0]
            return printable(f"{head} requested {self.requested}: {first.backend} [{r.rule}] "
                             f"{r.message}")  # file- and plugin-given text: one line stays one
        if "warning" in marks:
            w = next(n for n in self.note_data
                     if n.severity == "warning" and n.backend == self.selected)
            return printable(f"{head} {text(w)}")
        return printable(f"{head} ({self.summary()})")

    def __str__(self) -> str:
        return render_text(self)


_LOG_KEYS = {"moe": ("quant", "activation", "act_and_mul", "dtype", "hidden_size",
                     "intermediate_size", "num_experts", "top_k", "ep_size", "tp_size",
                     "swiglu_limit", "all2all", "num_tokens"),
             "linear": ("quant", "dtype", "hidden_size", "intermediate_size", "tp_size",
                        "num_tokens")}
_LOG_DEFAULTS = {"ep_size": 1, "tp_size": 1}


def render_line(d: Decision) -> str:
    """`--format line`: one line per decision (the log line)."""
    return d.log_line()


def render_text(d: Decision) -> str:
    lay, plat = d.layer, d.platform
    gating = "" if lay.op == "linear" else (", gated" if lay.act_and_mul else ", non-gated")
    shape = ", ".join(f"{k} {v}" for k in ("hidden_size", "intermediate_size", "num_experts",
                                           "top_k", "num_tokens") if (v := getattr(lay, k)))
    extra = []
    if lay.ep_size > 1 or lay.tp_size > 1:
        extra.append(f"ep {lay.ep_size}, tp {lay.tp_size}")
    if lay.swiglu_limit is not None:
        extra.append(f"swiglu_limit {lay.swiglu_limit}")
    act = "" if lay.op == "linear" else f", {lay.activation}"
    desc = f"{lay.op} layer: {lay.quant}{act}{gating}, {lay.dtype}"
    desc += "".join(f", {e}" for e in extra) + (f" ({shape})" if shape else "")
    cap = f"SM {plat['capability']}" if plat["capability"] else "no GPU"
    cuda = f"CUDA {plat['cuda']}" if plat["cuda"] else "no CUDA"
    pk = plat["packages"]
    shown = ", ".join(f"{n} {v}" for n, v in pk.items() if v is not None) or "no kernel packages"
    lines = [desc,
             f"platform: {d.platform_label or plat['source']} ({cap}, {cuda}); {shown}"]
    if d.guard:
        lines.append(f"!! {d.guard}")  # one line, unwrapped: a log search finds it whole
    if d.hint:
        lines.extend(wrap(f"!! {d.hint}", width=WRAP, subsequent_indent="   "))
    lines.append(f"requested: {d.requested}")
    if d.selected:
        ep = d.entry_point
        lines.append(f"selected: {d.selected}" + (f"  -> {ep}" if ep else ""))
    else:
        lines.append("selected: none")
    if d.engine is not None and d.selected:
        kernel = d.engine.kernel
        lines.append(f"{d.engine.label} flags: {d.engine.command_line()}" +
                     (f"; runs {kernel} ({d.engine.scheme})" if kernel else ""))
    lines.append("")
    lines += candidate_table(d.candidates, "passes every rule")
    lines.append("")
    lines.extend(wrap(f"summary: {d.summary()}", width=WRAP, subsequent_indent="  "))
    if d.notes:
        lines.append("notes:")
        for n in d.notes:
            lines.extend(wrap(n, width=WRAP, initial_indent="  - ",
                                       subsequent_indent="    ", break_on_hyphens=False))
    return join_lines(lines)


def candidate_table(candidates: Sequence[Any], empty: str) -> List[str]:
    """The backend / status / why table of a decision's text (one rank's or an agreed one):
    selected first, then eligible, opt-in, rejected, not applicable; `empty` where a usable
    candidate has no reason to show."""
    # backends that do not implement the layer's scheme at all share one row: an NVFP4 layer
    # is not helped by five FP8/MX rows (the JSON and `--why NAME` keep each one)
    other = [c for c in candidates if c.status == Status.NOT_APPLICABLE and c.reasons
             and all(r.rule == "quant" for r in c.reasons)]
    if len(other) < 2:
        other = []
    width = max([len(c.backend) for c in candidates if c not in other] + [7]
                + ([len(f"({len(other)} others)")] if other else []))
    pad = " " * (width + 20)
    lines = [f"  {'backend'.ljust(width)}  {'status'.ljust(14)}  why"]
    for c in sorted(candidates, key=lambda c: _TEXT_ORDER[Status(c.status)]):  # stable
        if c in other:
            if c is other[0]:
                first = c.reasons[0]
                sources = {r.source for o in other for r in o.reasons}
                src = f" ({first.source})" if len(sources) == 1 else ""
                head = (f"  {f'({len(other)} others)'.ljust(width)}  "
                        f"{str(Status.NOT_APPLICABLE.value).ljust(14)}  ")
                lines.extend(wrap(
                    f"[{first.rule}] {first.need}: {', '.join(o.backend for o in other)}{src}; "
                    "--why NAME shows one", width=max(WRAP, len(pad) + 60), initial_indent=head,
                    subsequent_indent=pad + "  ", break_on_hyphens=False, break_long_words=False))
            continue
        head = f"  {c.backend.ljust(width)}  {str(Status(c.status).value).ljust(14)}  "
        if not c.reasons:
            lines.append(head + (empty if c.status in (Status.SELECTED, Status.ELIGIBLE) else ""))
            continue
        for r in c.reasons:
            lines.extend(wrap(f"[{r.rule}] {r.message} ({r.source})",
                                       width=max(WRAP, len(pad) + 60), initial_indent=head,
                                       subsequent_indent=pad + "  ", break_on_hyphens=False,
                                       break_long_words=False))
            head = pad
    return lines
