"""Checks on the files of a config tree before Hydra composes them, each naming the file.

A preset changes only its own group: its `# @package` header and its defaults list cannot
reach another group (a layer preset could otherwise rewrite the platform), its defaults cannot
loop, a platform preset's `preset:` key is its own name, and versions are quoted. `check`
runs the same functions as `explain`, so the two agree.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple, cast

from selector.config.dirs import ConfigTree
from selector.config.safe_yaml import load_document, read_config_bytes
from selector.core import schema, validation
from selector.core.errors import SelectorError, bad_input

# The package a preset of each group may write to (None: the group's own, Hydra's default).
# A stack preset writes platform.*: conf/config.yaml places the group there
# (`- stack@platform: none`), so it needs no header ('# @package platform' is still accepted).
PACKAGES = {"platform": (None, "_group_", "platform"), "stack": (None, "platform"),
            "layer": (None, "_group_", "layer"), "policy": (None, "_group_", "policy"),
            "engine": (None, "_group_", "engine")}
SCHEMA_NODES = {"platform": schema.PlatformConf, "stack": schema.PlatformConf,
                "layer": schema.LayerConf, "policy": schema.PolicyConf,
                "engine": schema.EngineConf}


def lint_tree(tree: ConfigTree, only: Optional[Path] = None) -> None:
    """Every file of the tree (or only those under the dir `only`): readable plain YAML,
    versions quoted, presets confined."""
    graph: Dict[Path, List[Path]] = {}
    backend_keys = {p: f"catalogue.{op}.{name}" for (op, name), p in tree.backend_files.items()}
    for f in tree.files():
        if only is not None and only not in f.parents:
            continue
        node, data = load_document(f, backend_keys.get(f, ""))
        if node is not None:
            _lint_versions(node, f, [])
        group = _group_of(tree, f)
        if group is not None:
            graph[f] = _lint_preset(tree, group, f, data, node)
    _refuse_loops(graph)


def _group_of(tree: ConfigTree, f: Path) -> Optional[str]:
    for group, options in tree.presets.items():
        if options.get(f.stem) == f:
            return group
    return None


def _lint_preset(tree: ConfigTree, group: str, f: Path, data: Any, node: Any) -> List[Path]:
    """The package header, the `preset:` key and the defaults list of one preset file."""
    package = _header_package(f)
    if package not in PACKAGES[group]:
        allowed = ", ".join(f"'# @package {p}'" for p in PACKAGES[group] if p)
        if None in PACKAGES[group]:
            allowed = f"none or {allowed}"
        if package is None:  # a stack preset writes into platform: it needs the header
            raise SelectorError(f"{f}: {group}={f.stem}: has no '# @package' header; a {group} "
                                f"preset changes {PACKAGES[group][-1]}.* and must start with "
                                f"{allowed} (accepted header: {allowed})", key=f"{group}={f.stem}",
                                where=str(f))
        raise bad_input(f"{group}={f.stem}", f"@package {package}", "writes outside its own "
                        f"group: a {group} preset may change only {PACKAGES[group][-1]}.* "
                        f"(accepted header: {allowed})", where=str(f))
    if data is not None and not isinstance(data, dict):
        raise SelectorError(f"{f}: a preset file must hold a mapping of keys, not "
                            f"{type(data).__name__}", where=str(f))
    data = data or {}
    _lint_shapes(group, data, f)
    if "preset" in data and (group != "platform" or data["preset"] != f.stem):
        raise bad_input(f"{PACKAGES[group][-1]}.preset", data["preset"], "is set by the preset's "
                        f"file name ({group}={f.stem}); remove the key" if group == "platform"
                        else "is the name of the platform preset; a stack preset cannot set it",
                        where=str(f))
    out = []
    defaults = data.get("defaults", [])
    if not isinstance(defaults, list):
        raise bad_input(f"{group}={f.stem}.defaults", defaults, "is not a list", where=str(f))
    for i, entry in enumerate(defaults):
        if entry == "_self_":
            continue
        target = tree.presets[group].get(entry) if isinstance(entry, str) else None
        if target is None:
            raise bad_input("defaults", entry, f"is not accepted: a {group} preset's defaults "
                            f"name only _self_ and other {group} presets "
                            f"({', '.join(tree.group_options(group))})",
                            where=f"{f} line {_defaults_line(node, i)}")
        out.append(target)
    return out


def _lint_shapes(group: str, data: Dict[str, Any], f: Path) -> None:
    """A mapping field given a list, or a list field a mapping (Hydra's merge would only say
    "Cannot merge DictConfig with ListConfig"): named with the key and the accepted shape."""
    import dataclasses
    import typing
    fields = {x.name: x for x in dataclasses.fields(SCHEMA_NODES[group])}
    for key, value in data.items():
        x = fields.get(key)
        origin = typing.get_origin(x.type) if x is not None and not isinstance(x.type, str) \
            else None
        if x is not None and isinstance(x.type, str):
            origin = dict if x.type.startswith("Dict[") else list if \
                x.type.startswith("List[") else None
        shapes: Dict[Any, Tuple[type, str]] = {dict: (dict, "a mapping"), list: (list, "a list")}
        shape = shapes.get(origin)
        if shape is not None and value is not None and not isinstance(value, shape[0]):
            problem = x.metadata.get("problem") or f"is not {shape[1]}"  # type: ignore[union-attr]
            raise bad_input(f"{PACKAGES[group][-1]}.{key}", value, f"{problem} (accepted "
                            f"shape: {shape[1]})", where=str(f))


def _defaults_line(node: Any, i: int) -> int:
    """The line of the i-th defaults entry (1-based), from the YAML node tree."""
    for k, v in node.value:
        if getattr(k, "value", None) == "defaults" and i < len(getattr(v, "value", ())):
            line: int = v.value[i].start_mark.line
            return line + 1
    return 1


def _header_package(f: Path) -> Optional[str]:
    """The `# @package` header, parsed as Hydra parses it."""
    from hydra.plugins.config_source import ConfigSource

    from selector.config.safe_yaml import read_config_bytes
    try:
        header = ConfigSource._get_header_dict(read_config_bytes(f).decode("utf-8"))
    except ValueError as exc:
        raise SelectorError(f"{f}: malformed '# @' header: {exc}", where=str(f)) from None
    return header.get("package")


def _refuse_loops(graph: Dict[Path, List[Path]]) -> None:
    """A preset whose defaults lead back to itself (Hydra would recurse until it gives up)."""
    done: Set[Path] = set()
    for start in sorted(graph):
        path: List[Path] = []
        stack = [(start, iter(graph.get(start, ())))]
        path.append(start)
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                done.add(node)
                stack.pop()
                path.pop()
            elif nxt in path:
                loop = path[path.index(nxt):] + [nxt]
                raise bad_input("defaults", nxt.stem, "makes a loop: " + " -> ".join(
                    f"{p.parent.name}/{p.stem}" for p in loop), where=str(start))
            elif nxt not in done:
                stack.append((nxt, iter(graph.get(nxt, ()))))
                path.append(nxt)


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


def validate_preset(path: Path, group: str) -> Dict[str, Any]:
    """One preset file merged onto its schema node: unknown keys and wrong types are errors
    naming the file (Hydra's own errors do not say which file a value came from)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from selector.config.hydra_errors import translate_omegaconf
    _, raw = load_document(path)
    raw = dict(raw or {})
    raw.pop("defaults", None)
    _lint_shapes(group, raw, path)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(SCHEMA_NODES[group]), raw)
        return cast(Dict[str, Any], OmegaConf.to_container(merged, resolve=False))
    except (OmegaConfBaseException, ValueError, TypeError, ArithmeticError) as exc:
        prefix = cast(str, PACKAGES[group][-1])  # each group's last package is a name
        raise translate_omegaconf(exc, prefix=prefix, where=str(path)) from None


