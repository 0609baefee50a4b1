"""SGLang 0.5.23's own choice against selector's (engine=sglang) over a seeded random sweep.

SGLang answers in child processes, one per simulated machine (sglang_sim.py); selector answers
here, from one composed base (engine=sglang, stack=sglang_0_5_23) with the machine's
capability and packages. A scenario agrees when SGLang runs the runner (or FP8 GEMM) that
selector names, or when both refuse; every other scenario is a difference, explained by an entry
of EXPLAINED (SGLang's source line that makes it) or unexplained.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
SEED_VAR = "SELECTOR_SGLANG_SEED"
COUNT_VAR = "SELECTOR_SGLANG_SCENARIOS"
STACK = "stack=sglang_0_5_23"
FLASHINFER = "0.7.2"  # what sglang 0.5.23 pins (flashinfer_python[cu13]==0.7.2)
CUTLASS_DSL = "4.8.0"
SGL_DEEP_GEMM = "0.2.3.post2"
CAPABILITIES = ("8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
MOE_QUANTS = ("fp8_block", "fp8_tensor", "fp8_channel", "mxfp8", "mxfp4", "nvfp4", "nvfp4_w4a16")
LINEAR_QUANTS = ("fp8_block", "fp8_tensor", "fp8_channel")
CT = "compressed-tensors"
# the checkpoint formats SGLang reads each scheme from (None: its own quant method: Fp8Config,
# Mxfp4Config, ModelOptFp4Config), and the models whose override of the MoE runner is swept
FORMATS = {("moe", "fp8_block"): (None, CT), ("moe", "fp8_tensor"): (None, CT),
           ("moe", "fp8_channel"): (CT,), ("moe", "nvfp4"): (None, CT),
           ("moe", "nvfp4_w4a16"): (CT,), ("linear", "fp8_tensor"): (None, CT),
           ("linear", "fp8_channel"): (CT,)}
MODELS = {"mxfp4": (None, "gpt_oss")}
ACTIVATIONS = (("silu", True), ("swigluoai", True), ("gelu", True), ("relu2", False))
EP = (1, 2, 8)
# SGLang's names (srt/layers/moe/utils.py MoeRunnerBackend; arg_groups/choices.py FP8 GEMM)
MOE_REQUESTS = ("auto", "triton", "deep_gemm", "flashinfer_trtllm", "flashinfer_cutlass",
                "flashinfer_cutedsl", "flashinfer_mxfp4", "triton_kernel", "marlin")
LINEAR_REQUESTS = ("auto", "deep_gemm", "flashinfer_trtllm", "flashinfer_cutlass", "cutlass",
                   "triton")


@dataclass(frozen=True)
class Scenario:
    capability: str
    flashinfer: bool
    deep_gemm: bool
    op: str
    quant: str
    activation: str
    act_and_mul: bool
    ep_size: int
    requested: str
    format: Optional[str] = None  # compressed-tensors, or None: SGLang's own quant method
    model: Optional[str] = None  # gpt_oss: its SGLang model override runs

    @property
    def machine(self) -> Tuple[str, bool, bool]:
        return (self.capability, self.flashinfer, self.deep_gemm)

    def label(self) -> str:
        libs = ", ".join(n for n, on in (("flashinfer", self.flashinfer),
                                         ("deep_gemm", self.deep_gemm)) if on) or "neither"
        act = "" if self.op == "linear" else \
            f" {self.activation}{'' if self.act_and_mul else ' non-gated'} ep{self.ep_size}"
        how = "".join(f" ({x})" for x in (self.format, self.model) if x)
        return (f"SM {self.capability} ({libs}); {self.op} {self.quant}{how}{act}; requested "
                f"{self.requested}")

    def sglang_key(self) -> Dict[str, Any]:
        key = {"op": self.op, "quant": self.quant, "activation": self.activation,
               "act_and_mul": self.act_and_mul, "ep_size": self.ep_size,
               "requested": self.requested}
        key.update({k: v for k, v in (("format", self.format), ("model", self.model)) if v})
        return key


def seed() -> int:
    """The run's seed: SELECTOR_SGLANG_SEED, or a fresh one (kept in the environment so every
    sweep of the run, and a re-run with it, draws the same scenarios; conftest.py prints it in
    pytest's header)."""
    raw = os.environ.get(SEED_VAR)
    if not raw:
        raw = str(random.SystemRandom().randrange(2 ** 32))
        os.environ[SEED_VAR] = raw
    return int(raw)


