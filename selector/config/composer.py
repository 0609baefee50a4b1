"""Composition: overrides checked and normalised, then the tree composed by Hydra, cached.

Hydra is imported only on a cache miss. Everything Hydra returns is checked as plain data
before it is used or cached, so a run gives the same answer with and without the cache.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar, cast

from selector.config import cache
from selector.config.dirs import PRESET_GROUPS, ConfigTree
from selector.config.hydra_errors import schema_keys, translate, unknown_key
from selector.config.presets import lint_tree, validate_presets
from selector.config.safe_yaml import MAX_INT, check_plain, load_yaml
from selector.core import schema
from selector.core.errors import SelectorError, bad_input, bad_value
from selector.core.locks import ForkSafeLock
from selector.core.versions import canonicalize_name

T = TypeVar("T")
MAX_KEY = 200  # Hydra looks a key up as a file path: longer ones fail in the file system
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_OVERRIDE = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][\w./@-]*(=|$)", re.S)
_PACKAGE_KEY = re.compile(r"^platform\.packages\.(?P<name>[A-Za-z0-9._-]+)$")
_VERSION_KEYS = ("platform.cuda", "platform.capability")
_DETECTED_KEYS = ("platform.capability", "platform.cuda", "platform.gpu_name")
_INT = re.compile(r"^[+-]?[0-9_]+$")
# Groups conf/config.yaml's defaults list places in another package (`- stack@platform: none`):
# users write `stack=NAME`, Hydra is given `stack@platform=NAME`.
_PACKAGED_GROUPS = {"stack": "stack@platform"}


def normalize_overrides(overrides: Sequence[object], tree: Optional[ConfigTree] = None
                        ) -> List[str]:
    """Overrides checked against what selector accepts, with version values kept as text
    (`platform.packages.x=4.10` stays '4.10') and package names canonical (PEP 503)."""
    keys = schema_keys()
    out = []
    for raw in overrides:
        if not isinstance(raw, str):
            raise bad_input("override", raw, "is not a string of the form key=value")
        text = raw.strip()
        if not _OVERRIDE.match(text):
            raise bad_input("override", raw, "is malformed: overrides are key=value, "
                            "group=option, +key=value or ~key")
        head, eq, value = text.partition("=")
        prefix = next(m for m in ("++", "+", "~", "") if head.startswith(m))
        key = head[len(prefix):].strip()
        value = value.strip()
        if len(key) > MAX_KEY:
            raise bad_input("override", f"{key[:40]}...", f"has a key of {len(key)} "
                            f"characters; keys are at most {MAX_KEY}")
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            raise bad_input("override", raw, "changes Hydra's own settings, which selector does "
                            "not accept; use --config-dir (or config_dirs=) for extra configs")
        if key.startswith(("catalogue", "backend")):
            raise bad_input("override", raw, "changes the catalogue, which lives in files: add "
                            "or edit backend/<op>/<name>.yaml in a --config-dir instead")
        if "/" in key or "@" in key:  # a group path or a package: a YAML file from anywhere
            raise bad_input("override", raw, "names a config group path or a package, which "
                            f"selector does not accept: its config groups are "
                            f"{', '.join(PRESET_GROUPS)} and their options are preset names")
        if key == "platform.preset":
            raise bad_input(key, value, "is set by choosing a preset: write platform=<name> "
                            "(platform=auto detects this machine)")
        if "." not in key:
            _check_group(key, value, eq, prefix, keys, tree, raw)
        m = _PACKAGE_KEY.match(key)
        if m:  # one spelling per distribution, so that the later override wins
            key = f"platform.packages.{canonicalize_name(m.group('name'))}"
            prefix = "~" if prefix == "~" else "++"
        elif prefix == "~":
            if key in keys:
                raise bad_input(key, raw, "cannot be deleted: every key of the schema keeps a "
                                "value; set it instead (key=value, or key=null)")
            raise unknown_key(key)
        elif prefix == "+" and key in keys:
            raise bad_input(key, raw, f"already has a value: write {key}={value} (without +)")
        if eq and _INT.match(value) and len(value) > 18 and abs(int(value)) > MAX_INT:
            raise bad_input(key, f"{value[:12]}... ({len(value)} digits)", "is out of range")
        if eq and (m or key in _VERSION_KEYS) and value != "null" and not (
                len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""):
            value = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        if key in _PACKAGED_GROUPS:  # the defaults list names it with its package
            key = _PACKAGED_GROUPS[key]
        out.append(f"{prefix}{key}{eq}{value}")
    return out


def _check_group(key: str, value: str, eq: str, prefix: str, keys: Dict[str, Any],
                 tree: Optional[ConfigTree], raw: str) -> None:
    """A top-level override: a preset of a selector group, or a top-level scalar key."""
    if key in PRESET_GROUPS:
        if eq and not _NAME.match(value):  # never a path: the search path is not to be left
            if tree is not None:
                raise bad_value(key, value, tree.group_options(key), what="preset")
            raise bad_input(key, value, "is not a preset name (no paths)")
        if prefix:
            raise bad_input("override", raw, f"{key} is a config group: choose a preset with "
                            f"{key}=<name>")
    elif key not in keys:
        top = sorted(set(PRESET_GROUPS) | {k for k in keys if "." not in k})
        raise bad_value("override", key, top, what="key")


def compose(tree: ConfigTree, overrides: Sequence[object],
            build: Optional[Callable[[Dict[str, Any]], T]] = None) -> Any:
    """The composed run config plus the raw catalogue, from the cache or through Hydra;
    `build(data)` (when given) validates it, and its result is returned. A cached entry that
    `build` refuses is composed afresh; fresh data is cached only once `build` accepts it."""
    overrides = normalize_overrides(overrides, tree)
    key = cache.fingerprint(tree, overrides)
    store = cache.directory()
    if store is not None:
        data = cache.get(store, key)
        if data is not None:
            try:
                return build(data) if build else data
            except SelectorError:
                pass  # not what composition gives: compose afresh
    import_for_composing()
    lint_tree(tree)
    data = _compose_with_hydra(tree, overrides)
    data["catalogue"] = read_catalogue(tree)
    data["engines"] = tree.group_options("engine")  # the engines backend files may name
    data["engine_backends"] = read_engine_backends(tree)  # each engine's names (its home)
    data["explicit"] = sorted({o.partition("=")[0].lstrip("+") for o in overrides
                               if o.partition("=")[0].lstrip("+") in _DETECTED_KEYS})
    check_plain(data, "")
    result = build(data) if build else data
    if store is not None:
        cache.put(store, key, data)
    return result


def read_catalogue(tree: ConfigTree) -> Dict[str, Dict[str, Any]]:
    """Every backend file as plain data (validated in model.py): {op: {name: conf}}."""
    out: Dict[str, Dict[str, Any]] = {op: {} for op in schema.OPS}
    for (op, name), path in sorted(tree.backend_files.items()):
        out[op][name] = read_backend(path, f"catalogue.{op}.{name}")
    return out


def read_engine_backends(tree: ConfigTree) -> List[List[Any]]:
    """Each engine file's `backends:` (the engine's names, kernels and rules for catalogue
    backends: its home, conf/engine/<engine>.yaml) as plain data, validated in
    core/engines.py: [[engine, file, {op: {backend: entry}}], ...] by engine name. A file that
    is not a mapping is left to the engine's own validation (`engine=` and `check`)."""
    out: List[List[Any]] = []
    for name, path in sorted(tree.presets.get("engine", {}).items()):
        data = load_yaml(path, key=f"engine={name}")
        if isinstance(data, dict) and data.get("backends") is not None:
            out.append([name, str(path), data["backends"]])
    return out


