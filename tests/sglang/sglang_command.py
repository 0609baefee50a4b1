"""selector's printed SGLang command, started by SGLang 0.5.23's own code, over a seeded sweep.

Each scenario is a machine (SM, FlashInfer, sgl-deep-gemm, sglang-kernel present or not), a
checkpoint directory (sglang_checkpoints.py: an architecture under a quantization config), a
TP/EP size and the backend names a user asks for: a `--moe-runner-backend` and, where the
checkpoint's linear scheme has one, a `--fp8-gemm-backend` / `--fp4-gemm-backend`, drawn from the
choices SGLang's own parser accepts (not a list kept here).

selector answers with its launch plan for that directory (`explain --model DIR engine=sglang`,
the request as policy.moe_backend / policy.linear_backend where the catalogue has the name);
SGLang answers twice (sglang_command_sim.py, one child per machine): started with exactly the
argv selector prints (`follow`), and started with the user's request (`asked`). A scenario is
- honored: selector printed a command and SGLang, started from it, runs for the MoE layer and
  the linear layer the backends selector's plan names (required of every printed command);
- refused by both: selector prints no command and SGLang does not start from the request;
- else a difference, explained only by an entry of EXPLAINED (sglang_command_explain.py).
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import sglang_checkpoints as ckpts
import sglang_sweep as sweep_report

HERE = Path(__file__).resolve().parent
SEED_VAR = "SELECTOR_SGLANG_SEED"
COUNT_VAR = "SELECTOR_SGLANG_COMMANDS"
# the number of machines the sweep's scenarios are drawn on (each one SGLang child, whose start
# is most of the sweep's time); unset: every machine (7 SMs x FlashInfer, sgl-deep-gemm and
# sglang-kernel present or not: 56)
MACHINES_VAR = "SELECTOR_SGLANG_MACHINES"
# K/N (K from 0): only the scenarios on shard K's machines of the seed's draw (in_shard), so N
# runs of one seed and count cover the sweep, each with about 1/N of its children
SHARD_VAR = "SELECTOR_SGLANG_SHARD"
# how many SGLang children run at once (default 2)
WORKERS_VAR = "SELECTOR_SGLANG_WORKERS"
STACK = "stack=sglang_0_5_23"
FLASHINFER, CUTLASS_DSL, SGL_DEEP_GEMM, SGLANG_KERNEL = "0.7.2", "4.8.0", "0.2.3.post2", "0.4.10"
CAPABILITIES = ("8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
PARALLEL = ((1, 1), (2, 1), (2, 2), (4, 1), (4, 4), (8, 1), (8, 8), (8, 2))
FLAGS = {"moe": "--moe-runner-backend", "fp8": "--fp8-gemm-backend", "fp4": "--fp4-gemm-backend"}
# the checkpoint's linear scheme per format and the flag that chooses its GEMM (None: none does)
LINEAR = {"fp8_block": ("fp8_block", "fp8"), "fp8_tensor": ("fp8_tensor", None),
          "modelopt_fp8": ("fp8_tensor", None), "modelopt_fp4": ("nvfp4", "fp4"),
          "ct_fp8_channel": ("fp8_channel", None), "ct_fp8_block": ("fp8_block", "fp8"),
          "ct_fp8_tensor": ("fp8_tensor", None), "ct_nvfp4": ("nvfp4", "fp4"),
          "ct_nvfp4_w4a16": ("nvfp4_w4a16", "fp4"), "mxfp8": ("mxfp8", "fp8"),
          "mxfp4": (None, None)}


def parser_choices() -> Dict[str, Tuple[str, ...]]:
    """The names SGLang 0.5.23's own parser accepts for each backend flag."""
    import argparse

    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    acts = parser._option_string_actions
    return {k: tuple(acts[flag].choices) for k, flag in FLAGS.items()}


@dataclass(frozen=True)
class Scenario:
    capability: str
    flashinfer: bool
    deep_gemm: bool
    kernel: bool  # sglang-kernel installed
    arch: str
    fmt: str
    tp: int
    ep: int
    moe: str  # the --moe-runner-backend asked for ("auto": none)
    gemm: str  # the FP8 / FP4 GEMM flag's value asked for ("auto": none)

    @property
    def machine(self) -> Tuple[str, bool, bool, bool]:
        return (self.capability, self.flashinfer, self.deep_gemm, self.kernel)

    @property
    def has_moe(self) -> bool:
        return self.arch in ckpts.MOE_PREFIX

    @property
    def linear(self) -> Tuple[Optional[str], Optional[str]]:
        return LINEAR[self.fmt]

    def label(self) -> str:
        libs = ", ".join(n for n, on in (("flashinfer", self.flashinfer),
                                         ("deep_gemm", self.deep_gemm),
                                         ("sglang-kernel", self.kernel)) if on) or "none"
        return (f"SM {self.capability} ({libs}); {self.arch} {self.fmt} tp{self.tp} ep{self.ep}; "
                f"asked {' '.join(self.request_flags()) or 'nothing'}")

    def request_flags(self) -> List[str]:
        out = []
        if self.has_moe and self.moe != "auto":
            out += [FLAGS["moe"], self.moe]
        flag = self.linear[1]
        if flag and self.gemm != "auto":
            out += [FLAGS[flag], self.gemm]
        return out


