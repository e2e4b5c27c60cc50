"""The fleet mirror: one publisher reads the origin, every reader reads the mirror and verifies it, and a
mirror that is incomplete or corrupt is never trusted (origin = the test hub or an S3 bucket; mirror = an
S3 bucket on the moto server of tests/support/s3.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from fleetcache.agent.mirror import checked_manifest
from fleetcache.manifest import Entry, manifest_digest
from tests.agent.conftest import (
    AGENT,
    REPO,
    TOKEN,
    expected_bytes,
    fetch_args,
    published_files_verify,
    run_agent,
    snapshot_dir,
)
from tests.agent.test_s3_source import BUCKET, ENV, FILES, SIZE, stock
from tests.agent.test_s3_source import fetch as s3_fetch
from tests.agent.test_s3_source import resolve as s3_resolve
from tests.support.s3 import ACCESS_KEY, SECRET_KEY, S3Fault, S3Server

MIRROR = "fleet-mirror"
SHARD = "model-00001-of-00002.safetensors"


@pytest.fixture
def s3():
    with S3Server() as server:
        server.make_bucket(MIRROR)
        yield server


def mirror_flags(s3: S3Server, tmp_path, role: str, *extra: str) -> list[str]:
    return ["--mirror-bucket", MIRROR, "--mirror-endpoint", s3.endpoint, "--mirror-credentials-dir",
            str(s3.credentials_dir(tmp_path / "mirror-creds")), "--mirror-role", role, *extra]


def through_mirror(hub, s3, tmp_path, name: str, role: str, *extra: str):
    """A Hub fetch into tmp_path/<name> through the mirror; the result and its final record."""
    progress = tmp_path / f"{name}.json"
    result = run_agent(*fetch_args(hub, tmp_path / name, "--progress-file", str(progress)),
                       *mirror_flags(s3, tmp_path, role, *extra), env=ENV)
    return result, json.loads(progress.read_text())


def hub_files(hub, commit):
    return hub.repos[REPO].commits[commit]


def model_size(hub, commit) -> int:
    return sum(f.content.size for f in hub_files(hub, commit).values())


def blob_key(f) -> str:
    return f"fleetcache/blobs/sha256/{f.sha256}" if f.lfs else f"fleetcache/blobs/sha1/{f.blob_id}"


def assert_identical(hub, tmp_path, name: str, commit: str) -> None:
    for path, data in expected_bytes(hub).items():
        assert (snapshot_dir(tmp_path / name, commit) / path).read_bytes() == data


def test_the_publisher_fetches_from_the_origin_then_publishes_each_blob_and_the_manifest_last(hub, tiny, s3,
                                                                                                tmp_path):
    result, record = through_mirror(hub, s3, tmp_path, "publisher", "publisher")
    assert result.code == 0, result.stderr
    files = hub_files(hub, tiny)
    assert s3.keys(MIRROR) == sorted({blob_key(f) for f in files.values()}
                                     | {f"fleetcache/manifests/{record['manifestDigest']}.json"})
    data = expected_bytes(hub)
    assert all(s3.get(MIRROR, blob_key(f)) == data[path] for path, f in files.items())
    assert (record["bytesFrom"], record["originBytes"], record["mirrorBytes"]) == ("Origin", model_size(hub, tiny), 0)


def test_four_readers_after_the_publisher_read_the_origin_once(hub, tiny, s3, tmp_path):
    size = model_size(hub, tiny)
    publisher, published = through_mirror(hub, s3, tmp_path, "publisher", "publisher")
    assert publisher.code == 0, publisher.stderr
    for i in range(4):
        result, record = through_mirror(hub, s3, tmp_path, f"reader-{i}", "reader")
        assert result.code == 0, result.stderr
        assert (record["bytesFrom"], record["originBytes"], record["mirrorBytes"]) == ("Mirror", 0, size)
        assert record["manifestDigest"] == published["manifestDigest"]
        assert_identical(hub, tmp_path, f"reader-{i}", tiny)
        assert ACCESS_KEY not in result.stderr and SECRET_KEY not in result.stderr
    assert hub.bytes_sent() <= 1.05 * size  # listings included: five clusters, the origin's bytes once


WHY = {"corrupt": "corrupt in the mirror", "missing": "missing in the mirror",
       "truncated": "a different size in the mirror"}


@pytest.mark.parametrize("damage", ["corrupt", "missing", "truncated"])
def test_a_damaged_mirror_blob_comes_from_the_origin_for_that_file_and_is_republished(hub, tiny, s3, tmp_path,
                                                                                      damage):
    assert through_mirror(hub, s3, tmp_path, "publisher", "publisher")[0].code == 0
    shard = hub_files(hub, tiny)[SHARD]
    good = s3.get(MIRROR, blob_key(shard))
    if damage == "corrupt":
        s3.put(MIRROR, blob_key(shard), bytes([good[0] ^ 0xFF]) + good[1:])
    elif damage == "truncated":
        s3.put(MIRROR, blob_key(shard), good[: len(good) // 2])
    else:
        s3.delete(MIRROR, blob_key(shard))
    hub.reset_records()
    result, record = through_mirror(hub, s3, tmp_path, "reader", "reader")
    assert result.code == 0, result.stderr
    assert f"{SHARD}: {WHY[damage]}" in result.stderr
    assert record["originBytes"] == shard.content.size and record["bytesFrom"] == "Mirror"
    assert hub.bytes_sent("cdn") == shard.content.size
    assert_identical(hub, tmp_path, "reader", tiny)
    assert s3.get(MIRROR, blob_key(shard)) == good  # re-published


def test_a_reader_that_may_not_write_the_mirror_is_ready_and_leaves_the_repair(hub, tiny, s3, tmp_path):
    assert through_mirror(hub, s3, tmp_path, "publisher", "publisher")[0].code == 0
    shard = hub_files(hub, tiny)[SHARD]
    s3.delete(MIRROR, blob_key(shard))
    s3.inject(S3Fault("auth", bucket=MIRROR, method="PUT", code="AccessDenied", times=None))
    result, record = through_mirror(hub, s3, tmp_path, "reader", "reader")
    assert result.code == 0 and record["phase"] == "Ready", result.stderr
    assert "could not re-publish 1 files to the mirror (AuthFailed" in result.stderr
    assert_identical(hub, tmp_path, "reader", tiny)


def test_with_on_missing_fail_a_corrupt_mirror_blob_exits_mirror_incomplete_naming_the_file(hub, tiny, s3,
                                                                                           tmp_path):
    assert through_mirror(hub, s3, tmp_path, "publisher", "publisher")[0].code == 0
    shard = hub_files(hub, tiny)[SHARD]
    s3.put(MIRROR, blob_key(shard), bytes(shard.content.size))
    result, record = through_mirror(hub, s3, tmp_path, "reader", "reader", "--mirror-on-missing", "fail")
    assert result.code == 20 and record["reason"] == "MirrorIncomplete" and SHARD in record["message"]
    assert not any(p.endswith(SHARD) for p in published_files_verify(tmp_path / "reader", hub))


def test_a_publisher_that_dies_before_the_manifest_leaves_nothing_a_reader_accepts(hub, tiny, s3, tmp_path):
    s3.inject(S3Fault("status", bucket=MIRROR, key="fleetcache/manifests/*", method="PUT", status=500,
                      code="InternalError", times=None))
    publisher, _ = through_mirror(hub, s3, tmp_path, "publisher", "publisher")
    assert publisher.code == 17
    assert s3.keys(MIRROR, "fleetcache/blobs/") and not s3.keys(MIRROR, "fleetcache/manifests/")
    hub.reset_records()
    strict, record = through_mirror(hub, s3, tmp_path, "strict", "reader", "--mirror-on-missing", "fail")
    assert strict.code == 20 and record["reason"] == "MirrorIncomplete" and "manifest" in record["message"]
    assert hub.bytes_sent("cdn") == 0
    lenient, record = through_mirror(hub, s3, tmp_path, "lenient", "reader")
    assert lenient.code == 0, lenient.stderr
    assert (record["bytesFrom"], record["mirrorBytes"]) == ("Origin", 0)
    assert_identical(hub, tmp_path, "lenient", tiny)


def test_a_publisher_killed_while_publishing_leaves_nothing_a_reader_accepts(hub, tiny, s3, tmp_path):
    held = s3.inject(S3Fault("hang", bucket=MIRROR, key="fleetcache/manifests/*", method="PUT", seconds=60))
    publisher = subprocess.Popen([AGENT, *fetch_args(hub, tmp_path / "publisher"),
                                  *mirror_flags(s3, tmp_path, "publisher")],
                                 env={**os.environ, **ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while held.times and time.monotonic() < deadline:  # until the manifest's PUT is in flight
        time.sleep(0.05)
    publisher.kill()
    assert publisher.wait() == -9 and held.times == 0
    assert s3.keys(MIRROR, "fleetcache/blobs/") and not s3.keys(MIRROR, "fleetcache/manifests/")
    result, record = through_mirror(hub, s3, tmp_path, "reader", "reader", "--mirror-on-missing", "fail")
    assert result.code == 20 and record["reason"] == "MirrorIncomplete"


def test_sigterm_while_publishing_ends_promptly_with_interrupted_and_no_manifest(hub, tiny, s3, tmp_path):
    held = s3.inject(S3Fault("hang", bucket=MIRROR, key="fleetcache/blobs/*", method="PUT", seconds=60))
    progress = tmp_path / "progress.json"
    publisher = subprocess.Popen([AGENT, *fetch_args(hub, tmp_path / "publisher", "--progress-file", str(progress)),
                                  *mirror_flags(s3, tmp_path, "publisher")],
                                 env={**os.environ, **ENV, "FLEETCACHE_READ_TIMEOUT": "30"},
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while held.times and time.monotonic() < deadline:  # until a blob's upload is in flight
        time.sleep(0.05)
    began = time.monotonic()
    publisher.send_signal(signal.SIGTERM)
    assert publisher.wait(timeout=60) == 128 + signal.SIGTERM
    assert time.monotonic() - began < 10  # the held upload (30 s read timeout) does not hold the process
    assert json.loads(progress.read_text())["reason"] == "Interrupted"
    assert not s3.keys(MIRROR, "fleetcache/manifests/")


def test_a_warm_reader_needs_nothing_from_a_mirror_that_expired_since(hub, tiny, s3, tmp_path):
    _, published = through_mirror(hub, s3, tmp_path, "publisher", "publisher")
    assert through_mirror(hub, s3, tmp_path, "reader", "reader", "--mirror-on-missing", "fail")[0].code == 0
    s3.delete(MIRROR, f"fleetcache/manifests/{published['manifestDigest']}.json")
    result, record = through_mirror(hub, s3, tmp_path, "reader", "reader", "--mirror-on-missing", "fail")
    assert result.code == 0 and record["phase"] == "Ready"
    assert (record["bytesFrom"], record["originBytes"], record["mirrorBytes"]) == ("Mirror", 0, 0)


def test_a_publisher_rerun_uploads_what_the_mirror_lacks_and_then_the_manifest(hub, tiny, s3, tmp_path):
    first, record = through_mirror(hub, s3, tmp_path, "publisher", "publisher")
    assert first.code == 0
    shard = hub_files(hub, tiny)[SHARD]
    s3.delete(MIRROR, blob_key(shard))
    s3.delete(MIRROR, f"fleetcache/manifests/{record['manifestDigest']}.json")
    hub.reset_records()
    again, record = through_mirror(hub, s3, tmp_path, "publisher", "publisher")
    assert again.code == 0 and record["originBytes"] == 0 and hub.bytes_sent("cdn") == 0
    assert s3.get(MIRROR, blob_key(shard)) == expected_bytes(hub)[SHARD]
    assert s3.keys(MIRROR, "fleetcache/manifests/") == [f"fleetcache/manifests/{record['manifestDigest']}.json"]


def test_an_s3_origin_through_the_mirror_is_read_once(s3, tmp_path):
    stock(s3)
    resolved = s3_resolve(s3, tmp_path).json
    s3.reset_counts()
    roles = ["publisher", "reader", "reader"]
    for i, role in enumerate(roles):
        result, record, _ = s3_fetch(s3, tmp_path, resolved, *mirror_flags(s3, tmp_path, role),
                                     dest=tmp_path / f"cluster-{i}")
        assert result.code == 0, result.stderr
        assert record["bytesFrom"] == ("Origin" if role == "publisher" else "Mirror")
        assert (record["originBytes"], record["mirrorBytes"]) == ((SIZE, 0) if role == "publisher" else (0, SIZE))
    assert s3.bytes_served(BUCKET) == SIZE
    assert 2 * SIZE < s3.bytes_served(MIRROR) < 2 * SIZE + 4096  # the blobs, and each reader's manifest
    for i in range(len(roles)):
        root = tmp_path / f"cluster-{i}" / "hub" / "models--s3--models--tiny" / "snapshots" / resolved["commit"]
        assert all((root / p).read_bytes() == d for p, d in FILES.items())


def test_mirror_flags_without_a_role_are_refused(hub, tiny, s3, tmp_path):
    result = run_agent(*fetch_args(hub, tmp_path / "d"), "--mirror-bucket", MIRROR, "--mirror-endpoint",
                       s3.endpoint, env=ENV)
    assert result.code == 15 and "--mirror-role" in result.stderr


# -- air-gapped readers (contract §C): a reader given the resolved commit and digest plans from the
# -- publisher's manifest and never asks the Hub while the mirror is complete

def as_hydrated(hub, tiny, published: dict, tmp_path, *extra: str) -> list[str]:
    """The flags a hydration Job gives a Hub fetch through the mirror: the resolved commit, the ref the
    ModelCache asked for, the resolved manifest digest and the token."""
    hub.add_token(TOKEN)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    return ["--revision", tiny, "--ref", "main", "--manifest-digest", published["manifestDigest"],
            "--token-file", str(token), *extra]


def publish(hub, s3, tmp_path) -> dict:
    publisher, published = through_mirror(hub, s3, tmp_path, "publisher", "publisher")
    assert publisher.code == 0, publisher.stderr
    hub.reset_records()
    s3.reset_counts()
    return published


def published_manifest(s3, published: dict) -> tuple[str, dict]:
    key = f"fleetcache/manifests/{published['manifestDigest']}.json"
    return key, json.loads(s3.get(MIRROR, key))


def altered(manifest: dict) -> dict:
    """One file left out: a reader trusting it would publish a snapshot without it."""
    return {**manifest, "files": [f for f in manifest["files"] if f["path"] != SHARD]}


def forged(manifest: dict) -> dict:
    """Two files folded into one whose path carries a newline: its `path size digest` lines hash to
    the published digest, so only the listing's path check refuses it."""
    first, second, *rest = sorted(manifest["files"], key=lambda f: f["path"])
    folded = {**second, "path": f"{first['path']} {first['size']} {first['digest']}\n{second['path']}"}
    return {**manifest, "files": [folded, *rest]}


