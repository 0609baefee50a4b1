"""What every entry-point class shares: the selector gate and the missing-package error.

A kernel path runs only where the selector says its backend is usable for the layer: the gate
runs once, at load time (``KernelBackend.gate``, from the constructor when it is given a decision,
else from ``prepare`` with the weights' sizes), and raises :class:`BackendUnavailable` with every
reason (rule, message, source) the selector gave unless the backend's candidate status is
``selected``, ``eligible`` or ``opt_in``; ``apply`` does not ask again. Paths whose kernels are
not installed here raise :class:`BackendUnavailable` naming the missing distribution; none
returns a made-up result.

Imports neither torch nor flashinfer at module import.
"""
from __future__ import annotations

import functools
import importlib.metadata as md
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from selector.core.schema import USABLE

DEFAULT_OVERRIDES: Tuple[str, ...] = ("platform=auto",)


class BackendUnavailable(RuntimeError):
    """A backend cannot run this layer here; ``reasons`` lists (rule, message, source) triples."""

    def __init__(self, backend: str, op: str, reasons: Iterable[Tuple[str, str, str]],
                 status: str = "rejected", detail: str = ""):
        self.backend = backend
        self.op = op
        self.status = status
        self.reasons: List[Tuple[str, str, str]] = [(rule, msg, src) for rule, msg, src in reasons]
        lines = [f"backend {backend!r} cannot run this {op} layer here (status: {status})"]
        if detail:
            lines[0] += f": {detail}"
        lines += [f"  - [{rule}] {message} (source: {source})" for rule, message, source in self.reasons]
        super().__init__("\n".join(lines))


@functools.lru_cache(maxsize=16)
def _load_selector(overrides: Tuple[str, ...]):
    import selector
    return selector.load(overrides=list(overrides))


def decide(op: str, layer: Dict[str, Any], overrides: Optional[Sequence[str]] = None):
    """The selector's decision for a layer (``layer.*`` keywords), on the platform the overrides name."""
    sel = _load_selector(tuple(overrides) if overrides is not None else DEFAULT_OVERRIDES)
    return sel.select(op=op, **layer)


def require_usable(backend: str, op: str, decision) -> Any:
    """Raise :class:`BackendUnavailable` with the selector's reasons unless ``backend`` is usable."""
    try:
        cand = decision.candidate(backend)
    except KeyError as exc:
        raise BackendUnavailable(backend, op, [("catalogue", str(exc), "conf/backend")],
                                 status="unknown") from None
    if cand.status not in USABLE:
        raise BackendUnavailable(backend, op, [(r.rule, r.message, r.source) for r in cand.reasons],
                                 status=cand.status)
    return cand


def missing_distributions(names: Iterable[str]) -> list:
    """The distributions of ``names`` that are not installed (metadata only, nothing imported)."""
    out = []
    for n in names:
        try:
            md.version(n)
        except md.PackageNotFoundError:
            out.append(n)
    return out


def _satisfied(requirement: str) -> bool:
    """Whether a distribution ``name`` (or requirement ``name<=1.2``) is installed in range."""
    from packaging.requirements import InvalidRequirement, Requirement
    try:
        req = Requirement(requirement)
        version = md.version(req.name)
    except (InvalidRequirement, md.PackageNotFoundError):
        return False
    return not req.specifier or req.specifier.contains(version, prereleases=True)


def require_any_distribution(backend: str, op: str, names: Sequence[str], source: str) -> str:
    """The first installed distribution of ``names`` (each a name, or a requirement such as
    ``sgl-kernel<=0.3.21``), or :class:`BackendUnavailable` naming them."""
    for n in names:
        if _satisfied(n):
            return n
    wanted = " or ".join(repr(n) for n in names)
    raise BackendUnavailable(backend, op, [("package", f"distribution {wanted} is not installed", source)],
                             status="rejected", detail=f"requires {wanted}")


@functools.lru_cache(maxsize=1)
def _catalogue_entries() -> Dict[str, List[Tuple[str, str, Dict[str, Any]]]]:
    """entry point -> [(op, name, raw backend file)] of the packaged and installed catalogues
    (plain data read as `selector check` reads it; no Hydra, no kernel library)."""
    from selector.config.catalogues import discover as discover_tree
    from selector.config.composer import read_catalogue
    out: Dict[str, List[Tuple[str, str, Dict[str, Any]]]] = {}
    for op, backends in read_catalogue(discover_tree([])).items():
        for name, conf in backends.items():
            if isinstance(conf.get("entry_point"), str):
                out.setdefault(conf["entry_point"], []).append((op, name, conf))
    return out


def class_path(cls: type) -> str:
    """``selector.backends.wrappers.<module>:<Class>``, the entry point naming ``cls`` (``backends`` is
    installed as ``selector.backends``; tests import it under either name)."""
    module = cls.__module__
    if module.startswith("backends."):
        module = "selector." + module
    return f"{module}:{cls.__qualname__}"


