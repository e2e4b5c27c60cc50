"""`fetch` against the test hub over real HTTP: layout, resume, publish discipline, limits."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from huggingface_hub import snapshot_download

from fleetcache.agent.layout import SWEEP_AGE_SECONDS
from fleetcache.devtools.testhub import Fault, PatternContent
from tests.agent.conftest import (
    REPO,
    expected_bytes,
    fetch_args,
    published_files_verify,
    repo_dir,
    run_agent,
    snapshot_dir,
)


def test_fetch_lays_out_the_hf_cache_that_huggingface_hub_reads_offline(hub, tiny, tmp_path):
    result = run_agent(*fetch_args(hub, tmp_path))
    assert result.code == 0, result.stderr
    folder = snapshot_download(REPO, revision=tiny, cache_dir=tmp_path / "hub", local_files_only=True)
    for path, data in expected_bytes(hub).items():
        assert (Path(folder) / path).read_bytes() == data
    assert (repo_dir(tmp_path) / "refs" / "main").read_text() == tiny


def test_snapshot_entries_are_relative_symlinks_into_blobs(hub, tiny, tmp_path):
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    link = snapshot_dir(tmp_path, tiny) / "config.json"
    assert link.is_symlink() and not os.readlink(link).startswith("/")
    assert link.resolve().parent == (repo_dir(tmp_path) / "blobs").resolve()


def test_nested_paths_link_back_to_blobs(hub, tmp_path):
    commit = hub.add_repo(REPO, {"onnx/sub/model.onnx": PatternContent(5000, 3), "a.json": b"{}"})
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    assert (snapshot_dir(tmp_path, commit) / "onnx/sub/model.onnx").read_bytes() == \
        expected_bytes(hub)["onnx/sub/model.onnx"]


def test_flat_layout_writes_plain_files_at_their_repo_paths_in_the_commits_directory(hub, tiny, tmp_path):
    assert run_agent(*fetch_args(hub, tmp_path, "--layout", "flat")).code == 0
    commit_dir = tmp_path / "commits" / tiny
    for path, data in expected_bytes(hub).items():
        assert not (commit_dir / path).is_symlink() and (commit_dir / path).read_bytes() == data
    assert not (repo_dir(tmp_path)).exists()


def test_allow_and_ignore_limit_what_is_fetched(hub, tiny, tmp_path):
    result = run_agent(*fetch_args(hub, tmp_path, "--allow", "*.json", "--ignore", "tokenizer*"))
    assert result.code == 0
    names = sorted(p.name for p in snapshot_dir(tmp_path, tiny).iterdir())
    assert names == ["config.json", "generation_config.json", "model.safetensors.index.json"]
    assert result.json["filesTotal"] == 3


def test_stdout_and_progress_file_end_with_a_ready_record(hub, tiny, tmp_path):
    progress = tmp_path / "progress.json"
    result = run_agent(*fetch_args(hub, tmp_path / "d", "--progress-file", str(progress)))
    record = json.loads(progress.read_text())
    assert record == result.json
    assert record["phase"] == "Ready" and record["commit"] == tiny
    assert record["bytesDone"] == record["bytesTotal"] == sum(len(d) for d in expected_bytes(hub).values())
    assert record["filesDone"] == record["filesTotal"] == len(expected_bytes(hub)) and record["reason"] is None


def test_a_rerun_on_a_complete_cache_makes_only_the_listing_call_well_under_a_second(hub, tiny, tmp_path):
    from fleetcache.agent import cli

    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    hub.reset_records()
    start = time.monotonic()  # in-process: the agent's own work, not the interpreter's start-up
    assert cli.main(fetch_args(hub, tmp_path)) == 0
    assert time.monotonic() - start < 0.5
    assert [r.path for r in hub.requests()] == [f"/api/models/{REPO}/revision/main"]


def test_large_files_download_in_parallel_ranged_parts(hub, tmp_path):
    hub.add_repo(REPO, {"big.safetensors": PatternContent(70 << 20, 5)})
    assert run_agent(*fetch_args(hub, tmp_path, "--concurrency", "4")).code == 0
    ranges = sorted(r.headers["Range"] for r in hub.requests("cdn"))
    assert ranges == ["bytes=0-33554431", "bytes=33554432-67108863", "bytes=67108864-73400319"]
    assert published_files_verify(tmp_path, hub) == [f"{hub.repos[REPO].refs['main']}/big.safetensors"]


def test_bandwidth_caps_the_total_rate_across_streams(hub, tmp_path):
    hub.add_repo(REPO, {"a.safetensors": PatternContent(3 << 20, 1), "b.safetensors": PatternContent(3 << 20, 2)})
    start = time.monotonic()
    assert run_agent(*fetch_args(hub, tmp_path, "--bandwidth", "2Mi")).code == 0
    # 6 MiB at 2 MiB/s, less the 0.5 MiB burst the bucket lets through at once
    assert time.monotonic() - start >= 2.4


def test_identical_files_are_downloaded_once(hub, tmp_path):
    same = PatternContent(1 << 20, 9)
    commit = hub.add_repo(REPO, {"a/w.safetensors": same, "b/w.safetensors": same})
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    assert hub.bytes_sent("cdn") == 1 << 20
    assert published_files_verify(tmp_path, hub) == [f"{commit}/a/w.safetensors", f"{commit}/b/w.safetensors"]


def test_a_new_commit_reuses_blobs_it_shares_with_the_old_one(hub, tmp_path):
    shard = PatternContent(2 << 20, 4)
    hub.add_repo(REPO, {"w.safetensors": shard, "config.json": b'{"v": 1}'})
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    new = hub.add_repo(REPO, {"w.safetensors": shard, "config.json": b'{"v": 2}'})
    hub.reset_records()
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    assert hub.bytes_sent("cdn") == 0
    assert (repo_dir(tmp_path) / "refs" / "main").read_text() == new


def test_empty_files_are_published(hub, tmp_path):
    commit = hub.add_repo(REPO, {"empty.txt": b"", "a.json": b"{}"})
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    assert (snapshot_dir(tmp_path, commit) / "empty.txt").read_bytes() == b""


def test_a_failed_fetch_writes_neither_refs_nor_manifest(hub, tiny, tmp_path):
    hub.inject(Fault("status", path="*tokenizer.json", status=404, times=None))
    assert run_agent(*fetch_args(hub, tmp_path)).code == 11
    assert not (repo_dir(tmp_path) / "refs" / "main").exists()
    assert not list((tmp_path / ".fleetcache").rglob("manifests/*.json"))
    published_files_verify(tmp_path, hub)


def test_own_temporary_files_older_than_ten_minutes_are_swept(hub, tiny, tmp_path):
    blobs = repo_dir(tmp_path) / "blobs"
    blobs.mkdir(parents=True)
    old = blobs / ("." + "f" * 64 + ".fleetcache-part")
    fresh = blobs / ("." + "e" * 64 + ".fleetcache-part")
    stray = blobs / ".x.fleetcache-tmp-123"
    someone_elses = blobs / "unrelated.incomplete"
    for path in (old, fresh, stray, someone_elses):
        path.write_bytes(b"x")
    past = time.time() - SWEEP_AGE_SECONDS - 60
    for path in (old, stray, someone_elses):
        os.utime(path, (past, past))
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    assert not old.exists() and not stray.exists()
    assert fresh.exists() and someone_elses.exists()


def test_a_second_writer_exits_16_while_the_first_holds_the_destination(hub, tiny, tmp_path):
    from fleetcache.agent.lock import DestinationLock

    with DestinationLock(tmp_path / ".fleetcache") as held:
        held.acquire(wait=False)
        result = run_agent(*fetch_args(hub, tmp_path))
    assert result.code == 16 and "StagerBusy" in result.stderr
    assert not (repo_dir(tmp_path) / "blobs").exists() or \
        not any((repo_dir(tmp_path) / "blobs").iterdir())


def test_wait_makes_the_second_writer_wait_for_the_lock(hub, tiny, tmp_path):
    import threading

    from fleetcache.agent.lock import DestinationLock

    held = DestinationLock(tmp_path / ".fleetcache")
    held.acquire(wait=False)
    threading.Timer(1.5, held.release).start()
    start = time.monotonic()
    result = run_agent(*fetch_args(hub, tmp_path, "--wait"))
    assert result.code == 0 and time.monotonic() - start >= 1.5


def test_a_fresh_lease_from_another_node_blocks_even_when_flock_succeeds(hub, tiny, tmp_path):
    state = tmp_path / ".fleetcache"
    state.mkdir()
    lease = {"holder": "other-node/1/abc", "host": "other-node", "pid": 1, "heartbeat": time.time(),
             "ttlSeconds": 30}
    (state / "lease.json").write_text(json.dumps(lease))
    assert run_agent(*fetch_args(hub, tmp_path)).code == 16


def test_a_stale_lease_from_a_dead_holder_does_not_block(hub, tiny, tmp_path):
    state = tmp_path / ".fleetcache"
    state.mkdir()
    lease = {"holder": "other-node/1/abc", "host": "other-node", "pid": 1, "heartbeat": time.time() - 60,
             "ttlSeconds": 30}
    (state / "lease.json").write_text(json.dumps(lease))
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    assert not (state / "lease.json").exists()


def test_a_symlink_escape_in_the_snapshot_is_refused(hub, tmp_path):
    commit = hub.add_repo(REPO, {"sub/a.json": b"{}"})
    outside = tmp_path / "outside"
    outside.mkdir()
    snap = snapshot_dir(tmp_path / "d", commit)
    snap.mkdir(parents=True)
    (snap / "sub").symlink_to(outside)
    result = run_agent(*fetch_args(hub, tmp_path / "d"))
    assert result.code == 14 and "symlink escape" in result.stderr
    assert list(outside.iterdir()) == []


def test_too_little_free_space_exits_13_before_writing(hub, tiny, tmp_path, monkeypatch):
    import shutil

    from fleetcache.agent import cli

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    assert cli.main(fetch_args(hub, tmp_path)) == 13
    assert hub.bytes_sent("cdn") == 0
    assert not any((repo_dir(tmp_path) / "blobs").iterdir())


def test_running_out_of_space_mid_write_exits_13(hub, tiny, tmp_path, monkeypatch):
    import errno

    from fleetcache.agent import cli, fetch

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fetch.os, "pwrite", full)
    progress = tmp_path / "p.json"
    assert cli.main(fetch_args(hub, tmp_path / "d", "--progress-file", str(progress))) == 13
    record = json.loads(progress.read_text())
    assert record["phase"] == "Failed" and record["reason"] == "InsufficientCapacity"
    published_files_verify(tmp_path / "d", hub)


def test_a_bug_in_a_worker_ends_the_run_with_exit_1_and_a_failed_record_instead_of_hanging(
        hub, tiny, tmp_path, monkeypatch):
    from fleetcache.agent import cli, fetch

    def broken(self, start, end, data):
        raise RuntimeError("bug")

    monkeypatch.setattr(fetch.Assembly, "written", broken)
    progress = tmp_path / "p.json"
    assert cli.main(fetch_args(hub, tmp_path / "d", "--progress-file", str(progress))) == 1
    record = json.loads(progress.read_text())
    assert record["phase"] == "Failed" and record["reason"] == "" and "RuntimeError" in record["message"]


def test_a_journal_left_without_its_partial_file_is_not_trusted(hub, tmp_path):
    commit = hub.add_repo(REPO, {"w.safetensors": PatternContent(3 << 20, 8)})
    sha = hub.repos[REPO].commits[commit]["w.safetensors"].sha256
    blobs = repo_dir(tmp_path) / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f".{sha}.fleetcache-journal").write_text(f"0 {2 << 20}\n")  # claims 2 MiB that are not there
    hub.inject(Fault("truncate", host="cdn", after_bytes=1 << 20, times=1))  # FIN: all 1 MiB arrives
    hub.inject(Fault("status", host="cdn", status=503, times=None))
    assert run_agent(*fetch_args(hub, tmp_path)).code == 17  # 1 MiB written, then the CDN went away
    hub.faults.clear()
    rerun = run_agent(*fetch_args(hub, tmp_path))
    assert rerun.code == 0 and "digest mismatch" not in rerun.stderr
    file_bytes = sum(r.bytes_sent for r in hub.requests("cdn") if r.status == 206)
    assert file_bytes == 3 << 20  # the 1 MiB written before was kept, nothing refetched
    published_files_verify(tmp_path, hub)


def flip_byte(path, offset=1000):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 1]))


def test_a_blob_corrupted_on_disk_is_fetched_again_by_the_next_fetch(hub, tiny, tmp_path):
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    shard = "model-00001-of-00002.safetensors"
    flip_byte((snapshot_dir(tmp_path, tiny) / shard).resolve())
    hub.reset_records()
    result = run_agent(*fetch_args(hub, tmp_path))
    assert result.code == 0 and f"on-disk corruption: {shard} (digest mismatch)" in result.stderr
    assert hub.bytes_sent("cdn") == len(expected_bytes(hub)[shard])
    assert (snapshot_dir(tmp_path, tiny) / shard).read_bytes() == expected_bytes(hub)[shard]
    published_files_verify(tmp_path, hub)


def test_a_flat_file_changed_on_disk_is_fetched_again(hub, tiny, tmp_path):
    assert run_agent(*fetch_args(hub, tmp_path, "--layout", "flat")).code == 0
    config = tmp_path / "commits" / tiny / "config.json"
    config.write_text('{"tampered": true}'.ljust(len(expected_bytes(hub)["config.json"])))
    assert run_agent(*fetch_args(hub, tmp_path, "--layout", "flat")).code == 0
    assert config.read_bytes() == expected_bytes(hub)["config.json"]


def test_a_blob_the_record_does_not_vouch_for_is_re_hashed_from_disk_not_refetched(hub, tiny, tmp_path):
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    (tmp_path / ".fleetcache" / "models--acme--tiny" / "verified").unlink()
    hub.reset_records()
    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    assert hub.bytes_sent("cdn") == 0 and hub.bytes_sent("hub") < 10_000  # the listing only


def test_re_hashing_files_already_on_the_volume_is_reported_in_the_progress_record(hub, tiny, tmp_path,
                                                                                  monkeypatch):
    from fleetcache.agent import cli, progress

    assert run_agent(*fetch_args(hub, tmp_path)).code == 0
    (tmp_path / ".fleetcache" / "models--acme--tiny" / "verified").unlink()
    records = []
    monkeypatch.setattr(progress.FileSink, "emit", lambda self, record: records.append(dict(record)))
    assert cli.main(fetch_args(hub, tmp_path, "--progress-file", str(tmp_path / "p.json"))) == 0
    notes = [r["message"] for r in records if r["message"]]
    assert notes == [f"re-hashing 8 files ({sum(len(d) for d in expected_bytes(hub).values())} bytes) already "
                     "on the volume that the verification record does not vouch for"]


def test_an_allow_pattern_that_selects_nothing_exits_14_naming_the_pattern(hub, tiny, tmp_path):
    progress = tmp_path / "p.json"
    result = run_agent(*fetch_args(hub, tmp_path / "d", "--allow", "*.safetensor", "--progress-file",
                                   str(progress)))
    record = json.loads(progress.read_text())
    assert result.code == 14 and record["phase"] == "Failed" and record["reason"] == "InvalidSource"
    assert "--allow '*.safetensor' select none of the 8 files" in record["message"]
    assert "allowPatterns" in record["message"]
    assert not (tmp_path / "d").exists()


def test_ignore_patterns_that_leave_nothing_exit_14(hub, tiny, tmp_path):
    result = run_agent(*fetch_args(hub, tmp_path, "--ignore", "*"))
    assert result.code == 14 and "--ignore '*' select none" in result.stderr


def test_a_repository_without_files_exits_14(hub, tmp_path):
    hub.add_repo(REPO, {})
    result = run_agent(*fetch_args(hub, tmp_path))
    assert result.code == 14 and "select none of the 0 files" in result.stderr


def test_resolve_refuses_a_selection_of_nothing_with_14(hub, tiny):
    result = run_agent("resolve", "--endpoint", hub.endpoint, "--repo", REPO, "--allow", "nothing/*")
    assert result.code == 14 and "--allow 'nothing/*'" in result.stderr and result.stdout == ""


def test_fetching_other_patterns_of_a_commit_keeps_the_first_selections_manifest(hub, tiny, tmp_path):
    first = run_agent(*fetch_args(hub, tmp_path, "--allow", "*.json")).json
    manifests = tmp_path / ".fleetcache" / "models--acme--tiny" / "manifests" / tiny
    kept = (manifests / f"{first['manifestDigest']}.json").read_bytes()
    second = run_agent(*fetch_args(hub, tmp_path, "--allow", "*.safetensors")).json
    assert second["manifestDigest"] != first["manifestDigest"]
    assert (manifests / f"{first['manifestDigest']}.json").read_bytes() == kept
    assert sorted(p.stem for p in manifests.iterdir()) == sorted([first["manifestDigest"],
                                                                  second["manifestDigest"]])


def test_a_dest_that_is_a_file_exits_15_naming_dest(hub, tiny, tmp_path):
    (tmp_path / "volume").write_text("not a directory")
    result = run_agent(*fetch_args(hub, tmp_path / "volume" / "sub"))
    assert result.code == 15 and "--dest" in result.stderr and "Traceback" not in result.stderr
    assert hub.requests() == []


def test_a_fetch_by_commit_writes_no_ref_of_its_own(hub, tiny, tmp_path):
    assert run_agent(*fetch_args(hub, tmp_path, "--revision", tiny)).code == 0
    assert not (repo_dir(tmp_path) / "refs").exists() or not any((repo_dir(tmp_path) / "refs").iterdir())


def test_ref_names_the_commit_fetched_so_readers_find_it_by_revision(hub, tiny, tmp_path):
    assert run_agent(*fetch_args(hub, tmp_path, "--revision", tiny, "--ref", "main")).code == 0
    assert (repo_dir(tmp_path) / "refs" / "main").read_text() == tiny
    folder = snapshot_download(REPO, cache_dir=tmp_path / "hub", local_files_only=True)
    assert Path(folder) == snapshot_dir(tmp_path, tiny)


def test_ref_moves_to_the_new_commit_when_the_cache_is_updated(hub, tiny, tmp_path):
    assert run_agent(*fetch_args(hub, tmp_path, "--revision", tiny, "--ref", "main")).code == 0
    new = hub.add_repo(REPO, {"config.json": b'{"v": 2}'})
    assert run_agent(*fetch_args(hub, tmp_path, "--revision", new, "--ref", "main")).code == 0
    assert (repo_dir(tmp_path) / "refs" / "main").read_text() == new
    assert run_agent("verify", "--dest", str(tmp_path), "--repo", REPO, "--revision", "main").json["commit"] == new


def test_scan_cache_dir_of_the_hub_directory_reports_no_corruption(hub, tiny, tmp_path):
    from huggingface_hub import scan_cache_dir

    assert run_agent(*fetch_args(hub, tmp_path, "--ref", "stable")).code == 0
    (tmp_path / "lost+found").mkdir()  # what an ext4 volume's root holds
    info = scan_cache_dir(tmp_path / "hub")
    assert info.warnings == []
    [repo] = info.repos
    assert repo.repo_id == REPO and repo.size_on_disk == sum(len(d) for d in expected_bytes(hub).values())
    assert {rev.commit_hash for rev in repo.revisions} == {tiny}
    assert set(repo.refs) == {"main", "stable"}
