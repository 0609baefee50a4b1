"""Finding config files: the packaged conf/ first, then the user's --config-dir directories.

Every config file of a tree is listed here, once, and checked by name and kind: regular
`*.yaml` files only, no name reserved for selector itself, no preset or backend defined twice
(a user preset named like a packaged one would be silently shadowed by Hydra's search order).
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from selector.core import schema
from selector.core.errors import SelectorError, bad_input

PRESET_GROUPS = ("platform", "stack", "layer", "policy", "engine")
# Hydra's primary config and the schema's name in its ConfigStore: a user file of that name
# would be merged into every run or ignored, both silently.
RESERVED_FILES = ("config.yaml", "selector_schema.yaml")
RESERVED_BACKENDS = ("auto", "none")  # policy values, not backend names
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def user_dir(d: object) -> Path:
    """A --config-dir / config_dirs= entry as a resolved directory, or a clear error."""
    if isinstance(d, bytes) or not isinstance(d, (str, os.PathLike)):
        raise bad_input("config_dirs", d, f"is a {type(d).__name__}; a config dir is a str or "
                        "os.PathLike path")
    text = os.fspath(d)
    if not isinstance(text, str) or not text or "\0" in text:
        raise bad_input("--config-dir", text, "is not a directory path")
    try:
        p = Path(text).expanduser().resolve()
        is_dir = p.is_dir()
    except (OSError, RuntimeError, ValueError) as exc:
        raise bad_input("--config-dir", text, f"cannot be resolved ({exc})") from None
    if not is_dir:
        raise bad_input("--config-dir", text, "is not a directory")
    return p


@dataclass(frozen=True)
class ConfigTree:
    """Where the config files are: the packaged dir first, then the user's dirs."""
    dirs: Tuple[Path, ...]
    backend_files: Dict[Tuple[str, str], Path]  # (op, name) -> file
    presets: Dict[str, Dict[str, Path]]  # group -> option -> file
    all_files: Tuple[Path, ...]
    # contributed catalogues left out, one problem each (check fails on them, explain warns)
    left_out: Tuple[str, ...] = ()


    @classmethod
    def from_dirs(cls, dirs: Sequence[Path], left_out: Tuple[str, ...] = ()) -> ConfigTree:
        """The tree of these dirs (the packaged one first), every file checked by name and kind."""
        backends: Dict[Tuple[str, str], Path] = {}
        presets: Dict[str, Dict[str, Path]] = {g: {} for g in PRESET_GROUPS}
        files: List[Path] = []
        for i, d in enumerate(dirs):
            if i:
                _refuse_links_out(d)
            for f in _yaml_files(d, user=i > 0):
                files.append(f)
                rel = f.relative_to(d).parts
                if len(rel) == 3 and rel[0] == "backend" and rel[1] in schema.OPS:
                    _add_backend(backends, rel[1], f)
                elif len(rel) == 2 and rel[0] in PRESET_GROUPS:
                    _add_preset(presets[rel[0]], rel[0], f)
        return cls(tuple(dirs), backends, presets, tuple(files), left_out)

    def files(self) -> List[Path]:
        return list(self.all_files)

    def group_options(self, group: str) -> List[str]:
        return sorted(self.presets.get(group, {}))


def _yaml_files(root: Path, user: bool) -> List[Path]:
    """Every `*.yaml`/`*.yml` entry under root, sorted; each must be a regular file."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            if p.suffix not in (".yaml", ".yml"):
                continue
            try:
                mode = p.stat().st_mode
            except OSError as exc:
                raise SelectorError(f"{p}: cannot read config file: {exc.strerror}",
                                    where=str(p)) from None
            if name in dirnames and stat.S_ISDIR(mode):
                continue  # a directory named like a file: Hydra never reads it as one
            if not stat.S_ISREG(mode):
                raise SelectorError(f"{p}: is not a regular file (a FIFO, socket or device); "
                                    "config files must be plain files", where=str(p))
            if p.suffix == ".yml":
                raise SelectorError(f"{p}: selector reads only '.yaml' files (Hydra finds "
                                    "presets by that suffix); rename it to "
                                    f"{p.with_suffix('.yaml').name}", where=str(p))
            if user and p.parent == root and name in RESERVED_FILES:
                raise SelectorError(f"{p}: the name {name} is reserved for selector's own "
                                    "config; a config dir holds backend/<op>/*.yaml and "
                                    f"{'/, '.join(PRESET_GROUPS)}/ presets", where=str(p))
            out.append(p)
    return out


def _add_backend(found: Dict[Tuple[str, str], Path], op: str, f: Path) -> None:
    name = f.stem
    if not _NAME.match(name):
        raise bad_input("backend file name", f.name, "is not a valid backend name: use lower "
                        "case letters, digits and '_'", where=str(f))
    if name in RESERVED_BACKENDS:
        raise bad_input("backend file name", f.name, f"is reserved: {name!r} is a value of "
                        f"policy.{op}_backend, not a backend; give it another name",
                        where=str(f))
    if (op, name) in found:
        raise bad_input(f"catalogue.{op}.{name}", str(f), f"defines a backend that "
                        f"{found[op, name]} already defines; give it another name",
                        where=str(f))
    found[op, name] = f


def _add_preset(found: Dict[str, Path], group: str, f: Path) -> None:
    name = f.stem
    if not _NAME.match(name):
        raise bad_input(f"{group} preset file name", f.name, "is not a valid preset name: use "
                        "lower case letters, digits and '_'", where=str(f))
    if name in found:
        raise bad_input(f"{group}={name}", str(f), f"defines a preset that {found[name]} "
                        "already defines (a later one would be silently ignored); give it "
                        "another name", where=str(f))
    found[name] = f


def _refuse_links_out(root: Path) -> None:
    """A user config dir may hold symbolic links, but none to a YAML file or a directory
    outside it: Hydra and the catalogue would follow them out of the search path."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if not p.is_symlink() or (name in filenames and p.suffix not in (".yaml", ".yml")):
                continue
            try:
                target = p.resolve(strict=True)
            except (RuntimeError, OSError) as exc:  # a link loop or a dangling link
                raise bad_input("--config-dir", str(p), f"is a symbolic link that cannot be "
                                f"resolved ({exc})", where=str(p)) from None
            if target != root and root not in target.parents:
                raise bad_input("--config-dir", str(p), f"is a symbolic link to {target}, "
                                f"outside the config directory {root}; selector does not follow "
                                "links out of a config directory: copy the file in instead",
                                where=str(p))
