"""Notes are data: what the resolver says about how a choice was made, as structured records.

The resolver returns `Note(kind, severity, backend, data)` records; this module is the one
place that turns them into words (`text`), and the text, line and JSON renderers of a decision
use it. An engine or a script reads the structure (`Decision.note_data`, JSON `notes_data`);
`notes` (a list of strings) is its rendering.

Severities (documented in docs/architecture.md):
- `info`: how the choice was made (preference, opt-in, a request that does not apply to the
  layer, the platform's detection);
- `warning`: the choice stands but deserves attention: a warning-level rule of a backend (a
  known issue that is not a rejection), a weight-only or reference backend, a fallback from a
  refused explicit backend (policy.strict=false), a platform that lists no packages;
- `error`: nothing was selected for a reason the user can act on (a refused explicit backend
  under policy.strict=true, no backend chosen automatically).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

SEVERITIES = ("info", "warning", "error")


@dataclass(frozen=True)
class Note:
    """One note: its kind (NOTE_KINDS), severity, the backend it is about (or None) and its
    data (JSON values: strings, numbers, lists, mappings)."""
    kind: str
    severity: str
    backend: Optional[str] = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "backend": self.backend,
                "data": _plain(self.data)}

    def __str__(self) -> str:
        return text(self)


def _plain(v: Any) -> Any:
    """A JSON copy (tuples as lists), so a caller cannot change the note's data."""
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


# -- the renderers, one per kind -------------------------------------------------------------

def _rule_warning(n: Note) -> str:
    return f"{n.backend}: {n.data['message']} ({n.data['source']})"


def _opt_in_admitted(n: Note) -> str:
    return (f"{n.backend} is opt-in ({n.data['reason']}); policy.allow_opt_in admits it to "
            "automatic selection")


def _preference(n: Note) -> str:
    d = n.data
    why = f": {d['reason']} ({d['source']})" if d.get("reason") else ""
    return (f"preference: {n.backend} (rank {d['rank']}{why}) outranks "
            + ", ".join(f"{o['backend']} (rank {o['rank']})" for o in d["outranks"]))


def _opt_in_would_win(n: Note) -> str:
    why = f" ({n.data['reason']}; {n.data['source']})" if n.data.get("reason") else ""
    return (f"{n.backend} could run this layer and was not selected: it is opt-in, and would "
            f"rank first{why}; admit it with policy.allow_opt_in=[{n.backend}]")


def _because(reason: Optional[Mapping[str, Any]]) -> str:
    return f" ([{reason['rule']}] {reason['message']})" if reason else ""


def _request_skipped(n: Note) -> str:
    return (f"{n.data['key']}: {n.backend} does not apply to this layer"
            f"{_because(n.data.get('reason'))}; skipped")


def _asked(d: Mapping[str, Any]) -> str:
    return f"{d['key']}={','.join(d['requested'])}"


def _request_not_applicable(n: Note) -> str:
    d = n.data
    if len(d["requested"]) == 1:
        what = f"{d['requested'][0]} does not apply to this layer{_because(d.get('reason'))}"
    else:
        what = f"none of them implements {d['quant']} {d['op']} layers"
    return (f"{_asked(d)}: {what}; automatic selection chose {d['chose'] or 'nothing'} for this "
            "layer")


def _failing(d: Mapping[str, Any]) -> str:
    failing = d["failing"]
    if len(d["requested"]) == 1:
        return f"{_asked(d)} was requested but fails {failing[0]['failed']} rule(s)"
    return (f"{_asked(d)} was requested but each fails: "
            + ", ".join(f"{f['backend']} {f['failed']} rule(s)" for f in failing))


def _request_refused(n: Note) -> str:
    alt = n.data.get("fallback")
    return (_failing(n.data) + "; policy.strict=true refuses to fall back"
            + (f" (with policy.strict=false: {alt})" if alt else ""))


def _fallback(n: Note) -> str:
    return f"{_failing(n.data)}; policy.strict=false: fell back to {n.data['chose'] or 'nothing'}"


def _nothing_automatic(n: Note) -> str:
    opt = n.data["opt_in"]
    return "no backend can be chosen automatically" + (
        f"; opt-in only: {', '.join(opt)} (request one with policy.{n.data['op']}_backend=NAME, "
        "or admit it with policy.allow_opt_in=[NAME])" if opt else "")


def _unsupported_layer(n: Note) -> str:
    return (f"no backend of the catalogue implements {n.data['quant']} {n.data['op']} layers: "
            "this layer is outside selector's catalogue")


def _weight_only(n: Note) -> str:
    return (f"{n.backend} is weight-only: it serves this W4A4 checkpoint as W4A16 (activation "
            f"scales dropped), not native FP4 ({n.data['source']})")


def _reference(n: Note) -> str:
    return (f"{n.backend} is the reference implementation (dequantize, then matmul): correct but "
            "slow; no native kernel can run this layer here")


def _platform(n: Note) -> str:
    return f"platform: {n.data['detail']}"


def _no_packages(n: Note) -> str:
    if "text" in n.data:  # carried across ranks as words (selector.distributed)
        return str(n.data["text"])
    return ("this platform lists no packages, so every backend that needs one is rejected: add "
            + ", ".join(n.data["add"]) + " or platform.packages.<dist>=VERSION")


