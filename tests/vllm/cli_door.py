"""The user's door (issue 44): `explain --model DIR engine=vllm ...` as a user runs it (the CLI's
main, JSON output), against vLLM 0.32.0's own reading of the same checkpoint and the flags the
plan printed fed back to vLLM.

A seeded random checkpoint is an architecture of the corpus (cut to a few layers: launch_shapes)
with a quantization description drawn from every format the reader accepts (FP8 `quant_method:
fp8` static / dynamic / block, compressed-tensors FP8 by weight strategy x activation
granularity x static / dynamic, ModelOpt FP8 and NVFP4 in the legacy hf_quant_config.json and
the flat config.json form with `ignore` or `exclude_modules`, MXFP4), ignore lists drawn from
the model's own module names, a platform (B200: SM 10.0, H200: SM 9.0, each with vLLM 0.32.0's
CUDA 13.0 and FlashInfer) and a parallel layout. Per case:

1. selector: `explain --model DIR engine=vllm platform=P stack=vllm_0_32 parallel.*` (exit 0: a
   plan and its flags; 1: a plan with problems; 2: refused);
2. vLLM alone: the VllmConfig of the parallel flags only, the model built on the meta device
   under the simulated GPU (model_shapes.Builder): it builds, or vLLM refuses;
3. vLLM with the printed flags: EngineArgs.add_cli_args parses them, create_engine_config()
   makes the VllmConfig, and the model is built again: every oracle (MoE backend maps, linear
   kernel filters) runs on every layer as at start-up.

Unexplained: printed flags vLLM refuses or does not parse, a module whose scheme / activation
scales / routing selector reads otherwise than vLLM builds it (launch_shapes.differences), and
selector refusing (exit 2) a checkpoint vLLM builds, finding problems (exit 1) in one vLLM
builds, or planning (exit 0) one vLLM refuses.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import launch_shapes as ls
import model_shapes
import sim

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
import checkpoint_corpus as corpus  # noqa: E402
from helpers import run_main  # noqa: E402

PLATFORMS = {"b200": "10.0", "h200": "9.0"}
STACK_CUDA = "13.0"  # conf/stack/vllm_0_32.yaml
LAYOUTS = ((1, 1, False), (2, 1, False), (4, 1, False), (8, 1, False), (4, 1, True),
           (8, 1, True), (2, 2, True), (2, 4, True), (2, 2, False))
# architectures whose corpus checkpoints carry the layouts the formats are drawn over
BASES = ("deepseek-v3-fp8", "qwen3-30b-a3b-fp8", "qwen3-8b-fp8", "llama-3.1-8b-fp8-static",
         "gpt-oss-20b-mxfp4", "nemotron-h-8b-fp4", "qwen3-235b-a22b-fp4",
         "mistral-small-24b-ct-w4a4", "nemotron-3-nano-30b-nvfp4", "kimi-k2-fp8",
         "deepseek-v2-lite-ct-w4a4", "gpt-oss-120b-mxfp4")
FORMATS = ("fp8", "fp8_block", "ct_fp8", "modelopt_fp8_legacy", "modelopt_nvfp4_flat",
           "modelopt_nvfp4_legacy", "mxfp4")


@dataclass
class Case:
    label: str
    dir: Path
    platform: str
    tp: int
    dp: int
    ep: bool
    rc: int = 0
    flags: List[str] = field(default_factory=list)
    selector_error: str = ""
    vllm_alone: str = ""  # "" builds, else vLLM's refusal
    vllm_flags: str = ""  # "" builds with the printed flags, else the refusal
    differences: List[str] = field(default_factory=list)
    # vLLM's model registry could not inspect the class (its subprocess died): not compared
    harness_error: str = ""


def _ignores(rng: random.Random, config: Dict[str, Any], style: str) -> List[str]:
    """A random ignore list in a format's style: lm_head, an attention pattern, one layer's
    experts or MLP, the routers."""
    out = ["lm_head"] if rng.random() < 0.8 else []
    if rng.random() < 0.3:
        out.append({"ct": "re:.*self_attn.*", "modelopt": "*self_attn*",
                    "fp8": "model.layers.0.self_attn.qkv_proj"}[style])
    if rng.random() < 0.2:
        out.append({"ct": "re:.*mlp.gate$", "modelopt": "*mlp.gate",
                    "fp8": "model.layers.1.mlp.gate"}[style])
    return out


def quantization(rng: random.Random, fmt: str, config: Dict[str, Any]
                 ) -> Tuple[Optional[Dict[str, Any]], Optional[Dict[str, Any]]]:
    """(quantization_config, hf_quant_config.json) of one drawn format."""
    if fmt == "fp8":
        q: Dict[str, Any] = {"quant_method": "fp8",
                             "activation_scheme": rng.choice(["static", "dynamic"])}
        q[rng.choice(["ignored_layers", "modules_to_not_convert"])] = _ignores(rng, config,
                                                                              "fp8")
        return q, None
    if fmt == "fp8_block":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": [128, 128],
                "modules_to_not_convert": _ignores(rng, config, "fp8")}, None
    if fmt == "ct_fp8":
        strategy = rng.choice(["tensor", "channel", "block"])
        weights: Dict[str, Any] = {"num_bits": 8, "type": "float", "strategy": strategy,
                                   "symmetric": True, "dynamic": False}
        if strategy == "block":
            weights["block_structure"] = [128, 128]
            acts = {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                    "symmetric": True, "dynamic": True}
        else:
            dynamic = rng.random() < 0.6
            acts = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": dynamic,
                    "strategy": rng.choice(["tensor", "token"]) if dynamic else "tensor"}
        return {"quant_method": "compressed-tensors", "format": "float-quantized",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                              "input_activations": acts}},
                "ignore": _ignores(rng, config, "ct")}, None
    if fmt == "modelopt_fp8_legacy":
        return None, {"producer": {"name": "modelopt", "version": "0.29.0"},
                      "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None,
                                       "exclude_modules": _ignores(rng, config, "modelopt")}}
    if fmt == "modelopt_nvfp4_legacy":
        return None, {"producer": {"name": "modelopt", "version": "0.29.0"},
                      "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None,
                                       "group_size": 16,
                                       "exclude_modules": _ignores(rng, config, "modelopt")}}
    if fmt == "modelopt_nvfp4_flat":
        key = rng.choice(["ignore", "exclude_modules"])
        return {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                "producer": {"name": "modelopt", "version": "0.37.0"},
                key: _ignores(rng, config, "modelopt")}, None
    if fmt == "mxfp4":
        return {"quant_method": "mxfp4"}, None
    raise AssertionError(fmt)


def draw(rng: random.Random, root: Path, i: int) -> Case:
    base = rng.choice(BASES)
    config, _ = corpus.read(corpus.HERE / base)
    config = ls.shortened(config, rng)
    config.setdefault("torch_dtype", "bfloat16")  # as the public checkpoints say
    config.pop("quantization_config", None)
    config.pop("compression_config", None)
    fmt = rng.choice(FORMATS)
    q, hf = quantization(rng, fmt, config)
    if q is not None:
        config["quantization_config"] = q
    label = f"{i}:{base}:{fmt}"
    d = corpus.write(root, f"c{i}", (config, hf))
    platform = rng.choice(sorted(PLATFORMS))
    tp, dp, ep = rng.choice(LAYOUTS)
    return Case(label, d, platform, tp, dp, ep)


def _selector(c: Case) -> None:
    argv = ["explain", "--model", str(c.dir), "engine=vllm", f"platform={c.platform}",
            "stack=vllm_0_32", f"parallel.tp={c.tp}", f"parallel.dp={c.dp}",
            f"parallel.ep={c.tp * c.dp if c.ep else 1}", "--format", "json"]
    rc, out, err = run_main(argv)
    c.rc = rc
    if rc == 2:
        c.selector_error = err.strip()[:300]
        return
    data = json.loads(out)
    c.flags = list(data["launch"]["flags"])


def _parallel_flags(c: Case) -> List[str]:
    out = ["--tensor-parallel-size", str(c.tp)]
    if c.dp > 1:
        out += ["--data-parallel-size", str(c.dp)]
    if c.ep:
        out.append("--enable-expert-parallel")
    return out


def _config(parser: Any, d: Path, flags: List[str]) -> Any:
    from vllm.engine.arg_utils import EngineArgs
    # --dtype bfloat16: the checkpoint's (torch_dtype), which a GPU keeps; vLLM's CPU platform,
    # where the config is made, would take another for a CPU without bf16
    args = parser.parse_args(["--model", str(d), "--skip-tokenizer-init", "--load-format",
                              "dummy", "--dtype", "bfloat16", *flags])
    with contextlib.redirect_stdout(io.StringIO()):
        return EngineArgs.from_cli_args(args).create_engine_config()


def scenario(c: Case) -> sim.Scenario:
    """The simulated GPU a case's model is built on (its platform, the stack's CUDA)."""
    return sim.Scenario(PLATFORMS[c.platform], STACK_CUDA, sim.FLASHINFER, None, "moe", "nvfp4",
                        "silu", True)


def seed(env: str = "SELECTOR_CLI_DOOR_SEED") -> int:
    """The sweep's seed: SELECTOR_CLI_DOOR_SEED, else one drawn now and kept in the environment
    (the tests print it; setting it replays the same checkpoints)."""
    if not os.environ.get(env):
        os.environ[env] = str(random.SystemRandom().randrange(2 ** 32))
    return int(os.environ[env])


def loads(cases: List[Case], before: Optional[Callable[[Case], None]] = None) -> List[str]:
    """Each checkpoint as `vllm serve` loads it with the parallel flags only (no backend flag:
    the plugin's door, SELECTOR_VLLM=1 with vLLM's automatic selection as the request): the
    config, then the model on the meta device under the case's simulated GPU, every layer's
    quant method and MoE oracle running as at start-up. vLLM's refusal per case ("" where it
    builds). `before(case)` runs before each build (the plugin's overrides for that machine)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.utils.torch_utils import set_default_torch_dtype
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    builder = model_shapes.Builder()
    out: List[str] = []
    try:
        for c in cases:
            with builder.simulation.scenario(model_shapes.NO_GPU):
                try:
                    vc = _config(parser, c.dir, _parallel_flags(c))
                except (Exception, SystemExit) as exc:  # noqa: BLE001
                    out.append(f"flags refused: {model_shapes.refusal(exc)}"
                               if isinstance(exc, Exception) else f"argparse: {exc}")
                    continue
            if before is not None:
                before(c)
            with builder.simulation.scenario(scenario(c)), \
                    model_shapes.ckpt_diff._record_fp8_moe_keys(refusals=True), \
                    set_default_torch_dtype(vc.model_config.dtype):
                out.append(builder._model(vc, c.tp, c.dp, c.ep).refused)
    finally:
        builder.close()
    return out


def run(cases: List[Case], log: Optional[Path] = None, batch: int = 100) -> None:
    """Every case: selector through the CLI, then vLLM alone and with the printed flags; in
    batches of `batch` cases (selector's CLI runs outside the simulated GPU), each finished
    case appended to `log` as one JSON line when given (a long sweep's partial counts)."""
    for i in range(0, len(cases), batch):
        _run(cases[i:i + batch], log)


def _run(cases: List[Case], log: Optional[Path]) -> None:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.utils.torch_utils import set_default_torch_dtype
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    for c in cases:
        _selector(c)
    builder = model_shapes.Builder()
    try:
        for c in cases:
            simulated = scenario(c)
            for flags, attr in ((_parallel_flags(c), "vllm_alone"), (c.flags, "vllm_flags")):
                if attr == "vllm_flags" and c.rc != 0:
                    continue
                with builder.simulation.scenario(model_shapes.NO_GPU):
                    try:
                        vc = _config(parser, c.dir, flags)
                    except (Exception, SystemExit) as exc:  # noqa: BLE001
                        setattr(c, attr, f"flags refused: {model_shapes.refusal(exc)}"
                                if isinstance(exc, Exception) else f"argparse: {exc}")
                        continue
                # the model's dtype as torch's default while it is built, as vLLM's loader
                # sets it (model_loader/base_loader.py load_model: set_default_torch_dtype):
                # the FP8 linear kernels take their output dtype from it
                with builder.simulation.scenario(simulated), \
                        model_shapes.ckpt_diff._record_fp8_moe_keys(), \
                        set_default_torch_dtype(vc.model_config.dtype):
                    m = builder._model(vc, c.tp, c.dp, c.ep)
                setattr(c, attr, m.refused)
                if attr == "vllm_flags" and not m.refused:
                    s = ls.selector_view(c.dir, c.tp, c.dp, c.ep)
                    c.differences += ls.differences(m, s)
            _compare(c)
            if log is not None:
                with log.open("a") as f:
                    f.write(json.dumps({"label": c.label, "platform": c.platform, "tp": c.tp,
                                        "dp": c.dp, "ep": c.ep, "rc": c.rc, "flags": c.flags,
                                        "vllm_alone": c.vllm_alone, "vllm_flags": c.vllm_flags,
                                        "differences": c.differences,
                                        "harness_error": c.harness_error}) + "\n")
    finally:
        builder.close()


INSPECTION = "failed to be inspected"  # vLLM's registry subprocess died (a loaded machine)


def _compare(c: Case) -> None:
    if INSPECTION in c.vllm_alone or INSPECTION in c.vllm_flags:
        c.harness_error = c.vllm_alone or c.vllm_flags
        return
    if c.rc == 0 and c.vllm_alone:
        c.differences.append(f"selector plans a checkpoint vLLM refuses: {c.vllm_alone}")
    elif c.rc == 0 and c.vllm_flags:
        c.differences.append(f"printed flags {c.flags} refused by vLLM: {c.vllm_flags}")
    if c.rc == 2 and not c.vllm_alone:
        c.differences.append(f"selector refuses a checkpoint vLLM builds: {c.selector_error}")
    if c.rc == 1 and not c.vllm_alone:  # a plan whose problems say vLLM refuses a module
        c.differences.append("selector's plan has problems (exit 1) for a checkpoint vLLM "
                             "builds")


def make_cases(seed: int, n: int, root: Path) -> List[Case]:
    rng = random.Random(seed)
    return [draw(rng, root, i) for i in range(n)]
