"""Load or refuse, through vLLM's own plugin loader: over seeded random FP8, MXFP4/MXFP8 and NVFP4
MoE scenarios (tests/vllm/random_sweep.py), vLLM's oracle alone and then with selector's plugin
loaded; a scenario where vLLM alone builds a backend and the plugin's answer makes vLLM raise is
a model that would load without selector and fails to with it. The count is printed and must be
0 (issue #33).

One kind of scenario is not such a model: vLLM alone builds a kernel its CUDA build does not
compile, so the model fails to load without selector too, later (CUDA_BUILD_FLOORS). vLLM 0.32.0's
NVFP4 oracle takes an explicit `--moe-backend cutlass` from CutlassExpertsFp4.is_supported_config
(fused_moe/oracle/nvfp4.py select_nvfp4_moe_backend, _return_or_raise; experts/cutlass_moe.py:
the device family only, no CUDA version), but its CMakeLists.txt compiles the NVFP4 kernels
(ENABLE_NVFP4_SM100/SM120) only with CUDA >= 12.8, and below that csrc/quantization/fp4/
nvfp4_blockwise_moe_kernel.cu cutlass_fp4_group_mm is a stub that raises ('No compiled
cutlass_fp4_group_mm kernel, vLLM must be compiled with ENABLE_NVFP4 for SM100+ and CUDA 12.8 or
above') at the first forward, the profile run after the weights are loaded. selector's
conf/backend/moe/cutlass.yaml cuda rule (">=12.8", source "vLLM 0.32.0 (CMakeLists NVFP4
SM100/SM120 flags)") refuses it up front, and under the strict policy an explicit request it
refuses is an error, as vLLM's own explicit path raises for a backend it refuses: the plugin does
not swap the user's named backend for another (policy.strict=false does). Such a scenario is
counted apart, never as built by vLLM alone, and only when the plugin then either builds a
backend or refuses naming that CUDA floor; any other failure still counts."""
from __future__ import annotations

import collections
import os

import cli_door
import parity
import random_sweep as rs
import sim
from packaging.version import Version
from test_plugin import entry_point, load_plugins, plugin_overrides, simulation  # noqa: F401

from selector.engines import vllm as adapter

# scenarios per MoE family (fp8, mx, nvfp4): 100 in one CI run; SELECTOR_PLUGIN_LOADS_PER_FAMILY
# for a larger sweep (issue 44: 1,400 per family at the parity seed, docs/checkpoints.md)
PER_FAMILY = int(os.environ.get("SELECTOR_PLUGIN_LOADS_PER_FAMILY", "100"))
# checkpoints of the CLI-door sweep (tests/vllm/cli_door.py, its seed SELECTOR_CLI_DOOR_SEED:
# drawn per run and printed when unset): 16 in one CI run (each is built twice);
# SELECTOR_CLI_DOOR_CASES, as test_cli_door.py reads it, draws the same sweep (or
# SELECTOR_PLUGIN_LOADS_CHECKPOINTS, which comes first)
CHECKPOINTS = int(os.environ.get("SELECTOR_PLUGIN_LOADS_CHECKPOINTS")
                  or os.environ.get("SELECTOR_CLI_DOOR_CASES") or "16")


def _choice(s: sim.Scenario):
    """vLLM's MoE oracle through the names its quant methods call (the plugin rebinds them)."""
    if s.oracle == "nvfp4" and s.quant.startswith("nvfp4"):
        from vllm.model_executor.layers.quantization import modelopt
        return parity.vllm_moe(s, modelopt.select_nvfp4_moe_backend)
    return parity.vllm_choice(s)


# (vLLM's backend, quant) -> (the lowest CUDA its build compiles the kernel with, why): vLLM's
# Python picks the kernel without looking at the CUDA version (see the module docstring)
CUDA_BUILD_FLOORS = {
    ("cutlass", "nvfp4"): ("12.8", "vLLM 0.32.0 CMakeLists.txt (the NVFP4 kernels with CUDA >= "
                                   "12.8 only); csrc/quantization/fp4/nvfp4_blockwise_moe_kernel.cu "
                                   "(cutlass_fp4_group_mm: TORCH_CHECK_NOT_IMPLEMENTED otherwise)"),
}


def cannot_run(s: sim.Scenario, alone: str):
    """The CUDA floor vLLM alone's pick misses on this machine (None: its build has the kernel)."""
    floor = CUDA_BUILD_FLOORS.get((alone, s.quant))
    if floor is None or s.cuda is None or Version(s.cuda) >= Version(floor[0]):
        return None
    return floor[0]


def refused_for_the_floor(s: sim.Scenario, alone: str, floor: str, error: str) -> bool:
    """The plugin's refusal is selector's CUDA rule on vLLM alone's pick, and that rule only."""
    d = parity.selector_decision(s)
    if alone not in {c.backend for c in d.candidates}:
        return False
    reasons = d.candidate(alone).reasons
    return ({x.rule for x in reasons} == {"cuda"} and f"CUDA >={floor}" in error
            and any(floor in x.message for x in reasons))


