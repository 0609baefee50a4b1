"""The embedding API: build once from config, then decide per layer from a cache."""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from selector.config import ConfigTree, catalogues, compose
from selector.config.catalogues import discover as discover_tree
from selector.config.presets import proven_releases, stack_presets
from selector.core.decision import Decision
from selector.core.errors import SelectorError
from selector.core.layer import make_layer
from selector.core.locks import ForkSafeLock
from selector.core.model import RunConfig, make_run_config
from selector.core.resolver import Resolver
from selector.core.schema import Layer
from selector.inspect import environment

if TYPE_CHECKING:  # pragma: no cover
    from selector.checkpoint.launch_plan import LaunchPlan
    from selector.checkpoint.plan import Plan
    from selector.core.model import Catalogue, Detect, Platform
    from selector.core.profile import Measured
    from selector.core.rules import VerifyFailure, VerifyVerdict

log = logging.getLogger("selector")
# decisions kept per cache: a model has tens of distinct layers (times its shape buckets); a full
# cache starts over (bounded memory)
CACHE_SIZE = 4096


class Selector:
    """Decisions for the layers of one model on one platform under one policy.

    Thread-safe: the run config is immutable, decisions are immutable, and a race computes
    the same decision twice and keeps one. Its locks are fork-safe (a child forked while a
    thread holds one gets a fresh one).
    """

    def __init__(self, run_config: RunConfig, tree: Optional[ConfigTree] = None,
                 probes: Optional[Mapping[str, Tuple[bool, str]]] = None,
                 verify: Optional[Mapping[Tuple[str, str],
                                         Union[Tuple[VerifyFailure, ...], VerifyVerdict]]] = None,
                 profile: Optional[Measured] = None):
        self.run_config = run_config
        self.tree = tree
        self.probes = dict(probes or {})
        self.profile = profile  # the `selector tune` profile it ranks by (policy.preference)
        self.resolver = Resolver(run_config, self.probes, verify,
                                 (lambda: stack_presets(tree)) if tree is not None else (),
                                 profile,
                                 (lambda: proven_releases(tree)) if tree is not None else ())
        self._by_kwargs: Dict[Tuple[Any, ...], Decision] = {}
        self._by_layer: Dict[Layer, Decision] = {}
        # one object per distinct layer, so that a cache hit of decide() is an identity match
        # (the decide-hit budget needs it: comparing two equal Layers field by field costs more)
        self._layers: Dict[Layer, Layer] = {}
        self._defaults = run_config.layer.to_dict()
        self._lock = ForkSafeLock()

    @property
    def catalogue(self) -> Catalogue:
        return self.run_config.catalogue

    @property
    def platform(self) -> Platform:
        return self.run_config.platform

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
        if len(self._by_kwargs) >= CACHE_SIZE:
            self._by_kwargs.clear()
        return self._by_kwargs.setdefault(key, d)

    def layer(self, **layer: Any) -> Layer:
        """A validated Layer (unset keys from config): build once, then `decide` it cheaply."""
        made = make_layer({**self._defaults, **layer})
        if len(self._layers) >= CACHE_SIZE:
            self._layers.clear()
        return self._layers.setdefault(made, made)

    def decide(self, layer: Layer) -> Decision:
        """The decision for a Layer; the fastest path for an engine that keeps its layers."""
        d = self._by_layer.get(layer)
        if d is not None:
            return d
        d = self._flag_checked(self.resolver.decide(layer), layer)
        with self._lock:
            if len(self._by_layer) >= CACHE_SIZE:
                self._by_layer.clear()
            if layer not in self._by_layer:
                self._by_layer[layer] = d
                if log.isEnabledFor(logging.INFO):  # the line costs as much as the decision
                    log.info(d.log_line())
            return self._by_layer[layer]

    def _flag_checked(self, d: Decision, layer: Layer) -> Decision:
        """`d` without a backend flag the engine's code refuses for the layer's scheme (vLLM
        0.32.0's MXFP8 oracle has no --moe-backend value for its emulation): its launch hooks'
        table (checkpoint/launchers.py refused_value), the launch plan's own check; `no_flag`
        says why."""
        v = d.engine
        if v is None or not v.flags or v.backend is None:
            return d
        import dataclasses

        from selector.checkpoint.launchers import refused_value
        said = refused_value(self, layer.op, layer.quant, v.backend)
        if said is None:
            return d
        why = f"{v.flags[0]} {v.backend} is refused for a {layer.quant} layer: {said[0]} ({said[1]})"
        return dataclasses.replace(d, engine=dataclasses.replace(v, flags=(), no_flag=why))

    def plan(self, model_dir: os.PathLike[str] | str) -> Plan:
        """Every distinct quantized layer kind of a checkpoint directory, decided (checkpoint/plan.py)."""
        from selector.checkpoint.plan import plan
        return plan(self, model_dir)

    def launch_plan(self, model_dir: os.PathLike[str] | str) -> LaunchPlan:
        """A checkpoint as this selector's engine runs it under `parallel.*`: per layer group
        the backend, kernel and per-rank sizes, and the launch flags (launch.py)."""
        from selector.checkpoint.launch import launch_plan
        return launch_plan(self, model_dir)

    def default(self) -> Decision:
        """The decision for the configured layer (`layer=` preset and `layer.*` overrides)."""
        return self.decide(self.run_config.layer)


def load(overrides: Sequence[str] = (), *, config_dirs: Sequence[os.PathLike[str] | str] = (),
         detect: Optional[Detect] = None) -> Selector:
    """Build a Selector from the packaged configs, `config_dirs` and Hydra-style overrides.

    Raises SelectorError (one message naming key, value and accepted values) on bad input.
    """
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Sequence):
        raise SelectorError("overrides must be a list of strings such as ['platform=auto'], "
                            f"not {type(overrides).__name__}")
    if isinstance(config_dirs, (str, bytes)) or not isinstance(config_dirs, Sequence):
        raise SelectorError("config_dirs must be a list of directories, not "
                            f"{type(config_dirs).__name__}")
    tree = discover_tree(config_dirs)
    run = compose(tree, list(overrides), build=lambda data: make_run_config(
        data, tree.backend_files, detect or environment.detect, catalogues.present))
    probes = None
    if run.probe == "deep":
        from selector.inspect.probing import run_deep_probes
        probes = {name: (f.ok, f.message) for name, f in run_deep_probes(run.catalogue).items()}
    verify = None
    if run.probe == "verify":  # each usable backend run once per machine: selector.inspect.verify
        from selector.inspect.verify import verify_once
        verify = verify_once(Selector(run, tree), overrides, config_dirs).rejections()
    measured = None
    if run.policy.preference == "measured":  # a `selector tune` profile: docs/tuning.md
        from selector.inspect.tuning import active_profile
        measured = active_profile(run)
    elif run.policy.preference == "auto" and run.platform.source == "detected" \
            and run.platform.capability is not None:  # a packaged profile of this GPU model
        from selector.core.packaged_profiles import packaged_profile
        measured = packaged_profile(run)
    return Selector(run, tree, probes, verify, measured)
