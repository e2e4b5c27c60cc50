"""`verify` re-hashes the published snapshot against the manifest and names what is bad."""

from __future__ import annotations

import os

from .conftest import REPO, fetch_args, run_agent, snapshot_dir


def verify(dest, *extra):
    return run_agent("verify", "--dest", str(dest), "--repo", REPO, *extra)


def fetched(hub, dest, *extra):
    assert run_agent(*fetch_args(hub, dest, *extra)).code == 0


def test_verify_passes_on_an_intact_snapshot(hub, tiny, tmp_path):
    fetched(hub, tmp_path)
    result = verify(tmp_path)
    assert result.code == 0 and result.json["commit"] == tiny and result.json["files"] == 8


def test_verify_names_a_corrupted_file_and_exits_12(hub, tiny, tmp_path):
    fetched(hub, tmp_path)
    target = (snapshot_dir(tmp_path, tiny) / "model-00002-of-00002.safetensors").resolve()
    with open(target, "r+b") as f:
        f.seek(100_000)
        byte = f.read(1)
        f.seek(100_000)
        f.write(bytes([byte[0] ^ 1]))
    result = verify(tmp_path)
    assert result.code == 12
    assert "model-00002-of-00002.safetensors (digest mismatch)" in result.stderr
    assert "config.json" not in result.stderr


def test_verify_names_a_missing_file(hub, tiny, tmp_path):
    fetched(hub, tmp_path)
    os.unlink(snapshot_dir(tmp_path, tiny) / "config.json")
    result = verify(tmp_path)
    assert result.code == 12 and "config.json (FileNotFoundError)" in result.stderr


def test_verify_finds_the_snapshot_by_revision_or_commit(hub, tiny, tmp_path):
    fetched(hub, tmp_path)
    assert verify(tmp_path, "--revision", "main").json["commit"] == tiny
    assert verify(tmp_path, "--revision", tiny).json["commit"] == tiny


def test_verify_checks_a_flat_layout(hub, tiny, tmp_path):
    fetched(hub, tmp_path, "--layout", "flat")
    assert verify(tmp_path).code == 0
    (tmp_path / "tokenizer.json").write_text("{}")
    result = verify(tmp_path)
    assert result.code == 12 and "tokenizer.json" in result.stderr


def test_verify_without_a_completed_fetch_exits_15(tmp_path):
    assert verify(tmp_path).code == 15


def test_verify_uses_all_cores(hub, tiny, tmp_path, monkeypatch):
    from fleetcache.agent import verify as verify_module

    used = {}

    class Pool(verify_module.ThreadPoolExecutor):
        def __init__(self, max_workers):
            used["workers"] = max_workers
            super().__init__(max_workers)

    fetched(hub, tmp_path)
    monkeypatch.setattr(verify_module, "ThreadPoolExecutor", Pool)
    verify_module.verify(tmp_path, REPO, None)
    assert used["workers"] == os.cpu_count()