def scenarios(n: int, rng: random.Random, expressible: Callable[[Scenario], bool]
              ) -> List[Scenario]:
    out: List[Scenario] = []
    while len(out) < n:
        op = "linear" if rng.random() < 0.2 else "moe"
        act, gated = rng.choice(ACTIVATIONS)
        quant = rng.choice(LINEAR_QUANTS if op == "linear" else MOE_QUANTS)
        # a per-tensor or per-channel FP8 linear layer has no GEMM flag: SGLang chooses at run
        # time (fp8_utils.py apply_fp8_linear)
        request = "auto" if op == "linear" and quant != "fp8_block" else \
            rng.choice(LINEAR_REQUESTS if op == "linear" else MOE_REQUESTS)
        s = Scenario(rng.choice(CAPABILITIES), rng.random() < 0.7, rng.random() < 0.5, op,
                     quant, "silu" if op == "linear" else act,
                     True if op == "linear" else gated, 1 if op == "linear" else rng.choice(EP),
                     request, rng.choice(FORMATS.get((op, quant), (None,))),
                     rng.choice(MODELS.get(quant, (None,))) if op == "moe" else None)
        if expressible(s):
            out.append(s)
    return out


# -- SGLang's side ---------------------------------------------------------------------------------
def sglang_answers(rows: List[Scenario], python: str = sys.executable, workers: int = 2
                   ) -> Dict[Scenario, Dict[str, Any]]:
    """SGLang's answer per scenario: one child per machine, each distinct question once."""
    by_machine: Dict[Tuple, List[Scenario]] = OrderedDict()
    for s in rows:
        by_machine.setdefault(s.machine, []).append(s)

    def run(machine: Tuple) -> Dict[Scenario, Dict[str, Any]]:
        cap, fi, dg = machine
        todo = list(OrderedDict((json.dumps(s.sglang_key(), sort_keys=True), s.sglang_key())
                                for s in by_machine[machine]).items())
        job = {"machine": {"capability": cap, "cuda": "13.0",
                           "libs": [n for n, on in (("flashinfer", fi), ("deep_gemm", dg)) if on]},
               "scenarios": [k for _, k in todo]}
        p = subprocess.run([python, str(HERE / "sglang_sim.py")], input=json.dumps(job),
                           capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"SGLang child for {machine} failed:\n{p.stderr[-3000:]}")
        answers = dict(zip((k for k, _ in todo), json.loads(p.stdout)))
        return {s: answers[json.dumps(s.sglang_key(), sort_keys=True)]
                for s in by_machine[machine]}

    out: Dict[Scenario, Dict[str, Any]] = {}
    with ThreadPoolExecutor(workers) as pool:
        for part in pool.map(run, list(by_machine)):
            out.update(part)
    return out


# -- selector's side -------------------------------------------------------------------------------
class Selectors:
    """selector with engine=sglang, one Selector per (machine, op, requested)."""

    def __init__(self) -> None:
        import selector
        self.base = selector.load(overrides=["engine=sglang", "platform=cpu", STACK])
        self.catalogue = self.base.run_config.catalogue
        self._cache: Dict[Tuple, Any] = {}

    def names(self, op: str, quant: str, sglang_name: str) -> Tuple[str, ...]:
        """The catalogue backends SGLang calls `sglang_name` for a `quant` layer."""
        if sglang_name == "auto":
            return ("auto",)
        out = []
        for b in self.catalogue.backends[op]:
            e = dict(b.engines).get("sglang")
            if e is not None and e.name_for(quant) == sglang_name:
                out.append(b.name)
        return tuple(out)

    def expressible(self, s: Scenario) -> bool:
        return bool(self.names(s.op, s.quant, s.requested))

    def _selector(self, s: Scenario) -> Any:
        key = (s.machine, s.op, s.quant, s.requested)
        sel = self._cache.get(key)
        if sel is None:
            from packaging.version import Version

            from selector.api import Selector
            from selector.core.model import normalize_backends
            run = self.base.run_config
            pk = dict(run.platform.packages)
            pk.update({"flashinfer-python": Version(FLASHINFER) if s.flashinfer else None,
                       "nvidia-cutlass-dsl": Version(CUTLASS_DSL) if s.flashinfer else None,
                       "sgl-deep-gemm": Version(SGL_DEEP_GEMM) if s.deep_gemm else None})
            platform = dataclasses.replace(
                run.platform, preset="sweep", source="sweep",
                capability=tuple(int(x) for x in s.capability.split(".")),
                cuda=Version("13.0"), packages=tuple(sorted(pk.items())))
            req = normalize_backends(s.op, list(self.names(s.op, s.quant, s.requested)),
                                     run.catalogue)
            policy = dataclasses.replace(run.policy, **{f"{s.op}_backend": req})
            sel = Selector(dataclasses.replace(run, platform=platform, policy=policy))
            self._cache[key] = sel
        return sel

    def decide(self, s: Scenario) -> Any:
        layer: Dict[str, Any] = {"op": s.op, "quant": s.quant}
        if s.op == "moe":
            layer.update(activation=s.activation, act_and_mul=s.act_and_mul, ep_size=s.ep_size,
                         tp_size=s.ep_size)
        return self._selector(s).select(**layer)


