"""Every explanation in docs/vllm-parity.md, replayed against vLLM's own code: for each cluster
(NVFP4, FP8, MX, linear and the random sections) its first example scenario (sim.Scenario.parse
reads the label back) runs through vLLM's untouched selection code on the simulated GPU and
through selector, and vLLM's result and kernel, selector's result and kernel and the
explanation must be the cluster's. A cluster whose scenario vLLM now decides otherwise, or that
the explanation no longer covers, fails here and names the cluster."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

import linear_parity as lp
import parity
import pytest
import random_sweep as rs
import sim

DOC = Path(__file__).resolve().parents[2] / "docs" / sim.DOC_NAME  # the installed release's
HEADING = re.compile(r"^(?:### (?P<grid>\d+|FP8-\d+|MX-\d+)|#### (?P<lin>L\d+))\. vLLM: (?P<v>\S+); "
                     r"selector: (?P<s>not described|\S+) \((?P<n>\d+) scenarios\)$")
RANDOM = re.compile(r"^- (?P<id>R\d+) \((?P<family>\w+), (?P<n>\d+)\): vLLM (?P<v>\S+); "
                    r"selector (?P<s>not described|\S+): (?P<rest>.*)\. Example: `(?P<label>[^`]+)`$")


class Cluster(NamedTuple):
    id: str
    linear: bool  # linear_parity's runner (the FP8/MX linear sections and the random linear family)
    vllm: str
    selector: str
    scenario: sim.Scenario
    why: Optional[str]  # the "Why:" text (random clusters: the line's text after "selector X: ")
    kernels: Optional[str]  # the "Kernels:" line (random clusters: none)


def clusters() -> List[Cluster]:
    lines = DOC.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = HEADING.match(line)
        if m:
            block = []
            for nxt in lines[i + 1:]:
                if nxt.startswith("#"):
                    break
                block.append(nxt)
            why = next(x[len("Why: "):-1] for x in block if x.startswith("Why: "))
            kernels = next(x for x in block if x.startswith("Kernels: "))
            label = re.search(r"`([^`]+)`", next(x for x in block
                                                 if x.startswith("Examples: "))).group(1)
            out.append(Cluster(m["grid"] or m["lin"], m["lin"] is not None, m["v"], m["s"],
                               sim.Scenario.parse(label), why, kernels))
            continue
        m = RANDOM.match(line)
        if m:
            out.append(Cluster(f"{m['id']} ({m['family']})", m["family"] == "linear", m["v"],
                               m["s"], sim.Scenario.parse(m["label"]), m["rest"], None))
    return out


def _mine(r) -> str:
    return "not described" if isinstance(r.decision, parity.Undescribed) else "refusal"


def _kernels(c: Cluster, r) -> str:
    if c.id.startswith("MX-"):
        return (f"Kernels: vLLM {r.vllm_kernel or '-'} ({r.vllm_quant or '-'}); selector "
                f"{r.kernel or '-'} ({r.scheme or '-'}).")
    return f"Kernels: vLLM {r.vllm_kernel or '-'}; selector {r.kernel or '-'}."


@pytest.fixture(scope="module")
def replayed():
    todo = clusters()
    rows: Dict[sim.Scenario, object] = {}
    for linear in (False, True):
        scenarios = list(dict.fromkeys(c.scenario for c in todo if c.linear == linear))
        report = (lp.run if linear else parity.run)(scenarios)
        rows.update({r.scenario: r for r in report.rows})
    return todo, rows


def test_the_doc_lists_every_section_s_clusters():
    found = clusters()
    ids = [c.id for c in found]
    text = DOC.read_text()
    listed = len(re.findall(r"^(?:### (?:\d+|FP8-\d+|MX-\d+)|#### L\d+)\. |^- R\d+ ", text, re.M))
    assert len(found) == listed, (len(found), listed)  # every cluster of the file is replayed
    reported = sim.REPORTED[sim.RELEASE]  # the sections this release's report holds
    assert any(i.isdigit() for i in ids) == ("nvfp4" in reported)
    assert any(i.startswith("FP8-") for i in ids) == ("fp8" in reported)
    assert any(i.startswith("MX-") for i in ids) == ("mx" in reported)
    assert any(i.startswith("L") for i in ids) == ("linear" in reported)
    assert {c.id.split("(")[1][:-1] for c in found if c.id.startswith("R")} == \
        (set(rs.COUNTS) if "random" in reported else set())


def mismatch(c: Cluster, r) -> Optional[str]:
    """What of cluster `c` its replayed row `r` no longer shows (None: all of it)."""
    selector = (r.engine_name or r.selected) if c.linear and not c.id.startswith("R") \
        else r.selected
    why = r.why[0] if r.why else "UNEXPLAINED"
    got = {"vLLM": r.vllm or "error", "selector": selector or _mine(r), "why": why}
    want = {"vLLM": c.vllm, "selector": c.selector, "why": c.why}
    if c.kernels is not None:
        got["kernels"], want["kernels"] = _kernels(c, r), c.kernels
    elif c.why.startswith(why + " ("):  # a random cluster's line: its sources follow the text
        want["why"] = why
    return None if got == want else f"doc {want}, now {got}"


def test_every_explanation_holds_on_its_example_in_vllms_code(replayed):
    todo, rows = replayed
    bad = [f"{c.id} `{c.scenario.label()}`: {m}" for c in todo
           for m in (mismatch(c, rows[c.scenario]),) if m]
    assert not bad, f"{len(bad)} of {len(todo)} clusters no longer hold:\n" + "\n".join(bad[:15])


def test_a_changed_vllm_answer_fails_the_replay(replayed):
    """The replay compares vLLM's answer and kernel, not only the text."""
    import dataclasses
    todo, rows = replayed
    c = next(c for c in todo if c.kernels is not None and c.vllm != "error")
    r = rows[c.scenario]
    assert mismatch(c, r) is None
    assert mismatch(c, dataclasses.replace(r, vllm=None)) is not None
    assert mismatch(c, dataclasses.replace(r, vllm_kernel="SomeOtherKernel")) is not None