def seed() -> int:
    raw = os.environ.get(SEED_VAR)
    if not raw:
        raw = str(random.SystemRandom().randrange(2 ** 32))
        os.environ[SEED_VAR] = raw
    return int(raw)


def shard() -> Tuple[int, int]:
    """SELECTOR_SGLANG_SHARD as (K, N); unset: (0, 1), the whole sweep."""
    raw = os.environ.get(SHARD_VAR, "0/1")
    try:
        k, n = (int(x) for x in raw.split("/"))
        if not 0 <= k < n:
            raise ValueError
    except ValueError:
        raise SystemExit(f"{SHARD_VAR}={raw!r}: expected K/N with 0 <= K < N (e.g. 0/4)") from None
    return k, n


def in_shard(rows: List[Scenario], k: int, n: int) -> List[Scenario]:
    """The scenarios on shard K's machines: the draw's machines, most scenarios first (then
    sorted), each given to the shard holding the fewest scenarios so far (the lowest K on a
    tie), so every shard has about as many children and scenarios."""
    count: Dict[Tuple[str, bool, bool, bool], int] = {}
    for s in rows:
        count[s.machine] = count.get(s.machine, 0) + 1
    load = [0] * n
    keep = set()
    for m in sorted(count, key=lambda m: (-count[m], m)):
        i = load.index(min(load))
        load[i] += count[m]
        if i == k:
            keep.add(m)
    return [s for s in rows if s.machine in keep]


def _machine(rng: random.Random) -> Tuple[str, bool, bool, bool]:
    """A machine: an SM, FlashInfer (3 in 4), sgl-deep-gemm (1 in 2), sglang-kernel (93 in
    100) present or not."""
    return (rng.choice(CAPABILITIES), rng.random() < 0.75, rng.random() < 0.5,
            rng.random() < 0.93)


def scenarios(n: int, rng: random.Random, choices: Dict[str, Tuple[str, ...]],
              machines: Optional[int] = None) -> List[Scenario]:
    """`n` scenarios; with `machines`, drawn on that many distinct machines (the first draws
    of `rng`, each as a scenario's own), else each on a machine of its own draw."""
    pool: List[Tuple[str, bool, bool, bool]] = []
    while machines and len(pool) < machines:
        m = _machine(rng)
        if m not in pool:
            pool.append(m)
    out = []
    for _ in range(n):
        arch, fmt = rng.choice(ckpts.CHECKPOINTS)
        tp, ep = rng.choice(PARALLEL) if arch in ckpts.MOE_PREFIX else \
            (rng.choice((1, 2, 4, 8)), 1)
        flag = LINEAR[fmt][1]
        machine = rng.choice(pool) if pool else _machine(rng)
        out.append(Scenario(
            *machine, arch, fmt, tp, ep,
            "auto" if rng.random() < 0.2 else rng.choice(choices["moe"]),
            "auto" if flag is None or rng.random() < 0.2 else rng.choice(choices[flag])))
    return out


# -- selector's side -------------------------------------------------------------------------------
@dataclass
class Planned:
    """selector's launch plan for a scenario: the printed argv (None: no command) and the
    SGLang names it runs for the MoE and linear layers of the probed schemes."""
    argv: Optional[List[str]]
    moe: Optional[str]
    linear: Optional[str]
    unmodelled: Tuple[str, ...]  # asked names no catalogue backend carries for the scheme
    refusal: str = ""
    linear_names: Tuple[str, ...] = ()