def test_the_plugin_fails_no_load_that_vllm_alone_makes(entry_point, monkeypatch,  # noqa: F811
                                                        simulation):  # noqa: F811
    space = sorted((s for f in ("fp8", "mx", "nvfp4") for s in rs.draw(f, n=PER_FAMILY)
                    if s.op == "moe"), key=lambda s: str(s.machine))
    adapter.uninstall()
    alone = {}
    for s in space:
        with simulation.scenario(s):
            alone[s] = _choice(s)[0]
    load_plugins(monkeypatch, enabled=True)
    assert adapter.installed()
    simulation._machine = None  # re-answer the probes on the patched names
    late = {s: cannot_run(s, a) for s, a in alone.items() if a is not None}
    late = {s: f for s, f in late.items() if f is not None}
    fails, refused_late = [], collections.Counter()
    built = 0
    for s in space:
        monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s))
        with simulation.scenario(s):
            name, error, _ = _choice(s)
            built += name is not None
            if alone[s] is None or name is not None:
                continue
            if s in late and refused_for_the_floor(s, alone[s], late[s], error):
                # vLLM alone fails this load later, at the first forward; the plugin refuses now
                refused_late[f"{alone[s]} {s.quant} below CUDA {late[s]}"] += 1
                continue
        fails.append(f"{s.label()}: vLLM alone {alone[s]}; plugin: {error[:160]}")
    print(f"\nplugin load sweep, seed {rs.seed()}: {len(space)} MoE scenarios, "
          f"{sum(a is not None for a in alone.values()) - len(late)} built by vLLM alone (and "
          f"{len(late)} a kernel its CUDA build lacks), {built} with the plugin (which refuses "
          f"{dict(refused_late)} of those), {len(fails)} fail to load with the plugin only")
    assert not fails, f"{len(fails)} loads the plugin breaks:\n" + "\n".join(fails[:20])


def test_the_plugin_fails_no_load_of_the_cli_door_checkpoints(entry_point, monkeypatch,  # noqa: F811
                                                              tmp_path):
    """The CLI door's random checkpoints (cli_door.draw: every format the reader accepts, the
    corpus architectures, B200 / H200, TP / DP / EP layouts), each loaded as `vllm serve` with
    its parallel flags: by vLLM alone, then with selector's plugin (SELECTOR_VLLM=1, its
    overrides the machine's, as plugin_overrides gives them). A checkpoint vLLM alone loads
    and the plugin's answer makes vLLM refuse is a load the plugin breaks: 0 allowed."""
    seed = cli_door.seed()
    # SELECTOR_CLI_DOOR_SHARD=K/N: the cases K, K+N, ... of the seed's sweep (test_cli_door.py)
    k, n = (int(x) for x in os.environ.get("SELECTOR_CLI_DOOR_SHARD", "0/1").split("/"))
    cases = cli_door.make_cases(seed, CHECKPOINTS, tmp_path)[k::n]
    adapter.uninstall()
    alone = cli_door.loads(cases)
    load_plugins(monkeypatch, enabled=True)
    assert adapter.installed()
    decided = collections.Counter()  # the plugin's decisions, by outcome
    decide = adapter.CHOOSER.decide

    def counted(*a, **kw):
        d = decide(*a, **kw)
        decided["selected" if d.selected else "refused"] += 1
        return d
    monkeypatch.setattr(adapter.CHOOSER, "decide", counted)
    try:
        plugin = cli_door.loads(cases, lambda c: monkeypatch.setenv(
            adapter.ENV_OVERRIDES, plugin_overrides(cli_door.scenario(c))))
    finally:
        adapter.uninstall()
    inspected = [(c, a, p) for c, a, p in zip(cases, alone, plugin)
                 if cli_door.INSPECTION not in a + p]  # vLLM's registry subprocess died
    fails = [f"{c.label} {c.platform} tp{c.tp} dp{c.dp}{' ep' if c.ep else ''}: {p[:300]}"
             for c, a, p in inspected if not a and p]
    print(f"\nplugin loads of the CLI-door checkpoints, SELECTOR_CLI_DOOR_SEED={seed} (shard "
          f"{k}/{n}): {len(cases)} checkpoints, plugin decisions {dict(decided)}, "
          f"{sum(not a for _, a, _ in inspected)} loaded by vLLM alone, "
          f"{sum(not p for _, _, p in inspected)} with the plugin, "
          f"{sum(bool(a and p) for _, a, p in inspected)} refused by both, "
          f"{sum(bool(a and not p) for _, a, p in inspected)} loaded with the plugin only, "
          f"{len(cases) - len(inspected)} not compared (vLLM's registry could not inspect the "
          f"class), {len(fails)} fail to load with the plugin only")
    assert sum(not a for _, a, _ in inspected) > len(cases) // 3 and decided["selected"]
    assert not fails, f"{len(fails)} loads the plugin breaks:\n" + "\n".join(fails[:20])