NAMED_LINE = re.compile(r"vLLM \d+\.\d+\.\d+\S* \S+\.py lines? \d+")


def test_every_explained_cluster_names_a_line_of_vllm():
    """The report itself: every explained cluster (grid sections: a `- [line]` entry; random
    sections: its sources) names a line of the installed release's own file (issue 43), and an
    UNEXPLAINED one names none."""
    text = DOC.read_text().splitlines()
    bad = []
    for i, line in enumerate(text):
        if HEADING.match(line):
            block = []
            for nxt in text[i + 1:]:
                if nxt.startswith("#"):
                    break
                block.append(nxt)
            explained = not any(x == "Why: UNEXPLAINED." for x in block)
            if explained and not any(x.startswith(f"- [{parity.LINE}] ") and NAMED_LINE.search(x)
                                     for x in block):
                bad.append(line)
        elif RANDOM.match(line) and "UNEXPLAINED" not in line and not NAMED_LINE.search(line):
            bad.append(line[:120])
    assert not bad, f"{len(bad)} clusters name no line of vLLM:\n" + "\n".join(bad[:10])


def test_a_merge_file_of_a_new_report_keeps_its_section():
    """`--out FILE` for a release with no report yet writes one section only, its heading on the
    first line: split() still names it (a merge of it then writes that section)."""
    import vllm_parity as vp
    fp8 = vp.FP8_MARK.strip("\n") + "x\n\nbody\n"
    assert vp.split(fp8)["fp8"] == fp8 and vp.split(fp8)["nvfp4"] == ""
    whole = "# vLLM parity: x\n\nnv\n\n" + fp8 + "\n" + vp.RANDOM_HEADING + "\n\nr\n"
    parts = vp.split(whole)
    assert parts["nvfp4"] == "# vLLM parity: x\n\nnv\n" and parts["fp8"] == fp8
    assert parts["random"] == vp.RANDOM_HEADING + "\n\nr\n" and parts["mx"] == ""
