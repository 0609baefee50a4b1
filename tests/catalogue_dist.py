"""Build and install a small distribution that contributes a selector catalogue (a backend file
and a platform preset through the `selector.catalogues` entry point group, its kernel class
through `selector.backends`), the way pip installs any wheel: into a temporary directory."""
from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, Optional

DEMO_BACKEND = """\
# A third-party NVFP4 MoE kernel, contributed by its own package.
description: "Demo NVFP4 MoE kernel shipped by selector-demo-kernels"
rank: 95
entry_point: demo_kernels.moe:DemoMoE
rules:
  - kind: device
    devices: ["12.x"]
    source: "selector-demo-kernels 1.0 release notes"
  - kind: activation
    values: [silu]
    source: "selector-demo-kernels 1.0 release notes"
  - kind: act_and_mul
    gated: [silu]
    source: "selector-demo-kernels 1.0 release notes"
"""

DEMO_PLATFORM = """\
preset: demo_gpu
capability: "12.0"
gpu_name: "Demo GPU"
"""

# the package records every import of itself when DEMO_IMPORT_LOG is set
DEMO_INIT = """\
import os
if os.environ.get("DEMO_IMPORT_LOG"):
    with open(os.environ["DEMO_IMPORT_LOG"], "a") as f:
        f.write("imported\\n")
"""


def demo_files(conf: str = "selector_conf", backend: str = "demo_moe",
               backend_text: str = DEMO_BACKEND) -> Dict[str, str]:
    return {"demo_kernels/__init__.py": DEMO_INIT,
            "demo_kernels/moe.py": "class DemoMoE:\n    \"\"\"A kernel wrapper.\"\"\"\n",
            f"demo_kernels/{conf}/backend/moe/{backend}.yaml": backend_text,
            f"demo_kernels/{conf}/platform/demo_gpu.yaml": DEMO_PLATFORM}


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=") \
        .decode()


def build_wheel(out: Path, name: str = "selector-demo-kernels", version: str = "1.0",
                files: Optional[Dict[str, str]] = None,
                catalogue_value: str = "demo_kernels.selector_conf") -> Path:
    """A pure-Python wheel (PEP 427) holding `files` and the entry points."""
    files = dict(demo_files() if files is None else files)
    norm = name.replace("-", "_")
    info = f"{norm}-{version}.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files[f"{info}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: selector-tests\n"
                              "Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/entry_points.txt"] = (f"[selector.catalogues]\ndemo = {catalogue_value}\n\n"
                                         "[selector.backends]\ndemo = demo_kernels.moe\n")
    record = [f"{p},{_digest(t.encode())},{len(t.encode())}" for p, t in files.items()]
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    wheel = out / f"{norm}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for p, t in files.items():
            z.writestr(p, t)
    return wheel


def install(wheel: Path, target: Path) -> Path:
    """`pip install --target`: no network, no dependencies."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--no-compile", "--disable-pip-version-check", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, text=True, timeout=300)
    return target
