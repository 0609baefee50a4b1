"""The engine recipe (docs/engines.md), performed: a throwaway fourth engine is one file in a
config dir, and `check`, `explain` and `explain --model` answer in its names, its choice and its
launch command, while no backend file changes. A config-dir engine without a launch command, or
with a broken one, or with a malformed `outside:`, exits 2 naming the file and the key."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers import REPO, refused, run_main

CORPUS = REPO / "tests" / "checkpoint_corpus"
PLATFORM = ("platform=b200", "stack=flashinfer_0_7_4")
# The recipe's step 1: the engine's file. Its names for two catalogue backends, the flag that
# passes each choice, its launch command and its parallel rules.
TGI = """\
name: tgi
label: "TGI 9.9"
source: "TGI 9.9 launcher/src/main.rs (--moe-kernel, --gemm-kernel)"
proof: "none: a throwaway engine of tests/test_engine_recipe.py"
choices:
  - {op: moe, flag: "--moe-kernel"}
  - {op: linear, env: TGI_GEMM, schemes: [nvfp4]}
backends:
  moe:
    flashinfer_cutlass: {name: fi-cutlass-moe, source: "TGI 9.9 server/moe.py"}
  linear:
    flashinfer_cutlass: {name: fi-cutlass-gemm, source: "TGI 9.9 server/gemm.py"}
launch:
  command: [text-generation-launcher, --model-id, "{model}"]
  parallel: {rule: ep_divides_tp, tp: "--num-shard", source: "TGI 9.9 launcher/src/main.rs"}
