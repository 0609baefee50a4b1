"""Every architecture of vLLM's model registry against selector's reader (issue 44).

For each architecture `vllm.model_executor.models.ModelRegistry` lists (native classes and the
Transformers-backend entries), its Hugging Face config class is looked up the way transformers'
auto classes name it (the model class name -> model_type -> CONFIG_MAPPING; vLLM's own config
registry, transformers_utils/config.py _CONFIG_REGISTRY, for the model types transformers lacks).
An architecture with a config class is written as a small checkpoint: the class's defaults,
`architectures: [arch]`, cut to the few layers that hold every layer type (launch_shapes), and a
quantization_config (block FP8: every linear layer and the routed experts quantized, so every
module selector would plan is one vLLM quantizes too). selector then either

- refuses it as "architecture not modelled" (a SelectorError naming the architectures it
  models): never a plan from the config's common keys, or
- plans it, and vLLM's own classes build it on the meta device (model_shapes.Builder): the
  per-rank modules are compared one by one (launch_shapes.differences: class, K/N per rank, TP,
  scheme, experts, routing) at each parallel layout of LAYOUTS.

A config class that cannot be built from its defaults alone (it needs sub-configs or raises) is
counted as such, not planned: selector's answer for it is the refusal all the same.
"""
from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import launch_shapes as ls
import model_shapes

FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
             "weight_block_size": [128, 128]}
# (tp, dp, ep): TP 1, TP 8, TP 8 with expert parallelism, TP 2 x DP 4 with expert parallelism
LAYOUTS: Tuple[Tuple[int, int, bool], ...] = ((1, 1, False), (8, 1, False), (8, 1, True),
                                              (2, 4, True))
NOT_MODELLED = "architecture not modelled"
# A multimodal class whose language model is another registered class, built by vLLM with the
# text config under a prefix, and whose other towers are built unquantized: (the text class,
# the prefix). vLLM 0.32.0 mllama4.py Llama4ForConditionalGeneration.__init__: vision_model and
# multi_modal_projector with quant_config=None, language_model = initialize_model(
# vllm_config.with_hf_config(config.text_config), prefix="language_model",
# model_class=Llama4ForCausalLM). vLLM's registry cannot inspect the multimodal class in the
# CPU test environment (mllama4.py imports transformers' Llama-4 image processor, which needs
# torchvision, removed there: tools/vllm_env.sh), so the walk builds the language model with
# the class and prefix the multimodal class uses, and compares it with selector's plan of the
# multimodal checkpoint.
LANGUAGE_MODEL: Dict[str, Tuple[str, str]] = {
    "Llama4ForConditionalGeneration": ("Llama4ForCausalLM", "language_model."),
}


@dataclass
class Outcome:
    arch: str
    config_class: Optional[str] = None
    answer: str = ""  # planned | refused | no config class | config class not buildable
    differences: Dict[str, List[str]] = field(default_factory=dict)  # layout -> differences
    detail: str = ""


def config_classes() -> Dict[str, Any]:
    """model class name -> its config class (transformers' auto mappings, then vLLM's own
    registry of config classes by model type)."""
    from transformers.models.auto import configuration_auto, modeling_auto
    from vllm.transformers_utils.config import _CONFIG_REGISTRY
    by_type: Dict[str, Any] = {}
    names = modeling_auto.__dict__
    for attr, mapping in names.items():
        if not attr.endswith("_MAPPING_NAMES") or not isinstance(mapping, dict):
            continue
        for model_type, cls in mapping.items():
            for c in (cls if isinstance(cls, (list, tuple)) else [cls]):
                if isinstance(c, str) and (c not in by_type or model_type.endswith("_text")):
                    # a causal LM class listed under a multimodal type and its text type
                    # (llama4 and llama4_text: Llama4ForCausalLM) is the text config's
                    by_type[c] = model_type
    out: Dict[str, Any] = {}
    for cls_name, model_type in by_type.items():
        conf = configuration_auto.CONFIG_MAPPING_NAMES.get(model_type)
        if conf is not None:
            out[cls_name] = ("transformers", model_type)
    for model_type, conf_cls in _CONFIG_REGISTRY.items():
        out.setdefault(f"@{model_type}", ("vllm", conf_cls))
    return out


def _config_class(arch: str, classes: Dict[str, Any], vllm_arch_types: Dict[str, str]
                  ) -> Optional[Any]:
    from transformers import CONFIG_MAPPING
    got = classes.get(arch)
    if got is not None:
        return CONFIG_MAPPING[got[1]]
    mt = vllm_arch_types.get(arch)
    if mt is not None and f"@{mt}" in classes:
        conf = classes[f"@{mt}"][1]
        return conf if isinstance(conf, type) else None
    return None


