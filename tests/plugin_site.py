"""A distribution's installed files, written straight into a site directory (what pip leaves
behind: the package, and a *.dist-info with METADATA, RECORD and entry_points.txt), for tests
that put it on sys.path in-process or in a child. `selector.config.catalogues.reset()` forgets what an
earlier discovery found."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

FAST_MOE = """\
description: "a third-party MoE kernel"
rank: 1
rules:
  - kind: device
    devices: ["12.x"]
    source: "fast-kernels 1.0 release notes"
engines:
  vllm:
    name: {vllm_name}
    source: "fast-kernels 1.0 README"
"""

ENTRY_POINTS = "[selector.catalogues]\nfast = fast_kernels.selector_conf\n"


def make_site(root: Path, files: Dict[str, str], *, dist: str = "fast-kernels",
              version: str = "1.0", entry_points: Optional[str] = ENTRY_POINTS,
              package: str = "fast_kernels") -> Path:
    """`root/site` holding `files` (paths relative to the package's conf dir
    `<package>/selector_conf/`, or to the site when they start with '/') and the dist-info."""
    site = root / "site"
    written = []
    for rel, text in {f"{package}/__init__.py": "", **{
            (k[1:] if k.startswith("/") else f"{package}/selector_conf/{k}"): v
            for k, v in files.items()}}.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        written.append(rel)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)
    record = [f"{w},," for w in written] + [f"{info.name}/{n},," for n in
                                            ("METADATA", "entry_points.txt", "RECORD")]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return site