def read_backend(path: Path, key: str = "") -> Dict[str, Any]:
    """One backend file as plain data (`key` prefixes the keys its errors name)."""
    data = load_yaml(path, key=key)
    if not isinstance(data, dict):
        raise SelectorError(f"{path}: a backend file must hold a mapping (rank, rules, ...), "
                            f"not {type(data).__name__}", where=str(path))
    return data


_HYDRA_LOCK = ForkSafeLock()  # GlobalHydra is process-wide: one compose at a time


def import_for_composing() -> None:
    """Every module composing needs, imported (and Hydra's plugin registry filled) before the
    composition lock is taken: a thread inside the lock then imports nothing, so a process
    that forks meanwhile gives a child that finds every module whole (selector/core/locks.py undoes
    an import a vanished thread left half done)."""
    import hydra.plugins.config_source  # noqa: F401 - the '# @package' header parser
    import omegaconf  # noqa: F401
    import yaml  # noqa: F401
    from hydra import compose, initialize_config_dir  # noqa: F401
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra  # noqa: F401
    from hydra.core.plugins import Plugins
    Plugins.instance()  # Hydra imports its core plugins on first use
    ConfigStore.instance()


def _compose_with_hydra(tree: ConfigTree, overrides: List[str]) -> Dict[str, Any]:
    import yaml
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    dirs = ",".join(hydra_quote(f"file://{d}") for d in tree.dirs[1:])
    search = [f"hydra.searchpath=[{dirs}]"]
    error: Optional[Exception]
    with _HYDRA_LOCK:
        ConfigStore.instance().store(name="selector_schema", node=schema.SelectorConf)
        try:
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=str(tree.dirs[0]), version_base="1.3"):
                cfg = hydra_compose(config_name="config", overrides=search + overrides,
                                    return_hydra_config=True)
            choices = dict(cfg.hydra.runtime.choices)
            data = cast(Dict[str, Any], OmegaConf.to_container(cfg, resolve=False))
        except (HydraException, OmegaConfBaseException, yaml.YAMLError, ValueError, TypeError,
                KeyError, AttributeError, RecursionError, ArithmeticError, OSError) as exc:
            error = exc
        else:
            error = None
        finally:
            GlobalHydra.instance().clear()
    if error is not None:
        validate_presets(tree)  # an error in a file: name the file
        raise translate(error, tree, overrides) from None
    data.pop("hydra", None)
    if isinstance(data.get("platform"), dict):  # the preset chosen, not a key a file may set
        data["platform"]["preset"] = choices.get("platform", "auto")
    return data


def hydra_quote(text: str) -> str:
    """A string as a quoted value of Hydra's override grammar: only a quote, and backslashes
    right before a quote, are escaped there (a Python repr would double every backslash)."""
    out, run = [], 0
    for ch in text:
        if ch == "\\":
            run += 1
            continue
        if ch == "'":
            out.append("\\" * (2 * run) + "\\'")
        else:
            out.append("\\" * run + ch)
        run = 0
    out.append("\\" * (2 * run))
    return "'" + "".join(out) + "'"
