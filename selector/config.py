"""Compose the Hydra config tree (packaged conf/ plus user dirs) with overrides, with a cache.

Hydra is imported only on a cache miss: the composed config is stored as JSON keyed by the
content of every config file, the schema and the overrides, so a repeated run or a second
process answers without importing Hydra at all.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, cast

from . import schema
from .errors import SelectorError, bad_input, bad_value, did_you_mean

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_VERSION_KEY = re.compile(
    r"^(?P<prefix>\+\+|\+)?(?P<key>platform\.(?:packages\.[A-Za-z0-9._-]+|cuda|capability))"
    r"=(?P<value>.*)$", re.S)
_GROUPS = ("platform", "stack", "layer", "policy")
CACHE_FORMAT = 1


def packaged_conf_dir() -> Path:
    """conf/ as shipped: `selector/conf` in an installed wheel, `conf/` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    try:  # an editable install maps the package `selector.conf` onto the checkout's conf/
        from importlib.resources import files
        path = Path(str(files("selector.conf")))
        if (path / "config.yaml").is_file():
            return path
    except (ImportError, ModuleNotFoundError, TypeError):
        pass
    raise SelectorError("selector's packaged config directory (conf/config.yaml) is missing: "
                        "reinstall selector")


@dataclass(frozen=True)
class ConfigTree:
    """Where the config files are: the packaged dir first, then the user's dirs."""
    dirs: Tuple[Path, ...]
    backend_files: Dict[Tuple[str, str], Path] = field(default_factory=dict)

    @classmethod
    def discover(cls, user_dirs: Sequence[Union[str, os.PathLike[str]]] = ()) -> ConfigTree:
        dirs = [packaged_conf_dir()]
        from .catalogues import contributed_dirs  # installed distributions' catalogues
        dirs.extend(contributed_dirs(dirs[0]))
        for d in user_dirs:
            p = Path(d).expanduser().resolve()
            if not p.is_dir():
                raise bad_input("--config-dir", str(d), "is not a directory")
            if p not in dirs:
                _refuse_links_out(p)
                dirs.append(p)
        found: Dict[Tuple[str, str], Path] = {}
        for d in dirs:
            for op in schema.OPS:
                group = d / "backend" / op
                if not group.is_dir():
                    continue
                for f in sorted(group.iterdir()):
                    if f.suffix not in (".yaml", ".yml"):
                        continue
                    name = f.stem
                    if not _NAME.match(name):
                        raise bad_input("backend file name", f.name, "is not a valid backend "
                                        "name: use lower case letters, digits and '_'",
                                        where=str(f))
                    if (op, name) in found:
                        raise bad_input(f"catalogue.{op}.{name}", str(f),
                                        f"defines a backend that {found[op, name]} already "
                                        "defines; give it another name", where=str(f))
                    found[op, name] = f
        return cls(tuple(dirs), found)

    def files(self) -> List[Path]:
        out = []
        for d in self.dirs:
            out.extend(sorted(p for p in d.rglob("*") if p.suffix in (".yaml", ".yml")
                              and p.is_file()))
        return out

    def group_options(self, group: str) -> List[str]:
        opts: set[str] = set()
        for d in self.dirs:
            g = d / group
            if g.is_dir():
                opts.update(p.stem for p in g.iterdir() if p.suffix in (".yaml", ".yml"))
        return sorted(opts)

    def fingerprint(self, overrides: Sequence[str]) -> str:
        h = hashlib.sha256()
        h.update(f"format={CACHE_FORMAT}".encode())
        h.update(Path(schema.__file__).read_bytes())
        h.update(Path(__file__).read_bytes())
        for f in self.files():
            h.update(str(f).encode() + b"\0" + f.read_bytes() + b"\0")
        h.update(json.dumps(list(overrides)).encode())
        return h.hexdigest()


