"""Detection of the CUDA runtime and package versions from metadata, without imports."""
import importlib.metadata as md

from packaging.version import Version

from selector.inspect import environment


def _fake_dist(tmp_path, name, version, files=None):
    info = tmp_path / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for rel, text in (files or {}).items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return md.PathDistribution(info)


def test_cuda_from_the_torch_build_label():
    cuda, how = environment.cuda_runtime({"torch": Version("2.11.0+cu130")})
    assert cuda == Version("13.0") and "label" in how
    cuda, _ = environment.cuda_runtime({"torch": Version("2.9.1+cu128")})
    assert cuda == Version("12.8")


def test_cuda_from_torch_version_file_when_metadata_has_no_label(tmp_path, monkeypatch):
    # Seen on the lent H200: metadata says 2.11.0, torch/version.py says cuda = '13.0'.
    dist = _fake_dist(tmp_path, "torch", "2.11.0", {
        "torch/version.py": "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n"})
    monkeypatch.setattr(environment.md, "distribution", lambda name: dist)
    cuda, how = environment.cuda_runtime({"torch": Version("2.11.0")})
    assert cuda == Version("13.0") and "version.py" in how


def test_cpu_torch_build_has_no_cuda(tmp_path, monkeypatch):
    dist = _fake_dist(tmp_path, "torch", "2.13.0", {
        "torch/version.py": "__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n"})
    monkeypatch.setattr(environment.md, "distribution", lambda name: dist)
    monkeypatch.setattr(environment, "_RUNTIME_DISTS", ())
    assert environment.cuda_runtime({"torch": Version("2.13.0+cpu")})[0] is None


def test_installed_versions_reads_metadata_only():
    got = environment.installed_versions(["packaging", "no-such-distribution-xyz"])
    assert got["packaging"] == Version(md.version("packaging"))
    assert got["no-such-distribution-xyz"] is None
