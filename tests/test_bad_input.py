"""Bad input, exit code 2 of docs/interface.md: one clear message naming the key, the value and the
accepted values (with a "did you mean" where one is close), and no traceback -- through the
command line (a subprocess) and through the API (selector.SelectorError, same message)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from helpers import assert_clean_error, run_cli_many, warm

import selector

pytestmark = pytest.mark.slow  # subprocess / fuzz suite: `pytest -m "not slow"` skips it

# (id, overrides, pieces the one-line message must contain). Every case runs through the API;
# those in CLI_CASES also through a `python -m selector` subprocess (most of a CLI run is
# interpreter and Hydra start-up, so the extra cases are checked in-process only).
OVERRIDE_CASES: List[Tuple[str, Tuple[str, ...], Tuple[str, ...]]] = [
    ("unknown-key", ("layer.actvation=relu2",),
     ("layer", "'actvation'", "accepted:", "activation, all2all", "did you mean 'activation'?")),
    ("unknown-top-level-key", ("+foo=bar",), ("'foo'", "accepted:", "layer", "platform")),
    ("unknown-platform-key", ("+platform.gpu=b200",), ("platform", "'gpu'", "capability")),
    ("unknown-value", ("layer.activation=swish",),
     ("layer.activation", "'swish'", "accepted: gelu, gelu_tanh, relu2, silu, situ, swigluoai")),
    ("unknown-value-close", ("layer.quant=nvfp5",),
     ("layer.quant", "'nvfp5'", "nvfp4_w4a16", "did you mean 'nvfp4'?")),
    ("unknown-op", ("layer.op=conv",), ("layer.op", "'conv'", "linear, moe")),
    ("unknown-dtype", ("layer.dtype=fp16",), ("layer.dtype", "'fp16'", "bfloat16, float16")),
    ("unknown-all2all", ("layer.all2all=nccl",), ("layer.all2all", "'nccl'",
                                                  "deepep_high_throughput")),
    ("unknown-platform-preset", ("platform=rtx5090",),
     ("platform", "'rtx5090'", "accepted:", "dgx_spark", "did you mean 'rtx_5090'?")),
    ("unknown-layer-preset", ("layer=nemotron",),
     ("layer", "'nemotron'", "accepted:", "dense_linear", "did you mean 'nemotron_moe'?")),
    ("unknown-stack-preset", ("stack=flashinfer_0_7_5",),
     ("stack", "'flashinfer_0_7_5'", "vllm_0_32", "did you mean 'flashinfer_0_7_4'?")),
    ("unknown-backend", ("policy.moe_backend=flashinfer_b13x",),
     ("policy.moe_backend", "'flashinfer_b13x'", "accepted: auto,", "marlin",
      "did you mean 'flashinfer_b12x'?")),
    ("linear-only-backend-for-moe", ("policy.moe_backend=flashinfer_cudnn",),
     ("policy.moe_backend", "'flashinfer_cudnn'", "accepted: auto,", "flashinfer_cudnn is a "
      "linear backend")),
    ("unknown-linear-backend", ("policy.linear_backend=flashinfer_b12",),
     ("policy.linear_backend", "'flashinfer_b12'", "did you mean 'flashinfer_b12x'?")),
    ("malformed-package-version", ("platform.packages.flashinfer-python=banana",),
     ("platform.packages.flashinfer-python", "'banana'", "PEP 440", "'0.6.11'")),
    ("malformed-cuda", ("platform.cuda=thirteen",), ("platform.cuda", "'thirteen'", "PEP 440")),
    ("malformed-capability", ("platform.capability=12",),
     ("platform.capability", "'12'", '"major.minor"', '"12.1"')),
    ("malformed-capability-3-parts", ("platform.capability=12.1.0",),
     ("platform.capability", "'12.1.0'")),
    ("negative-ep", ("layer.ep_size=-1",), ("layer.ep_size", "-1", "integer >= 1")),
    ("zero-ep", ("layer.ep_size=0",), ("layer.ep_size", "0", "integer >= 1")),
    ("zero-tp", ("layer.tp_size=0",), ("layer.tp_size", "integer >= 1")),
    ("zero-tokens", ("layer.num_tokens=0",), ("layer.num_tokens", "0", "null or an integer >= 1")),
    ("negative-clamp", ("layer.swiglu_limit=-1",), ("layer.swiglu_limit", "positive number")),
    ("ep-not-a-number", ("layer.ep_size=abc",), ("layer.ep_size", "'abc'", "integer")),
    ("ep-a-float", ("layer.ep_size=1.5",), ("layer.ep_size", "1.5", "integer")),
    ("act-and-mul-not-bool", ("layer.act_and_mul=maybe",),
     ("layer.act_and_mul", "'maybe'", "true", "false")),
    ("strict-not-bool", ("policy.strict=maybe",), ("policy.strict", "'maybe'", "true", "false")),
    ("catalogue-override", ("catalogue.moe.marlin.rank=1",), ("catalogue", "--config-dir")),
    ("probe-value", ("probe=deeep",), ("probe", "'deeep'", "did you mean 'deep'?")),
    ("null-op", ("layer.op=null",), ("layer.op", "'null'", "linear, moe")),
    ("null-ep", ("layer.ep_size=null",), ("layer.ep_size", "'null'", "integer")),
    ("null-strict", ("policy.strict=null",), ("policy.strict", "true or false")),
    ("list-activation", ("layer.activation=[silu,relu2]",),
     ("layer.activation", "[silu,relu2]", "gelu_tanh")),
    ("delete-key", ("~layer.activation",), ("layer.activation", "cannot be deleted")),
    ("malformed-override", ("layer.activation",), ("layer.activation", "key=value")),
]

CLI_CASES = {
    "unknown-key", "unknown-top-level-key", "unknown-value", "unknown-platform-preset",
    "unknown-layer-preset", "unknown-backend", "linear-only-backend-for-moe",
    "malformed-package-version", "malformed-cuda", "malformed-capability", "negative-ep",
    "zero-ep", "zero-tokens", "ep-not-a-number", "act-and-mul-not-bool", "catalogue-override",
}
_CLI = [c for c in OVERRIDE_CASES if c[0] in CLI_CASES]
assert len(_CLI) == len(CLI_CASES)


def _write(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


BROKEN_YAML = ('description: "broken"\n'
               "rank: 5\n"
               "rules:\n"
               "  - kind: device\n"
               '    devices: ["12.x"\n'
               '    source: "x"\n')
TYPO_KEY = 'description: "typo"\nrnak: 5\nrules: []\n'
NO_SOURCE = 'description: "x"\nrank: 5\nrules:\n  - kind: device\n    devices: ["12.x"]\n'
BAD_KIND = ('description: "x"\nrank: 5\nrules:\n  - kind: devise\n    devices: ["12.x"]\n'
            '    source: "x"\n')
BAD_SPEC = ('description: "x"\nrank: 5\nrules:\n'
            '  - kind: device\n    devices: ["12.x"]\n    source: "x"\n'
            '  - kind: package\n    package: flashinfer-python\n    specifier: ">>0.6.9"\n'
            '    source: "x"\n')
UNQUOTED = 'preset: myrig\ncapability: "12.0"\ncuda: 13.0\n'


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-configs")
    out = {}
    for name, rel, text in (("broken", "backend/moe/broken.yaml", BROKEN_YAML),
                            ("typo", "backend/moe/typo.yaml", TYPO_KEY),
                            ("nosource", "backend/moe/nosource.yaml", NO_SOURCE),
                            ("badkind", "backend/moe/badkind.yaml", BAD_KIND),
                            ("badspec", "backend/linear/badspec.yaml", BAD_SPEC),
                            ("unquoted", "platform/myrig.yaml", UNQUOTED)):
        _write(root / name, rel, text)
        out[name] = root / name
    every = root / "every"
    for rel, text in (("backend/moe/typo.yaml", TYPO_KEY), ("backend/moe/nosource.yaml", NO_SOURCE),
                      ("backend/moe/badkind.yaml", BAD_KIND),
                      ("backend/linear/badspec.yaml", BAD_SPEC)):
        _write(every, rel, text)
    out["every"] = every
    return out


DIR_CASES = {
    # id: (dir, extra args, pieces of the message)
    "broken-yaml": ("broken", (), ("broken.yaml", "line 6", "malformed YAML")),
    "unknown-key-in-backend": ("typo", (), ("typo.yaml", "catalogue.moe.typo", "'rnak'",
                                            "accepted:", "did you mean 'rank'?")),
    "rule-without-source": ("nosource", (), ("nosource.yaml",
                                             "catalogue.moe.nosource.rules[0].source",
                                             "cite the PR")),
    "unknown-rule-kind": ("badkind", (), ("badkind.yaml", "catalogue.moe.badkind.rules[0].kind",
                                          "'devise'", "known_issue", "did you mean 'device'?")),
    "bad-specifier-in-rule": ("badspec", (), ("badspec.yaml",
                                              "catalogue.linear.badspec.rules[1].specifier",
                                              "'>>0.6.9'", "PEP 440")),
    "unquoted-version-in-preset": ("unquoted", ("platform=myrig",),
                                   ("myrig.yaml", "line 3", "cuda", "quote")),
}
# `check` per directory for the cases test_check_lists_every_problem does not cover
CHECK_CASES = ("broken-yaml", "unquoted-version-in-preset")


@pytest.fixture(scope="module")
def results(dirs):
    """Every CLI case of this module, run concurrently once."""
    argvs = {}
    for cid, overrides, _ in _CLI:
        argvs[("explain", cid)] = ("explain", "platform=cpu", *overrides)
    for cid, (d, extra, _) in DIR_CASES.items():
        argvs[("explain", cid)] = ("explain", "--config-dir", str(dirs[d]), "platform=cpu",
                                   *extra)
    for cid in CHECK_CASES:
        argvs[("check", cid)] = ("check", "--config-dir", str(dirs[DIR_CASES[cid][0]]))
    argvs[("check", "every")] = ("check", "--config-dir", str(dirs["every"]))
    argvs[("check-json", "every")] = ("check", "--format", "json", "--config-dir",
                                      str(dirs["every"]))
    argvs[("list", "unknown-backend")] = ("list", "platform=cpu",
                                          "policy.moe_backend=flashinfer_b13x")
    argvs[("explain-json", "unknown-value")] = ("explain", "--format", "json", "platform=cpu",
                                                "layer.activation=swish")
    argvs[("explain", "missing-config-dir")] = ("explain", "--config-dir",
                                                str(dirs["every"] / "nope"), "platform=cpu")
    argvs[("explain", "bad-format")] = ("explain", "--format", "yaml", "platform=cpu")
    argvs[("nocommand", "")] = ()
    argvs[("explain", "version-4.10")] = ("explain", "--format", "json", "platform=cpu",
                                          "platform.packages.nvidia-cutlass-dsl=4.10",
                                          "platform.cuda=12.10")
    # errors found after composition (versions, values, backend files) leave a cached
    # composition behind: compose here first so that the subprocesses skip Hydra
    warm([("platform=cpu", *o) for _, o, _ in _CLI] +
         [("platform=cpu", "platform.packages.nvidia-cutlass-dsl=4.10", "platform.cuda=12.10")],
         helpers=1)
    for d, extra, _ in DIR_CASES.values():
        warm([("platform=cpu", *extra)], config_dirs=[dirs[d]], helpers=0)
    keys = list(argvs)
    return dict(zip(keys, run_cli_many([argvs[k] for k in keys])))


@pytest.mark.parametrize("cid,overrides,needles", _CLI, ids=[c[0] for c in _CLI])
def test_bad_override_cli(results, cid, overrides, needles):
    assert_clean_error(results[("explain", cid)], *needles)


@pytest.mark.parametrize("cid,overrides,needles", OVERRIDE_CASES,
                         ids=[c[0] for c in OVERRIDE_CASES])
def test_bad_override_api(results, cid, overrides, needles):
    with pytest.raises(selector.SelectorError) as e:
        selector.load(["platform=cpu", *overrides])
    msg = str(e.value)
    assert e.value.exit_code == 2
    assert "\n" not in msg and "Traceback" not in msg
    for n in needles:
        assert n in msg, (n, msg)
    if cid in CLI_CASES:  # the same message as the command line's
        assert assert_clean_error(results[("explain", cid)]) == f"selector: error: {msg}"


@pytest.mark.parametrize("cid", sorted(DIR_CASES))
def test_bad_config_dir_explain(results, cid):
    assert_clean_error(results[("explain", cid)], *DIR_CASES[cid][2])


@pytest.mark.parametrize("cid", CHECK_CASES)
def test_bad_config_dir_check(results, cid):
    r = results[("check", cid)]
    assert r.returncode == 2 and "Traceback" not in r.stderr + r.stdout
    assert r.stderr.startswith("1 problem(s) in "), r.stderr
    for n in DIR_CASES[cid][2]:
        if n != "line 3" or cid != "unquoted-version-in-preset":
            assert n in r.stderr


@pytest.mark.parametrize("cid", sorted(DIR_CASES))
def test_bad_config_dir_api(dirs, cid):
    d, extra, needles = DIR_CASES[cid]
    with pytest.raises(selector.SelectorError) as e:
        selector.load(["platform=cpu", *extra], config_dirs=[dirs[d]])
    for n in needles:
        assert n in str(e.value)


def test_check_lists_every_problem(results):
    r = results[("check", "every")]
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    # every problem of every file: typo.yaml has two (the unknown key 'rnak', no rank)
    assert lines[0].startswith("5 problem(s) in ")
    problems = [ln for ln in lines[1:] if ln.startswith("  - ")]
    assert len(problems) == 5, r.stderr
    for n, count in (("typo.yaml", 2), ("nosource.yaml", 1), ("badkind.yaml", 1),
                     ("badspec.yaml", 1)):
        assert sum(n in p for p in problems) == count, (n, problems)


def test_check_json_lists_every_problem(results):
    r = results[("check-json", "every")]
    assert r.returncode == 2
    report = r.json
    assert report["ok"] is False
    files = sorted(Path(p["file"]).name for p in report["problems"])
    assert files == ["badkind.yaml", "badspec.yaml", "nosource.yaml", "typo.yaml", "typo.yaml"]
    assert all(p["problem"] for p in report["problems"])


def test_list_rejects_bad_override(results):
    assert_clean_error(results[("list", "unknown-backend")], "policy.moe_backend",
                       "did you mean 'flashinfer_b12x'?")


def test_json_format_error_is_still_a_message(results):
    r = results[("explain-json", "unknown-value")]
    assert_clean_error(r, "layer.activation", "'swish'")
    assert r.stdout == ""


def test_missing_config_dir(results):
    assert_clean_error(results[("explain", "missing-config-dir")], "--config-dir", "nope",
                       "not a directory")


def test_argparse_errors_exit_2(results):
    r = results[("explain", "bad-format")]
    assert r.returncode == 2 and "invalid choice: 'yaml'" in r.stderr
    assert "Traceback" not in r.stderr
    r = results[("nocommand", "")]
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_version_4_10_stays_4_10(results):
    r = results[("explain", "version-4.10")]
    assert r.returncode == 0, r.stderr  # cpu without packages: the reference
    plat = r.json["platform"]
    assert plat["packages"]["nvidia-cutlass-dsl"] == "4.10"
    assert plat["cuda"] == "12.10"


def test_version_4_10_api():
    sel = selector.load(["platform=cpu", "platform.packages.nvidia-cutlass-dsl=4.10",
                         "platform.packages.flashinfer-python=0.6.10"])
    assert sel.default().to_dict()["platform"]["packages"]["nvidia-cutlass-dsl"] == "4.10"
    from packaging.version import Version
    assert sel.platform.facts.version("nvidia-cutlass-dsl") == Version("4.10")
    assert sel.platform.facts.version("nvidia-cutlass-dsl") > Version("4.5")


# ---------------------------------------------------------------------------------------------
# select(**layer): bad keyword values raise SelectorError with the CLI's message

@pytest.fixture(scope="module")
def sel():
    return selector.load(["platform=cpu"])


def test_select_unknown_value_same_message_as_cli(results, sel):
    cli = assert_clean_error(results[("explain", "unknown-value")])
    with pytest.raises(selector.SelectorError) as e:
        sel.select(activation="swish")
    assert cli == f"selector: error: {e.value}"


@pytest.mark.parametrize("kw,needles", [
    ({"activation": "swish"}, ("layer.activation", "'swish'", "accepted:")),
    ({"actvation": "relu2"}, ("layer", "'actvation'", "did you mean 'activation'?")),
    ({"ep_size": 0}, ("layer.ep_size", "integer >= 1")),
    ({"ep_size": "2"}, ("layer.ep_size",)),
    ({"ep_size": True}, ("layer.ep_size",)),
    ({"act_and_mul": "yes"}, ("layer.act_and_mul", "true, false")),
    ({"num_tokens": 0}, ("layer.num_tokens",)),
    ({"swiglu_limit": float("nan")}, ("layer.swiglu_limit",)),
    ({"quant": ["nvfp4"]}, ("layer.quant",)),
    ({"op": "conv"}, ("layer.op", "linear, moe")),
], ids=str)
def test_select_bad_keywords(sel, kw, needles):
    with pytest.raises(selector.SelectorError) as e:
        sel.select(**kw)
    for n in needles:
        assert n in str(e.value), str(e.value)


def test_load_refuses_a_plain_string():
    with pytest.raises(selector.SelectorError):
        selector.load("platform=cpu")
