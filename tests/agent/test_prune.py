"""`prune` removes, for one repo on one volume, every commit not kept: its refs, snapshot,
manifests and the blobs no kept commit references; it never touches a kept commit's bytes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from fleetcache.agent.progress import PRUNE_FIELDS, Progress
from fleetcache.agent.prune import KILL_AFTER_ENV
from fleetcache.agent.prune import prune as run_prune
from fleetcache.devtools.testhub import PatternContent
from tests.agent.conftest import AGENT, REPO, fetch_args, published_files_verify, repo_dir, run_agent, snapshot_dir
from tests.agent.test_resolve import RecordingCoreApi
from tests.support.sinks import ListSink

SHARED = PatternContent(3000, 9)
OLD_FILES = {"w.safetensors": PatternContent(5000, 1), "s.safetensors": SHARED, "config.json": b'{"v": 1}'}
NEW_FILES = {"w.safetensors": PatternContent(7000, 2), "s.safetensors": SHARED, "config.json": b'{"v": 2}'}


def fetched(hub, dest, *extra):
    result = run_agent(*fetch_args(hub, dest, *extra))
    assert result.code == 0, result.stderr


@pytest.fixture
def two_commits(hub, tmp_path):
    """OLD (named by the ref v1) and NEW (main) on one volume, sharing s.safetensors."""
    old = hub.add_repo(REPO, OLD_FILES)
    new = hub.add_repo(REPO, NEW_FILES)
    fetched(hub, tmp_path / "d", "--revision", old, "--ref", "v1")
    fetched(hub, tmp_path / "d")
    return old, new


def prune(dest, *keep, kill_after=None):
    args = ["prune", "--dest", str(dest), "--repo", REPO]
    for commit in keep:
        args += ["--keep", commit]
    return run_agent(*args, env={KILL_AFTER_ENV: str(kill_after)} if kill_after else None)


def wait_for_record(agent, progress, phase, timeout=120.0):
    """Poll the progress file until its record is in `phase`: the agent got there, however loaded the machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and agent.poll() is None:
        try:
            if json.loads(progress.read_text())["phase"] == phase:
                return
        except (FileNotFoundError, ValueError, KeyError):
            pass  # not written yet, or being replaced
        time.sleep(0.05)
    raise AssertionError(f"no {phase} record in {progress} (exit code {agent.poll()}, {timeout:.0f} s at most)")


def etags(hub, commit):
    return {f.etag: f.content.size for f in hub.repos[REPO].commits[commit].values()}


def names(directory):
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def test_prune_leaves_only_the_kept_commits_snapshot_refs_manifests_and_blobs(hub, two_commits, tmp_path):
    old, new = two_commits
    dest = tmp_path / "d"
    assert prune(dest, new).code == 0
    state = dest / ".fleetcache" / "models--acme--tiny"
    assert names(repo_dir(dest) / "snapshots") == [new]
    assert names(repo_dir(dest) / "refs") == ["main"] and names(state / "refs") == ["main"]
    assert names(state / "manifests") == [new]
    assert names(repo_dir(dest) / "blobs") == sorted(etags(hub, new))


def test_prune_reports_the_removed_commits_and_frees_the_bytes_only_they_held(hub, two_commits, tmp_path):
    old, new = two_commits
    only_old = sum(size for etag, size in etags(hub, old).items() if etag not in etags(hub, new))
    result = prune(tmp_path / "d", new)
    assert (result.json["prunedCommits"], result.json["freedBytes"]) == ([old], only_old)
    assert sum(p.stat().st_size for p in (repo_dir(tmp_path / "d") / "blobs").iterdir()) == \
        sum(etags(hub, new).values())


def test_a_blob_the_kept_commit_shares_with_a_pruned_one_stays(hub, two_commits, tmp_path):
    old, new = two_commits
    prune(tmp_path / "d", new)
    assert (snapshot_dir(tmp_path / "d", new) / "s.safetensors").read_bytes() == bytes(SHARED.read(0, 3000))


def test_the_kept_commit_verifies_after_prune(hub, two_commits, tmp_path):
    old, new = two_commits
    prune(tmp_path / "d", new)
    assert run_agent("verify", "--dest", str(tmp_path / "d"), "--repo", REPO, "--revision", new).code == 0