def damage_manifest(s3, published: dict, damage: str) -> None:
    key, manifest = published_manifest(s3, published)
    if damage == "missing":
        s3.delete(MIRROR, key)
    else:
        s3.put(MIRROR, key, json.dumps({"altered": altered, "forged": forged}[damage](manifest)).encode())
    s3.reset_counts()


MANIFEST_WHY = {"missing": "no published manifest", "altered": "a manifest whose files hash to",
                "forged": "a manifest that is not"}


def test_a_reader_of_a_complete_mirror_makes_no_hub_request_and_never_sends_the_token_to_the_mirror(
        hub, tiny, s3, tmp_path):
    published = publish(hub, s3, tmp_path)
    result, record = through_mirror(hub, s3, tmp_path, "reader", "reader", *as_hydrated(hub, tiny, published,
                                                                                          tmp_path))
    assert result.code == 0, result.stderr
    assert hub.requests() == []
    assert (record["bytesFrom"], record["originBytes"], record["mirrorBytes"]) == ("Mirror", 0, model_size(hub, tiny))
    assert_identical(hub, tmp_path, "reader", tiny)
    assert s3.requests(MIRROR) and not any(TOKEN in r.seen for r in s3.requests())


def test_a_manifest_forged_through_a_newline_in_a_path_hashes_to_the_digest_and_is_refused(hub, tiny, s3, tmp_path):
    published = publish(hub, s3, tmp_path)
    _, manifest = published_manifest(s3, published)
    assert manifest_digest(tuple(Entry(**f) for f in forged(manifest)["files"])) == published["manifestDigest"]
    assert checked_manifest(json.dumps(forged(manifest)).encode(), published["manifestDigest"])[0] == ()


