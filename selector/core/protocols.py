"""The few methods that drivers of a Selector call, as protocols of the bottom layer.

A checkpoint plan (checkpoint/plan.py), a launch plan (checkpoint/launch.py) and verification
(inspect/verify.py) drive a Selector, which lives above them (selector/api.py). They depend on
`SelectorLike` instead, so that imports go one way (tests/test_layers.py counts `TYPE_CHECKING`
imports too).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Protocol, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.decision import Decision
    from selector.core.model import Catalogue, RunConfig
    from selector.core.profile import Measured
    from selector.core.resolver import Resolver
    from selector.core.schema import Layer


class SelectorLike(Protocol):
    """What plan, launch and verify call on a Selector (selector.api.Selector is the one)."""

    run_config: RunConfig
    tree: Any  # selector.config.ConfigTree or None: handed back to the constructor only
    probes: Dict[str, Tuple[bool, str]]
    resolver: Resolver
    profile: Optional[Measured]  # the `selector tune` profile it ranks by, if any

    def __init__(self, run_config: RunConfig, tree: Any = None,
                 probes: Optional[Mapping[str, Tuple[bool, str]]] = None) -> None: ...

    @property
    def catalogue(self) -> Catalogue: ...

    def select(self, **layer: Any) -> Decision: ...

    def layer(self, **layer: Any) -> Layer: ...

    def decide(self, layer: Layer) -> Decision: ...

    def plan(self, model_dir: os.PathLike[str] | str) -> Any: ...
