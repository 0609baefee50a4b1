"""The config layer, by job:

- `dirs`: find config dirs and their files (the packaged conf/ first, then the user's);
- `safe_yaml`: read a config file safely (kind, size, tags, aliases, plain values);
- `presets`: checks on preset files that keep each preset inside its own group;
- `composer`: overrides checked, the tree composed by Hydra, with its `cache`;
- `hydra_errors`: Hydra/OmegaConf exceptions translated from their attributes.
"""
from __future__ import annotations

from .composer import compose, normalize_overrides, read_backend, read_catalogue
from .dirs import ConfigTree, packaged_conf_dir
from .hydra_errors import schema_keys, translate
from .presets import lint_tree, validate_preset, validate_presets
from .safe_yaml import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, MAX_CONFIG_NODES, load_yaml

__all__ = ["ConfigTree", "compose", "normalize_overrides", "read_catalogue", "read_backend",
           "translate",
           "packaged_conf_dir", "schema_keys", "lint_tree", "validate_preset",
           "validate_presets", "load_yaml", "MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH",
           "MAX_CONFIG_NODES"]
