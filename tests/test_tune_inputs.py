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
