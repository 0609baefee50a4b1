"""Catalogues from other packages: a distribution built and pip-installed into a temporary
directory contributes a backend and a platform preset through `selector.catalogues`; list,
explain and check show it with its origin; a clash with a packaged name is refused naming both
origins; discovery never imports the contributing package."""
from __future__ import annotations

import json

import pytest
from catalogue_dist import DEMO_BACKEND, build_wheel, demo_files, install
from helpers import cli_env, run_cli_many

DEMO_ORIGIN = "selector-demo-kernels 1.0 via entry point selector.catalogues:demo"
SPARK = ("platform=dgx_spark", "stack=flashinfer_0_7_4")


def _site(tmp, label, **kw):
    return install(build_wheel(tmp, **kw), tmp / f"site-{label}")


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dists")
    return {
        "good": _site(tmp, "good"),
        "clash": _site(tmp, "clash", name="selector-demo-clash",
                       files=demo_files(backend="marlin")),
        "broken": _site(tmp, "broken", name="selector-demo-broken",
                        files=demo_files(backend_text=DEMO_BACKEND.replace(
                            "kind: device", "kind: devise"))),
        "badvalue": _site(tmp, "badvalue", name="selector-demo-badvalue",
                          catalogue_value="demo_kernels:selector_conf"),
        "missing": _site(tmp, "missing", name="selector-demo-missing",
                         catalogue_value="demo_kernels.no_such_dir"),
    }


def _env(site, log=None):
    extra = {"DEMO_IMPORT_LOG": str(log)} if log else {}
    return cli_env(site, **extra)


