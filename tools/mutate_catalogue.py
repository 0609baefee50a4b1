"""Mutation run over the catalogue: does a scenario test catch each small change to a rule?

Mutations of conf/backend/<op>/<name>.yaml and of the entry for that backend in the home of each
engine the cases decide under (conf/engine/<engine>.yaml `backends.<op>.<name>`: vLLM, SGLang),
applied in memory one at a time:
- delete one rule;
- move one version boundary by one release (the last component of a version in a specifier,
  `when.packages` or `any_of` entry, up or down by one: `>=0.6.9` -> `>=0.6.8`, `<4.8.0` ->
  `<4.8.1`; a CUDA floor by one minor: `>=12.9` -> `>=12.8`);
- drop one listed value (a device, activation, gated/non-gated activation, quant scheme, dtype,
  all2all exchange, `when` list entry);
- the same for each engine's own rules (`engines.<engine>.rules`), and: swap an engine's name
  for the backend (an engine that offers it loses it, one that has none gains it), delete one
  kernel the engine runs, drop a kernel's `when` entry or its scheme.
Each mutated catalogue is compiled exactly as selector compiles it and the cases of
tests/knowledge_cases.py are decided against it; the mutation is killed when a case fails.
A mutation that the catalogue's own validation refuses (e.g. an empty device list) is reported
apart, and so is one of the short, reasoned EQUIVALENT list below (a mutation that can never
change a verdict). Usage:

    python tools/mutate_catalogue.py [--sample N] [--seed S] [--only TEXT] [--json]
                                     [--show-survivors]

`--only TEXT` keeps the mutations whose label (`op/name description`, as --show-survivors prints
it) contains TEXT, before sampling: `--only moe/cutlass` reruns one backend's mutations.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

_VERSION = re.compile(r"(?P<op>===|==|!=|~=|<=|>=|<|>)\s*(?P<v>\d+(?:\.\d+)*)")
LIST_FIELDS = ("devices", "values", "gated", "non_gated", "all2all_exclude")
WHEN_LISTS = ("activation", "quant", "devices", "all2all")

Mutation = Tuple[str, Callable[[Dict[str, Any]], None]]  # (description, apply to backend conf)

# Mutations that can never change a verdict, each with the reason (reported apart as
# `equivalent`, not as survivors). Keep this list short: a mutant that survives because no case
# pins its rule wants a case, and a redundant `when` entry wants removing from the YAML. An
# entry whose mutant a case kills, or that names no mutation, is reported as stale.
_NO_FP8_LAYER = ("a layer SGLang reads with its mxfp4 or mxfp8 quantization method is an MXFP4 or "
                 "MXFP8 layer, never one of the FP8 schemes the rule's `when` names: the value "
                 "keeps the rule to its job, refusing compressed-tensors")
EQUIVALENT: Dict[str, str] = {
    "moe/deep_gemm engines.sglang.rules[0] (quant_method) drop values mxfp4": _NO_FP8_LAYER,
    "moe/deep_gemm engines.sglang.rules[0] (quant_method) drop values mxfp8": _NO_FP8_LAYER,
    "linear/deep_gemm engines.sglang.rules[1] (device) drop devices 11.x":
        "SGLang's MXFP8 loader floor (capability >= 100) lists SM 11.x as its source does; "
        "DeepGEMM's own device rule (conf/backend/linear/deep_gemm.yaml, no `when`) refuses "
        "SM 11.x for every scheme, so the SGLang entry never decides alone",
}


def _bump(version: str, step: int) -> Optional[str]:
    parts = version.split(".")
    last = int(parts[-1]) + step
    if last < 0:
        return None
    return ".".join(parts[:-1] + [str(last)])


def _moved(text: str) -> Iterator[Tuple[str, str]]:
    """Each way of moving one version of a specifier text by one release."""
    for m in _VERSION.finditer(text):
        for step in (-1, 1):
            new = _bump(m.group("v"), step)
            if new is not None:
                yield (f"{m.group(0)!s} -> {m.group('op')}{new}",
                       text[:m.start("v")] + new + text[m.end("v"):])


def _set(path: Tuple, value: Any) -> Callable[[Dict[str, Any]], None]:
    def apply(conf: Dict[str, Any]) -> None:
        node = conf
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return apply


def _delete(path: Tuple) -> Callable[[Dict[str, Any]], None]:
    def apply(conf: Dict[str, Any]) -> None:
        node = conf
        for k in path[:-1]:
            node = node[k]
        del node[path[-1]]
    return apply


def _rule_mutations(rules: List[Dict[str, Any]], at: Tuple, label: str) -> List[Mutation]:
    """Mutations of a rules list found at path `at` (its key in descriptions: `label`)."""
    out: List[Mutation] = []
    for i, rule in enumerate(rules):
        kind = rule.get("kind")
        where = f"{label}[{i}] ({kind})"
        here = at + (i,)
        out.append((f"delete {where}", _delete(here)))
        for f in ("specifier",):
            if isinstance(rule.get(f), str):
                for what, new in _moved(rule[f]):
                    out.append((f"{where} {f} {what}", _set(here + (f,), new)))
        for j, entry in enumerate(rule.get("any_of") or []):
            for what, new in _moved(entry):
                out.append((f"{where} any_of {what}", _set(here + ("any_of", j), new)))
        for name, spec in ((rule.get("when") or {}).get("packages") or {}).items():
            for what, new in _moved(str(spec)):
                out.append((f"{where} when.packages.{name} {what}",
                            _set(here + ("when", "packages", name), new)))
        for f in LIST_FIELDS:
            for j, v in enumerate(rule.get(f) or []):
                out.append((f"{where} drop {f} {v}", _delete(here + (f, j))))
        for f in WHEN_LISTS:
            for j, v in enumerate((rule.get("when") or {}).get(f) or []):
                out.append((f"{where} drop when.{f} {v}", _delete(here + ("when", f, j))))
        m = (rule.get("when") or {}).get("min_num_experts")
        if isinstance(m, int):
            for step in (-1, 1):
                out.append((f"{where} when.min_num_experts {m} -> {m + step}",
                            _set(here + ("when", "min_num_experts"), m + step)))
        if isinstance(rule.get("multiple_of"), int):
            for new in (rule["multiple_of"] // 2, rule["multiple_of"] * 2):
                out.append((f"{where} multiple_of -> {new}",
                            _set(here + ("multiple_of",), new)))
    return out


def _engine_mutations(name: str, engine: str, entry: Dict[str, Any]) -> List[Mutation]:
    """An engine entry: its rules as above; its name swapped (an engine that has the backend
    loses it, one that has none gains it); each kernel deleted, each kernel `when` entry
    dropped, each kernel's scheme removed."""
    at = ("engines", engine)
    label = f"engines.{engine}"
    out = _rule_mutations(entry.get("rules") or [], at + ("rules",), f"{label}.rules")
    swapped = None if entry.get("name") is not None else name
    out.append((f"{label}.name {entry.get('name')} -> {swapped}", _set(at + ("name",), swapped)))
    for j, kind in enumerate(entry.get("replaces") or []):
        out.append((f"{label}.replaces drop {kind}", _delete(at + ("replaces", j))))
    for i, k in enumerate(entry.get("kernels") or []):
        where = f"{label}.kernels[{i}] ({k.get('kernel')})"
        out.append((f"delete {where}", _delete(at + ("kernels", i))))
        if "scheme" in k:
            out.append((f"{where} drop scheme", _delete(at + ("kernels", i, "scheme"))))
        for f in WHEN_LISTS:
            for j, v in enumerate((k.get("when") or {}).get(f) or []):
                out.append((f"{where} drop when.{f} {v}",
                            _delete(at + ("kernels", i, "when", f, j))))
    return out


