"""Issue 36: cases the mutation run of the config shard (tools/mutate.py --group config) showed
unpinned: each test fails on one recorded surviving mutant and passes on the real code
(docs/mutation.json lists the survivors; docs/guarantees.md renders them)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import load
from packaging.version import Version

import selector
from selector import SelectorError
from selector.config import safe_yaml
from selector.config.catalogues import _files, origin_of
from selector.config.dirs import ConfigTree
from selector.config.hydra_errors import chain, kind_of, unknown_key
from selector.config.presets import default_stack, lint_tree, stack_presets
from selector.core.packaged import packaged_conf_dir
from selector.inspect.environment import Environment, Gpu


def _tree(*dirs: Path) -> ConfigTree:
    return ConfigTree.from_dirs([packaged_conf_dir(), *dirs])


def _write(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


# -- catalogues.py: what a contributed directory holds, and where a file came from -----------

def test_a_contributed_directory_s_files_are_read_from_every_documented_place(tmp_path):
    """The module docstring: backend/<op>/<name>.yaml, platform/, stack/, layer/, policy/."""
    places = ("backend/moe/a", "backend/linear/b", "platform/p", "stack/s", "layer/l",
              "policy/q")
    for rel in places:
        _write(tmp_path, rel + ".yaml", "x: 1\n")
    assert sorted(_files(tmp_path)) == sorted(places)


def test_a_config_dir_file_s_origin_names_the_config_dir(tmp_path):
    root = tmp_path / "mine"
    for rel in ("backend/moe/x.yaml", "platform/p.yaml"):
        f = _write(root, rel, "x: 1\n")
        assert origin_of(str(f)) == f"config dir {root.resolve()}"


# -- composer.py: overrides ------------------------------------------------------------------

def test_a_cuda_version_override_stays_the_string_given():
    """platform.cuda=12.10 is CUDA 12.10, not the float 12.1."""
    assert str(load("platform.cuda=12.10").run_config.platform.cuda) == "12.10"


def test_an_explicit_null_wins_over_detection_for_every_detected_key():
    """Under platform=auto a key the overrides set to null stays null, whatever detection
    finds (test_hostile.py's test 8 covers the capability)."""
    def detect(names):
        return Environment((10, 0), "NVIDIA B200", Version("12.8"), {n: None for n in names},
                           Gpu("NVIDIA B200", (10, 0)), "fake", ())
    found = selector.load(["platform=auto"], detect=detect).platform
    assert (found.cuda, found.gpu_name) == (Version("12.8"), "NVIDIA B200")
    for key in ("cuda", "gpu_name"):
        got = selector.load(["platform=auto", f"platform.{key}=null"], detect=detect).platform
        assert getattr(got, key) is None, key


@pytest.mark.parametrize("override", ["hydra.job.chdir=true", "hydra/launcher=basic",
                                      "hydra=x"])
def test_an_override_of_hydra_s_own_settings_is_refused(override):
    with pytest.raises(SelectorError, match="changes Hydra's own settings"):
        load(override)


def test_adding_a_key_that_has_a_value_says_to_set_it():
    with pytest.raises(SelectorError, match=r"already has a value: write policy.strict=true "
                                            r"\(without \+\)"):
        load("+policy.strict=true")
    with pytest.raises(SelectorError) as exc:
        load("+policy.strictt=true")
    assert "already has a value" not in str(exc.value)


# -- dirs.py: a user config dir's files and links --------------------------------------------

def test_a_directory_named_like_a_yaml_file_is_not_a_preset(tmp_path):
    (tmp_path / "platform" / "odd.yaml").mkdir(parents=True)
    _write(tmp_path, "platform/mine.yaml", 'preset: mine\ncapability: "9.0"\n')
    tree = _tree(tmp_path)
    assert "mine" in tree.group_options("platform")
    assert "odd" not in tree.group_options("platform")


def test_a_linked_directory_out_of_a_config_dir_is_refused(tmp_path):
    outside = tmp_path / "outside"
    _write(outside, "p.yaml", 'preset: p\ncapability: "9.0"\n')
    root = tmp_path / "conf"
    root.mkdir()
    os.symlink(outside, root / "platform")
    with pytest.raises(SelectorError, match="outside the config directory"):
        _tree(root)


def test_a_yml_link_out_of_a_config_dir_is_refused_as_a_link(tmp_path):
    """The link check runs before the .yaml-only rule: a .yml link out is named as a link."""
    target = _write(tmp_path / "outside", "p.yml", "x: 1\n")
    root = tmp_path / "conf"
    (root / "platform").mkdir(parents=True)
    os.symlink(target, root / "platform" / "p.yml")
    with pytest.raises(SelectorError, match="outside the config directory"):
        _tree(root)


def test_a_dangling_link_in_a_config_dir_is_refused_as_such(tmp_path):
    root = tmp_path / "conf"
    (root / "platform").mkdir(parents=True)
    os.symlink(root / "platform" / "gone.yaml", root / "platform" / "p.yaml")
    with pytest.raises(SelectorError, match="symbolic link that cannot be resolved"):
        _tree(root)


# -- hydra_errors.py: Hydra's and OmegaConf's errors in selector's words ---------------------

def test_the_chain_follows_the_cause_or_else_the_context():
    cause, context = ValueError("cause"), KeyError("context")
    a = RuntimeError("a")
    a.__cause__ = cause
    assert chain(a) == [a, cause]
    b = RuntimeError("b")
    b.__context__ = context
    assert chain(b) == [b, context]
    c = RuntimeError("c")
    c.__cause__, c.__context__ = cause, context
    assert chain(c) == [c, cause]  # `raise ... from` names the cause


def test_an_unknown_preset_names_the_group_and_its_presets():
    with pytest.raises(SelectorError) as exc:
        load("platform=nosuch")
    assert str(exc.value).startswith("platform: unknown preset 'nosuch'")
    assert "b200" in exc.value.accepted


@pytest.mark.parametrize("key,has,lacks", [
    ("catalogue.moe.x.rnak", "rank", "kind"),  # a backend file's key
    ("catalogue.moe.x.rules[0].kindd", "kind", "rank"),  # a rule's key
    ("catalogue.moe.x.rules[0].when.quantt", "quant", "kind"),  # a condition's key
    ("catalogue.moe.when.rnak", "rank", "quant"),  # a backend named `when`
    ("policy.strictt", "strict", "hidden_size"),  # the siblings under policy
])
def test_an_unknown_key_lists_the_keys_beside_it(key, has, lacks):
    err = unknown_key(key)
    assert has in err.accepted and lacks not in err.accepted


def test_a_bad_value_says_what_the_key_holds():
    assert kind_of("policy.strict") == "a boolean (true or false)"
    assert kind_of("layer.hidden_size") == "null or an integer"
    assert kind_of("policy.profile") == "null or a string"
    with pytest.raises(SelectorError, match="'abc' is not accepted: it must be null or an "
                                            "integer"):
        load("layer.hidden_size=abc")


# -- presets.py: a preset file's header, shapes and versions ---------------------------------

def test_a_preset_writing_outside_its_group_names_its_own(tmp_path):
    _write(tmp_path, "platform/mine.yaml", '# @package layer\npreset: mine\ncapability: "9.0"\n')
    with pytest.raises(SelectorError, match=r"may change only platform\.\*"):
        lint_tree(_tree(tmp_path), only=tmp_path)


def test_a_mapping_key_given_a_list_names_the_shape(tmp_path):
    _write(tmp_path, "platform/mine.yaml", 'preset: mine\ncapability: "9.0"\npackages: [a, b]\n')
    with pytest.raises(SelectorError, match=r"platform\.packages: .* is not a mapping "
                                            r"\(accepted shape: a mapping\)"):
        lint_tree(_tree(tmp_path), only=tmp_path)


def test_an_unquoted_capability_is_refused(tmp_path):
    _write(tmp_path, "platform/mine.yaml", "preset: mine\ncapability: 12.10\n")
    with pytest.raises(SelectorError, match=r"capability: '12\.10' is an unquoted number"):
        lint_tree(_tree(tmp_path), only=tmp_path)


def test_the_default_stack_is_the_one_marked():
    tree = _tree()
    name = default_stack(tree)
    assert dict(stack_presets(tree))[name]["default"] is True


# -- safe_yaml.py: where a config file is refused --------------------------------------------

def _refusal(tmp_path, text):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(SelectorError) as exc:
        safe_yaml.load_yaml(f)
    return str(exc.value).replace(str(f), "c.yaml")


def test_malformed_yaml_names_the_line_and_the_problem(tmp_path):
    """The parser's problem (not its context, "while parsing a block mapping")."""
    import yaml
    text = "a: 1\nb: 2\n- c\n"
    with pytest.raises(yaml.YAMLError) as parsed:
        yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    problem, context = getattr(parsed.value, "problem", None), getattr(parsed.value, "context",
                                                                          None)
    assert problem and context
    err = _refusal(tmp_path, text)
    assert err == f"c.yaml line 3: malformed YAML: {problem}", err


def test_nesting_is_read_up_to_the_bound(tmp_path):
    """The root is level 0: lists nested MAX_CONFIG_DEPTH + 1 deep put the innermost at level
    MAX_CONFIG_DEPTH, which is read; one more level is refused."""
    depth = safe_yaml.MAX_CONFIG_DEPTH + 1
    f = tmp_path / "edge.yaml"
    f.write_text("[" * depth + "]" * depth + "\n")
    assert safe_yaml.load_yaml(f) is not None
    err = _refusal(tmp_path, "[" * (depth + 1) + "]" * (depth + 1) + "\n")
    assert f"nested too deeply (more than {safe_yaml.MAX_CONFIG_DEPTH} levels)" in err, err


def test_an_alias_bomb_is_refused_at_the_line_of_the_node_that_expands(tmp_path):
    lines = ["x0: &x0 [" + ", ".join(["0"] * 10) + "]"]
    for i in range(1, 6):
        lines.append(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 10) + "]")
    err = _refusal(tmp_path, "\n".join(lines) + "\n")
    assert "c.yaml line 5: config file expands to more than" in err, err


