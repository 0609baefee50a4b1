"""The embedding API: build once from config, then decide per layer from a cache."""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from .config import ConfigTree, compose
from .decision import Decision
from .errors import SelectorError
from .locks import ForkSafeLock
from .model import Layer, Model, make_layer, make_model
from .resolver import Resolver

log = logging.getLogger("selector")


class Selector:
    """Decisions for the layers of one model on one platform under one policy.

    Thread-safe: the model is immutable, decisions are immutable, and a race computes the
    same decision twice and keeps one. The caches are bounded: each holds at most MAX_CACHED
    entries and starts afresh when full (an engine asks about a few hundred distinct layers;
    a caller sweeping num_tokens must not grow the process without bound).
    """

    MAX_CACHED = 4096

    def __init__(self, model: Model, tree: Optional[ConfigTree] = None,
                 probes: Optional[Mapping[str, Tuple[bool, str]]] = None):
        self.model = model
        self.tree = tree
        self.probes = dict(probes or {})
        self.resolver = Resolver(model, self.probes)
        self._by_kwargs: Dict[Tuple, Decision] = {}
        self._by_layer: Dict[Layer, Decision] = {}
        self._layers: Dict[Layer, Layer] = {}  # one canonical object per distinct layer
        self._defaults = model.layer.to_dict()
        self._lock = ForkSafeLock()

    @property
    def catalogue(self):
        return self.model.catalogue

    @property
    def platform(self):
        return self.model.platform

    def select(self, **layer: Any) -> Decision:
        """The decision for a layer given as `layer.*` keywords; unset ones come from config."""
        # the types too: True == 1 and 1.0 == 1, yet ep_size=True is bad input however often
        # ep_size=1 was asked before
        key = (*layer, *layer.values(), *map(type, layer.values()))  # flat: cheapest to hash
        try:
            return self._by_kwargs[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable value: validate it for a clear error
            return self.decide(self.layer(**layer))
        d = self.decide(self.layer(**layer))
        _bound(self._by_kwargs, self.MAX_CACHED)
        return self._by_kwargs.setdefault(key, d)

    def layer(self, **layer: Any) -> Layer:
        """A validated Layer (unset keys from config): build once, then `decide` it cheaply.

        Equal layers come back as one object, so a cache hit never compares fields.
        """
        made = make_layer({**self._defaults, **layer})
        _bound(self._layers, self.MAX_CACHED)
        return self._layers.setdefault(made, made)

    def decide(self, layer: Layer) -> Decision:
        """The decision for a Layer; the fastest path for an engine that keeps its layers."""
        d = self._by_layer.get(layer)
        if d is not None:
            return d
        d = self.resolver.decide(layer)
        with self._lock:
            _bound(self._by_layer, self.MAX_CACHED)
            if layer not in self._by_layer:
                self._by_layer[layer] = d
                log.info(d.log_line())
            return self._by_layer[layer]

    def default(self) -> Decision:
        """The decision for the configured layer (`layer=` preset and `layer.*` overrides)."""
        return self.decide(self.model.layer)


def _bound(cache: Dict, limit: int) -> None:
    """Start a full cache afresh (cheaper than LRU bookkeeping on every hit)."""
    if len(cache) >= limit:
        cache.clear()


def load(overrides: Sequence[str] = (), *, config_dirs: Sequence[os.PathLike] = (),
         detect=None) -> Selector:
    """Build a Selector from the packaged configs, `config_dirs` and Hydra-style overrides.

    Raises SelectorError (one message naming key, value and accepted values) on bad input.
    """
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Sequence):
        raise SelectorError("overrides must be a list of strings such as ['platform=auto'], "
                            f"not {type(overrides).__name__}")
    if isinstance(config_dirs, (str, bytes)) or not isinstance(config_dirs, Sequence):
        raise SelectorError("config_dirs must be a list of directories, not "
                            f"{type(config_dirs).__name__}")
    tree = ConfigTree.discover(config_dirs)
    model = compose(tree, list(overrides), build=lambda data: make_model(
        data, tree.backend_files, tree.group_options("platform"), detect))
    probes = None
    if model.probe == "deep":
        from .probing import run_deep_probes
        probes = {name: (f.ok, f.message) for name, f in run_deep_probes(model.catalogue).items()}
    return Selector(model, tree, probes)
