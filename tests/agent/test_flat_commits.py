"""`fetch --layout flat` keeps each commit in its own directory, DEST/commits/<commit>, so a
commit update never changes the files a replica pinned to the old commit loads: the new
commit is staged aside and renamed into place whole once every byte is verified, then
DEST/current is pointed at it. `verify --layout flat` of an existing volume still checks the
user's files where they are (a real S3 API on loopback, tests/support/s3.py)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time

import pytest

from fleetcache.agent.layout import Layout, stat_mark
from tests.agent.conftest import AGENT, run_agent
from tests.agent.test_s3_source import BUCKET, ENV, FILES, PREFIX, SHARD, fetch, resolve, s3_flags
from tests.support.s3 import S3Fault, S3Server

# Commit B changes config.json and the first shard, drops sub/extra.bin and adds a file.
CHANGES = {"config.json": b'{"model_type": "llama", "hidden_size": 128}', SHARD: b"B" * 1_500_000,
           "added.json": b'{"b": true}'}
DROPPED = "sub/extra.bin"


@pytest.fixture
def s3():
    with S3Server() as server:
        yield server


def files_in(directory) -> dict[str, bytes]:
    """Every file under a directory by its path there, hidden ones too."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def commit_dir(tmp_path, commit: str):
    return tmp_path / "dest" / "commits" / commit


def current(tmp_path) -> str:
    return os.readlink(tmp_path / "dest" / "current")


@pytest.fixture
def commit_a(s3, tmp_path) -> dict:
    """The prefix resolved and fetched flat (commit A); then changed in the bucket to B."""
    s3.make_bucket(BUCKET)
    for path, data in FILES.items():
        s3.put(BUCKET, f"{PREFIX}/{path}", data, sha256=True)
    resolved = resolve(s3, tmp_path).json
    assert fetch(s3, tmp_path, resolved, "--layout", "flat")[0].code == 0
    for path, data in CHANGES.items():
        s3.put(BUCKET, f"{PREFIX}/{path}", data, sha256=True)
    s3.delete(BUCKET, f"{PREFIX}/{DROPPED}")
    return resolved


def resolve_b(s3, tmp_path) -> dict:
    resolved = resolve(s3, tmp_path).json
    (tmp_path / "manifest-b.json").write_text(json.dumps(resolved["manifest"]))
    return resolved


def test_commit_b_fetched_over_a_leaves_as_directory_byte_identical(s3, tmp_path, commit_a):
    before = files_in(commit_dir(tmp_path, commit_a["commit"]))
    b = resolve_b(s3, tmp_path)
    assert fetch(s3, tmp_path, b, "--layout", "flat")[0].code == 0
    assert files_in(commit_dir(tmp_path, commit_a["commit"])) == before == FILES


def test_commit_b_gets_a_directory_of_exactly_its_files_and_current_names_it(s3, tmp_path, commit_a):
    b = resolve_b(s3, tmp_path)
    assert fetch(s3, tmp_path, b, "--layout", "flat")[0].code == 0
    expected = {p: d for p, d in {**FILES, **CHANGES}.items() if p != DROPPED}
    assert files_in(commit_dir(tmp_path, b["commit"])) == expected
    assert current(tmp_path) == f"commits/{b['commit']}"


def test_files_b_shares_with_a_are_hard_linked_from_as_directory_not_downloaded(s3, tmp_path, commit_a):
    b = resolve_b(s3, tmp_path)
    s3.reset_counts()
    assert fetch(s3, tmp_path, b, "--layout", "flat")[0].code == 0
    assert s3.bytes_served(BUCKET) == sum(len(data) for data in CHANGES.values())
    a, b_dir = commit_dir(tmp_path, commit_a["commit"]), commit_dir(tmp_path, b["commit"])
    assert (a / "tokenizer.json").stat().st_ino == (b_dir / "tokenizer.json").stat().st_ino


def test_after_linking_the_record_vouches_for_both_commits_files_as_they_are(s3, tmp_path, commit_a):
    """A link changes the shared inode's ctime: the record of both names is renewed, so neither
    commit's next fetch re-hashes (or refetches) its files."""
    b = resolve_b(s3, tmp_path)
    assert fetch(s3, tmp_path, b, "--layout", "flat")[0].code == 0
    marks = Layout(tmp_path / "dest", "s3/models/tiny").read_verified()
    for commit in (commit_a["commit"], b["commit"]):
        for path in files_in(commit_dir(tmp_path, commit)):
            key = f"commits/{commit}/{path}"
            assert marks[key][0] == stat_mark((tmp_path / "dest" / key).lstat()), key
    s3.reset_counts()
    assert fetch(s3, tmp_path, b, "--layout", "flat")[0].code == 0 and s3.bytes_served(BUCKET) == 0