class Planner:
    def __init__(self, root: Path) -> None:
        import selector
        self.base = selector.load(overrides=["engine=sglang", "platform=cpu", STACK])
        self.catalogue = self.base.run_config.catalogue
        self.root = root
        self.dirs: Dict[Tuple[str, str], Path] = {}

    def directory(self, s: Scenario) -> Path:
        key = (s.arch, s.fmt)
        if key not in self.dirs:
            self.dirs[key] = ckpts.write(self.root, *key)
        return self.dirs[key]

    def names(self, op: str, scheme: Optional[str], sglang_name: str) -> Tuple[str, ...]:
        """The catalogue backends SGLang calls `sglang_name` for a `scheme` layer."""
        out = []
        for b in self.catalogue.backends[op]:
            e = dict(b.engines).get("sglang")
            if e is not None and e.name_for(scheme) == sglang_name:
                out.append(b.name)
        return tuple(out)

    def _moe_scheme(self, s: Scenario) -> str:
        return {"mxfp4": "mxfp4", "mxfp8": "mxfp8", "modelopt_fp4": "nvfp4",
                "ct_nvfp4": "nvfp4", "ct_nvfp4_w4a16": "nvfp4_w4a16",
                "ct_fp8_channel": "fp8_channel", "ct_fp8_block": "fp8_block",
                "fp8_tensor": "fp8_tensor", "modelopt_fp8": "fp8_tensor",
                "fp8_block": "fp8_block"}.get(s.fmt, s.linear[0] or "")

    def plan(self, s: Scenario) -> Planned:
        from packaging.version import Version

        from selector.api import Selector
        from selector.core.model import normalize_backends
        from selector.core.parallel import Parallel
        run = self.base.run_config
        pk = dict(run.platform.packages)
        pk.update({"flashinfer-python": Version(FLASHINFER) if s.flashinfer else None,
                   "nvidia-cutlass-dsl": Version(CUTLASS_DSL) if s.flashinfer else None,
                   "sgl-deep-gemm": Version(SGL_DEEP_GEMM) if s.deep_gemm else None,
                   "sglang-kernel": Version(SGLANG_KERNEL) if s.kernel else None})
        platform = dataclasses.replace(
            run.platform, preset="sweep", source="sweep",
            capability=tuple(int(x) for x in s.capability.split(".")),
            cuda=Version("13.0"), packages=tuple(sorted(pk.items())))
        unmodelled: List[str] = []
        changes: Dict[str, Any] = {}
        for op, asked, scheme in (("moe", s.moe if s.has_moe else "auto", self._moe_scheme(s)),
                                  ("linear", s.gemm, s.linear[0])):
            if asked == "auto":
                continue
            names = self.names(op, scheme, asked)
            if names:
                changes[f"{op}_backend"] = normalize_backends(op, list(names), run.catalogue)
            else:
                unmodelled.append(f"{op}:{asked}")
        policy = dataclasses.replace(run.policy, **changes)
        sel = Selector(dataclasses.replace(run, platform=platform, policy=policy,
                                           parallel=Parallel(tp=s.tp, ep=s.ep)))
        lp = sel.launch_plan(self.directory(s))
        moe = linear = None
        lin_names = []
        for g in lp.groups:
            if not g.planned or g.decision is None or g.decision.selected is None:
                continue
            if g.op == "moe" and moe is None:
                moe = g.engine_backend
            if g.op == "linear" and g.scheme == s.linear[0]:
                lin_names.append(g.engine_backend)
        linear = lin_names[0] if lin_names else None
        if not lp.runs:
            why = list(lp.problems) + [p for g in lp.groups for p in g.problems] + \
                [f"{g.kind}: {g.decision.summary()}" for g in lp.groups
                 if g.planned and g.decision is not None and not g.decision.selected] + \
                [str(c) for c in lp.conflicts if not c.instead] + list(lp.plan.problems())
            return Planned(None, moe, linear, tuple(unmodelled), "; ".join(why)[:400],
                           tuple(dict.fromkeys(lin_names)))
        argv = shlex.split(lp.command())
        assert argv[:3] == ["python", "-m", "sglang.launch_server"], argv
        return Planned(argv[3:], moe, linear, tuple(unmodelled), "",
                       tuple(dict.fromkeys(lin_names)))


# -- SGLang's side ---------------------------------------------------------------------------------
def sglang_answers(questions: Dict[Tuple, List[Dict[str, Any]]], python: str = sys.executable,
                   workers: Optional[int] = None) -> Dict[Tuple, List[Dict[str, Any]]]:
    """{machine: [question]} -> {machine: [answer]}, one child per machine."""
    workers = workers or int(os.environ.get(WORKERS_VAR) or 2)
    def run(machine: Tuple) -> Tuple[Tuple, List[Dict[str, Any]]]:
        cap, fi, dg, kernel = machine
        libs = [n for n, on in (("flashinfer", fi), ("deep_gemm", dg), ("sglang-kernel", kernel))
                if on]
        job = {"machine": {"capability": cap, "cuda": "13.0", "libs": libs},
               "questions": questions[machine]}
        p = subprocess.run([python, str(HERE / "sglang_command_sim.py")], input=json.dumps(job),
                           capture_output=True, text=True, timeout=3000)
        if p.returncode != 0:
            raise RuntimeError(f"SGLang child for {machine} failed:\n{p.stderr[-3000:]}")
        return machine, json.loads(p.stdout)

    with ThreadPoolExecutor(workers) as pool:
        return dict(pool.map(run, list(questions)))


