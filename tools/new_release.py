"""The first step of the release recipe (docs/maintaining.md "When a release lands"): what a new
vLLM release changed in the code selector models, read from the two released wheels.

    python tools/new_release.py vllm 0.35.0 [--previous 0.34.0] [--wheels DIR]

It downloads both wheels (`pip download --no-deps`; --wheels: a directory that holds them or
receives them), prints every changed hunk of vLLM's selection files with the new release's
file and line numbers (the lines a catalogue rule then cites), and a draft stack preset from the
new wheel's pins, saying which pinned versions the package index lacks (vllm 0.34.0 pins
flashinfer-python 0.7.3, which it does not have). --previous defaults to the newest vLLM stack
preset (conf/stack). Then: add the release to tools/vllm_env.sh and tests/vllm/sim.py RELEASES,
build its environment and run tools/vllm_parity.py there (the sweep against the previous
release's stack shows each answer that changed); that part is not automated here.
Exit 0; 2 on bad input (one line naming it).
"""
from __future__ import annotations

import argparse
import difflib
import fnmatch
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

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


def wheel(dist: str, version: str, where: Path) -> Path:
    found = sorted(where.glob(f"{dist}-{version}-*.whl"))
    if not found:
        where.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                            str(where), f"{dist}=={version}"], capture_output=True, text=True)
        found = sorted(where.glob(f"{dist}-{version}-*.whl"))
        if r.returncode != 0 or not found:
            fail(f"version: {version}: pip download {dist}=={version} failed: "
                 f"{(r.stderr.strip().splitlines() or ['no wheel'])[-1]}")
    return found[0]


def selection_sources(whl: Path) -> Dict[str, List[str]]:
    with zipfile.ZipFile(whl) as z:
        return {n: z.read(n).decode("utf-8", "replace").splitlines()
                for n in z.namelist()
                if any(fnmatch.fnmatch(n, p) for p in SELECTION_FILES)}


def requires(whl: Path) -> Dict[str, str]:
    """Requires-Dist `name==version` pins (no extras, no markers other than the platform's)."""
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^Requires-Dist: ([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^;\s]+)(;.*)?$", line)
        if m and "extra ==" not in (m[4] or ""):
            out[m[1].lower().replace("_", "-")] = m[3]
    return out


def hunks(old: Dict[str, List[str]], new: Dict[str, List[str]]
          ) -> Iterator[Tuple[str, int, int, List[str]]]:
    """(file, first, last line in the new release, the diff's lines) of each changed hunk; a
    file only the new release has is one hunk, one the old has only is reported removed."""
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        if a is None or b is None:
            yield name, 1, len(b or []), ["(new file)" if a is None else "(removed)"]
            continue
        sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
        for group in sm.get_grouped_opcodes(2):
            first, last = group[0][3] + 1, group[-1][4]
            lines = []
            for tag, i1, i2, j1, j2 in group:
                if tag == "equal":
                    continue
                lines += [f"- {x}" for x in a[i1:i2]] + [f"+ {x}" for x in b[j1:j2]]
            yield name, first, max(first, last), lines


def on_index(dist: str, version: str) -> Optional[bool]:
    """Whether the package index has `dist==version` (None: the index did not answer)."""
    r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", dist],
                       capture_output=True, text=True)
    m = re.search(r"Available versions: (.*)", r.stdout)
    if r.returncode != 0 or not m:
        return None
    return version in [v.strip() for v in m[1].split(",")]


def newest_proven() -> str:
    from selector import load
    from selector.config.presets import proven_releases
    tree = load(["platform=cpu"]).tree
    return next(v for d, _, v in proven_releases(tree) if d == "vllm")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine", help="vllm (the engine whose release landed)")
    ap.add_argument("version", help="the new release, e.g. 0.35.0")
    ap.add_argument("--previous", help="the release to compare with (default: the newest "
                    "vLLM stack preset's)")
    ap.add_argument("--wheels", type=Path, help="a directory holding (or receiving) the wheels")
    ap.add_argument("--max-lines", type=int, default=12, help="diff lines shown per hunk")
    args = ap.parse_args(argv)
    if args.engine != "vllm":
        fail(f"engine: {args.engine}: only vllm has released wheels to read; accepted: vllm")
    for key in ("version", "previous"):
        v = getattr(args, key)
        if v is not None and not _VERSION.match(v):
            fail(f"{key}: {v}: is not a release version such as 0.35.0")
    previous = args.previous or newest_proven()
    where = args.wheels or Path.home() / ".cache" / "selector-release-wheels"
    old_whl, new_whl = wheel("vllm", previous, where), wheel("vllm", args.version, where)
    old, new = selection_sources(old_whl), selection_sources(new_whl)
    print(f"vLLM {previous} -> {args.version}: changed selection code (lines of {args.version})")
    count = 0
    for name, first, last, lines in hunks(old, new):
        count += 1
        short = name.removeprefix("vllm/model_executor/").removeprefix("vllm/")
        print(f"\n{short} lines {first}-{last}")
        for line in lines[:args.max_lines]:
            print(f"    {line}")
        if len(lines) > args.max_lines:
            print(f"    ... {len(lines) - args.max_lines} more")
    print(f"\n{count} changed hunks in {len(set(old) | set(new))} selection files")
    pins = requires(new_whl)
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
    print(f"\nnext: add {args.version} to tools/vllm_env.sh and tests/vllm/sim.py RELEASES, then "
          f"tools/vllm_env.sh .venv-vllm-{release} {args.version} and "
          f".venv-vllm-{release}/bin/python tools/vllm_parity.py --check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
