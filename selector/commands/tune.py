"""`python -m selector tune`: time every usable, verified backend of a layer on this machine, and
write the profile that `policy.preference=measured` ranks by (docs/tuning.md).

For the configured layer (`layer=`, `layer.*` overrides), each `--layer k=v,...` variant of it,
or every quantized layer kind of `--model DIR`, at each `--tokens` count: the backends that
pass their rules here are verified first (`selector doctor --verify`'s machinery, cached per
machine), and each that passes is timed in a child process (selector.backends.children.tune_child) with
warm-up, CUDA events on CUDA and perf_counter on the CPU; the profile keeps the median and the
p10-p90 spread per backend and cell, keyed by this machine (GPU, driver, CUDA, package
versions). Exit status: 0 when at least one backend was timed, 1 when none could be, 2 on bad
input.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from selector.core.errors import SelectorError, bad_input
from selector.core.text import printable, shell_word

if TYPE_CHECKING:  # pragma: no cover - the CLI builds its parser without the profile model
    from selector.core import profile as prof
    from selector.core.schema import Layer

DEFAULT_TOKENS = (1, 16, 128, 1024, 4096)
DEFAULT_MAX_MEMORY_GIB = 16.0
USABLE = ("selected", "eligible", "opt_in")


def add_arguments(s: argparse.ArgumentParser) -> None:
    """The `tune` subcommand's options (selector.commands.cli registers it)."""
    s.add_argument("--format", choices=("text", "json"), default="text")
    s.add_argument("--config-dir", action="append", default=[], metavar="DIR",
                   help="an extra config directory")
    s.add_argument("--layer", action="append", default=[], metavar="K=V,...",
                   help="also this variant of the configured layer (layer keys, comma-"
                   "separated: hidden_size=7168,intermediate_size=4096); repeatable")
    s.add_argument("--model", metavar="DIR", help="every quantized layer kind of this "
                   "checkpoint directory")
    s.add_argument("--tokens", metavar="N,N,...", help="token counts to time (default: the "
                   f"layer's num_tokens, else {','.join(map(str, DEFAULT_TOKENS))})")
    s.add_argument("--out", metavar="PATH", help="the profile file (default: this machine's "
                   "profile in the cache directory, which policy.preference=measured reads)")
    s.add_argument("--warmup", default="5", metavar="N", help="untimed calls first (default 5)")
    s.add_argument("--repeats", default="24", metavar="N", help="timed calls (default 24)")
    s.add_argument("--timer", default="graph", metavar="graph|events",
                   help="on CUDA: graph (default) times CUDA-graph replays of the call, the "
                   "GPU's time without the host's; events times each eager call between two "
                   "CUDA events (the CPU always times with perf_counter)")
    s.add_argument("--timeout", default=None, metavar="SECONDS", help="seconds each timing "
                   "process may take (default: SELECTOR_TUNE_TIMEOUT, else 300)")
    s.add_argument("--budget", default="10", metavar="SECONDS", help="seconds of timed calls "
                   "per cell at most (fewer repeats, at least 3, for a slow one; default 10)")
    s.add_argument("--max-memory", default=str(DEFAULT_MAX_MEMORY_GIB), metavar="GIB",
                   help="a cell whose tensors need more is not timed; on the CPU the timing "
                   f"process's memory is bounded by it (default {DEFAULT_MAX_MEMORY_GIB:g})")
    s.add_argument("--no-cache", dest="verify_cache", action="store_false",
                   help="verify again instead of reusing this machine's cached results")
    s.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="Hydra overrides: layer=..., layer.hidden_size=..., platform=auto")


