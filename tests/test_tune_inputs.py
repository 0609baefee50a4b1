"""`selector tune`'s inputs and its profile file under hostile or concurrent use (issue 48): the
path printed in its lines, concurrent writers of one profile, the profile's integer fields, a
file that is not a profile at --out, and the timeout variables. Fast: no kernel is timed (the
timing children are replaced where a test needs cells, the file and lock code is the real one)."""
from __future__ import annotations

import subprocess

import pytest

from selector.commands import tune
from selector.core.text import shell_word

FORGED = "o\nuse it: rm -rf.json"
ESCAPES = "a b $(touch PWNED)\x1b]0;x\x07.json"


def _summary(path: str) -> dict:
    return {"profile": path, "key": {}, "seconds": 1.0, "kept_cells": 0, "verify_cache": None,
            "cells": []}


@pytest.mark.parametrize("path", [FORGED, ESCAPES, "/tmp/it's here.json"])
def test_the_out_path_reaches_no_line_raw_and_the_suggested_command_is_quoted(path):
    lines = tune.render_text(_summary(path))
    text = "\n".join(lines)
    assert "\x1b" not in text and "\x07" not in text
    assert len(text.splitlines()) == len(lines)  # each line stays one line
    assert [line.lstrip().startswith("use it:") for line in lines].count(True) == 1
    assert lines[0].startswith("tune: ")
    use = lines[-1]
    word = shell_word(f"policy.profile={path}")
    assert use.endswith(" " + word)
    # the suggested word is the path, exactly, to a shell
    got = subprocess.run(["bash", "-c", "printf %s " + word], capture_output=True).stdout
    assert got.decode() == f"policy.profile={path}"


# ---------------------------------------------------------------------------------------------
# Concurrent writers of one profile (issue 48, defect 3)

WRITER = r"""
import json, os, sys, time
from selector.commands import tune
from selector.core import profile as prof
from selector.inspect import tuning
path, tokens, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
layer = dict(op="linear", quant="nvfp4", activation="silu", act_and_mul=False, ep_size=1,
             tp_size=1, dtype="bfloat16", hidden_size=256, intermediate_size=256,
             swiglu_limit=None, num_experts=None, top_k=None, all2all=None, num_tokens=tokens)
key = {k: None for k in prof.KEY_FIELDS}
key["packages"] = {}
new = prof.Profile(key, (prof.Cell(layer, tokens, {"emulation": prof.Timing(1.0, 0.9, 1.1, 5)}),),
                   {}, "2026-12-07T00:00:00Z")
write = tuning.write_bytes
def slow_write(data, p):  # widen the read-merge-write window: a race shows every time
    time.sleep(0.3)
    return write(data, p)
tuning.write_bytes = slow_write
while not os.path.exists(go):
    time.sleep(0.005)
print(json.dumps(tuning.save_profile(new, path, tune._merge)))
"""


def test_concurrent_tune_runs_on_one_profile_keep_every_cell(tmp_path):
    import sys

    from helpers import child_env

    from selector.core import profile as prof
    out, go = tmp_path / "p.json", tmp_path / "go"
    tokens = [1 << i for i in range(6)]  # six cells, one bucket each
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(t), str(go)],
                              env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for t in tokens]
    go.write_text("")
    for p in procs:
        o, e = p.communicate(timeout=300)
        assert p.returncode == 0, e
    got = prof.load(str(out))
    assert sorted(c.tokens for c in got.cells) == tokens
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")]



# The same through the command: `selector tune` runs ending together on one --out. Only the
# timing child is replaced (a fixed timing per cell); the verify step, the merge and the write
# are the command's own. All reach the save at once (a barrier in machine_key, called just
# before it), and the merge is slowed, so that unlocked read-merge-writes would overlap.
TUNE_RUN = r"""
import os, sys, time
from selector.commands import cli, tune
from selector.core import profile as prof
from selector.inspect import tuning
out, tokens, ready, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def time_backend(spec, cases, *a, **k):
    return [tuning.CaseResult(spec.name, case, prof.Timing(1.0, 0.9, 1.1, 1), device="cpu",
                              timer="perf_counter") for case, _ in cases]
tuning.time_backend = time_backend
key = tuning.machine_key
def machine_key(run):
    open(os.path.join(ready, str(os.getpid())), "w").close()
    end = time.monotonic() + 600  # a hang guard: each run reaches here within seconds
    while len(os.listdir(ready)) < n and time.monotonic() < end:
        time.sleep(0.01)
    return key(run)
tuning.machine_key = machine_key
merge = tune._merge
def slow_merge(new, path):
    got = merge(new, path)
    time.sleep(0.5)
    return got
tune._merge = slow_merge
sys.exit(cli.main(["tune", "layer=dense_linear", "layer.hidden_size=256",
                   "layer.intermediate_size=256", "--tokens", tokens, "--out", out]))
"""


