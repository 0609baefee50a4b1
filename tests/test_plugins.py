"""Regressions of issue 25 (plugins from outside): an installed distribution's metadata and
catalogue, written into a site directory on sys.path, through the CLI in-process. Each case is
bounded by SIGALRM (a hang fails it); built-in decisions must keep answering."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from helpers import run_main
from plugin_site import FAST_MOE, make_site

from selector.config import catalogues
from selector.core import entry_points as scanner

RTX_VLLM = ["engine=vllm", "platform=rtx_5090", "stack=vllm_0_33"]


@pytest.fixture
def on_path(monkeypatch):
    """Put a site dir on sys.path (first) for one test; discovery starts afresh both ways."""
    def put(site: Path) -> Path:
        monkeypatch.syspath_prepend(str(site))
        catalogues.reset()
        return site
    yield put
    catalogues.reset()
    for name in [m for m in sys.modules if m.split(".")[0] == "fast_kernels"]:
        del sys.modules[name]


def bounded(argv, seconds=600):  # a hang guard, never a speed limit
    def hang(signum, frame):
        raise TimeoutError(f"selector {argv} hung")
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        return run_main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- defect 1: engine-name aliasing -------------------------------------------------------------

def test_plugin_claiming_a_packaged_engine_name_is_left_out(tmp_path, on_path):
    on_path(make_site(tmp_path, {"backend/moe/fast_moe.yaml":
                                 FAST_MOE.format(vllm_name="flashinfer_trtllm")}))
    rc, out, err = bounded(["explain", *RTX_VLLM])
    assert rc == 0, err
    assert "selected: fast_moe" not in out and "--moe-backend flashinfer_trtllm" not in out
    assert "fast_moe.yaml" in err and "conf/backend/moe/flashinfer_trtllm.yaml" in err
    assert "'flashinfer_trtllm' is also the vllm name of catalogue.moe.flashinfer_trtllm" in err
    rc, out, err = bounded(["check"])
    assert rc == 2 and "fast_moe.yaml" in err and "flashinfer_trtllm.yaml" in err


def test_config_dir_claiming_a_packaged_engine_name_is_refused(tmp_path):
    d = tmp_path / "cd"
    (d / "backend/moe").mkdir(parents=True)
    (d / "backend/moe/fast_moe.yaml").write_text(FAST_MOE.format(vllm_name="flashinfer_trtllm"))
    for argv in (["explain", "--config-dir", str(d), *RTX_VLLM], ["check", "--config-dir", str(d)]):
        rc, out, err = bounded(argv)
        assert rc == 2 and "Traceback" not in err, (argv, err)
        assert str(d / "backend/moe/fast_moe.yaml") in err
        assert "conf/backend/moe/flashinfer_trtllm.yaml" in err
        assert "catalogue.moe.fast_moe.engines.vllm.name" in err


def test_own_engine_name_is_accepted_and_marked_as_a_plugin(tmp_path, on_path):
    """Control, and issue 22 item 8: `--format line` says the backend comes from a plugin."""
    on_path(make_site(tmp_path, {"backend/moe/fast_moe.yaml":
                                 FAST_MOE.format(vllm_name="fast_moe")}))
    rc, out, err = bounded(["explain", "--format", "line", *RTX_VLLM])
    assert rc == 0, err
    assert "-> fast_moe [selected]" in out
    assert out.rstrip().endswith("[fast_moe from fast-kernels 1.0 via entry point "
                                 "selector.catalogues:fast]")
    rc, out, err = bounded(["explain", "--format", "line", "platform=b200",
                            "stack=flashinfer_0_7_4"])
    assert rc == 0 and " from " not in out  # a packaged choice carries no origin


# -- defect 2: a plugin that exits -------------------------------------------------------------

@pytest.mark.parametrize("body, shown", [("raise SystemExit(0)", "SystemExit: 0"),
                                         ("import sys\nsys.exit(7)", "SystemExit: 7"),
                                         ("import os\nraise GeneratorExit('x')", "GeneratorExit")])
def test_a_plugin_that_exits_cannot_take_the_exit_code(tmp_path, on_path, body, shown):
    backend = ("rank: 90\nentry_point: fast_kernels.moe:FastMoE\nrules:\n  - kind: device\n"
               "    devices: ['12.x']\n    source: x\n  - kind: activation\n    values: [silu]\n"
               "    source: x\n")
    on_path(make_site(tmp_path, {"backend/moe/fast_moe.yaml": backend,
                                 "/fast_kernels/moe.py": body + "\n"},
                      entry_points="[selector.catalogues]\nfast = fast_kernels.selector_conf\n"
                      "[selector.backends]\nfast = fast_kernels.moe\n"))
    rc, out, err = bounded(["check"])
    assert rc == 2, (rc, out, err)
    assert "fast_kernels.moe:FastMoE" in err and shown in err and "cannot be imported" in err


# -- defect 3: plugin discovery ----------------------------------------------------------------

def _dist_info(site: Path, name: str = "odd-1.0") -> Path:
    info = site / f"{name}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: odd\nVersion: 1.0\n")
    return info


@pytest.mark.parametrize("kind", ["fifo", "huge", "not_utf8", "malformed", "no_group_header",
                                  "directory"])
def test_hostile_entry_points_txt_is_skipped_with_a_warning(tmp_path, on_path, kind):
    site = tmp_path / "site"
    info = _dist_info(site)
    ep = info / "entry_points.txt"
    if kind == "fifo":
        os.mkfifo(ep)
    elif kind == "huge":
        with open(ep, "wb") as f:
            f.write(b"[selector.catalogues]\n")
            f.truncate(scanner.MAX_METADATA_BYTES + 1)
    elif kind == "not_utf8":
        ep.write_bytes(b"[selector.catalogues]\nx = y\xff\xfe\n")
    elif kind == "malformed":
        ep.write_text("[selector.catalogues]\nthis is = not = valid\nnot a pair\n")
    elif kind == "no_group_header":
        ep.write_text("x = y\n[selector.catalogues]\n")
    else:
        ep.mkdir()
    on_path(site)
    rc, out, err = bounded(["explain", "platform=b200", "stack=flashinfer_0_7_4"])
    assert rc == 0 and "selected: flashinfer_" in out, err
    assert "Traceback" not in err
    assert f"selector: warning: {ep}" in err and "skipped" in err
    rc, out, err = bounded(["check"], 60)
    assert rc == 2 and str(ep) in err


def test_fifo_metadata_of_a_declaring_distribution_never_hangs(tmp_path, on_path):
    """METADATA and RECORD are read as carefully as entry_points.txt."""
    site = make_site(tmp_path, {"backend/moe/fast_moe.yaml":
                                FAST_MOE.format(vllm_name="fast_moe")})
    info = next(site.glob("*.dist-info"))
    for name in ("METADATA", "RECORD"):
        (info / name).unlink()
        os.mkfifo(info / name)
    on_path(site)
    rc, out, err = bounded(["explain", "--format", "line", *RTX_VLLM], 30)
    assert rc == 0, err
    assert "-> fast_moe [selected]" in out  # found through find_spec; name from the directory


def test_unrelated_broken_metadata_stays_quiet(tmp_path, on_path):
    """A malformed entry_points.txt that names no selector group is no business of selector."""
    site = tmp_path / "site"
    (_dist_info(site) / "entry_points.txt").write_bytes(b"[console_scripts\nx\xff\n")
    on_path(site)
    rc, out, err = bounded(["explain", "platform=b200", "stack=flashinfer_0_7_4"])
    assert rc == 0 and "warning" not in err


# -- defect 5: a plugin's own distribution on hardware presets --------------------------------

NEEDS_SELF = """\
rank: 1
rules:
  - kind: device
    devices: ["12.x"]
    source: "fast-kernels 1.0 release notes"
  - kind: package
    package: fast-kernels
    source: "fast-kernels 1.0 release notes"