def test_keeping_the_older_commit_removes_the_newer_and_its_main_ref(hub, two_commits, tmp_path):
    old, new = two_commits
    assert prune(tmp_path / "d", old).json["prunedCommits"] == [new]
    assert names(repo_dir(tmp_path / "d") / "refs") == ["v1"]
    assert run_agent("verify", "--dest", str(tmp_path / "d"), "--repo", REPO, "--revision", "v1").code == 0


def test_keeping_every_commit_removes_nothing(hub, two_commits, tmp_path):
    old, new = two_commits
    before = sorted(p for p in (tmp_path / "d" / "hub").rglob("*"))
    result = prune(tmp_path / "d", old, new)
    assert (result.json["prunedCommits"], result.json["freedBytes"]) == ([], 0)
    assert sorted(p for p in (tmp_path / "d" / "hub").rglob("*")) == before


def test_a_kept_commit_still_hydrating_keeps_the_blobs_its_snapshot_links_to(hub, tmp_path):
    dest = tmp_path / "d"
    old = hub.add_repo(REPO, OLD_FILES)
    fetched(hub, dest)
    new = hub.add_repo(REPO, NEW_FILES)
    fetched(hub, dest, "--revision", new)
    shutil.rmtree(dest / ".fleetcache" / "models--acme--tiny" / "manifests" / new)  # killed before its manifest
    result = prune(dest, new)
    assert result.code == 0 and result.json["prunedCommits"] == [old]
    assert names(repo_dir(dest) / "blobs") == sorted(etags(hub, new))
    hub.reset_records()
    fetched(hub, dest, "--revision", new)
    assert hub.bytes_sent("cdn") == 0


@pytest.fixture
def flat_commits(hub, tmp_path):
    """OLD then NEW fetched flat: each in its own directory under commits/, current -> NEW."""
    dest = tmp_path / "d"
    old = hub.add_repo(REPO, {**OLD_FILES, "old-only.json": b"{}"})
    fetched(hub, dest, "--layout", "flat")
    new = hub.add_repo(REPO, NEW_FILES)
    fetched(hub, dest, "--layout", "flat")
    return dest, old, new


def files_in(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_prune_of_a_flat_volume_removes_the_directory_of_a_commit_not_kept_freeing_what_only_it_held(
        flat_commits):
    dest, old, new = flat_commits
    kept = {p.stat().st_ino for p in (dest / "commits" / new).rglob("*")}
    held = sum(p.stat().st_size for p in (dest / "commits" / old).rglob("*") if p.stat().st_ino not in kept)
    result = prune(dest, new)
    assert (result.json["prunedCommits"], result.json["freedBytes"]) == ([old], held)
    assert names(dest / "commits") == [new] and os.readlink(dest / "current") == f"commits/{new}"
    assert run_agent("verify", "--dest", str(dest), "--repo", REPO, "--revision", new).code == 0


def test_prune_of_a_flat_volume_leaves_a_kept_commits_directory_byte_identical(flat_commits):
    dest, old, new = flat_commits
    before = files_in(dest / "commits" / old)
    assert prune(dest, old).json["prunedCommits"] == [new]
    assert files_in(dest / "commits" / old) == before and names(dest / "commits") == [old]
    assert not os.path.lexists(dest / "current")  # it named the pruned commit: no link to nothing


def test_prune_of_a_flat_volume_moves_a_symlinked_commit_directory_nowhere_and_follows_it_nowhere(
        flat_commits, tmp_path):
    dest, old, new = flat_commits
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"x")
    (dest / "commits" / ("f" * 40)).symlink_to(outside)
    assert prune(dest, new).code == 0
    assert (outside / "precious").exists() and (dest / "commits" / ("f" * 40)).is_symlink()


def test_a_prune_of_another_repo_leaves_the_flat_commit_directories(flat_commits):
    dest, old, new = flat_commits
    result = run_agent("prune", "--dest", str(dest), "--repo", "acme/other", "--keep", "a" * 40)
    assert (result.code, result.json["prunedCommits"]) == (0, [])
    assert names(dest / "commits") == sorted([old, new]) and os.readlink(dest / "current") == f"commits/{new}"


