"""Start the real vLLM (its CPU build) on each checkpoint given, one after another in this
process, and print one `RESULT {json}` line each: loaded, or the exception vLLM raised while
building the engine. Run by test_e2e.py with SELECTOR_VLLM on or off; vLLM's own plugin loader
loads selector's plugin. No generation: the CPU build's kernels need instructions CI machines may
lack; a model that loads has had every layer built and its weights loaded and processed."""
from __future__ import annotations

import gc
import json
import sys
import time


def main(models: list) -> None:
    from vllm import LLM
    for m in models:
        print(f"BEGIN {m}", flush=True)
        t = time.time()
        try:
            llm = LLM(model=m, skip_tokenizer_init=True, enforce_eager=True, max_model_len=64,
                      max_num_seqs=1, max_num_batched_tokens=64, dtype="bfloat16")
            res = {"model": m, "loaded": True}
            del llm
        except Exception as exc:  # noqa: BLE001  the outcome is what the test inspects
            res = {"model": m, "loaded": False, "error": type(exc).__name__,
                   "message": str(exc)}
        gc.collect()
        res["seconds"] = round(time.time() - t, 1)
        print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
