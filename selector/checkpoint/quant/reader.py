"""Which file describes a checkpoint's quantization, and which format's reader reads it:
config.json's `quantization_config` first, then `hf_quant_config.json`."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from selector.checkpoint.arch import Architecture, Module
from selector.checkpoint.files import read_json
from selector.checkpoint.quant.common import (
    Quantization,
    Verdict,
)
from selector.checkpoint.quant.compressed_tensors import _compressed_tensors
from selector.checkpoint.quant.fp8 import _fp8, _mxfp4
from selector.checkpoint.quant.modelopt import _algo, _modelopt
from selector.checkpoint.quant.releases import Reading, reading_for
from selector.core.errors import bad_input, bad_value


def _summary(q: Mapping[str, Any]) -> str:
    inner = q.get("quantization") if isinstance(q.get("quantization"), dict) else q
    assert isinstance(inner, dict)
    return " ".join(str(x) for x in (q.get("quant_method") or "modelopt",
                                     inner.get("quant_algo") or q.get("format")) if x)


_MODELOPT_NORMALIZED = {"FP8": "modelopt", "FP8_PER_CHANNEL_PER_TOKEN": "modelopt",
                        "FP8_PB_WO": "modelopt", "NVFP4": "modelopt_fp4"}


def _method(q: Dict[str, Any], where: str) -> str:
    """vLLM's quantization method for a quantization description: model_arch_config_convertor
    _normalize_quantization_config (a ModelOpt producer sets quant_method from quant_algo),
    then ModelConfig._verify_quantization's overrides (modelopt*: the quant_algo decides)."""
    producer = q.get("producer")
    inner = q.get("quantization", {})
    legacy = isinstance(inner, dict) and "modelopt_quant_config" in inner
    if (isinstance(producer, dict) and producer.get("name") == "modelopt") or legacy:
        if not isinstance(inner, dict):
            raise bad_input("quantization", inner, "must be a mapping {\"quant_algo\": ...}",
                            where=where)
        algo = inner.get("quant_algo")
        if algo is not None:
            if _algo(algo) not in _MODELOPT_NORMALIZED:
                raise bad_value("quantization.quant_algo", algo, _MODELOPT_NORMALIZED,
                                where=where, hint="vLLM 0.32.0 refuses this file: \"Unknown "
                                "ModelOpt quant algo\" (transformers_utils/"
                                "model_arch_config_convertor.py _normalize_quantization_config); "
                                "newer ModelOpt exports put MIXED_PRECISION and W4A16_NVFP4 in "
                                "config.json's quantization_config")
            q["quant_method"] = _MODELOPT_NORMALIZED[_algo(algo)]
    method = q.get("quant_method", "")
    if not isinstance(method, str):
        raise bad_input("quant_method", method, "must be a string", where=where)
    method = method.lower().replace("compressed_tensors", "compressed-tensors")
    if method.startswith("modelopt"):
        algo = _algo(inner.get("quant_algo", "") if isinstance(inner, dict) and "quantization"
                     in q else q.get("quant_algo", ""))
        if algo == "FP8":
            method = "modelopt"
        elif "NVFP4" in algo or "FP4" in algo:
            method = "modelopt_fp4"
        elif "MXFP8" in algo:
            method = "modelopt_mxfp8"
        elif algo == "MIXED_PRECISION":
            method = "modelopt_mixed"
    return method


def read_quantization(model_dir: Path, config: Mapping[str, Any], arch: Architecture,
                      vllm: Optional[Any] = None) -> Quantization:
    """config.json's quantization_config first, as vLLM reads it; hf_quant_config.json when
    config.json has none (ModelOpt 0.29 and older). Both: a warning when they contradict.
    `vllm`: the stack's vLLM version, whose reading applies (releases.reading_for; None: the
    reader's base release, 0.32.0)."""
    reading = reading_for(vllm)
    q, where, source, warnings = _description(model_dir, config)
    method = _method(q, where)
    out = _read(method, q, arch, source, where, reading)
    if any(m.unquantized for m in arch.modules):
        out = dataclasses.replace(out, verdict_of=_built_unquantized(out.verdict_of))
    if method.startswith("modelopt") and "quantization" not in q and "ignore" not in q and \
            "exclude_modules" in q and not reading.modelopt_flat_exclude_modules:
        warnings.append(f"quantization_config.exclude_modules is not read by vLLM "
                        f"{reading.release} (it reads `ignore` only; vLLM 0.33.0 reads "
                        "exclude_modules when there is no ignore, modelopt.py:358-359): every "
                        "module it lists is planned quantized, as this vLLM builds it")
    out = dataclasses.replace(out, warnings=tuple(warnings) + out.warnings,
                              release=reading.release)
    return out