def test_a_tag_and_an_interpolation_are_refused_at_their_lines(tmp_path):
    err = _refusal(tmp_path, "a: 1\nb: 2\nc: !!python/name:os.system x\n")
    assert "c.yaml line 3: YAML tag" in err, err
    err = _refusal(tmp_path, "a: 1\nb: ${oc.env:HOME}\n")
    assert "c.yaml line 2" in err and "interpolation" in err, err


@pytest.mark.parametrize("text,starts", [
    ("a: &a [" + ", ".join(["0"] * 300) + "]\nb: [" + ", ".join(["*a"] * 300) + "]\n",
     "c.yaml line 2: config file expands to more than"),
    ("a: 1\nc: !!python/name:os.system x\n", "c.yaml line 2: YAML tag"),
    ("a: 1\nb: ${oc.env:HOME}\n", "c.yaml line 2: value: '${oc.env:HOME}' uses an interpolation"),
])
def test_a_refusal_of_the_expansion_check_is_reported_once(tmp_path, text, starts):
    """Found by the mutation run: these refusals (SelectorError is a ValueError) were caught
    by the ValueError clause meant for int('9' * 5000) and wrapped a second time
    ("c.yaml: a value cannot be read: c.yaml line 2: ...")."""
    err = _refusal(tmp_path, text)
    assert err.startswith(starts) and "a value cannot be read" not in err, err