def test_a_shared_file_verify_finds_corrupt_loses_its_record_under_both_commits_names(s3, tmp_path, commit_a):
    b = resolve_b(s3, tmp_path)
    assert fetch(s3, tmp_path, b, "--layout", "flat")[0].code == 0
    with open(commit_dir(tmp_path, b["commit"]) / "tokenizer.json", "r+b") as f:
        f.write(b"X")
    result = run_agent("verify", "--dest", str(tmp_path / "dest"), "--repo", "s3/models/tiny", "--revision",
                       b["commit"])
    assert result.code == 19 and "tokenizer.json" in result.stderr
    marks = Layout(tmp_path / "dest", "s3/models/tiny").read_verified()
    assert not {f"commits/{c}/tokenizer.json" for c in (commit_a["commit"], b["commit"])} & set(marks)


def test_current_stays_on_a_when_b_does_not_verify(s3, tmp_path, commit_a):
    b = resolve_b(s3, tmp_path)
    s3.inject(S3Fault("overwrite", key=f"{PREFIX}/{SHARD}", after_bytes=1000, data=b"C" * 1_500_000, times=None))
    result = fetch(s3, tmp_path, b, "--layout", "flat")[0]
    assert result.code == 12 and "DigestMismatch" in result.stderr, result.stderr
    assert current(tmp_path) == f"commits/{commit_a['commit']}"
    assert not commit_dir(tmp_path, b["commit"]).exists()


def killed_mid_way(s3, tmp_path, b: dict):
    """Fetch B flat with its changed shard held by the server; kill -9 the agent once every
    other file of B is staged. Returns the staging directory."""
    s3.inject(S3Fault("hang", key=f"{PREFIX}/{SHARD}", method="GET", seconds=60))
    staged = tmp_path / "dest" / ".fleetcache" / "models--s3--models--tiny" / "staging" / b["commit"]
    others = [m["path"] for m in b["manifest"] if m["path"] != SHARD]
    agent = subprocess.Popen([AGENT, "fetch", *s3_flags(s3, tmp_path), "--dest", str(tmp_path / "dest"),
                              "--layout", "flat", "--commit", b["commit"], "--manifest-digest",
                              b["manifestDigest"], "--manifest-file", str(tmp_path / "manifest-b.json")],
                             env={**os.environ, **ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not all((staged / path).exists() for path in others) and time.monotonic() < deadline:
        time.sleep(0.05)
    agent.send_signal(signal.SIGKILL)
    agent.wait(timeout=30)
    assert (staged / "added.json").read_bytes() == CHANGES["added.json"]  # B was under way
    return staged


def test_a_fetch_killed_mid_way_leaves_no_commit_directory_and_current_on_a(s3, tmp_path, commit_a):
    b = resolve_b(s3, tmp_path)
    killed_mid_way(s3, tmp_path, b)
    assert not commit_dir(tmp_path, b["commit"]).exists()
    assert current(tmp_path) == f"commits/{commit_a['commit']}"


def test_a_rerun_after_a_kill_publishes_b_from_what_was_staged(s3, tmp_path, commit_a):
    b = resolve_b(s3, tmp_path)
    staged = killed_mid_way(s3, tmp_path, b)
    s3.reset_counts()
    assert fetch(s3, tmp_path, b, "--layout", "flat")[0].code == 0
    assert s3.bytes_served(BUCKET) == len(CHANGES[SHARD])  # the staged files are kept
    assert not staged.exists() and current(tmp_path) == f"commits/{b['commit']}"


def test_prune_removes_a_staged_commit_not_kept_and_leaves_the_kept_directory(s3, tmp_path, commit_a):
    b = resolve_b(s3, tmp_path)
    staged = killed_mid_way(s3, tmp_path, b)
    result = run_agent("prune", "--dest", str(tmp_path / "dest"), "--repo", "s3/models/tiny",
                       "--keep", commit_a["commit"])
    assert (result.code, result.json["prunedCommits"]) == (0, [b["commit"]])
    assert not staged.exists() and files_in(commit_dir(tmp_path, commit_a["commit"])) == FILES


def test_verify_of_an_existing_volume_checks_its_files_in_place_and_writes_nothing(tmp_path):
    root = tmp_path / "claim"
    for path, data in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    manifest = [{"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in sorted(FILES.items())]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    result = run_agent("verify", "--dest", str(root), "--layout", "flat", "--manifest-file",
                       str(tmp_path / "manifest.json"))
    assert result.code == 0, result.stderr
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before
