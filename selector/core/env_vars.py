"""The environment variables selector reads, each parsed in one place with one error form.

A value that is not accepted is bad input (exit 2) naming the variable, the value and what
is accepted, never a traceback and never a silent default.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Dict, Optional

from selector.core.errors import bad_input

TIMEOUT_RANGE = (0.001, 86_400.0)  # one millisecond to one day
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

# name -> default seconds
TIMEOUTS = {"SELECTOR_NVML_TIMEOUT": 10.0, "SELECTOR_TORCH_PROBE_TIMEOUT": 60.0,
            "SELECTOR_PROBE_TIMEOUT": 120.0,
            "SELECTOR_VERIFY_TIMEOUT": 120.0,  # each verify child (inspect/verify.py)
            "SELECTOR_TUNE_TIMEOUT": 300.0}  # each timing child (inspect/tuning.py)


def parse_timeout(name: str, value: object) -> float:
    """A finite number of seconds in TIMEOUT_RANGE, from text or a number."""
    lo, hi = TIMEOUT_RANGE
    try:
        seconds = float(value) if not isinstance(value, bool) else math.nan  # type: ignore
    except (TypeError, ValueError, OverflowError):
        seconds = math.nan
    if not (math.isfinite(seconds) and lo <= seconds <= hi):
        raise bad_input(name, value, f"is not accepted: a timeout is a number of seconds from "
                        f"{lo:g} to {hi:g}")
    return seconds


def timeout(name: str) -> float:
    """The timeout an environment variable sets, else its default."""
    text = os.environ.get(name)
    return TIMEOUTS[name] if text is None else parse_timeout(name, text)


def flag(name: str) -> bool:
    """A boolean variable: 1/true/yes/on or 0/false/no/off (or empty, or unset: false)."""
    text = os.environ.get(name)
    if text is None or text.strip().lower() in _FALSE:
        return False
    if text.strip().lower() in _TRUE:
        return True
    raise bad_input(name, text, "is not accepted: use 1/true/yes/on or 0/false/no/off")


def words(name: str) -> list[str]:
    """A variable holding shell-quoted words (SELECTOR_VLLM_OVERRIDES): split as a shell would;
    an unbalanced quote is bad input naming the variable."""
    import shlex
    text = os.environ.get(name, "")
    try:
        return shlex.split(text)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise bad_input(name, text, f"is not accepted: {str(exc).lower()}; quote each value "
                        "as a shell would (key='a b')") from None


def cache_dir() -> Optional[Path]:
    """SELECTOR_CACHE_DIR, else $XDG_CACHE_HOME/selector, else ~/.cache/selector; None when
    SELECTOR_NO_CACHE is true. `~` is expanded; a relative XDG_CACHE_HOME is ignored (as the
    XDG spec says); a relative SELECTOR_CACHE_DIR is refused."""
    if flag("SELECTOR_NO_CACHE"):
        return None
    given = os.environ.get("SELECTOR_CACHE_DIR")
    if given:
        try:
            p = Path(given).expanduser()
        except RuntimeError:  # "~name" of no known user: Python cannot expand it
            raise bad_input("SELECTOR_CACHE_DIR", given, "starts with a ~user whose home "
                            "directory is unknown; give an absolute path") from None
        if not p.is_absolute():
            raise bad_input("SELECTOR_CACHE_DIR", given, "is not an absolute path")
        return p
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "selector"
    try:
        return Path.home() / ".cache" / "selector"
    except (RuntimeError, KeyError):  # no HOME and no password entry: run without a cache
        return None


def child_env() -> Dict[str, str]:
    """The environment for a child Python: this one, with this process's import path passed
    on through PYTHONPATH (an embedding process or a `--target` install may have put
    packages on sys.path that the child would otherwise not find)."""
    import sys
    env = dict(os.environ)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    for p in sys.path:
        if p and p not in parts and os.path.isdir(p):
            parts.append(p)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def switch(name: str, default: bool) -> bool:
    """A boolean variable with a default: unset or empty gives `default`; otherwise as `flag`
    (1/true/yes/on, 0/false/no/off, anything else bad input naming the variable)."""
    text = os.environ.get(name)
    return default if text is None or not text.strip() else flag(name)


def choice(name: str, accepted: tuple[str, ...], default: str) -> str:
    """A variable naming one of `accepted` (any case, surrounding space ignored); unset or empty
    gives `default`; anything else is bad input naming the variable and the accepted values."""
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    if text.strip().lower() in accepted:
        return text.strip().lower()
    raise bad_input(name, text, f"is not accepted: use one of {', '.join(accepted)} (or leave "
                    "it unset)", accepted=accepted)


PATH_MAX = 4096  # Linux's longest path: dlopen and open refuse a longer one
#: Unicode categories a path variable may not hold: control characters (C0, DEL and C1: a
#: newline, an ESC, the 8-bit CSI U+009B a terminal takes as an escape) and line and paragraph
#: separators (U+2028, U+2029). A byte that is not UTF-8 (a lone surrogate here) is a file
#: name's own and is accepted; printed lines escape it.
_REFUSED = ("Cc", "Zl", "Zp")


def path_text(name: str) -> Optional[str]:
    """A variable naming a file (a library, an output file): None when unset or empty; a value
    over PATH_MAX characters or holding a control character (a newline, an ESC, a C1 control)
    or a line separator is bad input. The file need not exist (the caller says what a missing
    one means)."""
    import unicodedata
    text = os.environ.get(name)
    if text is None or not text.strip():
        return None
    if len(text) > PATH_MAX or any(unicodedata.category(ch) in _REFUSED for ch in text):
        raise bad_input(name, text, f"is not accepted: a file name or path of at most {PATH_MAX} "
                        "characters, without control characters or line separators")
    return text


#: the shared libraries NVML's child loads when pynvml is not there (inspect/nvml_query.py);
#: a variable may name another file or a path (the test suite points them nowhere)
LIBRARIES = {"SELECTOR_NVML_LIBRARY": "libnvidia-ml.so.1",
             "SELECTOR_CUDA_LIBRARY": "libcuda.so.1"}


def library(name: str) -> str:
    """The library `name` (a key of LIBRARIES) names, else its default."""
    return path_text(name) or LIBRARIES[name]


# Variables of other programs, read as they read them ---------------------------------------

_TRITON_TRUE = ("1", "true", "on", "yes")


def triton_interpret() -> bool:
    """TRITON_INTERPRET as Triton itself reads it (triton 3.x `knobs.env_bool` ->
    `getenv_bool`: 1, true, on or yes in any case, without surrounding space, is true;
    anything else false). Triton's variable, so never refused here: selector's kernels run
    under the interpreter exactly when Triton interprets them."""
    return os.environ.get("TRITON_INTERPRET", "").lower() in _TRITON_TRUE


def cuda_home() -> tuple[Optional[str], str]:
    """(the CUDA toolkit CUDA_HOME, else CUDA_PATH, names, or None; which variable): as vLLM
    reads them (utils/deep_gemm.py `_deep_gemm_nvcc_path`, 0.34.0 lines 118-135): an empty
    value counts as unset."""
    home = os.environ.get("CUDA_HOME")
    if home:
        return home, "CUDA_HOME"
    return os.environ.get("CUDA_PATH") or None, "CUDA_PATH"


def nvcc_compiler() -> Optional[str]:
    """The nvcc DeepGEMM's JIT is told to use: DG_JIT_NVCC_COMPILER, else the older
    DJ_JIT_NVCC_COMPILER (vLLM and DeepGEMM read both; empty counts as unset)."""
    return os.environ.get("DG_JIT_NVCC_COMPILER") or os.environ.get("DJ_JIT_NVCC_COMPILER") \
        or None


def visible_devices() -> Optional[str]:
    """CUDA_VISIBLE_DEVICES as given (None when unset): a field of the verify cache's
    fingerprint, compared as text; CUDA parses it, selector does not."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