def catalogue_entry(cls: type) -> Tuple[str, str, Dict[str, Any]]:
    """The backend file whose ``entry_point`` names ``cls``: (op, name, raw file)."""
    for klass in cls.__mro__:  # a subclass no file names is its base's backend
        hits = [h for h in _catalogue_entries().get(class_path(klass), [])
                if h[0] == getattr(cls, "op", h[0])]
        if hits:
            break
    if not hits:
        raise LookupError(f"no backend file names {class_path(cls)} as its entry_point: write "
                          f"conf/backend/<op>/<name>.yaml with entry_point: {class_path(cls)}, "
                          "or set the class's `backend` attribute")
    return hits[0]


def kernel_requirements(conf: Dict[str, Any]) -> Tuple[Tuple[str, ...], str]:
    """The backend file's first unconditional `package` rule: its requirements as written
    (any_of entries, or package+specifier) and its source."""
    for rule in conf.get("rules") or ():
        if isinstance(rule, dict) and rule.get("kind") == "package" and not rule.get("when"):
            if rule.get("any_of"):
                return tuple(str(x) for x in rule["any_of"]), str(rule.get("source", ""))
            return ((f"{rule.get('package')}{rule.get('specifier') or ''}",),
                    str(rule.get("source", "")))
    return (), ""


class _FromCatalogue:
    """A class attribute derived from the backend file naming the class as its entry point:
    `backend` is the file's stem, `needs_any` its kernel distribution rule. A class (or an
    instance built with a decision) that sets the attribute itself wins."""

    def __init__(self, what: str):
        self.what = what

    def __get__(self, obj: Any, owner: type) -> Any:
        op, name, conf = catalogue_entry(owner)
        return name if self.what == "backend" else kernel_requirements(conf)[0]