@pytest.mark.parametrize("damage", MANIFEST_WHY)
def test_a_reader_without_a_valid_mirror_manifest_lists_and_fetches_the_origin(hub, tiny, s3, tmp_path, damage):
    published = publish(hub, s3, tmp_path)
    damage_manifest(s3, published, damage)
    result, record = through_mirror(hub, s3, tmp_path, "reader", "reader", *as_hydrated(hub, tiny, published,
                                                                                          tmp_path))
    assert result.code == 0, result.stderr
    assert MANIFEST_WHY[damage] in result.stderr and "listing and fetching from the origin" in result.stderr
    assert [r.path for r in hub.requests("hub") if r.path.startswith("/api/")] == \
        [f"/api/models/{REPO}/revision/{tiny}"]
    assert (record["bytesFrom"], record["originBytes"], record["mirrorBytes"]) == \
        ("Origin", model_size(hub, tiny), 0)
    assert_identical(hub, tmp_path, "reader", tiny)


@pytest.mark.parametrize("damage", MANIFEST_WHY)
def test_with_on_missing_fail_a_reader_without_a_valid_mirror_manifest_exits_20_before_any_request_to_the_hub(
        hub, tiny, s3, tmp_path, damage):
    published = publish(hub, s3, tmp_path)
    damage_manifest(s3, published, damage)
    result, record = through_mirror(hub, s3, tmp_path, "reader", "reader", *as_hydrated(
        hub, tiny, published, tmp_path, "--mirror-on-missing", "fail"))
    assert result.code == 20 and record["reason"] == "MirrorIncomplete"
    assert MANIFEST_WHY[damage] in record["message"]
    assert hub.requests() == [] and published_files_verify(tmp_path / "reader", hub) == []


