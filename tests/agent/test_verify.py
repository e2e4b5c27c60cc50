"""`verify` re-hashes the published snapshot against the manifest and names what is bad."""

from __future__ import annotations

import json
import os

from fleetcache.devtools.testhub import Fault
from tests.agent.conftest import REPO, expected_bytes, fetch_args, run_agent, snapshot_dir

SHARD = "model-00002-of-00002.safetensors"


def verify(dest, *extra):
    return run_agent("verify", "--dest", str(dest), "--repo", REPO, *extra)


def fetched(hub, dest, *extra):
    assert run_agent(*fetch_args(hub, dest, *extra)).code == 0


def test_verify_passes_on_an_intact_snapshot(hub, tiny, tmp_path):
    fetched(hub, tmp_path)
    result = verify(tmp_path)
    assert result.code == 0 and result.json["commit"] == tiny and result.json["files"] == 8


def flip_byte(path, offset=100_000):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 1]))


def test_verify_names_a_corrupted_file_and_exits_19_cache_corrupted(hub, tiny, tmp_path):
    fetched(hub, tmp_path)
    flip_byte((snapshot_dir(tmp_path, tiny) / SHARD).resolve())
    result = verify(tmp_path)
    assert result.code == 19 and "CacheCorrupted" in result.stderr
    assert f"{SHARD} (digest mismatch)" in result.stderr
    assert "config.json" not in result.stderr


def test_cache_corrupted_says_the_next_fetch_repairs_it_not_the_mirror(hub, tiny, tmp_path):
    termination = tmp_path / "termination"
    termination.touch()
    fetched(hub, tmp_path / "d")
    flip_byte((snapshot_dir(tmp_path / "d", tiny) / SHARD).resolve())
    assert verify(tmp_path / "d", "--termination-log", str(termination)).code == 19
    record = json.loads(termination.read_text())
    assert record["reason"] == "CacheCorrupted"
    assert "re-run the hydration" in record["message"] and "mirror" not in record["message"]


def test_verify_names_a_missing_file(hub, tiny, tmp_path):
    fetched(hub, tmp_path)
    os.unlink(snapshot_dir(tmp_path, tiny) / "config.json")
    result = verify(tmp_path)
    assert result.code == 19 and "config.json (FileNotFoundError)" in result.stderr


def test_a_fetch_after_verify_repairs_corruption_that_left_the_files_stat_unchanged(hub, tiny, tmp_path):
    from fleetcache.agent.layouts import open_layout
    from fleetcache.manifest import Entry

    fetched(hub, tmp_path)
    blob = (snapshot_dir(tmp_path, tiny) / SHARD).resolve()
    flip_byte(blob)
    shard = hub.repos[REPO].commits[tiny][SHARD]
    # bit rot below the filesystem: the record still vouches for the file as it now is
    open_layout("hf-cache", tmp_path, REPO).record_verified(Entry(SHARD, shard.content.size, shard.sha256, "sha256"))
    assert verify(tmp_path).code == 19
    hub.reset_records()
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    assert hub.bytes_sent("cdn") == shard.content.size
    assert blob.read_bytes() == expected_bytes(hub)[SHARD]
    assert verify(tmp_path).code == 0


def test_verify_checks_every_selection_fetched_of_a_commit(hub, tiny, tmp_path):
    fetched(hub, tmp_path, "--allow", "*.json")
    fetched(hub, tmp_path, "--allow", "*.safetensors")
    result = verify(tmp_path)
    assert result.code == 0 and result.json["files"] == 7
    os.unlink(snapshot_dir(tmp_path, tiny) / "config.json")
    assert verify(tmp_path).code == 19


def test_verify_finds_the_snapshot_by_revision_or_commit(hub, tiny, tmp_path):
    fetched(hub, tmp_path)
    assert verify(tmp_path, "--revision", "main").json["commit"] == tiny
    assert verify(tmp_path, "--revision", tiny).json["commit"] == tiny


def test_verify_checks_a_flat_layout(hub, tiny, tmp_path):
    fetched(hub, tmp_path, "--layout", "flat")
    assert verify(tmp_path).code == 0
    (tmp_path / "commits" / tiny / "tokenizer.json").write_text("{}")
    result = verify(tmp_path)
    assert result.code == 19 and "tokenizer.json" in result.stderr


def test_verify_without_a_completed_fetch_exits_15(tmp_path):
    assert verify(tmp_path).code == 15


def test_verify_of_a_half_fetched_dest_says_to_run_or_finish_the_fetch_not_that_arguments_are_invalid(
        hub, tiny, tmp_path):
    hub.inject(Fault("status", host="cdn", times=None))  # the shards never arrive; the small files do
    assert run_agent(*fetch_args(hub, tmp_path)).code == 17
    result = verify(tmp_path)
    assert result.code == 15 and "invalid arguments" not in result.stderr
    assert f"nothing to verify: --dest {tmp_path} holds no completed fetch of {REPO}@main. Run (or finish) " \
           "`fleetcache-agent fetch` with the same --dest, --repo and --revision first" in result.stderr


def test_verify_of_a_revision_not_fetched_names_the_commits_the_dest_holds(hub, tiny, tmp_path):
    fetched(hub, tmp_path)
    result = verify(tmp_path, "--revision", "v2")
    assert result.code == 15 and f"@v2 (it holds {tiny}: pass one as --revision)" in result.stderr


def test_verify_marks_repo_required_in_its_help():
    shown = " ".join(run_agent("verify", "--help").stdout.split())
    assert "--repo TEXT ORG/NAME, the repo fetched into --dest [required; not with --manifest-file]" in shown


def test_verify_without_repo_names_the_flag_and_what_to_give(tmp_path):
    result = run_agent("verify", "--dest", str(tmp_path))
    assert result.code == 15 and "--repo: missing: give ORG/NAME (the repo fetched into --dest)" in result.stderr


def test_verify_of_a_dest_that_is_a_file_exits_15_naming_dest(tmp_path):
    (tmp_path / "file").write_text("x")
    result = verify(tmp_path / "file")
    assert result.code == 15 and "--dest" in result.stderr and "Traceback" not in result.stderr


def test_verify_uses_all_cores(hub, tiny, tmp_path, monkeypatch):
    from fleetcache.agent import layout
    from fleetcache.agent.verify import verify as run_verify

    used = {}

    class Pool(layout.ThreadPoolExecutor):
        def __init__(self, max_workers):
            used["workers"] = max_workers
            super().__init__(max_workers)

    fetched(hub, tmp_path)
    monkeypatch.setattr(layout, "ThreadPoolExecutor", Pool)
    run_verify(tmp_path, REPO, None)
    assert used["workers"] == os.cpu_count()
