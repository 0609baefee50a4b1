"""Interfaces teams script against: bash completion (sourced in a real bash, its function called
as bash calls it) and `explain --model ... engine=trtllm --write-config FILE`."""
from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from helpers import REPO, run_main

import selector

MODEL = str(REPO / "examples" / "deepseek-r1-nvfp4")
BASH = shutil.which("bash")

# COMP_WORDS as bash splits a line (blanks, and `=` as a word of its own: COMP_WORDBREAKS),
# the cursor at the end; prints the replies, one per line
DRIVER = r'''
source "$1"
line="$2"; COMP_LINE="$line"; COMP_POINT=${#line}
w=(); for x in $line; do
  if [[ "$x" == *=* ]]; then w+=("${x%%=*}" "=" "${x#*=}"); else w+=("$x"); fi; done
[[ "$line" == *" " ]] && w+=("")
[[ "${w[-1]}" == "=" ]] && w+=("")
COMP_WORDS=("${w[@]}"); COMP_CWORD=$((${#w[@]}-1)); COMPREPLY=()
_selector_complete
printf '%s\n' "${COMPREPLY[@]}"
complete -p selector
'''


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    rc, out, err = run_main(["completion", "bash"])
    assert rc == 0 and out.startswith("# bash completion for selector"), err
    path = tmp_path_factory.mktemp("completion") / "selector.bash"
    path.write_text(out)
    return path


def complete(script, line: str):
    if BASH is None:
        pytest.skip("no bash")
    p = subprocess.run([BASH, "--norc", "-c", DRIVER, "x", str(script), line],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1] == "complete -F _selector_complete selector", lines  # registered
    return lines[:-1]


def test_commands(script):
    from selector.commands.cli import build_parser
    from selector.commands.completion import _subparsers
    got = complete(script, "selector ")
    assert set(got) == set(_subparsers(build_parser())) | {"--help"}
    assert {"explain", "audit", "fleet", "completion", "matrix"} <= set(got)
    assert complete(script, "selector au") == ["audit"]
    assert complete(script, "python -m selector fl") == ["fleet"]


def test_options_and_their_choices(script):
    assert "--write-config" in complete(script, "selector explain --")
    assert set(complete(script, "selector explain --format ")) == {"text", "json", "line"}
    assert set(complete(script, "selector fleet --format ")) == {"text", "markdown", "html",
                                                                  "json"}
    assert set(complete(script, "selector fleet --fail-on w")) == {"warning"}


def test_override_keys_and_values(script):
    tree = selector.load([]).tree
    keys = complete(script, "selector explain pla")
    assert "platform=" in keys and "platform.capability=" in keys
    assert complete(script, "selector explain platform=") == tree.group_options("platform")
    assert complete(script, "selector explain stack=vllm_0_3") == \
        [s for s in tree.group_options("stack") if s.startswith("vllm_0_3")]
    assert "layer.hidden_size=" in complete(script, "selector explain layer.h")
    assert set(complete(script, "selector explain layer.quant=nvfp")) == {"nvfp4",
                                                                         "nvfp4_w4a16"}
    moe = complete(script, "selector explain policy.moe_backend=")
    assert "auto" in moe and "flashinfer_trtllm" in moe and "torch_row_wise" not in moe
    assert complete(script, "selector fleet x.yaml --what-if platform=h1") == ["h100"]


def test_a_config_dir_adds_its_presets(tmp_path):
    d = tmp_path / "conf" / "platform"
    d.mkdir(parents=True)
    (d / "my_box.yaml").write_text('preset: my_box\ncapability: "9.0"\n')
    rc, out, _ = run_main(["completion", "bash", "--config-dir", str(tmp_path / "conf")])
    (tmp_path / "s.bash").write_text(out)
    assert "my_box" in complete(tmp_path / "s.bash", "selector explain platform=my")


def test_bad_shell():
    rc, out, err = run_main(["completion", "zsh"])
    assert rc == 2 and "zsh" in err and out == ""


# -- --write-config ------------------------------------------------------------------------------
def test_write_config_writes_the_plans_yaml(tmp_path):
    """The file is the plan's extra_llm_api_options: moe_config.backend (and
    nvfp4_gemm_config.allowed_backends where the plan pins it) as the launch plan's config says."""
    out = tmp_path / "extra.yaml"
    rc, stdout, err = run_main(["explain", "--model", MODEL, "platform=b200", "stack=vllm_0_32",
                                "engine=trtllm", "--write-config", str(out)])
    assert rc == 0, err
    doc = yaml.safe_load(out.read_text())
    lp = selector.load(["platform=b200", "stack=vllm_0_32", "engine=trtllm"]).launch_plan(MODEL)
    cfg = lp.to_dict()["config"]
    assert doc["moe_config"]["backend"] == cfg["moe_config.backend"] == "TRTLLM"
    assert doc.get("nvfp4_gemm_config", {}).get("allowed_backends") == \
        cfg.get("nvfp4_gemm_config.allowed_backends")
    assert f"--extra_llm_api_options {out}" in err
    assert "extra_llm_api_options.yaml (the config file the command reads)" in stdout


def test_write_config_refused_plan_writes_nothing(tmp_path):
    """On an H100 TensorRT-LLM has no NVFP4 backend for DeepSeek-R1's layers: exit 1, no file."""
    out = tmp_path / "extra.yaml"
    rc, _, err = run_main(["explain", "--model", MODEL, "platform=h100", "stack=vllm_0_32",
                           "engine=trtllm", "--write-config", str(out)])
    assert rc == 1 and not out.exists() and "nothing written" in err


@pytest.mark.parametrize("argv,needle", [
    (["explain", "--model", MODEL, "engine=vllm", "--write-config", "X"], "engine=trtllm"),
    (["explain", "engine=trtllm", "--write-config", "X"], "needs --model DIR"),
    (["explain", "--model", MODEL, "platform=b200", "stack=vllm_0_32", "engine=trtllm",
      "--write-config", "/nonexistent/dir/x.yaml"], "cannot write"),
])
def test_write_config_bad_input(argv, needle):
    rc, out, err = run_main(argv)
    assert rc == 2 and needle in err and "Traceback" not in err