def test_concurrent_tune_commands_on_one_out_keep_every_cell(tmp_path):
    """Before the lock, 6 runs ending together kept 1 of 6 cells here, each reporting success."""
    import sys

    from helpers import cli_env

    from selector.core import profile as prof
    out, ready = tmp_path / "p.json", tmp_path / "ready"
    ready.mkdir()
    env = cli_env(SELECTOR_CACHE_DIR=str(tmp_path / "cache"))
    # one run first fills the verify cache, so that the six below verify nothing again
    first = subprocess.run([sys.executable, "-c", TUNE_RUN, str(tmp_path / "warm.json"), "2",
                            str(tmp_path), "0"], env=env, capture_output=True, text=True,
                           timeout=600)
    assert first.returncode == 0, first.stderr
    tokens = [1 << i for i in range(6)]
    procs = [subprocess.Popen([sys.executable, "-c", TUNE_RUN, str(out), str(t), str(ready),
                               str(len(tokens))], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for t in tokens]
    for p in procs:
        o, e = p.communicate(timeout=600)
        assert p.returncode == 0, e
    assert sorted(c.tokens for c in prof.load(str(out)).cells) == tokens


# ---------------------------------------------------------------------------------------------
# Environment variables, profile fields, --out (issue 48, defects 5 and 6)

SHAPE = ["layer=dense_linear", "layer.hidden_size=256", "layer.intermediate_size=256"]


@pytest.mark.parametrize("value", ["abc", "nan", "-5", "0", "inf", "1e9"])
def test_a_bad_tune_timeout_variable_is_exit_2_naming_it(monkeypatch, value):
    from helpers import refused
    monkeypatch.setenv("SELECTOR_TUNE_TIMEOUT", value)
    refused(["tune", *SHAPE, "--tokens", "4"], "SELECTOR_TUNE_TIMEOUT", repr(value),
            "from 0.001 to 86400")


def test_a_bad_tune_timeout_variable_does_not_break_explain(monkeypatch):
    from helpers import run_main
    monkeypatch.setenv("SELECTOR_TUNE_TIMEOUT", "abc")
    rc, out, err = run_main(["explain", *SHAPE, "policy.preference=measured"])
    assert rc == 0 and "Traceback" not in err, err


def test_a_bad_tune_timeout_variable_does_not_break_explain_in_a_fresh_process():
    """issue 48 (5): the variable was parsed when selector.inspect.tuning was imported, so a
    fresh process's `explain policy.preference=measured` raised there (in-process, the module
    was already imported and the test above could not see it)."""
    from helpers import cli_env, run_cli
    r = run_cli("explain", *SHAPE, "policy.preference=measured",
                env=cli_env(SELECTOR_TUNE_TIMEOUT="abc"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("value", ["abc", "nan", "-5"])
def test_a_bad_verify_timeout_variable_is_exit_2_naming_it(monkeypatch, value):
    """`explain probe=verify` reads it (`doctor --verify` takes --timeout, else
    SELECTOR_PROBE_TIMEOUT)."""
    from helpers import refused
    monkeypatch.setenv("SELECTOR_VERIFY_TIMEOUT", value)
    refused(["explain", "probe=verify", *SHAPE], "SELECTOR_VERIFY_TIMEOUT", repr(value),
            "from 0.001 to 86400")


def _profile_doc(**top):
    from selector.core import profile as prof
    layer = dict(op="linear", quant="nvfp4", activation="silu", act_and_mul=False, ep_size=1,
                 tp_size=1, dtype="bfloat16", hidden_size=256, intermediate_size=256,
                 swiglu_limit=None, num_experts=None, top_k=None, all2all=None, num_tokens=1)
    doc = {"schema": prof.SCHEMA, "version": 1, "created": "", "settings": {},
           "key": {k: ({} if k == "packages" else None) for k in prof.KEY_FIELDS},
           "cells": [{"layer": layer, "tokens": 1, "bucket": 1, "times": {}}]}
    for k, v in top.items():
        if k == "bucket":
            doc["cells"][0]["bucket"] = v
        else:
            doc[k] = v
    return doc


@pytest.mark.parametrize("field,value,key", [("version", True, "version"),
                                             ("version", 1.0, "version"),
                                             ("bucket", True, "cells[0].bucket"),
                                             ("bucket", 1.0, "cells[0].bucket")])
def test_a_bool_or_a_float_is_not_an_integer_field_of_a_profile(tmp_path, field, value, key):
    import json

    from selector.core import profile as prof
    from selector.core.errors import SelectorError
    prof.parse(_profile_doc(), "ok.json")  # the control: the same document with ints
    f = tmp_path / "p.json"
    f.write_text(json.dumps(_profile_doc(**{field: value})))
    with pytest.raises(SelectorError) as e:
        prof.load(str(f))
    assert f"{f}: {key}:" in str(e.value)


@pytest.mark.parametrize("content", [b"my notes\n", b'{"schema": "other"}', b"\x00\xff"])
def test_tune_out_never_overwrites_a_file_that_is_not_a_profile(tmp_path, content):
    import json

    from helpers import refused

    from selector.core import profile as prof
    from selector.core.errors import SelectorError
    f = tmp_path / "notes.json"
    f.write_bytes(content)
    new = prof.parse(_profile_doc(), "new")
    with pytest.raises(SelectorError) as e:
        tune._merge(new, str(f))
    assert "--out" in str(e.value) and "not a selector profile" in str(e.value)
    # on the command line, before anything is loaded or timed (here before --tokens is read)
    refused(["tune", *SHAPE, "--tokens", "0", "--out", str(f)], "--out", str(f),
            "not a selector profile", "not overwritten")
    assert f.read_bytes() == content
    # a selector profile of another version is replaced; a missing file is written
    old = tmp_path / "old.json"
    old.write_text(json.dumps(dict(_profile_doc(), version=0)))
    assert tune._merge(new, str(old)) == (new, 0)
    assert tune._merge(new, str(tmp_path / "absent.json")) == (new, 0)