def mutations(conf: Dict[str, Any], name: str = "") -> List[Mutation]:
    out = _rule_mutations(conf.get("rules") or [], ("rules",), "rules")
    for engine, entry in (conf.get("engines") or {}).items():
        out.extend(_engine_mutations(name, engine, entry))
    return out


def _sample(todo: List[Tuple[str, str, str, Any]], n: int, seed: int) -> List[Any]:
    """The n mutations whose labels hash lowest under `seed`: a draw that adding mutations
    cannot reshuffle. A catalogue that gains a backend (the recipe copy of
    tests/test_recipes.py) adds only that backend's mutations to the draw: every other mutation
    it draws, the same seed drew on the catalogue without it."""
    def key(t: Tuple[str, str, str, Any]) -> str:
        return hashlib.sha256(f"{seed}:{t[0]}/{t[1]} {t[2]}".encode()).hexdigest()
    return sorted(todo, key=key)[:n]


def population(only: Optional[str] = None) -> Tuple[Any, Dict[str, Any], List[Any]]:
    """The catalogue tree, its data with each decided engine's entries joined to their
    backends, and every mutation of it as (op, name, description, apply), those whose label
    contains `only` where given."""
    import knowledge_cases as kc

    from selector.config import read_catalogue, read_engine_backends
    from selector.config.catalogues import discover as discover_tree

    tree = discover_tree()
    data = read_catalogue(tree)
    # each engine's entry joins its backend's conf, for the engines the cases decide under (in
    # the order the cases first name them); TensorRT-LLM's entries, which no case decides (it
    # does not install here), are held to its cited files by tests/test_trtllm.py instead
    decided = list(dict.fromkeys(c.engine for c in kc.CASES if c.engine not in (None, "none")))
    homes = {engine: home for engine, _, home in read_engine_backends(tree)}
    for engine in (e for e in decided if e in homes):
        for op, entries in homes[engine].items():
            for name, entry in entries.items():
                data[op][name].setdefault("engines", {})[engine] = entry
    todo = [(op, name, desc, apply) for op, backends in data.items()
            for name, conf in backends.items() for desc, apply in mutations(conf, name)
            if only is None or only in f"{op}/{name} {desc}"]
    return tree, data, todo


