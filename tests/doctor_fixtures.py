"""Throwaway installs for the doctor and probe tests: fake distributions in a temp dir (a module
plus `NAME-VER.dist-info/{METADATA,RECORD,top_level.txt}`, so importlib.metadata sees them when
the dir is first on sys.path / PYTHONPATH), a config dir whose test backends probe them, and a
sitecustomize that makes chosen modules unimportable (as on a machine without triton)."""
from __future__ import annotations

import base64
import hashlib
import os
import sys
from pathlib import Path
from typing import Dict, Iterable, Optional

# name -> module source: each broken in one way doctor must survive
BROKEN = {
    "fakeraise": 'raise RuntimeError("fakeraise is broken on purpose")\n',
    "fakehang": "import time\nwhile True:\n    time.sleep(0.5)\n",
    "fakeexit": "import os\nos._exit(3)\n",
    "fakesegv": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    "fakeok": "def entry():\n    return 1\n",
    # imports fine; touching `crash` kills the process, `fine` is fine (a probe that dies
    # while running, after its import succeeded)
    "fakeattr": ("import os\nfine = 1\n"
                 "def __getattr__(name):\n"
                 "    if name == 'crash':\n"
                 "        os._exit(4)\n"
                 "    raise AttributeError(name)\n"),
}


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
        b"=").decode()


def make_dist(site: Path, name: str, version: str, files: Dict[str, bytes],
              record: Optional[Dict[str, bytes]] = None, top_level: Iterable[str] = ()) -> Path:
    """Write `files` under `site` and a dist-info for `name`; RECORD lists `record` (path ->
    the content whose hash it records; defaults to `files` as written)."""
    site.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if top_level:
        (info / "top_level.txt").write_text("\n".join(top_level) + "\n")
    lines = [f"{rel},{record_hash(data)},{len(data)}"
             for rel, data in (files if record is None else record).items()]
    lines += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(lines) + "\n")
    return info


def make_broken_packages(site: Path) -> Path:
    for name, src in BROKEN.items():
        make_dist(site, name, "1.0", {f"{name}/__init__.py": src.encode()}, top_level=[name])
    return site


def backend_yaml(name: str, package: str, probes: Iterable[str], rank: int = 90) -> str:
    plist = ", ".join(f'"{p}"' for p in probes)
    return (f'description: "test backend over {package}"\n'
            f"rank: {rank}\n"
            "execution: native\n"
            f"probes: [{plist}]\n"
            "rules:\n"
            "  - kind: package\n"
            f"    package: {package}\n"
            '    source: "doctor test fixture"\n')


def make_config_dir(root: Path, backends: Dict[str, tuple]) -> Path:
    """backend/moe/<name>.yaml for each name -> (package, [probe names])."""
    d = root / "backend" / "moe"
    d.mkdir(parents=True, exist_ok=True)
    for name, (package, probes) in backends.items():
        (d / f"{name}.yaml").write_text(backend_yaml(name, package, probes))
    return root


def make_hider(root: Path, *modules: str) -> Path:
    """A dir with a sitecustomize.py that makes `import <module>` fail as if not installed."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "sitecustomize.py").write_text(
        "import sys\n"
        f"_HIDDEN = {tuple(modules)!r}\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in _HIDDEN:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Hide())\n")
    return root


def pythonpath(*dirs: os.PathLike) -> str:
    """dirs, then this process's PYTHONPATH and sys.path (a child must import what we do)."""
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([str(d) for d in dirs] + rest +
                                         [p for p in sys.path if p and os.path.isdir(p)]))
