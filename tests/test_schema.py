"""One schema, one validation path (issue 23 item 2): every config node is checked by
validation.validate against its dataclass, with one error shape (key, value, accepted, file)."""
from __future__ import annotations

import pytest
from helpers import load

from selector.commands.check import check_tree
from selector.core import model, schema, validation
from selector.core.errors import SelectorError


def test_every_config_node_goes_through_schema_validate(monkeypatch):
    seen = set()
    real = validation.validate

    def spy(node, conf, key, where=None):
        seen.add(node.__name__)
        return real(node, conf, key, where)

    monkeypatch.setattr(validation, "validate", spy)
    load("platform=b200", "stack=vllm_0_32", "engine=vllm", "policy.allow_opt_in=[b12x]")
    check_tree([], [])
    assert {"BackendConf", "OptInConf", "PreferenceConf", "EngineEntryConf", "DeclarationsConf",
            "PlatformConf", "PolicyConf", "EngineConf", "StackConf"} <= seen


@pytest.mark.parametrize("node,conf,key,accepted", [
    (schema.BackendConf, {"rank": 1, "rnak": 2}, "catalogue.moe.x", "rank"),
    (schema.OptInConf, {"reason": "r", "source": "s", "sourec": 1}, "catalogue.moe.x.opt_in",
     "source"),
    (schema.PreferenceConf, {"rank": 1, "reason": "r", "source": "s", "whne": {}},
     "catalogue.moe.x.preference[0]", "when"),
    (schema.EngineEntryConf, {"source": "s", "nmae": "x"}, "catalogue.moe.x.engines.vllm",
     "name"),
    (schema.StackConf, {"family": "f", "version": "1", "defualt": True}, "stack=s.stack",
     "default"),
    (schema.ProbeConf, {"name": "n", "func": "f", "description": "d", "source": "s",
                        "import": []}, "catalogue.moe.x.probes[0]", "imports"),
])
def test_one_error_shape_for_an_unknown_key(node, conf, key, accepted):
    with pytest.raises(SelectorError) as e:
        validation.validate(node, conf, key, "f.yaml")
    err = e.value
    assert err.key == key and err.where == "f.yaml" and accepted in err.accepted
    assert str(err).startswith(f"f.yaml: {key}: unknown key ") and "accepted: " in str(err)
    assert "did you mean" in str(err)


@pytest.mark.parametrize("node,conf,key,text", [
    (schema.BackendConf, {"rank": "1"}, "rank", "'1' must be an integer (lower is preferred)"),
    (schema.BackendConf, {"rank": 1, "execution": "fast"}, "execution",
     "unknown value 'fast'; accepted: native, reference, weight_only"),
    (schema.BackendConf, {"rank": 1, "probes": "x"}, "probes",
     "'x' is not a list of probe names or probe declarations"),
    (schema.EngineEntryConf, {"source": "s", "env": {"A": [1]}}, "env",
     "is not a mapping of variable to value"),
    (schema.EngineEntryConf, {"name": "x"}, "source", "None is required: cite the engine file"),
    (schema.OptInConf, {"reason": "  ", "source": "s"}, "reason", "'  ' is required"),
    (schema.PolicyConf, {"strict": "yes"}, "strict", "'yes' is not a boolean; accepted: true"),
    (schema.StackConf, {"family": "vllm"}, "version", "None is required: the family's version"),
])
def test_one_error_shape_for_a_bad_value(node, conf, key, text):
    with pytest.raises(SelectorError) as e:
        validation.validate(node, conf, "k", "f.yaml")
    assert e.value.key == f"k.{key}" and e.value.where == "f.yaml"
    assert str(e.value).startswith(f"f.yaml: k.{key}: ") and text in str(e.value)


def test_null_takes_the_default_and_nested_nodes_are_checked():
    v = validation.validate(schema.BackendConf, {"rank": 1, "implements": None, "probes": None},
                        "k", "f.yaml")
    assert v["implements"] == list(schema.NVFP4_QUANTS) and v["probes"] == []
    with pytest.raises(SelectorError, match=r"k\.preference\[1\]\.rank"):
        validation.validate(schema.BackendConf, {"rank": 1, "preference": [
            {"rank": 1, "reason": "r", "source": "s"}, {"reason": "r", "source": "s"}]},
            "k", "f.yaml")


def test_the_rule_params_use_the_same_type_rules():
    from selector.core import rules
    assert rules._type_ok is validation.type_ok and rules._type_name is validation.type_name


def test_model_only_converts_after_validate():
    """A backend file whose shape is wrong is refused before any rule is compiled."""
    with pytest.raises(SelectorError, match="catalogue.moe.x.rules: 'r' is not a list of rules"):
        model.make_backend("moe", "x", {"rank": 1, "rules": "r"}, "f.yaml")
    with pytest.raises(SelectorError, match=r"catalogue.moe.x.engines: unknown engine 'trt'"):
        model.make_backend("moe", "x", {"rank": 1, "engines": {"trt": {"source": "s"}}},
                           "f.yaml")