def _vllm_arch_types() -> Dict[str, str]:
    """Architectures vLLM's own config classes name (their model_type): for a config class
    registered by vLLM, the architectures whose module bears the model type's name."""
    from vllm.model_executor.models.registry import _VLLM_MODELS
    from vllm.transformers_utils.config import _CONFIG_REGISTRY
    out = {}
    for arch, (module, _cls) in _VLLM_MODELS.items():
        if module in _CONFIG_REGISTRY:
            out[arch] = module
    return out


def small_config(conf_cls: Any, arch: str) -> Dict[str, Any]:
    """The config class's defaults as config.json, cut to a few layers, block-FP8 quantized."""
    made = conf_cls()
    c = made.to_dict()
    c["architectures"] = [arch]
    c["torch_dtype"] = "bfloat16"
    c.pop("dtype", None)
    c.pop("transformers_version", None)
    if isinstance(c.get("num_hidden_layers"), int):
        c = ls.shortened(c, _NoRandom())
    if isinstance(c.get("text_config"), dict) and \
            isinstance(c["text_config"].get("num_hidden_layers"), int):  # a multimodal model's
        c["text_config"] = ls.shortened(c["text_config"], _NoRandom())
    c["quantization_config"] = copy.deepcopy(FP8_BLOCK)
    return c


class _NoRandom(random.Random):
    """shortened() draws changed sizes below 0.3 / 0.5: never here (the class's own sizes)."""

    def random(self) -> float:  # noqa: D401
        return 1.0


def walk(root: Path, layouts: Tuple[Tuple[int, int, bool], ...] = LAYOUTS,
         only: Optional[List[str]] = None) -> List[Outcome]:
    from vllm.model_executor.models import ModelRegistry

    from selector.checkpoint.arch import ARCHITECTURES
    archs = sorted(ModelRegistry.get_supported_archs())
    if only is not None:
        archs = [a for a in archs if a in only]
    classes = config_classes()
    vtypes = _vllm_arch_types()
    outcomes: List[Outcome] = []
    to_build: List[Tuple[Outcome, Path]] = []
    for arch in archs:
        o = Outcome(arch)
        outcomes.append(o)
        conf_cls = _config_class(arch, classes, vtypes)
        if conf_cls is None:
            o.answer = "no config class"
            continue
        o.config_class = conf_cls.__name__
        try:
            c = small_config(conf_cls, arch)
            d = root / arch
            d.mkdir(parents=True, exist_ok=True)
            (d / "config.json").write_text(json.dumps(c, default=str))
        except Exception as exc:  # noqa: BLE001 - a class that needs more than its defaults
            o.answer = "config class not buildable"
            o.detail = f"{type(exc).__name__}: {exc}"[:200]
            continue
        s = ls.selector_view(d, 1, 1, False)
        if arch in ARCHITECTURES:
            # planned, or refused for what vLLM refuses too (a key the class has no default
            # for): vLLM's build decides (launch_shapes.differences compares refusals too)
            o.answer = "planned" if not s.refused else "refused as vLLM refuses"
            o.detail = s.refused
            to_build.append((o, d))
        elif s.refused:
            o.answer = "refused" if NOT_MODELLED in s.refused else "refused otherwise"
            o.detail = s.refused
        else:
            o.answer = "planned without a reader"  # never: arch.py refuses these
    if to_build:
        builder = model_shapes.Builder()
        try:
            for tp, dp, ep in layouts:
                built = builder.build_many([(_vllm_dir(o.arch, d), tp, dp, ep)
                                            for o, d in to_build])
                for (o, d), v in zip(to_build, built):
                    if o.arch in LANGUAGE_MODEL:
                        prefix = LANGUAGE_MODEL[o.arch][1]
                        v = model_shapes.Model({prefix + k: b for k, b in v.modules.items()},
                                               v.refused)
                    s = ls.selector_view(d, tp, dp, ep)
                    diffs = ls.differences(v, s)
                    if diffs:
                        o.differences[f"tp{tp} dp{dp}{' ep' if ep else ''}"] = diffs[:5]
        finally:
            builder.close()
    return outcomes


def _vllm_dir(arch: str, d: Path) -> Path:
    """The checkpoint vLLM builds for `arch`: its own, or for a LANGUAGE_MODEL class the text
    config (with the checkpoint's dtype and quantization_config) as the text class reads it."""
    if arch not in LANGUAGE_MODEL:
        return d
    c = json.loads((d / "config.json").read_text())
    text = dict(c.get("text_config") or {})
    text["architectures"] = [LANGUAGE_MODEL[arch][0]]
    for key in ("torch_dtype", "quantization_config"):
        if key in c:
            text[key] = c[key]
    out = d.parent / f"{d.name}.language_model"
    out.mkdir(exist_ok=True)
    (out / "config.json").write_text(json.dumps(text))
    return out