def cache_tree(dest) -> dict:
    """Everything a fetch leaves on the volume but the lock and the stat-keyed verification record:
    blobs' bytes, snapshot links, refs, the agent's manifests and refs."""
    tree = {}
    for path in sorted(dest.rglob("*")):
        name = str(path.relative_to(dest))
        if path.is_symlink():
            tree[name] = ("link", os.readlink(path))
        elif path.is_file() and path.name not in ("lock", "verified"):
            tree[name] = ("file", path.read_bytes())
    return tree


def test_a_readers_cache_is_the_one_a_hub_fetch_writes_and_hub_verify_and_prune_accept_it(hub, tiny, s3,
                                                                                          tmp_path):
    published = publish(hub, s3, tmp_path)
    direct = run_agent(*fetch_args(hub, tmp_path / "direct", "--revision", tiny, "--ref", "main"))
    assert direct.code == 0, direct.stderr
    hub.reset_records()
    reader, _ = through_mirror(hub, s3, tmp_path, "reader", "reader", *as_hydrated(hub, tiny, published, tmp_path))
    assert reader.code == 0 and hub.requests() == [], reader.stderr
    assert cache_tree(tmp_path / "reader") == cache_tree(tmp_path / "direct")
    verified = run_agent("verify", "--dest", str(tmp_path / "reader"), "--repo", REPO, "--revision", "main")
    assert verified.code == 0 and verified.json["commit"] == tiny, verified.stderr
    pruned = run_agent("prune", "--dest", str(tmp_path / "reader"), "--repo", REPO, "--keep", tiny)
    assert pruned.code == 0, pruned.stderr
    assert cache_tree(tmp_path / "reader") == cache_tree(tmp_path / "direct")