# The vLLM plugin's variables ----------------------------------------------------------------

VLLM = "SELECTOR_VLLM"  # 1/true/yes/on: the plugin decides; observe: shadow mode; else off
VLLM_OBSERVE_JSON = "SELECTOR_VLLM_OBSERVE_JSON"  # shadow mode's JSON report file


def vllm_mode() -> str:
    """SELECTOR_VLLM: "observe" (any case, surrounding space ignored), "on" (1/true/yes/on)
    or "off" (0/false/no/off, empty, unset); anything else bad input naming the variable."""
    text = os.environ.get(VLLM)
    if text is not None and text.strip().lower() == "observe":
        return "observe"
    if text is None or text.strip().lower() in _FALSE:
        return "off"
    if text.strip().lower() in _TRUE:
        return "on"
    raise bad_input(VLLM, text, "is not accepted: use 1/true/yes/on, observe, or "
                    "0/false/no/off")


def observe_json() -> Optional[Path]:
    """The file SELECTOR_VLLM_OBSERVE_JSON names (surrounding space dropped), else None."""
    text = path_text(VLLM_OBSERVE_JSON)
    return Path(text.strip()) if text else None


# backends/' switches -------------------------------------------------------------------------

def emulation_fused() -> bool:
    """SELECTOR_EMULATION_FUSED: whether the emulation MoE may take its fused Triton kernels by
    default on CUDA (unset or empty: yes; 0/false/no/off: the grouped path)."""
    return switch("SELECTOR_EMULATION_FUSED", True)


FP8_ACT_QUANT = ("triton", "torch")


def fp8_act_quant() -> str:
    """SELECTOR_FP8_ACT_QUANT: how the FP8 backends quantize activations on CUDA: `triton` (the
    one-launch kernel where it runs; also unset or empty) or `torch` (the torch form, for
    comparisons)."""
    return choice("SELECTOR_FP8_ACT_QUANT", FP8_ACT_QUANT, "triton")