# -- the comparison --------------------------------------------------------------------------------
@dataclass
class Row:
    scenario: Scenario
    planned: Planned
    follow: Optional[Dict[str, Any]]  # SGLang from selector's printed argv
    asked: Dict[str, Any]  # SGLang from the user's request
    why: Optional[str] = None

    def _ran(self, answer: Optional[Dict[str, Any]], op: str) -> Optional[str]:
        if not answer or answer.get("start"):
            return None
        return (answer.get(op) or {}).get("runner")

    @property
    def honored(self) -> bool:
        """SGLang, started from selector's printed argv, starts and runs selector's backends
        for the MoE layer and every planned linear group of the probed scheme."""
        p = self.planned
        if p.argv is None or not self.follow or self.follow.get("start"):
            return False
        if self.scenario.has_moe and p.moe is not None and self._ran(self.follow, "moe") != p.moe:
            return False
        if p.linear_names and any(self._ran(self.follow, "linear") != n for n in p.linear_names):
            return False
        return True

    @property
    def asked_starts(self) -> bool:
        """SGLang starts from the user's request and builds its layers."""
        from sglang_command_explain import asked_fails
        return not asked_fails(self)

    @property
    def agrees(self) -> bool:
        """Honored and SGLang asked the user's way runs the same; or both refuse."""
        if self.planned.argv is None:
            return not self.asked_starts
        if not self.honored:
            return False
        return all(self._ran(self.asked, op) == self._ran(self.follow, op)
                   for op in ("moe", "linear"))

    def cluster(self) -> Tuple:
        s = self.scenario
        a = self.asked
        what = a.get("start") and "no start" or \
            f"moe {self._ran(a, 'moe')}, linear {self._ran(a, 'linear')}"
        sel = "no command" if self.planned.argv is None else \
            f"moe {self.planned.moe}, linear {self.planned.linear}"
        return (s.fmt, s.moe if s.has_moe else "-", s.gemm, what, sel,
                "honored" if self.honored else "NOT honored")


@dataclass
class Report(sweep_report.Report):
    """The command sweep's report: the sweep's (differ, unexplained, clusters), plus the rows
    whose plan printed a command."""

    @property
    def printed(self) -> List[Row]:
        return [r for r in self.rows if r.planned.argv is not None]


def _question(s: Scenario, argv: List[str], d: Path) -> Dict[str, Any]:
    return {"argv": argv,
            "moe": ckpts.moe_question(s.arch, s.tp, s.ep) if s.has_moe else None,
            "linear": ckpts.linear_question(s.arch, s.tp) if s.linear[0] else None}


def run(n: Optional[int] = None, the_seed: Optional[int] = None, python: str = sys.executable,
        root: Optional[Path] = None, machines: Optional[int] = None) -> Report:
    from sglang_command_explain import explain
    the_seed = seed() if the_seed is None else the_seed
    n = n or int(os.environ.get(COUNT_VAR, "5000"))
    if machines is None and os.environ.get(MACHINES_VAR):
        machines = int(os.environ[MACHINES_VAR])
    rows_s = in_shard(scenarios(n, random.Random(the_seed), parser_choices(), machines),
                      *shard())
    with tempfile.TemporaryDirectory() as tmp:
        planner = Planner(Path(root or tmp))
        plans = {s: planner.plan(s) for s in OrderedDict.fromkeys(rows_s)}
        questions: Dict[Tuple, List[Dict[str, Any]]] = OrderedDict()
        index: Dict[Tuple, int] = {}

        def ask(s: Scenario, argv: List[str]) -> Tuple:
            key = (s.machine, tuple(argv), s.arch, s.fmt, s.tp, s.ep)
            if key not in index:
                qs = questions.setdefault(s.machine, [])
                index[key] = len(qs)
                qs.append(_question(s, argv, planner.directory(s)))
            return key
        keys = {}
        for s in plans:
            d = str(planner.directory(s))
            asked = ["--model-path", d, "--tp-size", str(s.tp)] + \
                (["--ep-size", str(s.ep)] if s.ep > 1 else []) + s.request_flags()
            keys[s] = (ask(s, asked), ask(s, plans[s].argv) if plans[s].argv else None)
        # each child answers its questions sorted, so equal argv come one after another
        answers = sglang_answers(questions, python)
    out = []
    for s in rows_s:
        ka, kf = keys[s]
        r = Row(s, plans[s], answers[kf[0]][index[kf]] if kf else None,
                answers[ka[0]][index[ka]])
        if not r.agrees:
            r.why = explain(r)
        out.append(r)
    return Report(the_seed, out)
