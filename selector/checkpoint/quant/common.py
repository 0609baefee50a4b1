"""What every checkpoint format's reader gives (Verdict, Quantization), the bounds on the
patterns a checkpoint lists (`re:` patterns run under a structural bound: no nested or
alternated repetition, few repeats, bounded length, so that a hostile pattern is refused by name
instead of backtracking for ever), and vLLM's name mapping."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from selector.checkpoint.arch import Architecture, Module
from selector.core.errors import bad_input

NVFP4_SCHEMES = ("nvfp4", "nvfp4_w4a16")
MAX_PATTERNS = 100_000  # exclusion/ignore/target entries (real ones: a few hundred)
MAX_PATTERN_CHARS = 1_000
MAX_REGEX_REPEATS = 4  # `*`, `+`, `{m,n}` with n > 1 in one `re:` pattern


@dataclass(frozen=True)
class Verdict:
    """What vLLM builds for one module: `scheme` a `layer.quant` value (None: unquantized, or a
    scheme the vocabulary has no value for, named by `other`)."""
    scheme: Optional[str]  # nvfp4 | nvfp4_w4a16 | fp8_tensor | ... | mxfp4 | None
    why: str
    other: Optional[str] = None  # a scheme vLLM builds that has no layer.quant value, if any
    warning: Optional[str] = None  # said on the layer kind (projections disagree, ...)
    # the activation scales' granularity where vLLM's is not the scheme's own (layer.act_scale)
    act_scale: Optional[str] = None


@dataclass(frozen=True)
class Quantization:
    format: str  # "ModelOpt" | "compressed-tensors" | "FP8" | "MXFP4"
    source: str  # the file and key it came from
    algo: str  # NVFP4 | FP8_PB_WO | MIXED_PRECISION | compressed-tensors format | block 128x128
    verdict_of: Callable[[Module], Verdict] = field(compare=False)
    excluded: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()
    where: str = ""  # the file it was read from
    release: str = "0.32.0"  # the vLLM release whose reading this is (quant/releases.py)

    def describe(self) -> str:
        return f"{self.format} {self.algo} ({self.source})"


# ---------------------------------------------------------------------------------------------
# Bounded regular expressions

def _check_regex(tree: Any, pattern: str) -> None:
    from re import _constants as C  # type: ignore[attr-defined]
    from re import _parser as P  # type: ignore[attr-defined]
    repeats = 0

    def walk(items: Any, in_repeat: bool) -> None:
        nonlocal repeats
        for op, av in items:
            if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
                lo, hi, body = av
                if hi is C.MAXREPEAT or hi > 1:
                    repeats += 1
                    if in_repeat:
                        raise ValueError("a repetition inside a repetition")
                    walk(body, True)
                else:
                    walk(body, in_repeat)
            elif op is C.BRANCH:
                if in_repeat:
                    raise ValueError("alternatives inside a repetition")
                for b in av[1]:
                    walk(b, in_repeat)
            elif op is C.SUBPATTERN:
                walk(av[-1], in_repeat)
            elif op in (C.ASSERT, C.ASSERT_NOT):
                walk(av[1], in_repeat)
            elif op in (C.GROUPREF, C.GROUPREF_EXISTS):
                raise ValueError("a back-reference")
            elif op is C.ATOMIC_GROUP:
                walk(av, in_repeat)
    del P
    walk(tree, False)
    if repeats > MAX_REGEX_REPEATS:
        raise ValueError(f"{repeats} repetitions (at most {MAX_REGEX_REPEATS})")


_REGEX_CACHE: Dict[str, re.Pattern[str]] = {}


def bounded_regex(pattern: str, key: str, where: str) -> re.Pattern[str]:
    """`pattern` compiled, or a SelectorError naming it: malformed, or shaped so that Python's
    backtracking matcher could run for ever (`(.|.)*!`)."""
    got = _REGEX_CACHE.get(pattern)
    if got is not None:
        return got
    if len(pattern) > MAX_PATTERN_CHARS:
        raise bad_input(key, pattern[:60] + "...", f"is {len(pattern)} characters long (at most "
                        f"{MAX_PATTERN_CHARS})", where=where)
    from re import _parser as P  # type: ignore[attr-defined]
    try:
        tree = P.parse(pattern)
        compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        raise bad_input(key, "re:" + pattern, f"is not a regular expression: {exc}",
                        where=where) from None
    try:
        _check_regex(tree, pattern)
    except ValueError as exc:
        raise bad_input(key, "re:" + pattern, f"is refused: {exc} can make matching take "
                        "exponential time; write the pattern without it", where=where) from None
    if len(_REGEX_CACHE) > 4096:
        _REGEX_CACHE.clear()
    _REGEX_CACHE[pattern] = compiled
    return compiled


def _patterns(value: Any, key: str, where: str, what: str) -> List[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise bad_input(key, value, f"must be a list of {what}", where=where)
    if len(value) > MAX_PATTERNS:
        raise bad_input(key, f"{len(value)} entries", f"has more than {MAX_PATTERNS} entries",
                        where=where)
    for x in value:
        if len(x) > MAX_PATTERN_CHARS:
            raise bad_input(key, x[:60] + "...", f"is {len(x)} characters long (at most "
                            f"{MAX_PATTERN_CHARS})", where=where)
        if x.startswith("re:"):
            bounded_regex(x[3:], key, where)
    return list(value)


# ---------------------------------------------------------------------------------------------
# vLLM's name mapping (models/utils.py WeightsMapper.get_rename_mapper: renames, no stacking)

def map_name(arch: Architecture, name: str) -> str:
    for substr, new in arch.rename_substr:
        if substr in name:
            name = name.replace(substr, new, 1)
    for prefix, to in arch.rename_prefix:
        # None: vLLM drops the name (Qwen3-Next's `mtp.`, the draft model's weights); no
        # module of the plan is under it, so the name is left as it is
        if to is not None and name.startswith(prefix):
            name = name.replace(prefix, to, 1)
    for suffix, new in arch.rename_suffix:
        if name.endswith(suffix):
            name = new.join(name.rsplit(suffix, 1))
    return name


def _star_split(patterns: Sequence[str]) -> List[str]:
    """ModelOpt's apply_vllm_mapper: `path*` becomes `path` and `path.*` (vLLM #28072)."""
    out: List[str] = []
    for p in patterns:
        if len(p) >= 2 and p[-1] == "*" and p[-2] != ".":
            out += [p[:-1], p[:-1] + ".*"]
        else:
            out.append(p)
    return out
