"""What a decision means to the engine it was made for (`Decision.engine`): the engine's name for
the selected backend, the kernel the engine runs under that name and that kernel's quant scheme,
and how to request the backend (command-line flags, environment variables, config-file keys).

A typed, frozen object; `to_dict()` is the `engine` object of a decision's JSON
(docs/schemas/decision.schema.json), the one place its keys are spelled as strings."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from selector.core.text import shell_assignment, shell_word


@dataclass(frozen=True)
class EngineView:
    """name/label: the engine (`vllm`, "vLLM 0.34.0"); backend: the engine's name for the
    selected backend (None: nothing selected, or the engine has no name for it); kernel, scheme:
    the kernel the engine runs for the layer and its quant scheme (None where unknown); flags,
    env, config: the command-line words, environment variables and config-file keys that request
    the backend; no_flag: why no flag is printed where the engine's choice is a flag whose value
    the engine's code refuses for the layer's scheme ("" otherwise)."""
    name: str
    label: str
    backend: Optional[str] = None
    kernel: Optional[str] = None
    scheme: Optional[str] = None
    flags: Tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    no_flag: str = ""

    def command_line(self) -> str:
        """`VAR=1 --flag value` (and `config key: value` for an engine's config file)."""
        parts = [shell_assignment(k, val) for k, val in self.env.items()]
        parts += [shell_word(f) for f in self.flags]
        parts += [f"{k}: {val}" for k, val in self.config.items()]
        if parts:
            return " ".join(parts)
        return f"(none: {self.no_flag})" if self.no_flag else "(none: automatic selection)"

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object (keys in this order; lists and objects copied; `no_flag` only where
        set)."""
        out: Dict[str, Any] = {
            "name": self.name, "label": self.label, "backend": self.backend,
            "kernel": self.kernel, "scheme": self.scheme, "flags": list(self.flags),
            "env": dict(self.env),
            "config": {k: list(v) if isinstance(v, (list, tuple)) else v
                       for k, v in self.config.items()}}
        if self.no_flag:  # only where the engine refuses the flag's value for the scheme
            out["no_flag"] = self.no_flag
        return out