@pytest.fixture(scope="module")
def good(sites, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "imports.txt"
    env = _env(sites["good"], log)
    argvs = [("list",), ("list", "--format", "json"),
             ("explain", *SPARK), ("explain", "--format", "json", *SPARK),
             ("explain", "--format", "json", "platform=demo_gpu", "stack=flashinfer_0_7_4",
              "policy.moe_backend=demo_moe"),
             ("explain", "platform=dgx_spark", "stack=flashinfer_0_7_4", "layer=nemotron_moe",
              "policy.moe_backend=demo-moe")]
    runs = dict(zip(["list", "list-json", "explain", "explain-json", "request", "refused"],
                    run_cli_many(argvs, env=env)))
    imported_before_check = log.exists()
    runs["check"] = run_cli_many([("check", "--format", "json")], env=env)[0]
    return runs, imported_before_check, log


def test_list_shows_the_contributed_backend_and_its_origin(good):
    runs, _, _ = good
    assert runs["list"].returncode == 0, runs["list"].stderr
    assert f"  demo_moe (rank 95; native; from {DEMO_ORIGIN}):" in runs["list"].stdout
    assert "  marlin (rank 60; weight_only; from packaged selector" in runs["list"].stdout
    entries = {b["backend"]: b for b in runs["list-json"].json["moe"]}
    assert entries["demo_moe"]["origin"] == DEMO_ORIGIN
    assert entries["demo_moe"]["entry_point"] == "demo_kernels.moe:DemoMoE"
    assert entries["marlin"]["origin"].startswith("packaged selector ")


def test_explain_shows_origins_and_can_select_it(good):
    runs, _, _ = good
    text = runs["explain"]
    assert text.returncode == 0, text.stderr
    assert (f"origins: demo_moe from {DEMO_ORIGIN}; every other moe backend from packaged "
            "selector") in text.stdout
    d = runs["explain-json"].json
    assert d["origins"]["demo_moe"] == DEMO_ORIGIN
    assert d["origins"]["marlin"].startswith("packaged selector ")
    demo = next(c for c in d["candidates"] if c["backend"] == "demo_moe")
    assert demo["status"] == "eligible" and d["selected"] == "flashinfer_cutlass"  # rank 95
    # the contributed platform preset (SM 12.0) and an explicit request of the new backend
    r = runs["request"].json
    assert r["platform"]["source"] == "demo_gpu" and r["platform"]["capability"] == "12.0"
    assert r["selected"] == "demo_moe" and r["entry_point"] == "demo_kernels.moe:DemoMoE"
    # its rules apply like any other: relu2 non-gated is refused, with its source
    refused = runs["refused"]
    assert refused.returncode == 1
    assert "selector-demo-kernels 1.0 release notes" in refused.stdout


def test_discovery_imports_nothing_check_imports_the_entry_point(good):
    runs, imported_before_check, log = good
    assert not imported_before_check, "list/explain imported the contributing package"
    report = runs["check"].json
    assert runs["check"].returncode == 0, runs["check"].stdout
    assert "demo_moe" in report["backends"]["moe"]
    assert any(d.endswith("demo_kernels/selector_conf") for d in report["dirs"])
    assert log.read_text().count("imported") >= 1  # check validated the entry point


@pytest.fixture(scope="module")
def bad(sites):
    """Each broken contribution under explain (or list) and under check."""
    argvs = {"clash": ("explain", "platform=cpu"), "broken": ("explain", "platform=cpu"),
             "badvalue": ("list",), "missing": ("explain", "platform=cpu")}
    out = {}
    for n, argv in argvs.items():
        out[n], out[f"{n}-check"] = run_cli_many([argv, ("check",)], env=_env(sites[n]))
    return out


def left_out(r, *needles):
    """The command ran without the broken catalogue (built-ins answer) and warned, naming it."""
    assert r.returncode == 0, (r.args, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("selector: warning: ")]
    assert len(warnings) == 1, r.stderr
    for n in needles:
        assert n in warnings[0], (n, warnings[0])
    assert "left out" in warnings[0]
    return warnings[0]


def check_fails(r, *needles):
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


def test_a_packaged_name_is_refused_naming_both_origins(bad):
    needles = ("selector-demo-clash 1.0 via entry point selector.catalogues:demo",
               "backend moe backend 'marlin'", "packaged selector", "conf/backend/moe/marlin.yaml",
               "needs a name of its own")
    left_out(bad["clash"], *needles)
    assert "selected: emulation" in bad["clash"].stdout
    check_fails(bad["clash-check"], *needles)


def test_one_broken_contribution_is_left_out_and_check_fails(bad):
    """Regression (issue 25, defect 4): one mistyped field in a plugin's YAML made every
    explain exit 2, built-in backends included."""
    needles = ("selector-demo-broken 1.0", "demo_kernels/selector_conf/backend/moe/demo_moe.yaml",
               "catalogue.moe.demo_moe.rules[0].kind", "devise")
    left_out(bad["broken"], *needles)
    assert "selected: emulation" in bad["broken"].stdout
    check_fails(bad["broken-check"], *needles)


def test_malformed_or_missing_catalogue_entry_points(bad):
    left_out(bad["badvalue"], "selector-demo-badvalue", "selector.catalogues:demo",
             "'demo_kernels:selector_conf'", "dotted package path")
    check_fails(bad["badvalue-check"], "'demo_kernels:selector_conf'")
    left_out(bad["missing"], "selector-demo-missing", "'demo_kernels.no_such_dir'",
             "is not installed")
    check_fails(bad["missing-check"], "'demo_kernels.no_such_dir'")


@pytest.mark.slow
def test_no_contribution_leaves_output_unchanged(good):
    """Without contributed backends explain prints no origins line and no `origins` key."""
    r = run_cli_many([("explain", "--format", "json", *SPARK)])[0]
    assert "origins" not in json.loads(r.stdout)


def test_contributable_files_are_the_yaml_and_yml_files_of_each_group(tmp_path):
    from selector.config.catalogues import _files
    (tmp_path / "backend" / "moe").mkdir(parents=True)
    (tmp_path / "layer").mkdir()
    for name in ("backend/moe/a.yaml", "backend/moe/b.yml", "backend/moe/c.txt", "layer/l.yaml"):
        (tmp_path / name).write_text("x: 1\n")
    (tmp_path / "backend" / "moe" / "d.yaml").mkdir()  # a directory is not a file
    assert _files(tmp_path) == {"backend/moe/a": tmp_path / "backend/moe/a.yaml",
                                "backend/moe/b": tmp_path / "backend/moe/b.yml",
                                "layer/l": tmp_path / "layer/l.yaml"}


def test_linting_only_a_directory_reads_the_files_under_it(tmp_path):
    from selector.config.dirs import ConfigTree
    from selector.config.presets import lint_tree
    from selector.core.errors import SelectorError
    from selector.core.packaged import packaged_conf_dir
    (tmp_path / "stack").mkdir()
    (tmp_path / "stack" / "mine.yaml").write_text("packages:\n  torch: 2.10\n")
    tree = ConfigTree.from_dirs([packaged_conf_dir(), tmp_path])
    lint_tree(tree, only=packaged_conf_dir())  # the packaged files are fine
    with pytest.raises(SelectorError, match=r"mine\.yaml line 2: packages\.torch: '2\.10' is an "
                                            "unquoted number"):
        lint_tree(tree, only=tmp_path)