engines:
  vllm:
    name: fast_moe
    source: "fast-kernels 1.0 README"
"""


def test_a_plugins_own_distribution_is_present_on_every_preset(tmp_path, on_path):
    on_path(make_site(tmp_path, {"backend/moe/fast_moe.yaml": NEEDS_SELF}, version="1.2"))
    rc, out, err = bounded(["explain", "--format", "json", *RTX_VLLM])
    assert rc == 0, err
    import json
    d = json.loads(out)
    assert d["selected"] == "fast_moe", d["candidates"]
    assert d["platform"]["packages"]["fast-kernels"] == "1.2"
    # an explicit value still wins, in explain and in matrix alike
    rc, out, err = bounded(["explain", "--format", "json", *RTX_VLLM,
                            "platform.packages.fast-kernels=null"])
    assert rc == 0 and json.loads(out)["selected"] != "fast_moe"
    rc, out, err = bounded(["matrix", "--op", "moe", "--format", "json", "--stack", "vllm_0_33",
                            "platform.packages.fast-kernels=null"])
    assert rc == 0, err
    cells = json.loads(out)["grids"][0]["cells"]["fast_moe"]
    assert cells["rtx_5090"]["status"] == "rejected"
    rc, out, err = bounded(["matrix", "--op", "moe", "--format", "json", "--stack", "vllm_0_33"])
    assert json.loads(out)["grids"][0]["cells"]["fast_moe"]["rtx_5090"]["status"] == "selected"


# -- defect 9: matrix --stack '' ---------------------------------------------------------------

def test_matrix_empty_stack_is_bad_input():
    rc, out, err = bounded(["matrix", "--stack", ""])
    assert rc == 2 and "--stack" in err and "vllm_0_32" in err and "Traceback" not in err


def test_vllm_log_line_names_a_plugins_backend(tmp_path, on_path, monkeypatch, caplog):
    """Issue 22 item 8: the vLLM plugin's one log line per layer says when the backend it chose
    comes from a plugin. (The Chooser asks vLLM's platform only for the capability: given here;
    tests/vllm runs it inside the real vLLM.)"""
    import logging

    from selector.engines import vllm_choice
    on_path(make_site(tmp_path, {"backend/moe/fast_moe.yaml":
                                 FAST_MOE.format(vllm_name="fast_moe")}))
    monkeypatch.setattr(vllm_choice, "capability", lambda: "12.0")
    chooser = vllm_choice.Chooser(["stack=vllm_0_33"])
    with caplog.at_level(logging.INFO, logger="vllm.selector"):
        d = chooser.decide({"op": "moe", "quant": "nvfp4", "activation": "silu",
                            "act_and_mul": True}, "auto")
    # vLLM 0.33.0's NVFP4 oracle takes no moe_backend='fast_moe': no flag is printed, and the
    # decision says why (api.Selector._flag_checked)
    assert d.selected == "fast_moe" and d.engine.backend == "fast_moe" and d.engine.flags == ()
    assert "moe_backend='fast_moe'" in d.engine.no_flag
    (line,) = [r.getMessage() for r in caplog.records if r.name == "vllm.selector"]
    assert "-> fast_moe [selected]" in line and "[vLLM: none]" in line
    assert line.endswith("[fast_moe from fast-kernels 1.0 via entry point "
                         "selector.catalogues:fast]")