def validate_presets(tree: ConfigTree) -> None:
    """Every preset of the tree on its own (the first error found is raised)."""
    for group, options in tree.presets.items():
        for name in sorted(options):
            validate_preset(options[name], group)


def stack_presets(tree: ConfigTree) -> List[Tuple[str, Dict[str, Any]]]:
    """(name, its `stack:` data: family, version, default) of each stack preset that
    describes one (`none` describes none), in name order. Read as plain data, no Hydra (and,
    from the cache, no YAML: stack_data)."""
    return [(name, dict(meta)) for name, meta in stack_data(tree)[0]]


#: release families selector has release data for: stack family -> (distribution, name shown).
#: TensorRT-LLM's are its 1.2 release and its main branch (conf/stack/trtllm_1_2.yaml,
#: trtllm_main.yaml: tensorrt-llm 1.3.0rc24, the pre-release its cited files are read from).
RELEASE_FAMILIES = {"vllm": ("vllm", "vLLM"), "sglang": ("sglang", "SGLang"),
                    "flashinfer": ("flashinfer-python", "FlashInfer"),
                    "trtllm": ("tensorrt-llm", "TensorRT-LLM")}


def proven_releases(tree: ConfigTree) -> List[Tuple[str, str, str]]:
    """(distribution, name shown, newest version) of each family of RELEASE_FAMILIES: the
    highest version of its distribution among the family's stack presets (what the catalogue
    and its proof cover; tests/knowledge_cases.py and the engine's parity sweep)."""
    return list(stack_data(tree)[1])