def selector_name(d: Any) -> Optional[str]:
    """SGLang's name for selector's choice (None: selector refuses)."""
    if d.selected is None or d.engine is None:
        return None
    return d.engine.backend


# -- the comparison --------------------------------------------------------------------------------
def _runner(answer: Dict[str, Any]) -> Optional[str]:
    return answer.get("runner")


@dataclass
class Row:
    scenario: Scenario
    sglang: Dict[str, Any]
    decision: Any
    requested_backends: Tuple[str, ...] = ()  # the catalogue's backends of the requested name
    # SGLang's answer when started with the flag selector prints (None: selector refuses)
    follow: Optional[Dict[str, Any]] = None
    why: Optional[str] = None  # the EXPLAINED key

    @property
    def selector(self) -> Optional[str]:
        return selector_name(self.decision)

    @property
    def runner(self) -> Optional[str]:
        return _runner(self.sglang)

    @property
    def honored(self) -> bool:
        """SGLang, started with selector's printed flag, runs selector's backend."""
        return self.selector is None or (self.follow is not None
                                         and _runner(self.follow) == self.selector)

    @property
    def agrees(self) -> bool:
        return self.runner == self.selector and self.honored

    def cluster(self) -> Tuple:
        s = self.scenario
        return (s.op, s.quant, s.requested, self.runner or "error", self.selector or "refused")


@dataclass
class Report:
    seed: int
    rows: List[Row]

    @property
    def differ(self) -> List[Row]:
        return [r for r in self.rows if not r.agrees]

    @property
    def unexplained(self) -> List[Row]:
        return [r for r in self.differ if r.why is None]

    def clusters(self, rows: Optional[List[Row]] = None) -> OrderedDict[Tuple, List[Row]]:
        out: OrderedDict[Tuple, List[Row]] = OrderedDict()
        for r in sorted(rows if rows is not None else self.differ,
                        key=lambda r: r.cluster()):
            out.setdefault(r.cluster(), []).append(r)
        return out


def run(n: Optional[int] = None, the_seed: Optional[int] = None, python: str = sys.executable
        ) -> Report:
    from sglang_explain import explain
    the_seed = seed() if the_seed is None else the_seed
    n = n or int(os.environ.get(COUNT_VAR, "5000"))
    sels = Selectors()
    rows = scenarios(n, random.Random(the_seed), sels.expressible)
    decisions = {s: sels.decide(s) for s in rows}
    # SGLang started with the flag selector prints (no flag: automatic selection)
    follow = {s: dataclasses.replace(s, requested=name if decisions[s].engine.flags
                                     else "auto")
              for s in rows if (name := selector_name(decisions[s])) is not None}
    answers = sglang_answers(list(OrderedDict.fromkeys([*rows, *follow.values()])), python)
    out = []
    for s in rows:
        r = Row(s, answers[s], decisions[s], sels.names(s.op, s.quant, s.requested),
                answers[follow[s]] if s in follow else None)
        if not r.agrees:
            r.why = explain(r)
        out.append(r)
    return Report(the_seed, out)
