"""Caches and files (issue 36): every cache read goes through selector.config.cache.read_json
(regular files only, opened without blocking and checked with fstat before any read, bounded
size, then a schema check); a bad entry is ignored with a note and rewritten, never a hang or a
traceback. Each regression below failed before the fix (a FIFO hung the read; a verify entry
with `"stored": "yesterday"` raised ValueError from VerifyCache.save)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import child_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selector.config import cache as cache_mod
from selector.config import catalogues, normalize_overrides
from selector.config.catalogues import discover as discover_tree
from selector.inspect import verify, verify_cache

REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 600  # a hang guard, not a speed limit: the fixed read returns at once


@pytest.fixture
def notes(monkeypatch):
    got = []
    monkeypatch.setattr(catalogues, "WARN", got.append)
    monkeypatch.setattr(catalogues, "_WARNED", set())
    return got


def test_a_fifo_at_a_composed_config_entry_is_refused_not_waited_on(tmp_path):
    """`explain` with a FIFO where its cache entry goes: an answer, a note, the entry rewritten."""
    cache = tmp_path / "cache"
    env = child_env(SELECTOR_CACHE_DIR=str(cache))
    env.pop("SELECTOR_NO_CACHE", None)
    overrides = ["platform=cpu"]
    code = textwrap.dedent(f"""
        from selector.config import cache, normalize_overrides
        from selector.config.catalogues import discover
        tree = discover([])
        print(cache.fingerprint(tree, normalize_overrides({overrides!r}, tree)))
    """)
    key = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=HANG_GUARD_S, check=True).stdout.strip()
    cache.mkdir(mode=0o700)
    fifo = cache / f"{key}.json"
    os.mkfifo(fifo)
    p = subprocess.run([sys.executable, "-m", "selector", "explain", *overrides],
                       capture_output=True, text=True, env=env, cwd=str(REPO),
                       timeout=HANG_GUARD_S)
    assert p.returncode in (0, 1), p.stderr
    assert "selected:" in p.stdout
    assert "is not a regular file: ignored" in p.stderr, p.stderr
    assert fifo.is_file()  # rewritten as a regular entry


def test_a_fifo_at_a_verify_cache_file_is_refused_not_waited_on(tmp_path):
    root = tmp_path / "verify"
    root.mkdir(mode=0o700)
    os.mkfifo(root / "abc.json")
    code = ("from pathlib import Path; from selector.inspect.verify import VerifyCache; "
            f"c = VerifyCache('abc', {{}}, Path({str(root)!r})); print(len(c.entries))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=child_env(), timeout=HANG_GUARD_S)
    assert p.returncode == 0 and p.stdout.strip() == "0", p.stderr
    assert "is not a regular file" in p.stderr


def _result(**kw):
    r = {"backend": "emulation", "op": "linear", "scheme": "nvfp4", "status": "OK",
         "detail": "ok", "max_rel_err": 0.0, "rms_rel_err": 0.0, "seconds": 1.0,
         "timeout_s": 60.0}
    r.update(kw)
    return r


def test_a_verify_entry_stored_yesterday_is_ignored_and_rewritten(tmp_path, notes):
    root = tmp_path / "verify"
    root.mkdir(mode=0o700)
    doc = {"version": verify.VERSION, "fingerprint": {},
           "entries": {"good": {"stored": 1.0, "result": _result()},
                       "bad": {"stored": "yesterday", "result": _result()}}}
    (root / "fp.json").write_text(json.dumps(doc))
    c = verify.VerifyCache("fp", {}, root)
    assert set(c.entries) == {"good"}
    assert any("1 malformed entries" in n for n in notes), notes
    assert c.save() == str(root / "fp.json")  # raised ValueError before the fix
    again = json.loads((root / "fp.json").read_text())
    assert set(again["entries"]) == {"good"}


def _composed_key(tmp_path):
    tree = discover_tree([])
    return cache_mod.fingerprint(tree, normalize_overrides(["platform=cpu"], tree))


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() |
                       st.text(max_size=8),
                       lambda kids: st.lists(kids, max_size=4) |
                       st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=20)


def _corrupt(data):
    """Bytes of a corrupt entry: garbage, truncated JSON, or JSON of a random shape."""
    kind = data.draw(st.sampled_from(["bytes", "json", "envelope", "truncated"]))
    if kind == "bytes":
        return data.draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(data.draw(JSONISH)).encode()
    if kind == "envelope":
        return json.dumps({"format": cache_mod.CACHE_FORMAT, "key": data.draw(st.text(max_size=4)),
                           "data": data.draw(JSONISH)}).encode()
    text = json.dumps({"format": cache_mod.CACHE_FORMAT, "data": {"a": [1, 2, 3]}})
    return text[:data.draw(st.integers(0, len(text) - 1))].encode()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz_composed_config_entries(tmp_path, data):
    d = tmp_path / "c"
    d.mkdir(exist_ok=True, mode=0o700)
    key = "k" * 64
    (d / f"{key}.json").write_bytes(_corrupt(data))
    got = cache_mod.get(d, key)  # never raises
    assert got is None or isinstance(got, dict)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz_verify_cache_files(tmp_path, data):
    root = tmp_path / "v"
    root.mkdir(exist_ok=True, mode=0o700)
    kind = data.draw(st.sampled_from(["raw", "entries"]))
    if kind == "raw":
        (root / "fp.json").write_bytes(_corrupt(data))
    else:
        entries = data.draw(st.dictionaries(
            st.text(max_size=6), st.fixed_dictionaries(
                {"stored": JSONISH, "result": st.one_of(JSONISH, st.builds(
                    _result, status=st.sampled_from(["OK", "FAIL", "x"]),
                    seconds=st.one_of(st.floats(), st.text(max_size=3))))}), max_size=4))
        (root / "fp.json").write_text(json.dumps({"version": verify.VERSION, "entries": entries}))
    c = verify.VerifyCache("fp", {}, root)  # never raises
    for e in c.entries.values():
        assert verify_cache._result_from(e["result"]) is not None
    c.save()  # nor does the rewrite
    json.loads((root / "fp.json").read_text())


def test_read_json_refuses_what_is_not_a_small_regular_file(tmp_path, notes):
    big = tmp_path / "big.json"
    big.write_text("[" + "0," * 100 + "0]")
    assert cache_mod.read_json(big, 50) is None
    assert cache_mod.read_json(tmp_path / "missing.json", 50) is None
    link = tmp_path / "link.json"
    link.symlink_to(big)
    assert cache_mod.read_json(link, 10 ** 6) is None  # not followed
    os.mkfifo(tmp_path / "fifo.json")
    assert cache_mod.read_json(tmp_path / "fifo.json", 10 ** 6) is None
    assert cache_mod.read_json(big, 10 ** 6) == [0] * 101
    assert len(notes) == 3, notes  # too big, a link, a FIFO; a missing file is no news


@pytest.mark.parametrize("key", ["platform", "layer", "policy", "engine"])
def test_a_cached_entry_whose_section_is_not_a_mapping_is_refused(key):
    from selector.core import schema
    from selector.core.errors import SelectorError
    data = {k: {} for k in cache_mod._TOP_KEYS}
    data["catalogue"] = {op: {} for op in schema.OPS}
    data[key] = []
    with pytest.raises(SelectorError, match=f"composed config: {key} is not a mapping"):
        cache_mod.check_shape(data)


def test_a_stored_entry_is_read_back_under_its_own_key_only(tmp_path):
    import selector
    selector.load(["platform=cpu"])  # composes (or finds) an entry in the session's cache
    entry = next(p for p in sorted(Path(os.environ["SELECTOR_CACHE_DIR"]).glob("*.json"))
                 if cache_mod.get(p.parent, p.stem) is not None)
    data = json.loads(entry.read_text())["data"]
    cache_mod.put(tmp_path, "k1", data)
    assert cache_mod.get(tmp_path, "k1") == data
    (tmp_path / "k2.json").write_bytes((tmp_path / "k1.json").read_bytes())  # another key's
    assert cache_mod.get(tmp_path, "k2") is None


def test_a_cached_detail_over_4000_characters_is_not_read_back():
    assert verify_cache._result_from(_result(detail="x" * 4000)).detail == "x" * 4000
    assert verify_cache._result_from(_result(detail="x" * 4001)) is None


def test_a_backend_package_outside_selector_is_found_by_its_file():
    import json as json_module
    found = verify_cache._package_dir("json.decoder")
    assert found is not None and found.resolve() == Path(json_module.__file__).resolve().parent


@pytest.mark.parametrize("tamper", [
    lambda d: d["proven"][0].__setitem__(2, "not a version"),
    lambda d: d["proven"][0].__setitem__(0, "torch"),            # not a release family's
    lambda d: d["stacks"].append(["no_such_preset", d["stacks"][0][1]]),
    lambda d: d["stacks"][0][1].__setitem__("family", 7),
    lambda d: d.__setitem__("stacks", "x"),
])
def test_a_stack_presets_entry_is_checked_as_fresh_data(tmp_path, monkeypatch, notes, tamper):
    """The stack presets' data kept beside the composed config (presets.stack_data: what the
    version guard reads on every detected run) is untrusted input too: an entry that does not
    hold what the files give is refused with a note, and the files are read afresh."""
    from selector.config import presets
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "c"))
    tree = discover_tree([])
    want = presets.stack_data(tree)
    (entry,) = (tmp_path / "c").glob("stacks-*.json")
    assert presets.stack_data(tree) == want  # read back from the entry
    doc = json.loads(entry.read_text())
    tamper(doc["data"])
    entry.write_text(json.dumps(doc))
    assert presets.stack_data(tree) == want
    assert any("stack presets cache entry" in n and "ignored" in n for n in notes), notes
    assert ("vllm", "vLLM") in {(d, n) for d, n, _ in want[1]}