def run(sample: Optional[int], seed: int, only: Optional[str] = None) -> Dict[str, Any]:
    import knowledge_cases as kc

    from selector.core.errors import SelectorError
    from selector.core.model import make_catalogue

    tree, data, todo = population(only)
    total = len(todo)
    if sample is not None and sample < total:
        todo = _sample(todo, sample, seed)
    killed, survived, invalid, equivalent = [], [], [], []
    for op, name, desc, apply in todo:
        mutated = copy.deepcopy(data)
        apply(mutated[op][name])
        label = f"{op}/{name} {desc}"
        try:
            cat = make_catalogue(mutated, tree.backend_files)
        except SelectorError as exc:
            invalid.append({"mutation": label, "refused": str(exc).splitlines()[0]})
            continue
        # a rule of op/name changes that backend's verdict (and, through it, which one is
        # selected): its own cases and every case that checks a status can see it
        cases = [c for c in kc.CASES if c.backend == f"{op}/{name}" or c.status]
        failing = next(((c.id, p) for c in cases for p in [kc.problem(c, cat)] if p), None)
        if failing is None and label in EQUIVALENT:
            equivalent.append({"mutation": label, "reason": EQUIVALENT[label]})
            continue
        (killed if failing else survived).append(
            {"mutation": label, "case": failing[0] if failing else None})
    run_n = len(killed) + len(survived)
    labels = {f"{op}/{name} {desc}" for op, name, desc, _ in todo}
    # an equivalence whose mutant a case kills, or (on a full run) that names no mutation
    stale = sorted({k["mutation"] for k in killed} & set(EQUIVALENT)) + (
        sorted(set(EQUIVALENT) - labels) if len(todo) == total and only is None else [])
    return {"mutations_possible": total, "sampled": len(todo), "refused_by_validation": invalid,
            "killed": len(killed), "survived": survived, "run": run_n,
            "equivalent": equivalent, "stale_equivalent": stale,
            "score": f"{len(killed)}/{run_n}", "killed_by": killed}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=None,
                    help="run N of the mutations, a stable draw by --seed (all: omit)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", metavar="TEXT", default=None,
                    help="only the mutations whose label contains TEXT (e.g. moe/cutlass)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--show-survivors", action="store_true")
    args = ap.parse_args(argv)
    res = run(args.sample, args.seed, args.only)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"mutations: {res['mutations_possible']} possible, {res['sampled']} run; "
              f"{len(res['refused_by_validation'])} refused by the catalogue's validation; "
              f"killed {res['score']}; equivalent: {len(res['equivalent'])}")
        for e in res["equivalent"]:
            print(f"  equivalent: {e['mutation']} ({e['reason']})")
        for label in res["stale_equivalent"]:
            print(f"  stale equivalence (remove it from EQUIVALENT): {label}")
        if args.show_survivors:
            for s in res["survived"]:
                print(f"  survived: {s['mutation']}")
    return 0 if not res["survived"] and not res["stale_equivalent"] else 1


if __name__ == "__main__":
    sys.exit(main())
