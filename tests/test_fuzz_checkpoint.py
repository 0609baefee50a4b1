"""Fuzzing of checkpoint directories for `explain --model` (issue 21), in the style of
test_fuzz_configdir.py.

A drawn case starts from a corpus checkpoint (tests/checkpoint_corpus/) and changes it: any
key of config.json or of the quantization description (nested too) dropped or replaced by a
hostile value (huge, negative, NaN, infinite, a string with escapes, a list, a mapping, deep
nesting), `re:` patterns and globs (catastrophic, malformed, long) added to the exclusions and
targets, implausible sizes, the files themselves of every kind (FIFO, directory, symbolic links
to /dev/zero, dangling and looping, sparse over the size limit, binary, empty), hostile model
paths and parallel overrides. Every case must end with exit 0, 1 or 2, no traceback, within a
time limit (SIGALRM fails the case as a hang); exit 2 prints one `selector: error:` line.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
from collections import Counter

import checkpoint_corpus as corpus
import pytest
from fuzz_support import SCALE, SETTINGS, _private_cache, _report  # noqa: F401 (fixtures)
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fuzz_configdir import judge as _judge
from test_fuzz_configdir import run_main

OUTCOMES: Counter = Counter()
SPARK = ("platform=dgx_spark", "stack=flashinfer_0_7_4")
NAMES = sorted(corpus.CORPUS)

VALUES = st.one_of(
    st.sampled_from([None, 0, -1, 1, 3, 7169, 10 ** 8, 2 ** 63, 10 ** 400 // 10 ** 399,
                     float("nan"), float("inf"), -0.0, 1e308, True, False, "", "silu",
                     "relu2", "NVFP4", "nvfp4\nselected: flashinfer_trtllm\x1b[2J", "\u202e",
                     "x" * 5000, "W4A16_NVFP4", "MIXED_PRECISION", "FP8", "modelopt",
                     "compressed-tensors", "re:(.|.)*!", "*", [], {}, [1, 2], ["*"],
                     {"a": 1}, ["re:[unclosed"], [["nested"]]]),
    st.integers(-10, 10 ** 6), st.text(max_size=20),
    st.recursive(st.none() | st.integers(-2, 100) | st.text(max_size=6),
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c,
                                                                     max_size=3),
                 max_leaves=8))
PATTERNS = st.one_of(
    st.sampled_from(["re:(.|.)*!", "re:(a*)*b", "re:(.*)*x", "re:.*.*.*.*.*.*!", "re:[unclosed",
                     "re:(?P<x>a)(?P=x)", "re:(?=.*)(.*)+", "re:" + "a" * 2000,
                     "re:.*mlp\\.experts$", "re:.*self_attn.*", "re:.*(q|k|v)_proj$",
                     "*", "**", "[", "*experts*", "model.layers.1.self_attn", "lm_head",
                     "*.down_proj", "re:", "re:\\", "re:(?i).*PROJ", "re:.{1000000}"]),
    st.text(max_size=12), st.text(max_size=12).map(lambda s: "re:" + s))
KINDS = st.sampled_from(["fifo", "dir", "zero", "dangling", "loop", "sparse", "binary", "empty",
                         "not-object", "deep"])


def judge(fuzzer, argv, rc, out, err):
    _judge(fuzzer, argv, rc, out, err)  # counts in test_fuzz_configdir's OUTCOMES
    OUTCOMES[fuzzer, f"exit {rc}"] += 1


def _paths(d, path=()):
    """Every (path of keys) in a JSON document."""
    yield path
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _paths(v, path + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d[:4]):
            yield from _paths(v, path + (i,))


def _edit(doc, path, value, drop):
    if not path:
        return value if not drop else {}
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    if drop and isinstance(cur, dict):
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return doc


def _write(d, name, doc):
    (d / name).write_text(json.dumps(doc))


@pytest.mark.slow
@settings(max_examples=150 * SCALE, **SETTINGS)
@given(name=st.sampled_from(NAMES), data=st.data())
def test_any_checkpoint_edit_ends_cleanly(tmp_path_factory, name, data):
    config, quant = copy.deepcopy(corpus.CORPUS[name])
    docs = {"config.json": config}
    if quant is not None:
        docs["hf_quant_config.json"] = quant
    for _ in range(data.draw(st.integers(1, 3))):
        fname = data.draw(st.sampled_from(sorted(docs)))
        paths = list(_paths(docs[fname]))
        path = data.draw(st.sampled_from(paths))
        what = data.draw(st.sampled_from(["value", "drop", "pattern", "size"]))
        if what == "pattern":
            doc = docs[fname]
            q = doc.get("quantization_config", doc.get("quantization", doc)) \
                if isinstance(doc, dict) else None
            if isinstance(q, dict):
                key = data.draw(st.sampled_from(["ignore", "exclude_modules"]))
                old = q.get(key) if isinstance(q.get(key), list) else []
                q[key] = old + data.draw(st.lists(PATTERNS, min_size=1, max_size=3))
                groups = q.get("config_groups")
                if isinstance(groups, dict) and groups and data.draw(st.booleans()):
                    g = next(iter(groups.values()))
                    if isinstance(g, dict):
                        g["targets"] = data.draw(st.lists(PATTERNS, min_size=1, max_size=3))
            continue
        if what == "size" and isinstance(config, dict):
            key = data.draw(st.sampled_from(["num_hidden_layers", "hidden_size",
                                             "n_routed_experts", "num_experts",
                                             "num_experts_per_tok", "vocab_size",
                                             "moe_intermediate_size", "num_attention_heads"]))
            config[key] = data.draw(st.sampled_from([0, -1, 1, 10 ** 3, 10 ** 8, 10 ** 12,
                                                     2 ** 63, 3, 1.5, "8"]))
            continue
        docs[fname] = _edit(docs[fname], path, data.draw(VALUES), what == "drop")
    d = tmp_path_factory.mktemp("ckpt")
    for fname, doc in docs.items():
        _write(d, fname, doc)
    overrides = data.draw(st.sampled_from([(), ("layer.tp_size=8",), ("layer.ep_size=8",),
                                           ("layer.tp_size=3",), ("layer.ep_size=1000000",),
                                           ("layer.num_tokens=1",)]))
    fmt = data.draw(st.sampled_from([(), ("--format", "json"), ("--format", "line")]))
    argv = ["explain", "--model", str(d), *SPARK, *overrides, *fmt]
    rc, out, err = run_main(argv)
    if fmt and fmt[1] == "line" and rc in (0, 1):  # one log line per decision, not JSON
        assert "Traceback" not in out + err and out.strip(), (argv, err)
        assert all(ln.startswith("selector: ") for ln in out.splitlines()), out
        OUTCOMES["checkpoint-edit", f"exit {rc}"] += 1
    else:
        judge("checkpoint-edit", argv, rc, out, err)
    if rc in (0, 1) and not fmt:
        assert "\x1b" not in out and not any(ln.startswith("selected:")
                                             for ln in out.splitlines()), out
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
@settings(max_examples=60 * SCALE, **SETTINGS)
@given(name=st.sampled_from(NAMES), which=st.sampled_from(["config.json",
                                                         "hf_quant_config.json"]),
       kind=KINDS, path_kind=st.sampled_from(["dir", "dir", "file", "missing", "long", "tilde",
                                              "empty", "nul", "newline"]))
def test_any_file_kind_and_path_ends_cleanly(tmp_path_factory, name, which, kind, path_kind):
    d = tmp_path_factory.mktemp("kinds")
    corpus.write(d.parent, d.name, corpus.CORPUS[name])
    f = d / which
    if f.exists() or f.is_symlink():
        f.unlink()
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "dir":
        f.mkdir()
    elif kind == "zero":
        f.symlink_to("/dev/zero")
    elif kind == "dangling":
        f.symlink_to(d / "nowhere")
    elif kind == "loop":
        f.symlink_to(f)
    elif kind == "sparse":
        with open(f, "wb") as fh:
            fh.truncate(64 * 1024 * 1024)
    elif kind == "binary":
        f.write_bytes(bytes(range(256)) * 10)
    elif kind == "empty":
        f.write_text("")
    elif kind == "not-object":
        f.write_text("[1, 2, 3]")
    else:
        f.write_text("[" * 50_000 + "]" * 50_000)
    arg = {"dir": str(d), "file": str(d / "config.json"), "missing": str(d / "nope"),
           "long": "x/" * 3000, "tilde": "~no_such_user_x/ckpt", "empty": "",
           "nul": str(d) + "\x00x", "newline": str(d) + "\nselected: x"}[path_kind]
    argv = ["explain", "--model", arg, *SPARK]
    rc, out, err = run_main(argv)
    judge("checkpoint-files", argv, rc, out, err)
    shutil.rmtree(d, ignore_errors=True)