def test_a_repo_the_volume_does_not_hold_prunes_nothing(hub, two_commits, tmp_path):
    result = run_agent("prune", "--dest", str(tmp_path / "d"), "--repo", "acme/other", "--keep", "a" * 40)
    assert (result.code, result.json["prunedCommits"], result.json["freedBytes"]) == (0, [], 0)
    assert len(names(repo_dir(tmp_path / "d") / "snapshots")) == 2


@pytest.mark.parametrize("linked", ["hub/models--acme--tiny/blobs", ".fleetcache/trash", "commits"])
def test_a_directory_that_links_outside_the_volume_is_refused_and_nothing_outside_is_removed(
        hub, two_commits, tmp_path, linked):
    old, new = two_commits
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"x")
    target = tmp_path / "d" / linked
    shutil.rmtree(target, ignore_errors=True)
    target.symlink_to(outside)
    result = prune(tmp_path / "d", new)
    assert result.code == 14 and "symlink escape" in result.stderr
    assert (outside / "precious").exists()


@pytest.mark.parametrize("keep,named", [
    ([], "--keep"),
    (["main"], "--keep"),
    (["A" * 40], "--keep"),
])
def test_a_prune_that_keeps_no_valid_commit_is_refused_with_one_line_naming_the_flag(hub, two_commits,
                                                                                     tmp_path, keep, named):
    result = prune(tmp_path / "d", *keep)
    assert result.code == 15 and named in result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert len(names(repo_dir(tmp_path / "d") / "snapshots")) == 2


def test_a_dest_that_does_not_exist_is_refused_naming_the_flag(tmp_path):
    result = prune(tmp_path / "missing", "a" * 40)
    assert result.code == 15 and "--dest" in result.stderr and not (tmp_path / "missing").exists()


def test_prune_exits_16_while_another_writer_holds_the_volume(hub, two_commits, tmp_path):
    from fleetcache.agent.lock import DestinationLock

    old, new = two_commits
    with DestinationLock(tmp_path / "d" / ".fleetcache") as held:
        held.acquire(wait=False)
        result = prune(tmp_path / "d", new)
    assert result.code == 16 and "StagerBusy" in result.stderr
    assert len(names(repo_dir(tmp_path / "d") / "snapshots")) == 2