def _refuse_links_out(root: Path) -> None:
    """A user config dir may hold symbolic links, but none to a YAML file or a directory
    outside it: Hydra and the catalogue would follow them out of the search path."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if not p.is_symlink() or (name in filenames and p.suffix not in (".yaml", ".yml")):
                continue
            try:
                target = p.resolve()
            except (RuntimeError, OSError) as exc:  # a link loop
                raise bad_input("--config-dir", str(p), f"is a symbolic link that cannot be "
                                f"resolved ({exc})", where=str(p)) from None
            if target != root and root not in target.parents:
                raise bad_input("--config-dir", str(p), f"is a symbolic link to {target}, "
                                f"outside the config directory {root}; selector does not follow "
                                "links out of a config directory: copy the file in instead",
                                where=str(p))


def normalize_overrides(overrides: Sequence[str], tree: Optional[ConfigTree] = None
                        ) -> List[str]:
    """Make version overrides keep their text: `platform.packages.x=4.10` stays '4.10'."""
    out = []
    for raw in overrides:
        if not isinstance(raw, str):
            raise bad_input("override", raw, "is not a string of the form key=value")
        text = raw.strip()
        if not re.match(r"^(\+\+|\+|~)?[A-Za-z_][\w./@-]*(=|$)", text):
            raise bad_input("override", raw, "is malformed: overrides are key=value, "
                            "group=option, +key=value or ~key")
        if text.startswith(("hydra.", "+hydra.", "++hydra.", "~hydra.", "hydra/")):
            raise bad_input("override", raw, "changes Hydra's own settings, which selector does "
                            "not accept; use --config-dir (or config_dirs=) for extra configs")
        group, eq, option = text.partition("=")
        if eq and group.lstrip("+") in _GROUPS and not _NAME.match(option.strip()):
            group = group.lstrip("+")
            if tree is not None:  # never a path: the config search path is not to be left
                raise bad_value(group, option, tree.group_options(group), what="preset")
            raise bad_input(group, option, "is not a preset name (no paths)")
        key = group.strip().lstrip("+~")
        if eq and ("/" in key or "@" in key or
                   ("." not in key and re.search(r"\.\.|[/\\$]", option))):
            # `+foo=../../x` or a `group@package` would load a YAML file from anywhere
            raise bad_input("override", raw, "names a config group path, a package or a file "
                            "path, which selector does not accept: its config groups are "
                            f"{', '.join(_GROUPS)} and their options are preset names")
        m = _VERSION_KEY.match(text)
        if m:
            key, value = m.group("key"), m.group("value").strip()
            prefix = "++" if key.startswith("platform.packages.") else (m.group("prefix") or "")
            if value != "null" and not (len(value) >= 2 and value[0] == value[-1]
                                        and value[0] in "'\""):
                value = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
            text = f"{prefix}{key}={value}"
        out.append(text)
    return out


def _cache_dir() -> Optional[Path]:
    if os.environ.get("SELECTOR_NO_CACHE"):
        return None
    base = os.environ.get("SELECTOR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "selector")
    return Path(base)


def compose(tree: ConfigTree, overrides: Sequence[str]) -> Dict[str, Any]:
    """The composed run config plus the raw catalogue: from the cache, else through Hydra."""
    overrides = normalize_overrides(overrides, tree)
    cache = _cache_dir()
    key = tree.fingerprint(overrides)
    if cache is not None:
        try:
            return cast(Dict[str, Any], json.loads((cache / f"{key}.json").read_text()))
        except (OSError, ValueError):
            pass
    _lint_yaml(tree)
    data = _compose_with_hydra(tree, overrides)
    data["catalogue"] = read_catalogue(tree)
    if cache is not None:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            tmp = cache / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(json.dumps(data, sort_keys=True))
            os.replace(tmp, cache / f"{key}.json")
        except OSError:
            pass
    return data


def read_catalogue(tree: ConfigTree) -> Dict[str, Dict[str, Any]]:
    """Every backend file as plain data (validated in model.py): {op: {name: conf}}."""
    out: Dict[str, Dict[str, Any]] = {op: {} for op in schema.OPS}
    for (op, name), path in sorted(tree.backend_files.items()):
        data = load_yaml(path)
        if not isinstance(data, dict):
            raise SelectorError(f"{path}: a backend file must hold a mapping (rank, rules, ...), "
                                f"not {type(data).__name__}", where=str(path))
        _refuse_interpolation(data, f"catalogue.{op}.{name}", str(path))
        out[op][name] = data
    return out


_HYDRA_LOCK = threading.Lock()


def _compose_with_hydra(tree: ConfigTree, overrides: List[str]) -> Dict[str, Any]:
    import yaml
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    for o in overrides:
        if o.lstrip("+~").startswith(("catalogue", "backend")):
            raise bad_input("override", o, "changes the catalogue, which lives in files: add "
                            "or edit backend/<op>/<name>.yaml in a --config-dir instead")
    search = [f"hydra.searchpath=[{','.join(repr('file://' + str(d)) for d in tree.dirs[1:])}]"]
    with _HYDRA_LOCK:  # GlobalHydra is process-wide: one compose at a time (threads race)
        ConfigStore.instance().store(name="selector_schema", node=schema.SelectorConf)
        try:
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=str(tree.dirs[0]), version_base="1.3"):
                cfg = hydra_compose(config_name="config", overrides=search + overrides)
            data = cast(Dict[str, Any], OmegaConf.to_container(cfg, resolve=False))
        except (HydraException, OmegaConfBaseException, yaml.YAMLError, ValueError, TypeError,
                KeyError, AttributeError, RecursionError) as exc:
            raise translate(exc, tree, overrides) from None
        finally:
            GlobalHydra.instance().clear()
    data.pop("hydra", None)
    _refuse_interpolation(data, "")
    return data


MAX_CONFIG_BYTES = 256 * 1024  # the largest packaged config file is about 6 KB
MAX_CONFIG_NODES = 50_000  # values after YAML aliases are expanded (an alias bomb is refused)
MAX_CONFIG_DEPTH = 64  # nesting levels (the packaged files use at most 5)


def load_yaml(path: Path, node: bool = False) -> Any:
    """A YAML file as data (or as a node tree), with errors that name the file and line.

    A file over MAX_CONFIG_BYTES, one whose aliases expand to more than MAX_CONFIG_NODES values
    ("billion laughs"), or one with a recursive alias is refused before anything walks it.
    """
    import yaml
    try:
        text = path.read_text()
        if len(text) > MAX_CONFIG_BYTES:
            raise SelectorError(f"{path}: config file is too large ({len(text)} characters; "
                                f"at most {MAX_CONFIG_BYTES})", where=str(path))
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # libyaml: ~15x faster
        try:
            root = loader.get_single_node()
            if root is not None:
                _check_expansion(root, path)
            if node or root is None:
                return root
            return loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SelectorError(f"{path}{line}: malformed YAML: {problem}", where=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SelectorError(f"{path}: cannot read config file: {exc}", where=str(path)) from None
    except RecursionError:
        raise SelectorError(f"{path}: config file is nested too deeply", where=str(path)) from None


_PLAIN_TAGS = frozenset("tag:yaml.org,2002:" + t for t in (
    "null", "bool", "int", "float", "binary", "timestamp", "omap", "pairs", "set", "str", "seq",
    "map", "merge", "value"))


def _check_expansion(root: Any, path: Path) -> None:
    """Refuse recursive aliases and documents that expand past MAX_CONFIG_NODES (iteratively:
    aliases share nodes, so sizes are memoised and the walk is linear in the file)."""
    import yaml
    sizes: Dict[int, int] = {}
    active = set()
    stack = [(root, False, 0)]
    while stack:
        n, done, depth = stack.pop()
        if depth > MAX_CONFIG_DEPTH:  # OmegaConf would recurse past Python's limit
            raise SelectorError(f"{path} line {n.start_mark.line + 1}: config file is nested "
                                f"too deeply (more than {MAX_CONFIG_DEPTH} levels)",
                                where=str(path))
        kids = [x for pair in n.value for x in pair] if isinstance(n, yaml.MappingNode) else \
            list(n.value) if isinstance(n, yaml.SequenceNode) else []
        if done:
            active.discard(id(n))
            sizes[id(n)] = 1 + sum(sizes[id(k)] for k in kids)
            if sizes[id(n)] > MAX_CONFIG_NODES:
                raise SelectorError(f"{path} line {n.start_mark.line + 1}: config file expands "
                                    f"to more than {MAX_CONFIG_NODES} values (YAML aliases?)",
                                    where=str(path))
        elif id(n) in active:
            raise SelectorError(f"{path} line {n.start_mark.line + 1}: a YAML alias refers to a "
                                "node that contains it; config files must be plain trees",
                                where=str(path))
        elif id(n) not in sizes:
            if n.tag not in _PLAIN_TAGS:
                raise SelectorError(f"{path} line {n.start_mark.line + 1}: YAML tag {n.tag!r} "
                                    "is not accepted; config files are plain data",
                                    where=str(path))
            active.add(id(n))
            stack.append((n, True, depth))
            stack.extend((k, False, depth + 1) for k in kids)


def _lint_yaml(tree: ConfigTree) -> None:
    """Catch YAML syntax errors (with file and line) and unquoted version numbers in files."""
    for f in tree.files():
        node = load_yaml(f, node=True)
        if node is not None:
            _lint_versions(node, f, [])
            _lint_defaults(node, f)


def _lint_defaults(root: Any, path: Path) -> None:
    """A defaults list names presets inside the config search path: no `..`, no ${...}."""
    import yaml
    if not isinstance(root, yaml.MappingNode):
        return
    stack = [v for k, v in root.value if getattr(k, "value", None) == "defaults"]
    while stack:
        n = stack.pop()
        if isinstance(n, yaml.MappingNode):
            stack.extend(x for pair in n.value for x in pair)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
        elif isinstance(n, yaml.ScalarNode) and re.search(r"\.\.|\$\{|\\", str(n.value)):
            raise bad_input("defaults", n.value, "leaves the config search path or uses an "
                            "interpolation; a defaults entry names a preset such as "
                            "'/platform: cpu'", where=f"{path} line {n.start_mark.line + 1}")


def _lint_versions(node: Any, path: Path, keys: List[str]) -> None:
    import yaml
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            _lint_versions(v, path, keys + [str(getattr(k, "value", k))])
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            _lint_versions(v, path, keys)
    elif isinstance(node, yaml.ScalarNode) and keys:
        versiony = keys[-1] in ("cuda", "capability") or (len(keys) >= 2 and keys[-2] ==
                                                          "packages" and ("platform" in keys or
                                                          path.parent.name in ("platform",
                                                                               "stack")))
        if versiony and node.tag.endswith((":float", ":int")) and not node.style:
            raise bad_input(".".join(keys), node.value, "is an unquoted number; quote versions "
                            f"(\"{node.value}\") so that 4.10 does not become 4.1",
                            where=f"{path} line {node.start_mark.line + 1}")


def _refuse_interpolation(data: Any, key: str, where: Optional[str] = None) -> None:
    """Configs may not reach the environment or files through ${...} resolvers."""
    if isinstance(data, dict):
        for k, v in data.items():
            _refuse_interpolation(v, f"{key}.{k}" if key else str(k), where)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            _refuse_interpolation(v, f"{key}[{i}]", where)
    elif isinstance(data, str) and "${" in data:
        raise bad_input(key, data, "uses an interpolation (${...}); selector configs are data "
                        "and may not read environment variables, files or other keys",
                        where=where)


# ---------------------------------------------------------------------------------------------
# Hydra/OmegaConf exceptions -> one sentence naming the key, the value and the accepted values

def schema_keys(cls: type = schema.SelectorConf, prefix: str = "") -> Dict[str, Any]:
    """Every dotted key of the schema, mapped to its dataclass field type holder."""
    out: Dict[str, Any] = {}
    for f in fields(cls):
        key = f"{prefix}{f.name}"
        default = getattr(cls(), f.name)
        out[key] = default
        if is_dataclass(default):
            out.update(schema_keys(type(default), key + "."))
    return out


def translate(exc: BaseException, tree: ConfigTree, overrides: Sequence[str]) -> SelectorError:
    parts: List[str] = []
    e: Optional[BaseException] = exc
    while e is not None and len(parts) < 8:  # Hydra wraps OmegaConf's error as the cause
        parts.append(str(e))
        e = e.__cause__ or e.__context__
    text = "\n".join(parts)
    where = None
    m = re.search(r"In '([^']+)'", text)
    if m:
        where = _file_of(tree, m.group(1))
    if type(exc).__name__ == "MissingConfigException" or text.startswith("Could not find"):
        m = re.search(r"Could not find '([^']+)'", text)
        target = m.group(1) if m else "?"
        group, _, option = target.rpartition("/")
        if group in _GROUPS:
            return bad_value(group, option, tree.group_options(group), what="preset")
        return SelectorError(f"{where + ': ' if where else ''}config {target!r} not found",
                             where=where)
    if type(exc).__name__ == "OverrideParseException":
        return SelectorError(f"malformed override: {text.splitlines()[0]}. Overrides are "
                             "key=value, group=option, +key=value or ~key")
    m = re.search(r"full_key: (\S+)", text)
    full_key = m.group(1) if m else None
    keys = schema_keys()
    if "not in struct" in text or "not in '" in text or "Could not override" in text or \
            "Could not append" in text or "Could not delete" in text:
        m2 = re.search(r"Could not (?:override|append to|delete from config)[^']*'([^']+)'",
                       text)
        key = (m2.group(1) if m2 else None) or full_key or "?"
        return _unknown_key(key, keys, where)
    if full_key and "does not support deletion" in text:
        return bad_input(full_key, f"~{full_key}", "cannot be deleted: every key of the schema "
                         "keeps a value; set it instead (key=value)", where=where)
    m3 = re.search(r"Value '([^']*)'", text)
    if full_key and (m3 or "could not be converted" in text or "Cannot assign" in text or
                     "Cannot convert" in text or "is not Optional" in text):
        value = m3.group(1) if m3 and "is not Optional" not in text else \
            _override_value(overrides, full_key)
        accepted = _VOCABULARIES.get(full_key)
        return bad_input(full_key, value, f"is not accepted: it must be {_kind_of(full_key)}" +
                         (f"; accepted: {', '.join(sorted(accepted))}" if accepted else ""),
                         where=where)
    if "Missing mandatory value" in text:
        return bad_input(full_key or "?", "???", "is required but missing", where=where)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return SelectorError(f"{where + ': ' if where else ''}invalid config: {first}", where=where)


def _unknown_key(key: str, keys: Dict[str, Any], where: Optional[str]) -> SelectorError:
    parent, _, leaf = key.rpartition(".")
    if re.match(r"^catalogue\.(moe|linear)\.[a-z0-9_]+\.", key + "."):
        parts = key.split(".")
        parent = "backend file" if len(parts) <= 4 else ".".join(parts[3:-1])
        from .rules import WHEN_FIELDS, rule_fields
        siblings = [f.name for f in fields(schema.BackendConf)] if len(parts) <= 4 else \
            list(rule_fields())
        if len(parts) > 4 and parts[-2] == "when":
            siblings = list(WHEN_FIELDS)
        return bad_value(key, leaf, siblings, what="key", where=where)
    siblings = [k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == parent]
    if not siblings:
        siblings = [k for k in keys if "." not in k]
        return bad_value("override", key, siblings, what="key", where=where)
    return bad_value(parent or "config", leaf, siblings, what="key", where=where)


_VOCABULARIES = {"layer.op": schema.OPS, "layer.quant": schema.QUANTS,
                 "layer.activation": schema.ACTIVATIONS, "layer.dtype": schema.DTYPES,
                 "layer.all2all": schema.ALL2ALL}


def _override_value(overrides: Sequence[str], key: str) -> str:
    """The value an override gave `key` (the text after '='), for an error message."""
    for o in overrides:
        k, sep, v = o.lstrip("+~").partition("=")
        if sep and k.strip() == key:
            return v.strip()
    return "?"


def _kind_of(key: str) -> str:
    """What a schema key holds, in words, from its dataclass annotation."""
    node: Any = schema.SelectorConf
    hint: Any = None
    for part in key.split("."):
        hints = {f.name: f.type for f in fields(node)} if is_dataclass(node) else {}
        hint = hints.get(part)
        node = getattr(schema, str(hint), None)
    words = {"int": "an integer", "bool": "a boolean (true or false)", "float": "a number",
             "str": "a string"}
    text = str(hint or "")
    for name, word in words.items():
        if text == name:
            return word
        if text == f"Optional[{name}]":
            return f"null or {word}"
    return "of the accepted type"


def _file_of(tree: ConfigTree, name: str) -> str:
    for d in tree.dirs:
        for suffix in (".yaml", ".yml"):
            p = d / f"{name}{suffix}"
            if p.is_file():
                return str(p)
    return name


__all__ = ["ConfigTree", "compose", "normalize_overrides", "translate", "did_you_mean"]
