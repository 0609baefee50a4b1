"""The config layer, by job:

- `dirs`: the files of given config dirs, checked by name and kind;
- `catalogues`: `discover` the run's tree: the packaged conf/, installed distributions'
  catalogues (each checked), then the user's dirs; where a file came from;
- `safe_yaml`: read a config file safely (kind, size, tags, aliases, plain values);
- `presets`: checks on preset files that keep each preset inside its own group;
- `composer`: overrides checked, the tree composed by Hydra, with its `cache`;
- `hydra_errors`: Hydra/OmegaConf exceptions translated from their attributes.
"""
from __future__ import annotations

from selector.config.catalogues import discover
from selector.config.composer import compose, normalize_overrides, read_backend, read_catalogue, read_engine_backends
from selector.config.dirs import ConfigTree
from selector.config.hydra_errors import schema_keys, translate
from selector.config.presets import lint_tree, validate_preset, validate_presets
from selector.config.safe_yaml import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, MAX_CONFIG_NODES, load_yaml
from selector.core.packaged import packaged_conf_dir

__all__ = ["ConfigTree", "discover", "compose", "normalize_overrides", "read_catalogue",
           "read_engine_backends", "read_backend", "translate",
           "packaged_conf_dir", "schema_keys", "lint_tree", "validate_preset",
           "validate_presets", "load_yaml", "MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH",
           "MAX_CONFIG_NODES"]