"""


def engines_dir(tmp_path: Path, text: str = TGI, name: str = "tgi") -> Path:
    root = tmp_path / "conf"
    (root / "engine").mkdir(parents=True)
    (root / "engine" / f"{name}.yaml").write_text(textwrap.dedent(text))
    return root


def _backend_files():
    return {p: p.read_bytes() for p in (REPO / "conf" / "backend").rglob("*.yaml")}


def test_a_fourth_engine_is_one_file(tmp_path):
    before = _backend_files()
    root = engines_dir(tmp_path)
    touched = [p for p in root.rglob("*") if p.is_file()]
    assert len(touched) <= 3  # the recipe: its file (+ a module, + docs); here one file
    cd = ("--config-dir", str(root))
    rc, out, err = run_main(["check", *cd])
    assert rc == 0, err
    assert "tgi" not in err  # its file lists its backends: the others are not_applicable

    rc, out, _ = run_main(["explain", *cd, "engine=tgi", *PLATFORM, "layer=qwen_moe",
                           "--format", "json"])
    d = json.loads(out)
    assert rc == 0 and d["selected"] == "flashinfer_cutlass"
    assert d["engine"]["backend"] == "fi-cutlass-moe"
    assert d["engine"]["flags"] == ["--moe-kernel", "fi-cutlass-moe"]
    others = [c for c in d["candidates"] if c["backend"] != "flashinfer_cutlass"]
    assert others and all(c["status"] == "not_applicable" for c in others)

    rc, out, _ = run_main(["explain", *cd, "engine=tgi", *PLATFORM, "layer=dense_linear",
                           "--format", "json"])
    assert json.loads(out)["engine"]["env"] == {"TGI_GEMM": "fi-cutlass-gemm"}

    model = CORPUS / "qwen3-30b-a3b-fp4"
    rc, out, err = run_main(["explain", *cd, "--model", str(model), "engine=tgi", *PLATFORM,
                             "parallel.tp=2"])
    assert rc in (0, 1) and "Traceback" not in err, err
    assert "launch plan for TGI 9.9: tp 2" in out
    assert (f"command: TGI_GEMM=fi-cutlass-gemm text-generation-launcher --model-id {model} "
            "--num-shard 2 --moe-kernel fi-cutlass-moe") in out
    for other in ("sglang", "vllm serve", "trtllm-serve", "--moe-runner-backend"):
        assert other not in out
    assert _backend_files() == before


def test_an_engine_without_launch_command_says_so(tmp_path):
    text = TGI[:TGI.index("launch:")]
    root = engines_dir(tmp_path, text)
    f = root / "engine" / "tgi.yaml"
    refused(["explain", "--config-dir", str(root), "--model", str(CORPUS / "qwen3-8b-fp4"),
             "engine=tgi", *PLATFORM], "no launch command known for engine tgi", str(f),
            "engine.launch.command", never=("sglang", "vllm serve"))
    rc, out, _ = run_main(["explain", "--config-dir", str(root), "engine=tgi", *PLATFORM])
    assert rc == 0  # a single layer needs no launch command


@pytest.mark.parametrize("launch,key", [
    ("launch: {command: [tgi], parallel: {rule: ep_divides_tp, source: s}, "
     "hooks: 'selector.engines.nothere:X'}", "engine.launch.hooks"),
    ("launch: {command: [tgi], parallel: {rule: ep_divides_tp, source: s}, "
     "hooks: 'os:path'}", "engine.launch.hooks"),
    ("launch: {command: [tgi], parallel: {rule: ep_divides_tp, source: s}, "
     "hooks: 'selector.engines.vllm:log'}", "engine.launch.hooks"),
    ("launch: {command: tgi, parallel: {rule: ep_divides_tp, source: s}}",
     "engine.launch.command"),
    ("launch: {command: [tgi], parallel: {rule: sideways, source: s}}",
     "engine.launch.parallel.rule"),
    ("launch: {command: [tgi]}", "engine.launch.parallel"),
    ("launch: {command: [tgi], parallel: {rule: ep_divides_tp, source: s}, shell: yes}",
     "engine.launch"),
])
def test_a_broken_launcher_exits_2_naming_file_and_key(tmp_path, launch, key):
    text = TGI[:TGI.index("launch:")] + launch + "\n"
    root = engines_dir(tmp_path, text)
    f = str(root / "engine" / "tgi.yaml")
    refused(["explain", "--config-dir", str(root), "--model", str(CORPUS / "qwen3-8b-fp4"),
             "engine=tgi", *PLATFORM], f, key)
    refused(["check", "--config-dir", str(root)], f, key)
    # a one-layer explain reads the launch hooks too (the flag check), naming the same file
    refused(["explain", "--config-dir", str(root), "engine=tgi", *PLATFORM], f, key)


def test_outside_as_a_list_names_file_key_value_and_shape(tmp_path):
    root = engines_dir(tmp_path, TGI + "outside: [a, b]\n")
    f = str(root / "engine" / "tgi.yaml")
    for argv in (["check", "--config-dir", str(root)],
                 ["explain", "--config-dir", str(root), "engine=tgi", *PLATFORM]):
        err = refused(argv, f, "engine.outside", "['a', 'b']", "accepted shape: a mapping",
                      never=("DictConfig", "ListConfig"))
        assert "Cannot merge" not in err


def test_check_compares_the_engine_file_with_the_catalogue(tmp_path):
    """An `outside:` backend the catalogue has, and a backend the engine names that the
    catalogue lacks: each an error naming the file and the key."""
    text = TGI.replace("    flashinfer_cutlass: {name: fi-cutlass-gemm",
                       "    no_such_gemm: {name: fi-cutlass-gemm") + \
        'outside:\n  marlin: "TGI has its own"\n'
    root = engines_dir(tmp_path, text)
    f = str(root / "engine" / "tgi.yaml")
    err = refused(["check", "--config-dir", str(root)], f)
    assert "engine.backends.linear.no_such_gemm" in err
    assert "engine.outside.marlin" in err and "linear/marlin" in err


def test_a_backend_named_twice_is_refused(tmp_path):
    """A backend named by the engine's file and by its own file's `engines.<engine>` would have
    two answers: check refuses it, naming the engine file's key."""
    text = TGI.replace("    flashinfer_cutlass: {name: fi-cutlass-moe",
                       "    mine: {name: mine-moe, source: x}\n    flashinfer_cutlass: {name: fi-cutlass-moe")
    root = engines_dir(tmp_path, text)
    (root / "backend" / "moe").mkdir(parents=True)
    (root / "backend" / "moe" / "mine.yaml").write_text(textwrap.dedent("""\
        rank: 999
        implements: [nvfp4]
        engines:
          tgi: {name: mine-moe, source: "x"}
        """))
    refused(["check", "--config-dir", str(root)], "engine.backends.moe.mine",
            "name a backend in one place")


def test_engines_are_the_files_of_conf_engine():
    """selector's fallback list (no config tree) is conf/engine/'s files, not a literal."""
    from selector.core.engines import ENGINES
    assert set(ENGINES) == {p.stem for p in (REPO / "conf" / "engine").glob("*.yaml")}


# issue 48 (1): a variable's name in an engine file reached the printed command unquoted.
HOSTILE_NAME = "X=1 touch PWNED; Y"