StackData = Tuple[List[Tuple[str, Dict[str, Any]]], List[Tuple[str, str, str]]]


def stack_data(tree: ConfigTree) -> StackData:
    """(stack_presets, proven_releases) of the tree: what every `explain` on a detected
    machine reads (the version guard). Kept in the composed-config cache under a key of the
    stack files' content and selector's code (cache.side_key), so a repeated run neither
    imports nor parses YAML; an entry is checked as fresh data would be (the cache is
    untrusted input), and anything amiss is read afresh from the files."""
    from selector.config import cache
    files = sorted(tree.presets.get("stack", {}).items())
    store = cache.directory()
    key = cache.side_key("stacks", [(p, read_config_bytes(p)) for _, p in files]) \
        if store is not None else ""
    if store is not None:
        entry = cache.get_side(store, key)
        if entry is not None:
            try:
                return _checked_stack_data(entry, files)
            except (SelectorError, ValueError, TypeError, KeyError):
                cache.bad_entry(store / f"{key}.json", "does not fit the schema",
                                "stack presets cache entry")
    out = _read_stack_data(files)
    if store is not None:
        cache.put(store, key, {"stacks": [[n, m] for n, m in out[0]],
                               "proven": [list(r) for r in out[1]]})
    return out


def _read_stack_data(files: List[Tuple[str, Path]]) -> StackData:
    """stack_data from the files themselves."""
    from packaging.version import InvalidVersion, Version
    stacks, packages = [], {}
    for name, path in files:
        _, data = load_document(path)
        meta = (data or {}).get("stack") if isinstance(data, dict) else None
        if meta is not None:
            stacks.append((name, validation.validate(schema.StackConf, meta,
                                                     f"stack={name}.stack", str(path))))
            packages[name] = (data or {}).get("packages") or {}
    newest: Dict[str, Version] = {}
    for name, meta in stacks:
        fam = RELEASE_FAMILIES.get(meta["family"])
        if fam is None:
            continue
        v = packages[name].get(fam[0]) if isinstance(packages[name], dict) else None
        try:
            ver = Version(str(v))
        except InvalidVersion:
            continue
        newest[meta["family"]] = max(newest.get(meta["family"], ver), ver)
    return stacks, [(RELEASE_FAMILIES[f][0], RELEASE_FAMILIES[f][1], str(v))
                    for f, v in sorted(newest.items())]


def _checked_stack_data(entry: Any, files: List[Tuple[str, Path]]) -> StackData:
    """A cached stack_data, checked as the files' own would be: every preset a stack file of
    this tree, its `stack:` data valid, each release a known family's with a valid version."""
    from packaging.version import Version
    paths = dict(files)
    stacks: List[Tuple[str, Dict[str, Any]]] = []
    for name, meta in entry["stacks"]:
        if not isinstance(name, str) or name not in paths or (stacks and name <= stacks[-1][0]):
            raise ValueError(name)  # not a file of this tree, or out of name order
        stacks.append((name, validation.validate(schema.StackConf, meta, f"stack={name}.stack",
                                                 str(paths[name]))))
    known = {fam[0]: fam[1] for fam in RELEASE_FAMILIES.values()}
    proven = []
    for dist, shown, version in entry["proven"]:
        if known.get(dist) != shown or not isinstance(version, str):
            raise ValueError(dist)
        proven.append((dist, shown, str(Version(version))))
    return stacks, proven


def default_stack(tree: ConfigTree) -> str:
    """The stack preset marked `stack: {default: true}` (what `matrix` uses without --stack)."""
    marked = [n for n, meta in stack_presets(tree) if meta["default"]]
    if len(marked) != 1:
        raise SelectorError(f"stack presets: exactly one must be marked `stack: {{default: "
                            f"true}}` (the matrix's default stack); marked: "
                            f"{', '.join(marked) or 'none'}")
    return marked[0]
