"""`doctor` on a machine with no GPU (issue 36): flashinfer_trtllm, flashinfer_cutlass and
flashinfer_cutedsl have a device rule per quant scheme (`when: {quant: [...]}`), which doctor's
layer-independent view skipped, so it said they "could run" while `explain` rejects them for
every layer. A backend whose every implemented scheme fails such a rule cannot run."""
from __future__ import annotations

import json

import pytest
from helpers import run_main

import selector


@pytest.mark.parametrize("platform", ["platform=cpu", "platform=auto"])
def test_no_gpu_no_flashinfer_backend_could_run(platform, monkeypatch, tmp_path):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    rc, out, err = run_main(["doctor", "--format", "json", platform, "stack=flashinfer_0_7_4"])
    assert rc in (0, 1), err
    verdicts = {(v["op"], v["backend"]): v for v in json.loads(out)["backends"]}
    sel = selector.load([platform, "stack=flashinfer_0_7_4"])
    if sel.default().platform["capability"] is not None:
        pytest.skip("this machine has a GPU")
    for (_op, name), v in verdicts.items():
        if name.startswith("flashinfer_"):
            assert v["verdict"] == "cannot run", v
            assert any(r["rule"] in ("device", "cuda", "quant") for r in v["reasons"]), v
    # doctor agrees with explain for every scheme a backend implements
    for (op, name), v in verdicts.items():
        b = next(b for b in sel.catalogue.backends[op] if b.name == name)
        could = any(selector.load([platform, "stack=flashinfer_0_7_4", f"layer.op={op}",
                                   f"layer.quant={q}"]).default().candidate(name).status
                    in ("selected", "eligible", "opt_in") for q in b.implements[:1])
        if could:
            assert v["verdict"].startswith("could run"), (name, v)


def test_a_backend_with_a_scheme_that_passes_could_run(monkeypatch, tmp_path):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    rc, out, err = run_main(["doctor", "--format", "json", "platform=b200",
                             "stack=flashinfer_0_7_4"])
    verdicts = {(v["op"], v["backend"]): v["verdict"] for v in json.loads(out)["backends"]}
    assert verdicts["moe", "flashinfer_trtllm"].startswith("could run"), verdicts