@pytest.mark.parametrize("text,key", [
    (TGI.replace("env: TGI_GEMM", f"env: {json.dumps(HOSTILE_NAME)}"), "engine.choices[1].env"),
    (TGI.replace('source: "TGI 9.9 server/moe.py"}',
                 f'source: "TGI 9.9 server/moe.py", env: {{{json.dumps(HOSTILE_NAME)}: "1"}}}}'),
     "engine.backends.moe.flashinfer_cutlass.env"),
])
def test_a_variable_name_that_is_not_a_shell_identifier_is_refused(tmp_path, text, key):
    root = engines_dir(tmp_path, text)
    f = str(root / "engine" / "tgi.yaml")
    refused(["check", "--config-dir", str(root)], f, key, repr(HOSTILE_NAME))
    refused(["explain", "--config-dir", str(root), "--model", str(CORPUS / "qwen3-30b-a3b-fp4"),
             "engine=tgi", *PLATFORM], key, repr(HOSTILE_NAME), never=("touch PWNED; Y=",))


def test_every_piece_of_a_printed_command_is_quoted_and_every_name_checked():
    from selector.core.text import shell_command
    line = shell_command([("A_1", "x y"), ("B", "$(touch P)")], ["run", "a b", "{model};x"])
    assert line == "A_1='x y' B='$(touch P)' run 'a b' '{model};x'"
    for bad in (HOSTILE_NAME, "1X", "", "A-B", "A B", "A\nB"):
        with pytest.raises(ValueError):
            shell_command([(bad, "1")], ["run"])


def test_colliding_config_keys_are_refused_by_check_and_never_a_type_error(tmp_path):
    """issue 48: `moe_config` and `moe_config.backend` in two choices raised TypeError in the
    launch plan, and `check` accepted the file."""
    text = TGI.replace('  - {op: linear, env: TGI_GEMM, schemes: [nvfp4]}\n',
                       '  - {op: linear, config: moe_config, schemes: [nvfp4]}\n'
                       '  - {op: moe, config: moe_config.backend, schemes: [fp8_block]}\n')
    text = text.replace("launch:\n", "launch:\n  config_file: {flag: --config, name: t.yaml}\n")
    root = engines_dir(tmp_path, text)
    f = str(root / "engine" / "tgi.yaml")
    refused(["check", "--config-dir", str(root)], f, "engine.choices[2].config",
            "'moe_config.backend'", "moe_config", never=("TypeError",))
    refused(["explain", "--config-dir", str(root), "--model", str(CORPUS / "qwen3-30b-a3b-fp4"),
             "engine=tgi", *PLATFORM], "engine.choices[2].config", never=("TypeError",))


def test_model_inside_a_longer_word_is_substituted(tmp_path):
    """issue 48: `--model-id={model}` kept the placeholder."""
    text = TGI.replace('command: [text-generation-launcher, --model-id, "{model}"]',
                       'command: [text-generation-launcher, "--model-id={model}"]')
    root = engines_dir(tmp_path, text)
    model = CORPUS / "qwen3-30b-a3b-fp4"
    rc, out, err = run_main(["explain", "--config-dir", str(root), "--model", str(model),
                             "engine=tgi", *PLATFORM])
    assert rc in (0, 1) and "Traceback" not in err, err
    assert f"text-generation-launcher --model-id={model} " in out
    assert "{model}" not in out


@pytest.mark.parametrize("cites, key", [
    ("cites: {implemnts: 'TGI #1'}", "engine.cites"),
    ("cites: {implements: ''}", "engine.cites.implements"),
])
def test_a_broken_cites_exits_2_naming_file_and_key(tmp_path, cites, key):
    root = engines_dir(tmp_path, TGI + cites + "\n")
    refused(["check", "--config-dir", str(root)], str(root / "engine" / "tgi.yaml"), key)


def test_an_engine_cites_its_own_issues_only_under_itself(tmp_path):
    """`cites:` replaces the source of selector's own behaviour under that engine only: a
    requested backend that does not implement the layer (vLLM's issues under engine=vllm)."""
    root = engines_dir(tmp_path, TGI + "cites: {implements: 'TGI #77 (no crash on other layers)'}\n")
    argv = ["--config-dir", str(root), *PLATFORM, "layer=dense_linear", "layer.quant=fp8_channel",
            "policy.linear_backend=flashinfer_cutlass", "--format", "json"]

    def source(*more):
        rc, out, err = run_main(["explain", *argv, *more])
        assert rc in (0, 1) and out, err  # 1: no backend fits the layer (under tgi, none)
        out = json.loads(out)
        return " ".join(r["source"] for c in out["candidates"] if c["backend"] == "flashinfer_cutlass"
                        for r in c["reasons"] if r["rule"] == "quant")
    assert "TGI #77" in source("engine=tgi")
    for engine in ("engine=none", "engine=sglang"):
        assert "TGI #77" not in source(engine) and "vLLM #" not in source(engine)
    assert "vLLM #49076" in source("engine=vllm")