def test_a_signal_while_waiting_for_the_lock_ends_the_prune_interrupted(hub, two_commits, tmp_path):
    from fleetcache.agent.lock import DestinationLock

    old, new = two_commits
    progress = tmp_path / "p.json"
    with DestinationLock(tmp_path / "d" / ".fleetcache") as held:
        held.acquire(wait=False)
        agent = subprocess.Popen([AGENT, "prune", "--dest", str(tmp_path / "d"), "--repo", REPO, "--keep", new,
                                  "--wait", "--progress-file", str(progress)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_for_record(agent, progress, "Pruning")  # written just before the lock is tried
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=30)
    record = json.loads(progress.read_text())
    assert agent.returncode == 143 and stderr.strip().count("\n") == 0, stderr
    assert (record["phase"], record["reason"]) == ("Failed", "Interrupted")


def test_the_record_goes_from_pruning_to_pruned_with_the_pruned_commits_and_freed_bytes(hub, two_commits,
                                                                                        tmp_path):
    old, new = two_commits
    sink = ListSink()
    run_prune(tmp_path / "d", REPO, frozenset({new}), Progress([sink], PRUNE_FIELDS), wait=False)
    assert [r["phase"] for r in sink.records] == ["Pruning", "Pruned"]
    assert sink.records[-1]["prunedCommits"] == [old] and sink.records[-1]["freedBytes"] > 0


def test_the_progress_file_holds_the_final_record_printed_on_stdout(hub, two_commits, tmp_path):
    old, new = two_commits
    result = run_agent("prune", "--dest", str(tmp_path / "d"), "--repo", REPO, "--keep", new,
                       "--progress-file", str(tmp_path / "p.json"))
    assert json.loads((tmp_path / "p.json").read_text()) == result.json
    assert set(result.json) == set(PRUNE_FIELDS) and result.json["phase"] == "Pruned"


def test_the_configmap_gets_the_pruned_commits_as_json_and_the_figures_as_strings(hub, two_commits, tmp_path):
    from fleetcache.agent import cli

    old, new = two_commits
    api = RecordingCoreApi()
    argv = ["prune", "--dest", str(tmp_path / "d"), "--repo", REPO, "--keep", new, "--progress-configmap", "ns/p"]
    assert cli.main(argv, configmap_api=lambda: api) == 0
    data = api.patches[-1][2]["data"]
    assert json.loads(data["prunedCommits"]) == [old]
    assert data["freedBytes"].isdigit() and data["usedBytes"].isdigit() and data["capacityBytes"].isdigit()


# -- kill -9 at any instant ---------------------------------------------------------------------

COMMITS = 3
FILES = 40  # per commit, half of them shared with the next commit


@pytest.fixture
def crowded(hub, tmp_path_factory):
    """Three commits of 40 files each on one volume; the last two share half their files."""
    dest = tmp_path_factory.mktemp("crowded") / "d"
    commits = []
    for c in range(COMMITS):
        seeds = [1000 * c + i if i % 2 else 100 * ((c + 1) // 2) + i for i in range(FILES)]
        files = {f"layer-{i:02d}.safetensors": PatternContent(1000 + i, seed) for i, seed in enumerate(seeds)}
        commits.append(hub.add_repo(REPO, {**files, "config.json": b'{"c": %d}' % c}))
        fetched(hub, dest, "--revision", commits[-1], "--ref", f"v{c}")
    return dest, commits


def tree(dest):
    """Every path under --dest but the lock and lease, and where each link points."""
    return sorted((str(p.relative_to(dest)), os.readlink(p) if p.is_symlink() else None)
                  for p in dest.rglob("*") if p.name not in ("lock", "lease.json"))


def copy_volume(src, dst):
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
    return dst


def test_a_prune_killed_at_any_instant_leaves_the_kept_commit_whole_and_the_rerun_finishes(hub, crowded,
                                                                                           tmp_path):
    dest, commits = crowded
    kept = commits[-1]
    reference = copy_volume(dest, tmp_path / "reference")
    first = prune(reference, kept)
    assert first.code == 0, first.stderr
    removals = int(re.search(r"in (\d+) removals", first.stderr).group(1))
    done = tree(reference)
    assert removals > 100
    for kill_after in (1, 2, 3, 5, removals // 4, removals // 2, 3 * removals // 4, removals - 1):
        volume = copy_volume(dest, tmp_path / f"killed-{kill_after}")
        killed = prune(volume, kept, kill_after=kill_after)
        assert killed.code == -signal.SIGKILL, (kill_after, killed.stderr)
        assert tree(volume) not in (tree(dest), done), kill_after  # really stopped mid-prune
        published_files_verify(volume, hub)  # no dangling link, no visible byte that is not its digest's
        assert run_agent("verify", "--dest", str(volume), "--repo", REPO, "--revision", kept).code == 0
        rerun = prune(volume, kept)
        assert rerun.code == 0, rerun.stderr
        assert tree(volume) == done and names(volume / ".fleetcache" / "trash") == []


def test_a_fetch_after_a_killed_prune_fetches_a_kept_and_a_pruned_commit(hub, crowded, tmp_path):
    dest, commits = crowded
    volume = copy_volume(dest, tmp_path / "killed")
    killed = prune(volume, commits[-1], kill_after=60)
    assert killed.code == -signal.SIGKILL
    assert names(volume / ".fleetcache" / "trash")  # a snapshot or manifest left in the trash
    fetched(hub, volume, "--revision", commits[-1])
    fetched(hub, volume, "--revision", commits[0])
    assert names(volume / ".fleetcache" / "trash") == []  # the fetch emptied it first
    for commit in (commits[-1], commits[0]):
        assert run_agent("verify", "--dest", str(volume), "--repo", REPO, "--revision", commit).code == 0


def test_a_missing_required_flag_ends_with_a_failed_prune_record(tmp_path):
    progress = tmp_path / "p.json"
    result = run_agent("prune", "--dest", str(tmp_path), "--keep", "a" * 40, "--progress-file", str(progress))
    record = json.loads(progress.read_text())
    assert result.code == 15 and "--repo" in record["message"]
    assert record["phase"] == "Failed" and set(record) == set(PRUNE_FIELDS)