def test_a_warm_reader_asks_neither_the_hub_nor_the_mirror(hub, tiny, s3, tmp_path):
    published = publish(hub, s3, tmp_path)
    pinned = as_hydrated(hub, tiny, published, tmp_path, "--mirror-on-missing", "fail")
    assert through_mirror(hub, s3, tmp_path, "reader", "reader", *pinned)[0].code == 0
    damage_manifest(s3, published, "missing")
    result, record = through_mirror(hub, s3, tmp_path, "reader", "reader", *pinned)
    assert result.code == 0 and record["phase"] == "Ready", result.stderr
    assert hub.requests() == [] and s3.requests() == []


def test_a_reader_given_a_branch_name_asks_the_hub_which_commit_it_means(hub, tiny, s3, tmp_path):
    published = publish(hub, s3, tmp_path)
    pinned = as_hydrated(hub, tiny, published, tmp_path)
    pinned[pinned.index("--revision") + 1] = "main"
    result, record = through_mirror(hub, s3, tmp_path, "reader", "reader", *pinned)
    assert result.code == 0 and record["bytesFrom"] == "Mirror", result.stderr
    assert [r.path for r in hub.requests()] == [f"/api/models/{REPO}/revision/main"]


def test_a_hub_listing_that_is_not_the_manifest_digest_exits_15(hub, tiny, s3, tmp_path):
    result, record = through_mirror(hub, s3, tmp_path, "publisher", "publisher", "--revision", tiny,
                                    "--manifest-digest", "0" * 64)
    assert result.code == 15 and "--manifest-digest" in record["message"]
    assert s3.keys(MIRROR) == []


def test_an_s3_origin_reader_sends_the_origin_bucket_no_request_while_the_mirror_is_complete(s3, tmp_path):
    stock(s3)
    resolved = s3_resolve(s3, tmp_path).json
    publisher, _, _ = s3_fetch(s3, tmp_path, resolved, *mirror_flags(s3, tmp_path, "publisher"),
                               dest=tmp_path / "publisher")
    assert publisher.code == 0, publisher.stderr
    s3.reset_counts()
    reader, record, _ = s3_fetch(s3, tmp_path, resolved, *mirror_flags(s3, tmp_path, "reader"),
                                 dest=tmp_path / "reader")
    assert reader.code == 0 and record["bytesFrom"] == "Mirror", reader.stderr
    assert s3.requests(BUCKET) == [] and s3.requests(MIRROR)
