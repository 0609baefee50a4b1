"""SGLang 0.5.23's own start-up line naming its backends, on one simulated machine.

Run as a child process (sglang_sim.py simulates the device at import time):
    python tests/sglang/sglang_args_log.py CAPABILITY CUDA LIBS QUANTIZATION [ARG ...]

builds SGLang's server arguments from ARGs with its own parser, applies its quantization
constraints (srt/arg_groups/overrides.py `_moe_runner_backend_quant_constraints`) and publishes
them (its resolution pipeline; sglang_sim._publish), then prints the line SGLang's engine logs
at start-up, `server_args={...}` (srt/entrypoints/engine.py line 311:
`logger.info(f"server_args={_server_args_for_logging(server_args)}")`), made by that same
function, after a log prefix in SGLang's format."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import sglang_sim  # noqa: E402


def main(argv: list) -> None:
    capability, cuda, libs, quantization, *args = argv
    sglang_sim.simulate(capability, cuda, [x for x in libs.split(",") if x])
    server_args = sglang_sim._publish(["--model-path", "dummy", *args], quantization)
    from sglang.srt.entrypoints.engine import _server_args_for_logging
    print(f"[2026-12-07 04:00:00] server_args={_server_args_for_logging(server_args)}",
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