def _value(text: str) -> Any:
    """A --layer value: JSON (numbers, true, false, null), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_layer_spec(spec: str) -> Dict[str, Any]:
    """`hidden_size=7168,intermediate_size=4096` (the `layer.` prefix optional)."""
    out: Dict[str, Any] = {}
    for part in (p.strip() for p in spec.replace(" ", ",").split(",")):
        if not part:
            continue
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            raise bad_input("--layer", spec, "must be layer keys and values: "
                            "hidden_size=7168,intermediate_size=4096")
        out[k.strip().removeprefix("layer.")] = _value(v.strip())
    if not out:
        raise bad_input("--layer", spec, "names no layer key")
    return out


def parse_tokens(text: str) -> Tuple[int, ...]:
    from selector.core import profile as prof
    vals: List[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not 1 <= int(part) <= prof.MAX_TOKENS:
            raise bad_input("--tokens", text, f"must be token counts from 1 to "
                            f"{prof.MAX_TOKENS}, comma-separated (1,16,128)")
        vals.append(int(part))
    return tuple(dict.fromkeys(vals))


def _clean(overrides: Sequence[str]) -> List[str]:
    """Tune verifies itself and measures the static order: no probe=, no profile."""
    from selector.inspect.tuning import child_overrides
    return child_overrides(overrides)


def run_tune(args: argparse.Namespace) -> int:
    from selector.api import Selector, load
    from selector.inspect.verify import verify_once
    st = _settings(args)
    specs = [parse_layer_spec(s) for s in args.layer]
    if args.model is not None and specs:
        raise SelectorError("--layer cannot be combined with --model (the checkpoint gives the "
                            "layers)", key="--layer")
    overrides = _clean(args.overrides)
    base = load(overrides, config_dirs=args.config_dir)
    run = base.run_config
    if run.platform.source != "detected":
        raise SelectorError(f"platform={run.platform.preset}: tune times kernels on this machine; "
                            "use platform=auto (the default)", key="platform",
                            value=run.platform.preset)
    layers = _layers(args, base, specs)
    tokens = parse_tokens(args.tokens) if args.tokens else None
    t0 = time.perf_counter()
    grid = _grid(base, layers, tokens, args.model is None)
    ops = sorted({layer.op for layer, _ in grid})
    rep = verify_once(base, overrides, args.config_dir, ops=ops, use_cache=args.verify_cache)
    sel = Selector(run, base.tree, base.probes, rep.rejections())
    cells, todo = _cells(base, sel, grid, st.max_gib)
    devices = _time(run, cells, todo, overrides, args, st)
    path, key, kept = _write(run, cells, devices, args, st)
    timed = sum(len(c["times"]) for c in cells)
    summary = {"profile": path, "key": key, "seconds": round(time.perf_counter() - t0, 2),
               "kept_cells": kept, "verify_cache": rep.cache_path,
               "cells": [_cell_dict(c) for c in cells]}
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        print("\n".join(render_text(summary)))
    return 0 if timed else 1


class _Settings(NamedTuple):
    warmup: int
    repeats: int
    budget: float
    max_gib: float
    timeout: float


def _settings(args: argparse.Namespace) -> _Settings:
    """The timing options checked (and --out, before anything is timed)."""
    from selector.inspect import tuning
    warmup = tuning.check_positive("--warmup", args.warmup)
    repeats = tuning.check_positive("--repeats", args.repeats)
    budget = tuning.check_positive("--budget", args.budget, float)
    if args.timer not in tuning.TIMERS:
        raise SelectorError(f"--timer: {args.timer!r} is not one of "
                            f"{', '.join(tuning.TIMERS)}", key="--timer", value=args.timer)
    max_gib = tuning.check_positive("--max-memory", args.max_memory, float)
    timeout = (tuning.default_timeout() if args.timeout is None else
               tuning.check_positive("--timeout", args.timeout, float))
    if repeats > 10000 or warmup > 10000:
        raise SelectorError("--repeats, --warmup: at most 10000 calls each", key="--repeats")
    if args.out is not None:  # before anything is timed; checked again under the lock
        _not_a_profile(os.path.expanduser(args.out))
    return _Settings(warmup, repeats, budget, max_gib, timeout)


def _layers(args: argparse.Namespace, base: Any, specs: List[Dict[str, Any]]
            ) -> List[Dict[str, Any]]:
    """The layers to time: each quantized layer kind of --model, else the run's layer with
    each --layer spec applied."""
    run = base.run_config
    if args.model is not None:
        plan = base.plan(args.model)
        layers = list({json.dumps(d.layer.to_dict(), sort_keys=True): d.layer.to_dict()
                       for d in plan.decisions() if d.layer.quant}.values())
        if not layers:
            raise SelectorError(f"--model {args.model}: no quantized layer kind to tune",
                                key="--model", value=args.model)
    else:
        default = run.layer.to_dict()
        layers = [dict(default, **s) for s in specs] if specs else [default]
    return layers


def _grid(base: Any, layers: List[Dict[str, Any]], tokens: Optional[Tuple[int, ...]],
          own_tokens: bool) -> List[Tuple[Layer, int]]:
    """(layer, tokens) for each layer at each token count (--tokens, else the layer's own
    num_tokens when `own_tokens`, else DEFAULT_TOKENS), each validated and given its sizes."""
    from selector.inspect import tuning
    grid: List[Tuple[Layer, int]] = []
    for layer in layers:
        ts = tokens or ((layer["num_tokens"],) if layer.get("num_tokens") and own_tokens
                        else DEFAULT_TOKENS)
        for t in ts:
            made = base.layer(**dict(layer, num_tokens=t))  # validated: bad keys exit 2
            missing = tuning.missing_sizes(made.to_dict())
            if missing:
                raise SelectorError(f"layer.{missing[0]}: tune needs the layer's sizes to time it "
                                    f"(missing: {', '.join('layer.' + m for m in missing)})",
                                    key=f"layer.{missing[0]}")
            grid.append((made, t))
    return grid


def _cells(base: Any, sel: Any, grid: List[Tuple[Layer, int]], max_gib: float
           ) -> Tuple[List[Dict[str, Any]], Dict[str, List[Tuple[str, Dict[str, Any]]]]]:
    """One cell per grid point (what the static order selects, what verification or memory
    keeps from timing) and the cases to time per `op/backend`."""
    from selector.inspect import tuning
    cells: List[Dict[str, Any]] = []
    todo: Dict[str, List[Tuple[str, Dict[str, Any]]]] = {}
    memory = int(max_gib * 2 ** 30)
    for i, (layer, t) in enumerate(grid):
        static, verified = base.decide(layer), sel.decide(layer)
        usable = [c.backend for c in verified.candidates if str(c.status) in USABLE]
        skipped = {c.backend: "; ".join(f"[{r.rule}] {r.message}" for r in c.reasons)[:500]
                   for c in verified.candidates if str(c.status) not in USABLE
                   and str(static.candidate(c.backend).status) in USABLE}
        cells.append({"layer": layer.to_dict(), "tokens": t, "static": static.selected, "times": {},
                      "eager": {}, "copies": {}, "skipped": skipped, "id": f"cell{i}"})
        need = tuning.estimate_bytes(layer.op, layer.to_dict())
        for b in usable:
            if need > memory:
                skipped[b] = (f"too large here: needs about {need / 2**30:.1f} GiB, over "
                              f"--max-memory {max_gib:g}")
                continue
            todo.setdefault(f"{layer.op}/{b}", []).append((f"cell{i}", layer.to_dict()))
    return cells, todo


def _time(run: Any, cells: List[Dict[str, Any]], todo: Dict[str, List[Tuple[str, Any]]],
          overrides: Sequence[str], args: argparse.Namespace, st: _Settings) -> Set[Any]:
    """Each backend timed on its cases, in a child process; the cells filled in. Returns the
    (device, timer) pairs that timed."""
    from selector.inspect import tuning
    warmup, repeats, budget, timeout = st.warmup, st.repeats, st.budget, st.timeout
    memory = int(st.max_gib * 2 ** 30)
    devices: Set[Any] = set()
    by_id = {c["id"]: c for c in cells}
    specs_by = {(b.op, b.name): b for bs in run.catalogue.backends.values() for b in bs}
    for opb, cases in todo.items():
        op, _, name = opb.partition("/")
        for r in tuning.time_backend(specs_by[op, name], cases, overrides, args.config_dir,
                                     warmup=warmup, repeats=repeats, budget_s=budget,
                                     memory_bytes=memory, timeout=timeout,
                                     timer=args.timer):
            cell = by_id[r.case]
            if r.timing is not None:
                cell["times"][name] = r.timing
                cell["copies"][name] = r.copies
                if r.eager is not None:
                    cell["eager"][name] = r.eager
                devices.add((r.device, r.timer))
            else:
                cell["skipped"][name] = r.why
    return devices


def _write(run: Any, cells: List[Dict[str, Any]], devices: Set[Any], args: argparse.Namespace,
           st: _Settings) -> Tuple[str, Any, int]:
    """The profile written (merged with the one at --out under its lock): (path, machine key,
    cells kept from before)."""
    from selector.core import profile as prof
    from selector.inspect import tuning
    warmup, repeats, budget = st.warmup, st.repeats, st.budget
    key = tuning.machine_key(run)
    new = prof.Profile(key, tuple(prof.Cell(c["layer"], c["tokens"], c["times"], c["skipped"],
                                            c["eager"]) for c in cells),
                       {"warmup": warmup, "repeats": repeats, "budget_s": budget,
                        "timer": args.timer, "devices": sorted(f"{d} ({t})" for d, t in devices),
                        "weights": "on CUDA each call takes the next of several weight copies "
                                   "that do not fit the L2 together (copies_past_l2)"},
                       time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    out = args.out or tuning.default_path(key)
    if out is None:
        raise SelectorError("--out: the cache directory is off (SELECTOR_CACHE_DIR): name the "
                            "profile file with --out PATH", key="--out")
    try:  # read, merged and written under the profile's lock: concurrent runs keep every cell
        path, kept = tuning.save_profile(new, out, _merge)
    except OSError as e:
        raise SelectorError(f"--out: cannot write {out}: {e.strerror or e}", key="--out",
                            value=str(out)) from None
    return path, key, kept


def _not_a_profile(path: str) -> None:
    """Refuse `--out PATH` when a file there is not a selector profile (a profile of another
    version or a malformed one is replaced; anything else is never overwritten)."""
    from selector.core import profile as prof
    if not os.path.lexists(path):
        return
    try:
        prof.load(path)
        return
    except SelectorError as exc:
        why = str(exc)
    try:
        doc = prof.loads(prof.read_bytes(path), path)
    except SelectorError:
        doc = None
    if isinstance(doc, dict) and doc.get("schema") == prof.SCHEMA:
        return
    raise SelectorError(f"--out: {path} exists and is not a selector profile "
                        f"({why.partition(f'{path}: ')[2] or why}): not overwritten; remove it "
                        "or name another file", key="--out", value=path)


def _merge(new: prof.Profile, path: str) -> Tuple[prof.Profile, int]:
    """`new` plus the cells of the profile already at `path` when it is one of this machine
    (the same key) that `new` does not measure again; (profile, cells kept). A file there that
    is not a profile is refused (SelectorError), never overwritten."""
    from selector.core import profile as prof
    if not os.path.lexists(path):
        return new, 0
    _not_a_profile(path)
    try:
        old = prof.load(path)
    except SelectorError:
        return new, 0
    if old.key != new.key:
        return new, 0
    mine = {c.key for c in new.cells}
    kept = tuple(c for c in old.cells if c.key not in mine)
    return prof.Profile(new.key, kept + new.cells, new.settings, new.created), len(kept)


def _cell_dict(c: Dict[str, Any]) -> Dict[str, Any]:
    from selector.core import profile as prof
    times = sorted(c["times"].items(), key=lambda kv: kv[1].median_ms)
    fastest = times[0][0] if times else None
    ratio = None
    if fastest and c["static"] in c["times"]:
        ratio = round(c["times"][c["static"]].median_ms / times[0][1].median_ms, 3)
    return {"layer": c["layer"], "tokens": c["tokens"], "bucket": prof.bucket(c["tokens"]),
            "times": {b: t.to_dict() for b, t in times}, "skipped": c["skipped"],
            "eager": {b: t.to_dict() for b, t in c.get("eager", {}).items()},
            "copies": dict(c.get("copies", {})),
            "fastest": fastest, "static": c["static"], "static_over_fastest": ratio}


def _shape_text(layer: Dict[str, Any]) -> str:
    if layer["op"] == "linear":
        return f"linear {layer['quant']} K={layer['hidden_size']} N={layer['intermediate_size']}"
    return (f"moe {layer['quant']} H={layer['hidden_size']} I={layer['intermediate_size']} "
            f"E={layer['num_experts']} top_k={layer['top_k']}"
            + (f" ep={layer['ep_size']}" if layer.get("ep_size", 1) > 1 else "")
            + (f" tp={layer['tp_size']}" if layer.get("tp_size", 1) > 1 else ""))


def render_text(s: Dict[str, Any]) -> List[str]:
    lines = [f"tune: {len(s['cells'])} cell(s) in {s['seconds']:.1f} s; profile {s['profile']}"
             + (f" (kept {s['kept_cells']} cell(s) of the file measured before)"
                if s["kept_cells"] else "")]
    for c in s["cells"]:
        lines.append(f"  {_shape_text(c['layer'])} at {c['tokens']} tokens")
        for b, t in c["times"].items():
            mark = " <- fastest" if b == c["fastest"] else ""
            e = c.get("eager", {}).get(b)
            eager = (f"; eager {e['median_ms']:.4g} ms, p10-p90 {e['p10_ms']:.4g}-"
                     f"{e['p90_ms']:.4g}" if e else "")
            n = c.get("copies", {}).get(b, 1)
            copies = f", {n} weight copies" if n > 1 else ""
            lines.append(f"    {b:<22} {t['median_ms']:.4g} ms  (p10-p90 {t['p10_ms']:.4g}-"
                         f"{t['p90_ms']:.4g}, {t['n']} calls{copies}{eager}){mark}")
        for b, why in c["skipped"].items():
            lines.append(f"    {b:<22} not timed: {why}")
        if c["static"] and c["static_over_fastest"] is not None:
            lines.append(f"    static pick {c['static']}: {c['static_over_fastest']:.3g}x the "
                         "fastest")
        elif c["static"]:
            lines.append(f"    static pick {c['static']}: not timed")
    lines.append("  use it: python -m selector explain policy.preference=measured"
                 + (f" {shell_word('policy.profile=' + str(s['profile']))}"
                    if s["profile"] else ""))
    return [printable(line) for line in lines]  # a path's escapes and newlines: escaped


__all__ = ["add_arguments", "run_tune", "parse_layer_spec", "parse_tokens", "DEFAULT_TOKENS"]