def _built_unquantized(verdict_of: Callable[[Module], Verdict]
                       ) -> Callable[[Module], Verdict]:
    """A module vLLM builds with quant_config=None is unquantized whatever the checkpoint's
    quantization config says (Module.unquantized names the vLLM source)."""
    def verdict(m: Module) -> Verdict:
        return Verdict(None, m.unquantized) if m.unquantized else verdict_of(m)
    return verdict


def _description(model_dir: Path, config: Mapping[str, Any]
                 ) -> Tuple[Dict[str, Any], str, str, List[str]]:
    """(the quantization description, its file, the key it came from, warnings)."""
    where = str(model_dir / "config.json")
    hf = model_dir / "hf_quant_config.json"
    q = config.get("quantization_config")
    source = "config.json quantization_config"
    if q is None and not hf.is_file():
        # vLLM: config.quantization_config (or hf_quant_config.json in its place), then the
        # older compressed-tensors key (model_arch_config_convertor.py)
        q = config.get("compression_config")
        source = "config.json compression_config"
    warnings: List[str] = []
    if q is not None:
        if not isinstance(q, dict):
            raise bad_input("quantization_config", q, "must be a mapping", where=where)
        if hf.is_file():
            other = read_json(hf)
            if _summary(other) != _summary(q) or (
                    isinstance(other.get("quantization"), dict) and
                    other["quantization"].get("exclude_modules") != q.get("ignore")):
                warnings.append(f"hf_quant_config.json ({_summary(other)}) contradicts "
                                f"config.json's quantization_config ({_summary(q)}); "
                                "vLLM reads config.json's, and so does this plan")
    elif hf.is_file():
        q, where, source = read_json(hf), str(hf), "hf_quant_config.json"
    else:
        raise bad_input("quantization_config", None, "is missing, and there is no "
                        "hf_quant_config.json: this is not a quantized checkpoint (NVFP4 "
                        "checkpoints come from ModelOpt or compressed-tensors)", where=where)
    return dict(q), where, source, warnings


def _read(method: str, q: Dict[str, Any], arch: Architecture, source: str, where: str,
          reading: Reading) -> Quantization:
    """The description read by its format's reader (vLLM's quantization method)."""
    if method.startswith("modelopt"):
        _check_modelopt(method, q, where)
        out = _modelopt(q, arch, source, where, reading)
    elif method == "compressed-tensors":
        out = _compressed_tensors(q, arch, source, where)
    elif method == "fp8":
        out = _fp8(q, arch, source, where)
    elif method in ("mxfp4", "gpt_oss_mxfp4"):
        out = _mxfp4(q, arch, source, where)
    elif method == "mxfp8":
        # MiniMax-style `quant_method: mxfp8` + `ignored_layers`: vLLM loads it with
        # ModelOptMxFp8Config, normalized to the ModelOpt schema (modelopt.py
        # ModelOptMxFp8Config.from_config)
        if "quantization" not in q and not q.get("quant_algo"):
            ign = q.get("ignored_layers") or []
            q = {"quant_method": "modelopt", "quantization": {
                "quant_algo": "MXFP8", "kv_cache_quant_algo": q.get("kv_cache_quant_algo"),
                "exclude_modules": ign}}
        out = _modelopt(q, arch, source, where, reading)
    elif method == "":
        raise bad_input("quantization_config.quant_method", q.get("quant_method"), "is missing "
                        "(and no ModelOpt producer is named): vLLM loads this checkpoint "
                        "unquantized", where=where)
    else:
        raise bad_value("quantization_config.quant_method", q.get("quant_method"),
                        ("modelopt", "compressed-tensors", "fp8", "mxfp4", "mxfp8"),
                        where=where, hint=f"vLLM reads it as {method}; selector explains "
                        "ModelOpt (FP8, NVFP4, MXFP8, MIXED_PRECISION), compressed-tensors, "
                        "FP8 and MXFP4 checkpoints")
    return out


def _check_modelopt(method: str, q: Mapping[str, Any], where: str) -> None:
    """The keys vLLM needs of a ModelOpt description before it reads it."""
    if method == "modelopt_mixed" and "quantized_layers" not in q and not (
            isinstance(q.get("quantization"), dict) and "quantized_layers" in
            q["quantization"]):
        raise bad_input("quantized_layers", None, "is missing: vLLM reads MIXED_PRECISION's "
                        "per-layer algorithms from quantization_config.quantized_layers "
                        "(or a legacy hf_quant_config.json)", where=where)
    if "quantization" in q and method == "modelopt_fp4":
        missing = [k for k in ("group_size", "kv_cache_quant_algo", "exclude_modules")
                   if k not in q["quantization"]]
        if missing:
            raise bad_input("quantization", sorted(q["quantization"]), f"lacks "
                            f"{', '.join(missing)}: vLLM 0.32.0 refuses an NVFP4 "
                            "hf_quant_config.json without them (modelopt.py "
                            "ModelOptNvFp4Config._from_config)", where=where)