class KernelBackend:
    """Base of every entry-point class: ``prepare(weights)`` gates, then prepares; ``apply(x, prepared, ...)``.

    backend/op: the catalogue name and op this class implements. Constructor keywords describe the
    layer the way the selector does (``layer.*`` keys; the weights add their sizes at ``prepare``);
    ``decision`` takes a decision the caller already has (checked here, when the object is built),
    ``selector_overrides`` the platform to decide on (default ``platform=auto``). The decision is
    made once per layer at load time (docs/architecture.md): ``apply`` does not ask again.
    """

    #: the catalogue name: the stem of the backend file whose entry_point names the class
    backend: Any = _FromCatalogue("backend")
    op: str = ""
    #: distributions whose kernels ``apply`` calls (any one suffices); empty = FlashInfer/none
    needs_any: Tuple[str, ...] = ()
    needs_source: str = ""
    #: the quant schemes this class computes (None: all its backend file implements). A file may
    #: implement more schemes than its class: selector decides those layers and the engine builds
    #: the kernel (its `engines.<engine>.kernels`), as vLLM's FP8 and MX linear kernels.
    computes: Optional[Tuple[str, ...]] = None

    def __new__(cls, *args: Any, **kwargs: Any):
        """Refuse an option the class does not take (``Decision.instantiate(compute_dtype=...)``
        on a backend without one) with a ValueError naming it and the accepted options, not
        the constructor's TypeError."""
        from ..common.validate import options
        options(cls, kwargs)
        return super().__new__(cls)

    def __init__(self, *, quant: str = "nvfp4", activation: str = "silu",
                 act_and_mul: Optional[bool] = None, ep_size: int = 1,
                 swiglu_limit: Optional[float] = None, dtype: str = "bfloat16",
                 top_k: Optional[int] = None, num_tokens: Optional[int] = None, decision=None,
                 selector_overrides: Optional[Sequence[str]] = None,
                 layer: Optional[Dict[str, Any]] = None):
        if decision is not None and decision.selected is not None and \
                decision.entry_point == class_path(type(self)):
            self.backend = decision.selected  # the file that named this class for the decision
        if layer is not None:  # the decision's whole layer (Decision.instantiate)
            self.layer = dict(layer)
            quant, dtype = layer.get("quant", quant), layer.get("dtype", dtype)
            top_k, num_tokens = layer.get("top_k", top_k), layer.get("num_tokens", num_tokens)
            if layer.get("op", self.op) == "moe":
                activation = layer.get("activation", activation)
                act_and_mul = layer.get("act_and_mul", act_and_mul)
                ep_size = layer.get("ep_size", ep_size)
                swiglu_limit = layer.get("swiglu_limit", swiglu_limit)
        if self.computes is not None and quant not in self.computes:
            raise NotImplementedError(
                f"backend {self.backend!r}: {type(self).__name__} computes "
                f"{', '.join(self.computes)} layers, not {quant}: where the backend's file "
                f"implements {quant}, the engine builds its kernel (the decision's engine "
                f"kernel); a scheme new to the class needs its code first ({type(self).__name__}"
                f".computes)")
        self.quant = quant
        self.activation = activation
        self.act_and_mul = act_and_mul
        self.ep_size = ep_size
        self.swiglu_limit = swiglu_limit
        self.dtype = dtype
        self.top_k = top_k
        self.num_tokens = num_tokens
        self.decision = decision
        self.selector_overrides = list(selector_overrides) if selector_overrides is not None else None
        if decision is not None:
            self.gate()

    # -- selector gate (load time) -------------------------------------------------------------
    def layer_spec(self, geometry: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The ``layer.*`` keywords of this layer: constructor keywords plus the weights' sizes."""
        spec: Dict[str, Any] = {"quant": self.quant, "dtype": self.dtype}
        if self.num_tokens is not None:
            spec["num_tokens"] = self.num_tokens
        return spec

    def gate(self, geometry: Optional[Dict[str, Any]] = None, *,
             layer: Optional[Dict[str, Any]] = None):
        """The selector's candidate for this backend and layer, or :class:`BackendUnavailable`.

        Uses the decision given to the constructor, else decides for ``layer`` (default: the
        layer the constructor keywords and ``geometry``, the prepared weights' sizes, describe).
        """
        if self.decision is not None:
            return require_usable(self.backend, self.op, self.decision)
        spec = dict(layer) if layer is not None else self.layer_spec(geometry)
        return require_usable(self.backend, self.op, decide(self.op, spec, self.selector_overrides))

    def admit(self, prepared):
        """Gate once, on the layer these prepared weights make; return them (called by ``prepare``)."""
        head = prepared[0] if isinstance(prepared, tuple) else prepared
        self.gate(getattr(head, "geometry", None) or {})
        return prepared

    def require_kernels(self) -> str:
        """For paths whose kernels ship in another distribution: which one is installed, or raise."""
        return require_any_distribution(self.backend, self.op, self.needs_any, self.needs_source)

    # -- interface -----------------------------------------------------------------------------
    def prepare(self, weights):  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def apply(self, x, prepared, *args, out=None, **kwargs):  # pragma: no cover
        raise NotImplementedError


class MoEBackend(KernelBackend):
    op = "moe"

    def layer_spec(self, geometry: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        spec = super().layer_spec(geometry)
        spec.update(activation=self.activation, ep_size=self.ep_size,
                    swiglu_limit=self.swiglu_limit)
        if self.top_k is not None:
            spec["top_k"] = self.top_k
        spec.update(geometry or {})
        if self.act_and_mul is not None:
            spec["act_and_mul"] = self.act_and_mul
        elif "act_and_mul" not in spec:
            spec["act_and_mul"] = self.activation != "relu2"
        return spec

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):  # pragma: no cover
        raise NotImplementedError


class LinearBackend(KernelBackend):
    op = "linear"

    def layer_spec(self, geometry: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        spec = super().layer_spec(geometry)
        if geometry and "hidden_size" in geometry:
            spec["hidden_size"] = geometry["hidden_size"]
        return spec

    def apply(self, x, prepared, *, out=None):  # pragma: no cover
        raise NotImplementedError


class ExternalKernelMixin(KernelBackend):
    """For backends whose kernels live in vllm / sgl-kernel / b12x (none installed here).

    ``prepare`` raises :class:`BackendUnavailable` with the selector's reasons and the missing
    distribution together; where both are satisfied ``apply`` raises NotImplementedError naming
    the kernel call this project does not make. It never computes a result of its own.
    """

    kernel_call: str = ""
    #: the backend file's kernel distribution rule (its `any_of`, or package and specifier)
    needs_any: Any = _FromCatalogue("needs_any")

    def gate(self, geometry: Optional[Dict[str, Any]] = None, *,
             layer: Optional[Dict[str, Any]] = None):
        reasons, status, cand = [], "rejected", None
        try:
            cand = super().gate(geometry, layer=layer)
        except BackendUnavailable as exc:
            reasons, status = list(exc.reasons), exc.status
        try:
            self.require_kernels()
        except BackendUnavailable as exc:
            reasons += [r for r in exc.reasons if r not in reasons]
        if reasons:
            wanted = " or ".join(repr(n) for n in self.needs_any)
            raise BackendUnavailable(self.backend, self.op, reasons, status=status,
                                     detail=f"kernel {self.kernel_call} (distribution {wanted})")
        return cand

    def _unavailable_apply(self):
        dist = self.require_kernels()
        raise NotImplementedError(
            f"backend {self.backend!r}: distribution {dist!r} is installed, but this project does "
            f"not call {self.kernel_call}; run the layer through the engine that ships it")
