"""Why a scenario of the command sweep (sglang_command.py) differs: an entry names SGLang
0.5.23's source that makes the difference. A printed command SGLang does not honor is never
explained here: it is fixed in selector."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

S = "SGLang 0.5.23 python/sglang/srt/"

EXPLAINED: Dict[str, Tuple[str, str, Callable[[Any], bool]]] = {}


def explain(row: Any) -> Optional[str]:
    for key, (_src, _why, match) in EXPLAINED.items():
        if match(row):
            return key
    return None