def _unproven_release(n: Note) -> str:
    if "text" in n.data:  # carried across ranks as words (selector.distributed)
        return str(n.data["text"])
    return "; ".join(f"answers proven up to {r['name']} {r['proven']}; {r['package']} "
                     f"{r['installed']} is installed" for r in n.data["releases"])


def _measured(n: Note) -> str:  # selector.core.profile (policy.preference=measured)
    d = n.data
    t = " vs ".join(f"{x['backend']} {x['median_ms']:.3g} ms" for x in d["times"])
    rest = f"; not measured: {', '.join(d['unmeasured'])} (static order)" if d["unmeasured"] else ""
    if d.get("packaged"):  # selector/profiles/: a cell standing for nearby shapes and buckets
        return (f"measured on {d['packaged']}, packaged profile: {t} ({d['cell']}, "
                f"{d['tokens']} tokens timed)")
    return f"measured: {t} at {d['tokens']} tokens, profile {d['profile']}{rest}"


def _profile_unmeasured(n: Note) -> str:
    d = n.data
    near = d.get("nearest")
    tail = (f"; nearest measured cell: {near}" if near else
            "; the profile has no cell of this op") if "nearest" in d else ""
    old = ("; a version-1 profile (tune before 2026-12-07: run `selector tune` again)"
           if d.get("migrated") else "")
    return f"profile {d['profile']}: {d['why']}{tail}{old}; the static order decided"


def _profile_ignored(n: Note) -> str:
    return (f"profile {n.data['profile']} ignored: " + "; ".join(n.data["differences"][:4])
            + "; no decision uses it")


#: kind -> (severity, renderer, what it says): the documented vocabulary of notes
NOTE_KINDS: Dict[str, Tuple[str, Callable[[Note], str], str]] = {
    "no_packages": ("warning", _no_packages, "a hardware preset without software: which "
                    "`stack=` presets would describe it (`add`)"),
    "unproven_release": ("warning", _unproven_release, "the platform's engine or library is "
                         "newer than the newest release selector has proven: the answers are "
                         "that release's (`releases`: package, name, proven, installed)"),
    "request_skipped": ("info", _request_skipped, "a backend of an ordered request does not "
                        "implement the layer (`key`, `reason`); the next one is tried"),
    "request_not_applicable": ("info", _request_not_applicable, "no requested backend "
                               "implements the layer: automatic selection decided (`chose`)"),
    "request_refused": ("error", _request_refused, "the requested backend fails its rules and "
                        "policy.strict=true refuses a fallback (`failing`, `fallback`)"),
    "fallback": ("warning", _fallback, "the requested backend fails its rules; "
                 "policy.strict=false fell back to automatic selection (`chose`)"),
    "rule_warning": ("warning", _rule_warning, "a warning-level rule of a backend holds "
                     "(`rule`, `message`, `source`)"),
    "opt_in_admitted": ("info", _opt_in_admitted, "the selected backend is opt-in and "
                        "policy.allow_opt_in admits it"),
    "preference": ("info", _preference, "why the selected backend outranked the other usable "
                   "ones (`rank`, `reason`, `source`, `outranks`)"),
    "opt_in_would_win": ("info", _opt_in_would_win, "an opt-in backend would rank first were "
                         "it admitted"),
    "nothing_automatic": ("error", _nothing_automatic, "automatic selection found no usable "
                          "backend (`opt_in`: the opt-in ones that could run)"),
    "unsupported_layer": ("info", _unsupported_layer, "no backend of the catalogue implements "
                          "the layer's quant scheme"),
    "weight_only": ("warning", _weight_only, "the selected backend is weight-only: a W4A4 "
                    "checkpoint runs as W4A16"),
    "reference": ("warning", _reference, "the selected backend is the reference "
                  "implementation (correct, slow)"),
    "platform": ("info", _platform, "how the platform was detected (`detail`)"),
    "measured": ("info", _measured, "the profile ranked the usable backends by their measured "
                 "medians (`profile`, `tokens`, `times`, `unmeasured`; a packaged profile: `packaged`, the GPU "
                 "model it was measured on, and `cell`, the cell that stood for the layer)"),
    "profile_unmeasured": ("warning", _profile_unmeasured, "the profile has no time for this "
                           "layer's cell (`profile`, `bucket`, `why`, `nearest`: the nearest "
                           "cell it has): the static order decided"),
    "profile_ignored": ("warning", _profile_ignored, "the profile is missing or was measured on "
                        "another machine or stack (`profile`, `differences`): no decision uses it"),
    "agreement": ("info", lambda n: str(n.data["text"]), "a note of a decision agreed across "
                  "ranks (selector.distributed), in words (`text`)"),
}


def note(kind: str, backend: Optional[str] = None, **data: Any) -> Note:
    """A note of a documented kind, with the severity its kind declares."""
    return Note(kind, NOTE_KINDS[kind][0], backend, data)


def text(n: Note) -> str:
    """The note in words (the `notes` strings of the JSON and the text form)."""
    return NOTE_KINDS[n.kind][1](n)


def kinds_markdown() -> str:
    """The table of note kinds (docs/architecture.md)."""
    lines = ["| kind | severity | what it says (data keys) |", "|---|---|---|"]
    lines += [f"| `{k}` | {sev} | {doc} |" for k, (sev, _, doc) in NOTE_KINDS.items()]
    return "\n".join(lines) + "\n"


def texts(notes: Tuple[Note, ...]) -> List[str]:
    return [text(n) for n in notes]
