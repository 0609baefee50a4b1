"""`parallel.*`: the tensor-, data- and expert-parallel sizes of a launch (run-config data)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping

from selector.core.errors import bad_input

MAX_PARALLEL = 1 << 16


@dataclass(frozen=True)
class Parallel:
    """`parallel.*`: tensor-, data- and expert-parallel sizes of the launch."""
    tp: int = 1
    dp: int = 1
    ep: int = 1

    def to_dict(self) -> Dict[str, int]:
        return {"tp": self.tp, "dp": self.dp, "ep": self.ep}


def make_parallel(conf: Mapping[str, Any]) -> Parallel:
    values = {}
    for k in ("tp", "dp", "ep"):
        v = conf.get(k, 1)
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_PARALLEL:
            raise bad_input(f"parallel.{k}", v, f"is not accepted: an integer from 1 to "
                            f"{MAX_PARALLEL}")
        values[k] = v
    return Parallel(**values)
